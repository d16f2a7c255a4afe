//! What every agent of a run shares: the store, the models per mode, the permission gate, the
//! workspace, the plan files, who approves, and where events go.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::sync::{Arc, Mutex};

use muster_config::settings::{Budgets, ModelInfo};
use muster_config::{AgentCatalog, AgentEndpoint, PermissionMode, Policy};
use muster_mailbox::MailboxStore;
use serde_json::Value;
use tokio::sync::Semaphore;

use crate::budget::{BudgetLedger, BudgetSettings, Spend};
use crate::compaction::CompactionConfig;
use crate::model::{ModelProvider, ThinkingSettings};
use crate::tools::{ToolRegistry, Workspace};

use super::events::EventSink;
use super::gate::ToolGate;
use super::plan_files::PlanFiles;

/// The model of one mode (Cline-style: plan and act may differ).
#[derive(Clone, Debug)]
pub struct ModeModel {
    pub provider: Arc<dyn ModelProvider>,
    pub model: String,
    pub max_tokens: u64,
    pub thinking: ThinkingSettings,
}

/// The models per mode: `plan` while planning, `act` otherwise.
#[derive(Clone, Debug)]
pub struct ModelRouter {
    pub plan: ModeModel,
    pub act: ModeModel,
}

impl ModelRouter {
    /// One model for every mode.
    pub fn single(model: ModeModel) -> ModelRouter {
        ModelRouter {
            plan: model.clone(),
            act: model,
        }
    }

    pub fn for_mode(&self, mode: PermissionMode) -> &ModeModel {
        if mode == PermissionMode::Plan {
            &self.plan
        } else {
            &self.act
        }
    }
}

/// Builds the models of an agent's own endpoint (the binary's: it holds the settings and the
/// environment). `Err`: what is wrong, naming the provider and the variable.
pub type RouterBuilder = dyn Fn(&AgentEndpoint) -> Result<ModelRouter, String> + Send + Sync;

/// The models of agents with their own provider or model (a definition's `provider`, a team
/// entry's `model`, …): one router per endpoint, built once for the run.
#[derive(Clone, Default)]
pub struct AgentModels {
    builder: Option<Arc<RouterBuilder>>,
    built: Arc<Mutex<BTreeMap<AgentEndpoint, ModelRouter>>>,
}

impl std::fmt::Debug for AgentModels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentModels")
            .field("builder", &self.builder.is_some())
            .finish_non_exhaustive()
    }
}

impl AgentModels {
    pub fn new(builder: Arc<RouterBuilder>) -> AgentModels {
        AgentModels {
            builder: Some(builder),
            built: Arc::default(),
        }
    }

    /// The models of `endpoint`: `default` (the run's) when there is none.
    pub fn router(
        &self,
        default: &ModelRouter,
        endpoint: Option<&AgentEndpoint>,
    ) -> Result<ModelRouter, String> {
        let Some(endpoint) = endpoint.filter(|e| !e.is_empty()) else {
            return Ok(default.clone());
        };
        let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(router) = built.get(endpoint) {
            return Ok(router.clone());
        }
        let Some(builder) = &self.builder else {
            return Err("this run has no models for an agent's own provider".into());
        };
        let router = builder(endpoint)?;
        built.insert(endpoint.clone(), router.clone());
        Ok(router)
    }
}

/// Who decides the main agent's plans (DESIGN.md "Plans and approval").
#[derive(Clone, Debug)]
pub enum PlanApprover {
    /// A person: at the terminal when there is one, else `muster approve` (the run stops with
    /// exit code 5).
    Human,
    /// A policy file: decides at once; its answer is stored as a response from `policy`.
    Policy {
        policy: Arc<Policy>,
        responder: String,
    },
}

impl PlanApprover {
    /// The request's `responder`.
    pub fn responder(&self) -> &str {
        match self {
            PlanApprover::Human => muster_mailbox::HUMAN,
            PlanApprover::Policy { responder, .. } => responder,
        }
    }
}

/// A person's answer to a plan at the terminal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TerminalPlanDecision {
    Approve {
        mode: Option<PermissionMode>,
        feedback: Option<String>,
        clear_context: bool,
    },
    Reject {
        feedback: String,
    },
}

/// A person at the terminal (only when stdin is a TTY). Calls block; the runtime runs them on
/// a blocking thread.
pub trait Terminal: Send + Sync {
    /// `request_id` is the stored plan request's: a front end that shows it lets its person
    /// match it with the inbox and `muster approve`, which may decide it first.
    fn decide_plan(
        &self,
        request_id: &str,
        agent: &str,
        plan_file: &Path,
        plan: &str,
    ) -> TerminalPlanDecision;
    /// `None` when the person gave no answer.
    fn answer_question(&self, agent: &str, question: &str, options: &[String]) -> Option<String>;
    fn allow_call(&self, agent: &str, tool: &str, input: &Value, reason: &str) -> bool;
    /// The request the person was asked about here had been decided elsewhere first (`muster
    /// approve`, the web inbox): their answer here changed nothing.
    fn decided_elsewhere(&self, _request_id: &str, _decided_by: &str) {}
}

/// Everything the agents of one run share.
pub struct RunContext {
    pub run_id: String,
    /// This process's epoch of the run (leases belong to it).
    pub epoch: i64,
    pub store: Arc<dyn MailboxStore>,
    pub models: ModelRouter,
    /// The models of agents with an endpoint of their own.
    pub agent_models: AgentModels,
    pub catalog: Arc<AgentCatalog>,
    pub gate: Arc<dyn ToolGate>,
    pub tools: ToolRegistry,
    pub workspace: Workspace,
    pub plans: PlanFiles,
    pub approver: PlanApprover,
    pub terminal: Option<Arc<dyn Terminal>>,
    pub events: Arc<dyn EventSink>,
    /// AGENTS.md / CLAUDE.md text for system prompts.
    pub instructions: String,
    /// The base environment of `Bash`.
    pub environment: Vec<(OsString, OsString)>,
    /// How `Bash` commands are confined; `None` runs them unconfined (`[sandbox] mode = "off"`,
    /// or a kernel without Landlock in `auto` mode).
    pub sandbox: Option<Arc<crate::sandbox::Sandbox>>,
    /// Caps concurrent subagents across the run.
    pub subagents: Arc<Semaphore>,
    /// The run's budgets and what its agents have spent: every model request is checked
    /// and recorded here (the one turn counter; see [`crate::budget`]).
    pub budget: Arc<BudgetLedger>,
    /// When agents compact their context.
    pub compaction: CompactionPolicy,
    /// The run's team, in a team run (attached once the team exists).
    pub team: super::team::TeamSlot,
    /// When the runtime stops an agent its model does not stop (cut answers, stuck loops).
    pub limits: super::limits::AgentLimits,
    /// Claude Code's hooks, fired for every agent of the run (see [`crate::hooks`]).
    pub hooks: crate::hooks::HookRunner,
    /// The run's trace when traces are on: `Bash` commands get their `execute_tool` span's
    /// `TRACEPARENT` from it.
    pub trace: Option<crate::trace_ids::RunTrace>,
}

/// When agents compact their context (see [`crate::compaction`]): the trigger's settings and
/// the catalogue's models (a model without a `context_window` is never compacted; the
/// default, with no models, never compacts).
#[derive(Clone, Debug, Default)]
pub struct CompactionPolicy {
    pub config: CompactionConfig,
    pub models: BTreeMap<String, ModelInfo>,
}

impl RunContext {
    /// The ledger of a run from its `budgets.*` settings (`budgets.agent.turns` defaults to
    /// [`DEFAULT_MAX_TURNS`], a runaway guard), `--max-duration`, the run's absolute deadline
    /// (from its launch options) and the spends restored from its records (see
    /// [`super::AgentRuntime::restored_spends`]; empty for a new run).
    pub fn budget_ledger(
        budgets: &Budgets,
        max_duration_secs: Option<u64>,
        deadline_ms: Option<i64>,
        restored: BTreeMap<String, Spend>,
    ) -> BudgetLedger {
        let mut settings =
            BudgetSettings::from_settings(budgets).with_max_duration(max_duration_secs);
        settings.agent.turns.get_or_insert(DEFAULT_MAX_TURNS);
        BudgetLedger::new(settings, deadline_ms, restored)
    }
}

impl RunContext {
    /// Sends `body` in this run from `sender` to `recipient`, at most once for `key` (an
    /// agent's request: its call id keys it, so a replayed call finds the first).
    pub(super) async fn send_keyed(
        &self,
        sender: &str,
        recipient: String,
        body: muster_mailbox::MessageBody,
        key: String,
    ) -> muster_mailbox::StoreResult<muster_mailbox::Message> {
        self.store
            .send(muster_mailbox::NewMessage {
                run_id: self.run_id.clone(),
                sender: sender.to_owned(),
                recipient,
                body,
                idempotency_key: Some(key),
            })
            .await
    }

    /// Reports a committed message (`mail_sent`) and tells the team it is durable.
    pub(super) fn mail_sent(&self, message: &muster_mailbox::Message) {
        self.events.emit(super::events::mail_sent_event(message));
        if let Some(team) = self.team.get() {
            team.mail_committed(message);
        }
    }
}

/// The output limit of a model the catalogue does not know.
pub const DEFAULT_MAX_OUTPUT: u64 = 8192;

/// Default cap on concurrent subagents.
pub const DEFAULT_MAX_SUBAGENTS: usize = 4;
/// Default cap on one agent's model requests (when `budgets.agent.turns` is not set).
pub const DEFAULT_MAX_TURNS: u64 = 200;
