//! `muster resume`: continue a stopped, crashed or decided run.

use crate::cli::GlobalArgs;
use crate::exit::{Exit, ExitError};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run (default: the newest interrupted or decided run).
    pub run: Option<String>,
    #[arg(long = "base-url")]
    pub base_url: Option<String>,
    #[arg(long)]
    pub cassette: Option<std::path::PathBuf>,
    #[arg(long = "max-duration")]
    pub max_duration: Option<u64>,
}

pub fn execute(_global: &GlobalArgs, _args: Args) -> anyhow::Result<Exit> {
    Err(ExitError::not_built("resume").into())
}
