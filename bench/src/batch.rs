//! `muster bench batch --workers N,…`: a batch over N `muster worker` processes on a
//! PostgreSQL store, the lines on the `script` provider with a fixed model latency L.
//!
//! For each N: N workers (slots 1, each its own directory and HOME) are started and waited
//! for (each says it is ready), then `muster batch FILE --workers` runs `lines` lines; its wall
//! time, from spawn to exit, gives the throughput (lines per second), set against N × the
//! one-worker row's (the target: at least 0.8 at 4 workers, with the model latency
//! dominating). Each line is one model turn that answers after L.
//!
//! The store's own share per item is measured apart, in this process, on a queue of its own:
//! the mean time of a claim, of a heartbeat renewing one lease, of committing a result, and
//! what fencing adds to a write (a message sent through a fenced store against the same
//! through an unfenced one).

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use muster_mailbox::{
    MailboxStore, NewMessage, NewRun, NewWorkItem, PostgresStore, RosterEntry, StoreOptions,
    WorkerInfo,
};
use serde::Serialize;
use serde_json::json;

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    pub url: String,
    pub workers: Vec<usize>,
    pub lines: usize,
    pub latency: Duration,
    /// Iterations of each store operation measured.
    pub operations: usize,
    pub muster: PathBuf,
    pub dir: PathBuf,
}

/// One figure.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `throughput` or `store_overhead`.
    pub scenario: &'static str,
    /// Workers of a throughput row; the operation of an overhead row.
    pub what: String,
    pub lines: usize,
    pub model_latency_ms: f64,
    pub wall_ms: f64,
    pub lines_per_second: f64,
    /// Against N × the one-worker row's throughput.
    pub of_linear: Option<f64>,
    /// Mean time of one store operation (overhead rows).
    pub mean_ms: Option<f64>,
    pub target: &'static str,
    pub target_met: Option<bool>,
}

pub fn run(options: &Options) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    let mut one: Option<f64> = None;
    for &workers in &options.workers {
        let wall = run_batch(options, workers)?;
        let throughput = options.lines as f64 / wall.as_secs_f64();
        if workers == 1 {
            one = Some(throughput);
        }
        let of_linear = one.map(|one| throughput / (one * workers as f64));
        let at_four = workers == 4;
        rows.push(Row {
            scenario: "throughput",
            what: format!("{workers} worker(s)"),
            lines: options.lines,
            model_latency_ms: options.latency.as_secs_f64() * 1000.0,
            wall_ms: wall.as_secs_f64() * 1000.0,
            lines_per_second: throughput,
            of_linear,
            mean_ms: None,
            target: if at_four { ">= 0.8 of linear" } else { "" },
            target_met: if at_four {
                of_linear.map(|r| r >= 0.8)
            } else {
                None
            },
        });
    }
    let runtime = crate::tokio_runtime()?;
    for (what, mean_ms) in runtime.block_on(store_overhead(options))? {
        rows.push(Row {
            scenario: "store_overhead",
            what: what.into(),
            lines: options.operations,
            model_latency_ms: 0.0,
            wall_ms: mean_ms * options.operations as f64,
            lines_per_second: 0.0,
            of_linear: None,
            mean_ms: Some(mean_ms),
            target: "",
            target_met: None,
        });
    }
    Ok(rows)
}

/// A worker directory: the script provider with the cassette, nothing else.
fn worker_dir(root: &Path, cassette: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(root.join(".muster"))?;
    std::fs::create_dir_all(root.join(".git"))?;
    std::fs::write(
        root.join(".muster/settings.toml"),
        format!(
            "provider = \"script\"\n[providers.script]\ncassette = \"{}\"\n",
            cassette.display()
        ),
    )?;
    Ok(())
}

/// Kills the worker processes it holds when dropped (a failed run leaves none behind).
struct Workers(Vec<Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            if let Ok(pid) = i32::try_from(child.id())
                && let Some(pid) = rustix::process::Pid::from_raw(pid)
            {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
        }
        for child in &mut self.0 {
            let _ = child.wait();
        }
    }
}

fn run_batch(options: &Options, count: usize) -> anyhow::Result<Duration> {
    let scratch = tempfile::Builder::new()
        .prefix("muster-bench-batch-")
        .tempdir_in(&options.dir)
        .with_context(|| format!("cannot create a directory in {}", options.dir.display()))?;
    let cassette = scratch.path().join("cassette.jsonl");
    let latency = u64::try_from(options.latency.as_millis()).unwrap_or(u64::MAX);
    std::fs::write(
        &cassette,
        json!({"agent": "main", "reply": {"content": [{"type": "text", "text": "done"}],
            "stop_reason": "end_turn"}, "fault": {"first_byte_delay_ms": latency}})
        .to_string()
            + "\n",
    )?;
    let mut workers = Workers(Vec::new());
    for n in 1..=count {
        let dir = scratch.path().join(format!("worker-{n}"));
        worker_dir(&dir, &cassette)?;
        let mut child = Command::new(&options.muster)
            .current_dir(&dir)
            .args(["--store", &options.url, "worker", "--name"])
            .arg(format!("bench-{}-{n}", std::process::id()))
            .env("HOME", &dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot run {}", options.muster.display()))?;
        let stderr = child.stderr.take();
        workers.0.push(child);
        wait_until_ready(stderr)?;
    }
    let batch = scratch.path().join("batch");
    std::fs::create_dir_all(batch.join(".muster"))?;
    std::fs::create_dir_all(batch.join(".git"))?;
    let lines: Vec<String> = (1..=options.lines)
        .map(|n| json!({"id": format!("line-{n}"), "prompt": "Answer."}).to_string())
        .collect();
    std::fs::write(batch.join("tasks.jsonl"), lines.join("\n") + "\n")?;
    let started = Instant::now();
    let output = Command::new(&options.muster)
        .current_dir(&batch)
        .args(["--store", &options.url, "batch", "tasks.jsonl", "--workers"])
        .args(["--out", "results.jsonl"])
        .env("HOME", &batch)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()?;
    let wall = started.elapsed();
    if !output.status.success() {
        anyhow::bail!(
            "the batch over {count} worker(s) failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    drop(workers);
    Ok(wall)
}

/// Forwards nothing; returns once the worker said it is ready (its second line onwards is
/// drained in the background so it never blocks on a full pipe).
fn wait_until_ready(stderr: Option<std::process::ChildStderr>) -> anyhow::Result<()> {
    let stderr = stderr.context("the worker has no stderr")?;
    let mut lines = BufReader::new(stderr).lines();
    let mut said = Vec::new();
    for line in lines.by_ref() {
        let line = line?;
        if line.contains("ready on") {
            std::thread::spawn(move || for _ in lines {});
            return Ok(());
        }
        said.push(line);
    }
    anyhow::bail!("a worker exited before it was ready: {}", said.join("\n"))
}

/// Mean times of the store's work-queue operations and of fencing, on a queue of their own.
async fn store_overhead(options: &Options) -> anyhow::Result<Vec<(&'static str, f64)>> {
    let store: Arc<dyn MailboxStore> =
        Arc::new(PostgresStore::open(&options.url, StoreOptions::default()).await?);
    let run_id = muster::ids::new_run_id(&mut fastrand::Rng::new());
    let tag = format!("bench-{}-{run_id}", std::process::id());
    let queue = format!("bench:{tag}");
    let n = options.operations.max(1);
    let items: Vec<NewWorkItem> = (0..n)
        .map(|i| NewWorkItem {
            id: format!("{queue}#{i}"),
            queue: queue.clone(),
            payload: json!({}),
        })
        .collect();
    store.enqueue_work(items).await?;
    let worker = WorkerInfo {
        name: tag.clone(),
        host: muster::worker::host_name(),
        slots: 1,
        pid: i64::from(std::process::id()),
    };
    let lease = Duration::from_secs(600);
    let (mut claim, mut beat, mut finish) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let mut fences = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let item = store
            .claim_work(Some(&queue), &worker.name, lease)
            .await?
            .context("an enqueued item could not be claimed")?;
        claim += started.elapsed();
        let started = Instant::now();
        store.heartbeat(&worker, &[item.fence()], lease).await?;
        beat += started.elapsed();
        fences.push(item.fence());
    }
    // Fencing: the same sends through an unfenced and a fenced store, interleaved.
    store
        .create_run(NewRun {
            id: run_id.clone(),
            slug: format!("bench-{run_id}"),
            team: Some("bench".into()),
            workspace: options.dir.display().to_string(),
            batch_line_id: None,
            auto_gate: muster_mailbox::AutoGate {
                open: true,
                consecutive_denials: 0,
                limit: 3,
            },
            launch_options: json!({}),
            project_id: None,
        })
        .await?;
    for agent in ["lead", "worker"] {
        store
            .add_member(
                &run_id,
                RosterEntry {
                    agent: agent.into(),
                    kind: if agent == "lead" {
                        muster_mailbox::MemberKind::Lead
                    } else {
                        muster_mailbox::MemberKind::Teammate
                    },
                    definition: Some("general".into()),
                    parent: None,
                },
            )
            .await?;
    }
    let fenced: Arc<dyn MailboxStore> = Arc::new(
        PostgresStore::open(&options.url, StoreOptions::default())
            .await?
            .fenced(fences[0].clone()),
    );
    let send = |i: usize| NewMessage {
        run_id: run_id.clone(),
        sender: "lead".into(),
        recipient: "worker".into(),
        body: muster_mailbox::MessageBody::Text {
            text: format!("m{i}"),
            summary: None,
        },
        idempotency_key: None,
    };
    let (mut plain, mut checked) = (Duration::ZERO, Duration::ZERO);
    for i in 0..n {
        let started = Instant::now();
        store.send(send(2 * i)).await?;
        plain += started.elapsed();
        let started = Instant::now();
        fenced.send(send(2 * i + 1)).await?;
        checked += started.elapsed();
    }
    for fence in &fences {
        let started = Instant::now();
        store.finish_work(fence, json!({})).await?;
        finish += started.elapsed();
    }
    store.retire_worker(&worker.name).await?;
    // Milliseconds per operation; the fencing row may come out below zero when the noise
    // is larger than the row lock it measures.
    let mean = |total: Duration| total.as_secs_f64() * 1000.0 / n as f64;
    Ok(vec![
        ("claim", mean(claim)),
        ("heartbeat (one lease)", mean(beat)),
        ("finish (result committed)", mean(finish)),
        ("send, unfenced", mean(plain)),
        ("send, fenced", mean(checked)),
        (
            "fencing per write (fenced - unfenced)",
            mean(checked) - mean(plain),
        ),
    ])
}

pub fn render(rows: &[Row]) -> String {
    let mut text = String::from(
        "muster bench batch: lines over N workers (script provider, fixed model latency)\n\n",
    );
    text.push_str(&format!(
        "{:<12} {:>6} {:>8} {:>10} {:>10} {:>10}  {}\n",
        "workers", "lines", "L (ms)", "wall (ms)", "lines/s", "of linear", "target"
    ));
    for row in rows.iter().filter(|r| r.scenario == "throughput") {
        text.push_str(&format!(
            "{:<12} {:>6} {:>8.0} {:>10.0} {:>10.2} {:>10}  {}{}\n",
            row.what,
            row.lines,
            row.model_latency_ms,
            row.wall_ms,
            row.lines_per_second,
            row.of_linear.map_or("-".into(), |r| format!("{r:.2}")),
            row.target,
            match row.target_met {
                Some(true) => " (met)",
                Some(false) => " (NOT met)",
                None => "",
            }
        ));
    }
    text.push_str("\nthe store's share per item (mean of each operation, this process):\n");
    for row in rows.iter().filter(|r| r.scenario == "store_overhead") {
        text.push_str(&format!(
            "  {:<40} {:>8.3} ms  ({} times)\n",
            row.what,
            row.mean_ms.unwrap_or(0.0),
            row.lines
        ));
    }
    text
}
