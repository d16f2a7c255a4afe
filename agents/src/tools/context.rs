//! What a tool call runs with: the workspace, the agent's own plan file, the shutdown signal,
//! output caps, the environment for `Bash`, and where `Bash` reports its process group.

use std::ffi::OsString;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::workspace::{PathError, PathUse, Workspace};
use crate::sandbox::{Sandbox, SandboxProfile};

/// The id of the process group a `Bash` call runs in (the leader's pid).
pub type ProcessGroupId = i32;

/// The future [`ProcessGroupRecorder::record`] returns; an error message stops the command.
pub type RecordFuture<'a> = Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>>;

/// Where `Bash` reports the process group of a command before the command runs. The runtime
/// records it durably (in the `tool_started` record), so a resumed run can kill a group left
/// behind by a crash. The command starts only after `record` returns `Ok`.
pub trait ProcessGroupRecorder: Send + Sync {
    /// Records the group; an `Err` kills the group before the command runs.
    fn record(&self, group: ProcessGroupId) -> RecordFuture<'_>;
}

/// Caps on what tools read and return.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputLimits {
    /// Bytes of text a tool returns at most (per stream for `Bash`).
    pub max_output_bytes: usize,
    /// Files larger than this are read only with `offset`/`limit`.
    pub max_file_bytes: u64,
    /// Lines `Read` returns when no `limit` is given.
    pub default_read_lines: usize,
    /// Characters of one line `Read` and `Grep` return; the rest is cut.
    pub max_line_chars: usize,
    /// Entries `Glob` and `LS` return at most.
    pub max_entries: usize,
    /// `Bash` timeout when the call gives none.
    pub default_bash_timeout: Duration,
    /// The longest `Bash` timeout a call may ask for.
    pub max_bash_timeout: Duration,
}

impl Default for OutputLimits {
    fn default() -> Self {
        Self {
            max_output_bytes: 30_000,
            max_file_bytes: 256 * 1024,
            default_read_lines: 2000,
            max_line_chars: 2000,
            max_entries: 1000,
            default_bash_timeout: Duration::from_secs(120),
            max_bash_timeout: Duration::from_secs(600),
        }
    }
}

/// Tells running tools to stop (the run is shutting down). Dropping it does not signal.
#[derive(Debug)]
pub struct ShutdownTrigger(watch::Sender<bool>);

impl ShutdownTrigger {
    /// Signals every [`ShutdownSignal`] made from this trigger.
    pub fn trigger(&self) {
        self.0.send_replace(true);
    }
}

/// The receiving side of a [`ShutdownTrigger`]; cheap to clone.
#[derive(Debug, Clone)]
pub struct ShutdownSignal(watch::Receiver<bool>);

impl ShutdownSignal {
    /// A connected trigger and signal.
    pub fn channel() -> (ShutdownTrigger, ShutdownSignal) {
        let (sender, receiver) = watch::channel(false);
        (ShutdownTrigger(sender), ShutdownSignal(receiver))
    }

    /// A signal that never fires.
    pub fn never() -> ShutdownSignal {
        let (_, receiver) = watch::channel(false);
        ShutdownSignal(receiver)
    }

    /// Whether shutdown has been signalled.
    pub fn is_triggered(&self) -> bool {
        *self.0.borrow()
    }

    /// Completes when shutdown is signalled; never completes if the trigger is dropped
    /// without signalling.
    pub async fn triggered(&self) {
        let mut receiver = self.0.clone();
        if receiver.wait_for(|triggered| *triggered).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Everything a tool call runs with. The permission engine has already decided the call.
#[derive(Clone)]
pub struct ToolContext {
    workspace: Workspace,
    plan_file: Option<PathBuf>,
    shutdown: ShutdownSignal,
    limits: OutputLimits,
    environment: Vec<(OsString, OsString)>,
    process_groups: Option<Arc<dyn ProcessGroupRecorder>>,
    /// How `Bash` confines its commands, and under which profile; `None`: unconfined.
    sandbox: Option<(Arc<Sandbox>, SandboxProfile)>,
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ToolContext")
            .field("workspace", &self.workspace)
            .field("plan_file", &self.plan_file)
            .field("limits", &self.limits)
            .field("process_groups", &self.process_groups.is_some())
            .field("sandbox", &self.sandbox)
            .finish_non_exhaustive()
    }
}

impl ToolContext {
    /// A context on `workspace`; `environment` is the base environment of `Bash` commands
    /// (only `main` reads the process environment; `LD_*` variables are removed anyway).
    pub fn new(workspace: Workspace, environment: Vec<(OsString, OsString)>) -> Self {
        Self {
            workspace,
            plan_file: None,
            shutdown: ShutdownSignal::never(),
            limits: OutputLimits::default(),
            environment,
            process_groups: None,
            sandbox: None,
        }
    }

    /// Runs `Bash` commands in `sandbox` under `profile`.
    pub fn with_sandbox(mut self, sandbox: Arc<Sandbox>, profile: SandboxProfile) -> Self {
        self.sandbox = Some((sandbox, profile));
        self
    }

    /// The sandbox `Bash` commands run in, and its profile, if any.
    pub fn sandbox(&self) -> Option<(&Arc<Sandbox>, SandboxProfile)> {
        self.sandbox
            .as_ref()
            .map(|(sandbox, profile)| (sandbox, *profile))
    }

    /// Sets the agent's own plan file, the one path file tools may write in `.muster/` or
    /// outside the workspace. Resolved like any other path (symlinks included), so it must not
    /// contain `..`.
    pub fn with_plan_file(mut self, plan_file: &Path) -> Result<Self, PathError> {
        self.plan_file = Some(self.workspace.resolve_plan_file(plan_file)?);
        Ok(self)
    }

    /// Sets the shutdown signal that stops running tools.
    pub fn with_shutdown(mut self, shutdown: ShutdownSignal) -> Self {
        self.shutdown = shutdown;
        self
    }

    /// Sets the output caps.
    pub fn with_limits(mut self, limits: OutputLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets where `Bash` reports a command's process group before the command runs.
    pub fn with_process_group_recorder(mut self, recorder: Arc<dyn ProcessGroupRecorder>) -> Self {
        self.process_groups = Some(recorder);
        self
    }

    /// The workspace file tools are confined to.
    pub fn workspace(&self) -> &Workspace {
        &self.workspace
    }

    /// The agent's own plan file (resolved), if it has one.
    pub fn plan_file(&self) -> Option<&Path> {
        self.plan_file.as_deref()
    }

    /// The shutdown signal.
    pub fn shutdown(&self) -> &ShutdownSignal {
        &self.shutdown
    }

    /// The output caps.
    pub fn limits(&self) -> &OutputLimits {
        &self.limits
    }

    /// The base environment of `Bash` commands.
    pub fn environment(&self) -> &[(OsString, OsString)] {
        &self.environment
    }

    /// Where `Bash` reports process groups, if anywhere.
    pub fn process_group_recorder(&self) -> Option<&Arc<dyn ProcessGroupRecorder>> {
        self.process_groups.as_ref()
    }
}

impl ToolContext {
    /// Resolves a path the call reads; see [`Workspace::resolve_read`].
    pub fn resolve_read(&self, requested: &str) -> Result<PathBuf, PathError> {
        self.workspace
            .resolve_read(Path::new(requested), self.plan_file.as_deref())
    }

    /// Whether `requested` resolves to the agent's own plan file (the permission engine lets
    /// plan mode write exactly that file).
    pub fn is_own_plan_file(&self, requested: &str) -> bool {
        self.plan_file.as_deref().is_some_and(|plan_file| {
            self.workspace
                .resolve_plan_file(Path::new(requested))
                .is_ok_and(|resolved| resolved == plan_file)
        })
    }

    /// Resolves a path the call writes; see [`Workspace::resolve`].
    pub fn resolve_write(&self, requested: &str) -> Result<PathBuf, PathError> {
        self.workspace.resolve(
            Path::new(requested),
            PathUse::Write,
            self.plan_file.as_deref(),
        )
    }
}
