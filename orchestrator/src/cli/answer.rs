//! `muster answer`: answer a question as `human`.

use crate::cli::GlobalArgs;
use crate::exit::{Exit, ExitError};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The request id (for example question-alice-3).
    pub id: String,
    /// The answer.
    pub text: String,
}

pub fn execute(_global: &GlobalArgs, _args: Args) -> anyhow::Result<Exit> {
    Err(ExitError::not_built("answer").into())
}
