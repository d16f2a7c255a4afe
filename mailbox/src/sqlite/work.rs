//! Work items and workers on SQLite (see [`crate::work`]): each operation runs in the
//! writer's transaction, so a claim is one conditional `UPDATE … RETURNING` and a fence check
//! sees every claim committed before it.

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde_json::Value;

use crate::error::{StoreError, StoreResult};
use crate::sqlite::ops::{OpContext, now_millis};
use crate::types::UnixMillis;
use crate::work::*;

const ITEM_COLUMNS: &str = "id, queue, payload, state, worker, token, lease_deadline, attempts, \
    result, created_at, finished_at";

struct RawItem {
    id: String,
    queue: String,
    payload: String,
    state: String,
    worker: Option<String>,
    token: i64,
    lease_deadline: Option<i64>,
    attempts: i64,
    result: Option<String>,
    created_at: i64,
    finished_at: Option<i64>,
}

fn raw_item(row: &Row<'_>) -> rusqlite::Result<RawItem> {
    Ok(RawItem {
        id: row.get(0)?,
        queue: row.get(1)?,
        payload: row.get(2)?,
        state: row.get(3)?,
        worker: row.get(4)?,
        token: row.get(5)?,
        lease_deadline: row.get(6)?,
        attempts: row.get(7)?,
        result: row.get(8)?,
        created_at: row.get(9)?,
        finished_at: row.get(10)?,
    })
}

fn json(text: &str) -> StoreResult<Value> {
    serde_json::from_str(text).map_err(|e| StoreError::CorruptRow {
        table: "work_items",
        detail: format!("invalid JSON: {e}"),
    })
}

impl RawItem {
    fn into_item(self) -> StoreResult<WorkItem> {
        Ok(WorkItem {
            payload: json(&self.payload)?,
            state: WorkState::parse(&self.state)?,
            result: self.result.as_deref().map(json).transpose()?,
            id: self.id,
            queue: self.queue,
            worker: self.worker,
            token: self.token,
            lease_deadline: self.lease_deadline,
            attempts: self.attempts,
            created_at: self.created_at,
            finished_at: self.finished_at,
        })
    }
}

pub(crate) fn item(conn: &Connection, ctx: &OpContext, id: &str) -> StoreResult<Option<WorkItem>> {
    conn.prepare_cached(&format!(
        "SELECT {ITEM_COLUMNS} FROM work_items WHERE id = ?1"
    ))
    .and_then(|mut stmt| stmt.query_row([id], raw_item).optional())
    .map_err(ctx.sql())?
    .map(RawItem::into_item)
    .transpose()
}

pub(crate) fn items(conn: &Connection, ctx: &OpContext, queue: &str) -> StoreResult<Vec<WorkItem>> {
    conn.prepare_cached(&format!(
        "SELECT {ITEM_COLUMNS} FROM work_items WHERE queue = ?1 ORDER BY seq"
    ))
    .and_then(|mut stmt| {
        stmt.query_map([queue], raw_item)?
            .collect::<rusqlite::Result<Vec<_>>>()
    })
    .map_err(ctx.sql())?
    .into_iter()
    .map(RawItem::into_item)
    .collect()
}

pub(crate) fn enqueue(
    conn: &Connection,
    ctx: &OpContext,
    new: &[NewWorkItem],
) -> StoreResult<Vec<WorkItem>> {
    let now = now_millis();
    let mut stored = Vec::with_capacity(new.len());
    for item_in in new {
        validate_name("work item id", &item_in.id)?;
        validate_name("work queue", &item_in.queue)?;
        conn.prepare_cached(
            "INSERT INTO work_items (id, queue, payload, state, created_at) \
             VALUES (?1, ?2, ?3, 'pending', ?4) ON CONFLICT (id) DO NOTHING",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                item_in.id,
                item_in.queue,
                item_in.payload.to_string(),
                now
            ])
        })
        .map_err(ctx.sql())?;
        stored.push(
            item(conn, ctx, &item_in.id)?
                .ok_or_else(|| StoreError::UnknownWorkItem(item_in.id.clone()))?,
        );
    }
    Ok(stored)
}

pub(crate) fn claim(
    conn: &Connection,
    ctx: &OpContext,
    queue: Option<&str>,
    worker: &str,
    lease_ms: i64,
) -> StoreResult<Option<WorkItem>> {
    validate_name("worker name", worker)?;
    let now = now_millis();
    conn.prepare_cached(&format!(
        "UPDATE work_items SET state = 'leased', worker = ?2, token = token + 1, \
             attempts = attempts + 1, lease_deadline = ?3 + ?4 \
         WHERE seq = (SELECT seq FROM work_items \
             WHERE (?1 IS NULL OR queue = ?1) \
               AND (state = 'pending' OR (state = 'leased' AND lease_deadline <= ?3)) \
             ORDER BY seq LIMIT 1) \
         RETURNING {ITEM_COLUMNS}"
    ))
    .and_then(|mut stmt| {
        stmt.query_row(params![queue, worker, now, lease_ms], raw_item)
            .optional()
    })
    .map_err(ctx.sql())?
    .map(RawItem::into_item)
    .transpose()
}

/// The item's `(token, state)`, read by id.
fn stored_fence(
    conn: &Connection,
    ctx: &OpContext,
    item: &str,
) -> StoreResult<Option<(i64, String)>> {
    conn.prepare_cached("SELECT token, state FROM work_items WHERE id = ?1")
        .and_then(|mut stmt| {
            stmt.query_row([item], |row| Ok((row.get(0)?, row.get(1)?)))
                .optional()
        })
        .map_err(ctx.sql())
}

/// Refuses the operation unless `fence` still holds its item's lease.
pub(crate) fn check_fence(
    conn: &Connection,
    ctx: &OpContext,
    fence: &WorkFence,
) -> StoreResult<()> {
    crate::rules::work::fence_holds(fence, stored_fence(conn, ctx, &fence.item)?)
}

/// The refusal for `fence` when a write under it changed nothing.
fn fenced(conn: &Connection, ctx: &OpContext, fence: &WorkFence) -> StoreError {
    match stored_fence(conn, ctx, &fence.item) {
        Ok(stored) => crate::rules::work::fence_refusal(fence, stored),
        Err(error) => error,
    }
}

pub(crate) fn heartbeat(
    conn: &Connection,
    ctx: &OpContext,
    worker: &WorkerInfo,
    leases: &[WorkFence],
    lease_ms: i64,
) -> StoreResult<Heartbeat> {
    validate_name("worker name", &worker.name)?;
    let now = now_millis();
    conn.prepare_cached(
        "INSERT INTO workers (name, host, slots, pid, started_at, last_heartbeat) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?5) \
         ON CONFLICT (name) DO UPDATE SET host = excluded.host, slots = excluded.slots, \
             pid = excluded.pid, last_heartbeat = excluded.last_heartbeat, \
             started_at = CASE WHEN workers.stopped_at IS NULL AND workers.pid = excluded.pid \
                 THEN workers.started_at ELSE excluded.started_at END, \
             stopped_at = NULL",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            worker.name,
            worker.host,
            worker.slots,
            worker.pid,
            now
        ])
    })
    .map_err(ctx.sql())?;
    let mut beat = Heartbeat::default();
    for fence in leases {
        let changed = conn
            .prepare_cached(
                "UPDATE work_items SET lease_deadline = ?4 + ?5 \
                 WHERE id = ?1 AND token = ?2 AND worker = ?3 AND state = 'leased'",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![fence.item, fence.token, worker.name, now, lease_ms])
            })
            .map_err(ctx.sql())?;
        if changed == 1 {
            beat.kept.push(fence.clone());
        } else {
            beat.lost.push(fence.clone());
        }
    }
    Ok(beat)
}

pub(crate) fn finish(
    conn: &Connection,
    ctx: &OpContext,
    fence: &WorkFence,
    result: &Value,
) -> StoreResult<WorkItem> {
    let now = now_millis();
    let done = conn
        .prepare_cached(&format!(
            "UPDATE work_items SET state = 'done', result = ?3, finished_at = ?4, \
                 lease_deadline = NULL \
             WHERE id = ?1 AND token = ?2 AND state = 'leased' RETURNING {ITEM_COLUMNS}"
        ))
        .and_then(|mut stmt| {
            stmt.query_row(
                params![fence.item, fence.token, result.to_string(), now],
                raw_item,
            )
            .optional()
        })
        .map_err(ctx.sql())?;
    match done {
        Some(raw) => raw.into_item(),
        None => Err(fenced(conn, ctx, fence)),
    }
}

pub(crate) fn release(
    conn: &Connection,
    ctx: &OpContext,
    fence: &WorkFence,
) -> StoreResult<WorkItem> {
    let released = conn
        .prepare_cached(&format!(
            "UPDATE work_items SET state = 'pending', lease_deadline = NULL \
             WHERE id = ?1 AND token = ?2 AND state = 'leased' RETURNING {ITEM_COLUMNS}"
        ))
        .and_then(|mut stmt| {
            stmt.query_row(params![fence.item, fence.token], raw_item)
                .optional()
        })
        .map_err(ctx.sql())?;
    match released {
        Some(raw) => raw.into_item(),
        None => Err(fenced(conn, ctx, fence)),
    }
}

/// Milliseconds until the earliest lease deadline (0 when one has passed).
pub(crate) fn next_expiry(
    conn: &Connection,
    ctx: &OpContext,
    queue: Option<&str>,
) -> StoreResult<Option<i64>> {
    let earliest: Option<UnixMillis> = conn
        .prepare_cached(
            "SELECT MIN(lease_deadline) FROM work_items \
             WHERE state = 'leased' AND (?1 IS NULL OR queue = ?1)",
        )
        .and_then(|mut stmt| stmt.query_row(params![queue], |row| row.get(0)))
        .map_err(ctx.sql())?;
    Ok(earliest.map(|deadline| (deadline - now_millis()).max(0)))
}

pub(crate) fn workers(conn: &Connection, ctx: &OpContext) -> StoreResult<Vec<WorkerRecord>> {
    let mut found = conn
        .prepare_cached(
            "SELECT name, host, slots, pid, started_at, last_heartbeat, stopped_at \
             FROM workers ORDER BY name",
        )
        .and_then(|mut stmt| {
            stmt.query_map([], |row| {
                Ok(WorkerRecord {
                    name: row.get(0)?,
                    host: row.get(1)?,
                    slots: row.get(2)?,
                    pid: row.get(3)?,
                    started_at: row.get(4)?,
                    last_heartbeat: row.get(5)?,
                    stopped_at: row.get(6)?,
                    items: Vec::new(),
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(ctx.sql())?;
    for worker in &mut found {
        worker.items = conn
            .prepare_cached(
                "SELECT id FROM work_items WHERE worker = ?1 AND state = 'leased' ORDER BY seq",
            )
            .and_then(|mut stmt| {
                stmt.query_map([&worker.name], |row| row.get(0))?
                    .collect::<rusqlite::Result<Vec<String>>>()
            })
            .map_err(ctx.sql())?;
    }
    Ok(found)
}

pub(crate) fn retire(conn: &Connection, ctx: &OpContext, name: &str) -> StoreResult<()> {
    conn.prepare_cached("UPDATE workers SET stopped_at = ?2 WHERE name = ?1")
        .and_then(|mut stmt| stmt.execute(params![name, now_millis()]))
        .map_err(ctx.sql())?;
    Ok(())
}

/// Records a fenced line's process group under the item's token and current holder, in the
/// transaction of its `tool_started` record (the fence was checked in it just before).
pub(crate) fn record_group(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    fence: &WorkFence,
    group: &NewProcessGroup,
) -> StoreResult<()> {
    conn.prepare_cached(
        "INSERT INTO process_groups (run_id, agent_id, tool_use_id, pgid, host, boot_id, item, \
             token, worker, recorded_at) \
         SELECT ?1, ?2, ?3, ?4, ?5, ?6, id, token, worker, ?7 FROM work_items \
         WHERE id = ?8 AND token = ?9 AND worker IS NOT NULL \
         ON CONFLICT (run_id, agent_id, tool_use_id) DO UPDATE SET pgid = excluded.pgid, \
             host = excluded.host, boot_id = excluded.boot_id, item = excluded.item, \
             token = excluded.token, worker = excluded.worker, \
             recorded_at = excluded.recorded_at",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            run_id,
            group.agent,
            group.tool_use_id,
            group.pgid,
            group.host,
            group.boot_id,
            now_millis(),
            fence.item,
            fence.token
        ])
    })
    .map_err(ctx.sql())?;
    Ok(())
}

pub(crate) fn worker_groups(
    conn: &Connection,
    ctx: &OpContext,
    worker: &str,
    host: &str,
    boot_id: &str,
) -> StoreResult<Vec<ProcessGroupRecord>> {
    conn.prepare_cached(
        "SELECT run_id, agent_id, tool_use_id, pgid, host, boot_id, item, token, worker, \
             recorded_at FROM process_groups \
         WHERE worker = ?1 AND host = ?2 AND boot_id = ?3 ORDER BY recorded_at, run_id",
    )
    .and_then(|mut stmt| {
        stmt.query_map(params![worker, host, boot_id], |row| {
            Ok(ProcessGroupRecord {
                run_id: row.get(0)?,
                agent: row.get(1)?,
                tool_use_id: row.get(2)?,
                pgid: row.get(3)?,
                host: row.get(4)?,
                boot_id: row.get(5)?,
                item: row.get(6)?,
                token: row.get(7)?,
                worker: row.get(8)?,
                recorded_at: row.get(9)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()
    })
    .map_err(ctx.sql())
}

pub(crate) fn forget_group(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    agent: &str,
    tool_use_id: &str,
) -> StoreResult<()> {
    conn.prepare_cached(
        "DELETE FROM process_groups WHERE run_id = ?1 AND agent_id = ?2 AND tool_use_id = ?3",
    )
    .and_then(|mut stmt| stmt.execute(params![run_id, agent, tool_use_id]))
    .map_err(ctx.sql())?;
    Ok(())
}
