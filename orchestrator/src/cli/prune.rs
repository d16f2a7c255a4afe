//! `muster prune`: deletes settled history of finished runs, never a decision.

use muster_mailbox::MailboxStore;

use crate::cli::inspect::{open, print_json, runtime};
use crate::exit::{Exit, ExitError};
use crate::project::Globals;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only history older than this many days (at least 1).
    #[arg(long = "older-than")]
    pub older_than: u32,
    #[arg(long)]
    pub json: bool,
}

const DAY_MS: i64 = 24 * 60 * 60 * 1000;

pub fn execute(global: &Globals, args: Args) -> anyhow::Result<Exit> {
    if args.older_than == 0 {
        return Err(ExitError::new(
            Exit::Usage,
            "--older-than 0 would prune history written a moment ago; give at least 1 day",
        )
        .into());
    }
    let (_, store) = open(global)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let cutoff = now - i64::from(args.older_than) * DAY_MS;
    let report = runtime()?.block_on(store.prune(cutoff))?;
    if args.json {
        print_json(&report)?;
        return Ok(Exit::Success);
    }
    println!(
        "Deleted {} settled message(s) older than {} day(s) from {} finished run(s); kept {} request(s) and response(s).",
        report.messages_deleted,
        args.older_than,
        report.runs_pruned.len(),
        report.decisions_kept
    );
    for (run, status) in &report.runs_skipped {
        println!(
            "Left run {run} alone: it is {} (only finished runs are pruned).",
            status.as_str()
        );
    }
    Ok(Exit::Success)
}
