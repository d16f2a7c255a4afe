//! One agent's loop: send the context to the model, run each tool call through the gate,
//! append the results, repeat until the model ends its turn. Every step is committed before it
//! is reported.

use muster_protocol::ToolName;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use muster_config::hooks::HookEvent;
use muster_config::{AgentDefinition, AgentEndpoint, PermissionMode};
use muster_mailbox::ledger::{LEDGER_WAKE, LedgerDecision};
use muster_mailbox::{AutoGateUpdate, CommitTurn, Message as Mail, NewRecord, RunLedger};

use crate::budget::{Spend, StoredCheck, UnpricedModel, check_stored, request_estimate, spent_on};
use crate::compaction::{
    COORDINATION_STATE_TOKENS, CompactionInputs, PlanReference, SummaryRequest,
    estimate_messages_tokens, needs_compaction, plan_cut, read_coordination_state, rebuild,
    render_coordination_state, summary_text,
};
use crate::model::{
    ContentBlock, Message, ModelRequest, ModelResponse, RequestContext, ServerLimits, StreamEvent,
    ToolDefinition,
};
use crate::tools::Workspace;

use super::asks::AskSettings;
use super::calls::AgentOutcome;
use super::calls::PendingCalls;
use super::context::{ModeModel, ModelRouter, RunContext};
use super::dispatch::CallDispatcher;
use super::error::{RuntimeError, RuntimeResult};
use super::events::{Reporter, RunEvent};
use super::interrupt::{CommitLane, TurnInterrupt};
use super::plan_state::PlanState;
use super::prompt::OwnPrompt;
use super::prompt::{mode_reminder, system_prompt};
use super::records::{AgentKind, Record};
use super::requests::{Requests, own_model};
use super::stops::StopConditions;
use super::transcript::Transcript;
use muster_protocol::{AgentState, DeltaKind};

/// The reason of a mode switch a front end asked for (`set_permission_mode`).
const SET_BY_FRONT_END: &str = "set_permission_mode";

/// How a new agent starts.
#[derive(Debug, Clone)]
pub struct AgentSpec {
    pub agent_id: String,
    pub kind: AgentKind,
    /// The agent definition's name in the run's catalog.
    pub definition: String,
    /// The mode it starts in.
    pub mode: PermissionMode,
    /// The mode to restore after plan mode (for an agent that starts in plan mode).
    pub pre_plan_mode: Option<PermissionMode>,
    /// The highest mode an approval may restore (a teammate's lead's mode; `None`: no cap
    /// beyond the approver's).
    pub approval_ceiling: Option<PermissionMode>,
    /// The parent's current model, for `model: inherit`.
    pub inherited_model: Option<String>,
    /// A teammate's team entry's provider and model, or a subagent's parent's endpoint.
    pub endpoint: Option<AgentEndpoint>,
}

/// How long an agent waiting for the run's ledger to have room sleeps before it looks again
/// without a wake-up (see [`AgentRuntime::reserve_before_request`]): a safety net only, long
/// enough that a wake-up path that broke shows as a stall in the tests (which pass with it
/// set to ten minutes), short enough that a lost wake-up does not stop a run for long.
const LEDGER_RELOOK: std::time::Duration = std::time::Duration::from_secs(30);

/// Sleeps for `duration`, or for ever without one.
async fn sleep_or_forever(duration: Option<std::time::Duration>) {
    match duration {
        Some(duration) => tokio::time::sleep(duration).await,
        None => std::future::pending().await,
    }
}

/// One agent at work: its loop over owned parts — the transcript, its mode and plan, its
/// stop conditions, its pending calls and the dispatcher that decides and runs them.
pub struct AgentRuntime {
    pub(super) run: Arc<RunContext>,
    pub(super) id: String,
    pub(super) kind: AgentKind,
    pub(super) definition: AgentDefinition,
    /// Its models per mode: the run's, or its own endpoint's.
    pub(super) models: ModelRouter,
    /// What its model requests are built from.
    pub(super) requests: Requests,
    pub(super) transcript: Transcript,
    pub(super) plan: PlanState,
    pub(super) stops: StopConditions,
    pub(super) pending: Option<PendingCalls>,
    pub(super) calls: CallDispatcher,
    /// The run's auto gate as of this agent's last commit.
    pub(super) auto_gate_open: bool,
    pub(super) report: Arc<Reporter>,
    /// What interrupts this agent's turn (see [`TurnInterrupt`]).
    pub(super) interrupt: TurnInterrupt,
    /// The mode its front end's person sets while the turn runs, if one may.
    pub(super) mode_request: Option<super::interrupt::ModeRequest>,
    /// Whether the run's ledger in the store holds a reservation of this agent's that no
    /// charge settled yet (a request that failed or was dropped): freed when the turn ends.
    pub(super) holds_reservation: bool,
    /// What a `SessionStart` hook (source `resume` or `clear`) added, for the next user
    /// message this agent commits ([`AgentRuntime::user_message`] takes it).
    pub(super) session_context: std::sync::Mutex<Vec<String>>,
}

impl AgentRuntime {
    /// Starts a new agent on `prompt`: commits its `started` record and first user message.
    pub async fn start(
        run: Arc<RunContext>,
        spec: AgentSpec,
        prompt: &str,
    ) -> RuntimeResult<AgentRuntime> {
        Self::start_with_own_prompt(run, spec, prompt, &OwnPrompt::default()).await
    }

    /// [`AgentRuntime::start`], the definition's prompt changed as `own` asks (the main
    /// agent of a run a Claude Code program started with `--system-prompt`).
    pub async fn start_with_own_prompt(
        run: Arc<RunContext>,
        spec: AgentSpec,
        prompt: &str,
        own: &OwnPrompt,
    ) -> RuntimeResult<AgentRuntime> {
        let definition = run
            .catalog
            .get(&spec.definition)
            .cloned()
            .ok_or_else(|| RuntimeError::UnknownDefinition(spec.definition.clone()))?;
        let plan_file = plan_file_for(&run, &spec.kind, &spec.agent_id, &definition);
        let equipment = Equipment::gather(
            &run,
            &spec.agent_id,
            &spec.kind,
            spec.mode,
            &definition,
            None,
        )
        .await?;
        let mut system = system_prompt(
            &own.apply(&definition.system_prompt),
            &run.instructions,
            equipment.workspace.root(),
        );
        if definition.read_only && matches!(spec.kind, AgentKind::Subagent { .. }) {
            system.push_str(super::prompt::RESEARCH_REPORT);
        }
        if equipment.tools.iter().any(|tool| *tool == ToolName::Skill) {
            system.push_str("\n\n");
            system.push_str(&run.tools.skills().prompt_section());
        }
        let endpoint = resolve_endpoint(&spec.kind, &definition, spec.endpoint.as_ref());
        let router = agent_router(&run, &spec.agent_id, endpoint.as_ref())?;
        let own = own_model_of(
            &spec.kind,
            &definition,
            endpoint.as_ref(),
            spec.inherited_model.as_deref(),
        );
        let model_limits = ask_model_limits(&router, own.as_deref()).await;
        let plan = PlanState::new(
            spec.mode,
            spec.pre_plan_mode,
            spec.approval_ceiling,
            definition.permission_mode,
            plan_file,
        );
        let mut agent = AgentRuntime::assemble(Assembly {
            run,
            id: spec.agent_id,
            kind: spec.kind,
            definition,
            system,
            equipment,
            inherited_model: spec.inherited_model,
            model_limits,
            plan,
            router,
            endpoint,
        });
        let opening = agent.firing().opening(prompt).await?;
        let mut blocks = vec![ContentBlock::text(prompt)];
        blocks.extend(opening.context.into_iter().map(ContentBlock::text));
        let first = agent.user_message(blocks);
        let started = Record::Started {
            definition: agent.definition.name.clone(),
            agent_kind: agent.kind.clone(),
            mode: agent.plan.mode,
            pre_plan_mode: agent.plan.pre_plan_mode,
            plan_file: agent.plan.file.as_ref().map(|p| p.display().to_string()),
            system: agent.requests.system.clone(),
            tools: agent.calls.tools.clone(),
            mcp_tools: agent.calls.mcp.records(),
            model_limits: agent.requests.model_limits.clone(),
            endpoint: agent.requests.endpoint.clone(),
        };
        let message = agent.message_record(first.clone(), None);
        let mut records = vec![started, message];
        // A `SessionStart`/`SubagentStart` hook's `continue: false`: the agent starts stopped.
        let stop = agent.calls.hook_stops.take();
        records.extend(stop.as_ref().map(|stop| Record::HookStopped {
            event: stop.event.name().to_owned(),
            reason: stop.reason.clone(),
        }));
        // The worktree's starting point, so a resume before any change restores it too.
        let hold = match agent.team_checkpoint().await? {
            Some(checkpoint) => {
                records.push(checkpoint.record());
                checkpoint.hold
            }
            None => None,
        };
        agent.commit(records, Vec::new(), None).await?;
        drop(hold);
        agent.transcript.messages.push(first);
        if let Some(stop) = stop {
            agent
                .transcript
                .end_by_hook(stop.event.name(), &stop.reason);
        }
        agent.run.events.emit(RunEvent::AgentStarted {
            agent: agent.id.clone(),
            definition: agent.definition.name.clone(),
            mode: agent.plan.mode.to_string(),
            plan_file: agent.plan.file.as_ref().map(|p| p.display().to_string()),
        });
        Ok(agent)
    }

    /// An agent from its parts, with an empty transcript (a new agent's first commit, or a
    /// resume's replay, fills it).
    pub(super) fn assemble(parts: Assembly) -> AgentRuntime {
        let report = Arc::new(Reporter::new(parts.run.events.clone(), &parts.id));
        let equipment = parts.equipment;
        let own_model = own_model_of(
            &parts.kind,
            &parts.definition,
            parts.endpoint.as_ref(),
            parts.inherited_model.as_deref(),
        );
        // The hooks' transcript file, written anew from the context the agent starts with.
        let transcript_file = parts.run.hooks.any().then(|| {
            let path = super::transcript_file::transcript_file_path(
                parts.run.workspace.root(),
                &parts.run.run_id,
                &parts.id,
            );
            Arc::new(super::transcript_file::TranscriptFile::new(
                path,
                &parts.run.run_id,
                &parts.id,
                equipment.workspace.root(),
            ))
        });
        let calls = CallDispatcher {
            run: parts.run.clone(),
            id: parts.id.clone(),
            kind: parts.kind.clone(),
            definition: parts.definition.clone(),
            tools: equipment.tools,
            mcp: Arc::new(equipment.mcp),
            asks: equipment.asks,
            workspace: equipment.workspace,
            report: report.clone(),
            commits: CommitLane::default(),
            hook_decisions: Default::default(),
            transcript_file,
            hook_stops: Default::default(),
        };
        AgentRuntime {
            run: parts.run,
            id: parts.id,
            kind: parts.kind,
            definition: parts.definition,
            models: parts.router,
            requests: Requests {
                endpoint: parts.endpoint,
                own_model,
                model_limits: parts.model_limits,
                system: parts.system,
                tool_definitions: equipment.tool_definitions.into(),
            },
            transcript: Transcript::default(),
            plan: parts.plan,
            stops: StopConditions::default(),
            pending: None,
            calls,
            auto_gate_open: true,
            report,
            interrupt: TurnInterrupt::default(),
            mode_request: None,
            holds_reservation: false,
            session_context: Default::default(),
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn mode(&self) -> PermissionMode {
        self.plan.mode
    }

    pub fn pre_plan_mode(&self) -> Option<PermissionMode> {
        self.plan.pre_plan_mode
    }

    pub fn plan_file(&self) -> Option<&std::path::Path> {
        self.plan.file.as_deref()
    }

    /// The model requests made so far (the durable turn index).
    pub fn turn(&self) -> u64 {
        self.transcript.turn
    }

    /// The context as the model sees it next.
    pub fn messages(&self) -> &[Message] {
        &self.transcript.messages
    }

    /// The model in force for the current mode.
    pub fn current_model(&self) -> String {
        self.model_for_mode().model
    }

    /// Runs until the model ends its turn, until a plan waits for a decision that no one in
    /// this process can make, or until the turn is interrupted ([`AgentRuntime::interrupter`]).
    pub async fn run(&mut self) -> RuntimeResult<AgentOutcome> {
        let interrupted = self.interrupt.arm(&self.id);
        // The turn's future is dropped when the interrupt wins, as Ctrl-C drops a run's: the
        // model request in flight is abandoned and a running Bash call's process group killed.
        let driven = tokio::select! {
            outcome = self.drive() => Some(outcome),
            () = interrupted.triggered() => None,
        };
        self.interrupt.disarm(&self.id);
        let outcome = match driven {
            Some(outcome) => outcome,
            None => self.end_interrupted_turn().await,
        };
        match &outcome {
            // A turn that failed after a lease (a decision it could not apply, a commit the
            // store refused) hands back what it did not acknowledge, as an interrupted one
            // does: the next turn of this epoch takes it. Not when the process is shutting
            // down: a resume's new epoch takes it then.
            Err(error) if !matches!(error, RuntimeError::CommitCut(_)) => {
                if let Err(back) = self.hand_back_leased().await {
                    tracing::warn!(agent = %self.id, error = %back, "mail the failed turn leased stays leased");
                }
            }
            // Any other end keeps what it leased and did not acknowledge, as before the lane.
            _ => drop(self.calls.commits.leased()),
        }
        self.release_reservation().await;
        outcome
    }

    /// Mail the turn leased and did not acknowledge (a decision it was receiving, the mail
    /// its next request was to carry) back to pending, once no commit is in flight: leased,
    /// it would be lost to every receiver until a new epoch.
    async fn hand_back_leased(&self) -> RuntimeResult<()> {
        self.calls.commits.settled().await;
        let leased = self.calls.commits.leased();
        if !leased.is_empty() {
            let back = self.run.store.hand_back(&self.run.run_id, leased).await?;
            if back > 0 {
                tracing::info!(agent = %self.id, back, "mail the ended turn leased is pending again");
            }
        }
        Ok(())
    }

    /// The loop of one turn.
    async fn drive(&mut self) -> RuntimeResult<AgentOutcome> {
        if let Some(result) = self.transcript.unfinished_answer.take() {
            self.end_or_keep_working(result).await?;
        }
        loop {
            if let Some(result) = &self.transcript.finished {
                return Ok(AgentOutcome::Finished {
                    result: result.clone(),
                });
            }
            if self.transcript.interrupted {
                return Ok(AgentOutcome::TurnInterrupted);
            }
            if let Some((event, reason)) = &self.transcript.hook_stopped {
                return Ok(AgentOutcome::StoppedByHook {
                    event: event.clone(),
                    reason: reason.clone(),
                });
            }
            if let Some(stop) = self.stops.stopped.take() {
                return Err(stop.into());
            }
            // A hook's stop noted where no commit followed it yet.
            if let Some(stop) = self.calls.hook_stops.take() {
                let pending = self.pending.take();
                return self.commit_hook_stop(stop, pending, Vec::new()).await;
            }
            self.take_requested_mode().await?;
            if let Some(pending) = self.pending.take()
                && let Some(stop) = self.resolve_calls(pending).await?
            {
                return Ok(stop);
            }
            // Before new mail joins the context: the newest exchange decides.
            if let Some(stop) =
                super::limits::stuck(&self.transcript.messages, self.run.limits.stuck_after)
            {
                return Err(stop.into());
            }
            self.take_team_mail().await?;
            self.refresh_mcp_tools().await?;
            let response = self.call_model().await?;
            let calls = response.tool_calls();
            if calls.is_empty() {
                if response.stop_reason == crate::model::StopReason::MaxTokens {
                    // Cut: `call_model` committed the request to continue it.
                    continue;
                }
                let result = self.stops.final_answer(&response.content);
                self.end_or_keep_working(result).await?;
                continue;
            }
            let cut = super::limits::cut_call_id(&response.content, &response.stop_reason);
            self.pending = Some(PendingCalls::of(calls, cut));
        }
    }

    /// After an interrupt dropped the turn mid-way, the store is the truth: the transcript is
    /// read back ([`AgentRuntime::reload`]), and what the turn had reached decides the end. An
    /// answer already committed ends the turn as usual; otherwise the calls without a result
    /// are answered and the turn ends interrupted, in one commit.
    async fn end_interrupted_turn(&mut self) -> RuntimeResult<AgentOutcome> {
        self.hand_back_leased().await?;
        self.reload().await?;
        if self.transcript.unfinished_answer.is_some() || self.transcript.turn_ended() {
            return self.drive().await;
        }
        if let Some(stop) = self.stops.stopped.take() {
            return Err(stop.into());
        }
        self.commit_interrupted_turn().await?;
        // The interrupt is committed: a resume finds the turn ended, waiting for a prompt.
        muster_mailbox::failpoint!("turn_interrupted:{}", self.id);
        self.report.state(AgentState::Idle);
        Ok(AgentOutcome::TurnInterrupted)
    }

    /// Makes `requests` the modes this agent's front end sets while its turn runs
    /// ([`super::interrupt::ModeRequest`]).
    pub fn take_mode_requests(&mut self, requests: super::interrupt::ModeRequest) {
        self.mode_request = Some(requests);
    }

    /// A mode the front end asked for while the turn ran: switched to before the next tool
    /// calls are decided, in one commit (into plan mode the agent returns to the mode it
    /// leaves, as for a new prompt's mode).
    async fn take_requested_mode(&mut self) -> RuntimeResult<()> {
        let Some(mode) = self
            .mode_request
            .as_ref()
            .and_then(super::interrupt::ModeRequest::take)
        else {
            return Ok(());
        };
        if mode == self.plan.mode {
            return Ok(());
        }
        let before = (self.plan.mode, self.plan.pre_plan_mode);
        self.plan.pre_plan_mode = (mode == PermissionMode::Plan).then_some(self.plan.mode);
        self.plan.mode = mode;
        let record = Record::Mode {
            mode,
            pre_plan_mode: self.plan.pre_plan_mode,
            reason: SET_BY_FRONT_END.to_owned(),
        };
        if let Err(error) = self.commit(vec![record], Vec::new(), None).await {
            (self.plan.mode, self.plan.pre_plan_mode) = before;
            return Err(error);
        }
        self.run.events.emit(self.mode_event(SET_BY_FRONT_END));
        Ok(())
    }

    /// What interrupts this agent's turns from elsewhere (an editor's cancel, the SDK's
    /// `interrupt()`); the run's shutdown (Ctrl-C) is a different thing, which ends the run.
    pub fn interrupter(&self) -> TurnInterrupt {
        self.interrupt.clone()
    }

    /// Makes `shared` what interrupts this agent's turns, with every other agent holding it
    /// (a team's lead and teammates): one interrupt then ends each running turn of them.
    pub fn share_turn_interrupt(&mut self, shared: &TurnInterrupt) {
        self.interrupt = shared.clone();
    }

    /// A new user turn after the last one ended (finished or interrupted): `prompt` is
    /// committed as the next user message, and [`AgentRuntime::run`] goes on from it. After an
    /// interrupted turn the message first tells the model so.
    pub async fn prompt(&mut self, prompt: &str) -> RuntimeResult<()> {
        self.prompt_with(prompt, Vec::new()).await
    }

    /// [`AgentRuntime::prompt`], with `with_it` (records of this or other agents: what a
    /// team's continuation changes) committed in the same transaction as the new turn.
    pub async fn prompt_with(
        &mut self,
        prompt: &str,
        with_it: Vec<NewRecord>,
    ) -> RuntimeResult<()> {
        self.prompt_in_mode(prompt, with_it, None).await
    }

    /// [`AgentRuntime::prompt_with`], the agent switched to `mode` first (a front end's
    /// `set_permission_mode`, already checked against the run's ceilings): the switch is
    /// committed with the new turn, whose mode reminder names it.
    pub async fn prompt_in_mode(
        &mut self,
        prompt: &str,
        with_it: Vec<NewRecord>,
        mode: Option<PermissionMode>,
    ) -> RuntimeResult<()> {
        if !self.transcript.turn_ended() {
            return Err(RuntimeError::TurnNotEnded {
                agent: self.id.clone(),
            });
        }
        let before = (self.plan.mode, self.plan.pre_plan_mode);
        let mut records = Vec::new();
        if let Some(mode) = mode.filter(|mode| *mode != self.plan.mode) {
            // Into plan mode the agent returns to the mode it leaves; out of it, to none.
            self.plan.pre_plan_mode = (mode == PermissionMode::Plan).then_some(self.plan.mode);
            self.plan.mode = mode;
            records.push(Record::Mode {
                mode,
                pre_plan_mode: self.plan.pre_plan_mode,
                reason: SET_BY_FRONT_END.to_owned(),
            });
        }
        let switched = !records.is_empty();
        let prompted = self.prompt_records(prompt, with_it, records).await;
        match &prompted {
            Ok(()) if switched => self.run.events.emit(self.mode_event(SET_BY_FRONT_END)),
            Ok(()) => {}
            Err(_) => (self.plan.mode, self.plan.pre_plan_mode) = before,
        }
        prompted
    }

    /// Commits the new user turn `prompt`, after this agent's `records` and with `with_it`.
    async fn prompt_records(
        &mut self,
        prompt: &str,
        with_it: Vec<NewRecord>,
        mut records: Vec<Record>,
    ) -> RuntimeResult<()> {
        let context = match self.kind {
            AgentKind::Main => self.firing().user_prompt(prompt).await?,
            _ => Vec::new(),
        };
        let mut blocks = Vec::new();
        if self.transcript.interrupted {
            blocks.push(ContentBlock::text(super::transcript::TURN_INTERRUPTED_NOTE));
        }
        blocks.push(ContentBlock::text(prompt));
        blocks.extend(context.into_iter().map(ContentBlock::text));
        let message = self.user_message(blocks);
        records.push(self.message_record(message.clone(), None));
        let with_them = CommitTurn {
            records: with_it,
            ..CommitTurn::default()
        };
        self.commit_with(records, with_them).await?;
        self.transcript.push(message, None);
        Ok(())
    }

    /// Ends the turn with `result`, unless a Stop hook blocks: then its reason is committed as
    /// the user message it adds, and the agent keeps working (a crash before that commit runs
    /// the hook again on resume: the one event in flight).
    async fn end_or_keep_working(&mut self, result: String) -> RuntimeResult<()> {
        let active = super::hook_points::stop_hook_active(&self.transcript.messages);
        let firing = self.firing();
        let mut keep_working = firing.stop(active, &result).await;
        let stopped = || self.calls.hook_stops.noted();
        // A teammate kept working by TeammateIdle once goes idle at its next end: a hook that
        // always blocks cannot hold it forever.
        if keep_working.is_none() && !active && !stopped() {
            keep_working = firing.teammate_idle(&result).await;
        }
        // The tasks this end would complete, under the same once-per-end bound.
        if keep_working.is_none() && !active && !stopped() {
            keep_working = firing.turn_end_tasks().await?;
        }
        // `continue: false` wins over a block: the turn ends, the agent's tasks stay as they
        // are, and the person is told why (a crash before this commit runs these hooks again).
        if let Some(stop) = self.calls.hook_stops.take() {
            self.commit_hook_stop(stop, None, Vec::new()).await?;
            return Ok(());
        }
        if let Some(reason) = keep_working {
            let text = format!("{} {reason}", super::hook_points::STOP_HOOK_FEEDBACK);
            let message = self.user_message(vec![ContentBlock::text(text)]);
            let record = self.message_record(message.clone(), None);
            self.commit(vec![record], Vec::new(), None).await?;
            self.transcript.push(message, None);
            return Ok(());
        }
        self.finish_turn(result.clone()).await?;
        self.transcript.end(Some(result));
        Ok(())
    }

    /// This agent as the hooks it fires see it.
    /// Fires `SessionEnd` (`reason`: Claude Code's `other`) as this agent's session ends: a
    /// single run's agent when the run ends or stops, a team's lead at the team's end, a
    /// teammate when it shuts down. It informs only, so it is not committed: after kill -9
    /// it is not fired for the killed process (the resume's own end fires it).
    pub async fn end_session(&self, reason: &str) {
        self.firing().session_end(reason).await;
    }

    /// Brings the hooks' transcript file up to the context (when one is written).
    pub(super) fn sync_transcript_file(&self) {
        if let Some(file) = &self.calls.transcript_file {
            file.sync(&self.transcript.messages, self.transcript.restarts);
        }
    }

    pub(super) fn firing(&self) -> super::hook_points::Firing<'_> {
        self.sync_transcript_file();
        super::hook_points::Firing {
            run: &self.run,
            id: &self.id,
            kind: &self.kind,
            definition: &self.definition,
            workspace: self.calls.workspace.root(),
            mode: self.plan.mode,
            transcript_path: self
                .calls
                .transcript_file
                .as_deref()
                .map(|file| file.path.as_path()),
            stops: &self.calls.hook_stops,
        }
    }

    /// Commits the `finished` record; a teammate's end-of-turn transition (its tasks, its
    /// verification report, its idle notification) is part of the same commit, so a crash
    /// leaves either the whole end of turn or none of it.
    async fn finish_turn(&mut self, result: String) -> RuntimeResult<()> {
        let team = match self.kind {
            AgentKind::Teammate { .. } => self.run.team.get(),
            _ => None,
        };
        let end = match &team {
            Some(team) => team
                .end_of_turn(&self.id, &result, self.transcript.turn)
                .await
                .map_err(RuntimeError::Team)?,
            None => super::team::TurnEnd::default(),
        };
        let with_it = CommitTurn {
            sends: end.sends.clone(),
            task_updates: end.task_updates.clone(),
            ..CommitTurn::default()
        };
        let mut records = Vec::new();
        records.extend(
            end.checkpoint
                .as_ref()
                .map(super::team::TeamCheckpoint::record),
        );
        // Plan grants end with the plan's verification report, in the same commit.
        let grants_end = self.plan.grants_ended_by(&end.sends);
        let grants_ended = grants_end.is_some();
        records.extend(grants_end);
        records.push(Record::Finished { result });
        let outcome = self.commit_with(records, with_it).await?;
        self.report.state(AgentState::Idle);
        if grants_ended {
            self.plan.grants = None;
        }
        if let Some(team) = team {
            muster_mailbox::failpoint!("turn_end");
            team.turn_ended(&self.id, &end, &outcome);
        }
        Ok(())
    }

    /// Puts mail the agent received (leased) into its context as `<mail>` tags: the user turn
    /// is recorded and the mail acked in one commit. For a team's wait-for-mail step.
    pub async fn deliver_mail(&mut self, mail: &[Mail]) -> RuntimeResult<()> {
        if mail.is_empty() {
            return Ok(());
        }
        let mut blocks = Vec::new();
        // Mail after an interrupted turn (a teammate's) tells the model so, as a prompt does.
        if self.transcript.interrupted {
            blocks.push(ContentBlock::text(super::transcript::TURN_INTERRUPTED_NOTE));
        }
        for message in mail {
            let text = match message.body.text() {
                Some(text) => text.to_owned(),
                None => message.stored_body().to_string(),
            };
            blocks.push(ContentBlock::text(format!(
                "<mail type=\"{}\" from=\"{}\" id=\"{}\">{}</mail>",
                escape_mail(message.kind.as_str()),
                escape_mail(&message.sender),
                message.key,
                escape_mail(&text)
            )));
        }
        let message = self.user_message(blocks);
        let record = self.message_record(message.clone(), None);
        let acks = mail.iter().map(|m| m.key.clone()).collect();
        self.commit(vec![record], acks, None).await?;
        self.transcript.push(message, None);
        Ok(())
    }

    /// Waits (pushed, not polled) for mail and delivers it.
    pub async fn wait_for_mail(&mut self, max: usize) -> RuntimeResult<usize> {
        let mail = self
            .run
            .store
            .receive_batch(&self.run.run_id, &self.id, self.run.epoch, max)
            .await?;
        self.deliver_mail(&mail).await?;
        Ok(mail.len())
    }

    /// The model in force: the mode's, or the one the agent's definition names (its own, or
    /// its parent's with `inherit`), with that model's output limit.
    pub(super) fn model_for_mode(&self) -> ModeModel {
        let catalogue = &self.run.compaction.models;
        self.requests
            .model_for(&self.models, catalogue, self.plan.mode)
    }

    /// One model request: refused, sending nothing, once a budget has reached its limit; the
    /// response is committed (with its usage and cost, for the ledger on resume) and reported
    /// before a budget it crosses stops the agent.
    async fn call_model(&mut self) -> RuntimeResult<ModelResponse> {
        self.report.state(AgentState::Thinking);
        self.compact_if_needed().await?;
        let model = self.model_for_mode();
        let (turn, request, response, latency) = self.send_fitting(&model).await?;
        self.transcript.turn = turn;
        let message = Message::assistant(response.content.clone());
        let record = Record::Message {
            message: message.clone(),
            turn: Some(turn),
            model: Some(response.model.clone()),
            mode: self.plan.mode,
            stop_reason: Some(response.stop_reason.clone()),
            usage: Some(response.usage),
            cost_usd: response.cost_usd,
        };
        // A final answer cut by the output limit: continued (the request to go on commits
        // with it), or, once the continuations are used up, the end of the agent.
        let cut =
            self.stops
                .after_response(&response.content, &response.stop_reason, &self.run.limits);
        let continuation = cut
            .continues()
            .then(|| self.user_message(vec![ContentBlock::text(super::limits::CONTINUE_PROMPT)]));
        let mut records = vec![record];
        records.extend(
            continuation
                .iter()
                .map(|message| self.message_record(message.clone(), None)),
        );
        let committed = self.commit_charged(records, &response).await?;
        // Committed (and charged), not yet reported (a trace must still show it once).
        muster_mailbox::failpoint!("model_turn");
        self.transcript.push(message, Some(response.usage));
        if let Some(continuation) = continuation {
            self.transcript.push(continuation, None);
        }
        let (exhausted, continuations) = (cut.exhausted(), cut.continuations);
        self.stops.accept(cut);
        self.run.events.emit(RunEvent::ModelTurn {
            agent: self.id.clone(),
            turn,
            provider: Some(model.provider.name().to_owned()),
            model: model.model,
            mode: self.plan.mode.to_string(),
            stop_reason: response.stop_reason.as_str().to_owned(),
            text: response.text(),
            latency_ms: latency.as_secs_f64() * 1000.0,
            usage: response.usage.into(),
            cost_usd: response.cost_usd,
        });
        self.run.budget.record(&self.id, &response)?;
        self.check_stored_after(committed.ledger.as_ref(), &response)?;
        if exhausted {
            return Err(super::limits::AgentStop::OutputLimit {
                max_tokens: request.max_tokens,
                continuations,
            }
            .into());
        }
        Ok(response)
    }

    /// Sends the next request on the current context. A server that refuses the prompt as
    /// longer than the model's context gets one more try after the context is compacted
    /// (whatever the trigger says); refused again, or with nothing to compact, the agent ends
    /// with [`RuntimeError::PromptTooLong`].
    async fn send_fitting(
        &mut self,
        model: &ModeModel,
    ) -> RuntimeResult<(u64, ModelRequest, ModelResponse, std::time::Duration)> {
        let mut compacted = false;
        loop {
            self.run.budget.check_before_request(&self.id)?;
            let turn = self.transcript.turn + 1;
            let request = self.requests.request(model, &self.transcript.messages);
            self.reserve_before_request(model, &request).await?;
            let context = RequestContext::new(&self.run.run_id, &self.id, turn);
            let sent = std::time::Instant::now();
            let error = match self.stream_response(model, &context, &request).await {
                Ok(response) => return Ok((turn, request, response, sent.elapsed())),
                Err(RuntimeError::Model(error)) if error.kind.is_prompt_too_long() => error,
                Err(other) => return Err(other),
            };
            let too_long = |after| RuntimeError::PromptTooLong {
                model: model.model.clone(),
                after,
                detail: error.to_string(),
            };
            if compacted {
                return Err(too_long("even after compacting the context"));
            }
            tracing::info!(
                agent = %self.id,
                model = %model.model,
                "the server refused the prompt as too long; compacting the context and retrying"
            );
            match self.compact(model).await {
                Ok(true) => compacted = true,
                Ok(false) => return Err(too_long("and there was nothing to compact")),
                Err(RuntimeError::Model(refused)) if refused.kind.is_prompt_too_long() => {
                    return Err(too_long(
                        "and the compaction request was refused as too long as well",
                    ));
                }
                Err(other) => return Err(other),
            }
        }
    }

    /// Sends `request` and drives its stream to the complete response, reporting each piece
    /// as a (not durable) [`RunEvent::ModelDelta`] on the way.
    async fn stream_response(
        &self,
        model: &ModeModel,
        context: &RequestContext,
        request: &ModelRequest,
    ) -> RuntimeResult<ModelResponse> {
        let mut stream = model.provider.stream(context, request);
        let mut attempt = 1;
        let mut response = None;
        while let Some(event) = stream.next_event().await {
            let (delta, text) = match event? {
                StreamEvent::Completed(complete) => {
                    response = Some(complete);
                    continue;
                }
                StreamEvent::AttemptStarted { attempt: n } => {
                    attempt = n;
                    continue;
                }
                StreamEvent::TextDelta { text, .. } => (DeltaKind::Text, text),
                StreamEvent::ThinkingDelta { thinking, .. } => (DeltaKind::Thinking, thinking),
                StreamEvent::ToolInputDelta { partial_json, .. } => {
                    (DeltaKind::ToolInput, partial_json)
                }
                StreamEvent::Retrying { reason, .. } => (DeltaKind::Discard, reason),
                StreamEvent::ToolCall { .. } | StreamEvent::Usage(_) => continue,
            };
            self.run.events.emit(RunEvent::ModelDelta {
                agent: self.id.clone(),
                turn: context.turn,
                attempt,
                delta,
                text,
            });
        }
        match response {
            Some(response) => Ok(response),
            // The stream ends with its response or an error; `response()` names the gap.
            None => Ok(stream.response().await?),
        }
    }

    /// Before a model request: when the context nears the model's window (see
    /// [`crate::compaction`]), older turns are summarised by the model (a request of its own,
    /// with the next turn index, through the budget) and the context is rebuilt around the
    /// summary, the plan re-read from disk and the mailbox and task state read from the store.
    /// The `compacted` record holds the new context, so a resume continues from it.
    async fn compact_if_needed(&mut self) -> RuntimeResult<()> {
        let Some((usage, length)) = self.transcript.last_prompt else {
            return Ok(());
        };
        let model = self.model_for_mode();
        let policy = &self.run.compaction;
        let catalogue = &self.run.compaction.models;
        let Some(info) = self
            .requests
            .model_info(catalogue, &model.model, model.max_tokens)
        else {
            return Ok(());
        };
        let appended = self
            .transcript
            .messages
            .get(length.saturating_sub(1)..)
            .unwrap_or(&[]);
        if !needs_compaction(
            &usage,
            estimate_messages_tokens(appended),
            &info,
            &policy.config,
        ) {
            return Ok(());
        }
        self.compact(&model).await?;
        Ok(())
    }

    /// Compacts the context now; `false` when there is nothing to summarise (the whole
    /// context must be kept verbatim).
    async fn compact(&mut self, model: &ModeModel) -> RuntimeResult<bool> {
        let model = model.clone();
        let config = self.run.compaction.config;
        let cut = plan_cut(&self.transcript.messages);
        let turn = self.transcript.turn + 1;
        let context = RequestContext::new(&self.run.run_id, &self.id, turn);
        let Ok(summary_request) = SummaryRequest::build(
            context,
            &self.requests.request(&model, &self.transcript.messages),
            &cut,
            &config,
        ) else {
            // Nothing to summarise: the whole context must be kept verbatim.
            return Ok(false);
        };
        self.firing().compaction(HookEvent::PreCompact, None).await;
        self.run.budget.check_before_request(&self.id)?;
        self.reserve_before_request(&model, &summary_request.request)
            .await?;
        let response = model
            .provider
            .stream(&summary_request.context, &summary_request.request)
            .response()
            .await?;
        self.transcript.turn = turn;
        let summary = summary_text(&response).map_err(|error| RuntimeError::ModelStopped {
            reason: response.stop_reason.as_str().to_owned(),
            detail: error.to_string(),
        })?;
        let plan = match &self.plan.file {
            Some(path) => Some(super::plan_files::read_plan(path)?)
                .filter(|content| !content.trim().is_empty())
                .map(|content| PlanReference {
                    path: path.display().to_string(),
                    content,
                }),
            None => None,
        };
        // Read after the summary came back, so it is as fresh as the plan.
        let team = matches!(self.kind, AgentKind::Teammate { .. }) || self.run.team.get().is_some();
        let state =
            read_coordination_state(self.run.store.as_ref(), &self.run.run_id, &self.id, team)
                .await?;
        let mut messages = rebuild(CompactionInputs {
            messages: &self.transcript.messages,
            cut,
            summary: &summary,
            plan,
            coordination_state: render_coordination_state(&state, COORDINATION_STATE_TOKENS),
            recent_messages_tokens: config.recent_messages_tokens,
        });
        // `SessionStart` (source `compact`): what it adds joins the compacted context's first
        // message, committed with the compaction (a crash before that runs it again).
        let context = self
            .firing()
            .session_start(super::hook_points::SessionSource::Compact)
            .await;
        if let Some(first) = messages.first_mut() {
            first
                .content
                .extend(context.into_iter().map(ContentBlock::text));
        }
        let record = Record::Compacted {
            turn,
            model: response.model.clone(),
            usage: response.usage,
            cost_usd: response.cost_usd,
            summary: summary.clone(),
            messages: messages.clone(),
        };
        let committed = self.commit_charged(vec![record], &response).await?;
        self.transcript.restart(messages);
        self.firing()
            .compaction(HookEvent::PostCompact, Some(&summary))
            .await;
        self.run.budget.record(&self.id, &response)?;
        self.check_stored_after(committed.ledger.as_ref(), &response)?;
        Ok(true)
    }

    /// This agent's worktree checkpoint from its team (lead and teammates under worktree
    /// isolation; `None` otherwise).
    pub(super) async fn team_checkpoint(
        &self,
    ) -> RuntimeResult<Option<super::team::TeamCheckpoint>> {
        if matches!(self.kind, AgentKind::Subagent { .. }) {
            return Ok(None);
        }
        let Some(team) = self.run.team.get() else {
            return Ok(None);
        };
        team.checkpoint(&self.id).await.map_err(RuntimeError::Team)
    }

    pub(super) async fn reset_context(&mut self, first: String) -> RuntimeResult<()> {
        self.session_started(super::hook_points::SessionSource::Clear)
            .await;
        let message = self.user_message(vec![ContentBlock::text(first)]);
        let records = vec![
            Record::ContextReset {
                reason: "the plan was approved with clear_context".into(),
            },
            self.message_record(message.clone(), None),
        ];
        self.commit(records, Vec::new(), None).await?;
        self.transcript.restart(vec![message]);
        Ok(())
    }

    /// A user message with the mode reminder appended.
    /// A `SessionStart` hook's context waiting ([`AgentRuntime::session_context`]) follows
    /// `blocks`: every user message built is committed, so it reaches the context once (a
    /// crash before that commit fires the hook again on resume).
    pub(super) fn user_message(&self, mut blocks: Vec<ContentBlock>) -> Message {
        let reminder = mode_reminder(
            self.plan.mode,
            self.plan.file.as_deref(),
            matches!(self.kind, AgentKind::Subagent { .. }),
        );
        let waiting = std::mem::take(
            &mut *self
                .session_context
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        blocks.extend(waiting.into_iter().map(ContentBlock::text));
        super::transcript::user_message(blocks, reminder)
    }

    /// Fires `SessionStart` with `source` and keeps what its hooks add for the next user
    /// message.
    pub(super) async fn session_started(&self, source: super::hook_points::SessionSource) {
        let context = self.firing().session_start(source).await;
        self.session_context
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(context);
    }

    pub(super) fn message_record(&self, message: Message, turn: Option<u64>) -> Record {
        Record::Message {
            message,
            turn,
            model: None,
            mode: self.plan.mode,
            stop_reason: None,
            usage: None,
            cost_usd: None,
        }
    }

    /// The id of this agent's next request of `family`, numbered by the store's counter under
    /// `key` (the same key gives the same number again, so a resume asks once).
    pub(super) async fn new_request_id(
        &self,
        family: muster_protocol::RequestFamily,
        key: &str,
    ) -> RuntimeResult<String> {
        let counter = family.counter_name(&self.id);
        let run_id = &self.run.run_id;
        let number = self.run.store.counter_for(run_id, &counter, key).await?;
        Ok(muster_protocol::RequestId::new(family, &self.id, number).to_string())
    }

    /// Commits records (and acks) in one transaction.
    pub(super) async fn commit(
        &mut self,
        records: Vec<Record>,
        acks: Vec<String>,
        auto_gate: Option<AutoGateUpdate>,
    ) -> RuntimeResult<()> {
        let with_them = CommitTurn {
            acks,
            auto_gate,
            ..CommitTurn::default()
        };
        self.commit_with(records, with_them).await?;
        Ok(())
    }

    /// Commits the records of a model response with its spend charged to the run's ledger in
    /// the store, in one transaction (see [`crate::budget`]).
    async fn commit_charged(
        &mut self,
        records: Vec<Record>,
        response: &ModelResponse,
    ) -> RuntimeResult<muster_mailbox::CommitTurnOutcome> {
        let with_them = CommitTurn {
            charge: Some(Spend::charge_of(&response.usage, response.cost_usd)),
            ..CommitTurn::default()
        };
        let committed = self.commit_with(records, with_them).await?;
        // The charge settled the reservation in the same commit.
        self.holds_reservation = false;
        Ok(committed)
    }

    /// Before a model request: its worst case ([`request_estimate`]) is reserved from the
    /// run's ledger in the store, which every process of the run shares (see
    /// [`crate::budget`]). Granted, it is sent; told to wait, the agent sleeps until a
    /// reservation is settled or freed (or the deadline passes) and asks again; once a
    /// run-wide limit is reached it stops with the run's budget named. A store that cannot be
    /// written stops it too (the budget fails closed).
    async fn reserve_before_request(
        &mut self,
        model: &ModeModel,
        request: &ModelRequest,
    ) -> RuntimeResult<()> {
        let catalogue = &self.run.compaction.models;
        let info = self
            .requests
            .model_info(catalogue, &model.model, request.max_tokens);
        let prompt_tokens = serde_json::to_string(request)
            .map(|text| crate::compaction::estimate_tokens(&text))
            .unwrap_or(u64::MAX);
        let estimate = request_estimate(prompt_tokens, request.max_tokens, info.as_ref());
        let store = self.run.store.clone();
        let settled = store.woken(&self.run.run_id, LEDGER_WAKE);
        let mut waited = false;
        loop {
            // Registered before the look, so a settlement between the two still wakes it.
            let woken = settled.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let reserved = store
                .reserve_budget(&self.run.run_id, &self.id, self.run.epoch, estimate)
                .await?;
            match reserved.decision {
                LedgerDecision::Grant => {
                    self.holds_reservation = reserved
                        .ledger
                        .as_ref()
                        .is_some_and(|ledger| !ledger.limits.is_unlimited());
                    if waited {
                        tracing::info!(agent = %self.id, "the run's ledger has room again");
                    }
                    return Ok(());
                }
                LedgerDecision::Spent => {
                    self.holds_reservation = false;
                    let ledger = reserved.ledger.unwrap_or_else(|| RunLedger {
                        run_id: self.run.run_id.clone(),
                        limits: Default::default(),
                        spent: Default::default(),
                    });
                    return Err(spent_on(&ledger).into());
                }
                LedgerDecision::Wait => {
                    self.holds_reservation = false;
                    if !waited {
                        tracing::info!(
                            agent = %self.id,
                            in_flight = reserved.in_flight_count,
                            "waiting for the requests in flight to settle before the run's \
                             ledger has room for this one"
                        );
                        self.report.budget_wait(&reserved, &estimate);
                    }
                    waited = true;
                }
            }
            let deadline = self.run.budget.time_left();
            tokio::select! {
                () = &mut woken => {}
                () = sleep_or_forever(deadline) => {
                    self.run.budget.check_deadline()?;
                }
                // A safety net, not the way it wakes: a wake-up lost with a connection to the
                // store must not leave a budget-bound run waiting for ever.
                () = tokio::time::sleep(LEDGER_RELOOK) => {}
            }
        }
    }

    /// Frees this agent's reservation if no charge settled it (its request failed, or the turn
    /// was dropped mid-request), so the run's other agents do not wait on it. A store that
    /// cannot be written is logged: a new epoch frees it too.
    async fn release_reservation(&mut self) {
        if !std::mem::take(&mut self.holds_reservation) {
            return;
        }
        if let Err(error) = self
            .run
            .store
            .release_reservation(&self.run.run_id, &self.id)
            .await
        {
            tracing::warn!(agent = %self.id, %error, "could not free a budget reservation");
        }
    }

    /// After a response's charge: the agent stops at the response that took the run's
    /// ledger over a limit, and at a response without a cost when the run has a cost limit
    /// (whatever this process's own settings say).
    fn check_stored_after(
        &self,
        ledger: Option<&muster_mailbox::RunLedger>,
        response: &ModelResponse,
    ) -> RuntimeResult<()> {
        let Some(ledger) = ledger else {
            return Ok(());
        };
        if ledger.limits.cost_nanos.is_some() && !response.cost_usd.is_some_and(f64::is_finite) {
            return Err(UnpricedModel {
                model: response.model.clone(),
            }
            .into());
        }
        check_stored(ledger, StoredCheck::AfterResponse)?;
        Ok(())
    }

    /// Commits this agent's `records` with whatever else `with_them` carries (acks, mail,
    /// task changes), in one transaction.
    async fn commit_with(
        &mut self,
        records: Vec<Record>,
        with_them: CommitTurn,
    ) -> RuntimeResult<muster_mailbox::CommitTurnOutcome> {
        let records = records
            .iter()
            .map(|record| record.to_new(&self.id))
            .collect::<RuntimeResult<Vec<NewRecord>>>()?;
        let store = self.run.store.clone();
        let mut records = records;
        records.extend(with_them.records.iter().cloned());
        let turn = CommitTurn {
            run_id: self.run.run_id.clone(),
            agent: self.id.clone(),
            records,
            ..with_them
        };
        // Through the lane: a commit an interrupt cuts off still ends before the transcript
        // is read back.
        let outcome = self
            .calls
            .commits
            .run(async move { store.commit_turn(turn).await })
            .await??;
        self.auto_gate_open = outcome.auto_gate.open;
        Ok(outcome)
    }
}

/// The parts an agent is assembled from.
pub(super) struct Assembly {
    pub run: Arc<RunContext>,
    pub id: String,
    pub kind: AgentKind,
    pub definition: AgentDefinition,
    pub system: String,
    pub equipment: Equipment,
    pub inherited_model: Option<String>,
    pub model_limits: BTreeMap<String, ServerLimits>,
    pub plan: PlanState,
    /// Its models per mode (the run's, or its own endpoint's).
    pub router: ModelRouter,
    pub endpoint: Option<AgentEndpoint>,
}

/// What an agent works with: its workspace, where its asks go, and its tools (its MCP
/// servers' included).
pub(super) struct Equipment {
    pub workspace: Workspace,
    pub asks: AskSettings,
    /// The tools offered, MCP tools included.
    pub tools: Vec<String>,
    pub tool_definitions: Vec<ToolDefinition>,
    pub mcp: crate::mcp::McpSession,
}

impl Equipment {
    /// The equipment of agent `id`: its MCP servers started anew, or (`stored`: its `started`
    /// record's list, on resume) restarted offering exactly that list.
    pub(super) async fn gather(
        run: &RunContext,
        id: &str,
        kind: &AgentKind,
        mode: muster_config::PermissionMode,
        definition: &AgentDefinition,
        stored: Option<&[crate::mcp::McpToolRecord]>,
    ) -> RuntimeResult<Equipment> {
        let workspace = agent_workspace(run, id, kind).await?;
        let owner = super::mcp::ServerOwner {
            agent: id,
            kind,
            mode,
            definition,
        };
        let mcp = match stored {
            None => super::mcp::start_session(run, &owner, &workspace).await,
            Some(stored) => super::mcp::resume_session(run, &owner, stored, &workspace).await,
        };
        let mut tools = offered_tools(definition, kind);
        // `Skill` only when there is a skill to call, so a project without skills sends the
        // model what it always did.
        if run.tools.skills().offered().next().is_none() {
            tools.retain(|tool| *tool != ToolName::Skill);
        }
        let mut tool_definitions = tool_definitions(run, &tools);
        tools.extend(mcp.names());
        tool_definitions.extend(mcp.definitions());
        let asks = AskSettings::of(run, id, kind).await?;
        Ok(Equipment {
            workspace,
            asks,
            tools,
            tool_definitions,
            mcp,
        })
    }
}

/// Asks the servers of every model the agent may use (each mode's, and `own`: the one its
/// definition names or inherits) what they report about its limits; keeps the models they
/// reported something for. Each provider caches its answers for the run.
async fn ask_model_limits(
    router: &ModelRouter,
    own: Option<&str>,
) -> BTreeMap<String, ServerLimits> {
    let mut limits: BTreeMap<String, ServerLimits> = BTreeMap::new();
    for routed in [&router.plan, &router.act] {
        for model in std::iter::once(routed.model.as_str()).chain(own) {
            let reported = routed.provider.server_limits(model).await;
            if reported.is_empty() {
                continue;
            }
            let merged = match limits.get(model) {
                Some(known) => known.merge(reported),
                None => reported,
            };
            limits.insert(model.to_owned(), merged);
        }
    }
    limits
}

/// An agent's own endpoint: a subagent's definition's, else its parent's (`given`); any
/// other agent's definition's with its team entry's (`given`) fields over it. `None`: the
/// run's models.
pub(super) fn resolve_endpoint(
    kind: &AgentKind,
    definition: &AgentDefinition,
    given: Option<&AgentEndpoint>,
) -> Option<AgentEndpoint> {
    let resolved = match kind {
        AgentKind::Subagent { .. } if !definition.endpoint.is_empty() => {
            definition.endpoint.clone()
        }
        AgentKind::Subagent { .. } => given.cloned().unwrap_or_default(),
        AgentKind::Main | AgentKind::Teammate { .. } => match given {
            Some(given) => definition.endpoint.overlaid_by(given),
            None => definition.endpoint.clone(),
        },
    };
    (!resolved.is_empty()).then_some(resolved)
}

/// The model an agent's definition names (or inherits), unless its team entry names one:
/// the entry, being the more specific, wins (a subagent's endpoint is its parent's, whose
/// model its definition may override).
fn own_model_of(
    kind: &AgentKind,
    definition: &AgentDefinition,
    endpoint: Option<&AgentEndpoint>,
    inherited: Option<&str>,
) -> Option<String> {
    let entry_names_model =
        !matches!(kind, AgentKind::Subagent { .. }) && endpoint.is_some_and(|e| e.model.is_some());
    if entry_names_model {
        return None;
    }
    own_model(&definition.model, inherited)
}

/// The models of agent `id` for `endpoint` (the run's when `None`).
pub(super) fn agent_router(
    run: &RunContext,
    id: &str,
    endpoint: Option<&AgentEndpoint>,
) -> RuntimeResult<ModelRouter> {
    run.agent_models
        .router(&run.models, endpoint)
        .map_err(|detail| RuntimeError::AgentModel {
            agent: id.to_owned(),
            detail,
        })
}

/// Where an agent of `run` works: what its team says (a worktree), else the run's workspace.
/// A subagent works where its parent does.
async fn agent_workspace(run: &RunContext, id: &str, kind: &AgentKind) -> RuntimeResult<Workspace> {
    let owner = match kind {
        AgentKind::Subagent { parent, .. } => parent.as_str(),
        AgentKind::Main | AgentKind::Teammate { .. } => id,
    };
    let Some(team) = run.team.get() else {
        return Ok(run.workspace.clone());
    };
    match team
        .workspace_for(owner)
        .await
        .map_err(RuntimeError::Team)?
    {
        // The additional directories are shared by every worktree.
        Some(path) => Workspace::new(&path)
            .map(|workspace| workspace.with_additional(run.workspace.additional()))
            .map_err(|e| RuntimeError::Workspace(e.to_string())),
        None => Ok(run.workspace.clone()),
    }
}

fn escape_mail(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The tools an agent is offered: its definition's, less what subagents never get.
fn offered_tools(definition: &AgentDefinition, kind: &AgentKind) -> Vec<String> {
    definition
        .effective_tools()
        .into_iter()
        .filter(|tool| {
            !(matches!(kind, AgentKind::Subagent { .. })
                && muster_protocol::ToolName::parse(tool)
                    .is_some_and(muster_protocol::ToolName::is_forbidden_to_subagents))
        })
        .filter(|tool| !(definition.read_only && *tool == ToolName::ExitPlanMode))
        .map(str::to_owned)
        .collect()
}

/// The tool definitions for model requests, in the registry's stable order.
fn tool_definitions(run: &RunContext, tools: &[String]) -> Vec<ToolDefinition> {
    let offered: BTreeSet<&str> = tools.iter().map(String::as_str).collect();
    run.tools
        .definitions(|name| offered.contains(name))
        .into_iter()
        .map(|definition| ToolDefinition {
            name: definition.name,
            description: definition.description,
            input_schema: definition.input_schema,
        })
        .collect()
}

/// The plan file of an agent: the main agent's, `-agent-{id}` for others, none for subagents
/// and read-only agents.
pub(super) fn plan_file_for(
    run: &RunContext,
    kind: &AgentKind,
    agent_id: &str,
    definition: &AgentDefinition,
) -> Option<PathBuf> {
    if definition.read_only {
        return None;
    }
    match kind {
        AgentKind::Main => Some(run.plans.main_file()),
        AgentKind::Teammate { .. } => Some(run.plans.agent_file(agent_id)),
        AgentKind::Subagent { .. } => None,
    }
}
