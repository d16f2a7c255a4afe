//! The sandbox trampoline as its own program, for this crate's tests (the `muster` binary has
//! the same entry as its hidden `sandbox-exec` subcommand): confine, then exec the command.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let error = muster_agents::sandbox::exec_sandboxed(&args);
    eprintln!("{error}");
    ExitCode::from(126)
}
