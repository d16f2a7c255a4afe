//! `muster resume`: continue a stopped, crashed or decided run.

use crate::exit::Exit;
use crate::launch::ResumeFlags;
use crate::project::Globals;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run (default: the newest interrupted or decided run).
    pub run: Option<String>,
    /// The model server's base URL, instead of the one the run was started with.
    #[arg(long = "base-url")]
    pub base_url: Option<String>,
    /// The cassette the `script` provider replays, instead of the stored one.
    #[arg(long)]
    pub cassette: Option<std::path::PathBuf>,
    /// Stop the run once it has run this many seconds from now (exit 3), instead of the
    /// stored duration (which a resume otherwise starts again); kept for later resumes.
    #[arg(long = "max-duration")]
    pub max_duration: Option<u64>,
    /// Without RUN: the newest unfinished run of any project in the store, not only this one's.
    #[arg(long = "all-projects")]
    pub all_projects: bool,
    /// Output format on stdout: text, json or stream-json.
    #[arg(long, default_value = "text", value_parser = crate::launch::OutputFormat::parse)]
    pub output: crate::launch::OutputFormat,
    /// With `--output stream-json`: also `model_delta` lines while a response streams (not
    /// durable: `"durable": false`).
    #[arg(long = "include-partial")]
    pub include_partial: bool,
}

pub fn execute(global: &Globals, args: Args) -> anyhow::Result<Exit> {
    let flags = ResumeFlags {
        run: args.run,
        all_projects: args.all_projects,
        base_url: args.base_url,
        cassette: args.cassette,
        max_duration: args.max_duration,
        output: args
            .output
            .with_partial(args.include_partial)
            .map_err(|message| crate::exit::ExitError::new(Exit::Usage, message))?,
    };
    crate::lifecycle::resume(global, flags)
}
