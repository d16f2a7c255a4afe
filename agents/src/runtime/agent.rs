//! One agent's loop: send the context to the model, run each tool call through the gate,
//! append the results, repeat until the model ends its turn. Every step is committed before it
//! is reported.

use muster_protocol::ToolName;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use muster_config::settings::ModelInfo;
use muster_config::{AgentDefinition, ModelChoice, PermissionMode};
use muster_mailbox::{AutoGateUpdate, CommitTurn, Message as Mail, NewRecord};

use crate::compaction::{
    COORDINATION_STATE_TOKENS, CompactionInputs, PlanReference, SummaryRequest,
    estimate_messages_tokens, needs_compaction, plan_cut, read_coordination_state, rebuild,
    render_coordination_state, summary_text,
};
use crate::model::{
    ContentBlock, Message, ModelRequest, ModelResponse, RequestContext, Role, ServerLimits,
    StreamEvent, ToolCall, ToolDefinition, ToolResultContent, Usage,
};
use crate::tools::{HandledBy, ToolOutput, Workspace};

use super::context::{ModeModel, RunContext};
use super::error::{RuntimeError, RuntimeResult};
use super::events::RunEvent;
use super::gate::GateDecision;
use super::prompt::{mode_reminder, system_prompt};
use super::records::{AgentKind, Record};
use muster_protocol::{AgentState, DeltaKind};

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
}

/// How a run of the loop ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentOutcome {
    /// The model ended its turn with no tool call; its last text is the result.
    Finished { result: String },
    /// A plan waits for a decision that no one in this process can make (exit code 5).
    AwaitingDecision {
        request_id: String,
        plan_file: PathBuf,
    },
}

/// The result of one tool call, with what must be committed beside it.
pub(super) struct CallResult {
    pub decision: String,
    /// What the decision does to the run's auto gate.
    pub auto_gate: Option<AutoGateUpdate>,
    pub reason: String,
    pub output: ToolOutput,
    /// Records committed before the `tool_call` record (mode changes, snapshots).
    pub records: Vec<Record>,
    pub acks: Vec<String>,
    /// Events reported after the commit.
    pub events: Vec<RunEvent>,
    /// What a file edit changed (for the `tool_call` event only; never committed).
    pub diff: Option<String>,
    /// Restart the context with this user message (approval with `clear_context`).
    pub reset_context: Option<String>,
}

impl CallResult {
    pub(super) fn new(decision: &GateDecision, output: ToolOutput) -> CallResult {
        CallResult {
            decision: decision.verdict.as_str().to_owned(),
            auto_gate: decision.auto_gate,
            reason: decision.reason.clone(),
            output,
            records: Vec::new(),
            acks: Vec::new(),
            events: Vec::new(),
            diff: None,
            reset_context: None,
        }
    }

    pub(super) fn invalid(output: ToolOutput) -> CallResult {
        CallResult {
            decision: "invalid".into(),
            auto_gate: None,
            reason: output.content.clone(),
            output,
            records: Vec::new(),
            acks: Vec::new(),
            events: Vec::new(),
            diff: None,
            reset_context: None,
        }
    }
}

/// What one dispatched call came to.
pub(super) enum Dispatched {
    Done(Box<CallResult>),
    /// The call waits for a decision no one here can make: stop the run.
    Stop(AgentOutcome),
}

/// The tool calls of the newest assistant message and what is known of them.
#[derive(Debug, Default, Clone)]
pub(super) struct PendingCalls {
    pub calls: Vec<ToolCall>,
    pub done: BTreeMap<String, (String, bool)>,
    pub started: BTreeMap<String, super::dispatch::StartedCall>,
    /// `(tool_use_id, request_id, responder)` of an `ExitPlanMode` waiting for its answer.
    pub awaiting: Option<(String, String, String)>,
    /// The call the output limit cut (see [`super::limits::cut_call_id`]): answered with an
    /// error, never run.
    pub cut: Option<String>,
    /// The newest assistant message stopped at the output limit (resume's view).
    pub cut_answer: bool,
}

/// One agent at work.
pub struct AgentRuntime {
    pub(super) run: Arc<RunContext>,
    pub(super) id: String,
    pub(super) kind: AgentKind,
    pub(super) definition: AgentDefinition,
    pub(super) mode: PermissionMode,
    pub(super) pre_plan_mode: Option<PermissionMode>,
    pub(super) approval_ceiling: Option<PermissionMode>,
    /// The rules of the agent's approved plan, until its verification report.
    pub(super) plan_grants: Option<crate::permission::PlanGrants>,
    pub(super) plan_file: Option<PathBuf>,
    pub(super) system: String,
    pub(super) tools: Vec<String>,
    pub(super) tool_definitions: Vec<ToolDefinition>,
    pub(super) messages: Vec<Message>,
    pub(super) turn: u64,
    pub(super) inherited_model: Option<String>,
    pub(super) pending: Option<PendingCalls>,
    pub(super) finished: Option<String>,
    /// A final answer committed before a crash whose end of turn was not (resume sets it;
    /// the loop commits the end of turn first thing).
    pub(super) unfinished_answer: Option<String>,
    /// The runtime's ending committed before a crash (resume sets it; the loop returns it).
    pub(super) stopped: Option<super::limits::AgentStop>,
    /// The cut answers since the last complete response (see [`super::limits::CutChain`]).
    pub(super) cut_chain: super::limits::CutChain,
    /// The run's auto gate as of this agent's last commit.
    pub(super) auto_gate_open: bool,
    /// The newest plan snapshot is an approved one (resume keeps it authoritative).
    pub(super) plan_approved: bool,
    /// Where asks go.
    pub(super) asks: super::asks::AskSettings,
    /// The usage of the newest response still in the context, and the context's length right
    /// after it (what came later is estimated): the compaction trigger's input.
    pub(super) last_prompt: Option<(Usage, usize)>,
    /// Where this agent's tools work: the run's workspace, or its worktree under worktree
    /// isolation (a subagent works in its parent's).
    pub(super) workspace: Workspace,
    /// This agent's MCP servers and tools; dropping the agent stops the servers.
    pub(super) mcp: Arc<crate::mcp::McpSession>,
    /// What the servers reported about this agent's models (its `started` record's
    /// `model_limits`): see [`AgentRuntime::output_limit`] and [`AgentRuntime::model_info`].
    pub(super) model_limits: BTreeMap<String, ServerLimits>,
    /// The state last reported in an `agent_state` event.
    pub(super) state: super::events::StateReport,
}

impl AgentRuntime {
    /// Starts a new agent on `prompt`: commits its `started` record and first user message.
    pub async fn start(
        run: Arc<RunContext>,
        spec: AgentSpec,
        prompt: &str,
    ) -> RuntimeResult<AgentRuntime> {
        let definition = run
            .catalog
            .get(&spec.definition)
            .cloned()
            .ok_or_else(|| RuntimeError::UnknownDefinition(spec.definition.clone()))?;
        let plan_file = plan_file_for(&run, &spec.kind, &spec.agent_id, &definition);
        let workspace = agent_workspace(&run, &spec.agent_id, &spec.kind).await?;
        let mut system = system_prompt(
            &definition.system_prompt,
            &run.instructions,
            workspace.root(),
        );
        if definition.read_only && matches!(spec.kind, AgentKind::Subagent { .. }) {
            system.push_str(super::prompt::RESEARCH_REPORT);
        }
        let mut tools = offered_tools(&definition, &spec.kind);
        let mcp = super::mcp::start_session(&run, &spec.agent_id, &definition, &workspace).await;
        let mut tool_definitions = tool_definitions(&run, &tools);
        tools.extend(mcp.names());
        tool_definitions.extend(mcp.definitions());
        let asks = super::asks::AskSettings::of(&run, &spec.agent_id, &spec.kind).await?;
        let model_limits =
            ask_model_limits(&run, &definition, spec.inherited_model.as_deref()).await;
        let mut agent = AgentRuntime {
            tool_definitions,
            mcp: Arc::new(mcp),
            run,
            id: spec.agent_id,
            kind: spec.kind,
            definition,
            mode: spec.mode,
            pre_plan_mode: spec.pre_plan_mode,
            approval_ceiling: spec.approval_ceiling,
            plan_grants: None,
            plan_file,
            system,
            tools,
            messages: Vec::new(),
            turn: 0,
            inherited_model: spec.inherited_model,
            pending: None,
            finished: None,
            unfinished_answer: None,
            stopped: None,
            cut_chain: Default::default(),
            auto_gate_open: true,
            plan_approved: false,
            asks,
            last_prompt: None,
            workspace,
            model_limits,
            state: Default::default(),
        };
        if agent.mode == PermissionMode::Plan && agent.pre_plan_mode.is_none() {
            agent.pre_plan_mode = Some(
                agent
                    .definition
                    .permission_mode
                    .filter(|m| *m != PermissionMode::Plan)
                    .unwrap_or_default(),
            );
        }
        let first = agent.user_message(vec![ContentBlock::text(prompt)]);
        let started = Record::Started {
            definition: agent.definition.name.clone(),
            agent_kind: agent.kind.clone(),
            mode: agent.mode,
            pre_plan_mode: agent.pre_plan_mode,
            plan_file: agent.plan_file.as_ref().map(|p| p.display().to_string()),
            system: agent.system.clone(),
            tools: agent.tools.clone(),
            mcp_tools: agent.mcp.records(),
            model_limits: agent.model_limits.clone(),
        };
        let message = agent.message_record(first.clone(), None);
        let mut records = vec![started, message];
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
        agent.messages.push(first);
        agent.run.events.emit(RunEvent::AgentStarted {
            agent: agent.id.clone(),
            definition: agent.definition.name.clone(),
            mode: agent.mode.to_string(),
            plan_file: agent.plan_file.as_ref().map(|p| p.display().to_string()),
        });
        Ok(agent)
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn mode(&self) -> PermissionMode {
        self.mode
    }

    pub fn pre_plan_mode(&self) -> Option<PermissionMode> {
        self.pre_plan_mode
    }

    pub fn plan_file(&self) -> Option<&std::path::Path> {
        self.plan_file.as_deref()
    }

    /// The model requests made so far (the durable turn index).
    pub fn turn(&self) -> u64 {
        self.turn
    }

    /// The context as the model sees it next.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The model in force for the current mode.
    pub fn current_model(&self) -> String {
        self.model_for_mode().model
    }

    /// Runs until the model ends its turn, or until a plan waits for a decision that no one in
    /// this process can make.
    pub async fn run(&mut self) -> RuntimeResult<AgentOutcome> {
        if let Some(result) = self.unfinished_answer.take() {
            self.finish_turn(result.clone()).await?;
            self.finished = Some(result);
        }
        loop {
            if let Some(result) = &self.finished {
                return Ok(AgentOutcome::Finished {
                    result: result.clone(),
                });
            }
            if let Some(stop) = self.stopped.take() {
                return Err(stop.into());
            }
            if let Some(pending) = self.pending.take()
                && let Some(stop) = self.resolve_calls(pending).await?
            {
                return Ok(stop);
            }
            // Before new mail joins the context: the newest exchange decides.
            if let Some(stop) = super::limits::stuck(&self.messages, self.run.limits.stuck_after) {
                return Err(stop.into());
            }
            self.take_team_mail().await?;
            let response = self.call_model().await?;
            let calls = response.tool_calls();
            if calls.is_empty() {
                if response.stop_reason == crate::model::StopReason::MaxTokens {
                    // Cut: `call_model` committed the request to continue it.
                    continue;
                }
                let result = self.cut_chain.answer(&response.content);
                self.finish_turn(result.clone()).await?;
                self.cut_chain = Default::default();
                self.finished = Some(result);
                continue;
            }
            self.pending = Some(PendingCalls {
                cut: super::limits::cut_call_id(&response.content, &response.stop_reason),
                calls,
                ..PendingCalls::default()
            });
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
                .end_of_turn(&self.id, &result, self.turn)
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
        let grants_end = self.plan_grants.as_ref().and_then(|grants| {
            end.sends
                .iter()
                .any(|sent| {
                    matches!(&sent.body, muster_mailbox::MessageBody::VerificationReport {
                        request_id: Some(id), ..
                    } if *id == grants.request_id)
                })
                .then(|| Record::GrantsEnded {
                    request_id: grants.request_id.clone(),
                    reason: "the plan's verification report was sent".into(),
                })
        });
        let grants_ended = grants_end.is_some();
        records.extend(grants_end);
        records.push(Record::Finished { result });
        let outcome = self.commit_with(records, with_it).await?;
        self.report_state(AgentState::Idle);
        if grants_ended {
            self.plan_grants = None;
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
        self.messages.push(message);
        self.finished = None;
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
        let routed = self.run.models.for_mode(self.mode).clone();
        let own = match &self.definition.model {
            ModelChoice::Inherit => self.inherited_model.clone(),
            ModelChoice::Named(model) => Some(model.clone()),
            ModelChoice::Settings => None,
        };
        match own {
            Some(model) if model != routed.model => ModeModel {
                max_tokens: self.output_limit(&model, self.run.output_limit(&model)),
                model,
                ..routed
            },
            _ => ModeModel {
                max_tokens: self.output_limit(&routed.model, routed.max_tokens),
                ..routed
            },
        }
    }

    /// `configured` (the catalogue's or the mode's output limit) clipped to what the server
    /// reported for `model`: its output limit, and a quarter of its context window (so a
    /// prompt keeps at least three quarters of a window the catalogue may not know).
    fn output_limit(&self, model: &str, configured: u64) -> u64 {
        let Some(reported) = self.model_limits.get(model) else {
            return configured;
        };
        let by_window = reported.context_window.map(|window| (window / 4).max(1));
        [Some(configured), reported.max_output, by_window]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(configured)
    }

    /// The catalogue's entry for `model` with the server's report applied (the smaller
    /// context window; the clipped output limit): what the compaction trigger reads. A model
    /// the catalogue lacks has an entry when its server reported a window.
    pub(super) fn model_info(&self, model: &ModeModel) -> Option<ModelInfo> {
        let catalogued = self.run.compaction.models.get(&model.model).cloned();
        let Some(reported) = self.model_limits.get(&model.model) else {
            return catalogued;
        };
        let mut info = catalogued.unwrap_or_default();
        info.context_window = match (info.context_window, reported.context_window) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        info.max_output = Some(model.max_tokens);
        Some(info)
    }

    /// One model request: refused, sending nothing, once a budget has reached its limit; the
    /// response is committed (with its usage and cost, for the ledger on resume) and reported
    /// before a budget it crosses stops the agent.
    async fn call_model(&mut self) -> RuntimeResult<ModelResponse> {
        self.report_state(AgentState::Thinking);
        self.compact_if_needed().await?;
        let model = self.model_for_mode();
        let (turn, request, response, latency) = self.send_fitting(&model).await?;
        self.turn = turn;
        let message = Message::assistant(response.content.clone());
        let record = Record::Message {
            message: message.clone(),
            turn: Some(turn),
            model: Some(response.model.clone()),
            mode: self.mode,
            stop_reason: Some(response.stop_reason.clone()),
            usage: Some(response.usage),
            cost_usd: response.cost_usd,
        };
        self.messages.push(message);
        // A final answer cut by the output limit: continued (the request to go on commits
        // with it), or, once the continuations are used up, the end of the agent.
        let mut chain = self.cut_chain.clone();
        let cut_answer = chain.push(&response.content, &response.stop_reason);
        let continuations = chain.cuts.saturating_sub(1);
        let continuation = (cut_answer && continuations < self.run.limits.continuations)
            .then(|| self.user_message(vec![ContentBlock::text(super::limits::CONTINUE_PROMPT)]));
        let mut records = vec![record];
        records.extend(
            continuation
                .iter()
                .map(|message| self.message_record(message.clone(), None)),
        );
        if let Err(error) = self.commit(records, Vec::new(), None).await {
            self.messages.pop();
            return Err(error);
        }
        self.last_prompt = Some((response.usage, self.messages.len()));
        self.messages.extend(continuation);
        self.cut_chain = chain;
        self.run.events.emit(RunEvent::ModelTurn {
            agent: self.id.clone(),
            turn,
            model: model.model,
            mode: self.mode.to_string(),
            stop_reason: response.stop_reason.as_str().to_owned(),
            text: response.text(),
            latency_ms: latency.as_secs_f64() * 1000.0,
            usage: response.usage.into(),
            cost_usd: response.cost_usd,
        });
        self.run.budget.record(&self.id, &response)?;
        if cut_answer && continuations >= self.run.limits.continuations {
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
            let turn = self.turn + 1;
            let request = self.request_for(model);
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

    /// The next model request of `model` on the current context.
    fn request_for(&self, model: &ModeModel) -> ModelRequest {
        ModelRequest {
            model: model.model.clone(),
            system: self.system.clone(),
            messages: self.messages.clone(),
            tools: self.tool_definitions.clone(),
            max_tokens: model.max_tokens,
            thinking: model.thinking,
        }
    }

    /// Before a model request: when the context nears the model's window (see
    /// [`crate::compaction`]), older turns are summarised by the model (a request of its own,
    /// with the next turn index, through the budget) and the context is rebuilt around the
    /// summary, the plan re-read from disk and the mailbox and task state read from the store.
    /// The `compacted` record holds the new context, so a resume continues from it.
    async fn compact_if_needed(&mut self) -> RuntimeResult<()> {
        let Some((usage, length)) = self.last_prompt else {
            return Ok(());
        };
        let model = self.model_for_mode();
        let policy = &self.run.compaction;
        let Some(info) = self.model_info(&model) else {
            return Ok(());
        };
        let appended = self.messages.get(length.saturating_sub(1)..).unwrap_or(&[]);
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
        let cut = plan_cut(&self.messages);
        let turn = self.turn + 1;
        let context = RequestContext::new(&self.run.run_id, &self.id, turn);
        let Ok(summary_request) =
            SummaryRequest::build(context, &self.request_for(&model), &cut, &config)
        else {
            // Nothing to summarise: the whole context must be kept verbatim.
            return Ok(false);
        };
        self.run.budget.check_before_request(&self.id)?;
        let response = model
            .provider
            .stream(&summary_request.context, &summary_request.request)
            .response()
            .await?;
        self.turn = turn;
        let summary = summary_text(&response).map_err(|error| RuntimeError::ModelStopped {
            reason: response.stop_reason.as_str().to_owned(),
            detail: error.to_string(),
        })?;
        let plan = match &self.plan_file {
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
        let messages = rebuild(CompactionInputs {
            messages: &self.messages,
            cut,
            summary: &summary,
            plan,
            coordination_state: render_coordination_state(&state, COORDINATION_STATE_TOKENS),
            recent_messages_tokens: config.recent_messages_tokens,
        });
        let record = Record::Compacted {
            turn,
            model: response.model.clone(),
            usage: response.usage,
            cost_usd: response.cost_usd,
            summary,
            messages: messages.clone(),
        };
        self.commit(vec![record], Vec::new(), None).await?;
        self.messages = messages;
        self.last_prompt = None;
        self.run.budget.record(&self.id, &response)?;
        Ok(true)
    }

    /// Gives every pending call its result (running what has not run), then appends the
    /// results as one user message.
    async fn resolve_calls(
        &mut self,
        mut pending: PendingCalls,
    ) -> RuntimeResult<Option<AgentOutcome>> {
        let calls = pending.calls.clone();
        let mut index = 0;
        while index < calls.len() {
            let group = self.read_only_group(&calls[index..], &pending);
            if group > 1 {
                let batch = &calls[index..index + group];
                let results = futures_util::future::join_all(
                    batch.iter().map(|call| self.dispatch_read_only(call)),
                )
                .await;
                let mut outcomes = Vec::with_capacity(group);
                for (call, result) in batch.iter().zip(results) {
                    let mut result = result?;
                    self.note_repeated_failure(call, &mut result);
                    pending.done.insert(
                        call.id.clone(),
                        (result.output.content.clone(), result.output.is_error),
                    );
                    outcomes.push((call, result));
                }
                index += group;
                // Read-only calls re-run on resume, so one commit may hold the whole group.
                let results = (index == calls.len()).then(|| self.results_message(&pending));
                let finished = results.is_some();
                self.commit_calls(outcomes, results).await?;
                if finished {
                    return Ok(None);
                }
                continue;
            }
            let call = &calls[index];
            index += 1;
            if pending.done.contains_key(&call.id) {
                continue;
            }
            let dispatched = if pending
                .awaiting
                .as_ref()
                .is_some_and(|(tool_use_id, _, _)| *tool_use_id == call.id)
            {
                let (_, request_id, responder) = pending.awaiting.clone().unwrap_or_default();
                self.await_plan_decision(call, &request_id, &responder)
                    .await?
            } else if let Some(group) = pending.started.get(&call.id) {
                Dispatched::Done(Box::new(super::dispatch::interrupted(group)))
            } else if pending.cut.as_deref() == Some(call.id.as_str()) {
                Dispatched::Done(Box::new(CallResult::invalid(ToolOutput::error(
                    super::limits::cut_call_result(&call.name),
                ))))
            } else {
                self.dispatch(call).await?
            };
            let mut result = match dispatched {
                Dispatched::Done(result) => result,
                Dispatched::Stop(outcome) => {
                    self.pending = Some(pending);
                    return Ok(Some(outcome));
                }
            };
            self.note_repeated_failure(call, &mut result);
            let reset = result.reset_context.clone();
            pending.done.insert(
                call.id.clone(),
                (result.output.content.clone(), result.output.is_error),
            );
            // The turn's last call commits the results message with its own record.
            let results =
                (index == calls.len() && reset.is_none()).then(|| self.results_message(&pending));
            let finished = results.is_some();
            self.commit_calls(vec![(call, *result)], results).await?;
            if let Some(first) = reset {
                self.reset_context(first).await?;
                return Ok(None);
            }
            if finished {
                return Ok(None);
            }
        }
        // Every call was done before (a resume): only the results message is missing.
        let message = self.results_message(&pending);
        let record = self.message_record(message.clone(), None);
        self.commit(vec![record], Vec::new(), None).await?;
        self.messages.push(message);
        Ok(None)
    }

    /// A failed result the same as the call's last ones gets the note to change course (see
    /// [`super::limits`]); it is part of what is committed.
    fn note_repeated_failure(&self, call: &ToolCall, result: &mut CallResult) {
        if !result.output.is_error {
            return;
        }
        // The context ends with the assistant message holding `call`.
        let before = &self.messages[..self.messages.len().saturating_sub(1)];
        result.output.content = super::limits::with_stuck_note(
            before,
            &call.name,
            &call.input,
            std::mem::take(&mut result.output.content),
            self.run.limits.stuck_after,
        );
    }

    /// The user message carrying every call's result, in the order of the calls.
    fn results_message(&self, pending: &PendingCalls) -> Message {
        let blocks = pending
            .calls
            .iter()
            .map(|call| {
                let (content, is_error) = pending.done.get(&call.id).cloned().unwrap_or_default();
                ContentBlock::ToolResult {
                    tool_use_id: call.id.clone(),
                    content: ToolResultContent::Text(content),
                    is_error,
                }
            })
            .collect();
        self.user_message(blocks)
    }

    /// How many calls from the start of `calls` are read-only tool-set calls still to run.
    fn read_only_group(&self, calls: &[ToolCall], pending: &PendingCalls) -> usize {
        calls
            .iter()
            .take_while(|call| {
                !pending.done.contains_key(&call.id)
                    && !pending.started.contains_key(&call.id)
                    && pending.cut.as_deref() != Some(call.id.as_str())
                    && self.is_read_only_call(call)
            })
            .count()
    }

    /// Commits calls' records (each call's own, then its `tool_call`) and, when the turn's
    /// calls are all done, the results message, in one transaction; then reports them. Calls
    /// that each move the auto gate are committed one by one, as the gate counts in order.
    async fn commit_calls(
        &mut self,
        outcomes: Vec<(&ToolCall, CallResult)>,
        results: Option<Message>,
    ) -> RuntimeResult<()> {
        let gate_moves = outcomes
            .iter()
            .filter(|(_, result)| result.auto_gate.is_some())
            .count();
        if gate_moves > 1 {
            let last = outcomes.len() - 1;
            let mut results = results;
            for (n, outcome) in outcomes.into_iter().enumerate() {
                let results = if n == last { results.take() } else { None };
                Box::pin(self.commit_calls(vec![outcome], results)).await?;
            }
            return Ok(());
        }
        let mut records = Vec::new();
        let mut acks = Vec::new();
        let mut auto_gate = None;
        let mut events = Vec::new();
        let may_have_changed_files = outcomes.iter().any(|(call, _)| self.may_change_files(call));
        for (call, result) in outcomes {
            records.extend(result.records);
            records.push(Record::ToolCall {
                tool_use_id: call.id.clone(),
                tool: call.name.clone(),
                decision: result.decision.clone(),
                reason: result.reason.clone(),
                content: result.output.content.clone(),
                is_error: result.output.is_error,
            });
            acks.extend(result.acks);
            auto_gate = auto_gate.or(result.auto_gate);
            events.extend(result.events);
            events.push(RunEvent::ToolCall {
                agent: self.id.clone(),
                tool_use_id: call.id.clone(),
                tool: call.name.clone(),
                decision: result.decision,
                reason: result.reason,
                is_error: result.output.is_error,
                input: call.input.clone(),
                content: result.output.content,
                diff: result.diff,
            });
        }
        if let Some(message) = &results {
            records.push(self.message_record(message.clone(), None));
        }
        // The worktree's state after these calls commits with their results, so a resume
        // restores what the transcript says they did.
        let hold = match may_have_changed_files {
            true => self.team_checkpoint().await?.map(|checkpoint| {
                records.push(checkpoint.record());
                checkpoint.hold
            }),
            false => None,
        };
        self.commit(records, acks, auto_gate).await?;
        drop(hold);
        if let Some(message) = results {
            self.messages.push(message);
        }
        for event in events {
            self.run.events.emit(event);
        }
        Ok(())
    }

    /// Whether a call may have changed files in the worktree: a tool-set tool that is not
    /// read-only, or a subagent (which works in this agent's worktree).
    fn may_change_files(&self, call: &ToolCall) -> bool {
        call.name == ToolName::Agent
            || self
                .run
                .tools
                .get(&call.name)
                .is_some_and(|tool| tool.handled_by() == HandledBy::ToolSet && !tool.is_read_only())
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

    async fn reset_context(&mut self, first: String) -> RuntimeResult<()> {
        let message = self.user_message(vec![ContentBlock::text(first)]);
        let records = vec![
            Record::ContextReset {
                reason: "the plan was approved with clear_context".into(),
            },
            self.message_record(message.clone(), None),
        ];
        self.commit(records, Vec::new(), None).await?;
        self.messages = vec![message];
        Ok(())
    }

    /// A user message with the mode reminder appended.
    pub(super) fn user_message(&self, mut blocks: Vec<ContentBlock>) -> Message {
        blocks.push(ContentBlock::text(mode_reminder(
            self.mode,
            self.plan_file.as_deref(),
            matches!(self.kind, AgentKind::Subagent { .. }),
        )));
        Message {
            role: Role::User,
            content: blocks,
        }
    }

    /// Reports `state` in an `agent_state` event when it differs from the last one (called
    /// after the commit the state follows from).
    pub(super) fn report_state(&self, state: AgentState) {
        if self.state.changes_to(&state) {
            self.run.events.emit(RunEvent::AgentState {
                agent: self.id.clone(),
                state,
            });
        }
    }

    /// Reports a call about to run (`tool_started`, not durable).
    pub(super) fn report_tool_started(&self, call: &ToolCall) {
        self.run.events.emit(RunEvent::ToolStarted {
            agent: self.id.clone(),
            tool_use_id: call.id.clone(),
            tool: call.name.clone(),
            input: call.input.clone(),
        });
    }

    pub(super) fn message_record(&self, message: Message, turn: Option<u64>) -> Record {
        Record::Message {
            message,
            turn,
            model: None,
            mode: self.mode,
            stop_reason: None,
            usage: None,
            cost_usd: None,
        }
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
        let outcome = self
            .run
            .store
            .commit_turn(CommitTurn {
                run_id: self.run.run_id.clone(),
                agent: self.id.clone(),
                records,
                ..with_them
            })
            .await?;
        self.auto_gate_open = outcome.auto_gate.open;
        Ok(outcome)
    }
}

/// Asks the servers of every model the agent may use (each mode's, and the one its definition
/// names or inherits) what they report about its limits; keeps the models they reported
/// something for. Each provider caches its answers for the run.
async fn ask_model_limits(
    run: &RunContext,
    definition: &AgentDefinition,
    inherited: Option<&str>,
) -> BTreeMap<String, ServerLimits> {
    let own = match &definition.model {
        ModelChoice::Inherit => inherited.map(str::to_owned),
        ModelChoice::Named(model) => Some(model.clone()),
        ModelChoice::Settings => None,
    };
    let mut limits: BTreeMap<String, ServerLimits> = BTreeMap::new();
    for routed in [&run.models.plan, &run.models.act] {
        for model in std::iter::once(&routed.model).chain(own.as_ref()) {
            let reported = routed.provider.server_limits(model).await;
            if reported.is_empty() {
                continue;
            }
            let merged = match limits.get(model) {
                Some(known) => known.merge(reported),
                None => reported,
            };
            limits.insert(model.clone(), merged);
        }
    }
    limits
}

/// Where an agent of `run` works: what its team says (a worktree), else the run's workspace.
/// A subagent works where its parent does.
pub(super) async fn agent_workspace(
    run: &RunContext,
    id: &str,
    kind: &AgentKind,
) -> RuntimeResult<Workspace> {
    let owner = match kind {
        AgentKind::Subagent { parent } => parent.as_str(),
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
        Some(path) => Workspace::new(&path).map_err(|e| RuntimeError::Workspace(e.to_string())),
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
pub(super) fn offered_tools(definition: &AgentDefinition, kind: &AgentKind) -> Vec<String> {
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
pub(super) fn tool_definitions(run: &RunContext, tools: &[String]) -> Vec<ToolDefinition> {
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
