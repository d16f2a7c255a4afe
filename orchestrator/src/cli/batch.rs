//! `muster batch`: one run per line of a JSONL file, resumable.

use crate::batch::BatchOptions;
use crate::exit::Exit;
use crate::project::Globals;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The batch file: one {"id", "prompt", "workspace"?, "team"?} per line.
    pub file: std::path::PathBuf,
    /// Runs in distinct workspaces that may go at once.
    #[arg(long, default_value_t = 2)]
    pub concurrency: usize,
    /// Where to write one result line per task (default: stdout, unless --output is given).
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
    /// What stdout carries for each run: text, json (its run_finished event) or stream-json
    /// (every event). Without it, stdout carries the result lines when there is no --out.
    #[arg(long, value_parser = crate::launch::OutputFormat::parse)]
    pub output: Option<crate::launch::OutputFormat>,
    /// Queue the lines for `muster worker` processes (a PostgreSQL store) and wait for
    /// their results instead of running them here.
    #[arg(long)]
    pub workers: bool,
    /// Internal: run only this line (the child process of a batch).
    #[arg(long, hide = true)]
    pub line: Option<String>,
    /// Internal: continue this run of the line instead of starting one.
    #[arg(long = "resume-run", hide = true, requires = "line")]
    pub resume_run: Option<String>,
}

pub fn execute(global: &Globals, args: Args) -> anyhow::Result<Exit> {
    match &args.line {
        Some(id) => crate::batch::run_line(global, &args.file, id, args.resume_run.as_deref()),
        None => crate::batch::run(
            global,
            BatchOptions {
                file: args.file,
                concurrency: args.concurrency,
                out: args.out,
                output: args.output,
                workers: args.workers,
            },
        ),
    }
}
