//! The person at the editor: what the run asks its person — a plan to approve, a tool call to
//! allow, a question — as `session/request_permission`. A plan's answer goes through the one
//! decision path like `muster approve`'s (the runtime commits it), so the first answer wins.
//! ACP v1's answer carries only an option id: a rejection's feedback travels in the answer's
//! `_meta` under [`FEEDBACK_META`], and without it the rejection says "rejected in the editor".

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    PermissionOption, PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, SessionUpdate, ToolCallContent, ToolCallUpdate,
    ToolCallUpdateFields, ToolKind,
};
use muster_agents::runtime::{Terminal, TerminalPlanDecision};
use muster_config::PermissionMode;
use muster_mailbox::MessageBody;
use serde_json::Value;

use super::threads::Threads;
use crate::human_decision::Decision;
use crate::person_requests::{AskedRequest, PersonFrontEnd};

/// The `_meta` key of a `session/request_permission` answer that carries a rejection's
/// feedback.
pub(crate) const FEEDBACK_META: &str = "muster/feedback";

/// What a rejection without feedback says.
const REJECTED: &str = "rejected in the editor";

/// The modes a plan may be approved into, offered in this order.
const APPROVE_INTO: [PermissionMode; 2] = [PermissionMode::AcceptEdits, PermissionMode::Default];

/// Asks the editor of one session; a request an agent other than the session's own asks
/// goes on that agent's thread when the editor shows threads.
pub(crate) struct EditorAsks {
    pub cx: ConnectionTo<Client>,
    pub threads: Arc<Threads>,
    pub next: AtomicU64,
}

/// The editor's answer: the option chosen (`None`: cancelled or the editor is gone) and the
/// feedback it carried.
struct Answer {
    option: Option<String>,
    feedback: Option<String>,
}

impl EditorAsks {
    /// Sends `agent`'s request and blocks this (blocking) thread until the editor answers.
    fn ask(&self, agent: &str, call: ToolCallUpdate, options: Vec<PermissionOption>) -> Answer {
        let request = RequestPermissionRequest::new(self.threads.session_of(agent), call, options);
        let (sender, receiver) = std::sync::mpsc::channel();
        let cx = self.cx.clone();
        let spawned = self.cx.spawn(async move {
            let answer = cx.send_request(request).block_task().await;
            let _ = sender.send(answer);
            Ok(())
        });
        let gone = Answer {
            option: None,
            feedback: None,
        };
        if spawned.is_err() {
            return gone;
        }
        match receiver.recv() {
            Ok(Ok(response)) => answer_of(response),
            Ok(Err(error)) => {
                tracing::warn!("session/request_permission failed: {error}");
                gone
            }
            Err(_) => gone,
        }
    }

    fn call_id(&self, what: &str) -> String {
        format!("{what}-{}", self.next.fetch_add(1, Ordering::SeqCst) + 1)
    }
}

fn answer_of(response: RequestPermissionResponse) -> Answer {
    let feedback = response
        .meta
        .as_ref()
        .and_then(|meta| meta.get(FEEDBACK_META))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .filter(|text| !text.trim().is_empty());
    let option = match response.outcome {
        RequestPermissionOutcome::Selected(selected) => Some(selected.option_id.0.to_string()),
        _ => None,
    };
    Answer { option, feedback }
}

fn option(id: &str, name: &str, kind: PermissionOptionKind) -> PermissionOption {
    PermissionOption::new(id.to_owned(), name.to_owned(), kind)
}

/// The plan decision an option id means.
pub(crate) fn plan_decision(
    option: Option<&str>,
    feedback: Option<String>,
) -> TerminalPlanDecision {
    let mode = option
        .and_then(|id| id.strip_prefix("approve:"))
        .and_then(|mode| mode.parse::<PermissionMode>().ok());
    match mode {
        Some(mode) => TerminalPlanDecision::Approve {
            mode: Some(mode),
            feedback,
            clear_context: false,
        },
        None => TerminalPlanDecision::Reject {
            feedback: feedback.unwrap_or_else(|| REJECTED.to_owned()),
        },
    }
}

impl Terminal for EditorAsks {
    fn decide_plan(
        &self,
        _request_id: &str,
        agent: &str,
        plan_file: &Path,
        plan: &str,
    ) -> TerminalPlanDecision {
        let call = ToolCallUpdate::new(
            self.call_id("plan"),
            ToolCallUpdateFields::new()
                .title(format!(
                    "{agent}: leave plan mode with {}",
                    plan_file.display()
                ))
                .kind(ToolKind::SwitchMode)
                .content(vec![ToolCallContent::from(plan)]),
        );
        let answer = self.ask(agent, call, Self::plan_options());
        plan_decision(answer.option.as_deref(), answer.feedback)
    }

    fn answer_question(&self, agent: &str, question: &str, options: &[String]) -> Option<String> {
        let call = ToolCallUpdate::new(
            self.call_id("question"),
            ToolCallUpdateFields::new()
                .title(format!("{agent} asks: {question}"))
                .kind(ToolKind::Other),
        );
        let mut choices: Vec<PermissionOption> = options
            .iter()
            .enumerate()
            .map(|(i, text)| {
                option(
                    &format!("answer:{i}"),
                    text,
                    PermissionOptionKind::AllowOnce,
                )
            })
            .collect();
        choices.push(option(
            "none",
            "No answer",
            PermissionOptionKind::RejectOnce,
        ));
        let answer = self.ask(agent, call, choices);
        let chosen = answer
            .option
            .as_deref()
            .and_then(|id| id.strip_prefix("answer:"))
            .and_then(|i| i.parse::<usize>().ok())
            .and_then(|i| options.get(i).cloned());
        chosen.or(answer.feedback)
    }

    fn decided_elsewhere(&self, request_id: &str, decided_by: &str) {
        let text = format!(
            "\n{request_id} was decided first by {decided_by} elsewhere (`muster approve` or \
             the web inbox); the selection made here changed nothing.\n"
        );
        let update = SessionUpdate::AgentMessageChunk(super::updates::chunk(&text));
        self.threads.send(&super::updates::To::Session, update);
    }

    fn allow_call(&self, agent: &str, tool: &str, input: &Value, reason: &str) -> bool {
        let call = ToolCallUpdate::new(
            self.call_id("ask"),
            ToolCallUpdateFields::new()
                .title(format!("{agent} wants to run {tool} ({reason})"))
                .raw_input(input.clone()),
        );
        let options = vec![
            option("allow", "Allow once", PermissionOptionKind::AllowOnce),
            option("reject", "Reject", PermissionOptionKind::RejectOnce),
        ];
        self.ask(agent, call, options).option.as_deref() == Some("allow")
    }
}

impl EditorAsks {
    /// The options of a plan's request: approve into each mode offered, or reject.
    fn plan_options() -> Vec<PermissionOption> {
        let mut options: Vec<PermissionOption> = APPROVE_INTO
            .iter()
            .map(|mode| {
                option(
                    &format!("approve:{mode}"),
                    &format!("Approve, then work in {mode}"),
                    PermissionOptionKind::AllowOnce,
                )
            })
            .collect();
        options.push(option(
            "reject",
            "Reject (keep planning)",
            PermissionOptionKind::RejectOnce,
        ));
        options
    }

    /// Approve once or reject: a merge's and a permission ask's options.
    fn yes_no(approve: &str) -> Vec<PermissionOption> {
        vec![
            option("approve", approve, PermissionOptionKind::AllowOnce),
            option("reject", "Reject", PermissionOptionKind::RejectOnce),
        ]
    }
}

/// The decision an approve-or-reject answer makes (a merge, a permission ask); none when the
/// request was cancelled or the editor is gone (it waits for another answer).
fn yes_no_decision(answer: Answer) -> Option<Decision> {
    let option = answer.option.as_deref()?;
    Some(if option == "approve" {
        Decision::approve(answer.feedback)
    } else {
        Decision::Reject {
            feedback: answer.feedback.unwrap_or_else(|| REJECTED.to_owned()),
        }
    })
}

/// A diff as the text of a request's content (ACP's `diff` content is one file's old and new
/// text; a plan's revision and a merge span any number of files, so they are shown as text).
fn diff_block(heading: &str, diff: &str) -> ToolCallContent {
    ToolCallContent::from(format!("{heading}\n```diff\n{diff}```\n").as_str())
}

/// A team run's requests to the person, as the editor's `session/request_permission`; the
/// tool call's id is the stored request's id, so the editor's answer names what it decides.
impl PersonFrontEnd for EditorAsks {
    fn name(&self) -> &'static str {
        "muster acp"
    }

    fn decide(&self, asked: &AskedRequest) -> Option<Decision> {
        let agent = asked.agent.as_str();
        let id = asked.request_id.clone();
        match &asked.body {
            MessageBody::PlanApprovalRequest {
                plan, plan_file, ..
            } => {
                let mut content = vec![ToolCallContent::from(plan.as_str())];
                let mut title = format!("{agent}: leave plan mode with {plan_file}");
                if let Some(revision) = &asked.revision {
                    title.push_str(&format!(" (revises {})", revision.previous_request_id));
                    content.push(diff_block(
                        &format!("Changes since {}:", revision.previous_request_id),
                        &revision.diff,
                    ));
                }
                let call = ToolCallUpdate::new(
                    id,
                    ToolCallUpdateFields::new()
                        .title(title)
                        .kind(ToolKind::SwitchMode)
                        .content(content),
                );
                let answer = self.ask(agent, call, Self::plan_options());
                // Cancelled, or the editor is gone: the request waits for another answer.
                answer.option.as_ref()?;
                Some(plan_decision(answer.option.as_deref(), answer.feedback).into())
            }
            MessageBody::MergeRequest { branch, files, .. } => {
                let content = match &asked.merge_diff {
                    Some(diff) => vec![diff_block(&format!("Merging {branch} adds:"), diff)],
                    None => vec![ToolCallContent::from(
                        format!("Merging {branch} changes {}.", files.join(", ")).as_str(),
                    )],
                };
                let call = ToolCallUpdate::new(
                    id,
                    ToolCallUpdateFields::new()
                        .title(format!("{agent}: merge {branch}"))
                        .kind(ToolKind::Edit)
                        .content(content),
                );
                yes_no_decision(self.ask(agent, call, Self::yes_no("Merge it")))
            }
            MessageBody::PermissionRequest {
                tool,
                input,
                reason,
                ..
            } => {
                let call = ToolCallUpdate::new(
                    id,
                    ToolCallUpdateFields::new()
                        .title(format!("{agent} wants to run {tool} ({reason})"))
                        .raw_input(input.clone()),
                );
                yes_no_decision(self.ask(agent, call, Self::yes_no("Allow once")))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each option id of a plan's request, and what it decides.
    #[test]
    fn a_plan_option_decides_the_plan() {
        let rows: Vec<(Option<&str>, Option<&str>, TerminalPlanDecision)> = vec![
            (
                Some("approve:acceptEdits"),
                None,
                TerminalPlanDecision::Approve {
                    mode: Some(PermissionMode::AcceptEdits),
                    feedback: None,
                    clear_context: false,
                },
            ),
            (
                Some("reject"),
                Some("split step 2"),
                TerminalPlanDecision::Reject {
                    feedback: "split step 2".into(),
                },
            ),
            (
                Some("reject"),
                None,
                TerminalPlanDecision::Reject {
                    feedback: REJECTED.into(),
                },
            ),
            (
                None,
                None,
                TerminalPlanDecision::Reject {
                    feedback: REJECTED.into(),
                },
            ),
            (
                Some("approve:sideways"),
                None,
                TerminalPlanDecision::Reject {
                    feedback: REJECTED.into(),
                },
            ),
        ];
        for (option, feedback, expected) in rows {
            let got = plan_decision(option, feedback.map(str::to_owned));
            assert_eq!(format!("{got:?}"), format!("{expected:?}"), "{option:?}");
        }
    }
}
