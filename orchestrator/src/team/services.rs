//! What the team does for the runtime ([`TeamServices`]): spawning and shutting down
//! teammates, who answers each teammate's requests, board changes; and policy decisions.

use muster_protocol::ToolName;
use muster_protocol::{RequestFamily, RequestId};
use std::path::Path;
use std::sync::Arc;

use std::sync::atomic::Ordering;

use muster_agents::runtime::team::{
    ShutdownRequest, SpawnRequest, SpawnedTeammate, TeamCheckpoint, TeamError, TeamFuture,
    TeamServices, TurnEnd,
};
use muster_agents::runtime::{EventSink, RunEvent};
use muster_config::{PermissionMode, PlanVerdict, Policy, Responder, RuleSubject};
use muster_mailbox::decide::{Waiter, decide};
use muster_mailbox::{
    CommitTurn, CommitTurnOutcome, MemberKind, Message, MessageBody, MessageKind, NewMessage,
    NewRecord, NewResponse, RosterEntry, StoreError,
};
use muster_protocol::ApprovalSubject;

use super::members::{TEAM_STREAM, TeammatePlan};
use super::{LEAD, MemberState, Team};

/// An orchestrator error as the runtime sees it: a store failure stays a store failure.
fn team_error(context: String, error: anyhow::Error) -> TeamError {
    match error.downcast::<StoreError>() {
        Ok(store) => TeamError::store(context, store),
        Err(other) => TeamError::failed(context, other),
    }
}

impl TeamServices for Team {
    fn spawn_teammate(
        &self,
        request: SpawnRequest,
    ) -> TeamFuture<'_, Result<SpawnedTeammate, TeamError>> {
        Box::pin(async move { self.spawn(request).await })
    }

    fn shutdown_teammate<'a>(
        &'a self,
        request: ShutdownRequest<'a>,
    ) -> TeamFuture<'a, Result<String, TeamError>> {
        Box::pin(async move { self.shutdown(request).await })
    }

    fn responder_for(&self, agent: &str) -> String {
        let members = self.members.lock().unwrap_or_else(|p| p.into_inner());
        members
            .get(agent)
            .map_or_else(|| LEAD.to_owned(), |m| m.responder.clone())
    }

    fn board_changed(&self) {
        self.board.send_modify(|n| *n += 1);
    }

    fn mail_at_turn_boundary<'a>(&'a self, agent: &'a str) -> TeamFuture<'a, Vec<Message>> {
        Box::pin(async move {
            match self.boundary_mail(agent).await {
                Ok(mail) => mail,
                Err(error) => {
                    tracing::warn!(%agent, %error, "mail at the turn boundary");
                    Vec::new()
                }
            }
        })
    }

    fn mail_committed(&self, message: &Message) {
        self.follow_up(message);
    }

    fn end_of_turn<'a>(
        &'a self,
        agent: &'a str,
        result: &'a str,
        turn: u64,
    ) -> TeamFuture<'a, Result<TurnEnd, TeamError>> {
        Box::pin(async move {
            self.turn_end(agent, result, turn)
                .await
                .map_err(|error| team_error(format!("{agent}'s end of turn"), error))
        })
    }

    fn turn_ended(&self, agent: &str, end: &TurnEnd, outcome: &CommitTurnOutcome) {
        self.report_turn_end(agent, end, outcome);
    }

    fn workspace_for<'a>(
        &'a self,
        agent: &'a str,
    ) -> TeamFuture<'a, Result<Option<std::path::PathBuf>, TeamError>> {
        Box::pin(async move {
            let Some(isolation) = &self.isolation else {
                return Ok(None);
            };
            isolation
                .workspace_for(self.store.as_ref(), self.run_id(), agent)
                .await
                .map(Some)
                .map_err(|error| team_error(format!("{agent}'s worktree"), error))
        })
    }

    fn checkpoint<'a>(
        &'a self,
        agent: &'a str,
    ) -> TeamFuture<'a, Result<Option<TeamCheckpoint>, TeamError>> {
        Box::pin(async move {
            let Some(isolation) = &self.isolation else {
                return Ok(None);
            };
            isolation
                .checkpoint(agent)
                .await
                .map_err(|error| team_error(format!("{agent}'s worktree checkpoint"), error))
        })
    }
}

impl Team {
    /// What follows from a committed request (called after its commit): a teammate's request
    /// to the lead's mailbox that a policy answers is decided now, one a person answers is
    /// announced (a plan's own `approval_requested` comes from the runtime); the lead's own
    /// plan sent to a person wakes the watch that stops the run once nothing else can move, as
    /// does a teammate's request in the person's own mailbox.
    pub(crate) fn follow_up(&self, message: &Message) {
        let Some(request_id) = message.request_id.clone() else {
            return;
        };
        if message.kind == MessageKind::MergeResponse {
            self.merge_decided();
            return;
        }
        let is_request = matches!(
            message.kind.as_str(),
            "plan_approval_request" | "permission_request" | "question" | "merge_request"
        );
        if !is_request {
            return;
        }
        if message.sender == LEAD {
            if message.recipient == muster_mailbox::HUMAN {
                self.lead_awaits_decision.store(true, Ordering::SeqCst);
                self.states.send_modify(|n| *n += 1);
            }
            return;
        }
        if message.recipient == muster_mailbox::HUMAN {
            // A teammate's call deferred to the person: the waits that stop the run once only
            // a person can move it look again.
            self.states.send_modify(|n| *n += 1);
            return;
        }
        if message.recipient != LEAD {
            return;
        }
        let body = message.body.clone();
        let Some(responder) = body.responder() else {
            return;
        };
        if Responder::names_a_policy(responder) || Responder::names_a_hook(responder) {
            if let Some(team) = self.me.upgrade() {
                tokio::spawn(async move { team.decide_automatically(&request_id).await });
            }
        } else if let MessageBody::MergeRequest { branch, files, .. } = &message.body {
            self.printer.emit(RunEvent::ApprovalRequested {
                agent: message.sender.clone(),
                request_id,
                responder: responder.to_owned(),
                subject: ApprovalSubject::Merge {
                    branch: branch.clone(),
                    files: files.clone(),
                },
            });
        } else if Responder::names_the_person(responder)
            && let Some(subject) = person_subject(&message.kind)
        {
            self.printer.emit(RunEvent::ApprovalRequested {
                agent: message.sender.clone(),
                request_id,
                responder: responder.to_owned(),
                subject,
            });
        }
    }

    /// On resume: every teammate's request still waiting on a policy or a plan reviewer hook
    /// is decided (the dead process may have committed the request and died before deciding
    /// it).
    pub(crate) async fn decide_waiting_policies(&self) -> anyhow::Result<()> {
        for request in self.store.requests(self.run_id()).await? {
            if request.response.is_none()
                && request.requester != LEAD
                && (Responder::names_a_policy(&request.responder)
                    || Responder::names_a_hook(&request.responder))
            {
                self.decide_automatically(&request.request_id).await;
            }
        }
        Ok(())
    }

    /// The agent's pending mail, rendered (the lead's less what a person or a policy
    /// answers).
    async fn boundary_mail(&self, agent: &str) -> anyhow::Result<Vec<Message>> {
        let taken = if agent == LEAD {
            self.take_lead_mail().await?
        } else {
            let taken = self
                .store
                .try_receive_batch(self.run_id(), agent, self.epoch(), super::MAIL_BATCH)
                .await?;
            self.start_assigned_tasks(agent, &taken).await?;
            if taken.iter().any(|m| m.kind == MessageKind::MergeResponse) {
                self.merge_decided();
            }
            self.time_a_persons_shutdown(agent, &taken);
            taken
        };
        let nonce = super::mail::nonce();
        let previous = super::mail::previous_revisions(self.store.as_ref(), &taken).await?;
        Ok(taken
            .iter()
            .map(|m| super::mail::for_agent(m, &nonce, &previous))
            .collect())
    }

    /// A person's shutdown request (from the web inbox) reaching a busy teammate: it is
    /// stopped after the shutdown timeout unless it agrees first, as the lead's
    /// `ShutdownTeammate` request would have it (an idle teammate agrees at once).
    fn time_a_persons_shutdown(&self, agent: &str, taken: &[Message]) {
        let from_a_person = taken.iter().any(|m| {
            m.kind == MessageKind::ShutdownRequest && Responder::names_the_person(&m.sender)
        });
        if from_a_person && let Some(team) = self.me.upgrade() {
            let agent = agent.to_owned();
            tokio::spawn(async move {
                team.stop_after_timeout(&agent).await;
            });
        }
    }

    /// Whether the teammate agreed (with SendMessage `reply_to`) to a shutdown request.
    pub(crate) async fn agreed_to_shutdown(&self, agent: &str) -> anyhow::Result<bool> {
        // A shutdown a continuation took back no longer counts: the teammate works again.
        Ok(
            super::continuation::standing_shutdowns(self.store.as_ref(), self.run_id())
                .await?
                .iter()
                .any(|r| r.recipient == agent && super::continuation::agreed(r)),
        )
    }

    /// The teammate an earlier run of the same `SpawnTeammate` call spawned (a resume repeats
    /// a call whose result was not committed): found by the call's key in its stored plan.
    async fn spawned_by(
        &self,
        request: &SpawnRequest,
    ) -> Result<Option<SpawnedTeammate>, TeamError> {
        let rows = self
            .store
            .records(self.run_id(), &request.name, TEAM_STREAM, 0)
            .await
            .map_err(|e| TeamError::store("reading the teammate's stored plan", e))?;
        let plan = rows
            .last()
            .and_then(|row| serde_json::from_value::<TeammatePlan>(row.body.clone()).ok())
            .filter(|plan| plan.call_key.as_deref() == Some(request.call_key.as_str()));
        Ok(plan.map(|plan| SpawnedTeammate {
            id: plan.id,
            definition: plan.definition,
            mode: if plan.plan_mode_required {
                PermissionMode::Plan
            } else {
                plan.working_mode
            },
            working_mode: plan.working_mode,
            responder: plan.responder,
            notes: plan.notes,
        }))
    }

    async fn spawn(&self, request: SpawnRequest) -> Result<SpawnedTeammate, TeamError> {
        if let Some(spawned) = self.spawned_by(&request).await? {
            return Ok(spawned);
        }
        let rules = &self.file.spawn;
        let definition_name = request
            .definition
            .clone()
            .unwrap_or_else(|| "general".into());
        if !rules.allows_definition(&definition_name) {
            return Err(TeamError::Refused(format!(
                "the team's [spawn] rules do not allow definition {definition_name:?}{}",
                rules
                    .definitions
                    .as_ref()
                    .map(|d| format!("; allowed: {}", d.join(", ")))
                    .unwrap_or_default()
            )));
        }
        let Some(definition) = self.run.catalog.get(&definition_name).cloned() else {
            let names: Vec<&str> = self.run.catalog.names().collect();
            return Err(TeamError::Refused(format!(
                "unknown definition {definition_name:?}; the definitions are: {}",
                names.join(", ")
            )));
        };
        let live = {
            let members = self.members.lock().unwrap_or_else(|p| p.into_inner());
            if members.contains_key(&request.name) {
                return Err(TeamError::Refused(format!(
                    "a teammate named {:?} already exists; choose another name",
                    request.name
                )));
            }
            members
                .values()
                .filter(|m| m.state != MemberState::Stopped)
                .count()
        };
        if live as u64 >= self.file.max_concurrent_teammates {
            return Err(TeamError::Refused(format!(
                "the team already has {live} live teammates, its max_concurrent_teammates; shut \
                 one down first"
            )));
        }
        let mut notes = Vec::new();
        let plan_mode_required =
            rules.plan_mode_required || request.plan_mode_required == Some(true);
        if rules.plan_mode_required && request.plan_mode_required == Some(false) {
            notes.push(
                "plan_mode_required: false was not applied: the team's [spawn] rules require \
                 spawned teammates to plan first"
                    .to_owned(),
            );
        }
        let asked = definition
            .permission_mode
            .filter(|m| *m != PermissionMode::Plan)
            .unwrap_or_default();
        let mut working_mode = asked;
        if let Some(max) = rules.max_mode
            && working_mode > max
        {
            working_mode = max;
            notes.push(format!(
                "its mode was lowered from {asked} to {max}, the team's [spawn] max_mode"
            ));
        }
        if working_mode > request.lead_mode {
            notes.push(format!(
                "its mode was lowered from {working_mode} to {}, your own mode",
                request.lead_mode
            ));
            working_mode = request.lead_mode;
        }
        let responder = rules.approver.to_string();
        let plan = TeammatePlan {
            id: request.name.clone(),
            definition: definition_name.clone(),
            approval_ceiling: (responder == LEAD).then_some(request.lead_mode),
            responder: responder.clone(),
            plan_mode_required,
            working_mode,
            prompt: Some(request.prompt.clone()),
            call_key: Some(request.call_key.clone()),
            notes: notes.clone(),
            placement: self.file.spawn.placement,
            endpoint: Default::default(),
        };
        let body = serde_json::to_value(&plan)
            .map_err(|e| TeamError::failed("the new teammate's plan cannot be stored", e))?;
        // The roster entry and the plan it is rebuilt from (with its first instructions) are
        // one commit: a resume finds both or neither.
        let added = self
            .store
            .commit_turn(CommitTurn {
                run_id: self.run_id().to_owned(),
                agent: request.lead.clone(),
                members: vec![RosterEntry {
                    agent: request.name.clone(),
                    kind: MemberKind::Teammate,
                    definition: Some(definition_name.clone()),
                    parent: None,
                }],
                records: vec![NewRecord {
                    agent: request.name.clone(),
                    stream: TEAM_STREAM.into(),
                    seq: None,
                    body,
                }],
                ..CommitTurn::default()
            })
            .await;
        match added {
            Ok(_) => {}
            Err(StoreError::AlreadyOnRoster { .. }) => {
                return Err(TeamError::Refused(format!(
                    "{:?} is already a member of this run",
                    request.name
                )));
            }
            Err(error) => return Err(TeamError::store("adding the new teammate", error)),
        }
        muster_mailbox::failpoint!("spawn");
        self.start_teammate(plan, Some(request.prompt), false)?;
        Ok(SpawnedTeammate {
            id: request.name,
            definition: definition_name,
            mode: if plan_mode_required {
                PermissionMode::Plan
            } else {
                working_mode
            },
            working_mode,
            responder,
            notes,
        })
    }

    /// Sends `agent` a `shutdown_request` from the lead; gives back its request id.
    pub(crate) async fn request_shutdown(
        &self,
        agent: &str,
        reason: Option<String>,
        call_key: Option<&str>,
    ) -> Result<String, StoreError> {
        let counter = RequestFamily::Shutdown.counter_name(agent);
        let number = match call_key {
            Some(key) => self.store.counter_for(self.run_id(), &counter, key).await?,
            None => self.store.next_counter(self.run_id(), &counter).await?,
        };
        let request_id = RequestId::new(RequestFamily::Shutdown, agent, number).to_string();
        let request = self
            .store
            .send(NewMessage {
                run_id: self.run_id().to_owned(),
                sender: LEAD.into(),
                recipient: agent.to_owned(),
                body: MessageBody::ShutdownRequest {
                    request_id: request_id.clone(),
                    reason,
                },
                idempotency_key: call_key.map(str::to_owned),
            })
            .await?;
        self.sent(&request);
        // A repeated call returns its first request (and its id).
        Ok(request.request_id.unwrap_or(request_id))
    }

    async fn shutdown(&self, request: ShutdownRequest<'_>) -> Result<String, TeamError> {
        let ShutdownRequest {
            requested_by,
            name,
            reason,
            call_key,
        } = request;
        if requested_by != LEAD {
            return Err(TeamError::Refused(
                "only the lead shuts teammates down".into(),
            ));
        }
        let state = {
            let members = self.members.lock().unwrap_or_else(|p| p.into_inner());
            members.get(name).map(|m| m.state)
        };
        match state {
            None => {
                return Err(TeamError::Refused(format!("there is no teammate {name:?}")));
            }
            Some(MemberState::Stopped) => return Ok(format!("{name} has already stopped.")),
            Some(_) => {}
        }
        let request_id = self
            .request_shutdown(name, reason.map(str::to_owned), Some(call_key))
            .await
            .map_err(|e| TeamError::store("sending the shutdown request", e))?;
        if let Some(team) = self.me.upgrade() {
            let agent = name.to_owned();
            tokio::spawn(async move {
                team.stop_after_timeout(&agent).await;
            });
        }
        Ok(format!(
            "Sent shutdown request {request_id} to {name}. It stops when it agrees, or is \
             stopped after {} ms; its unfinished tasks return to the board.",
            self.shutdown_timeout.as_millis()
        ))
    }

    fn policy(&self, path: &Path) -> anyhow::Result<Arc<Policy>> {
        let mut policies = self.policies.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(policy) = policies.get(path) {
            return Ok(policy.clone());
        }
        let policy = Arc::new(self.stored_policies.policy(&self.root, path)?);
        policies.insert(path.to_path_buf(), policy.clone());
        Ok(policy)
    }

    /// A policy answers a teammate's plan or permission request at once; the response names
    /// the rule that decided.
    pub(crate) async fn decide_by_policy(&self, request_id: &str) {
        if let Err(error) = self.try_decide_by_policy(request_id).await {
            tracing::warn!(%request_id, %error, "the policy could not decide");
        }
    }

    async fn try_decide_by_policy(&self, request_id: &str) -> anyhow::Result<()> {
        let Some(request) = self.store.request(self.run_id(), request_id).await? else {
            return Ok(());
        };
        if request.response.is_some() {
            return Ok(());
        }
        let Ok(Responder::Policy(path)) = Responder::parse(&request.responder) else {
            return Ok(());
        };
        let policy = self.policy(&path)?;
        let body = match request.body.clone() {
            MessageBody::PlanApprovalRequest {
                plan,
                allowed_prompts,
                ..
            } => {
                let verdict = policy.review_plan(&plan);
                // Only what the policy's `permissions.allow` covers, up to its max_mode.
                let grants = if verdict.approved {
                    muster_agents::permission::grants::select_grants(
                        &allowed_prompts,
                        muster_agents::permission::grants::Granter::Policy { policy: &policy },
                    )
                    .unwrap_or_default()
                } else {
                    Default::default()
                };
                let (_, working) = self.definition_and_working_mode(&request.requester);
                let granted = working.capped_at(verdict.granted_mode);
                MessageBody::PlanApprovalResponse {
                    request_id: request_id.to_owned(),
                    approved: verdict.approved,
                    feedback: (!verdict.reasons.is_empty()).then(|| verdict.reasons.join("; ")),
                    mode: verdict.approved.then(|| granted.to_string()),
                    lowered_from: (verdict.approved && granted != working)
                        .then(|| working.to_string()),
                    edited_plan: None,
                    clear_context: false,
                    rule: Some(deciding_rule(&policy, &verdict)),
                    grants: grants.granted,
                    dropped_grants: grants.dropped,
                }
            }
            MessageBody::PermissionRequest { tool, input, .. } => {
                let command = input.get("command").and_then(|c| c.as_str());
                let subject = match command {
                    Some(command) if tool == ToolName::Bash => RuleSubject::Command(command),
                    _ => RuleSubject::Nothing,
                };
                let (approved, feedback, rule) = match policy.answer_permission(&tool, subject) {
                    muster_config::PolicyAnswer::Allow { rule } => (true, None, rule),
                    muster_config::PolicyAnswer::Deny { reason } => {
                        (false, Some(reason.clone()), reason)
                    }
                };
                MessageBody::PermissionResponse {
                    request_id: request_id.to_owned(),
                    approved,
                    feedback,
                    rule: Some(format!("{rule} ({})", policy.source)),
                }
            }
            MessageBody::MergeRequest { files, tested, .. } => {
                let mut verdict = policy.review_merge(&files);
                if let Some(reason) = policy.untested_merge_reason(tested.is_some()) {
                    verdict.approved = false;
                    verdict.reasons.push(reason);
                }
                MessageBody::MergeResponse {
                    request_id: request_id.to_owned(),
                    approved: verdict.approved,
                    feedback: (!verdict.reasons.is_empty()).then(|| verdict.reasons.join("; ")),
                    rule: Some(deciding_merge_rule(&policy, &verdict)),
                }
            }
            MessageBody::Question { .. } => MessageBody::Answer {
                request_id: request_id.to_owned(),
                answer: "A policy cannot answer questions: decide yourself and state the \
                         assumption you made."
                    .into(),
            },
            _ => return Ok(()),
        };
        let answer = NewResponse {
            run_id: self.run_id().to_owned(),
            sender: muster_mailbox::POLICY.into(),
            body,
            idempotency_key: None,
        };
        match decide(self.store.as_ref(), answer, Waiter::InProcess).await {
            Ok(decided) => {
                self.sent(&decided.response);
                if decided.response.kind == MessageKind::MergeResponse {
                    self.merge_decided();
                }
                Ok(())
            }
            Err(StoreError::AlreadyDecided { .. }) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }
}

/// The policy rule that decided a merge, by name, with the policy file.
fn deciding_merge_rule(policy: &Policy, verdict: &PlanVerdict) -> String {
    let for_tests = verdict
        .reasons
        .iter()
        .any(|reason| reason.contains("(require_tests_pass)"));
    if !verdict.approved && for_tests {
        return format!("require_tests_pass ({})", policy.source);
    }
    if verdict.approved && !policy.approve_all {
        return format!(
            "every check passed: max_files, allowed_paths, denied_paths ({})",
            policy.source
        );
    }
    deciding_rule(policy, verdict)
}

/// The policy rule that decided a plan, by name, with the policy file.
fn deciding_rule(policy: &Policy, verdict: &PlanVerdict) -> String {
    if policy.approve_all {
        return format!("approve_all ({})", policy.source);
    }
    if verdict.approved {
        return format!(
            "every check passed: required_sections, max_files, allowed_paths, denied_paths ({})",
            policy.source
        );
    }
    let mut rules = Vec::new();
    for reason in &verdict.reasons {
        let rule = if reason.contains("denied path") {
            "denied_paths"
        } else if reason.contains("no allowed path") {
            "allowed_paths"
        } else if reason.starts_with("missing section") {
            "required_sections"
        } else {
            "max_files"
        };
        if !rules.contains(&rule) {
            rules.push(rule);
        }
    }
    format!("{} ({})", rules.join(", "), policy.source)
}

/// What a request a person answers asks about, by its kind (plans are announced by the
/// runtime, merges with their branch).
fn person_subject(kind: &MessageKind) -> Option<ApprovalSubject> {
    match kind {
        MessageKind::PermissionRequest => Some(ApprovalSubject::PermissionRequest),
        MessageKind::Question => Some(ApprovalSubject::Question),
        _ => None,
    }
}
