//! Errors and warnings a person can act on: where (file, line, column), which key, what was
//! expected and what was found, and "did you mean" when a close name exists.

use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

/// One finding about configuration input: an error, or a warning when returned beside a value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// The file, or another source such as `environment variable MUSTER_MODEL`.
    pub source: Option<String>,
    /// 1-based line, when the parser gives one.
    pub line: Option<usize>,
    /// 1-based column (in characters), when the parser gives one.
    pub column: Option<usize>,
    /// The key path, such as `permissions.allow[2]` or `teammates[0].name`.
    pub key: Option<String>,
    /// What is wrong, with what was expected and what was found.
    pub message: String,
}

impl Diagnostic {
    /// A finding with only a message.
    pub fn new(message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            source: None,
            line: None,
            column: None,
            key: None,
            message: message.into(),
        }
    }

    pub fn in_source(mut self, source: impl Into<String>) -> Diagnostic {
        self.source = Some(source.into());
        self
    }

    pub fn at(mut self, position: Option<Position>) -> Diagnostic {
        if let Some(position) = position {
            self.line = Some(position.line);
            self.column = Some(position.column);
        }
        self
    }

    pub fn for_key(mut self, key: impl Into<String>) -> Diagnostic {
        let key = key.into();
        if !key.is_empty() {
            self.key = Some(key);
        }
        self
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(source) = &self.source {
            write!(f, "{source}")?;
            if let Some(line) = self.line {
                write!(f, ":{line}")?;
                if let Some(column) = self.column {
                    write!(f, ":{column}")?;
                }
            }
            write!(f, ": ")?;
        }
        if let Some(key) = &self.key {
            write!(f, "{key}: ")?;
        }
        write!(f, "{}", self.message)
    }
}

/// Why configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The input is malformed; every problem found is listed.
    #[error("{}", join_lines(.0))]
    Invalid(Vec<Diagnostic>),
    /// A file that exists could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl ConfigError {
    /// One malformed-input error.
    pub fn invalid(diagnostic: Diagnostic) -> ConfigError {
        ConfigError::Invalid(vec![diagnostic])
    }

    /// The findings of an `Invalid` error (empty for I/O errors).
    pub fn diagnostics(&self) -> &[Diagnostic] {
        match self {
            ConfigError::Invalid(found) => found,
            ConfigError::Io { .. } => &[],
        }
    }
}

fn join_lines(diagnostics: &[Diagnostic]) -> String {
    diagnostics
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Turns collected diagnostics into `Ok(value)` when there are none.
pub(crate) fn finish<T>(value: T, errors: Vec<Diagnostic>) -> Result<T, ConfigError> {
    if errors.is_empty() {
        Ok(value)
    } else {
        Err(invalid(errors))
    }
}

/// An `Invalid` error listing `errors` in file and line order.
pub(crate) fn invalid(mut errors: Vec<Diagnostic>) -> ConfigError {
    errors.sort_by_key(|d| (d.source.clone(), d.line, d.column));
    ConfigError::Invalid(errors)
}

/// A value loaded from configuration together with the warnings found on the way.
#[derive(Debug, Clone)]
pub struct Loaded<T> {
    pub value: T,
    pub warnings: Vec<Diagnostic>,
}

/// A 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Position {
    pub line: usize,
    pub column: usize,
}

impl Position {
    /// The line and column of byte `offset` in `text` (clamped to the text).
    pub fn of_offset(text: &str, offset: usize) -> Position {
        let mut end = offset.min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let before = &text[..end];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |index| index + 1);
        let column = before[line_start..].chars().count() + 1;
        Position { line, column }
    }
}

/// The candidate closest to `found` when it is close enough to be a likely typo.
pub fn did_you_mean<'a>(
    found: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let found_lower = found.to_lowercase();
    let limit = found.chars().count().div_ceil(3).clamp(1, 3);
    let candidates: Vec<&str> = candidates.into_iter().collect();
    let closest = candidates
        .iter()
        .map(|candidate| {
            (
                edit_distance(&found_lower, &candidate.to_lowercase()),
                *candidate,
            )
        })
        .filter(|(distance, _)| *distance <= limit)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate);
    closest.or_else(|| {
        // A shortened name (`duration` for `duration_secs`).
        let mut extending = candidates.iter().filter(|candidate| {
            found.chars().count() >= 4 && candidate.to_lowercase().starts_with(&found_lower)
        });
        match (extending.next(), extending.next()) {
            (Some(only), None) => Some(*only),
            _ => None,
        }
    })
}

/// ` (did you mean `x`?)` or nothing.
pub(crate) fn suggestion_suffix<'a>(
    found: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> String {
    did_you_mean(found, candidates)
        .map(|close| format!(" (did you mean `{close}`?)"))
        .unwrap_or_default()
}

/// Edit distance over characters where swapping two neighbours costs one (optimal string
/// alignment), so `Plna` is one edit from `Plan`.
fn edit_distance(left: &str, right: &str) -> usize {
    let left: Vec<char> = left.chars().collect();
    let right: Vec<char> = right.chars().collect();
    let width = right.len() + 1;
    let mut table = vec![0usize; (left.len() + 1) * width];
    for (i, cell) in table.iter_mut().step_by(width).enumerate() {
        *cell = i;
    }
    for (j, cell) in table.iter_mut().take(width).enumerate() {
        *cell = j;
    }
    for i in 1..=left.len() {
        for j in 1..=right.len() {
            let cost = usize::from(left[i - 1] != right[j - 1]);
            let mut best = (table[(i - 1) * width + j] + 1)
                .min(table[i * width + j - 1] + 1)
                .min(table[(i - 1) * width + j - 1] + cost);
            if i > 1 && j > 1 && left[i - 1] == right[j - 2] && left[i - 2] == right[j - 1] {
                best = best.min(table[(i - 2) * width + j - 2] + 1);
            }
            table[i * width + j] = best;
        }
    }
    table[left.len() * width + right.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_one_based_and_count_characters() {
        let text = "a = 1\nbé = 2\n";
        assert_eq!(
            Position::of_offset(text, 0),
            Position { line: 1, column: 1 }
        );
        assert_eq!(
            Position::of_offset(text, 6),
            Position { line: 2, column: 1 }
        );
        assert_eq!(
            Position::of_offset(text, 9),
            Position { line: 2, column: 3 }
        );
        assert_eq!(Position::of_offset(text, 999).line, 3);
    }

    #[test]
    fn close_names_are_suggested_and_far_ones_are_not() {
        let keys = ["permission_mode", "plans_directory", "store_path"];
        assert_eq!(
            did_you_mean("permision_mode", keys),
            Some("permission_mode")
        );
        assert_eq!(did_you_mean("store_pth", keys), Some("store_path"));
        assert_eq!(did_you_mean("color", keys), None);
        assert_eq!(
            did_you_mean("acceptedits", ["acceptEdits"]),
            Some("acceptEdits")
        );
    }

    #[test]
    fn display_puts_place_key_and_message_in_order() {
        let diagnostic = Diagnostic::new("expected a string, found an integer")
            .in_source("a.toml")
            .at(Some(Position { line: 3, column: 7 }))
            .for_key("store_path");
        assert_eq!(
            diagnostic.to_string(),
            "a.toml:3:7: store_path: expected a string, found an integer"
        );
    }
}
