//! The runtime's view of the permission engine: every tool call is decided by a [`ToolGate`]
//! before it runs. [`InterimGate`] applies DESIGN.md's mode rules until the permission engine
//! (`crate::permission`) offers its entry point; the runtime only ever talks to the trait.

use std::path::Path;
use std::sync::Arc;

use muster_config::{AgentCatalog, PermissionMode};
use serde_json::Value;

use crate::shell::{self, WorkspaceReadCheck};
use crate::tools::{PathAccess, PathUse, Tool, ToolContext};

use super::plan_files::PlanFiles;
use super::records::AgentKind;

/// Tools a subagent is never offered and never allowed (DESIGN.md "Subagents").
pub const SUBAGENT_FORBIDDEN: &[&str] = &[
    "Agent",
    "EnterPlanMode",
    "ExitPlanMode",
    "AskUserQuestion",
    "SendMessage",
    "TaskCreate",
    "TaskUpdate",
    "TaskList",
    "TaskGet",
    "SpawnTeammate",
    "ReviewPlan",
    "ShutdownTeammate",
];

/// Coordination tools: mail, the task board and questions are not the workspace.
const COORDINATION: &[&str] = &[
    "AskUserQuestion",
    "SendMessage",
    "TaskCreate",
    "TaskUpdate",
    "TaskList",
    "TaskGet",
];

/// Tools that write files.
const FILE_WRITERS: &[&str] = &["Write", "Edit", "MultiEdit", "NotebookEdit"];

/// The engine's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Ask,
    Deny,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Ask => "ask",
            Verdict::Deny => "deny",
        }
    }
}

/// A decision with its reason (for the model, the records and `stream-json`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateDecision {
    pub verdict: Verdict,
    pub reason: String,
    /// `Bash` allowed because the classifier proved it read-only: it runs with the read-only
    /// git environment.
    pub read_only_shell: bool,
}

impl GateDecision {
    fn allow(reason: impl Into<String>) -> Self {
        GateDecision {
            verdict: Verdict::Allow,
            reason: reason.into(),
            read_only_shell: false,
        }
    }
    fn ask(reason: impl Into<String>) -> Self {
        GateDecision {
            verdict: Verdict::Ask,
            reason: reason.into(),
            read_only_shell: false,
        }
    }
    fn read_only_shell(mut self) -> Self {
        self.read_only_shell = true;
        self
    }

    pub fn deny(reason: impl Into<String>) -> Self {
        GateDecision {
            verdict: Verdict::Deny,
            reason: reason.into(),
            read_only_shell: false,
        }
    }
}

/// Who is calling, in what mode.
pub struct CallContext<'a> {
    pub agent_id: &'a str,
    pub agent_kind: &'a AgentKind,
    pub mode: PermissionMode,
    /// The agent's definition says `read_only: true`.
    pub read_only_agent: bool,
    pub plans: &'a PlanFiles,
    pub tool_context: &'a ToolContext,
}

/// Decides a tool call: allow, ask or deny, with a reason.
pub trait ToolGate: Send + Sync {
    fn decide(&self, call: &CallContext<'_>, tool: &dyn Tool, input: &Value) -> GateDecision;
}

/// DESIGN.md's mode rules (plan mode's allow list, `read_only` agents, subagents' forbidden
/// tools, file writes per mode, the shell classifier) without settings' allow/deny rules.
pub struct InterimGate {
    catalog: Arc<AgentCatalog>,
}

impl InterimGate {
    pub fn new(catalog: Arc<AgentCatalog>) -> InterimGate {
        InterimGate { catalog }
    }

    fn planning(&self, call: &CallContext<'_>, tool: &dyn Tool, input: &Value) -> GateDecision {
        let name = tool.name();
        let why = if call.read_only_agent {
            "this agent is read-only"
        } else {
            "plan mode"
        };
        match name {
            "ExitPlanMode" if call.read_only_agent => {
                GateDecision::deny(format!("{why}: a read-only agent has no plan to submit"))
            }
            "ExitPlanMode" => GateDecision::allow("plan mode: ExitPlanMode submits the plan"),
            "Agent" => self.read_only_subagent(input, why),
            "Write" | "Edit" | "MultiEdit" => {
                let paths = tool.accessed_paths(input).unwrap_or_default();
                if !paths.is_empty()
                    && paths
                        .iter()
                        .all(|p| call.tool_context.is_own_plan_file(&p.path))
                {
                    GateDecision::allow(format!("{why}: writing the agent's own plan file"))
                } else {
                    GateDecision::deny(format!(
                        "{why}: {name} may only write your own plan file{}; explore and plan, do not change the workspace",
                        call.tool_context
                            .plan_file()
                            .map(|p| format!(" ({})", p.display()))
                            .unwrap_or_default()
                    ))
                }
            }
            "Bash" => {
                let command = input.get("command").and_then(Value::as_str).unwrap_or("");
                let check = WorkspaceReadCheck::new(call.tool_context.workspace().root());
                match shell::classify(command, &check) {
                    shell::ShellVerdict::ReadOnly { .. } => {
                        GateDecision::allow(format!("{why}: the command is read-only"))
                            .read_only_shell()
                    }
                    shell::ShellVerdict::NotReadOnly { reason } => GateDecision::deny(format!(
                        "{why}: only read-only commands may run ({reason})"
                    )),
                }
            }
            _ if COORDINATION.contains(&name) => {
                GateDecision::allow(format!("{why}: {name} is coordination, not the workspace"))
            }
            _ if tool.is_read_only() => GateDecision::allow(format!("{why}: {name} is read-only")),
            _ => GateDecision::deny(format!(
                "{why}: {name} is not allowed; explore and plan, do not change anything"
            )),
        }
    }

    fn read_only_subagent(&self, input: &Value, why: &str) -> GateDecision {
        let definition = input
            .get("subagent_type")
            .and_then(Value::as_str)
            .unwrap_or("");
        match self.catalog.get(definition) {
            Some(found) if found.read_only => GateDecision::allow(format!(
                "{why}: {definition} is a read-only agent definition"
            )),
            Some(_) => GateDecision::deny(format!(
                "{why}: Agent may only start read-only definitions (such as Plan), not {definition}"
            )),
            None => GateDecision::deny(format!("unknown agent definition {definition:?}")),
        }
    }

    fn acting(&self, call: &CallContext<'_>, tool: &dyn Tool, input: &Value) -> GateDecision {
        let name = tool.name();
        let mode = call.mode;
        if name == "Bash" {
            let command = input.get("command").and_then(Value::as_str).unwrap_or("");
            if let Some(danger) = shell::known_dangerous(command) {
                return self.would_ask(mode, format!("known-dangerous command: {danger}"));
            }
            if mode == PermissionMode::BypassPermissions {
                return GateDecision::allow("bypassPermissions");
            }
            let check = WorkspaceReadCheck::new(call.tool_context.workspace().root());
            return match shell::classify(command, &check) {
                shell::ShellVerdict::ReadOnly { .. } => {
                    GateDecision::allow("the command is read-only").read_only_shell()
                }
                shell::ShellVerdict::NotReadOnly { reason } => {
                    self.would_ask(mode, format!("the command may change things ({reason})"))
                }
            };
        }
        if tool.is_read_only() {
            return GateDecision::allow(format!("{name} is read-only"));
        }
        if COORDINATION.contains(&name)
            || matches!(name, "EnterPlanMode" | "ExitPlanMode" | "Agent")
        {
            return GateDecision::allow(format!("{name} is coordination, not the workspace"));
        }
        if mode == PermissionMode::BypassPermissions {
            return GateDecision::allow("bypassPermissions");
        }
        if FILE_WRITERS.contains(&name)
            && matches!(mode, PermissionMode::AcceptEdits | PermissionMode::Auto)
        {
            let paths = tool.accessed_paths(input).unwrap_or_default();
            if writes_inside_workspace(call.tool_context, &paths) {
                return GateDecision::allow(format!("{mode}: file edits inside the workspace"));
            }
        }
        self.would_ask(mode, format!("{name} changes the workspace"))
    }

    fn would_ask(&self, mode: PermissionMode, reason: String) -> GateDecision {
        match mode {
            PermissionMode::DontAsk => GateDecision::deny(format!("dontAsk: {reason}")),
            PermissionMode::Auto => GateDecision::deny(format!("auto: {reason}")),
            _ => GateDecision::ask(reason),
        }
    }
}

fn writes_inside_workspace(context: &ToolContext, paths: &[PathAccess]) -> bool {
    !paths.is_empty()
        && paths
            .iter()
            .filter(|p| p.usage == PathUse::Write)
            .all(|p| context.resolve_write(&p.path).is_ok())
}

fn subagent_writes_plan_file(call: &CallContext<'_>, tool: &dyn Tool, input: &Value) -> bool {
    let paths = tool.accessed_paths(input).unwrap_or_default();
    paths.iter().any(|p| {
        p.usage == PathUse::Write
            && call
                .tool_context
                .workspace()
                .resolve_plan_file(Path::new(&p.path))
                .is_ok_and(|resolved| call.plans.contains(&resolved))
    })
}

impl ToolGate for InterimGate {
    fn decide(&self, call: &CallContext<'_>, tool: &dyn Tool, input: &Value) -> GateDecision {
        let name = tool.name();
        if let AgentKind::Subagent { .. } = call.agent_kind {
            if SUBAGENT_FORBIDDEN.contains(&name) {
                return GateDecision::deny(format!(
                    "subagents cannot use {name}: only the agent that started you can spawn agents, plan or ask"
                ));
            }
            if subagent_writes_plan_file(call, tool, input) {
                return GateDecision::deny("subagents never write plan files");
            }
        }
        if call.mode == PermissionMode::Plan || call.read_only_agent {
            return self.planning(call, tool, input);
        }
        self.acting(call, tool, input)
    }
}
