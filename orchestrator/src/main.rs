//! The `muster` binary: parse, run, map the outcome to an exit code.

use std::process::ExitCode;

use clap::Parser;
use muster::cli::{Cli, dispatch};
use muster::exit::Exit;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(&cli.global.log_level);
    match dispatch(cli) {
        Ok(exit) => ExitCode::from(exit.code()),
        Err(error) => {
            eprintln!("muster: {error:#}");
            ExitCode::from(Exit::for_error(&error).code())
        }
    }
}

/// Logs go to stderr, never stdout; `--log-level` sets the level (a bad value is reported and
/// the default `warn` kept).
fn init_logging(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(level).unwrap_or_else(|error| {
        eprintln!("muster: --log-level {level:?} is not a level ({error}); using warn");
        tracing_subscriber::EnvFilter::new("warn")
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}
