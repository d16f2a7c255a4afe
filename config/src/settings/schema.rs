//! The settings keys: their shape, their kind of value, their defaults, and how a value of each
//! kind is read from a TOML file or from the text of an environment variable or flag.

use toml::de::DeValue;

use crate::diagnostic::suggestion_suffix;
use crate::mode::PermissionMode;
use crate::rule::RuleBehavior;
use crate::toml_source::{describe, integer_value, number_value};

/// The shape of the settings: tables of named keys, maps with free keys (`models.<id>`), and
/// leaves.
pub(crate) enum Schema {
    Table(&'static [(&'static str, Schema)]),
    Map(&'static Schema),
    Leaf(Kind, Option<&'static str>),
    Rules(RuleBehavior),
}

/// What a leaf holds.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Text,
    Path,
    Url,
    Count,
    Price,
    /// `true` or `false`.
    Flag,
    /// A number greater than 0 and at most 1.
    Ratio,
    Mode,
    Approver,
    OneOf(&'static [&'static str]),
    /// A list of names: a TOML array of strings, or comma-separated text.
    Names,
}

/// A leaf's value after validation.
#[derive(Debug, Clone, PartialEq)]
pub enum SettingValue {
    Text(String),
    Count(u64),
    Number(f64),
    Flag(bool),
    List(Vec<String>),
}

impl SettingValue {
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            SettingValue::Text(text) => serde_json::Value::from(text.clone()),
            SettingValue::Count(count) => serde_json::Value::from(*count),
            SettingValue::Number(number) => serde_json::Value::from(*number),
            SettingValue::Flag(flag) => serde_json::Value::from(*flag),
            SettingValue::List(names) => serde_json::Value::from(names.clone()),
        }
    }
}

pub(crate) const PROVIDER_NAMES: &[&str] = &["anthropic", "openai", "script"];
pub(crate) const REASONING_EFFORTS: &[&str] = &["minimal", "low", "medium", "high"];
pub(crate) const AUTO_GATE_STATES: &[&str] = &["open", "closed"];
pub(crate) const SYNC_LEVELS: &[&str] = &["full", "normal"];
pub(crate) const SANDBOX_MODES: &[&str] = &["auto", "required", "off"];
pub(crate) const ON_OFF: &[&str] = &["on", "off"];
pub(crate) const DISABLE: &[&str] = &["disable"];

const fn leaf(kind: Kind) -> Schema {
    Schema::Leaf(kind, None)
}

const fn with_default(kind: Kind, default: &'static str) -> Schema {
    Schema::Leaf(kind, Some(default))
}

const MODE_TABLE: Schema = Schema::Table(&[
    ("provider", leaf(Kind::OneOf(PROVIDER_NAMES))),
    ("model", leaf(Kind::Text)),
    ("thinking_budget", leaf(Kind::Count)),
    ("reasoning_effort", leaf(Kind::OneOf(REASONING_EFFORTS))),
]);

/// A provider's table: its `own` keys, then the connection's limits, whose defaults are the
/// same for every provider but for the retries (`max_retries`, `retry_backoff_ms`).
macro_rules! connection_table {
    ([$($own:expr),* $(,)?], $max_retries:literal, $retry_backoff_ms:literal) => {
        Schema::Table(&[
            $($own,)*
            ("connect_timeout_ms", with_default(Kind::Count, "10000")),
            ("request_timeout_ms", with_default(Kind::Count, "600000")),
            ("stream_idle_timeout_ms", with_default(Kind::Count, "60000")),
            ("max_retries", with_default(Kind::Count, $max_retries)),
            ("retry_backoff_ms", with_default(Kind::Count, $retry_backoff_ms)),
        ])
    };
}

/// A hosted provider's table: where it answers, the variable holding its key, and retries
/// on by default.
macro_rules! hosted_provider {
    ($base_url:literal, $api_key_env:literal) => {
        connection_table!(
            [
                ("base_url", with_default(Kind::Url, $base_url)),
                ("api_key_env", with_default(Kind::Text, $api_key_env)),
                ("api_key", leaf(Kind::Text)),
            ],
            "3",
            "1000"
        )
    };
}

const ANTHROPIC: Schema = hosted_provider!("https://api.anthropic.com", "ANTHROPIC_API_KEY");

const OPENAI: Schema = hosted_provider!("https://api.openai.com/v1", "OPENAI_API_KEY");

const SCRIPT: Schema = connection_table!(
    [
        ("base_url", leaf(Kind::Url)),
        ("cassette", leaf(Kind::Path)),
    ],
    "0",
    "0"
);

const MODEL: Schema = Schema::Table(&[
    ("context_window", leaf(Kind::Count)),
    ("max_output", leaf(Kind::Count)),
    ("price_in", leaf(Kind::Price)),
    ("price_out", leaf(Kind::Price)),
    ("price_cache_read", leaf(Kind::Price)),
    ("price_cache_write", leaf(Kind::Price)),
]);

const AGENT_BUDGET: Schema = Schema::Table(&[
    ("turns", leaf(Kind::Count)),
    ("tokens", leaf(Kind::Count)),
    ("cost_usd", leaf(Kind::Price)),
]);

const RUN_BUDGET: Schema = Schema::Table(&[
    ("turns", leaf(Kind::Count)),
    ("tokens", leaf(Kind::Count)),
    ("cost_usd", leaf(Kind::Price)),
    ("duration_secs", leaf(Kind::Count)),
]);

/// When an agent's context is compacted (see `muster_agents::compaction::CompactionConfig`,
/// whose fields these are).
const COMPACTION: Schema = Schema::Table(&[
    ("enabled", with_default(Kind::Flag, "true")),
    ("trigger_ratio", with_default(Kind::Ratio, "0.85")),
    ("reserve_tokens", with_default(Kind::Count, "13000")),
    ("max_prompt_tokens", leaf(Kind::Count)),
    ("recent_messages_tokens", with_default(Kind::Count, "20000")),
    ("summary_max_tokens", with_default(Kind::Count, "8192")),
]);

/// When the runtime stops an agent its model does not stop (see
/// `muster_agents::runtime::AgentLimits`, whose fields these are).
const LIMITS: Schema = Schema::Table(&[
    ("continuations", with_default(Kind::Count, "3")),
    ("stuck_after", with_default(Kind::Count, "3")),
]);

/// MCP servers (see `muster_agents::mcp`). Which project servers may start is decided by
/// `muster trust`; the three name-keyed keys are retired (read only to say so).
const MCP: Schema = Schema::Table(&[
    ("enabled_project_servers", leaf(Kind::Names)),
    (
        "enable_all_project_servers",
        with_default(Kind::Flag, "false"),
    ),
    ("trusted_read_only", leaf(Kind::Names)),
    // Only from the user's settings file: tools plan mode may call beyond their hints.
    ("read_only_tools", leaf(Kind::Names)),
    ("startup_timeout_ms", with_default(Kind::Count, "10000")),
    ("call_timeout_ms", with_default(Kind::Count, "60000")),
    ("max_output_bytes", with_default(Kind::Count, "100000")),
]);

/// Every settings key.
pub(crate) const SETTINGS: Schema = Schema::Table(&[
    ("permission_mode", with_default(Kind::Mode, "default")),
    (
        "permissions",
        Schema::Table(&[
            ("allow", Schema::Rules(RuleBehavior::Allow)),
            ("ask", Schema::Rules(RuleBehavior::Ask)),
            ("deny", Schema::Rules(RuleBehavior::Deny)),
            // Claude Code's `additionalDirectories`: readable and writable beside the workspace.
            ("additional_directories", leaf(Kind::Names)),
            // Claude Code's `disableBypassPermissionsMode`: `"disable"` refuses the mode.
            (
                "disable_bypass_permissions_mode",
                leaf(Kind::OneOf(DISABLE)),
            ),
        ]),
    ),
    ("plans_directory", with_default(Kind::Path, ".muster/plans")),
    // The store: a path or a postgres:// URL. `store_path` is its older name, kept as an
    // alias; when both are set, the higher layer wins (at one layer, `store`).
    ("store", with_default(Kind::Path, ".muster/muster.db")),
    ("store_path", leaf(Kind::Path)),
    ("approver", with_default(Kind::Approver, "human")),
    (
        "auto_gate",
        with_default(Kind::OneOf(AUTO_GATE_STATES), "open"),
    ),
    ("auto_gate_denial_limit", with_default(Kind::Count, "3")),
    ("instructions_max_bytes", with_default(Kind::Count, "65536")),
    (
        "provider",
        with_default(Kind::OneOf(PROVIDER_NAMES), "anthropic"),
    ),
    ("model", with_default(Kind::Text, "claude-sonnet-4-5")),
    ("thinking_budget", leaf(Kind::Count)),
    ("reasoning_effort", leaf(Kind::OneOf(REASONING_EFFORTS))),
    ("plan", MODE_TABLE),
    ("act", MODE_TABLE),
    (
        "providers",
        Schema::Table(&[
            ("anthropic", ANTHROPIC),
            ("openai", OPENAI),
            ("script", SCRIPT),
        ]),
    ),
    ("models", Schema::Map(&MODEL)),
    (
        "budgets",
        Schema::Table(&[("agent", AGENT_BUDGET), ("run", RUN_BUDGET)]),
    ),
    (
        "mailbox",
        Schema::Table(&[
            ("max_body_bytes", with_default(Kind::Count, "1048576")),
            ("sync", with_default(Kind::OneOf(SYNC_LEVELS), "full")),
            ("busy_timeout_ms", with_default(Kind::Count, "5000")),
            // As `muster_mailbox::StoreOptions::default()` (both pinned by tests).
            ("pipelined_sync", with_default(Kind::Flag, "false")),
        ]),
    ),
    ("compaction", COMPACTION),
    ("limits", LIMITS),
    ("mcp", MCP),
    (
        "sandbox",
        Schema::Table(&[
            ("mode", with_default(Kind::OneOf(SANDBOX_MODES), "auto")),
            ("network", with_default(Kind::OneOf(ON_OFF), "on")),
            ("writable", leaf(Kind::Text)),
        ]),
    ),
    // Read only from the user's own settings file (see `super::drop_telemetry`).
    (
        "telemetry",
        Schema::Table(&[
            ("enabled", with_default(Kind::Flag, "false")),
            ("content", with_default(Kind::Flag, "false")),
        ]),
    ),
]);

impl Schema {
    /// The schema at `path`, following maps for any key.
    pub fn lookup(&self, path: &[String]) -> Option<&Schema> {
        let Some((first, rest)) = path.split_first() else {
            return Some(self);
        };
        match self {
            Schema::Table(keys) => keys
                .iter()
                .find(|(name, _)| *name == first.as_str())
                .and_then(|(_, child)| child.lookup(rest)),
            Schema::Map(child) => child.lookup(rest),
            Schema::Leaf(..) | Schema::Rules(_) => None,
        }
    }

    /// The key names of a table (empty for other shapes).
    pub fn key_names(&self) -> Vec<&'static str> {
        match self {
            Schema::Table(keys) => keys.iter().map(|(name, _)| *name).collect(),
            _ => Vec::new(),
        }
    }

    /// Every fixed leaf path (maps are skipped), for defaults and environment names.
    pub fn leaf_paths(&self) -> Vec<(Vec<&'static str>, &Schema)> {
        let mut found = Vec::new();
        self.collect_leaves(&mut Vec::new(), &mut found);
        found
    }

    /// Every key path, maps written as `<id>` (`models.<id>.price_in`).
    pub fn documented_keys(&self) -> Vec<String> {
        let mut keys = Vec::new();
        self.collect_keys(String::new(), &mut keys);
        keys
    }

    fn collect_keys(&self, prefix: String, keys: &mut Vec<String>) {
        let join = |name: &str| {
            if prefix.is_empty() {
                name.to_string()
            } else {
                format!("{prefix}.{name}")
            }
        };
        match self {
            Schema::Table(children) => {
                for (name, child) in children.iter() {
                    child.collect_keys(join(name), keys);
                }
            }
            Schema::Map(child) => child.collect_keys(join("<id>"), keys),
            Schema::Leaf(..) | Schema::Rules(_) => keys.push(prefix),
        }
    }

    fn collect_leaves<'s>(
        &'s self,
        prefix: &mut Vec<&'static str>,
        found: &mut Vec<(Vec<&'static str>, &'s Schema)>,
    ) {
        match self {
            Schema::Table(keys) => {
                for (name, child) in keys.iter() {
                    prefix.push(name);
                    child.collect_leaves(prefix, found);
                    prefix.pop();
                }
            }
            Schema::Map(_) => {}
            Schema::Leaf(..) | Schema::Rules(_) => found.push((prefix.clone(), self)),
        }
    }
}

impl Kind {
    /// What a value of this kind looks like, for "expected …" messages.
    pub fn expected(self) -> String {
        match self {
            Kind::Text => "a string".to_string(),
            Kind::Path => "a path string".to_string(),
            Kind::Url => "a URL string starting with http:// or https://".to_string(),
            Kind::Count => "a non-negative integer".to_string(),
            Kind::Price => "a non-negative number".to_string(),
            Kind::Flag => "true or false".to_string(),
            Kind::Ratio => "a number greater than 0 and at most 1".to_string(),
            Kind::Mode => format!("one of {}", PermissionMode::names().join(", ")),
            Kind::Approver => "\"human\" or \"policy:FILE\"".to_string(),
            Kind::OneOf(choices) => format!("one of {}", choices.join(", ")),
            Kind::Names => "an array of name strings".to_string(),
        }
    }

    /// Reads a value of this kind from a TOML value.
    pub fn read_toml(self, value: &DeValue<'_>) -> Result<SettingValue, String> {
        let mismatch = || format!("expected {}, found {}", self.expected(), describe(value));
        match self {
            Kind::Count => integer_value(value)
                .and_then(|n| u64::try_from(n).ok())
                .map(SettingValue::Count)
                .ok_or_else(mismatch),
            Kind::Price => match number_value(value) {
                Some(number) if number.is_finite() && number >= 0.0 => {
                    Ok(SettingValue::Number(number))
                }
                _ => Err(mismatch()),
            },
            Kind::Ratio => match number_value(value) {
                Some(number) if is_ratio(number) => Ok(SettingValue::Number(number)),
                _ => Err(mismatch()),
            },
            Kind::Flag => match value {
                DeValue::Boolean(flag) => Ok(SettingValue::Flag(*flag)),
                _ => Err(mismatch()),
            },
            Kind::Names => match value {
                DeValue::Array(items) => items
                    .iter()
                    .map(|item| match item.get_ref() {
                        DeValue::String(text) if !text.trim().is_empty() => {
                            Ok(text.trim().to_string())
                        }
                        other => Err(format!(
                            "expected an array of name strings, found an element that is {}",
                            describe(other)
                        )),
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map(SettingValue::List),
                _ => Err(mismatch()),
            },
            _ => match value {
                DeValue::String(text) => self.read_text(text),
                _ => Err(mismatch()),
            },
        }
    }

    /// Reads a value of this kind from text (an environment variable, a flag, a default).
    pub fn read_text(self, text: &str) -> Result<SettingValue, String> {
        let found = format!("{text:?}");
        match self {
            Kind::Text | Kind::Path => {
                if text.trim().is_empty() {
                    Err(format!("expected {}, found an empty string", self.expected()))
                } else {
                    Ok(SettingValue::Text(text.to_string()))
                }
            }
            Kind::Url => {
                if text.starts_with("http://") || text.starts_with("https://") {
                    Ok(SettingValue::Text(text.to_string()))
                } else {
                    Err(format!("expected {}, found {found}", self.expected()))
                }
            }
            Kind::Count => text
                .trim()
                .parse::<u64>()
                .map(SettingValue::Count)
                .map_err(|_| format!("expected {}, found {found}", self.expected())),
            Kind::Price => match text.trim().parse::<f64>() {
                Ok(number) if number.is_finite() && number >= 0.0 => {
                    Ok(SettingValue::Number(number))
                }
                _ => Err(format!("expected {}, found {found}", self.expected())),
            },
            Kind::Ratio => match text.trim().parse::<f64>() {
                Ok(number) if is_ratio(number) => Ok(SettingValue::Number(number)),
                _ => Err(format!("expected {}, found {found}", self.expected())),
            },
            Kind::Flag => match text.trim() {
                "true" => Ok(SettingValue::Flag(true)),
                "false" => Ok(SettingValue::Flag(false)),
                _ => Err(format!("expected {}, found {found}", self.expected())),
            },
            Kind::Mode => text
                .parse::<PermissionMode>()
                .map(|_| SettingValue::Text(text.to_string()))
                .map_err(|_| {
                    format!(
                        "expected {}, found {found}{}",
                        self.expected(),
                        suggestion_suffix(text, PermissionMode::names())
                    )
                }),
            Kind::Approver if text == "lead" => Err(
                "the main agent's approver is \"human\" or \"policy:FILE\"; \"lead\" is for teammates"
                    .to_string(),
            ),
            Kind::Approver => {
                // "lead" was refused above; the rest is the approver's own parse.
                let valid = crate::Responder::parse(text).is_ok();
                if valid {
                    Ok(SettingValue::Text(text.to_string()))
                } else {
                    Err(format!("expected {}, found {found}", self.expected()))
                }
            }
            Kind::Names => Ok(SettingValue::List(
                text.split(',')
                    .map(str::trim)
                    .filter(|name| !name.is_empty())
                    .map(str::to_string)
                    .collect(),
            )),
            Kind::OneOf(choices) => {
                if choices.contains(&text) {
                    Ok(SettingValue::Text(text.to_string()))
                } else {
                    Err(format!(
                        "expected {}, found {found}{}",
                        self.expected(),
                        suggestion_suffix(text, choices.iter().copied())
                    ))
                }
            }
        }
    }
}

/// In (0, 1]: a share of something that cannot be empty (NaN is not).
fn is_ratio(number: f64) -> bool {
    number > 0.0 && number <= 1.0
}
