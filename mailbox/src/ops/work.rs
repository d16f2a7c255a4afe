//! Work items and workers (see [`crate::work`]), once for both backends (see [`super`]).
//! Deadlines use the database's clock ([`Dialect::now_ms`]): on PostgreSQL, workers on several
//! machines agree on the server's. On PostgreSQL a claim skips rows other claims (or a fenced
//! write's row lock) hold, and every change is announced on the schema's work channel
//! ([`Tx::announce_work`], delivered at COMMIT); SQLite's store wakes its watchers after COMMIT.

use serde_json::Value;

use super::{Dialect, Tx};
use crate::error::{StoreError, StoreResult};
use crate::rows::Row;
use crate::work::*;

const ITEM_COLUMNS: &str = "id, queue, payload, state, worker, token, lease_deadline, attempts, \
    result, created_at, finished_at";

impl Dialect {
    /// The database's clock in Unix milliseconds, as an SQL expression.
    fn now_ms(self) -> &'static str {
        match self {
            Dialect::Sqlite => "CAST(unixepoch('subsec') * 1000 AS INTEGER)",
            Dialect::Postgres => "(extract(epoch from clock_timestamp()) * 1000)::bigint",
        }
    }
}

fn item_of(row: &Row<'_>) -> StoreResult<WorkItem> {
    const T: &str = "work_items";
    let result: Option<String> = row.get(T, 8)?;
    Ok(WorkItem {
        id: row.get(T, 0)?,
        queue: row.get(T, 1)?,
        payload: row.json(T, 2)?,
        state: WorkState::parse(&row.get::<String>(T, 3)?)?,
        worker: row.get(T, 4)?,
        token: row.get(T, 5)?,
        lease_deadline: row.get(T, 6)?,
        attempts: row.get(T, 7)?,
        result: result
            .as_deref()
            .map(|r| crate::rows::parse_json(T, r))
            .transpose()?,
        created_at: row.get(T, 9)?,
        finished_at: row.get(T, 10)?,
    })
}

pub(crate) async fn item(tx: &impl Tx, id: &str) -> StoreResult<Option<WorkItem>> {
    let sql = format!("SELECT {ITEM_COLUMNS} FROM work_items WHERE id = ?1");
    tx.query_opt(&sql, &[&id], item_of).await
}

pub(crate) async fn items(tx: &impl Tx, queue: &str) -> StoreResult<Vec<WorkItem>> {
    let sql = format!("SELECT {ITEM_COLUMNS} FROM work_items WHERE queue = ?1 ORDER BY seq");
    tx.query(&sql, &[&queue], item_of).await
}

/// Adds items, pending; an id already stored is left as it is. Returns every item as stored.
pub(crate) async fn enqueue(tx: &impl Tx, new: &[NewWorkItem]) -> StoreResult<Vec<WorkItem>> {
    let insert = format!(
        "INSERT INTO work_items (id, queue, payload, state, created_at) \
         VALUES (?1, ?2, ?3, 'pending', {}) ON CONFLICT (id) DO NOTHING",
        tx.dialect().now_ms()
    );
    let mut stored = Vec::with_capacity(new.len());
    for item_in in new {
        validate_name("work item id", &item_in.id)?;
        validate_name("work queue", &item_in.queue)?;
        tx.execute(
            &insert,
            &[&item_in.id, &item_in.queue, &item_in.payload.to_string()],
        )
        .await?;
        let found = item(tx, &item_in.id).await?;
        stored.push(found.ok_or_else(|| StoreError::UnknownWorkItem(item_in.id.clone()))?);
    }
    tx.announce_work().await?;
    Ok(stored)
}

/// Leases the oldest claimable item of `queue` (or of any) to `worker`, with the next token.
pub(crate) async fn claim(
    tx: &impl Tx,
    queue: Option<&str>,
    worker: &str,
    lease_ms: i64,
) -> StoreResult<Option<WorkItem>> {
    validate_name("worker name", worker)?;
    let (now, skip_locked) = match tx.dialect() {
        Dialect::Sqlite => (Dialect::Sqlite.now_ms(), ""),
        Dialect::Postgres => (Dialect::Postgres.now_ms(), " FOR UPDATE SKIP LOCKED"),
    };
    let sql = format!(
        "UPDATE work_items SET state = 'leased', worker = ?2, token = token + 1, \
             attempts = attempts + 1, lease_deadline = {now} + ?3 \
         WHERE seq = (SELECT seq FROM work_items \
             WHERE (CAST(?1 AS TEXT) IS NULL OR queue = ?1) \
               AND (state = 'pending' OR (state = 'leased' AND lease_deadline <= {now})) \
             ORDER BY seq LIMIT 1{skip_locked}) \
         RETURNING {ITEM_COLUMNS}"
    );
    let claimed = tx
        .query_opt(&sql, &[&queue, &worker, &lease_ms], item_of)
        .await?;
    if claimed.is_some() {
        // Whoever waits on the item (a team's lead watching its teammate's) sees who took it.
        tx.announce_work().await?;
    }
    Ok(claimed)
}

/// The item's `(token, state)`, read by id; `lock`: on PostgreSQL under a row lock (`FOR
/// SHARE`) a claim taking the item over must wait for.
async fn stored_fence(tx: &impl Tx, item: &str, lock: bool) -> StoreResult<Option<(i64, String)>> {
    let sql = match (tx.dialect(), lock) {
        (Dialect::Postgres, true) => "SELECT token, state FROM work_items WHERE id = ?1 FOR SHARE",
        _ => "SELECT token, state FROM work_items WHERE id = ?1",
    };
    let read = |r: &Row<'_>| {
        Ok((
            r.get::<i64>("work_items", 0)?,
            r.get::<String>("work_items", 1)?,
        ))
    };
    tx.query_opt(sql, &[&item], read).await
}

/// Refuses the operation unless `fence` still holds its item's lease. On PostgreSQL the row
/// lock lasts until this write's COMMIT, so no write of an old holder commits after a new
/// claim did; on SQLite the single writer gives the same.
pub(crate) async fn check_fence(tx: &impl Tx, fence: &WorkFence) -> StoreResult<()> {
    crate::rules::work::fence_holds(fence, stored_fence(tx, &fence.item, true).await?)
}

/// The refusal for `fence` when a write under it changed nothing.
async fn fenced(tx: &impl Tx, fence: &WorkFence) -> StoreError {
    match stored_fence(tx, &fence.item, false).await {
        Ok(stored) => crate::rules::work::fence_refusal(fence, stored),
        Err(error) => error,
    }
}

/// Records that `worker` is alive and pushes back the deadline of each lease it still holds.
pub(crate) async fn heartbeat(
    tx: &impl Tx,
    worker: &WorkerInfo,
    leases: &[WorkFence],
    lease_ms: i64,
) -> StoreResult<Heartbeat> {
    validate_name("worker name", &worker.name)?;
    let now = tx.dialect().now_ms();
    let upsert = format!(
        "INSERT INTO workers (name, host, slots, pid, started_at, last_heartbeat) \
         VALUES (?1, ?2, ?3, ?4, {now}, {now}) \
         ON CONFLICT (name) DO UPDATE SET host = excluded.host, slots = excluded.slots, \
             pid = excluded.pid, last_heartbeat = excluded.last_heartbeat, \
             started_at = CASE WHEN workers.stopped_at IS NULL AND workers.pid = excluded.pid \
                 THEN workers.started_at ELSE excluded.started_at END, \
             stopped_at = NULL"
    );
    let args: [&dyn super::Arg; 4] = [&worker.name, &worker.host, &worker.slots, &worker.pid];
    tx.execute(&upsert, &args).await?;
    let extend = format!(
        "UPDATE work_items SET lease_deadline = {now} + ?4 \
         WHERE id = ?1 AND token = ?2 AND worker = ?3 AND state = 'leased'"
    );
    let mut beat = Heartbeat::default();
    for fence in leases {
        let args: [&dyn super::Arg; 4] = [&fence.item, &fence.token, &worker.name, &lease_ms];
        if tx.execute(&extend, &args).await? == 1 {
            beat.kept.push(fence.clone());
        } else {
            beat.lost.push(fence.clone());
        }
    }
    Ok(beat)
}

/// Marks the item done with its result; refused unless `fence` holds its lease.
pub(crate) async fn finish(
    tx: &impl Tx,
    fence: &WorkFence,
    result: &Value,
) -> StoreResult<WorkItem> {
    let sql = format!(
        "UPDATE work_items SET state = 'done', result = ?3, finished_at = {}, lease_deadline = NULL \
         WHERE id = ?1 AND token = ?2 AND state = 'leased' RETURNING {ITEM_COLUMNS}",
        tx.dialect().now_ms()
    );
    let args: [&dyn super::Arg; 3] = [&fence.item, &fence.token, &result.to_string()];
    match tx.query_opt(&sql, &args, item_of).await? {
        Some(done) => {
            tx.announce_work().await?;
            Ok(done)
        }
        None => Err(fenced(tx, fence).await),
    }
}

/// Hands the item back (pending); refused unless `fence` holds its lease.
pub(crate) async fn release(tx: &impl Tx, fence: &WorkFence) -> StoreResult<WorkItem> {
    let sql = format!(
        "UPDATE work_items SET state = 'pending', lease_deadline = NULL \
         WHERE id = ?1 AND token = ?2 AND state = 'leased' RETURNING {ITEM_COLUMNS}"
    );
    match tx
        .query_opt(&sql, &[&fence.item, &fence.token], item_of)
        .await?
    {
        Some(released) => {
            tx.announce_work().await?;
            Ok(released)
        }
        None => Err(fenced(tx, fence).await),
    }
}

/// Stops the item whoever holds it: pending or leased becomes done with `result`. Its holder's
/// writes are refused from this COMMIT on (on PostgreSQL this waits for a write of the holder
/// in flight, which holds the row), and its next heartbeat finds the lease lost. An item done
/// already is left as it is.
pub(crate) async fn stop(tx: &impl Tx, id: &str, result: &Value) -> StoreResult<Option<WorkItem>> {
    let sql = format!(
        "UPDATE work_items SET state = 'done', result = ?2, finished_at = {}, lease_deadline = NULL \
         WHERE id = ?1 AND state != 'done' RETURNING {ITEM_COLUMNS}",
        tx.dialect().now_ms()
    );
    match tx
        .query_opt(&sql, &[&id, &result.to_string()], item_of)
        .await?
    {
        Some(stopped) => {
            tx.announce_work().await?;
            Ok(Some(stopped))
        }
        None => item(tx, id).await,
    }
}

/// Puts a stopped item back in its queue (pending, its result cleared) for the next claim;
/// an item not done is left as it is.
pub(crate) async fn reopen(tx: &impl Tx, id: &str) -> StoreResult<Option<WorkItem>> {
    let sql = format!(
        "UPDATE work_items SET state = 'pending', result = NULL, finished_at = NULL, \
             lease_deadline = NULL \
         WHERE id = ?1 AND state = 'done' RETURNING {ITEM_COLUMNS}"
    );
    match tx.query_opt(&sql, &[&id], item_of).await? {
        Some(reopened) => {
            tx.announce_work().await?;
            Ok(Some(reopened))
        }
        None => item(tx, id).await,
    }
}

/// Milliseconds until the earliest lease deadline, by the database's clock (0 when passed).
pub(crate) async fn next_expiry(tx: &impl Tx, queue: Option<&str>) -> StoreResult<Option<i64>> {
    let sql = format!(
        "SELECT MIN(lease_deadline) - {} FROM work_items \
         WHERE state = 'leased' AND (CAST(?1 AS TEXT) IS NULL OR queue = ?1)",
        tx.dialect().now_ms()
    );
    let left = tx
        .query_one(&sql, &[&queue], |r| r.get::<Option<i64>>("work_items", 0))
        .await?;
    Ok(left.map(|ms| ms.max(0)))
}

pub(crate) async fn workers(tx: &impl Tx) -> StoreResult<Vec<WorkerRecord>> {
    const T: &str = "workers";
    let mut found = tx
        .query(
            "SELECT name, host, slots, pid, started_at, last_heartbeat, stopped_at FROM workers ORDER BY name",
            &[],
            |r| {
                Ok(WorkerRecord {
                    name: r.get(T, 0)?,
                    host: r.get(T, 1)?,
                    slots: r.get(T, 2)?,
                    pid: r.get(T, 3)?,
                    started_at: r.get(T, 4)?,
                    last_heartbeat: r.get(T, 5)?,
                    stopped_at: r.get(T, 6)?,
                    items: Vec::new(),
                })
            },
        )
        .await?;
    for worker in &mut found {
        worker.items = tx
            .query(
                "SELECT id FROM work_items WHERE worker = ?1 AND state = 'leased' ORDER BY seq",
                &[&worker.name],
                |r| r.get::<String>("work_items", 0),
            )
            .await?;
    }
    Ok(found)
}

/// Marks a worker stopped.
pub(crate) async fn retire(tx: &impl Tx, name: &str) -> StoreResult<()> {
    let sql = format!(
        "UPDATE workers SET stopped_at = {} WHERE name = ?1",
        tx.dialect().now_ms()
    );
    tx.execute(&sql, &[&name]).await?;
    Ok(())
}

/// Records a fenced line's process group under the item's token and current holder, in the
/// transaction of its `tool_started` record (whose fence check was made in it just before).
pub(crate) async fn record_group(
    tx: &impl Tx,
    run_id: &str,
    fence: &WorkFence,
    group: &NewProcessGroup,
) -> StoreResult<()> {
    let sql = format!(
        "INSERT INTO process_groups (run_id, agent_id, tool_use_id, pgid, host, boot_id, item, \
             token, worker, recorded_at) \
         SELECT ?1, ?2, ?3, ?4, ?5, ?6, id, token, worker, {} FROM work_items \
         WHERE id = ?7 AND token = ?8 AND worker IS NOT NULL \
         ON CONFLICT (run_id, agent_id, tool_use_id) DO UPDATE SET pgid = excluded.pgid, \
             host = excluded.host, boot_id = excluded.boot_id, item = excluded.item, \
             token = excluded.token, worker = excluded.worker, \
             recorded_at = excluded.recorded_at",
        tx.dialect().now_ms()
    );
    let args: [&dyn super::Arg; 8] = [
        &run_id,
        &group.agent,
        &group.tool_use_id,
        &group.pgid,
        &group.host,
        &group.boot_id,
        &fence.item,
        &fence.token,
    ];
    tx.execute(&sql, &args).await?;
    Ok(())
}

/// The process groups recorded by `worker` on `host` during boot `boot_id`.
pub(crate) async fn worker_groups(
    tx: &impl Tx,
    worker: &str,
    host: &str,
    boot_id: &str,
) -> StoreResult<Vec<ProcessGroupRecord>> {
    const T: &str = "process_groups";
    tx.query(
        "SELECT run_id, agent_id, tool_use_id, pgid, host, boot_id, item, token, worker, \
             recorded_at FROM process_groups \
         WHERE worker = ?1 AND host = ?2 AND boot_id = ?3 ORDER BY recorded_at, run_id",
        &[&worker, &host, &boot_id],
        |r| {
            Ok(ProcessGroupRecord {
                run_id: r.get(T, 0)?,
                agent: r.get(T, 1)?,
                tool_use_id: r.get(T, 2)?,
                pgid: r.get(T, 3)?,
                host: r.get(T, 4)?,
                boot_id: r.get(T, 5)?,
                item: r.get(T, 6)?,
                token: r.get(T, 7)?,
                worker: r.get(T, 8)?,
                recorded_at: r.get(T, 9)?,
            })
        },
    )
    .await
}

pub(crate) async fn forget_group(
    tx: &impl Tx,
    run_id: &str,
    agent: &str,
    tool_use_id: &str,
) -> StoreResult<()> {
    tx.execute(
        "DELETE FROM process_groups WHERE run_id = ?1 AND agent_id = ?2 AND tool_use_id = ?3",
        &[&run_id, &agent, &tool_use_id],
    )
    .await?;
    Ok(())
}
