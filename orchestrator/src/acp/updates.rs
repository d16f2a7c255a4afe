//! What the editor is shown of a run: each [`RunEvent`] as the ACP `session/update`s it makes
//! (docs/acp.md has the table). Pure: the live sink and the replay of `session/load` share it.

use std::collections::HashSet;
use std::path::Path;

use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, CurrentModeUpdate, Diff, SessionModeId, SessionUpdate, ToolCall,
    ToolCallContent, ToolCallLocation, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
    ToolKind,
};
use muster_protocol::ToolName;
use muster_protocol::event::{ApprovalSubject, DeltaKind, RunEvent};
use serde_json::Value;

/// What the updates already sent say, so the next event adds to them rather than repeats.
#[derive(Debug, Default)]
pub(crate) struct Shown {
    /// Tool calls sent as `tool_call` (a later result is a `tool_call_update`).
    started: HashSet<String>,
    /// `(agent, turn)` whose text arrived as chunks while it streamed.
    streamed: HashSet<(String, u64)>,
}

/// Where an update goes: the session itself, or the thread of an agent (a teammate or a
/// subagent; see `threads.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum To {
    Session,
    Thread(String),
}

/// The updates `event` makes and where each goes; `lead` is the agent whose text is the
/// session's own, and a relative path of a call is shown under `workspace` (ACP's paths are
/// absolute). With `threads` (a client that advertised subagents) another agent's event goes
/// to its own thread, shown there as the thread's own (its text too); without, it stays on the
/// session, its calls named after it and its text left out.
pub(crate) fn updates_for(
    event: &RunEvent,
    shown: &mut Shown,
    lead: &str,
    workspace: &Path,
    threads: bool,
) -> Vec<(To, SessionUpdate)> {
    let agent = event.agent();
    let (to, own) = if threads && agent != lead {
        (To::Thread(agent.to_owned()), agent)
    } else {
        (To::Session, lead)
    };
    updates_on(event, shown, own, workspace)
        .into_iter()
        .map(|update| (to.clone(), update))
        .collect()
}

/// The updates `event` makes on a session (or thread) whose own agent is `lead`.
fn updates_on(
    event: &RunEvent,
    shown: &mut Shown,
    lead: &str,
    workspace: &Path,
) -> Vec<SessionUpdate> {
    match event {
        RunEvent::ModelDelta {
            agent,
            turn,
            delta,
            text,
            ..
        } if agent == lead && !text.is_empty() => match delta {
            DeltaKind::Text => {
                shown.streamed.insert((agent.clone(), *turn));
                vec![SessionUpdate::AgentMessageChunk(chunk(text))]
            }
            DeltaKind::Thinking => vec![SessionUpdate::AgentThoughtChunk(chunk(text))],
            DeltaKind::ToolInput | DeltaKind::Discard => Vec::new(),
        },
        RunEvent::ModelTurn {
            agent, turn, text, ..
        } if agent == lead && !text.is_empty() => {
            if shown.streamed.remove(&(agent.clone(), *turn)) {
                Vec::new()
            } else {
                vec![SessionUpdate::AgentMessageChunk(chunk(text))]
            }
        }
        RunEvent::ToolStarted {
            agent,
            tool_use_id,
            tool,
            input,
        } => {
            shown.started.insert(tool_use_id.clone());
            vec![SessionUpdate::ToolCall(
                ToolCall::new(tool_use_id.clone(), title(agent, tool, input, lead))
                    .kind(kind_of(tool))
                    .status(ToolCallStatus::InProgress)
                    .locations(locations(input, workspace))
                    .raw_input(input.clone()),
            )]
        }
        RunEvent::ToolCall {
            agent,
            tool_use_id,
            tool,
            decision,
            reason,
            is_error,
            input,
            content,
            diff,
            sandbox: _,
        } => {
            let failed = *is_error || decision != "allow";
            let status = if failed {
                ToolCallStatus::Failed
            } else {
                ToolCallStatus::Completed
            };
            let mut shown_content = Vec::new();
            if diff.is_some() && !failed {
                shown_content.extend(diffs(tool, input, workspace));
            }
            let said = if decision == "allow" || reason.is_empty() {
                content.clone()
            } else {
                format!("{decision}: {reason}\n{content}")
            };
            if !said.trim().is_empty() {
                shown_content.push(ToolCallContent::from(said.as_str()));
            }
            if shown.started.remove(tool_use_id) {
                vec![SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                    tool_use_id.clone(),
                    ToolCallUpdateFields::new()
                        .status(status)
                        .content(shown_content)
                        .raw_output(Value::String(content.clone())),
                ))]
            } else {
                // Never started here (refused before it ran, or replayed from the log).
                vec![SessionUpdate::ToolCall(
                    ToolCall::new(tool_use_id.clone(), title(agent, tool, input, lead))
                        .kind(kind_of(tool))
                        .status(status)
                        .locations(locations(input, workspace))
                        .raw_input(input.clone())
                        .content(shown_content)
                        .raw_output(Value::String(content.clone())),
                )]
            }
        }
        RunEvent::ModeChanged { agent, mode, .. } if agent == lead => {
            vec![SessionUpdate::CurrentModeUpdate(CurrentModeUpdate::new(
                SessionModeId::new(mode.as_str()),
            ))]
        }
        RunEvent::ApprovalRequested {
            agent,
            request_id,
            responder,
            subject,
        } => {
            let what = match subject {
                ApprovalSubject::PlanApprovalRequest { plan_file } => {
                    format!("the plan in {plan_file}")
                }
                ApprovalSubject::PermissionRequest => "a tool call".to_owned(),
                ApprovalSubject::Question => "a question".to_owned(),
                ApprovalSubject::Merge { branch, .. } => format!("merging {branch}"),
            };
            vec![SessionUpdate::AgentMessageChunk(chunk(&format!(
                "\n[{agent}] {request_id} asks {responder} about {what}.\n"
            )))]
        }
        RunEvent::ApprovalDecided {
            agent,
            request_id,
            responder,
            approved,
            ..
        } => {
            let verdict = if *approved { "approved" } else { "rejected" };
            vec![SessionUpdate::AgentMessageChunk(chunk(&format!(
                "\n[{agent}] {request_id} {verdict} by {responder}.\n"
            )))]
        }
        _ => Vec::new(),
    }
}

/// A text chunk.
pub(crate) fn chunk(text: &str) -> ContentChunk {
    ContentChunk::new(ContentBlock::from(text))
}

/// What the editor calls the call: the tool and what it works on, named after the agent when
/// it is not the lead (a teammate's or subagent's call).
fn title(agent: &str, tool: &str, input: &Value, lead: &str) -> String {
    let subject = [
        "command",
        "file_path",
        "notebook_path",
        "path",
        "pattern",
        "url",
    ]
    .iter()
    .find_map(|key| input.get(*key).and_then(Value::as_str))
    .map(|subject| {
        let mut subject = subject.lines().next().unwrap_or_default().to_owned();
        if let Some((cut, _)) = subject.char_indices().nth(80) {
            subject.truncate(cut);
            subject.push('…');
        }
        subject
    });
    let call = match subject {
        Some(subject) => format!("{tool} {subject}"),
        None => tool.to_owned(),
    };
    if agent == lead {
        call
    } else {
        format!("{agent}: {call}")
    }
}

/// The ACP kind of one of muster's tools (MCP tools are `other`).
fn kind_of(tool: &str) -> ToolKind {
    let Some(name) = ToolName::canonical(tool) else {
        return ToolKind::Other;
    };
    match name {
        ToolName::Glob | ToolName::Grep => ToolKind::Search,
        name if name.reads_files() => ToolKind::Read,
        name if name.edits_files() => ToolKind::Edit,
        name if name.needs_shell_sandbox() => ToolKind::Execute,
        ToolName::EnterPlanMode | ToolName::ExitPlanMode => ToolKind::SwitchMode,
        ToolName::Agent => ToolKind::Think,
        _ => ToolKind::Other,
    }
}

/// The file a call works on.
fn locations(input: &Value, workspace: &Path) -> Vec<ToolCallLocation> {
    ["file_path", "notebook_path", "path"]
        .iter()
        .find_map(|key| input.get(*key).and_then(Value::as_str))
        .map(|path| vec![ToolCallLocation::new(workspace.join(path))])
        .unwrap_or_default()
}

/// An edit's diffs as ACP shows them: the text replaced and its replacement (a whole file for
/// `Write`).
fn diffs(tool: &str, input: &Value, workspace: &Path) -> Vec<ToolCallContent> {
    let text = |value: &Value, key: &str| value.get(key).and_then(Value::as_str).map(str::to_owned);
    let Some(path) = text(input, "file_path").or_else(|| text(input, "notebook_path")) else {
        return Vec::new();
    };
    let diff = |old: Option<String>, new: String| {
        ToolCallContent::Diff(Diff::new(workspace.join(&path), new).old_text(old))
    };
    match ToolName::canonical(tool) {
        Some(ToolName::Write) => text(input, "content")
            .map(|new| vec![diff(None, new)])
            .unwrap_or_default(),
        Some(ToolName::Edit) => match text(input, "new_string") {
            Some(new) => vec![diff(text(input, "old_string"), new)],
            None => Vec::new(),
        },
        Some(ToolName::MultiEdit) => input
            .get("edits")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|edit| Some(diff(text(edit, "old_string"), text(edit, "new_string")?)))
            .collect(),
        Some(ToolName::NotebookEdit) => text(input, "new_source")
            .map(|new| vec![diff(None, new)])
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool_call(tool: &str, input: Value, decision: &str, diff: Option<&str>) -> RunEvent {
        RunEvent::ToolCall {
            agent: "main".into(),
            tool_use_id: "t1".into(),
            tool: tool.into(),
            decision: decision.into(),
            reason: "rule".into(),
            is_error: false,
            input,
            content: "done".into(),
            diff: diff.map(str::to_owned),
            sandbox: None,
        }
    }

    /// Each event's updates, as the JSON the editor receives (`sessionUpdate` and the fields
    /// a row checks).
    #[test]
    fn each_event_makes_its_updates() {
        // A relative path is shown under the workspace.
        let edit = json!({"file_path": "a.rs", "old_string": "x", "new_string": "y"});
        let rows: Vec<(&str, Vec<RunEvent>, Vec<Value>)> = vec![
            (
                "streamed text is a chunk, and its committed turn is not shown twice",
                vec![
                    RunEvent::ModelDelta {
                        agent: "main".into(),
                        turn: 1,
                        attempt: 1,
                        delta: DeltaKind::Text,
                        text: "Hel".into(),
                    },
                    RunEvent::ModelTurn {
                        agent: "main".into(),
                        turn: 1,
                        model: "m".into(),
                        provider: None,
                        mode: "default".into(),
                        stop_reason: "end_turn".into(),
                        text: "Hello".into(),
                        latency_ms: 1.0,
                        usage: Default::default(),
                        cost_usd: None,
                    },
                ],
                vec![
                    json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Hel"}}),
                ],
            ),
            (
                "a turn that did not stream (a replay) is one chunk",
                vec![RunEvent::ModelTurn {
                    agent: "main".into(),
                    turn: 2,
                    model: "m".into(),
                    provider: None,
                    mode: "default".into(),
                    stop_reason: "end_turn".into(),
                    text: "All done".into(),
                    latency_ms: 1.0,
                    usage: Default::default(),
                    cost_usd: None,
                }],
                vec![
                    json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "All done"}}),
                ],
            ),
            (
                "a started edit, then its result with a diff",
                vec![
                    RunEvent::ToolStarted {
                        agent: "main".into(),
                        tool_use_id: "t1".into(),
                        tool: "Edit".into(),
                        input: edit.clone(),
                    },
                    tool_call("Edit", edit.clone(), "allow", Some("--- a\n+++ b\n")),
                ],
                vec![
                    json!({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Edit a.rs",
                           "kind": "edit", "status": "in_progress",
                           "locations": [{"path": "/w/a.rs"}]}),
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed",
                           "content": [{"type": "diff", "path": "/w/a.rs", "oldText": "x", "newText": "y"},
                                       {"type": "content", "content": {"type": "text", "text": "done"}}]}),
                ],
            ),
            (
                "a refused call never started: one tool_call, failed, with the reason",
                vec![tool_call(
                    "Bash",
                    json!({"command": "rm -rf /"}),
                    "deny",
                    None,
                )],
                vec![
                    json!({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Bash rm -rf /",
                            "kind": "execute", "status": "failed",
                            "content": [{"type": "content", "content": {"type": "text", "text": "deny: rule\ndone"}}]}),
                ],
            ),
            (
                "a teammate's call is named after it",
                vec![RunEvent::ToolStarted {
                    agent: "alice".into(),
                    tool_use_id: "t9".into(),
                    tool: "Grep".into(),
                    input: json!({"pattern": "fn main"}),
                }],
                vec![
                    json!({"sessionUpdate": "tool_call", "title": "alice: Grep fn main", "kind": "search"}),
                ],
            ),
            (
                "the lead's mode",
                vec![RunEvent::ModeChanged {
                    agent: "main".into(),
                    mode: "plan".into(),
                    reason: "r".into(),
                }],
                vec![json!({"sessionUpdate": "current_mode_update", "currentModeId": "plan"})],
            ),
            (
                "events of no interest to the editor make nothing",
                vec![RunEvent::AgentState {
                    agent: "main".into(),
                    state: muster_protocol::event::AgentState::Idle,
                }],
                vec![],
            ),
        ];
        for (what, events, expected) in rows {
            let mut shown = Shown::default();
            let got: Vec<Value> = events
                .iter()
                .flat_map(|event| updates_for(event, &mut shown, "main", Path::new("/w"), false))
                .map(|(to, update)| {
                    assert_eq!(to, To::Session, "{what}: without threads");
                    serde_json::to_value(update).unwrap()
                })
                .collect();
            assert_eq!(got.len(), expected.len(), "{what}: {got:#?}");
            for (got, expected) in got.iter().zip(&expected) {
                for (key, value) in expected.as_object().unwrap() {
                    assert_eq!(&got[key], value, "{what}: {key} in {got:#}");
                }
            }
        }
    }

    /// With threads, a teammate's text and calls go to its thread, shown as the thread's own
    /// (no name in the title, its text as message chunks); the lead's stay on the session.
    #[test]
    fn with_threads_a_teammates_updates_go_to_its_thread() {
        let events = [
            RunEvent::ModelDelta {
                agent: "alice".into(),
                turn: 1,
                attempt: 1,
                delta: DeltaKind::Text,
                text: "On it.".into(),
            },
            RunEvent::ToolStarted {
                agent: "alice".into(),
                tool_use_id: "t9".into(),
                tool: "Grep".into(),
                input: json!({"pattern": "fn main"}),
            },
            RunEvent::ModelDelta {
                agent: "lead".into(),
                turn: 1,
                attempt: 1,
                delta: DeltaKind::Text,
                text: "Waiting.".into(),
            },
        ];
        let mut shown = Shown::default();
        let got: Vec<(To, Value)> = events
            .iter()
            .flat_map(|event| updates_for(event, &mut shown, "lead", Path::new("/w"), true))
            .map(|(to, update)| (to, serde_json::to_value(update).unwrap()))
            .collect();
        let alice = To::Thread("alice".into());
        assert_eq!(got.len(), 3, "{got:#?}");
        assert_eq!(got[0].0, alice);
        assert_eq!(got[0].1["sessionUpdate"], "agent_message_chunk");
        assert_eq!(got[0].1["content"]["text"], "On it.");
        assert_eq!(got[1].0, alice);
        assert_eq!(got[1].1["title"], "Grep fn main");
        assert_eq!(got[2].0, To::Session);
        assert_eq!(got[2].1["content"]["text"], "Waiting.");
    }
}
