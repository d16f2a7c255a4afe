//! `muster reject`: reject a plan or permission request as `human`.

use crate::cli::decide::{Decision, decide};
use crate::exit::Exit;
use crate::project::Globals;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The request id.
    pub id: String,
    /// Why: the agent reads it and plans again.
    #[arg(long)]
    pub feedback: String,
    /// The run, when the request id exists in more than one.
    #[arg(long)]
    pub run: Option<String>,
}

pub fn execute(global: &Globals, args: Args) -> anyhow::Result<Exit> {
    decide(
        global,
        args.run.as_deref(),
        &args.id,
        Decision::Reject {
            feedback: args.feedback,
        },
    )
}
