//! What a team gives its agents, and what the runtime tells it: the orchestrator implements
//! [`TeamServices`] (starting and stopping teammates, worktrees, mail at turn boundaries) and
//! attaches it to the run ([`TeamSlot`]); the team tools themselves are carried out by the
//! runtime (`team_tools`).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock, Weak};

use muster_config::PermissionMode;
use muster_mailbox::{CommitTurnOutcome, Message as Mail, NewMessage, Task, TaskUpdate};

use super::error::RuntimeResult;
pub use super::error::TeamError;

/// The names no teammate may have: the lead's and the reserved responders' (one list, in
/// muster-config).
pub use muster_config::ids::RESERVED_NAMES;

/// A boxed future, for [`TeamServices`]' methods.
pub type TeamFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the lead asked for with `SpawnTeammate`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnRequest {
    pub name: String,
    /// The definition asked for (`None`: the team's default).
    pub definition: Option<String>,
    pub prompt: String,
    /// `Some(false)` cannot loosen the team's `[spawn] plan_mode_required`.
    pub plan_mode_required: Option<bool>,
    /// The lead's current mode (a spawned teammate never works above it).
    pub lead_mode: PermissionMode,
    /// The lead's agent id.
    pub lead: String,
    /// `"{lead}:{tool_use_id}"` of the call: a repeat of the call (a resume) returns the
    /// teammate it spawned instead of a second one.
    pub call_key: String,
}

/// A teammate the orchestrator started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnedTeammate {
    pub id: String,
    pub definition: String,
    /// The mode it starts in (`plan` when it must plan first).
    pub mode: PermissionMode,
    /// The mode it works in once its plan is approved (or from the start).
    pub working_mode: PermissionMode,
    /// Who decides its plans and permission requests (`lead`, `human`, `policy:FILE`).
    pub responder: String,
    /// What the rules changed about the request, in words (empty when nothing).
    pub notes: Vec<String>,
}

/// What a team run's orchestrator does for the runtime.
pub trait TeamServices: Send + Sync {
    /// Starts a teammate; [`TeamError::Refused`] is a refusal in words for the model.
    fn spawn_teammate(
        &self,
        request: SpawnRequest,
    ) -> TeamFuture<'_, Result<SpawnedTeammate, TeamError>>;
    /// Sends a teammate a `shutdown_request` and stops it after the shutdown timeout; gives
    /// back what happened in words, or a refusal.
    fn shutdown_teammate<'a>(
        &'a self,
        request: ShutdownRequest<'a>,
    ) -> TeamFuture<'a, Result<String, TeamError>>;
    /// Who answers `agent`'s plan and permission requests: `lead`, `human` or `policy:FILE`.
    fn responder_for(&self, agent: &str) -> String;
    /// The task board changed (idle teammates look for work).
    fn board_changed(&self) {}
    /// Mail for `agent` at a turn boundary (its tool calls finished, its next model request
    /// not sent yet), leased and rendered for its context; it is acked when delivered.
    fn mail_at_turn_boundary<'a>(&'a self, agent: &'a str) -> TeamFuture<'a, Vec<Mail>> {
        let _ = agent;
        Box::pin(async { Vec::new() })
    }
    /// A message an agent's tool committed (a request, an answer, mail): what follows from it
    /// once it is durable (a policy decides a request meant for it, a person's wait is
    /// announced, whoever watches the lead's wait looks again). Called after the commit,
    /// never from the event sink.
    fn mail_committed(&self, message: &Mail) {
        let _ = message;
    }
    /// What a teammate's end of turn commits with its `finished` record, in one transaction:
    /// its tasks' status, its verification report, its idle notification. `turn` is the
    /// agent's durable turn index (it keys the notification).
    fn end_of_turn<'a>(
        &'a self,
        agent: &'a str,
        result: &'a str,
        turn: u64,
    ) -> TeamFuture<'a, Result<TurnEnd, TeamError>> {
        let _ = (agent, result, turn);
        Box::pin(async { Ok(TurnEnd::default()) })
    }
    /// After the end-of-turn commit: reports what it did.
    fn turn_ended(&self, agent: &str, end: &TurnEnd, outcome: &CommitTurnOutcome) {
        let _ = (agent, end, outcome);
    }
    /// Where `agent` works under worktree isolation: its worktree (made, or restored to its
    /// newest recorded checkpoint). `None`: the run's workspace.
    fn workspace_for<'a>(
        &'a self,
        agent: &'a str,
    ) -> TeamFuture<'a, Result<Option<std::path::PathBuf>, TeamError>> {
        let _ = agent;
        Box::pin(async { Ok(None) })
    }
    /// `agent`'s worktree state as a commit, to be committed with the records of the calls
    /// that produced it. `None`: the run has no worktrees.
    fn checkpoint<'a>(
        &'a self,
        agent: &'a str,
    ) -> TeamFuture<'a, Result<Option<TeamCheckpoint>, TeamError>> {
        let _ = agent;
        Box::pin(async { Ok(None) })
    }
}

/// A worktree checkpoint to commit with an agent's turn. `hold` keeps whatever the team
/// needs kept until the commit lands (the integration head's lock, for the lead's).
#[derive(Clone, Default)]
pub struct TeamCheckpoint {
    pub commit: String,
    pub merging: Option<String>,
    pub hold: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

impl std::fmt::Debug for TeamCheckpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TeamCheckpoint")
            .field("commit", &self.commit)
            .field("merging", &self.merging)
            .finish_non_exhaustive()
    }
}

impl TeamCheckpoint {
    pub(super) fn record(&self) -> super::records::Record {
        super::records::Record::Checkpoint {
            commit: self.commit.clone(),
            merging: self.merging.clone(),
            merge: None,
        }
    }
}

/// The lead's `ShutdownTeammate` call.
#[derive(Debug, Clone, Copy)]
pub struct ShutdownRequest<'a> {
    pub requested_by: &'a str,
    pub name: &'a str,
    pub reason: Option<&'a str>,
    /// `"{lead}:{tool_use_id}"`: a repeat sends no second request.
    pub call_key: &'a str,
}

/// A teammate's end-of-turn transition, committed with its `finished` record.
#[derive(Debug, Clone, Default)]
pub struct TurnEnd {
    pub task_updates: Vec<TaskUpdate>,
    pub sends: Vec<NewMessage>,
    /// The tasks this turn completed (id, subject), for the report after the commit.
    pub completed: Vec<(i64, String)>,
    /// The worktree's state after the end of turn (a conflict handed over changes it).
    pub checkpoint: Option<TeamCheckpoint>,
}

/// The team of a team run as its agents reach it (part of the run's context). The team holds
/// the run's context, so the context holds the team weakly; it is attached once the team
/// exists, and a run with none (a single-agent run) answers team tools with an error.
#[derive(Default)]
pub struct TeamSlot(OnceLock<Weak<dyn TeamServices>>);

impl TeamSlot {
    /// Makes `team` the run's team (the first attach wins).
    pub fn attach(&self, team: &Arc<dyn TeamServices>) {
        let _ = self.0.set(Arc::downgrade(team));
    }

    /// The run's team while it exists.
    pub fn get(&self) -> Option<Arc<dyn TeamServices>> {
        self.0.get().and_then(Weak::upgrade)
    }

    /// Who answers `agent`'s requests: its team's choice, else the lead.
    pub fn responder_for(&self, agent: &str) -> String {
        self.get()
            .map_or_else(|| "lead".to_owned(), |team| team.responder_for(agent))
    }
}

pub(super) fn blockers(task: &Task) -> String {
    if task.blocked_by_open.is_empty() {
        String::new()
    } else {
        let ids: Vec<String> = task
            .blocked_by_open
            .iter()
            .map(|id| format!("#{id}"))
            .collect();
        format!(" (blocked by {})", ids.join(", "))
    }
}

/// One task in a line: `#3 [in_progress] subject — owner alice (blocked by #1)`.
pub fn task_line(task: &Task) -> String {
    format!(
        "#{} [{}] {} — owner {}{}",
        task.task_id,
        task.status.as_str(),
        task.subject,
        task.owner.as_deref().unwrap_or("none"),
        blockers(task)
    )
}

/// Kills the process groups of `agent`'s tool calls that started and never finished (a
/// teammate stopped by force) when they run on this machine; gives back the groups
/// signalled.
pub async fn kill_unfinished_tools(
    store: &dyn muster_mailbox::MailboxStore,
    run_id: &str,
    agent: &str,
) -> RuntimeResult<Vec<i32>> {
    let machine = crate::machine::this_machine();
    let mut killed = Vec::new();
    for started in super::records::unfinished_calls(store, run_id, agent)
        .await?
        .into_values()
    {
        if let Some(group) = started.process_group
            && machine.place_of(started.host.as_deref(), started.boot_id.as_deref())
                == crate::machine::GroupPlace::Here
            && crate::machine::kill_group(group)
        {
            killed.push(group);
        }
    }
    Ok(killed)
}
