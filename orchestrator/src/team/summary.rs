//! What `--output text` prints when a team run ends: the lead's result, then what a person
//! needs after a headless run — who worked, how each plan and permission request was decided
//! and by whom, the task board, the verifications, and where to look further.

use muster_agents::verification::VerificationReport;
use muster_mailbox::{MemberKind, MessageBody, RequestRecord, RosterEntry, Task};
use muster_protocol::MessageKind;

/// What the run spent, a line per agent, model and provider, then the total and what caching
/// saved (empty when no model was called).
pub(crate) fn costs(report: &muster_agents::runtime::CostReport) -> String {
    if report.rows.is_empty() {
        return String::new();
    }
    use crate::display::dollars;
    let mut out = String::from("  cost (input / cache read / cache write / output tokens):\n");
    for row in report.rows.iter().chain([&report.total]) {
        let who = if row.agent.is_empty() {
            "total".to_owned()
        } else {
            format!("{} {} on {}", row.agent, row.model, row.provider)
        };
        out.push_str(&format!(
            "    {who}: {} / {} / {} / {}, {}\n",
            row.input_tokens,
            row.cache_read_tokens,
            row.cache_write_tokens,
            row.output_tokens,
            dollars(row.cost_usd)
        ));
    }
    out.push_str(&format!(
        "    caching saved ${:.4}\n",
        report.cache_saved_usd
    ));
    out
}

/// The run as the summary shows it.
pub(crate) struct RunFacts<'a> {
    pub run_id: &'a str,
    pub slug: &'a str,
    pub team: &'a str,
    pub status: &'a str,
    pub exit_code: u8,
    pub roster: &'a [RosterEntry],
    pub requests: &'a [RequestRecord],
    /// The approved merge requests that were sent back instead of applied
    /// ([`crate::team::isolation::stale_merges`]).
    pub stale_merges: &'a std::collections::BTreeSet<String>,
    pub tasks: &'a [muster_mailbox::Task],
    pub reports: &'a [VerificationReport],
    pub messages: usize,
}

/// `approved by lead, mode acceptEdits`, `rejected by policy`, `waiting for human`, … for a
/// request.
pub(crate) fn decision(request: &RequestRecord) -> String {
    let Some(response) = &request.response else {
        return format!("waiting for {}", request.responder);
    };
    let by = response.body.decided_by(&response.responder);
    match response.body.clone() {
        MessageBody::PlanApprovalResponse {
            approved: true,
            mode,
            ..
        } => format!(
            "approved by {by}{}",
            mode.map(|m| format!(", mode {m}")).unwrap_or_default()
        ),
        MessageBody::PlanApprovalResponse {
            approved: false, ..
        } => format!("rejected by {by}"),
        MessageBody::PermissionResponse { approved, .. } => format!(
            "{} by {}",
            if approved { "allowed" } else { "denied" },
            response.responder
        ),
        MessageBody::MergeResponse { approved, .. } => format!(
            "{} by {}",
            if approved { "merged" } else { "sent back" },
            response.responder
        ),
        _ => format!("answered by {}", response.responder),
    }
}

/// [`decision`], except that an approved merge request in `stale` — the integration branch
/// moved and the merge then conflicted or failed the test gate — reads as sent back, not
/// merged.
pub(crate) fn merge_aware_decision(
    request: &RequestRecord,
    stale: &std::collections::BTreeSet<String>,
) -> String {
    match &request.response {
        Some(response) if stale.contains(&request.request_id) => format!(
            "approved by {}, sent back: the integration branch moved",
            response.responder
        ),
        _ => decision(request),
    }
}

/// The feedback of a decided plan request, if it carried any.
fn feedback(request: &RequestRecord) -> Option<String> {
    let response = request.response.as_ref()?;
    match response.body.clone() {
        MessageBody::PlanApprovalResponse { feedback, .. } => feedback,
        _ => None,
    }
}

/// The text a person reads: `result` (the lead's own words) first, then the run's facts.
pub(crate) fn render(result: &str, facts: &RunFacts<'_>) -> String {
    let mut out = String::new();
    if !result.trim().is_empty() {
        out.push_str(result.trim_end());
        out.push_str("\n\n");
    }
    out.push_str(&format!(
        "Team {}, run {} ({}): {}, exit code {}.\n",
        facts.team, facts.run_id, facts.slug, facts.status, facts.exit_code
    ));
    agents(&mut out, facts.roster);
    requests(&mut out, facts.requests, facts.stale_merges);
    tasks(&mut out, facts.tasks);
    for report in facts.reports {
        if let Some(line) = report.render_text().lines().next() {
            out.push_str(&format!("  {line}\n"));
        }
    }
    out.push_str(&format!(
        "  {} messages in the store: `muster inbox --run {id}`, `muster plans --run {id}`, \
         `muster tasks --run {id}`.",
        facts.messages,
        id = facts.run_id
    ));
    out
}

fn agents(out: &mut String, roster: &[RosterEntry]) {
    let names: Vec<String> = roster
        .iter()
        .filter(|m| matches!(m.kind, MemberKind::Lead | MemberKind::Teammate))
        .map(|m| match &m.definition {
            Some(definition) => format!("{} ({definition})", m.agent),
            None => m.agent.clone(),
        })
        .collect();
    let subagents = roster
        .iter()
        .filter(|m| m.kind == MemberKind::Subagent)
        .count();
    out.push_str(&format!("  agents: {}", names.join(", ")));
    if subagents > 0 {
        out.push_str(&format!("; {subagents} subagent(s)"));
    }
    out.push('\n');
}

fn requests(
    out: &mut String,
    requests: &[RequestRecord],
    stale: &std::collections::BTreeSet<String>,
) {
    for request in requests.iter().filter(|r| {
        matches!(
            r.kind,
            MessageKind::PlanApprovalRequest
                | MessageKind::PermissionRequest
                | MessageKind::MergeRequest
        )
    }) {
        let what = match request.kind {
            MessageKind::PlanApprovalRequest => "plan",
            MessageKind::MergeRequest => "merge",
            _ => "permission",
        };
        out.push_str(&format!(
            "  {} ({what} of {}): {}",
            request.request_id,
            request.requester,
            merge_aware_decision(request, stale)
        ));
        if let Some(feedback) = feedback(request) {
            out.push_str(&format!(" — \"{}\"", one_line(&feedback, 100)));
        }
        out.push('\n');
    }
}

fn tasks(out: &mut String, tasks: &[Task]) {
    for task in tasks {
        out.push_str(&format!(
            "  task #{} {}: {}{}\n",
            task.task_id,
            one_line(&task.subject, 60),
            task.status.as_str(),
            task.owner
                .as_ref()
                .map(|owner| format!(" ({owner})"))
                .unwrap_or_default()
        ));
    }
}

/// `text` on one line, cut to `max` characters.
fn one_line(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        return flat;
    }
    let cut: String = flat.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

/// The summary's line naming the worker that ran each teammate placed on workers.
pub(crate) fn workers_line(workers: &std::collections::BTreeMap<String, String>) -> String {
    if workers.is_empty() {
        return String::new();
    }
    let placed: Vec<String> = workers
        .iter()
        .map(|(agent, worker)| format!("{agent} on {worker}"))
        .collect();
    format!("\nWorkers: {}", placed.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_of_one_line_cuts() {
        let cases = [
            ("short", 10, "short"),
            ("two\n  lines", 20, "two lines"),
            ("abcdefghij", 5, "abcd…"),
            ("", 3, ""),
        ];
        for (text, max, expected) in cases {
            assert_eq!(one_line(text, max), expected, "{text:?}");
        }
    }

    /// A merge request as the summary and `muster plans` describe it: waiting, merged, sent
    /// back, and approved but sent back because the integration branch moved.
    #[test]
    fn a_merge_request_approved_on_a_head_that_moved_reads_as_sent_back() {
        let merge = |id: &str, approved: Option<bool>| {
            let body = serde_json::json!({"type": "merge_request", "request_id": id,
                "agent": "bob", "branch": "muster/r1/bob", "commit": "c1", "onto": "h1",
                "files": ["b.txt"], "diffstat": "1 file changed", "responder": "lead"});
            let body = MessageBody::from_tagged(&body);
            let response = approved.map(|approved| {
                let body = serde_json::json!({"type": "merge_response", "request_id": id,
                    "approved": approved});
                let body = MessageBody::from_tagged(&body);
                muster_mailbox::ResponseRecord {
                    responder: "lead".into(),
                    kind: body.kind(),
                    message_key: format!("{id}-response"),
                    body,
                    decided_at: 0,
                }
            });
            RequestRecord {
                run_id: "r1".into(),
                request_id: id.into(),
                kind: body.kind(),
                requester: "bob".into(),
                recipient: "lead".into(),
                responder: "lead".into(),
                message_key: id.into(),
                body,
                created_at: 0,
                response,
            }
        };
        let stale: std::collections::BTreeSet<String> = ["merge-bob-3".to_owned()].into();
        let cases = [
            ("merge-bob-1", None, "waiting for lead"),
            ("merge-bob-2", Some(true), "merged by lead"),
            (
                "merge-bob-3",
                Some(true),
                "approved by lead, sent back: the integration branch moved",
            ),
            ("merge-bob-4", Some(false), "sent back by lead"),
        ];
        for (id, approved, expected) in cases {
            let request = merge(id, approved);
            assert_eq!(merge_aware_decision(&request, &stale), expected, "{id}");
            let facts = RunFacts {
                run_id: "r1",
                slug: "s",
                team: "t",
                status: "completed",
                exit_code: 0,
                roster: &[],
                requests: std::slice::from_ref(&request),
                stale_merges: &stale,
                tasks: &[],
                reports: &[],
                messages: 0,
            };
            let text = render("", &facts);
            assert!(
                text.contains(&format!("{id} (merge of bob): {expected}")),
                "{text}"
            );
        }
    }
}
