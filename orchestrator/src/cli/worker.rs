//! `muster worker`: claim batch lines from a PostgreSQL store and run them.

use std::time::Duration;

use crate::exit::Exit;
use crate::project::Globals;
use crate::worker::{DEFAULT_HEARTBEAT, DEFAULT_LEASE, WorkerOptions};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The name `muster workers` shows (default: HOST-PID).
    #[arg(long)]
    pub name: Option<String>,
    /// Lines this worker runs at once.
    #[arg(long, default_value_t = 1)]
    pub slots: usize,
    /// Where the lines' workspaces are made (default: work/ under the worker's directory).
    #[arg(long = "repo-cache", value_name = "DIR")]
    pub repo_cache: Option<std::path::PathBuf>,
    /// How long a lease lasts without a heartbeat, in milliseconds.
    #[arg(long = "lease-ms", default_value_t = DEFAULT_LEASE.as_millis() as u64)]
    pub lease_ms: u64,
    /// How often the worker renews its leases, in milliseconds.
    #[arg(long = "heartbeat-ms", default_value_t = DEFAULT_HEARTBEAT.as_millis() as u64)]
    pub heartbeat_ms: u64,
    /// Internal: run this work item (ITEM@TOKEN) as the worker's child process.
    #[arg(long = "run-item", hide = true, requires = "repo_cache")]
    pub run_item: Option<String>,
    /// Internal: continue this run of the item's line.
    #[arg(long = "resume-run", hide = true, requires = "run_item")]
    pub resume_run: Option<String>,
}

pub fn execute(global: &Globals, args: Args) -> anyhow::Result<Exit> {
    if let (Some(fence), Some(cache)) = (&args.run_item, &args.repo_cache) {
        return crate::worker::run_item(global, fence, cache, args.resume_run.as_deref());
    }
    crate::worker::run(
        global,
        WorkerOptions {
            name: args.name,
            slots: args.slots,
            repo_cache: args.repo_cache,
            lease: Duration::from_millis(args.lease_ms),
            heartbeat: Duration::from_millis(args.heartbeat_ms),
        },
    )
}
