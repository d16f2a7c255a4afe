//! The task board, once for both backends (see [`super`]). Blocking by dependencies is
//! computed when read, never stored; a claim is one conditional UPDATE checked by its
//! changed-row count.

use super::Tx;
use super::mail::send;
use super::runs::{require_run_exists, store_outcome, stored_outcome};
use crate::clock::now_millis;
use crate::error::{StoreError, StoreResult};
use crate::rows::{self, TASK_COLUMNS};
use crate::rules;
use crate::types::*;
use crate::wake::{Wake, board_changed};

/// A run's dependencies with their blocking tasks' status: `task_id, blocked_by, status`.
const DEPENDENCIES: &str = "SELECT d.task_id, d.blocked_by, b.status FROM task_deps d \
    JOIN tasks b ON b.run_id = d.run_id AND b.task_id = d.blocked_by WHERE d.run_id = ?1";

/// `(task, (blocked_by, status))` of a [`DEPENDENCIES`] row.
fn dependency(row: &rows::Row<'_>) -> StoreResult<(i64, (i64, String))> {
    Ok((
        row.get::<i64>("task_deps", 0)?,
        (
            row.get::<i64>("task_deps", 1)?,
            row.get::<String>("tasks", 2)?,
        ),
    ))
}

async fn with_dependencies(tx: &impl Tx, mut task: Task) -> StoreResult<Task> {
    let sql = format!("{DEPENDENCIES} AND d.task_id = ?2 ORDER BY d.blocked_by");
    let found = tx
        .query(&sql, &[&task.run_id, &task.task_id], dependency)
        .await?;
    let found = found
        .into_iter()
        .map(|(_, dependency)| dependency)
        .collect();
    (task.blocked_by, task.blocked_by_open) = rules::tasks::open_dependencies(found);
    Ok(task)
}

/// The next task id of a run (the first is 1).
pub(crate) const NEXT_TASK_ID: &str =
    "SELECT COALESCE(MAX(task_id), 0) + 1 FROM tasks WHERE run_id = ?1";

pub(crate) async fn get_task(
    tx: &impl Tx,
    run_id: &str,
    task_id: i64,
) -> StoreResult<Option<Task>> {
    let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE run_id = ?1 AND task_id = ?2");
    match tx
        .query_opt(&sql, &[&run_id, &task_id], |r| rows::task(run_id, r))
        .await?
    {
        Some(task) => Ok(Some(with_dependencies(tx, task).await?)),
        None => Ok(None),
    }
}

async fn require_task(tx: &impl Tx, run_id: &str, task_id: i64) -> StoreResult<Task> {
    get_task(tx, run_id, task_id)
        .await?
        .ok_or_else(|| StoreError::UnknownTask {
            run: run_id.into(),
            task_id,
        })
}

/// Every task of a run with its dependencies: two reads, however many tasks (the board is
/// read at every teammate's turn end).
pub(crate) async fn list_tasks(tx: &impl Tx, run_id: &str) -> StoreResult<Vec<Task>> {
    let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE run_id = ?1 ORDER BY task_id");
    let mut tasks = tx
        .query(&sql, &[&run_id], |r| rows::task(run_id, r))
        .await?;
    let sql = format!("{DEPENDENCIES} ORDER BY d.task_id, d.blocked_by");
    let found = tx.query(&sql, &[&run_id], dependency).await?;
    let mut by_task: std::collections::HashMap<i64, Vec<(i64, String)>> =
        std::collections::HashMap::new();
    for (task_id, dependency) in found {
        by_task.entry(task_id).or_default().push(dependency);
    }
    for task in &mut tasks {
        let dependencies = by_task.remove(&task.task_id).unwrap_or_default();
        (task.blocked_by, task.blocked_by_open) = rules::tasks::open_dependencies(dependencies);
    }
    Ok(tasks)
}

/// Creates a task; a repeated idempotency key returns the first one.
pub(crate) async fn create_task(
    tx: &impl Tx,
    task: &NewTask,
    wakes: &mut Vec<Wake>,
) -> StoreResult<Task> {
    let Some(key) = task.idempotency_key.as_deref() else {
        board_changed(&task.run_id, wakes);
        return insert_task(tx, task).await;
    };
    if let Some(first) = stored_outcome(tx, &task.run_id, key).await? {
        return Ok(first);
    }
    board_changed(&task.run_id, wakes);
    let created = insert_task(tx, task).await?;
    store_outcome(tx, &task.run_id, key, &created).await?;
    Ok(created)
}

async fn insert_task(tx: &impl Tx, task: &NewTask) -> StoreResult<Task> {
    require_run_exists(tx, &task.run_id).await?;
    let task_id = tx
        .query_one(NEXT_TASK_ID, &[&task.run_id], |r| r.get::<i64>("tasks", 0))
        .await?;
    tx.execute(
        "INSERT INTO tasks (run_id, task_id, subject, description, status, created_by, created_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, 'pending', ?5, ?6, ?6)",
        &[&task.run_id, &task_id, &task.subject, &task.description, &task.created_by, &now_millis()],
    )
    .await?;
    add_dependencies(tx, &task.run_id, task_id, &task.blocked_by).await?;
    require_task(tx, &task.run_id, task_id).await
}

async fn add_dependencies(
    tx: &impl Tx,
    run_id: &str,
    task_id: i64,
    blocked_by: &[i64],
) -> StoreResult<()> {
    for &dependency in blocked_by {
        let exists = dependency != task_id && get_task(tx, run_id, dependency).await?.is_some();
        let cycle = exists && depends_on(tx, run_id, dependency, task_id).await?;
        rules::tasks::check_dependency(task_id, dependency, exists, || cycle)?;
        tx.execute(
            "INSERT INTO task_deps (run_id, task_id, blocked_by) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
            &[&run_id, &task_id, &dependency],
        )
        .await?;
    }
    Ok(())
}

/// Whether `task_id` (transitively) waits for `target`.
async fn depends_on(tx: &impl Tx, run_id: &str, task_id: i64, target: i64) -> StoreResult<bool> {
    tx.query_one(
        "WITH RECURSIVE up(id) AS (SELECT CAST(?2 AS BIGINT) UNION SELECT d.blocked_by FROM task_deps d \
         JOIN up ON d.task_id = up.id WHERE d.run_id = ?1) \
         SELECT EXISTS (SELECT 1 FROM up WHERE id = ?3)",
        &[&run_id, &task_id, &target],
        |r| r.get::<bool>("task_deps", 0),
    )
    .await
}

/// Claims a task for `agent`: one conditional UPDATE; when it changes no row, the reason is
/// read back for the caller.
pub(crate) async fn claim_task(
    tx: &impl Tx,
    run_id: &str,
    task_id: i64,
    agent: &str,
) -> StoreResult<Task> {
    let changed = tx
        .execute(
            "UPDATE tasks SET owner = ?3, status = 'in_progress', updated_at = ?4 \
             WHERE run_id = ?1 AND task_id = ?2 AND status = 'pending' AND owner IS NULL \
             AND NOT EXISTS (SELECT 1 FROM task_deps d JOIN tasks b ON b.run_id = d.run_id AND b.task_id = d.blocked_by \
                             WHERE d.run_id = ?1 AND d.task_id = ?2 AND b.status != 'completed')",
            &[&run_id, &task_id, &agent, &now_millis()],
        )
        .await?;
    let task = require_task(tx, run_id, task_id).await?;
    if changed == 1 {
        return Ok(task);
    }
    Err(rules::tasks::claim_refused(&task, agent))
}

/// Claims the lowest-numbered claimable task, if any, and sends the claimer its
/// `task_assignment` in the same transaction.
pub(crate) async fn claim_next(
    tx: &impl Tx,
    run_id: &str,
    agent: &str,
    wakes: &mut Vec<Wake>,
) -> StoreResult<Option<Claimed>> {
    let candidate = tx
        .query_opt(
            "SELECT t.task_id FROM tasks t WHERE t.run_id = ?1 AND t.status = 'pending' AND t.owner IS NULL \
             AND NOT EXISTS (SELECT 1 FROM task_deps d JOIN tasks b ON b.run_id = d.run_id AND b.task_id = d.blocked_by \
                             WHERE d.run_id = t.run_id AND d.task_id = t.task_id AND b.status != 'completed') \
             ORDER BY t.task_id LIMIT 1",
            &[&run_id],
            |r| r.get::<i64>("tasks", 0),
        )
        .await?;
    let Some(task_id) = candidate else {
        return Ok(None);
    };
    let task = claim_task(tx, run_id, task_id, agent).await?;
    let key = rules::outcome::claim_key(agent, task_id);
    let assignment = send(
        tx,
        &rules::tasks::assignment_message(&task, agent, agent, Some(key)),
        wakes,
    )
    .await?;
    Ok(Some(Claimed { task, assignment }))
}

/// Changes a task; a repeated idempotency key changes nothing and returns the first change.
pub(crate) async fn update_task(
    tx: &impl Tx,
    update: &TaskUpdate,
    wakes: &mut Vec<Wake>,
) -> StoreResult<TaskChange> {
    let Some(key) = update.idempotency_key.as_deref() else {
        return change_task(tx, update, wakes).await;
    };
    if let Some(first) = stored_outcome(tx, &update.run_id, key).await? {
        return Ok(first);
    }
    let change = change_task(tx, update, wakes).await?;
    store_outcome(tx, &update.run_id, key, &change).await?;
    Ok(change)
}

async fn change_task(
    tx: &impl Tx,
    update: &TaskUpdate,
    wakes: &mut Vec<Wake>,
) -> StoreResult<TaskChange> {
    let before = require_task(tx, &update.run_id, update.task_id).await?;
    // Any change may make a task claimable (a release, a dependency completed).
    board_changed(&update.run_id, wakes);
    let row = rules::tasks::updated_row(&before, update);
    tx.execute(
        "UPDATE tasks SET subject = ?3, description = ?4, owner = ?5, status = ?6, blocked_reason = ?7, updated_at = ?8 \
         WHERE run_id = ?1 AND task_id = ?2",
        &[
            &update.run_id,
            &update.task_id,
            &row.subject,
            &row.description,
            &row.owner,
            &row.status.as_str(),
            &row.blocked_reason,
            &now_millis(),
        ],
    )
    .await?;
    add_dependencies(tx, &update.run_id, update.task_id, &update.add_blocked_by).await?;
    let after = require_task(tx, &update.run_id, update.task_id).await?;
    let assignment = match rules::tasks::new_owner(&before, &after) {
        Some(owner) => {
            let message = rules::tasks::assignment_message(&after, owner, &update.updated_by, None);
            Some(send(tx, &message, wakes).await?)
        }
        None => None,
    };
    Ok(TaskChange {
        before,
        after,
        assignment,
    })
}

/// Returns a stopped agent's unfinished tasks to the board; gives back their ids.
pub(crate) async fn release_tasks_of(
    tx: &impl Tx,
    run_id: &str,
    agent: &str,
    wakes: &mut Vec<Wake>,
) -> StoreResult<Vec<i64>> {
    let released = tx
        .query(
            "UPDATE tasks SET owner = NULL, status = 'pending', blocked_reason = NULL, updated_at = ?3 \
             WHERE run_id = ?1 AND owner = ?2 AND status IN ('pending', 'in_progress', 'blocked') RETURNING task_id",
            &[&run_id, &agent, &now_millis()],
            |r| r.get::<i64>("tasks", 0),
        )
        .await?;
    if !released.is_empty() {
        board_changed(run_id, wakes);
    }
    Ok(released)
}
