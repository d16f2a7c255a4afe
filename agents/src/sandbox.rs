//! The kernel sandbox every `Bash` call runs in (DESIGN, "Wave 2 → The Bash sandbox").
//!
//! The runtime is multi-threaded and unsafe code is forbidden, so a call does not restrict
//! itself in place: the Bash tool starts a trampoline — `muster sandbox-exec …` (or the
//! `muster-sandbox` binary in this crate's tests) — which confines its own single-threaded
//! process and then execs bash ([`exec_sandboxed`]). The process group the tool records is
//! the trampoline's, which the exec keeps, so recording and killing work as before.
//!
//! Two profiles ([`SandboxProfile`]): **read-only** (nothing writable but a private temporary
//! directory and `/dev/null`, no network) and **workspace-write** (also the workspace, the tool
//! caches [`TOOL_CACHES`] names and the paths the settings add; `.git/`, `.muster/` and the
//! protected files (`.claude/settings*.json`, `.mcp.json`, `muster.team.toml`) stay read-only
//! through a mount namespace with read-only binds where one can be made; the network
//! as the settings say). On Linux: Landlock for the files (best effort up to the ABI this
//! build knows), Landlock scopes so a confined process cannot signal processes outside or
//! reach abstract UNIX sockets outside, and seccomp refusing `socket` for every family but
//! `AF_UNIX` (and `io_uring_setup`) when the network is off. Children inherit all of it.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

#[cfg(target_os = "linux")]
mod linux;

/// What a confined command may write and reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxProfile {
    /// Reads anywhere the user can; writes only its private temporary directory and
    /// `/dev/null`; no network.
    ReadOnly,
    /// Also writes the workspace (not its `.git/`, `.muster/` and protected files), the tool
    /// caches and the configured paths; the network as configured.
    WorkspaceWrite,
}

impl SandboxProfile {
    /// The name used in settings, `muster check` and tool results.
    pub fn name(self) -> &'static str {
        match self {
            Self::ReadOnly => "read-only",
            Self::WorkspaceWrite => "workspace-write",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "read-only" => Some(Self::ReadOnly),
            "workspace-write" => Some(Self::WorkspaceWrite),
            _ => None,
        }
    }
}

/// Whether the sandbox is used (`[sandbox] mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Sandbox where the kernel supports it; run unconfined (with one warning) where not.
    Auto,
    /// Refuse to run where the kernel cannot enforce the profiles fully.
    Required,
    /// Never sandbox.
    Off,
}

impl SandboxMode {
    /// The name used in settings.
    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Required => "required",
            Self::Off => "off",
        }
    }

    /// Parses a settings value.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "auto" => Some(Self::Auto),
            "required" => Some(Self::Required),
            "off" => Some(Self::Off),
            _ => None,
        }
    }
}

/// Directories under the home directory that builds and package managers write to, writable
/// in the workspace-write profile so `cargo test`, `npm test` and `pytest` work in a teammate's
/// worktree: cargo's registry and git checkouts, rustup's toolchains, npm's cache, and the XDG
/// cache (pip, uv, go-build, ccache, node-gyp and most others).
pub const TOOL_CACHES: [&str; 4] = [".cargo", ".rustup", ".npm", ".cache"];

/// Directories inside the workspace that stay read-only in the workspace-write profile.
pub const PROTECTED_DIRECTORIES: [&str; 2] = [".git", ".muster"];

/// How a run's Bash calls are confined: the trampoline to start and what the profiles allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    /// The program that confines itself and execs bash, with the arguments before its own
    /// (`muster` and `sandbox-exec`).
    pub trampoline: Vec<OsString>,
    pub mode: SandboxMode,
    /// Network in the workspace-write profile (`[sandbox] network`).
    pub network: bool,
    /// Writable paths the settings add to the workspace-write profile (absolute).
    pub writable: Vec<PathBuf>,
    /// The home directory, for [`TOOL_CACHES`].
    pub home: Option<PathBuf>,
    /// Files bound read-only in the workspace-write profile where they exist (the files that
    /// define rules, servers and the team; see [`muster_config::protected`]).
    pub protected_files: muster_config::protected::ProtectedFiles,
}

impl Sandbox {
    /// The policy of one call in `workspace` under `profile`.
    pub fn policy(&self, profile: SandboxProfile, workspace: &Path) -> SandboxPolicy {
        let (writable, protected, network) = match profile {
            SandboxProfile::ReadOnly => (Vec::new(), Vec::new(), false),
            SandboxProfile::WorkspaceWrite => {
                let caches = self
                    .home
                    .iter()
                    .flat_map(|home| TOOL_CACHES.iter().map(move |cache| home.join(cache)));
                let writable = std::iter::once(workspace.to_path_buf())
                    .chain(caches)
                    .chain(self.writable.iter().cloned())
                    .collect();
                let protected = PROTECTED_DIRECTORIES
                    .iter()
                    .map(|name| workspace.join(name))
                    .chain(self.protected_files.existing_in(workspace))
                    .collect();
                (writable, protected, self.network)
            }
        };
        SandboxPolicy {
            profile,
            required: self.mode == SandboxMode::Required,
            writable,
            protected,
            network,
        }
    }

    /// The hint a failed command's result carries: what the sandbox allowed and how to widen
    /// it.
    pub fn denial_hint(&self, policy: &SandboxPolicy) -> String {
        match policy.profile {
            SandboxProfile::ReadOnly => "the command ran in muster's read-only sandbox (no writes outside its private temporary directory, no network), which may have blocked it — plan mode, read-only agents and commands the classifier proved read-only always run so; a command that must change files runs in the workspace-write sandbox once it is allowed outside plan mode".to_owned(),
            SandboxProfile::WorkspaceWrite => format!(
                "the command ran in muster's workspace-write sandbox (writes only to the workspace except .git/ and .muster/, the temporary directory and {}; network {}), which may have blocked it — widen it with `[sandbox] writable = \"PATH:PATH\"` or `[sandbox] network = \"on\"` in settings, or set `[sandbox] mode = \"off\"`",
                TOOL_CACHES.map(|cache| format!("~/{cache}")).join(", "),
                if policy.network { "on" } else { "off" }
            ),
        }
    }
}

/// What one confined call may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPolicy {
    pub profile: SandboxProfile,
    /// Fail instead of running less confined than asked.
    pub required: bool,
    /// Writable beside the private temporary directory and `/dev/null`.
    pub writable: Vec<PathBuf>,
    /// Read-only inside `writable` (bound read-only in a mount namespace).
    pub protected: Vec<PathBuf>,
    pub network: bool,
}

/// The trampoline's command line could not be used, or confinement failed.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("muster sandbox-exec: {0}")]
    Usage(String),
    #[error("muster sandbox-exec: the kernel cannot confine this command as required: {0}")]
    Unsupported(String),
    #[error("muster sandbox-exec: confining the command failed: {0}")]
    Confine(String),
    #[error("muster sandbox-exec: cannot run `{program}`: {source}")]
    Exec {
        program: String,
        source: std::io::Error,
    },
}

impl SandboxPolicy {
    /// The trampoline's arguments for this policy, a private temporary directory and the
    /// command to exec.
    pub fn to_args(&self, private_tmp: &Path, command: &[OsString]) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            "--profile".into(),
            self.profile.name().into(),
            "--tmp".into(),
            private_tmp.into(),
        ];
        for path in &self.writable {
            args.push("--write".into());
            args.push(path.into());
        }
        for path in &self.protected {
            args.push("--protect".into());
            args.push(path.into());
        }
        if self.network {
            args.push("--network".into());
        }
        if self.required {
            args.push("--required".into());
        }
        args.push("--".into());
        args.extend(command.iter().cloned());
        args
    }

    /// Parses [`SandboxPolicy::to_args`]'s output: the policy, the temporary directory and
    /// the command.
    pub fn from_args(
        args: &[OsString],
    ) -> Result<(SandboxPolicy, PathBuf, Vec<OsString>), SandboxError> {
        let mut policy = SandboxPolicy {
            profile: SandboxProfile::ReadOnly,
            required: false,
            writable: Vec::new(),
            protected: Vec::new(),
            network: false,
        };
        let mut tmp = None;
        let mut rest = args.iter();
        let value = |rest: &mut std::slice::Iter<'_, OsString>, flag: &str| {
            rest.next()
                .cloned()
                .ok_or_else(|| SandboxError::Usage(format!("{flag} needs a value")))
        };
        while let Some(arg) = rest.next() {
            match arg.to_str() {
                Some("--profile") => {
                    let name = value(&mut rest, "--profile")?;
                    policy.profile =
                        name.to_str()
                            .and_then(SandboxProfile::parse)
                            .ok_or_else(|| {
                                SandboxError::Usage(format!(
                                    "unknown profile {name:?}; use read-only or workspace-write"
                                ))
                            })?;
                }
                Some("--tmp") => tmp = Some(PathBuf::from(value(&mut rest, "--tmp")?)),
                Some("--write") => policy.writable.push(value(&mut rest, "--write")?.into()),
                Some("--protect") => policy.protected.push(value(&mut rest, "--protect")?.into()),
                Some("--network") => policy.network = true,
                Some("--required") => policy.required = true,
                Some("--") => {
                    let command: Vec<OsString> = rest.cloned().collect();
                    if command.is_empty() {
                        return Err(SandboxError::Usage("no command after --".into()));
                    }
                    let tmp = tmp.ok_or_else(|| SandboxError::Usage("--tmp is missing".into()))?;
                    return Ok((policy, tmp, command));
                }
                _ => {
                    return Err(SandboxError::Usage(format!(
                        "unexpected argument {arg:?}; muster runs this itself for Bash calls"
                    )));
                }
            }
        }
        Err(SandboxError::Usage("no `--` before the command".into()))
    }
}

/// What the running kernel can enforce.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SandboxSupport {
    /// The Landlock ABI the kernel offers, up to 6, the newest muster uses (0: none).
    pub landlock_abi: u32,
    /// Can this process make a mount namespace (for read-only binds)?
    pub mount_namespace: bool,
    /// Is seccomp filtering available?
    pub seccomp: bool,
}

impl SandboxSupport {
    /// Can the profiles be enforced at all (Landlock present)?
    pub fn enforced(&self) -> bool {
        self.landlock_abi > 0
    }

    /// One line for `muster config show` and warnings.
    pub fn describe(&self) -> String {
        if !self.enforced() {
            return format!(
                "not supported here: the kernel offers no Landlock ABI ({}), so Bash runs unconfined",
                std::env::consts::OS
            );
        }
        let abi = if self.landlock_abi >= 6 {
            "6 or later (every file right and scope muster uses)".to_owned()
        } else {
            format!(
                "{} (older than 6: fewer rights restricted)",
                self.landlock_abi
            )
        };
        format!(
            "Landlock ABI {abi}; seccomp {}; mount namespace {}",
            if self.seccomp {
                "yes"
            } else {
                "no (network not blocked)"
            },
            if self.mount_namespace {
                "yes"
            } else {
                "no (.git/ and .muster/ writable in workspace-write)"
            }
        )
    }
}

/// What the running kernel supports. Under the `failpoints` feature (test builds only), the
/// variable `MUSTER_TEST_LANDLOCK_ABI=0` simulates a kernel without Landlock.
pub fn probe() -> SandboxSupport {
    #[cfg(feature = "failpoints")]
    if std::env::var("MUSTER_TEST_LANDLOCK_ABI").as_deref() == Ok("0") {
        return SandboxSupport {
            landlock_abi: 0,
            mount_namespace: false,
            seccomp: false,
        };
    }
    #[cfg(target_os = "linux")]
    {
        linux::probe()
    }
    #[cfg(not(target_os = "linux"))]
    {
        SandboxSupport {
            landlock_abi: 0,
            mount_namespace: false,
            seccomp: false,
        }
    }
}

/// The trampoline's first arguments when it starts a hook: the hook dies with the process
/// that started it (`--die-with-parent PID`).
const DIE_WITH_PARENT: &str = "--die-with-parent";
/// After [`DIE_WITH_PARENT`]'s: a hook that runs unconfined (`--unconfined -- COMMAND`).
const UNCONFINED: &str = "--unconfined";

/// The trampoline's arguments for a hook process that `parent` (the id of the muster process
/// starting it) starts: confined by `policy` (with its private temporary directory) or
/// unconfined, `command` run under the trampoline as a supervisor that kills the hook's whole
/// process group when `parent` dies — kill -9 included — so no hook outlives its muster.
pub fn hook_args(
    parent: u32,
    policy: Option<(&SandboxPolicy, &Path)>,
    command: &[OsString],
) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec![DIE_WITH_PARENT.into(), parent.to_string().into()];
    match policy {
        Some((policy, tmp)) => args.extend(policy.to_args(tmp, command)),
        None => {
            args.push(UNCONFINED.into());
            args.push("--".into());
            args.extend(command.iter().cloned());
        }
    }
    args
}

/// The trampoline: confine this process as `args` say (see [`SandboxPolicy::to_args`]) and
/// exec the command, or, for a hook ([`hook_args`]), run it under a supervisor that dies with
/// its parent. Returns only on failure. Call it from a single-threaded process (a `main` that
/// has started no threads).
pub fn exec_sandboxed(args: &[OsString]) -> SandboxError {
    let (parent, args) = match args {
        [flag, pid, rest @ ..] if flag == DIE_WITH_PARENT => {
            match pid.to_str().and_then(|pid| pid.parse::<u32>().ok()) {
                Some(pid) => (Some(pid), rest),
                None => {
                    return SandboxError::Usage(format!(
                        "{DIE_WITH_PARENT} needs a process id, not {pid:?}"
                    ));
                }
            }
        }
        _ => (None, args),
    };
    let command = match args {
        [flag, dashes, command @ ..]
            if parent.is_some() && flag == UNCONFINED && dashes == "--" =>
        {
            command.to_vec()
        }
        _ => match confine_as(args) {
            Ok(command) => command,
            Err(error) => return error,
        },
    };
    match parent {
        Some(parent) => supervise(parent, &command),
        None => exec(&command),
    }
}

/// Confines this process as `args` say; the command to run.
fn confine_as(args: &[OsString]) -> Result<Vec<OsString>, SandboxError> {
    let (policy, tmp, command) = SandboxPolicy::from_args(args)?;
    #[cfg(target_os = "linux")]
    linux::confine(&policy, &tmp)?;
    #[cfg(not(target_os = "linux"))]
    if policy.required {
        return Err(SandboxError::Unsupported(format!(
            "{} has no Landlock; muster's sandbox is Linux-only",
            std::env::consts::OS
        )));
    }
    let _ = &tmp;
    Ok(command)
}

/// Runs `command` as this process's child, in its process group, and ends as it ends (its
/// exit code, or killed by its signal); when `parent` dies first (the kernel's parent-death
/// signal, set after confinement, which a change of credentials would clear), the whole
/// group is killed. The trampoline stays single-threaded: it waits for either signal with
/// both blocked (`sigwait`), so no handler is needed.
#[cfg(target_os = "linux")]
fn supervise(parent: u32, command: &[OsString]) -> SandboxError {
    use nix::sys::signal::{SigSet, SigmaskHow, Signal, killpg, raise, sigprocmask};
    use std::os::unix::process::ExitStatusExt as _;
    let Some((program, args)) = command.split_first() else {
        return SandboxError::Usage("no command".into());
    };
    let mut watched = SigSet::empty();
    watched.add(Signal::SIGCHLD);
    watched.add(Signal::SIGTERM);
    let failed = |what: &str, error: nix::Error| SandboxError::Confine(format!("{what}: {error}"));
    if let Err(error) = sigprocmask(SigmaskHow::SIG_BLOCK, Some(&watched), None) {
        return failed("blocking SIGCHLD and SIGTERM", error);
    }
    if let Err(error) = nix::sys::prctl::set_pdeathsig(Signal::SIGTERM) {
        return failed("the parent-death signal", error);
    }
    let group = nix::unistd::getpgrp();
    let end_group = || -> ! {
        let _ = killpg(group, Signal::SIGKILL);
        std::process::exit(137)
    };
    // Its parent died before the death signal was set: no signal will come.
    if u32::try_from(nix::unistd::getppid().as_raw()).ok() != Some(parent) {
        end_group();
    }
    // The child starts with an empty signal mask (std resets it before exec).
    let mut child = match std::process::Command::new(program).args(args).spawn() {
        Ok(child) => child,
        Err(source) => {
            return SandboxError::Exec {
                program: OsStr::to_string_lossy(program).into_owned(),
                source,
            };
        }
    };
    loop {
        match watched.wait() {
            Ok(Signal::SIGCHLD) => match child.try_wait() {
                Ok(Some(status)) => {
                    if let Some(code) = status.code() {
                        std::process::exit(code);
                    }
                    // Killed by a signal: end by it too, so the hook's ending reads the same.
                    let signal = status.signal().unwrap_or(Signal::SIGKILL as i32);
                    let _ = sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&watched), None);
                    if let Ok(signal) = Signal::try_from(signal) {
                        let _ = raise(signal);
                    }
                    std::process::exit(128 + signal);
                }
                Ok(None) => {}
                Err(_) => end_group(),
            },
            // SIGTERM: the parent died (or someone ends the hook).
            Ok(_) => end_group(),
            Err(_) => {}
        }
    }
}

/// Elsewhere no parent-death signal exists: the command is exec'd as before.
#[cfg(not(target_os = "linux"))]
fn supervise(_parent: u32, command: &[OsString]) -> SandboxError {
    exec(command)
}

fn exec(command: &[OsString]) -> SandboxError {
    use std::os::unix::process::CommandExt;
    let Some((program, args)) = command.split_first() else {
        return SandboxError::Usage("no command".into());
    };
    let source = std::process::Command::new(program).args(args).exec();
    SandboxError::Exec {
        program: OsStr::to_string_lossy(program).into_owned(),
        source,
    }
}

/// The profile of an allowed `Bash` call: read-only in plan mode, for read-only agents and for
/// every command the classifier proved read-only (in any mode); workspace-write otherwise.
pub fn profile_for(
    read_only_shell: bool,
    mode: muster_config::PermissionMode,
    read_only_agent: bool,
) -> SandboxProfile {
    if read_only_shell || mode == muster_config::PermissionMode::Plan || read_only_agent {
        SandboxProfile::ReadOnly
    } else {
        SandboxProfile::WorkspaceWrite
    }
}
