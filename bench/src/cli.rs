//! `muster bench` (this crate's `muster-bench` binary): benchmarks that print figures (they
//! never fail on a missed target).

use std::path::PathBuf;

use muster_mailbox::SyncMode;

use crate::{mailbox, team};
use muster::exit::{Exit, ExitError};

/// `muster bench [--store URL] TARGET …`, as `muster` hands it over.
#[derive(Debug, clap::Parser)]
#[command(name = "muster bench", version)]
pub struct Args {
    /// A PostgreSQL store's URL: the mailbox bench measures it beside SQLite; the batch bench's
    /// workers share it.
    #[arg(long, global = true)]
    pub store: Option<String>,
    #[command(subcommand)]
    pub target: BenchTarget,
}

#[derive(Debug, clap::Subcommand)]
pub enum BenchTarget {
    /// muster's store against the per-inbox JSON-file design, side by side.
    Mailbox(MailboxArgs),
    /// Team orchestration: overhead per tool call, wall time against the ideal, peak memory.
    Team(TeamArgs),
    /// The Bash sandbox's cost per call: `true` unconfined and in both profiles, interleaved.
    Sandbox(SandboxArgs),
    /// A batch over N `muster worker` processes on a PostgreSQL store (--store): throughput
    /// against N × one worker's, and the store's share per item.
    Batch(BatchArgs),
    /// The share of input the Anthropic prompt cache would serve, from the requests muster
    /// sends to the fake model server, and the input cost with and without it.
    Cache(CacheArgs),
    /// `muster serve`'s run page for a large run: the first view's store reads and render.
    Cockpit(CockpitArgs),
}

#[derive(Debug, clap::Args)]
pub struct CockpitArgs {
    /// Teammates of the run.
    #[arg(long, default_value_t = 200)]
    pub agents: usize,
    /// Mails in the run.
    #[arg(long, default_value_t = 10_000)]
    pub mails: usize,
    /// Renders timed (the first counts against the target; the median is printed beside).
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
    /// Tiny sizes, for CI.
    #[arg(long)]
    pub smoke: bool,
    /// Print the row as JSON.
    #[arg(long)]
    pub json: bool,
    /// Where to put the temporary store (default: the system's temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct CacheArgs {
    /// Model turns of the single-agent run.
    #[arg(long, default_value_t = 30)]
    pub turns: usize,
    /// Teammates of the team run.
    #[arg(long, default_value_t = 3)]
    pub teammates: usize,
    /// Model turns of each teammate.
    #[arg(long = "teammate-turns", default_value_t = 15)]
    pub teammate_turns: usize,
    /// Characters of each file an agent reads.
    #[arg(long = "file-chars", default_value_t = 3000)]
    pub file_chars: usize,
    /// Print each request's figures to stderr.
    #[arg(long)]
    pub trace: bool,
    /// Tiny sizes, for CI.
    #[arg(long)]
    pub smoke: bool,
    /// Print the rows as a JSON array.
    #[arg(long)]
    pub json: bool,
    /// Where to put the temporary projects (default: the system's temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct BatchArgs {
    /// Worker counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub workers: Vec<usize>,
    /// Lines per batch.
    #[arg(long, default_value_t = 16)]
    pub lines: usize,
    /// The fixed model latency of every line's one model turn, in milliseconds.
    #[arg(long = "model-latency-ms", default_value_t = 1000)]
    pub model_latency_ms: u64,
    /// Times each store operation is measured.
    #[arg(long, default_value_t = 200)]
    pub operations: usize,
    /// Tiny sizes, for CI.
    #[arg(long)]
    pub smoke: bool,
    /// Print the rows as a JSON array.
    #[arg(long)]
    pub json: bool,
    /// Where to put the scratch directories (default: the system's temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct SandboxArgs {
    /// Calls per variant.
    #[arg(long, default_value_t = 200)]
    pub calls: usize,
    /// Tiny sizes, for CI.
    #[arg(long)]
    pub smoke: bool,
    /// Print the rows as a JSON array.
    #[arg(long)]
    pub json: bool,
    /// Where to put the temporary workspace (default: the system's temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct TeamArgs {
    /// Synthetic teammates, one independent task each.
    #[arg(long, default_value_t = 8)]
    pub teammates: usize,
    /// The fixed model latency of every scripted response, in milliseconds.
    #[arg(long = "model-latency-ms", default_value_t = 200)]
    pub model_latency_ms: u64,
    /// Only this mailbox sync setting (default: normal, then full beside it).
    #[arg(long)]
    pub sync: Option<String>,
    /// Teammates of the idle-memory scenario.
    #[arg(long = "idle-teammates", default_value_t = 200)]
    pub idle_teammates: usize,
    /// How long each teammate's Bash command of the parallel-Bash scenario runs, in
    /// milliseconds.
    #[arg(long = "bash-ms", default_value_t = 2000)]
    pub bash_ms: u64,
    /// Teammates of the parallel-Bash scenario.
    #[arg(long = "bash-teammates", default_value_t = 4)]
    pub bash_teammates: usize,
    /// Runs of the overhead scenario at each sync setting, interleaved; rows give the median
    /// run and the spread.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Tiny sizes, for CI.
    #[arg(long)]
    pub smoke: bool,
    /// Print the rows as a JSON array.
    #[arg(long)]
    pub json: bool,
    /// Where to put the temporary projects (default: the system's temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
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
    /// Runs of each throughput scenario, interleaved; rows give the median and the spread.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Only the disk probe and the throughput scenarios.
    #[arg(long = "throughput-only")]
    pub throughput_only: bool,
    /// Tiny sizes, for CI.
    #[arg(long)]
    pub smoke: bool,
    /// Print the rows as a JSON array.
    #[arg(long)]
    pub json: bool,
    /// Where to put the scratch files (default: the system's temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Internal: one of the processes of the multi-process PostgreSQL scenario, sending
    /// `--messages` messages as this sender into the store `--store` names.
    #[arg(long = "pg-sender", hide = true)]
    pub pg_sender: Option<String>,
}

pub fn execute(args: Args) -> anyhow::Result<Exit> {
    let store = args.store;
    match args.target {
        BenchTarget::Batch(args) => bench_batch(store, args),
        BenchTarget::Mailbox(args) => bench_mailbox(store, args),
        BenchTarget::Team(args) => bench_team(args),
        BenchTarget::Sandbox(args) => bench_sandbox(args),
        BenchTarget::Cache(args) => bench_cache(args),
        BenchTarget::Cockpit(args) => bench_cockpit(args),
    }
}

fn bench_cockpit(args: CockpitArgs) -> anyhow::Result<Exit> {
    let (agents, mails, repeats) = if args.smoke {
        (3, 20, 2)
    } else {
        (args.agents, args.mails, args.repeats)
    };
    let base = args.dir.unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::Builder::new()
        .prefix("muster-bench-cockpit-")
        .tempdir_in(&base)?;
    let row = crate::tokio_runtime()?.block_on(crate::cockpit::run(
        dir.path(),
        agents,
        mails,
        repeats,
    ))?;
    print_rows(args.json, &[row], |rows| {
        rows.iter().map(crate::cockpit::render).collect()
    })
}

fn bench_cache(args: CacheArgs) -> anyhow::Result<Exit> {
    if args.turns < 2 || args.teammates == 0 || args.teammate_turns < 2 {
        return Err(ExitError::new(
            Exit::Usage,
            "--turns and --teammate-turns need at least 2, --teammates at least 1",
        )
        .into());
    }
    let (turns, teammates, teammate_turns) = if args.smoke {
        (6, 2, 3)
    } else {
        (args.turns, args.teammates, args.teammate_turns)
    };
    let options = crate::cache::Options {
        turns,
        teammates,
        teammate_turns,
        file_chars: args.file_chars,
        muster: crate::muster_binary()?,
        dir: args.dir.unwrap_or_else(std::env::temp_dir),
        trace: args.trace,
    };
    let rows = crate::cache::run(&options)?;
    print_rows(args.json, &rows, crate::cache::render)
}

fn bench_batch(store: Option<String>, args: BatchArgs) -> anyhow::Result<Exit> {
    let url = match store {
        Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => url,
        _ => {
            return Err(ExitError::new(
                Exit::Usage,
                "muster bench batch needs --store postgres://… (the workers' shared store)",
            )
            .into());
        }
    };
    if args.workers.is_empty() || args.workers.contains(&0) || args.lines == 0 {
        return Err(ExitError::new(
            Exit::Usage,
            "--workers needs counts of at least 1 (like 1,2,4) and --lines at least 1",
        )
        .into());
    }
    let (workers, lines, latency, operations) = if args.smoke {
        (vec![1, 2], 4, 20, 5)
    } else {
        (
            args.workers,
            args.lines,
            args.model_latency_ms,
            args.operations.max(1),
        )
    };
    let options = crate::batch::Options {
        url,
        workers,
        lines,
        latency: std::time::Duration::from_millis(latency),
        operations,
        muster: crate::muster_binary()?,
        dir: args.dir.unwrap_or_else(std::env::temp_dir),
    };
    let rows = crate::batch::run(&options)?;
    print_rows(args.json, &rows, crate::batch::render)
}

fn bench_sandbox(args: SandboxArgs) -> anyhow::Result<Exit> {
    let calls = if args.smoke { 3 } else { args.calls.max(1) };
    let dir = args.dir.unwrap_or_else(std::env::temp_dir);
    let rows = crate::sandbox::run(calls, &dir)?;
    print_rows(args.json, &rows, crate::sandbox::render)
}

fn bench_team(args: TeamArgs) -> anyhow::Result<Exit> {
    let syncs = syncs(args.sync.as_deref(), [SyncMode::Normal, SyncMode::Full])?;
    if args.teammates == 0 {
        return Err(ExitError::new(Exit::Usage, "--teammates needs at least 1").into());
    }
    let muster = crate::muster_binary()?;
    let (teammates, idle_teammates, turns, calls_per_turn, latency_ms) = if args.smoke {
        (2, 3, 2, 2, args.model_latency_ms.min(5))
    } else {
        (
            args.teammates,
            args.idle_teammates,
            5,
            4,
            args.model_latency_ms,
        )
    };
    let options = team::Options {
        teammates,
        turns,
        calls_per_turn,
        latency: std::time::Duration::from_millis(latency_ms),
        syncs,
        repeats: if args.smoke { 1 } else { args.repeats },
        idle_teammates,
        idle_hold: std::time::Duration::from_millis(if args.smoke { 50 } else { 3000 }),
        bash: std::time::Duration::from_millis(if args.smoke { 50 } else { args.bash_ms }),
        bash_teammates: if args.smoke { 2 } else { args.bash_teammates },
        muster,
        dir: args.dir.unwrap_or_else(std::env::temp_dir),
    };
    let rows = team::run(&options)?;
    print_rows(args.json, &rows, team::render)
}

/// `muster bench mailbox [--store postgres://…]`: with a server's URL, its scenarios run
/// beside SQLite's in the same run.
fn bench_mailbox(store: Option<String>, args: MailboxArgs) -> anyhow::Result<Exit> {
    if let (Some(sender), Some(store)) = (&args.pg_sender, &store) {
        return mailbox::pg_sender_child(store, sender, args.messages, args.body_bytes)
            .map(|()| Exit::Success);
    }
    let postgres = match store {
        Some(store) if muster_config::store_url::is_postgres_url(&store) => Some(store),
        Some(store) => {
            return Err(ExitError::new(
                Exit::Usage,
                format!(
                    "--store {store}: the mailbox bench makes its own SQLite files; --store \
                     takes a postgres:// URL here, to bench a server beside them"
                ),
            )
            .into());
        }
        None => None,
    };
    let syncs = syncs(args.sync.as_deref(), [SyncMode::Full, SyncMode::Normal])?;
    if args.senders.is_empty() || args.senders.contains(&0) {
        return Err(ExitError::new(
            Exit::Usage,
            "--senders needs counts of at least 1, like 1,8,32",
        )
        .into());
    }
    let (senders, messages, repeats) = if args.smoke {
        (vec![1, 4], 40, 1)
    } else {
        (args.senders, args.messages.max(1), args.repeats.max(1))
    };
    let options = mailbox::Options {
        senders,
        messages,
        repeats,
        throughput_only: args.throughput_only,
        body_bytes: args.body_bytes,
        syncs,
        smoke: args.smoke,
        dir: args.dir.unwrap_or_else(std::env::temp_dir),
        postgres,
    };
    let rows = mailbox::run(&options)?;
    print_rows(args.json, &rows, mailbox::render)
}

/// `--sync full|normal`: that setting alone; without it, both in the order given.
fn syncs(given: Option<&str>, both: [SyncMode; 2]) -> anyhow::Result<Vec<SyncMode>> {
    match given {
        None => Ok(both.to_vec()),
        Some("full") => Ok(vec![SyncMode::Full]),
        Some("normal") => Ok(vec![SyncMode::Normal]),
        Some(other) => Err(ExitError::new(
            Exit::Usage,
            format!("--sync {other:?}: expected full or normal"),
        )
        .into()),
    }
}

/// The rows as a JSON array (`--json`), else as the bench's table.
fn print_rows<R: serde::Serialize>(
    json: bool,
    rows: &[R],
    render: impl Fn(&[R]) -> String,
) -> anyhow::Result<Exit> {
    if json {
        println!("{}", serde_json::to_string_pretty(rows)?);
    } else {
        print!("{}", render(rows));
    }
    Ok(Exit::Success)
}
