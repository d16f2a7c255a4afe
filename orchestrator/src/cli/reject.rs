//! `muster reject`: reject a plan or permission request as `human`.

use crate::cli::GlobalArgs;
use crate::exit::{Exit, ExitError};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The request id.
    pub id: String,
    #[arg(long)]
    pub feedback: String,
}

pub fn execute(_global: &GlobalArgs, _args: Args) -> anyhow::Result<Exit> {
    Err(ExitError::not_built("reject").into())
}
