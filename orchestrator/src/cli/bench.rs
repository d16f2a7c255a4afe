//! `muster bench`: benchmarks that print figures (they never fail on a missed target).

use std::path::PathBuf;

use muster_mailbox::SyncMode;

use crate::bench::mailbox;
use crate::cli::GlobalArgs;
use crate::exit::{Exit, ExitError};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub target: BenchTarget,
}

#[derive(Debug, clap::Subcommand)]
pub enum BenchTarget {
    /// muster's store against the per-inbox JSON-file design, side by side.
    Mailbox(MailboxArgs),
    /// Team orchestration overhead (not built yet).
    Team,
}

#[derive(Debug, clap::Args)]
pub struct MailboxArgs {
    /// Sender counts for the throughput scenarios, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    pub senders: Vec<usize>,
    /// Messages per throughput and closed-loop scenario.
    #[arg(long, default_value_t = 1000)]
    pub messages: usize,
    /// Size of each message body.
    #[arg(long = "body-bytes", default_value_t = 1024)]
    pub body_bytes: usize,
    /// Only this sync setting for the throughput scenarios (default: both full and normal).
    #[arg(long)]
    pub sync: Option<String>,
    /// Tiny sizes, for CI.
    #[arg(long)]
    pub smoke: bool,
    /// Print the rows as a JSON array.
    #[arg(long)]
    pub json: bool,
    /// Where to put the scratch files (default: the system's temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

pub fn execute(_global: &GlobalArgs, args: Args) -> anyhow::Result<Exit> {
    match args.target {
        BenchTarget::Mailbox(args) => bench_mailbox(args),
        BenchTarget::Team => Err(ExitError::not_built("bench team").into()),
    }
}

fn bench_mailbox(args: MailboxArgs) -> anyhow::Result<Exit> {
    let syncs = match args.sync.as_deref() {
        None => vec![SyncMode::Full, SyncMode::Normal],
        Some("full") => vec![SyncMode::Full],
        Some("normal") => vec![SyncMode::Normal],
        Some(other) => {
            return Err(ExitError::new(
                Exit::Usage,
                format!("--sync {other:?}: expected full or normal"),
            )
            .into());
        }
    };
    if args.senders.is_empty() || args.senders.contains(&0) {
        return Err(ExitError::new(
            Exit::Usage,
            "--senders needs counts of at least 1, like 1,8,32",
        )
        .into());
    }
    let (senders, messages) = if args.smoke {
        (vec![1, 4], 40)
    } else {
        (args.senders, args.messages.max(1))
    };
    let options = mailbox::Options {
        senders,
        messages,
        body_bytes: args.body_bytes,
        syncs,
        smoke: args.smoke,
        dir: args.dir.unwrap_or_else(std::env::temp_dir),
    };
    let rows = mailbox::run(&options)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print!("{}", mailbox::render(&rows));
    }
    Ok(Exit::Success)
}
