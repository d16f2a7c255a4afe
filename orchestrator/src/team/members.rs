//! Teammates: each one a tokio task with its own context. A teammate starts on its first
//! instructions (a spawned one) or idle (a declared one); idle, it takes mail or claims the
//! next unblocked task; after each piece of work it reports to the lead with an
//! `idle_notification`; a `shutdown_request` while idle is agreed to at once.

use muster_protocol::MessageKind;
use std::sync::Arc;

use muster_agents::runtime::team::{TeamError, TurnEnd};
use muster_agents::runtime::{
    AgentKind, AgentOutcome, AgentRuntime, AgentSpec, Record, TRANSCRIPT,
};
use muster_agents::runtime::{EventSink, RunEvent};
use muster_agents::verification;
use muster_config::team::TeammateSpec;
use muster_config::{AgentEndpoint, PermissionMode, Placement};
use muster_mailbox::{
    CommitTurn, CommitTurnOutcome, MemberKind, Message, MessageBody, NewMessage, NewResponse,
    TaskStatus, TaskUpdate,
};
use serde::{Deserialize, Serialize};
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
    /// A spawned teammate's first instructions (a resume that finds no transcript starts it
    /// on them).
    #[serde(default)]
    pub prompt: Option<String>,
    /// The `SpawnTeammate` call that spawned it (`"{lead}:{tool_use_id}"`): a repeat of the
    /// call returns this teammate.
    #[serde(default)]
    pub call_key: Option<String>,
    /// What the team's rules changed about the spawn request, in words.
    #[serde(default)]
    pub notes: Vec<String>,
    /// Where it runs: here, or on a `muster worker` (a work item of its own).
    #[serde(default)]
    pub placement: Placement,
    /// Its team entry's model and provider (over its definition's).
    #[serde(default, skip_serializing_if = "AgentEndpoint::is_empty")]
    pub endpoint: AgentEndpoint,
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

/// The mode a declared teammate works in once its plan is approved: its definition's (never
/// `plan`), else `default`, capped at the lead's.
pub(crate) fn declared_working_mode(
    definition: Option<&muster_config::AgentDefinition>,
    lead_mode: PermissionMode,
) -> PermissionMode {
    definition
        .and_then(|d| d.permission_mode)
        .filter(|m| *m != PermissionMode::Plan)
        .unwrap_or_default()
        .capped_at(lead_mode)
}

impl Team {
    /// A teammate the team file declares: it starts idle.
    pub(crate) fn start_declared(&self, spec: &TeammateSpec, resumed: bool) -> anyhow::Result<()> {
        let working_mode =
            declared_working_mode(self.run.catalog.get(&spec.definition), self.lead_mode);
        let responder = spec.approver.to_string();
        self.start_teammate(
            TeammatePlan {
                id: spec.id.clone(),
                definition: spec.definition.clone(),
                // The lead, and a plan reviewer hook in its place, restore no mode above the
                // lead's.
                approval_ceiling: (responder == LEAD
                    || muster_config::Responder::names_a_hook(&responder))
                .then_some(self.lead_mode),
                responder,
                plan_mode_required: spec.plan_mode_required,
                working_mode,
                prompt: None,
                call_key: None,
                notes: Vec::new(),
                placement: spec.placement,
                endpoint: spec.endpoint.clone(),
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
            // Spawned and killed before it started: it starts on its first instructions.
            let first = plan.prompt.clone();
            self.start_teammate(plan, first, true)?;
        }
        Ok(())
    }

    /// Starts a teammate's task (its roster entry exists).
    pub(crate) fn start_teammate(
        &self,
        plan: TeammatePlan,
        first: Option<String>,
        resumed: bool,
    ) -> Result<(), TeamError> {
        let team = self
            .me
            .upgrade()
            .ok_or_else(|| TeamError::Refused("the team is shutting down".to_owned()))?;
        // Placed on workers: a worker runs it, unless this process is that worker.
        let placed = plan.placement == Placement::Workers && self.worker.is_none();
        {
            let mut members = self.members.lock().unwrap_or_else(|p| p.into_inner());
            members.insert(
                plan.id.clone(),
                Member {
                    definition: plan.definition.clone(),
                    responder: plan.responder.clone(),
                    working_mode: plan.working_mode,
                    state: if first.is_some() || (resumed && !placed) {
                        MemberState::Running
                    } else {
                        MemberState::Idle
                    },
                    task: None,
                    placed,
                    worker: None,
                    open_before: Vec::new(),
                },
            );
        }
        let id = plan.id.clone();
        let handle = if placed {
            tokio::spawn(async move { team.placed_teammate(plan, first).await })
        } else {
            tokio::spawn(async move { team.teammate(plan, first, resumed).await })
        };
        let mut members = self.members.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(member) = members.get_mut(&id) {
            member.task = Some(handle);
        }
        drop(members);
        self.states.send_modify(|n| *n += 1);
        Ok(())
    }

    pub(crate) async fn teammate(
        self: Arc<Self>,
        plan: TeammatePlan,
        first: Option<String>,
        resumed: bool,
    ) {
        let id = plan.id.clone();
        if let Err(error) = self.teammate_work(&plan, first, resumed).await {
            tracing::warn!(agent = %id, %error, "teammate failed");
            let summary = |released: &[i64]| {
                format!(
                    "{id} stopped with an error: {error:#}{}",
                    back_on_the_board(released)
                )
            };
            // The runtime's endings (`output_limit`, `stuck`) reach the lead by name.
            let reason =
                crate::lifecycle::agent_stop(&error).map_or("failed", |stop| stop.reason());
            if let Err(error) = self.stop_with_notice(&id, reason, summary).await {
                tracing::warn!(agent = %id, %error, "the failed teammate's notice");
            }
            // Keep the store failure from being mistaken for the teammate's own: it ends the
            // run (exit 4), whatever the lead would do next.
            self.fail_run_on_store_error(error);
        }
        self.set_state(&id, MemberState::Stopped);
    }

    /// A teammate that stops for good (failed, or stopped by force): its unfinished tasks go
    /// back to the board and the lead is told why, in one commit.
    pub(crate) async fn stop_with_notice(
        &self,
        id: &str,
        reason: &str,
        summary: impl FnOnce(&[i64]) -> String,
    ) -> anyhow::Result<()> {
        let open = self.open_tasks_of(id).await?;
        // Once per process epoch: a resume that stops it again tells the lead again.
        let key = format!("{id}:{reason}:{}", self.epoch());
        let notice = self.idle_notice(id, reason, summary(&open), None, key);
        let notify = CommitTurn {
            sends: vec![notice],
            ..CommitTurn::default()
        };
        self.commit_releasing(id, &open, notify).await
    }

    /// Commits `turn` for the stopping teammate `id` with its `open` tasks back on the board
    /// in the same commit; what it sent is printed, and idle teammates look at the board.
    async fn commit_releasing(
        &self,
        id: &str,
        open: &[i64],
        turn: CommitTurn,
    ) -> anyhow::Result<()> {
        let committed = self
            .store
            .commit_turn(CommitTurn {
                run_id: self.run_id().to_owned(),
                agent: id.to_owned(),
                task_updates: self.released(id, open),
                ..turn
            })
            .await?;
        for message in committed.sent.iter().chain(&committed.responses) {
            self.sent(message);
        }
        if !open.is_empty() {
            self.board.send_modify(|n| *n += 1);
        }
        Ok(())
    }

    /// A teammate that ended: its unfinished tasks go back to the board (one commit).
    pub(crate) async fn return_tasks_of(&self, id: &str) -> anyhow::Result<()> {
        let released = self.store.release_tasks_of(self.run_id(), id).await?;
        if !released.is_empty() {
            self.board.send_modify(|n| *n += 1);
        }
        Ok(())
    }

    /// The changes that put a stopped teammate's unfinished tasks back on the board.
    fn released(&self, id: &str, open: &[i64]) -> Vec<TaskUpdate> {
        open.iter()
            .map(|&task_id| TaskUpdate {
                run_id: self.run_id().to_owned(),
                task_id,
                updated_by: id.to_owned(),
                status: Some(TaskStatus::Pending),
                owner: Some(None),
                ..TaskUpdate::default()
            })
            .collect()
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
            // A continuation's fresh base adds a checkpoint after a finished turn.
            let last = rows
                .iter()
                .rev()
                .find(|row| !matches!(Record::from_stored(row), Ok(Record::Checkpoint { .. })));
            if let Some(last) = last {
                let finished = matches!(Record::from_stored(last), Ok(Record::Finished { .. }));
                if finished && self.agreed_to_shutdown(id).await? {
                    // It agreed and ended its turn; its tasks went back in that commit.
                    return Ok(());
                }
                let mut resumed =
                    AgentRuntime::resume(self.run.clone(), id, plan.approval_ceiling, None).await?;
                resumed.share_turn_interrupt(&self.turns);
                agent = Some(resumed);
                // A started teammate never takes its first instructions again.
                work = (!finished).then_some(Work::Continue);
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
                    // Leased, not yet delivered (acked with the delivery's commit).
                    muster_mailbox::failpoint!("leased:{id}");
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
            self.set_open_before(id, open_before);
            // The end of the turn (its tasks, its report, its verification) is committed with
            // its `finished` record, through the runtime's end-of-turn hook.
            match runtime.run().await? {
                AgentOutcome::AwaitingDecision { request_id, .. }
                | AgentOutcome::CallDeferred { request_id, .. } => {
                    anyhow::bail!(
                        "{id} stopped waiting for {request_id}, which no one here decides"
                    );
                }
                AgentOutcome::TurnInterrupted => {
                    self.tell_lead_idle(id, runtime.turn(), None).await?;
                    self.set_state(id, MemberState::Idle);
                    continue;
                }
                // As an interrupted turn, the lead told which event (not the reason: that is
                // for the person, in the log and the teammate's records).
                AgentOutcome::StoppedByHook { event, .. } => {
                    self.tell_lead_idle(id, runtime.turn(), Some(&event))
                        .await?;
                    self.set_state(id, MemberState::Idle);
                    continue;
                }
                AgentOutcome::Finished { .. } => {}
            }
            if self.agreed_to_shutdown(id).await? {
                runtime.end_session("other").await;
                return Ok(());
            }
            self.set_state(id, MemberState::Idle);
        }
    }

    /// A teammate's end-of-turn transition, committed with its `finished` record: having
    /// agreed to shut down, its unfinished tasks go back to the board; otherwise its tasks in
    /// progress are completed, and the lead gets its verification report (of an approved
    /// plan, once per approval) and its idle notification (once per turn).
    pub(crate) async fn turn_end(
        &self,
        id: &str,
        result: &str,
        turn: u64,
    ) -> anyhow::Result<TurnEnd> {
        if self.agreed_to_shutdown(id).await? {
            let open = self.open_tasks_of(id).await?;
            return Ok(TurnEnd {
                task_updates: self.released(id, &open),
                ..TurnEnd::default()
            });
        }
        let open_before = self.open_before(id);
        let mut end = TurnEnd::default();
        for task in self.store.tasks(self.run_id()).await? {
            if task.owner.as_deref() != Some(id) {
                continue;
            }
            if task.status == TaskStatus::InProgress {
                end.task_updates.push(TaskUpdate {
                    run_id: self.run_id().to_owned(),
                    task_id: task.task_id,
                    updated_by: id.to_owned(),
                    status: Some(TaskStatus::Completed),
                    ..TaskUpdate::default()
                });
            } else if !(task.status == TaskStatus::Completed && open_before.contains(&task.task_id))
            {
                continue;
            }
            end.completed.push((task.task_id, task.subject));
        }
        let completed_task = end.completed.last().map(|(task_id, _)| *task_id);
        let key = format!("{id}:idle:{turn}");
        let idle = self.idle_notice(id, "available", result.to_owned(), completed_task, key);
        // The report goes out in the commit that ends the turn, before the teammate counts
        // as idle, so the lead never sees an idle team with the last report unsent; a
        // verification travels with it, so the lead reads both at once.
        end.sends = self
            .verification_of(id)
            .await?
            .into_iter()
            .chain([idle])
            .collect();
        self.add_merge_step(id, turn, &mut end).await?;
        Ok(end)
    }

    /// Reports a committed end of turn: its completed tasks, its mail, its verification.
    pub(crate) fn report_turn_end(&self, id: &str, end: &TurnEnd, outcome: &CommitTurnOutcome) {
        for (task_id, subject) in &end.completed {
            self.printer.emit(RunEvent::TaskCompleted {
                agent: id.to_owned(),
                task_id: *task_id,
                subject: subject.clone(),
            });
        }
        for message in &outcome.sent {
            self.sent(message);
            self.report_verification(message);
            // A merge request is decided by a policy at once, or announced for a person.
            self.follow_up(message);
        }
        self.board.send_modify(|n| *n += 1);
    }

    fn set_open_before(&self, id: &str, open: Vec<i64>) {
        let mut members = self.members.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(member) = members.get_mut(id) {
            member.open_before = open;
        }
    }

    fn open_before(&self, id: &str) -> Vec<i64> {
        let members = self.members.lock().unwrap_or_else(|p| p.into_inner());
        members
            .get(id)
            .map(|m| m.open_before.clone())
            .unwrap_or_default()
    }

    /// The verification report of the teammate's approved plan, once per approval (its
    /// idempotency key is the plan request's id): `None` without an approved plan.
    async fn verification_of(&self, id: &str) -> anyhow::Result<Option<NewMessage>> {
        let rows = self.store.records(self.run_id(), id, TRANSCRIPT, 0).await?;
        let root = self.workspace_root_of(id);
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
        let sent_before = self
            .store
            .messages(self.run_id(), Some(LEAD))
            .await?
            .iter()
            .any(|m| m.idempotency_key.as_deref() == Some(key.as_str()));
        if sent_before {
            return Ok(None);
        }
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
            endpoint: (!plan.endpoint.is_empty()).then(|| plan.endpoint.clone()),
        };
        let mut agent = AgentRuntime::start(self.run.clone(), spec, prompt).await?;
        agent.share_turn_interrupt(&self.turns);
        Ok(agent)
    }

    /// After `id`'s turn `turn` was interrupted (its `turn_interrupted` committed): the lead
    /// is told that the teammate waits idle, its tasks still its own, until mail wakes it.
    /// Keyed by the turn, so a resume that finds the turn interrupted sends it once.
    async fn tell_lead_idle(
        &self,
        id: &str,
        turn: u64,
        hook_event: Option<&str>,
    ) -> anyhow::Result<()> {
        let (reason, summary) = match hook_event {
            None => (
                "interrupted",
                "The person interrupted my turn. I wait with my context and my tasks; mail me \
                 to go on."
                    .to_owned(),
            ),
            Some(event) => (
                "hook_stopped",
                format!(
                    "A {event} hook stopped my turn. I wait with my context and my tasks; mail \
                     me to go on."
                ),
            ),
        };
        let key = format!("{id}:{reason}:{turn}");
        let sent = self
            .store
            .send(self.idle_notice(id, reason, summary, None, key))
            .await?;
        self.sent(&sent);
        Ok(())
    }

    /// `id`'s idle notification to the lead: why it is idle, what it says, the task it just
    /// completed; sent once per `idempotency_key`.
    fn idle_notice(
        &self,
        id: &str,
        reason: &str,
        summary: String,
        completed_task: Option<i64>,
        idempotency_key: String,
    ) -> NewMessage {
        NewMessage {
            run_id: self.run_id().to_owned(),
            sender: id.to_owned(),
            recipient: LEAD.into(),
            body: MessageBody::IdleNotification {
                reason: reason.into(),
                summary: Some(summary),
                completed_task,
            },
            idempotency_key: Some(idempotency_key),
        }
    }

    /// Waits, idle, for mail or a task to claim.
    async fn idle_wait(&self, id: &str, board: &mut watch::Receiver<u64>) -> anyhow::Result<Work> {
        // On a worker the board changes in other processes (the lead's, other workers'): the
        // store's board wake-up (a NOTIFY on PostgreSQL) says so. In the lead's process the
        // `board` channel does, bumped by every change made there.
        let board_elsewhere = self
            .worker
            .is_some()
            .then(|| self.store.woken(self.run_id(), muster_mailbox::BOARD_WAKE));
        let mail_for_it = self.store.woken(self.run_id(), id);
        loop {
            board.borrow_and_update();
            // Made before the look (a `Notified` receives `notify_waiters` from its creation),
            // so mail or a change committed between the look and the wait still wakes it.
            let mail_committed = mail_for_it.notified();
            tokio::pin!(mail_committed);
            let changed_elsewhere = board_elsewhere.as_ref().map(|notify| notify.notified());
            let changed_elsewhere = async move {
                match changed_elsewhere {
                    Some(notified) => notified.await,
                    None => std::future::pending().await,
                }
            };
            tokio::pin!(changed_elsewhere);
            let pending = self
                .store
                .try_receive_batch(self.run_id(), id, self.epoch(), MAIL_BATCH)
                .await?;
            if let Some(work) = work_from(self.settle_approved_merges(pending).await?) {
                return Ok(work);
            }
            // The claim and its task_assignment (mail to itself) are one commit, so a claimed
            // task always reaches its teammate, across a crash too.
            if let Some(claimed) = self.store.claim_next_task(self.run_id(), id).await? {
                muster_mailbox::failpoint!("claim");
                self.printer.emit(RunEvent::TaskClaimed {
                    agent: id.to_owned(),
                    task_id: claimed.task.task_id,
                    subject: claimed.task.subject.clone(),
                });
                self.sent(&claimed.assignment);
                continue;
            }
            // Idle, having found nothing: a crash test freezes the teammate here.
            muster_mailbox::failpoint!("idle:{id}");
            // The wait takes nothing from the store: a lease inside a `select!` whose other
            // branch won would be dropped with its COMMIT already sent, leaving the mail
            // leased to no one. Woken, it looks again above.
            tokio::select! {
                () = &mut mail_committed => {}
                _ = board.changed() => {}
                () = &mut changed_elsewhere => {}
            }
        }
    }

    /// Agrees to a shutdown request while idle: the answer, the request's ack and the return
    /// of its unfinished tasks to the board are one commit.
    async fn agree_to_shutdown(&self, id: &str, request: &Message) -> anyhow::Result<()> {
        let request_id = request.request_id.clone().unwrap_or_default();
        let decided = self
            .store
            .request(self.run_id(), &request_id)
            .await?
            .is_some_and(|r| r.response.is_some());
        let answer = NewResponse {
            run_id: self.run_id().to_owned(),
            sender: id.to_owned(),
            body: MessageBody::ShutdownResponse {
                request_id,
                approve: true,
                reason: Some("idle; shutting down".into()),
            },
            idempotency_key: None,
        };
        let open = self.open_tasks_of(id).await?;
        let agree = CommitTurn {
            acks: vec![request.key.clone()],
            responses: if decided { Vec::new() } else { vec![answer] },
            ..CommitTurn::default()
        };
        self.commit_releasing(id, &open, agree).await
    }

    /// Tasks assigned to the teammate by mail are in progress once it gets the mail (idle, or
    /// busy at a turn boundary).
    pub(super) async fn start_assigned_tasks(
        &self,
        id: &str,
        mail: &[Message],
    ) -> anyhow::Result<()> {
        for message in mail {
            if let MessageBody::TaskAssignment { task_id, .. } = message.body.clone()
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
}

/// What a batch of mail asks of an idle teammate: a shutdown request first.
fn work_from(mut mail: Vec<Message>) -> Option<Work> {
    if mail.is_empty() {
        return None;
    }
    if let Some(index) = mail
        .iter()
        .position(|m| m.kind == MessageKind::ShutdownRequest)
    {
        return Some(Work::Shutdown(Box::new(mail.swap_remove(index))));
    }
    Some(Work::Mail(mail))
}

/// ", its unfinished tasks … are back on the board", when there were any.
pub(crate) fn back_on_the_board(released: &[i64]) -> String {
    if released.is_empty() {
        String::new()
    } else {
        format!("; its unfinished tasks {released:?} are back on the board")
    }
}
