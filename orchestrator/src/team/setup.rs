//! Building a team run's shared [`RunContext`]: models per mode, the permission gate, the
//! workspace, plan files, the lead's own approver. (The single-agent run builds its own the
//! same way; a team has no person at a terminal, so teammates' asks go to their responder.)

use muster_agents::runtime::team::TeamSlot;
use std::collections::BTreeMap;
use std::sync::Arc;

use muster_agents::budget::Spend;
use muster_agents::runtime::{
    CompactionPolicy, DEFAULT_MAX_SUBAGENTS, EngineGate, EventSink, ModelRouter, PlanApprover,
    PlanFiles, RunContext,
};
use muster_agents::tools::{ToolRegistry, Workspace};
use muster_config::{AgentCatalog, Responder};
use muster_mailbox::MailboxStore;
use tokio::sync::Semaphore;

use crate::exit::{Exit, ExitError};
use crate::models::{Recording, model_router};
use crate::project::Project;

use super::TeamLaunch;

fn usage(message: impl Into<String>) -> anyhow::Error {
    ExitError::new(Exit::Usage, message).into()
}

pub(crate) struct ContextParts<'a> {
    pub project: &'a Project,
    pub catalog: Arc<AgentCatalog>,
    pub launch: &'a TeamLaunch,
    pub run_id: &'a str,
    pub epoch: i64,
    pub store: Arc<dyn MailboxStore>,
    pub plans: PlanFiles,
    pub events: Arc<dyn EventSink>,
    pub env: &'a BTreeMap<String, String>,
    /// A resumed run appends to its `--record` cassette; a new one starts it afresh.
    pub resumed: bool,
    /// Each agent's spend restored from the store (empty for a new run).
    pub restored: BTreeMap<String, Spend>,
}

pub(crate) fn run_context(parts: ContextParts<'_>) -> anyhow::Result<RunContext> {
    let settings = &parts.project.settings;
    let approver = match &settings.approver.value {
        Responder::Human | Responder::Lead => PlanApprover::Human,
        Responder::Policy(path) => PlanApprover::Policy {
            policy: Arc::new(
                parts
                    .launch
                    .run
                    .policies
                    .policy(parts.project.root.path(), path)?,
            ),
            responder: settings.approver.value.to_string(),
        },
    };
    let instructions = crate::lifecycle::project_instructions(parts.project);
    let workspace = Workspace::new(&parts.launch.run.workspace)
        .map_err(|e| usage(format!("--workspace: {e}")))?;
    Ok(RunContext {
        run_id: parts.run_id.to_owned(),
        epoch: parts.epoch,
        store: parts.store,
        models: models(parts.project, parts.launch, parts.env, parts.resumed)?,
        gate: Arc::new(EngineGate::new(
            settings.permissions.clone(),
            parts.catalog.clone(),
            std::env::home_dir(),
        )),
        catalog: parts.catalog,
        tools: ToolRegistry::standard().with_mcp(crate::mcp::run_config(parts.project)),
        workspace,
        plans: parts.plans,
        approver,
        terminal: None,
        events: parts.events,
        instructions,
        environment: parts
            .env
            .iter()
            .map(|(name, value)| (name.into(), value.into()))
            .collect(),
        sandbox: crate::sandbox::SandboxState::for_run(settings)?.into_run_sandbox(),
        subagents: Arc::new(Semaphore::new(DEFAULT_MAX_SUBAGENTS)),
        budget: Arc::new(RunContext::budget_ledger(
            &settings.budgets,
            None,
            parts.launch.run.deadline_ms,
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
    })
}

/// A team's models: `--record` starts a new cassette, and a resumed run appends (as a
/// single run does).
fn models(
    project: &Project,
    launch: &TeamLaunch,
    env: &BTreeMap<String, String>,
    resumed: bool,
) -> anyhow::Result<ModelRouter> {
    let recording = Recording::of(launch.run.record.as_deref(), resumed);
    model_router(&project.settings, env, launch.run.strict, recording)
}
