//! PostgreSQL across runs: the same senders spread over 1, 8 and 32 runs, each spread once with
//! and once without the change-channel NOTIFY, beside a script of the same transaction shape on
//! bare tokio-postgres (the run's advisory lock, a counter UPDATE, one INSERT) — what the server
//! allows, the ceiling muster's writes are measured against.
//!
//! A run's writes are serial by design (its advisory lock is held across COMMIT, so its `seq`
//! order is the commit order); different runs' writes are not, which is what these rows show.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use muster_mailbox::*;
use serde_json::json;

use super::{Row, Samples, body, drop_schema_quietly, progress};

/// Concurrent senders of every spread.
const SENDERS: usize = 32;
/// Senders per store: one store is one process's pool (8 connections), so 32 senders are four
/// processes' worth of connections, as the shape script's 32 clients are.
const SENDERS_PER_STORE: usize = 8;
/// How many runs the senders are spread over.
const SPREADS: [usize; 3] = [1, 8, 32];

/// The rows: the shape script's rate first, then each spread with and without NOTIFY; the
/// 32-run row with NOTIFY (what muster does) carries the target.
pub(super) async fn rows(
    url: &str,
    messages: usize,
    body_bytes: usize,
) -> anyhow::Result<Vec<Row>> {
    let per_sender = (messages / SENDERS).max(1);
    let mut rows = Vec::new();
    progress(&format!(
        "postgres: the write's shape on bare tokio-postgres, {SENDERS} clients over {} runs",
        SENDERS
    ));
    let shape = shape_rate(url, SENDERS, per_sender).await?;
    rows.push(shape.clone());
    for announce in [true, false] {
        for runs in SPREADS {
            progress(&format!(
                "postgres: {SENDERS} senders over {runs} run(s), change NOTIFY {}",
                if announce { "on" } else { "off" }
            ));
            rows.push(spread(url, runs, announce, per_sender, body_bytes).await?);
        }
    }
    mark_target(&mut rows);
    Ok(rows)
}

fn scenario(runs: usize, announce: bool) -> String {
    format!(
        "pg_over_{runs}_runs_notify_{}",
        if announce { "on" } else { "off" }
    )
}

const SHAPE: &str = "pg_transaction_shape";

/// Goal: across 32 runs ≥ min(0.7 × the shape script's rate, 3 × the one-run figure).
fn mark_target(rows: &mut [Row]) {
    let rate_of = |name: &str| {
        rows.iter()
            .find(|r| r.scenario == name)
            .and_then(|r| r.msgs_per_s)
    };
    let (Some(shape), Some(one_run)) = (rate_of(SHAPE), rate_of(&scenario(1, true))) else {
        return;
    };
    let target = (0.7 * shape).min(3.0 * one_run);
    let name = scenario(32, true);
    if let Some(row) = rows.iter_mut().find(|r| r.scenario == name) {
        row.target_met = row.msgs_per_s.map(|got| got >= target);
        let got = row.msgs_per_s.unwrap_or(0.0);
        row.note = Some(format!(
            "target: ≥ {target:.0} msgs/s = min(0.7 × shape {shape:.0}, 3 × one run {one_run:.0}); \
             got {got:.0} = {:.2} × shape, {:.2} × one run",
            got / shape.max(f64::MIN_POSITIVE),
            got / one_run.max(f64::MIN_POSITIVE)
        ));
    }
}

/// `SENDERS` senders, sender `s` writing to run `b{s % runs}` through store `s / 8`.
async fn spread(
    url: &str,
    runs: usize,
    announce: bool,
    per_sender: usize,
    body_bytes: usize,
) -> anyhow::Result<Row> {
    let schema = format!(
        "muster_bench_{}_{}",
        std::process::id(),
        scenario(runs, announce)
    );
    drop_schema_quietly(url, &schema).await;
    let schema_url = create_schema(url, &schema).await?;
    let result = spread_in(&schema_url, runs, announce, per_sender, body_bytes).await;
    drop_schema_quietly(url, &schema).await;
    let mut row = result?;
    row.scenario = scenario(runs, announce);
    Ok(row)
}

async fn spread_in(
    schema_url: &str,
    runs: usize,
    announce: bool,
    per_sender: usize,
    body_bytes: usize,
) -> anyhow::Result<Row> {
    let options = StoreOptions {
        announce_changes: announce,
        ..StoreOptions::default()
    };
    let mut stores: Vec<Arc<dyn MailboxStore>> = Vec::new();
    for _ in 0..SENDERS.div_ceil(SENDERS_PER_STORE) {
        stores.push(Arc::new(
            PostgresStore::open(schema_url, options.clone()).await?,
        ));
    }
    for run in 0..runs {
        create_run(stores[0].as_ref(), run, runs).await?;
    }
    let start = Instant::now();
    let tasks: Vec<_> = (0..SENDERS)
        .map(|s| {
            let store = stores[s / SENDERS_PER_STORE].clone();
            tokio::spawn(async move {
                let mut samples = Samples::default();
                for i in 0..per_sender {
                    let began = Instant::now();
                    store
                        .send(NewMessage {
                            run_id: format!("b{}", s % runs),
                            sender: format!("s{s}"),
                            recipient: "lead".into(),
                            body: body(&format!("s{s}-{i}"), body_bytes),
                            idempotency_key: None,
                        })
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
    let wall = start.elapsed();
    let mut stored = 0;
    for run in 0..runs {
        stored += stores[0]
            .messages(&format!("b{run}"), Some("lead"))
            .await?
            .len();
    }
    anyhow::ensure!(
        stored == per_sender * SENDERS,
        "{stored} messages stored, {} sent",
        per_sender * SENDERS
    );
    let mut row = Row::new("postgres", "", SENDERS, &samples, wall);
    row.note = Some(format!(
        "{runs} run(s), {} stores of {SENDERS_PER_STORE} senders",
        stores.len()
    ));
    Ok(row)
}

/// Run `b{run}` whose roster is `lead` and the senders that write to it.
async fn create_run(store: &dyn MailboxStore, run: usize, runs: usize) -> anyhow::Result<()> {
    let id = format!("b{run}");
    store
        .create_run(NewRun {
            id: id.clone(),
            slug: format!("bench-runs-{run}"),
            team: None,
            workspace: "/bench".into(),
            batch_line_id: None,
            auto_gate: AutoGate::default(),
            launch_options: json!({"bench": "mailbox", "spread": runs}),
            project_id: None,
        })
        .await?;
    let members = std::iter::once(("lead".to_owned(), MemberKind::Lead)).chain(
        (0..SENDERS)
            .filter(|s| s % runs == run)
            .map(|s| (format!("s{s}"), MemberKind::Teammate)),
    );
    for (agent, kind) in members {
        store
            .add_member(
                &id,
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

/// The write's transaction shape with nothing of muster around it: per transaction the run's
/// advisory lock, its counter's UPDATE and one INSERT, `clients` connections each writing run
/// `client % SENDERS`, `per_client` transactions each.
async fn shape_rate(url: &str, clients: usize, per_client: usize) -> anyhow::Result<Row> {
    let schema = format!("muster_bench_{}_shape", std::process::id());
    drop_schema_quietly(url, &schema).await;
    let schema_url = create_schema(url, &schema).await?;
    let result = shape_rate_in(&schema_url, clients, per_client).await;
    drop_schema_quietly(url, &schema).await;
    let mut row = result?;
    row.scenario = SHAPE.into();
    row.note = Some(format!(
        "{clients} connections over {SENDERS} runs: BEGIN; pg_advisory_xact_lock; UPDATE a \
         counter; INSERT; COMMIT"
    ));
    Ok(row)
}

async fn shape_rate_in(schema_url: &str, clients: usize, per_client: usize) -> anyhow::Result<Row> {
    let setup = connect(schema_url).await?;
    setup
        .batch_execute(
            "CREATE TABLE shape_counters (run INT PRIMARY KEY, seq BIGINT NOT NULL); \
             CREATE TABLE shape_rows (run INT, seq BIGINT, body TEXT, PRIMARY KEY (run, seq));",
        )
        .await?;
    for run in 0..SENDERS as i32 {
        setup
            .execute("INSERT INTO shape_counters VALUES ($1, 0)", &[&run])
            .await?;
    }
    let mut connections = Vec::new();
    for _ in 0..clients {
        connections.push(connect(schema_url).await?);
    }
    let start = Instant::now();
    let tasks: Vec<_> = connections
        .into_iter()
        .enumerate()
        .map(|(client, mut connection)| {
            tokio::spawn(async move {
                let run = (client % SENDERS) as i32;
                let key = 7_000_000_i64 + i64::from(run);
                let mut samples = Samples::default();
                for _ in 0..per_client {
                    let began = Instant::now();
                    let tx = connection.transaction().await?;
                    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&key])
                        .await?;
                    let seq: i64 = tx
                        .query_one(
                            "UPDATE shape_counters SET seq = seq + 1 WHERE run = $1 RETURNING seq",
                            &[&run],
                        )
                        .await?
                        .get(0);
                    tx.execute("INSERT INTO shape_rows VALUES ($1, $2, 'x')", &[&run, &seq])
                        .await?;
                    tx.commit().await?;
                    samples.push(began.elapsed());
                }
                Ok::<_, tokio_postgres::Error>(samples)
            })
        })
        .collect();
    let mut samples = Samples::default();
    for task in tasks {
        samples.extend(task.await??);
    }
    Ok(Row::new("postgres", "", clients, &samples, start.elapsed()))
}

/// One plain connection (the bench's own server: no TLS), its driver on a task.
async fn connect(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .with_context(|| "cannot connect to the bench's PostgreSQL server")?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// Whether a row is one of this module's (the PostgreSQL-beside-SQLite table leaves them out).
pub(super) fn is_across_runs(row: &Row) -> bool {
    row.scenario == SHAPE || row.scenario.starts_with("pg_over_")
}

/// The rows of this module as a person reads them.
pub(super) fn render(rows: &[Row]) -> String {
    let ours: Vec<&Row> = rows.iter().filter(|r| is_across_runs(r)).collect();
    let Some(shape) = ours.iter().copied().find(|r| r.scenario == SHAPE) else {
        return String::new();
    };
    let mut out = format!(
        "\nPostgreSQL across runs ({SENDERS} senders), beside the bare transaction shape:\n{:<32} | {:>10} {:>9} {:>9} | {:>8} | {}\n",
        "scenario", "msg/s", "p50", "p99", "/ shape", "target"
    );
    for row in &ours {
        let ratio = match (row.msgs_per_s, shape.msgs_per_s) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
            _ => "-".into(),
        };
        out.push_str(&format!(
            "{:<32} | {:>10} {:>9} {:>9} | {:>8} | {}\n",
            row.scenario,
            super::rate(row.msgs_per_s),
            super::ms(row.p50_ms),
            super::ms(row.p99_ms),
            ratio,
            row.target_met.map_or("-", |met| super::verdict(Some(met)))
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn row(scenario: &str, rate: f64) -> Row {
        let mut row = Row::new(
            "postgres",
            scenario,
            SENDERS,
            &Samples::default(),
            Duration::ZERO,
        );
        row.msgs_per_s = Some(rate);
        row
    }

    /// The target is the smaller of the two bounds, and only the 32-run row with NOTIFY has it.
    #[test]
    fn the_32_run_target_is_the_smaller_bound() {
        let table = [
            // (shape, one run, 32 runs, met)
            (4000.0, 800.0, 2500.0, true),  // min(2800, 2400) = 2400
            (4000.0, 800.0, 2300.0, false), // below 2400
            (1000.0, 800.0, 700.0, true),   // min(700, 2400) = 700
            (1000.0, 800.0, 699.0, false),
        ];
        for (shape, one, thirty_two, met) in table {
            let mut rows = vec![
                row(SHAPE, shape),
                row(&scenario(1, true), one),
                row(&scenario(32, true), thirty_two),
                row(&scenario(32, false), thirty_two),
            ];
            mark_target(&mut rows);
            assert_eq!(rows[2].target_met, Some(met), "{shape} {one} {thirty_two}");
            assert_eq!(rows[3].target_met, None);
            assert!(rows[2].note.as_deref().unwrap_or("").contains("target"));
        }
    }
}
