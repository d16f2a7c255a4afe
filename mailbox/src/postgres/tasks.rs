//! The task board on PostgreSQL, as on SQLite (`sqlite/tasks.rs`): blocking by dependencies is
//! computed when read, never stored; a claim is one conditional UPDATE checked by its
//! changed-row count.

use tokio_postgres::Row;

use crate::error::{StoreError, StoreResult};
use crate::message::MessageBody;
use crate::postgres::ops::{
    Ctx, Tx, execute, now_millis, require_run, send, store_outcome, stored_outcome,
};
use crate::types::*;
use crate::wake::Wake;

const TASK_COLUMNS: &str = "task_id, subject, description, owner, status, blocked_reason, created_by, created_at, updated_at";
const T: &str = "tasks";

fn col<'a, V: tokio_postgres::types::FromSql<'a>>(row: &'a Row, index: usize) -> StoreResult<V> {
    row.try_get(index).map_err(|e| StoreError::CorruptRow {
        table: T,
        detail: format!("column {index}: {e}"),
    })
}

fn pg(ctx: &Ctx) -> impl Fn(tokio_postgres::Error) -> StoreError + '_ {
    move |e| crate::postgres::ops::pg_error(ctx, e)
}

async fn rows(
    tx: &Tx<'_>,
    ctx: &Ctx,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> StoreResult<Vec<Row>> {
    let statement = tx.prepare_cached(sql).await.map_err(pg(ctx))?;
    tx.query(&statement, params).await.map_err(pg(ctx))
}

async fn dependencies(
    tx: &Tx<'_>,
    ctx: &Ctx,
    run_id: &str,
    task_id: i64,
) -> StoreResult<(Vec<i64>, Vec<i64>)> {
    let found = rows(
        tx,
        ctx,
        "SELECT d.blocked_by, b.status FROM task_deps d JOIN tasks b \
         ON b.run_id = d.run_id AND b.task_id = d.blocked_by \
         WHERE d.run_id = $1 AND d.task_id = $2 ORDER BY d.blocked_by",
        &[&run_id, &task_id],
    )
    .await?;
    let mut all = Vec::with_capacity(found.len());
    let mut open = Vec::new();
    for row in &found {
        let id: i64 = col(row, 0)?;
        let status: String = col(row, 1)?;
        all.push(id);
        if status != "completed" {
            open.push(id);
        }
    }
    Ok((all, open))
}

async fn task_of(tx: &Tx<'_>, ctx: &Ctx, run_id: &str, row: &Row) -> StoreResult<Task> {
    let task_id: i64 = col(row, 0)?;
    let status: String = col(row, 4)?;
    let status = TaskStatus::parse(&status).ok_or_else(|| StoreError::CorruptRow {
        table: T,
        detail: format!("unknown status {status:?}"),
    })?;
    let (blocked_by, blocked_by_open) = dependencies(tx, ctx, run_id, task_id).await?;
    Ok(Task {
        run_id: run_id.into(),
        task_id,
        subject: col(row, 1)?,
        description: col(row, 2)?,
        owner: col(row, 3)?,
        status,
        blocked_reason: col(row, 5)?,
        blocked_by,
        blocked_by_open,
        created_by: col(row, 6)?,
        created_at: col(row, 7)?,
        updated_at: col(row, 8)?,
    })
}

pub(crate) async fn get_task(
    tx: &Tx<'_>,
    ctx: &Ctx,
    run_id: &str,
    task_id: i64,
) -> StoreResult<Option<Task>> {
    let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE run_id = $1 AND task_id = $2");
    match rows(tx, ctx, &sql, &[&run_id, &task_id]).await?.first() {
        Some(row) => Ok(Some(task_of(tx, ctx, run_id, row).await?)),
        None => Ok(None),
    }
}

async fn require_task(tx: &Tx<'_>, ctx: &Ctx, run_id: &str, task_id: i64) -> StoreResult<Task> {
    get_task(tx, ctx, run_id, task_id)
        .await?
        .ok_or_else(|| StoreError::UnknownTask {
            run: run_id.into(),
            task_id,
        })
}

pub(crate) async fn list_tasks(tx: &Tx<'_>, ctx: &Ctx, run_id: &str) -> StoreResult<Vec<Task>> {
    let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE run_id = $1 ORDER BY task_id");
    let found = rows(tx, ctx, &sql, &[&run_id]).await?;
    let mut tasks = Vec::with_capacity(found.len());
    for row in &found {
        tasks.push(task_of(tx, ctx, run_id, row).await?);
    }
    Ok(tasks)
}

pub(crate) async fn create_task(tx: &Tx<'_>, ctx: &Ctx, task: &NewTask) -> StoreResult<Task> {
    let Some(key) = task.idempotency_key.as_deref() else {
        return insert_task(tx, ctx, task).await;
    };
    if let Some(first) = stored_outcome(tx, ctx, &task.run_id, key).await? {
        return Ok(first);
    }
    let created = insert_task(tx, ctx, task).await?;
    store_outcome(tx, ctx, &task.run_id, key, &created).await?;
    Ok(created)
}

async fn insert_task(tx: &Tx<'_>, ctx: &Ctx, task: &NewTask) -> StoreResult<Task> {
    require_run(tx, ctx, &task.run_id).await?;
    let next = rows(
        tx,
        ctx,
        "SELECT COALESCE(MAX(task_id), 0) + 1 FROM tasks WHERE run_id = $1",
        &[&task.run_id],
    )
    .await?;
    let task_id: i64 = match next.first() {
        Some(row) => col(row, 0)?,
        None => 1,
    };
    let now = now_millis();
    execute(
        tx,
        ctx,
        "INSERT INTO tasks (run_id, task_id, subject, description, status, created_by, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, 'pending', $5, $6, $6)",
        &[
            &task.run_id,
            &task_id,
            &task.subject,
            &task.description,
            &task.created_by,
            &now,
        ],
    )
    .await?;
    add_dependencies(tx, ctx, &task.run_id, task_id, &task.blocked_by).await?;
    require_task(tx, ctx, &task.run_id, task_id).await
}

async fn add_dependencies(
    tx: &Tx<'_>,
    ctx: &Ctx,
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
        if get_task(tx, ctx, run_id, dependency).await?.is_none() {
            return Err(refuse("no such task"));
        }
        if depends_on(tx, ctx, run_id, dependency, task_id).await? {
            return Err(refuse("that would make a cycle"));
        }
        execute(
            tx,
            ctx,
            "INSERT INTO task_deps (run_id, task_id, blocked_by) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            &[&run_id, &task_id, &dependency],
        )
        .await?;
    }
    Ok(())
}

/// Whether `task_id` (transitively) waits for `target`.
async fn depends_on(
    tx: &Tx<'_>,
    ctx: &Ctx,
    run_id: &str,
    task_id: i64,
    target: i64,
) -> StoreResult<bool> {
    let found = rows(
        tx,
        ctx,
        "WITH RECURSIVE up(id) AS (SELECT $2::BIGINT UNION SELECT d.blocked_by FROM task_deps d \
         JOIN up ON d.task_id = up.id WHERE d.run_id = $1) \
         SELECT EXISTS (SELECT 1 FROM up WHERE id = $3)",
        &[&run_id, &task_id, &target],
    )
    .await?;
    match found.first() {
        Some(row) => col(row, 0),
        None => Ok(false),
    }
}

/// Claims a task for `agent`: one conditional UPDATE; when it changes no row, the reason is
/// read back for the caller.
pub(crate) async fn claim_task(
    tx: &Tx<'_>,
    ctx: &Ctx,
    run_id: &str,
    task_id: i64,
    agent: &str,
) -> StoreResult<Task> {
    let changed = execute(
        tx,
        ctx,
        "UPDATE tasks SET owner = $3, status = 'in_progress', updated_at = $4 \
         WHERE run_id = $1 AND task_id = $2 AND status = 'pending' AND owner IS NULL \
         AND NOT EXISTS (SELECT 1 FROM task_deps d JOIN tasks b ON b.run_id = d.run_id AND b.task_id = d.blocked_by \
                         WHERE d.run_id = $1 AND d.task_id = $2 AND b.status != 'completed')",
        &[&run_id, &task_id, &agent, &now_millis()],
    )
    .await?;
    let task = require_task(tx, ctx, run_id, task_id).await?;
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
pub(crate) async fn claim_next(
    tx: &Tx<'_>,
    ctx: &Ctx,
    run_id: &str,
    agent: &str,
    wakes: &mut Vec<Wake>,
) -> StoreResult<Option<Claimed>> {
    let candidate = rows(
        tx,
        ctx,
        "SELECT t.task_id FROM tasks t WHERE t.run_id = $1 AND t.status = 'pending' AND t.owner IS NULL \
         AND NOT EXISTS (SELECT 1 FROM task_deps d JOIN tasks b ON b.run_id = d.run_id AND b.task_id = d.blocked_by \
                         WHERE d.run_id = t.run_id AND d.task_id = t.task_id AND b.status != 'completed') \
         ORDER BY t.task_id LIMIT 1",
        &[&run_id],
    )
    .await?;
    let Some(row) = candidate.first() else {
        return Ok(None);
    };
    let task_id: i64 = col(row, 0)?;
    let task = claim_task(tx, ctx, run_id, task_id, agent).await?;
    let assignment = send(
        tx,
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
    )
    .await?;
    Ok(Some(Claimed { task, assignment }))
}

pub(crate) async fn update_task(
    tx: &Tx<'_>,
    ctx: &Ctx,
    update: &TaskUpdate,
    wakes: &mut Vec<Wake>,
) -> StoreResult<TaskChange> {
    let Some(key) = update.idempotency_key.as_deref() else {
        return change_task(tx, ctx, update, wakes).await;
    };
    if let Some(first) = stored_outcome(tx, ctx, &update.run_id, key).await? {
        return Ok(first);
    }
    let change = change_task(tx, ctx, update, wakes).await?;
    store_outcome(tx, ctx, &update.run_id, key, &change).await?;
    Ok(change)
}

async fn change_task(
    tx: &Tx<'_>,
    ctx: &Ctx,
    update: &TaskUpdate,
    wakes: &mut Vec<Wake>,
) -> StoreResult<TaskChange> {
    let before = require_task(tx, ctx, &update.run_id, update.task_id).await?;
    let owner = update.owner.clone().unwrap_or_else(|| before.owner.clone());
    let status = update.status.unwrap_or(before.status);
    let blocked_reason = match status {
        TaskStatus::Blocked => update
            .blocked_reason
            .clone()
            .or(before.blocked_reason.clone()),
        _ => None,
    };
    execute(
        tx,
        ctx,
        "UPDATE tasks SET subject = $3, description = $4, owner = $5, status = $6, blocked_reason = $7, updated_at = $8 \
         WHERE run_id = $1 AND task_id = $2",
        &[
            &update.run_id,
            &update.task_id,
            update.subject.as_ref().unwrap_or(&before.subject),
            update.description.as_ref().unwrap_or(&before.description),
            &owner,
            &status.as_str(),
            &blocked_reason,
            &now_millis(),
        ],
    )
    .await?;
    add_dependencies(
        tx,
        ctx,
        &update.run_id,
        update.task_id,
        &update.add_blocked_by,
    )
    .await?;
    let after = require_task(tx, ctx, &update.run_id, update.task_id).await?;
    let mut assignment = None;
    if let Some(new_owner) = after
        .owner
        .as_ref()
        .filter(|o| before.owner.as_ref() != Some(*o))
    {
        assignment = Some(
            send(
                tx,
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
            )
            .await?,
        );
    }
    Ok(TaskChange {
        before,
        after,
        assignment,
    })
}

/// Returns a stopped agent's unfinished tasks to the board; gives back their ids.
pub(crate) async fn release_tasks_of(
    tx: &Tx<'_>,
    ctx: &Ctx,
    run_id: &str,
    agent: &str,
) -> StoreResult<Vec<i64>> {
    rows(
        tx,
        ctx,
        "UPDATE tasks SET owner = NULL, status = 'pending', blocked_reason = NULL, updated_at = $3 \
         WHERE run_id = $1 AND owner = $2 AND status IN ('pending', 'in_progress', 'blocked') RETURNING task_id",
        &[&run_id, &agent, &now_millis()],
    )
    .await?
    .iter()
    .map(|row| col(row, 0))
    .collect()
}
