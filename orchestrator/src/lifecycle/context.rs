//! The one builder of a run's shared [`RunContext`], for single runs, team runs and teammates
//! placed on workers: what is checked before a run exists ([`checked_parts`]: the plan
//! approver, the workspace, the models, the sandbox) and what the run then adds (its id, epoch,
//! store, plan files, events, restored spends).

use std::collections::BTreeMap;
use std::sync::Arc;

use muster_agents::budget::Spend;
use muster_agents::hooks::HookRunner;
use muster_agents::runtime::team::TeamSlot;
use muster_agents::runtime::{
    AgentModels, CompactionPolicy, DEFAULT_MAX_SUBAGENTS, EngineGate, EventSink, ModelRouter,
    PlanApprover, PlanFiles, RunContext, Terminal,
};
use muster_agents::sandbox::Sandbox;
use muster_agents::tools::{ToolRegistry, Workspace};
use muster_config::{AgentCatalog, Responder};
use muster_mailbox::MailboxStore;
use tokio::sync::Semaphore;

use crate::exit::{Exit, ExitError};
use crate::launch::RunLaunch;
use crate::models::{Recording, run_models};
use crate::project::Project;

fn usage(message: impl Into<String>) -> anyhow::Error {
    ExitError::new(Exit::Usage, message).into()
}

/// Who may answer the main agent's (the lead's) own plans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeadResponder {
    /// A single run has no lead above its agent: `--approver lead` is refused.
    Refused,
    /// A team's lead is answered by a person when its approver is `lead`.
    Person,
}

/// What can fail on configuration, checked before the run is created.
pub(crate) struct CheckedParts {
    pub approver: PlanApprover,
    pub workspace: Workspace,
    pub models: ModelRouter,
    pub agent_models: AgentModels,
    pub sandbox: Option<Arc<Sandbox>>,
}

/// Checks the approver, the workspace, the models and the sandbox of a run launched as `run`;
/// `resumed`: a resumed run appends to its `--record` cassette, a new one starts it afresh.
pub(crate) fn checked_parts(
    project: &Project,
    run: &RunLaunch,
    env: &BTreeMap<String, String>,
    resumed: bool,
    lead: LeadResponder,
) -> anyhow::Result<CheckedParts> {
    let settings = &project.settings;
    let approver = match (&settings.approver.value, lead) {
        (Responder::Human, _) | (Responder::Lead, LeadResponder::Person) => PlanApprover::Human,
        (Responder::Lead, LeadResponder::Refused) => {
            return Err(usage(
                "--approver lead needs a team; a single-agent run takes human or policy:FILE",
            ));
        }
        (Responder::Hook(_), _) => {
            return Err(usage(
                "a plan reviewer hook (hook:NAME) decides teammates' plans in a team file; a \
                 single-agent run's approver is human or policy:FILE",
            ));
        }
        (Responder::Policy(path), _) => PlanApprover::Policy {
            policy: Arc::new(run.policies.policy(project.root.path(), path)?),
            responder: settings.approver.value.to_string(),
        },
    };
    let workspace = Workspace::new(&run.workspace)
        .map_err(|e| usage(format!("--workspace: {e}")))?
        .with_additional(&settings.additional_directory_paths());
    let recording = Recording::of(run.record.as_deref(), resumed);
    let models = run_models(settings, env, run.strict, recording)?;
    Ok(CheckedParts {
        approver,
        workspace,
        models: models.router,
        agent_models: models.agents,
        sandbox: crate::sandbox::SandboxState::for_run(settings, project.process.home.clone())?
            .into_run_sandbox(),
    })
}

/// The run the context serves and who hears of it.
pub(crate) struct ContextParts<'a> {
    pub project: &'a Project,
    pub catalog: Arc<AgentCatalog>,
    pub run: &'a RunLaunch,
    pub run_id: &'a str,
    pub epoch: i64,
    pub store: Arc<dyn MailboxStore>,
    pub plans: PlanFiles,
    pub events: Arc<dyn EventSink>,
    /// A person at this process's terminal, when there is one to ask.
    pub terminal: Option<Arc<dyn Terminal>>,
    pub env: &'a BTreeMap<String, String>,
    /// Each agent's spend restored from the store (empty for a new run).
    pub restored: BTreeMap<String, Spend>,
    /// The run's trace, when traces are on.
    pub trace: Option<muster_agents::trace_ids::RunTrace>,
    /// The front end driving the run in this process, if any: its program's hook callbacks,
    /// the rules its person added for the session, the MCP servers it gave.
    pub front: Option<&'a super::FrontEnd>,
}

/// The run's shared context.
pub(crate) fn run_context(parts: ContextParts<'_>, checked: CheckedParts) -> RunContext {
    let settings = &parts.project.settings;
    let environment: Vec<(std::ffi::OsString, std::ffi::OsString)> = parts
        .env
        .iter()
        .map(|(name, value)| (name.into(), value.into()))
        .collect();
    RunContext {
        hooks: HookRunner::new(
            Arc::new(settings.hooks.clone()),
            checked.sandbox.clone(),
            environment.clone(),
        )
        .with_callbacks(parts.front.and_then(|front| front.hook_callbacks.clone()))
        .with_launcher(crate::sandbox::hook_launcher()),
        run_id: parts.run_id.to_owned(),
        epoch: parts.epoch,
        store: parts.store,
        models: checked.models,
        agent_models: checked.agent_models,
        gate: Arc::new(
            EngineGate::new(
                settings.permissions.clone(),
                parts.catalog.clone(),
                parts.project.process.home.clone(),
            )
            .with_session(parts.front.and_then(|front| front.session_rules.clone())),
        ),
        catalog: parts.catalog,
        tools: ToolRegistry::standard()
            .with_mcp(crate::mcp::session_config(parts.project, parts.front))
            .with_skills(Arc::new(crate::loading::load_skills(parts.project))),
        workspace: checked.workspace,
        plans: parts.plans,
        approver: checked.approver,
        terminal: parts.terminal,
        events: parts.events,
        instructions: super::project_instructions(parts.project),
        environment,
        sandbox: checked.sandbox,
        subagents: Arc::new(Semaphore::new(DEFAULT_MAX_SUBAGENTS)),
        budget: Arc::new(RunContext::budget_ledger(
            &settings.budgets,
            None,
            parts.run.deadline_ms,
            parts.restored,
        )),
        limits: muster_agents::runtime::AgentLimits::from_settings(&settings.limits),
        compaction: CompactionPolicy {
            config: muster_agents::compaction::CompactionConfig::from_settings(
                &settings.compaction,
            ),
            models: settings.models.clone(),
        },
        team: TeamSlot::default(),
        trace: parts.trace,
    }
}
