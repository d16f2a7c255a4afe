//! What every kind of run is set up from — its project, agent definitions, launch options,
//! output and front end — and the steps of that setup the kinds share: reopening a stored
//! run's launch options for a resume, creating a new run's record, and the parts of its
//! context.

use std::sync::Arc;

use muster_agents::runtime::{PlanFiles, Terminal};
use muster_config::AgentCatalog;
use muster_config::settings::AutoGate as AutoGateSetting;
use muster_mailbox::{AutoGate, MailboxStore, NewRun, RosterEntry, RunRecord};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::context::ContextParts;
use super::{FrontEnd, StartedRun};
use crate::exit::{Exit, ExitError};
use crate::launch::{OutputFormat, ResumeFlags, RunLaunch};
use crate::loading::project_root;
use crate::project::{Globals, Project};

/// A kind's launch options: stored with its run (a resume rebuilds the run from them),
/// holding the options every kind has.
pub(crate) trait StoredLaunch: Serialize + DeserializeOwned {
    fn run(&self) -> &RunLaunch;
    fn run_mut(&mut self) -> &mut RunLaunch;
}

/// Each kind's launch options hold the common ones as their flattened `run`.
macro_rules! stored_launch {
    ($($launch:ty),*) => {$(
        impl StoredLaunch for $launch {
            fn run(&self) -> &RunLaunch {
                &self.run
            }

            fn run_mut(&mut self) -> &mut RunLaunch {
                &mut self.run
            }
        }
    )*};
}

stored_launch!(crate::single_run::LaunchOptions, crate::team::TeamLaunch);

/// A run about to start or continue, whatever its kind.
pub(crate) struct RunSetup<L> {
    pub project: Project,
    pub catalog: Arc<AgentCatalog>,
    pub launch: L,
    pub output: OutputFormat,
    /// The front end driving the run in this process (`muster acp`, `muster claude`).
    pub front: Option<FrontEnd>,
}

/// What a new run's record holds beside what its setup gives.
pub(crate) struct NewRecord {
    /// The id the run takes (`muster acp`: the session's), else a fresh one.
    pub run_id: Option<String>,
    /// The team file's name (`None`: a single-agent run).
    pub team: Option<String>,
    pub batch_line_id: Option<String>,
    /// The first member of its roster: the main agent or the lead.
    pub lead: RosterEntry,
}

impl<L: StoredLaunch> RunSetup<L> {
    pub(crate) fn new(
        project: Project,
        catalog: AgentCatalog,
        launch: L,
        output: OutputFormat,
    ) -> RunSetup<L> {
        RunSetup {
            project,
            catalog: Arc::new(catalog),
            launch,
            output,
            front: None,
        }
    }

    /// The stored run `record` reopened: its launch options with `flags` applied, its project
    /// loaded as they say and its agent definitions.
    pub(crate) fn reopen(
        global: &Globals,
        flags: &ResumeFlags,
        record: &RunRecord,
    ) -> anyhow::Result<RunSetup<L>> {
        let mut launch: L = serde_json::from_value(record.launch_options.clone()).map_err(|e| {
            ExitError::new(
                Exit::Usage,
                format!(
                    "run {} cannot be resumed by this version: its launch options do not read ({e})",
                    record.id
                ),
            )
        })?;
        launch.run_mut().apply_resume_flags(flags)?;
        let root = project_root(global)?;
        launch.run().warn_of_changed_policies(root.path());
        let mut project = Project::load_for_run(global, root, launch.run())?;
        let catalog = crate::loading::load_catalog(&mut project)?;
        Ok(RunSetup::new(project, catalog, launch, flags.output))
    }

    /// Creates the new run's record, with `new.lead` its roster's first member: its id and
    /// its reserved plan files.
    pub(crate) async fn create_record(
        &self,
        store: &Arc<dyn MailboxStore>,
        new: NewRecord,
    ) -> anyhow::Result<(String, PlanFiles)> {
        let mut rng = fastrand::Rng::new();
        let plans = PlanFiles::reserve(self.project.plans_dir(), &mut rng)?;
        let settings = &self.project.settings;
        let id = new
            .run_id
            .unwrap_or_else(|| crate::ids::new_run_id(&mut rng));
        store
            .create_run(NewRun {
                id: id.clone(),
                slug: plans.slug().to_owned(),
                team: new.team,
                workspace: self.launch.run().workspace.display().to_string(),
                batch_line_id: new.batch_line_id,
                auto_gate: AutoGate {
                    open: settings.auto_gate.value == AutoGateSetting::Open,
                    consecutive_denials: 0,
                    limit: u32::try_from(settings.auto_gate_denial_limit.value).unwrap_or(u32::MAX),
                },
                launch_options: serde_json::to_value(&self.launch)?,
                project_id: Some(self.project.project_id()?),
            })
            .await?;
        store.add_member(&id, new.lead).await?;
        Ok((id, plans))
    }

    /// The parts of the context of the taken-over `run`; `terminal`, a person at this
    /// process's terminal to ask.
    pub(crate) fn context_parts<'a>(
        &'a self,
        run: &'a StartedRun,
        terminal: Option<Arc<dyn Terminal>>,
    ) -> ContextParts<'a> {
        ContextParts {
            project: &self.project,
            catalog: self.catalog.clone(),
            run: self.launch.run(),
            run_id: &run.id,
            epoch: run.epoch,
            store: run.store.clone(),
            plans: run.plans.clone(),
            events: run.printer.clone(),
            terminal,
            env: &run.env,
            restored: run.restored.clone(),
            trace: run.trace(),
            front: self.front.as_ref(),
        }
    }
}
