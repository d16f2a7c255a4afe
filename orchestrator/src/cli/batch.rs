//! `muster batch`: one run per line of a JSONL file, resumable.

use crate::cli::GlobalArgs;
use crate::exit::{Exit, ExitError};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The batch file: one {"id", "prompt", "workspace"?, "team"?} per line.
    pub file: std::path::PathBuf,
    /// Runs in distinct workspaces that may go at once.
    #[arg(long, default_value_t = 2)]
    pub concurrency: usize,
    /// Where to write one result line per task.
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
}

pub fn execute(_global: &GlobalArgs, _args: Args) -> anyhow::Result<Exit> {
    Err(ExitError::not_built("batch").into())
}
