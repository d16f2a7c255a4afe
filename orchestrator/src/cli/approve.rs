//! `muster approve`: approve a plan or permission request as `human`.

use crate::cli::decide::{Decision, decide};
use crate::exit::Exit;
use crate::project::Globals;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The request id (for example plan-alice-2).
    pub id: String,
    /// The mode the agent enters on approval.
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
    /// The run, when the request id exists in more than one.
    #[arg(long)]
    pub run: Option<String>,
}

pub fn execute(global: &Globals, args: Args) -> anyhow::Result<Exit> {
    let edited_plan = match &args.plan_file {
        Some(path) => Some(std::fs::read_to_string(path).map_err(|e| {
            crate::exit::ExitError::new(Exit::Usage, format!("--plan-file {}: {e}", path.display()))
        })?),
        None => None,
    };
    let decision = Decision::Approve {
        mode: args.mode,
        feedback: args.feedback,
        edited_plan,
        clear_context: args.clear_context,
    };
    decide(global, args.run.as_deref(), &args.id, decision)
}
