//! Forking a run: every row copied under a new run id and slug, in one operation.

use std::collections::HashMap;

use rusqlite::{Connection, params};
use uuid::Uuid;

use crate::error::{StoreError, StoreResult};
use crate::sqlite::ops::{OpContext, get_run, now_millis, require_free_slug, require_run};
use crate::types::*;

pub(crate) fn fork_run(
    conn: &Connection,
    ctx: &OpContext,
    source: &str,
    new_id: &str,
    new_slug: &str,
) -> StoreResult<RunRecord> {
    validate_run_id(new_id)?;
    let original = require_run(conn, ctx, source)?;
    if get_run(conn, ctx, new_id)?.is_some() {
        return Err(StoreError::RunExists(new_id.to_owned()));
    }
    require_free_slug(conn, ctx, new_slug)?;
    let status = if original.status.is_finished() {
        original.status
    } else {
        RunStatus::Interrupted
    };
    let now = now_millis();
    conn.execute(
        "INSERT INTO runs (id, slug, team, workspace, status, created_at, updated_at, batch_line_id, \
         auto_gate_open, auto_denials, auto_gate_limit, launch_options, epoch, result, project_id) \
         SELECT ?2, ?3, team, workspace, ?4, ?5, ?5, batch_line_id, auto_gate_open, auto_denials, \
         auto_gate_limit, launch_options, 0, result, project_id FROM runs WHERE id = ?1",
        params![source, new_id, new_slug, status.as_str(), now],
    )
    .map_err(ctx.sql())?;
    copy_rows(conn, ctx, source, new_id)?;
    let keys = copy_messages(conn, ctx, source, new_id)?;
    copy_decisions(conn, ctx, source, new_id, &keys)?;
    rename_slug(conn, ctx, new_id, &original.slug, new_slug)?;
    require_run(conn, ctx, new_id)
}

/// Plan file names carry the slug (`{slug}.md`, `{slug}-agent-{id}.md`), and so do records and
/// mail that mention them: the fork's copies name its own files, so the two runs never write
/// each other's plans. Slugs are words joined by `-`, so the text replacement is JSON-safe.
fn rename_slug(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    old: &str,
    new: &str,
) -> StoreResult<()> {
    if old.is_empty() || old == new {
        return Ok(());
    }
    for sql in [
        "UPDATE agent_records SET body = replace(body, ?2, ?3) WHERE run_id = ?1 AND instr(body, ?2) > 0",
        "UPDATE messages SET body = replace(body, ?2, ?3) WHERE run_id = ?1 AND instr(body, ?2) > 0",
    ] {
        conn.execute(sql, params![run_id, old, new])
            .map_err(ctx.sql())?;
    }
    Ok(())
}

/// Rows that carry no message key: copied as they are, under the new run id.
fn copy_rows(conn: &Connection, ctx: &OpContext, source: &str, new_id: &str) -> StoreResult<()> {
    let statements = [
        "INSERT INTO roster (run_id, agent_id, kind, definition, parent, created_at) \
         SELECT ?2, agent_id, kind, definition, parent, created_at FROM roster WHERE run_id = ?1 ORDER BY rowid",
        "INSERT INTO agent_records (run_id, agent_id, stream, seq, body, created_at) \
         SELECT ?2, agent_id, stream, seq, body, created_at FROM agent_records WHERE run_id = ?1",
        "INSERT INTO tasks (run_id, task_id, subject, description, owner, status, blocked_reason, created_by, created_at, updated_at) \
         SELECT ?2, task_id, subject, description, owner, status, blocked_reason, created_by, created_at, updated_at \
         FROM tasks WHERE run_id = ?1",
        "INSERT INTO task_deps (run_id, task_id, blocked_by) SELECT ?2, task_id, blocked_by FROM task_deps WHERE run_id = ?1",
        "INSERT INTO counters (run_id, name, value) SELECT ?2, name, value FROM counters WHERE run_id = ?1",
        "INSERT INTO operations (run_id, op_key, outcome) SELECT ?2, op_key, outcome FROM operations WHERE run_id = ?1",
    ];
    for sql in statements {
        conn.execute(sql, params![source, new_id])
            .map_err(ctx.sql())?;
    }
    Ok(())
}

/// Copies messages in commit order with fresh keys; returns old key → new key. A lease of the
/// source's process means nothing to the fork: leased mail is pending again.
fn copy_messages(
    conn: &Connection,
    ctx: &OpContext,
    source: &str,
    new_id: &str,
) -> StoreResult<HashMap<String, String>> {
    let old_keys: Vec<String> = conn
        .prepare("SELECT key FROM messages WHERE run_id = ?1 ORDER BY seq")
        .and_then(|mut stmt| stmt.query_map([source], |row| row.get(0))?.collect())
        .map_err(ctx.sql())?;
    let mut copy = conn
        .prepare(
            "INSERT INTO messages (key, run_id, sender, recipient, kind, priority, request_id, idempotency_key, \
             body, state, lease_epoch, created_at, leased_at, acked_at) \
             SELECT ?2, ?3, sender, recipient, kind, priority, request_id, idempotency_key, body, \
             CASE state WHEN 1 THEN 0 ELSE state END, NULL, created_at, NULL, acked_at FROM messages WHERE key = ?1",
        )
        .map_err(ctx.sql())?;
    let mut keys = HashMap::with_capacity(old_keys.len());
    for old in old_keys {
        let new = Uuid::now_v7().to_string();
        copy.execute(params![old, new, new_id]).map_err(ctx.sql())?;
        keys.insert(old, new);
    }
    Ok(keys)
}

fn copy_decisions(
    conn: &Connection,
    ctx: &OpContext,
    source: &str,
    new_id: &str,
    keys: &HashMap<String, String>,
) -> StoreResult<()> {
    type Request = (String, String, String, String, String, String, i64);
    let requests: Vec<Request> = conn
        .prepare(
            "SELECT request_id, kind, requester, recipient, responder, message_key, created_at FROM requests WHERE run_id = ?1",
        )
        .and_then(|mut stmt| {
            stmt.query_map([source], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?)))?
                .collect()
        })
        .map_err(ctx.sql())?;
    for (request_id, kind, requester, recipient, responder, key, created_at) in requests {
        let key = mapped(keys, &key)?;
        conn.execute(
            "INSERT INTO requests (run_id, request_id, kind, requester, recipient, responder, message_key, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![new_id, request_id, kind, requester, recipient, responder, key, created_at],
        )
        .map_err(ctx.sql())?;
    }
    let responses: Vec<(String, String, String, String, i64)> = conn
        .prepare("SELECT request_id, responder, kind, message_key, decided_at FROM responses WHERE run_id = ?1")
        .and_then(|mut stmt| {
            stmt.query_map([source], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))?.collect()
        })
        .map_err(ctx.sql())?;
    for (request_id, responder, kind, key, decided_at) in responses {
        let key = mapped(keys, &key)?;
        conn.execute(
            "INSERT INTO responses (run_id, request_id, responder, kind, message_key, decided_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![new_id, request_id, responder, kind, key, decided_at],
        )
        .map_err(ctx.sql())?;
    }
    Ok(())
}

fn mapped(keys: &HashMap<String, String>, old: &str) -> StoreResult<String> {
    keys.get(old)
        .cloned()
        .ok_or_else(|| StoreError::CorruptRow {
            table: "requests",
            detail: format!("decision points at message {old}, which is not in its run"),
        })
}
