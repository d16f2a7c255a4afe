//! `muster run`: run one agent, or a team, on a prompt.

use crate::cli::GlobalArgs;
use crate::exit::Exit;
use crate::launch::RunFlags;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The prompt (the goal of a team run).
    #[arg(short = 'p', long = "prompt")]
    pub prompt: String,
    /// Team file (default: muster.team.toml at the project root, if present).
    #[arg(long)]
    pub team: Option<std::path::PathBuf>,
    /// Agent definition for a single-agent run (default: general).
    #[arg(long)]
    pub agent: Option<String>,
    /// Workspace directory (default: the project root).
    #[arg(long)]
    pub workspace: Option<std::path::PathBuf>,
    /// Permission mode: default, acceptEdits, plan, bypassPermissions, auto, dontAsk.
    #[arg(long = "permission-mode")]
    pub permission_mode: Option<String>,
    /// Who approves the main agent's plan: human or policy:FILE.
    #[arg(long)]
    pub approver: Option<String>,
    /// Provider: anthropic, openai or script.
    #[arg(long)]
    pub provider: Option<String>,
    /// Base URL of the provider.
    #[arg(long = "base-url")]
    pub base_url: Option<String>,
    /// Model name.
    #[arg(long)]
    pub model: Option<String>,
    /// Cassette to replay with the script provider.
    #[arg(long)]
    pub cassette: Option<std::path::PathBuf>,
    /// Treat a cassette request-hash mismatch as an error.
    #[arg(long)]
    pub strict: bool,
    /// Record the responses received into a cassette.
    #[arg(long)]
    pub record: Option<std::path::PathBuf>,
    /// Output format on stdout: text, json or stream-json.
    #[arg(long, default_value = "text")]
    pub output: String,
    /// Stop the run after this many seconds (exit 3).
    #[arg(long = "max-duration")]
    pub max_duration: Option<u64>,
}

pub fn execute(global: &GlobalArgs, args: Args) -> anyhow::Result<Exit> {
    let flags = RunFlags {
        prompt: args.prompt,
        team: args.team,
        agent: args.agent,
        workspace: args.workspace,
        permission_mode: args.permission_mode,
        approver: args.approver,
        provider: args.provider,
        base_url: args.base_url,
        model: args.model,
        cassette: args.cassette,
        strict: args.strict,
        record: args.record,
        output: args.output,
        max_duration: args.max_duration,
        batch_line_id: None,
    };
    crate::lifecycle::run(global, flags)
}
