//! A teammate's plan decided by a plan reviewer hook (`approver = "hook:NAME"`), through the
//! one decision path: the hook runs in the lead's process (never on a worker, so it runs once
//! per request however the team is placed), its answer is committed as the response from the
//! `policy` roster entry, the one every automated answer comes from.
//!
//! Crash-exact: the answer is the decision's commit. Killed after the hook answered and before
//! that commit (failpoint `hook_reviewed_plan`, first hit), the resume finds the request
//! waiting and runs the hook again — the one review in flight, never a second answer; killed
//! after it (the point's second hit), the resume finds the request decided and the teammate
//! reads the answer, and the hook does not run again. Within a process each request is
//! reviewed at most once, whichever of the request's commit, the lead's mail or a resume's
//! sweep reaches it first.

use muster_agents::hooks::{PlanReview, PlanToReview};
use muster_config::{PermissionMode, Responder};
use muster_mailbox::decide::{Waiter, decide};
use muster_mailbox::{MessageBody, NewResponse, StoreError};
use muster_protocol::DroppedGrant;

use super::Team;

impl Team {
    /// A policy or a plan reviewer hook decides the request `request_id`, when it is its
    /// responder and no answer came yet.
    pub(crate) async fn decide_automatically(&self, request_id: &str) {
        let responder = match self.store.request(self.run_id(), request_id).await {
            Ok(Some(request)) if request.response.is_none() => request.responder,
            Ok(_) => return,
            Err(error) => {
                tracing::warn!(%request_id, %error, "the request could not be read");
                return;
            }
        };
        match Responder::parse(&responder) {
            Ok(Responder::Policy(_)) => self.decide_by_policy(request_id).await,
            Ok(Responder::Hook(_)) => {
                if let Err(error) = self.decide_by_hook(request_id).await {
                    tracing::warn!(%request_id, %error, "the plan reviewer hook could not decide");
                }
            }
            _ => {}
        }
    }

    async fn decide_by_hook(&self, request_id: &str) -> anyhow::Result<()> {
        // A teammate placed on a worker: the lead's process reviews its plans.
        if self.worker.is_some() {
            return Ok(());
        }
        {
            let mut reviewed = self.reviewed.lock().unwrap_or_else(|p| p.into_inner());
            if !reviewed.insert(request_id.to_owned()) {
                return Ok(());
            }
        }
        let Some(request) = self.store.request(self.run_id(), request_id).await? else {
            return Ok(());
        };
        if request.response.is_some() {
            return Ok(());
        }
        let Ok(Responder::Hook(name)) = Responder::parse(&request.responder) else {
            return Ok(());
        };
        let MessageBody::PlanApprovalRequest {
            plan,
            plan_file,
            allowed_prompts,
            revision,
            ..
        } = &request.body
        else {
            // Only plans reach a reviewer (its teammate's other requests go to the lead).
            return Ok(());
        };
        let (definition, working) = self.definition_and_working_mode(&request.requester);
        let review = match self.run.hooks.hooks().plan_reviewer(&name) {
            Some(reviewer) => {
                let reviewed = self
                    .run
                    .hooks
                    .review_plan(
                        reviewer,
                        &PlanToReview {
                            run_id: self.run_id(),
                            request_id,
                            teammate: &request.requester,
                            agent_type: &definition,
                            plan,
                            plan_file,
                            allowed_prompts,
                            revision: *revision,
                            workspace: &self.root,
                        },
                    )
                    .await;
                (
                    reviewed,
                    format!(
                        "{}{name} ({})",
                        muster_protocol::Responder::PLAN_REVIEWER_RULE,
                        reviewer.origin.source
                    ),
                )
            }
            // The run's stored settings lack it (checked at the start, so only a changed
            // store): never an approval.
            None => (
                PlanReview::Failed {
                    feedback: format!("plan reviewer `{name}` is not configured in this run"),
                },
                format!(
                    "{}{name} (missing)",
                    muster_protocol::Responder::PLAN_REVIEWER_RULE
                ),
            ),
        };
        muster_mailbox::failpoint!("hook_reviewed_plan");
        let (review, mut rule) = review;
        let (approved, feedback) = match review {
            PlanReview::Approved { feedback } => (true, feedback),
            PlanReview::Rejected { feedback } => (false, Some(feedback)),
            PlanReview::Failed { feedback } => {
                // Marked as the reviewer's failure, not the plan's: counted from the store.
                rule.push_str(muster_protocol::Responder::PLAN_REVIEWER_FAILED);
                let requests = self.store.requests(self.run_id()).await?;
                let failures = 1 + muster_mailbox::revision::reviewer_failures_before(
                    &requests,
                    &request.requester,
                    request_id,
                );
                let limit = muster_mailbox::revision::REVIEWER_FAILURES_BEFORE_A_PERSON;
                if failures >= limit {
                    tracing::warn!(
                        teammate = %request.requester,
                        %request_id,
                        "plan reviewer hook `{name}` failed {failures} times in a row; {}'s \
                         next plan goes to a person (`muster approve`/`muster reject`, the web \
                         inbox)",
                        request.requester
                    );
                    (
                        false,
                        Some(format!(
                            "{feedback}\nThe plan reviewer failed {failures} times in a row: \
                             call ExitPlanMode again with your plan, and a person decides it."
                        )),
                    )
                } else {
                    (false, Some(feedback))
                }
            }
        };
        // A hook grants the mode the teammate works in, up to the lead's, and none of the
        // plan's requested rules (it cannot weigh them as the lead or a policy does).
        let granted = working.capped_at(self.lead_mode);
        let dropped_grants = if approved {
            allowed_prompts
                .iter()
                .map(|rule| DroppedGrant {
                    rule: rule.clone(),
                    reason: "a plan reviewer hook grants no rules".into(),
                })
                .collect()
        } else {
            Vec::new()
        };
        let answer = NewResponse {
            run_id: self.run_id().to_owned(),
            sender: muster_mailbox::POLICY.into(),
            body: MessageBody::PlanApprovalResponse {
                request_id: request_id.to_owned(),
                approved,
                feedback,
                mode: approved.then(|| granted.to_string()),
                lowered_from: (approved && granted != working).then(|| working.to_string()),
                edited_plan: None,
                clear_context: false,
                rule: Some(rule),
                grants: Vec::new(),
                dropped_grants,
            },
            idempotency_key: None,
        };
        match decide(self.store.as_ref(), answer, Waiter::InProcess).await {
            Ok(decided) => {
                muster_mailbox::failpoint!("hook_reviewed_plan");
                self.sent(&decided.response);
                Ok(())
            }
            Err(StoreError::AlreadyDecided { .. }) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// A teammate's definition and the mode it works in once approved. A resume decides the
    /// requests left waiting before it rebuilds the teammates, so a declared teammate not
    /// started yet in this process is read from the team file as `start_declared` would
    /// start it; a spawned one not started yet works in `default` (lower, never higher).
    pub(crate) fn definition_and_working_mode(&self, agent: &str) -> (String, PermissionMode) {
        {
            let members = self.members.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(member) = members.get(agent) {
                return (member.definition.clone(), member.working_mode);
            }
        }
        match self.file.teammates.iter().find(|spec| spec.id == agent) {
            Some(spec) => (
                spec.definition.clone(),
                super::members::declared_working_mode(
                    self.run.catalog.get(&spec.definition),
                    self.lead_mode,
                ),
            ),
            None => (String::new(), PermissionMode::Default),
        }
    }
}
