//! The `muster` binary: parse, run, map the outcome to an exit code.

use std::process::ExitCode;

use clap::Parser;
use muster::cli::{Cli, dispatch};
use muster::exit::{Exit, ExitError};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(exit) => ExitCode::from(exit.code()),
        Err(error) => {
            let exit = exit_for(&error);
            eprintln!("muster: {error:#}");
            ExitCode::from(exit.code())
        }
    }
}

/// The exit code an error ends the process with: a typed `ExitError` anywhere in the chain
/// decides; anything else is a failed run.
fn exit_for(error: &anyhow::Error) -> Exit {
    error
        .chain()
        .find_map(|cause| cause.downcast_ref::<ExitError>())
        .map_or(Exit::Failed, |e| e.exit)
}
