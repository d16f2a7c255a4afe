//! The `muster` binary: parse, run, map the outcome to an exit code.

use std::process::ExitCode;

use clap::Parser;
use muster::cli::{Cli, dispatch};
use muster::exit::Exit;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(exit) => ExitCode::from(exit.code()),
        Err(error) => {
            eprintln!("muster: {error:#}");
            ExitCode::from(Exit::for_error(&error).code())
        }
    }
}
