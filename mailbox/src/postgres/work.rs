//! Work items and workers on PostgreSQL (see [`crate::work`]): the SQLite store's operations
//! statement for statement, with the server's clock for deadlines (workers on several machines
//! agree on it), `FOR UPDATE SKIP LOCKED` for claims, and a NOTIFY on the schema's work
//! channel, delivered at COMMIT, for every change a waiting worker or batch cares about.

use serde_json::Value;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::error::{StoreError, StoreResult};
use crate::postgres::ops::{Ctx, Tx, col, fnv1a, pg_error};
use crate::work::*;

type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// The server's clock in Unix milliseconds.
const NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

const ITEM_COLUMNS: &str = "id, queue, payload, state, worker, token, lease_deadline, attempts, \
    result, created_at, finished_at";

/// The channel every change of this schema's work queues is announced on.
pub(crate) fn work_channel(ctx: &Ctx) -> String {
    format!(
        "muster_work_{:016x}",
        fnv1a(&[ctx.schema.as_bytes(), b"\0work"])
    )
}

async fn rows(tx: &Tx<'_>, ctx: &Ctx, sql: &str, params: Params<'_>) -> StoreResult<Vec<Row>> {
    let statement = tx.prepare_cached(sql).await.map_err(|e| pg_error(ctx, e))?;
    tx.query(&statement, params)
        .await
        .map_err(|e| pg_error(ctx, e))
}

async fn row(tx: &Tx<'_>, ctx: &Ctx, sql: &str, params: Params<'_>) -> StoreResult<Option<Row>> {
    let statement = tx.prepare_cached(sql).await.map_err(|e| pg_error(ctx, e))?;
    tx.query_opt(&statement, params)
        .await
        .map_err(|e| pg_error(ctx, e))
}

fn json(text: &str) -> StoreResult<Value> {
    serde_json::from_str(text).map_err(|e| StoreError::CorruptRow {
        table: "work_items",
        detail: format!("invalid JSON: {e}"),
    })
}

fn item_of(row: &Row) -> StoreResult<WorkItem> {
    let t = "work_items";
    let payload: String = col(row, t, 2)?;
    let state: String = col(row, t, 3)?;
    let result: Option<String> = col(row, t, 8)?;
    Ok(WorkItem {
        id: col(row, t, 0)?,
        queue: col(row, t, 1)?,
        payload: json(&payload)?,
        state: WorkState::parse(&state)?,
        worker: col(row, t, 4)?,
        token: col(row, t, 5)?,
        lease_deadline: col(row, t, 6)?,
        attempts: col(row, t, 7)?,
        result: result.as_deref().map(json).transpose()?,
        created_at: col(row, t, 9)?,
        finished_at: col(row, t, 10)?,
    })
}

/// Announces a change of the work queues (delivered when the transaction commits).
pub(crate) async fn announce(tx: &Tx<'_>, ctx: &Ctx) -> StoreResult<()> {
    let channel = work_channel(ctx);
    row(tx, ctx, "SELECT pg_notify($1, '')", &[&channel]).await?;
    Ok(())
}

pub(crate) async fn item(tx: &Tx<'_>, ctx: &Ctx, id: &str) -> StoreResult<Option<WorkItem>> {
    let sql = format!("SELECT {ITEM_COLUMNS} FROM work_items WHERE id = $1");
    row(tx, ctx, &sql, &[&id])
        .await?
        .as_ref()
        .map(item_of)
        .transpose()
}

pub(crate) async fn items(tx: &Tx<'_>, ctx: &Ctx, queue: &str) -> StoreResult<Vec<WorkItem>> {
    let sql = format!("SELECT {ITEM_COLUMNS} FROM work_items WHERE queue = $1 ORDER BY seq");
    rows(tx, ctx, &sql, &[&queue])
        .await?
        .iter()
        .map(item_of)
        .collect()
}

pub(crate) async fn enqueue(
    tx: &Tx<'_>,
    ctx: &Ctx,
    new: &[NewWorkItem],
) -> StoreResult<Vec<WorkItem>> {
    let mut stored = Vec::with_capacity(new.len());
    let insert = format!(
        "INSERT INTO work_items (id, queue, payload, state, created_at) \
         VALUES ($1, $2, $3, 'pending', {NOW_MS}) ON CONFLICT (id) DO NOTHING"
    );
    for item_in in new {
        validate_name("work item id", &item_in.id)?;
        validate_name("work queue", &item_in.queue)?;
        let payload = item_in.payload.to_string();
        rows(tx, ctx, &insert, &[&item_in.id, &item_in.queue, &payload]).await?;
        stored.push(
            item(tx, ctx, &item_in.id)
                .await?
                .ok_or_else(|| StoreError::UnknownWorkItem(item_in.id.clone()))?,
        );
    }
    announce(tx, ctx).await?;
    Ok(stored)
}

pub(crate) async fn claim(
    tx: &Tx<'_>,
    ctx: &Ctx,
    queue: Option<&str>,
    worker: &str,
    lease_ms: i64,
) -> StoreResult<Option<WorkItem>> {
    validate_name("worker name", worker)?;
    // SKIP LOCKED: an item another claim (or a fenced write's row lock) holds is passed over,
    // not waited for.
    let sql = format!(
        "UPDATE work_items SET state = 'leased', worker = $2, token = token + 1, \
             attempts = attempts + 1, lease_deadline = {NOW_MS} + $3 \
         WHERE seq = (SELECT seq FROM work_items \
             WHERE ($1::text IS NULL OR queue = $1) \
               AND (state = 'pending' OR (state = 'leased' AND lease_deadline <= {NOW_MS})) \
             ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED) \
         RETURNING {ITEM_COLUMNS}"
    );
    let claimed = row(tx, ctx, &sql, &[&queue, &worker, &lease_ms])
        .await?
        .as_ref()
        .map(item_of)
        .transpose()?;
    if claimed.is_some() {
        // Whoever waits on the item (a team's lead watching its teammate's) sees who took it.
        announce(tx, ctx).await?;
    }
    Ok(claimed)
}

/// The item's `(token, state)`, read by id; `lock`: under a row lock (`FOR SHARE`).
async fn stored_fence(
    tx: &Tx<'_>,
    ctx: &Ctx,
    item: &str,
    lock: bool,
) -> StoreResult<Option<(i64, String)>> {
    let sql = if lock {
        "SELECT token, state FROM work_items WHERE id = $1 FOR SHARE"
    } else {
        "SELECT token, state FROM work_items WHERE id = $1"
    };
    match row(tx, ctx, sql, &[&item]).await? {
        Some(row) => Ok(Some((
            col(&row, "work_items", 0)?,
            col(&row, "work_items", 1)?,
        ))),
        None => Ok(None),
    }
}

/// Refuses the write unless `fence` still holds its item's lease. The row lock (`FOR SHARE`)
/// lasts until this write's COMMIT: a claim taking the item over waits for it (or skips the
/// item), so no write of an old holder commits after a new claim did.
pub(crate) async fn check_fence(tx: &Tx<'_>, ctx: &Ctx, fence: &WorkFence) -> StoreResult<()> {
    crate::rules::work::fence_holds(fence, stored_fence(tx, ctx, &fence.item, true).await?)
}

/// The refusal for `fence` when a write under it changed nothing.
async fn fenced(tx: &Tx<'_>, ctx: &Ctx, fence: &WorkFence) -> StoreError {
    match stored_fence(tx, ctx, &fence.item, false).await {
        Ok(stored) => crate::rules::work::fence_refusal(fence, stored),
        Err(error) => error,
    }
}

pub(crate) async fn heartbeat(
    tx: &Tx<'_>,
    ctx: &Ctx,
    worker: &WorkerInfo,
    leases: &[WorkFence],
    lease_ms: i64,
) -> StoreResult<Heartbeat> {
    validate_name("worker name", &worker.name)?;
    let upsert = format!(
        "INSERT INTO workers (name, host, slots, pid, started_at, last_heartbeat) \
         VALUES ($1, $2, $3, $4, {NOW_MS}, {NOW_MS}) \
         ON CONFLICT (name) DO UPDATE SET host = excluded.host, slots = excluded.slots, \
             pid = excluded.pid, last_heartbeat = excluded.last_heartbeat, \
             started_at = CASE WHEN workers.stopped_at IS NULL AND workers.pid = excluded.pid \
                 THEN workers.started_at ELSE excluded.started_at END, \
             stopped_at = NULL"
    );
    rows(
        tx,
        ctx,
        &upsert,
        &[&worker.name, &worker.host, &worker.slots, &worker.pid],
    )
    .await?;
    let extend = format!(
        "UPDATE work_items SET lease_deadline = {NOW_MS} + $4 \
         WHERE id = $1 AND token = $2 AND worker = $3 AND state = 'leased' RETURNING id"
    );
    let mut beat = Heartbeat::default();
    for fence in leases {
        let kept = row(
            tx,
            ctx,
            &extend,
            &[&fence.item, &fence.token, &worker.name, &lease_ms],
        )
        .await?;
        if kept.is_some() {
            beat.kept.push(fence.clone());
        } else {
            beat.lost.push(fence.clone());
        }
    }
    Ok(beat)
}

pub(crate) async fn finish(
    tx: &Tx<'_>,
    ctx: &Ctx,
    fence: &WorkFence,
    result: &Value,
) -> StoreResult<WorkItem> {
    let sql = format!(
        "UPDATE work_items SET state = 'done', result = $3, finished_at = {NOW_MS}, \
             lease_deadline = NULL \
         WHERE id = $1 AND token = $2 AND state = 'leased' RETURNING {ITEM_COLUMNS}"
    );
    let text = result.to_string();
    match row(tx, ctx, &sql, &[&fence.item, &fence.token, &text]).await? {
        Some(done) => {
            announce(tx, ctx).await?;
            item_of(&done)
        }
        None => Err(fenced(tx, ctx, fence).await),
    }
}

pub(crate) async fn release(tx: &Tx<'_>, ctx: &Ctx, fence: &WorkFence) -> StoreResult<WorkItem> {
    let sql = format!(
        "UPDATE work_items SET state = 'pending', lease_deadline = NULL \
         WHERE id = $1 AND token = $2 AND state = 'leased' RETURNING {ITEM_COLUMNS}"
    );
    match row(tx, ctx, &sql, &[&fence.item, &fence.token]).await? {
        Some(released) => {
            announce(tx, ctx).await?;
            item_of(&released)
        }
        None => Err(fenced(tx, ctx, fence).await),
    }
}

/// Milliseconds until the earliest lease deadline, by the server's clock (0 when passed).
pub(crate) async fn next_expiry(
    tx: &Tx<'_>,
    ctx: &Ctx,
    queue: Option<&str>,
) -> StoreResult<Option<i64>> {
    let sql = format!(
        "SELECT GREATEST(MIN(lease_deadline) - {NOW_MS}, 0)::bigint FROM work_items \
         WHERE state = 'leased' AND ($1::text IS NULL OR queue = $1)"
    );
    match row(tx, ctx, &sql, &[&queue]).await? {
        Some(found) => col(&found, "work_items", 0),
        None => Ok(None),
    }
}

pub(crate) async fn workers(tx: &Tx<'_>, ctx: &Ctx) -> StoreResult<Vec<WorkerRecord>> {
    let t = "workers";
    let mut found = Vec::new();
    for worker in rows(
        tx,
        ctx,
        "SELECT name, host, slots, pid, started_at, last_heartbeat, stopped_at \
         FROM workers ORDER BY name",
        &[],
    )
    .await?
    {
        let name: String = col(&worker, t, 0)?;
        let items = rows(
            tx,
            ctx,
            "SELECT id FROM work_items WHERE worker = $1 AND state = 'leased' ORDER BY seq",
            &[&name],
        )
        .await?
        .iter()
        .map(|row| col(row, "work_items", 0))
        .collect::<StoreResult<Vec<String>>>()?;
        found.push(WorkerRecord {
            name,
            host: col(&worker, t, 1)?,
            slots: col(&worker, t, 2)?,
            pid: col(&worker, t, 3)?,
            started_at: col(&worker, t, 4)?,
            last_heartbeat: col(&worker, t, 5)?,
            stopped_at: col(&worker, t, 6)?,
            items,
        });
    }
    Ok(found)
}

pub(crate) async fn retire(tx: &Tx<'_>, ctx: &Ctx, name: &str) -> StoreResult<()> {
    let sql = format!("UPDATE workers SET stopped_at = {NOW_MS} WHERE name = $1");
    rows(tx, ctx, &sql, &[&name]).await?;
    Ok(())
}

/// Records a fenced line's process group under the item's token and current holder, in the
/// transaction of its `tool_started` record (whose fence check holds the item's row lock).
pub(crate) async fn record_group(
    tx: &Tx<'_>,
    ctx: &Ctx,
    run_id: &str,
    fence: &WorkFence,
    group: &NewProcessGroup,
) -> StoreResult<()> {
    let sql = format!(
        "INSERT INTO process_groups (run_id, agent_id, tool_use_id, pgid, host, boot_id, item, \
             token, worker, recorded_at) \
         SELECT $1, $2, $3, $4, $5, $6, id, token, worker, {NOW_MS} FROM work_items \
         WHERE id = $7 AND token = $8 AND worker IS NOT NULL \
         ON CONFLICT (run_id, agent_id, tool_use_id) DO UPDATE SET pgid = excluded.pgid, \
             host = excluded.host, boot_id = excluded.boot_id, item = excluded.item, \
             token = excluded.token, worker = excluded.worker, \
             recorded_at = excluded.recorded_at"
    );
    rows(
        tx,
        ctx,
        &sql,
        &[
            &run_id,
            &group.agent,
            &group.tool_use_id,
            &group.pgid,
            &group.host,
            &group.boot_id,
            &fence.item,
            &fence.token,
        ],
    )
    .await?;
    Ok(())
}

pub(crate) async fn worker_groups(
    tx: &Tx<'_>,
    ctx: &Ctx,
    worker: &str,
    host: &str,
    boot_id: &str,
) -> StoreResult<Vec<ProcessGroupRecord>> {
    let t = "process_groups";
    rows(
        tx,
        ctx,
        "SELECT run_id, agent_id, tool_use_id, pgid, host, boot_id, item, token, worker, \
             recorded_at FROM process_groups \
         WHERE worker = $1 AND host = $2 AND boot_id = $3 ORDER BY recorded_at, run_id",
        &[&worker, &host, &boot_id],
    )
    .await?
    .iter()
    .map(|row| -> StoreResult<ProcessGroupRecord> {
        Ok(ProcessGroupRecord {
            run_id: col(row, t, 0)?,
            agent: col(row, t, 1)?,
            tool_use_id: col(row, t, 2)?,
            pgid: col(row, t, 3)?,
            host: col(row, t, 4)?,
            boot_id: col(row, t, 5)?,
            item: col(row, t, 6)?,
            token: col(row, t, 7)?,
            worker: col(row, t, 8)?,
            recorded_at: col(row, t, 9)?,
        })
    })
    .collect()
}

pub(crate) async fn forget_group(
    tx: &Tx<'_>,
    ctx: &Ctx,
    run_id: &str,
    agent: &str,
    tool_use_id: &str,
) -> StoreResult<()> {
    rows(
        tx,
        ctx,
        "DELETE FROM process_groups WHERE run_id = $1 AND agent_id = $2 AND tool_use_id = $3",
        &[&run_id, &agent, &tool_use_id],
    )
    .await?;
    Ok(())
}
