//! The tools the runtime carries out itself: plan mode, subagents, questions, and the team
//! tools (which a single-agent run does not have).

use muster_protocol::RequestFamily;
use muster_protocol::{AgentState, ToolName};
use std::sync::Arc;

use muster_config::{ModelChoice, PermissionMode};
use muster_mailbox::{MemberKind, MessageBody, MessageFilter, RosterEntry};

use crate::model::ToolCall;
use crate::tools::{AgentInput, AskUserQuestionInput, ToolOutput};

use super::agent::{AgentRuntime, AgentSpec};
use super::calls::{AgentOutcome, CallResult, Dispatched};
use super::error::RuntimeResult;
use super::gate::GateDecision;
use super::records::AgentKind;

impl AgentRuntime {
    /// Carries out a runtime-handled tool the gate allowed.
    pub(super) async fn coordinate(
        &mut self,
        call: &ToolCall,
        decision: &GateDecision,
    ) -> RuntimeResult<Dispatched> {
        match ToolName::parse(&call.name) {
            Some(ToolName::EnterPlanMode) => Ok(self.enter_plan_mode(decision)),
            Some(ToolName::ExitPlanMode) => self.exit_plan_mode(call, decision).await,
            Some(ToolName::Agent) => self.run_subagent(call, decision).await,
            Some(ToolName::AskUserQuestion) => self.ask_question(call, decision).await,
            _ => self.team_tool(call, decision).await,
        }
    }

    async fn run_subagent(
        &mut self,
        call: &ToolCall,
        decision: &GateDecision,
    ) -> RuntimeResult<Dispatched> {
        let refuse = |text: String| done(CallResult::new(decision, ToolOutput::error(text)));
        if matches!(self.kind, AgentKind::Subagent { .. }) {
            return Ok(refuse("subagents cannot start agents".into()));
        }
        let input: AgentInput = match serde_json::from_value(call.input.clone()) {
            Ok(input) => input,
            Err(error) => return Ok(refuse(format!("invalid input for Agent: {error}"))),
        };
        let Some(definition) = self.run.catalog.get(&input.subagent_type).cloned() else {
            let names: Vec<&str> = self.run.catalog.names().collect();
            return Ok(refuse(format!(
                "unknown subagent_type {:?}; the definitions are: {}",
                input.subagent_type,
                names.join(", ")
            )));
        };
        let mode = match definition.permission_mode {
            Some(cap) => self.plan.mode.min(cap),
            None => self.plan.mode,
        };
        let inherited_model = match definition.model {
            ModelChoice::Inherit => Some(self.model_for_mode().model),
            _ => None,
        };
        let permit = self.run.subagents.clone().acquire_owned().await;
        let number = self
            .run
            .store
            .next_counter(&self.run.run_id, &format!("sub-{}", self.id))
            .await?;
        let agent_id = format!("{}.sub-{number}", self.id);
        self.run
            .store
            .add_member(
                &self.run.run_id,
                RosterEntry {
                    agent: agent_id.clone(),
                    kind: MemberKind::Subagent,
                    definition: Some(definition.name.clone()),
                    parent: Some(self.id.clone()),
                },
            )
            .await?;
        let spec = AgentSpec {
            agent_id: agent_id.clone(),
            kind: AgentKind::Subagent {
                parent: self.id.clone(),
                call: Some(call.id.clone()),
            },
            definition: definition.name.clone(),
            mode,
            pre_plan_mode: None,
            approval_ceiling: None,
            inherited_model,
            endpoint: self.requests.endpoint.clone(),
        };
        let outcome = run_child(self.run.clone(), spec, input.prompt).await;
        drop(permit);
        let output = match outcome {
            Ok(AgentOutcome::Finished { result }) if result.trim().is_empty() => {
                ToolOutput::text(format!("{agent_id} finished without a report."))
            }
            Ok(AgentOutcome::Finished { result }) => ToolOutput::text(result),
            Ok(
                AgentOutcome::AwaitingDecision { request_id, .. }
                | AgentOutcome::CallDeferred { request_id, .. },
            ) => ToolOutput::error(format!(
                "{agent_id} stopped waiting for {request_id}, which subagents cannot do"
            )),
            // The hook's reason is for the person (the log, the subagent's records).
            Ok(AgentOutcome::StoppedByHook { event, .. }) => ToolOutput::error(format!(
                "{agent_id} was stopped by a {event} hook before it finished"
            )),
            Ok(AgentOutcome::TurnInterrupted) => {
                ToolOutput::error(format!("{agent_id} was interrupted before it finished"))
            }
            Err(error) => ToolOutput::error(format!("{agent_id} failed: {error}")),
        };
        Ok(done(CallResult::new(decision, output)))
    }

    async fn ask_question(
        &mut self,
        call: &ToolCall,
        decision: &GateDecision,
    ) -> RuntimeResult<Dispatched> {
        let input: AskUserQuestionInput = match serde_json::from_value(call.input.clone()) {
            Ok(input) => input,
            Err(error) => {
                return Ok(done(CallResult::new(
                    decision,
                    ToolOutput::error(format!("invalid input for AskUserQuestion: {error}")),
                )));
            }
        };
        let mut answers = Vec::new();
        let mut acks = Vec::new();
        for question in &input.questions {
            let options: Vec<String> = question.options.iter().map(|o| o.label.clone()).collect();
            let answer = match self.answer_one(call, &question.question, &options).await? {
                Ok((answer, ack)) => {
                    acks.extend(ack);
                    answer
                }
                Err(why) => {
                    return Ok(done(CallResult::new(decision, ToolOutput::error(why))));
                }
            };
            answers.push(format!("{}: {answer}", question.question));
        }
        let mut result = CallResult::new(decision, ToolOutput::text(answers.join("\n")));
        result.acks = acks;
        Ok(done(result))
    }

    /// One answer: from the person at the terminal, or from the lead by mail (a teammate).
    async fn answer_one(
        &mut self,
        call: &ToolCall,
        question: &str,
        options: &[String],
    ) -> RuntimeResult<Result<(String, Option<String>), String>> {
        if let Some(terminal) = self.run.terminal.clone() {
            let (agent, text, choices) = (self.id.clone(), question.to_owned(), options.to_vec());
            let answer = tokio::task::spawn_blocking(move || {
                terminal.answer_question(&agent, &text, &choices)
            })
            .await
            .ok()
            .flatten();
            return Ok(answer
                .map(|a| (a, None))
                .ok_or_else(|| "The person at the terminal gave no answer.".to_owned()));
        }
        let AgentKind::Teammate { lead } = self.kind.clone() else {
            return Ok(Err(
                "No one can answer questions in this run (no person at a terminal, no lead). \
                 Decide yourself and state the assumption you made."
                    .to_owned(),
            ));
        };
        let key = format!("{}:{}:{question}", self.id, call.id);
        let request_id = self.new_request_id(RequestFamily::Question, &key).await?;
        let body = MessageBody::Question {
            request_id,
            question: question.to_owned(),
            options: options.to_vec(),
            responder: muster_protocol::Responder::for_other_requests(
                &self.run.team.responder_for(&self.id),
            )
            .to_owned(),
        };
        let sent = self.run.send_keyed(&self.id, lead, body, key).await?;
        self.run.mail_sent(&sent);
        let request_id = sent.request_id.unwrap_or_default();
        self.report.state(AgentState::WaitingOnDecision {
            request_id: request_id.clone(),
        });
        let run = &self.run;
        let mail = self
            .calls
            .commits
            .receive(
                &run.store,
                &run.run_id,
                &self.id,
                run.epoch,
                MessageFilter::RequestId(request_id),
            )
            .await?;
        self.report.calling(call);
        let answer = match mail.body.clone() {
            MessageBody::Answer { answer, .. } => answer,
            other => other.kind().to_string(),
        };
        Ok(Ok((answer, Some(mail.key))))
    }
}

fn done(result: CallResult) -> Dispatched {
    Dispatched::Done(Box::new(result))
}

/// Runs a subagent to completion (boxed: the loop is recursive through `Agent`).
fn run_child(
    run: Arc<super::context::RunContext>,
    spec: AgentSpec,
    prompt: String,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = RuntimeResult<AgentOutcome>> + Send>> {
    Box::pin(async move {
        let mut child = AgentRuntime::start(run, spec, &prompt).await?;
        child.run().await
    })
}

/// Caps `mode` at a definition's `permissionMode`.
pub fn capped_mode(mode: PermissionMode, cap: Option<PermissionMode>) -> PermissionMode {
    cap.map_or(mode, |cap| mode.min(cap))
}
