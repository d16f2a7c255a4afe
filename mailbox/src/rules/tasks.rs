//! The task board's rules: which dependencies are open, which may be added, why a claim was
//! refused, what an update leaves, and whom it assigns.

use crate::error::{StoreError, StoreResult};
use crate::message::MessageBody;
use crate::types::{NewMessage, Task, TaskStatus, TaskUpdate};

/// A task's dependencies from `(blocked_by, its status)` rows: all of them, and the open ones
/// (not completed).
pub(crate) fn open_dependencies(rows: Vec<(i64, String)>) -> (Vec<i64>, Vec<i64>) {
    let open = rows
        .iter()
        .filter(|(_, status)| status != TaskStatus::Completed.as_str())
        .map(|(id, _)| *id)
        .collect();
    (rows.into_iter().map(|(id, _)| id).collect(), open)
}

/// Whether `task_id` may wait for `dependency`, which `exists` (or not) and which would (or
/// would not) then close a cycle.
pub(crate) fn check_dependency(
    task_id: i64,
    dependency: i64,
    exists: bool,
    closes_cycle: impl FnOnce() -> bool,
) -> StoreResult<()> {
    let reason = if dependency == task_id {
        "a task cannot wait for itself"
    } else if !exists {
        "no such task"
    } else if closes_cycle() {
        "that would make a cycle"
    } else {
        return Ok(());
    };
    Err(StoreError::InvalidDependency {
        task_id,
        blocked_by: dependency,
        reason: reason.into(),
    })
}

/// Why `agent`'s claim of `task` (as it is now) changed nothing.
pub(crate) fn claim_refused(task: &Task, agent: &str) -> StoreError {
    let reason = match (&task.owner, task.status) {
        (Some(owner), _) => format!("already claimed by {owner:?}"),
        (None, TaskStatus::Pending) => {
            format!("blocked by open task(s) {:?}", task.blocked_by_open)
        }
        (None, status) => format!("it is {}", status.as_str()),
    };
    StoreError::ClaimRefused {
        task_id: task.task_id,
        agent: agent.into(),
        reason,
    }
}

/// A task's row after `update`: what it does not change stays as `before` has it; a blocked
/// reason is kept only while the task is blocked.
#[derive(Debug, PartialEq)]
pub(crate) struct TaskRow {
    pub(crate) subject: String,
    pub(crate) description: String,
    pub(crate) owner: Option<String>,
    pub(crate) status: TaskStatus,
    pub(crate) blocked_reason: Option<String>,
}

pub(crate) fn updated_row(before: &Task, update: &TaskUpdate) -> TaskRow {
    let status = update.status.unwrap_or(before.status);
    TaskRow {
        subject: update
            .subject
            .clone()
            .unwrap_or_else(|| before.subject.clone()),
        description: update
            .description
            .clone()
            .unwrap_or_else(|| before.description.clone()),
        owner: update.owner.clone().unwrap_or_else(|| before.owner.clone()),
        status,
        blocked_reason: match status {
            TaskStatus::Blocked => update
                .blocked_reason
                .clone()
                .or(before.blocked_reason.clone()),
            _ => None,
        },
    }
}

/// The `task_assignment` `assigned_by` sends `owner` for `task`.
pub(crate) fn assignment_message(
    task: &Task,
    owner: &str,
    assigned_by: &str,
    idempotency_key: Option<String>,
) -> NewMessage {
    NewMessage {
        run_id: task.run_id.clone(),
        sender: assigned_by.into(),
        recipient: owner.into(),
        body: MessageBody::TaskAssignment {
            task_id: task.task_id,
            subject: task.subject.clone(),
            description: task.description.clone(),
            assigned_by: assigned_by.into(),
        },
        idempotency_key,
    }
}

/// The owner a change gave the task, if it is a new one: they are sent the assignment.
pub(crate) fn new_owner<'a>(before: &Task, after: &'a Task) -> Option<&'a str> {
    after
        .owner
        .as_deref()
        .filter(|owner| before.owner.as_deref() != Some(*owner))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(owner: Option<&str>, status: TaskStatus, open: &[i64]) -> Task {
        Task {
            run_id: "r".into(),
            task_id: 2,
            subject: "s".into(),
            description: "d".into(),
            owner: owner.map(str::to_owned),
            status,
            blocked_reason: Some("waiting".into()),
            blocked_by: open.to_vec(),
            blocked_by_open: open.to_vec(),
            created_by: "lead".into(),
            created_at: 1,
            updated_at: 1,
        }
    }

    #[test]
    fn dependencies_refused_for_self_absence_and_cycles() {
        // (dependency, exists, closes a cycle, refusal)
        let table = [
            (2, true, false, Some("a task cannot wait for itself")),
            (3, false, false, Some("no such task")),
            (3, true, true, Some("that would make a cycle")),
            (3, true, false, None),
        ];
        for (dependency, exists, cycle, refusal) in table {
            let outcome = check_dependency(2, dependency, exists, || cycle);
            match (outcome, refusal) {
                (Ok(()), None) => {}
                (Err(StoreError::InvalidDependency { reason, .. }), Some(want)) => {
                    assert_eq!(reason, want)
                }
                (got, want) => panic!("{dependency}: got {got:?}, expected {want:?}"),
            }
        }
        let rows = vec![(1, "completed".to_owned()), (4, "pending".to_owned())];
        assert_eq!(open_dependencies(rows), (vec![1, 4], vec![4]));
    }

    #[test]
    fn a_refused_claim_says_why() {
        let table = [
            (
                task(Some("dev"), TaskStatus::InProgress, &[]),
                "already claimed by \"dev\"",
            ),
            (
                task(None, TaskStatus::Pending, &[1]),
                "blocked by open task(s) [1]",
            ),
            (task(None, TaskStatus::Completed, &[]), "it is completed"),
        ];
        for (task, want) in table {
            match claim_refused(&task, "qa") {
                StoreError::ClaimRefused { reason, .. } => assert_eq!(reason, want),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn an_update_keeps_what_it_does_not_change_and_assigns_new_owners() {
        let before = task(Some("dev"), TaskStatus::Blocked, &[]);
        let update = |owner: Option<Option<&str>>, status: Option<TaskStatus>| TaskUpdate {
            run_id: "r".into(),
            task_id: 2,
            updated_by: "lead".into(),
            subject: None,
            description: None,
            owner: owner.map(|o| o.map(str::to_owned)),
            status,
            blocked_reason: None,
            add_blocked_by: vec![],
            idempotency_key: None,
        };
        // (update, owner after, blocked reason after)
        let table = [
            (update(None, None), Some("dev"), Some("waiting")),
            (update(Some(Some("qa")), None), Some("qa"), Some("waiting")),
            (update(Some(None), Some(TaskStatus::Pending)), None, None),
        ];
        for (update, owner, reason) in table {
            let row = updated_row(&before, &update);
            assert_eq!(row.owner.as_deref(), owner);
            assert_eq!(row.blocked_reason.as_deref(), reason);
            assert_eq!((row.subject.as_str(), row.description.as_str()), ("s", "d"));
        }
        let moved = task(Some("qa"), TaskStatus::InProgress, &[]);
        assert_eq!(new_owner(&before, &moved), Some("qa"));
        assert_eq!(new_owner(&before, &before), None);
    }
}
