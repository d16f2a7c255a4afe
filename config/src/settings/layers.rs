//! Reading one settings layer — a file, the environment, the command line, the defaults —
//! into validated leaf values and rules, each with its origin.

use std::collections::BTreeMap;

use toml::de::{DeTable, DeValue};

use crate::diagnostic::{Diagnostic, did_you_mean, suggestion_suffix};
use crate::origin::{Layer, Origin, Sourced};
use crate::rule::{PermissionRule, RuleBase, RuleBehavior, SourcedRule};
use crate::settings::schema::{PROVIDER_NAMES, SETTINGS, Schema, SettingValue};
use crate::toml_source::{SourceText, describe, join_key};

/// The prefix of settings environment variables.
pub const ENV_PREFIX: &str = "MUSTER_";

/// The values one layer sets.
#[derive(Debug, Clone, Default)]
pub struct LayerValues {
    pub(crate) leaves: Vec<(Vec<String>, SettingValue, Origin)>,
    pub(crate) rules: Vec<(RuleBehavior, SourcedRule)>,
}

impl LayerValues {
    /// Whether the layer sets nothing.
    pub fn is_empty(&self) -> bool {
        self.leaves.is_empty() && self.rules.is_empty()
    }

    /// The leaf values this layer sets, by key path.
    pub fn leaves(&self) -> impl Iterator<Item = (String, &SettingValue, &Origin)> {
        self.leaves
            .iter()
            .map(|(path, value, origin)| (display_path(path), value, origin))
    }
}

/// `providers.openai.base_url`, quoting segments that need it (`models."gpt-4.1"`).
pub fn display_path(path: &[String]) -> String {
    path.iter()
        .fold(String::new(), |prefix, segment| join_key(&prefix, segment))
}

/// Parses the text of a settings file as layer `layer`, its rules' `/x` paths relative to the
/// project root.
pub fn parse_settings_file(
    label: &str,
    text: &str,
    layer: Layer,
) -> Result<LayerValues, Vec<Diagnostic>> {
    parse_settings_file_in(label, text, layer, &RuleBase::ProjectRoot)
}

/// Parses the text of a settings file as layer `layer`, its rules' `/x` paths relative to
/// `base` (the file's directory for a user's file).
pub fn parse_settings_file_in(
    label: &str,
    text: &str,
    layer: Layer,
    base: &RuleBase,
) -> Result<LayerValues, Vec<Diagnostic>> {
    let source = SourceText::new(label, text);
    let table = source.parse().map_err(|diagnostic| vec![diagnostic])?;
    let mut walker = FileWalker {
        source: &source,
        layer,
        base,
        values: LayerValues::default(),
        errors: Vec::new(),
    };
    walker.walk_table(&table, &SETTINGS, &mut Vec::new());
    if walker.errors.is_empty() {
        Ok(walker.values)
    } else {
        Err(walker.errors)
    }
}

struct FileWalker<'s, 'a> {
    source: &'s SourceText<'a>,
    layer: Layer,
    base: &'s RuleBase,
    values: LayerValues,
    errors: Vec<Diagnostic>,
}

impl FileWalker<'_, '_> {
    fn origin(&self, span: &std::ops::Range<usize>) -> Origin {
        Origin {
            layer: self.layer,
            source: self.source.label.clone(),
            position: Some(self.source.position(span)),
        }
    }

    fn walk_table(&mut self, table: &DeTable<'_>, schema: &Schema, path: &mut Vec<String>) {
        for (key, value) in table.iter() {
            let name = key.get_ref().as_ref();
            let child = match schema {
                Schema::Table(keys) => keys
                    .iter()
                    .find(|(known, _)| *known == name)
                    .map(|(_, child)| child),
                Schema::Map(child) => Some(*child),
                Schema::Leaf(..) | Schema::Rules(_) => None,
            };
            path.push(name.to_string());
            let key_path = display_path(path);
            match child {
                None => {
                    let suggestion = suggestion_suffix(name, schema.key_names());
                    self.errors.push(self.source.diagnostic(
                        &key.span(),
                        &key_path,
                        format!("unknown key `{name}`{suggestion}"),
                    ));
                }
                Some(child) => self.walk_value(value, child, path, &key_path),
            }
            path.pop();
        }
    }

    fn walk_value(
        &mut self,
        value: &toml::Spanned<DeValue<'_>>,
        schema: &Schema,
        path: &mut Vec<String>,
        key_path: &str,
    ) {
        match (schema, value.get_ref()) {
            (Schema::Table(_) | Schema::Map(_), DeValue::Table(inner)) => {
                self.walk_table(inner, schema, path);
            }
            (Schema::Table(_) | Schema::Map(_), other) => {
                self.errors.push(self.source.diagnostic(
                    &value.span(),
                    key_path,
                    format!("expected a table, found {}", describe(other)),
                ));
            }
            (Schema::Leaf(kind, _), inner) => match kind.read_toml(inner) {
                Ok(parsed) => {
                    let origin = self.origin(&value.span());
                    self.values.leaves.push((path.clone(), parsed, origin));
                }
                Err(message) => {
                    self.errors
                        .push(self.source.diagnostic(&value.span(), key_path, message));
                }
            },
            (Schema::Rules(behavior), DeValue::Array(items)) => {
                for (index, item) in items.iter().enumerate() {
                    let item_key = format!("{key_path}[{index}]");
                    let DeValue::String(text) = item.get_ref() else {
                        self.errors.push(self.source.diagnostic(
                            &item.span(),
                            &item_key,
                            format!(
                                "expected a rule string like \"Bash(git diff:*)\", found {}",
                                describe(item.get_ref())
                            ),
                        ));
                        continue;
                    };
                    match PermissionRule::parse_in(text, self.base) {
                        Ok(rule) => {
                            let origin = self.origin(&item.span());
                            self.values
                                .rules
                                .push((*behavior, Sourced::new(rule, origin)));
                        }
                        Err(error) => self.errors.push(self.source.diagnostic(
                            &item.span(),
                            &item_key,
                            error.to_string(),
                        )),
                    }
                }
            }
            (Schema::Rules(_), other) => {
                self.errors.push(self.source.diagnostic(
                    &value.span(),
                    key_path,
                    format!(
                        "expected an array of rule strings, found {}",
                        describe(other)
                    ),
                ));
            }
        }
    }
}

/// Splits `Bash(a, b),Read(x)` at commas outside parentheses.
fn split_rules(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (index, character) in text.char_indices() {
        match character {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..index]);
                start = index + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
        .into_iter()
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .collect()
}

/// Reads one text value for `path` (an environment variable or a flag) into `values`.
fn set_from_text(
    path: Vec<String>,
    text: &str,
    origin: Origin,
    values: &mut LayerValues,
) -> Result<(), String> {
    match SETTINGS.lookup(&path) {
        Some(Schema::Leaf(kind, _)) => {
            let parsed = kind.read_text(text)?;
            values.leaves.push((path, parsed, origin));
            Ok(())
        }
        Some(Schema::Rules(behavior)) => {
            for part in split_rules(text) {
                let rule = part
                    .parse::<PermissionRule>()
                    .map_err(|error| error.to_string())?;
                values
                    .rules
                    .push((*behavior, Sourced::new(rule, origin.clone())));
            }
            Ok(())
        }
        Some(Schema::Table(_) | Schema::Map(_)) => Err(format!(
            "`{}` is a table; set one of its keys",
            display_path(&path)
        )),
        None => Err(format!("unknown setting `{}`", display_path(&path))),
    }
}

/// The environment variable that sets `path`: `MUSTER_` and the segments upper-cased,
/// joined by `__` (`MUSTER_PROVIDERS__OPENAI__BASE_URL`).
pub fn env_var_name(path: &[&str]) -> String {
    let joined: Vec<String> = path.iter().map(|s| s.to_uppercase()).collect();
    format!("{ENV_PREFIX}{}", joined.join("__"))
}

/// Variables that set one provider key for every provider, applied before the per-provider
/// variables (`MUSTER_PROVIDERS__OPENAI__MAX_RETRIES` beats `MUSTER_MAX_RETRIES`).
pub const ENV_PROVIDER_ALIASES: &[(&str, &str)] = &[
    ("MUSTER_CONNECT_TIMEOUT_MS", "connect_timeout_ms"),
    ("MUSTER_REQUEST_TIMEOUT_MS", "request_timeout_ms"),
    ("MUSTER_STREAM_IDLE_TIMEOUT_MS", "stream_idle_timeout_ms"),
    ("MUSTER_MAX_RETRIES", "max_retries"),
    ("MUSTER_RETRY_BACKOFF_MS", "retry_backoff_ms"),
];

/// Reads the `MUSTER_*` variables of `env`. Variables that name no setting are warnings.
pub fn parse_env(
    env: &BTreeMap<String, String>,
) -> (LayerValues, Vec<Diagnostic>, Vec<Diagnostic>) {
    let mut values = LayerValues::default();
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    let env_origin = |name: &str| Origin {
        layer: Layer::Env,
        source: name.to_string(),
        position: None,
    };
    for (alias, leaf) in ENV_PROVIDER_ALIASES {
        let Some(text) = env.get(*alias) else {
            continue;
        };
        for provider in PROVIDER_NAMES {
            let path = vec![
                "providers".to_string(),
                provider.to_string(),
                leaf.to_string(),
            ];
            let key = display_path(&path);
            if let Err(message) = set_from_text(path, text, env_origin(alias), &mut values) {
                errors.push(
                    Diagnostic::new(message)
                        .in_source(format!("environment variable {alias}"))
                        .for_key(key),
                );
                break;
            }
        }
    }
    let mut known: Vec<String> = SETTINGS
        .leaf_paths()
        .into_iter()
        .map(|(path, _)| env_var_name(&path))
        .collect();
    known.extend(
        ENV_PROVIDER_ALIASES
            .iter()
            .map(|(alias, _)| alias.to_string()),
    );
    for (name, text) in env {
        let Some(rest) = name.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        if ENV_PROVIDER_ALIASES.iter().any(|(alias, _)| alias == name) || is_not_a_setting(name) {
            continue;
        }
        let path: Vec<String> = rest.split("__").map(str::to_lowercase).collect();
        let source = format!("environment variable {name}");
        let is_setting = matches!(
            SETTINGS.lookup(&path),
            Some(Schema::Leaf(..) | Schema::Rules(_))
        );
        if !is_setting {
            let suggestion = did_you_mean(name, known.iter().map(String::as_str))
                .map(|close| format!(" (did you mean `{close}`?)"))
                .unwrap_or_default();
            warnings.push(
                Diagnostic::new(format!("ignored: `{name}` names no setting{suggestion}"))
                    .in_source(source),
            );
            continue;
        }
        let key = display_path(&path);
        if let Err(message) = set_from_text(path, text, env_origin(name), &mut values) {
            errors.push(Diagnostic::new(message).in_source(source).for_key(key));
        }
    }
    (values, errors, warnings)
}

/// Variables with the settings' prefix that muster (or its tests and scripts) reads for
/// something other than a setting; they never warn. `MUSTER_TEST_…` is the tests' namespace.
const NOT_SETTINGS: [&str; 5] = [
    "MUSTER_NO_USER_FILES",
    "MUSTER_TELEMETRY",
    crate::trust::TRUST_HASH_VAR,
    "MUSTER_FAILPOINT",
    "MUSTER_UPDATE_SNAPSHOTS",
];
const TEST_PREFIX: &str = "MUSTER_TEST_";

fn is_not_a_setting(name: &str) -> bool {
    NOT_SETTINGS.contains(&name) || name.starts_with(TEST_PREFIX)
}

/// Settings given on the command line (`--store`, `--permission-mode`, …), highest precedence.
#[derive(Debug, Clone, Default)]
pub struct CliOverrides {
    entries: Vec<(String, String, String)>,
}

impl CliOverrides {
    pub fn new() -> CliOverrides {
        CliOverrides::default()
    }

    /// Sets `key` (a dotted settings path such as `permission_mode`) to `value`, as given by
    /// `flag` (`--permission-mode`), which is named in errors and in `muster config show`.
    pub fn set(
        mut self,
        key: impl Into<String>,
        value: impl Into<String>,
        flag: impl Into<String>,
    ) -> CliOverrides {
        self.entries.push((key.into(), value.into(), flag.into()));
        self
    }

    /// `--store PATH|URL`.
    pub fn store(self, path: impl Into<String>) -> CliOverrides {
        self.set("store", path, "--store")
    }

    /// `--permission-mode MODE`.
    pub fn permission_mode(self, mode: impl Into<String>) -> CliOverrides {
        self.set("permission_mode", mode, "--permission-mode")
    }

    /// `--approver human|policy:FILE`.
    pub fn approver(self, approver: impl Into<String>) -> CliOverrides {
        self.set("approver", approver, "--approver")
    }

    /// `--provider P`: the provider of both modes (a shared key set in a later layer beats
    /// `[plan]`/`[act]` keys from earlier ones).
    pub fn provider(self, provider: impl Into<String>) -> CliOverrides {
        self.set("provider", provider, "--provider")
    }

    /// `--model M`: the model of both modes.
    pub fn model(self, model: impl Into<String>) -> CliOverrides {
        self.set("model", model, "--model")
    }

    /// `--base-url URL` for `provider` (`providers.<provider>.base_url`).
    pub fn base_url(self, provider: &str, url: impl Into<String>) -> CliOverrides {
        self.set(format!("providers.{provider}.base_url"), url, "--base-url")
    }

    /// `--cassette FILE` (`providers.script.cassette`).
    pub fn cassette(self, path: impl Into<String>) -> CliOverrides {
        self.set("providers.script.cassette", path, "--cassette")
    }

    /// `--max-duration SECS` (`budgets.run.duration_secs`).
    pub fn max_duration_secs(self, seconds: u64) -> CliOverrides {
        self.set(
            "budgets.run.duration_secs",
            seconds.to_string(),
            "--max-duration",
        )
    }

    pub(crate) fn parse(&self) -> (LayerValues, Vec<Diagnostic>) {
        let mut values = LayerValues::default();
        let mut errors = Vec::new();
        for (key, text, flag) in &self.entries {
            let path: Vec<String> = key.split('.').map(str::to_string).collect();
            let origin = Origin {
                layer: Layer::Cli,
                source: flag.clone(),
                position: None,
            };
            if let Err(message) = set_from_text(path, text, origin, &mut values) {
                errors.push(
                    Diagnostic::new(message)
                        .in_source(format!("command-line flag {flag}"))
                        .for_key(key.clone()),
                );
            }
        }
        (values, errors)
    }
}

/// The built-in model catalogue, as a settings file.
const BUILT_IN_MODELS: &str = include_str!("builtin_models.toml");

/// The compiled-in defaults: every key's default value and the built-in model catalogue.
pub(crate) fn default_layer() -> Result<LayerValues, Vec<Diagnostic>> {
    let mut values = parse_settings_file("built-in", BUILT_IN_MODELS, Layer::Default)?;
    for (_, _, origin) in &mut values.leaves {
        *origin = Origin::built_in();
    }
    for (path, schema) in SETTINGS.leaf_paths() {
        if let Schema::Leaf(kind, Some(default)) = schema {
            let parsed = kind
                .read_text(default)
                .map_err(|message| vec![Diagnostic::new(message).for_key(path.join("."))])?;
            let path = path.into_iter().map(str::to_string).collect();
            values.leaves.push((path, parsed, Origin::built_in()));
        }
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_lists_split_at_top_level_commas() {
        assert_eq!(
            split_rules("Bash(a, b), Read(./x),,Edit"),
            vec!["Bash(a, b)", "Read(./x)", "Edit"]
        );
    }

    #[test]
    fn env_names_join_segments_with_double_underscores() {
        assert_eq!(
            env_var_name(&["providers", "openai", "base_url"]),
            "MUSTER_PROVIDERS__OPENAI__BASE_URL"
        );
        assert_eq!(env_var_name(&["permission_mode"]), "MUSTER_PERMISSION_MODE");
    }

    #[test]
    fn defaults_parse() {
        let defaults = default_layer().unwrap();
        assert!(
            defaults
                .leaves()
                .any(|(key, _, _)| key == "mailbox.busy_timeout_ms")
        );
    }
}
