//! `muster runs`: list runs with their status.

use crate::cli::GlobalArgs;
use crate::exit::{Exit, ExitError};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[arg(long)]
    pub run: Option<String>,
    #[arg(long)]
    pub json: bool,
}

pub fn execute(_global: &GlobalArgs, _args: Args) -> anyhow::Result<Exit> {
    Err(ExitError::not_built("runs").into())
}
