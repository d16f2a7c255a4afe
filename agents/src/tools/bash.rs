//! `Bash`: a command run by `bash -c` in its own process group, in the workspace root, with
//! stdin null, `LD_*` removed from the environment, output captured and capped, and the whole
//! group killed on timeout or shutdown.
//!
//! The process-group id is reported to the context's [`ProcessGroupRecorder`] before the
//! command runs: `bash` starts behind a gate (it waits for one line on a pipe, then `exec`s the
//! command with stdin from `/dev/null`), and the gate opens only once the recorder returns.

use muster_protocol::ToolName;
use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

use super::TypedTool;
use super::context::{ProcessGroupId, ToolContext};
use super::output::{BashOutcome, ToolDetails, ToolOutput};
use crate::sandbox::{Sandbox, SandboxMode, SandboxPolicy};

/// Waits for the gate line, then runs the command (`$1`) with stdin from `/dev/null`.
const GATE_SCRIPT: &str = "IFS= read -r _ || exit 125; exec \"$BASH\" -c \"$1\" </dev/null";

/// How long output pipes may stay open after the group was killed (a process that left the
/// group can hold them).
const PIPE_GRACE: Duration = Duration::from_secs(2);

/// Input of `Bash`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BashInput {
    /// The command to run with `bash -c`, in the workspace root.
    pub command: String,
    /// Timeout in milliseconds (at most 600000; default 120000).
    #[serde(default)]
    pub timeout: Option<u64>,
    /// What the command does, in 5-10 words, for the people watching.
    #[serde(default)]
    pub description: Option<String>,
}

/// Runs a shell command.
#[derive(Debug, Clone, Copy, Default)]
pub struct Bash;

impl TypedTool for Bash {
    type Input = BashInput;
    const NAME: &'static str = ToolName::Bash.as_str();
    const DESCRIPTION: &'static str = "Runs a bash command in the workspace root and returns its output and exit code. Stdin is \
         empty; output is capped; the command and everything it started are killed when the \
         timeout (milliseconds, default 120000, at most 600000) expires. Background processes \
         do not outlive the command. Prefer Read, Grep, Glob and LS over cat, grep, find and ls.";
    const READ_ONLY: bool = ToolName::Bash.is_read_only();
    const IDEMPOTENT: bool = false;

    async fn run(&self, context: &ToolContext, input: BashInput) -> ToolOutput {
        let timeout = match timeout_of(&input, context) {
            Ok(timeout) => timeout,
            Err(message) => return ToolOutput::error(message),
        };
        if input.command.trim().is_empty() {
            return ToolOutput::error("invalid input for Bash: field `command` is empty");
        }
        if context.shutdown().is_triggered() {
            return ToolOutput::error("the command did not run: the run is shutting down");
        }
        run_command(context, &input.command, timeout).await
    }
}

fn timeout_of(input: &BashInput, context: &ToolContext) -> Result<Duration, String> {
    let limits = context.limits();
    match input.timeout {
        None => Ok(limits.default_bash_timeout),
        Some(0) => Err("invalid input for Bash: field `timeout` must be positive".to_owned()),
        Some(millis) if Duration::from_millis(millis) > limits.max_bash_timeout => Err(format!(
            "invalid input for Bash: field `timeout` is {millis} ms, more than the maximum of {} ms",
            limits.max_bash_timeout.as_millis()
        )),
        Some(millis) => Ok(Duration::from_millis(millis)),
    }
}

/// Kills the process group when dropped, so a cancelled call leaves nothing running.
struct GroupKillGuard(ProcessGroupId);

impl Drop for GroupKillGuard {
    fn drop(&mut self) {
        kill_group(self.0);
    }
}

fn kill_group(group: ProcessGroupId) {
    if let Some(pid) = rustix::process::Pid::from_raw(group) {
        // ESRCH (the group is gone) is the expected case once the command has ended.
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

fn is_loader_variable(name: &OsStr) -> bool {
    name.as_encoded_bytes().starts_with(b"LD_")
}

/// The command that runs `command` behind the gate: bash itself, or the sandbox's trampoline
/// execing bash confined to `policy` with `private_tmp` as its temporary directory.
fn gated_command(
    context: &ToolContext,
    command: &str,
    confined: Option<(&Sandbox, &SandboxPolicy, &Path)>,
) -> Command {
    let bash: Vec<OsString> = vec![
        "bash".into(),
        "-c".into(),
        GATE_SCRIPT.into(),
        "muster-bash".into(),
        command.into(),
    ];
    let argv = match confined {
        Some((sandbox, policy, tmp)) => sandbox
            .trampoline
            .iter()
            .cloned()
            .chain(policy.to_args(tmp, &bash))
            .collect(),
        None => bash,
    };
    let (program, args) = argv.split_first().map_or_else(
        || (OsString::from("bash"), &[][..]),
        |(program, args)| (program.clone(), args),
    );
    let mut process = Command::new(program);
    process
        .args(args)
        .current_dir(context.workspace().root())
        .env_clear()
        .envs(
            context
                .environment()
                .iter()
                .filter(|(name, _)| !is_loader_variable(name))
                .map(|(name, value)| (name, value)),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some((_, _, tmp)) = confined {
        for name in ["TMPDIR", "TMP", "TEMP"] {
            process.env(name, tmp);
        }
    }
    process
}

/// A private temporary directory for one confined command, removed when the call ends.
fn private_tmp() -> std::io::Result<tempfile::TempDir> {
    tempfile::Builder::new().prefix("muster-bash-").tempdir()
}

/// How the wait for the command ended.
enum Ending {
    Exited(std::io::Result<ExitStatus>),
    TimedOut,
    Interrupted,
}

async fn run_command(context: &ToolContext, command: &str, timeout: Duration) -> ToolOutput {
    let sandbox = context
        .sandbox()
        .filter(|(sandbox, _)| sandbox.mode != SandboxMode::Off)
        .map(|(sandbox, profile)| {
            let policy = sandbox.policy(profile, context.workspace().root());
            (sandbox.clone(), policy)
        });
    let tmp = match sandbox.as_ref().map(|_| private_tmp()).transpose() {
        Ok(tmp) => tmp,
        Err(error) => {
            return ToolOutput::error(format!(
                "the command did not run: cannot make its private temporary directory: {error}"
            ));
        }
    };
    let confined = sandbox
        .as_ref()
        .zip(tmp.as_ref())
        .map(|((sandbox, policy), tmp)| (sandbox.as_ref(), policy, tmp.path()));
    let mut output = run_gated(context, command, timeout, confined).await;
    if output.is_error
        && let Some((sandbox, policy, _)) = confined
        && looks_blocked(&output.content)
    {
        output
            .content
            .push_str(&format!("\n[muster] {}", sandbox.denial_hint(policy)));
    }
    output
}

/// Does a failed command's output read like a refused write, exec or connection?
fn looks_blocked(output: &str) -> bool {
    [
        "Permission denied",
        "Read-only file system",
        "Operation not permitted",
        "Device or resource busy",
        "muster sandbox-exec",
    ]
    .iter()
    .any(|needle| output.contains(needle))
}

async fn run_gated(
    context: &ToolContext,
    command: &str,
    timeout: Duration,
    confined: Option<(&Sandbox, &SandboxPolicy, &Path)>,
) -> ToolOutput {
    let mut child = match gated_command(context, command, confined).spawn() {
        Ok(child) => child,
        Err(error) => return ToolOutput::error(format!("cannot start bash: {error}")),
    };
    let Some(group) = child
        .id()
        .and_then(|pid| ProcessGroupId::try_from(pid).ok())
    else {
        return ToolOutput::error("bash exited before its process group could be recorded");
    };
    let guard = GroupKillGuard(group);
    if let Some(recorder) = context.process_group_recorder()
        && let Err(reason) = recorder.record(group).await
    {
        drop(guard);
        let _ = child.wait().await;
        return ToolOutput::error(format!(
            "the command did not run: its process group {group} could not be recorded: {reason}"
        ));
    }
    if let Err(error) = open_gate(&mut child).await {
        return ToolOutput::error(format!("the command did not run: cannot start it: {error}"));
    }
    let cap = context.limits().max_output_bytes;
    let stdout = child
        .stdout
        .take()
        .map(|pipe| tokio::spawn(capture(pipe, cap)));
    let stderr = child
        .stderr
        .take()
        .map(|pipe| tokio::spawn(capture(pipe, cap)));
    let ending = tokio::select! {
        status = child.wait() => Ending::Exited(status),
        () = tokio::time::sleep(timeout) => Ending::TimedOut,
        () = context.shutdown().triggered() => Ending::Interrupted,
    };
    kill_group(group);
    let timed_out = matches!(ending, Ending::TimedOut);
    let interrupted = matches!(ending, Ending::Interrupted);
    let status = match ending {
        Ending::Exited(status) => status,
        Ending::TimedOut | Ending::Interrupted => child.wait().await,
    };
    let stdout = collect(stdout).await;
    let stderr = collect(stderr).await;
    drop(guard);
    let outcome = BashOutcome {
        process_group: group,
        exit_code: status.as_ref().ok().and_then(ExitStatus::code),
        signal: status.as_ref().ok().and_then(signal_of),
        timed_out,
        interrupted,
    };
    report(&outcome, timeout, &stdout, &stderr, status.err())
}

#[cfg(unix)]
fn signal_of(status: &ExitStatus) -> Option<i32> {
    std::os::unix::process::ExitStatusExt::signal(status)
}

async fn open_gate(child: &mut Child) -> std::io::Result<()> {
    let Some(mut gate) = child.stdin.take() else {
        return Err(std::io::Error::other("no gate pipe"));
    };
    gate.write_all(b"\n").await?;
    gate.shutdown().await
}

/// What one output stream produced: the first bytes up to the cap, and how many there were.
#[derive(Default)]
struct Captured {
    kept: Vec<u8>,
    total: u64,
    closed_early: bool,
}

async fn capture(mut pipe: impl AsyncRead + Unpin, cap: usize) -> Captured {
    let mut captured = Captured::default();
    let mut chunk = vec![0_u8; 8192];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => return captured,
            Ok(read) => {
                captured.total += read as u64;
                let room = cap.saturating_sub(captured.kept.len());
                captured.kept.extend_from_slice(&chunk[..read.min(room)]);
            }
        }
    }
}

async fn collect(task: Option<tokio::task::JoinHandle<Captured>>) -> Captured {
    let Some(mut task) = task else {
        return Captured::default();
    };
    match tokio::time::timeout(PIPE_GRACE, &mut task).await {
        Ok(Ok(captured)) => captured,
        Ok(Err(_)) => Captured::default(),
        Err(_) => {
            task.abort();
            Captured {
                closed_early: true,
                ..Captured::default()
            }
        }
    }
}

fn stream_text(name: &str, captured: &Captured) -> String {
    let text = String::from_utf8_lossy(&captured.kept);
    let mut shown = text.trim_end_matches('\n').to_owned();
    if captured.total > captured.kept.len() as u64 {
        shown.push_str(&format!(
            "\n[{name} truncated: showed the first {} of {} bytes]",
            captured.kept.len(),
            captured.total
        ));
    }
    if captured.closed_early {
        shown.push_str(&format!(
            "\n[{name} was still held open by a process outside the command's group]"
        ));
    }
    shown
}

fn report(
    outcome: &BashOutcome,
    timeout: Duration,
    stdout: &Captured,
    stderr: &Captured,
    wait_error: Option<std::io::Error>,
) -> ToolOutput {
    let mut sections = Vec::new();
    let stdout_text = stream_text("stdout", stdout);
    if !stdout_text.is_empty() {
        sections.push(stdout_text);
    }
    let stderr_text = stream_text("stderr", stderr);
    if !stderr_text.is_empty() {
        sections.push(format!("stderr:\n{stderr_text}"));
    }
    let status = status_line(outcome, timeout, wait_error);
    let is_error = outcome.exit_code != Some(0) || outcome.timed_out || outcome.interrupted;
    sections.push(status);
    let output = if is_error {
        ToolOutput::error(sections.join("\n"))
    } else {
        ToolOutput::text(sections.join("\n"))
    };
    output.with_details(ToolDetails::Bash(outcome.clone()))
}

fn status_line(
    outcome: &BashOutcome,
    timeout: Duration,
    wait_error: Option<std::io::Error>,
) -> String {
    if outcome.timed_out {
        return format!(
            "[timed out after {} ms; the command's process group was killed]",
            timeout.as_millis()
        );
    }
    if outcome.interrupted {
        return "[interrupted by shutdown; the command's process group was killed]".to_owned();
    }
    if let Some(error) = wait_error {
        return format!("[the command's status is unknown: {error}]");
    }
    match (outcome.exit_code, outcome.signal) {
        (Some(code), _) => format!("[exit code {code}]"),
        (None, Some(signal)) => format!("[killed by signal {signal}]"),
        (None, None) => "[the command ended without an exit code]".to_owned(),
    }
}
