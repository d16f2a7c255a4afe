//! `muster run`: run one agent, or a team, on a prompt.

use crate::exit::Exit;
use crate::launch::{ResumeFlags, RunFlags};
use crate::project::Globals;

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
    #[arg(long = "permission-mode", value_parser = crate::launch::parse_permission_mode)]
    pub permission_mode: Option<muster_config::PermissionMode>,
    /// Who approves the main agent's plan: human or policy:FILE.
    #[arg(long, value_parser = crate::launch::parse_approver)]
    pub approver: Option<muster_config::Responder>,
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
    #[arg(long, default_value = "text", value_parser = crate::launch::OutputFormat::parse)]
    pub output: crate::launch::OutputFormat,
    /// With `--output stream-json`: also `model_delta` lines while a response streams (not
    /// durable: `"durable": false`).
    #[arg(long = "include-partial")]
    pub include_partial: bool,
    /// Stop the run once it has run this many seconds (exit 3); time it spends stopped does
    /// not count: each `muster resume` starts the clock again.
    #[arg(long = "max-duration")]
    pub max_duration: Option<u64>,
    /// The git remote (URL or path) teammates placed on workers fetch from and push to;
    /// overrides the team file's `remote`. Never the workspace's `origin` by default.
    #[arg(long)]
    pub remote: Option<String>,
    /// Give a completed or interrupted run (RUN, else this project's newest) a new prompt:
    /// its agent (a team: its lead) keeps its context, budgets and spend carry on, the
    /// deadline restarts. A team keeps its teammates (idle, woken by mail or a task); when
    /// the team's result was applied to your tree, the worktrees start again from your tree
    /// as it is now, else the team goes on from its integration branch.
    #[arg(
        long = "continue",
        value_name = "RUN",
        num_args = 0..=1,
        conflicts_with_all = [
            "team", "agent", "workspace", "permission_mode", "approver", "provider", "model",
            "strict", "record", "remote",
        ],
    )]
    pub continue_run: Option<Option<String>>,
}

pub fn execute(global: &Globals, args: Args) -> anyhow::Result<Exit> {
    let output = args
        .output
        .with_partial(args.include_partial)
        .map_err(|message| crate::exit::ExitError::new(Exit::Usage, message))?;
    if let Some(run) = args.continue_run {
        let flags = ResumeFlags {
            run,
            base_url: args.base_url,
            cassette: args.cassette,
            max_duration: args.max_duration,
            output,
            ..ResumeFlags::default()
        };
        return crate::lifecycle::continue_run(global, args.prompt, flags);
    }
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
        output,
        max_duration: args.max_duration,
        batch_line_id: None,
        remote: args.remote,
        ..RunFlags::default()
    };
    crate::lifecycle::run(global, flags)
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use crate::cli::{Cli, Command};
    use crate::launch::OutputFormat;
    use muster_config::{PermissionMode, Responder};

    fn run_args(flags: &[&str]) -> Result<super::Args, clap::Error> {
        let argv = ["muster", "run", "-p", "x"].iter().chain(flags);
        match Cli::try_parse_from(argv)?.command {
            Command::Run(args) => Ok(args),
            other => panic!("not a run: {other:?}"),
        }
    }

    /// Every documented spelling parses to its typed value; anything else is a usage error
    /// naming what was expected.
    #[test]
    fn flags_parse_every_documented_spelling() {
        for (text, mode) in [
            ("default", PermissionMode::Default),
            ("acceptEdits", PermissionMode::AcceptEdits),
            ("plan", PermissionMode::Plan),
            ("bypassPermissions", PermissionMode::BypassPermissions),
            ("auto", PermissionMode::Auto),
            ("dontAsk", PermissionMode::DontAsk),
        ] {
            let args = run_args(&["--permission-mode", text]).unwrap();
            assert_eq!(args.permission_mode, Some(mode), "{text}");
        }
        for (text, approver) in [
            ("human", Responder::Human),
            ("lead", Responder::Lead),
            (
                "policy:ci/policy.toml",
                Responder::Policy("ci/policy.toml".into()),
            ),
        ] {
            let args = run_args(&["--approver", text]).unwrap();
            assert_eq!(args.approver, Some(approver), "{text}");
        }
        for (text, output) in [
            ("text", OutputFormat::Text),
            ("json", OutputFormat::Json),
            ("stream-json", OutputFormat::StreamJson { partial: false }),
        ] {
            assert_eq!(
                run_args(&["--output", text]).unwrap().output,
                output,
                "{text}"
            );
        }
        assert_eq!(run_args(&[]).unwrap().output, OutputFormat::Text);
        for (flag, bad, says) in [
            ("--permission-mode", "accept-edits", "acceptEdits"),
            ("--approver", "policy:", "policy:FILE"),
            ("--output", "yaml", "expected text, json or stream-json"),
        ] {
            let error = run_args(&[flag, bad]).unwrap_err().to_string();
            assert!(error.contains(says), "{flag} {bad}: {error}");
        }
    }
}
