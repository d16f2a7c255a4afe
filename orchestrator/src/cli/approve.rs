//! `muster approve`: approve a plan or permission request as `human`.

use crate::cli::GlobalArgs;
use crate::exit::{Exit, ExitError};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The request id (for example plan-alice-2).
    pub id: String,
    /// The mode the teammate enters.
    #[arg(long)]
    pub mode: Option<String>,
    #[arg(long)]
    pub feedback: Option<String>,
    /// An edited plan to approve instead of the submitted one.
    #[arg(long = "plan-file")]
    pub plan_file: Option<std::path::PathBuf>,
    /// Start execution with a fresh context holding only the approved plan.
    #[arg(long = "clear-context")]
    pub clear_context: bool,
}

pub fn execute(_global: &GlobalArgs, _args: Args) -> anyhow::Result<Exit> {
    Err(ExitError::not_built("approve").into())
}
