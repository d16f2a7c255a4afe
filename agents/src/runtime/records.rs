//! The records an agent keeps in the store (stream [`TRANSCRIPT`]), one JSON object per row,
//! tagged by `type`. They are what `muster resume` rebuilds the agent from; see the module
//! documentation of [`crate::runtime`] for the table.

use muster_config::PermissionMode;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use std::collections::BTreeMap;

use crate::model::{Message, ServerLimits, StopReason, Usage};
use crate::verification::BashEffects;
use muster_mailbox::{AgentRecord, NewRecord};

use super::error::{RuntimeError, RuntimeResult};

/// The stream every agent's records live in.
pub const TRANSCRIPT: &str = "transcript";

/// The kind of agent, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AgentKind {
    /// The main agent of a run (a single agent, or a team's lead).
    Main,
    /// A teammate: its plans and questions go to the lead's mailbox.
    Teammate { lead: String },
    /// A subagent of `parent`: reports only to it, never plans. `call` is the `tool_use_id`
    /// of the parent's `Agent` call that started it (its trace span hangs under that call's);
    /// absent in records from before it was kept.
    Subagent {
        parent: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call: Option<String>,
    },
}

/// What a record says. Field names are the stored JSON's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    /// First record: who the agent is and how it starts.
    Started {
        definition: String,
        agent_kind: AgentKind,
        mode: PermissionMode,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pre_plan_mode: Option<PermissionMode>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        plan_file: Option<String>,
        /// The system prompt, verbatim (so a resumed agent sends the same prefix).
        system: String,
        /// The tools offered, in order (MCP tools by the names the model calls them).
        tools: Vec<String>,
        /// The MCP tools offered, as listed when the agent started (resume offers these).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        mcp_tools: Vec<crate::mcp::McpToolRecord>,
        /// What the model servers reported about the limits of the models this agent may use
        /// (only the models they reported something for): the output limit and the
        /// compaction threshold are clipped to these, and a resume uses exactly these, never
        /// asking again.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        model_limits: BTreeMap<String, ServerLimits>,
        /// Its own provider and model (its definition's, its team entry's, or its parent's),
        /// as resolved at its start: a resume keeps it whatever the files say since.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        endpoint: Option<muster_config::AgentEndpoint>,
    },
    /// One message of the context. Assistant messages carry the model request's turn index
    /// (`x-muster-turn`), the model and the mode in force.
    Message {
        message: Message,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        turn: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        mode: PermissionMode,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stop_reason: Option<StopReason>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
        /// The request's cost in US dollars at the catalogue's prices (`None`: unpriced).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
    },
    /// A tool that is neither read-only nor idempotent is about to run (Bash: its process
    /// group exists and waits for this commit).
    ToolStarted {
        tool_use_id: String,
        tool: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        process_group: Option<i32>,
        /// The machine the group runs on (see [`crate::machine`]); absent in records from
        /// before groups carried one, which were a local run's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        host: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        boot_id: Option<String>,
    },
    /// What a non-read-only `Bash` call changed in the workspace (snapshots before and after
    /// it, taken under the workspace's Bash lock): committed just before its `tool_call`, in
    /// the same commit. Evidence for verification reports; nothing to rebuild.
    BashEffects(BashEffects),
    /// The agent's MCP tools changed at a turn boundary (a server sent `tools/list_changed`):
    /// from its next model request on it offers these; a resume offers the newest such list.
    McpTools {
        tools: Vec<String>,
        mcp_tools: Vec<crate::mcp::McpToolRecord>,
    },
    /// The PreToolUse hooks' decision of a call, committed before the call goes on: a resume
    /// uses it and never runs those hooks again for the call.
    HookDecision {
        tool_use_id: String,
        #[serde(flatten)]
        decision: crate::hooks::HookDecision,
    },
    /// One tool call decided and finished.
    ToolCall {
        tool_use_id: String,
        tool: String,
        /// `allow`, `ask` or `deny` (the permission engine's answer) or `invalid`.
        decision: String,
        reason: String,
        content: String,
        is_error: bool,
    },
    /// The permission mode changed.
    Mode {
        mode: PermissionMode,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pre_plan_mode: Option<PermissionMode>,
        reason: String,
    },
    /// An approval granted the agent these rules of its plan (plan-scoped grants), as the
    /// response stored them; they hold until [`Record::GrantsEnded`] or the next approval.
    Grants {
        request_id: String,
        approved_by: String,
        rules: Vec<String>,
    },
    /// The grants of `request_id` ended (its verification report went out in this commit).
    GrantsEnded { request_id: String, reason: String },
    /// The plan file's content at a point of the lifecycle.
    PlanSnapshot {
        path: String,
        content: String,
        /// `draft`, `submitted`, `approved`, `edited`.
        state: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
    },
    /// The agent waits for the answer to `request_id` (from `ExitPlanMode`'s `tool_use_id`).
    Awaiting {
        request_id: String,
        tool_use_id: String,
        responder: String,
    },
    /// The context was compacted before model request `turn`: that request (with
    /// `x-muster-purpose: compact`) returned `summary`, and the context is `messages` from here.
    Compacted {
        turn: u64,
        model: String,
        usage: Usage,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
        summary: String,
        messages: Vec<Message>,
    },
    /// The context restarts here with only the system prompt (approval with `clear_context`).
    ContextReset { reason: String },
    /// The agent ended its work with this final answer.
    Finished { result: String },
    /// The agent's turn was interrupted (see [`super::TurnInterrupt`]), in the commit that
    /// answers its calls without a result; the agent waits for its next prompt.
    TurnInterrupted { reason: String },
    /// A hook of `event` answered `continue: false`: the agent's turn ended here, in the
    /// commit that answers its calls without a result (see [`super::hook_points`]). `reason`
    /// is the hook's `stopReason`, for the person; the model never reads it.
    HookStopped { event: String, reason: String },
    /// Worktree isolation: the agent's worktree as a commit muster made, stored with the
    /// turn that produced it (a resume restores exactly this). `merging`: the integration
    /// commit whose merge was handed to the agent to resolve. `merge`: on the lead, the
    /// merge request this integration commit applied.
    Checkpoint {
        commit: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        merging: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        merge: Option<String>,
    },
}

impl Record {
    /// As a row for `append_records` / `CommitTurn`.
    pub fn to_new(&self, agent: &str) -> RuntimeResult<NewRecord> {
        let body = serde_json::to_value(self).map_err(|error| RuntimeError::CorruptRecord {
            agent: agent.to_owned(),
            seq: -1,
            detail: error.to_string(),
        })?;
        Ok(NewRecord {
            agent: agent.to_owned(),
            stream: TRANSCRIPT.to_owned(),
            seq: None,
            body,
        })
    }

    /// Reads a stored row.
    pub fn from_stored(row: &AgentRecord) -> RuntimeResult<Record> {
        serde_json::from_value::<Record>(row.body.clone()).map_err(|error| {
            RuntimeError::CorruptRecord {
                agent: row.agent.clone(),
                seq: row.seq,
                detail: error.to_string(),
            }
        })
    }

    /// The JSON body of a record (for tests and inspection).
    pub fn body(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// A call with a `tool_started` record and no result yet: its process group and the machine
/// that runs it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartedCall {
    pub process_group: Option<i32>,
    pub host: Option<String>,
    pub boot_id: Option<String>,
}

/// `agent`'s calls that started and have no result, by `tool_use_id`.
pub async fn unfinished_calls(
    store: &dyn muster_mailbox::MailboxStore,
    run_id: &str,
    agent: &str,
) -> RuntimeResult<std::collections::BTreeMap<String, StartedCall>> {
    let mut started = std::collections::BTreeMap::new();
    for row in store.records(run_id, agent, TRANSCRIPT, 0).await? {
        match serde_json::from_value::<Record>(row.body) {
            Ok(Record::ToolStarted {
                tool_use_id,
                process_group,
                host,
                boot_id,
                ..
            }) => {
                let call = StartedCall {
                    process_group,
                    host,
                    boot_id,
                };
                started.insert(tool_use_id, call);
            }
            Ok(Record::ToolCall { tool_use_id, .. }) => {
                started.remove(&tool_use_id);
            }
            _ => {}
        }
    }
    Ok(started)
}
