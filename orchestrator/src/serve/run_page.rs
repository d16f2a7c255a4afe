//! The run as a person watches it, and one agent's transcript: maud templates (everything
//! from the store escaped), no inline script or style (the SVG timeline uses classes and
//! presentation attributes only). The run page is made of named parts; the live stream
//! (`/runs/{run}/live`) sends a part again only when its HTML changed.

use maud::{Markup, PreEscaped, html};
use muster_agents::model::{ContentBlock, Role};
use muster_agents::runtime::{CostReport, Record};
use muster_agents::verification::{CheckedItem, Evidence, Status, VerificationReport};
use muster_mailbox::{
    AgentRecord, Message, MessageBody, RequestRecord, RunRecord, RunStatus, Task,
};
use serde_json::Value;

use super::load::AgentRow;
use super::markdown;
use super::pages::{page_with, requests_table, state, summary};
use crate::agent_activity::{Span, SpanKind, Waits};
use crate::display::{dollars, time};

/// How many of the newest mails the run page lists.
pub const MAIL_SHOWN: usize = 100;

/// What the run page shows.
pub struct RunView {
    pub run: RunRecord,
    pub status: RunStatus,
    /// A process holds the run now.
    pub live: bool,
    /// Serve gets the streamed pieces of this host's runs (SQLite: its socket is bound).
    pub streams: bool,
    pub agents: Vec<AgentRow>,
    /// What the run spent per agent, model and provider (`None`: the store could not say).
    pub costs: Option<CostReport>,
    pub tasks: Vec<Task>,
    pub requests: Vec<RequestRecord>,
    /// The verification reports, all of them.
    pub reports: Vec<Message>,
    /// The newest [`MAIL_SHOWN`] mails, and how many came before.
    pub mail: Vec<Message>,
    pub earlier_mail: usize,
    pub now: i64,
    /// The run stops people asked for.
    pub stops: Vec<super::stop::RunStop>,
}

/// One part of the run page: its element id, the id of the element a new one is appended to
/// (agents' rows), and its HTML.
pub struct Part {
    pub id: String,
    pub parent: Option<&'static str>,
    pub html: Markup,
}

/// The run page's parts, in page order after the summary.
pub fn run_parts(view: &RunView) -> Vec<Part> {
    let run_id = &view.run.id;
    let mut parts = vec![Part {
        id: "run-summary".into(),
        parent: None,
        html: run_summary(view),
    }];
    for row in &view.agents {
        parts.push(Part {
            id: agent_row_id(&row.entry.agent),
            parent: Some("agents-body"),
            html: agent_row(run_id, row, view.live),
        });
    }
    parts.extend([
        Part {
            id: "costs".into(),
            parent: None,
            html: costs(view.costs.as_ref()),
        },
        Part {
            id: "requests".into(),
            parent: None,
            html: html! { div id="requests" { (requests_table(run_id, &view.requests)) } },
        },
        Part {
            id: "tasks".into(),
            parent: None,
            html: tasks(&view.tasks),
        },
        Part {
            id: "reports".into(),
            parent: None,
            html: reports(&view.reports),
        },
        Part {
            id: "timeline".into(),
            parent: None,
            html: timeline(view),
        },
        Part {
            id: "mail".into(),
            parent: None,
            html: mail(view),
        },
    ]);
    parts
}

fn agent_row_id(agent: &str) -> String {
    format!("agent-{agent}")
}

pub fn run_page(view: &RunView) -> String {
    let run = &view.run;
    let parts = run_parts(view);
    let find = |id: &str| {
        parts
            .iter()
            .find(|p| p.id == id)
            .map(|p| p.html.clone())
            .unwrap_or_else(|| html! {})
    };
    let body = html! {
        h1 { "Run " (run.id) " " small { (run.slug) } }
        p { "Workspace " code { (run.workspace) } " · created " (time(run.created_at)) }
        (find("run-summary"))
        h2 { "Agents" }
        table id="agents" {
            thead { tr {
                th { "agent" } th { "state" } th { "doing" } th { "task" } th { "branch · changed" }
                th { "model requests" } th { "tokens" } th { "cost" } th {}
            } }
            tbody id="agents-body" {
                @for part in parts.iter().filter(|p| p.parent == Some("agents-body")) {
                    (part.html)
                }
            }
        }
        h2 { "Cost" }
        (find("costs"))
        h2 { "Requests" }
        (find("requests"))
        h2 { "Tasks" }
        (find("tasks"))
        h2 { "Verification reports" }
        (find("reports"))
        h2 { "Timeline" }
        (find("timeline"))
        h2 { "Mail" }
        (find("mail"))
    };
    let live = format!("/runs/{}/live", run.id);
    page_with(&format!("Run {}", run.id), Some(&live), body)
}

fn run_summary(view: &RunView) -> Markup {
    let status = view.status.as_str();
    let cost: f64 = view.agents.iter().map(|a| a.spend.2).sum();
    let tokens: u64 = view.agents.iter().map(|a| a.spend.1).sum();
    let action = format!("/runs/{}/stop", view.run.id);
    let stopping = view
        .stops
        .iter()
        .any(|s| !s.at_resume && s.epoch == view.run.epoch);
    let waiting = view
        .stops
        .iter()
        .any(|s| s.at_resume && s.applied_at.is_none());
    let resume = format!("muster resume {}", view.run.id);
    html! {
        section id="run-summary" {
            p {
                span class={ "status " (status) } id="run-status" { (status) }
                " · " (format!("cost so far ${cost:.4} · {tokens} tokens"))
            }
            @for stop in &view.stops {
                p class="stopped-by" {
                    @if !stop.at_resume {
                        "A person stopped the run from this page at " (time(stop.at)) "."
                    } @else if let Some(applied) = stop.applied_at {
                        "A person stopped the run from this page at " (time(stop.at))
                        " while no process ran it; the resume of " (time(applied))
                        " honoured it and ended at once."
                    } @else {
                        "A person stopped the run from this page at " (time(stop.at))
                        " while no process ran it: the next " code { (resume) }
                        " ends at once as Ctrl-C would (agents stopped, the run interrupted); \
                         the one after continues it."
                    }
                }
            }
            @if view.live {
                p class="scope" {
                    "Live: the page follows what the run commits (each agent's state after every \
                     model reply, tool result and decision)"
                    @if view.streams {
                        "; text and tool input streaming from the model on this machine show as \
                         they come, in italics, until the committed reply replaces them."
                    } @else {
                        ". It shows committed events only (a store shared across machines): text \
                         still streaming from the model shows once committed."
                    }
                }
                @if !stopping {
                form method="post" action=(action) id="stop-run" class="inline" {
                    button type="submit" { "Stop the run" }
                    " as Ctrl-C would: agents stop, the run is marked interrupted, "
                    code { (resume) } " continues it."
                }
                }
            } @else if !view.status.is_finished() {
                p { "No process runs it now: " code { (resume) } " continues it." }
                @if !waiting {
                form method="post" action=(action) id="stop-run" class="inline" {
                    button type="submit" { "Stop at resume" }
                    " so that no resume carries it on unasked: the next " code { (resume) }
                    " ends at once, as Ctrl-C would."
                }
                }
            }
        }
    }
}

/// What the run spent per agent, model and provider, its total and what caching saved: the
/// report the summary, `run_finished` and `muster runs --json` give.
fn costs(report: Option<&CostReport>) -> Markup {
    html! {
        div id="costs" {
            @match report {
                None => p { "The store could not say what the run spent." },
                Some(report) if report.rows.is_empty() => p { "No model was called yet." },
                Some(report) => {
                    table class="costs" {
                        thead { tr {
                            th { "agent" } th { "model" } th { "provider" } th { "requests" }
                            th { "input" } th { "cache read" } th { "cache write" }
                            th { "output" } th { "cost" }
                        } }
                        tbody {
                            @for row in &report.rows {
                                tr class="cost" {
                                    td { (row.agent) } td { (row.model) } td { (row.provider) }
                                    td { (row.requests) } td { (row.input_tokens) }
                                    td { (row.cache_read_tokens) } td { (row.cache_write_tokens) }
                                    td { (row.output_tokens) } td { (dollars(row.cost_usd)) }
                                }
                            }
                            tr class="cost-total" {
                                td colspan="3" { "total" }
                                td { (report.total.requests) } td { (report.total.input_tokens) }
                                td { (report.total.cache_read_tokens) }
                                td { (report.total.cache_write_tokens) }
                                td { (report.total.output_tokens) }
                                td { (dollars(report.total.cost_usd)) }
                            }
                        }
                    }
                    p class="cache-saved" {
                        "Caching saved " (dollars(Some(report.cache_saved_usd)))
                        " against the input price (reads at the cache price, less what writing \
                         the cache cost over it)."
                    }
                }
            }
        }
    }
}

fn agent_row(run_id: &str, row: &AgentRow, live: bool) -> Markup {
    let agent = &row.entry.agent;
    let activity = &row.activity;
    let (turns, tokens, cost) = row.spend;
    let stoppable = row.entry.kind == muster_mailbox::MemberKind::Teammate
        && !matches!(
            activity.state,
            crate::agent_activity::AgentState::Stopped | crate::agent_activity::AgentState::Done
        );
    html! {
        tr id=(agent_row_id(agent)) class={ "agent " (activity.state.class()) } data-turns=(turns) {
            td {
                a href={ "/runs/" (run_id) "/agents/" (agent) } { (agent) }
                " " small { (row.entry.kind.as_str()) }
            }
            td class={ "agent-state " (activity.state.class()) } { (activity.state.as_str()) }
            td class="doing" {
                (activity.doing)
                // The pieces serve holds of a response not yet committed: the page's own
                // deltas continue from `data-pieces`.
                @if let Some(streamed) = row.streaming.as_ref().filter(|s| s.turn > turns) {
                    span class="streaming" title="streaming from the model, not yet committed"
                        data-turn=(streamed.turn) data-pieces=(streamed.pieces) { (streamed.text) }
                }
            }
            td {
                @if let Some(task) = &row.task {
                    "#" (task.task_id) " " (task.subject) " (" (task.status.as_str()) ")"
                } @else { "-" }
            }
            td {
                @if let Some(branch) = &row.branch {
                    code { (branch) }
                    @if let Some(stat) = &row.diffstat {
                        pre class="diffstat" { (stat) }
                    }
                } @else { "-" }
            }
            td { (turns) }
            td { (tokens) }
            td { (format!("${cost:.4}")) }
            td {
                @if let Some(request) = &row.stop_pending {
                    "stop asked (" (request) ")"
                } @else if stoppable {
                    form method="post" action={ "/runs/" (run_id) "/agents/" (agent) "/stop" }
                        class="inline stop-agent" {
                        button type="submit" {
                            @if live { "Stop" } @else { "Stop at resume" }
                        }
                    }
                }
            }
        }
    }
}

fn tasks(tasks: &[Task]) -> Markup {
    html! {
        div id="tasks" {
            (super::pages::table_or(
                "No tasks.",
                &["#", "subject", "owner", "status"],
                tasks.iter().map(|task| html! {
                    tr {
                        td { (task.task_id) }
                        td { (task.subject) }
                        td { (task.owner.as_deref().unwrap_or("-")) }
                        td { (task.status.as_str()) }
                    }
                }),
            ))
        }
    }
}

fn reports(reports: &[Message]) -> Markup {
    html! {
        div id="reports" {
            @if reports.is_empty() {
                p { "None yet." }
            }
            @for report in reports {
                (checklist(report))
            }
        }
    }
}

/// A verification report as the CLI's summary reads: each step, file and test done, deviated
/// or missing, with its evidence. Never the JSON.
pub fn checklist(message: &Message) -> Markup {
    let MessageBody::VerificationReport { report, .. } = &message.body else {
        return html! {};
    };
    let parsed = serde_json::from_value::<VerificationReport>(report.clone());
    html! {
        section class="report" {
            @match parsed {
                Err(error) => {
                    h3 { "Verification report from " (message.sender) }
                    p class="notice" { "This report could not be read (" (error) "); `muster inbox` shows its text." }
                }
                Ok(report) => {
                    @let summary = &report.summary;
                    h3 {
                        "Verification of " (report.agent) "'s plan " code { (report.plan_path) }
                        @if let Some(id) = &report.request_id { " (" (id) ")" }
                    }
                    p class="report-summary" {
                        (summary.done) " done, " (summary.deviated) " deviated, "
                        (summary.missing) " missing, " (summary.unplanned) " unplanned"
                    }
                    @for (title, items) in [("Steps", &report.steps), ("Files", &report.files), ("Tests", &report.tests)] {
                        @if !items.is_empty() {
                            h4 { (title) }
                            ul class="checklist" {
                                @for item in items.iter() { (checked_item(item)) }
                            }
                        }
                    }
                    @if !report.unplanned.is_empty() {
                        h4 { "Unplanned changes" }
                        ul class="checklist" {
                            @for change in &report.unplanned {
                                li class="deviated" {
                                    span class="mark" { "unplanned" } " " code { (change.path) }
                                    " — " (evidence_text(&change.evidence))
                                }
                            }
                        }
                    }
                    @if !report.commands.is_empty() {
                        h4 { "Commands run" }
                        ul {
                            @for run in &report.commands {
                                li {
                                    code { (run.command) } " ("
                                    @match run.exit_code { Some(code) => { "exit " (code) }, None => { "no exit code" } }
                                    ")"
                                    @if let Some(why) = &run.effects_unknown { "; files changed unknown: " (why) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn checked_item(item: &CheckedItem) -> Markup {
    let status = item.status.as_str();
    let evidence = evidence_text(&item.evidence);
    let detail = match (item.status, item.evidence.is_empty()) {
        (Status::Done, false) => evidence,
        (_, true) => item.note.clone(),
        (_, false) => format!("{}; evidence: {evidence}", item.note),
    };
    html! {
        li class=(status) {
            span class="mark" { (status) } " "
            @if let Some(number) = item.number { (number) ". " }
            (item.item) " — " (detail)
        }
    }
}

fn evidence_text(evidence: &[Evidence]) -> String {
    evidence
        .iter()
        .map(Evidence::render_text)
        .collect::<Vec<_>>()
        .join("; ")
}

fn mail(view: &RunView) -> Markup {
    html! {
        div id="mail" {
            @if view.earlier_mail > 0 {
                p { (view.earlier_mail) " earlier mails not shown; " code { "muster inbox" } " lists them all." }
            }
            table class="mail" {
                thead { tr { th { "time" } th { "from" } th { "to" } th { "kind" } th { "what" } } }
                tbody {
                    @for message in &view.mail {
                        tr {
                            td { (time(message.created_at)) }
                            td { (message.sender) }
                            td { (message.recipient) }
                            td { (message.kind.in_words()) }
                            td { (summary(message)) }
                        }
                    }
                }
            }
        }
    }
}

/// Lane height and the label column's width of the timeline, in SVG units.
const LANE: i64 = 20;
const LABELS: i64 = 140;
const WIDTH: i64 = 1000;

/// The run as lanes, one per agent: model calls, tool calls and waits on decisions as bars,
/// each with a `<title>` saying what and how long. Rendered here; no script draws it.
fn timeline(view: &RunView) -> Markup {
    let lanes: Vec<(&str, &[Span])> = view
        .agents
        .iter()
        .map(|row| (row.entry.agent.as_str(), row.activity.spans.as_slice()))
        .collect();
    let start = lanes
        .iter()
        .flat_map(|(_, spans)| spans.iter().map(|s| s.start))
        .min();
    let end = lanes
        .iter()
        .flat_map(|(_, spans)| spans.iter().map(|s| s.end))
        .max();
    let (Some(start), Some(end)) = (start, end) else {
        return html! { div id="timeline" { p { "Nothing timed yet." } } };
    };
    let length = (end - start).max(1);
    let x = |at: i64| LABELS + (at - start) * (WIDTH - LABELS) / length;
    let height = LANE * i64::try_from(lanes.len()).unwrap_or(0) + 24;
    let mut totals = Waits::default();
    for (_, spans) in &lanes {
        totals.add(Waits::of(spans));
    }
    html! {
        div id="timeline" {
            p class="legend" {
                span class="key model" { "model" } " " (seconds(totals.model_ms)) " · "
                span class="key tool" { "tools" } " " (seconds(totals.tools_ms)) " · "
                span class="key decision" { "decisions" } " " (seconds(totals.decisions_ms))
                " · over " (seconds(u64::try_from(length).unwrap_or(0)))
            }
            svg xmlns="http://www.w3.org/2000/svg" class="timeline" width=(WIDTH) height=(height)
                viewBox={ "0 0 " (WIDTH) " " (height) } role="img" aria-label="timeline of the run" {
                @for (index, (agent, spans)) in lanes.iter().enumerate() {
                    @let y = LANE * i64::try_from(index).unwrap_or(0);
                    text x="4" y=(y + 14) class="lane" { (agent) }
                    line x1=(LABELS) x2=(WIDTH) y1=(y + LANE) y2=(y + LANE) class="lane-line" {}
                    @for span in spans.iter() {
                        @let left = x(span.start);
                        @let class = format!("span {}{}", kind_class(span.kind), if span.open { " open" } else { "" });
                        rect x=(left) y=(y + 3) width=((x(span.end) - left).max(1)) height=(LANE - 6)
                            class=(class) {
                            title {
                                (agent) ": " (span_words(span)) " " (seconds(u64::try_from(span.end - span.start).unwrap_or(0)))
                                @if span.open { " so far" }
                            }
                        }
                    }
                }
                text x=(LABELS) y=(height - 6) class="axis" { (time(start)) }
                text x=(WIDTH - 4) y=(height - 6) class="axis end" { (time(end)) }
            }
        }
    }
}

fn kind_class(kind: SpanKind) -> &'static str {
    match kind {
        SpanKind::Model => "model",
        SpanKind::Tool => "tool",
        SpanKind::Decision => "decision",
    }
}

fn span_words(span: &Span) -> String {
    match span.kind {
        SpanKind::Model => "waiting on the model".to_owned(),
        SpanKind::Tool => "running tools".to_owned(),
        SpanKind::Decision => format!("waiting on {}", span.label),
    }
}

fn seconds(ms: u64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

/// What the agent page shows.
pub struct AgentView<'a> {
    pub run: &'a RunRecord,
    pub row: &'a AgentRow,
    pub live: bool,
    pub records: &'a [AgentRecord],
    pub requests: &'a [RequestRecord],
}

/// One agent: its state, what it changed, and its transcript (messages, tool calls with their
/// results folded in `<details>`, decisions waited on).
pub fn agent_page(view: &AgentView) -> String {
    let run_id = &view.run.id;
    let row = view.row;
    let agent = &row.entry.agent;
    let body = html! {
        p { a href={ "/runs/" (run_id) } { "← run " (run_id) } }
        h1 { (agent) " " small { (row.entry.kind.as_str()) " · " (row.entry.definition.as_deref().unwrap_or("-")) } }
        table id="agents" { tbody id="agents-body" { (agent_row(run_id, row, view.live)) } }
        @if let Some(stat) = &row.diffstat {
            h2 { "What merging its work would add" }
            pre class="diffstat" { (stat) }
            p { a href={ "/runs/" (run_id) "/agents/" (agent) "/diff" } id="diff-link" { "The diff" } }
        }
        h2 { "Transcript" }
        @if view.records.is_empty() {
            p { "No records yet." }
        }
        ol class="transcript" id="transcript" {
            @for record in view.records {
                @if let Ok(parsed) = Record::from_stored(record) {
                    (transcript_entry(run_id, record.created_at, &parsed, view.requests))
                }
            }
        }
    };
    page_with(&format!("{agent} · run {run_id}"), None, body)
}

/// The diff merging the agent's newest checkpoint would add.
pub fn diff_page(run_id: &str, agent: &str, diff: Option<&str>) -> String {
    let body = html! {
        p { a href={ "/runs/" (run_id) "/agents/" (agent) } { "← " (agent) } }
        h1 { "What merging " (agent) "'s work would add" }
        @match diff {
            Some(diff) => pre class="diff" id="agent-diff" { (diff) },
            None => p { "No diff: the agent has no checkpoint, or the repository lacks its commits." },
        }
    };
    page_with(&format!("{agent}'s diff"), None, body)
}

fn transcript_entry(run_id: &str, at: i64, record: &Record, requests: &[RequestRecord]) -> Markup {
    let when = html! { span class="at" { (time(at)) } " " };
    match record {
        Record::Started {
            definition,
            mode,
            system,
            ..
        } => html! {
            li class="event" {
                (when) "started as " (definition) " in mode " (mode.as_str())
                details { summary { "system prompt" } pre { (system) } }
            }
        },
        Record::Message { message, model, .. } => {
            let role = if message.role == Role::Assistant {
                "assistant"
            } else {
                "user"
            };
            let shown: Vec<&ContentBlock> = message
                .content
                .iter()
                .filter(|b| !matches!(b, ContentBlock::ToolResult { .. }))
                .collect();
            html! {
                @if !shown.is_empty() {
                    li class={ "message " (role) } {
                        (when) strong { (role) } @if let Some(model) = model { " " small { (model) } }
                        @for block in shown { (content_block(block)) }
                    }
                }
            }
        }
        Record::ToolCall {
            tool,
            decision,
            reason,
            content,
            is_error,
            ..
        } => html! {
            li class=(if *is_error { "tool-result error" } else { "tool-result" }) {
                details {
                    summary {
                        (when) (tool) " — " (decision)
                        @if !reason.is_empty() { " (" (reason) ")" }
                        @if *is_error { " · error" }
                    }
                    pre { (content) }
                }
            }
        },
        Record::Awaiting {
            request_id,
            responder,
            ..
        } => {
            let decided = requests
                .iter()
                .find(|r| &r.request_id == request_id)
                .map(state)
                .unwrap_or("pending");
            html! {
                li class="event" {
                    (when) "waiting on " a href={ "/runs/" (run_id) "/requests/" (request_id) } { (request_id) }
                    " (" (responder) "): " (decided)
                }
            }
        }
        Record::Mode { mode, reason, .. } => html! {
            li class="event" { (when) "mode " (mode.as_str()) ": " (reason) }
        },
        Record::PlanSnapshot {
            path,
            content,
            state,
            ..
        } => html! {
            li class="event" {
                details {
                    summary { (when) "plan " (path) " (" (state) ")" }
                    section class="plan" { (PreEscaped(markdown::render(content))) }
                }
            }
        },
        Record::Finished { result } => html! {
            li class="event finished" { (when) "finished: " (result) }
        },
        Record::TurnInterrupted { reason } => html! {
            li class="event" { (when) "turn interrupted: " (reason) }
        },
        Record::HookStopped { event, reason } => html! {
            li class="event" { (when) "stopped by a " (event) " hook: " (reason) }
        },
        Record::Compacted { summary, .. } => html! {
            li class="event" { details { summary { (when) "context compacted" } pre { (summary) } } }
        },
        Record::ContextReset { reason } => html! {
            li class="event" { (when) "context reset: " (reason) }
        },
        Record::Checkpoint { commit, .. } => html! {
            li class="event" { (when) "checkpoint " code { (commit) } }
        },
        Record::Grants {
            rules, approved_by, ..
        } => html! {
            li class="event" { (when) "granted by " (approved_by) ": " (rules.join(", ")) }
        },
        Record::GrantsEnded { reason, .. } => html! {
            li class="event" { (when) "grants ended: " (reason) }
        },
        _ => html! {},
    }
}

fn content_block(block: &ContentBlock) -> Markup {
    match block {
        ContentBlock::Text { text } => html! { div class="text" { (text) } },
        ContentBlock::ToolUse { name, input, .. } => html! {
            div class="tool-use" {
                "→ " code { (name) }
                pre { (serde_json::to_string_pretty(input).unwrap_or_default()) }
            }
        },
        ContentBlock::Thinking { thinking, .. } => html! {
            details class="thinking" { summary { "thinking" } pre { (thinking) } }
        },
        ContentBlock::ToolResult { .. } => html! {},
        ContentBlock::Other(value) => html! { pre { (other_block(value)) } },
    }
}

fn other_block(value: &Value) -> String {
    value
        .get("type")
        .and_then(Value::as_str)
        .map(|kind| format!("[{kind} block]"))
        .unwrap_or_else(|| "[block]".to_owned())
}
