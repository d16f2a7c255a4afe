//! Claude Code's hooks, read from the `hooks` key of its three settings files (see
//! [`crate::settings::claude`]): event → matcher groups → handlers, as Claude Code shapes them
//! (`{"hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"…"}]}]}}`).
//!
//! A project's hooks run code the repository chose, so they apply only in a trusted project
//! (the loader gates them, [`crate::settings`]); the trust hash covers every file inside the
//! project a project hook's command names ([`named_files`]) and `.claude/hooks/**`. Each hook
//! from a project file keeps the hashes of the files it names, so the runner refuses to run it
//! when one changed since (in the agent's workspace, a worktree included). Handler types and
//! events muster cannot honour are warnings, once per file. `disableAllHooks: true` in any of
//! the files turns every hook off (it only narrows).
//!
//! Beside Claude Code's keys, muster reads its own `planReviewers` (an object of named
//! `command` handlers): the programs a team file's `approver = "hook:NAME"` names, which decide
//! a teammate's `plan_approval_request` (they are gated, hashed and turned off like hooks).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::diagnostic::Diagnostic;
use crate::origin::{Layer, Origin};

/// The events muster fires, by Claude Code's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum HookEvent {
    PreToolUse,
    PostToolUse,
    PostToolUseFailure,
    PermissionRequest,
    UserPromptSubmit,
    SessionStart,
    SessionEnd,
    Stop,
    SubagentStart,
    SubagentStop,
    Notification,
    TeammateIdle,
    TaskCreated,
    TaskCompleted,
    PreCompact,
    PostCompact,
}

/// Every event muster fires.
pub const HOOK_EVENTS: [HookEvent; 16] = [
    HookEvent::PreToolUse,
    HookEvent::PostToolUse,
    HookEvent::PostToolUseFailure,
    HookEvent::PermissionRequest,
    HookEvent::UserPromptSubmit,
    HookEvent::SessionStart,
    HookEvent::SessionEnd,
    HookEvent::Stop,
    HookEvent::SubagentStart,
    HookEvent::SubagentStop,
    HookEvent::Notification,
    HookEvent::TeammateIdle,
    HookEvent::TaskCreated,
    HookEvent::TaskCompleted,
    HookEvent::PreCompact,
    HookEvent::PostCompact,
];

/// Claude Code's events muster has no moment for: read, warned about, never run.
const EVENTS_NOT_FIRED: [&str; 14] = [
    "Setup",
    "UserPromptExpansion",
    "PermissionDenied",
    "PostToolBatch",
    "MessageDisplay",
    "StopFailure",
    "InstructionsLoaded",
    "ConfigChange",
    "CwdChanged",
    "FileChanged",
    "WorktreeCreate",
    "WorktreeRemove",
    "Elicitation",
    "ElicitationResult",
];

/// Claude Code's default timeout of a command hook.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

impl HookEvent {
    /// Claude Code's name of the event (`hook_event_name`).
    pub fn name(self) -> &'static str {
        match self {
            HookEvent::PreToolUse => "PreToolUse",
            HookEvent::PostToolUse => "PostToolUse",
            HookEvent::PostToolUseFailure => "PostToolUseFailure",
            HookEvent::PermissionRequest => "PermissionRequest",
            HookEvent::UserPromptSubmit => "UserPromptSubmit",
            HookEvent::SessionStart => "SessionStart",
            HookEvent::SessionEnd => "SessionEnd",
            HookEvent::Stop => "Stop",
            HookEvent::SubagentStart => "SubagentStart",
            HookEvent::SubagentStop => "SubagentStop",
            HookEvent::Notification => "Notification",
            HookEvent::TeammateIdle => "TeammateIdle",
            HookEvent::TaskCreated => "TaskCreated",
            HookEvent::TaskCompleted => "TaskCompleted",
            HookEvent::PreCompact => "PreCompact",
            HookEvent::PostCompact => "PostCompact",
        }
    }

    pub fn parse(name: &str) -> Option<HookEvent> {
        HOOK_EVENTS.into_iter().find(|event| event.name() == name)
    }

    /// Claude Code's timeout when a handler names none: 30 s for `UserPromptSubmit`, 1.5 s
    /// for `SessionEnd` (its budget), 600 s otherwise.
    pub fn default_timeout(self) -> Duration {
        match self {
            HookEvent::UserPromptSubmit => Duration::from_secs(30),
            HookEvent::SessionEnd => Duration::from_millis(1500),
            _ => DEFAULT_TIMEOUT,
        }
    }
}

impl std::fmt::Display for HookEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A matcher group's `matcher`: what it matches on depends on the event (the tool name for
/// tool events, `source` for `SessionStart`, the agent type for subagent events, …).
#[derive(Debug, Clone)]
pub enum HookMatcher {
    /// `*`, `""` or no matcher.
    All,
    /// Letters, digits, `_` and `|` only: exact names.
    Exact(Vec<String>),
    /// Any other character: a regular expression, searched in the subject.
    Regex(regex::Regex),
}

impl HookMatcher {
    /// Parses a matcher as Claude Code reads it.
    pub fn parse(text: &str) -> Result<HookMatcher, regex::Error> {
        if text.is_empty() || text == "*" {
            return Ok(HookMatcher::All);
        }
        if text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '|')
        {
            return Ok(HookMatcher::Exact(
                text.split('|')
                    .filter(|name| !name.is_empty())
                    .map(str::to_owned)
                    .collect(),
            ));
        }
        regex::Regex::new(text).map(HookMatcher::Regex)
    }

    /// Whether the matcher selects `subject` (`None`: an event without a subject, which
    /// every matcher selects).
    pub fn matches(&self, subject: Option<&str>) -> bool {
        let Some(subject) = subject else {
            return true;
        };
        match self {
            HookMatcher::All => true,
            HookMatcher::Exact(names) => names.iter().any(|name| name == subject),
            HookMatcher::Regex(regex) => regex.is_match(subject),
        }
    }

    /// The matcher as written (`*` for all).
    pub fn text(&self) -> String {
        match self {
            HookMatcher::All => "*".to_owned(),
            HookMatcher::Exact(names) => names.join("|"),
            HookMatcher::Regex(regex) => regex.as_str().to_owned(),
        }
    }
}

impl Serialize for HookMatcher {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text())
    }
}

/// Whether a hook's process runs in the sandbox of the agent that fired it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HookSandbox {
    /// The firing agent's profile (read-only in plan mode, for read-only agents and `Plan`).
    Agent,
    /// Unconfined: only a user-level hook may ask for it (`"sandbox": "off"`).
    Off,
}

/// What a hook does when it fails (cannot start, times out, exits with another code than 0
/// or 2, prints junk): Claude Code's behaviour (`continue`), or `block` (a failed guard
/// refuses the call, stops the prompt, keeps the agent working, as exit 2 would).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnFailure {
    Continue,
    Block,
}

/// An `http` handler: the event's JSON is POSTed to `url`, and the answer's body is read as a
/// `command` handler's stdout (exit 0); another status is a non-blocking failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HttpHook {
    pub url: String,
    /// Headers as written; `$NAME` and `${NAME}` of `allowed_env_vars` are replaced by that
    /// variable's value when the request is sent (any other stays as written).
    pub headers: Vec<(String, String)>,
    pub allowed_env_vars: Vec<String>,
}

/// One handler: a `command` (run with `sh -c`), or an `http` one.
#[derive(Debug, Clone, Serialize)]
pub struct HookHandler {
    /// Run with `sh -c` in the agent's workspace; for an `http` handler, its URL.
    pub command: String,
    /// For an `http` handler: where and how the event is posted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpHook>,
    pub timeout: Duration,
    pub sandbox: HookSandbox,
    pub on_failure: OnFailure,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
}

/// A file inside the project that a project hook's command names, with its SHA-256 (hex)
/// when the hook was read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NamedFile {
    /// Relative to the project root (and so to a teammate's worktree).
    pub relative: String,
    pub sha256: String,
    /// Named by an absolute path: the file that runs wherever the agent works (a teammate's
    /// worktree, a worker's clone), so the one checked. `None`: named relative to the project
    /// directory, so checked inside the agent's workspace.
    pub absolute: Option<PathBuf>,
}

/// One hook as configured: its event, matcher, handler and the file (and layer) it came from.
#[derive(Debug, Clone, Serialize)]
pub struct ConfiguredHook {
    pub event: HookEvent,
    pub matcher: HookMatcher,
    pub handler: HookHandler,
    pub origin: Origin,
    /// The project's files the command names, for a hook from a project file: the runner
    /// refuses the hook when one changed since it was read.
    pub named_files: Vec<NamedFile>,
}

impl ConfiguredHook {
    /// Whether the hook came from a file the user owns (not the repository's).
    pub fn user_level(&self) -> bool {
        self.origin.layer == Layer::User
    }

    /// One line for `muster config show` and `muster check`: event, matcher, command, timeout,
    /// sandbox, failure handling and the file.
    pub fn describe(&self) -> String {
        let sandbox = match (self.handler.sandbox, &self.handler.http) {
            (_, Some(_)) => "posted by muster, no sandbox",
            (HookSandbox::Agent, None) => "in the firing agent's sandbox",
            (HookSandbox::Off, None) => "UNCONFINED (\"sandbox\": \"off\" in the user's file)",
        };
        let what = match &self.handler.http {
            Some(http) => format!("POST {}", http.url),
            None => self.handler.command.clone(),
        };
        let on_failure = match self.handler.on_failure {
            OnFailure::Continue => "",
            OnFailure::Block => "; a failure blocks",
        };
        format!(
            "{} [{}] `{what}` (timeout {} s, {sandbox}{on_failure})  # {}",
            self.event,
            self.matcher.text(),
            self.handler.timeout.as_secs_f64(),
            self.origin
        )
    }

    /// The JSON `muster config show --json` and `muster check --json` give.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "event": self.event.name(),
            "matcher": self.matcher.text(),
            "type": if self.handler.http.is_some() { "http" } else { "command" },
            "command": self.handler.command,
            "timeout_secs": self.handler.timeout.as_secs_f64(),
            "sandbox": self.handler.sandbox,
            "on_failure": self.handler.on_failure,
            "layer": self.origin.layer,
            "source": self.origin.source,
            "named_files": self.named_files.iter().map(|f| &f.relative).collect::<Vec<_>>(),
        })
    }
}

/// The settings key of muster's plan reviewer hooks, in Claude Code's settings files.
pub const PLAN_REVIEWERS_KEY: &str = "planReviewers";

/// muster's key in the user's `~/.claude/settings.json`: `"guardFailures": "block"` makes
/// every `PreToolUse` hook's failure (cannot start, timeout, exit 1, junk, too much output)
/// refuse the call, as `"onFailure": "block"` on each handler would. Only the user's own file
/// may set it (it narrows, but it is the user's policy for every project).
pub const GUARD_FAILURES_KEY: &str = "guardFailures";

/// A plan reviewer hook (`planReviewers.NAME`): a `command` handler that decides the plans of
/// the teammates whose approver is `hook:NAME`.
#[derive(Debug, Clone, Serialize)]
pub struct PlanReviewer {
    pub name: String,
    pub handler: HookHandler,
    pub origin: Origin,
    /// The project's files the command names (a project file's reviewer only).
    pub named_files: Vec<NamedFile>,
}

impl PlanReviewer {
    /// One line for `muster config show`.
    pub fn describe(&self) -> String {
        let sandbox = match self.handler.sandbox {
            HookSandbox::Agent => "read-only sandbox",
            HookSandbox::Off => "UNCONFINED (\"sandbox\": \"off\" in the user's file)",
        };
        format!(
            "plan reviewer {} `{}` (timeout {} s, {sandbox})  # {}",
            self.name,
            self.handler.command,
            self.handler.timeout.as_secs_f64(),
            self.origin
        )
    }

    /// The JSON `muster config show --json` gives.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "name": self.name,
            "command": self.handler.command,
            "timeout_secs": self.handler.timeout.as_secs_f64(),
            "sandbox": self.handler.sandbox,
            "layer": self.origin.layer,
            "source": self.origin.source,
            "named_files": self.named_files.iter().map(|f| &f.relative).collect::<Vec<_>>(),
        })
    }

    /// The reviewer as a hook, for the runner's checks (named files) and process.
    pub fn as_hook(&self) -> ConfiguredHook {
        ConfiguredHook {
            event: HookEvent::PermissionRequest,
            matcher: HookMatcher::All,
            handler: self.handler.clone(),
            origin: self.origin.clone(),
            named_files: self.named_files.clone(),
        }
    }
}

/// Every hook the settings define, or none when `disableAllHooks` is set.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Hooks {
    pub hooks: Vec<ConfiguredHook>,
    /// The plan reviewers (`planReviewers`), by name; a later file's reviewer of a name
    /// replaces an earlier one's (Claude Code's file order).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub plan_reviewers: Vec<PlanReviewer>,
    /// The file that set `disableAllHooks: true`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disabled_by: Option<Origin>,
    /// The user's file that set `"guardFailures": "block"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guard_failures_block_by: Option<Origin>,
}

impl Hooks {
    /// Adds one file's hooks (files in Claude Code's order: user, project, local).
    /// A file already added (the home directory's `.claude/settings.json` when the project
    /// is the home directory) is added once.
    pub fn add_file(&mut self, file: FileHooks) {
        let source = file.origin.as_ref().map(|origin| origin.source.as_str());
        let seen = |origin: &Origin| Some(origin.source.as_str()) == source;
        if self.hooks.iter().any(|hook| seen(&hook.origin))
            || self.plan_reviewers.iter().any(|r| seen(&r.origin))
        {
            return;
        }
        self.hooks.extend(file.hooks);
        for reviewer in file.plan_reviewers {
            self.plan_reviewers
                .retain(|known| known.name != reviewer.name);
            self.plan_reviewers.push(reviewer);
        }
        if file.guard_failures_block && self.guard_failures_block_by.is_none() {
            self.guard_failures_block_by = file.origin.clone();
        }
        if file.disable_all && self.disabled_by.is_none() {
            self.disabled_by = file.origin;
        }
        // The user's choice holds for the guards of every file, read before or after it.
        if self.guard_failures_block_by.is_some() {
            for hook in &mut self.hooks {
                if hook.event == HookEvent::PreToolUse {
                    hook.handler.on_failure = OnFailure::Block;
                }
            }
        }
    }

    /// The hooks of `event` whose matcher selects `subject`, in the files' order.
    pub fn matching(&self, event: HookEvent, subject: Option<&str>) -> Vec<&ConfiguredHook> {
        if self.disabled_by.is_some() {
            return Vec::new();
        }
        self.hooks
            .iter()
            .filter(|hook| hook.event == event && hook.matcher.matches(subject))
            .collect()
    }

    /// The plan reviewer `name` (none while `disableAllHooks` is set).
    pub fn plan_reviewer(&self, name: &str) -> Option<&PlanReviewer> {
        if self.disabled_by.is_some() {
            return None;
        }
        self.plan_reviewers
            .iter()
            .find(|reviewer| reviewer.name == name)
    }

    /// Whether any hook is configured for `event` (and hooks are on).
    pub fn has(&self, event: HookEvent) -> bool {
        self.disabled_by.is_none() && self.hooks.iter().any(|hook| hook.event == event)
    }
}

/// What one settings file says about hooks.
#[derive(Debug, Clone, Default)]
pub struct FileHooks {
    pub hooks: Vec<ConfiguredHook>,
    pub plan_reviewers: Vec<PlanReviewer>,
    /// `disableAllHooks: true`.
    pub disable_all: bool,
    /// `"guardFailures": "block"` in the user's own file.
    pub guard_failures_block: bool,
    /// The file's origin (for `disabled_by`).
    pub origin: Option<Origin>,
}

/// Reads the `hooks` and `disableAllHooks` keys of one Claude Code settings file. `root` is
/// the project root (files a command names inside it are hashed); `origin` the file's.
/// Errors are the shape's (a list where an object must be, …); what muster cannot honour is
/// a warning, once per file.
pub fn read_hooks(
    json: &Value,
    origin: &Origin,
    root: &Path,
) -> Result<(FileHooks, Vec<Diagnostic>), Diagnostic> {
    let mut found = FileHooks {
        disable_all: json.get("disableAllHooks").and_then(Value::as_bool) == Some(true),
        origin: Some(origin.clone()),
        hooks: Vec::new(),
        plan_reviewers: Vec::new(),
        guard_failures_block: false,
    };
    let mut not_honoured = BTreeSet::new();
    match json.get(GUARD_FAILURES_KEY).and_then(Value::as_str) {
        Some("block") if origin.layer == Layer::User => found.guard_failures_block = true,
        Some("block") => {
            not_honoured.insert(format!(
                "`\"{GUARD_FAILURES_KEY}\": \"block\"` (only ~/.claude/settings.json may set it)"
            ));
        }
        _ => {}
    }
    let error = |what: String| Diagnostic::new(what).in_source(&origin.source);
    found.plan_reviewers = read_plan_reviewers(json, origin, root, &mut not_honoured)?;
    let Some(events) = json.get("hooks") else {
        return Ok((found, not_honoured_warning(not_honoured, origin)));
    };
    let Some(events) = events.as_object() else {
        return Err(error(
            "`hooks` must be an object of event names, e.g. {\"PreToolUse\": [...]}".into(),
        ));
    };
    for (name, groups) in events {
        let Some(event) = HookEvent::parse(name) else {
            not_honoured.insert(if EVENTS_NOT_FIRED.contains(&name.as_str()) {
                format!("event `{name}` (muster does not fire it)")
            } else {
                format!("event `{name}` (not a Claude Code hook event)")
            });
            continue;
        };
        let Some(groups) = groups.as_array() else {
            return Err(error(format!(
                "`hooks.{name}` must be an array of matcher groups ({{\"matcher\": …, \"hooks\": [...]}})"
            )));
        };
        for group in groups {
            let matcher_text = group.get("matcher").and_then(Value::as_str).unwrap_or("");
            let matcher = HookMatcher::parse(matcher_text).map_err(|cause| {
                error(format!(
                    "`hooks.{name}` matcher `{matcher_text}` is not a valid regular expression: {cause}"
                ))
            })?;
            let Some(handlers) = group.get("hooks").and_then(Value::as_array) else {
                return Err(error(format!(
                    "`hooks.{name}`: each matcher group needs `hooks`, an array of handlers"
                )));
            };
            for handler in handlers {
                let kind = handler.get("type").and_then(Value::as_str).unwrap_or("");
                let key = match kind {
                    "command" => "command",
                    "http" => "url",
                    _ => {
                        not_honoured.insert(format!(
                            "handler type `{kind}` (muster runs `command` and `http`)"
                        ));
                        continue;
                    }
                };
                let Some(command) = handler.get(key).and_then(Value::as_str) else {
                    return Err(error(format!(
                        "`hooks.{name}`: a `{kind}` handler needs `{key}`, a string"
                    )));
                };
                let http = match kind {
                    "http" => Some(read_http(handler, command).map_err(|why| {
                        error(format!("`hooks.{name}`: the `http` handler {why}"))
                    })?),
                    _ => None,
                };
                let mut read = read_handler(handler, event, command, origin, &mut not_honoured)?;
                let named_files = if origin.layer == Layer::User || http.is_some() {
                    Vec::new()
                } else {
                    hashed_named_files(command, root)
                };
                read.http = http;
                let handler = read;
                found.hooks.push(ConfiguredHook {
                    event,
                    matcher: matcher.clone(),
                    handler,
                    origin: origin.clone(),
                    named_files,
                });
            }
        }
    }
    Ok((found, not_honoured_warning(not_honoured, origin)))
}

/// What of one file's hooks muster does not honour, as one warning (none when nothing).
fn not_honoured_warning(not_honoured: BTreeSet<String>, origin: &Origin) -> Vec<Diagnostic> {
    (!not_honoured.is_empty())
        .then(|| {
            Diagnostic::new(format!(
                "hooks not applied: {}",
                not_honoured.into_iter().collect::<Vec<_>>().join(", ")
            ))
            .in_source(&origin.source)
        })
        .into_iter()
        .collect()
}

/// Reads `planReviewers`: `{"NAME": {"type": "command", "command": "…", "timeout": 60}}`.
fn read_plan_reviewers(
    json: &Value,
    origin: &Origin,
    root: &Path,
    not_honoured: &mut BTreeSet<String>,
) -> Result<Vec<PlanReviewer>, Diagnostic> {
    let error = |what: String| Diagnostic::new(what).in_source(&origin.source);
    let Some(reviewers) = json.get(PLAN_REVIEWERS_KEY) else {
        return Ok(Vec::new());
    };
    let Some(reviewers) = reviewers.as_object() else {
        return Err(error(format!(
            "`{PLAN_REVIEWERS_KEY}` must be an object of named handlers, e.g. \
             {{\"strict\": {{\"type\": \"command\", \"command\": \"…\"}}}}"
        )));
    };
    let mut found = Vec::new();
    for (name, handler) in reviewers {
        if crate::Responder::parse(&format!("hook:{name}")).is_err() {
            return Err(error(format!(
                "`{PLAN_REVIEWERS_KEY}.{name}`: a reviewer's name is letters, digits, `-` and `_`"
            )));
        }
        let kind = handler.get("type").and_then(Value::as_str).unwrap_or("");
        if kind != "command" {
            not_honoured.insert(format!(
                "plan reviewer `{name}` of type `{kind}` (muster runs `command`)"
            ));
            continue;
        }
        let Some(command) = handler.get("command").and_then(Value::as_str) else {
            return Err(error(format!(
                "`{PLAN_REVIEWERS_KEY}.{name}`: a `command` handler needs `command`, a string"
            )));
        };
        // A reviewer answers a request: Claude Code's `PermissionRequest` timeout, and a
        // failure never approves, so `onFailure` has nothing to change.
        let handler = read_handler(
            handler,
            HookEvent::PermissionRequest,
            command,
            origin,
            not_honoured,
        )?;
        let named_files = if origin.layer == Layer::User {
            Vec::new()
        } else {
            hashed_named_files(command, root)
        };
        found.push(PlanReviewer {
            name: name.clone(),
            handler,
            origin: origin.clone(),
            named_files,
        });
    }
    Ok(found)
}

fn read_handler(
    handler: &Value,
    event: HookEvent,
    command: &str,
    origin: &Origin,
    not_honoured: &mut BTreeSet<String>,
) -> Result<HookHandler, Diagnostic> {
    let timeout = match handler.get("timeout") {
        None => event.default_timeout(),
        Some(value) => match value.as_f64() {
            Some(seconds) if seconds > 0.0 && seconds.is_finite() => {
                Duration::from_secs_f64(seconds)
            }
            _ => {
                return Err(Diagnostic::new(format!(
                    "`hooks.{event}`: `timeout` of `{command}` must be a positive number of seconds"
                ))
                .in_source(&origin.source));
            }
        },
    };
    let sandbox = match handler.get("sandbox").and_then(Value::as_str) {
        Some("off") if origin.layer == Layer::User => HookSandbox::Off,
        Some("off") => {
            not_honoured.insert(
                "`\"sandbox\": \"off\"` (only a hook in ~/.claude/settings.json may run unconfined)"
                    .into(),
            );
            HookSandbox::Agent
        }
        _ => HookSandbox::Agent,
    };
    let on_failure = match handler.get("onFailure").and_then(Value::as_str) {
        Some("block") => OnFailure::Block,
        _ => OnFailure::Continue,
    };
    for key in ["async", "once", "if", "args"] {
        if handler.get(key).is_some() {
            not_honoured.insert(format!("handler field `{key}`"));
        }
    }
    Ok(HookHandler {
        command: command.to_owned(),
        http: None,
        timeout,
        sandbox,
        on_failure,
        status_message: handler
            .get("statusMessage")
            .and_then(Value::as_str)
            .map(str::to_owned),
    })
}

/// An `http` handler's `url` (http or https), `headers` (strings) and `allowedEnvVars`.
fn read_http(handler: &Value, url: &str) -> Result<HttpHook, String> {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(format!("`url` {url:?} must start with http:// or https://"));
    }
    let mut headers = Vec::new();
    if let Some(given) = handler.get("headers") {
        let Some(given) = given.as_object() else {
            return Err("`headers` must be an object of strings".into());
        };
        for (name, value) in given {
            let Some(value) = value.as_str() else {
                return Err(format!("header `{name}` must be a string"));
            };
            headers.push((name.clone(), value.to_owned()));
        }
    }
    let allowed_env_vars = match handler.get("allowedEnvVars") {
        None => Vec::new(),
        Some(Value::Array(names)) => names
            .iter()
            .map(|name| {
                name.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| "`allowedEnvVars` must be an array of strings".to_owned())
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("`allowedEnvVars` must be an array of strings".into()),
    };
    Ok(HttpHook {
        url: url.to_owned(),
        headers,
        allowed_env_vars,
    })
}

/// The variable Claude Code (and muster) sets to the project directory for hooks.
pub const PROJECT_DIR_VAR: &str = "CLAUDE_PROJECT_DIR";

/// The files inside `root` that `command` names, relative to it: every word (split as a shell
/// would, then at `;|&<>()`) that, with `$CLAUDE_PROJECT_DIR` replaced by the root and read
/// relative to it, is an existing regular file inside the root. Interpreter arguments count
/// (`python3 tools/guard.py`), so do `./x` and absolute paths.
pub fn named_files(command: &str, root: &Path) -> Vec<String> {
    named_words(command, root)
        .into_iter()
        .map(|(relative, _)| relative)
        .collect()
}

/// [`named_files`], each with the absolute path it was named by, if it was.
fn named_words(command: &str, root: &Path) -> Vec<(String, Option<PathBuf>)> {
    let canonical_root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let root_text = root.display().to_string();
    let words = shlex::split(command).unwrap_or_else(|| {
        command
            .split_whitespace()
            .map(|word| word.replace(['"', '\''], ""))
            .collect()
    });
    let mut found: Vec<(String, Option<PathBuf>)> = Vec::new();
    for word in &words {
        for part in word.split([';', '|', '&', '<', '>', '(', ')']) {
            let absolute = Path::new(part).is_absolute();
            let part = part
                .replace("${CLAUDE_PROJECT_DIR}", &root_text)
                .replace("$CLAUDE_PROJECT_DIR", &root_text);
            if part.is_empty() || part.starts_with('-') {
                continue;
            }
            let path = root.join(&part);
            let Ok(canonical) = std::fs::canonicalize(&path) else {
                continue;
            };
            if !canonical.is_file() {
                continue;
            }
            if let Ok(relative) = canonical.strip_prefix(&canonical_root) {
                let relative = relative.display().to_string();
                if !found.iter().any(|(known, _)| *known == relative) {
                    found.push((relative, absolute.then(|| canonical.clone())));
                }
            }
        }
    }
    found
}

fn hashed_named_files(command: &str, root: &Path) -> Vec<NamedFile> {
    named_words(command, root)
        .into_iter()
        .filter_map(|(relative, absolute)| {
            let bytes = std::fs::read(root.join(&relative)).ok()?;
            Some(NamedFile {
                sha256: sha256_hex(&bytes),
                relative,
                absolute,
            })
        })
        .collect()
}

/// The SHA-256 of `bytes`, in hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// Whether the files `hook` names are what they were when it was read — inside `workspace`, or
/// where an absolute path named them; `Err` names the first one that changed or went.
pub fn named_files_unchanged(hook: &ConfiguredHook, workspace: &Path) -> Result<(), String> {
    for file in &hook.named_files {
        let path: PathBuf = match &file.absolute {
            Some(absolute) => absolute.clone(),
            None => workspace.join(&file.relative),
        };
        match std::fs::read(&path) {
            Ok(bytes) if sha256_hex(&bytes) == file.sha256 => {}
            Ok(_) => {
                return Err(format!(
                    "{} changed since the project was trusted",
                    file.relative
                ));
            }
            Err(error) => return Err(format!("{}: {error}", file.relative)),
        }
    }
    Ok(())
}

/// The commands of every hook and plan reviewer in a Claude Code settings file's text (for the
/// trust hash).
pub fn commands_in(text: &str) -> Vec<String> {
    let Ok(json) = serde_json::from_str::<Value>(text) else {
        return Vec::new();
    };
    let hooks = json
        .get("hooks")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|events| events.values())
        .filter_map(Value::as_array)
        .flatten()
        .filter_map(|group| group.get("hooks").and_then(Value::as_array))
        .flatten();
    let reviewers = json
        .get(PLAN_REVIEWERS_KEY)
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|reviewers| reviewers.values());
    hooks
        .chain(reviewers)
        .filter_map(|handler| handler.get("command").and_then(Value::as_str))
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(layer: Layer) -> Origin {
        Origin {
            layer,
            source: "/p/.claude/settings.json".into(),
            position: None,
        }
    }

    #[test]
    fn matchers_follow_claude_codes_table() {
        let cases: [(&str, Option<&str>, bool); 11] = [
            ("", Some("Bash"), true),
            ("*", Some("Edit"), true),
            ("Bash", Some("Bash"), true),
            ("Bash", Some("BashOutput"), false),
            ("Edit|Write", Some("Write"), true),
            ("Edit|Write", Some("Read"), false),
            ("mcp__.*", Some("mcp__github__search"), true),
            ("mcp__.*", Some("Bash"), false),
            ("Notebook.*", Some("NotebookEdit"), true),
            ("startup", Some("resume"), false),
            ("Bash", None, true),
        ];
        for (text, subject, expected) in cases {
            let matcher = HookMatcher::parse(text).unwrap();
            assert_eq!(matcher.matches(subject), expected, "{text} on {subject:?}");
        }
        assert!(HookMatcher::parse("(").is_err());
    }

    #[test]
    fn hooks_are_read_with_defaults_and_what_is_not_honoured_warned_once() {
        let json: Value = serde_json::from_str(
            r#"{"disableAllHooks": false, "hooks": {
                "PreToolUse": [{"matcher": "Bash", "hooks": [
                    {"type": "command", "command": "guard.sh", "timeout": 5, "onFailure": "block"},
                    {"type": "prompt", "prompt": "x"},
                    {"type": "command", "command": "x", "sandbox": "off"}]}],
                "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "ctx"}]}],
                "FileChanged": [], "Bogus": [], "SessionEnd": []}}"#,
        )
        .unwrap();
        let (found, warnings) =
            read_hooks(&json, &origin(Layer::Project), Path::new("/nowhere")).unwrap();
        assert!(!found.disable_all);
        let hooks = found.hooks;
        assert_eq!(hooks.len(), 3);
        assert_eq!(hooks[0].handler.timeout, Duration::from_secs(5));
        assert_eq!(hooks[0].handler.on_failure, OnFailure::Block);
        assert_eq!(
            hooks[1].handler.sandbox,
            HookSandbox::Agent,
            "a project hook stays confined"
        );
        assert_eq!(hooks[2].event, HookEvent::UserPromptSubmit);
        assert_eq!(hooks[2].handler.timeout, Duration::from_secs(30));
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        let said = warnings[0].to_string();
        for needle in ["`prompt`", "FileChanged", "`Bogus`", "sandbox"] {
            assert!(said.contains(needle), "{needle} in {said}");
        }
        for fired in ["UserPromptSubmit", "SessionEnd"] {
            assert!(!said.contains(fired), "{fired} is fired now: {said}");
        }
        let (user, _) = read_hooks(&json, &origin(Layer::User), Path::new("/nowhere")).unwrap();
        assert_eq!(user.hooks[1].handler.sandbox, HookSandbox::Off);

        let bad: Value = serde_json::from_str(r#"{"hooks": {"Stop": {}}}"#).unwrap();
        let error = read_hooks(&bad, &origin(Layer::User), Path::new("/")).unwrap_err();
        assert!(
            error.to_string().contains("array of matcher groups"),
            "{error}"
        );
    }

    #[test]
    fn the_files_a_command_names_inside_the_project_are_found_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join(".claude/hooks")).unwrap();
        std::fs::create_dir_all(root.join("tools")).unwrap();
        std::fs::write(root.join(".claude/hooks/guard.sh"), "exit 0").unwrap();
        std::fs::write(root.join("tools/audit.py"), "print()").unwrap();
        let command = "\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/guard.sh && python3 tools/audit.py \
                       >/tmp/x; cat /etc/hostname";
        assert_eq!(
            named_files(command, root),
            [".claude/hooks/guard.sh", "tools/audit.py"]
        );
        let json: Value = serde_json::json!({"hooks": {"PreToolUse": [{"hooks": [
            {"type": "command", "command": command}]}]}});
        let (found, _) = read_hooks(&json, &origin(Layer::Project), root).unwrap();
        let hook = &found.hooks[0];
        assert_eq!(hook.named_files.len(), 2);
        assert!(named_files_unchanged(hook, root).is_ok());
        std::fs::write(root.join("tools/audit.py"), "import os").unwrap();
        let error = named_files_unchanged(hook, root).unwrap_err();
        assert!(error.contains("tools/audit.py changed"), "{error}");
        assert_eq!(commands_in(&json.to_string()), [command]);
    }

    #[test]
    fn plan_reviewers_are_read_named_hashed_and_a_later_file_replaces_a_name() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("review.py"), "print()").unwrap();
        let json: Value = serde_json::json!({"planReviewers": {
            "strict": {"type": "command", "command": "python3 review.py", "timeout": 7},
            "lenient": {"type": "prompt", "prompt": "x"}}});
        let (found, warnings) = read_hooks(&json, &origin(Layer::Project), root).unwrap();
        assert_eq!(found.plan_reviewers.len(), 1);
        let strict = &found.plan_reviewers[0];
        assert_eq!(strict.name, "strict");
        assert_eq!(strict.handler.timeout, Duration::from_secs(7));
        assert_eq!(strict.named_files[0].relative, "review.py");
        assert!(warnings[0].to_string().contains("plan reviewer `lenient`"));
        assert_eq!(commands_in(&json.to_string()), ["python3 review.py"]);
        let mut hooks = Hooks::default();
        hooks.add_file(found);
        let user: Value = serde_json::json!({"planReviewers": {
            "strict": {"type": "command", "command": "mine"}}});
        let mut user_origin = origin(Layer::ProjectLocal);
        user_origin.source = "/p/.claude/settings.local.json".into();
        hooks.add_file(read_hooks(&user, &user_origin, root).unwrap().0);
        assert_eq!(
            hooks.plan_reviewer("strict").unwrap().handler.command,
            "mine"
        );
        assert!(hooks.plan_reviewer("lenient").is_none());
        // The user's `guardFailures` makes every guard's failure block, whichever file has it.
        let guard: Value = serde_json::json!({"hooks": {"PreToolUse": [{"hooks": [
            {"type": "command", "command": "guard"}]}]}, "guardFailures": "block"});
        let (project, said) = read_hooks(&guard, &origin(Layer::Project), root).unwrap();
        assert!(!project.guard_failures_block);
        assert!(said[0].to_string().contains("guardFailures"), "{said:?}");
        hooks.add_file(project);
        assert_eq!(hooks.hooks[0].handler.on_failure, OnFailure::Continue);
        let mut user_origin = origin(Layer::User);
        user_origin.source = "/home/u/.claude/settings.json".into();
        let user_json: Value = serde_json::json!({"guardFailures": "block"});
        hooks.add_file(read_hooks(&user_json, &user_origin, root).unwrap().0);
        assert_eq!(hooks.hooks[0].handler.on_failure, OnFailure::Block);
        for bad in [
            serde_json::json!({"planReviewers": []}),
            serde_json::json!({"planReviewers": {"a b": {"type": "command", "command": "x"}}}),
        ] {
            assert!(
                read_hooks(&bad, &origin(Layer::User), root).is_err(),
                "{bad}"
            );
        }
    }

    /// An `http` handler: its URL, headers and allowed variables are read; a URL that is not
    /// http(s) or headers that are not strings are refused.
    #[test]
    fn http_handlers_are_read_and_bad_ones_refused() {
        let handler = serde_json::json!({"type": "http", "url": "http://127.0.0.1:9/hook",
            "headers": {"Authorization": "Bearer $T"}, "allowedEnvVars": ["T"]});
        let read = read_http(&handler, "http://127.0.0.1:9/hook").unwrap();
        assert_eq!(
            read,
            HttpHook {
                url: "http://127.0.0.1:9/hook".into(),
                headers: vec![("Authorization".into(), "Bearer $T".into())],
                allowed_env_vars: vec!["T".into()],
            }
        );
        assert!(read_http(&handler, "file:///etc/passwd").is_err());
        let bad_headers = serde_json::json!({"headers": {"X": 1}});
        assert!(read_http(&bad_headers, "https://x").is_err());
        let bad_vars = serde_json::json!({"allowedEnvVars": "T"});
        assert!(read_http(&bad_vars, "https://x").is_err());
    }
}
