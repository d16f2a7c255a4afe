//! Forking a run, once for both backends (see [`super`]): every row copied under a new run id
//! and slug, in one transaction (on PostgreSQL holding both runs' locks).

use std::collections::HashMap;

use uuid::Uuid;

use super::runs::{get_run, require_free_slug, require_run};
use super::{Dialect, Tx};
use crate::clock::now_millis;
use crate::error::{StoreError, StoreResult};
use crate::types::*;

pub(crate) async fn fork_run(
    tx: &impl Tx,
    source: &str,
    new_id: &str,
    new_slug: &str,
) -> StoreResult<RunRecord> {
    validate_run_id(new_id)?;
    let original = require_run(tx, source).await?;
    if get_run(tx, new_id).await?.is_some() {
        return Err(StoreError::RunExists(new_id.to_owned()));
    }
    require_free_slug(tx, new_slug).await?;
    let status = if original.status.is_finished() {
        original.status
    } else {
        RunStatus::Interrupted
    };
    let inserted = tx
        .execute(
            "INSERT INTO runs (id, slug, team, workspace, status, created_at, updated_at, batch_line_id, \
             auto_gate_open, auto_denials, auto_gate_limit, launch_options, epoch, result, project_id) \
             SELECT ?2, ?3, team, workspace, ?4, ?5, ?5, batch_line_id, auto_gate_open, auto_denials, \
             auto_gate_limit, launch_options, 0, result, project_id FROM runs WHERE id = ?1 ON CONFLICT DO NOTHING",
            &[&source, &new_id, &new_slug, &status.as_str(), &now_millis()],
        )
        .await?;
    if inserted == 0 {
        return Err(StoreError::SlugExists(new_slug.to_owned()));
    }
    copy_rows(tx, source, new_id).await?;
    let keys = copy_messages(tx, source, new_id).await?;
    copy_decisions(tx, source, new_id, &keys).await?;
    rename_slug(tx, new_id, &original.slug, new_slug).await?;
    require_run(tx, new_id).await
}

/// Plan file names carry the slug (`{slug}.md`, `{slug}-agent-{id}.md`), and so do records and
/// mail that mention them: the fork's copies name its own files, so the two runs never write
/// each other's plans. Slugs are words joined by `-`, so the text replacement is JSON-safe.
async fn rename_slug(tx: &impl Tx, run_id: &str, old: &str, new: &str) -> StoreResult<()> {
    if old.is_empty() || old == new {
        return Ok(());
    }
    let find = match tx.dialect() {
        Dialect::Sqlite => "instr",
        Dialect::Postgres => "strpos",
    };
    for table in ["agent_records", "messages"] {
        let sql = format!(
            "UPDATE {table} SET body = replace(body, ?2, ?3) WHERE run_id = ?1 AND {find}(body, ?2) > 0"
        );
        tx.execute(&sql, &[&run_id, &old, &new]).await?;
    }
    Ok(())
}

/// Rows that carry no message key: copied as they are, under the new run id.
async fn copy_rows(tx: &impl Tx, source: &str, new_id: &str) -> StoreResult<()> {
    let roster = format!(
        "INSERT INTO roster (run_id, agent_id, kind, definition, parent, created_at) \
         SELECT ?2, agent_id, kind, definition, parent, created_at FROM roster WHERE run_id = ?1 ORDER BY {}",
        tx.dialect().roster_order()
    );
    let statements = [
        roster.as_str(),
        "INSERT INTO agent_records (run_id, agent_id, stream, seq, body, created_at) \
         SELECT ?2, agent_id, stream, seq, body, created_at FROM agent_records WHERE run_id = ?1",
        "INSERT INTO tasks (run_id, task_id, subject, description, owner, status, blocked_reason, created_by, created_at, updated_at) \
         SELECT ?2, task_id, subject, description, owner, status, blocked_reason, created_by, created_at, updated_at \
         FROM tasks WHERE run_id = ?1",
        "INSERT INTO task_deps (run_id, task_id, blocked_by) SELECT ?2, task_id, blocked_by FROM task_deps WHERE run_id = ?1",
        "INSERT INTO counters (run_id, name, value) SELECT ?2, name, value FROM counters WHERE run_id = ?1",
        "INSERT INTO operations (run_id, op_key, outcome) SELECT ?2, op_key, outcome FROM operations WHERE run_id = ?1",
        "INSERT INTO run_ledgers (run_id, max_turns, max_tokens, max_cost_nanos, turns, tokens, cost_nanos, updated_at) \
         SELECT ?2, max_turns, max_tokens, max_cost_nanos, turns, tokens, cost_nanos, updated_at FROM run_ledgers WHERE run_id = ?1",
    ];
    for sql in statements {
        tx.execute(sql, &[&source, &new_id]).await?;
    }
    Ok(())
}

/// Copies messages in commit order with fresh keys; returns old key → new key. A lease of the
/// source's process means nothing to the fork: leased mail is pending again.
async fn copy_messages(
    tx: &impl Tx,
    source: &str,
    new_id: &str,
) -> StoreResult<HashMap<String, String>> {
    let old_keys = tx
        .query(
            "SELECT key FROM messages WHERE run_id = ?1 ORDER BY seq",
            &[&source],
            |r| r.get::<String>("messages", 0),
        )
        .await?;
    let mut keys = HashMap::with_capacity(old_keys.len());
    for old in old_keys {
        let new = Uuid::now_v7().to_string();
        tx.execute(
            "INSERT INTO messages (key, run_id, sender, recipient, kind, priority, request_id, idempotency_key, \
             body, state, lease_epoch, created_at, leased_at, acked_at) \
             SELECT ?2, ?3, sender, recipient, kind, priority, request_id, idempotency_key, body, \
             CASE state WHEN 1 THEN 0 ELSE state END, NULL, created_at, NULL, acked_at FROM messages WHERE key = ?1",
            &[&old, &new, &new_id],
        )
        .await?;
        keys.insert(old, new);
    }
    Ok(keys)
}

/// Requests and responses, pointing at the copies of their messages.
async fn copy_decisions(
    tx: &impl Tx,
    source: &str,
    new_id: &str,
    keys: &HashMap<String, String>,
) -> StoreResult<()> {
    const R: &str = "requests";
    let requests = tx
        .query(
            "SELECT request_id, kind, requester, recipient, responder, message_key, created_at FROM requests WHERE run_id = ?1",
            &[&source],
            |r| {
                let text = |i| r.get::<String>(R, i);
                Ok([text(0)?, text(1)?, text(2)?, text(3)?, text(4)?, text(5)?]).and_then(|t| Ok((t, r.get::<i64>(R, 6)?)))
            },
        )
        .await?;
    for ([request_id, kind, requester, recipient, responder, key], created_at) in requests {
        tx.execute(
            "INSERT INTO requests (run_id, request_id, kind, requester, recipient, responder, message_key, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            &[&new_id, &request_id, &kind, &requester, &recipient, &responder, &mapped(keys, &key)?, &created_at],
        )
        .await?;
    }
    const S: &str = "responses";
    let responses = tx
        .query(
            "SELECT request_id, responder, kind, message_key, decided_at FROM responses WHERE run_id = ?1",
            &[&source],
            |r| Ok((r.get::<String>(S, 0)?, r.get::<String>(S, 1)?, r.get::<String>(S, 2)?, r.get::<String>(S, 3)?, r.get::<i64>(S, 4)?)),
        )
        .await?;
    for (request_id, responder, kind, key, decided_at) in responses {
        tx.execute(
            "INSERT INTO responses (run_id, request_id, responder, kind, message_key, decided_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            &[&new_id, &request_id, &responder, &kind, &mapped(keys, &key)?, &decided_at],
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
