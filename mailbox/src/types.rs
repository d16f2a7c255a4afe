//! The rows the store keeps and the values callers pass in.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{StoreError, StoreResult};
use crate::message::{MessageBody, MessageKind};

/// Milliseconds since the Unix epoch; every stored time uses it.
pub type UnixMillis = i64;

/// A run id: at most 16 characters of `[a-z0-9-]`, starting with a letter or digit.
pub fn validate_run_id(id: &str) -> StoreResult<()> {
    let valid = !id.is_empty()
        && id.len() <= 16
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !id.starts_with('-');
    if valid {
        Ok(())
    } else {
        Err(StoreError::InvalidId {
            what: "run id",
            value: id.to_owned(),
            rule: "1 to 16 characters of a-z, 0-9 and '-', not starting with '-'",
        })
    }
}

/// An agent id: `[a-z][a-z0-9-]{0,31}`, or a subagent id `{parent}.sub-{n}` (nested allowed).
pub fn validate_agent_id(id: &str) -> StoreResult<()> {
    let mut parts = id.split('.');
    let head_ok = parts.next().is_some_and(is_agent_name);
    let rest_ok = parts.all(|p| {
        p.strip_prefix("sub-")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    });
    if head_ok && rest_ok {
        Ok(())
    } else {
        Err(StoreError::InvalidId {
            what: "agent id",
            value: id.to_owned(),
            rule: "[a-z][a-z0-9-]{0,31}, or {parent}.sub-{n} for a subagent",
        })
    }
}

fn is_agent_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 32
        && bytes[0].is_ascii_lowercase()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}

/// The reserved roster entry through which a person answers (`muster approve`/`reject`/`answer`).
pub const HUMAN: &str = muster_protocol::Responder::HUMAN;
/// The reserved roster entry through which a policy file answers.
pub const POLICY: &str = muster_protocol::Responder::POLICY;

/// A run's lifecycle state (DESIGN.md "Files and identifiers").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Running,
    AwaitingDecision,
    Completed,
    Failed,
    Budget,
    Interrupted,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::AwaitingDecision => "awaiting_decision",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Budget => "budget",
            RunStatus::Interrupted => "interrupted",
        }
    }

    pub fn parse(s: &str) -> Option<RunStatus> {
        [
            RunStatus::Running,
            RunStatus::AwaitingDecision,
            RunStatus::Completed,
            RunStatus::Failed,
            RunStatus::Budget,
            RunStatus::Interrupted,
        ]
        .into_iter()
        .find(|status| status.as_str() == s)
    }

    /// Finished runs hold only settled history.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Budget
        )
    }
}

/// The run's auto-mode gate: consecutive auto denials close it at `limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutoGate {
    pub open: bool,
    pub consecutive_denials: u32,
    pub limit: u32,
}

impl Default for AutoGate {
    fn default() -> Self {
        AutoGate {
            open: true,
            consecutive_denials: 0,
            limit: 3,
        }
    }
}

/// What a `CommitTurn` does to the auto gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoGateUpdate {
    /// Auto denials made during the turn: each one counts towards closing the gate.
    Denied(u32),
    /// An allowed auto decision: the consecutive count starts again.
    Allowed,
    /// Close the gate now (a person or the configuration said so).
    Close,
}

/// A run as the caller creates it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewRun {
    pub id: String,
    pub slug: String,
    pub team: Option<String>,
    pub workspace: String,
    pub batch_line_id: Option<String>,
    pub auto_gate: AutoGate,
    /// Everything `muster resume` needs to rebuild the run (provider, models, approver, …);
    /// the orchestrator owns its shape.
    pub launch_options: Value,
    /// The project the run belongs to (`.muster/project-id`): several projects can share one
    /// store on a server.
    #[serde(default)]
    pub project_id: Option<String>,
}

/// A stored run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub id: String,
    pub slug: String,
    pub team: Option<String>,
    pub workspace: String,
    pub status: RunStatus,
    pub created_at: UnixMillis,
    pub updated_at: UnixMillis,
    pub batch_line_id: Option<String>,
    pub auto_gate: AutoGate,
    pub launch_options: Value,
    /// The process epoch of the current owner; leases of older epochs are void.
    pub epoch: i64,
    pub result: Option<Value>,
    /// `None` for a run made before runs carried their project.
    #[serde(default)]
    pub project_id: Option<String>,
}

impl RunRecord {
    /// Whether the run belongs to `project` (a run from before project ids belongs to every
    /// project: a file store had one project anyway).
    pub fn in_project(&self, project: &str) -> bool {
        self.project_id.as_deref().is_none_or(|id| id == project)
    }
}

/// What kind of member a roster entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemberKind {
    Lead,
    Teammate,
    Subagent,
    Human,
    Policy,
}

impl MemberKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MemberKind::Lead => "lead",
            MemberKind::Teammate => "teammate",
            MemberKind::Subagent => "subagent",
            MemberKind::Human => "human",
            MemberKind::Policy => "policy",
        }
    }

    pub fn parse(s: &str) -> Option<MemberKind> {
        [
            MemberKind::Lead,
            MemberKind::Teammate,
            MemberKind::Subagent,
            MemberKind::Human,
            MemberKind::Policy,
        ]
        .into_iter()
        .find(|kind| kind.as_str() == s)
    }
}

/// One member of a run's roster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RosterEntry {
    pub agent: String,
    pub kind: MemberKind,
    /// The agent definition it runs (`general`, `Plan`, a project file's name); none for
    /// `human` and `policy`.
    pub definition: Option<String>,
    /// The parent of a subagent.
    pub parent: Option<String>,
}

/// Delivery state of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    Pending,
    Leased,
    Acked,
}

impl DeliveryState {
    pub(crate) fn from_code(code: i64) -> Option<DeliveryState> {
        match code {
            0 => Some(DeliveryState::Pending),
            1 => Some(DeliveryState::Leased),
            2 => Some(DeliveryState::Acked),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Leased => "leased",
            DeliveryState::Acked => "acked",
        }
    }
}

/// Delivery priority: lower goes first (DESIGN.md: shutdown requests, then the lead, then the
/// rest, each class in commit order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    Shutdown = 0,
    FromLead = 1,
    Normal = 2,
}

impl Priority {
    pub(crate) fn from_code(code: i64) -> Priority {
        match code {
            0 => Priority::Shutdown,
            1 => Priority::FromLead,
            _ => Priority::Normal,
        }
    }
}

/// A message as the caller sends it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMessage {
    pub run_id: String,
    pub sender: String,
    pub recipient: String,
    pub body: crate::message::MessageBody,
    /// `"{agent}:{tool_use_id}"` for a message sent by a tool: a repeat returns the original.
    pub idempotency_key: Option<String>,
}

/// A stored message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// The internal message key (UUID v7).
    pub key: String,
    /// Commit order within the store.
    pub seq: i64,
    pub run_id: String,
    pub sender: String,
    pub recipient: String,
    /// The `type` tag of the body.
    pub kind: MessageKind,
    pub priority: Priority,
    pub request_id: Option<String>,
    pub idempotency_key: Option<String>,
    /// The typed body; a kind this version does not know is [`MessageBody::Unknown`] with its
    /// raw JSON, never dropped. In JSON it is the stored object, as it always was.
    #[serde(with = "crate::message::stored")]
    pub body: MessageBody,
    pub state: DeliveryState,
    pub created_at: UnixMillis,
    pub leased_at: Option<UnixMillis>,
    pub acked_at: Option<UnixMillis>,
}

impl Message {
    /// The body as the store keeps it (the whole tagged object).
    pub fn stored_body(&self) -> Value {
        stored_json(&self.body)
    }
}

/// Reads a stored message's `kind` and `body` columns: an unknown kind, or a body that does not
/// parse as its kind, is kept raw.
pub(crate) fn read_kind_and_body(kind: &str, body: &Value) -> (MessageKind, MessageBody) {
    (
        MessageKind::parse(kind),
        MessageBody::from_stored(kind, body),
    )
}

/// A request or response whose message row is missing (never written by muster): its kind and
/// no body, rather than an error that would hide the rest of the run's requests.
pub(crate) fn missing_body(kind: &str) -> MessageBody {
    MessageBody::Unknown {
        kind: kind.to_owned(),
        raw: Value::Null,
    }
}

fn stored_json(body: &MessageBody) -> Value {
    // Serialising a body of strings, numbers and JSON values cannot fail.
    body.to_stored().unwrap_or(Value::Null)
}

/// Which pending message a receiver wants next.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum MessageFilter {
    /// The next message in priority and commit order.
    #[default]
    Any,
    /// Only a message carrying this request id (the answer an agent waits for).
    RequestId(String),
}

/// An answer to a request, as the responder sends it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewResponse {
    pub run_id: String,
    /// Who answers: must be the request's responder.
    pub sender: String,
    pub body: crate::message::MessageBody,
    pub idempotency_key: Option<String>,
}

/// A request and, when it has one, its decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    pub run_id: String,
    pub request_id: String,
    pub kind: MessageKind,
    pub requester: String,
    pub recipient: String,
    pub responder: String,
    pub message_key: String,
    /// The request message's body (the plan, the tool call, the question).
    #[serde(with = "crate::message::stored")]
    pub body: MessageBody,
    pub created_at: UnixMillis,
    pub response: Option<ResponseRecord>,
}

impl RequestRecord {
    /// The request message's body as the store keeps it.
    pub fn stored_body(&self) -> Value {
        stored_json(&self.body)
    }
}

/// The one accepted response to a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseRecord {
    pub responder: String,
    pub kind: MessageKind,
    pub message_key: String,
    #[serde(with = "crate::message::stored")]
    pub body: MessageBody,
    pub decided_at: UnixMillis,
}

impl ResponseRecord {
    /// The response message's body as the store keeps it.
    pub fn stored_body(&self) -> Value {
        stored_json(&self.body)
    }
}

/// An agent's opaque record as the caller appends it. `seq: None` appends after the last
/// record of the stream; `Some(n)` insists on that position and fails if it is taken.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRecord {
    pub agent: String,
    pub stream: String,
    pub seq: Option<i64>,
    pub body: Value,
}

/// A stored agent record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentRecord {
    pub run_id: String,
    pub agent: String,
    pub stream: String,
    pub seq: i64,
    pub body: Value,
    pub created_at: UnixMillis,
}

/// "Record what the agent saw and ack it", in one transaction.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CommitTurn {
    pub run_id: String,
    pub agent: String,
    /// Keys of the leased messages the turn consumed.
    pub acks: Vec<String>,
    pub records: Vec<NewRecord>,
    pub sends: Vec<NewMessage>,
    pub responses: Vec<NewResponse>,
    pub auto_gate: Option<AutoGateUpdate>,
    /// Roster entries added first (a spawn: the new member, its records and its first mail
    /// in one transaction).
    pub members: Vec<RosterEntry>,
    /// Task changes made in the same transaction (a teammate's end of turn completes its
    /// tasks with its report); applied before `sends`.
    pub task_updates: Vec<TaskUpdate>,
    /// A model request's spend, charged to the run's budget ledger in the same transaction
    /// as the records that carry the response (see [`crate::ledger`]).
    pub charge: Option<crate::ledger::LedgerSpend>,
}

/// A run's newest mails ([`crate::MailboxStore::newest_messages`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewestMessages {
    /// The newest mails, in commit order.
    pub messages: Vec<Message>,
    /// How many of the run's mails came before them.
    pub earlier: usize,
}

/// What a committed turn produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommitTurnOutcome {
    pub records: Vec<AgentRecord>,
    pub sent: Vec<Message>,
    pub responses: Vec<Message>,
    pub auto_gate: AutoGate,
    /// One per `task_updates` entry, in order.
    pub tasks: Vec<TaskChange>,
    /// The run's budget ledger after the turn's `charge` (`None`: nothing was charged).
    #[serde(default)]
    pub ledger: Option<crate::ledger::RunLedger>,
}

/// Status of a task on the board. `blocked` is what an agent says; blocking by dependencies
/// is computed when read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Pending,
    InProgress,
    Completed,
    Failed,
    Blocked,
}

impl TaskStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Pending => "pending",
            TaskStatus::InProgress => "in_progress",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Blocked => "blocked",
        }
    }

    pub fn parse(s: &str) -> Option<TaskStatus> {
        [
            TaskStatus::Pending,
            TaskStatus::InProgress,
            TaskStatus::Completed,
            TaskStatus::Failed,
            TaskStatus::Blocked,
        ]
        .into_iter()
        .find(|status| status.as_str() == s)
    }
}

/// A task as the caller creates it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewTask {
    pub run_id: String,
    pub created_by: String,
    pub subject: String,
    pub description: String,
    pub blocked_by: Vec<i64>,
    /// `"{agent}:{tool_use_id}"` for a task a tool creates: a repeat returns the original
    /// task and creates nothing.
    pub idempotency_key: Option<String>,
}

/// A change to a task; `None` leaves a field as it is.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskUpdate {
    pub run_id: String,
    pub task_id: i64,
    /// Who makes the change (the sender of a `task_assignment` when the owner changes).
    pub updated_by: String,
    pub subject: Option<String>,
    pub description: Option<String>,
    pub status: Option<TaskStatus>,
    /// `Some(None)` clears the owner.
    pub owner: Option<Option<String>>,
    pub blocked_reason: Option<String>,
    pub add_blocked_by: Vec<i64>,
    /// `"{agent}:{tool_use_id}"` for a change a tool makes: a repeat changes nothing and
    /// returns the original [`TaskChange`].
    pub idempotency_key: Option<String>,
}

/// A task before and after a change, and the `task_assignment` the change sent when it gave
/// the task a new owner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskChange {
    pub before: Task,
    pub after: Task,
    pub assignment: Option<Message>,
}

/// A task claimed from the board and the `task_assignment` the claimer was sent in the same
/// transaction (so a claimed task is never without its mail).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claimed {
    pub task: Task,
    pub assignment: Message,
}

/// A task as read, with its blocking computed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub run_id: String,
    pub task_id: i64,
    pub subject: String,
    pub description: String,
    pub owner: Option<String>,
    pub status: TaskStatus,
    pub blocked_reason: Option<String>,
    pub blocked_by: Vec<i64>,
    /// Dependencies that are not completed yet.
    pub blocked_by_open: Vec<i64>,
    pub created_by: String,
    pub created_at: UnixMillis,
    pub updated_at: UnixMillis,
}

impl Task {
    /// Claimable: pending, unowned and not blocked by an open dependency.
    pub fn is_claimable(&self) -> bool {
        self.status == TaskStatus::Pending
            && self.owner.is_none()
            && self.blocked_by_open.is_empty()
    }
}

/// What `prune` deleted and what it refused to touch.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PruneReport {
    /// Finished runs whose settled history was examined.
    pub runs_pruned: Vec<String>,
    pub messages_deleted: u64,
    /// Runs left alone because they are not finished, with their status.
    pub runs_skipped: Vec<(String, RunStatus)>,
    /// Acknowledged requests and responses kept in finished runs (never pruned).
    pub decisions_kept: u64,
}

/// Counters a test or a benchmark reads to see what the store did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreStats {
    /// Transactions committed by this instance's writer.
    pub commits: u64,
    /// Operations executed (each one its own SAVEPOINT).
    pub operations: u64,
    /// Syncs of the WAL by the store itself (pipelined `synchronous=full`), each covering
    /// every transaction committed before it began.
    pub syncs: u64,
    /// Looks for pending mail answered by the store's read-only connection, without the
    /// writer (SQLite; see `sqlite/reader.rs`).
    pub looks: u64,
    /// Where the writer's time went, summed over every transaction.
    pub time: CommitTime,
}

/// The writer's time by phase, in microseconds summed since the store opened: what a
/// benchmark divides by `commits` (or `operations`) to tell where a durable commit's time goes.
/// With SQLite's own `synchronous=full`, COMMIT holds both the WAL write and its fsync; with the
/// store's pipelined sync, COMMIT is the WAL write and `sync_us` the wait for the fsync.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CommitTime {
    /// Operations waiting in the queue for the writer, from `submit` to their batch's BEGIN
    /// (the lock wait of a single-writer store), summed per operation.
    pub queued_us: u64,
    /// `BEGIN IMMEDIATE`.
    pub begin_us: u64,
    /// The operations' statements, each in its SAVEPOINT.
    pub statements_us: u64,
    /// `COMMIT`: the WAL write (and, with SQLite's own `synchronous=full`, its fsync).
    pub commit_us: u64,
    /// After COMMIT, the pipelined sync: the wait for a WAL fsync begun after it (behind the
    /// one under way, if any) to end.
    pub sync_us: u64,
    /// Once durable: the after-commit hook, the callers' replies and the waiters' wake-ups.
    pub deliver_us: u64,
}

impl CommitTime {
    pub fn add(&mut self, other: &CommitTime) {
        self.queued_us = self.queued_us.saturating_add(other.queued_us);
        self.begin_us = self.begin_us.saturating_add(other.begin_us);
        self.statements_us = self.statements_us.saturating_add(other.statements_us);
        self.commit_us = self.commit_us.saturating_add(other.commit_us);
        self.sync_us = self.sync_us.saturating_add(other.sync_us);
        self.deliver_us = self.deliver_us.saturating_add(other.deliver_us);
    }

    /// What happened since `earlier` (a reading of the same store's counters).
    pub fn since(&self, earlier: &CommitTime) -> CommitTime {
        CommitTime {
            queued_us: self.queued_us.saturating_sub(earlier.queued_us),
            begin_us: self.begin_us.saturating_sub(earlier.begin_us),
            statements_us: self.statements_us.saturating_sub(earlier.statements_us),
            commit_us: self.commit_us.saturating_sub(earlier.commit_us),
            sync_us: self.sync_us.saturating_sub(earlier.sync_us),
            deliver_us: self.deliver_us.saturating_sub(earlier.deliver_us),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_design_rules() {
        for ok in [
            "lead",
            "alice",
            "worker-2",
            "a",
            "lead.sub-1",
            "alice.sub-2.sub-13",
        ] {
            assert!(validate_agent_id(ok).is_ok(), "{ok} should be valid");
        }
        for bad in [
            "",
            "Lead",
            "2x",
            "-a",
            "a_b",
            "lead.sub-",
            "lead.sub-x",
            "lead.foo",
            &"a".repeat(33),
        ] {
            assert!(validate_agent_id(bad).is_err(), "{bad} should be invalid");
        }
        for ok in ["r1", "run-2026-11-30", "0abc"] {
            assert!(validate_run_id(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-r", "RUN", "a-run-id-that-is-17", "a b"] {
            assert!(validate_run_id(bad).is_err(), "{bad}");
        }
    }
}
