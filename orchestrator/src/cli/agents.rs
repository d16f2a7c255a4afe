//! `muster agents`: list agent definitions.

use crate::cli::GlobalArgs;
use crate::exit::{Exit, ExitError};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub action: AgentsAction,
}

pub fn execute(_global: &GlobalArgs, _args: Args) -> anyhow::Result<Exit> {
    Err(ExitError::not_built("agents").into())
}

#[derive(Debug, clap::Subcommand)]
pub enum AgentsAction {
    /// Every definition with its source file and any warnings.
    List {
        #[arg(long)]
        json: bool,
    },
}
