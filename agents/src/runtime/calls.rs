//! The tool calls of the newest assistant message as a state machine: which call comes next
//! and how (a read-only group run together, a decision awaited, a call cut by the output
//! limit, a call interrupted before its result, a call to run), what each came to
//! ([`CallResult`]), and how a call left without a result is answered (a crash, or an
//! interrupted turn). No store: the runtime commits what this decides.

use std::collections::BTreeMap;

use muster_mailbox::AutoGateUpdate;

use crate::model::{ContentBlock, ToolCall, ToolResultContent};
use crate::tools::ToolOutput;

use super::events::RunEvent;
use super::gate::GateDecision;
use super::records::Record;
pub(super) use super::records::StartedCall;

/// How a run of the loop ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentOutcome {
    /// The model ended its turn with no tool call; its last text is the result.
    Finished { result: String },
    /// A plan waits for a decision that no one in this process can make (exit code 5).
    AwaitingDecision {
        request_id: String,
        plan_file: std::path::PathBuf,
    },
    /// A call a `PreToolUse` hook deferred to a person waits for their decision, which no one
    /// in this process can make (exit code 5): `muster approve`/`reject`, then resume.
    CallDeferred { request_id: String, tool: String },
    /// The turn was interrupted ([`super::TurnInterrupt`]): the model request in flight was
    /// dropped, running calls were killed and answered as interrupted; the agent takes the
    /// next prompt ([`super::AgentRuntime::prompt`]).
    TurnInterrupted,
    /// A hook of `event` answered `continue: false` with `reason` (its `stopReason`, for the
    /// person): the turn ended, committed with a `hook_stopped` record; the agent takes the
    /// next prompt as after an interrupted turn, without being told why.
    StoppedByHook { event: String, reason: String },
}

/// The result of one tool call, with what must be committed beside it.
pub(super) struct CallResult {
    pub decision: String,
    /// What the decision does to the run's auto gate.
    pub auto_gate: Option<AutoGateUpdate>,
    pub reason: String,
    pub output: ToolOutput,
    /// Records committed before the `tool_call` record (mode changes, snapshots).
    pub records: Vec<Record>,
    pub acks: Vec<String>,
    /// Events reported after the commit.
    pub events: Vec<RunEvent>,
    /// What a file edit changed (for the `tool_call` event only; never committed).
    pub diff: Option<String>,
    /// The sandbox profile a `Bash` command ran under, or `unconfined` (for the `tool_call`
    /// event only; never committed).
    pub sandbox: Option<&'static str>,
    /// Restart the context with this user message (approval with `clear_context`).
    pub reset_context: Option<String>,
}

impl CallResult {
    pub(super) fn new(decision: &GateDecision, output: ToolOutput) -> CallResult {
        CallResult {
            decision: decision.verdict.as_str().to_owned(),
            auto_gate: decision.auto_gate,
            reason: decision.reason.clone(),
            ..CallResult::invalid(output)
        }
    }

    pub(super) fn invalid(output: ToolOutput) -> CallResult {
        CallResult {
            decision: "invalid".into(),
            auto_gate: None,
            reason: output.content.clone(),
            output,
            records: Vec::new(),
            acks: Vec::new(),
            events: Vec::new(),
            diff: None,
            sandbox: None,
            reset_context: None,
        }
    }
}

/// What one dispatched call came to.
pub(super) enum Dispatched {
    Done(Box<CallResult>),
    /// The call waits for a decision no one here can make: stop the run.
    Stop(AgentOutcome),
}

/// Why a call that started was left without its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LeftBy {
    /// The process ended (a crash, a kill, Ctrl-C): resume answers the call.
    Crash,
    /// The agent's turn was interrupted in this process.
    TurnInterrupt,
    /// A hook's `continue: false` ended the agent's turn.
    HookStop,
}

impl LeftBy {
    fn what(self) -> &'static str {
        match self {
            LeftBy::Crash => "interrupted by a crash",
            LeftBy::TurnInterrupt => "interrupted by the user",
            LeftBy::HookStop => "stopped: a hook stopped the agent",
        }
    }
}

/// The result of a call that started and never finished: its process group is killed if
/// still alive on this machine; a group on another host is only named, since only that host
/// can stop it (DESIGN, "Wave 2 → Workers").
pub(super) fn interrupted(started: &StartedCall, by: LeftBy) -> CallResult {
    let what = by.what();
    let plain = format!("{what}; inspect the workspace before retrying");
    let Some(group) = started.process_group else {
        return CallResult::invalid(ToolOutput::error(plain));
    };
    let place = crate::machine::this_machine()
        .place_of(started.host.as_deref(), started.boot_id.as_deref());
    let text = match place {
        crate::machine::GroupPlace::Here => {
            crate::machine::kill_group(group);
            plain
        }
        crate::machine::GroupPlace::EarlierBoot => plain,
        crate::machine::GroupPlace::Elsewhere(host) => format!(
            "{what}; the command may still be running on host {host} (process group {group}), \
             which only that host can stop; inspect the workspace before retrying"
        ),
    };
    CallResult::invalid(ToolOutput::error(text))
}

/// The result of a call an interrupted turn never ran.
pub(super) fn not_run() -> CallResult {
    CallResult::invalid(ToolOutput::error(
        "not run: the user interrupted the turn before this call started",
    ))
}

/// The tool calls of the newest assistant message and what is known of them.
#[derive(Debug, Default, Clone)]
pub(super) struct PendingCalls {
    pub calls: Vec<ToolCall>,
    pub done: BTreeMap<String, (String, bool)>,
    pub started: BTreeMap<String, StartedCall>,
    /// `(tool_use_id, request_id, responder)` of an `ExitPlanMode` waiting for its answer.
    pub awaiting: Option<(String, String, String)>,
    /// The call the output limit cut (see [`super::limits::cut_call_id`]): answered with an
    /// error, never run.
    pub cut: Option<String>,
    /// The newest assistant message stopped at the output limit (resume's view).
    pub cut_answer: bool,
}

/// What the next call of a [`PendingCalls`] needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum NextCall {
    /// This many read-only calls from here run together (more than one).
    ReadOnlyGroup(usize),
    /// The call has its result already (a resume): skip it.
    Done,
    /// The call waits for the decision on its plan request.
    Awaiting {
        request_id: String,
        responder: String,
    },
    /// The call started before a crash and has no result.
    Interrupted(StartedCall),
    /// The output limit cut the call: answered with an error.
    Cut,
    /// The call runs.
    Run,
}

impl PendingCalls {
    /// The calls of a new response (`cut`: the one the output limit cut).
    pub(super) fn of(calls: Vec<ToolCall>, cut: Option<String>) -> PendingCalls {
        PendingCalls {
            cut,
            calls,
            ..PendingCalls::default()
        }
    }

    /// What call `index` needs; `read_only` says whether a call is a read-only call of the
    /// tool set (those may run together).
    pub(super) fn next(&self, index: usize, read_only: impl Fn(&ToolCall) -> bool) -> NextCall {
        let group = self.calls[index..]
            .iter()
            .take_while(|call| {
                !self.done.contains_key(&call.id)
                    && !self.started.contains_key(&call.id)
                    && self.cut.as_deref() != Some(call.id.as_str())
                    && read_only(call)
            })
            .count();
        if group > 1 {
            return NextCall::ReadOnlyGroup(group);
        }
        let call = &self.calls[index];
        if self.done.contains_key(&call.id) {
            return NextCall::Done;
        }
        if let Some((_, request_id, responder)) = self
            .awaiting
            .as_ref()
            .filter(|(tool_use_id, _, _)| *tool_use_id == call.id)
        {
            return NextCall::Awaiting {
                request_id: request_id.clone(),
                responder: responder.clone(),
            };
        }
        if let Some(started) = self.started.get(&call.id) {
            return NextCall::Interrupted(started.clone());
        }
        if self.cut.as_deref() == Some(call.id.as_str()) {
            return NextCall::Cut;
        }
        NextCall::Run
    }

    /// Notes a call's result.
    pub(super) fn finish(&mut self, call: &ToolCall, output: &ToolOutput) {
        self.done
            .insert(call.id.clone(), (output.content.clone(), output.is_error));
    }

    /// The calls still without a result, each with what answers it when the turn is
    /// interrupted: a started call is killed and answered as interrupted, the others as not
    /// run.
    pub(super) fn interrupt(&self) -> Vec<(ToolCall, CallResult)> {
        self.answer_unfinished(LeftBy::TurnInterrupt)
    }

    /// [`PendingCalls::interrupt`], for a turn that ended `by` that.
    pub(super) fn answer_unfinished(&self, by: LeftBy) -> Vec<(ToolCall, CallResult)> {
        self.calls
            .iter()
            .filter(|call| !self.done.contains_key(&call.id))
            .map(|call| {
                let result = match (self.started.get(&call.id), by) {
                    (Some(started), _) => interrupted(started, by),
                    (None, LeftBy::HookStop) => {
                        CallResult::invalid(ToolOutput::error(super::hook_points::STOPPED_CALL))
                    }
                    (None, _) => not_run(),
                };
                (call.clone(), result)
            })
            .collect()
    }

    /// The result blocks of every call, in the order of the calls (the content of the user
    /// message that carries them).
    pub(super) fn result_blocks(&self) -> Vec<ContentBlock> {
        self.calls
            .iter()
            .map(|call| {
                let (content, is_error) = self.done.get(&call.id).cloned().unwrap_or_default();
                ContentBlock::ToolResult {
                    tool_use_id: call.id.clone(),
                    content: ToolResultContent::Text(content),
                    is_error,
                }
            })
            .collect()
    }

    /// Replays one record of the transcript (resume): a new assistant message starts a new
    /// set of calls; `tool_started`, `tool_call` and `awaiting` records say where each is.
    pub(super) fn replay(&mut self, record: &Record) {
        match record {
            Record::Message {
                message,
                stop_reason,
                ..
            } if message.role == crate::model::Role::Assistant => {
                let stop_reason = stop_reason
                    .clone()
                    .unwrap_or(crate::model::StopReason::EndTurn);
                *self = PendingCalls {
                    cut: super::limits::cut_call_id(&message.content, &stop_reason),
                    cut_answer: stop_reason == crate::model::StopReason::MaxTokens,
                    ..PendingCalls::default()
                };
            }
            Record::ContextReset { .. } => *self = PendingCalls::default(),
            Record::ToolStarted {
                tool_use_id,
                process_group,
                host,
                boot_id,
                ..
            } => {
                let started = StartedCall {
                    process_group: *process_group,
                    host: host.clone(),
                    boot_id: boot_id.clone(),
                };
                self.started.insert(tool_use_id.clone(), started);
            }
            Record::ToolCall {
                tool_use_id,
                content,
                is_error,
                ..
            } => {
                self.done
                    .insert(tool_use_id.clone(), (content.clone(), *is_error));
            }
            Record::Awaiting {
                request_id,
                tool_use_id,
                responder,
            } => {
                self.awaiting = Some((tool_use_id.clone(), request_id.clone(), responder.clone()));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Message;
    use serde_json::json;

    fn call(id: &str, name: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            input: json!({}),
        }
    }

    fn pending(ids: &[&str]) -> PendingCalls {
        PendingCalls::of(ids.iter().map(|id| call(id, id)).collect(), None)
    }

    /// Read-only calls run together only in a group of two or more; what is known of a call
    /// decides the rest, in the order the table gives.
    #[test]
    fn the_next_call_follows_what_is_known_of_it() {
        let read_only = |call: &ToolCall| call.name.starts_with("read");
        let mut calls = pending(&["read1", "read2", "write", "read3"]);
        assert_eq!(calls.next(0, read_only), NextCall::ReadOnlyGroup(2));
        assert_eq!(calls.next(2, read_only), NextCall::Run);
        assert_eq!(
            calls.next(3, read_only),
            NextCall::Run,
            "a group of one runs alone"
        );
        calls.finish(&call("read2", "read2"), &ToolOutput::text("x"));
        assert_eq!(
            calls.next(0, read_only),
            NextCall::Run,
            "the group stops at a done call"
        );
        assert_eq!(calls.next(1, read_only), NextCall::Done);
        calls.started.insert("write".into(), StartedCall::default());
        assert_eq!(
            calls.next(2, read_only),
            NextCall::Interrupted(StartedCall::default())
        );
        calls.cut = Some("read3".into());
        assert_eq!(calls.next(3, read_only), NextCall::Cut);
        calls.awaiting = Some(("read1".into(), "plan-1".into(), "human".into()));
        assert_eq!(
            calls.next(0, read_only),
            NextCall::Awaiting {
                request_id: "plan-1".into(),
                responder: "human".into()
            }
        );
    }

    /// An interrupted turn answers every call without a result: a started one as interrupted
    /// (its group killed), the others as not run; done calls keep theirs.
    #[test]
    fn an_interrupt_answers_every_call_without_a_result() {
        let mut calls = pending(&["a", "b", "c"]);
        calls.finish(&call("a", "a"), &ToolOutput::text("done"));
        calls.started.insert("b".into(), StartedCall::default());
        let answered = calls.interrupt();
        let ids: Vec<&str> = answered.iter().map(|(call, _)| call.id.as_str()).collect();
        assert_eq!(ids, ["b", "c"]);
        assert!(
            answered[0]
                .1
                .output
                .content
                .starts_with("interrupted by the user")
        );
        assert!(answered[1].1.output.content.starts_with("not run"));
        assert!(answered.iter().all(|(_, result)| result.output.is_error));
    }

    /// Replaying records rebuilds what is known of the newest message's calls.
    #[test]
    fn replay_tracks_the_newest_calls() {
        let mut calls = PendingCalls::default();
        let assistant = Record::Message {
            message: Message::assistant(vec![ContentBlock::ToolUse {
                id: "t1".into(),
                name: "Bash".into(),
                input: json!({}),
            }]),
            turn: Some(1),
            model: None,
            mode: muster_config::PermissionMode::Default,
            stop_reason: None,
            usage: None,
            cost_usd: None,
        };
        calls.replay(&assistant);
        calls.replay(&Record::ToolStarted {
            tool_use_id: "t1".into(),
            tool: "Bash".into(),
            process_group: Some(7),
            host: None,
            boot_id: None,
        });
        assert_eq!(calls.started["t1"].process_group, Some(7));
        calls.replay(&Record::ToolCall {
            tool_use_id: "t1".into(),
            tool: "Bash".into(),
            decision: "allow".into(),
            reason: String::new(),
            content: "ok".into(),
            is_error: false,
        });
        assert_eq!(calls.done["t1"], ("ok".to_owned(), false));
        calls.replay(&assistant);
        assert!(calls.done.is_empty(), "a new assistant message starts over");
    }
}
