//! `muster answer`: answer a question as `human`.

use crate::cli::decide::{Decision, decide};
use crate::exit::Exit;
use crate::project::Globals;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The request id (for example question-alice-3).
    pub id: String,
    /// The answer.
    pub text: String,
    /// The run, when the request id exists in more than one.
    #[arg(long)]
    pub run: Option<String>,
}

pub fn execute(global: &Globals, args: Args) -> anyhow::Result<Exit> {
    decide(
        global,
        args.run.as_deref(),
        &args.id,
        Decision::Answer { text: args.text },
    )
}
