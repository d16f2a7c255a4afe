//! Settings and their layers: built-in defaults, `~/.muster/settings.toml`,
//! `.muster/settings.toml`, `.muster/settings.local.toml`, `MUSTER_*` environment variables, then
//! command-line flags. Later layers override earlier ones key by key; permission rule lists
//! concatenate. Every value remembers the layer it came from.

mod catalogue;
mod claude;
mod gate;
mod layers;
mod paths;
mod schema;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

pub use catalogue::matched_id as catalogue_id_of;
pub use layers::{
    CliOverrides, ENV_PREFIX, LayerValues, display_path, env_var_name, parse_settings_file,
    parse_settings_file_in,
};
pub(crate) use paths::git_tracks;
pub use paths::{OutsideRoot, normalize, resolve_inside_root};
pub use schema::SettingValue;

use crate::Responder;
use crate::diagnostic::{ConfigError, Diagnostic, Loaded, finish, invalid};
use crate::mode::PermissionMode;
use crate::named::named_enum;
use crate::origin::{Layer, Origin, Sourced};
use crate::project::ProjectRoot;
use crate::rule::PermissionRules;
use crate::store_url::StoreLocation;

named_enum! {
    /// A model provider.
    pub enum ProviderKind {
        Anthropic = "anthropic",
        /// Any OpenAI-compatible server (OpenAI, Ollama, vLLM, llama.cpp).
        OpenAi = "openai",
        /// Offline replays of a cassette.
        Script = "script",
    }
}

named_enum! {
    /// OpenAI-style reasoning effort.
    pub enum ReasoningEffort {
        Minimal = "minimal",
        Low = "low",
        Medium = "medium",
        High = "high",
    }
}

named_enum! {
    /// The state a run's auto gate starts in.
    pub enum AutoGate {
        Open = "open",
        Closed = "closed",
    }
}

named_enum! {
    /// SQLite `synchronous` level for the mailbox store.
    pub enum MailboxSync {
        Full = "full",
        Normal = "normal",
    }
}

/// What the loader reads. Only `main` passes the process's environment and home directory.
#[derive(Debug, Clone, Copy)]
pub struct SettingsInputs<'a> {
    pub project_root: &'a ProjectRoot,
    /// The home directory holding `.muster/settings.toml`; `None` skips the user layer.
    pub home_dir: Option<&'a Path>,
    /// The environment (`MUSTER_*` variables are read from it).
    pub env: &'a BTreeMap<String, String>,
    pub cli: &'a CliOverrides,
    /// Whether the project is trusted: without trust, what its own files set that would widen
    /// access or redirect keys is skipped ([`Settings::skipped`]).
    pub trust: &'a crate::trust::TrustDecision,
    /// The settings files as a run read them at its start: given, they are read from here and
    /// never from disk (a resume, a fork), so a file an agent edited since changes nothing.
    pub snapshot: Option<&'a SettingsSnapshot>,
}

/// The settings files one load read (Claude Code's and muster's), with whether git tracked
/// each: what a run stores with its launch options.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct SettingsSnapshot {
    pub files: BTreeMap<PathBuf, SnapshotFile>,
}

/// One settings file in a [`SettingsSnapshot`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct SnapshotFile {
    /// The text, or `None` when the file did not exist.
    pub text: Option<String>,
    /// Whether git tracked it (a tracked `settings.local.*` is the project's).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tracked: bool,
}

/// Where one load reads settings files from: a stored snapshot, or the disk (recording what it
/// read).
struct FileSource<'a> {
    stored: Option<&'a SettingsSnapshot>,
    read: SettingsSnapshot,
}

impl FileSource<'_> {
    /// The text of `path` and whether git tracks it; `None` when it does not exist (or did not
    /// when the snapshot was taken). A path the snapshot does not name at all (a run resumed
    /// in another checkout: a worker's clone, a moved project) is read from disk.
    fn read(&mut self, path: &Path) -> Result<Option<(String, bool)>, ConfigError> {
        let file = match self.stored.and_then(|stored| stored.files.get(path)) {
            Some(stored) => stored.clone(),
            None => {
                let text = read_optional(path)?;
                let tracked = text.is_some() && paths::git_tracks(path);
                SnapshotFile { text, tracked }
            }
        };
        self.read.files.insert(path.to_path_buf(), file.clone());
        Ok(file.text.map(|text| (text, file.tracked)))
    }
}

/// Model, provider and thinking settings for one mode (plan or act).
#[derive(Debug, Clone, Serialize)]
pub struct ModeSettings {
    pub provider: Sourced<ProviderKind>,
    pub model: Sourced<String>,
    /// Anthropic extended-thinking budget in tokens.
    pub thinking_budget: Option<Sourced<u64>>,
    /// OpenAI-style reasoning effort.
    pub reasoning_effort: Option<Sourced<ReasoningEffort>>,
}

/// One provider's connection settings.
#[derive(Debug, Clone, Serialize)]
pub struct ProviderSettings {
    pub base_url: Option<Sourced<String>>,
    /// The environment variable holding the API key.
    pub api_key_env: Option<Sourced<String>>,
    /// An API key written in a settings file (discouraged: a warning when git tracks it).
    #[serde(skip)]
    pub api_key: Option<Sourced<String>>,
    pub connect_timeout_ms: Sourced<u64>,
    pub request_timeout_ms: Sourced<u64>,
    /// How long a streamed response may stay silent before it counts as failed.
    pub stream_idle_timeout_ms: Sourced<u64>,
    pub max_retries: Sourced<u64>,
    pub retry_backoff_ms: Sourced<u64>,
    /// The cassette a `script` provider replays (absolute).
    pub cassette: Option<Sourced<PathBuf>>,
}

/// A model catalogue entry. Prices are US dollars per million tokens.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ModelInfo {
    pub context_window: Option<u64>,
    pub max_output: Option<u64>,
    pub price_in: Option<f64>,
    pub price_out: Option<f64>,
    pub price_cache_read: Option<f64>,
    pub price_cache_write: Option<f64>,
}

impl ModelInfo {
    /// Whether input and output prices are known, so cost can be computed.
    pub fn has_prices(&self) -> bool {
        self.price_in.is_some() && self.price_out.is_some()
    }
}

/// Limits for one agent or for a whole run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BudgetLimits {
    pub turns: Option<Sourced<u64>>,
    pub tokens: Option<Sourced<u64>>,
    pub cost_usd: Option<Sourced<f64>>,
}

/// Budgets per agent and per run, and the run's maximum duration.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Budgets {
    pub agent: BudgetLimits,
    pub run: BudgetLimits,
    pub run_duration_secs: Option<Sourced<u64>>,
}

/// Settings of the mailbox store.
#[derive(Debug, Clone, Serialize)]
pub struct MailboxSettings {
    /// The largest message body accepted, in bytes.
    pub max_body_bytes: Sourced<u64>,
    pub sync: Sourced<MailboxSync>,
    pub busy_timeout_ms: Sourced<u64>,
    /// At sync full, the store syncs the WAL itself, pipelined with the next commit; off,
    /// SQLite syncs inside each COMMIT.
    pub pipelined_sync: Sourced<bool>,
}

/// When an agent's context is compacted: the fields of
/// `muster_agents::compaction::CompactionConfig`.
#[derive(Debug, Clone, Serialize)]
pub struct CompactionSettings {
    /// Compact at all.
    pub enabled: Sourced<bool>,
    /// The share of the model's window the prompt may fill, in (0, 1].
    pub trigger_ratio: Sourced<f64>,
    /// Tokens kept free beside the model's maximum output.
    pub reserve_tokens: Sourced<u64>,
    /// An absolute prompt size that can only lower the computed threshold.
    pub max_prompt_tokens: Option<Sourced<u64>>,
    /// The budget for the most recent user and lead messages kept verbatim.
    pub recent_messages_tokens: Sourced<u64>,
    /// `max_tokens` of the summary request (at least 1).
    pub summary_max_tokens: Sourced<u64>,
}

/// When the runtime stops an agent its model does not stop (`[limits]`): the fields of
/// `muster_agents::runtime::AgentLimits`.
#[derive(Debug, Clone, Serialize)]
pub struct LimitSettings {
    /// How many times a final answer cut by the output limit is continued.
    pub continuations: Sourced<u64>,
    /// Identical failures of one call in a row before the model is told to change course
    /// (one more ends the agent as `stuck`); at least 1.
    pub stuck_after: Sourced<u64>,
}

/// How `Bash` commands are confined (`[sandbox]`; see `muster_agents::sandbox`).
#[derive(Debug, Clone, Serialize)]
pub struct SandboxSettings {
    /// `auto`, `required` or `off`.
    pub mode: Sourced<String>,
    /// Network in the workspace-write profile.
    pub network: Sourced<bool>,
    /// Extra writable paths of the workspace-write profile (absolute; from a `:`-separated
    /// list, relative entries resolved against the project root).
    pub writable: Vec<PathBuf>,
}

/// MCP servers (`[mcp]`; see [`crate::mcp`]). `read_only_tools` is read only from the user's
/// settings file and the environment; the three retired name-keyed keys are read only to say
/// they no longer apply (and never from a committed file).
#[derive(Debug, Clone, Serialize)]
pub struct McpSettings {
    /// Retired: a server name is not trust (a warning names `muster trust`).
    pub enabled_project_servers: Option<Sourced<Vec<String>>>,
    /// Retired, as `enabled_project_servers`.
    pub enable_all_project_servers: Sourced<bool>,
    /// Retired: replaced by the servers' hints and `read_only_tools`.
    pub trusted_read_only: Option<Sourced<Vec<String>>>,
    /// MCP tools (`mcp__<server>__<tool>`) the user declares read-only beyond what their
    /// servers' hints say: plan mode and read-only agents may call them.
    pub read_only_tools: Option<Sourced<Vec<String>>>,
    /// How long a server has to start, initialize and list its tools.
    pub startup_timeout_ms: Sourced<u64>,
    /// How long one tool call may take.
    pub call_timeout_ms: Sourced<u64>,
    /// The most of a tool result's text kept for the model.
    pub max_output_bytes: Sourced<u64>,
    /// Whether the project is trusted: without trust, no project server starts.
    pub project_trusted: bool,
    /// The project servers' pins recorded by `muster trust` (see
    /// [`crate::trust::TrustDecision::mcp_servers`]).
    pub pinned: Option<BTreeMap<String, String>>,
}

/// Traces (`[telemetry]`): read only from the user's settings file and the environment, never
/// from a project's files.
#[derive(Debug, Clone, Serialize)]
pub struct TelemetrySettings {
    /// Export traces (`MUSTER_TELEMETRY=1` turns them on too).
    pub enabled: Sourced<bool>,
    /// Export content attributes too: tool input and output, Bash text, paths, plan text,
    /// feedback.
    pub content: Sourced<bool>,
}

/// The `[mcp]` keys a project's committed settings may not set.
pub const MCP_TRUST_KEYS: &[&str] = &[
    "enabled_project_servers",
    "enable_all_project_servers",
    "trusted_read_only",
];

/// One effective value as `muster config show` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct SettingEntry {
    pub key: String,
    pub value: serde_json::Value,
    pub origin: Origin,
}

/// The effective settings.
#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    pub project_root: PathBuf,
    /// The permission mode agents start in unless their definition or a flag says otherwise.
    pub permission_mode: Sourced<PermissionMode>,
    pub permissions: PermissionRules,
    /// Absolute, inside the project root after symlink resolution.
    pub plans_directory: Sourced<PathBuf>,
    /// The store (`store`, alias `store_path`): an absolute file path, or a PostgreSQL URL.
    pub store: Sourced<StoreLocation>,
    /// Who approves the main agent's plans: `human` or a policy.
    pub approver: Sourced<Responder>,
    pub auto_gate: Sourced<AutoGate>,
    /// Consecutive auto denials that close the gate.
    pub auto_gate_denial_limit: Sourced<u64>,
    /// Size cap for each of AGENTS.md and CLAUDE.md.
    pub instructions_max_bytes: Sourced<u64>,
    pub plan: ModeSettings,
    pub act: ModeSettings,
    pub anthropic: ProviderSettings,
    pub openai: ProviderSettings,
    pub script: ProviderSettings,
    pub models: BTreeMap<String, ModelInfo>,
    pub budgets: Budgets,
    pub mailbox: MailboxSettings,
    pub compaction: CompactionSettings,
    pub limits: LimitSettings,
    pub sandbox: SandboxSettings,
    pub mcp: McpSettings,
    /// Directories outside the project agents may read and write (Claude Code's
    /// `additionalDirectories`, concatenated over the layers; absolute): added to the file
    /// tools' confinement and the sandbox's writable paths, shared by every worktree.
    pub additional_directories: Vec<Sourced<PathBuf>>,
    /// Where `disableBypassPermissionsMode = "disable"` was set: `bypassPermissions` is
    /// refused from every source.
    pub bypass_disabled: Option<Origin>,
    /// `[telemetry]`, from the user's own settings file only.
    pub telemetry: TelemetrySettings,
    /// The trust decision the settings were loaded with.
    pub trust: crate::trust::TrustDecision,
    /// What the project's own files set that trust gates, skipped because the project is not
    /// trusted.
    pub skipped: Vec<SkippedSetting>,
    /// The settings files this load read (a run stores it; see [`SettingsInputs::snapshot`]).
    #[serde(skip)]
    pub snapshot: SettingsSnapshot,
    /// Claude Code's hooks from its settings files (a project's only when trusted).
    pub hooks: crate::hooks::Hooks,
    #[serde(skip)]
    entries: Vec<SettingEntry>,
}

/// A value a project file set that was not applied, and why.
#[derive(Debug, Clone, Serialize)]
pub struct SkippedSetting {
    pub key: String,
    pub value: serde_json::Value,
    pub origin: Origin,
    pub why: String,
}

impl Settings {
    /// Loads every layer and validates the result.
    pub fn load(inputs: &SettingsInputs<'_>) -> Result<Loaded<Settings>, ConfigError> {
        let mut errors = Vec::new();
        let mut warnings = Vec::new();
        let mut skipped = Vec::new();
        let mut hooks = crate::hooks::Hooks::default();
        let mut layers = vec![default_layer_values()?];
        let mut source = FileSource {
            stored: inputs.snapshot,
            read: SettingsSnapshot::default(),
        };
        // Claude Code's files first: muster's own layers are above them.
        for (layer, path) in claude::claude_settings_files(inputs.project_root, inputs.home_dir) {
            let Some((text, tracked)) = source.read(&path)? else {
                continue;
            };
            // The user's own files are not gated; a repository's (committed) are, by trust.
            let user_owned = match layer {
                Layer::User => !path.starts_with(inputs.project_root.path()),
                Layer::ProjectLocal => !tracked,
                _ => false,
            };
            let base = rule_base(&path, user_owned && layer == Layer::User);
            match claude::read_claude_settings(&path, &text, layer, &base) {
                Ok((mut values, found)) => {
                    warnings.extend(found);
                    match hooks_of_file(inputs, &path, &text, layer, user_owned) {
                        Ok((found, said, skipped_hooks)) => {
                            warnings.extend(said);
                            skipped.extend(skipped_hooks);
                            hooks.add_file(found);
                        }
                        Err(error) => errors.push(error),
                    }
                    if !user_owned && !inputs.trust.trusted {
                        skipped.extend(gate::skip_widening(&mut values, &inputs.trust.why));
                    }
                    layers.push(values);
                }
                Err(error) => errors.push(error),
            }
        }
        let files = settings_files(inputs);
        // With the project at the home directory, the user's settings file is the project's
        // committed one: it cannot trust MCP servers either.
        let project_file = files
            .iter()
            .find(|(layer, _)| *layer == Layer::Project)
            .map(|(_, path)| paths::normalize(path));
        for (layer, path) in files {
            let Some((text, tracked)) = source.read(&path)? else {
                continue;
            };
            let label = path.display().to_string();
            // Project-level: the committed file, a local one git tracks (committed, it is the
            // repository's), and the user's file when it is the project's.
            let committed = layer == Layer::Project
                || (layer == Layer::ProjectLocal && tracked)
                || (layer == Layer::User
                    && project_file.as_ref() == Some(&paths::normalize(&path)));
            let base = rule_base(&path, layer == Layer::User && !committed);
            match parse_settings_file_in(&label, &text, layer, &base) {
                Ok(mut values) => {
                    warnings.extend(paths::api_key_warnings(&path, &values));
                    if layer != Layer::User || committed {
                        warnings.extend(drop_telemetry(&mut values));
                        warnings.extend(drop_user_only_mcp(&mut values));
                    }
                    if committed {
                        warnings.extend(drop_mcp_trust(&mut values));
                        if !inputs.trust.trusted {
                            skipped.extend(gate::skip_widening(&mut values, &inputs.trust.why));
                        }
                    }
                    layers.push(values);
                }
                Err(found) => errors.extend(found),
            }
        }
        let (env_values, env_errors, env_warnings) = layers::parse_env(inputs.env);
        errors.extend(env_errors);
        warnings.extend(env_warnings);
        layers.push(env_values);
        let (cli_values, cli_errors) = inputs.cli.parse();
        errors.extend(cli_errors);
        layers.push(cli_values);
        if !errors.is_empty() {
            return Err(invalid(errors));
        }
        let merged = Merged::from_layers(layers);
        let mut settings = build(&merged, inputs.project_root.path(), &mut errors);
        settings.additional_directories =
            additional_directories(&merged, inputs.project_root.path(), inputs.home_dir);
        check_bypass_disabled(&settings, &mut errors);
        settings.trust = inputs.trust.clone();
        settings.snapshot = source.read;
        settings.mcp.project_trusted = inputs.trust.trusted;
        settings.mcp.pinned = inputs.trust.mcp_servers.clone();
        // With the project at the home directory, one file is read as two layers: say it once.
        let mut seen = std::collections::BTreeSet::new();
        skipped.retain(|entry: &SkippedSetting| {
            seen.insert((
                entry.key.clone(),
                entry.value.to_string(),
                entry.origin.source.clone(),
                entry.origin.position.map(|p| (p.line, p.column)),
            ))
        });
        settings.skipped = skipped;
        settings.hooks = hooks;
        finish(settings, errors).map(|value| Loaded { value, warnings })
    }

    /// Every effective value with its origin, for `muster config show`. API keys are masked.
    pub fn entries(&self) -> &[SettingEntry] {
        &self.entries
    }

    /// The settings of `mode`'s model.
    pub fn mode(&self, mode: PermissionMode) -> &ModeSettings {
        if mode == PermissionMode::Plan {
            &self.plan
        } else {
            &self.act
        }
    }

    /// Why `mode` (from `source`, as a person reads it) may not be used: `bypassPermissions`
    /// when `disableBypassPermissionsMode = "disable"` is set.
    pub fn refuse_disabled_mode(&self, mode: PermissionMode, source: &str) -> Option<String> {
        let disabled_by = self.bypass_disabled.as_ref()?;
        (mode == PermissionMode::BypassPermissions).then(|| {
            format!(
                "bypassPermissions ({source}) is disabled by `disableBypassPermissionsMode = \
                 \"disable\"` (from {disabled_by}); choose another mode (acceptEdits, auto, …) \
                 or remove that setting"
            )
        })
    }

    /// [`Settings::additional_directories`] without their origins.
    pub fn additional_directory_paths(&self) -> Vec<PathBuf> {
        self.additional_directories
            .iter()
            .map(|directory| directory.value.clone())
            .collect()
    }

    /// The settings of one provider.
    pub fn provider(&self, kind: ProviderKind) -> &ProviderSettings {
        match kind {
            ProviderKind::Anthropic => &self.anthropic,
            ProviderKind::OpenAi => &self.openai,
            ProviderKind::Script => &self.script,
        }
    }
}

/// What `/x` rule paths of the settings file at `path` are relative to: the file's directory
/// for a user's own file, the project root for the project's (Claude Code's rule).
fn rule_base(path: &Path, users_own: bool) -> crate::rule::RuleBase {
    match path.parent() {
        Some(directory) if users_own => crate::rule::RuleBase::Directory(directory.to_path_buf()),
        _ => crate::rule::RuleBase::ProjectRoot,
    }
}

/// The hooks of one Claude Code settings file: a repository's run only in a trusted project
/// (otherwise each is skipped, with why); a user-owned file's keep the user's layer (only they
/// may opt out of the sandbox).
fn hooks_of_file(
    inputs: &SettingsInputs<'_>,
    path: &Path,
    text: &str,
    layer: Layer,
    user_owned: bool,
) -> Result<
    (
        crate::hooks::FileHooks,
        Vec<Diagnostic>,
        Vec<SkippedSetting>,
    ),
    Diagnostic,
> {
    // `read_claude_settings` has already refused text that is not JSON.
    let Ok(json) = serde_json::from_str::<serde_json::Value>(text) else {
        return Ok(Default::default());
    };
    let origin = Origin {
        layer: match (user_owned, layer) {
            (true, layer) => layer,
            (false, _) => Layer::Project,
        },
        source: path.display().to_string(),
        position: None,
    };
    let (mut found, warnings) =
        crate::hooks::read_hooks(&json, &origin, inputs.project_root.path())?;
    let mut skipped = Vec::new();
    if !user_owned && !inputs.trust.trusted {
        skipped = found
            .hooks
            .drain(..)
            .map(|hook| SkippedSetting {
                key: format!("hooks.{}", hook.event),
                value: serde_json::Value::from(hook.handler.command),
                origin: hook.origin,
                why: format!(
                    "a hook command; the project is not trusted ({})",
                    inputs.trust.why
                ),
            })
            .collect();
        skipped.extend(
            found
                .plan_reviewers
                .drain(..)
                .map(|reviewer| SkippedSetting {
                    key: format!("{}.{}", crate::hooks::PLAN_REVIEWERS_KEY, reviewer.name),
                    value: serde_json::Value::from(reviewer.handler.command),
                    origin: reviewer.origin,
                    why: format!(
                        "a plan reviewer hook's command; the project is not trusted ({})",
                        inputs.trust.why
                    ),
                }),
        );
    }
    Ok((found, warnings, skipped))
}

/// Removes the `[mcp]` trust keys from the committed project settings: a cloned repository
/// must not be able to start its own servers. Each one removed is a warning.
fn drop_mcp_trust(values: &mut LayerValues) -> Vec<Diagnostic> {
    let mut warnings = Vec::new();
    values.leaves.retain(|(path, _, origin)| {
        let trust =
            path.len() == 2 && path[0] == "mcp" && MCP_TRUST_KEYS.contains(&path[1].as_str());
        if trust {
            warnings.push(
                Diagnostic::new(format!(
                    "`mcp.{}` is ignored in the project's committed settings ({origin}): a \
                     repository cannot enable or trust its own MCP servers (`muster trust` \
                     decides which start)",
                    path[1]
                ))
                .for_key(path.join(".")),
            );
        }
        !trust
    });
    warnings
}

/// Removes `[mcp] read_only_tools` from every file but the user's own: only the user widens
/// what plan mode allows. Each one removed is a warning.
fn drop_user_only_mcp(values: &mut LayerValues) -> Vec<Diagnostic> {
    let mut warnings = Vec::new();
    values.leaves.retain(|(path, _, origin)| {
        let user_only = path.len() == 2 && path[0] == "mcp" && path[1] == "read_only_tools";
        if user_only {
            warnings.push(
                Diagnostic::new(format!(
                    "`mcp.read_only_tools` is ignored in {origin}: only the user's own \
                     ~/.muster/settings.toml may declare MCP tools read-only"
                ))
                .for_key(path.join(".")),
            );
        }
        !user_only
    });
    warnings
}

/// Removes `[telemetry]` from every file but the user's own: a repository (committed or not,
/// trusted or not) must not be able to send the traces of whoever runs it to its collector.
/// Each one removed is a warning.
fn drop_telemetry(values: &mut LayerValues) -> Vec<Diagnostic> {
    let mut warnings = Vec::new();
    values.leaves.retain(|(path, _, origin)| {
        let telemetry = path.first().is_some_and(|first| first == "telemetry");
        if telemetry {
            warnings.push(
                Diagnostic::new(format!(
                    "`{}` is ignored in a project's settings ({origin}): traces are turned on \
                     only in ~/.muster/settings.toml or with MUSTER_TELEMETRY=1",
                    path.join(".")
                ))
                .for_key(path.join(".")),
            );
        }
        !telemetry
    });
    warnings
}

/// Every settings key, with `<id>` for free keys (`models.<id>.price_in`).
pub fn known_keys() -> Vec<String> {
    schema::SETTINGS.documented_keys()
}

/// The user, project and project-local settings files, in layer order.
pub fn settings_files(inputs: &SettingsInputs<'_>) -> Vec<(Layer, PathBuf)> {
    let muster_dir = inputs.project_root.muster_dir();
    let mut files = Vec::new();
    if let Some(home) = inputs.home_dir {
        files.push((Layer::User, home.join(".muster").join("settings.toml")));
    }
    files.push((Layer::Project, muster_dir.join("settings.toml")));
    files.push((Layer::ProjectLocal, muster_dir.join("settings.local.toml")));
    files
}

/// The text of `path`, or `None` when it does not exist.
pub(crate) fn read_optional(path: &Path) -> Result<Option<String>, ConfigError> {
    match std::fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes).map(Some).map_err(|_| {
            ConfigError::invalid(
                Diagnostic::new("expected UTF-8 text, found invalid bytes")
                    .in_source(path.display().to_string()),
            )
        }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ConfigError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn default_layer_values() -> Result<LayerValues, ConfigError> {
    layers::default_layer().map_err(ConfigError::Invalid)
}

/// Leaf values and rules after applying every layer in order.
struct Merged {
    leaves: BTreeMap<Vec<String>, (SettingValue, Origin)>,
    rules: PermissionRules,
    /// `permissions.additional_directories` of every layer (they concatenate, as rules do and
    /// as Claude Code merges its array settings).
    additional_directories: Vec<(String, Origin)>,
}

impl Merged {
    fn from_layers(layers: Vec<LayerValues>) -> Merged {
        let mut merged = Merged {
            leaves: BTreeMap::new(),
            rules: PermissionRules::default(),
            additional_directories: Vec::new(),
        };
        for layer in layers {
            for (path, value, origin) in layer.leaves {
                if let (true, SettingValue::List(directories)) =
                    (path == ["permissions", "additional_directories"], &value)
                {
                    merged.additional_directories.extend(
                        directories
                            .iter()
                            .map(|directory| (directory.clone(), origin.clone())),
                    );
                }
                merged.leaves.insert(path, (value, origin));
            }
            for (behavior, rule) in layer.rules {
                merged.rules.list_mut(behavior).push(rule);
            }
        }
        merged
    }

    fn get(&self, path: &[&str]) -> Option<&(SettingValue, Origin)> {
        let key: Vec<String> = path.iter().map(|s| s.to_string()).collect();
        self.leaves.get(&key)
    }

    fn text(&self, path: &[&str]) -> Option<Sourced<String>> {
        match self.get(path)? {
            (SettingValue::Text(text), origin) => Some(Sourced::new(text.clone(), origin.clone())),
            _ => None,
        }
    }

    fn count(&self, path: &[&str]) -> Option<Sourced<u64>> {
        match self.get(path)? {
            (SettingValue::Count(count), origin) => Some(Sourced::new(*count, origin.clone())),
            _ => None,
        }
    }

    fn number(&self, path: &[&str]) -> Option<Sourced<f64>> {
        match self.get(path)? {
            (SettingValue::Number(number), origin) => Some(Sourced::new(*number, origin.clone())),
            _ => None,
        }
    }

    fn flag(&self, path: &[&str]) -> Option<Sourced<bool>> {
        match self.get(path)? {
            (SettingValue::Flag(flag), origin) => Some(Sourced::new(*flag, origin.clone())),
            _ => None,
        }
    }

    fn names(&self, path: &[&str]) -> Option<Sourced<Vec<String>>> {
        match self.get(path)? {
            (SettingValue::List(names), origin) => {
                Some(Sourced::new(names.clone(), origin.clone()))
            }
            _ => None,
        }
    }
}

/// Reads typed values, recording an error for values that do not convert.
struct Builder<'m> {
    merged: &'m Merged,
    errors: Vec<Diagnostic>,
}

impl Builder<'_> {
    fn missing(&mut self, path: &[&str]) {
        self.errors
            .push(Diagnostic::new("no value, and no built-in default").for_key(path.join(".")));
    }

    fn count(&mut self, path: &[&str]) -> Sourced<u64> {
        self.merged.count(path).unwrap_or_else(|| {
            self.missing(path);
            Sourced::new(0, Origin::built_in())
        })
    }

    fn number(&mut self, path: &[&str]) -> Sourced<f64> {
        self.merged.number(path).unwrap_or_else(|| {
            self.missing(path);
            Sourced::new(0.0, Origin::built_in())
        })
    }

    fn flag(&mut self, path: &[&str]) -> Sourced<bool> {
        self.merged.flag(path).unwrap_or_else(|| {
            self.missing(path);
            Sourced::new(false, Origin::built_in())
        })
    }

    fn compaction(&mut self) -> CompactionSettings {
        let key = |leaf: &'static str| ["compaction", leaf];
        CompactionSettings {
            enabled: self.flag(&key("enabled")),
            trigger_ratio: self.number(&key("trigger_ratio")),
            reserve_tokens: self.count(&key("reserve_tokens")),
            max_prompt_tokens: self.merged.count(&key("max_prompt_tokens")),
            recent_messages_tokens: self.count(&key("recent_messages_tokens")),
            summary_max_tokens: self.count(&key("summary_max_tokens")),
        }
    }

    fn agent_limits(&mut self) -> LimitSettings {
        LimitSettings {
            continuations: self.count(&["limits", "continuations"]),
            stuck_after: self.count(&["limits", "stuck_after"]),
        }
    }

    fn mcp(&mut self) -> McpSettings {
        let key = |leaf: &'static str| ["mcp", leaf];
        McpSettings {
            enabled_project_servers: self.merged.names(&key("enabled_project_servers")),
            enable_all_project_servers: self.flag(&key("enable_all_project_servers")),
            trusted_read_only: self.merged.names(&key("trusted_read_only")),
            read_only_tools: self.merged.names(&key("read_only_tools")),
            startup_timeout_ms: self.count(&key("startup_timeout_ms")),
            call_timeout_ms: self.count(&key("call_timeout_ms")),
            max_output_bytes: self.count(&key("max_output_bytes")),
            project_trusted: false,
            pinned: None,
        }
    }

    fn sandbox(&mut self, root: &Path) -> SandboxSettings {
        let network = self.text(&["sandbox", "network"]);
        let writable = self
            .merged
            .text(&["sandbox", "writable"])
            .map(|list| {
                list.value
                    .split(':')
                    .filter(|entry| !entry.trim().is_empty())
                    .map(|entry| root.join(entry.trim()))
                    .collect()
            })
            .unwrap_or_default();
        SandboxSettings {
            mode: self.text(&["sandbox", "mode"]),
            network: Sourced::new(network.value == "on", network.origin),
            writable,
        }
    }

    fn text(&mut self, path: &[&str]) -> Sourced<String> {
        self.merged.text(path).unwrap_or_else(|| {
            self.missing(path);
            Sourced::new(String::new(), Origin::built_in())
        })
    }

    fn parsed<T>(
        &mut self,
        path: &[&str],
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Option<Sourced<T>> {
        let text = self.merged.text(path)?;
        match parse(&text.value) {
            Ok(value) => Some(Sourced::new(value, text.origin)),
            Err(message) => {
                self.errors
                    .push(origin_diagnostic(&text.origin, &path.join("."), message));
                None
            }
        }
    }

    fn required<T: Default>(
        &mut self,
        path: &[&str],
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Sourced<T> {
        self.parsed(path, parse).unwrap_or_else(|| {
            if self.merged.text(path).is_none() {
                self.missing(path);
            }
            Sourced::new(T::default(), Origin::built_in())
        })
    }

    /// The path that decides `leaf` for `mode`: `[plan]`/`[act]` beats the shared key unless
    /// the shared key was set in a later layer (`MUSTER_MODEL` beats a file's `[plan] model`).
    fn mode_path<'p>(&self, mode: &'p str, leaf: &'p str) -> Vec<&'p str> {
        let specific = self
            .merged
            .get(&[mode, leaf])
            .map(|(_, origin)| origin.layer);
        let shared = self.merged.get(&[leaf]).map(|(_, origin)| origin.layer);
        match (specific, shared) {
            (Some(specific), Some(shared)) if shared > specific => vec![leaf],
            (Some(_), _) => vec![mode, leaf],
            (None, _) => vec![leaf],
        }
    }

    /// `[plan]`/`[act]` values, falling back to the shared ones.
    fn mode_settings(&mut self, mode: &str) -> ModeSettings {
        let provider_path = self.mode_path(mode, "provider");
        let provider = self.required(&provider_path, |text| text.parse::<ProviderKind>());
        let model = self.text(&self.mode_path(mode, "model"));
        let thinking_budget = self.merged.count(&self.mode_path(mode, "thinking_budget"));
        let effort_path = self.mode_path(mode, "reasoning_effort");
        let reasoning_effort = self.parsed(&effort_path, |text| text.parse::<ReasoningEffort>());
        ModeSettings {
            provider,
            model,
            thinking_budget,
            reasoning_effort,
        }
    }

    /// An OpenAI-compatible provider needs a model named somewhere: the built-in default is
    /// Anthropic's, which such a server refuses (or serves something else under that name).
    fn check_openai_models(&mut self, plan: &ModeSettings, act: &ModeSettings) {
        let unset: Vec<&str> = [("plan", plan), ("act", act)]
            .into_iter()
            .filter(|(_, mode)| {
                mode.provider.value == ProviderKind::OpenAi
                    && mode.model.origin.layer == Layer::Default
            })
            .map(|(name, _)| name)
            .collect();
        let Some(first) = unset.first() else {
            return;
        };
        let default_model = &act.model.value;
        self.errors.push(
            Diagnostic::new(format!(
                "the openai provider ({} mode) has no model of its own, and the built-in \
                 default `{default_model}` is an Anthropic model: pass --model NAME (the name \
                 your server serves, e.g. gpt-4.1 or qwen2.5-coder), or set `model` (or \
                 `[{first}] model`) in .muster/settings.toml, or MUSTER_MODEL",
                unset.join(" and ")
            ))
            .for_key("model"),
        );
    }

    fn provider(&mut self, name: &str, root: &Path) -> ProviderSettings {
        let key = |leaf: &'static str| ["providers", name, leaf];
        ProviderSettings {
            base_url: self.merged.text(&key("base_url")),
            api_key_env: self.merged.text(&key("api_key_env")),
            api_key: self.merged.text(&key("api_key")),
            connect_timeout_ms: self.count(&key("connect_timeout_ms")),
            request_timeout_ms: self.count(&key("request_timeout_ms")),
            stream_idle_timeout_ms: self.count(&key("stream_idle_timeout_ms")),
            max_retries: self.count(&key("max_retries")),
            retry_backoff_ms: self.count(&key("retry_backoff_ms")),
            cassette: self
                .merged
                .text(&key("cassette"))
                .map(|path| Sourced::new(paths::normalize(&root.join(&path.value)), path.origin)),
        }
    }

    fn limits(&mut self, scope: &str) -> BudgetLimits {
        BudgetLimits {
            turns: self.merged.count(&["budgets", scope, "turns"]),
            tokens: self.merged.count(&["budgets", scope, "tokens"]),
            cost_usd: self.merged.number(&["budgets", scope, "cost_usd"]),
        }
    }

    fn models(&self) -> BTreeMap<String, ModelInfo> {
        let mut models: BTreeMap<String, ModelInfo> = BTreeMap::new();
        for (path, (value, _)) in &self.merged.leaves {
            let [section, id, field] = path.as_slice() else {
                continue;
            };
            if section != "models" {
                continue;
            }
            let info = models.entry(id.clone()).or_default();
            match (field.as_str(), value) {
                ("context_window", SettingValue::Count(n)) => info.context_window = Some(*n),
                ("max_output", SettingValue::Count(n)) => info.max_output = Some(*n),
                ("price_in", SettingValue::Number(p)) => info.price_in = Some(*p),
                ("price_out", SettingValue::Number(p)) => info.price_out = Some(*p),
                ("price_cache_read", SettingValue::Number(p)) => info.price_cache_read = Some(*p),
                ("price_cache_write", SettingValue::Number(p)) => info.price_cache_write = Some(*p),
                _ => {}
            }
        }
        models
    }
}

/// `permissions.additional_directories` of every layer, in order: `~/x` under `home`, relative
/// paths against the project root.
fn additional_directories(
    merged: &Merged,
    root: &Path,
    home: Option<&Path>,
) -> Vec<Sourced<PathBuf>> {
    let mut directories: Vec<Sourced<PathBuf>> = Vec::new();
    for (text, origin) in &merged.additional_directories {
        let path = match (text.strip_prefix("~/"), home) {
            (Some(rest), Some(home)) => home.join(rest),
            _ => root.join(text),
        };
        let path = paths::normalize(&path);
        if !directories.iter().any(|known| known.value == path) {
            directories.push(Sourced::new(path, origin.clone()));
        }
    }
    directories
}

/// `disableBypassPermissionsMode = "disable"` refuses `bypassPermissions` from every source,
/// the command line included.
fn check_bypass_disabled(settings: &Settings, errors: &mut Vec<Diagnostic>) {
    let Some(disabled_by) = &settings.bypass_disabled else {
        return;
    };
    if settings.permission_mode.value == PermissionMode::BypassPermissions {
        errors.push(origin_diagnostic(
            &settings.permission_mode.origin,
            "permission_mode",
            format!(
                "bypassPermissions is disabled by `disableBypassPermissionsMode = \"disable\"` \
                 (from {disabled_by}); choose another mode (acceptEdits, auto, …) or remove that \
                 setting"
            ),
        ));
    }
}

/// A diagnostic placed where a merged value was set.
pub(crate) fn origin_diagnostic(
    origin: &Origin,
    key: &str,
    message: impl Into<String>,
) -> Diagnostic {
    let source = match origin.layer {
        Layer::Env => format!("environment variable {}", origin.source),
        Layer::Cli => format!("command-line flag {}", origin.source),
        _ => origin.source.clone(),
    };
    Diagnostic::new(message)
        .in_source(source)
        .at(origin.position)
        .for_key(key)
}

fn build(merged: &Merged, root: &Path, errors: &mut Vec<Diagnostic>) -> Settings {
    let mut builder = Builder {
        merged,
        errors: Vec::new(),
    };
    let permission_mode = builder.required(&["permission_mode"], |text| {
        text.parse::<PermissionMode>()
            .map_err(|error| error.to_string())
    });
    let plans_text = builder.text(&["plans_directory"]);
    let plans_directory = match resolve_inside_root(root, &plans_text.value) {
        Ok(resolved) => Sourced::new(resolved, plans_text.origin.clone()),
        Err(outside) => {
            builder.errors.push(origin_diagnostic(
                &plans_text.origin,
                "plans_directory",
                format!(
                    "{:?} resolves to {}, which is outside the project root {}",
                    plans_text.value,
                    outside.resolved.display(),
                    outside.root.display()
                ),
            ));
            Sourced::new(outside.resolved, plans_text.origin.clone())
        }
    };
    let store = resolve_store(builder.merged, root, &mut builder.errors);
    let approver = builder.required(&["approver"], |text| {
        match Responder::parse(text).map_err(|error| error.to_string())? {
        Responder::Lead => Err(
            "the main agent's approver is \"human\" or \"policy:FILE\"; \"lead\" is for teammates"
                .to_string(),
        ),
        Responder::Hook(_) => Err(
            "the main agent's approver is \"human\" or \"policy:FILE\"; \"hook:NAME\" decides \
             teammates' plans, in a team file"
                .to_string(),
        ),
        other => Ok(other),
    }
    });
    let plan = builder.mode_settings("plan");
    let act = builder.mode_settings("act");
    builder.check_openai_models(&plan, &act);
    let settings = Settings {
        project_root: root.to_path_buf(),
        permission_mode,
        permissions: merged.rules.clone(),
        plans_directory,
        store,
        approver,
        auto_gate: builder.required(&["auto_gate"], |text| text.parse::<AutoGate>()),
        auto_gate_denial_limit: builder.count(&["auto_gate_denial_limit"]),
        instructions_max_bytes: builder.count(&["instructions_max_bytes"]),
        plan,
        act,
        anthropic: builder.provider("anthropic", root),
        openai: builder.provider("openai", root),
        script: builder.provider("script", root),
        models: builder.models(),
        budgets: Budgets {
            agent: builder.limits("agent"),
            run: builder.limits("run"),
            run_duration_secs: merged.count(&["budgets", "run", "duration_secs"]),
        },
        mailbox: MailboxSettings {
            max_body_bytes: builder.count(&["mailbox", "max_body_bytes"]),
            sync: builder.required(&["mailbox", "sync"], |text| text.parse::<MailboxSync>()),
            busy_timeout_ms: builder.count(&["mailbox", "busy_timeout_ms"]),
            pipelined_sync: builder.flag(&["mailbox", "pipelined_sync"]),
        },
        compaction: builder.compaction(),
        limits: builder.agent_limits(),
        sandbox: builder.sandbox(root),
        telemetry: TelemetrySettings {
            enabled: builder.flag(&["telemetry", "enabled"]),
            content: builder.flag(&["telemetry", "content"]),
        },
        mcp: builder.mcp(),
        additional_directories: Vec::new(),
        bypass_disabled: merged
            .get(&["permissions", "disable_bypass_permissions_mode"])
            .map(|(_, origin)| origin.clone()),
        trust: crate::trust::TrustDecision::trusted_by_caller(),
        skipped: Vec::new(),
        snapshot: SettingsSnapshot::default(),
        hooks: crate::hooks::Hooks::default(),
        entries: entries(merged),
    };
    errors.append(&mut builder.errors);
    check_cost_budgets(&settings, errors);
    check_approver_policy(&settings, errors);
    check_positive_counts(&settings, errors);
    settings
}

/// `store` or its alias `store_path`, whichever the higher layer set; a URL is kept as it is,
/// a path is resolved against the project root.
/// A value with `://` in it that is not a PostgreSQL URL is an error (a misspelt scheme must
/// not become a file named after the URL).
fn resolve_store(
    merged: &Merged,
    root: &Path,
    errors: &mut Vec<Diagnostic>,
) -> Sourced<StoreLocation> {
    let named = merged.text(&["store"]);
    let alias = merged.text(&["store_path"]);
    let (chosen, key) = match (named, alias) {
        (Some(named), Some(alias)) if alias.origin.layer > named.origin.layer => {
            (alias, "store_path")
        }
        (Some(named), _) => (named, "store"),
        (None, Some(alias)) => (alias, "store_path"),
        (None, None) => (
            Sourced::new(".muster/muster.db".to_string(), Origin::built_in()),
            "store",
        ),
    };
    if let Some(scheme) = crate::store_url::unknown_scheme(&chosen.value) {
        errors.push(origin_diagnostic(
            &chosen.origin,
            key,
            format!(
                "{} is a URL with the scheme `{scheme}://`, which muster does not know: the \
                 store is a file path, or a URL whose scheme is one of {}",
                crate::store_url::mask_password(chosen.value.trim()),
                crate::store_url::KNOWN_SCHEMES
                    .iter()
                    .map(|known| format!("`{known}://`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    let location = if crate::store_url::is_postgres_url(&chosen.value) {
        StoreLocation::Postgres(chosen.value.trim().to_string())
    } else {
        StoreLocation::File(paths::normalize(&root.join(&chosen.value)))
    };
    Sourced::new(location, chosen.origin)
}

/// Counts that cannot be 0: a summary of no tokens, a threshold of no prompt, an agent stuck
/// before its call failed at all.
fn check_positive_counts(settings: &Settings, errors: &mut Vec<Diagnostic>) {
    let compaction = &settings.compaction;
    let positive = [
        ("limits.stuck_after", Some(&settings.limits.stuck_after)),
        (
            "compaction.summary_max_tokens",
            Some(&compaction.summary_max_tokens),
        ),
        (
            "compaction.max_prompt_tokens",
            compaction.max_prompt_tokens.as_ref(),
        ),
    ];
    for (key, value) in positive {
        if let Some(value) = value.filter(|value| value.value == 0) {
            errors.push(origin_diagnostic(
                &value.origin,
                key,
                "expected a positive integer, found 0",
            ));
        }
    }
}

/// A policy named by `approver` must exist and be valid.
fn check_approver_policy(settings: &Settings, errors: &mut Vec<Diagnostic>) {
    let Responder::Policy(file) = &settings.approver.value else {
        return;
    };
    let path = settings.project_root.join(file);
    if !path.is_file() {
        errors.push(origin_diagnostic(
            &settings.approver.origin,
            "approver",
            format!("policy file {} not found", path.display()),
        ));
        return;
    }
    match crate::policy::Policy::load(&path) {
        Ok(_) => {}
        Err(ConfigError::Io { path, source }) => errors.push(origin_diagnostic(
            &settings.approver.origin,
            "approver",
            format!("cannot read policy file {}: {source}", path.display()),
        )),
        Err(ConfigError::Invalid(found)) => errors.extend(found),
    }
}

/// A cost budget needs prices for every model it would count.
fn check_cost_budgets(settings: &Settings, errors: &mut Vec<Diagnostic>) {
    let budgets = [
        ("budgets.agent.cost_usd", &settings.budgets.agent.cost_usd),
        ("budgets.run.cost_usd", &settings.budgets.run.cost_usd),
    ];
    let mut unpriced: Vec<(&str, Vec<&str>)> = Vec::new();
    for (mode_name, mode) in [("plan", &settings.plan), ("act", &settings.act)] {
        let model = mode.model.value.as_str();
        if settings
            .models
            .get(model)
            .is_some_and(ModelInfo::has_prices)
        {
            continue;
        }
        match unpriced.iter_mut().find(|(name, _)| *name == model) {
            Some((_, modes)) => modes.push(mode_name),
            None => unpriced.push((model, vec![mode_name])),
        }
    }
    for (key, budget) in budgets {
        let Some(budget) = budget else { continue };
        for (model, modes) in &unpriced {
            let modes = if modes.len() > 1 {
                "plan and act modes".to_string()
            } else {
                format!("{} mode", modes.join(""))
            };
            errors.push(origin_diagnostic(
                &budget.origin,
                key,
                format!(
                    "a cost budget needs model prices, but model `{model}` ({modes}) has no price_in and price_out; add [models.\"{model}\"] prices or remove the cost budget"
                ),
            ));
        }
    }
}

fn entries(merged: &Merged) -> Vec<SettingEntry> {
    let mut entries: Vec<SettingEntry> = merged
        .leaves
        .iter()
        .map(|(path, (value, origin))| {
            let masked = path.last().is_some_and(|leaf| leaf == "api_key");
            let is_store =
                matches!(path.as_slice(), [key] if key == "store" || key == "store_path");
            SettingEntry {
                key: display_path(path),
                value: match (masked, is_store, value.to_json()) {
                    (true, _, _) => serde_json::Value::from("********"),
                    // A store URL's password never reaches `config show`.
                    (false, true, serde_json::Value::String(text)) => {
                        serde_json::Value::from(crate::store_url::mask_password(&text))
                    }
                    (false, _, json) => json,
                },
                origin: origin.clone(),
            }
        })
        .collect();
    for behavior in [
        crate::rule::RuleBehavior::Allow,
        crate::rule::RuleBehavior::Ask,
        crate::rule::RuleBehavior::Deny,
    ] {
        for rule in merged.rules.list(behavior) {
            entries.push(SettingEntry {
                key: format!("permissions.{}", behavior.as_str()),
                value: serde_json::Value::from(rule.value.as_str()),
                origin: rule.origin.clone(),
            });
        }
    }
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_enums_round_trip_through_serde() {
        for effort in ReasoningEffort::ALL {
            let json = serde_json::to_string(effort).unwrap();
            assert_eq!(
                serde_json::from_str::<ReasoningEffort>(&json).unwrap(),
                *effort
            );
        }
        let error = serde_json::from_str::<ProviderKind>("\"gemini\"").unwrap_err();
        assert!(
            error
                .to_string()
                .contains("expected one of anthropic, openai, script")
        );
    }
}
