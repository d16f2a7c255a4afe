//! Settling an `ask`: whoever approves for the agent answers — the person at the terminal,
//! the lead by mail (a teammate), or the policy (the main agent of a run with a policy
//! approver); with no one to ask it is a deny. Answers from the store are acked with the call.
//!
//! A call a `PreToolUse` hook deferred goes to a person, never to a policy or the lead: the
//! person at the terminal, or a stored `permission_request` answered by `human` (`muster
//! approve`/`reject`, the web inbox). A teammate (and a team's lead) waits for the answer
//! while the team goes on; a single run's agent stops (exit 5) and its resume takes the
//! answer from the store.

use muster_config::RuleSubject;
use muster_protocol::{AgentState, ApprovalSubject, ToolName};
use muster_protocol::{RequestFamily, RequestId};
use serde_json::Value;

use crate::model::ToolCall;

use super::context::{PlanApprover, RunContext};
use super::error::RuntimeResult;
use super::events::Reporter;
use super::gate::{GateDecision, Verdict};
use super::records::AgentKind;

/// Where an agent's asks go, and under whose name (a subagent asks under its parent's id, and
/// its parent's route applies; the answer comes back to the parent's inbox).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct AskSettings {
    pub asker: String,
    pub route: AskRoute,
}

/// Who answers an ask when no person is at the terminal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum AskRoute {
    /// The lead, by mail.
    Lead { lead: String },
    /// The run's approver (a policy answers; a person only at the terminal).
    Approver,
}

impl AskSettings {
    /// The route of `agent_id` of `kind`; a subagent's follows its parent's roster entry.
    pub(super) async fn of(
        run: &RunContext,
        agent_id: &str,
        kind: &AgentKind,
    ) -> RuntimeResult<AskSettings> {
        let (asker, parent_is_teammate) = match kind {
            AgentKind::Teammate { lead } => {
                return Ok(AskSettings {
                    asker: agent_id.to_owned(),
                    route: AskRoute::Lead { lead: lead.clone() },
                });
            }
            AgentKind::Main => {
                return Ok(AskSettings {
                    asker: agent_id.to_owned(),
                    route: AskRoute::Approver,
                });
            }
            AgentKind::Subagent { parent, .. } => {
                let roster = run.store.roster(&run.run_id).await?;
                let teammate = roster.iter().any(|member| {
                    member.agent == *parent && member.kind == muster_mailbox::MemberKind::Teammate
                });
                let lead = roster
                    .iter()
                    .find(|member| member.kind == muster_mailbox::MemberKind::Lead)
                    .map(|member| member.agent.clone());
                (parent.clone(), teammate.then_some(lead).flatten())
            }
        };
        Ok(AskSettings {
            asker,
            route: match parent_is_teammate {
                Some(lead) => AskRoute::Lead { lead },
                None => AskRoute::Approver,
            },
        })
    }
}

/// What a deferred call came to.
pub(super) enum Deferred {
    /// Decided (by the person, or denied because no person can be asked), with the answer's
    /// mail to ack with the call.
    Decided(GateDecision, Vec<String>),
    /// The request is stored and not answered yet: the agent stops, or waits, for it.
    Waiting {
        request_id: String,
        decision: GateDecision,
    },
}

/// One agent asking: its route, the run, where it reports, its workspace's root (policy rules
/// match paths relative to it).
pub(super) struct Asking<'a> {
    pub id: &'a str,
    pub asks: &'a AskSettings,
    pub run: &'a RunContext,
    pub report: &'a Reporter,
    pub root: &'a std::path::Path,
    /// The agent's lane, which mail is leased through.
    pub commits: &'a super::interrupt::CommitLane,
}

impl Asking<'_> {
    /// An `ask` goes to whoever approves for the agent: the person at the terminal, or the
    /// lead by mail (a teammate); with no one to ask it is a deny. Gives back the answer's
    /// mail to ack with the call.
    pub(super) async fn settle_ask(
        &self,
        decision: GateDecision,
        call: &ToolCall,
    ) -> RuntimeResult<(GateDecision, Vec<String>)> {
        if decision.verdict != Verdict::Ask {
            return Ok((decision, Vec::new()));
        }
        if let Some(terminal) = self.run.terminal.clone() {
            let (agent, tool, input, reason) = (
                self.id.to_owned(),
                call.name.clone(),
                call.input.clone(),
                decision.reason.clone(),
            );
            let allowed = tokio::task::spawn_blocking(move || {
                terminal.allow_call(&agent, &tool, &input, &reason)
            })
            .await
            .unwrap_or(false);
            let how = if allowed { "approved" } else { "refused" };
            return Ok((
                answered(decision, allowed, format!("{how} at the terminal")),
                Vec::new(),
            ));
        }
        match (&self.asks.route, &self.run.approver) {
            (AskRoute::Lead { lead }, _) => {
                return self.ask_lead(decision, call, &lead.clone()).await;
            }
            (AskRoute::Approver, PlanApprover::Policy { policy, responder }) => {
                return self.ask_policy(decision, call, policy, responder).await;
            }
            _ => {}
        }
        Ok((
            GateDecision::deny(format!(
                "{}; no one can approve it in this run (no person at a terminal, no lead), so it is denied",
                decision.reason
            )),
            Vec::new(),
        ))
    }

    /// A call a hook deferred goes to a person: at the terminal when one is there; otherwise
    /// a `permission_request` answered by `human`, sent once per call (a resume finds it). A
    /// subagent cannot wait for a person (it is not resumed when its run stops), so its
    /// deferred call is refused.
    pub(super) async fn settle_deferred(
        &self,
        decision: GateDecision,
        call: &ToolCall,
    ) -> RuntimeResult<Deferred> {
        if self.run.terminal.is_some() {
            let (decision, acks) = self.settle_ask(decision, call).await?;
            return Ok(Deferred::Decided(decision, acks));
        }
        if self.asks.asker != self.id {
            return Ok(Deferred::Decided(
                GateDecision::deny(format!(
                    "{}; a subagent's call cannot wait for a person's decision, so it is denied \
                     (make the call yourself, or ask your parent to)",
                    decision.reason
                )),
                Vec::new(),
            ));
        }
        // To the person's own mailbox, even a teammate's: its lead could not answer it.
        let person = muster_mailbox::HUMAN;
        let recipient = muster_protocol::Responder::member_for(person);
        let request_id = self
            .send_request(&decision, call, recipient, person)
            .await?;
        muster_mailbox::failpoint!("deferred_request_sent");
        let filter = muster_mailbox::MessageFilter::RequestId(request_id.clone());
        let (store, run) = (&self.run.store, &self.run.run_id);
        let answer = self
            .commits
            .try_receive(store, run, &self.asks.asker, self.run.epoch, filter)
            .await?;
        let Some(mail) = answer else {
            self.run
                .events
                .emit(super::events::RunEvent::ApprovalRequested {
                    agent: self.id.to_owned(),
                    request_id: request_id.clone(),
                    responder: person.to_owned(),
                    subject: ApprovalSubject::PermissionRequest,
                });
            self.report.state(AgentState::WaitingOnDecision {
                request_id: request_id.clone(),
            });
            return Ok(Deferred::Waiting {
                request_id,
                decision,
            });
        };
        let (decision, acks) = mailed_answer(decision, &request_id, mail);
        Ok(Deferred::Decided(decision, acks))
    }

    /// Whether this agent stops for a person's decision (a single run's agent) rather than
    /// waiting for it while its team goes on.
    pub(super) fn stops_for_a_person(&self) -> bool {
        matches!(self.asks.route, AskRoute::Approver) && self.run.team.get().is_none()
    }

    /// Waits for the person's answer to `request_id` (in a team: the team stops the run, exit
    /// 5, once nothing but a person's decision could move it).
    pub(super) async fn wait_for_person(
        &self,
        decision: GateDecision,
        call: &ToolCall,
        request_id: &str,
    ) -> RuntimeResult<(GateDecision, Vec<String>)> {
        let mail = self.receive_answer(request_id).await?;
        self.report.calling(call);
        Ok(mailed_answer(decision, request_id, mail))
    }

    /// Sends the `permission_request` of `call` to `recipient`, answered by `responder`
    /// (keyed by the call, so a resume sends it once); gives back its request id.
    async fn send_request(
        &self,
        decision: &GateDecision,
        call: &ToolCall,
        recipient: &str,
        responder: &str,
    ) -> RuntimeResult<String> {
        let key = format!("{}:{}", self.asks.asker, call.id);
        let counter = RequestFamily::Permission.counter_name(&self.asks.asker);
        let number = self
            .run
            .store
            .counter_for(&self.run.run_id, &counter, &key)
            .await?;
        let body = muster_mailbox::MessageBody::PermissionRequest {
            request_id: RequestId::new(RequestFamily::Permission, &self.asks.asker, number)
                .to_string(),
            tool: call.name.clone(),
            input: call.input.clone(),
            tool_use_id: Some(call.id.clone()),
            reason: decision.reason.clone(),
            responder: responder.to_owned(),
        };
        let sent = self
            .run
            .send_keyed(&self.asks.asker, recipient.to_owned(), body, key)
            .await?;
        self.run.mail_sent(&sent);
        Ok(sent.request_id.unwrap_or_default())
    }

    /// Takes the answer to `request_id` from the asker's inbox (waiting for it).
    async fn receive_answer(&self, request_id: &str) -> RuntimeResult<muster_mailbox::Message> {
        let filter = muster_mailbox::MessageFilter::RequestId(request_id.to_owned());
        let (store, run) = (&self.run.store, &self.run.run_id);
        self.commits
            .receive(store, run, &self.asks.asker, self.run.epoch, filter)
            .await
    }

    /// Stores a `permission_request` for the policy, the policy's answer (a `deny` when no
    /// rule allows it), and takes that answer from the inbox.
    async fn ask_policy(
        &self,
        decision: GateDecision,
        call: &ToolCall,
        policy: &muster_config::Policy,
        responder: &str,
    ) -> RuntimeResult<(GateDecision, Vec<String>)> {
        let store = &self.run.store;
        let request_id = self
            .send_request(&decision, call, muster_mailbox::POLICY, responder)
            .await?;
        let answered_already = store
            .request(&self.run.run_id, &request_id)
            .await?
            .is_some_and(|request| request.response.is_some());
        if !answered_already {
            let (approved, feedback, rule) = policy_answer(policy, call, self.root);
            let answer = muster_mailbox::NewResponse {
                run_id: self.run.run_id.clone(),
                sender: muster_mailbox::POLICY.to_owned(),
                body: muster_mailbox::MessageBody::PermissionResponse {
                    request_id: request_id.clone(),
                    approved,
                    feedback,
                    rule,
                },
                idempotency_key: None,
            };
            let decided = muster_mailbox::decide::decide(
                store.as_ref(),
                answer,
                muster_mailbox::decide::Waiter::InProcess,
            )
            .await?;
            self.run.mail_sent(&decided.response);
        }
        let mail = self.receive_answer(&request_id).await?;
        let (approved, how) = match mail.body.clone() {
            muster_mailbox::MessageBody::PermissionResponse {
                approved,
                feedback,
                rule,
                ..
            } => (
                approved,
                format!(
                    "{} by the policy ({request_id}){}",
                    if approved { "allowed" } else { "denied" },
                    rule.or(feedback)
                        .map(|r| format!(": {r}"))
                        .unwrap_or_default()
                ),
            ),
            other => (
                false,
                format!("the policy's answer was a {} message", other.kind()),
            ),
        };
        Ok((answered(decision, approved, how), vec![mail.key]))
    }

    /// Sends a `permission_request` to the lead and waits for its answer in the inbox.
    async fn ask_lead(
        &self,
        decision: GateDecision,
        call: &ToolCall,
        lead: &str,
    ) -> RuntimeResult<(GateDecision, Vec<String>)> {
        let responder = self.run.team.responder_for(&self.asks.asker);
        let responder = muster_protocol::Responder::for_other_requests(&responder).to_owned();
        let request_id = self.send_request(&decision, call, lead, &responder).await?;
        self.report.state(AgentState::WaitingOnDecision {
            request_id: request_id.clone(),
        });
        let mail = self.receive_answer(&request_id).await?;
        self.report.calling(call);
        Ok(mailed_answer(decision, &request_id, mail))
    }
}

/// The answer mailed to a call's permission request (the lead's, or a person's to a deferred
/// call), as the call's decision, with the answer's key to ack.
fn mailed_answer(
    decision: GateDecision,
    request_id: &str,
    mail: muster_mailbox::Message,
) -> (GateDecision, Vec<String>) {
    let (approved, feedback) = match mail.body {
        muster_mailbox::MessageBody::PermissionResponse {
            approved, feedback, ..
        } => (approved, feedback),
        other => (
            false,
            Some(format!("the answer was a {} message", other.kind())),
        ),
    };
    let how = format!(
        "{} by {} ({request_id}){}",
        if approved { "approved" } else { "refused" },
        mail.sender,
        feedback.map(|f| format!(": {f}")).unwrap_or_default()
    );
    (answered(decision, approved, how), vec![mail.key])
}

/// A policy's answer to a call: approved, feedback (the deny reason), rule.
fn policy_answer(
    policy: &muster_config::Policy,
    call: &ToolCall,
    root: &std::path::Path,
) -> (bool, Option<String>, Option<String>) {
    let text = |field: &str| call.input.get(field).and_then(Value::as_str);
    let path = ["file_path", "notebook_path", "path"]
        .into_iter()
        .find_map(text)
        .map(|p| {
            let path = std::path::Path::new(p);
            path.strip_prefix(root).unwrap_or(path).to_path_buf()
        });
    let subject = match (ToolName::parse(&call.name), &path) {
        (Some(ToolName::Bash), _) => {
            text("command").map_or(RuleSubject::Nothing, RuleSubject::Command)
        }
        (Some(ToolName::Agent), _) => {
            text("subagent_type").map_or(RuleSubject::Nothing, RuleSubject::Name)
        }
        (_, Some(path)) => RuleSubject::Path(path),
        _ => RuleSubject::Nothing,
    };
    match policy.answer_permission(&call.name, subject) {
        muster_config::PolicyAnswer::Allow { rule } => (true, None, Some(rule)),
        muster_config::PolicyAnswer::Deny { reason } => (false, Some(reason), None),
    }
}

/// An ask as answered: allowed or denied, with who answered.
fn answered(decision: GateDecision, allowed: bool, how: String) -> GateDecision {
    GateDecision {
        verdict: if allowed {
            Verdict::Allow
        } else {
            Verdict::Deny
        },
        reason: format!("{} ({how})", decision.reason),
        ..decision
    }
}
