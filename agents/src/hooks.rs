//! The hook runner: Claude Code's hooks (read by [`muster_config::hooks`]) fired at an agent's
//! moments, for every agent kind. The hooks of an event whose matcher selects the subject run
//! concurrently, each a process of its own ([`process`]) in the firing agent's workspace and
//! sandbox profile; their endings are read and combined in [`outcome`].
//!
//! Beside them, the callbacks a program registered with the front end that drives the run
//! ([`callbacks`]: the Agent SDKs' hook callbacks) fire at the same moments, with the same
//! input, and their answers combine with the hooks' endings.
//!
//! What the runtime does with an outcome (refusing a call, keeping an agent working, …) and
//! what it commits is the runtime's: see `runtime/hook_points.rs`.

pub mod callbacks;
pub mod http;
pub mod outcome;
pub mod plan_review;
pub mod process;

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;

use muster_config::PermissionMode;
use muster_config::hooks::{ConfiguredHook, HookEvent, Hooks, named_files_unchanged};
use serde_json::{Map, Value};

pub use callbacks::{HookCallback, HookCallbacks};
pub use outcome::{HookDecision, HookOutcome, HookPermission, HookVerdict, interpret};
pub use plan_review::{PlanReview, PlanToReview};
pub use process::{MAX_OUTPUT, ProcessEnd, ProcessSpec, run_hook_process};

use crate::sandbox::{Sandbox, SandboxProfile};

/// The run's hooks, and what their processes run with.
#[derive(Debug, Clone, Default)]
pub struct HookRunner {
    hooks: Arc<Hooks>,
    sandbox: Option<Arc<Sandbox>>,
    /// The base environment of hook processes (the run's, as `Bash` gets it).
    environment: Vec<(OsString, OsString)>,
    /// The callbacks of the program driving the run, when it registered some.
    callbacks: Option<Arc<dyn HookCallbacks>>,
    /// The trampoline that starts unconfined hooks (see [`ProcessSpec::launcher`]).
    launcher: Option<Vec<OsString>>,
}

/// The agent that fires an event: who it is (for the stdin JSON), where it works and in which
/// sandbox profile its hooks run.
#[derive(Debug, Clone)]
pub struct FiringAgent<'a> {
    pub run_id: &'a str,
    pub agent_id: &'a str,
    /// The lead: no `agent_id`/`agent_type` in the JSON, as in Claude Code's main session.
    pub is_lead: bool,
    /// The agent's definition name (`agent_type`).
    pub agent_type: &'a str,
    /// A teammate's name (its id).
    pub teammate_name: Option<&'a str>,
    pub workspace: &'a Path,
    pub mode: PermissionMode,
    pub profile: SandboxProfile,
    /// The JSONL of the agent's conversation, when one is written.
    pub transcript_path: Option<&'a Path>,
    /// With traces on, the W3C `traceparent` of the span the hook runs under (the tool call
    /// that fired it, else the agent), given to its process as `TRACEPARENT`.
    pub traceparent: Option<String>,
}

impl HookRunner {
    pub fn new(
        hooks: Arc<Hooks>,
        sandbox: Option<Arc<Sandbox>>,
        environment: Vec<(OsString, OsString)>,
    ) -> HookRunner {
        HookRunner {
            hooks,
            sandbox,
            environment,
            callbacks: None,
            launcher: None,
        }
    }

    /// The runner with `launcher`, the trampoline (`muster sandbox-exec`) through which
    /// unconfined hooks start, so they die with muster as confined ones do.
    pub fn with_launcher(mut self, launcher: Option<Vec<OsString>>) -> HookRunner {
        self.launcher = launcher;
        self
    }

    /// The runner with the callbacks of the program driving the run (none: only the
    /// settings' hooks).
    pub fn with_callbacks(mut self, callbacks: Option<Arc<dyn HookCallbacks>>) -> HookRunner {
        self.callbacks = callbacks;
        self
    }

    /// No hooks at all.
    pub fn none() -> HookRunner {
        HookRunner::default()
    }

    pub fn hooks(&self) -> &Hooks {
        &self.hooks
    }

    /// Whether any hook or callback of `event` could run (and the caller should build its
    /// input).
    pub fn has(&self, event: HookEvent) -> bool {
        self.hooks.has(event)
            || self
                .callbacks
                .as_ref()
                .is_some_and(|callbacks| callbacks.has(event))
    }

    /// Whether a hook or callback of `event` selects `subject`.
    pub fn selects(&self, event: HookEvent, subject: Option<&str>) -> bool {
        !self.hooks.matching(event, subject).is_empty()
            || self
                .callbacks
                .as_ref()
                .is_some_and(|callbacks| !callbacks.matching(event, subject).is_empty())
    }

    /// Whether any hook or callback is configured at all (an agent's transcript file is
    /// written only then).
    pub fn any(&self) -> bool {
        !self.hooks.hooks.is_empty()
            || self
                .callbacks
                .as_ref()
                .is_some_and(|callbacks| callbacks.any())
    }

    /// The stdin JSON of `event` for `agent`: Claude Code's common fields, then `fields`.
    pub fn input(event: HookEvent, agent: &FiringAgent<'_>, fields: Map<String, Value>) -> Value {
        let mut input = Map::new();
        input.insert("session_id".into(), agent.run_id.into());
        input.insert(
            "transcript_path".into(),
            agent
                .transcript_path
                .map_or(Value::Null, |path| path.display().to_string().into()),
        );
        input.insert("cwd".into(), agent.workspace.display().to_string().into());
        input.insert("hook_event_name".into(), event.name().into());
        input.insert("permission_mode".into(), agent.mode.as_str().into());
        if !agent.is_lead {
            input.insert("agent_id".into(), agent.agent_id.into());
            input.insert("agent_type".into(), agent.agent_type.into());
        }
        if let Some(name) = agent.teammate_name {
            input.insert("teammate_name".into(), name.into());
        }
        input.extend(fields);
        Value::Object(input)
    }

    /// Runs the hooks and callbacks of `event` that select `subject`, concurrently, and
    /// combines their endings (the hooks' first, then the callbacks', in order). A project
    /// hook whose named files changed since trust does not run: that is a blocking failure.
    pub async fn fire(
        &self,
        event: HookEvent,
        subject: Option<&str>,
        agent: &FiringAgent<'_>,
        fields: Map<String, Value>,
    ) -> HookOutcome {
        let matching = self.hooks.matching(event, subject);
        let called = match &self.callbacks {
            Some(callbacks) => callbacks.matching(event, subject),
            None => Vec::new(),
        };
        if matching.is_empty() && called.is_empty() {
            return HookOutcome::default();
        }
        let input = Arc::new(Self::input(event, agent, fields));
        let stdin = input.to_string();
        let runs = matching
            .into_iter()
            .map(|hook| self.run_one(event, hook, agent, stdin.as_bytes()));
        let calls = self.callbacks.iter().flat_map(|callbacks| {
            called.iter().map(|callback| {
                callbacks::run_callback(callbacks.clone(), event, callback.clone(), input.clone())
            })
        });
        let (mut verdicts, answers) = futures_util::future::join(
            futures_util::future::join_all(runs),
            futures_util::future::join_all(calls),
        )
        .await;
        verdicts.extend(answers);
        HookOutcome::combine(verdicts)
    }

    async fn run_one(
        &self,
        event: HookEvent,
        hook: &ConfiguredHook,
        agent: &FiringAgent<'_>,
        stdin: &[u8],
    ) -> HookVerdict {
        let command = &hook.handler.command;
        if let Err(changed) = named_files_unchanged(hook, agent.workspace) {
            return HookVerdict {
                block: Some(format!(
                    "hook `{command}` did not run: {changed}; run `muster trust` after checking it"
                )),
                ..HookVerdict::default()
            };
        }
        if let Some(http) = &hook.handler.http {
            let end = http::post_hook(http, stdin, hook.handler.timeout, &self.environment).await;
            tracing::debug!(
                event = event.name(),
                url = http.url,
                ?end,
                "http hook answered"
            );
            return interpret(event, command, hook.handler.on_failure, &end);
        }
        let environment = with_traceparent(&self.environment, agent.traceparent.as_deref());
        let spec = ProcessSpec {
            command,
            stdin,
            workspace: agent.workspace,
            environment: &environment,
            timeout: hook.handler.timeout,
            sandbox: self
                .sandbox
                .as_deref()
                .map(|sandbox| (sandbox, agent.profile)),
            hook_sandbox: hook.handler.sandbox,
            launcher: self.launcher.as_deref(),
        };
        let end = run_hook_process(&spec).await;
        tracing::debug!(event = event.name(), command, ?end, "hook ran");
        interpret(event, command, hook.handler.on_failure, &end)
    }
}

/// The hooks' environment with `TRACEPARENT` set to the firing span, when traces are on (a
/// `TRACEPARENT` the run itself was given is replaced, as for `Bash`).
fn with_traceparent<'e>(
    environment: &'e [(OsString, OsString)],
    traceparent: Option<&str>,
) -> std::borrow::Cow<'e, [(OsString, OsString)]> {
    let Some(traceparent) = traceparent else {
        return std::borrow::Cow::Borrowed(environment);
    };
    let mut environment: Vec<(OsString, OsString)> = environment
        .iter()
        .filter(|(name, _)| name != crate::trace_ids::TRACEPARENT)
        .cloned()
        .collect();
    environment.push((crate::trace_ids::TRACEPARENT.into(), traceparent.into()));
    std::borrow::Cow::Owned(environment)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use muster_config::hooks::{HookHandler, HookMatcher, HookSandbox, OnFailure};
    use muster_config::{Layer, Origin};

    use super::*;

    fn hook(event: HookEvent, matcher: &str, command: &str, timeout: Duration) -> ConfiguredHook {
        ConfiguredHook {
            event,
            matcher: HookMatcher::parse(matcher).unwrap(),
            handler: HookHandler {
                command: command.into(),
                http: None,
                timeout,
                sandbox: HookSandbox::Agent,
                on_failure: OnFailure::Continue,
                status_message: None,
            },
            origin: Origin {
                layer: Layer::User,
                source: "test".into(),
                position: None,
            },
            named_files: Vec::new(),
        }
    }

    fn runner(hooks: Vec<ConfiguredHook>) -> HookRunner {
        let path: Vec<(OsString, OsString)> = std::env::vars_os()
            .filter(|(name, _)| name == "PATH")
            .collect();
        HookRunner::new(
            Arc::new(Hooks {
                hooks,
                plan_reviewers: Vec::new(),
                disabled_by: None,
                guard_failures_block_by: None,
            }),
            None,
            path,
        )
    }

    fn agent(workspace: &Path) -> FiringAgent<'_> {
        FiringAgent {
            run_id: "run-1",
            agent_id: "worker",
            is_lead: false,
            agent_type: "general-purpose",
            teammate_name: Some("worker"),
            workspace,
            mode: PermissionMode::Default,
            profile: SandboxProfile::WorkspaceWrite,
            transcript_path: None,
            traceparent: None,
        }
    }

    async fn fire_one(command: &str, timeout: Duration, workspace: &Path) -> HookOutcome {
        let runner = runner(vec![hook(HookEvent::PreToolUse, "Bash", command, timeout)]);
        let mut fields = Map::new();
        fields.insert("tool_name".into(), "Bash".into());
        fields.insert(
            "tool_input".into(),
            serde_json::json!({"command": "rm -rf x"}),
        );
        runner
            .fire(
                HookEvent::PreToolUse,
                Some("Bash"),
                &agent(workspace),
                fields,
            )
            .await
    }

    /// Real processes for each row of the failure table; nothing panics, and only exit 2 blocks.
    #[tokio::test]
    async fn the_failure_table_with_real_processes() {
        let dir = tempfile::tempdir().unwrap();
        let second = Duration::from_secs(20);
        let cases: [(&str, Duration, Option<&str>, Option<&str>); 6] = [
            (
                "echo 'rm is not allowed' >&2; exit 2",
                second,
                Some("rm is not allowed"),
                None,
            ),
            (
                "echo oops >&2; exit 1",
                second,
                None,
                Some("exited with 1: oops"),
            ),
            (
                "no-such-command-anywhere",
                second,
                None,
                Some("exited with 127"),
            ),
            ("echo 'not json {'", second, None, None),
            (
                "sleep 30",
                Duration::from_millis(300),
                None,
                Some("timed out after 0.3 s"),
            ),
            (
                "head -c 2000000 /dev/zero",
                second,
                None,
                Some("more than 1 MB"),
            ),
        ];
        for (command, timeout, block, message) in cases {
            let outcome = fire_one(command, timeout, dir.path()).await;
            assert_eq!(outcome.ran, 1, "{command}");
            assert_eq!(outcome.block.as_deref(), block, "{command}");
            match message {
                Some(needle) => assert!(
                    outcome.messages.iter().any(|m| m.contains(needle)),
                    "{command}: {:?}",
                    outcome.messages
                ),
                None => assert!(
                    outcome.messages.is_empty(),
                    "{command}: {:?}",
                    outcome.messages
                ),
            }
        }
        let missing = dir.path().join("gone");
        let outcome = fire_one("true", second, &missing).await;
        assert!(
            outcome
                .messages
                .iter()
                .any(|m| m.contains("could not start")),
            "{:?}",
            outcome.messages
        );
    }

    /// A hung hook's whole process group is killed at its timeout.
    #[tokio::test]
    async fn a_hung_hook_is_killed_with_its_process_group() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("child.pid");
        let command = format!("sleep 300 & echo $! > {}; wait", pid_file.display());
        // A failure guard only: without the group kill the hook's child holds it for 300 s.
        let outcome = tokio::time::timeout(
            Duration::from_secs(60),
            fire_one(&command, Duration::from_millis(500), dir.path()),
        )
        .await
        .expect("the timed-out hook's process group was not killed");
        assert!(
            outcome.messages[0].contains("timed out"),
            "{:?}",
            outcome.messages
        );
        let pid: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // SIGKILL went to the group before `fire` returned; the child dies at once (a zombie
        // until init reaps it). The deadline only guards against a hang.
        let alive = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|stat| !stat.contains(") Z"))
                .unwrap_or(false)
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while alive() && std::time::Instant::now() < deadline {
            tokio::task::yield_now().await;
        }
        assert!(!alive(), "the hook's background child {pid} survived");
    }

    /// The stdin JSON carries Claude Code's fields and `CLAUDE_PROJECT_DIR` is the workspace;
    /// matching hooks run concurrently and their decisions combine.
    #[tokio::test]
    async fn stdin_environment_and_concurrency() {
        let dir = tempfile::tempdir().unwrap();
        let seen = dir.path().join("seen.json");
        let barrier = dir.path().join("barrier");
        let record = format!(
            "cat > {seen}; echo \"$CLAUDE_PROJECT_DIR\" > {seen}.dir",
            seen = seen.display()
        );
        // Each of the two waits for the other: they finish only when run concurrently.
        let first = format!(
            "touch {b}.1; while [ ! -e {b}.2 ]; do sleep 0.01; done; echo '{{\"hookSpecificOutput\":{{\"permissionDecision\":\"allow\"}}}}'",
            b = barrier.display()
        );
        let second = format!(
            "touch {b}.2; while [ ! -e {b}.1 ]; do sleep 0.01; done; echo '{{\"hookSpecificOutput\":{{\"permissionDecision\":\"ask\",\"permissionDecisionReason\":\"check\"}}}}'",
            b = barrier.display()
        );
        let timeout = Duration::from_secs(20);
        let runner = runner(vec![
            hook(HookEvent::PreToolUse, "Bash", &record, timeout),
            hook(HookEvent::PreToolUse, "Ba.*", &first, timeout),
            hook(HookEvent::PreToolUse, "", &second, timeout),
            hook(HookEvent::PreToolUse, "Edit", "exit 2", timeout),
            hook(HookEvent::PostToolUse, "Bash", "exit 2", timeout),
        ]);
        let mut fields = Map::new();
        fields.insert("tool_name".into(), "Bash".into());
        fields.insert("tool_use_id".into(), "toolu_1".into());
        let outcome = runner
            .fire(
                HookEvent::PreToolUse,
                Some("Bash"),
                &agent(dir.path()),
                fields,
            )
            .await;
        assert_eq!(outcome.ran, 3);
        assert_eq!(
            outcome.tool_permission(),
            Some((HookPermission::Ask, "check".to_owned()))
        );
        let input: Value = serde_json::from_str(&std::fs::read_to_string(&seen).unwrap()).unwrap();
        assert_eq!(input["session_id"], "run-1");
        assert_eq!(input["hook_event_name"], "PreToolUse");
        assert_eq!(input["permission_mode"], "default");
        assert_eq!(input["agent_id"], "worker");
        assert_eq!(input["agent_type"], "general-purpose");
        assert_eq!(input["tool_use_id"], "toolu_1");
        assert_eq!(input["cwd"], dir.path().display().to_string());
        let project_dir = std::fs::read_to_string(format!("{}.dir", seen.display())).unwrap();
        assert_eq!(project_dir.trim(), dir.path().display().to_string());
    }

    /// A program's callbacks: each answer, given by id.
    #[derive(Debug)]
    struct Answers(Vec<(HookCallback, Result<Value, String>)>);

    impl HookCallbacks for Answers {
        fn has(&self, event: HookEvent) -> bool {
            event == HookEvent::PreToolUse
        }
        fn any(&self) -> bool {
            true
        }
        fn matching(&self, event: HookEvent, _: Option<&str>) -> Vec<HookCallback> {
            match event {
                HookEvent::PreToolUse => self.0.iter().map(|(c, _)| c.clone()).collect(),
                _ => Vec::new(),
            }
        }
        fn call(&self, callback: &HookCallback, input: &Value) -> Result<Value, String> {
            assert_eq!(input["tool_name"], "Bash");
            let answer = self.0.iter().find(|(c, _)| c.id == callback.id);
            answer.map_or_else(|| Err("unknown".into()), |(_, a)| a.clone())
        }
    }

    fn callback(id: &str, on_failure: OnFailure) -> HookCallback {
        HookCallback {
            id: id.into(),
            timeout: Duration::from_secs(5),
            on_failure,
        }
    }

    /// Callbacks' answers combine with the hooks' endings: a callback's deny beats a hook's
    /// allow, a failed callback is a message, or a block under `onFailure: block`.
    #[tokio::test]
    async fn a_programs_callbacks_combine_with_the_hooks() {
        let dir = tempfile::tempdir().unwrap();
        let allow = r#"echo '{"hookSpecificOutput":{"permissionDecision":"allow"}}'"#;
        let deny = serde_json::json!({"hookSpecificOutput": {
            "permissionDecision": "deny", "permissionDecisionReason": "not here"}});
        let fire = |answers: Answers| {
            let runner = runner(vec![hook(
                HookEvent::PreToolUse,
                "Bash",
                allow,
                Duration::from_secs(20),
            )])
            .with_callbacks(Some(Arc::new(answers)));
            let workspace = dir.path().to_path_buf();
            async move {
                let mut fields = Map::new();
                fields.insert("tool_name".into(), "Bash".into());
                runner
                    .fire(
                        HookEvent::PreToolUse,
                        Some("Bash"),
                        &agent(&workspace),
                        fields,
                    )
                    .await
            }
        };
        let denied = fire(Answers(vec![
            (callback("hook_0", OnFailure::Continue), Ok(deny)),
            (
                callback("hook_1", OnFailure::Continue),
                Err("it raised".into()),
            ),
        ]))
        .await;
        assert_eq!(denied.ran, 3);
        assert_eq!(
            denied.tool_permission(),
            Some((HookPermission::Deny, "not here".to_owned()))
        );
        assert!(
            denied
                .messages
                .iter()
                .any(|m| m.contains("hook_1") && m.contains("it raised")),
            "{:?}",
            denied.messages
        );
        let blocked = fire(Answers(vec![(
            callback("hook_2", OnFailure::Block),
            Err("no answer within 5 s".into()),
        )]))
        .await;
        assert_eq!(
            blocked.tool_permission().map(|(p, _)| p),
            Some(HookPermission::Deny)
        );
        assert!(blocked.block.unwrap().contains("hook_2"));
    }
}
