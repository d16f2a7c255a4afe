//! Dispatching one tool call: the gate decides (an ask is settled), the runtime carries out
//! its own tools, the tool set runs the rest — after a `tool_started` commit for a tool that
//! is neither read-only nor idempotent (Bash: with its process group, before the command runs).
//!
//! A `Bash` call the classifier did not prove read-only runs measured: under the workspace's
//! Bash lock, between two workspace snapshots, and its `bash_effects` record is committed with
//! its `tool_call` (see [`crate::verification::BashMeasurement`] for why the lock, and what it
//! costs). Other writing tools take no lock; they announce their paths while they run
//! ([`crate::verification::FileEdits`]) so that a concurrent command's record leaves them out.

use muster_protocol::{AgentState, ToolName};
use std::sync::Arc;

use crate::model::ToolCall;
use crate::sandbox::SandboxProfile;
use crate::tools::{
    HandledBy, PathUse, ProcessGroupId, ProcessGroupRecorder, RecordFuture, ToolContext,
    ToolDetails, ToolOutput,
};
use crate::verification::{BashMeasurement, FileEdits, SnapshotLimits};

use super::agent::{AgentRuntime, CallResult, Dispatched};
use super::context::RunContext;
use super::edit_diff::EditCapture;
use super::error::{RuntimeError, RuntimeResult};
use super::gate::{CallContext, GateDecision, Verdict};
use super::records::Record;

impl AgentRuntime {
    /// Decides one call through the gate and runs it.
    pub(super) async fn dispatch(&mut self, call: &ToolCall) -> RuntimeResult<Dispatched> {
        self.report_calling(call);
        match self.prepare(call).await? {
            Prepared::Finished(result) => Ok(Dispatched::Done(result)),
            Prepared::Runtime(decision, acks) => {
                if call.name == ToolName::Agent {
                    // A subagent is not resumed after a crash: its parent gets an error.
                    let started = Record::ToolStarted {
                        tool_use_id: call.id.clone(),
                        tool: call.name.clone(),
                        process_group: None,
                        host: None,
                        boot_id: None,
                    };
                    self.commit(vec![started], Vec::new(), None).await?;
                }
                self.report_tool_started(call);
                let mut dispatched = self.coordinate(call, &decision).await?;
                // Its effect is committed, its result not yet.
                muster_mailbox::failpoint!("effect:{}", call.name);
                if let Dispatched::Done(result) = &mut dispatched {
                    result.acks.extend(acks);
                }
                Ok(dispatched)
            }
            Prepared::Run(run) => {
                if !run.tool.is_read_only()
                    && !run.tool.is_idempotent()
                    && call.name != ToolName::Bash
                {
                    let started = Record::ToolStarted {
                        tool_use_id: call.id.clone(),
                        tool: call.name.clone(),
                        process_group: None,
                        host: None,
                        boot_id: None,
                    };
                    self.commit(vec![started], Vec::new(), None).await?;
                }
                self.report_tool_started(call);
                if call.name == ToolName::Bash && !run.decision.read_only_shell {
                    return Ok(Dispatched::Done(Box::new(
                        self.measured_bash(call, *run).await,
                    )));
                }
                // Announced so that another agent's measured Bash call leaves them out.
                let _edits = self.file_edits(&run, call);
                let before =
                    EditCapture::before(&call.name, run.tool.as_ref(), &run.context, &call.input)
                        .await;
                let mut result = run.execute(call).await;
                if let Some(before) = before
                    && !result.output.is_error
                {
                    result.diff = before.diff().await;
                }
                Ok(Dispatched::Done(Box::new(result)))
            }
        }
    }

    /// Runs a non-read-only `Bash` call between two snapshots of the workspace, under its Bash
    /// lock; the result carries the `bash_effects` record (committed with the `tool_call`). A
    /// failed snapshot never stops the command: the record then says its effects are unknown.
    async fn measured_bash(&self, call: &ToolCall, run: ToolRun) -> CallResult {
        let measurement =
            BashMeasurement::begin(self.workspace.root(), SnapshotLimits::default()).await;
        let mut result = run.execute(call).await;
        let exit_code = match &result.output.details {
            ToolDetails::Bash(outcome) => outcome.exit_code,
            _ => None,
        };
        let command = call
            .input
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
        let paths = run.tool.accessed_paths(&call.input).ok()?;
        let written: Vec<&str> = paths
            .iter()
            .filter(|access| access.usage == PathUse::Write)
            .map(|access| access.path.as_str())
            .collect();
        (!written.is_empty()).then(|| FileEdits::begin(self.workspace.root(), written))
    }

    /// A read-only call of the tool set: decided and run without committing anything first,
    /// so consecutive ones run concurrently.
    pub(super) async fn dispatch_read_only(&self, call: &ToolCall) -> RuntimeResult<CallResult> {
        self.report_calling(call);
        Ok(match self.prepare(call).await? {
            Prepared::Finished(result) => *result,
            Prepared::Run(run) => {
                self.report_tool_started(call);
                run.execute(call).await
            }
            Prepared::Runtime(decision, _) => CallResult::new(
                &decision,
                ToolOutput::error(format!("{} is not a tool-set tool", call.name)),
            ),
        })
    }

    /// The agent's state while it handles `call` (after the response asking for it was
    /// committed; again after a wait for a decision on it).
    pub(super) fn report_calling(&self, call: &ToolCall) {
        self.report_state(AgentState::CallingTool {
            tool_use_id: call.id.clone(),
            tool: call.name.clone(),
        });
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
    async fn prepare(&self, call: &ToolCall) -> RuntimeResult<Prepared> {
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
        let context = self.tool_context(&call.id)?;
        let decision = {
            let call_context = CallContext {
                agent_id: &self.id,
                agent_kind: &self.kind,
                mode: self.mode,
                pre_plan_mode: self.pre_plan_mode,
                definition: &self.definition,
                plans: &self.run.plans,
                tool_context: &context,
                auto_gate_open: self.auto_gate_open,
                plan_grants: self.plan_grants.as_ref(),
            };
            self.run
                .gate
                .decide(&call_context, tool.as_ref(), &call.input)
        };
        let (decision, acks) = self.settle_ask(decision, call).await?;
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
            Some(sandbox) => context.with_sandbox(sandbox.clone(), self.sandbox_profile(&decision)),
            None => context,
        };
        Ok(Prepared::Run(Box::new(ToolRun {
            tool,
            decision,
            context,
            acks,
        })))
    }

    /// The sandbox profile of an allowed call: read-only in plan mode, for read-only agents
    /// and for every command the classifier proved read-only (in any mode); workspace-write
    /// otherwise (DESIGN, "Wave 2 → The Bash sandbox").
    fn sandbox_profile(&self, decision: &GateDecision) -> SandboxProfile {
        crate::sandbox::profile_for(
            decision.read_only_shell,
            self.mode,
            self.definition.read_only,
        )
    }

    fn tool_context(&self, tool_use_id: &str) -> RuntimeResult<ToolContext> {
        let mut context = ToolContext::new(self.workspace.clone(), self.run.environment.clone());
        if let Some(plan_file) = &self.plan_file {
            context = context
                .with_plan_file(plan_file)
                .map_err(|error| RuntimeError::Workspace(error.to_string()))?;
        }
        let recorder = StartRecorder {
            run: self.run.clone(),
            agent: self.id.clone(),
            tool_use_id: tool_use_id.to_owned(),
        };
        Ok(context.with_process_group_recorder(Arc::new(recorder)))
    }
}

/// What `prepare` found for a call.
enum Prepared {
    /// Refused or invalid: the result is ready.
    Finished(Box<CallResult>),
    /// Allowed, and the runtime carries it out (with the acks of an answered ask).
    Runtime(GateDecision, Vec<String>),
    /// Allowed, and the tool set runs it.
    Run(Box<ToolRun>),
}

/// An allowed call of the tool set, ready to run.
struct ToolRun {
    tool: Arc<dyn crate::tools::Tool>,
    decision: GateDecision,
    context: ToolContext,
    acks: Vec<String>,
}

impl ToolRun {
    /// The call's input, with the command text the classifier rewrote for read-only `Bash`
    /// (the flags it added are what keeps that text read-only).
    fn input(&self, call: &ToolCall) -> serde_json::Value {
        let mut input = call.input.clone();
        if let (Some(text), Some(object)) = (&self.decision.shell_run_as, input.as_object_mut()) {
            object.insert("command".into(), serde_json::Value::String(text.clone()));
        }
        input
    }

    async fn execute(self, call: &ToolCall) -> CallResult {
        let output = self.tool.call(&self.context, self.input(call)).await;
        let mut result = CallResult::new(&self.decision, output);
        result.acks = self.acks;
        result
    }
}

/// Commits the `tool_started` record of a `Bash` call with its process group, before the
/// command runs.
struct StartRecorder {
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
            self.run
                .store
                .record_tool_start(&self.run.run_id, vec![row], recorded)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
    }
}

/// The result of a call that started before a crash and never finished: its process group is
/// killed if still alive on this machine; a group on another host is only named, since only
/// that host can stop it (DESIGN, "Wave 2 → Workers").
pub(super) fn interrupted(started: &StartedCall) -> CallResult {
    const INTERRUPTED: &str = "interrupted by a crash; inspect the workspace before retrying";
    let Some(group) = started.process_group else {
        return CallResult::invalid(ToolOutput::error(INTERRUPTED));
    };
    let place = crate::machine::this_machine()
        .place_of(started.host.as_deref(), started.boot_id.as_deref());
    let text = match place {
        crate::machine::GroupPlace::Here => {
            crate::machine::kill_group(group);
            INTERRUPTED.to_owned()
        }
        crate::machine::GroupPlace::EarlierBoot => INTERRUPTED.to_owned(),
        crate::machine::GroupPlace::Elsewhere(host) => format!(
            "interrupted by a crash; the command may still be running on host {host} (process \
             group {group}), which only that host can stop; inspect the workspace before \
             retrying"
        ),
    };
    CallResult::invalid(ToolOutput::error(text))
}

pub(super) use super::records::StartedCall;

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
