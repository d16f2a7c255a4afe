//! `muster config`: show the effective settings.

use crate::cli::GlobalArgs;
use crate::exit::{Exit, ExitError};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub action: ConfigAction,
}

pub fn execute(_global: &GlobalArgs, _args: Args) -> anyhow::Result<Exit> {
    Err(ExitError::not_built("config").into())
}

#[derive(Debug, clap::Subcommand)]
pub enum ConfigAction {
    /// The effective settings, each value with the layer it came from.
    Show {
        #[arg(long)]
        json: bool,
    },
}
