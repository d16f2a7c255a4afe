//! `muster prune`: delete settled history of finished runs.

use crate::cli::GlobalArgs;
use crate::exit::{Exit, ExitError};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only history older than this many days.
    #[arg(long = "older-than")]
    pub older_than: u32,
}

pub fn execute(_global: &GlobalArgs, _args: Args) -> anyhow::Result<Exit> {
    Err(ExitError::not_built("prune").into())
}
