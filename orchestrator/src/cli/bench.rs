//! `muster bench`: benchmarks.

use crate::cli::GlobalArgs;
use crate::exit::{Exit, ExitError};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub target: BenchTarget,
}

pub fn execute(_global: &GlobalArgs, _args: Args) -> anyhow::Result<Exit> {
    Err(ExitError::not_built("bench").into())
}

#[derive(Debug, clap::Subcommand)]
pub enum BenchTarget {
    /// The mailbox against the file-inbox design.
    Mailbox,
    /// Team orchestration overhead.
    Team,
}
