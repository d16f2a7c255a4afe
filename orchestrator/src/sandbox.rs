//! The run's Bash sandbox from the `[sandbox]` settings and the running kernel
//! (`muster_agents::sandbox`), and its hidden trampoline subcommand.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

use muster_agents::sandbox::{Sandbox, SandboxMode, SandboxSupport, probe};
use muster_config::Settings;

use crate::exit::{Exit, ExitError};

/// The hidden subcommand the Bash tool starts: `muster sandbox-exec POLICY… -- bash …`.
pub const TRAMPOLINE_SUBCOMMAND: &str = "sandbox-exec";

/// If this process is the trampoline (`argv[1]` is [`TRAMPOLINE_SUBCOMMAND`]), confine it and
/// exec the command; returns only when that failed, with the exit code to use. Runs before
/// anything starts a thread.
pub fn run_trampoline_if_asked() -> Option<u8> {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(std::ffi::OsStr::new(TRAMPOLINE_SUBCOMMAND)) {
        return None;
    }
    let rest: Vec<OsString> = args.collect();
    eprintln!("{}", muster_agents::sandbox::exec_sandboxed(&rest));
    Some(126)
}

/// The trampoline through which an unconfined hook starts (this executable's
/// [`TRAMPOLINE_SUBCOMMAND`]), so that it dies with this process as a confined one does;
/// `None` when the executable cannot be found (the hook then starts as `sh` directly).
pub fn hook_launcher() -> Option<Vec<OsString>> {
    std::env::current_exe()
        .ok()
        .map(|program| vec![program.into(), TRAMPOLINE_SUBCOMMAND.into()])
}

/// Whether Bash is confined, and why not when it is not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxState {
    Active(Arc<Sandbox>),
    /// `[sandbox] mode = "off"`.
    Off,
    /// `auto` on a kernel that cannot confine (the reason says what it lacks).
    Unsupported(String),
}

impl SandboxState {
    /// The sandbox of a run with `settings` on this kernel (`home`: the user's home, which
    /// the sandbox keeps readable): `required` on a kernel without Landlock fails with exit 2,
    /// naming the kernel's ABI.
    pub fn for_run(settings: &Settings, home: Option<PathBuf>) -> Result<SandboxState, ExitError> {
        let mode = SandboxMode::parse(&settings.sandbox.mode.value).unwrap_or(SandboxMode::Auto);
        if mode == SandboxMode::Off {
            return Ok(SandboxState::Off);
        }
        let support = probe();
        let trampoline = match std::env::current_exe() {
            Ok(program) if support.enforced() => Ok(program),
            Ok(_) => Err(unsupported(&support)),
            Err(error) => Err(format!("muster cannot find its own executable ({error})")),
        };
        match trampoline {
            Ok(program) => Ok(SandboxState::Active(Arc::new(Sandbox {
                trampoline: vec![program.into(), TRAMPOLINE_SUBCOMMAND.into()],
                mode,
                network: settings.sandbox.network.value,
                writable: settings
                    .sandbox
                    .writable
                    .iter()
                    .cloned()
                    .chain(settings.additional_directory_paths())
                    .collect(),
                home,
                protected_files: muster_config::protected::ProtectedFiles::standard(),
            }))),
            Err(reason) if mode == SandboxMode::Required => Err(ExitError::new(
                Exit::Usage,
                format!(
                    "[sandbox] mode = \"required\" (from {}), but {reason}; run on a kernel with Landlock (Linux 5.13 or later, with landlock in the lsm= list), or set [sandbox] mode = \"auto\" or \"off\"",
                    settings.sandbox.mode.origin
                ),
            )),
            Err(reason) => Ok(SandboxState::Unsupported(reason)),
        }
    }

    /// The sandbox for the run's context, warning once when `auto` finds it unsupported.
    pub fn into_run_sandbox(self) -> Option<Arc<Sandbox>> {
        match self {
            SandboxState::Active(sandbox) => Some(sandbox),
            SandboxState::Off => None,
            SandboxState::Unsupported(reason) => {
                tracing::warn!(
                    "Bash runs unconfined: {reason} ([sandbox] mode = \"auto\"; \"required\" would refuse to run)"
                );
                None
            }
        }
    }

    /// What `muster check` reports for an allowed Bash call under `profile`.
    pub fn label(&self, profile: muster_agents::sandbox::SandboxProfile) -> String {
        match self {
            SandboxState::Active(_) => profile.name().to_owned(),
            SandboxState::Off => "off".to_owned(),
            SandboxState::Unsupported(_) => "unconfined (not supported here)".to_owned(),
        }
    }
}

fn unsupported(support: &SandboxSupport) -> String {
    format!(
        "this kernel cannot confine Bash (Landlock ABI {}: none)",
        support.landlock_abi
    )
}
