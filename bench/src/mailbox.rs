//! `muster bench mailbox`: muster's store against the per-inbox JSON-file design, on one disk,
//! in one run. See issue 3 for the scenarios and targets.

use muster_protocol::{RequestFamily, RequestId};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use muster_mailbox::*;
use serde::Serialize;
use serde_json::json;

mod commit_time;
mod pg_runs;
mod throughput;

use super::file_inbox::{self, FileInboxes};
use super::samples::{Samples, median};

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    pub senders: Vec<usize>,
    pub messages: usize,
    pub body_bytes: usize,
    pub syncs: Vec<SyncMode>,
    pub smoke: bool,
    pub dir: PathBuf,
    /// Runs of each throughput scenario, interleaved (muster's store with and without
    /// gathering released callers, then the file inbox); rows give their medians.
    pub repeats: usize,
    /// Only the disk probe and the throughput scenarios.
    pub throughput_only: bool,
    /// A PostgreSQL server (`--store postgres://…`): its scenarios run beside SQLite's, each
    /// in a schema of its own, dropped after.
    pub postgres: Option<String>,
}

/// Sizes that depend on `--smoke`.
struct Sizes {
    fsync_samples: usize,
    paced_seconds: f64,
    big_inbox: usize,
    sends_into_inbox: usize,
    store_messages: usize,
    store_recipients: usize,
    runs: usize,
}

impl Sizes {
    fn for_options(options: &Options) -> Sizes {
        if options.smoke {
            Sizes {
                fsync_samples: 20,
                paced_seconds: 1.0,
                big_inbox: 500,
                sends_into_inbox: 10,
                store_messages: 10_000,
                store_recipients: 10,
                runs: 3,
            }
        } else {
            Sizes {
                fsync_samples: 200,
                paced_seconds: 10.0,
                big_inbox: 10_000,
                sends_into_inbox: 100,
                store_messages: 1_000_000,
                store_recipients: 100,
                runs: 5,
            }
        }
    }
}

/// One line of the result (`--json` prints an array of these).
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `muster`, `file-inbox`, or `disk`.
    pub system: &'static str,
    pub scenario: String,
    pub senders: usize,
    pub msgs_per_s: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_ms: Option<f64>,
    /// Whether the scenario's target is met; `null` where there is no target.
    pub target_met: Option<bool>,
    /// What the target is, or other context (lock failures of the baseline).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The SQLite writer's phases (durable throughput rows of muster's store).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit_time: Option<commit_time::CommitPhases>,
}

impl Row {
    fn new(
        system: &'static str,
        scenario: impl Into<String>,
        senders: usize,
        samples: &Samples,
        wall: Duration,
    ) -> Row {
        let msgs_per_s =
            (wall.as_secs_f64() > 0.0).then(|| samples.len() as f64 / wall.as_secs_f64());
        Row {
            system,
            scenario: scenario.into(),
            senders,
            msgs_per_s,
            p50_ms: samples.p50(),
            p99_ms: samples.p99(),
            mean_ms: samples.mean(),
            target_met: None,
            note: None,
            commit_time: None,
        }
    }
}

/// Runs every scenario, printing progress on stderr; returns the rows.
pub fn run(options: &Options) -> anyhow::Result<Vec<Row>> {
    let sizes = Sizes::for_options(options);
    std::fs::create_dir_all(&options.dir)
        .with_context(|| format!("cannot create {}", options.dir.display()))?;
    let scratch = tempfile::Builder::new()
        .prefix("muster-bench-")
        .tempdir_in(&options.dir)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;

    progress("disk: fsync of 4 KiB appends");
    let mut disk = DiskProbe::open(scratch.path())?;
    disk.sample(sizes.fsync_samples)?;

    progress("file-inbox: no-loss check with 8 concurrent senders");
    file_inbox::no_loss_check(&fresh(scratch.path(), "no-loss")?, 8, 25)
        .map_err(anyhow::Error::msg)?;

    // The disk is probed again before every repeat, so the targets stand on the fsyncs of the
    // minutes the runs took, not on the probe's first few milliseconds.
    let throughput = throughput::rows(&runtime, scratch.path(), options, || {
        disk.sample(sizes.fsync_samples / 2)
    })?;
    let mut rows = vec![disk.row()];
    rows.extend(throughput);
    if options.throughput_only {
        return Ok(rows);
    }

    progress("send→received latency, 8 senders paced at 5 msg/s");
    let dir = fresh(scratch.path(), "paced")?;
    let mut paced = runtime.block_on(muster_latency(
        &dir,
        8,
        Some(5.0),
        sizes.paced_seconds,
        options,
    ))?;
    paced.target_met = paced.p99_ms.map(|p99| p99 <= 100.0);
    paced.note = Some("target: p99 ≤ 100 ms".into());
    rows.push(paced);
    rows.push(file_latency(
        &dir,
        8,
        Some(5.0),
        sizes.paced_seconds,
        options,
    )?);
    progress("send→received latency, 8 closed-loop senders");
    let dir = fresh(scratch.path(), "closed")?;
    rows.push(runtime.block_on(muster_latency(&dir, 8, None, sizes.paced_seconds, options))?);
    rows.push(file_latency(&dir, 8, None, sizes.paced_seconds, options)?);

    if let Some(url) = &options.postgres {
        rows.extend(runtime.block_on(postgres_rows(url, options, &sizes))?);
    }

    progress(&format!(
        "sends into an empty inbox vs one holding {}",
        sizes.big_inbox
    ));
    rows.extend(inbox_size_rows(scratch.path(), &runtime, &sizes, options)?);

    progress(&format!(
        "reopen and resume a store holding {} messages",
        sizes.store_messages
    ));
    rows.extend(reopen_rows(scratch.path(), &runtime, &sizes)?);
    Ok(rows)
}

/// The PostgreSQL store's rows (`synchronous_commit` as the server has it, `on` by default):
/// the same throughput and latency scenarios as SQLite's, each in a fresh schema.
async fn postgres_rows(url: &str, options: &Options, sizes: &Sizes) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    let fresh_store =
        async |name: &str, senders: usize| -> anyhow::Result<(Arc<dyn MailboxStore>, String)> {
            let schema = format!("muster_bench_{}_{name}", std::process::id());
            drop_schema(url, &schema).await?;
            let schema_url = create_schema(url, &schema).await?;
            let store: Arc<dyn MailboxStore> =
                Arc::new(PostgresStore::open(&schema_url, StoreOptions::default()).await?);
            populate(
                store.as_ref(),
                &format!("bench-{name}"),
                "/bench",
                senders,
                0,
            )
            .await?;
            Ok((store, schema))
        };
    for &senders in &options.senders {
        progress(&format!(
            "postgres: durable throughput, {senders} sender(s)"
        ));
        let (store, schema) = fresh_store(&format!("throughput_{senders}"), senders).await?;
        rows.push(
            throughput_on(store, "postgres", senders, options)
                .await?
                .named("throughput_postgres"),
        );
        drop_schema(url, &schema).await?;
    }
    progress("postgres: send→received latency, 8 senders paced at 5 msg/s");
    let (store, schema) = fresh_store("paced", 8).await?;
    rows.push(
        latency_on(
            store,
            "postgres",
            8,
            Some(5.0),
            sizes.paced_seconds,
            options,
        )
        .await?,
    );
    drop_schema(url, &schema).await?;
    progress("postgres: send→received latency, 8 closed-loop senders");
    let (store, schema) = fresh_store("closed", 8).await?;
    rows.push(latency_on(store, "postgres", 8, None, sizes.paced_seconds, options).await?);
    drop_schema(url, &schema).await?;

    for placement in [NotifyPlacement::InTransaction, NotifyPlacement::AfterCommit] {
        progress(&format!(
            "postgres: decisions by {DECIDERS} deciders, NOTIFY {}",
            placement.name()
        ));
        let (store, schema) = fresh_store(placement.name(), DECIDERS).await?;
        let schema_url = create_schema_url(url, &schema);
        rows.push(decisions_with_notify(&schema_url, store, placement, sizes).await?);
        drop_schema(url, &schema).await?;
    }

    progress(&format!(
        "postgres: {PROCESSES} processes sending into one run"
    ));
    let (store, schema) = fresh_store("processes", PROCESSES).await?;
    let schema_url = create_schema_url(url, &schema);
    rows.push(processes_into_one_run(&schema_url, store.as_ref(), options).await?);
    drop(store);
    drop_schema(url, &schema).await?;

    rows.extend(pg_runs::rows(url, options.messages, options.body_bytes).await?);
    Ok(rows)
}

/// Drops a bench schema; one that cannot be dropped is named on stderr, not an error (the
/// figures are taken, and the next create fails clearly if the server is gone).
async fn drop_schema_quietly(url: &str, schema: &str) {
    if let Err(error) = drop_schema(url, schema).await {
        eprintln!("bench: could not drop schema {schema}: {error}");
    }
}

/// Concurrent deciders of the NOTIFY-placement scenario: NOTIFY's lock is global, so its
/// cost shows under concurrent commits.
const DECIDERS: usize = 4;

#[derive(Clone, Copy, PartialEq)]
enum NotifyPlacement {
    /// The bench-only path: `pg_notify` inside the decision's transaction.
    InTransaction,
    /// What every command does: the decision commits, then `announce` (is the run live?
    /// then `pg_notify` in a statement of its own).
    AfterCommit,
}

impl NotifyPlacement {
    fn name(self) -> &'static str {
        match self {
            NotifyPlacement::InTransaction => "notify_in_transaction",
            NotifyPlacement::AfterCommit => "notify_after_commit",
        }
    }
}

/// `DECIDERS` tasks each decide their share of plan requests waiting on a person in run
/// `b`, which another store holds live (so every NOTIFY has a listener, as in a real run);
/// each sample is one decision from its start to its NOTIFY sent.
async fn decisions_with_notify(
    schema_url: &str,
    store: Arc<dyn MailboxStore>,
    placement: NotifyPlacement,
    sizes: &Sizes,
) -> anyhow::Result<Row> {
    let per_decider = sizes.sends_into_inbox * 2;
    for decider in 0..DECIDERS {
        for n in 0..per_decider {
            store
                .send(NewMessage {
                    run_id: "b".into(),
                    sender: format!("s{decider}"),
                    recipient: "lead".into(),
                    body: MessageBody::PlanApprovalRequest {
                        request_id: RequestId::new(
                            RequestFamily::Plan,
                            &format!("s{decider}"),
                            n as i64,
                        )
                        .to_string(),
                        plan_file: "plan.md".into(),
                        plan: "## Goal\nbench".into(),
                        responder: HUMAN.into(),
                        revision: 1,
                        previous_request_id: None,
                        allowed_prompts: Vec::new(),
                    },
                    idempotency_key: None,
                })
                .await?;
        }
    }
    let live_store = PostgresStore::open(schema_url, StoreOptions::default()).await?;
    let _live = live_store.hold_live("b").await?;
    let pg = Arc::new(PostgresStore::open(schema_url, StoreOptions::default()).await?);
    let samples = Arc::new(Mutex::new(Samples::default()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for decider in 0..DECIDERS {
        let (pg, samples) = (pg.clone(), samples.clone());
        tasks.push(tokio::spawn(async move {
            for n in 0..per_decider {
                let answer = NewResponse {
                    run_id: "b".into(),
                    sender: HUMAN.into(),
                    body: MessageBody::PlanApprovalResponse {
                        request_id: RequestId::new(
                            RequestFamily::Plan,
                            &format!("s{decider}"),
                            n as i64,
                        )
                        .to_string(),
                        approved: true,
                        feedback: None,
                        mode: None,
                        lowered_from: None,
                        edited_plan: None,
                        clear_context: false,
                        rule: None,
                        dropped_grants: Vec::new(),
                        grants: Vec::new(),
                    },
                    idempotency_key: None,
                };
                let start = Instant::now();
                match placement {
                    NotifyPlacement::InTransaction => {
                        pg.bench_only_respond_with_notify_in_transaction(answer)
                            .await?;
                    }
                    NotifyPlacement::AfterCommit => {
                        let response = pg.respond(answer).await?;
                        pg.announce("b", &response.recipient).await?;
                    }
                }
                lock(&samples).push(start.elapsed());
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let wall = started.elapsed();
    let samples = lock(&samples).clone();
    let mut row = Row::new("postgres", placement.name(), DECIDERS, &samples, wall);
    row.note = Some(match placement {
        NotifyPlacement::InTransaction => "bench-only path: pg_notify inside the decision's \
                                           transaction"
            .into(),
        NotifyPlacement::AfterCommit => "as every command does: COMMIT, then the is-live \
                                         probe and pg_notify"
            .into(),
    });
    Ok(row)
}

fn lock(samples: &Mutex<Samples>) -> std::sync::MutexGuard<'_, Samples> {
    match samples.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Processes of the multi-process scenario: each its own pool and connections, as
/// teammates on several machines would be.
const PROCESSES: usize = 4;

fn create_schema_url(url: &str, schema: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}options=-csearch_path%3D{schema}")
}

/// `PROCESSES` child bench processes each send their share to `lead` of run `b`; the rate
/// is every message over the wall time from the first start to the last exit, and each child
/// reports its own send latencies.
async fn processes_into_one_run(
    schema_url: &str,
    store: &dyn MailboxStore,
    options: &Options,
) -> anyhow::Result<Row> {
    let exe = std::env::current_exe().context("cannot find the muster-bench binary")?;
    let per_process = (options.messages / PROCESSES).max(1);
    let start = Instant::now();
    let children: Vec<_> = (0..PROCESSES)
        .map(|i| {
            tokio::process::Command::new(&exe)
                .args(["--store", schema_url, "mailbox", "--pg-sender"])
                .arg(format!("s{i}"))
                .args(["--messages", &per_process.to_string()])
                .args(["--body-bytes", &options.body_bytes.to_string()])
                .stdout(std::process::Stdio::piped())
                .kill_on_drop(true)
                .output()
        })
        .collect();
    let mut samples = Samples::default();
    for child in children {
        let output = child.await?;
        anyhow::ensure!(
            output.status.success(),
            "a sender process failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            if let Ok(micros) = line.trim().parse::<u64>() {
                samples.push(Duration::from_micros(micros));
            }
        }
    }
    let wall = start.elapsed();
    let stored = store.messages("b", Some("lead")).await?.len();
    anyhow::ensure!(
        stored == per_process * PROCESSES,
        "{stored} messages stored, {} sent",
        per_process * PROCESSES
    );
    let mut row = Row::new(
        "postgres",
        "processes_into_one_run",
        PROCESSES,
        &samples,
        wall,
    );
    row.note = Some(format!(
        "{PROCESSES} processes, one pool each; the rate includes their start-up"
    ));
    Ok(row)
}

/// A sender process of [`processes_into_one_run`]: prints each send's latency in µs.
pub fn pg_sender_child(
    url: &str,
    sender: &str,
    messages: usize,
    body_bytes: usize,
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let store = PostgresStore::open(url, StoreOptions::default()).await?;
        let mut out = std::io::stdout().lock();
        for i in 0..messages {
            let began = Instant::now();
            store
                .send(mail(sender, "lead", &format!("{sender}-{i}"), body_bytes))
                .await?;
            writeln!(out, "{}", began.elapsed().as_micros())?;
        }
        anyhow::Ok(())
    })
}

impl Row {
    fn named(mut self, scenario: &str) -> Row {
        self.scenario = scenario.to_owned();
        self
    }
}

fn progress(what: &str) {
    eprintln!("bench: {what}");
}

fn sync_name(sync: SyncMode) -> &'static str {
    match sync {
        SyncMode::Full => "full",
        SyncMode::Normal => "normal",
    }
}

fn fresh(scratch: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let dir = scratch.join(name);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// fdatasync of 4 KiB appends on the benchmark's filesystem, sampled at several moments of one
/// bench run.
struct DiskProbe {
    file: std::fs::File,
    latencies: Samples,
    spent: Duration,
    rounds: usize,
}

impl DiskProbe {
    fn open(dir: &Path) -> anyhow::Result<DiskProbe> {
        let path = dir.join("fsync-probe");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("cannot open the fsync probe {}", path.display()))?;
        Ok(DiskProbe {
            file,
            latencies: Samples::default(),
            spent: Duration::ZERO,
            rounds: 0,
        })
    }

    /// Takes `samples` more fsyncs; returns the p50 over all taken so far, in ms.
    fn sample(&mut self, samples: usize) -> anyhow::Result<f64> {
        let block = [0x5au8; 4096];
        let start = Instant::now();
        for _ in 0..samples.max(1) {
            let began = Instant::now();
            self.file.write_all(&block)?;
            self.file.sync_data()?;
            self.latencies.push(began.elapsed());
        }
        self.spent += start.elapsed();
        self.rounds += 1;
        Ok(self.latencies.p50().unwrap_or(1.0).max(0.001))
    }

    fn row(&self) -> Row {
        let mut row = Row::new("disk", "fsync_4k_append", 1, &self.latencies, self.spent);
        row.note = Some(format!(
            "fdatasync after each 4 KiB append; {} samples in {} rounds, before the runs and \
             before each repeat",
            self.latencies.len(),
            self.rounds
        ));
        row
    }
}

fn store_options(sync: SyncMode) -> StoreOptions {
    StoreOptions {
        sync,
        ..StoreOptions::default()
    }
}

/// A store with run `b` whose roster is `lead`, `s0..sN` and `r0..rM`.
async fn bench_store(
    dir: &Path,
    options: StoreOptions,
    senders: usize,
    recipients: usize,
) -> anyhow::Result<Arc<SqliteStore>> {
    let store = Arc::new(SqliteStore::open(&dir.join("muster.db"), options)?);
    let slug = format!(
        "bench-{}",
        dir.file_name().and_then(|n| n.to_str()).unwrap_or("run")
    );
    populate(
        store.as_ref(),
        &slug,
        &dir.display().to_string(),
        senders,
        recipients,
    )
    .await?;
    Ok(store)
}

/// Run `b` with `lead`, `s0..sN` and `r0..rM` on its roster.
async fn populate(
    store: &dyn MailboxStore,
    slug: &str,
    workspace: &str,
    senders: usize,
    recipients: usize,
) -> anyhow::Result<()> {
    store
        .create_run(NewRun {
            id: "b".into(),
            slug: slug.to_owned(),
            team: None,
            workspace: workspace.to_owned(),
            batch_line_id: None,
            auto_gate: AutoGate::default(),
            launch_options: json!({"bench": "mailbox"}),
            project_id: None,
        })
        .await?;
    let members = std::iter::once(("lead".to_owned(), MemberKind::Lead))
        .chain((0..senders).map(|i| (format!("s{i}"), MemberKind::Teammate)))
        .chain((0..recipients).map(|i| (format!("r{i}"), MemberKind::Teammate)));
    for (agent, kind) in members {
        store
            .add_member(
                "b",
                RosterEntry {
                    agent,
                    kind,
                    definition: None,
                    parent: None,
                },
            )
            .await?;
    }
    Ok(())
}

fn body(id: &str, body_bytes: usize) -> MessageBody {
    MessageBody::Text {
        text: format!(
            "{id} {}",
            "x".repeat(body_bytes.saturating_sub(id.len() + 1))
        ),
        summary: None,
    }
}

fn mail(from: &str, to: &str, id: &str, body_bytes: usize) -> NewMessage {
    NewMessage {
        run_id: "b".into(),
        sender: from.into(),
        recipient: to.into(),
        body: body(id, body_bytes),
        idempotency_key: None,
    }
}

async fn muster_throughput(
    dir: &Path,
    opened_with: StoreOptions,
    senders: usize,
    options: &Options,
) -> anyhow::Result<Row> {
    let store = bench_store(dir, opened_with, senders, 0).await?;
    for i in 0..WARMUP_SENDS {
        store
            .send(mail("s0", "lead", &format!("warm-{i}"), options.body_bytes))
            .await?;
    }
    let before = store.stats();
    let mut row = throughput_on(store.clone(), "muster", senders, options).await?;
    let (after, mean_ms) = (store.stats(), row.mean_ms);
    row.commit_time =
        mean_ms.and_then(|mean| commit_time::CommitPhases::between(&before, &after, mean));
    Ok(row)
}

/// Senders each sending their share to `lead`, every send durable when it returns.
async fn throughput_on(
    store: Arc<dyn MailboxStore>,
    system: &'static str,
    senders: usize,
    options: &Options,
) -> anyhow::Result<Row> {
    let per_sender = (options.messages / senders).max(1);
    let start = Instant::now();
    let tasks: Vec<_> = (0..senders)
        .map(|s| {
            let store = store.clone();
            let body_bytes = options.body_bytes;
            tokio::spawn(async move {
                let mut samples = Samples::default();
                for i in 0..per_sender {
                    let began = Instant::now();
                    store
                        .send(mail(
                            &format!("s{s}"),
                            "lead",
                            &format!("s{s}-{i}"),
                            body_bytes,
                        ))
                        .await?;
                    samples.push(began.elapsed());
                }
                Ok::<_, StoreError>(samples)
            })
        })
        .collect();
    let mut samples = Samples::default();
    for task in tasks {
        samples.extend(task.await??);
    }
    Ok(Row::new(system, "", senders, &samples, start.elapsed()))
}

fn file_throughput(
    dir: &Path,
    sync: SyncMode,
    senders: usize,
    options: &Options,
) -> anyhow::Result<Row> {
    let inboxes = FileInboxes::new(dir, sync == SyncMode::Full)?;
    for i in 0..WARMUP_SENDS {
        let entry = file_inbox::entry("s0", &format!("warm-{i}"), options.body_bytes);
        file_inbox::send_retrying(&inboxes, "lead", entry)?;
    }
    let per_sender = (options.messages / senders).max(1);
    let start = Instant::now();
    let (samples, lock_failures) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..senders)
            .map(|s| {
                let inboxes = inboxes.clone();
                scope.spawn(move || {
                    let mut samples = Samples::default();
                    let mut failures = 0;
                    for i in 0..per_sender {
                        let began = Instant::now();
                        let entry = file_inbox::entry(
                            &format!("s{s}"),
                            &format!("s{s}-{i}"),
                            options.body_bytes,
                        );
                        failures += file_inbox::send_retrying(&inboxes, "lead", entry)?;
                        samples.push(began.elapsed());
                    }
                    Ok::<_, file_inbox::InboxError>((samples, failures))
                })
            })
            .collect();
        let mut all = Samples::default();
        let mut failures = 0;
        for handle in handles {
            let (samples, failed) = handle
                .join()
                .map_err(|_| anyhow::anyhow!("a baseline sender panicked"))??;
            all.extend(samples);
            failures += failed;
        }
        anyhow::Ok((all, failures))
    })?;
    let mut row = Row::new("file-inbox", "", senders, &samples, start.elapsed());
    if lock_failures > 0 {
        row.note = Some(format!(
            "{lock_failures} send(s) hit ELOCKED after 10 lock retries and were retried whole"
        ));
    }
    Ok(row)
}

/// Send→received latency: from the `send` call until the recipient holds the leased message.
async fn muster_latency(
    dir: &Path,
    senders: usize,
    rate: Option<f64>,
    seconds: f64,
    options: &Options,
) -> anyhow::Result<Row> {
    let store = bench_store(dir, store_options(SyncMode::Full), senders, 0).await?;
    latency_on(store, "muster", senders, rate, seconds, options).await
}

async fn latency_on(
    store: Arc<dyn MailboxStore>,
    system: &'static str,
    senders: usize,
    rate: Option<f64>,
    seconds: f64,
    options: &Options,
) -> anyhow::Result<Row> {
    let epoch = store.open_epoch("b").await?;
    let per_sender = per_sender_count(rate, seconds, options.messages, senders);
    let total = per_sender * senders;
    let started: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let receiver = tokio::spawn({
        let (store, started) = (store.clone(), started.clone());
        async move {
            let mut samples = Samples::default();
            let mut received = 0;
            while received < total {
                // Everything pending at once, as an agent takes mail at a turn boundary.
                let batch = store.receive_batch("b", "lead", epoch, 256).await?;
                let held = Instant::now();
                for message in &batch {
                    let id = message
                        .body
                        .text()
                        .and_then(|t| t.split(' ').next())
                        .unwrap_or_default();
                    if let Some(began) = started.lock().ok().and_then(|map| map.get(id).copied()) {
                        samples.push(held - began);
                    }
                }
                received += batch.len();
                // Acked in the background, as a turn commit would: grouped with the next lease.
                let (store, keys) = (store.clone(), batch.into_iter().map(|m| m.key).collect());
                tokio::spawn(async move { store.ack("b", keys).await });
            }
            Ok::<_, StoreError>(samples)
        }
    });
    let start = Instant::now();
    let senders_done: Vec<_> = (0..senders)
        .map(|s| {
            let (store, started) = (store.clone(), started.clone());
            let body_bytes = options.body_bytes;
            tokio::spawn(async move {
                // Senders keep their own phase, spread evenly, rather than firing in lockstep.
                let mut ticker = rate.map(|r| {
                    let period = Duration::from_secs_f64(1.0 / r);
                    let phase = period.mul_f64(s as f64 / senders as f64);
                    tokio::time::interval_at(tokio::time::Instant::now() + phase, period)
                });
                for i in 0..per_sender {
                    if let Some(ticker) = ticker.as_mut() {
                        ticker.tick().await;
                    }
                    let id = format!("s{s}-{i}");
                    if let Ok(mut map) = started.lock() {
                        map.insert(id.clone(), Instant::now());
                    }
                    store
                        .send(mail(&format!("s{s}"), "lead", &id, body_bytes))
                        .await?;
                }
                Ok::<_, StoreError>(())
            })
        })
        .collect();
    for sender in senders_done {
        sender.await??;
    }
    let samples = receiver.await??;
    let scenario = if rate.is_some() {
        "latency_paced_5_per_s"
    } else {
        "latency_closed_loop"
    };
    Ok(Row::new(
        system,
        scenario,
        senders,
        &samples,
        start.elapsed(),
    ))
}

fn per_sender_count(rate: Option<f64>, seconds: f64, messages: usize, senders: usize) -> usize {
    match rate {
        Some(rate) => ((rate * seconds).round() as usize).max(1),
        None => (messages / senders).max(1),
    }
}

/// The baseline's receiver polls its inbox every 500 ms, as an in-process Claude Code teammate
/// does, and marks what it read with a locked rewrite.
const FILE_POLL: Duration = Duration::from_millis(500);

fn file_latency(
    dir: &Path,
    senders: usize,
    rate: Option<f64>,
    seconds: f64,
    options: &Options,
) -> anyhow::Result<Row> {
    let inboxes = FileInboxes::new(dir, true)?;
    let per_sender = per_sender_count(rate, seconds, options.messages, senders);
    let total = per_sender * senders;
    let started: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let start = Instant::now();
    let samples = std::thread::scope(|scope| {
        let receiver = scope.spawn(|| {
            let mut samples = Samples::default();
            let mut received = 0;
            while received < total {
                let unread = loop {
                    match inboxes.take_unread("lead") {
                        Ok(unread) => break unread,
                        Err(file_inbox::InboxError::Locked(_)) => continue,
                        Err(other) => return Err(other),
                    }
                };
                let held = Instant::now();
                for entry in &unread {
                    let id = entry.text.split(' ').next().unwrap_or_default();
                    if let Some(began) = started.lock().ok().and_then(|map| map.get(id).copied()) {
                        samples.push(held - began);
                    }
                }
                received += unread.len();
                if received < total {
                    std::thread::sleep(FILE_POLL);
                }
            }
            Ok(samples)
        });
        for s in 0..senders {
            let (inboxes, started) = (inboxes.clone(), started.clone());
            scope.spawn(move || {
                let interval = rate.map(|r| Duration::from_secs_f64(1.0 / r));
                let phase =
                    interval.map_or(Duration::ZERO, |i| i.mul_f64(s as f64 / senders as f64));
                let begin = Instant::now() + phase;
                for i in 0..per_sender {
                    if let Some(interval) = interval {
                        let due = begin + interval * i as u32;
                        std::thread::sleep(due.saturating_duration_since(Instant::now()));
                    }
                    let id = format!("s{s}-{i}");
                    if let Ok(mut map) = started.lock() {
                        map.insert(id.clone(), Instant::now());
                    }
                    file_inbox::send_retrying(
                        &inboxes,
                        "lead",
                        file_inbox::entry(&format!("s{s}"), &id, options.body_bytes),
                    )?;
                }
                Ok::<_, file_inbox::InboxError>(())
            });
        }
        receiver
            .join()
            .map_err(|_| anyhow::anyhow!("the baseline receiver panicked"))?
            .map_err(anyhow::Error::from)
    })?;
    let scenario = if rate.is_some() {
        "latency_paced_5_per_s"
    } else {
        "latency_closed_loop"
    };
    let mut row = Row::new("file-inbox", scenario, senders, &samples, start.elapsed());
    row.note = Some(format!(
        "the receiver polls every {} ms",
        FILE_POLL.as_millis()
    ));
    Ok(row)
}

/// Per-send latency into an empty inbox and into one already holding `big_inbox` messages,
/// median over several runs; muster's must stay within 10% and beat the baseline 20×.
fn inbox_size_rows(
    scratch: &Path,
    runtime: &tokio::runtime::Runtime,
    sizes: &Sizes,
    options: &Options,
) -> anyhow::Result<Vec<Row>> {
    let mut figures: HashMap<(&'static str, bool), Vec<SeriesFigures>> = HashMap::new();
    for run in 0..sizes.runs {
        for prefilled in [false, true] {
            let dir = fresh(scratch, &format!("inbox-{run}-{prefilled}"))?;
            let held = if prefilled { sizes.big_inbox } else { 0 };
            let (samples, wall) = runtime.block_on(muster_sends_into(
                &dir,
                held,
                sizes.sends_into_inbox,
                options.body_bytes,
            ))?;
            figures
                .entry(("muster", prefilled))
                .or_default()
                .push(summary(&samples, wall));
            let baseline_sends = (sizes.sends_into_inbox / 5).max(5);
            let (samples, wall) = file_sends_into(&dir, held, baseline_sends, options.body_bytes)?;
            figures
                .entry(("file-inbox", prefilled))
                .or_default()
                .push(summary(&samples, wall));
        }
    }
    let mut rows = Vec::new();
    for system in ["muster", "file-inbox"] {
        for prefilled in [false, true] {
            let runs = figures.remove(&(system, prefilled)).unwrap_or_default();
            let scenario = if prefilled {
                format!("send_into_{}_inbox", sizes.big_inbox)
            } else {
                "send_into_empty_inbox".into()
            };
            rows.push(Row {
                system,
                scenario,
                senders: 1,
                msgs_per_s: median(runs.iter().map(|r| r.0).collect()),
                p50_ms: median(runs.iter().map(|r| r.1).collect()),
                p99_ms: median(runs.iter().map(|r| r.2).collect()),
                mean_ms: None,
                target_met: None,
                note: Some(format!("median of {} runs", runs.len())),
                commit_time: None,
            });
        }
    }
    let find = |system: &str, big: bool| {
        rows.iter().position(|r| {
            r.system == system
                && r.scenario.starts_with("send_into_")
                && (r.scenario != "send_into_empty_inbox") == big
        })
    };
    if let (Some(empty), Some(big), Some(file_big)) = (
        find("muster", false),
        find("muster", true),
        find("file-inbox", true),
    ) {
        let within = match (rows[empty].p50_ms, rows[big].p50_ms) {
            (Some(empty_p50), Some(big_p50)) => Some(big_p50 <= empty_p50 * 1.10),
            _ => None,
        };
        let beats = match (rows[big].msgs_per_s, rows[file_big].msgs_per_s) {
            (Some(ours), Some(theirs)) => Some(ours >= 20.0 * theirs),
            _ => None,
        };
        rows[big].target_met = within.zip(beats).map(|(a, b)| a && b);
        rows[big].note = Some(format!(
            "median of {} runs; targets: p50 within 10% of the empty inbox's ({}), ≥ 20× the baseline ({})",
            sizes.runs,
            verdict(within),
            verdict(beats)
        ));
    }
    Ok(rows)
}

fn verdict(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "missed",
        None => "not measured",
    }
}

/// One measured series: msgs/s, p50 ms, p99 ms.
type SeriesFigures = (f64, f64, f64);

fn summary(samples: &Samples, wall: Duration) -> SeriesFigures {
    (
        samples.len() as f64 / wall.as_secs_f64().max(f64::MIN_POSITIVE),
        samples.p50().unwrap_or(0.0),
        samples.p99().unwrap_or(0.0),
    )
}

/// Unmeasured sends before each measured series, for both systems alike, so neither is
/// measured while its files are first allocated: more than the writing transactions after
/// which the store gives its WAL its room (16; see docs/store.md, "The WAL's room"), as a
/// store that has been running has.
const WARMUP_SENDS: usize = 20;

async fn muster_sends_into(
    dir: &Path,
    held: usize,
    sends: usize,
    body_bytes: usize,
) -> anyhow::Result<(Samples, Duration)> {
    let store = bench_store(dir, store_options(SyncMode::Full), 1, 0).await?;
    if held > 0 {
        let prefill = (0..held)
            .map(|i| mail("s0", "lead", &format!("old-{i}"), body_bytes))
            .collect();
        store.send_many(prefill).await?;
    }
    // A store that has been running has its history checkpointed into the database file.
    store.checkpoint().await?;
    for i in 0..WARMUP_SENDS {
        store
            .send(mail("s0", "lead", &format!("warm-{i}"), body_bytes))
            .await?;
    }
    let mut samples = Samples::default();
    let start = Instant::now();
    for i in 0..sends {
        let began = Instant::now();
        store
            .send(mail("s0", "lead", &format!("new-{i}"), body_bytes))
            .await?;
        samples.push(began.elapsed());
    }
    Ok((samples, start.elapsed()))
}

fn file_sends_into(
    dir: &Path,
    held: usize,
    sends: usize,
    body_bytes: usize,
) -> anyhow::Result<(Samples, Duration)> {
    let inboxes = FileInboxes::new(dir, true)?;
    if held > 0 {
        let prefill: Vec<_> = (0..held)
            .map(|i| file_inbox::entry("s0", &format!("old-{i}"), body_bytes))
            .collect();
        inboxes.prefill("lead", &prefill)?;
    }
    for i in 0..WARMUP_SENDS {
        file_inbox::send_retrying(
            &inboxes,
            "lead",
            file_inbox::entry("s0", &format!("warm-{i}"), body_bytes),
        )?;
    }
    let mut samples = Samples::default();
    let start = Instant::now();
    for i in 0..sends {
        let began = Instant::now();
        file_inbox::send_retrying(
            &inboxes,
            "lead",
            file_inbox::entry("s0", &format!("new-{i}"), body_bytes),
        )?;
        samples.push(began.elapsed());
    }
    Ok((samples, start.elapsed()))
}

/// Reopen + resume delivery of a big store: open the file, take a new epoch (voiding a
/// thousand leases of the dead one), and lease the next message. Small bodies keep the
/// prefill quick; the cost measured does not depend on them.
fn reopen_rows(
    scratch: &Path,
    runtime: &tokio::runtime::Runtime,
    sizes: &Sizes,
) -> anyhow::Result<Vec<Row>> {
    const BODY: usize = 64;
    let dir = fresh(scratch, "reopen")?;
    let db = dir.join("muster.db");
    runtime.block_on(async {
        let store = bench_store(
            &dir,
            store_options(SyncMode::Full),
            1,
            sizes.store_recipients,
        )
        .await?;
        let chunk = 100_000.min(sizes.store_messages);
        let hold = store.hold_writer().await?;
        let mut queued = Vec::new();
        for first in (0..sizes.store_messages).step_by(chunk) {
            let messages: Vec<_> = (first..(first + chunk).min(sizes.store_messages))
                .map(|i| {
                    mail(
                        "s0",
                        &format!("r{}", i % sizes.store_recipients),
                        &format!("m{i}"),
                        BODY,
                    )
                })
                .collect();
            let store = store.clone();
            queued.push(tokio::spawn(async move { store.send_many(messages).await }));
        }
        let mut waiting = store.queued();
        waiting.wait_for(|n| *n >= queued.len() as u64).await?;
        drop(hold);
        for job in queued {
            job.await??;
        }
        let epoch = store.open_epoch("b").await?;
        for _ in 0..1000.min(sizes.store_messages / 2) {
            store
                .try_receive("b", "r0", epoch, MessageFilter::Any)
                .await?;
        }
        // A store that has been running has checkpointed its history as it went; one bulk
        // prefill transaction would otherwise leave it all in the write-ahead log.
        store.checkpoint().await?;
        anyhow::Ok(())
    })?;
    let mut reopen = Samples::default();
    for _ in 0..sizes.runs {
        let began = Instant::now();
        runtime.block_on(async {
            let store = SqliteStore::open(&db, StoreOptions::default())?;
            let epoch = store.open_epoch("b").await?;
            store
                .try_receive("b", "r1", epoch, MessageFilter::Any)
                .await?
                .context("no message to resume")?;
            anyhow::Ok(())
        })?;
        reopen.push(began.elapsed());
    }
    let scenario = format!("reopen_resume_{}", sizes.store_messages);
    let mut ours = Row::new("muster", scenario.clone(), 1, &reopen, Duration::ZERO);
    ours.msgs_per_s = None;
    ours.target_met = reopen.p50().map(|ms| ms <= 100.0);
    ours.note = Some(format!(
        "open + new epoch + first lease, {} runs; target ≤ 100 ms",
        sizes.runs
    ));

    let inboxes = FileInboxes::new(&dir, true)?;
    let per_inbox = sizes.store_messages / sizes.store_recipients;
    for r in 0..sizes.store_recipients {
        let entries: Vec<_> = (0..per_inbox)
            .map(|i| file_inbox::entry("s0", &format!("m{i}"), BODY))
            .collect();
        inboxes.prefill(&format!("r{r}"), &entries)?;
    }
    let mut theirs_samples = Samples::default();
    for r in 0..sizes.runs {
        let began = Instant::now();
        let unread = inboxes.take_unread(&format!("r{}", r + 1))?;
        anyhow::ensure!(!unread.is_empty(), "the baseline inbox was empty");
        theirs_samples.push(began.elapsed());
    }
    let mut theirs = Row::new("file-inbox", scenario, 1, &theirs_samples, Duration::ZERO);
    theirs.msgs_per_s = None;
    theirs.note = Some(format!(
        "read + mark-read rewrite of one {per_inbox}-message inbox"
    ));
    Ok(vec![ours, theirs])
}

/// The rows as a person reads them: one line per scenario and system, with the ratio.
pub fn render(rows: &[Row]) -> String {
    let mut out = String::new();
    if let Some(disk) = rows.iter().find(|r| r.system == "disk") {
        out.push_str(&format!(
            "disk: fsync of a 4 KiB append  p50 {}  p99 {}\n\n",
            ms(disk.p50_ms),
            ms(disk.p99_ms)
        ));
    }
    let header = format!(
        "{:<34} {:>7} | {:>12} {:>9} {:>9} | {:>12} {:>9} {:>9} | {:>8} | {}\n",
        "scenario",
        "senders",
        "muster msg/s",
        "p50",
        "p99",
        "file msg/s",
        "p50",
        "p99",
        "ratio",
        "target"
    );
    out.push_str(&header);
    out.push_str(&"-".repeat(header.len().saturating_sub(1)));
    out.push('\n');
    let mut seen = Vec::new();
    for row in rows.iter().filter(|r| r.system == "muster") {
        let key = (row.scenario.clone(), row.senders);
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let theirs = rows.iter().find(|r| {
            r.system == "file-inbox" && r.scenario == row.scenario && r.senders == row.senders
        });
        let ratio = match (row.msgs_per_s, theirs.and_then(|t| t.msgs_per_s)) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.1}×", a / b),
            _ => match (row.p50_ms, theirs.and_then(|t| t.p50_ms)) {
                (Some(a), Some(b)) if a > 0.0 => format!("{:.1}× p50", b / a),
                _ => "-".into(),
            },
        };
        let target = match row.target_met {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "-",
        };
        out.push_str(&format!(
            "{:<34} {:>7} | {:>12} {:>9} {:>9} | {:>12} {:>9} {:>9} | {:>8} | {}\n",
            row.scenario,
            row.senders,
            rate(row.msgs_per_s),
            ms(row.p50_ms),
            ms(row.p99_ms),
            rate(theirs.and_then(|t| t.msgs_per_s)),
            ms(theirs.and_then(|t| t.p50_ms)),
            ms(theirs.and_then(|t| t.p99_ms)),
            ratio,
            target
        ));
    }
    out.push_str(&commit_time::render(rows));
    out.push_str(&render_postgres(rows));
    let notes: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            r.note
                .as_ref()
                .map(|n| format!("  {} {} ({} senders): {n}", r.system, r.scenario, r.senders))
        })
        .collect();
    if !notes.is_empty() {
        out.push_str("\nnotes:\n");
        out.push_str(&notes.join("\n"));
        out.push('\n');
    }
    out
}

/// The PostgreSQL rows beside SQLite's (sync full) for the same scenario and senders.
fn render_postgres(rows: &[Row]) -> String {
    let ours: Vec<&Row> = rows
        .iter()
        .filter(|r| r.system == "postgres" && !pg_runs::is_across_runs(r))
        .collect();
    if ours.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    let header = format!(
        "\n{:<34} {:>7} | {:>12} {:>9} {:>9} | {:>12} {:>9} {:>9} | {:>12}\n",
        "scenario",
        "senders",
        "sqlite msg/s",
        "p50",
        "p99",
        "pg msg/s",
        "p50",
        "p99",
        "pg / sqlite"
    );
    out.push_str(&header);
    out.push_str(&"-".repeat(header.len().saturating_sub(2)));
    out.push('\n');
    for row in ours {
        let sqlite_scenario = match row.scenario.as_str() {
            "throughput_postgres" => "throughput_sync_full",
            other => other,
        };
        let sqlite = rows.iter().find(|r| {
            r.system == "muster" && r.scenario == sqlite_scenario && r.senders == row.senders
        });
        let ratio = match (row.msgs_per_s, sqlite.and_then(|s| s.msgs_per_s)) {
            (Some(pg), Some(sq)) if sq > 0.0 => format!("{:.2}×", pg / sq),
            _ => "-".into(),
        };
        out.push_str(&format!(
            "{:<34} {:>7} | {:>12} {:>9} {:>9} | {:>12} {:>9} {:>9} | {:>12}\n",
            row.scenario,
            row.senders,
            rate(sqlite.and_then(|s| s.msgs_per_s)),
            ms(sqlite.and_then(|s| s.p50_ms)),
            ms(sqlite.and_then(|s| s.p99_ms)),
            rate(row.msgs_per_s),
            ms(row.p50_ms),
            ms(row.p99_ms),
            ratio
        ));
    }
    out.push_str(&notify_placement(rows));
    out.push_str(&pg_runs::render(rows));
    out
}

/// The two NOTIFY placements side by side, and how much longer a decision takes with its
/// NOTIFY after COMMIT than inside the transaction.
fn notify_placement(rows: &[Row]) -> String {
    let find = |placement: NotifyPlacement| {
        rows.iter()
            .find(|r| r.system == "postgres" && r.scenario == placement.name())
    };
    let (Some(inside), Some(after)) = (
        find(NotifyPlacement::InTransaction),
        find(NotifyPlacement::AfterCommit),
    ) else {
        return String::new();
    };
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "-".into(),
    };
    format!(
        "\nNOTIFY placement, a decision by {} concurrent deciders:\n  \
         inside the transaction: {} decisions/s  p50 {}  p99 {}\n  \
         after COMMIT (muster):  {} decisions/s  p50 {}  p99 {}\n  \
         after / inside: throughput {}, p50 {}, p99 {}\n",
        inside.senders,
        rate(inside.msgs_per_s),
        ms(inside.p50_ms),
        ms(inside.p99_ms),
        rate(after.msgs_per_s),
        ms(after.p50_ms),
        ms(after.p99_ms),
        ratio(after.msgs_per_s, inside.msgs_per_s),
        ratio(after.p50_ms, inside.p50_ms),
        ratio(after.p99_ms, inside.p99_ms),
    )
}

fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |v| format!("{v:.2} ms"))
}

fn rate(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |v| format!("{v:.0}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The targets' fsync p50 is over every round taken so far, and the disk row shows them
    /// all.
    #[test]
    fn the_disk_probe_pools_its_rounds() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let mut probe = DiskProbe::open(dir.path())?;
        let first = probe.sample(3)?;
        let pooled = probe.sample(2)?;
        assert!(first > 0.0 && pooled > 0.0);
        assert_eq!(probe.latencies.len(), 5);
        let row = probe.row();
        assert_eq!(row.p50_ms, Some(pooled));
        let note = row.note.unwrap_or_default();
        assert!(note.contains("5 samples in 2 rounds"), "{note}");
        Ok(())
    }
}
