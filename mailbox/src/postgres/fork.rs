//! Forking a run on PostgreSQL, as on SQLite (`sqlite/fork.rs`): every row copied under a new
//! run id and slug, in one transaction that holds both runs' locks.

use std::collections::HashMap;

use uuid::Uuid;

use crate::error::{StoreError, StoreResult};
use crate::postgres::ops::{
    Ctx, Tx, col, execute, get_run, now_millis, pg_error, require_free_slug, require_run,
};
use crate::types::*;

pub(crate) async fn fork_run(
    tx: &Tx<'_>,
    ctx: &Ctx,
    source: &str,
    new_id: &str,
    new_slug: &str,
) -> StoreResult<RunRecord> {
    validate_run_id(new_id)?;
    let original = require_run(tx, ctx, source).await?;
    if get_run(tx, ctx, new_id).await?.is_some() {
        return Err(StoreError::RunExists(new_id.to_owned()));
    }
    require_free_slug(tx, ctx, new_slug).await?;
    let status = if original.status.is_finished() {
        original.status
    } else {
        RunStatus::Interrupted
    };
    let inserted = execute(
        tx,
        ctx,
        "INSERT INTO runs (id, slug, team, workspace, status, created_at, updated_at, batch_line_id, \
         auto_gate_open, auto_denials, auto_gate_limit, launch_options, epoch, result, project_id) \
         SELECT $2, $3, team, workspace, $4, $5, $5, batch_line_id, auto_gate_open, auto_denials, \
         auto_gate_limit, launch_options, 0, result, project_id FROM runs WHERE id = $1 ON CONFLICT DO NOTHING",
        &[&source, &new_id, &new_slug, &status.as_str(), &now_millis()],
    )
    .await?;
    if inserted == 0 {
        return Err(StoreError::SlugExists(new_slug.to_owned()));
    }
    copy_rows(tx, ctx, source, new_id).await?;
    let keys = copy_messages(tx, ctx, source, new_id).await?;
    copy_decisions(tx, ctx, source, new_id, &keys).await?;
    rename_slug(tx, ctx, new_id, &original.slug, new_slug).await?;
    require_run(tx, ctx, new_id).await
}

/// Plan file names carry the slug; the fork's records and mail name its own files (see the
/// SQLite store's `rename_slug`).
async fn rename_slug(
    tx: &Tx<'_>,
    ctx: &Ctx,
    run_id: &str,
    old: &str,
    new: &str,
) -> StoreResult<()> {
    if old.is_empty() || old == new {
        return Ok(());
    }
    for sql in [
        "UPDATE agent_records SET body = replace(body, $2, $3) WHERE run_id = $1 AND strpos(body, $2) > 0",
        "UPDATE messages SET body = replace(body, $2, $3) WHERE run_id = $1 AND strpos(body, $2) > 0",
    ] {
        execute(tx, ctx, sql, &[&run_id, &old, &new]).await?;
    }
    Ok(())
}

/// Rows that carry no message key: copied as they are, under the new run id.
async fn copy_rows(tx: &Tx<'_>, ctx: &Ctx, source: &str, new_id: &str) -> StoreResult<()> {
    let statements = [
        "INSERT INTO roster (run_id, agent_id, kind, definition, parent, created_at) \
         SELECT $2, agent_id, kind, definition, parent, created_at FROM roster WHERE run_id = $1 ORDER BY position",
        "INSERT INTO agent_records (run_id, agent_id, stream, seq, body, created_at) \
         SELECT $2, agent_id, stream, seq, body, created_at FROM agent_records WHERE run_id = $1",
        "INSERT INTO tasks (run_id, task_id, subject, description, owner, status, blocked_reason, created_by, created_at, updated_at) \
         SELECT $2, task_id, subject, description, owner, status, blocked_reason, created_by, created_at, updated_at \
         FROM tasks WHERE run_id = $1",
        "INSERT INTO task_deps (run_id, task_id, blocked_by) SELECT $2, task_id, blocked_by FROM task_deps WHERE run_id = $1",
        "INSERT INTO counters (run_id, name, value) SELECT $2, name, value FROM counters WHERE run_id = $1",
        "INSERT INTO operations (run_id, op_key, outcome) SELECT $2, op_key, outcome FROM operations WHERE run_id = $1",
    ];
    for sql in statements {
        execute(tx, ctx, sql, &[&source, &new_id]).await?;
    }
    Ok(())
}

/// Copies messages in commit order with fresh keys; returns old key → new key. Leased mail is
/// pending again in the fork.
async fn copy_messages(
    tx: &Tx<'_>,
    ctx: &Ctx,
    source: &str,
    new_id: &str,
) -> StoreResult<HashMap<String, String>> {
    let old_keys: Vec<String> = tx
        .query(
            "SELECT key FROM messages WHERE run_id = $1 ORDER BY seq",
            &[&source],
        )
        .await
        .map_err(|e| pg_error(ctx, e))?
        .iter()
        .map(|row| col(row, "messages", 0))
        .collect::<StoreResult<_>>()?;
    let copy = "INSERT INTO messages (key, run_id, sender, recipient, kind, priority, request_id, idempotency_key, \
         body, state, lease_epoch, created_at, leased_at, acked_at) \
         SELECT $2, $3, sender, recipient, kind, priority, request_id, idempotency_key, body, \
         CASE state WHEN 1 THEN 0 ELSE state END, NULL, created_at, NULL, acked_at FROM messages WHERE key = $1";
    let mut keys = HashMap::with_capacity(old_keys.len());
    for old in old_keys {
        let new = Uuid::now_v7().to_string();
        execute(tx, ctx, copy, &[&old, &new, &new_id]).await?;
        keys.insert(old, new);
    }
    Ok(keys)
}

async fn copy_decisions(
    tx: &Tx<'_>,
    ctx: &Ctx,
    source: &str,
    new_id: &str,
    keys: &HashMap<String, String>,
) -> StoreResult<()> {
    let requests = tx
        .query(
            "SELECT request_id, kind, requester, recipient, responder, message_key, created_at FROM requests WHERE run_id = $1",
            &[&source],
        )
        .await
        .map_err(|e| pg_error(ctx, e))?;
    for row in &requests {
        const T: &str = "requests";
        let key = mapped(keys, col(row, T, 5)?)?;
        let created_at: i64 = col(row, T, 6)?;
        execute(
            tx,
            ctx,
            "INSERT INTO requests (run_id, request_id, kind, requester, recipient, responder, message_key, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                &new_id,
                &col::<String>(row, T, 0)?,
                &col::<String>(row, T, 1)?,
                &col::<String>(row, T, 2)?,
                &col::<String>(row, T, 3)?,
                &col::<String>(row, T, 4)?,
                &key,
                &created_at,
            ],
        )
        .await?;
    }
    let responses = tx
        .query(
            "SELECT request_id, responder, kind, message_key, decided_at FROM responses WHERE run_id = $1",
            &[&source],
        )
        .await
        .map_err(|e| pg_error(ctx, e))?;
    for row in &responses {
        const T: &str = "responses";
        let key = mapped(keys, col(row, T, 3)?)?;
        let decided_at: i64 = col(row, T, 4)?;
        execute(
            tx,
            ctx,
            "INSERT INTO responses (run_id, request_id, responder, kind, message_key, decided_at) VALUES ($1, $2, $3, $4, $5, $6)",
            &[
                &new_id,
                &col::<String>(row, T, 0)?,
                &col::<String>(row, T, 1)?,
                &col::<String>(row, T, 2)?,
                &key,
                &decided_at,
            ],
        )
        .await?;
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
