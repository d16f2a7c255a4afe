//! A person's answer to a request, wherever it is given (`muster approve` / `reject` /
//! `answer`, the web inbox of `muster serve`): check that a person may answer it, build the
//! response, and commit it through the one decision path ([`muster_mailbox::decide`]), which
//! keeps only the first answer and wakes the live run.

use std::path::Path;

use muster_agents::permission::grants::{Granter, select_grants};
use muster_agents::runtime::TerminalPlanDecision;
use muster_mailbox::decide::{self, Decided, Waiter};
use muster_mailbox::{
    MailboxStore, MessageBody, MessageKind, NewResponse, RequestRecord, StoreError,
};
use muster_protocol::Responder;

/// A person's decision on one request.
#[derive(Debug, Clone)]
pub enum Decision {
    Approve {
        mode: Option<String>,
        feedback: Option<String>,
        edited_plan: Option<String>,
        clear_context: bool,
        /// Which of the plan's requested rules to grant (plan-scoped grants): `None` grants
        /// all of them, `Some(vec![])` none; a rule the plan did not ask for is refused.
        grants: Option<Vec<String>>,
    },
    Reject {
        feedback: String,
    },
    Answer {
        text: String,
    },
}

impl Decision {
    /// Yes to a call's permission or a merge (nothing of a plan's to choose), with an
    /// optional word for the asker.
    pub(crate) fn approve(feedback: Option<String>) -> Decision {
        Decision::Approve {
            mode: None,
            feedback,
            edited_plan: None,
            clear_context: false,
            grants: None,
        }
    }
}

/// A plan decided at a front end (the terminal, an editor, an SDK program): the plan as it
/// was submitted, with the plan's requested rules granted as a whole.
impl From<TerminalPlanDecision> for Decision {
    fn from(decision: TerminalPlanDecision) -> Decision {
        match decision {
            TerminalPlanDecision::Approve {
                mode,
                feedback,
                clear_context,
            } => Decision::Approve {
                mode: mode.map(|mode| mode.to_string()),
                feedback,
                edited_plan: None,
                clear_context,
                grants: None,
            },
            TerminalPlanDecision::Reject { feedback } => Decision::Reject { feedback },
        }
    }
}

/// Why a person's answer was not stored.
#[derive(Debug, thiserror::Error)]
pub enum RefusedDecision {
    #[error("request {request_id} was already decided by {by}; only the first answer counts")]
    AlreadyDecided { request_id: String, by: String },
    #[error("request {request_id} is answered by {responder}, not by a person (`human`)")]
    NotForAPerson {
        request_id: String,
        responder: String,
    },
    /// The answer does not fit the request (a mode that is no mode, an answer to a plan).
    #[error("{0}")]
    Unfit(String),
    #[error(transparent)]
    Store(StoreError),
}

/// Answers `request` as `human` and wakes the run if it is live (its socket under
/// `runs_dir`).
pub async fn decide_as_human(
    store: &dyn MailboxStore,
    runs_dir: &Path,
    request: &RequestRecord,
    decision: Decision,
) -> Result<Decided, RefusedDecision> {
    if let Some(response) = &request.response {
        return Err(RefusedDecision::AlreadyDecided {
            request_id: request.request_id.clone(),
            by: response.responder.clone(),
        });
    }
    if !Responder::names_the_person(&request.responder) {
        return Err(RefusedDecision::NotForAPerson {
            request_id: request.request_id.clone(),
            responder: request.responder.clone(),
        });
    }
    let body = response_body(request, decision)?;
    let answer = NewResponse {
        run_id: request.run_id.clone(),
        sender: Responder::HUMAN.into(),
        body,
        idempotency_key: None,
    };
    match decide::decide(store, answer, Waiter::LiveRun { runs_dir }).await {
        // An open web inbox learns of the commit from the store (its commit hook, or
        // PostgreSQL's change channel).
        Ok(decided) => Ok(decided),
        // Another answer won between the read above and the commit: the store's constraint
        // decides, and the loser is told who won.
        Err(StoreError::AlreadyDecided { .. }) => {
            let by = match store.request(&request.run_id, &request.request_id).await {
                Ok(Some(RequestRecord {
                    response: Some(response),
                    ..
                })) => response.responder,
                _ => "another answer".into(),
            };
            Err(RefusedDecision::AlreadyDecided {
                request_id: request.request_id.clone(),
                by,
            })
        }
        Err(error) => Err(RefusedDecision::Store(error)),
    }
}

/// `Approved`, `Rejected` or `Answered`, for a stored response body.
pub fn verdict(body: &MessageBody) -> &'static str {
    match body {
        MessageBody::PlanApprovalResponse { approved: true, .. }
        | MessageBody::PermissionResponse { approved: true, .. }
        | MessageBody::MergeResponse { approved: true, .. } => "Approved",
        MessageBody::Answer { .. } => "Answered",
        _ => "Rejected",
    }
}

/// The rules a plan request asks for (its `allowedPrompts`); none for other requests.
pub fn requested_rules(request: &RequestRecord) -> Vec<String> {
    match request.body.clone() {
        MessageBody::PlanApprovalRequest {
            allowed_prompts, ..
        } => allowed_prompts,
        _ => Vec::new(),
    }
}

fn unfit(message: String) -> RefusedDecision {
    RefusedDecision::Unfit(message)
}

fn response_body(
    request: &RequestRecord,
    decision: Decision,
) -> Result<MessageBody, RefusedDecision> {
    let request_id = request.request_id.clone();
    let plans_only = |what: &str| {
        unfit(format!(
            "{request_id} is a {what}: a mode, grants, an edited plan and a cleared context apply to plans only"
        ))
    };
    use MessageKind as K;
    match (&request.kind, decision) {
        (
            K::PlanApprovalRequest,
            Decision::Approve {
                mode,
                feedback,
                edited_plan,
                clear_context,
                grants,
            },
        ) => {
            if let Some(mode) = &mode {
                mode.parse::<muster_config::PermissionMode>()
                    .map_err(|e| unfit(format!("mode: {e}")))?;
            }
            if edited_plan.as_deref().is_some_and(|p| p.trim().is_empty()) {
                return Err(unfit(format!(
                    "the edited plan for {request_id} is empty: approve without edits or send a plan"
                )));
            }
            // A person's ceiling is any mode: they drop only what they leave out.
            let selected = select_grants(
                &requested_rules(request),
                Granter::Person {
                    chosen: grants.as_deref(),
                },
            )
            .map_err(|e| unfit(format!("--grant: {e}")))?;
            Ok(MessageBody::PlanApprovalResponse {
                request_id,
                approved: true,
                feedback,
                mode,
                lowered_from: None,
                edited_plan,
                clear_context,
                rule: None,
                grants: selected.granted,
                dropped_grants: selected.dropped,
            })
        }
        (K::PlanApprovalRequest, Decision::Reject { feedback }) => {
            Ok(MessageBody::plan_rejected(request_id, feedback))
        }
        // A call's permission or a merge: only yes or no, with a reason.
        (kind @ (K::PermissionRequest | K::MergeRequest), decision) => {
            let (approved, feedback) = match decision {
                Decision::Approve {
                    mode,
                    edited_plan,
                    clear_context,
                    feedback,
                    grants,
                } => {
                    if mode.is_some() || edited_plan.is_some() || clear_context || grants.is_some()
                    {
                        return Err(plans_only(&kind.in_words()));
                    }
                    (true, feedback)
                }
                Decision::Reject { feedback } => (false, Some(feedback)),
                Decision::Answer { .. } => {
                    return Err(unfit(format!(
                        "{request_id} is a {}: approve or reject it (`muster approve` / `muster reject`)",
                        kind.in_words()
                    )));
                }
            };
            Ok(if *kind == K::MergeRequest {
                MessageBody::MergeResponse {
                    request_id,
                    approved,
                    feedback,
                    rule: None,
                }
            } else {
                MessageBody::PermissionResponse {
                    request_id,
                    approved,
                    feedback,
                    rule: None,
                }
            })
        }
        (K::Question, Decision::Answer { text }) => Ok(MessageBody::Answer {
            request_id,
            answer: text,
        }),
        (K::Question, _) => Err(unfit(format!(
            "{request_id} is a question: answer it (`muster answer {request_id} TEXT`)"
        ))),
        (_, Decision::Answer { .. }) => Err(unfit(format!(
            "{request_id} is a {}: approve or reject it (`muster approve` / `muster reject`)",
            request.kind.in_words()
        ))),
        (kind, _) => Err(unfit(format!(
            "{request_id} is a {}, which a person does not answer",
            kind.in_words()
        ))),
    }
}
