//! The runtime's view of the permission engine: every tool call is decided by a [`ToolGate`]
//! before it runs. [`EngineGate`] is the production gate: it asks
//! [`crate::permission::PermissionEngine`] with the agent's context (its kind, modes,
//! definition, plan file and the run's plans directory); every rule lives in the engine.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use muster_config::settings::AutoGate as AutoGateSetting;
use muster_config::{AgentCatalog, AgentDefinition, PermissionMode, PermissionRules};
use muster_mailbox::AutoGateUpdate;
use serde_json::Value;

use crate::permission::{self, AutoGateEffect, PermissionContext, PermissionEngine};
use crate::tools::{Tool, ToolContext};

use super::plan_files::PlanFiles;
use super::records::AgentKind;

pub use crate::permission::Verdict;

/// A decision with its reason (for the model, the records and `stream-json`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateDecision {
    pub verdict: Verdict,
    pub reason: String,
    /// `Bash` allowed because the classifier proved it read-only: it runs with the read-only
    /// git environment.
    pub read_only_shell: bool,
    /// The command text read-only `Bash` runs instead of the model's (flags muster added).
    pub shell_run_as: Option<String>,
    /// What the decision does to the run's auto gate (committed with the call).
    pub auto_gate: Option<AutoGateUpdate>,
}

impl GateDecision {
    pub fn allow(reason: impl Into<String>) -> Self {
        GateDecision {
            verdict: Verdict::Allow,
            reason: reason.into(),
            read_only_shell: false,
            shell_run_as: None,
            auto_gate: None,
        }
    }

    pub fn deny(reason: impl Into<String>) -> Self {
        GateDecision {
            verdict: Verdict::Deny,
            ..GateDecision::allow(reason)
        }
    }
}

/// Who is calling, in what mode.
pub struct CallContext<'a> {
    pub agent_id: &'a str,
    pub agent_kind: &'a AgentKind,
    pub mode: PermissionMode,
    pub pre_plan_mode: Option<PermissionMode>,
    pub definition: &'a AgentDefinition,
    pub plans: &'a PlanFiles,
    pub tool_context: &'a ToolContext,
    /// The run's auto gate as of the agent's last commit.
    pub auto_gate_open: bool,
    /// The agent's plan-scoped grants, while it holds them.
    pub plan_grants: Option<&'a crate::permission::PlanGrants>,
}

/// Decides a tool call: allow, ask or deny, with a reason.
pub trait ToolGate: Send + Sync {
    fn decide(&self, call: &CallContext<'_>, tool: &dyn Tool, input: &Value) -> GateDecision;
}

/// The permission engine with the run's rules, catalog and home directory.
pub struct EngineGate {
    engine: PermissionEngine,
    rules: PermissionRules,
    catalog: Arc<AgentCatalog>,
    home_dir: Option<PathBuf>,
}

impl EngineGate {
    pub fn new(
        rules: PermissionRules,
        catalog: Arc<AgentCatalog>,
        home_dir: Option<PathBuf>,
    ) -> EngineGate {
        EngineGate {
            engine: PermissionEngine::standard(),
            rules,
            catalog,
            home_dir,
        }
    }
}

impl ToolGate for EngineGate {
    fn decide(&self, call: &CallContext<'_>, tool: &dyn Tool, input: &Value) -> GateDecision {
        let kind = match call.agent_kind {
            AgentKind::Main => permission::AgentKind::Lead,
            AgentKind::Teammate { .. } => permission::AgentKind::Teammate,
            AgentKind::Subagent { .. } => permission::AgentKind::Subagent,
        };
        let mut context = PermissionContext::new(
            kind,
            call.mode,
            call.tool_context.workspace(),
            &self.rules,
            &self.catalog,
        )
        .with_definition(call.definition);
        context.is_main = matches!(call.agent_kind, AgentKind::Main);
        context.pre_plan_mode = call.pre_plan_mode;
        context.plan_file = call.tool_context.plan_file().map(Path::to_path_buf);
        context.auto_gate = if call.auto_gate_open {
            AutoGateSetting::Open
        } else {
            AutoGateSetting::Closed
        };
        context.home_dir = self.home_dir.as_deref();
        context.plans_dir = Some(call.plans.dir().to_path_buf());
        context.mcp_tool = tool.mcp().cloned();
        context.grants = call.plan_grants;
        let decision = self.engine.decide(&context, tool.name(), input);
        GateDecision {
            verdict: decision.verdict,
            reason: decision.reason,
            read_only_shell: decision.read_only_shell,
            shell_run_as: decision.shell_run_as,
            auto_gate: match decision.auto_gate {
                AutoGateEffect::Unaffected => None,
                AutoGateEffect::CountDenial => Some(AutoGateUpdate::Denied(1)),
                AutoGateEffect::ResetCount => Some(AutoGateUpdate::Allowed),
            },
        }
    }
}
