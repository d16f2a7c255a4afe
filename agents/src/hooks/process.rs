//! One hook process: `sh -c COMMAND` in the agent's workspace, with the event's JSON on stdin
//! and `CLAUDE_PROJECT_DIR` set, through the sandbox's trampoline with the firing agent's
//! profile (unless a user-level hook opted out), in its own process group, which is killed at
//! the timeout and whenever the hook is dropped, and by the trampoline when muster dies (kill
//! -9 included). Output beyond [`MAX_OUTPUT`] is a failure.

use std::ffi::OsString;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::Command;

use muster_config::hooks::{HookSandbox, PROJECT_DIR_VAR};

use crate::sandbox::{Sandbox, SandboxMode, SandboxProfile, hook_args};

/// The most a hook may print on stdout or stderr (Claude Code's cap on hook output).
pub const MAX_OUTPUT: usize = 1024 * 1024;

/// How one hook process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessEnd {
    /// It exited (`None`: killed by a signal).
    Exited {
        code: Option<i32>,
        stdout: String,
        stderr: String,
    },
    /// It could not be started.
    CannotStart(String),
    /// It ran past its timeout; its process group was killed.
    TimedOut(Duration),
    /// It printed more than [`MAX_OUTPUT`] on one stream; its process group was killed.
    TooMuchOutput,
    /// An `http` hook answered with a status other than 2xx (and this body).
    HttpStatus { status: u16, body: String },
}

/// Where and how a hook process runs.
pub struct ProcessSpec<'a> {
    pub command: &'a str,
    pub stdin: &'a [u8],
    pub workspace: &'a Path,
    pub environment: &'a [(OsString, OsString)],
    pub timeout: Duration,
    /// The run's sandbox, the firing agent's profile and the hook's choice.
    pub sandbox: Option<(&'a Sandbox, SandboxProfile)>,
    pub hook_sandbox: HookSandbox,
    /// The trampoline (`muster sandbox-exec`) that starts an unconfined hook, so it dies with
    /// muster too (a confined one goes through the sandbox's); `None`: `sh` directly.
    pub launcher: Option<&'a [OsString]>,
}

struct GroupKill(i32);

impl Drop for GroupKill {
    fn drop(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.0) {
            // ESRCH (the group is gone) is the expected case once the hook has ended.
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

/// Runs one hook process to its end (see the module's comment).
pub async fn run_hook_process(spec: &ProcessSpec<'_>) -> ProcessEnd {
    let confined = match (spec.sandbox, spec.hook_sandbox) {
        (Some((sandbox, profile)), HookSandbox::Agent) if sandbox.mode != SandboxMode::Off => {
            Some((sandbox, profile))
        }
        _ => None,
    };
    let tmp = match confined
        .map(|_| tempfile::Builder::new().prefix("muster-hook-").tempdir())
        .transpose()
    {
        Ok(tmp) => tmp,
        Err(error) => {
            return ProcessEnd::CannotStart(format!("its private temporary directory: {error}"));
        }
    };
    let shell: Vec<OsString> = vec!["sh".into(), "-c".into(), spec.command.into()];
    // Through the trampoline, the hook's process group dies with this process, even killed
    // with -9 (see `sandbox::hook_args`).
    let parent = std::process::id();
    let argv: Vec<OsString> = match (confined, &tmp, spec.launcher) {
        (Some((sandbox, profile)), Some(tmp), _) => {
            let policy = sandbox.policy(profile, spec.workspace);
            sandbox
                .trampoline
                .iter()
                .cloned()
                .chain(hook_args(parent, Some((&policy, tmp.path())), &shell))
                .collect()
        }
        (None, _, Some(launcher)) => launcher
            .iter()
            .cloned()
            .chain(hook_args(parent, None, &shell))
            .collect(),
        _ => shell,
    };
    let Some((program, args)) = argv.split_first() else {
        return ProcessEnd::CannotStart("no command".into());
    };
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(spec.workspace)
        .env_clear()
        .envs(spec.environment.iter().map(|(name, value)| (name, value)))
        .env(PROJECT_DIR_VAR, spec.workspace)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(tmp) = &tmp {
        for name in ["TMPDIR", "TMP", "TEMP"] {
            command.env(name, tmp.path());
        }
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => return ProcessEnd::CannotStart(format!("{}: {error}", spec.command)),
    };
    let Some(group) = child.id().and_then(|pid| i32::try_from(pid).ok()) else {
        return ProcessEnd::CannotStart("it exited before its process group was known".into());
    };
    let _kill = GroupKill(group);
    let stdin = child.stdin.take();
    let input = spec.stdin.to_vec();
    // A hook that never reads its stdin must not block on a full pipe: written beside.
    let writer = tokio::spawn(async move {
        if let Some(mut stdin) = stdin {
            let _ = stdin.write_all(&input).await;
            let _ = stdin.shutdown().await;
        }
    });
    let stdout = child.stdout.take().map(|pipe| tokio::spawn(capture(pipe)));
    let stderr = child.stderr.take().map(|pipe| tokio::spawn(capture(pipe)));
    let status = tokio::select! {
        status = child.wait() => Some(status),
        () = tokio::time::sleep(spec.timeout) => None,
    };
    drop(_kill);
    writer.abort();
    let Some(status) = status else {
        let _ = child.wait().await;
        return ProcessEnd::TimedOut(spec.timeout);
    };
    let (stdout, stderr) = (collect(stdout).await, collect(stderr).await);
    let (Some(stdout), Some(stderr)) = (stdout, stderr) else {
        return ProcessEnd::TooMuchOutput;
    };
    match status {
        Ok(status) => ProcessEnd::Exited {
            code: ExitStatus::code(&status),
            stdout,
            stderr,
        },
        Err(error) => ProcessEnd::CannotStart(format!("waiting for it: {error}")),
    }
}

/// A stream's text, or `None` when it passed [`MAX_OUTPUT`] (reading stops there).
async fn capture(mut pipe: impl AsyncRead + Unpin) -> Option<String> {
    let mut kept = Vec::new();
    let mut buffer = [0u8; 8192];
    loop {
        match pipe.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => {
                if kept.len() + read > MAX_OUTPUT {
                    return None;
                }
                kept.extend_from_slice(&buffer[..read]);
            }
        }
    }
    Some(String::from_utf8_lossy(&kept).into_owned())
}

async fn collect(task: Option<tokio::task::JoinHandle<Option<String>>>) -> Option<String> {
    match task {
        Some(task) => task.await.ok().flatten(),
        None => Some(String::new()),
    }
}
