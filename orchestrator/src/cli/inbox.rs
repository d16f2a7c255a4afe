//! `muster inbox`: show an agent's (or the human's) mailbox.

use crate::cli::GlobalArgs;
use crate::exit::{Exit, ExitError};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The agent, or `human` for what waits on a person.
    pub agent: Option<String>,
    #[arg(long)]
    pub run: Option<String>,
    #[arg(long)]
    pub json: bool,
}

pub fn execute(_global: &GlobalArgs, _args: Args) -> anyhow::Result<Exit> {
    Err(ExitError::not_built("inbox").into())
}
