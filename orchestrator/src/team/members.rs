//! Teammates: each one a tokio task with its own context. A teammate starts on its first
//! instructions (a spawned one) or idle (a declared one); idle, it takes mail or claims the
//! next unblocked task; after each piece of work it reports to the lead with an
//! `idle_notification`; a `shutdown_request` while idle is agreed to at once.

use std::sync::Arc;

use muster_agents::runtime::{
    AgentKind, AgentOutcome, AgentRuntime, AgentSpec, Record, TRANSCRIPT,
};
use muster_agents::verification;
use muster_config::PermissionMode;
use muster_config::team::TeammateSpec;
use muster_mailbox::{
    CommitTurn, DeliveryState, MemberKind, Message, MessageBody, MessageFilter, NewMessage,
    NewRecord, NewResponse, TaskStatus, TaskUpdate,
};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::watch;

use super::{LEAD, MAIL_BATCH, Member, MemberState, Team};

/// How a teammate starts and what decides for it (kept in the store, stream [`TEAM_STREAM`],
/// for a spawned teammate, so `muster resume` rebuilds it).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct TeammatePlan {
    pub id: String,
    pub definition: String,
    pub responder: String,
    pub plan_mode_required: bool,
    pub working_mode: PermissionMode,
    /// The highest mode an approval may restore (`None`: the approver's own ceiling).
    pub approval_ceiling: Option<PermissionMode>,
}

/// The records stream holding a spawned teammate's [`TeammatePlan`].
pub(crate) const TEAM_STREAM: &str = "team";

/// What wakes an idle teammate.
enum Work {
    /// A resumed agent that had not finished its turn.
    Continue,
    Prompt(String),
    Mail(Vec<Message>),
    Shutdown(Box<Message>),
}

impl Team {
    /// A teammate the team file declares: it starts idle.
    pub(crate) fn start_declared(&self, spec: &TeammateSpec, resumed: bool) -> anyhow::Result<()> {
        let definition = self.run.catalog.get(&spec.definition);
        let working_mode = definition
            .and_then(|d| d.permission_mode)
            .filter(|m| *m != PermissionMode::Plan)
            .unwrap_or_default()
            .capped_at(self.lead_mode);
        let responder = spec.approver.to_string();
        self.start_teammate(
            TeammatePlan {
                id: spec.id.clone(),
                definition: spec.definition.clone(),
                approval_ceiling: (responder == LEAD).then_some(self.lead_mode),
                responder,
                plan_mode_required: spec.plan_mode_required,
                working_mode,
            },
            None,
            resumed,
        )
        .map_err(anyhow::Error::msg)
    }

    /// Rebuilds every teammate of a resumed run from the roster: declared ones from the team
    /// file, spawned ones from their stored plan.
    pub(crate) async fn resume_teammates(&self) -> anyhow::Result<()> {
        for entry in self.store.roster(self.run_id()).await? {
            if entry.kind != MemberKind::Teammate {
                continue;
            }
            if let Some(spec) = self.file.teammates.iter().find(|t| t.id == entry.agent) {
                self.start_declared(spec, true)?;
                continue;
            }
            let rows = self
                .store
                .records(self.run_id(), &entry.agent, TEAM_STREAM, 0)
                .await?;
            let Some(plan) = rows
                .last()
                .and_then(|row| serde_json::from_value::<TeammatePlan>(row.body.clone()).ok())
            else {
                tracing::warn!(agent = %entry.agent, "a spawned teammate without its plan is not resumed");
                continue;
            };
            self.start_teammate(plan, None, true)
                .map_err(anyhow::Error::msg)?;
        }
        Ok(())
    }

    /// Keeps a spawned teammate's plan in the store.
    pub(crate) async fn remember(&self, plan: &TeammatePlan) -> anyhow::Result<()> {
        self.store
            .append_records(
                self.run_id(),
                vec![NewRecord {
                    agent: plan.id.clone(),
                    stream: TEAM_STREAM.into(),
                    seq: None,
                    body: serde_json::to_value(plan)?,
                }],
            )
            .await?;
        Ok(())
    }

    /// Starts a teammate's task (its roster entry exists).
    pub(crate) fn start_teammate(
        &self,
        plan: TeammatePlan,
        first: Option<String>,
        resumed: bool,
    ) -> Result<(), String> {
        let team = self
            .me
            .upgrade()
            .ok_or_else(|| "the team is shutting down".to_owned())?;
        {
            let mut members = self.members.lock().unwrap_or_else(|p| p.into_inner());
            members.insert(
                plan.id.clone(),
                Member {
                    definition: plan.definition.clone(),
                    responder: plan.responder.clone(),
                    working_mode: plan.working_mode,
                    state: if first.is_some() || resumed {
                        MemberState::Running
                    } else {
                        MemberState::Idle
                    },
                    task: None,
                },
            );
        }
        let id = plan.id.clone();
        let handle = tokio::spawn(async move { team.teammate(plan, first, resumed).await });
        let mut members = self.members.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(member) = members.get_mut(&id) {
            member.task = Some(handle);
        }
        drop(members);
        self.states.send_modify(|n| *n += 1);
        Ok(())
    }

    async fn teammate(self: Arc<Self>, plan: TeammatePlan, first: Option<String>, resumed: bool) {
        let id = plan.id.clone();
        if let Err(error) = self.teammate_work(&plan, first, resumed).await {
            tracing::warn!(agent = %id, %error, "teammate failed");
            let released = self
                .store
                .release_tasks_of(self.run_id(), &id)
                .await
                .unwrap_or_default();
            let notice = self
                .store
                .send(NewMessage {
                    run_id: self.run_id().to_owned(),
                    sender: id.clone(),
                    recipient: LEAD.into(),
                    body: MessageBody::IdleNotification {
                        reason: "failed".into(),
                        summary: Some(format!(
                            "{id} stopped with an error: {error}{}",
                            if released.is_empty() {
                                String::new()
                            } else {
                                format!("; its unfinished tasks {released:?} are back on the board")
                            }
                        )),
                        completed_task: None,
                    },
                    idempotency_key: None,
                })
                .await;
            if let Ok(notice) = &notice {
                self.sent(notice);
            }
            if !released.is_empty() {
                self.board.send_modify(|n| *n += 1);
            }
        }
        self.set_state(&id, MemberState::Stopped);
    }

    fn intro(&self, plan: &TeammatePlan) -> String {
        let planning = if plan.plan_mode_required {
            format!(
                " You start in plan mode: explore read-only, write your plan (## Goal, ## Steps \
                 numbered, ## Files one path per line, ## Tests, ## Risks) and call ExitPlanMode; \
                 change nothing until {} approves it.",
                plan.responder
            )
        } else {
            String::new()
        };
        format!(
            "You are {}, a teammate in team {}, led by `{LEAD}`. No one sees your plain text: \
             talk to the others with SendMessage. When you end your turn, your final text is \
             mailed to the lead as your report.{planning}",
            plan.id, self.file.name
        )
    }

    async fn teammate_work(
        &self,
        plan: &TeammatePlan,
        first: Option<String>,
        resumed: bool,
    ) -> anyhow::Result<()> {
        let id = plan.id.as_str();
        let mut board = self.board.subscribe();
        let mut agent: Option<AgentRuntime> = None;
        let mut work = first.map(Work::Prompt);
        if resumed {
            let rows = self.store.records(self.run_id(), id, TRANSCRIPT, 0).await?;
            if let Some(last) = rows.last() {
                let finished = matches!(Record::from_stored(last), Ok(Record::Finished { .. }));
                agent = Some(
                    AgentRuntime::resume(self.run.clone(), id, plan.approval_ceiling, None).await?,
                );
                if !finished {
                    work = Some(Work::Continue);
                }
            }
            if work.is_none() {
                self.set_state(id, MemberState::Idle);
            }
        }
        loop {
            let next = match work.take() {
                Some(next) => next,
                None => self.idle_wait(id, &mut board).await?,
            };
            self.set_state(id, MemberState::Running);
            match next {
                Work::Continue => {}
                Work::Shutdown(request) => {
                    self.agree_to_shutdown(id, &request).await?;
                    return Ok(());
                }
                Work::Prompt(text) => {
                    let intro = format!("{}\n\n{text}", self.intro(plan));
                    match agent.as_mut() {
                        Some(_) => {}
                        None => agent = Some(self.start_agent(plan, &intro).await?),
                    }
                }
                Work::Mail(mail) => {
                    if agent.is_none() {
                        let intro = format!(
                            "{}\n\nYour first work arrives as mail, below.",
                            self.intro(plan)
                        );
                        agent = Some(self.start_agent(plan, &intro).await?);
                    }
                    self.start_assigned_tasks(id, &mail).await?;
                    if let Some(runtime) = agent.as_mut() {
                        self.deliver(runtime, &mail).await?;
                    }
                }
            }
            let Some(runtime) = agent.as_mut() else {
                continue;
            };
            let open_before = self.open_tasks_of(id).await?;
            let result = match runtime.run().await? {
                AgentOutcome::Finished { result } => result,
                AgentOutcome::AwaitingDecision { request_id, .. } => {
                    format!("{id} stopped waiting for {request_id}")
                }
            };
            if self.agreed_to_shutdown(id).await? {
                let released = self.store.release_tasks_of(self.run_id(), id).await?;
                if !released.is_empty() {
                    self.board.send_modify(|n| *n += 1);
                }
                return Ok(());
            }
            let completed = self.complete_tasks_of(id, &open_before).await?;
            // The report goes out before the teammate counts as idle, so the lead never
            // sees an idle team with the last report still unsent. A verification of the
            // approved plan travels in the same commit, so the lead reads both at once.
            let idle = NewMessage {
                run_id: self.run_id().to_owned(),
                sender: id.to_owned(),
                recipient: LEAD.into(),
                body: MessageBody::IdleNotification {
                    reason: "available".into(),
                    summary: Some(result),
                    completed_task: completed.last().copied(),
                },
                idempotency_key: None,
            };
            let sends = self
                .verification_of(id)
                .await?
                .into_iter()
                .chain([idle])
                .collect();
            let committed = self
                .store
                .commit_turn(CommitTurn {
                    run_id: self.run_id().to_owned(),
                    agent: id.to_owned(),
                    sends,
                    ..CommitTurn::default()
                })
                .await?;
            for message in &committed.sent {
                self.sent(message);
                self.report_verification(message);
            }
            self.set_state(id, MemberState::Idle);
        }
    }

    /// The verification report of the teammate's approved plan, once per approval (its
    /// idempotency key is the plan request's id): `None` without an approved plan.
    async fn verification_of(&self, id: &str) -> anyhow::Result<Option<NewMessage>> {
        let rows = self.store.records(self.run_id(), id, TRANSCRIPT, 0).await?;
        let root = self.run.workspace.root().to_path_buf();
        let report = match verification::build_report(id, rows.iter().map(|r| &r.body), &root) {
            Ok(report) => report,
            Err(verification::VerificationError::NoApprovedPlan { .. }) => return Ok(None),
            Err(error) => {
                tracing::warn!(agent = %id, %error, "no verification report");
                return Ok(None);
            }
        };
        let key = format!(
            "{id}:verification:{}",
            report.request_id.as_deref().unwrap_or("plan")
        );
        Ok(Some(NewMessage {
            run_id: self.run_id().to_owned(),
            sender: id.to_owned(),
            recipient: LEAD.into(),
            body: MessageBody::VerificationReport {
                request_id: report.request_id.clone(),
                report: report.to_json(),
            },
            idempotency_key: Some(key),
        }))
    }

    async fn start_agent(&self, plan: &TeammatePlan, prompt: &str) -> anyhow::Result<AgentRuntime> {
        let spec = AgentSpec {
            agent_id: plan.id.clone(),
            kind: AgentKind::Teammate { lead: LEAD.into() },
            definition: plan.definition.clone(),
            mode: if plan.plan_mode_required {
                PermissionMode::Plan
            } else {
                plan.working_mode
            },
            pre_plan_mode: plan.plan_mode_required.then_some(plan.working_mode),
            approval_ceiling: plan.approval_ceiling,
            inherited_model: None,
        };
        Ok(AgentRuntime::start(self.run.clone(), spec, prompt).await?)
    }

    /// Waits, idle, for mail or a task to claim.
    async fn idle_wait(&self, id: &str, board: &mut watch::Receiver<u64>) -> anyhow::Result<Work> {
        loop {
            board.borrow_and_update();
            let mut pending = Vec::new();
            while pending.len() < MAIL_BATCH {
                match self
                    .store
                    .try_receive(self.run_id(), id, self.epoch(), MessageFilter::Any)
                    .await?
                {
                    Some(message) => pending.push(message),
                    None => break,
                }
            }
            if let Some(work) = work_from(pending) {
                return Ok(work);
            }
            if let Some(task) = self.store.claim_next_task(self.run_id(), id).await? {
                self.printer.line(
                    "task_claimed",
                    id,
                    json!({"task_id": task.task_id, "subject": task.subject}),
                );
                // The claim reaches the teammate as mail to itself, like an assignment.
                let assignment = self
                    .store
                    .send(NewMessage {
                        run_id: self.run_id().to_owned(),
                        sender: id.to_owned(),
                        recipient: id.to_owned(),
                        body: MessageBody::TaskAssignment {
                            task_id: task.task_id,
                            subject: task.subject.clone(),
                            description: task.description.clone(),
                            assigned_by: id.to_owned(),
                        },
                        idempotency_key: Some(format!("claim:{id}:{}", task.task_id)),
                    })
                    .await?;
                self.sent(&assignment);
                continue;
            }
            tokio::select! {
                biased;
                batch = self.store.receive_batch(self.run_id(), id, self.epoch(), MAIL_BATCH) => {
                    if let Some(work) = work_from(batch?) {
                        return Ok(work);
                    }
                }
                _ = board.changed() => {
                    let orphans: Vec<Message> = self
                        .store
                        .messages(self.run_id(), Some(id))
                        .await?
                        .into_iter()
                        .filter(|m| m.state == DeliveryState::Leased)
                        .collect();
                    if let Some(work) = work_from(orphans) {
                        return Ok(work);
                    }
                }
            }
        }
    }

    async fn agree_to_shutdown(&self, id: &str, request: &Message) -> anyhow::Result<()> {
        let request_id = request.request_id.clone().unwrap_or_default();
        let answered = self
            .store
            .respond(NewResponse {
                run_id: self.run_id().to_owned(),
                sender: id.to_owned(),
                body: MessageBody::ShutdownResponse {
                    request_id,
                    approve: true,
                    reason: Some("idle; shutting down".into()),
                },
                idempotency_key: None,
            })
            .await;
        match answered {
            Ok(response) => self.sent(&response),
            Err(muster_mailbox::StoreError::AlreadyDecided { .. }) => {}
            Err(error) => return Err(error.into()),
        }
        self.store
            .ack(self.run_id(), vec![request.key.clone()])
            .await?;
        let released = self.store.release_tasks_of(self.run_id(), id).await?;
        if !released.is_empty() {
            self.board.send_modify(|n| *n += 1);
        }
        Ok(())
    }

    /// Tasks assigned to the teammate by mail are in progress once it gets the mail (idle, or
    /// busy at a turn boundary).
    pub(super) async fn start_assigned_tasks(
        &self,
        id: &str,
        mail: &[Message],
    ) -> anyhow::Result<()> {
        for message in mail {
            if let MessageBody::TaskAssignment { task_id, .. } = message.typed_body()
                && let Some(task) = self.store.task(self.run_id(), task_id).await?
                && task.status == TaskStatus::Pending
                && task.owner.as_deref() == Some(id)
            {
                self.store
                    .update_task(TaskUpdate {
                        run_id: self.run_id().to_owned(),
                        task_id,
                        updated_by: id.to_owned(),
                        status: Some(TaskStatus::InProgress),
                        ..TaskUpdate::default()
                    })
                    .await?;
            }
        }
        Ok(())
    }

    /// The teammate's tasks not yet completed or failed.
    async fn open_tasks_of(&self, id: &str) -> anyhow::Result<Vec<i64>> {
        Ok(self
            .store
            .tasks(self.run_id())
            .await?
            .into_iter()
            .filter(|t| {
                t.owner.as_deref() == Some(id)
                    && !matches!(t.status, TaskStatus::Completed | TaskStatus::Failed)
            })
            .map(|t| t.task_id)
            .collect())
    }

    /// Marks the teammate's in-progress tasks completed when it ends its turn; gives back the
    /// ids of the tasks it completed in this turn.
    async fn complete_tasks_of(&self, id: &str, open_before: &[i64]) -> anyhow::Result<Vec<i64>> {
        let mut completed = Vec::new();
        for task in self.store.tasks(self.run_id()).await? {
            let mine = task.owner.as_deref() == Some(id);
            if mine && task.status == TaskStatus::InProgress {
                self.store
                    .update_task(TaskUpdate {
                        run_id: self.run_id().to_owned(),
                        task_id: task.task_id,
                        updated_by: id.to_owned(),
                        status: Some(TaskStatus::Completed),
                        ..TaskUpdate::default()
                    })
                    .await?;
            } else if !(task.status == TaskStatus::Completed && open_before.contains(&task.task_id))
            {
                continue;
            }
            completed.push(task.task_id);
            self.printer.line(
                "task_completed",
                id,
                json!({"task_id": task.task_id, "subject": task.subject}),
            );
        }
        self.board.send_modify(|n| *n += 1);
        Ok(completed)
    }
}

/// What a batch of mail asks of an idle teammate: a shutdown request first.
fn work_from(mut mail: Vec<Message>) -> Option<Work> {
    if mail.is_empty() {
        return None;
    }
    if let Some(index) = mail.iter().position(|m| m.kind == "shutdown_request") {
        return Some(Work::Shutdown(Box::new(mail.swap_remove(index))));
    }
    Some(Work::Mail(mail))
}
