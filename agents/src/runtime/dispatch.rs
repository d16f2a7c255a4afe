//! The call dispatcher: the gate decides a call (an ask is settled), and an allowed call of
//! the tool set runs here; the runtime's own tools go back to the agent. The agent commits a
//! `tool_started` record before a tool that is neither read-only nor idempotent runs
//! ([`ToolRun::needs_start_record`]; Bash commits its own, with its process group, before the
//! command runs).
//!
//! A `Bash` call the classifier did not prove read-only runs measured: under the workspace's
//! Bash lock, between two workspace snapshots, and its `bash_effects` record is committed with
//! its `tool_call` (see [`crate::verification::BashMeasurement`] for why the lock, and what it
//! costs). Other writing tools take no lock; they announce their paths while they run
//! ([`crate::verification::FileEdits`]) so that a concurrent command's record leaves them out.

use muster_config::hooks::HookEvent;
use muster_protocol::ToolName;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::hooks::HookDecision;
use crate::model::ToolCall;
use crate::sandbox::SandboxProfile;
use crate::tools::{
    HandledBy, PathUse, ProcessGroupId, ProcessGroupRecorder, RecordFuture, ToolContext,
    ToolDetails, ToolOutput,
};
use crate::trace_ids::{SpanKey, TRACEPARENT};
use crate::verification::{BashMeasurement, FileEdits, SnapshotLimits};

use muster_config::AgentDefinition;

use super::asks::{AskSettings, Asking, Deferred};
use super::calls::{AgentOutcome, CallResult, Dispatched};
use super::context::RunContext;
use super::edit_diff::EditCapture;
use super::error::{RuntimeError, RuntimeResult};
use super::events::Reporter;
use super::gate::{CallContext, GateDecision, Verdict};
use super::hook_points::{self, Firing};
use super::interrupt::CommitLane;
use super::plan_state::PlanState;
use super::records::AgentKind;
use super::records::Record;
use super::transcript_file::TranscriptFile;

/// What decides and runs one agent's calls: its tools (muster's and its MCP servers'), where
/// its asks go, and the workspace its tools work in.
pub(super) struct CallDispatcher {
    pub run: Arc<RunContext>,
    pub id: String,
    pub kind: AgentKind,
    pub definition: AgentDefinition,
    /// The tools the agent is offered, MCP tools included.
    pub tools: Vec<String>,
    /// This agent's MCP servers and tools; dropping the agent stops the servers.
    pub mcp: Arc<crate::mcp::McpSession>,
    /// Where asks go.
    pub asks: AskSettings,
    /// Where this agent's tools work: the run's workspace, or its worktree under worktree
    /// isolation (a subagent works in its parent's).
    pub workspace: crate::tools::Workspace,
    pub report: Arc<Reporter>,
    /// The agent's commits (a Bash call's `tool_started` goes through them too).
    pub commits: CommitLane,
    /// PreToolUse decisions a resume found committed for calls without a result, by
    /// `tool_use_id`: used instead of running the hooks again.
    pub hook_decisions: std::sync::Mutex<BTreeMap<String, HookDecision>>,
    /// The agent's conversation for its hooks (`transcript_path`), when the run has hooks.
    pub transcript_file: Option<Arc<TranscriptFile>>,
    /// A hook's `continue: false`, noted until the agent ends its turn with it.
    pub hook_stops: hook_points::HookStops,
}

/// What the agent's state says about a call: its mode and plan, and the run's auto gate.
#[derive(Clone, Copy)]
pub(super) struct CallView<'a> {
    pub plan: &'a PlanState,
    pub auto_gate_open: bool,
}

impl CallDispatcher {
    /// Runs an allowed call of the tool set: a non-read-only `Bash` call measured, another
    /// writing call announced while it runs (with its diff).
    pub(super) async fn run_tool(&self, call: &ToolCall, run: ToolRun) -> CallResult {
        self.report.tool_started(call);
        let (mode, input) = (run.mode, run.input(call));
        let mut result = self.run_tool_unhooked(call, run).await;
        self.firing(mode)
            .post_tool_use(call, &input, &mut result.output)
            .await;
        result
    }

    async fn run_tool_unhooked(&self, call: &ToolCall, run: ToolRun) -> CallResult {
        if call.name == ToolName::Bash && !run.decision.read_only_shell {
            return self.measured_bash(call, run).await;
        }
        // Announced so that another agent's measured Bash call leaves them out.
        let _edits = self.file_edits(&run, call);
        let input = run.input(call);
        let before = EditCapture::before(&call.name, run.tool.as_ref(), &run.context, &input).await;
        let mut result = run.execute(call).await;
        if let Some(before) = before
            && !result.output.is_error
        {
            result.diff = before.diff().await;
        }
        result
    }

    /// This agent as the one firing hooks, in `mode`.
    fn firing(&self, mode: muster_config::PermissionMode) -> Firing<'_> {
        Firing {
            run: &self.run,
            id: &self.id,
            kind: &self.kind,
            definition: &self.definition,
            workspace: self.workspace.root(),
            mode,
            transcript_path: self
                .transcript_file
                .as_deref()
                .map(|file| file.path.as_path()),
            stops: &self.hook_stops,
        }
    }

    /// The engine's decision with the PreToolUse hooks' applied (see
    /// [`super::hook_points`]), and the input the call runs with when a hook updated it. The
    /// hooks' decision is committed before the call goes on; a resume takes it from there.
    async fn pre_tool_use(
        &self,
        call: &ToolCall,
        tool: &dyn crate::tools::Tool,
        decision: GateDecision,
        call_context: &CallContext<'_>,
    ) -> RuntimeResult<(GateDecision, Option<HookDecision>)> {
        if decision.verdict == Verdict::Deny {
            return Ok((decision, None));
        }
        // A committed decision holds even if the hooks are gone since (a resume of a run whose
        // project is no longer trusted): what a hook decided is never undone.
        let committed = self
            .hook_decisions
            .lock()
            .map(|mut decisions| decisions.remove(&call.id))
            .unwrap_or(None);
        if committed.is_none() && !self.run.hooks.has(HookEvent::PreToolUse) {
            return Ok((decision, None));
        }
        let hook = match committed {
            Some(hook) => hook,
            None => {
                let Some(hook) = self.firing(call_context.mode).pre_tool_use(call).await else {
                    return Ok((decision, None));
                };
                let record = Record::HookDecision {
                    tool_use_id: call.id.clone(),
                    decision: hook.clone(),
                }
                .to_new(&self.id)?;
                let (store, run_id) = (self.run.store.clone(), self.run.run_id.clone());
                self.commits
                    .run(async move { store.append_records(&run_id, vec![record]).await })
                    .await??;
                muster_mailbox::failpoint!("hook:PreToolUse");
                hook
            }
        };
        if let Some(reason) = &hook.stop {
            self.hook_stops.note(HookEvent::PreToolUse, reason);
        }
        let mut decided = hook_points::apply(&hook, decision);
        if let Some(input) = &hook.updated_input
            && decided.verdict != Verdict::Deny
        {
            // As if the model had sent it; the hooks are not run on it again.
            let again = self.run.gate.decide(call_context, tool, input);
            decided = hook_points::stricter(decided, again);
        }
        Ok((decided, Some(hook)))
    }

    /// An ask about to go to the agent's approver first fires `PermissionRequest`: a hook may
    /// refuse the call there, never approve it.
    async fn permission_request(
        &self,
        firing: &Firing<'_>,
        call: &ToolCall,
        decision: GateDecision,
    ) -> GateDecision {
        if decision.verdict != Verdict::Ask {
            return decision;
        }
        match firing.permission_request(call).await {
            Some(reason) => GateDecision {
                verdict: Verdict::Deny,
                reason: format!("{}; {reason}", decision.reason),
                ..decision
            },
            None => decision,
        }
    }

    /// Runs a non-read-only `Bash` call between two snapshots of the workspace, under its Bash
    /// lock; the result carries the `bash_effects` record (committed with the `tool_call`). A
    /// failed snapshot never stops the command: the record then says its effects are unknown.
    async fn measured_bash(&self, call: &ToolCall, run: ToolRun) -> CallResult {
        let measurement =
            BashMeasurement::begin(self.workspace.root(), SnapshotLimits::default()).await;
        let input = run.input(call);
        let mut result = run.execute(call).await;
        let exit_code = match &result.output.details {
            ToolDetails::Bash(outcome) => outcome.exit_code,
            _ => None,
        };
        let command = input
            .get("command")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default();
        let effects = measurement.finish(&call.id, command, exit_code).await;
        result.records.push(Record::BashEffects(effects));
        result
    }

    /// The paths a non-read-only tool-set call writes, announced while it runs.
    fn file_edits(&self, run: &ToolRun, call: &ToolCall) -> Option<FileEdits> {
        if run.tool.is_read_only() {
            return None;
        }
        let paths = run.tool.accessed_paths(&run.input(call)).ok()?;
        let written: Vec<&str> = paths
            .iter()
            .filter(|access| access.usage == PathUse::Write)
            .map(|access| access.path.as_str())
            .collect();
        (!written.is_empty()).then(|| FileEdits::begin(self.workspace.root(), written))
    }

    /// A read-only call of the tool set: decided and run without committing anything first,
    /// so consecutive ones run concurrently.
    pub(super) async fn dispatch_read_only(
        &self,
        call: &ToolCall,
        view: CallView<'_>,
    ) -> RuntimeResult<Dispatched> {
        self.report.calling(call);
        let done = |result: CallResult| Dispatched::Done(Box::new(result));
        Ok(match self.prepare(call, view).await? {
            Prepared::Finished(result) => Dispatched::Done(result),
            Prepared::Stop(outcome) => Dispatched::Stop(outcome),
            Prepared::Run(run) => {
                self.report.tool_started(call);
                let (mode, input) = (run.mode, run.input(call));
                let mut result = run.execute(call).await;
                self.firing(mode)
                    .post_tool_use(call, &input, &mut result.output)
                    .await;
                done(result)
            }
            Prepared::Runtime(decision, _) => done(CallResult::new(
                &decision,
                ToolOutput::error(format!("{} is not a tool-set tool", call.name)),
            )),
        })
    }

    /// Whether a call is of a read-only tool the tool set runs.
    pub(super) fn is_read_only_call(&self, call: &ToolCall) -> bool {
        self.run
            .tools
            .get(&call.name)
            .is_some_and(|tool| tool.is_read_only() && tool.handled_by() == HandledBy::ToolSet)
    }

    /// The tool the model calls `name`: one of muster's, or one of this agent's MCP tools.
    fn find_tool(&self, name: &str) -> Option<Arc<dyn crate::tools::Tool>> {
        self.run
            .tools
            .get(name)
            .cloned()
            .or_else(|| self.mcp.get(name))
    }

    /// The gate's decision (with an ask settled), and what runs the call if it is allowed.
    pub(super) async fn prepare(
        &self,
        call: &ToolCall,
        view: CallView<'_>,
    ) -> RuntimeResult<Prepared> {
        let Some(tool) = self.find_tool(&call.name) else {
            return Ok(Prepared::Finished(Box::new(CallResult::invalid(
                ToolOutput::error(format!(
                    "unknown tool `{}`; your tools are: {}",
                    call.name,
                    self.tools.join(", ")
                )),
            ))));
        };
        if let Err(error) = tool.accessed_paths(&call.input) {
            return Ok(Prepared::Finished(Box::new(CallResult::invalid(
                ToolOutput::error(error.to_string()),
            ))));
        }
        let context = self.tool_context(&call.id, view.plan)?;
        let decision = {
            let call_context = CallContext {
                agent_id: &self.id,
                agent_kind: &self.kind,
                mode: view.plan.mode,
                pre_plan_mode: view.plan.pre_plan_mode,
                definition: &self.definition,
                plans: &self.run.plans,
                tool_context: &context,
                auto_gate_open: view.auto_gate_open,
                plan_grants: view.plan.grants.as_ref(),
            };
            let decision = self
                .run
                .gate
                .decide(&call_context, tool.as_ref(), &call.input);
            self.pre_tool_use(call, tool.as_ref(), decision, &call_context)
                .await?
        };
        let (decision, hook) = decision;
        let hook = hook.unwrap_or_default();
        let asking = Asking {
            id: &self.id,
            asks: &self.asks,
            run: &self.run,
            report: &self.report,
            root: self.workspace.root(),
            commits: &self.commits,
        };
        let firing = self.firing(view.plan.mode);
        let deferred = hook.permission == Some(crate::hooks::HookPermission::Defer)
            && decision.verdict == Verdict::Ask;
        let (decision, acks) = if deferred {
            match asking.settle_deferred(decision, call).await? {
                Deferred::Decided(decision, acks) => (decision, acks),
                Deferred::Waiting {
                    request_id,
                    decision,
                } => {
                    let message = format!(
                        "{} waits for your decision on a {} call ({request_id})",
                        self.id, call.name
                    );
                    firing.notification("permission_prompt", &message).await;
                    if asking.stops_for_a_person() {
                        return Ok(Prepared::Stop(AgentOutcome::CallDeferred {
                            request_id,
                            tool: call.name.clone(),
                        }));
                    }
                    asking.wait_for_person(decision, call, &request_id).await?
                }
            }
        } else {
            let decision = self.permission_request(&firing, call, decision).await;
            if decision.verdict == Verdict::Ask && self.run.terminal.is_some() {
                let message = format!("{} needs your permission to use {}", self.id, call.name);
                firing.notification("permission_prompt", &message).await;
            }
            asking.settle_ask(decision, call).await?
        };
        let refuse = |text: String| {
            let mut result = CallResult::new(&decision, ToolOutput::error(text));
            result.acks = acks.clone();
            Ok(Prepared::Finished(Box::new(result)))
        };
        if decision.verdict != Verdict::Allow {
            return refuse(format!("Permission denied: {}", decision.reason));
        }
        if !self.tools.contains(&call.name) {
            return refuse(format!(
                "{} is not one of your tools; your tools are: {}",
                call.name,
                self.tools.join(", ")
            ));
        }
        if tool.handled_by() == HandledBy::AgentRuntime {
            return Ok(Prepared::Runtime(decision, acks));
        }
        let context = if decision.read_only_shell {
            read_only_context(context)?
        } else {
            context
        };
        let context = match &self.run.sandbox {
            Some(sandbox) => {
                context.with_sandbox(sandbox.clone(), self.sandbox_profile(&decision, view.plan))
            }
            None => context,
        };
        Ok(Prepared::Run(Box::new(ToolRun {
            tool,
            decision,
            context,
            acks,
            mode: view.plan.mode,
            updated_input: hook.updated_input,
            hook_context: hook.context,
        })))
    }

    /// The sandbox profile of an allowed call: read-only in plan mode, for read-only agents
    /// and for every command the classifier proved read-only (in any mode); workspace-write
    /// otherwise (DESIGN, "Wave 2 → The Bash sandbox").
    fn sandbox_profile(&self, decision: &GateDecision, plan: &PlanState) -> SandboxProfile {
        crate::sandbox::profile_for(
            decision.read_only_shell,
            plan.mode,
            self.definition.read_only,
        )
    }

    fn tool_context(&self, tool_use_id: &str, plan: &PlanState) -> RuntimeResult<ToolContext> {
        let mut environment = self.run.environment.clone();
        if let Some(trace) = &self.run.trace {
            let traceparent = trace.traceparent(SpanKey::Tool(&self.id, tool_use_id));
            environment.retain(|(name, _)| name != TRACEPARENT);
            environment.push((TRACEPARENT.into(), traceparent.into()));
        }
        let mut context = ToolContext::new(self.workspace.clone(), environment);
        if let Some(plan_file) = &plan.file {
            context = context
                .with_plan_file(plan_file)
                .map_err(|error| RuntimeError::Workspace(error.to_string()))?;
        }
        let recorder = StartRecorder {
            commits: self.commits.clone(),
            run: self.run.clone(),
            agent: self.id.clone(),
            tool_use_id: tool_use_id.to_owned(),
        };
        Ok(context.with_process_group_recorder(Arc::new(recorder)))
    }
}

/// What `prepare` found for a call.
pub(super) enum Prepared {
    /// Refused or invalid: the result is ready.
    Finished(Box<CallResult>),
    /// Allowed, and the runtime carries it out (with the acks of an answered ask).
    Runtime(GateDecision, Vec<String>),
    /// Allowed, and the tool set runs it.
    Run(Box<ToolRun>),
    /// Deferred to a person no one here can ask: the agent stops for the decision.
    Stop(AgentOutcome),
}

/// An allowed call of the tool set, ready to run.
pub(super) struct ToolRun {
    tool: Arc<dyn crate::tools::Tool>,
    decision: GateDecision,
    context: ToolContext,
    acks: Vec<String>,
    /// The mode the call was decided in (its PostToolUse hooks fire in it).
    mode: muster_config::PermissionMode,
    /// A PreToolUse hook's `updatedInput`, decided by the engine again.
    updated_input: Option<serde_json::Value>,
    /// What the PreToolUse hooks added for the model.
    hook_context: Vec<String>,
}

impl ToolRun {
    /// Whether the agent commits a `tool_started` record before the call runs: a tool that is
    /// neither read-only nor idempotent, except `Bash` (which records its own, with its
    /// process group, before the command runs).
    pub(super) fn needs_start_record(&self, call: &ToolCall) -> bool {
        !self.tool.is_read_only() && !self.tool.is_idempotent() && call.name != ToolName::Bash
    }

    /// The call's input, with the command text the classifier rewrote for read-only `Bash`
    /// (the flags it added are what keeps that text read-only).
    fn input(&self, call: &ToolCall) -> serde_json::Value {
        let mut input = self
            .updated_input
            .clone()
            .unwrap_or_else(|| call.input.clone());
        if let (Some(text), Some(object)) = (&self.decision.shell_run_as, input.as_object_mut()) {
            object.insert("command".into(), serde_json::Value::String(text.clone()));
        }
        input
    }

    async fn execute(self, call: &ToolCall) -> CallResult {
        let mut output = self.tool.call(&self.context, self.input(call)).await;
        for said in &self.hook_context {
            output
                .content
                .push_str(&format!("\n[PreToolUse hook] {said}"));
        }
        let mut result = CallResult::new(&self.decision, output);
        if call.name == ToolName::Bash {
            result.sandbox = Some(self.sandbox_name());
        }
        result.acks = self.acks;
        result
    }

    /// The profile the command ran under, as `Bash` confines it.
    fn sandbox_name(&self) -> &'static str {
        match self.context.sandbox() {
            Some((sandbox, profile)) if sandbox.mode != crate::sandbox::SandboxMode::Off => {
                profile.name()
            }
            _ => "unconfined",
        }
    }
}

/// Commits the `tool_started` record of a `Bash` call with its process group, before the
/// command runs.
struct StartRecorder {
    commits: CommitLane,
    run: Arc<RunContext>,
    agent: String,
    tool_use_id: String,
}

impl ProcessGroupRecorder for StartRecorder {
    fn record(&self, group: ProcessGroupId) -> RecordFuture<'_> {
        Box::pin(async move {
            let machine = crate::machine::this_machine();
            let record = Record::ToolStarted {
                tool_use_id: self.tool_use_id.clone(),
                tool: ToolName::Bash.to_string(),
                process_group: Some(group),
                host: Some(machine.host.clone()),
                boot_id: Some(machine.boot_id.clone()),
            };
            let row = record.to_new(&self.agent).map_err(|e| e.to_string())?;
            let recorded = muster_mailbox::NewProcessGroup {
                agent: self.agent.clone(),
                tool_use_id: self.tool_use_id.clone(),
                pgid: i64::from(group),
                host: machine.host.clone(),
                boot_id: machine.boot_id.clone(),
            };
            let (store, run_id) = (self.run.store.clone(), self.run.run_id.clone());
            self.commits
                .run(async move { store.record_tool_start(&run_id, vec![row], recorded).await })
                .await
                .map_err(|e| e.to_string())?
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
    }
}

/// The context read-only `Bash` runs in: variables that could run code removed, git's
/// read-only overrides (`GIT_OPTIONAL_LOCKS=0`, …) set.
fn read_only_context(context: ToolContext) -> RuntimeResult<ToolContext> {
    let overrides = crate::shell::read_only_git_env();
    let mut environment: Vec<(std::ffi::OsString, std::ffi::OsString)> = context
        .environment()
        .iter()
        .filter(|(name, _)| {
            let name = name.to_string_lossy();
            !crate::shell::remove_from_read_only_env(&name)
                && !overrides.iter().any(|(key, _)| *key == name)
        })
        .cloned()
        .collect();
    environment.extend(
        overrides
            .into_iter()
            .map(|(key, value)| (key.into(), value.into())),
    );
    let mut read_only = ToolContext::new(context.workspace().clone(), environment)
        .with_shutdown(context.shutdown().clone())
        .with_limits(context.limits().clone());
    if let Some(recorder) = context.process_group_recorder() {
        read_only = read_only.with_process_group_recorder(recorder.clone());
    }
    if let Some(plan_file) = context.plan_file() {
        read_only = read_only
            .with_plan_file(plan_file)
            .map_err(|error| RuntimeError::Workspace(error.to_string()))?;
    }
    Ok(read_only)
}
