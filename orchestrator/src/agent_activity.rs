//! What an agent of a run is doing and has done, read from its committed records only: its
//! state now, its current activity in words, its spans of time (waiting on the model, running
//! tools, waiting on a decision), its newest worktree checkpoint and the mode an approval that
//! restores its own would give. `muster serve`'s run page and timeline and `muster runs --json`
//! read the same figures. Nothing decides on them: they describe committed state.

use muster_agents::model::{ContentBlock, Role};
use muster_agents::runtime::Record;
use muster_config::PermissionMode;
use muster_mailbox::{AgentRecord, RequestRecord, UnixMillis};
use serde::Serialize;
use serde_json::Value;

use crate::display::cut;

/// What an agent is doing, as its records show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentState {
    /// On the roster, no record yet.
    NotStarted,
    /// Waiting on the model.
    Thinking,
    CallingTool,
    WaitingOnDecision,
    Idle,
    Done,
    Failed,
    Stopped,
}

impl AgentState {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentState::NotStarted => "not started",
            AgentState::Thinking => "thinking",
            AgentState::CallingTool => "calling a tool",
            AgentState::WaitingOnDecision => "waiting on a decision",
            AgentState::Idle => "idle",
            AgentState::Done => "done",
            AgentState::Failed => "failed",
            AgentState::Stopped => "stopped",
        }
    }

    /// A CSS class name (no spaces).
    pub fn class(self) -> &'static str {
        match self {
            AgentState::NotStarted => "not-started",
            AgentState::Thinking => "thinking",
            AgentState::CallingTool => "calling-tool",
            AgentState::WaitingOnDecision => "waiting",
            AgentState::Idle => "idle",
            AgentState::Done => "done",
            AgentState::Failed => "failed",
            AgentState::Stopped => "stopped",
        }
    }
}

/// What a span of an agent's time went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SpanKind {
    Model,
    Tool,
    Decision,
}

/// A span of an agent's time; `open` when it has not ended yet (its end is "now").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub kind: SpanKind,
    pub start: UnixMillis,
    pub end: UnixMillis,
    pub open: bool,
    pub label: String,
}

/// The time an agent spent waiting on the model, on its tools and on decisions, in ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Waits {
    pub model_ms: u64,
    pub tools_ms: u64,
    pub decisions_ms: u64,
}

impl Waits {
    pub fn of(spans: &[Span]) -> Waits {
        let mut waits = Waits::default();
        for span in spans {
            let ms = u64::try_from(span.end.saturating_sub(span.start)).unwrap_or(0);
            match span.kind {
                SpanKind::Model => waits.model_ms += ms,
                SpanKind::Tool => waits.tools_ms += ms,
                SpanKind::Decision => waits.decisions_ms += ms,
            }
        }
        waits
    }

    pub fn add(&mut self, other: Waits) {
        self.model_ms += other.model_ms;
        self.tools_ms += other.tools_ms;
        self.decisions_ms += other.decisions_ms;
    }
}

/// An agent's activity as its records show it.
#[derive(Debug, Clone, PartialEq)]
pub struct Activity {
    pub state: AgentState,
    /// What it is doing or last did, in words.
    pub doing: String,
    pub spans: Vec<Span>,
    /// Its newest worktree checkpoint (a commit id), when it works in a worktree.
    pub checkpoint: Option<String>,
    /// The mode an approval that restores the agent's own would give it (before the auto
    /// gate and any approver's ceiling).
    pub restores: PermissionMode,
}

/// Reads an agent's transcript records (in order). `live`: the run's process holds it, so an
/// unfinished span runs until `now`; otherwise unfinished spans are dropped and the state is
/// the one it stopped in.
pub fn read(
    records: &[AgentRecord],
    requests: &[RequestRecord],
    live: bool,
    now: UnixMillis,
) -> Activity {
    let mut walk = Walk::default();
    for row in records {
        if let Ok(record) = Record::from_stored(row) {
            walk.step(&record, row.created_at, requests);
        }
    }
    walk.finish(live, now)
}

#[derive(Default)]
struct Walk {
    state: Option<AgentState>,
    doing: String,
    spans: Vec<Span>,
    /// When the current model request was sent (the commit before it).
    since: UnixMillis,
    /// The current batch of tool calls: when it started and which calls have no result yet.
    tools_since: Option<UnixMillis>,
    pending: Vec<String>,
    /// The decision waited on: its request, since when.
    awaiting: Option<(String, UnixMillis)>,
    checkpoint: Option<String>,
    pre_plan_mode: Option<PermissionMode>,
}

impl Walk {
    fn step(&mut self, record: &Record, at: UnixMillis, requests: &[RequestRecord]) {
        match record {
            Record::Started { pre_plan_mode, .. } => {
                self.pre_plan_mode = *pre_plan_mode;
                self.set(AgentState::Thinking, "started".into(), at);
            }
            Record::Message { message, .. } if message.role == Role::Assistant => {
                self.span(SpanKind::Model, self.since, at, "model".into());
                let calls: Vec<(&str, String)> = message
                    .content
                    .iter()
                    .filter_map(|block| match block {
                        ContentBlock::ToolUse { id, name, input } => {
                            Some((id.as_str(), tool_summary(name, input)))
                        }
                        _ => None,
                    })
                    .collect();
                if calls.is_empty() {
                    let said = first_text(&message.content);
                    self.set(AgentState::Thinking, format!("wrote: {said}"), at);
                } else {
                    let doing = calls
                        .iter()
                        .map(|(_, summary)| summary.as_str())
                        .collect::<Vec<_>>()
                        .join("; ");
                    self.pending = calls.iter().map(|(id, _)| (*id).to_owned()).collect();
                    self.tools_since = Some(at);
                    self.set(AgentState::CallingTool, doing, at);
                }
            }
            Record::Message { .. } => {
                self.end_tools(at);
                self.set(AgentState::Thinking, "waiting on the model".into(), at);
            }
            Record::ToolCall { tool_use_id, .. } => {
                self.pending.retain(|id| id != tool_use_id);
                if self.pending.is_empty() {
                    self.end_tools(at);
                    self.set(AgentState::Thinking, "waiting on the model".into(), at);
                }
            }
            Record::Awaiting {
                request_id,
                responder,
                ..
            } => self.await_decision(request_id, responder, at, requests),
            Record::Compacted { .. } => {
                self.span(SpanKind::Model, self.since, at, "compaction".into());
                self.since = at;
            }
            Record::Finished { result } => {
                self.end_tools(at);
                let said = cut(result.lines().next().unwrap_or_default(), 100).0;
                self.set(AgentState::Idle, format!("finished: {said}"), at);
            }
            Record::TurnInterrupted { reason } => {
                self.end_tools(at);
                self.pending.clear();
                self.set(AgentState::Idle, format!("turn interrupted: {reason}"), at);
            }
            Record::HookStopped { event, reason } => {
                self.end_tools(at);
                self.pending.clear();
                self.set(
                    AgentState::Idle,
                    format!("stopped by a {event} hook: {reason}"),
                    at,
                );
            }
            Record::Mode { pre_plan_mode, .. } => self.pre_plan_mode = *pre_plan_mode,
            Record::Checkpoint { commit, .. } => self.checkpoint = Some(commit.clone()),
            _ => {}
        }
    }

    /// `ExitPlanMode` and person-answered calls wait inside a tool call: the tool's span
    /// stops while the decision's runs, and starts again when it was answered.
    fn await_decision(
        &mut self,
        request_id: &str,
        responder: &str,
        at: UnixMillis,
        requests: &[RequestRecord],
    ) {
        if let Some(start) = self.tools_since.take() {
            self.span(SpanKind::Tool, start, at, "tools".into());
        }
        let decided = requests
            .iter()
            .find(|r| r.request_id == request_id)
            .and_then(|r| r.response.as_ref())
            .map(|response| response.decided_at);
        match decided {
            Some(end) => {
                self.span(SpanKind::Decision, at, end, request_id.to_owned());
                self.tools_since = Some(end);
                self.since = end;
            }
            None => {
                self.awaiting = Some((request_id.to_owned(), at));
                self.state = Some(AgentState::WaitingOnDecision);
                self.doing = format!("waiting on {request_id} ({responder})");
            }
        }
    }

    fn end_tools(&mut self, at: UnixMillis) {
        self.pending.clear();
        if let Some(start) = self.tools_since.take() {
            self.span(SpanKind::Tool, start, at, "tools".into());
        }
    }

    fn set(&mut self, state: AgentState, doing: String, at: UnixMillis) {
        self.state = Some(state);
        self.doing = doing;
        self.since = at;
        self.awaiting = None;
    }

    fn span(&mut self, kind: SpanKind, start: UnixMillis, end: UnixMillis, label: String) {
        if end >= start && start > 0 {
            self.spans.push(Span {
                kind,
                start,
                end,
                open: false,
                label,
            });
        }
    }

    fn finish(mut self, live: bool, now: UnixMillis) -> Activity {
        let state = self.state.unwrap_or(AgentState::NotStarted);
        if live {
            let open = match (state, &self.awaiting, self.tools_since) {
                (AgentState::WaitingOnDecision, Some((request, since)), _) => {
                    Some((SpanKind::Decision, *since, request.clone()))
                }
                (AgentState::CallingTool, _, Some(since)) => {
                    Some((SpanKind::Tool, since, "tools".to_owned()))
                }
                (AgentState::Thinking, _, _) => Some((SpanKind::Model, self.since, "model".into())),
                _ => None,
            };
            if let Some((kind, start, label)) = open
                && now >= start
            {
                self.spans.push(Span {
                    kind,
                    start,
                    end: now,
                    open: true,
                    label,
                });
            }
        }
        let restores = self
            .pre_plan_mode
            .filter(|mode| *mode != PermissionMode::Plan)
            .unwrap_or_default();
        Activity {
            state,
            doing: self.doing,
            spans: self.spans,
            checkpoint: self.checkpoint,
            restores,
        }
    }
}

/// The time each agent of a run spent waiting on the model, on tools and on decisions, and
/// the run's sums (what `muster runs --json` prints under `waits`; the run page's timeline
/// draws the same spans). `live`: a process holds the run, so unfinished spans count to now.
pub async fn run_waits(
    store: &dyn muster_mailbox::MailboxStore,
    run_id: &str,
    live: bool,
    now: UnixMillis,
) -> muster_mailbox::StoreResult<(Waits, std::collections::BTreeMap<String, Waits>)> {
    let requests = store.requests(run_id).await?;
    let mut total = Waits::default();
    let mut agents = std::collections::BTreeMap::new();
    for member in store.roster(run_id).await? {
        let records = store
            .records(run_id, &member.agent, muster_agents::runtime::TRANSCRIPT, 0)
            .await?;
        if records.is_empty() {
            continue;
        }
        let waits = Waits::of(&read(&records, &requests, live, now).spans);
        total.add(waits);
        agents.insert(member.agent, waits);
    }
    Ok((total, agents))
}

/// A tool call in a few words: the command, the path or the pattern it names.
pub fn tool_summary(name: &str, input: &Value) -> String {
    let named = [
        "command",
        "file_path",
        "path",
        "pattern",
        "url",
        "name",
        "subject",
    ]
    .iter()
    .find_map(|key| input.get(*key).and_then(Value::as_str));
    match named {
        Some(what) => format!(
            "{name} {}",
            cut(what.lines().next().unwrap_or_default(), 80).0
        ),
        None => name.to_owned(),
    }
}

fn first_text(content: &[ContentBlock]) -> String {
    let text = content
        .iter()
        .find_map(|block| match block {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .unwrap_or_default();
    cut(text.lines().next().unwrap_or_default(), 100).0
}

#[cfg(test)]
mod tests {
    use muster_agents::model::Message;
    use muster_mailbox::{MessageBody, ResponseRecord};
    use serde_json::json;

    use super::*;

    fn row(at: UnixMillis, record: Record) -> AgentRecord {
        AgentRecord {
            run_id: "r".into(),
            agent: "alice".into(),
            stream: "transcript".into(),
            seq: at,
            body: serde_json::to_value(&record).unwrap(),
            created_at: at,
        }
    }

    fn started(mode: Option<PermissionMode>) -> Record {
        Record::Started {
            definition: "d".into(),
            agent_kind: muster_agents::runtime::AgentKind::Main,
            mode: PermissionMode::Plan,
            pre_plan_mode: mode,
            plan_file: None,
            system: String::new(),
            tools: Vec::new(),
            mcp_tools: Vec::new(),
            model_limits: Default::default(),
            endpoint: None,
        }
    }

    fn message(role: Role, content: Vec<ContentBlock>) -> Record {
        Record::Message {
            message: Message { role, content },
            turn: None,
            model: None,
            mode: PermissionMode::Default,
            stop_reason: None,
            usage: None,
            cost_usd: None,
        }
    }

    fn bash(id: &str) -> ContentBlock {
        ContentBlock::ToolUse {
            id: id.into(),
            name: "Bash".into(),
            input: json!({"command": "cargo test\nmore"}),
        }
    }

    fn awaiting(id: &str) -> Record {
        Record::Awaiting {
            request_id: id.into(),
            tool_use_id: "t".into(),
            responder: "human".into(),
        }
    }

    fn answered(id: &str, at: UnixMillis) -> RequestRecord {
        let body = MessageBody::from_tagged(&json!({"type": "plan_approval_request",
            "request_id": id, "plan_file": "p", "plan": "x", "responder": "human"}));
        let response = MessageBody::from_tagged(&json!({"type": "plan_approval_response",
            "request_id": id, "approved": true}));
        RequestRecord {
            run_id: "r".into(),
            request_id: id.into(),
            kind: body.kind(),
            requester: "alice".into(),
            recipient: "lead".into(),
            responder: "human".into(),
            message_key: id.into(),
            body,
            created_at: at,
            response: Some(ResponseRecord {
                responder: "human".into(),
                kind: response.kind(),
                message_key: "k".into(),
                body: response,
                decided_at: at,
            }),
        }
    }

    /// Each way a transcript can end, and the state, words and open span it leaves.
    #[test]
    fn the_newest_records_say_what_an_agent_is_doing() {
        let user = || message(Role::User, vec![ContentBlock::text("go")]);
        type Case = (
            &'static str,
            Vec<Record>,
            AgentState,
            &'static str,
            Option<SpanKind>,
        );
        let table: Vec<Case> = vec![
            ("nothing", vec![], AgentState::NotStarted, "", None),
            (
                "asked the model",
                vec![started(None), user()],
                AgentState::Thinking,
                "waiting on the model",
                Some(SpanKind::Model),
            ),
            (
                "running a command",
                vec![
                    started(None),
                    user(),
                    message(Role::Assistant, vec![bash("t1")]),
                ],
                AgentState::CallingTool,
                "Bash cargo test",
                Some(SpanKind::Tool),
            ),
            (
                "waiting on a person",
                vec![
                    started(None),
                    user(),
                    message(Role::Assistant, vec![bash("t")]),
                    awaiting("plan-alice-1"),
                ],
                AgentState::WaitingOnDecision,
                "waiting on plan-alice-1 (human)",
                Some(SpanKind::Decision),
            ),
            (
                "finished",
                vec![
                    started(None),
                    user(),
                    message(Role::Assistant, vec![ContentBlock::text("Done.")]),
                    Record::Finished {
                        result: "Wrote it.\nmore".into(),
                    },
                ],
                AgentState::Idle,
                "finished: Wrote it.",
                None,
            ),
        ];
        for (what, records, state, doing, open) in table {
            let rows: Vec<AgentRecord> = records
                .into_iter()
                .enumerate()
                .map(|(i, r)| row(1000 + 10 * i as i64, r))
                .collect();
            let activity = read(&rows, &[], true, 2000);
            assert_eq!(activity.state, state, "{what}");
            assert_eq!(activity.doing, doing, "{what}");
            let open_kind = activity.spans.iter().find(|s| s.open).map(|s| s.kind);
            assert_eq!(open_kind, open, "{what}");
            let stopped = read(&rows, &[], false, 2000);
            assert!(stopped.spans.iter().all(|s| !s.open), "{what}");
        }
    }

    /// Time waiting on a decision counts as the decision's, not the tool's that waited.
    #[test]
    fn a_decided_wait_splits_the_tool_call_around_it() {
        let rows = vec![
            row(1000, started(Some(PermissionMode::AcceptEdits))),
            row(1010, message(Role::User, vec![ContentBlock::text("go")])),
            row(1100, message(Role::Assistant, vec![bash("t")])),
            row(1120, awaiting("plan-alice-1")),
            row(
                1600,
                Record::ToolCall {
                    tool_use_id: "t".into(),
                    tool: "ExitPlanMode".into(),
                    decision: "allow".into(),
                    reason: String::new(),
                    content: String::new(),
                    is_error: false,
                },
            ),
        ];
        let activity = read(&rows, &[answered("plan-alice-1", 1500)], false, 9999);
        assert_eq!(
            Waits::of(&activity.spans),
            Waits {
                model_ms: 90,
                tools_ms: 20 + 100,
                decisions_ms: 380
            }
        );
        assert_eq!(activity.restores, PermissionMode::AcceptEdits);
        assert_eq!(activity.state, AgentState::Thinking);
    }
}
