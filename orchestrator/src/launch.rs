//! What a run is started with: the typed requests of `muster run` and `muster resume`
//! ([`RunFlags`], [`ResumeFlags`]; the clap types in `cli/` turn into these), the launch
//! options single and team runs share and store with the run ([`RunLaunch`]), and `--output`.

use std::path::{Path, PathBuf};

use muster_agents::trace_ids::{TRACEPARENT, TraceParent};
use muster_config::settings::{CliOverrides, ModelInfo};
use muster_config::{PermissionMode, Responder, TrustDecision};
use serde::{Deserialize, Serialize};

use crate::exit::{Exit, ExitError};
use crate::project::Project;
use crate::stored_policies::StoredPolicies;
use crate::stream_json::now_ms;

/// The launch options single and team runs share (flattened into either's stored JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunLaunch {
    pub workspace: PathBuf,
    /// The main agent's (a team's lead's) mode.
    pub permission_mode: PermissionMode,
    pub approver: String,
    pub plan_provider: String,
    pub plan_model: String,
    pub act_provider: String,
    pub act_model: String,
    pub base_url: Option<String>,
    pub cassette: Option<PathBuf>,
    pub strict: bool,
    pub record: Option<PathBuf>,
    /// The deadline of the run's current stretch of running, milliseconds since the Unix
    /// epoch: its start (or its resume) plus `max_duration_secs`. Time stopped does not
    /// count: a resume restarts it ([`RunLaunch::apply_resume_flags`]).
    pub deadline_ms: Option<i64>,
    /// The run's `--max-duration` (or `budgets.run.duration_secs`), in seconds; a resume's
    /// `--max-duration` replaces it for that resume and the next. Absent in runs stored
    /// before it was kept (their stored deadline stays as it was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_duration_secs: Option<u64>,
    /// Every policy the run's approvers name, as read at its start: its decisions use these
    /// copies (a run stored before they were kept reads the files).
    #[serde(default, skip_serializing_if = "StoredPolicies::is_empty")]
    pub policies: StoredPolicies,
    /// Whether the project was trusted at the run's start, the hash it was decided on and what
    /// was skipped: a resume, a fork and a worker gate the settings by this, never by a file an
    /// agent may have edited since (absent in runs stored before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust: Option<StoredTrust>,
    /// The settings files (Claude Code's and muster's) as read at the run's start: a resume,
    /// a fork and a continue read these copies, never a file an agent may have edited since
    /// (absent in runs stored before they were kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings_files: Option<muster_config::settings::SettingsSnapshot>,
    /// The `TRACEPARENT` the run was started under: its trace's parent on every resume, fork
    /// and worker (see `docs/traces.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// Settings given as flags that the run keeps for its resumes and continues (`muster
    /// claude`'s `--max-turns`, `--allowedTools`, …): (key, value, flag).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flag_settings: Vec<(String, String, String)>,
    /// The session id a Claude Code program gave the run (`--session-id`): an alias that
    /// `--resume` takes and the compatible output names the session by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_alias: Option<String>,
    /// `muster claude --system-prompt`: the main agent's prompt in place of its definition's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// `muster claude --append-system-prompt`: text after the main agent's own prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub append_system_prompt: Option<String>,
    /// The model catalogue's prices as the run's start read them: every process of the run —
    /// a resume, a fork, a worker running a teammate — prices responses (and the run's
    /// budget ledger) with these, not with its own settings (absent in runs stored before they
    /// were kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prices: Option<PriceSnapshot>,
}

/// The priced models of a catalogue: model → `[price_in, price_out, price_cache_read,
/// price_cache_write]`, US dollars per million tokens (`null`: not set).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PriceSnapshot(pub std::collections::BTreeMap<String, [Option<f64>; 4]>);

impl PriceSnapshot {
    /// The prices of every model of `models` that has any.
    pub fn of(models: &std::collections::BTreeMap<String, ModelInfo>) -> PriceSnapshot {
        PriceSnapshot(
            models
                .iter()
                .map(|(name, info)| {
                    let prices = [
                        info.price_in,
                        info.price_out,
                        info.price_cache_read,
                        info.price_cache_write,
                    ];
                    (name.clone(), prices)
                })
                .filter(|(_, prices)| prices.iter().any(Option::is_some))
                .collect(),
        )
    }

    /// Puts these prices into `models`: a model of the snapshot is priced as the run's start
    /// priced it (its other fields, such as the context window, stay this process's), and a
    /// model priced here but not in the snapshot loses its prices (the run had none for it).
    pub fn apply(&self, models: &mut std::collections::BTreeMap<String, ModelInfo>) {
        for (name, info) in models.iter_mut() {
            if !self.0.contains_key(name) {
                info.price_in = None;
                info.price_out = None;
                info.price_cache_read = None;
                info.price_cache_write = None;
            }
        }
        for (name, [price_in, price_out, cache_read, cache_write]) in &self.0 {
            let info = models.entry(name.clone()).or_default();
            info.price_in = *price_in;
            info.price_out = *price_out;
            info.price_cache_read = *cache_read;
            info.price_cache_write = *cache_write;
        }
    }
}

/// A run's trust decision as stored with its launch options.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredTrust {
    #[serde(flatten)]
    pub decision: TrustDecision,
    /// What trust gated at the start (`key = value (origin)`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
}

impl StoredTrust {
    /// What the run's settings are gated by and why: what was decided at the start, except
    /// that a project trusted then whose covered files changed since is not trusted now (the
    /// change may be an agent's); with a warning saying so.
    pub fn decision_now(&self, root: &Path) -> anyhow::Result<(TrustDecision, Option<String>)> {
        let stored = &self.decision;
        if !stored.trusted {
            let mut decision = stored.clone();
            decision.why = format!("{} when the run started", stored.why);
            return Ok((decision, None));
        }
        let hashes = muster_config::trust::file_hashes(root)
            .map_err(|e| ExitError::new(Exit::Usage, e.to_string()))?;
        let hash = muster_config::trust::project_hash(&hashes);
        if hash == stored.hash {
            return Ok((stored.clone(), None));
        }
        let why = format!(
            "trusted when the run started, but the files trust covers changed since (hash {} then, {} now)",
            short(&stored.hash),
            short(&hash)
        );
        let warning = format!(
            "{why}: the run goes on without what they set that widens access; start a new run after `{}` to use them",
            muster_config::trust::TRUST_COMMAND
        );
        Ok((
            TrustDecision {
                trusted: false,
                hash,
                why,
                mcp_servers: None,
            },
            Some(warning),
        ))
    }

    fn from_settings(settings: &muster_config::Settings) -> StoredTrust {
        StoredTrust {
            decision: settings.trust.clone(),
            skipped: settings
                .skipped
                .iter()
                .map(|skipped| format!("{} = {} ({})", skipped.key, skipped.value, skipped.origin))
                .collect(),
        }
    }
}

fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

impl RunLaunch {
    /// From the flags and the loaded settings; `definition_mode` is the main agent's (or the
    /// lead's) own `permissionMode`, which a `--permission-mode` flag overrides.
    pub(crate) fn from_flags(
        flags: &RunFlags,
        project: &Project,
        definition_mode: Option<PermissionMode>,
    ) -> anyhow::Result<RunLaunch> {
        let settings = &project.settings;
        let permission_mode = match &flags.permission_mode {
            Some(_) => settings.permission_mode.value,
            None => definition_mode.unwrap_or(settings.permission_mode.value),
        };
        if let Some(refused) =
            settings.refuse_disabled_mode(permission_mode, "the main agent's definition")
        {
            return Err(ExitError::new(Exit::Usage, refused).into());
        }
        let workspace = match &flags.workspace {
            Some(dir) => std::path::absolute(dir)?,
            None => project.root.path().to_path_buf(),
        };
        let max_duration =
            flags
                .max_duration
                .or(settings.budgets.run_duration_secs.as_ref().map(|s| s.value));
        Ok(RunLaunch {
            workspace,
            permission_mode,
            approver: settings.approver.value.to_string(),
            plan_provider: settings.plan.provider.value.as_str().to_owned(),
            plan_model: settings.plan.model.value.clone(),
            act_provider: settings.act.provider.value.as_str().to_owned(),
            act_model: settings.act.model.value.clone(),
            base_url: flags.base_url.clone(),
            cassette: settings.script.cassette.as_ref().map(|c| c.value.clone()),
            strict: flags.strict,
            record: flags.record.as_ref().map(std::path::absolute).transpose()?,
            deadline_ms: max_duration.map(deadline_after),
            max_duration_secs: max_duration,
            policies: StoredPolicies::read(project.root.path(), [&settings.approver.value])?,
            trust: Some(StoredTrust::from_settings(settings)),
            settings_files: Some(settings.snapshot.clone()),
            traceparent: traceparent_given(project),
            flag_settings: flags.settings.clone(),
            session_alias: flags.session_alias.clone(),
            system_prompt: flags.system_prompt.clone(),
            append_system_prompt: flags.append_system_prompt.clone(),
            prices: Some(PriceSnapshot::of(&settings.models)),
        })
    }

    /// The main agent's own prompt as the launch asks (`--system-prompt`,
    /// `--append-system-prompt`).
    pub(crate) fn own_prompt(&self) -> muster_agents::runtime::OwnPrompt {
        muster_agents::runtime::OwnPrompt {
            replace: self.system_prompt.clone(),
            append: self.append_system_prompt.clone(),
        }
    }

    /// The stored `TRACEPARENT`, read (a stored value was checked when the run started).
    pub(crate) fn trace_parent(&self) -> Option<TraceParent> {
        TraceParent::parse(self.traceparent.as_deref()?).ok()
    }

    /// On resume: says which stored policies no longer match their file.
    pub(crate) fn warn_of_changed_policies(&self, root: &Path) {
        for warning in self.policies.changed_since_stored(root) {
            eprintln!("muster: warning: {warning}");
        }
    }

    /// What `muster resume`'s flags override: the base URL, the cassette, the maximum
    /// duration. The deadline starts again from now — with the flag's duration, else the
    /// stored one — so the time a run spent stopped (awaiting a decision, interrupted,
    /// crashed) never counts against it.
    pub(crate) fn apply_resume_flags(&mut self, flags: &ResumeFlags) -> std::io::Result<()> {
        if let Some(url) = &flags.base_url {
            self.base_url = Some(url.clone());
        }
        if let Some(cassette) = &flags.cassette {
            self.cassette = Some(std::path::absolute(cassette)?);
        }
        if flags.max_duration.is_some() {
            self.max_duration_secs = flags.max_duration;
        }
        if let Some(secs) = self.max_duration_secs {
            self.deadline_ms = Some(deadline_after(secs));
        }
        Ok(())
    }

    /// The settings layer a resumed run (single or team) rebuilds from its launch options.
    pub(crate) fn overrides(&self) -> CliOverrides {
        let from = "the run's launch options";
        let mut overrides = CliOverrides::new()
            .set("plan.provider", &self.plan_provider, from)
            .set("plan.model", &self.plan_model, from)
            .set("act.provider", &self.act_provider, from)
            .set("act.model", &self.act_model, from)
            .approver(&self.approver);
        if let Some(url) = &self.base_url {
            overrides = overrides.base_url("anthropic", url).base_url("openai", url);
        }
        if let Some(cassette) = &self.cassette {
            overrides = overrides.cassette(cassette.display().to_string());
        }
        for (key, value, flag) in &self.flag_settings {
            overrides = overrides.set(key, value, flag);
        }
        overrides
    }
}

/// The `TRACEPARENT` the process was given, when it reads as one (a malformed one is ignored
/// with a warning: a variable left over in a shell must not stop a run).
fn traceparent_given(project: &Project) -> Option<String> {
    let value = project.process.var(TRACEPARENT)?;
    match TraceParent::parse(value) {
        Ok(parent) => Some(parent.to_string()),
        Err(error) => {
            eprintln!("muster: warning: {error}; the run starts a trace of its own");
            None
        }
    }
}

/// The deadline `secs` seconds from now.
fn deadline_after(secs: u64) -> i64 {
    now_ms() + (secs as i64) * 1000
}

/// What the user asked for on the command line.
#[derive(Debug, Clone, Default)]
pub struct RunFlags {
    pub prompt: String,
    pub team: Option<PathBuf>,
    pub agent: Option<String>,
    pub workspace: Option<PathBuf>,
    pub permission_mode: Option<PermissionMode>,
    pub approver: Option<Responder>,
    pub provider: Option<String>,
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub cassette: Option<PathBuf>,
    pub strict: bool,
    pub record: Option<PathBuf>,
    pub output: OutputFormat,
    pub max_duration: Option<u64>,
    /// The batch line the run is (`"<file>#<id>"`): set only by a batch line's child.
    pub batch_line_id: Option<String>,
    /// `--remote`: the git remote of teammates placed on workers (a team run's).
    pub remote: Option<String>,
    /// Further settings given as flags, kept with the run: (key, value, flag).
    pub settings: Vec<(String, String, String)>,
    /// `muster claude --session-id`: the run's alias.
    pub session_alias: Option<String>,
    /// `muster claude --system-prompt` / `--append-system-prompt` (kept with the run).
    pub system_prompt: Option<String>,
    pub append_system_prompt: Option<String>,
    /// The slash command `prompt` names, chosen before the project loads
    /// ([`crate::command_prompt::choose`]); expanded into the stored prompt.
    pub command: Option<crate::command_prompt::ChosenCommand>,
}

/// Flags of `muster resume`.
#[derive(Debug, Clone, Default)]
pub struct ResumeFlags {
    pub run: Option<String>,
    /// Without a run id: pick among every project's runs, not only this one's.
    pub all_projects: bool,
    pub base_url: Option<String>,
    pub cassette: Option<PathBuf>,
    pub max_duration: Option<u64>,
    pub output: OutputFormat,
}

/// `--output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    #[default]
    Text,
    Json,
    /// `partial`: with `--include-partial`, `model_delta` lines while responses stream.
    StreamJson {
        partial: bool,
    },
}

impl OutputFormat {
    /// `stream-json`, with or without partial messages.
    pub fn is_stream_json(self) -> bool {
        matches!(self, OutputFormat::StreamJson { .. })
    }

    /// Whether `model_delta` lines are printed (`--output stream-json --include-partial`).
    pub fn includes_partial(self) -> bool {
        self == OutputFormat::StreamJson { partial: true }
    }

    /// `--include-partial` applied: refused but with `--output stream-json` (as Claude Code's
    /// `--include-partial-messages`).
    pub fn with_partial(self, include_partial: bool) -> Result<OutputFormat, String> {
        match (self, include_partial) {
            (_, false) => Ok(self),
            (OutputFormat::StreamJson { .. }, true) => {
                Ok(OutputFormat::StreamJson { partial: true })
            }
            (_, true) => Err("--include-partial needs --output stream-json".into()),
        }
    }

    /// `text`, `json` or `stream-json` (what `--output` takes; clap parses it with this).
    pub fn parse(text: &str) -> Result<OutputFormat, String> {
        match text {
            "text" => Ok(OutputFormat::Text),
            "json" => Ok(OutputFormat::Json),
            "stream-json" => Ok(OutputFormat::StreamJson { partial: false }),
            other => Err(format!(
                "expected text, json or stream-json, found {other:?}"
            )),
        }
    }
}

/// `--permission-mode` as clap parses it: every documented spelling (`acceptEdits`,
/// `bypassPermissions`, `dontAsk`, …), with the mode's own error for any other.
pub fn parse_permission_mode(text: &str) -> Result<PermissionMode, String> {
    text.parse::<PermissionMode>().map_err(|e| e.to_string())
}

/// `--approver` as clap parses it: `human`, `lead` or `policy:FILE`.
pub fn parse_approver(text: &str) -> Result<Responder, String> {
    Responder::parse(text).map_err(|error| error.to_string())
}

/// The command-line settings layer of `muster run` (single or team).
pub(crate) fn overrides_from(flags: &RunFlags) -> anyhow::Result<CliOverrides> {
    let mut overrides = CliOverrides::new();
    if let Some(mode) = flags.permission_mode {
        overrides = overrides.permission_mode(mode.to_string());
    }
    if let Some(approver) = &flags.approver {
        overrides = overrides.approver(approver.to_string());
    }
    if let Some(provider) = &flags.provider {
        overrides = overrides.provider(provider);
    }
    if let Some(model) = &flags.model {
        overrides = overrides.model(model);
    }
    if let Some(url) = &flags.base_url {
        overrides = overrides.base_url("anthropic", url).base_url("openai", url);
    }
    if let Some(cassette) = &flags.cassette {
        overrides = overrides.cassette(std::path::absolute(cassette)?.display().to_string());
    }
    for (key, value, flag) in &flags.settings {
        overrides = overrides.set(key, value, flag);
    }
    Ok(overrides)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test assertions fail loudly")]

    use super::*;

    fn stored(root: &Path, trusted: bool) -> StoredTrust {
        let hashes = muster_config::trust::file_hashes(root).unwrap();
        StoredTrust {
            decision: TrustDecision {
                trusted,
                hash: muster_config::trust::project_hash(&hashes),
                why: "as decided".into(),
                mcp_servers: None,
            },
            skipped: Vec::new(),
        }
    }

    /// A resume keeps the decision of the run's start: untrusted stays untrusted whatever the
    /// files say now; trusted holds only while the covered files are the ones it was decided
    /// on. The stored form reads back the same.
    #[test]
    fn a_stored_decision_governs_and_a_changed_file_never_gains_trust() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".muster")).unwrap();
        std::fs::write(dir.path().join(".muster/settings.toml"), "model = \"m\"\n").unwrap();

        let untrusted = stored(dir.path(), false);
        let (now, warning) = untrusted.decision_now(dir.path()).unwrap();
        assert!(!now.trusted && warning.is_none());
        assert_eq!(now.why, "as decided when the run started");

        let trusted = stored(dir.path(), true);
        let (now, warning) = trusted.decision_now(dir.path()).unwrap();
        assert!(now.trusted && warning.is_none());
        std::fs::write(
            dir.path().join(".muster/settings.toml"),
            "[providers.anthropic]\nbase_url = \"http://elsewhere\"\n",
        )
        .unwrap();
        let (now, warning) = trusted.decision_now(dir.path()).unwrap();
        assert!(!now.trusted);
        assert!(warning.unwrap().contains("changed since"), "{}", now.why);

        let json = serde_json::to_value(&trusted).unwrap();
        assert_eq!(json["trusted"], true);
        assert_eq!(
            serde_json::from_value::<StoredTrust>(json).unwrap(),
            trusted
        );
    }
}

#[cfg(test)]
mod price_tests {
    use std::collections::BTreeMap;

    use muster_config::settings::ModelInfo;

    use super::PriceSnapshot;

    fn priced(price_in: f64, price_out: f64) -> ModelInfo {
        ModelInfo {
            context_window: Some(1000),
            price_in: Some(price_in),
            price_out: Some(price_out),
            ..ModelInfo::default()
        }
    }

    /// A process's catalogue priced as the run's start priced it: the snapshot's prices win,
    /// a model the run had no price for is unpriced, a model only the snapshot knows is added,
    /// and what is not a price (the context window) stays this process's.
    #[test]
    fn a_stored_snapshot_prices_a_process_as_the_run_started() {
        let at_start = BTreeMap::from([
            ("a".to_owned(), priced(1.0, 2.0)),
            ("c".to_owned(), priced(5.0, 6.0)),
            ("unpriced".to_owned(), ModelInfo::default()),
        ]);
        let snapshot = PriceSnapshot::of(&at_start);
        assert_eq!(snapshot.0.len(), 2, "{snapshot:?}");
        let stored: PriceSnapshot =
            serde_json::from_value(serde_json::to_value(&snapshot).unwrap()).unwrap();
        assert_eq!(stored, snapshot);

        let mut here = BTreeMap::from([
            (
                "a".to_owned(),
                ModelInfo {
                    context_window: Some(7),
                    ..priced(9.0, 9.0)
                },
            ),
            ("b".to_owned(), priced(3.0, 4.0)),
        ]);
        stored.apply(&mut here);
        // (model, price_in, price_out, context_window)
        let expected = [
            ("a", Some(1.0), Some(2.0), Some(7)),
            ("b", None, None, Some(1000)),
            ("c", Some(5.0), Some(6.0), None),
        ];
        assert_eq!(here.len(), expected.len(), "{here:?}");
        for (model, price_in, price_out, window) in expected {
            let info = &here[model];
            assert_eq!(
                (info.price_in, info.price_out, info.context_window),
                (price_in, price_out, window),
                "{model}"
            );
        }
    }
}
