//! A team run's task board as the session's `plan` (ACP's agent plan): one entry per task, in
//! board order, with its status, sent again whole (the protocol replaces the plan with each
//! update) whenever an event may have moved a task — a `TaskCreate` / `TaskUpdate` call, a
//! claim, a completion, an applied merge. The board is read from the store, the one place
//! every agent's tasks live (a teammate on a worker included), by a thread of its own: the
//! events only wake it, and each look reads the board after the events that woke it, so the
//! last plan sent is the board's state at the last event.

use std::sync::mpsc::{Receiver, Sender};

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    Plan, PlanEntry, PlanEntryPriority, PlanEntryStatus, SessionId, SessionUpdate,
};
use muster_agents::runtime::RunEvent;
use muster_mailbox::{Task, TaskStatus};
use muster_protocol::ToolName;

use crate::project::{Globals, Project};

/// What wakes the board's thread.
enum Look {
    /// An event may have moved a task.
    Again,
    /// The turn is ending: the board is sent if it changed, then the sender is told.
    Settle(Sender<()>),
}

/// The session's board: wakes its thread; the thread ends when this is dropped.
pub(crate) struct Board {
    looks: Sender<Look>,
}

impl Board {
    /// Starts the board's thread for run `run_id` of the project at `global`.
    pub(crate) fn start(
        global: Globals,
        run_id: String,
        cx: ConnectionTo<Client>,
        session: SessionId,
    ) -> Option<Board> {
        let (looks, woken) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name(format!("acp-board-{run_id}"))
            .spawn(move || {
                if let Err(error) = follow(&global, &run_id, &cx, &session, &woken) {
                    tracing::warn!("the task board is no longer shown: {error:#}");
                }
            });
        match spawned {
            Ok(_) => Some(Board { looks }),
            Err(error) => {
                tracing::warn!("the task board is not shown (no thread: {error})");
                None
            }
        }
    }

    /// Looks at the board again if `event` may have moved a task.
    pub(crate) fn saw(&self, event: &RunEvent) {
        if moves_the_board(event) {
            let _ = self.looks.send(Look::Again);
        }
    }

    /// Sends the board as it is now, if it changed, before the turn's answer.
    pub(crate) fn settle(&self) {
        let (done, settled) = std::sync::mpsc::channel();
        if self.looks.send(Look::Settle(done)).is_ok() {
            let _ = settled.recv();
        }
    }
}

/// Whether `event` may have moved a task on the board.
fn moves_the_board(event: &RunEvent) -> bool {
    match event {
        RunEvent::ToolCall { tool, .. } => matches!(
            ToolName::parse(tool),
            Some(ToolName::TaskCreate | ToolName::TaskUpdate)
        ),
        RunEvent::TaskClaimed { .. }
        | RunEvent::TaskCompleted { .. }
        | RunEvent::MergeApplied { .. } => true,
        _ => false,
    }
}

/// The board's thread: a look per wake-up (wake-ups that came meanwhile are one look).
fn follow(
    global: &Globals,
    run_id: &str,
    cx: &ConnectionTo<Client>,
    session: &SessionId,
    woken: &Receiver<Look>,
) -> anyhow::Result<()> {
    let project = Project::locate(global)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let store = runtime.block_on(project.open_store())?;
    let mut shown: Option<Vec<PlanEntry>> = None;
    while let Ok(first) = woken.recv() {
        let mut settled = Vec::new();
        for look in std::iter::once(first).chain(woken.try_iter()) {
            if let Look::Settle(done) = look {
                settled.push(done);
            }
        }
        let tasks = runtime.block_on(store.tasks(run_id))?;
        let entries = entries(&tasks);
        if shown.as_ref() != Some(&entries) {
            super::send(cx, session, SessionUpdate::Plan(Plan::new(entries.clone())));
            shown = Some(entries);
        }
        for done in settled {
            let _ = done.send(());
        }
    }
    Ok(())
}

/// The plan's entries: each task as `#ID SUBJECT (OWNER)`, with its status.
pub(crate) fn entries(tasks: &[Task]) -> Vec<PlanEntry> {
    tasks
        .iter()
        .map(|task| {
            let (status, note) = match task.status {
                TaskStatus::Pending => (PlanEntryStatus::Pending, ""),
                TaskStatus::Blocked => (PlanEntryStatus::Pending, " — blocked"),
                TaskStatus::InProgress => (PlanEntryStatus::InProgress, ""),
                TaskStatus::Completed => (PlanEntryStatus::Completed, ""),
                // ACP has no failed entry: it is over, and says so.
                TaskStatus::Failed => (PlanEntryStatus::Completed, " — failed"),
            };
            let owner = task
                .owner
                .as_deref()
                .map(|owner| format!(" ({owner})"))
                .unwrap_or_default();
            PlanEntry::new(
                format!("#{} {}{owner}{note}", task.task_id, task.subject),
                PlanEntryPriority::Medium,
                status,
            )
        })
        .collect()
}
