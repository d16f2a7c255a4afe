//! The mailbox and task state kept verbatim by compaction: read from the store at compaction
//! time ([`read_coordination_state`]) and rendered as compact text within a token budget
//! ([`render_coordination_state`]).

use muster_mailbox::{DeliveryState, MailboxStore, MessageKind, StoreResult, TaskStatus};

use super::estimate::estimate_tokens;

/// The default token budget of the rendered state: enough for a few dozen entries, small next
/// to any window that compacts.
pub const COORDINATION_STATE_TOKENS: u64 = 1_500;

/// What "- … N more not shown" costs.
const LEFT_OUT_TOKENS: u64 = 8;

/// Task titles longer than this (in characters) are cut.
const TITLE_CHARS: usize = 80;

/// One undelivered or leased message for the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailEntry {
    pub kind: MessageKind,
    pub sender: String,
    pub request_id: Option<String>,
    /// Taken by this process but not yet acknowledged (it may already be in the context).
    pub leased: bool,
}

/// A request with no response yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenRequest {
    pub request_id: String,
    pub kind: MessageKind,
    pub requester: String,
    pub responder: String,
}

/// One task of the board.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoardTask {
    pub id: i64,
    pub title: String,
    pub status: TaskStatus,
    pub owner: Option<String>,
    /// The dependencies not completed yet.
    pub blocked_by: Vec<i64>,
}

/// An agent's mailbox and task state, as read from the store.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CoordinationState {
    pub agent: String,
    /// Mail not acknowledged yet, in delivery order.
    pub mail: Vec<MailEntry>,
    /// Requests the agent made that no one has answered.
    pub waiting_for: Vec<OpenRequest>,
    /// Requests the agent is to answer.
    pub to_answer: Vec<OpenRequest>,
    /// The run's task board; `None` outside a team run with no tasks.
    pub board: Option<Vec<BoardTask>>,
}

/// Reads `agent`'s state in run `run_id`: its unacknowledged mail, the open requests it made or
/// must answer, and the task board when `team` (a team run) or when the run has tasks.
pub async fn read_coordination_state(
    store: &dyn MailboxStore,
    run_id: &str,
    agent: &str,
    team: bool,
) -> StoreResult<CoordinationState> {
    let mut messages = store.messages(run_id, Some(agent)).await?;
    messages.retain(|m| m.state != DeliveryState::Acked);
    messages.sort_by_key(|m| (m.priority, m.seq));
    let mail = messages
        .into_iter()
        .map(|m| MailEntry {
            kind: m.kind,
            sender: m.sender,
            request_id: m.request_id,
            leased: m.state == DeliveryState::Leased,
        })
        .collect();
    let mut waiting_for = Vec::new();
    let mut to_answer = Vec::new();
    for request in store.requests(run_id).await? {
        if request.response.is_some() {
            continue;
        }
        let open = OpenRequest {
            request_id: request.request_id,
            kind: request.kind,
            requester: request.requester,
            responder: request.responder,
        };
        if open.requester == agent {
            waiting_for.push(open);
        } else if open.responder == agent {
            to_answer.push(open);
        }
    }
    let tasks = store.tasks(run_id).await?;
    let board = (team || !tasks.is_empty()).then(|| {
        tasks
            .into_iter()
            .map(|task| BoardTask {
                id: task.task_id,
                title: task.subject,
                status: task.status,
                owner: task.owner,
                blocked_by: task.blocked_by_open,
            })
            .collect()
    });
    Ok(CoordinationState {
        agent: agent.to_owned(),
        mail,
        waiting_for,
        to_answer,
        board,
    })
}

/// The state as text within about `budget_tokens` ([`estimate_tokens`]): a heading line per
/// section with its full count, then one line per entry until the budget is spent, then how
/// many entries were left out. Each section is given an equal share of the budget, and a share
/// a section does not use passes to the next. The board lists the agent's own open tasks
/// first, then the other open tasks, then the finished ones, each by id. `None` when there is
/// nothing to say (no mail, no open request, no board).
pub fn render_coordination_state(state: &CoordinationState, budget_tokens: u64) -> Option<String> {
    let mut sections: Vec<(String, Vec<String>)> = Vec::new();
    if !state.mail.is_empty() {
        let leased = state.mail.iter().filter(|m| m.leased).count();
        let heading = match leased {
            0 => format!("Mailbox: {} unread.", state.mail.len()),
            n => format!(
                "Mailbox: {} unread ({n} taken but not yet acknowledged).",
                state.mail.len()
            ),
        };
        sections.push((heading, state.mail.iter().map(mail_line).collect()));
    }
    if !state.waiting_for.is_empty() {
        sections.push((
            format!(
                "Your requests waiting for an answer: {}.",
                state.waiting_for.len()
            ),
            state
                .waiting_for
                .iter()
                .map(|r| format!("- {} ({}) to {}", r.request_id, r.kind, r.responder))
                .collect(),
        ));
    }
    if !state.to_answer.is_empty() {
        sections.push((
            format!(
                "Requests waiting for your answer: {}.",
                state.to_answer.len()
            ),
            state
                .to_answer
                .iter()
                .map(|r| format!("- {} ({}) from {}", r.request_id, r.kind, r.requester))
                .collect(),
        ));
    }
    if let Some(board) = &state.board {
        let mut tasks: Vec<&BoardTask> = board.iter().collect();
        tasks.sort_by_key(|task| (board_rank(task, &state.agent), task.id));
        let open = board.iter().filter(|t| !is_finished(t.status)).count();
        let heading = match board.len() {
            0 => "Task board: empty.".to_owned(),
            n => format!("Task board: {n} tasks, {open} not finished."),
        };
        sections.push((heading, tasks.into_iter().map(task_line).collect()));
    }
    if sections.is_empty() {
        return None;
    }
    let mut out = vec![format!("You are {}.", state.agent)];
    let mut remaining = budget_tokens.saturating_sub(line_tokens(&out[0]));
    let count = sections.len() as u64;
    for (index, (heading, lines)) in sections.into_iter().enumerate() {
        // This section's share: an equal part of what is left for it and the ones after it.
        let share = remaining / (count - index as u64);
        let mut used = line_tokens(&heading);
        out.push(heading);
        let total = lines.len();
        let mut shown = 0;
        for line in lines {
            let cost = line_tokens(&line);
            // Room is kept for the "left out" line while more lines follow.
            let reserve = if shown + 1 < total {
                LEFT_OUT_TOKENS
            } else {
                0
            };
            if used + cost + reserve > share {
                break;
            }
            used += cost;
            out.push(line);
            shown += 1;
        }
        if shown < total {
            let line = format!("- … {} more not shown", total - shown);
            used += line_tokens(&line);
            out.push(line);
        }
        remaining = remaining.saturating_sub(used);
    }
    Some(out.join("\n"))
}

/// A line's tokens with the newline that joins it: summing these bounds the whole text's
/// estimate.
fn line_tokens(line: &str) -> u64 {
    estimate_tokens(line) + 1
}

fn mail_line(mail: &MailEntry) -> String {
    let mut line = format!("- {} from {}", mail.kind, mail.sender);
    if let Some(id) = &mail.request_id {
        line.push_str(&format!(" (request {id})"));
    }
    line
}

fn is_finished(status: TaskStatus) -> bool {
    matches!(status, TaskStatus::Completed | TaskStatus::Failed)
}

/// The agent's own open tasks, then the other open tasks, then the finished ones.
fn board_rank(task: &BoardTask, agent: &str) -> u8 {
    if is_finished(task.status) {
        2
    } else if task.owner.as_deref() == Some(agent) {
        0
    } else {
        1
    }
}

fn task_line(task: &BoardTask) -> String {
    let title: String = if task.title.chars().count() > TITLE_CHARS {
        let mut cut: String = task.title.chars().take(TITLE_CHARS - 1).collect();
        cut.push('…');
        cut
    } else {
        task.title.clone()
    };
    let owner = match &task.owner {
        Some(owner) => format!("owner {owner}"),
        None => "unowned".to_owned(),
    };
    let mut line = format!("- #{} [{}] {title} ({owner}", task.id, task.status.as_str());
    if !task.blocked_by.is_empty() {
        let ids: Vec<String> = task.blocked_by.iter().map(|id| format!("#{id}")).collect();
        line.push_str(&format!(", blocked by {}", ids.join(", ")));
    }
    line.push(')');
    line
}
