//! The runtime's view of the permission engine: every tool call is decided by a [`ToolGate`]
//! before it runs. [`EngineGate`] is the production gate: it asks
//! [`crate::permission::PermissionEngine`] with the agent's context (its kind, modes,
//! definition, plan file and the run's plans directory); every rule lives in the engine.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use muster_config::rule::SourcedRule;
use muster_config::settings::AutoGate as AutoGateSetting;
use muster_config::{AgentCatalog, AgentDefinition, PermissionMode, PermissionRules, RuleBehavior};
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
    /// Rules the front end's person added for the session, decided with `rules`.
    session: Option<Arc<SessionRules>>,
    catalog: Arc<AgentCatalog>,
    home_dir: Option<PathBuf>,
}

/// Rules a front end's person added for its session (the `updatedPermissions` of the Agent
/// SDK's `can_use_tool` answers): kept in this process's memory only — never written to a
/// settings file, gone with the process — and decided together with the settings' rules, so
/// a deny or ask rule of either still beats an allow rule of the other.
#[derive(Debug, Default)]
pub struct SessionRules(RwLock<PermissionRules>);

impl SessionRules {
    fn with<T>(&self, change: impl FnOnce(&mut PermissionRules) -> T) -> T {
        change(&mut self.0.write().unwrap_or_else(PoisonError::into_inner))
    }

    fn list(rules: &mut PermissionRules, behavior: RuleBehavior) -> &mut Vec<SourcedRule> {
        match behavior {
            RuleBehavior::Allow => &mut rules.allow,
            RuleBehavior::Ask => &mut rules.ask,
            RuleBehavior::Deny => &mut rules.deny,
        }
    }

    /// `addRules`.
    pub fn add(&self, behavior: RuleBehavior, added: Vec<SourcedRule>) {
        self.with(|rules| Self::list(rules, behavior).extend(added));
    }

    /// `replaceRules`: the session's rules of `behavior` become `rules` (the settings' stay).
    pub fn replace(&self, behavior: RuleBehavior, replaced: Vec<SourcedRule>) {
        self.with(|rules| *Self::list(rules, behavior) = replaced);
    }

    /// `removeRules`: the session's rules of `behavior` with these texts go (the settings'
    /// stay).
    pub fn remove(&self, behavior: RuleBehavior, texts: &[String]) {
        self.with(|rules| {
            Self::list(rules, behavior)
                .retain(|rule| !texts.iter().any(|t| t == rule.value.as_str()))
        });
    }

    /// `base` with the session's rules after it, or `None` while the session has none.
    fn merged(&self, base: &PermissionRules) -> Option<PermissionRules> {
        let session = self.0.read().unwrap_or_else(PoisonError::into_inner);
        if session.allow.is_empty() && session.ask.is_empty() && session.deny.is_empty() {
            return None;
        }
        let mut merged = base.clone();
        merged.allow.extend(session.allow.iter().cloned());
        merged.ask.extend(session.ask.iter().cloned());
        merged.deny.extend(session.deny.iter().cloned());
        Some(merged)
    }
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
            session: None,
            catalog,
            home_dir,
        }
    }

    /// The gate with the session's rules of the front end driving the run.
    pub fn with_session(mut self, session: Option<Arc<SessionRules>>) -> EngineGate {
        self.session = session;
        self
    }
}

impl ToolGate for EngineGate {
    fn decide(&self, call: &CallContext<'_>, tool: &dyn Tool, input: &Value) -> GateDecision {
        let kind = match call.agent_kind {
            AgentKind::Main => permission::AgentKind::Lead,
            AgentKind::Teammate { .. } => permission::AgentKind::Teammate,
            AgentKind::Subagent { .. } => permission::AgentKind::Subagent,
        };
        let merged = self
            .session
            .as_ref()
            .and_then(|session| session.merged(&self.rules));
        let mut context = PermissionContext::new(
            kind,
            call.mode,
            call.tool_context.workspace(),
            merged.as_ref().unwrap_or(&self.rules),
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
