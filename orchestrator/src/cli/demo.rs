//! `muster demo`: the offline demonstration.

use crate::cli::GlobalArgs;
use crate::exit::{Exit, ExitError};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to run it (default: a new temporary directory).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
}

pub fn execute(_global: &GlobalArgs, _args: Args) -> anyhow::Result<Exit> {
    Err(ExitError::not_built("demo").into())
}
