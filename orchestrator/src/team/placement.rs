//! Teammates placed on workers (team-file `placement = "workers"`; DESIGN, "Wave 2 →
//! Workers"). The lead stays in the process that started the run, which keeps the live-run
//! lock; each placed teammate is a work item of its own (queue `team:<run>`, id
//! `team:<run>:<agent>`), leased to one `muster worker` with a heartbeat and a fencing token,
//! as a batch line is.
//!
//! - The lead's side ([`Team::placed_teammate`]): the item enqueued (idempotently: a resume
//!   finds it stored), then watched until it is done; each claim is reported as a
//!   `teammate_placed` event naming the worker. The teammate's state (idle, running) is read
//!   from its committed transcript when the team looks at whether it is done.
//! - The worker's side ([`run_on_worker`]): the run's refs fetched from the remote into the
//!   worker's repo cache, then the team built as the lead's process builds it, with this one
//!   teammate, which runs through the same loop a local teammate runs (`Team::teammate`):
//!   its worktree restored to its recorded checkpoint (or made at the integration head),
//!   every checkpoint pushed before the turn that records it commits, its mail through the
//!   shared store (every write announced, so the lead and the teammate wake each other).
//! - Files travel by git only: the lead pushes the base and the integration head, fetches a
//!   teammate's branch before checking and applying its merge (`isolation.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use muster_agents::runtime::{AgentRuntime, PlanFiles, Record, TRANSCRIPT};
use muster_agents::runtime::{EventSink, RunEvent};
use muster_config::{Isolation, TeamFile};
use muster_mailbox::{NewWorkItem, WorkItem, WorkState};
use serde::{Deserialize, Serialize};

use super::isolation::{RemoteGit, Side, TeamIsolation};
use super::members::TeammatePlan;
use super::{MemberState, Team, TeamLaunch, TeamParts, usage};
use crate::exit::Exit;
use crate::launch::OutputFormat;
use crate::lifecycle::context::{ContextParts, LeadResponder, checked_parts, run_context};
use crate::lifecycle::printer::RunPrinter;
use crate::project::{Globals, Project};
use crate::worktree::Git;

/// The `kind` of a teammate's work item payload (a batch line's has none).
pub(crate) const TEAMMATE_ITEM: &str = "teammate";

/// What the lead's side needs to place teammates.
#[derive(Debug, Clone)]
pub(crate) struct Placing {
    pub remote: String,
    /// The workspace relative to the repository's top (a worker works in the same
    /// subdirectory of its clone).
    pub subdir: PathBuf,
}

/// A placed teammate's work item: everything a worker on another machine needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct TeammateItem {
    pub kind: String,
    pub run_id: String,
    pub agent: String,
    pub remote: String,
    #[serde(default)]
    pub subdir: PathBuf,
    pub plan: TeammatePlan,
    /// A spawned teammate's first instructions.
    #[serde(default)]
    pub first: Option<String>,
}

impl TeammateItem {
    /// The payload of a work item, when it is a teammate's.
    pub(crate) fn of(item: &WorkItem) -> Option<TeammateItem> {
        if item.payload.get("kind").and_then(|k| k.as_str()) != Some(TEAMMATE_ITEM) {
            return None;
        }
        serde_json::from_value(item.payload.clone()).ok()
    }
}

/// How a placed teammate's work item ended, seen from the lead.
enum PlacedEnd {
    /// Its worker's process ended it: shut down, or failed and told the lead itself.
    Finished,
    /// Its worker's process exited with an error (`error`: its last error line).
    Failed {
        worker: Option<String>,
        error: String,
    },
}

/// The key of a stopped teammate's item result: why its lead stopped it (the run's status).
const STOPPED: &str = "stopped";

/// Whether the item is one its lead stopped ([`Team::stop_placed`]), not one its worker
/// finished.
fn was_stopped(item: &WorkItem) -> bool {
    item.state == WorkState::Done
        && item
            .result
            .as_ref()
            .is_some_and(|r| r.get(STOPPED).is_some())
}

pub(crate) fn item_id(run_id: &str, agent: &str) -> String {
    format!("team:{run_id}:{agent}")
}

/// Teammates on workers get their files by git: the team's isolation is worktrees.
pub(crate) fn isolation_for(file: &TeamFile) -> Option<Isolation> {
    if file.uses_workers() {
        Some(Isolation::Worktree)
    } else {
        file.isolation
    }
}

/// The configuration errors of `placement = "workers"` (exit 2), before the run exists.
pub(crate) fn check_placement(
    project: &Project,
    team: &TeamFile,
    remote: Option<&str>,
) -> anyhow::Result<()> {
    if !team.uses_workers() {
        return Ok(());
    }
    if team.isolation == Some(Isolation::Shared) {
        return Err(usage(format!(
            "{}: placement = \"workers\" needs worktree isolation (a teammate on a worker \
             gets its files by git), and the team sets isolation = \"shared\": remove that \
             line or place every teammate locally",
            team.source
        )));
    }
    crate::worker::require_shared_store(project, "placement = \"workers\"")?;
    if remote.is_none() {
        return Err(usage(format!(
            "{}: placement = \"workers\" needs the run's git remote, which every worker \
             fetches from and pushes to: give --remote URL or set `remote` in the team file \
             (a local bare repository is fine); muster never uses the workspace's origin by \
             default",
            team.source
        )));
    }
    Ok(())
}

/// The lead's side of the run's isolation when teammates run on workers: the remote set
/// (the base and the integration head pushed), and what placing needs.
pub(crate) async fn lead_side(
    team: &TeamFile,
    launch: &TeamLaunch,
    isolation: Option<TeamIsolation>,
) -> anyhow::Result<(Option<TeamIsolation>, Option<Placing>)> {
    if !team.uses_workers() {
        return Ok((isolation, None));
    }
    let Some(isolation) = isolation else {
        return Err(usage(
            "placement = \"workers\" needs worktree isolation, and this run shares one \
             working tree",
        ));
    };
    let Some(remote) = launch.remote.clone() else {
        return Err(usage(
            "placement = \"workers\" needs the run's git remote: --remote URL",
        ));
    };
    let toplevel = isolation.worktrees.toplevel().to_path_buf();
    let subdir = std::fs::canonicalize(&launch.run.workspace)?
        .strip_prefix(&toplevel)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let isolation = isolation
        .with_remote(RemoteGit {
            url: remote.clone(),
            side: Side::Lead,
        })
        .await
        .map_err(|e| {
            usage(format!(
                "{e:#}; check --remote (or the team file's `remote`)"
            ))
        })?;
    Ok((Some(isolation), Some(Placing { remote, subdir })))
}

impl Team {
    /// A teammate placed on workers, seen from the lead's process: its work item enqueued,
    /// then watched until a worker finished it.
    pub(crate) async fn placed_teammate(
        self: Arc<Self>,
        plan: TeammatePlan,
        first: Option<String>,
    ) {
        let id = plan.id.clone();
        let failure = match self.watch_placed(plan, first).await {
            Ok(PlacedEnd::Finished) => None,
            Ok(PlacedEnd::Failed { worker, error }) => Some(match worker {
                Some(worker) => format!("{id} failed on worker {worker}: {error}"),
                None => format!("{id} failed on its worker: {error}"),
            }),
            Err(error) => Some(format!("{id} could not be placed on a worker: {error:#}")),
        };
        if let Some(failure) = failure {
            tracing::warn!(agent = %id, %failure, "placed teammate");
            let summary = |released: &[i64]| {
                format!("{failure}{}", super::members::back_on_the_board(released))
            };
            if let Err(error) = self.stop_with_notice(&id, "failed", summary).await {
                tracing::warn!(agent = %id, %error, "the placed teammate's notice");
            }
        }
        self.set_state(&id, MemberState::Stopped);
    }

    async fn watch_placed(
        &self,
        plan: TeammatePlan,
        first: Option<String>,
    ) -> anyhow::Result<PlacedEnd> {
        let placing = self
            .placed
            .clone()
            .ok_or_else(|| anyhow::anyhow!("the run has no remote for teammates on workers"))?;
        let agent = plan.id.clone();
        let id = item_id(self.run_id(), &agent);
        let payload = TeammateItem {
            kind: TEAMMATE_ITEM.into(),
            run_id: self.run_id().to_owned(),
            agent: agent.clone(),
            remote: placing.remote,
            subdir: placing.subdir,
            plan,
            first,
        };
        // Listening before the first look: a change between the look and the wait wakes it.
        let mut watch = self.store.watch_work().await?;
        let stored = self
            .store
            .enqueue_work(vec![NewWorkItem {
                id: id.clone(),
                queue: format!("team:{}", self.run_id()),
                payload: serde_json::to_value(&payload)?,
            }])
            .await?;
        // Stopped when the lead ended before (`stop_placed`): this resume places it again,
        // and a worker resumes it from the store.
        if stored.iter().any(was_stopped) {
            self.store.reopen_work(&id).await?;
        }
        let mut reported = 0;
        loop {
            let item = self
                .store
                .work_item(&id)
                .await?
                .ok_or_else(|| anyhow::anyhow!("work item {id} is not in the store"))?;
            if item.token != reported && item.state != WorkState::Pending {
                reported = item.token;
                if let Some(worker) = &item.worker {
                    self.set_worker(&agent, worker);
                    self.printer.emit(RunEvent::TeammatePlaced {
                        agent: agent.clone(),
                        worker: worker.clone(),
                        attempt: item.attempts,
                        item: id.clone(),
                    });
                }
            }
            if item.state == WorkState::Done {
                self.printer.emit(RunEvent::TeammateFinished {
                    agent: agent.clone(),
                    worker: item.worker.clone(),
                    item: id.clone(),
                    result: item.result.clone(),
                });
                // Its worker's process failed: before the teammate started there (a key
                // variable that worker lacks), nothing else tells the lead.
                let error = item.result.as_ref().and_then(|r| r.get("error"));
                if let Some(error) = error.and_then(|e| e.as_str()) {
                    return Ok(PlacedEnd::Failed {
                        worker: item.worker.clone(),
                        error: error.to_owned(),
                    });
                }
                return Ok(PlacedEnd::Finished);
            }
            if let Err(error) = watch.changed().await {
                tracing::warn!(%error, "the work queue's notifications; listening again");
                watch = self.store.watch_work().await?;
            }
        }
    }

    /// The lead ends (`why`: the run's status): each teammate still placed on a worker is
    /// stopped there. Its work item is stopped in the store, so its writes are refused from
    /// that commit on, and its worker, finding the lease lost at its next heartbeat, stops the
    /// teammate's process (SIGTERM, then SIGKILL after a lease). A teammate whose worker
    /// finished its item (it agreed to shut down) is left as it is.
    pub(crate) async fn stop_placed(&self, why: &str) {
        let placed: Vec<String> = {
            let members = self.members.lock().unwrap_or_else(|p| p.into_inner());
            members
                .iter()
                .filter(|(_, member)| member.placed)
                .map(|(id, _)| id.clone())
                .collect()
        };
        for agent in placed {
            let result = serde_json::json!({
                "kind": TEAMMATE_ITEM,
                "run_id": self.run_id(),
                "agent": agent,
                STOPPED: why,
            });
            let id = item_id(self.run_id(), &agent);
            match self.store.stop_work(&id, result).await {
                Ok(Some(item)) if was_stopped(&item) => {
                    tracing::info!(%agent, item = %id, "the placed teammate is stopped ({why})");
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(%agent, item = %id, %error, "the placed teammate could not be stopped");
                }
            }
        }
    }

    fn set_worker(&self, agent: &str, worker: &str) {
        let mut members = self.members.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(member) = members.get_mut(agent) {
            member.worker = Some(worker.to_owned());
        }
    }

    /// Whether `agent` runs on a worker (not in this process).
    pub(crate) fn is_placed(&self, agent: &str) -> bool {
        let members = self.members.lock().unwrap_or_else(|p| p.into_inner());
        members.get(agent).is_some_and(|m| m.placed)
    }

    /// The worker that ran each placed teammate (the latest claim).
    pub(crate) fn workers_of(&self) -> BTreeMap<String, String> {
        let members = self.members.lock().unwrap_or_else(|p| p.into_inner());
        members
            .iter()
            .filter_map(|(id, m)| m.worker.clone().map(|w| (id.clone(), w)))
            .collect()
    }

    /// Placed teammates' states as their committed transcripts say: running from the
    /// delivery of their work until the `finished` record of that turn, idle after it
    /// (stopped once their work item is done, which their watching task sees).
    pub(crate) async fn refresh_placed_states(&self) -> anyhow::Result<()> {
        let placed: Vec<String> = {
            let members = self.members.lock().unwrap_or_else(|p| p.into_inner());
            members
                .iter()
                .filter(|(_, m)| m.placed && m.state != MemberState::Stopped)
                .map(|(id, _)| id.clone())
                .collect()
        };
        for agent in placed {
            let rows = self
                .store
                .records(self.run_id(), &agent, TRANSCRIPT, 0)
                .await?;
            let Some(last) = rows.last() else {
                continue;
            };
            let state = match Record::from_stored(last) {
                Ok(Record::Finished { .. }) => MemberState::Idle,
                _ => MemberState::Running,
            };
            let changed = {
                let mut members = self.members.lock().unwrap_or_else(|p| p.into_inner());
                match members.get_mut(&agent) {
                    Some(member)
                        if member.state != MemberState::Stopped && member.state != state =>
                    {
                        member.state = state;
                        true
                    }
                    _ => false,
                }
            };
            if changed {
                self.states.send_modify(|n| *n += 1);
            }
        }
        Ok(())
    }
}

/// The worker's side: the child process of a teammate's work item (`muster worker
/// --run-item`), its store fenced by the item's token. Runs the teammate until it ends (shut
/// down, or failed), or until a signal stops it (exit 130, the item handed back).
pub(crate) fn run_on_worker(
    global: &Globals,
    item: &WorkItem,
    payload: TeammateItem,
    repo_cache: &Path,
) -> anyhow::Result<Exit> {
    let worker = item.worker.clone().unwrap_or_else(crate::worker::host_name);
    let clone = crate::worker::line::line_workspace(repo_cache, &item.id);
    let runtime = crate::lifecycle::tokio_runtime()?;
    runtime.block_on(async move {
        let mut interrupts = crate::lifecycle::signals::Interrupts::install();
        let run = run_placed(global, &worker, payload, &clone);
        tokio::select! {
            outcome = run => outcome,
            signal = interrupts.first() => {
                eprintln!("muster: {signal}: the teammate stops here; another worker resumes it");
                Ok(Exit::Interrupted)
            }
        }
    })
}

async fn run_placed(
    global: &Globals,
    worker: &str,
    payload: TeammateItem,
    clone: &Path,
) -> anyhow::Result<Exit> {
    let located = Project::locate(global)?;
    let store = located.open_store_with(true).await?;
    let record = store
        .run(&payload.run_id)
        .await?
        .ok_or_else(|| usage(format!("run {} is not in the store", payload.run_id)))?;
    let mut launch: TeamLaunch =
        serde_json::from_value(record.launch_options.clone()).map_err(|e| {
            usage(format!(
                "run {}'s launch options do not read: {e}",
                record.id
            ))
        })?;
    // The settings are the worker's own directory's (not the lead's repository's): whether
    // they are trusted is this worker's decision, by its own trust file (the CI variable never
    // applies in a worker's process), not the decision the lead stored for its files.
    let mut project = Project::load(global, located.root, launch.run.overrides())?;
    // Its own settings, but the run's prices: its spend counts against the run's ledger.
    project.price_as_stored(&launch.run);
    project.print_trust_notice();
    let catalog = Arc::new(crate::loading::load_catalog(&mut project)?);
    let mut team_file = TeamFile::parse(
        &launch.team_file.display().to_string(),
        &launch.team_text,
        &catalog,
    )
    .map_err(|e| usage(e.to_string()))?;
    // The team file is the lead's: what trust skipped of it at the start stays skipped here.
    team_file.skip_listed_approvers(&launch.skipped_approvers);
    if !launch.skipped_endpoints.is_empty() {
        team_file.skip_untrusted_endpoints();
    }
    let remote = RemoteGit {
        url: payload.remote.clone(),
        side: Side::Worker,
    };
    prepare_clone(&remote, clone, &record.slug).await?;
    let workspace = clone.join(&payload.subdir);
    std::fs::create_dir_all(&workspace)?;
    launch.run.workspace = workspace.clone();
    let isolation = TeamIsolation::set_up(
        store.as_ref(),
        &record.id,
        &record.slug,
        Some(Isolation::Worktree),
        &workspace,
        &clone.join(".muster"),
    )
    .await?
    .ok_or_else(|| anyhow::anyhow!("run {} shares one working tree", record.id))?
    .with_remote(remote)
    .await?;
    // The worker's spans join the run's trace: the same ids from the same keys. What it sent
    // is noted in the store, for whichever worker resumes the teammate after a kill.
    let sent = crate::traces::queue::SentNotes::Store {
        store: store.clone(),
        run_id: record.id.clone(),
        agent: payload.agent.clone(),
    };
    let traces = crate::lifecycle::run_traces_noted(&project, &launch.run, &record.id, sent)?;
    let printer = Arc::new(
        RunPrinter::new(
            &record.id,
            super::LEAD,
            OutputFormat::StreamJson { partial: false },
            false,
        )
        .on_worker(worker)
        .with_traces(traces.clone()),
    );
    let restored =
        AgentRuntime::restored_spends(store.as_ref(), &record.id, &project.settings.models).await?;
    let env = (*project.process.env).clone();
    let checked = checked_parts(&project, &launch.run, &env, true, LeadResponder::Person)?;
    let context = Arc::new(run_context(
        ContextParts {
            project: &project,
            catalog,
            run: &launch.run,
            run_id: &record.id,
            epoch: record.epoch,
            store: store.clone(),
            plans: PlanFiles::new(project.plans_dir(), &record.slug),
            events: printer.clone(),
            terminal: None,
            env: &env,
            restored,
            trace: traces.as_ref().map(|traces| traces.run_trace().clone()),
            front: None,
        },
        checked,
    ));
    let team = Team::build(TeamParts {
        run: context.clone(),
        store: store.clone(),
        file: team_file,
        root: project.root.path().to_path_buf(),
        launch: &launch,
        printer: printer.clone(),
        isolation: Some(Arc::new(isolation)),
        worker: Some(worker.to_owned()),
        placed: None,
    });
    let services: Arc<dyn muster_agents::runtime::team::TeamServices> = team.clone();
    context.team.attach(&services);
    // The lead's (and other agents') commits wake this teammate across processes.
    let _listening = store.listen_run(&record.id).await?;
    let agent = payload.agent.clone();
    let started = !store
        .records(&record.id, &agent, TRANSCRIPT, 0)
        .await?
        .is_empty();
    eprintln!(
        "muster worker {worker}: teammate {agent} of run {} ({})",
        record.id,
        if started {
            "resumed from the store"
        } else {
            "started"
        }
    );
    if !started {
        check_teammate_models(&context, worker, &payload.plan)?;
    }
    if let (true, Some(traces)) = (started, &traces) {
        let roster = store.roster(&record.id).await?;
        traces
            .send_unsent_of_teammate(store.as_ref(), &agent, &roster)
            .await;
    }
    // `muster interrupt` (or the lead's front end) ends this teammate's running turn here too;
    // the interrupts of the lead's process, whose epoch placed it, are the ones it takes.
    let _interrupts = crate::turn_requests::InterruptWatch::start(
        store.clone(),
        record.id.clone(),
        record.epoch,
        team.turns.clone(),
    )
    .await?;
    let first = if started { None } else { payload.first.clone() };
    team.start_teammate(payload.plan, first, started)?;
    if let Some(handle) = team.take_handle(&agent) {
        let _ = handle.await;
    }
    if let Some(traces) = &traces {
        traces.flush().await;
    }
    Ok(Exit::Success)
}

/// Whether this worker can build the teammate's own provider (its key variable set here, …):
/// the error names the worker, the teammate and what is missing.
fn check_teammate_models(
    context: &muster_agents::runtime::RunContext,
    worker: &str,
    plan: &super::members::TeammatePlan,
) -> anyhow::Result<()> {
    let endpoint = context
        .catalog
        .get(&plan.definition)
        .map(|definition| definition.endpoint.overlaid_by(&plan.endpoint))
        .unwrap_or_else(|| plan.endpoint.clone());
    context
        .agent_models
        .router(&context.models, Some(&endpoint))
        .map(drop)
        .map_err(|e| anyhow::anyhow!("muster worker {worker}: teammate {}: {e}", plan.id))
}

/// The worker's copy of the run's repository: a repository in the repo cache (made once)
/// with the run's refs fetched from the remote, its HEAD on the base so worktrees can be
/// made from it.
async fn prepare_clone(remote: &RemoteGit, clone: &Path, slug: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(clone)?;
    let git = Git::new(clone);
    if !clone.join(".git").exists() {
        git.run(&["init", "--quiet"]).await?;
    }
    remote.fetch_run(&git, slug).await?;
    if git.resolve("HEAD").await?.is_none() {
        let base = format!("refs/muster/{slug}/base");
        git.run(&["checkout", "--quiet", "--detach", &base])
            .await
            .map_err(|e| {
                anyhow::anyhow!("the remote {} has no base of run {slug}: {e}", remote.url)
            })?;
    }
    Ok(())
}
