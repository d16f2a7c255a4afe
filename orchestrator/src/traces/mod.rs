//! One trace per run (OpenTelemetry GenAI spans over OTLP/HTTP), made from the run's events —
//! each of which follows the commit it reports — with ids derived from the store's keys
//! ([`muster_agents::trace_ids`]), so a resume, a teammate on a worker and a re-sent request
//! continue the same trace with the same ids. Off unless the user turns it on
//! ([`config::TraceConfig`]); `docs/traces.md` lists the spans and their attributes.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use muster_agents::runtime::{AgentKind, Record, RunEvent, TRANSCRIPT};
use muster_agents::trace_ids::{RunTrace, SpanKey, TraceParent, hex};
use muster_mailbox::{MailboxStore, MemberKind, RosterEntry, RunStatus};
use muster_protocol::ToolName;
use muster_protocol::event::DecisionSubject;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue, Value as OtelValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

pub mod config;
mod cut;
mod from_records;
pub mod queue;

use config::TraceConfig;
use queue::{SentNotes, SpanQueue};

/// How long a run's end waits at most for its last spans to be sent (a collector that is
/// down or slow is waited for much less, see [`queue::SpanQueue::flush`]).
pub const FINAL_FLUSH: Duration = Duration::from_millis(1500);

/// A run's traces: turns its events into spans and queues them.
pub struct RunTraces {
    trace: RunTrace,
    content: bool,
    /// The providers of the run's plan and act modes (`gen_ai.provider.name`).
    plan_provider: String,
    act_provider: String,
    queue: SpanQueue,
    sent: Option<SentNotes>,
    scope: InstrumentationScope,
    started: Mutex<Starts>,
}

/// When things this process saw begin (the events that end them carry no start).
#[derive(Default)]
struct Starts {
    tools: HashMap<(String, String), SystemTime>,
    requests: HashMap<String, SystemTime>,
    agents: HashMap<String, SystemTime>,
}

/// What a run's traces are built from.
pub struct TraceParts<'a> {
    pub config: &'a TraceConfig,
    pub run_id: &'a str,
    /// The `TRACEPARENT` stored with the run.
    pub parent: Option<TraceParent>,
    /// Where the ids of the spans sent are noted (`.muster/runs/<run>.traces`, or the
    /// store for a teammate on a worker).
    pub sent: Option<SentNotes>,
    pub plan_provider: &'a str,
    pub act_provider: &'a str,
}

impl RunTraces {
    /// Starts the queue's sending task on the current tokio runtime.
    pub fn start(parts: TraceParts<'_>) -> anyhow::Result<RunTraces> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .build()?;
        Ok(RunTraces {
            trace: RunTrace::new(parts.run_id, parts.parent),
            content: parts.config.content,
            plan_provider: parts.plan_provider.to_owned(),
            act_provider: parts.act_provider.to_owned(),
            queue: SpanQueue::start(parts.config, client, parts.sent.clone())?,
            sent: parts.sent,
            scope: InstrumentationScope::builder("muster")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
            started: Mutex::new(Starts::default()),
        })
    }

    /// The run's trace (for `Bash`'s `TRACEPARENT`).
    pub fn run_trace(&self) -> &RunTrace {
        &self.trace
    }

    /// On a resume: the spans of the events an earlier process logged (`log`, the run's
    /// `.muster/logs/<run>.jsonl`, written right after each commit) that it did not get to
    /// send before it stopped — a kill -9 leaves what was queued unsent. Their ends are the
    /// logged times; the ids are the same whichever process sends them. Then, for the agents
    /// that ran here (their start is in the log), what their records hold and the log lacks
    /// (a kill between a commit and its line), and a span marked interrupted for each attempt
    /// the kill cut (see [`cut`]). Read before this process commits anything.
    pub async fn send_unsent(&self, log: &Path, store: &dyn MailboxStore) {
        let sent = self.sent_ids().await;
        let Ok(text) = std::fs::read_to_string(log) else {
            return;
        };
        let mut spans = Vec::new();
        let mut cut = cut::CutAttempts::default();
        let mut local = BTreeSet::new();
        for line in text.lines() {
            let Some((event, at)) = logged_event(line, self.trace.run_id()) else {
                continue;
            };
            if let RunEvent::AgentStarted { agent, .. } = &event {
                local.insert(agent.clone());
            }
            cut.see(&event, at);
            spans.extend(self.span_of(&event, at));
        }
        let logged: HashSet<SpanId> = spans.iter().map(|s| s.span_context.span_id()).collect();
        let mut committed = HashMap::new();
        for agent in local {
            let Ok(rows) = store
                .records(self.trace.run_id(), &agent, TRANSCRIPT, 0)
                .await
            else {
                continue;
            };
            let found = from_records::Committed::read(&agent, &rows);
            let unlogged = self
                .committed_spans(&agent, &found)
                .into_iter()
                .filter(|span| !logged.contains(&span.span_context.span_id()));
            spans.extend(unlogged.collect::<Vec<_>>());
            committed.insert(agent, found);
        }
        spans.extend(self.cut_spans(&cut, &committed));
        self.push_unsent(spans, &sent);
    }

    /// The spans of what `agent` committed, as its records say.
    fn committed_spans(&self, agent: &str, committed: &from_records::Committed) -> Vec<SpanData> {
        let mut spans = Vec::new();
        for (start, event, end) in &committed.events {
            if let (Some(start), RunEvent::ToolCall { tool_use_id, .. }) = (start, event) {
                self.starts()
                    .tools
                    .insert((agent.to_owned(), tool_use_id.clone()), *start);
            }
            spans.extend(self.span_of(event, *end));
        }
        spans
    }

    /// The ids noted as sent so far.
    async fn sent_ids(&self) -> HashSet<String> {
        match &self.sent {
            Some(sent) => sent.sent_ids().await,
            None => HashSet::new(),
        }
    }

    /// Queues those of `spans` not noted as sent.
    fn push_unsent(&self, spans: Vec<SpanData>, sent: &HashSet<String>) {
        let mut resent = 0u64;
        for span in spans {
            if !sent.contains(&hex(&span.span_context.span_id().to_bytes())) {
                self.queue.push(span);
                resent += 1;
            }
        }
        tracing::info!(target: "muster::traces", resent, "spans of the earlier process queued again");
    }

    /// On a worker that takes over a teammate whose earlier worker was killed: the spans of
    /// what the teammate (and its subagents) committed that no worker noted as sent — rebuilt
    /// from its records, since the killed worker's run log is on its own machine — and a span
    /// marked interrupted for each call it started and never finished (a `tool_started`
    /// record without `tool_call`). Read before this worker commits anything for it.
    pub async fn send_unsent_of_teammate(
        &self,
        store: &dyn MailboxStore,
        teammate: &str,
        roster: &[RosterEntry],
    ) {
        let sent = self.sent_ids().await;
        let run_id = self.trace.run_id().to_owned();
        let mut spans = Vec::new();
        let subagent_prefix = format!("{teammate}.");
        let agents = roster
            .iter()
            .map(|entry| entry.agent.as_str())
            .filter(|agent| *agent == teammate || agent.starts_with(&subagent_prefix));
        for agent in agents {
            let Ok(rows) = store.records(&run_id, agent, TRANSCRIPT, 0).await else {
                continue;
            };
            let committed = from_records::Committed::read(agent, &rows);
            spans.extend(self.committed_spans(agent, &committed));
            for (tool_use_id, (start, tool)) in &committed.unfinished {
                let end = committed.last.unwrap_or(*start).max(*start);
                spans.push(self.cut_tool_span(agent, tool_use_id, tool, (*start, end)));
            }
        }
        self.push_unsent(spans, &sent);
    }

    /// The spans of the attempts in `cut`: each from its start to the last moment the killed
    /// process was seen alive, status error, `error.type = "interrupted"`. An attempt whose
    /// result the store holds (committed, its line never logged) was not cut.
    fn cut_spans(
        &self,
        cut: &cut::CutAttempts,
        committed: &HashMap<String, from_records::Committed>,
    ) -> Vec<SpanData> {
        let end = cut.last_seen.unwrap_or_else(SystemTime::now);
        let mut spans = Vec::new();
        for (agent, start) in &cut.chats {
            let Some(stored) = committed.get(agent) else {
                continue;
            };
            let logged_turn = cut.models.get(agent).map_or(0, |(_, _, turn)| *turn);
            if stored.answered_turn > logged_turn {
                continue;
            }
            let turn = stored.next_turn;
            let mut attributes = self.common("chat", agent);
            attributes.push(KeyValue::new("muster.turn", turn as i64));
            let mut name = "chat".to_owned();
            if let Some((model, provider, _)) = cut.models.get(agent) {
                name = format!("chat {model}");
                attributes.push(KeyValue::new("gen_ai.request.model", model.clone()));
                if let Some(provider) = provider {
                    attributes.push(KeyValue::new("gen_ai.provider.name", provider.clone()));
                }
            }
            attributes.push(KeyValue::new("error.type", INTERRUPTED));
            spans.push(self.span(
                name,
                SpanKey::CutChat(agent, turn),
                Some(SpanKey::Agent(agent)),
                SpanKind::Client,
                (*start, end),
                attributes,
                Status::error(CUT),
            ));
        }
        for ((agent, tool_use_id), (start, tool)) in &cut.tools {
            let finished = committed
                .get(agent)
                .is_some_and(|stored| stored.finished.contains(tool_use_id));
            if !finished {
                spans.push(self.cut_tool_span(agent, tool_use_id, tool, (*start, end)));
            }
        }
        spans
    }

    /// The span of a tool call attempt a kill cut.
    fn cut_tool_span(
        &self,
        agent: &str,
        tool_use_id: &str,
        tool: &str,
        (start, end): (SystemTime, SystemTime),
    ) -> SpanData {
        let mut attributes = self.common("execute_tool", agent);
        attributes.extend([
            KeyValue::new("gen_ai.tool.name", tool.to_owned()),
            KeyValue::new("gen_ai.tool.call.id", tool_use_id.to_owned()),
            KeyValue::new("error.type", INTERRUPTED),
        ]);
        self.span(
            format!("execute_tool {tool}"),
            SpanKey::CutTool(agent, tool_use_id),
            Some(SpanKey::Agent(agent)),
            SpanKind::Internal,
            (start, end),
            attributes,
            Status::error(CUT),
        )
    }

    /// Turns an event into the span it ends, if any, and queues it.
    pub fn event(&self, event: &RunEvent) {
        let now = SystemTime::now();
        if let Some(span) = self.span_of(event, now) {
            self.queue.push(span);
        }
    }

    fn starts(&self) -> std::sync::MutexGuard<'_, Starts> {
        self.started
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn span_of(&self, event: &RunEvent, now: SystemTime) -> Option<SpanData> {
        match event {
            RunEvent::AgentStarted { agent, .. } => {
                self.starts().agents.entry(agent.clone()).or_insert(now);
                None
            }
            RunEvent::ToolStarted {
                agent, tool_use_id, ..
            } => {
                self.starts()
                    .tools
                    .insert((agent.clone(), tool_use_id.clone()), now);
                None
            }
            RunEvent::ApprovalRequested { request_id, .. } => {
                self.starts().requests.insert(request_id.clone(), now);
                None
            }
            // A request another process committed (a teammate's on a worker): its commit was
            // `queued_ms` before this delivery.
            RunEvent::MailDelivered {
                request_id: Some(request_id),
                kind,
                queued_ms,
                ..
            } if kind.is_request() => {
                let committed = now
                    .checked_sub(Duration::from_millis((*queued_ms).max(0) as u64))
                    .unwrap_or(now);
                self.starts()
                    .requests
                    .entry(request_id.clone())
                    .or_insert(committed);
                None
            }
            RunEvent::ModelTurn {
                agent,
                turn,
                model,
                provider,
                mode,
                stop_reason,
                text,
                latency_ms,
                usage,
                cost_usd,
            } => {
                let start = now
                    .checked_sub(Duration::from_secs_f64(latency_ms.max(0.0) / 1000.0))
                    .unwrap_or(now);
                // The provider that answered (the agent's own endpoint's, per agent); a line
                // logged before events carried it falls back to the run's for the mode.
                let provider = provider.as_ref().unwrap_or(match mode.as_str() {
                    "plan" => &self.plan_provider,
                    _ => &self.act_provider,
                });
                let mut attributes = self.common("chat", agent);
                attributes.extend([
                    KeyValue::new("gen_ai.provider.name", provider.clone()),
                    KeyValue::new("gen_ai.request.model", model.clone()),
                    KeyValue::new("gen_ai.response.model", model.clone()),
                    KeyValue::new(
                        "gen_ai.response.finish_reasons",
                        OtelValue::Array(
                            vec![opentelemetry::StringValue::from(stop_reason.clone())].into(),
                        ),
                    ),
                    KeyValue::new("gen_ai.usage.input_tokens", usage.input_tokens as i64),
                    KeyValue::new("gen_ai.usage.output_tokens", usage.output_tokens as i64),
                    KeyValue::new(
                        "gen_ai.usage.cache_read.input_tokens",
                        usage.cache_read_input_tokens as i64,
                    ),
                    KeyValue::new(
                        "gen_ai.usage.cache_creation.input_tokens",
                        usage.cache_creation_input_tokens as i64,
                    ),
                    KeyValue::new("muster.turn", *turn as i64),
                    KeyValue::new("muster.permission_mode", mode.clone()),
                ]);
                if let Some(cost) = cost_usd {
                    attributes.push(KeyValue::new("muster.cost_usd", *cost));
                }
                if self.content {
                    attributes.push(KeyValue::new("muster.response.text", text.clone()));
                }
                Some(self.span(
                    format!("chat {model}"),
                    SpanKey::Chat(agent, *turn),
                    Some(SpanKey::Agent(agent)),
                    SpanKind::Client,
                    (start, now),
                    attributes,
                    Status::Unset,
                ))
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
                sandbox,
                ..
            } => {
                let start = self
                    .starts()
                    .tools
                    .remove(&(agent.clone(), tool_use_id.clone()))
                    .unwrap_or(now);
                let mut attributes = self.common("execute_tool", agent);
                attributes.extend([
                    KeyValue::new("gen_ai.tool.name", tool.clone()),
                    KeyValue::new("gen_ai.tool.call.id", tool_use_id.clone()),
                    KeyValue::new("muster.permission.decision", decision.clone()),
                ]);
                if let Some(profile) = sandbox {
                    attributes.push(KeyValue::new("muster.sandbox.profile", profile.clone()));
                }
                if let Some(exit) = exit_status(tool, content) {
                    attributes.push(KeyValue::new("muster.tool.exit_status", exit));
                }
                if self.content {
                    attributes.extend([
                        KeyValue::new("muster.permission.reason", reason.clone()),
                        KeyValue::new("gen_ai.tool.call.arguments", input.to_string()),
                        KeyValue::new("gen_ai.tool.call.result", content.clone()),
                    ]);
                }
                let status = match (*is_error, decision.as_str()) {
                    (_, "deny" | "ask" | "invalid") => {
                        attributes.push(KeyValue::new("error.type", "permission_denied"));
                        Status::error(format!("not allowed: {decision}"))
                    }
                    (true, _) => {
                        attributes.push(KeyValue::new("error.type", "tool_error"));
                        Status::error("the tool reported an error")
                    }
                    (false, _) => Status::Unset,
                };
                Some(self.span(
                    format!("execute_tool {tool}"),
                    SpanKey::Tool(agent, tool_use_id),
                    Some(SpanKey::Agent(agent)),
                    SpanKind::Internal,
                    (start, now),
                    attributes,
                    status,
                ))
            }
            RunEvent::ApprovalDecided {
                agent,
                request_id,
                responder,
                approved,
                subject,
            } => {
                let requested = self.starts().requests.remove(request_id);
                let start = requested.unwrap_or(now);
                let (kind, operation) = match subject {
                    DecisionSubject::PlanApprovalRequest { .. } => {
                        ("plan_approval_request", "plan")
                    }
                    DecisionSubject::Merge { .. } => ("merge", "merge"),
                };
                let mut attributes = self.common(operation, agent);
                attributes.extend([
                    KeyValue::new("muster.request.id", request_id.clone()),
                    KeyValue::new("muster.request.kind", kind),
                    KeyValue::new("muster.decision.responder", responder.clone()),
                    KeyValue::new("muster.decision.approved", *approved),
                ]);
                if requested.is_some() {
                    let waited = now.duration_since(start).unwrap_or_default();
                    attributes.push(KeyValue::new(
                        "muster.decision.wait_ms",
                        waited.as_millis() as i64,
                    ));
                }
                match subject {
                    DecisionSubject::PlanApprovalRequest { mode: Some(mode) } => {
                        attributes.push(KeyValue::new("muster.decision.mode", mode.clone()));
                    }
                    DecisionSubject::Merge { feedback, rule } => {
                        if let Some(rule) = rule {
                            attributes.push(KeyValue::new("muster.decision.rule", rule.clone()));
                        }
                        if let (true, Some(feedback)) = (self.content, feedback) {
                            attributes
                                .push(KeyValue::new("muster.decision.feedback", feedback.clone()));
                        }
                    }
                    DecisionSubject::PlanApprovalRequest { mode: None } => {}
                }
                Some(self.span(
                    format!("{operation} {request_id}"),
                    SpanKey::Decision(request_id),
                    Some(SpanKey::Agent(agent)),
                    SpanKind::Internal,
                    (start, now),
                    attributes,
                    Status::Unset,
                ))
            }
            _ => None,
        }
    }

    /// Attributes every span of an agent carries.
    fn common(&self, operation: &'static str, agent: &str) -> Vec<KeyValue> {
        vec![
            KeyValue::new("gen_ai.operation.name", operation),
            KeyValue::new("gen_ai.conversation.id", self.trace.run_id().to_owned()),
            KeyValue::new("gen_ai.agent.id", agent.to_owned()),
            KeyValue::new("gen_ai.agent.name", agent.to_owned()),
        ]
    }

    #[allow(
        clippy::too_many_arguments,
        reason = "one span's parts, named at each call"
    )]
    fn span(
        &self,
        name: String,
        key: SpanKey<'_>,
        parent: Option<SpanKey<'_>>,
        kind: SpanKind,
        (start, end): (SystemTime, SystemTime),
        attributes: Vec<KeyValue>,
        status: Status,
    ) -> SpanData {
        let (parent_span_id, remote) = match (parent, self.trace.parent()) {
            (Some(parent), _) => (SpanId::from_bytes(self.trace.span_id(parent)), false),
            (None, Some(outside)) => (SpanId::from_bytes(outside.span_id), true),
            (None, None) => (SpanId::INVALID, false),
        };
        SpanData {
            span_context: SpanContext::new(
                TraceId::from_bytes(self.trace.trace_id()),
                SpanId::from_bytes(self.trace.span_id(key)),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id,
            parent_span_is_remote: remote,
            span_kind: kind,
            name: name.into(),
            start_time: start,
            end_time: end.max(start),
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status,
            instrumentation_scope: self.scope.clone(),
        }
    }

    /// The run's end: when it is over (not stopped to be resumed), its `invoke_workflow`
    /// span and each agent's `invoke_agent` span, from their stored start; then waits at most
    /// [`FINAL_FLUSH`] for what is queued, and logs what was sent and dropped.
    pub async fn finish(
        &self,
        status: RunStatus,
        created_at_ms: i64,
        roster: &[RosterEntry],
        team: Option<&str>,
        store: &dyn MailboxStore,
    ) {
        let now = SystemTime::now();
        let run_start = UNIX_EPOCH + Duration::from_millis(created_at_ms.max(0) as u64);
        let over = matches!(
            status,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Budget
        );
        if over {
            let started = stored_starts(store, self.trace.run_id(), roster).await;
            let failed = status != RunStatus::Completed;
            let lead = roster
                .iter()
                .find(|entry| entry.kind == MemberKind::Lead)
                .map(|entry| entry.agent.clone());
            for entry in roster {
                let parent = match entry.kind {
                    MemberKind::Lead => SpanKey::Run,
                    MemberKind::Teammate => match &lead {
                        Some(lead) => SpanKey::Agent(lead),
                        None => SpanKey::Run,
                    },
                    MemberKind::Subagent => match (
                        &entry.parent,
                        started
                            .get(&entry.agent)
                            .and_then(|(_, call)| call.as_ref()),
                    ) {
                        (Some(parent), Some(call)) => SpanKey::Tool(parent, call),
                        (Some(parent), None) => SpanKey::Agent(parent),
                        (None, _) => SpanKey::Run,
                    },
                    MemberKind::Human | MemberKind::Policy => continue,
                };
                // Its `started` record's commit; else when this process saw it start.
                let start = started
                    .get(&entry.agent)
                    .map(|(at, _)| *at)
                    .or_else(|| self.starts().agents.get(&entry.agent).copied())
                    .unwrap_or(run_start);
                let mut attributes = self.common("invoke_agent", &entry.agent);
                attributes.push(KeyValue::new("muster.agent.kind", entry.kind.as_str()));
                if let Some(definition) = &entry.definition {
                    attributes.push(KeyValue::new("muster.agent.definition", definition.clone()));
                }
                let span = self.span(
                    format!("invoke_agent {}", entry.agent),
                    SpanKey::Agent(&entry.agent),
                    Some(parent),
                    SpanKind::Internal,
                    (start, now),
                    attributes,
                    Status::Unset,
                );
                self.queue.push(span);
            }
            let mut attributes = vec![
                KeyValue::new("gen_ai.operation.name", "invoke_workflow"),
                KeyValue::new("gen_ai.conversation.id", self.trace.run_id().to_owned()),
                KeyValue::new("muster.run.status", status.as_str()),
            ];
            if let Some(team) = team {
                attributes.push(KeyValue::new("muster.team", team.to_owned()));
            }
            let span = self.span(
                format!("invoke_workflow {}", self.trace.run_id()),
                SpanKey::Run,
                None,
                SpanKind::Internal,
                (run_start, now),
                attributes,
                if failed {
                    Status::error(status.as_str())
                } else {
                    Status::Unset
                },
            );
            self.queue.push(span);
        }
        self.flush().await;
    }

    /// Waits at most [`FINAL_FLUSH`] for the queue, then logs its counts.
    pub async fn flush(&self) {
        let flushed = self.queue.flush(FINAL_FLUSH).await;
        let counters = self.queue.counters();
        let load = |n: &std::sync::atomic::AtomicU64| n.load(std::sync::atomic::Ordering::Relaxed);
        let (exported, failed) = (load(&counters.exported), load(&counters.failed));
        tracing::info!(
            target: "muster::traces",
            exported,
            failed,
            dropped = load(&counters.dropped),
            unsent = load(&counters.queued).saturating_sub(exported + failed),
            flushed,
            "traces sent"
        );
    }
}

/// Each agent's stored start (its `started` record's commit) and, for a subagent, its
/// parent's `Agent` call that started it (none in records from before the call was kept: its
/// span then hangs under its parent's).
async fn stored_starts(
    store: &dyn MailboxStore,
    run_id: &str,
    roster: &[RosterEntry],
) -> HashMap<String, (SystemTime, Option<String>)> {
    let mut starts = HashMap::new();
    for entry in roster {
        let Ok(rows) = store.records(run_id, &entry.agent, TRANSCRIPT, 0).await else {
            continue;
        };
        let Some(first) = rows.first() else {
            continue;
        };
        let at = UNIX_EPOCH + Duration::from_millis(first.created_at.max(0) as u64);
        let call = match Record::from_stored(first) {
            Ok(Record::Started {
                agent_kind: AgentKind::Subagent { call, .. },
                ..
            }) => call,
            _ => None,
        };
        starts.insert(entry.agent.clone(), (at, call));
    }
    starts
}

/// `error.type` of a span whose attempt a kill cut.
const INTERRUPTED: &str = "interrupted";
/// The status message of such a span.
const CUT: &str = "cut by the end of the process that started it; a resume went on";

/// A run log line's event of run `run_id`, with its time.
fn logged_event(line: &str, run_id: &str) -> Option<(RunEvent, SystemTime)> {
    let logged: serde_json::Value = serde_json::from_str(line).ok()?;
    let event: serde_json::Value =
        serde_json::from_str(logged["fields"]["event"].as_str()?).ok()?;
    if event["run_id"].as_str() != Some(run_id) {
        return None;
    }
    let ts = event["ts"].as_i64()?;
    let at = UNIX_EPOCH + Duration::from_millis(ts.max(0) as u64);
    Some((RunEvent::from_line(&event).ok()?, at))
}

/// A `Bash` call's exit status, from its result's last line (`[exit code N]`).
fn exit_status(tool: &str, content: &str) -> Option<i64> {
    if tool != ToolName::Bash {
        return None;
    }
    content
        .lines()
        .last()?
        .strip_prefix("[exit code ")?
        .strip_suffix(']')?
        .parse()
        .ok()
}
