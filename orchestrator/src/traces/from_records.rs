//! The events an agent's committed records stand for, rebuilt for its spans where no run log
//! of the process that committed them is at hand (a teammate's earlier worker, killed on its
//! own machine): each answered model request (`message` with a `turn`) as its `model_turn`,
//! each finished call (`tool_call`) as its `tool_call`, at the record's commit time; and the
//! calls started and never finished (`tool_started` without `tool_call`), the turns answered
//! and the next. What only the event
//! knew is left out: the request's latency (its span starts at its commit) and a `Bash` call's
//! sandbox profile.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use muster_agents::model::{ContentBlock, Role};
use muster_agents::runtime::{Record, RunEvent};
use muster_mailbox::AgentRecord;
use serde_json::Value;

/// What one agent committed, as events.
#[derive(Debug, Default)]
pub(super) struct Committed {
    /// (when the call started, if a `tool_started` says; the event; its commit time).
    pub events: Vec<(Option<SystemTime>, RunEvent, SystemTime)>,
    /// Calls started and never finished: `tool_use_id` → (start, tool).
    pub unfinished: BTreeMap<String, (SystemTime, String)>,
    /// The last record's commit time.
    pub last: Option<SystemTime>,
    /// The highest turn of a committed response (0: none).
    pub answered_turn: u64,
    /// The turn of the agent's next model request: one past the highest any record holds
    /// (responses and compactions).
    pub next_turn: u64,
    /// The calls whose result was committed.
    pub finished: HashSet<String>,
}

impl Committed {
    /// Reads `agent`'s transcript records (rows that do not read are skipped: they make no
    /// span, and the agent's own resume reports them).
    pub fn read(agent: &str, rows: &[AgentRecord]) -> Committed {
        let mut committed = Committed {
            next_turn: 1,
            ..Committed::default()
        };
        let mut provider = None;
        let mut inputs: HashMap<String, Value> = HashMap::new();
        for row in rows {
            let at = UNIX_EPOCH + Duration::from_millis(row.created_at.max(0) as u64);
            committed.last = Some(at);
            if let Some(turn) = row.body.get("turn").and_then(Value::as_u64) {
                committed.next_turn = committed.next_turn.max(turn + 1);
            }
            let Ok(record) = Record::from_stored(row) else {
                continue;
            };
            match record {
                Record::Started { endpoint, .. } => {
                    provider = endpoint
                        .and_then(|endpoint| endpoint.provider)
                        .map(|kind| kind.as_str().to_owned());
                }
                Record::Message {
                    message,
                    turn: Some(turn),
                    model,
                    mode,
                    stop_reason,
                    usage,
                    cost_usd,
                } if message.role == Role::Assistant => {
                    committed.answered_turn = committed.answered_turn.max(turn);
                    let mut text = String::new();
                    for block in &message.content {
                        match block {
                            ContentBlock::Text { text: part } => text.push_str(part),
                            ContentBlock::ToolUse { id, input, .. } => {
                                inputs.insert(id.clone(), input.clone());
                            }
                            _ => {}
                        }
                    }
                    let event = RunEvent::ModelTurn {
                        agent: agent.to_owned(),
                        turn,
                        model: model.unwrap_or_default(),
                        provider: provider.clone(),
                        mode: mode.to_string(),
                        stop_reason: stop_reason
                            .map(|reason| reason.as_str().to_owned())
                            .unwrap_or_default(),
                        text,
                        latency_ms: 0.0,
                        usage: usage.map(Into::into).unwrap_or_default(),
                        cost_usd,
                    };
                    committed.events.push((None, event, at));
                }
                Record::ToolStarted {
                    tool_use_id, tool, ..
                } => {
                    committed.unfinished.insert(tool_use_id, (at, tool));
                }
                Record::ToolCall {
                    tool_use_id,
                    tool,
                    decision,
                    reason,
                    content,
                    is_error,
                } => {
                    let start = committed
                        .unfinished
                        .remove(&tool_use_id)
                        .map(|(start, _)| start);
                    committed.finished.insert(tool_use_id.clone());
                    let event = RunEvent::ToolCall {
                        agent: agent.to_owned(),
                        input: inputs.get(&tool_use_id).cloned().unwrap_or_default(),
                        tool_use_id,
                        tool,
                        decision,
                        reason,
                        is_error,
                        content,
                        diff: None,
                        sandbox: None,
                    };
                    committed.events.push((start, event, at));
                }
                _ => {}
            }
        }
        committed
    }
}
