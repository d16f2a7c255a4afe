//! `muster check`: show the permission decision for a call without running it.

use crate::cli::GlobalArgs;
use crate::exit::{Exit, ExitError};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[arg(long = "permission-mode", alias = "mode")]
    pub permission_mode: Option<String>,
    #[arg(long = "agent-kind")]
    pub agent_kind: Option<String>,
    #[arg(long)]
    pub agent: Option<String>,
    #[arg(long = "parent-mode")]
    pub parent_mode: Option<String>,
    #[arg(long = "plan-file")]
    pub plan_file: Option<std::path::PathBuf>,
    #[arg(long)]
    pub workspace: Option<std::path::PathBuf>,
    #[arg(long)]
    pub json: bool,
    /// Read {"tool", "input"} JSON lines from stdin, one verdict per line.
    #[arg(long)]
    pub stdin: bool,
    pub tool: Option<String>,
    pub input_json: Option<String>,
}

pub fn execute(_global: &GlobalArgs, _args: Args) -> anyhow::Result<Exit> {
    Err(ExitError::not_built("check").into())
}
