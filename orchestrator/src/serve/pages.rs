//! The HTML of `muster serve`'s pages, rendered on the server. Every string from the store
//! (plans, feedback, mail, names) is escaped here or rendered by [`super::markdown`]; no
//! page carries inline script (the Content-Security-Policy forbids it anyway).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use muster_mailbox::revision::{stored_previous, stored_revision};
use muster_mailbox::{
    Message, MessageBody, MessageKind, RequestRecord, RosterEntry, RunRecord, RunStatus, Task,
};
use muster_protocol::{DroppedGrant, Responder};
use serde_json::Value;

use super::markdown;
use crate::display::{cut, time};
use crate::plan_diff::{self, LineChange};

/// Escapes text for HTML element content and quoted attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A whole page around `body`.
pub fn page(title: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · muster</title><link rel=\"stylesheet\" href=\"/assets/app.css\">\
         <script src=\"/assets/app.js\" defer></script></head><body>\
         <header><a href=\"/\">muster</a> <span id=\"live\" class=\"live\">live</span>\
         <span id=\"stale\" class=\"stale\" hidden>The store changed: \
         <a href=\"\" id=\"reload\">reload</a></span></header><main>{body}</main></body></html>\n",
        escape(title)
    )
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
    let mut body = String::from("<h1>Runs</h1>");
    body.push_str(&project_scope_html(all_projects));
    if rows.is_empty() {
        body.push_str("<p>No runs in this store yet.</p>");
        return page("Runs", &body);
    }
    body.push_str(
        "<table><thead><tr><th>run</th><th>slug</th><th>status</th><th>team</th>\
         <th>agents</th><th>tasks done</th><th>waiting for a person</th><th>created</th>\
         </tr></thead><tbody>",
    );
    for row in rows {
        let waiting: Vec<String> = row
            .waiting
            .iter()
            .map(|r| request_link(&row.run.id, r))
            .collect();
        let _ = write!(
            body,
            "<tr><td><a href=\"/runs/{id}\">{id_text}</a></td><td>{slug}</td>\
             <td class=\"status {status}\">{status}</td><td>{team}</td><td>{members}</td>\
             <td>{done}/{tasks}</td><td>{waiting}</td><td>{created}</td></tr>",
            id = escape(&row.run.id),
            id_text = escape(&row.run.id),
            slug = escape(&row.run.slug),
            status = row.status.as_str(),
            team = escape(row.run.team.as_deref().unwrap_or("-")),
            members = row.members,
            done = row.tasks_done,
            tasks = row.tasks,
            waiting = if waiting.is_empty() {
                "-".to_owned()
            } else {
                waiting.join(" ")
            },
            created = time(row.run.created_at),
        );
    }
    body.push_str("</tbody></table>");
    page("Runs", &body)
}

/// Which projects' runs the page lists, and the link to the other choice (as `muster runs`
/// and `muster runs --all-projects`).
fn project_scope_html(all_projects: bool) -> String {
    if all_projects {
        "<p class=\"scope\" id=\"scope\">Runs of every project in this store · \
         <a href=\"/\">only this project's</a></p>"
            .to_owned()
    } else {
        "<p class=\"scope\" id=\"scope\">Runs of this project · \
         <a href=\"/?all=1\">all projects</a></p>"
            .to_owned()
    }
}

/// What the run page shows.
pub struct RunView {
    pub run: RunRecord,
    pub status: RunStatus,
    pub roster: Vec<RosterEntry>,
    pub tasks: Vec<Task>,
    pub requests: Vec<RequestRecord>,
    pub messages: Vec<Message>,
    /// Per agent: model requests, tokens, US dollars.
    pub spend: BTreeMap<String, (u64, u64, f64)>,
}

pub fn run_page(view: &RunView) -> String {
    let run = &view.run;
    let mut body = format!(
        "<h1>Run {} <small>{}</small></h1><p class=\"status {status}\">{status}</p>\
         <p>Workspace <code>{}</code> · created {}</p>",
        escape(&run.id),
        escape(&run.slug),
        escape(&run.workspace),
        time(run.created_at),
        status = view.status.as_str(),
    );
    let cost: f64 = view.spend.values().map(|s| s.2).sum();
    let tokens: u64 = view.spend.values().map(|s| s.1).sum();
    let _ = write!(
        body,
        "<p>Cost so far: ${cost:.4} · {tokens} tokens</p><h2>Requests</h2>"
    );
    body.push_str(&requests_table(&run.id, &view.requests));
    body.push_str("<h2>Agents</h2><table><thead><tr><th>agent</th><th>kind</th><th>definition</th><th>model requests</th><th>tokens</th><th>cost</th></tr></thead><tbody>");
    for member in &view.roster {
        let (turns, tokens, cost) = view.spend.get(&member.agent).copied().unwrap_or_default();
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{turns}</td><td>{tokens}</td><td>${cost:.4}</td></tr>",
            escape(&member.agent),
            member.kind.as_str(),
            escape(member.definition.as_deref().unwrap_or("-")),
        );
    }
    body.push_str("</tbody></table><h2>Tasks</h2>");
    if view.tasks.is_empty() {
        body.push_str("<p>No tasks.</p>");
    } else {
        body.push_str("<table><thead><tr><th>#</th><th>subject</th><th>owner</th><th>status</th></tr></thead><tbody>");
        for task in &view.tasks {
            let _ = write!(
                body,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                task.task_id,
                escape(&task.subject),
                escape(task.owner.as_deref().unwrap_or("-")),
                task.status.as_str(),
            );
        }
        body.push_str("</tbody></table>");
    }
    body.push_str("<h2>Verification reports</h2>");
    let reports: Vec<&Message> = view
        .messages
        .iter()
        .filter(|m| m.kind == MessageKind::VerificationReport)
        .collect();
    if reports.is_empty() {
        body.push_str("<p>None yet.</p>");
    }
    for report in reports {
        let content = match &report.body {
            MessageBody::VerificationReport { report, .. } => report.clone(),
            _ => Value::Null,
        };
        let _ = write!(
            body,
            "<section class=\"report\"><h3>{} {}</h3><pre>{}</pre></section>",
            escape(&report.sender),
            escape(report.request_id.as_deref().unwrap_or("")),
            escape(&serde_json::to_string_pretty(&content).unwrap_or_default()),
        );
    }
    body.push_str("<h2>Timeline</h2><table class=\"timeline\"><thead><tr><th>time</th><th>from</th><th>to</th><th>kind</th><th>what</th></tr></thead><tbody>");
    for message in &view.messages {
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            time(message.created_at),
            escape(&message.sender),
            escape(&message.recipient),
            escape(&message.kind.in_words()),
            escape(&summary(message)),
        );
    }
    body.push_str("</tbody></table>");
    page(&format!("Run {}", run.id), &body)
}

fn requests_table(run_id: &str, requests: &[RequestRecord]) -> String {
    if requests.is_empty() {
        return "<p>No requests.</p>".into();
    }
    let mut out = String::from(
        "<table><thead><tr><th>request</th><th>kind</th><th>from</th><th>answered by</th><th>state</th></tr></thead><tbody>",
    );
    for request in requests {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            request_link(run_id, request),
            escape(&request.kind.in_words()),
            escape(&request.requester),
            escape(&request.responder),
            state(request),
        );
    }
    out.push_str("</tbody></table>");
    out
}

fn request_link(run_id: &str, request: &RequestRecord) -> String {
    format!(
        "<a href=\"/runs/{}/requests/{}\">{}</a>",
        escape(run_id),
        escape(&request.request_id),
        escape(&request.request_id)
    )
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

fn summary(message: &Message) -> String {
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
}

pub fn request_page(view: &RequestView) -> String {
    let request = view.request;
    let mut body = format!(
        "<p><a href=\"/runs/{run}\">← run {run_text}</a></p><h1>{kind} {id}</h1>",
        run = escape(&request.run_id),
        run_text = escape(&request.run_id),
        kind = escape(&request.kind.in_words()),
        id = escape(&request.request_id),
    );
    if let Some(notice) = &view.notice {
        let _ = write!(
            body,
            "<p class=\"notice\" role=\"alert\">{}</p>",
            escape(notice)
        );
    }
    let _ = write!(
        body,
        "<dl><dt>from</dt><dd>{}</dd><dt>who may answer</dt><dd>{}</dd><dt>state</dt>\
         <dd class=\"state {state}\" id=\"state\">{state}</dd><dt>asked</dt><dd>{}</dd></dl>",
        escape(&request.requester),
        escape(&request.responder),
        time(request.created_at),
        state = state(request),
    );
    body.push_str(&request_body_html(view));
    if let Some(checks) = &view.policy_checks {
        body.push_str(&policy_checks_html(&request.responder, checks));
    }
    match &request.response {
        Some(response) => body.push_str(&decision_html(&response.responder, &response.body)),
        None if Responder::names_the_person(&request.responder) => body.push_str(&forms(request)),
        None => {
            let _ = write!(
                body,
                "<p>Waiting for {}; a person cannot answer this request.</p>",
                escape(&request.responder)
            );
        }
    }
    page(&request.request_id, &body)
}

/// What the request asks: the plan (with what changed since its previous revision), the tool
/// call, the branch to merge, or the question.
fn request_body_html(view: &RequestView) -> String {
    let request = view.request;
    let mut body = String::new();
    match &request.body {
        MessageBody::PlanApprovalRequest {
            plan_file, plan, ..
        } => {
            let _ = write!(
                body,
                "<p>Plan file <code>{}</code> · revision {}</p>",
                escape(plan_file),
                stored_revision(request)
            );
            body.push_str("<section class=\"plan\" id=\"plan\">");
            body.push_str(&markdown::render(plan));
            body.push_str("</section>");
            body.push_str(&requested_grants_html(request));
            body.push_str(&revision_html(view, plan));
        }
        MessageBody::PermissionRequest {
            tool,
            input,
            reason,
            ..
        } => {
            let _ = write!(
                body,
                "<p>Tool <code>{}</code>: {}</p><pre>{}</pre>",
                escape(tool),
                escape(reason),
                escape(&serde_json::to_string_pretty(input).unwrap_or_default())
            );
        }
        MessageBody::MergeRequest {
            branch,
            commit,
            onto,
            diffstat,
            verification,
            ..
        } => {
            let _ = write!(
                body,
                "<p>Branch <code>{}</code> at <code>{}</code> onto <code>{}</code></p><h2>Diffstat</h2><pre>{}</pre>",
                escape(branch),
                escape(commit),
                escape(onto),
                escape(diffstat),
            );
            if let Some(verification) = verification {
                let _ = write!(
                    body,
                    "<h2>Verification</h2><pre>{}</pre>",
                    escape(verification)
                );
            }
            if let Some(diff) = &view.merge_diff {
                let _ = write!(
                    body,
                    "<h2>Diff</h2><pre class=\"diff\">{}</pre>",
                    escape(diff)
                );
            }
        }
        MessageBody::Question {
            question, options, ..
        } => {
            let _ = write!(
                body,
                "<section class=\"question\">{}</section>",
                markdown::render(question)
            );
            if !options.is_empty() {
                body.push_str("<ul>");
                for option in options {
                    let _ = write!(body, "<li>{}</li>", escape(option));
                }
                body.push_str("</ul>");
            }
        }
        other => {
            let _ = write!(
                body,
                "<pre>{}</pre>",
                escape(
                    &serde_json::to_string_pretty(&other.to_stored().unwrap_or_default())
                        .unwrap_or_default()
                )
            );
        }
    }
    body
}

/// A plan's changes since its previous revision, with the feedback that revision got.
fn revision_html(view: &RequestView, plan: &str) -> String {
    let request = view.request;
    let mut body = String::new();
    match (stored_previous(request), view.previous) {
        (Some(previous_id), Some(previous)) => {
            let before = previous.body.plan().unwrap_or_default();
            let _ = write!(
                body,
                "<h2>Changes since revision {} (<a href=\"/runs/{}/requests/{}\">{}</a>)</h2>",
                stored_revision(previous),
                escape(&request.run_id),
                escape(previous_id),
                escape(previous_id)
            );
            if let Some(feedback) = previous.response.as_ref().and_then(|r| r.body.feedback()) {
                let _ = write!(
                    body,
                    "<p>Feedback on revision {}: {}</p>",
                    stored_revision(previous),
                    escape(feedback)
                );
            }
            body.push_str(&diff_html(before, plan));
        }
        (Some(previous_id), None) => {
            let _ = write!(
                body,
                "<p>The previous revision {} is not in the store.</p>",
                escape(previous_id)
            );
        }
        (None, _) => body.push_str("<p>First revision: nothing to compare.</p>"),
    }
    body
}

/// The policy's rules applied to the plan: one row each, passed or failed.
fn policy_checks_html(
    responder: &str,
    checks: &Result<Vec<muster_config::RuleCheck>, String>,
) -> String {
    let mut html = format!(
        "<h2>Rules of {}</h2>",
        escape(&match Responder::parse(responder) {
            Ok(Responder::Policy(path)) => path.display().to_string(),
            _ => responder.to_owned(),
        })
    );
    match checks {
        Err(error) => {
            let _ = write!(html, "<p class=\"notice\">{}</p>", escape(error));
        }
        Ok(checks) => {
            html.push_str(
                "<table class=\"policy\" id=\"policy-rules\"><thead><tr><th>rule</th>\
                 <th>result</th><th>found</th></tr></thead><tbody>",
            );
            for check in checks {
                let result = if check.passed { "passed" } else { "failed" };
                let _ = write!(
                    html,
                    "<tr class=\"{result}\"><td>{}</td><td>{result}</td><td>{}</td></tr>",
                    escape(&check.rule),
                    escape(&check.detail),
                );
            }
            html.push_str("</tbody></table>");
        }
    }
    html
}

fn diff_html(before: &str, after: &str) -> String {
    let mut out = String::from("<pre class=\"diff\" id=\"diff\">");
    for (change, line) in plan_diff::lines(before, after) {
        let (class, sign) = match change {
            LineChange::Same => ("same", ' '),
            LineChange::Added => ("added", '+'),
            LineChange::Removed => ("removed", '-'),
        };
        let _ = write!(
            out,
            "<span class=\"{class}\">{sign} {}</span>",
            escape(&line)
        );
    }
    out.push_str("</pre>");
    out
}

/// The stored decision: who, what, the feedback, the granted mode, the policy rule, the
/// edited plan.
fn decision_html(responder: &str, body: &MessageBody) -> String {
    let verdict = match body {
        MessageBody::ShutdownResponse { .. } => "Answered",
        other => match other.approved() {
            Some(true) => "Approved",
            Some(false) => "Rejected",
            None => "Answered",
        },
    };
    let mut out = format!(
        "<section class=\"decision\" id=\"decision\"><h2>{verdict} by {}</h2>",
        escape(responder)
    );
    if let MessageBody::Answer { answer, .. } = body {
        let _ = write!(out, "<p>{}</p>", escape(answer));
    }
    if let Some(feedback) = body.feedback() {
        let _ = write!(out, "<p>Feedback: {}</p>", escape(feedback));
    }
    if let MessageBody::PlanApprovalResponse {
        mode: Some(mode),
        lowered_from,
        ..
    } = body
    {
        let lowered = lowered_from
            .as_ref()
            .map(|from| format!(" (lowered from {})", escape(from)))
            .unwrap_or_default();
        let _ = write!(out, "<p>Mode granted: {}{lowered}</p>", escape(mode));
    }
    if let MessageBody::PlanApprovalResponse {
        clear_context: true,
        ..
    } = body
    {
        out.push_str("<p>Execution starts with a fresh context.</p>");
    }
    if let Some(rule) = body.rule() {
        let _ = write!(
            out,
            "<p>Policy rule that decided: <code>{}</code></p>",
            escape(rule)
        );
    }
    if let MessageBody::PlanApprovalResponse {
        grants,
        dropped_grants,
        edited_plan,
        ..
    } = body
    {
        out.push_str(&granted_html(grants, dropped_grants));
        if let Some(edited) = edited_plan {
            let _ = write!(
                out,
                "<h3>Approved with edits</h3><section class=\"plan\">{}</section>",
                markdown::render(edited)
            );
        }
    }
    out.push_str("</section>");
    out
}

const MODES: [&str; 7] = [
    "",
    "plan",
    "dontAsk",
    "default",
    "acceptEdits",
    "auto",
    "bypassPermissions",
];

fn forms(request: &RequestRecord) -> String {
    let action = format!(
        "/runs/{}/requests/{}",
        escape(&request.run_id),
        escape(&request.request_id)
    );
    let feedback = "<label>Feedback <textarea name=\"feedback\" rows=\"2\"></textarea></label>";
    match request.kind {
        MessageKind::PlanApprovalRequest => {
            let mut modes = String::new();
            for mode in MODES {
                let label = if mode.is_empty() {
                    "(restore its own)"
                } else {
                    mode
                };
                let _ = write!(modes, "<option value=\"{mode}\">{label}</option>");
            }
            let plan = request.body.plan().unwrap_or_default();
            let grants = grant_checkboxes(request);
            format!(
                "<section class=\"answer\"><h2>Approve</h2>\
                 <form method=\"post\" action=\"{action}\" id=\"approve\">\
                 <input type=\"hidden\" name=\"action\" value=\"approve\">\
                 <label>Mode <select name=\"mode\">{modes}</select></label>\
                 <label><input type=\"checkbox\" name=\"clear_context\" value=\"on\"> start with a fresh context</label>\
                 {grants}{feedback}<button type=\"submit\">Approve</button></form>\
                 <h2>Approve with edits</h2>\
                 <form method=\"post\" action=\"{action}\" id=\"approve-edited\">\
                 <input type=\"hidden\" name=\"action\" value=\"approve_edited\">\
                 <textarea name=\"plan\" rows=\"16\" class=\"edit\">{}</textarea>\
                 <label>Mode <select name=\"mode\">{modes}</select></label>\
                 <label><input type=\"checkbox\" name=\"clear_context\" value=\"on\"> start with a fresh context</label>\
                 {grants}{feedback}<button type=\"submit\">Approve the edited plan</button></form>\
                 <h2>Reject</h2><form method=\"post\" action=\"{action}\" id=\"reject\">\
                 <input type=\"hidden\" name=\"action\" value=\"reject\">\
                 <label>Feedback (required) <textarea name=\"feedback\" rows=\"3\" required></textarea></label>\
                 <button type=\"submit\">Reject</button></form></section>",
                escape(plan)
            )
        }
        MessageKind::Question => format!(
            "<section class=\"answer\"><h2>Answer</h2><form method=\"post\" action=\"{action}\" id=\"answer\">\
             <input type=\"hidden\" name=\"action\" value=\"answer\">\
             <textarea name=\"answer\" rows=\"3\" required></textarea>\
             <button type=\"submit\">Answer</button></form></section>"
        ),
        _ => format!(
            "<section class=\"answer\"><h2>Decide</h2>\
             <form method=\"post\" action=\"{action}\" id=\"approve\">\
             <input type=\"hidden\" name=\"action\" value=\"approve\">{feedback}\
             <button type=\"submit\">Approve</button></form>\
             <form method=\"post\" action=\"{action}\" id=\"reject\">\
             <input type=\"hidden\" name=\"action\" value=\"reject\">\
             <label>Feedback (required) <textarea name=\"feedback\" rows=\"3\" required></textarea></label>\
             <button type=\"submit\">Reject</button></form></section>"
        ),
    }
}

/// The permission rules a plan asks for (plan-scoped grants), listed for the approver.
fn requested_grants_html(request: &RequestRecord) -> String {
    let rules = crate::human_decision::requested_rules(request);
    if rules.is_empty() {
        return "<p id=\"grants\">The plan asks for no permission rules.</p>".into();
    }
    let mut out = String::from(
        "<section class=\"grants\" id=\"grants\"><h2>Permission rules the plan asks for</h2>\
         <p>Granted with an approval until the plan's verification report; deny and ask rules, \
         path limits, known-dangerous commands and the sandbox still apply.</p><ul>",
    );
    for rule in &rules {
        let _ = write!(out, "<li><code>{}</code></li>", escape(rule));
    }
    out.push_str("</ul></section>");
    out
}

/// The approve forms' grant checkboxes, all checked: `grant_N` carries the rule text and
/// `grants_listed` says the form listed them (so none checked grants none).
fn grant_checkboxes(request: &RequestRecord) -> String {
    let rules = crate::human_decision::requested_rules(request);
    if rules.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "<fieldset class=\"grants\"><legend>Grant</legend>\
         <input type=\"hidden\" name=\"grants_listed\" value=\"1\">",
    );
    for (index, rule) in rules.iter().enumerate() {
        let _ = write!(
            out,
            "<label><input type=\"checkbox\" name=\"grant_{index}\" value=\"{rule}\" checked> \
             <code>{rule}</code></label>",
            rule = escape(rule)
        );
    }
    out.push_str("</fieldset>");
    out
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
fn granted_html(granted: &[String], dropped: &[DroppedGrant]) -> String {
    let mut out = String::new();
    if !granted.is_empty() {
        out.push_str("<p id=\"granted\">Granted until the verification report:</p><ul>");
        for rule in granted {
            let _ = write!(out, "<li><code>{}</code></li>", escape(rule));
        }
        out.push_str("</ul>");
    }
    if !dropped.is_empty() {
        out.push_str("<p>Not granted:</p><ul>");
        for item in dropped {
            let _ = write!(
                out,
                "<li><code>{}</code>: {}</li>",
                escape(&item.rule),
                escape(&item.reason)
            );
        }
        out.push_str("</ul>");
    }
    out
}

/// A page for an error, with a message a person can act on.
pub fn error_page(title: &str, message: &str) -> String {
    page(
        title,
        &format!("<h1>{}</h1><p>{}</p>", escape(title), escape(message)),
    )
}
