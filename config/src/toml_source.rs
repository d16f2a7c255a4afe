//! Reading TOML with positions: parse errors with line and column, a reader that checks
//! types and unknown keys table by table and reports key paths.

use std::ops::Range;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::diagnostic::{Diagnostic, Position, suggestion_suffix};

/// The text of one input and the name it is reported under.
pub(crate) struct SourceText<'a> {
    pub label: String,
    pub text: &'a str,
}

impl<'a> SourceText<'a> {
    pub fn new(label: impl Into<String>, text: &'a str) -> SourceText<'a> {
        SourceText {
            label: label.into(),
            text,
        }
    }

    pub fn position(&self, span: &Range<usize>) -> Position {
        Position::of_offset(self.text, span.start)
    }

    /// A diagnostic at `span` about `key`.
    pub fn diagnostic(
        &self,
        span: &Range<usize>,
        key: &str,
        message: impl Into<String>,
    ) -> Diagnostic {
        Diagnostic::new(message)
            .in_source(self.label.clone())
            .at(Some(self.position(span)))
            .for_key(key)
    }

    /// Parses the whole text as a TOML document.
    pub fn parse(&self) -> Result<DeTable<'a>, Diagnostic> {
        match DeTable::parse(self.text) {
            Ok(table) => Ok(table.into_inner()),
            Err(error) => {
                let position = error
                    .span()
                    .map(|span| Position::of_offset(self.text, span.start));
                let message = error.message().trim().replace('\n', "; ");
                Err(Diagnostic::new(format!("invalid TOML: {message}"))
                    .in_source(self.label.clone())
                    .at(position))
            }
        }
    }
}

/// `a string "x"`, `an integer 5`, `a table`: how a found value is named in messages.
pub(crate) fn describe(value: &DeValue<'_>) -> String {
    match value {
        DeValue::String(text) => format!("a string {text:?}"),
        DeValue::Integer(integer) => format!("an integer {integer}"),
        DeValue::Float(float) => format!("a float {float}"),
        DeValue::Boolean(flag) => format!("a boolean {flag}"),
        DeValue::Datetime(datetime) => format!("a datetime {datetime}"),
        DeValue::Array(_) => "an array".to_string(),
        DeValue::Table(_) => "a table".to_string(),
    }
}

/// The value of a TOML integer, when it fits an `i64`.
pub(crate) fn integer_value(value: &DeValue<'_>) -> Option<i64> {
    match value {
        DeValue::Integer(integer) => i64::from_str_radix(integer.as_str(), integer.radix()).ok(),
        _ => None,
    }
}

/// The value of a TOML float or integer as `f64`.
pub(crate) fn number_value(value: &DeValue<'_>) -> Option<f64> {
    match value {
        DeValue::Float(float) => float.as_str().replace('_', "").parse().ok(),
        DeValue::Integer(_) => integer_value(value).map(|n| n as f64),
        _ => None,
    }
}

/// `a.b`, `a[2]`, or `b` when the prefix is empty.
pub(crate) fn join_key(prefix: &str, key: &str) -> String {
    let key = if key.is_empty() || key.contains(['.', ' ', '"']) {
        format!("{key:?}")
    } else {
        key.to_string()
    };
    if prefix.is_empty() {
        key
    } else {
        format!("{prefix}.{key}")
    }
}

/// A value read from a file, with the key path and position to report it at later.
#[derive(Debug, Clone, PartialEq)]
pub struct Located<T> {
    pub value: T,
    pub key: String,
    pub position: Position,
}

/// Reads one TOML table: typed getters that record type errors, then a check for unknown keys.
pub(crate) struct TableReader<'s, 'a> {
    pub source: &'s SourceText<'a>,
    table: &'s DeTable<'a>,
    pub path: String,
}

impl<'s, 'a> TableReader<'s, 'a> {
    pub fn root(source: &'s SourceText<'a>, table: &'s DeTable<'a>) -> TableReader<'s, 'a> {
        TableReader {
            source,
            table,
            path: String::new(),
        }
    }

    /// Whether the table has `key` at all.
    pub fn has(&self, key: &str) -> bool {
        self.table.get(key).is_some()
    }

    fn entry(&self, key: &str) -> Option<&'s Spanned<DeValue<'a>>> {
        self.table.get(key)
    }

    pub fn key_path(&self, key: &str) -> String {
        join_key(&self.path, key)
    }

    fn wrong_type(&self, key: &str, value: &Spanned<DeValue<'a>>, expected: &str) -> Diagnostic {
        self.source.diagnostic(
            &value.span(),
            &self.key_path(key),
            format!("expected {expected}, found {}", describe(value.get_ref())),
        )
    }

    fn located<T>(&self, key: &str, value: &Spanned<DeValue<'a>>, inner: T) -> Located<T> {
        Located {
            value: inner,
            key: self.key_path(key),
            position: self.source.position(&value.span()),
        }
    }

    /// A diagnostic about this table's `key` (at the value, else at the table).
    pub fn error_at(&self, key: &str, message: impl Into<String>) -> Diagnostic {
        let span = self.entry(key).map(Spanned::span).unwrap_or(0..0);
        self.source.diagnostic(&span, &self.key_path(key), message)
    }

    pub fn string(&self, key: &str, errors: &mut Vec<Diagnostic>) -> Option<Located<String>> {
        let value = self.entry(key)?;
        match value.get_ref() {
            DeValue::String(text) => Some(self.located(key, value, text.to_string())),
            _ => {
                errors.push(self.wrong_type(key, value, "a string"));
                None
            }
        }
    }

    pub fn boolean(&self, key: &str, errors: &mut Vec<Diagnostic>) -> Option<Located<bool>> {
        let value = self.entry(key)?;
        match value.get_ref() {
            DeValue::Boolean(flag) => Some(self.located(key, value, *flag)),
            _ => {
                errors.push(self.wrong_type(key, value, "a boolean (true or false)"));
                None
            }
        }
    }

    /// A non-negative integer that fits `u64`.
    pub fn count(&self, key: &str, errors: &mut Vec<Diagnostic>) -> Option<Located<u64>> {
        let value = self.entry(key)?;
        match integer_value(value.get_ref()).and_then(|n| u64::try_from(n).ok()) {
            Some(count) => Some(self.located(key, value, count)),
            None => {
                errors.push(self.wrong_type(key, value, "a non-negative integer"));
                None
            }
        }
    }

    pub fn string_list(
        &self,
        key: &str,
        errors: &mut Vec<Diagnostic>,
    ) -> Option<Vec<Located<String>>> {
        let value = self.entry(key)?;
        let DeValue::Array(items) = value.get_ref() else {
            errors.push(self.wrong_type(key, value, "an array of strings"));
            return None;
        };
        let mut strings = Vec::new();
        for (index, item) in items.iter().enumerate() {
            let item_key = format!("{}[{index}]", self.key_path(key));
            match item.get_ref() {
                DeValue::String(text) => strings.push(Located {
                    value: text.to_string(),
                    key: item_key,
                    position: self.source.position(&item.span()),
                }),
                other => errors.push(self.source.diagnostic(
                    &item.span(),
                    &item_key,
                    format!("expected a string, found {}", describe(other)),
                )),
            }
        }
        Some(strings)
    }

    pub fn table(&self, key: &str, errors: &mut Vec<Diagnostic>) -> Option<TableReader<'s, 'a>> {
        let value = self.entry(key)?;
        match value.get_ref() {
            DeValue::Table(table) => Some(TableReader {
                source: self.source,
                table,
                path: self.key_path(key),
            }),
            _ => {
                errors.push(self.wrong_type(key, value, "a table"));
                None
            }
        }
    }

    /// An array of tables (`[[key]]`).
    pub fn tables(&self, key: &str, errors: &mut Vec<Diagnostic>) -> Vec<TableReader<'s, 'a>> {
        let Some(value) = self.entry(key) else {
            return Vec::new();
        };
        let DeValue::Array(items) = value.get_ref() else {
            errors.push(self.wrong_type(key, value, "an array of tables"));
            return Vec::new();
        };
        let mut tables = Vec::new();
        for (index, item) in items.iter().enumerate() {
            let item_key = format!("{}[{index}]", self.key_path(key));
            match item.get_ref() {
                DeValue::Table(table) => tables.push(TableReader {
                    source: self.source,
                    table,
                    path: item_key,
                }),
                other => errors.push(self.source.diagnostic(
                    &item.span(),
                    &item_key,
                    format!("expected a table, found {}", describe(other)),
                )),
            }
        }
        tables
    }

    /// Records an error for every key not in `allowed`, with "did you mean" when close.
    pub fn reject_unknown(&self, allowed: &[&str], errors: &mut Vec<Diagnostic>) {
        for (key, _) in self.table.iter() {
            let name = key.get_ref().as_ref();
            if !allowed.contains(&name) {
                errors.push(self.source.diagnostic(
                    &key.span(),
                    &self.key_path(name),
                    format!(
                        "unknown key `{name}`{}",
                        suggestion_suffix(name, allowed.iter().copied())
                    ),
                ));
            }
        }
    }
}
