//! The HTML of `muster serve`'s pages, rendered on the server with maud's `html!` templates:
//! the compiler checks their markup, and every string they interpolate (plans, feedback, mail,
//! names from the store) is escaped. The one insertion maud does not escape is
//! [`super::markdown`]'s output, which that module sanitises. No page carries inline script
//! (the Content-Security-Policy forbids it anyway).

use maud::{DOCTYPE, Markup, PreEscaped, html};
use muster_config::PermissionMode;
use muster_mailbox::revision::{stored_previous, stored_revision};
use muster_mailbox::{Message, MessageBody, MessageKind, RequestRecord, RunRecord, RunStatus};
use muster_protocol::{DroppedGrant, Responder};
use serde_json::Value;

use super::markdown;
use crate::display::{cut, time};
use crate::plan_diff::{self, LineChange};

/// Markdown from the store, rendered and sanitised by [`markdown::render`]: the only HTML a
/// page takes as it is.
fn sanitised_markdown(text: &str) -> PreEscaped<String> {
    PreEscaped(markdown::render(text))
}

/// A whole page around `body`.
fn page(title: &str, body: Markup) -> String {
    page_with(title, None, body)
}

/// A whole page around `body`; `live_parts`: the stream its parts are updated from (the run
/// page), instead of reloading on every change of the store.
pub fn page_with(title: &str, live_parts: Option<&str>, body: Markup) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · muster" }
                link rel="stylesheet" href="/assets/app.css";
                script src="/assets/app.js" defer {}
            }
            body data-parts=[live_parts] {
                header {
                    a href="/" { "muster" }
                    " "
                    span id="live" class="live" { "live" }
                    span id="stale" class="stale" hidden {
                        "The store changed: "
                        a href="" id="reload" { "reload" }
                    }
                }
                main { (body) }
            }
        }
    }
    .into_string()
}

/// One run as the runs page lists it.
pub struct RunRow {
    pub run: RunRecord,
    pub status: RunStatus,
    pub members: usize,
    pub tasks_done: usize,
    pub tasks: usize,
    pub waiting: Vec<RequestRecord>,
}

/// The runs of this project, or of every project the store holds (`all_projects`).
pub fn runs_page(rows: &[RunRow], all_projects: bool) -> String {
    let body = html! {
        h1 { "Runs" }
        (project_scope(all_projects))
        (table_or(
            "No runs in this store yet.",
            &["run", "slug", "status", "team", "agents", "tasks done", "waiting for a person", "created"],
            rows.iter().map(|row| html! {
                tr {
                    td { a href={ "/runs/" (row.run.id) } { (row.run.id) } }
                    td { (row.run.slug) }
                    td class={ "status " (row.status.as_str()) } { (row.status.as_str()) }
                    td { (row.run.team.as_deref().unwrap_or("-")) }
                    td { (row.members) }
                    td { (row.tasks_done) "/" (row.tasks) }
                    td {
                        @for (index, request) in row.waiting.iter().enumerate() {
                            @if index > 0 { " " }
                            (request_link(&row.run.id, request))
                        } @if row.waiting.is_empty() { "-" }
                    }
                    td { (time(row.run.created_at)) }
                }
            }),
        ))
    };
    page("Runs", body)
}

/// Which projects' runs the page lists, and the link to the other choice (as `muster runs`
/// and `muster runs --all-projects`).
fn project_scope(all_projects: bool) -> Markup {
    html! {
        p class="scope" id="scope" {
            @if all_projects {
                "Runs of every project in this store · " a href="/" { "only this project's" }
            } @else {
                "Runs of this project · " a href="/?all=1" { "all projects" }
            }
        }
    }
}

pub(super) fn requests_table(run_id: &str, requests: &[RequestRecord]) -> Markup {
    table_or(
        "No requests.",
        &["request", "kind", "from", "answered by", "state"],
        requests.iter().map(|request| {
            html! {
                tr {
                    td { (request_link(run_id, request)) }
                    td { (request.kind.in_words()) }
                    td { (request.requester) }
                    td { (request.responder) }
                    td { (state(request)) }
                }
            }
        }),
    )
}

/// A table of `rows` under `headers`, or `none` when there are no rows.
pub(super) fn table_or(
    none: &str,
    headers: &[&str],
    rows: impl ExactSizeIterator<Item = Markup>,
) -> Markup {
    html! {
        @if rows.len() == 0 {
            p { (none) }
        } @else {
            table {
                thead { tr { @for header in headers { th { (header) } } } }
                tbody { @for row in rows { (row) } }
            }
        }
    }
}

pub(super) fn request_link(run_id: &str, request: &RequestRecord) -> Markup {
    html! {
        a href={ "/runs/" (run_id) "/requests/" (request.request_id) } { (request.request_id) }
    }
}

/// `pending`, `approved`, `rejected` or `answered`.
pub fn state(request: &RequestRecord) -> &'static str {
    match &request.response {
        None => "pending",
        Some(response) => match &response.body {
            MessageBody::ShutdownResponse { approve: false, .. } => "refused",
            MessageBody::ShutdownResponse { .. } => "answered",
            body => match body.approved() {
                Some(true) => "approved",
                Some(false) => "rejected",
                None => "answered",
            },
        },
    }
}

pub(super) fn summary(message: &Message) -> String {
    let text = summary_text(&message.body);
    let id = message.request_id.as_deref().unwrap_or_default();
    cut(&format!("{id} {text}"), 160).0.trim().to_owned()
}

/// The words that sum a message up on the timeline.
fn summary_text(body: &MessageBody) -> &str {
    match body {
        MessageBody::Text { text, .. } => text,
        MessageBody::IdleNotification {
            summary: Some(text),
            ..
        }
        | MessageBody::ShutdownRequest {
            reason: Some(text), ..
        }
        | MessageBody::ShutdownResponse {
            reason: Some(text), ..
        } => text,
        MessageBody::IdleNotification { reason, .. }
        | MessageBody::PermissionRequest { reason, .. } => reason,
        MessageBody::Question { question, .. } => question,
        MessageBody::Answer { answer, .. } => answer,
        MessageBody::TaskAssignment { subject, .. } => subject,
        MessageBody::Unknown { raw, .. } => ["text", "summary", "question", "answer", "reason"]
            .iter()
            .find_map(|key| raw.get(*key).and_then(Value::as_str))
            .unwrap_or_default(),
        other => other.feedback().unwrap_or_default(),
    }
}

/// What the request page shows besides the request.
pub struct RequestView<'a> {
    pub request: &'a RequestRecord,
    /// The previous revision's request (plans).
    pub previous: Option<&'a RequestRecord>,
    /// `git diff` of a merge request, when the repository still has both commits.
    pub merge_diff: Option<String>,
    /// A message to show above the page (why a decision was refused).
    pub notice: Option<String>,
    /// For a plan a policy answers: each of its rules, passed or failed (or why the policy
    /// could not be read).
    pub policy_checks: Option<Result<Vec<muster_config::RuleCheck>, String>>,
    /// For a plan: the mode an approval that restores the agent's own gives it (none when
    /// its records cannot say).
    pub restores: Option<PermissionMode>,
    /// The run's status, and whether a process holds it now (a decision wakes it; else
    /// `muster resume` continues it).
    pub run_status: Option<RunStatus>,
    pub run_live: bool,
}

pub fn request_page(view: &RequestView) -> String {
    let request = view.request;
    let state = state(request);
    let body = html! {
        p { a href={ "/runs/" (request.run_id) } { "← run " (request.run_id) } }
        h1 { (request.kind.in_words()) " " (request.request_id) }
        @if let Some(notice) = &view.notice {
            p class="notice" role="alert" { (notice) }
        }
        dl {
            dt { "from" } dd { (request.requester) }
            dt { "who may answer" } dd { (request.responder) }
            dt { "state" } dd class={ "state " (state) } id="state" { (state) }
            dt { "asked" } dd { (time(request.created_at)) }
        }
        (request_body(view))
        @if let Some(checks) = &view.policy_checks {
            (policy_checks(&request.responder, checks))
        }
        @match &request.response {
            Some(response) => {
                (decision(&response.responder, &response.body))
                (what_next(view))
            },
            None if Responder::names_the_person(&request.responder) => (forms(request, view.restores)),
            None => p { "Waiting for " (request.responder) "; a person cannot answer this request." },
        }
    };
    page(&request.request_id, body)
}

/// What the request asks: the plan (with what changed since its previous revision), the tool
/// call, the branch to merge, or the question.
fn request_body(view: &RequestView) -> Markup {
    let request = view.request;
    match &request.body {
        MessageBody::PlanApprovalRequest {
            plan_file, plan, ..
        } => html! {
            p { "Plan file " code { (plan_file) } " · revision " (stored_revision(request)) }
            section class="plan" id="plan" { (sanitised_markdown(plan)) }
            (requested_grants(request))
            (revision(view, plan))
        },
        MessageBody::PermissionRequest {
            tool,
            input,
            reason,
            ..
        } => html! {
            p { "Tool " code { (tool) } ": " (reason) }
            pre { (serde_json::to_string_pretty(input).unwrap_or_default()) }
        },
        MessageBody::MergeRequest {
            branch,
            commit,
            onto,
            diffstat,
            verification,
            tested,
            ..
        } => html! {
            p { "Branch " code { (branch) } " at " code { (commit) } " onto " code { (onto) } }
            h2 { "Diffstat" }
            pre { (diffstat) }
            @if let Some(verification) = verification {
                h2 { "Verification" }
                pre { (verification) }
            }
            @if let Some(tested) = tested {
                (tests_section(tested))
            }
            @if let Some(diff) = &view.merge_diff {
                h2 { "Diff" }
                pre class="diff" { (diff) }
            }
        },
        MessageBody::Question {
            question, options, ..
        } => html! {
            section class="question" { (sanitised_markdown(question)) }
            @if !options.is_empty() {
                ul { @for option in options { li { (option) } } }
            }
        },
        other => html! {
            pre {
                (serde_json::to_string_pretty(&other.to_stored().unwrap_or_default())
                    .unwrap_or_default())
            }
        },
    }
}

/// A merge's passing test gate: the command, its time and the head it was tested on, and
/// the end of its output.
fn tests_section(tested: &Value) -> Markup {
    let text = |key: &str| tested[key].as_str().unwrap_or_default().to_owned();
    html! {
        h2 { "Tests" }
        p {
            "The merged result passed " code { (text("command")) } " in "
            (format!("{:.1}", tested["seconds"].as_f64().unwrap_or_default())) "s, on "
            code { (text("head")) } "."
        }
        @let tail = text("tail");
        @if !tail.trim().is_empty() {
            pre { (tail) }
        }
    }
}

/// A plan's changes since its previous revision, with the feedback that revision got.
fn revision(view: &RequestView, plan: &str) -> Markup {
    let request = view.request;
    match (stored_previous(request), view.previous) {
        (Some(previous_id), Some(previous)) => {
            let before = previous.body.plan().unwrap_or_default();
            let feedback = previous.response.as_ref().and_then(|r| r.body.feedback());
            html! {
                h2 {
                    "Changes since revision " (stored_revision(previous)) " ("
                    a href={ "/runs/" (request.run_id) "/requests/" (previous_id) } { (previous_id) }
                    ")"
                }
                @if let Some(feedback) = feedback {
                    p { "Feedback on revision " (stored_revision(previous)) ": " (feedback) }
                }
                (diff(before, plan))
            }
        }
        (Some(previous_id), None) => html! {
            p { "The previous revision " (previous_id) " is not in the store." }
        },
        (None, _) => html! { p { "First revision: nothing to compare." } },
    }
}

/// The policy's rules applied to the plan: one row each, passed or failed.
fn policy_checks(
    responder: &str,
    checks: &Result<Vec<muster_config::RuleCheck>, String>,
) -> Markup {
    let policy = match Responder::parse(responder) {
        Ok(Responder::Policy(path)) => path.display().to_string(),
        _ => responder.to_owned(),
    };
    html! {
        h2 { "Rules of " (policy) }
        @match checks {
            Err(error) => p class="notice" { (error) },
            Ok(checks) => table class="policy" id="policy-rules" {
                thead { tr { th { "rule" } th { "result" } th { "found" } } }
                tbody {
                    @for check in checks {
                        @let result = if check.passed { "passed" } else { "failed" };
                        tr class=(result) { td { (check.rule) } td { (result) } td { (check.detail) } }
                    }
                }
            },
        }
    }
}

fn diff(before: &str, after: &str) -> Markup {
    html! {
        pre class="diff" id="diff" {
            @for (change, line) in plan_diff::lines(before, after) {
                @let (class, sign) = match change {
                    LineChange::Same => ("same", " "),
                    LineChange::Added => ("added", "+"),
                    LineChange::Removed => ("removed", "-"),
                };
                span class=(class) { (sign) " " (line) }
            }
        }
    }
}

/// The stored decision: who, what, the feedback, the granted mode, the policy rule, the
/// edited plan.
fn decision(responder: &str, body: &MessageBody) -> Markup {
    let verdict = match body {
        MessageBody::ShutdownResponse { .. } => "Answered",
        other => match other.approved() {
            Some(true) => "Approved",
            Some(false) => "Rejected",
            None => "Answered",
        },
    };
    html! {
        section class="decision" id="decision" {
            h2 { (verdict) " by " (body.decided_by(responder)) }
            @if let MessageBody::Answer { answer, .. } = body {
                p { (answer) }
            }
            @if let Some(feedback) = body.feedback() {
                p { "Feedback: " (feedback) }
            }
            @if let MessageBody::PlanApprovalResponse { mode: Some(mode), lowered_from, .. } = body {
                p {
                    "Mode granted: " (mode)
                    @if let Some(from) = lowered_from { " (lowered from " (from) ")" }
                }
            }
            @if let MessageBody::PlanApprovalResponse { clear_context: true, .. } = body {
                p { "Execution starts with a fresh context." }
            }
            @if let Some(rule) = body.rule() {
                p { "Policy rule that decided: " code { (rule) } }
            }
            @if let MessageBody::PlanApprovalResponse { grants, dropped_grants, edited_plan, .. } = body {
                (granted(grants, dropped_grants))
                @if let Some(edited) = edited_plan {
                    h3 { "Approved with edits" }
                    section class="plan" { (sanitised_markdown(edited)) }
                }
            }
        }
    }
}

/// After a decision: the live run was woken, or how to continue a run no process holds.
fn what_next(view: &RequestView) -> Markup {
    let run_id = &view.request.run_id;
    html! {
        @if view.run_live {
            p id="next" { "The run is live: " (view.request.requester) " was woken and goes on." }
        } @else if matches!(view.run_status, Some(status) if status != RunStatus::Completed) {
            p id="next" class="notice" {
                "The run is not live: " code { "muster resume " (run_id) } " continues it with this decision."
            }
        }
    }
}

/// The modes an approval may grant, each with what it lets the agent do (docs/permissions.md's
/// table in a line); the empty one restores the agent's own.
const MODES: [(&str, &str); 6] = [
    ("plan", "stays in plan mode: reads and plans only"),
    (
        "dontAsk",
        "runs what rules allow; anything that would ask is denied",
    ),
    ("default", "reads freely; every edit and command asks"),
    (
        "acceptEdits",
        "edits files in the workspace without asking; commands ask",
    ),
    (
        "auto",
        "as acceptEdits; what would ask is denied and counts against the auto gate",
    ),
    (
        "bypassPermissions",
        "runs everything but path limits and dangerous commands; ask rules still ask",
    ),
];

/// The mode select of the approve forms: "restore its own" says which mode that is.
fn mode_select(restores: Option<PermissionMode>) -> Markup {
    let own = match restores {
        Some(mode) => {
            let meaning = MODES
                .iter()
                .find(|(name, _)| *name == mode.as_str())
                .map_or("", |(_, meaning)| meaning);
            format!("restore its own: {mode} ({meaning})")
        }
        None => "restore its own (the mode it had before planning)".to_owned(),
    };
    html! {
        label {
            "Mode after approval "
            select name="mode" {
                option value="" { (own) }
                @for (mode, meaning) in MODES {
                    option value=(mode) { (mode) ": " (meaning) }
                }
            }
        }
        p class="hint" {
            "Restoring its own gives the mode the agent had before it planned; a mode above \
             the approver's ceiling is lowered to it, and auto becomes default once the run's \
             auto gate has closed."
        }
    }
}

/// The forms a person answers a pending request with.
fn forms(request: &RequestRecord, restores: Option<PermissionMode>) -> Markup {
    let action = format!("/runs/{}/requests/{}", request.run_id, request.request_id);
    let feedback = html! {
        label { "Feedback " textarea name="feedback" rows="2" {} }
    };
    let required_feedback = html! {
        label { "Feedback (required) " textarea name="feedback" rows="3" required {} }
    };
    match request.kind {
        MessageKind::PlanApprovalRequest => {
            let modes = html! {
                (mode_select(restores))
                label {
                    input type="checkbox" name="clear_context" value="on";
                    " start with a fresh context"
                }
            };
            let grants = grant_checkboxes(request);
            html! {
                section class="answer" {
                    h2 { "Approve" }
                    form method="post" action=(action) id="approve" {
                        input type="hidden" name="action" value="approve";
                        (modes) (grants) (feedback)
                        button type="submit" { "Approve" }
                    }
                    h2 { "Approve with edits" }
                    form method="post" action=(action) id="approve-edited" {
                        input type="hidden" name="action" value="approve_edited";
                        textarea name="plan" rows="16" class="edit" {
                            (request.body.plan().unwrap_or_default())
                        }
                        (modes) (grants) (feedback)
                        button type="submit" { "Approve the edited plan" }
                    }
                    h2 { "Reject" }
                    form method="post" action=(action) id="reject" {
                        input type="hidden" name="action" value="reject";
                        (required_feedback)
                        button type="submit" { "Reject" }
                    }
                }
            }
        }
        MessageKind::Question => html! {
            section class="answer" {
                h2 { "Answer" }
                form method="post" action=(action) id="answer" {
                    input type="hidden" name="action" value="answer";
                    textarea name="answer" rows="3" required {}
                    button type="submit" { "Answer" }
                }
            }
        },
        _ => html! {
            section class="answer" {
                h2 { "Decide" }
                form method="post" action=(action) id="approve" {
                    input type="hidden" name="action" value="approve";
                    (feedback)
                    button type="submit" { "Approve" }
                }
                form method="post" action=(action) id="reject" {
                    input type="hidden" name="action" value="reject";
                    (required_feedback)
                    button type="submit" { "Reject" }
                }
            }
        },
    }
}

/// The permission rules a plan asks for (plan-scoped grants), listed for the approver.
fn requested_grants(request: &RequestRecord) -> Markup {
    let rules = crate::human_decision::requested_rules(request);
    html! {
        @if rules.is_empty() {
            p id="grants" { "The plan asks for no permission rules." }
        } @else {
            section class="grants" id="grants" {
                h2 { "Permission rules the plan asks for" }
                p {
                    "Granted with an approval until the plan's verification report; deny and ask \
                     rules, path limits, known-dangerous commands and the sandbox still apply."
                }
                ul { @for rule in &rules { li { code { (rule) } } } }
            }
        }
    }
}

/// The approve forms' grant checkboxes, all checked: `grant_N` carries the rule text and
/// `grants_listed` says the form listed them (so none checked grants none).
fn grant_checkboxes(request: &RequestRecord) -> Markup {
    let rules = crate::human_decision::requested_rules(request);
    html! {
        @if !rules.is_empty() {
            fieldset class="grants" {
                legend { "Grant" }
                input type="hidden" name="grants_listed" value="1";
                @for (index, rule) in rules.iter().enumerate() {
                    label {
                        input type="checkbox" name={ "grant_" (index) } value=(rule) checked;
                        " "
                        code { (rule) }
                    }
                }
            }
        }
    }
}

/// The grants a submitted approve form chose: `None` when it listed none (grant what the
/// plan asks for), else the checked rules.
pub fn checked_grants(fields: &std::collections::BTreeMap<String, String>) -> Option<Vec<String>> {
    fields.get("grants_listed")?;
    Some(
        fields
            .iter()
            .filter(|(name, _)| {
                name.strip_prefix("grant_")
                    .is_some_and(|n| n.parse::<usize>().is_ok())
            })
            .map(|(_, rule)| rule.clone())
            .collect(),
    )
}

/// A stored approval's grants and the rules it left out.
fn granted(granted: &[String], dropped: &[DroppedGrant]) -> Markup {
    html! {
        @if !granted.is_empty() {
            p id="granted" { "Granted until the verification report:" }
            ul { @for rule in granted { li { code { (rule) } } } }
        }
        @if !dropped.is_empty() {
            p { "Not granted:" }
            ul { @for item in dropped { li { code { (item.rule) } ": " (item.reason) } } }
        }
    }
}

/// A page for an error, with a message a person can act on.
pub fn error_page(title: &str, message: &str) -> String {
    page(title, html! { h1 { (title) } p { (message) } })
}

#[cfg(test)]
mod tests {
    use muster_mailbox::{AutoGate, DeliveryState, Priority, ResponseRecord, TaskStatus};
    use serde_json::json;

    use super::super::load::AgentRow;
    use super::super::run_page::{AgentView, RunView, agent_page, diff_page, run_page};
    use super::*;
    use crate::agent_activity::{Activity, AgentState, Span, SpanKind};
    use muster_agents::model::{ContentBlock, Role};
    use muster_agents::runtime::Record;
    use muster_config::PermissionMode;
    use muster_mailbox::{AgentRecord, MemberKind, RosterEntry, Task};

    fn agent_row(name: &str) -> AgentRow {
        AgentRow {
            entry: RosterEntry {
                agent: name.into(),
                kind: MemberKind::Teammate,
                definition: Some(name.into()),
                parent: None,
            },
            activity: Activity {
                state: AgentState::CallingTool,
                doing: name.into(),
                spans: vec![Span {
                    kind: SpanKind::Decision,
                    start: 1000,
                    end: 1500,
                    open: false,
                    label: name.into(),
                }],
                checkpoint: Some(name.into()),
                restores: PermissionMode::Default,
            },
            task: None,
            branch: Some(name.into()),
            diffstat: Some(name.into()),
            spend: (3, 1200, 0.0123),
            stop_pending: None,
            streaming: None,
        }
    }

    /// A transcript whose every field is hostile, with `<script>` in a tool result.
    fn transcript_records() -> Vec<AgentRecord> {
        let message = |role, content| Record::Message {
            message: muster_agents::model::Message { role, content },
            turn: None,
            model: Some(HOSTILE.into()),
            mode: PermissionMode::Default,
            stop_reason: None,
            usage: None,
            cost_usd: None,
        };
        let records = [
            message(Role::User, vec![ContentBlock::text(HOSTILE)]),
            message(
                Role::Assistant,
                vec![
                    ContentBlock::text(HOSTILE),
                    ContentBlock::ToolUse {
                        id: "t".into(),
                        name: HOSTILE.into(),
                        input: json!({"command": HOSTILE}),
                    },
                ],
            ),
            Record::ToolCall {
                tool_use_id: "t".into(),
                tool: HOSTILE.into(),
                decision: "allow".into(),
                reason: HOSTILE.into(),
                content: HOSTILE.into(),
                is_error: false,
            },
            Record::Awaiting {
                request_id: HOSTILE.into(),
                tool_use_id: "t".into(),
                responder: HOSTILE.into(),
            },
            Record::PlanSnapshot {
                path: HOSTILE.into(),
                content: HOSTILE.into(),
                state: HOSTILE.into(),
                request_id: None,
            },
            Record::Finished {
                result: HOSTILE.into(),
            },
        ];
        records
            .into_iter()
            .enumerate()
            .map(|(seq, record)| AgentRecord {
                run_id: "r1".into(),
                agent: "alice".into(),
                stream: "transcript".into(),
                seq: seq as i64,
                body: serde_json::to_value(&record).unwrap(),
                created_at: 1000,
            })
            .collect()
    }

    /// Text a model or a person could write that would be markup if it were not escaped.
    const HOSTILE: &str = "<script>alert(1)</script> \"'&";
    /// [`HOSTILE`] as it must appear in element content and attribute values.
    const ESCAPED: &str = "&lt;script&gt;alert(1)&lt;/script&gt; &quot;'&amp;";

    fn assert_escaped(page: &str, what: &str) {
        assert!(page.contains(ESCAPED), "{what}: {page}");
        // The markdown of a plan or a question leaves `"` as it is in element content, where
        // it is text; no `<` or `&` may reach a page raw.
        assert!(!page.contains("<script>alert"), "{what}: {page}");
        assert!(
            !page.contains("'&\n") && !page.contains("'&<"),
            "{what}: {page}"
        );
    }

    fn run_record() -> RunRecord {
        RunRecord {
            id: "r1".into(),
            slug: HOSTILE.into(),
            team: Some(HOSTILE.into()),
            workspace: HOSTILE.into(),
            status: RunStatus::Running,
            created_at: 0,
            updated_at: 0,
            batch_line_id: None,
            auto_gate: AutoGate::default(),
            launch_options: Value::Null,
            epoch: 0,
            result: None,
            project_id: None,
        }
    }

    fn plan_request(id: &str, revision: u32, previous: Option<&str>, plan: &str) -> RequestRecord {
        let mut body = json!({"type": "plan_approval_request", "request_id": id,
            "plan_file": HOSTILE, "plan": plan, "responder": "human", "revision": revision,
            "allowed_prompts": [HOSTILE]});
        if let Some(previous) = previous {
            body["previous_request_id"] = json!(previous);
        }
        request(id, MessageBody::from_tagged(&body))
    }

    fn request(id: &str, body: MessageBody) -> RequestRecord {
        RequestRecord {
            run_id: "r1".into(),
            request_id: id.into(),
            kind: body.kind(),
            requester: HOSTILE.into(),
            recipient: "lead".into(),
            responder: "human".into(),
            message_key: id.into(),
            body,
            created_at: 0,
            response: None,
        }
    }

    fn answered(mut request: RequestRecord, body: Value) -> RequestRecord {
        let body = MessageBody::from_tagged(&body);
        request.response = Some(ResponseRecord {
            responder: HOSTILE.into(),
            kind: body.kind(),
            message_key: format!("{}-response", request.request_id),
            body,
            decided_at: 0,
        });
        request
    }

    fn message(body: Value) -> Message {
        let body = MessageBody::from_tagged(&body);
        Message {
            key: "k".into(),
            seq: 1,
            run_id: "r1".into(),
            sender: HOSTILE.into(),
            recipient: HOSTILE.into(),
            kind: body.kind(),
            priority: Priority::Normal,
            request_id: None,
            idempotency_key: None,
            body,
            state: DeliveryState::Pending,
            created_at: 0,
            leased_at: None,
            acked_at: None,
        }
    }

    fn view(request: &RequestRecord) -> RequestView<'_> {
        RequestView {
            request,
            previous: None,
            merge_diff: None,
            notice: None,
            policy_checks: None,
            restores: None,
            run_status: Some(RunStatus::Interrupted),
            run_live: false,
        }
    }

    /// Every page that shows text from the store: each string a model or a person wrote
    /// reaches the page escaped.
    fn every_page() -> Vec<(&'static str, String)> {
        let pending = plan_request("plan-alice-1", 1, None, HOSTILE);
        let rows = vec![RunRow {
            run: run_record(),
            status: RunStatus::Running,
            members: 2,
            tasks_done: 1,
            tasks: 3,
            waiting: vec![pending.clone()],
        }];
        let task = Task {
            run_id: "r1".into(),
            task_id: 1,
            subject: HOSTILE.into(),
            description: HOSTILE.into(),
            owner: Some(HOSTILE.into()),
            status: TaskStatus::Pending,
            blocked_reason: None,
            blocked_by: Vec::new(),
            blocked_by_open: Vec::new(),
            created_by: "lead".into(),
            created_at: 0,
            updated_at: 0,
        };
        let report = message(
            json!({"type": "verification_report", "request_id": "plan-alice-1",
            "report": {"agent": HOSTILE, "plan_path": HOSTILE, "steps": [{"number": 1,
            "item": HOSTILE, "status": "deviated", "note": HOSTILE, "evidence": [{"tool_use_id": "t",
            "tool": "Bash", "command": HOSTILE, "exit_code": 1, "is_error": true}]}],
            "files": [], "tests": [], "unplanned": [{"path": HOSTILE, "evidence": []}],
            "commands": [{"tool_use_id": "t", "command": HOSTILE}],
            "summary": {"done": 0, "deviated": 1, "missing": 0, "unplanned": 1}}}),
        );
        let unreadable =
            message(json!({"type": "verification_report", "report": {"summary": HOSTILE}}));
        let mut row = agent_row(HOSTILE);
        // What a model streams is anyone's text too; turn 4 is past the row's 3 committed.
        row.streaming = Some(crate::serve::watch::Streamed {
            turn: 4,
            pieces: 1,
            text: HOSTILE.into(),
        });
        let run = RunView {
            run: run_record(),
            status: RunStatus::Running,
            live: true,
            streams: true,
            agents: vec![row],
            // A model's and a provider's name come from files a repository may hold.
            costs: Some(muster_agents::runtime::CostReport {
                rows: vec![muster_agents::runtime::CostRow {
                    agent: HOSTILE.into(),
                    model: HOSTILE.into(),
                    provider: HOSTILE.into(),
                    requests: 1,
                    ..Default::default()
                }],
                ..Default::default()
            }),
            tasks: vec![task],
            requests: vec![pending.clone()],
            reports: vec![report, unreadable],
            mail: vec![message(json!({"type": "text", "text": HOSTILE}))],
            earlier_mail: 3,
            now: 2000,
            stops: vec![crate::serve::stop::RunStop {
                seq: 1,
                at: 1000,
                epoch: 0,
                at_resume: false,
                applied_at: None,
            }],
        };
        let transcript_row = agent_row(HOSTILE);
        let records = transcript_records();
        let agent = AgentView {
            run: &run.run,
            row: &transcript_row,
            live: true,
            records: &records,
            requests: &[],
        };
        let previous = answered(
            plan_request("plan-alice-1", 1, None, "## Steps\n1. old\n"),
            json!({"type": "plan_approval_response", "request_id": "plan-alice-1",
                "approved": false, "feedback": HOSTILE}),
        );
        let revised = plan_request("plan-alice-2", 2, Some("plan-alice-1"), HOSTILE);
        let mut revised_view = view(&revised);
        revised_view.previous = Some(&previous);
        revised_view.notice = Some(HOSTILE.into());
        revised_view.policy_checks = Some(Ok(vec![muster_config::RuleCheck {
            rule: HOSTILE.into(),
            passed: false,
            detail: HOSTILE.into(),
        }]));
        let decided = answered(
            plan_request("plan-alice-3", 1, None, "## Steps\n"),
            json!({"type": "plan_approval_response", "request_id": "plan-alice-3",
                "approved": true, "feedback": HOSTILE, "mode": HOSTILE, "lowered_from": HOSTILE,
                "edited_plan": HOSTILE, "clear_context": true, "rule": HOSTILE,
                "grants": [HOSTILE], "dropped_grants": [{"rule": HOSTILE, "reason": HOSTILE}]}),
        );
        let question = request(
            "question-bob-1",
            MessageBody::from_tagged(&json!({"type": "question", "request_id": "question-bob-1",
                "question": HOSTILE, "options": [HOSTILE], "responder": "human"})),
        );
        let answer = answered(
            question.clone(),
            json!({"type": "answer", "request_id": "question-bob-1", "answer": HOSTILE}),
        );
        let permission = request(
            "permission-bob-1",
            MessageBody::from_tagged(&json!({"type": "permission_request",
                "request_id": "permission-bob-1", "tool": HOSTILE, "input": {"command": HOSTILE},
                "reason": HOSTILE, "responder": "lead"})),
        );
        let merge = request(
            "merge-bob-1",
            MessageBody::from_tagged(
                &json!({"type": "merge_request", "request_id": "merge-bob-1",
                "agent": "bob", "branch": HOSTILE, "commit": HOSTILE, "onto": HOSTILE,
                "files": [HOSTILE], "diffstat": HOSTILE, "verification": HOSTILE,
                "responder": "human", "tested": {"command": HOSTILE, "head": HOSTILE,
                "exit": 0, "passed": true, "seconds": 1.25, "tail": HOSTILE}}),
            ),
        );
        let mut merge_view = view(&merge);
        merge_view.merge_diff = Some(HOSTILE.into());
        let policy = request(
            "plan-carol-1",
            MessageBody::from_tagged(&json!({"type": "plan_approval_request",
                "request_id": "plan-carol-1", "plan_file": "p.md", "plan": "x",
                "responder": "policy:p.toml"})),
        );
        let mut policy_view = view(&policy);
        policy_view.policy_checks = Some(Err(HOSTILE.into()));
        vec![
            ("runs", runs_page(&rows, false)),
            ("run", run_page(&run)),
            ("agent", agent_page(&agent)),
            ("agent diff", diff_page("r1", HOSTILE, Some(HOSTILE))),
            ("pending plan", request_page(&view(&pending))),
            ("revised plan", request_page(&revised_view)),
            ("decided plan", request_page(&view(&decided))),
            ("question", request_page(&view(&question))),
            ("answer", request_page(&view(&answer))),
            ("permission", request_page(&view(&permission))),
            ("merge", request_page(&merge_view)),
            ("policy", request_page(&policy_view)),
            ("error", error_page("No such run", HOSTILE)),
        ]
    }

    #[test]
    fn a_merge_page_shows_the_tests_the_merged_result_passed() {
        let merge = request(
            "merge-bob-1",
            MessageBody::from_tagged(&json!({"type": "merge_request",
                "request_id": "merge-bob-1", "agent": "bob", "branch": "muster/r/bob",
                "commit": "c0ffee", "onto": "abc123", "files": ["a.rs"], "diffstat": "1 file",
                "responder": "human", "tested": {"command": "cargo test", "head": "abc123",
                "exit": 0, "passed": true, "seconds": 12.34, "tail": "test result: ok"}})),
        );
        let page = request_page(&view(&merge));
        assert!(
            page.contains(
                "The merged result passed <code>cargo test</code> in 12.3s, on <code>abc123</code>."
            ) && page.contains("<pre>test result: ok</pre>"),
            "{page}"
        );
    }

    #[test]
    fn text_from_the_store_is_escaped_on_every_page() {
        for (what, page) in every_page() {
            assert_escaped(&page, what);
        }
    }
}
