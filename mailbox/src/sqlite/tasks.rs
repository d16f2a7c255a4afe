//! The task board. Blocking by dependencies is computed when read, never stored; a claim is one
//! conditional UPDATE checked by its changed-row count.

use rusqlite::{Connection, OptionalExtension, params};

use crate::error::{StoreError, StoreResult};
use crate::message::MessageBody;
use crate::sqlite::ops::{OpContext, now_millis, once, require_run, send};
use crate::types::*;
use crate::wake::Wake;

type RawTask = (
    i64,
    String,
    String,
    Option<String>,
    String,
    Option<String>,
    String,
    i64,
    i64,
);

const TASK_COLUMNS: &str = "task_id, subject, description, owner, status, blocked_reason, created_by, created_at, updated_at";

fn read_raw(row: &rusqlite::Row<'_>) -> rusqlite::Result<RawTask> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
        row.get(6)?,
        row.get(7)?,
        row.get(8)?,
    ))
}

fn dependencies(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    task_id: i64,
) -> StoreResult<(Vec<i64>, Vec<i64>)> {
    let rows: Vec<(i64, String)> = conn
        .prepare_cached(
            "SELECT d.blocked_by, b.status FROM task_deps d JOIN tasks b \
             ON b.run_id = d.run_id AND b.task_id = d.blocked_by \
             WHERE d.run_id = ?1 AND d.task_id = ?2 ORDER BY d.blocked_by",
        )
        .and_then(|mut stmt| {
            stmt.query_map(params![run_id, task_id], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })?
            .collect()
        })
        .map_err(ctx.sql())?;
    let all = rows.iter().map(|(id, _)| *id).collect();
    let open = rows
        .iter()
        .filter(|(_, status)| status != "completed")
        .map(|(id, _)| *id)
        .collect();
    Ok((all, open))
}

fn into_task(conn: &Connection, ctx: &OpContext, run_id: &str, raw: RawTask) -> StoreResult<Task> {
    let (
        task_id,
        subject,
        description,
        owner,
        status,
        blocked_reason,
        created_by,
        created_at,
        updated_at,
    ) = raw;
    let status = TaskStatus::parse(&status).ok_or_else(|| StoreError::CorruptRow {
        table: "tasks",
        detail: format!("unknown status {status:?}"),
    })?;
    let (blocked_by, blocked_by_open) = dependencies(conn, ctx, run_id, task_id)?;
    Ok(Task {
        run_id: run_id.into(),
        task_id,
        subject,
        description,
        owner,
        status,
        blocked_reason,
        blocked_by,
        blocked_by_open,
        created_by,
        created_at,
        updated_at,
    })
}

pub(crate) fn get_task(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    task_id: i64,
) -> StoreResult<Option<Task>> {
    let raw = conn
        .prepare_cached(&format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE run_id = ?1 AND task_id = ?2"
        ))
        .and_then(|mut stmt| {
            stmt.query_row(params![run_id, task_id], read_raw)
                .optional()
        })
        .map_err(ctx.sql())?;
    raw.map(|raw| into_task(conn, ctx, run_id, raw)).transpose()
}

fn require_task(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    task_id: i64,
) -> StoreResult<Task> {
    get_task(conn, ctx, run_id, task_id)?.ok_or_else(|| StoreError::UnknownTask {
        run: run_id.into(),
        task_id,
    })
}

pub(crate) fn list_tasks(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
) -> StoreResult<Vec<Task>> {
    let raws = conn
        .prepare_cached(&format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE run_id = ?1 ORDER BY task_id"
        ))
        .and_then(|mut stmt| {
            stmt.query_map([run_id], read_raw)?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(ctx.sql())?;
    raws.into_iter()
        .map(|raw| into_task(conn, ctx, run_id, raw))
        .collect()
}

pub(crate) fn create_task(conn: &Connection, ctx: &OpContext, task: &NewTask) -> StoreResult<Task> {
    let key = task.idempotency_key.as_deref();
    once(conn, ctx, &task.run_id, key, || {
        insert_task(conn, ctx, task)
    })
}

fn insert_task(conn: &Connection, ctx: &OpContext, task: &NewTask) -> StoreResult<Task> {
    require_run(conn, ctx, &task.run_id)?;
    let task_id: i64 = conn
        .query_row(
            "SELECT COALESCE(MAX(task_id), 0) + 1 FROM tasks WHERE run_id = ?1",
            [&task.run_id],
            |row| row.get(0),
        )
        .map_err(ctx.sql())?;
    let now = now_millis();
    conn.execute(
        "INSERT INTO tasks (run_id, task_id, subject, description, status, created_by, created_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, 'pending', ?5, ?6, ?6)",
        params![task.run_id, task_id, task.subject, task.description, task.created_by, now],
    )
    .map_err(ctx.sql())?;
    add_dependencies(conn, ctx, &task.run_id, task_id, &task.blocked_by)?;
    require_task(conn, ctx, &task.run_id, task_id)
}

fn add_dependencies(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    task_id: i64,
    blocked_by: &[i64],
) -> StoreResult<()> {
    for &dependency in blocked_by {
        let refuse = |reason: &str| StoreError::InvalidDependency {
            task_id,
            blocked_by: dependency,
            reason: reason.into(),
        };
        if dependency == task_id {
            return Err(refuse("a task cannot wait for itself"));
        }
        if get_task(conn, ctx, run_id, dependency)?.is_none() {
            return Err(refuse("no such task"));
        }
        if depends_on(conn, ctx, run_id, dependency, task_id)? {
            return Err(refuse("that would make a cycle"));
        }
        conn.execute(
            "INSERT OR IGNORE INTO task_deps (run_id, task_id, blocked_by) VALUES (?1, ?2, ?3)",
            params![run_id, task_id, dependency],
        )
        .map_err(ctx.sql())?;
    }
    Ok(())
}

/// Whether `task_id` (transitively) waits for `target`.
fn depends_on(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    task_id: i64,
    target: i64,
) -> StoreResult<bool> {
    conn.query_row(
        "WITH RECURSIVE up(id) AS (SELECT ?2 UNION SELECT d.blocked_by FROM task_deps d JOIN up ON d.task_id = up.id \
         WHERE d.run_id = ?1) SELECT EXISTS (SELECT 1 FROM up WHERE id = ?3)",
        params![run_id, task_id, target],
        |row| row.get(0),
    )
    .map_err(ctx.sql())
}

/// Claims a task for `agent`: one conditional UPDATE; when it changes no row, the reason is
/// read back for the caller.
pub(crate) fn claim_task(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    task_id: i64,
    agent: &str,
) -> StoreResult<Task> {
    let changed = conn
        .prepare_cached(
            "UPDATE tasks SET owner = ?3, status = 'in_progress', updated_at = ?4 \
             WHERE run_id = ?1 AND task_id = ?2 AND status = 'pending' AND owner IS NULL \
             AND NOT EXISTS (SELECT 1 FROM task_deps d JOIN tasks b ON b.run_id = d.run_id AND b.task_id = d.blocked_by \
                             WHERE d.run_id = ?1 AND d.task_id = ?2 AND b.status != 'completed')",
        )
        .and_then(|mut stmt| stmt.execute(params![run_id, task_id, agent, now_millis()]))
        .map_err(ctx.sql())?;
    let task = require_task(conn, ctx, run_id, task_id)?;
    if changed == 1 {
        return Ok(task);
    }
    let reason = match (&task.owner, task.status) {
        (Some(owner), _) => format!("already claimed by {owner:?}"),
        (None, TaskStatus::Pending) => {
            format!("blocked by open task(s) {:?}", task.blocked_by_open)
        }
        (None, status) => format!("it is {}", status.as_str()),
    };
    Err(StoreError::ClaimRefused {
        task_id,
        agent: agent.into(),
        reason,
    })
}

/// Claims the lowest-numbered claimable task, if any, and sends the claimer its
/// `task_assignment` in the same transaction.
pub(crate) fn claim_next(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    agent: &str,
    wakes: &mut Vec<Wake>,
) -> StoreResult<Option<Claimed>> {
    let candidate: Option<i64> = conn
        .prepare_cached(
            "SELECT t.task_id FROM tasks t WHERE t.run_id = ?1 AND t.status = 'pending' AND t.owner IS NULL \
             AND NOT EXISTS (SELECT 1 FROM task_deps d JOIN tasks b ON b.run_id = d.run_id AND b.task_id = d.blocked_by \
                             WHERE d.run_id = t.run_id AND d.task_id = t.task_id AND b.status != 'completed') \
             ORDER BY t.task_id LIMIT 1",
        )
        .and_then(|mut stmt| stmt.query_row([run_id], |row| row.get(0)).optional())
        .map_err(ctx.sql())?;
    let Some(task_id) = candidate else {
        return Ok(None);
    };
    let task = claim_task(conn, ctx, run_id, task_id, agent)?;
    let assignment = send(
        conn,
        ctx,
        &NewMessage {
            run_id: run_id.into(),
            sender: agent.into(),
            recipient: agent.into(),
            body: MessageBody::TaskAssignment {
                task_id,
                subject: task.subject.clone(),
                description: task.description.clone(),
                assigned_by: agent.into(),
            },
            idempotency_key: Some(format!("claim:{agent}:{task_id}")),
        },
        wakes,
    )?;
    Ok(Some(Claimed { task, assignment }))
}

pub(crate) fn update_task(
    conn: &Connection,
    ctx: &OpContext,
    update: &TaskUpdate,
    wakes: &mut Vec<Wake>,
) -> StoreResult<TaskChange> {
    let key = update.idempotency_key.as_deref();
    once(conn, ctx, &update.run_id, key, || {
        change_task(conn, ctx, update, wakes)
    })
}

fn change_task(
    conn: &Connection,
    ctx: &OpContext,
    update: &TaskUpdate,
    wakes: &mut Vec<Wake>,
) -> StoreResult<TaskChange> {
    let before = require_task(conn, ctx, &update.run_id, update.task_id)?;
    let owner = update.owner.clone().unwrap_or_else(|| before.owner.clone());
    let status = update.status.unwrap_or(before.status);
    let blocked_reason = match status {
        TaskStatus::Blocked => update
            .blocked_reason
            .clone()
            .or(before.blocked_reason.clone()),
        _ => None,
    };
    conn.execute(
        "UPDATE tasks SET subject = ?3, description = ?4, owner = ?5, status = ?6, blocked_reason = ?7, updated_at = ?8 \
         WHERE run_id = ?1 AND task_id = ?2",
        params![
            update.run_id,
            update.task_id,
            update.subject.as_ref().unwrap_or(&before.subject),
            update.description.as_ref().unwrap_or(&before.description),
            owner,
            status.as_str(),
            blocked_reason,
            now_millis(),
        ],
    )
    .map_err(ctx.sql())?;
    add_dependencies(
        conn,
        ctx,
        &update.run_id,
        update.task_id,
        &update.add_blocked_by,
    )?;
    let after = require_task(conn, ctx, &update.run_id, update.task_id)?;
    let mut assignment = None;
    if let Some(new_owner) = after
        .owner
        .as_ref()
        .filter(|o| before.owner.as_ref() != Some(*o))
    {
        assignment = Some(send(
            conn,
            ctx,
            &NewMessage {
                run_id: update.run_id.clone(),
                sender: update.updated_by.clone(),
                recipient: new_owner.clone(),
                body: MessageBody::TaskAssignment {
                    task_id: after.task_id,
                    subject: after.subject.clone(),
                    description: after.description.clone(),
                    assigned_by: update.updated_by.clone(),
                },
                idempotency_key: None,
            },
            wakes,
        )?);
    }
    Ok(TaskChange {
        before,
        after,
        assignment,
    })
}

/// Returns a stopped agent's unfinished tasks to the board; gives back their ids.
pub(crate) fn release_tasks_of(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    agent: &str,
) -> StoreResult<Vec<i64>> {
    conn.prepare_cached(
        "UPDATE tasks SET owner = NULL, status = 'pending', blocked_reason = NULL, updated_at = ?3 \
         WHERE run_id = ?1 AND owner = ?2 AND status IN ('pending', 'in_progress', 'blocked') RETURNING task_id",
    )
    .and_then(|mut stmt| stmt.query_map(params![run_id, agent, now_millis()], |row| row.get(0))?.collect())
    .map_err(ctx.sql())
}
