//! Run events: [`RunEvent`], the one stream every consumer of a run reads — the printers
//! (`--output stream-json`, the text progress), the run log (`.muster/logs/<run>.jsonl`), and
//! the front ends (the editor protocol, the Claude-Code-shaped stream, traces, the live team
//! view).
//!
//! # Durable and not
//! A **durable** event is emitted only after the commit it reports: a line on stdout is a fact
//! the store already holds, and a crash never leaves an event whose commit is missing (crash
//! tests count them). Every event is durable except two, which report what is under way and
//! carry `"durable": false` on their line:
//!
//! | event | why it is not durable |
//! |---|---|
//! | `model_delta` | a piece of a response while it streams; what is committed later is the complete response (`model_turn`) |
//! | `tool_started` | a call about to run; what is committed is its `tool_call` (a crash may leave a start with no result) |
//!
//! Non-durable events are never written to the run log (it holds what was committed) and are
//! printed only with `--include-partial`.
//!
//! `agent_state` is durable: each state follows from a commit just made (the context ends with
//! a user turn: `thinking`; a response with tool calls was committed: `calling_tool`; a request
//! was sent and the agent waits for its answer: `waiting_on_decision`; the turn's end was
//! committed: `idle`), and it is emitted after that commit, only when the state changes.
//!
//! Nothing decides on an event: control flow follows committed store state. An event is a
//! report, and a consumer that misses one loses a line of display, never a decision.
//!
//! # The line
//! [`RunEvent::to_line`] gives the `stream-json` line: `{"v":1,"type","ts","run_id","agent",
//! …fields}` — the field names muster has always printed (new fields may be added, never
//! renamed). The `type` is [`RunEvent::kind`]. [`RunEvent::from_line`] reads one back (from the
//! run log or another process's stream).
//!
//! | `type` | fields after the envelope |
//! |---|---|
//! | `agent_started` | `definition`, `mode`, `plan_file` |
//! | `model_turn` | `turn`, `model`, `mode`, `stop_reason`, `text`, `latency_ms`, `usage` (`input_tokens`, `output_tokens`, `cache_read_input_tokens`, `cache_creation_input_tokens`), `cost_usd` |
//! | `model_delta` | `turn`, `attempt`, `delta` (`text`, `thinking`, `tool_input`, `discard`), `text`, `durable: false` |
//! | `tool_started` | `tool_use_id`, `tool`, `input`, `durable: false` |
//! | `tool_call` | `tool_use_id`, `tool`, `decision`, `reason`, `is_error`, `input`, `content`, `diff?`, `sandbox?` |
//! | `mode_changed` | `mode`, `reason` (log only) |
//! | `approval_requested` | `request_id`, `responder`, `kind` (`plan_approval_request` + `plan_file`, `permission_request`, `question`, `merge` + `branch`, `files`) |
//! | `approval_decided` | `request_id`, `responder`, `approved`, `kind` (`plan_approval_request` + `mode`, `merge` + `feedback`, `rule`) |
//! | `mail_sent` | `from`, `to`, `kind`, `request_id` |
//! | `mail_delivered` | `from`, `kind`, `request_id`, `queued_ms` |
//! | `task_claimed`, `task_completed` | `task_id`, `subject` |
//! | `verification` | `request_id`, `plan_file`, `summary` |
//! | `merge_applied` | `request_id`, `commit`, `files` (how many) |
//! | `teammate_placed` | `worker`, `attempt`, `item` |
//! | `teammate_finished` | `worker`, `item`, `result` |
//! | `budget_wait` | `in_flight` (the other agents' requests), `reserved`, `spent`, `estimate` (each `turns`, `tokens`, `cost_usd`) |
//! | `agent_state` | `state` (`thinking`, `calling_tool` + `tool_use_id`, `tool`, `waiting_on_decision` + `request_id`, `idle`) (log only) |
//! | `run_finished` | `status`, `exit_code`, and the run's result fields (`result`, `reason`, `request_id`, `plan_file`, …) |
//!
//! The table test in `tests/run_event.rs` holds one line of each.

use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::MessageKind;

/// The version every line carries in `v`.
pub const EVENT_VERSION: u64 = 1;

/// One fact about a run, as every consumer reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunEvent {
    /// An agent's `started` record was committed.
    AgentStarted {
        agent: String,
        definition: String,
        mode: String,
        plan_file: Option<String>,
    },
    /// A model response was committed (with its usage and cost, what resume restores the
    /// budget from).
    ModelTurn {
        agent: String,
        turn: u64,
        model: String,
        /// The provider that answered (`anthropic`, `openai`, `script`): the agent's own
        /// when its definition or team entry names one, else the run's for the mode.
        /// Absent in lines from before it was added.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider: Option<String>,
        mode: String,
        stop_reason: String,
        text: String,
        /// From sending the request to the complete response (retries included), in
        /// milliseconds: the time spent waiting for the model rather than in muster.
        #[serde(serialize_with = "three_decimals")]
        latency_ms: f64,
        /// The tokens the model server reported for this response.
        #[serde(default)]
        usage: TokenUsage,
        /// What the response cost by the run's price table; `null` when the model has no
        /// prices.
        #[serde(default)]
        cost_usd: Option<f64>,
    },
    /// A piece of the response of request `turn` while it streams. Not durable.
    ModelDelta {
        agent: String,
        turn: u64,
        attempt: u32,
        delta: DeltaKind,
        text: String,
    },
    /// A tool call was decided and is about to run. Not durable: its `tool_call` is.
    ToolStarted {
        agent: String,
        tool_use_id: String,
        tool: String,
        input: Value,
    },
    /// A tool call was decided and finished, and its `tool_call` record committed.
    ToolCall {
        agent: String,
        tool_use_id: String,
        tool: String,
        /// `allow`, `ask`, `deny` or `invalid`.
        decision: String,
        reason: String,
        is_error: bool,
        /// The input the model gave.
        #[serde(default)]
        input: Value,
        /// The result the model sees (what the `tool_call` record holds).
        #[serde(default)]
        content: String,
        /// For a file edit that changed a file (`Write`, `Edit`, `MultiEdit`,
        /// `NotebookEdit`): a unified diff of the file before and after.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        diff: Option<String>,
        /// For `Bash`: the sandbox profile the command ran under (`read-only`,
        /// `workspace-write`), or `unconfined`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sandbox: Option<String>,
    },
    /// The agent's permission mode changed (also seen in `model_turn` and `approval_decided`;
    /// not one of the `stream-json` lines, only in the log).
    ModeChanged {
        agent: String,
        mode: String,
        reason: String,
    },
    /// A request that someone must decide was committed; `agent` asked.
    ApprovalRequested {
        agent: String,
        request_id: String,
        responder: String,
        #[serde(flatten)]
        subject: ApprovalSubject,
    },
    /// A decision was committed; `agent` asked.
    ApprovalDecided {
        agent: String,
        request_id: String,
        responder: String,
        approved: bool,
        #[serde(flatten)]
        subject: DecisionSubject,
    },
    /// A message was committed; the line's `agent` is its sender.
    MailSent {
        from: String,
        to: String,
        kind: MessageKind,
        request_id: Option<String>,
    },
    /// Mail was put into an agent's context (committed with its ack); `agent` is the
    /// recipient, `queued_ms` the time from the send's commit to this delivery.
    MailDelivered {
        agent: String,
        from: String,
        kind: MessageKind,
        request_id: Option<String>,
        queued_ms: i64,
    },
    /// A teammate's claim of a task was committed.
    TaskClaimed {
        agent: String,
        task_id: i64,
        subject: String,
    },
    /// A teammate's end of turn completed a task.
    TaskCompleted {
        agent: String,
        task_id: i64,
        subject: String,
    },
    /// A `verification_report` was committed; `agent` is the teammate it is about.
    Verification {
        agent: String,
        request_id: Option<String>,
        plan_file: Option<String>,
        summary: Value,
    },
    /// An approved merge of `agent`'s branch was applied.
    MergeApplied {
        agent: String,
        request_id: String,
        commit: String,
        /// How many files the merge changed.
        files: usize,
    },
    /// A worker took the work item running teammate `agent` (claim `attempt`).
    TeammatePlaced {
        agent: String,
        worker: String,
        attempt: i64,
        item: String,
    },
    /// The work item running teammate `agent` is done.
    TeammateFinished {
        agent: String,
        worker: Option<String>,
        item: String,
        result: Option<Value>,
    },
    /// The agent's next model request did not fit the run's ledger beside the requests in
    /// flight (the reservation that decided so was committed): it waits, sending nothing,
    /// until a settlement leaves room, the run's limit is reached, or the deadline passes.
    /// Once per wait. (`muster runs --json` lists the reservations in flight.)
    BudgetWait {
        agent: String,
        /// The other agents' requests in flight, and what they hold reserved (worst cases).
        in_flight: i64,
        reserved: BudgetSpend,
        /// What the run has spent, settled by commits.
        spent: BudgetSpend,
        /// This request's worst case.
        estimate: BudgetSpend,
    },
    /// An agent's state changed (see [`AgentState`]).
    AgentState {
        agent: String,
        #[serde(flatten)]
        state: AgentState,
    },
    /// The run ended: its status, exit code and result (`result`, `reason`, `plan_file`, …
    /// as the run reports them).
    RunFinished {
        agent: String,
        status: String,
        exit_code: u8,
        #[serde(flatten)]
        result: Map<String, Value>,
    },
}

/// What a piece of a streaming response is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeltaKind {
    Text,
    Thinking,
    ToolInput,
    /// The attempt failed: what it showed is void.
    Discard,
}

impl DeltaKind {
    /// Its name on the wire (`text`, `thinking`, `tool_input`, `discard`), as serde writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            DeltaKind::Text => "text",
            DeltaKind::Thinking => "thinking",
            DeltaKind::ToolInput => "tool_input",
            DeltaKind::Discard => "discard",
        }
    }
}

/// The tokens of one model response, by Anthropic's names (an OpenAI-compatible server's
/// figures are mapped to them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_read_input_tokens: u64,
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
}

/// What an `approval_requested` asks about (its `kind`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ApprovalSubject {
    /// A plan, written to `plan_file`.
    PlanApprovalRequest { plan_file: String },
    /// A tool call (a person answers it with `muster approve` / `reject`).
    PermissionRequest,
    /// A question (a person answers it with `muster answer`).
    Question,
    /// A teammate's branch to merge.
    Merge { branch: String, files: Vec<String> },
}

/// What an `approval_decided` decided (its `kind`), with what that decision carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DecisionSubject {
    /// A plan; `mode` is the mode the agent works in after an approval.
    PlanApprovalRequest { mode: Option<String> },
    /// A merge, with the responder's feedback and the policy rule that decided it.
    Merge {
        feedback: Option<String>,
        rule: Option<String>,
    },
}

/// Turns, tokens and dollars of the run's ledger (a `budget_wait` line's figures).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct BudgetSpend {
    pub turns: i64,
    pub tokens: i64,
    pub cost_usd: f64,
}

/// What an agent is doing (the `state` of an `agent_state` line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum AgentState {
    /// Its context ends with a user turn: a model request is next or under way.
    Thinking,
    /// A committed response asked for tool calls; this one is being carried out.
    CallingTool { tool_use_id: String, tool: String },
    /// A request it sent waits for its answer.
    WaitingOnDecision { request_id: String },
    /// Its turn's end was committed; it waits for mail.
    Idle,
}

/// A `stream-json` line that does not read as a [`RunEvent`].
#[derive(Debug, thiserror::Error)]
pub enum EventLineError {
    #[error("an event line must be a JSON object, got `{0}`")]
    NotAnObject(String),
    #[error("event line of version {found}; this muster reads version {EVENT_VERSION}")]
    Version { found: Value },
    #[error("unreadable event line: {0}")]
    Fields(#[from] serde_json::Error),
}

/// The line's common fields, which no variant carries. (A worker's printer adds `worker`
/// too; it is not stripped, since `teammate_placed` has a `worker` of its own: variants
/// without one ignore it.)
const ENVELOPE: [&str; 4] = ["v", "ts", "run_id", "durable"];

impl RunEvent {
    /// The `type` of the `stream-json` line.
    pub fn kind(&self) -> &'static str {
        match self {
            RunEvent::AgentStarted { .. } => "agent_started",
            RunEvent::ModelTurn { .. } => "model_turn",
            RunEvent::ModelDelta { .. } => "model_delta",
            RunEvent::ToolStarted { .. } => "tool_started",
            RunEvent::ToolCall { .. } => "tool_call",
            RunEvent::ModeChanged { .. } => "mode_changed",
            RunEvent::ApprovalRequested { .. } => "approval_requested",
            RunEvent::ApprovalDecided { .. } => "approval_decided",
            RunEvent::MailSent { .. } => "mail_sent",
            RunEvent::MailDelivered { .. } => "mail_delivered",
            RunEvent::TaskClaimed { .. } => "task_claimed",
            RunEvent::TaskCompleted { .. } => "task_completed",
            RunEvent::Verification { .. } => "verification",
            RunEvent::MergeApplied { .. } => "merge_applied",
            RunEvent::TeammatePlaced { .. } => "teammate_placed",
            RunEvent::TeammateFinished { .. } => "teammate_finished",
            RunEvent::BudgetWait { .. } => "budget_wait",
            RunEvent::AgentState { .. } => "agent_state",
            RunEvent::RunFinished { .. } => "run_finished",
        }
    }

    /// The agent the event is about (a message's sender for `mail_sent`).
    pub fn agent(&self) -> &str {
        match self {
            RunEvent::MailSent { from, .. } => from,
            RunEvent::AgentStarted { agent, .. }
            | RunEvent::ModelTurn { agent, .. }
            | RunEvent::ModelDelta { agent, .. }
            | RunEvent::ToolStarted { agent, .. }
            | RunEvent::ToolCall { agent, .. }
            | RunEvent::ModeChanged { agent, .. }
            | RunEvent::ApprovalRequested { agent, .. }
            | RunEvent::ApprovalDecided { agent, .. }
            | RunEvent::MailDelivered { agent, .. }
            | RunEvent::TaskClaimed { agent, .. }
            | RunEvent::TaskCompleted { agent, .. }
            | RunEvent::Verification { agent, .. }
            | RunEvent::MergeApplied { agent, .. }
            | RunEvent::TeammatePlaced { agent, .. }
            | RunEvent::TeammateFinished { agent, .. }
            | RunEvent::BudgetWait { agent, .. }
            | RunEvent::AgentState { agent, .. }
            | RunEvent::RunFinished { agent, .. } => agent,
        }
    }

    /// Whether the event reports a commit (see the module's table for the two that do not).
    pub fn is_durable(&self) -> bool {
        !matches!(
            self,
            RunEvent::ModelDelta { .. } | RunEvent::ToolStarted { .. }
        )
    }

    /// Whether the event is one of `--output stream-json`'s lines (DESIGN.md's list and the
    /// fields added since). `mode_changed` and `agent_state` are not: both follow from the
    /// other lines, and they go to the run log and to in-process consumers only.
    pub fn is_stream_line(&self) -> bool {
        !matches!(
            self,
            RunEvent::ModeChanged { .. } | RunEvent::AgentState { .. }
        )
    }

    /// The event's own fields, in the order of the line (without `v`, `type`, `ts`,
    /// `run_id`, `agent`; `mail_sent` keeps `from`).
    pub fn fields(&self) -> Map<String, Value> {
        let serialised = match serde_json::to_value(self) {
            Ok(Value::Object(fields)) => fields,
            // Every variant is a struct of plain data: serialising cannot fail or give
            // anything but an object; say so on the line rather than drop it.
            Ok(other) => Map::from_iter([("unexpected".to_owned(), other)]),
            Err(error) => Map::from_iter([("error".to_owned(), Value::String(error.to_string()))]),
        };
        // Filtered rather than removed: with serde_json's `preserve_order`, `remove` would
        // reorder the line.
        let mut fields: Map<String, Value> = serialised
            .into_iter()
            .filter(|(key, _)| key != "type" && key != "agent")
            .collect();
        if !self.is_durable() {
            fields.insert("durable".into(), Value::Bool(false));
        }
        fields
    }

    /// The `stream-json` line of this event in run `run_id` at `ts` (milliseconds since the
    /// Unix epoch).
    pub fn to_line(&self, run_id: &str, ts: i64) -> Value {
        let mut line = Map::new();
        line.insert("v".into(), Value::from(EVENT_VERSION));
        line.insert("type".into(), Value::from(self.kind()));
        line.insert("ts".into(), Value::from(ts));
        line.insert("run_id".into(), Value::from(run_id));
        line.insert("agent".into(), Value::from(self.agent()));
        line.extend(self.fields());
        Value::Object(line)
    }

    /// Reads a `stream-json` line (or a run log's `event`) back; fields this version does not
    /// know are ignored, and a line of another version is refused.
    pub fn from_line(line: &Value) -> Result<RunEvent, EventLineError> {
        let Value::Object(object) = line else {
            let mut shown = line.to_string();
            if let Some((cut, _)) = shown.char_indices().nth(80) {
                shown.truncate(cut);
                shown.push('…');
            }
            return Err(EventLineError::NotAnObject(shown));
        };
        match object.get("v") {
            Some(v) if v.as_u64() == Some(EVENT_VERSION) => {}
            None => {}
            Some(other) => {
                return Err(EventLineError::Version {
                    found: other.clone(),
                });
            }
        }
        let mut fields = object.clone();
        for key in ENVELOPE {
            fields.remove(key);
        }
        if fields.get("type").and_then(Value::as_str) == Some("mail_sent") {
            fields.remove("agent");
        }
        Ok(serde_json::from_value(Value::Object(fields))?)
    }
}

/// Milliseconds with at most three decimals (microseconds), as the line has always shown them.
fn three_decimals<S: Serializer>(ms: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64((ms * 1000.0).round() / 1000.0)
}

/// Where events go. Called after each commit (and, for the non-durable events, while work is
/// under way); must not block for long.
pub trait EventSink: Send + Sync {
    fn emit(&self, event: RunEvent);
}

/// Drops every event.
#[derive(Debug, Default)]
pub struct NoEvents;

impl EventSink for NoEvents {
    fn emit(&self, _event: RunEvent) {}
}
