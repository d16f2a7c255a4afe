//! Plan mode as a state machine: `EnterPlanMode` saves `pre_plan_mode` and switches to plan;
//! `ExitPlanMode` checks and writes the plan, sends the `plan_approval_request` through the
//! store and waits for the matching response in the agent's own inbox; approval restores the
//! saved mode (capped, with the auto-gate fallback), rejection keeps planning.

use muster_config::PermissionMode;
use muster_mailbox::message::DroppedGrant;
use muster_mailbox::{Message as Mail, MessageBody, MessageFilter, NewResponse, RequestRecord};
use muster_protocol::RequestFamily;
use muster_protocol::ToolName;

use crate::model::ToolCall;
use crate::permission::PlanGrants;
use crate::permission::grants::{GrantSelection, Granter, requested_rules, select_grants};
use crate::tools::{ExitPlanModeInput, ToolOutput};

use super::agent::AgentRuntime;
use super::calls::{AgentOutcome, CallResult, Dispatched};
use super::context::{PlanApprover, TerminalPlanDecision};
use super::error::RuntimeResult;
use super::events::RunEvent;
use super::gate::GateDecision;
use super::plan_files::{missing_sections, read_plan, write_plan};
use super::records::{AgentKind, Record};
use muster_protocol::{AgentState, ApprovalSubject, DecisionSubject};

/// A decision on a plan, as read from the response message.
struct PlanDecision {
    responder: String,
    /// Who decided, as a person reads it (a plan reviewer hook by name, where `responder` is
    /// the `policy` entry it answers as).
    decided_by: String,
    approved: bool,
    feedback: Option<String>,
    mode: Option<PermissionMode>,
    /// A granted mode the response named that is no mode (never dropped in silence: the
    /// teammate is told, and works in its restored mode).
    unreadable_mode: Option<String>,
    edited_plan: Option<String>,
    clear_context: bool,
    /// The rules the approval grants (plan-scoped grants).
    grants: Vec<String>,
    /// Requested rules it did not grant, with why.
    dropped_grants: Vec<DroppedGrant>,
}

impl AgentRuntime {
    pub(super) fn enter_plan_mode(&mut self, decision: &GateDecision) -> Dispatched {
        if matches!(self.kind, AgentKind::Subagent { .. }) {
            return done(CallResult::new(
                decision,
                ToolOutput::error("EnterPlanMode cannot be used by a subagent"),
            ));
        }
        if self.plan.mode == PermissionMode::Plan {
            return done(CallResult::new(
                decision,
                ToolOutput::error("You are already in plan mode."),
            ));
        }
        self.plan.pre_plan_mode = Some(self.plan.mode);
        self.plan.mode = PermissionMode::Plan;
        let file = self
            .plan
            .file
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let text = format!(
            "Entered plan mode. Explore the code base and design an approach; do not change \
             anything (edits and state-changing commands are refused). Write your plan to \
             {file} with the sections ## Goal, ## Steps (numbered), ## Files (one path per \
             line), ## Tests and ## Risks, then call ExitPlanMode to ask for approval."
        );
        let mut result = CallResult::new(decision, ToolOutput::text(text));
        result.records.push(Record::Mode {
            mode: self.plan.mode,
            pre_plan_mode: self.plan.pre_plan_mode,
            reason: ToolName::EnterPlanMode.to_string(),
        });
        result
            .events
            .push(self.mode_event(ToolName::EnterPlanMode.as_str()));
        done(result)
    }

    pub(super) async fn exit_plan_mode(
        &mut self,
        call: &ToolCall,
        decision: &GateDecision,
    ) -> RuntimeResult<Dispatched> {
        let refuse = |text: &str| done(CallResult::new(decision, ToolOutput::error(text)));
        if matches!(self.kind, AgentKind::Subagent { .. }) {
            return Ok(refuse(
                "ExitPlanMode cannot be used by a subagent: subagents never plan",
            ));
        }
        if self.plan.mode != PermissionMode::Plan {
            return Ok(refuse(
                "You are not in plan mode: ExitPlanMode only submits a plan made in plan mode.",
            ));
        }
        let Some(plan_file) = self.plan.file.clone() else {
            return Ok(refuse("This agent has no plan file."));
        };
        let input: ExitPlanModeInput = match serde_json::from_value(call.input.clone()) {
            Ok(input) => input,
            Err(error) => {
                return Ok(refuse(&format!("invalid input for ExitPlanMode: {error}")));
            }
        };
        let plan = match input.plan.filter(|p| !p.trim().is_empty()) {
            Some(plan) => plan,
            None => read_plan(&plan_file)?,
        };
        if plan.trim().is_empty() {
            return Ok(refuse(&format!(
                "No plan found: write it to {} or pass it as `plan`.",
                plan_file.display()
            )));
        }
        let path = plan_file.display().to_string();
        if input.needs_more_exploration == Some(true) {
            write_plan(&plan_file, &plan)?;
            let mut result = CallResult::new(
                decision,
                ToolOutput::text(format!(
                    "Draft saved to {path}. Nothing was submitted: keep exploring, then call \
                     ExitPlanMode again when the plan is ready."
                )),
            );
            result.records.push(snapshot(&path, &plan, "draft", None));
            return Ok(done(result));
        }
        let missing = missing_sections(&plan);
        if !missing.is_empty() {
            return Ok(refuse(&format!(
                "The plan is missing {}: add {} (Steps numbered, Files one path per line) and \
                 call ExitPlanMode again.",
                missing
                    .iter()
                    .map(|s| format!("`## {s}`"))
                    .collect::<Vec<_>>()
                    .join(" and "),
                if missing.len() == 1 { "it" } else { "them" }
            )));
        }
        let requested = match requested_rules(&input.allowed_prompts) {
            Ok(requested) => requested,
            Err(error) => {
                return Ok(refuse(&format!(
                    "{error}. Fix or remove that entry of `allowedPrompts` and call \
                     ExitPlanMode again."
                )));
            }
        };
        write_plan(&plan_file, &plan)?;
        let (request_id, responder) = self
            .send_plan_request(call, &path, &plan, requested)
            .await?;
        self.await_plan_decision(call, &request_id, &responder)
            .await
    }

    /// Commits the snapshot, sends the request (idempotent per tool call) and records that
    /// the agent waits for it.
    async fn send_plan_request(
        &mut self,
        call: &ToolCall,
        path: &str,
        plan: &str,
        allowed_prompts: Vec<String>,
    ) -> RuntimeResult<(String, String)> {
        let (recipient, mut responder) = match &self.kind {
            AgentKind::Teammate { lead } => (lead.clone(), self.run.team.responder_for(&self.id)),
            _ => {
                let responder = self.run.approver.responder().to_owned();
                let member = muster_protocol::Responder::member_for(&responder).to_owned();
                (member, responder)
            }
        };
        let key = format!("{}:{}", self.id, call.id);
        let request_id = self.new_request_id(RequestFamily::Plan, &key).await?;
        let stored = self.run.store.requests(&self.run.run_id).await?;
        // A plan reviewer hook that failed on this teammate's last plans in a row (not on
        // their merit) decides no more of them: this one goes to a person. Counted from the
        // committed answers before this request, so a resume picks the same responder.
        let failures =
            muster_mailbox::revision::reviewer_failures_before(&stored, &self.id, &request_id);
        if matches!(
            muster_protocol::Responder::parse(&responder),
            Ok(muster_protocol::Responder::Hook(_))
        ) && failures >= muster_mailbox::revision::REVIEWER_FAILURES_BEFORE_A_PERSON
        {
            tracing::warn!(
                agent = %self.id,
                %request_id,
                "the plan reviewer hook ({responder}) failed {failures} times in a row: this \
                 plan goes to a person"
            );
            responder = muster_protocol::Responder::HUMAN.to_owned();
        }
        let revision = muster_mailbox::revision::plan_revision(&stored, &self.id, &request_id);
        let body = MessageBody::PlanApprovalRequest {
            request_id: request_id.clone(),
            plan_file: path.to_owned(),
            plan: plan.to_owned(),
            responder: responder.clone(),
            revision: revision.revision,
            previous_request_id: revision.previous_request_id,
            allowed_prompts,
        };
        let key = format!("{}:{}", self.id, call.id);
        let sent = self.run.send_keyed(&self.id, recipient, body, key).await?;
        muster_mailbox::failpoint!("plan_request_sent");
        self.run.mail_sent(&sent);
        let request_id = sent.request_id.unwrap_or(request_id);
        self.commit(
            vec![
                snapshot(path, plan, "submitted", Some(&request_id)),
                Record::Awaiting {
                    request_id: request_id.clone(),
                    tool_use_id: call.id.clone(),
                    responder: responder.clone(),
                },
            ],
            Vec::new(),
            None,
        )
        .await?;
        self.run.events.emit(RunEvent::ApprovalRequested {
            agent: self.id.clone(),
            request_id: request_id.clone(),
            responder: responder.clone(),
            subject: ApprovalSubject::PlanApprovalRequest {
                plan_file: path.to_owned(),
            },
        });
        Ok((request_id, responder))
    }

    /// Waits for the decision on a plan request in the inbox (a teammate's, or a team lead's
    /// while its team goes on), then applies it.
    async fn wait_for_plan_decision(
        &mut self,
        call: &ToolCall,
        filter: muster_mailbox::MessageFilter,
    ) -> RuntimeResult<Dispatched> {
        let run = &self.run;
        let mail = self
            .calls
            .commits
            .receive(&run.store, &run.run_id, &self.id, run.epoch, filter)
            .await?;
        self.report.calling(call);
        self.apply_plan_decision(mail).await
    }

    /// Gets the decision on `request_id` — from a policy or a person at the terminal at once,
    /// from the inbox when it is there, by waiting for the lead — or stops the run.
    pub(super) async fn await_plan_decision(
        &mut self,
        call: &ToolCall,
        request_id: &str,
        responder: &str,
    ) -> RuntimeResult<Dispatched> {
        let filter = MessageFilter::RequestId(request_id.to_owned());
        let (run_id, epoch) = (self.run.run_id.clone(), self.run.epoch);
        if let Some(mail) = self
            .calls
            .commits
            .try_receive(&self.run.store, &run_id, &self.id, epoch, filter.clone())
            .await?
        {
            return self.apply_plan_decision(mail).await;
        }
        // The request is committed and not answered yet.
        self.report.state(AgentState::WaitingOnDecision {
            request_id: request_id.to_owned(),
        });
        if matches!(self.kind, AgentKind::Teammate { .. }) {
            return self.wait_for_plan_decision(call, filter).await;
        }
        let request = self.run.store.request(&run_id, request_id).await?;
        if let Some(request) = request.filter(|r| r.response.is_none()) {
            self.decide_here(request_id, responder, &requested_of(&request))
                .await?;
        }
        match self
            .calls
            .commits
            .try_receive(&self.run.store, &run_id, &self.id, epoch, filter.clone())
            .await?
        {
            Some(mail) => {
                self.report.calling(call);
                self.apply_plan_decision(mail).await
            }
            // A team's lead waits like a teammate: its team goes on meanwhile, and the team
            // stops the run (exit 5) once nothing but this decision could move it.
            None if self.leads_a_team() => self.wait_for_plan_decision(call, filter).await,
            None => Ok(Dispatched::Stop(AgentOutcome::AwaitingDecision {
                request_id: request_id.to_owned(),
                plan_file: self.plan.file.clone().unwrap_or_default(),
            })),
        }
    }

    /// A policy decides at once; a person at the terminal is asked. Without either, nothing
    /// is decided here.
    async fn decide_here(
        &self,
        request_id: &str,
        responder: &str,
        requested: &[String],
    ) -> RuntimeResult<()> {
        let plan_file = self.plan.file.clone().unwrap_or_default();
        let plan = read_plan(&plan_file)?;
        let body = match (&self.run.approver, &self.run.terminal) {
            (PlanApprover::Policy { policy, .. }, _)
                if muster_config::Responder::names_a_policy(responder) =>
            {
                let verdict = policy.review_plan(&plan);
                let restored = self.restored_mode(None);
                let granted = restored.capped_at(verdict.granted_mode);
                let grants = if verdict.approved {
                    select_grants(requested, Granter::Policy { policy }).unwrap_or_default()
                } else {
                    GrantSelection::default()
                };
                MessageBody::PlanApprovalResponse {
                    request_id: request_id.to_owned(),
                    approved: verdict.approved,
                    feedback: (!verdict.reasons.is_empty()).then(|| verdict.reasons.join("; ")),
                    mode: verdict.approved.then(|| granted.to_string()),
                    lowered_from: (verdict.approved && granted != restored)
                        .then(|| restored.to_string()),
                    edited_plan: None,
                    clear_context: false,
                    rule: Some(if policy.approve_all {
                        "approve_all".into()
                    } else {
                        "required_sections, max_files, allowed_paths, denied_paths".into()
                    }),
                    grants: grants.granted,
                    dropped_grants: grants.dropped,
                }
            }
            (PlanApprover::Human, Some(terminal)) if responder == muster_mailbox::HUMAN => {
                let (terminal, agent) = (terminal.clone(), self.id.clone());
                let asked = request_id.to_owned();
                let decided = tokio::task::spawn_blocking(move || {
                    terminal.decide_plan(&asked, &agent, &plan_file, &plan)
                })
                .await
                .unwrap_or(TerminalPlanDecision::Reject {
                    feedback: "the terminal prompt failed".into(),
                });
                terminal_response(request_id, decided, requested)
            }
            _ => return Ok(()),
        };
        let sender = muster_protocol::Responder::member_for(responder).to_owned();
        let answer = NewResponse {
            run_id: self.run.run_id.clone(),
            sender,
            body,
            idempotency_key: None,
        };
        let decided = muster_mailbox::decide::decide(
            self.run.store.as_ref(),
            answer,
            muster_mailbox::decide::Waiter::InProcess,
        )
        .await;
        match decided {
            Ok(decided) => self.run.mail_sent(&decided.response),
            // Another front end answered while the person here was deciding: the first answer
            // stands (it waits in the mailbox), and the person is told.
            Err(muster_mailbox::StoreError::AlreadyDecided { decided_by, .. }) => {
                if let Some(terminal) = &self.run.terminal {
                    terminal.decided_elsewhere(request_id, &decided_by);
                }
            }
            Err(error) => return Err(error.into()),
        }
        Ok(())
    }

    async fn apply_plan_decision(&mut self, mail: Mail) -> RuntimeResult<Dispatched> {
        let decision = read_decision(&mail);
        let gate = GateDecision::allow("plan mode: ExitPlanMode submits the plan");
        let request_id = mail.request_id.clone().unwrap_or_default();
        let plan_file = self.plan.file.clone().unwrap_or_default();
        let path = plan_file.display().to_string();
        if !decision.approved {
            let feedback = decision
                .feedback
                .clone()
                .unwrap_or_else(|| "no reason given".into());
            let mut result = CallResult::new(
                &gate,
                ToolOutput::error(format!(
                    "Your plan was rejected by {}: {feedback}\nYou are still in plan mode: revise \
                     {path} and call ExitPlanMode again.",
                    decision.decided_by
                )),
            );
            result.acks.push(mail.key.clone());
            result
                .events
                .push(self.decided_event(&request_id, &decision, None));
            return Ok(done(result));
        }
        let mut result = CallResult::new(&gate, ToolOutput::text(String::new()));
        result.acks.push(mail.key.clone());
        let mut plan = read_plan(&plan_file)?;
        if let Some(edited) = decision
            .edited_plan
            .clone()
            .filter(|p| !p.trim().is_empty())
        {
            write_plan(&plan_file, &edited)?;
            result
                .records
                .push(snapshot(&path, &edited, "edited", Some(&request_id)));
            plan = edited;
        }
        result
            .records
            .push(snapshot(&path, &plan, "approved", Some(&request_id)));
        let (mode, mut note) = self
            .mode_after_approval(decision.mode, &decision.responder)
            .await?;
        if let Some(unreadable) = &decision.unreadable_mode {
            note.push_str(&format!(
                " (the approval named mode {unreadable:?}, which is not a mode, so the mode \
                 restored after plan mode applies)"
            ));
        }
        self.plan.mode = mode;
        self.plan.pre_plan_mode = None;
        result.records.push(Record::Mode {
            mode,
            pre_plan_mode: None,
            reason: format!(
                "plan {request_id} approved by {}{note}",
                decision.decided_by
            ),
        });
        let grants_note = self
            .take_grants(&request_id, &decision, &mut result)
            .await?;
        result
            .events
            .push(self.decided_event(&request_id, &decision, Some(mode)));
        result.events.push(self.mode_event("plan approved"));
        let edited = if decision.edited_plan.is_some() {
            format!(
                "\n\n## Approved Plan (edited by {})\n{plan}",
                decision.responder
            )
        } else {
            String::new()
        };
        let feedback = decision
            .feedback
            .as_ref()
            .map(|f| format!("\nReviewer's notes: {f}"))
            .unwrap_or_default();
        result.output = ToolOutput::text(format!(
            "Your plan was approved by {}. You are now in {mode} mode{note}.{grants_note} The \
             approved plan is in {path}; implement it step by step.{feedback}{edited}",
            decision.decided_by
        ));
        if decision.clear_context {
            result.reset_context = Some(format!(
                "Implement this approved plan (from {path}).{feedback}\n\n{plan}"
            ));
        }
        Ok(done(result))
    }

    /// Takes the approval's grants (only rules the request asked for) as the agent's plan
    /// grants, recorded beside the mode change; says what the model may now do.
    async fn take_grants(
        &mut self,
        request_id: &str,
        decision: &PlanDecision,
        result: &mut CallResult,
    ) -> RuntimeResult<String> {
        let request = self.run.store.request(&self.run.run_id, request_id).await?;
        let requested = request.as_ref().map(requested_of).unwrap_or_default();
        let texts: Vec<String> = decision
            .grants
            .iter()
            .filter(|rule| requested.contains(rule))
            .cloned()
            .collect();
        let (grants, _) = PlanGrants::from_texts(request_id, &decision.responder, &texts);
        let mut note = String::new();
        if grants.rules.is_empty() {
            if let Some(old) = self.plan.grants.take() {
                result.records.push(Record::GrantsEnded {
                    request_id: old.request_id,
                    reason: format!("plan {request_id} was approved without grants"),
                });
            }
        } else {
            note = format!(
                " Until your verification report you may also use, without asking: {}                  (deny and ask rules, path limits and the sandbox still apply).",
                grants.texts().join(", ")
            );
            result.records.push(Record::Grants {
                request_id: request_id.to_owned(),
                approved_by: decision.responder.clone(),
                rules: grants.texts(),
            });
            self.plan.grants = Some(grants);
        }
        if !decision.dropped_grants.is_empty() {
            let dropped: Vec<String> = decision
                .dropped_grants
                .iter()
                .map(|d| format!("{} ({})", d.rule, d.reason))
                .collect();
            note.push_str(&format!(" Not granted: {}.", dropped.join("; ")));
        }
        Ok(note)
    }

    /// The mode an approval leads to: the granted mode or the saved one, `default` instead of
    /// `auto` when the run's auto gate has closed, capped at the approver's ceiling.
    async fn mode_after_approval(
        &self,
        granted: Option<PermissionMode>,
        responder: &str,
    ) -> RuntimeResult<(PermissionMode, String)> {
        let mut mode = self.restored_mode(granted);
        let mut note = String::new();
        if mode == PermissionMode::Auto {
            let run = self.run.store.run(&self.run.run_id).await?;
            if run.is_some_and(|r| !r.auto_gate.open) {
                mode = PermissionMode::Default;
                note = " (auto mode's gate closed while you planned, so default)".into();
            }
        }
        let ceiling = match (&self.kind, &self.run.approver) {
            (AgentKind::Teammate { .. }, _) => self.plan.approval_ceiling,
            (_, PlanApprover::Policy { policy, .. }) if responder == muster_mailbox::POLICY => {
                Some(policy.max_mode)
            }
            _ => self.plan.approval_ceiling,
        };
        if let Some(ceiling) = ceiling
            && mode > ceiling
        {
            note = format!(" (lowered from {mode} to the approver's ceiling)");
            mode = ceiling;
        }
        Ok((mode, note))
    }

    pub(super) fn restored_mode(&self, granted: Option<PermissionMode>) -> PermissionMode {
        granted
            .filter(|m| *m != PermissionMode::Plan)
            .or(self
                .plan
                .pre_plan_mode
                .filter(|m| *m != PermissionMode::Plan))
            .unwrap_or_default()
    }

    pub(super) fn mode_event(&self, reason: &str) -> RunEvent {
        RunEvent::ModeChanged {
            agent: self.id.clone(),
            mode: self.plan.mode.to_string(),
            reason: reason.to_owned(),
        }
    }

    fn decided_event(
        &self,
        request_id: &str,
        decision: &PlanDecision,
        mode: Option<PermissionMode>,
    ) -> RunEvent {
        RunEvent::ApprovalDecided {
            agent: self.id.clone(),
            request_id: request_id.to_owned(),
            responder: decision.decided_by.clone(),
            approved: decision.approved,
            subject: DecisionSubject::PlanApprovalRequest {
                mode: mode.map(|m| m.to_string()),
            },
        }
    }
}

fn done(result: CallResult) -> Dispatched {
    Dispatched::Done(Box::new(result))
}

fn snapshot(path: &str, content: &str, state: &str, request_id: Option<&str>) -> Record {
    Record::PlanSnapshot {
        path: path.to_owned(),
        content: content.to_owned(),
        state: state.to_owned(),
        request_id: request_id.map(str::to_owned),
    }
}

fn read_decision(mail: &Mail) -> PlanDecision {
    match mail.body.clone() {
        MessageBody::PlanApprovalResponse {
            approved,
            feedback,
            mode,
            edited_plan,
            clear_context,
            grants,
            dropped_grants,
            ..
        } => {
            let parsed = mode.as_deref().map(str::parse::<PermissionMode>);
            PlanDecision {
                responder: mail.sender.clone(),
                decided_by: mail.body.decided_by(&mail.sender),
                approved,
                feedback,
                mode: parsed.clone().and_then(Result::ok),
                unreadable_mode: mode.filter(|_| matches!(parsed, Some(Err(_)))),
                edited_plan,
                clear_context,
                grants,
                dropped_grants,
            }
        }
        other => PlanDecision {
            responder: mail.sender.clone(),
            decided_by: mail.sender.clone(),
            approved: false,
            feedback: Some(format!(
                "the answer was a {} message, not a plan approval response",
                other.kind()
            )),
            mode: None,
            unreadable_mode: None,
            edited_plan: None,
            clear_context: false,
            grants: Vec::new(),
            dropped_grants: Vec::new(),
        },
    }
}

/// The rules a stored plan request asks for.
pub(super) fn requested_of(request: &RequestRecord) -> Vec<String> {
    match request.body.clone() {
        MessageBody::PlanApprovalRequest {
            allowed_prompts, ..
        } => allowed_prompts,
        _ => Vec::new(),
    }
}

/// A person at the terminal grants every requested rule with the plan.
fn terminal_response(
    request_id: &str,
    decided: TerminalPlanDecision,
    requested: &[String],
) -> MessageBody {
    match decided {
        TerminalPlanDecision::Approve {
            mode,
            feedback,
            clear_context,
        } => MessageBody::PlanApprovalResponse {
            request_id: request_id.to_owned(),
            approved: true,
            feedback,
            mode: mode.map(|m| m.to_string()),
            lowered_from: None,
            edited_plan: None,
            clear_context,
            rule: None,
            grants: requested.to_vec(),
            dropped_grants: Vec::new(),
        },
        TerminalPlanDecision::Reject { feedback } => {
            MessageBody::plan_rejected(request_id.to_owned(), feedback)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_mailbox::{DeliveryState, Priority};

    fn response(mode: Option<&str>) -> Mail {
        Mail {
            key: "k".into(),
            seq: 1,
            run_id: "r1".into(),
            sender: "lead".into(),
            recipient: "alice".into(),
            kind: "plan_approval_response".into(),
            priority: Priority::FromLead,
            request_id: Some("plan-alice-1".into()),
            idempotency_key: None,
            body: MessageBody::from_tagged(&serde_json::json!({
                "type": "plan_approval_response", "request_id": "plan-alice-1",
                "approved": true, "mode": mode, "clear_context": false,
            })),
            state: DeliveryState::Leased,
            created_at: 0,
            leased_at: None,
            acked_at: None,
        }
    }

    /// A granted mode is read as a mode, or kept as what it was: never dropped in silence.
    #[test]
    fn a_granted_mode_that_is_no_mode_is_kept_to_be_reported() {
        let rows = [
            (Some("acceptEdits"), Some(PermissionMode::AcceptEdits), None),
            (Some("superuser"), None, Some("superuser")),
            (None, None, None),
        ];
        for (named, mode, unreadable) in rows {
            let decision = read_decision(&response(named));
            assert!(decision.approved, "{named:?}");
            assert_eq!(decision.mode, mode, "{named:?}");
            assert_eq!(decision.unreadable_mode.as_deref(), unreadable, "{named:?}");
        }
    }
}
