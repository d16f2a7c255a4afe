//! The `muster-bench` binary: `muster bench ARGS…` runs it with those arguments.

use std::process::ExitCode;

use clap::Parser as _;
use muster::exit::Exit;

fn main() -> ExitCode {
    // The sandbox bench confines its Bash calls through this binary's own trampoline, which
    // must start before any thread.
    if let Some(code) = muster::sandbox::run_trampoline_if_asked() {
        return ExitCode::from(code);
    }
    // An error only means a provider is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = muster_bench::cli::Args::parse();
    let code = match muster_bench::cli::execute(args) {
        Ok(exit) => exit.code(),
        Err(error) => {
            eprintln!("muster bench: {error:#}");
            Exit::for_error(&error).code()
        }
    };
    ExitCode::from(code)
}
