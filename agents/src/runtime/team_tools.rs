//! The team tools an agent of a team run calls: `SendMessage`, the task tools (`TaskCreate`,
//! `TaskUpdate`, `TaskList`, `TaskGet`), and the lead's `SpawnTeammate`, `ReviewPlan` and
//! `ShutdownTeammate`.
//!
//! Mail and the task board live in the store, so the runtime carries those tools out itself.
//! Starting and stopping teammates needs the orchestrator ([`super::team::TeamServices`]). A
//! run with no registered team (a single-agent run) answers every team tool with an error that
//! says so.
//!
//! Results are written for a model: what happened, the ids it needs next (the new teammate's
//! id, the request id), and why a call was refused.

use crate::permission::grants::{GrantSelection, Granter, select_grants};
use muster_protocol::MessageKind;
use muster_protocol::ToolName;

use muster_config::PermissionMode;
use muster_config::hooks::HookEvent;
use muster_mailbox::decide::{Waiter, decide};
use muster_mailbox::{
    CommitTurn, MemberKind, MessageBody, NewMessage, NewResponse, NewTask, StoreError, TaskStatus,
    TaskUpdate,
};
use serde::de::DeserializeOwned;

use crate::model::ToolCall;
use crate::tools::{
    ReviewMergeInput, ReviewPlanInput, SendMessageInput, ShutdownTeammateInput, SpawnTeammateInput,
    TaskCreateInput, TaskGetInput, TaskStatus as InputTaskStatus, TaskUpdateInput, ToolOutput,
};

use super::agent::AgentRuntime;
use super::calls::{CallResult, Dispatched};
use super::error::{RuntimeError, RuntimeResult, TeamError};
use super::gate::GateDecision;
use super::team::{
    RESERVED_NAMES, ShutdownRequest, SpawnRequest, TeamServices, blockers, task_line,
};

/// A team's answer for the model: a refusal is the tool's error text; any other error stops
/// the agent with its cause.
fn refusal_or_error<T>(answer: Result<T, TeamError>) -> RuntimeResult<Result<T, String>> {
    match answer {
        Ok(value) => Ok(Ok(value)),
        Err(TeamError::Refused(words)) => Ok(Err(words)),
        Err(error) => Err(RuntimeError::Team(error)),
    }
}

impl AgentRuntime {
    /// At a turn boundary of a team's lead or teammate, delivers the mail the team hands
    /// over, so a busy agent sees mail before its next model request.
    pub(super) async fn take_team_mail(&mut self) -> RuntimeResult<()> {
        if matches!(self.kind, super::records::AgentKind::Subagent { .. }) {
            return Ok(());
        }
        let Some(team) = self.run.team.get() else {
            return Ok(());
        };
        // Through the lane: mail the team leased for this turn is handed back if an
        // interrupt drops the turn before its delivery acknowledges it.
        let id = self.id.clone();
        let boundary = async move { Ok(team.mail_at_turn_boundary(&id).await) };
        let keys =
            |mail: &Vec<muster_mailbox::Message>| mail.iter().map(|m| m.key.clone()).collect();
        let mail = self.calls.commits.lease(boundary, keys).await??;
        self.deliver_mail(&mail).await?;
        let now = now_ms();
        for message in &mail {
            self.run
                .events
                .emit(super::events::mail_delivered_event(message, now));
        }
        Ok(())
    }

    /// Whether this agent is the main agent of a run with a registered team (its lead).
    pub(super) fn leads_a_team(&self) -> bool {
        matches!(self.kind, super::records::AgentKind::Main) && self.run.team.get().is_some()
    }

    /// The `idempotency_key` of what this agent's call `call` does in the store.
    fn call_key(&self, call: &ToolCall) -> String {
        format!("{}:{}", self.id, call.id)
    }

    /// Commits this agent's response to a request, keyed by the tool call that gave it (a
    /// repeat returns the original), and reports it as sent.
    async fn respond_for_call(
        &self,
        call: &ToolCall,
        body: MessageBody,
    ) -> Result<muster_mailbox::Message, muster_mailbox::StoreError> {
        let answer = NewResponse {
            run_id: self.run.run_id.clone(),
            sender: self.id.clone(),
            body,
            idempotency_key: Some(self.call_key(call)),
        };
        let answered = decide(self.run.store.as_ref(), answer, Waiter::InProcess)
            .await
            .map(|decided| decided.response);
        if let Ok(response) = &answered {
            self.run.mail_sent(response);
        }
        answered
    }

    /// Carries out a team tool the gate allowed.
    pub(super) async fn team_tool(
        &mut self,
        call: &ToolCall,
        decision: &GateDecision,
    ) -> RuntimeResult<Dispatched> {
        let Some(team) = self.run.team.get() else {
            return Ok(reply(
                decision,
                Err(format!(
                    "{} needs a team, and there is no team in this run: mail, the task board \
                     and teammates exist only in team runs (muster run --team).",
                    call.name
                )),
            ));
        };
        let outcome = match ToolName::parse(&call.name) {
            Some(ToolName::SendMessage) => match parse::<SendMessageInput>(call) {
                Ok(input) => self.send_message(call, input).await?,
                Err(error) => Err(error),
            },
            Some(ToolName::TaskCreate) => match parse::<TaskCreateInput>(call) {
                Ok(input) => self.task_create(call, input, team.as_ref()).await?,
                Err(error) => Err(error),
            },
            Some(ToolName::TaskUpdate) => match parse::<TaskUpdateInput>(call) {
                Ok(input) => self.task_update(call, input, team.as_ref()).await?,
                Err(error) => Err(error),
            },
            Some(ToolName::TaskList) => self.task_list().await?,
            Some(ToolName::TaskGet) => match parse::<TaskGetInput>(call) {
                Ok(input) => self.task_get(input).await?,
                Err(error) => Err(error),
            },
            Some(ToolName::SpawnTeammate) => match parse::<SpawnTeammateInput>(call) {
                Ok(input) => self.spawn_teammate(call, input, team.as_ref()).await?,
                Err(error) => Err(error),
            },
            Some(ToolName::ReviewMerge) => match parse::<ReviewMergeInput>(call) {
                Ok(input) => self.review_merge(call, input).await?,
                Err(error) => Err(error),
            },
            Some(ToolName::ReviewPlan) => match parse::<ReviewPlanInput>(call) {
                Ok(input) => self.review_plan(call, input).await?,
                Err(error) => Err(error),
            },
            Some(ToolName::ShutdownTeammate) => match parse::<ShutdownTeammateInput>(call) {
                Ok(input) => {
                    let call_key = self.call_key(call);
                    refusal_or_error(
                        team.shutdown_teammate(ShutdownRequest {
                            requested_by: &self.id,
                            name: &input.name,
                            reason: input.reason.as_deref(),
                            call_key: &call_key,
                        })
                        .await,
                    )?
                }
                Err(error) => Err(error),
            },
            _ => Err(format!("{} is not a team tool", call.name)),
        };
        Ok(reply(decision, outcome))
    }

    async fn send_message(
        &mut self,
        call: &ToolCall,
        input: SendMessageInput,
    ) -> RuntimeResult<Result<String, String>> {
        if let Some(request_id) = input.reply_to.clone() {
            return self.reply_to_request(call, &request_id, input).await;
        }
        let roster = self.run.store.roster(&self.run.run_id).await?;
        let agents: Vec<&str> = roster
            .iter()
            .filter(|m| matches!(m.kind, MemberKind::Lead | MemberKind::Teammate))
            .map(|m| m.agent.as_str())
            .collect();
        let recipients: Vec<String> = if input.to == "*" {
            agents
                .iter()
                .filter(|name| **name != self.id)
                .map(|name| (*name).to_owned())
                .collect()
        } else if agents.contains(&input.to.as_str()) {
            vec![input.to.clone()]
        } else {
            return Ok(Err(format!(
                "unknown recipient {:?}; the team is: {} (or `*` for everyone)",
                input.to,
                agents.join(", ")
            )));
        };
        if recipients.is_empty() {
            return Ok(Err("there is no one else in the team to send to".into()));
        }
        if recipients.contains(&self.id) {
            return Ok(Err("you cannot send mail to yourself".into()));
        }
        let broadcast = recipients.len() > 1 || input.to == "*";
        let sends = recipients
            .iter()
            .map(|recipient| NewMessage {
                run_id: self.run.run_id.clone(),
                sender: self.id.clone(),
                recipient: recipient.clone(),
                body: MessageBody::Text {
                    text: input.message.clone(),
                    summary: input.summary.clone(),
                },
                idempotency_key: Some(if broadcast {
                    format!("{}:{recipient}", self.call_key(call))
                } else {
                    self.call_key(call)
                }),
            })
            .collect();
        // Every recipient's copy in one commit: a crash sends all or none.
        let committed = self
            .run
            .store
            .commit_turn(CommitTurn {
                run_id: self.run.run_id.clone(),
                agent: self.id.clone(),
                sends,
                ..CommitTurn::default()
            })
            .await?;
        let mut sent = Vec::new();
        for message in &committed.sent {
            self.run.mail_sent(message);
            sent.push(format!("{} (message {})", message.recipient, message.key));
        }
        Ok(Ok(format!(
            "Sent to {}. They see it at their next turn boundary.",
            sent.join(", ")
        )))
    }

    /// Answers a `question` with an `answer` or a `shutdown_request` with a
    /// `shutdown_response`, through the store's `respond` (only the request's responder may).
    async fn reply_to_request(
        &mut self,
        call: &ToolCall,
        request_id: &str,
        input: SendMessageInput,
    ) -> RuntimeResult<Result<String, String>> {
        let Some(request) = self.run.store.request(&self.run.run_id, request_id).await? else {
            return Ok(Err(format!(
                "there is no request {request_id:?} in this run; reply_to takes the request id \
                 shown with the mail (question-…, shutdown-…)"
            )));
        };
        let body = match request.kind {
            MessageKind::Question => MessageBody::Answer {
                request_id: request_id.to_owned(),
                answer: input.message.clone(),
            },
            MessageKind::ShutdownRequest => MessageBody::ShutdownResponse {
                request_id: request_id.to_owned(),
                approve: input.approve.unwrap_or(true),
                reason: Some(input.message.clone()).filter(|m| !m.trim().is_empty()),
            },
            MessageKind::PlanApprovalRequest | MessageKind::PermissionRequest => {
                return Ok(Err(format!(
                    "{request_id} is a {}: answer it with ReviewPlan, not SendMessage",
                    request.kind
                )));
            }
            other => {
                return Ok(Err(format!(
                    "{request_id} is a {other}, which SendMessage cannot answer"
                )));
            }
        };
        let answered = self.respond_for_call(call, body).await;
        Ok(match answered {
            Ok(_) => Ok(format!("Answered {request_id} from {}.", request.requester)),
            Err(error) => Err(refusal(request_id, error)?),
        })
    }

    async fn task_create(
        &mut self,
        call: &ToolCall,
        input: TaskCreateInput,
        team: &dyn TeamServices,
    ) -> RuntimeResult<Result<String, String>> {
        let hooked = self
            .firing()
            .task_change(
                HookEvent::TaskCreated,
                None,
                &input.subject,
                &input.description,
            )
            .await;
        if let Some(reason) = hooked {
            return Ok(Err(format!(
                "the task was not created: a TaskCreated hook refused it: {reason}"
            )));
        }
        let blocked_by: Vec<i64> = input
            .blocked_by
            .unwrap_or_default()
            .into_iter()
            .filter_map(|id| i64::try_from(id).ok())
            .collect();
        let created = self
            .run
            .store
            .create_task(NewTask {
                run_id: self.run.run_id.clone(),
                created_by: self.id.clone(),
                subject: input.subject,
                description: input.description,
                blocked_by,
                idempotency_key: Some(self.call_key(call)),
            })
            .await;
        let task = match created {
            Ok(task) => task,
            Err(error) if refuses_the_task_call(&error) => return Ok(Err(error.to_string())),
            Err(error) => return Err(error.into()),
        };
        team.board_changed();
        Ok(Ok(format!(
            "Created task #{}: {}{}. Idle teammates claim unblocked tasks; assign one with \
             TaskUpdate {{task_id, owner}}.",
            task.task_id,
            task.subject,
            blockers(&task)
        )))
    }

    async fn task_update(
        &mut self,
        call: &ToolCall,
        input: TaskUpdateInput,
        team: &dyn TeamServices,
    ) -> RuntimeResult<Result<String, String>> {
        let Ok(task_id) = i64::try_from(input.task_id) else {
            return Ok(Err(format!("there is no task #{}", input.task_id)));
        };
        let Some(current) = self.run.store.task(&self.run.run_id, task_id).await? else {
            return Ok(Err(format!(
                "there is no task #{task_id}; TaskList shows the board"
            )));
        };
        let status = input.status.map(store_status);
        if status == Some(TaskStatus::Completed) && current.status != TaskStatus::Completed {
            let hooked = self
                .firing()
                .task_change(
                    HookEvent::TaskCompleted,
                    Some(task_id),
                    &current.subject,
                    &current.description,
                )
                .await;
            if let Some(reason) = hooked {
                return Ok(Err(format!(
                    "task #{task_id} was not marked completed: a TaskCompleted hook refused it: \
                     {reason}"
                )));
            }
        }
        let mut owner = input.owner.map(|o| {
            let o = o.trim().to_owned();
            (!o.is_empty()).then_some(o)
        });
        if status == Some(TaskStatus::InProgress) && owner.is_none() && current.owner.is_none() {
            owner = Some(Some(self.id.clone()));
        }
        let updated = self
            .run
            .store
            .update_task(TaskUpdate {
                run_id: self.run.run_id.clone(),
                task_id,
                updated_by: self.id.clone(),
                subject: input.subject,
                description: input.description,
                status,
                owner,
                blocked_reason: input.blocked_reason,
                add_blocked_by: input
                    .add_blocked_by
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|id| i64::try_from(id).ok())
                    .collect(),
                idempotency_key: Some(self.call_key(call)),
            })
            .await;
        let (before, task) = match updated {
            Ok(change) => {
                if let Some(assignment) = &change.assignment {
                    // The store sent the new owner its task_assignment in the update's commit.
                    self.run.mail_sent(assignment);
                }
                (change.before, change.after)
            }
            Err(error) if refuses_the_task_call(&error) => return Ok(Err(error.to_string())),
            Err(StoreError::UnknownRecipient { recipient, .. }) => {
                return Ok(Err(format!(
                    "{recipient:?} is not a member of the team, so it cannot own a task"
                )));
            }
            Err(error) => return Err(error.into()),
        };
        team.board_changed();
        let mut changes = Vec::new();
        if task.status != before.status {
            changes.push(format!(
                "status {} → {}",
                before.status.as_str(),
                task.status.as_str()
            ));
        }
        if task.owner != before.owner {
            changes.push(format!(
                "owner {} (told by mail)",
                task.owner.as_deref().unwrap_or("none")
            ));
        }
        if task.subject != before.subject || task.description != before.description {
            changes.push("text updated".into());
        }
        if task.blocked_by != before.blocked_by {
            changes.push(format!("blocked by {:?}", task.blocked_by));
        }
        Ok(Ok(format!(
            "Task #{task_id} updated: {}.",
            if changes.is_empty() {
                "nothing changed".to_owned()
            } else {
                changes.join("; ")
            }
        )))
    }

    async fn task_list(&mut self) -> RuntimeResult<Result<String, String>> {
        let tasks = self.run.store.tasks(&self.run.run_id).await?;
        if tasks.is_empty() {
            return Ok(Ok("The task board is empty.".into()));
        }
        let lines: Vec<String> = tasks.iter().map(task_line).collect();
        Ok(Ok(lines.join("\n")))
    }

    async fn task_get(&mut self, input: TaskGetInput) -> RuntimeResult<Result<String, String>> {
        let task = match i64::try_from(input.task_id) {
            Ok(id) => self.run.store.task(&self.run.run_id, id).await?,
            Err(_) => None,
        };
        Ok(match task {
            Some(task) => Ok(format!(
                "{}\n\n{}{}",
                task_line(&task),
                task.description,
                task.blocked_reason
                    .as_ref()
                    .map(|r| format!("\nBlocked: {r}"))
                    .unwrap_or_default()
            )),
            None => Err(format!(
                "there is no task #{}; TaskList shows the board",
                input.task_id
            )),
        })
    }

    async fn spawn_teammate(
        &mut self,
        call: &ToolCall,
        input: SpawnTeammateInput,
        team: &dyn TeamServices,
    ) -> RuntimeResult<Result<String, String>> {
        if RESERVED_NAMES.contains(&input.name.as_str()) {
            return Ok(Err(format!(
                "{:?} is reserved (lead, human and policy cannot be teammates' names); choose \
                 another name",
                input.name
            )));
        }
        if muster_mailbox::validate_agent_id(&input.name).is_err() || input.name.contains('.') {
            return Ok(Err(format!(
                "{:?} is not a valid teammate name: use [a-z][a-z0-9-]{{0,31}}",
                input.name
            )));
        }
        let spawned = team
            .spawn_teammate(SpawnRequest {
                name: input.name,
                definition: input.agent,
                prompt: input.prompt,
                plan_mode_required: input.plan_mode_required,
                lead_mode: self.plan.mode,
                lead: self.id.clone(),
                call_key: self.call_key(call),
            })
            .await;
        let spawned = match refusal_or_error(spawned)? {
            Ok(spawned) => spawned,
            Err(refused) => return Ok(Err(refused)),
        };
        let plans = if spawned.mode == PermissionMode::Plan {
            format!(
                " It starts in plan mode and works in {} once {} approves its plan; its plan \
                 approval request will reach your mailbox.",
                spawned.working_mode, spawned.responder
            )
        } else {
            format!(" It works in {} mode.", spawned.working_mode)
        };
        let notes = if spawned.notes.is_empty() {
            String::new()
        } else {
            format!(" Note: {}.", spawned.notes.join("; "))
        };
        Ok(Ok(format!(
            "Spawned teammate {} (agent id {}, definition {}).{plans}{notes} Reach it with \
             SendMessage {{to: \"{}\"}} or assign it a task with TaskUpdate.",
            spawned.id, spawned.id, spawned.definition, spawned.id
        )))
    }

    async fn review_merge(
        &mut self,
        call: &ToolCall,
        input: ReviewMergeInput,
    ) -> RuntimeResult<Result<String, String>> {
        let request_id = input.request_id.clone();
        let request = self
            .run
            .store
            .request(&self.run.run_id, &request_id)
            .await?;
        let Some(request) = request.filter(|r| r.kind == MessageKind::MergeRequest) else {
            return Ok(Err(format!(
                "{request_id:?} is not a merge request of this run; merge requests have ids \
                 like merge-alice-1 (plans and permissions are answered with ReviewPlan)"
            )));
        };
        // A lead that is planning may still decide merges: a merge changes the integration
        // branch, not the lead's own work.
        let body = MessageBody::MergeResponse {
            request_id: request_id.clone(),
            approved: input.approve,
            feedback: input.feedback.clone().or_else(|| {
                (!input.approve).then(|| "the work needs changes (no reason given)".into())
            }),
            rule: None,
        };
        Ok(match self.respond_for_call(call, body).await {
            Err(error) => Err(refusal(&request_id, error)?),
            Ok(_) if input.approve => Ok(format!(
                "Approved merge {request_id} of {}: muster merges its branch into the \
                 integration branch.",
                request.requester
            )),
            Ok(_) => Ok(format!(
                "Rejected merge {request_id} of {}; it goes back to work with your feedback.",
                request.requester
            )),
        })
    }

    async fn review_plan(
        &mut self,
        call: &ToolCall,
        input: ReviewPlanInput,
    ) -> RuntimeResult<Result<String, String>> {
        let request_id = input.request_id.clone();
        let Some(request) = self
            .run
            .store
            .request(&self.run.run_id, &request_id)
            .await?
        else {
            return Ok(Err(format!(
                "there is no request {request_id:?} in this run; use the request id shown with \
                 the plan or permission request (plan-…, perm-…)"
            )));
        };
        if input.approve && self.plan.mode == PermissionMode::Plan {
            return Ok(Err(format!(
                "You are in plan mode, and a lead that is planning cannot approve \
                 {request_id}: leave plan mode first (your own plan must be approved), or \
                 reject it with feedback."
            )));
        }
        let (body, summary) = match request.kind {
            MessageKind::PlanApprovalRequest => {
                let asked = input.mode.map(PermissionMode::from);
                let granted = asked.map(|m| m.capped_at(self.plan.mode));
                let lowered = match (asked, granted) {
                    (Some(asked), Some(granted)) if granted != asked => Some(asked),
                    _ => None,
                };
                let approve = input.approve;
                let requested = super::plan_mode::requested_of(&request);
                let grants = if approve {
                    match select_grants(
                        &requested,
                        Granter::Lead {
                            ceiling: self.plan.mode,
                            chosen: input.grants.as_deref(),
                        },
                    ) {
                        Ok(grants) => grants,
                        Err(error) => return Ok(Err(error.to_string())),
                    }
                } else {
                    GrantSelection::default()
                };
                let body = MessageBody::PlanApprovalResponse {
                    request_id: request_id.clone(),
                    approved: approve,
                    feedback: input.feedback.clone().or_else(|| {
                        (!approve).then(|| "the plan needs revision (no reason given)".into())
                    }),
                    mode: granted.filter(|_| approve).map(|m| m.to_string()),
                    lowered_from: lowered.filter(|_| approve).map(|m| m.to_string()),
                    edited_plan: input.edited_plan.clone().filter(|_| approve),
                    clear_context: approve && input.clear_context.unwrap_or(false),
                    rule: None,
                    grants: grants.granted.clone(),
                    dropped_grants: grants.dropped.clone(),
                };
                let mut summary = if approve {
                    format!("Approved plan {request_id} of {}", request.requester)
                } else {
                    format!(
                        "Rejected plan {request_id} of {}; it keeps planning with your feedback",
                        request.requester
                    )
                };
                if approve {
                    match (granted, lowered) {
                        (Some(granted), Some(asked)) => summary.push_str(&format!(
                            "; it works in {granted} mode (lowered from {asked}: your own mode \
                             {} is the ceiling)",
                            self.plan.mode
                        )),
                        (Some(granted), None) => {
                            summary.push_str(&format!("; it works in {granted} mode"))
                        }
                        _ => summary.push_str("; it returns to its working mode"),
                    }
                    if input.edited_plan.is_some() {
                        summary.push_str("; your edited plan replaces its plan");
                    }
                    if input.clear_context.unwrap_or(false) {
                        summary.push_str("; it starts with a fresh context");
                    }
                    if !grants.granted.is_empty() {
                        summary.push_str(&format!(
                            "; granted until its verification report: {}",
                            grants.granted.join(", ")
                        ));
                    }
                    for dropped in &grants.dropped {
                        summary.push_str(&format!(
                            "; not granted: {} ({})",
                            dropped.rule, dropped.reason
                        ));
                    }
                }
                (body, summary)
            }
            MessageKind::PermissionRequest => (
                MessageBody::PermissionResponse {
                    request_id: request_id.clone(),
                    approved: input.approve,
                    feedback: input.feedback.clone(),
                    rule: None,
                },
                format!(
                    "{} permission request {request_id} of {}",
                    if input.approve { "Approved" } else { "Refused" },
                    request.requester
                ),
            ),
            other => {
                return Ok(Err(format!(
                    "{request_id} is a {other}: ReviewPlan answers plan and permission \
                     requests; answer questions with SendMessage {{reply_to}}"
                )));
            }
        };
        let answered = self.respond_for_call(call, body).await;
        Ok(match answered {
            Ok(_) => Ok(format!("{summary}.")),
            Err(error) => Err(refusal(&request_id, error)?),
        })
    }
}

/// A store refusal of an answer, in words; other store errors stay errors.
fn refusal(request_id: &str, error: StoreError) -> RuntimeResult<String> {
    match error {
        StoreError::AlreadyDecided { decided_by, .. } => Ok(format!(
            "{request_id} was already decided by {decided_by}; only the first answer counts"
        )),
        StoreError::WrongResponder { responder, .. } => Ok(format!(
            "{request_id} is answered by {responder}, not by you"
        )),
        StoreError::MismatchedResponse { .. } | StoreError::UnknownRequest { .. } => {
            Ok(error.to_string())
        }
        other => Err(other.into()),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn parse<T: DeserializeOwned>(call: &ToolCall) -> Result<T, String> {
    serde_json::from_value(call.input.clone())
        .map_err(|error| format!("invalid input for {}: {error}", call.name))
}

fn reply(decision: &GateDecision, outcome: Result<String, String>) -> Dispatched {
    let output = match outcome {
        Ok(text) => ToolOutput::text(text),
        Err(text) => ToolOutput::error(text),
    };
    Dispatched::Done(Box::new(CallResult::new(decision, output)))
}

fn store_status(status: InputTaskStatus) -> TaskStatus {
    match status {
        InputTaskStatus::Pending => TaskStatus::Pending,
        InputTaskStatus::InProgress => TaskStatus::InProgress,
        InputTaskStatus::Completed => TaskStatus::Completed,
        InputTaskStatus::Failed => TaskStatus::Failed,
        InputTaskStatus::Blocked => TaskStatus::Blocked,
    }
}

/// A store error that is the model's mistake in a task call (a task or dependency that does
/// not exist, a claim the board refuses): the tool's error text, not the run's failure.
fn refuses_the_task_call(error: &StoreError) -> bool {
    matches!(
        error,
        StoreError::UnknownTask { .. }
            | StoreError::InvalidDependency { .. }
            | StoreError::ClaimRefused { .. }
    )
}
