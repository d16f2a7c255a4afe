//! The names the built-in model catalogue answers to beyond its exact ids: dated snapshots and
//! spelling variants (`claude-sonnet-4-20250514` is `claude-sonnet-4-0`), as the pinned
//! `genai-prices` package matches them (`builtin_model_matches.tsv`, generated with
//! `builtin_models.toml` by `scripts/update-model-catalogue`).

use std::sync::OnceLock;

use regex::Regex;

use super::Settings;

/// The generated patterns: `kind<TAB>pattern<TAB>id` per line.
const MATCHES: &str = include_str!("builtin_model_matches.tsv");

enum Pattern {
    StartsWith(&'static str),
    Regex(Regex),
    Contains(&'static str),
}

impl Pattern {
    fn matches(&self, name: &str) -> bool {
        match self {
            Pattern::StartsWith(prefix) => name.starts_with(prefix),
            Pattern::Regex(regex) => regex.is_match(name),
            Pattern::Contains(part) => name.contains(part),
        }
    }
}

/// The patterns in file order (the package's order: the first that matches wins). A line that
/// does not read is left out: the file is generated, and a test reads every line.
fn patterns() -> &'static [(Pattern, &'static str)] {
    static PATTERNS: OnceLock<Vec<(Pattern, &'static str)>> = OnceLock::new();
    PATTERNS.get_or_init(|| {
        MATCHES
            .lines()
            .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
            .filter_map(read_line)
            .collect()
    })
}

fn read_line(line: &'static str) -> Option<(Pattern, &'static str)> {
    let mut fields = line.split('\t');
    let (kind, pattern, id) = (fields.next()?, fields.next()?, fields.next()?);
    let pattern = match kind {
        "starts_with" => Pattern::StartsWith(pattern),
        "contains" => Pattern::Contains(pattern),
        "regex" => Pattern::Regex(Regex::new(pattern).ok()?),
        _ => return None,
    };
    Some((pattern, id))
}

/// The catalogue id `name` answers to by a pattern, if any.
pub fn matched_id(name: &str) -> Option<&'static str> {
    patterns()
        .iter()
        .find(|(pattern, _)| pattern.matches(name))
        .map(|(_, id)| *id)
}

impl Settings {
    /// Adds a catalogue entry for each of `names` the catalogue has no entry for but answers
    /// to by a pattern (a dated snapshot): the entry of the id it matches, as the settings have
    /// it (a user's prices for that id included). Returns `(name, id)` for each one added.
    pub fn resolve_models<'n>(
        &mut self,
        names: impl IntoIterator<Item = &'n str>,
    ) -> Vec<(String, &'static str)> {
        let mut added = Vec::new();
        for name in names {
            if self.models.contains_key(name) {
                continue;
            }
            let Some(id) = matched_id(name) else { continue };
            if let Some(info) = self.models.get(id).cloned() {
                self.models.insert(name.to_owned(), info);
                added.push((name.to_owned(), id));
            }
        }
        added
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_generated_line_reads_and_dated_ids_match() {
        let lines = MATCHES
            .lines()
            .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
            .count();
        assert_eq!(patterns().len(), lines);
        for (name, id) in [
            ("claude-sonnet-4-20250514", Some("claude-sonnet-4-0")),
            ("claude-opus-4-1-20250805", Some("claude-opus-4-1")),
            ("claude-3-5-haiku-20241022", Some("claude-3-5-haiku-latest")),
            ("gpt-5-nano-2025-08-07", Some("gpt-5-nano")),
            ("my-local-model", None),
        ] {
            assert_eq!(matched_id(name), id, "{name}");
        }
    }
}
