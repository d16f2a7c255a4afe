//! Team runs: `muster run -p GOAL` with `--team FILE` or a `muster.team.toml` at the project
//! root. The lead (the main agent, the team file's `lead` definition) and every teammate run
//! as their own tokio tasks with their own contexts; they talk only through the store's mail.
//!
//! - Mail reaches an agent at its next turn boundary, rendered by [`mail`] (the kind and the
//!   request id in words; another agent's plan between nonce delimiters, as untrusted data).
//! - Teammates declared by the team file start idle; an idle teammate claims the next
//!   unblocked task (the store's conditional claim) or wakes on mail. When it ends a turn its
//!   result goes to the lead as an `idle_notification`, and tasks it still holds in progress
//!   are marked completed.
//! - Plan and permission requests go to the lead's mailbox with the teammate's `responder`:
//!   `lead` (the lead's model answers with `ReviewPlan`), `human` (`muster approve` / `reject`
//!   from another process, woken through the run's socket), or `policy:FILE` (decided at once,
//!   the deciding rule recorded in the response).
//! - When the lead ends a turn with no running teammate, no pending or in-progress task and no
//!   undelivered mail, idle teammates get a `shutdown_request`, are stopped after the team
//!   file's `shutdown_timeout_ms`, and the run ends: exit 1 if a task failed, else 0. At the
//!   deadline a run waiting only on a person's decision stops with exit 5, else 3. A lead
//!   waiting on a person for its own plan blocks only itself: the run stops with exit 5 once
//!   no teammate can go on either.
//! - Every message committed is printed as `mail_sent` (the runtime reports its tools' mail,
//!   the team its own); every delivery into a context as `mail_delivered`, with `queued_ms`.
//! - A resume restores the spend recorded so far into the budget ledger, which also holds the
//!   run's deadline, started again at each resume (a resume's `--max-duration` is kept for
//!   the next one).

pub(crate) mod continuation;
mod gate;
pub(crate) mod isolation;
mod mail;
mod members;
mod merges;
pub(crate) mod placement;
mod plan_review;
mod services;
pub(crate) mod summary;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use muster_agents::runtime::{
    AgentKind, AgentOutcome, AgentRuntime, AgentSpec, EventSink, PlanFiles, Record, RunEvent,
    TRANSCRIPT,
};
use muster_agents::verification::VerificationReport;
use muster_config::{AgentCatalog, PermissionMode, Policy, TeamFile};
use muster_mailbox::{
    DeliveryState, MailboxStore, MemberKind, MessageBody, RosterEntry, RunStatus, TaskStatus,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::exit::{Exit, ExitError};
use crate::launch::RunLaunch;
use crate::launch::{OutputFormat, RunFlags};
use crate::lifecycle::context::{CheckedParts, LeadResponder, run_context};
use crate::lifecycle::setup::{NewRecord, RunSetup};
use crate::lifecycle::{self, Ending, FrontEnd, RunDriver, RunKind, StartedRun};
use crate::loading::project_root;
use crate::project::Globals;
use crate::project::Project;
use crate::stored_policies::StoredPolicies;

use crate::lifecycle::printer::RunPrinter;
use crate::stream_json::now_ms;

/// The lead's agent id.
pub const LEAD: &str = "lead";
/// The most mail an agent takes at one turn boundary.
const MAIL_BATCH: usize = 32;
/// Why the team's end asks its idle teammates to shut down.
const END_OF_RUN: &str = "the team's work is done";

fn usage(message: impl Into<String>) -> anyhow::Error {
    ExitError::new(Exit::Usage, message).into()
}

/// The team file of a `muster run`: `--team FILE`, else `muster.team.toml` at the project
/// root; `None` for a single-agent run.
pub fn team_file_for(global: &Globals, team: Option<&Path>) -> anyhow::Result<Option<PathBuf>> {
    if let Some(path) = team {
        return Ok(Some(std::path::absolute(path)?));
    }
    let root = project_root(global)?;
    Ok(TeamFile::discover(&root))
}

/// What a team run was started with (stored as the run's launch options).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeamLaunch {
    pub v: u32,
    pub kind: String,
    pub prompt: String,
    pub team_file: PathBuf,
    /// The team file's text, as read at launch.
    pub team_text: String,
    /// The git remote of teammates placed on workers (`--remote`, else the team file's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
    /// The team file's `policy:FILE` approvers trust skipped at the start (`lead` approves in
    /// their place); a resume and a worker skip them again, whatever is trusted since.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_approvers: Vec<String>,
    /// The teammates' `base_url` and `api_key_env` trust skipped at the start; a resume and
    /// a worker skip them again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_endpoints: Vec<String>,
    /// Whether trust skipped the team file's `[merge]` test gate at the start (a resume
    /// skips it again).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skipped_merge_gate: bool,
    #[serde(flatten)]
    pub run: RunLaunch,
}

/// `muster run -p GOAL` as a team run with the team file at `team_path`.
pub fn run(global: &Globals, flags: RunFlags, team_path: PathBuf) -> anyhow::Result<Exit> {
    lifecycle::execute(new_team_run(global, flags, team_path)?, None)
}

/// `muster claude`'s team run: a new run with id `run_id`, its events to `front`.
pub(crate) fn run_for_front(
    global: &Globals,
    flags: RunFlags,
    team_path: PathBuf,
    run_id: String,
    front: FrontEnd,
) -> anyhow::Result<Ending> {
    let mut kind = new_team_run(global, flags, team_path)?;
    kind.new.run_id = Some(run_id);
    kind.setup.front = Some(front);
    lifecycle::execute_to_ending(kind, None)
}

fn new_team_run(global: &Globals, flags: RunFlags, team_path: PathBuf) -> anyhow::Result<TeamRun> {
    let output = flags.output;
    let mut project = Project::load(
        global,
        project_root(global)?,
        crate::launch::overrides_from(&flags)?,
    )?;
    let catalog = crate::loading::load_catalog(&mut project)?;
    let mut team = TeamFile::load(&team_path, &project.root, &catalog)
        .map_err(|e| ExitError::new(Exit::Usage, e.to_string()))?;
    let skipped_approvers = gate_team_approvers(&project, &team_path, &mut team)?;
    let skipped_endpoints = gate_team_endpoints(&project, &team_path, &mut team);
    let skipped_merge_gate = if team_file_is_trusted(&project, &team_path) {
        None
    } else {
        team.skip_merge_gate()
    };
    let skipped: Vec<String> = [skipped_approvers.clone(), skipped_endpoints.clone()]
        .concat()
        .into_iter()
        .chain(skipped_merge_gate.clone())
        .collect();
    project.print_trust_notice_with(&skipped);
    if flags.agent.is_some() {
        return Err(usage(
            "--agent chooses a single-agent run's definition; a team's lead is the team file's `lead`",
        ));
    }
    let lead_definition = catalog
        .get(&team.lead)
        .ok_or_else(|| usage(format!("unknown lead definition {:?}", team.lead)))?;
    let used = std::iter::once(team.lead.as_str())
        .chain(team.teammates.iter().map(|t| t.definition.as_str()))
        .chain(team.spawn.definitions.iter().flatten().map(String::as_str));
    crate::loading::check_definition_prices(&project.settings, &catalog, used)?;
    check_team_endpoints(&project, &catalog, &team)?;
    let mut run = RunLaunch::from_flags(&flags, &project, lead_definition.permission_mode)?;
    let approvers = team
        .teammates
        .iter()
        .map(|teammate| &teammate.approver)
        .chain([&team.spawn.approver, &project.settings.approver.value]);
    run.policies = StoredPolicies::read(project.root.path(), approvers)?;
    let remote = flags.remote.clone().or_else(|| team.remote.clone());
    placement::check_placement(&project, &team, remote.as_deref())?;
    let launch = TeamLaunch {
        v: 1,
        kind: "team".into(),
        prompt: crate::command_prompt::prompt_for_run(
            &project, &run, &catalog, &team.lead, &flags,
        )?,
        team_file: team_path,
        team_text: team.text.clone(),
        remote,
        skipped_approvers,
        skipped_endpoints,
        skipped_merge_gate: skipped_merge_gate.is_some(),
        run,
    };
    let new = NewTeamRun {
        batch_line_id: flags.batch_line_id,
        run_id: None,
    };
    Ok(TeamRun::new(
        RunSetup::new(project, catalog, launch, output),
        team,
        new,
    ))
}

/// `muster resume [RUN]` of a team run: `record` is the run `muster resume` picked and
/// checked ([`crate::lifecycle::pick_run`]).
pub fn resume(
    global: &Globals,
    flags: &crate::launch::ResumeFlags,
    record: muster_mailbox::RunRecord,
) -> anyhow::Result<Exit> {
    let kind = resumed_team_run(global, flags, &record)?;
    lifecycle::execute(kind, Some(record))
}

/// `muster run --continue [RUN] -p PROMPT` of a team run that completed or was interrupted
/// (`record`, picked and checked by the caller): its lead takes `prompt` as a new user turn
/// ([`continuation`]: teammates kept, a fresh base when the result was applied, budgets
/// carried on).
pub fn continue_run(
    global: &Globals,
    flags: &crate::launch::ResumeFlags,
    record: muster_mailbox::RunRecord,
    prompt: String,
) -> anyhow::Result<Exit> {
    let mut kind = resumed_team_run(global, flags, &record)?;
    kind.continuation = Some((prompt, record.status));
    lifecycle::execute(kind, Some(record))
}

/// A front end's later prompt of a team session (`muster acp`, `muster claude`): the stored
/// run `record` (picked and checked by the caller) continued with `continuation` as its lead's
/// new turn, or — `None` — carried on as it stopped; its events to `front`.
pub(crate) fn resume_for_front(
    global: &Globals,
    record: muster_mailbox::RunRecord,
    continuation: Option<String>,
    front: FrontEnd,
) -> anyhow::Result<Ending> {
    let mut kind = resumed_team_run(global, &crate::launch::ResumeFlags::default(), &record)?;
    kind.continuation = continuation.map(|prompt| (prompt, record.status));
    kind.setup.front = Some(front);
    lifecycle::execute_to_ending(kind, Some(record))
}

/// The stored team run `record`, rebuilt from its launch options with `flags` applied.
fn resumed_team_run(
    global: &Globals,
    flags: &crate::launch::ResumeFlags,
    record: &muster_mailbox::RunRecord,
) -> anyhow::Result<TeamRun> {
    let setup = RunSetup::<TeamLaunch>::reopen(global, flags, record)?;
    let launch = &setup.launch;
    let mut team = TeamFile::parse(
        &launch.team_file.display().to_string(),
        &launch.team_text,
        &setup.catalog,
    )
    .map_err(|e| ExitError::new(Exit::Usage, e.to_string()))?;
    team.skip_listed_approvers(&launch.skipped_approvers);
    if !launch.skipped_endpoints.is_empty() {
        team.skip_untrusted_endpoints();
    }
    if launch.skipped_merge_gate {
        team.skip_merge_gate();
    }
    let new = NewTeamRun {
        batch_line_id: None,
        run_id: None,
    };
    Ok(TeamRun::new(setup, team, new))
}

/// A team file inside the project is the repository's: its `policy:FILE` approvers (which
/// would approve in the lead's place) and `hook:NAME` approvers (which would run code and
/// approve) apply only when the project is trusted and the file is the `muster.team.toml`
/// trust covers; otherwise `lead` approves instead of a policy and a person instead of a
/// hook. A hook approver whose reviewer trust skipped from the project's settings (a team
/// file of the user's naming the repository's reviewer) waits for a person too. Returns what
/// was skipped. A team file outside the project is the user's own.
fn gate_team_approvers(
    project: &Project,
    team_path: &Path,
    team: &mut TeamFile,
) -> anyhow::Result<Vec<String>> {
    let mut skipped = if team_file_is_trusted(project, team_path) {
        Vec::new()
    } else {
        team.skip_untrusted_approvers()
    };
    let settings = &project.settings;
    let hooks = &settings.hooks;
    let untrusted: Vec<String> = team
        .hook_approvers()
        .into_iter()
        .filter(|name| {
            let key = format!("{}.{name}", muster_config::hooks::PLAN_REVIEWERS_KEY);
            hooks.plan_reviewer(name).is_none() && settings.skipped.iter().any(|s| s.key == key)
        })
        .collect();
    skipped.extend(team.skip_approvers(
        |approver| matches!(approver, muster_config::Responder::Hook(name) if untrusted.contains(name)),
    ));
    if let Some(name) = team
        .hook_approvers()
        .into_iter()
        .find(|name| hooks.plan_reviewer(name).is_none())
    {
        let off = match &hooks.disabled_by {
            Some(origin) => format!("; `disableAllHooks` ({origin}) turns every hook off"),
            None => String::new(),
        };
        return Err(usage(format!(
            "{}: approver \"hook:{name}\" names no plan reviewer: add `\"{}\": {{\"{name}\": \
             {{\"type\": \"command\", \"command\": \"…\"}}}}` to a Claude Code settings file{off}",
            team.source,
            muster_config::hooks::PLAN_REVIEWERS_KEY
        )));
    }
    Ok(skipped)
}

/// The same rule for the teammates' `base_url` and `api_key_env`: a repository's team file
/// must not choose where prompts go or which of the user's secrets is sent, untrusted.
fn gate_team_endpoints(project: &Project, team_path: &Path, team: &mut TeamFile) -> Vec<String> {
    if team_file_is_trusted(project, team_path) {
        return Vec::new();
    }
    team.skip_untrusted_endpoints()
}

/// Whether what trust gates in the team file at `team_path` applies: a file outside the
/// project is the user's own; inside, only a trusted project's `muster.team.toml`.
fn team_file_is_trusted(project: &Project, team_path: &Path) -> bool {
    let root = muster_config::trust::canonical_root(project.root.path());
    let path = muster_config::trust::canonical_root(team_path);
    if !path.starts_with(&root) {
        return true;
    }
    let covered = path == root.join(muster_config::team::TEAM_FILE_NAME);
    covered && project.settings.trust.trusted
}

/// Whether the provider of every agent with its own (the lead's definition, each teammate's
/// entry over its definition, each definition the lead may spawn) can be built, before the
/// run exists: an error names the agent.
fn check_team_endpoints(
    project: &Project,
    catalog: &AgentCatalog,
    team: &TeamFile,
) -> anyhow::Result<()> {
    let own = |name: &str| {
        catalog
            .get(name)
            .map(|definition| definition.endpoint.clone())
            .unwrap_or_default()
    };
    let mut agents: Vec<(String, muster_config::AgentEndpoint)> = vec![(
        format!("the lead (definition `{}`)", team.lead),
        own(&team.lead),
    )];
    for teammate in &team.teammates {
        agents.push((
            format!("teammate `{}` ({})", teammate.id, team.source),
            own(&teammate.definition).overlaid_by(&teammate.endpoint),
        ));
    }
    let spawnable: Vec<&str> = match &team.spawn.definitions {
        Some(names) => names.iter().map(String::as_str).collect(),
        None => catalog.names().filter(|name| *name != "lead").collect(),
    };
    for name in spawnable {
        agents.push((format!("agent definition `{name}`"), own(name)));
    }
    crate::models::check_agent_endpoints(
        &project.settings,
        &project.process.env,
        agents.iter().map(|(who, endpoint)| (who.clone(), endpoint)),
    )
}

/// What a new team run records beside its launch options.
struct NewTeamRun {
    /// Its batch line, when a batch line's child starts it.
    batch_line_id: Option<String>,
    /// The id it takes (`muster claude`: the session's), else a fresh one.
    run_id: Option<String>,
}

impl Ending {
    /// Which worker ran each teammate placed on workers, in the result.
    fn add_workers(&mut self, workers: &BTreeMap<String, String>) {
        if let Value::Object(result) = &mut self.result
            && !workers.is_empty()
        {
            result.insert("workers".into(), json!(workers));
        }
    }

    /// The run's verification reports, whole, in the result.
    fn add_verifications(&mut self, reports: &[VerificationReport]) {
        if let Value::Object(result) = &mut self.result {
            let reports: Vec<Value> = reports.iter().map(VerificationReport::to_json).collect();
            result.insert("verifications".into(), Value::Array(reports));
        }
    }

    /// The text for `--output text`: the ending's own words, then the run's facts from the
    /// store (agents, decisions, tasks, verifications).
    async fn summarise(
        &mut self,
        store: &dyn MailboxStore,
        run_id: &str,
        team: &str,
        reports: &[VerificationReport],
    ) -> anyhow::Result<()> {
        let slug = store
            .run(run_id)
            .await?
            .map(|run| run.slug)
            .unwrap_or_default();
        let roster = store.roster(run_id).await?;
        let requests = store.requests(run_id).await?;
        let stale_merges = isolation::stale_merges(store, run_id).await?;
        let tasks = store.tasks(run_id).await?;
        let messages = store.messages(run_id, None).await?.len();
        self.text = summary::render(
            &self.text,
            &summary::RunFacts {
                run_id,
                slug: &slug,
                team,
                status: self.status.as_str(),
                exit_code: self.exit.code(),
                roster: &roster,
                requests: &requests,
                stale_merges: &stale_merges,
                tasks: &tasks,
                reports,
                messages,
            },
        );
        Ok(())
    }
}

/// A team run about to start or continue.
struct TeamRun {
    setup: RunSetup<TeamLaunch>,
    file: TeamFile,
    /// What a new run records beside its launch options (unused by a resume).
    new: NewTeamRun,
    /// `muster run --continue`: the lead's new user turn, and the status the run had.
    continuation: Option<(String, RunStatus)>,
}

impl TeamRun {
    fn new(setup: RunSetup<TeamLaunch>, file: TeamFile, new: NewTeamRun) -> TeamRun {
        TeamRun {
            setup,
            file,
            new,
            continuation: None,
        }
    }
}

impl RunKind for TeamRun {
    type Driver = TeamDriver;
    type Launch = TeamLaunch;
    const KIND: &'static str = "team";
    const AGENT: &'static str = LEAD;
    const LEAD: LeadResponder = LeadResponder::Person;

    fn setup(&self) -> &RunSetup<TeamLaunch> {
        &self.setup
    }

    /// Teammates on workers: every write wakes the run's agents in the other processes too.
    async fn open_store(&self) -> anyhow::Result<Arc<dyn MailboxStore>> {
        Ok(self
            .setup
            .project
            .open_store_with(self.file.uses_workers())
            .await?)
    }

    async fn create(&self, store: &Arc<dyn MailboxStore>) -> anyhow::Result<(String, PlanFiles)> {
        // A worktree choice that cannot work is refused before the run exists.
        crate::worktree::choose(
            placement::isolation_for(&self.file),
            &self.setup.launch.run.workspace,
            &self.setup.project.root.muster_dir(),
            "check",
        )
        .await
        .map_err(|e| {
            if self.file.uses_workers() {
                usage(format!("placement = \"workers\": {e}"))
            } else {
                usage(e.to_string())
            }
        })?;
        create_run(&self.setup, store, &self.file, &self.new).await
    }

    async fn start(self, run: &StartedRun, checked: CheckedParts) -> anyhow::Result<TeamDriver> {
        let setup = self.setup;
        let isolation = isolation::TeamIsolation::set_up(
            run.store.as_ref(),
            &run.id,
            run.plans.slug(),
            placement::isolation_for(&self.file),
            &setup.launch.run.workspace,
            &setup.project.root.muster_dir(),
        )
        .await
        .map_err(|e| usage(format!("{e:#}")))?;
        let (isolation, placed) =
            placement::lead_side(&self.file, &setup.launch, isolation).await?;
        let gate = self.file.merge.clone().map(|gate| {
            gate::MergeTestGate::new(
                gate,
                &setup.project.root.muster_dir(),
                checked.sandbox.clone(),
                run.env
                    .iter()
                    .map(|(name, value)| (name.into(), value.into()))
                    .collect(),
            )
        });
        let context = Arc::new(run_context(setup.context_parts(run, None), checked));
        let team = Team::build(TeamParts {
            run: context.clone(),
            store: run.store.clone(),
            file: self.file.clone(),
            root: setup.project.root.path().to_path_buf(),
            launch: &setup.launch,
            printer: run.printer.clone(),
            isolation: isolation.map(|isolation| Arc::new(isolation.with_gate(gate))),
            worker: None,
            placed,
        });
        if run.resumed {
            // A resumed lead goes back to its wait without asking again.
            let awaits = run.store.requests(&run.id).await?.iter().any(|r| {
                r.requester == LEAD && r.responder == muster_mailbox::HUMAN && r.response.is_none()
            });
            team.lead_awaits_decision.store(awaits, Ordering::SeqCst);
        }
        let nobody = setup
            .front
            .as_ref()
            .is_some_and(|front| front.person.is_none());
        team.nobody_answers_live.store(nobody, Ordering::SeqCst);
        let services: Arc<dyn muster_agents::runtime::team::TeamServices> = team.clone();
        context.team.attach(&services);
        let mut driver = TeamDriver {
            team: team.clone(),
            settings: setup.project.settings.clone(),
            launch: setup.launch,
            output: setup.output,
            resumed: run.resumed,
            front: setup.front,
            lead: std::sync::Mutex::new(None),
            ending: None,
        };
        if let Some((prompt, status)) = &self.continuation {
            // The continuation is committed before any teammate starts: they start from the
            // store as it left it.
            let mut lead = AgentRuntime::resume(context.clone(), LEAD, None, None).await?;
            let mode = driver.front.as_ref().and_then(|front| front.mode);
            match team.continue_lead(&mut lead, prompt, *status, mode).await? {
                continuation::Continued::Yes => driver.lead = std::sync::Mutex::new(Some(lead)),
                continuation::Continued::MidTurn => {
                    driver.ending = Some(crate::single_run::mid_turn(&run.id));
                    return Ok(driver);
                }
            }
        }
        if run.resumed {
            // What the dead process left to do is derived from the store: requests waiting on
            // a policy or a plan reviewer hook are decided, then every teammate is rebuilt
            // from its records.
            team.decide_waiting_policies().await?;
            team.resume_teammates().await?;
            team.apply_merges().await?;
        } else {
            for teammate in &self.file.teammates {
                team.start_declared(teammate, false)?;
            }
        }
        Ok(driver)
    }
}

/// The lead and teammates of a started team run.
struct TeamDriver {
    team: Arc<Team>,
    /// For the cost report's prices and providers.
    settings: muster_config::Settings,
    launch: TeamLaunch,
    output: OutputFormat,
    resumed: bool,
    /// The front end driving the run (`muster claude`): it can end the lead's turn.
    front: Option<FrontEnd>,
    /// The lead a continuation built (with its new turn committed), taken by the drive.
    lead: std::sync::Mutex<Option<AgentRuntime>>,
    /// The ending decided before anything ran (a continuation refused mid-turn).
    ending: Option<Ending>,
}

impl TeamDriver {
    fn drive_lead(&self) -> impl std::future::Future<Output = anyhow::Result<Ending>> + '_ {
        let lead = self
            .lead
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        self.team
            .drive_lead(&self.launch, self.resumed, self.front.as_ref(), lead)
    }
}

impl RunDriver for TeamDriver {
    async fn drive(&self) -> anyhow::Result<Ending> {
        if let Some(ending) = &self.ending {
            return Ok(ending.clone());
        }
        let team = &self.team;
        match self.launch.run.deadline_ms {
            Some(deadline) => {
                let left = Duration::from_millis(u64::try_from(deadline - now_ms()).unwrap_or(0));
                if left.is_zero() {
                    // Already passed (a resume): nothing runs.
                    team.deadline_ending().await
                } else {
                    match tokio::time::timeout(left, self.drive_lead()).await {
                        Ok(ending) => ending,
                        Err(_) => team.deadline_ending().await,
                    }
                }
            }
            None => self.drive_lead().await,
        }
    }

    async fn stopped_from_outside(&self) -> Ending {
        Ending::from_error(&*self.team.until_store_failure().await)
    }

    async fn wrap_up(
        &self,
        run: &StartedRun,
        driven: anyhow::Result<Ending>,
        interrupted: bool,
    ) -> anyhow::Result<Ending> {
        let team = &self.team;
        let mut ending = match driven {
            Ok(ending) => ending,
            // The deadline reached by an agent's own check ends the run as the deadline's
            // timer would have (exit 5 when only a person's decision waits), whichever fires
            // first.
            Err(error)
                if lifecycle::budget_exceeded(&error)
                    .is_some_and(|e| e.kind() == muster_agents::budget::BudgetKind::Duration) =>
            {
                team.deadline_ending().await?
            }
            Err(error) => Ending::from_error(&error),
        };
        if interrupted {
            team.abort_all().await;
        } else {
            team.stop_all().await;
        }
        // What still runs on a worker (interrupted, or it did not answer the shutdown) is
        // stopped there: the lead that placed it has ended.
        team.stop_placed(ending.status.as_str()).await;
        team.deliver_result(&mut ending).await?;
        let reports = team.verifications().await?;
        ending.add_verifications(&reports);
        let workers = team.workers_of();
        ending.add_workers(&workers);
        if self.output == OutputFormat::Text {
            ending
                .summarise(run.store.as_ref(), &run.id, &team.file.name, &reports)
                .await?;
            ending.text.push_str(&summary::workers_line(&workers));
            if let Some(report) =
                lifecycle::cost_report(&self.settings, run.store.as_ref(), &run.id).await
            {
                ending.text.push_str(&summary::costs(&report));
            }
        }
        Ok(ending)
    }
}

/// Creates the run, its slug and its roster (the lead and the declared teammates).
async fn create_run(
    setup: &RunSetup<TeamLaunch>,
    store: &Arc<dyn MailboxStore>,
    team_file: &TeamFile,
    new: &NewTeamRun,
) -> anyhow::Result<(String, PlanFiles)> {
    let lead = RosterEntry {
        agent: LEAD.into(),
        kind: MemberKind::Lead,
        definition: Some(team_file.lead.clone()),
        parent: None,
    };
    let record = NewRecord {
        run_id: new.run_id.clone(),
        team: Some(team_file.name.clone()),
        batch_line_id: new.batch_line_id.clone(),
        lead,
    };
    let (run_id, plans) = setup.create_record(store, record).await?;
    for teammate in &team_file.teammates {
        store
            .add_member(
                &run_id,
                RosterEntry {
                    agent: teammate.id.clone(),
                    kind: MemberKind::Teammate,
                    definition: Some(teammate.definition.clone()),
                    parent: None,
                },
            )
            .await?;
    }
    Ok((run_id, plans))
}

/// Where a teammate is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemberState {
    /// Waiting for mail or a task.
    Idle,
    /// A model request, a tool call or a claimed task in flight (waiting for a decision too).
    Running,
    /// Ended (shut down, stopped, or failed).
    Stopped,
}

/// What the team knows of one teammate.
pub(crate) struct Member {
    pub definition: String,
    pub responder: String,
    pub working_mode: PermissionMode,
    pub state: MemberState,
    pub task: Option<JoinHandle<()>>,
    /// Placed on workers (its task watches its work item; it runs elsewhere).
    pub placed: bool,
    /// The worker whose claim of it is the latest (placed teammates).
    pub worker: Option<String>,
    /// Its tasks not yet completed or failed when its current turn began (a task it
    /// completed itself during the turn is reported with the turn).
    pub open_before: Vec<i64>,
}

/// A running team: the shared state behind the lead's loop, the teammates' tasks and the
/// runtime's [`muster_agents::runtime::team::TeamServices`].
pub(crate) struct Team {
    me: std::sync::Weak<Team>,
    run: Arc<muster_agents::runtime::RunContext>,
    store: Arc<dyn MailboxStore>,
    file: TeamFile,
    root: PathBuf,
    /// The lead's mode at launch (ceiling of declared teammates' grants).
    lead_mode: PermissionMode,
    members: Mutex<BTreeMap<String, Member>>,
    /// The policies as the run stored them at its start (what every decision uses).
    stored_policies: StoredPolicies,
    policies: Mutex<BTreeMap<PathBuf, Arc<Policy>>>,
    /// The requests a plan reviewer hook was run for in this process (each at most once).
    reviewed: Mutex<std::collections::BTreeSet<String>>,
    /// Bumped whenever a teammate changes state.
    states: watch::Sender<u64>,
    /// Bumped whenever the task board changes.
    board: watch::Sender<u64>,
    printer: Arc<RunPrinter>,
    shutdown_timeout: Duration,
    /// Whether the lead has asked a person to decide its own plan in this process's life (set
    /// when that request is committed, or found on resume; never cleared, so no clearing can
    /// race a new request): until then the team's watch need not look at the store.
    lead_awaits_decision: AtomicBool,
    /// Whether the run is driven by a front end of this process with no person at it
    /// (`muster claude` without `--permission-prompt-tool stdio`): nobody answers the person's
    /// requests while the run is live, so a team waiting only on them ends awaiting the
    /// decision at once instead of at its deadline.
    nobody_answers_live: AtomicBool,
    /// The run's worktrees (`None`: every agent works in the shared workspace).
    isolation: Option<Arc<isolation::TeamIsolation>>,
    /// `Some(name)`: this process is worker `name` running one teammate placed on workers
    /// (the lead and the rest of the team are elsewhere).
    worker: Option<String>,
    /// The lead's side of a team with teammates on workers: what their work items carry.
    placed: Option<placement::Placing>,
    /// The store failure that stopped a teammate: the run's, not the teammate's, so the run
    /// stops with it (exit 4) and a resume carries on.
    store_failure: watch::Sender<Option<Arc<anyhow::Error>>>,
    /// Ends the running turn of the lead and of every teammate in this process at once
    /// (`interrupt_turn`: `muster interrupt`, an editor's cancel, the SDK's `interrupt()`).
    turns: muster_agents::runtime::TurnInterrupt,
}

/// What a [`Team`] is made of.
pub(crate) struct TeamParts<'a> {
    pub run: Arc<muster_agents::runtime::RunContext>,
    pub store: Arc<dyn MailboxStore>,
    pub file: TeamFile,
    pub root: PathBuf,
    pub launch: &'a TeamLaunch,
    pub printer: Arc<RunPrinter>,
    pub isolation: Option<Arc<isolation::TeamIsolation>>,
    pub worker: Option<String>,
    pub placed: Option<placement::Placing>,
}

impl Team {
    pub(crate) fn build(parts: TeamParts<'_>) -> Arc<Team> {
        let (states, _) = watch::channel(0u64);
        let (board, _) = watch::channel(0u64);
        Arc::new_cyclic(|me| Team {
            me: me.clone(),
            run: parts.run,
            store: parts.store,
            shutdown_timeout: Duration::from_millis(parts.file.shutdown_timeout_ms),
            file: parts.file,
            root: parts.root,
            stored_policies: parts.launch.run.policies.clone(),
            lead_mode: parts.launch.run.permission_mode,
            members: Mutex::new(BTreeMap::new()),
            policies: Mutex::new(BTreeMap::new()),
            reviewed: Mutex::new(Default::default()),
            states,
            board,
            printer: parts.printer,
            lead_awaits_decision: AtomicBool::new(false),
            nobody_answers_live: AtomicBool::new(false),
            isolation: parts.isolation,
            worker: parts.worker,
            placed: parts.placed,
            store_failure: watch::channel(None).0,
            turns: muster_agents::runtime::TurnInterrupt::default(),
        })
    }

    /// With teammates on workers, a front end's interrupt (an editor's cancel, the SDK's
    /// `interrupt()`) ends their turns too: it is committed as `muster interrupt` commits it,
    /// and each worker's watch ends its teammate's turn (a local turn ends at once, here).
    fn pass_front_end_interrupts_to_workers(&self) {
        if self.placed.is_none() {
            return;
        }
        let (store, run_id) = (self.store.clone(), self.run_id().to_owned());
        let runs_dir = muster_config::project::ProjectRoot::at(&self.root).runs_dir();
        // The front end may interrupt from a thread of its own (the SDK's stdin reader).
        let runtime = tokio::runtime::Handle::current();
        self.turns.reach_beyond(move || {
            let (store, run_id, runs_dir) = (store.clone(), run_id.clone(), runs_dir.clone());
            runtime.spawn(async move {
                let asked =
                    crate::turn_requests::request_interrupt(store.as_ref(), &runs_dir, &run_id);
                if let Err(error) = asked.await {
                    tracing::warn!(run = %run_id, %error, "passing an interrupt to the teammates on workers");
                }
            });
        });
    }

    /// A teammate's error that is the store's: the run cannot go on either.
    pub(crate) fn fail_run_on_store_error(&self, error: anyhow::Error) {
        if Exit::for_error(&error) == Exit::Store {
            self.store_failure.send_replace(Some(Arc::new(error)));
        }
    }

    /// Returns once a teammate's store failure has stopped the run.
    async fn until_store_failure(&self) -> Arc<anyhow::Error> {
        let mut failure = self.store_failure.subscribe();
        loop {
            if let Some(error) = failure.borrow_and_update().clone() {
                return error;
            }
            if failure.changed().await.is_err() {
                // The team holds the sender: it cannot close while this waits.
                std::future::pending::<()>().await;
            }
        }
    }

    fn run_id(&self) -> &str {
        &self.run.run_id
    }

    fn epoch(&self) -> i64 {
        self.run.epoch
    }

    pub(crate) fn set_state(&self, agent: &str, state: MemberState) {
        {
            let mut members = self.members.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(member) = members.get_mut(agent) {
                if member.state == MemberState::Stopped {
                    return;
                }
                member.state = state;
            }
        }
        self.states.send_modify(|n| *n += 1);
    }

    fn states_of(&self) -> Vec<(String, MemberState)> {
        let members = self.members.lock().unwrap_or_else(|p| p.into_inner());
        members
            .iter()
            .map(|(id, m)| (id.clone(), m.state))
            .collect()
    }

    fn lead_prompt(&self, goal: &str) -> String {
        let members = self.members.lock().unwrap_or_else(|p| p.into_inner());
        let roster: Vec<String> = members
            .iter()
            .map(|(id, m)| {
                format!(
                    "- {id} (definition {}; works in {} mode; plans approved by {})",
                    m.definition, m.working_mode, m.responder
                )
            })
            .collect();
        let roster = if roster.is_empty() {
            "No teammates yet: spawn them with SpawnTeammate.".to_owned()
        } else {
            format!("Your teammates:\n{}", roster.join("\n"))
        };
        format!(
            "{goal}\n\nYou lead team {}. {roster}\nIdle teammates claim unblocked tasks from the \
             board: put the work on it with TaskCreate (or assign a task with TaskUpdate \
             {{owner}}). Plan approval requests, permission requests, questions and teammates' \
             reports arrive as mail between your turns. End your turn when you are waiting for \
             mail; the run ends when every task is done and every teammate is idle.",
            self.file.name
        )
    }

    /// The lead's loop: run a turn, then take mail at the boundary, until the team is done.
    async fn drive_lead(
        &self,
        launch: &TeamLaunch,
        resumed: bool,
        front: Option<&FrontEnd>,
        prepared: Option<AgentRuntime>,
    ) -> anyhow::Result<Ending> {
        let spec = AgentSpec {
            agent_id: LEAD.into(),
            kind: AgentKind::Main,
            definition: self.file.lead.clone(),
            mode: launch.run.permission_mode,
            pre_plan_mode: None,
            approval_ceiling: None,
            inherited_model: None,
            endpoint: None,
        };
        let mut lead = if let Some(lead) = prepared {
            lead
        } else if resumed {
            AgentRuntime::resume(self.run.clone(), LEAD, None, None).await?
        } else {
            let prompt = self.lead_prompt(&launch.prompt);
            AgentRuntime::start_with_own_prompt(
                self.run.clone(),
                spec,
                &prompt,
                &launch.run.own_prompt(),
            )
            .await?
        };
        // One handle for the lead and the teammates: an interrupt ends every running turn.
        lead.share_turn_interrupt(&self.turns);
        if let Some(front) = front {
            front.hold_turn(self.turns.clone());
            if let Some(requests) = &front.mode_request {
                lead.take_mode_requests(requests.clone());
            }
        }
        // `muster interrupt` from another terminal ends the running turns (not with a front
        // end, which has its own).
        let _watch = match front {
            Some(_) => {
                self.pass_front_end_interrupts_to_workers();
                None
            }
            None => Some(
                crate::turn_requests::InterruptWatch::start(
                    self.store.clone(),
                    self.run_id().to_owned(),
                    self.epoch(),
                    self.turns.clone(),
                )
                .await?,
            ),
        };
        let mut states = self.states.subscribe();
        loop {
            // The lead waiting on a person for its own plan blocks only itself; the run stops
            // (exit 5) when nothing else can move either.
            let outcome = tokio::select! {
                biased;
                outcome = lead.run() => outcome?,
                ending = self.until_only_a_person_can_move_the_lead() => return ending,
            };
            let result = match outcome {
                AgentOutcome::Finished { result } => result,
                // The lead's turn ended as its hook said; the team goes on as after any end
                // of the lead's turn (mail wakes it, or the run ends), the reason its result.
                AgentOutcome::StoppedByHook { event, reason } => {
                    format!("A {event} hook stopped the lead: {reason}")
                }
                AgentOutcome::AwaitingDecision {
                    request_id,
                    plan_file,
                } => {
                    return Ok(Ending {
                        status: RunStatus::AwaitingDecision,
                        exit: Exit::AwaitingDecision,
                        result: json!({"request_id": request_id, "plan_file": plan_file}),
                        text: format!(
                            "The lead's plan in {} awaits a decision ({request_id}).",
                            plan_file.display()
                        ),
                    });
                }
                // `muster interrupt`: the run stays live (the teammates' turns were ended
                // too; they wait idle), and the lead waits for its next prompt (`muster run
                // --continue`).
                AgentOutcome::TurnInterrupted if front.is_none() => {
                    crate::turn_requests::take_next_prompt(
                        self.store.as_ref(),
                        self.run_id(),
                        self.epoch(),
                        &mut lead,
                    )
                    .await?;
                    continue;
                }
                // The lead's deferred call: the run ends awaiting a person's decision on it.
                AgentOutcome::CallDeferred { request_id, tool } => {
                    return Ok(Ending {
                        status: RunStatus::AwaitingDecision,
                        exit: Exit::AwaitingDecision,
                        result: json!({"request_id": request_id, "tool": tool}),
                        text: format!(
                            "The lead's {tool} call awaits a person's decision ({request_id})."
                        ),
                    });
                }
                // A front end's cancel ends the run as interrupted; its next prompt continues.
                AgentOutcome::TurnInterrupted => {
                    return Ok(Ending::interrupted(
                        "the lead's turn was interrupted",
                        self.run_id(),
                    ));
                }
            };
            // The lead's turn ended: take its mail, or end the run, or wait.
            let mail_for_lead = self.store.woken(self.run_id(), LEAD);
            loop {
                // Marked seen, and the mail's wake-up made, before looking: a change or mail
                // committed after the look still wakes the wait.
                states.borrow_and_update();
                let mail_committed = mail_for_lead.notified();
                tokio::pin!(mail_committed);
                mail_committed.as_mut().enable();
                let mail = self.take_lead_mail().await?;
                if !mail.is_empty() {
                    self.deliver(&mut lead, &mail).await?;
                    break;
                }
                if let Some(ending) = self.ending_if_done(&result).await? {
                    lead.end_session("other").await;
                    return Ok(ending);
                }
                // The wait takes nothing from the store: a lease inside a `select!` whose
                // other branch won would be dropped with its COMMIT already sent, leaving the
                // mail leased to no one (the lead then waited for ever on mail a teammate on
                // a worker sent as its work item ended).
                tokio::select! {
                    () = &mut mail_committed => {}
                    _ = states.changed() => {}
                }
            }
        }
    }

    /// Returns once the lead waits on a person's decision on its own plan and nothing else
    /// in the team can move: the run then stops with exit 5.
    async fn until_only_a_person_can_move_the_lead(&self) -> anyhow::Result<Ending> {
        let mut states = self.states.subscribe();
        let mut board = self.board.subscribe();
        loop {
            states.borrow_and_update();
            board.borrow_and_update();
            if let Some(ending) = self.ending_if_only_a_person_can_move().await? {
                return Ok(ending);
            }
            tokio::select! {
                changed = states.changed() => changed?,
                changed = board.changed() => changed?,
            }
        }
    }

    /// Exit 5 when the lead waits on a person's decision on its own plan and no teammate can
    /// go on: every running one waits on the lead or a person, no idle one has mail, and no
    /// idle one could claim a task.
    async fn ending_if_only_a_person_can_move(&self) -> anyhow::Result<Option<Ending>> {
        if !self.lead_awaits_decision.load(Ordering::SeqCst) {
            return Ok(None);
        }
        self.refresh_placed_states().await?;
        let requests = self.store.requests(self.run_id()).await?;
        let Some(own) = requests.iter().find(|r| {
            r.requester == LEAD && r.responder == muster_mailbox::HUMAN && r.response.is_none()
        }) else {
            return Ok(None);
        };
        let blocked: Vec<&str> = requests
            .iter()
            .filter(|r| {
                r.response.is_none()
                    && (r.responder == LEAD || r.responder == muster_mailbox::HUMAN)
            })
            .map(|r| r.requester.as_str())
            .collect();
        let states = self.states_of();
        let working = states
            .iter()
            .any(|(id, state)| *state == MemberState::Running && !blocked.contains(&id.as_str()));
        if working {
            return Ok(None);
        }
        let idle: Vec<&str> = states
            .iter()
            .filter(|(_, state)| *state == MemberState::Idle)
            .map(|(id, _)| id.as_str())
            .collect();
        let mail_for_idle = self
            .store
            .messages(self.run_id(), None)
            .await?
            .iter()
            .any(|m| m.state != DeliveryState::Acked && idle.contains(&m.recipient.as_str()));
        if mail_for_idle {
            return Ok(None);
        }
        let claimable = self
            .store
            .tasks(self.run_id())
            .await?
            .iter()
            .any(|t| t.is_claimable());
        if claimable && !idle.is_empty() {
            return Ok(None);
        }
        if let Err(exceeded) = self.check_run_budget().await? {
            if exceeded.kind() == muster_agents::budget::BudgetKind::Duration {
                return Ok(Some(self.deadline_ending().await?));
            }
            // A teammate spent the run's budget: the run cannot go on, whatever is decided.
            return Ok(Some(Ending::budget(&exceeded)));
        }
        let plan_file = own.body.plan_file().unwrap_or_default().to_owned();
        let waiting: Vec<&str> = requests
            .iter()
            .filter(|r| r.response.is_none() && r.responder == muster_mailbox::HUMAN)
            .map(|r| r.request_id.as_str())
            .collect();
        Ok(Some(Ending {
            status: RunStatus::AwaitingDecision,
            exit: Exit::AwaitingDecision,
            result: json!({"request_id": own.request_id, "plan_file": plan_file,
                           "waiting_on": waiting}),
            text: format!(
                "The lead's plan in {plan_file} awaits a decision ({}) and nothing else can go \
                 on: `muster inbox human` shows what waits; answer, then `muster resume`.",
                own.request_id
            ),
        }))
    }

    /// Renders and delivers mail into an agent's context.
    pub(crate) async fn deliver(
        &self,
        runtime: &mut AgentRuntime,
        mail: &[muster_mailbox::Message],
    ) -> anyhow::Result<()> {
        let nonce = mail::nonce();
        let previous = mail::previous_revisions(self.store.as_ref(), mail).await?;
        let rendered: Vec<_> = mail
            .iter()
            .map(|m| mail::for_agent(m, &nonce, &previous))
            .collect();
        runtime.deliver_mail(&rendered).await?;
        let now = now_ms();
        for message in mail {
            self.printer
                .emit(muster_agents::runtime::mail_delivered_event(message, now));
        }
        Ok(())
    }

    /// The `verification` event of a committed `verification_report`.
    pub(crate) fn report_verification(&self, message: &muster_mailbox::Message) {
        if let MessageBody::VerificationReport { request_id, report } = message.body.clone() {
            self.printer.emit(RunEvent::Verification {
                agent: message.sender.clone(),
                request_id,
                plan_file: report["plan_path"].as_str().map(str::to_owned),
                summary: report["summary"].clone(),
            });
        }
    }

    /// Every verification report mailed to the lead in this run (before a resume too), in
    /// commit order.
    async fn verifications(&self) -> anyhow::Result<Vec<VerificationReport>> {
        let mut reports = Vec::new();
        for message in self.store.messages(self.run_id(), Some(LEAD)).await? {
            let MessageBody::VerificationReport { report, .. } = message.body.clone() else {
                continue;
            };
            match serde_json::from_value::<VerificationReport>(report) {
                Ok(report) => reports.push(report),
                Err(error) => {
                    tracing::warn!(key = %message.key, %error, "an unreadable verification report")
                }
            }
        }
        Ok(reports)
    }

    /// Reports a message the orchestrator committed (`mail_sent`).
    pub(crate) fn sent(&self, message: &muster_mailbox::Message) {
        self.printer
            .emit(muster_agents::runtime::mail_sent_event(message));
    }

    /// The lead's pending mail, less what the team settles itself: requests a person or a
    /// policy answers are acked here (a policy decides at once; a person's wait in `muster
    /// inbox human`).
    async fn take_lead_mail(&self) -> anyhow::Result<Vec<muster_mailbox::Message>> {
        let mut mail = self
            .store
            .try_receive_batch(self.run_id(), LEAD, self.epoch(), MAIL_BATCH)
            .await?;
        let mut settled = Vec::new();
        let mut kept = Vec::new();
        for message in mail.drain(..) {
            if self.answers_the_end_of_run(&message).await? {
                // The run had ended when it was sent; a resume or a continuation has nothing
                // to tell the lead with it.
                settled.push(message.key.clone());
                continue;
            }
            let responder = message.body.clone().responder().map(str::to_owned);
            match responder.as_deref() {
                Some(r) if r != LEAD => {
                    // Decided (a policy, a plan reviewer hook) or announced (a person) when it
                    // was sent; an automated responder decides here too for a request sent
                    // before a crash (at most once).
                    self.decide_automatically(message.request_id.as_deref().unwrap_or_default())
                        .await;
                    settled.push(message.key.clone());
                }
                _ => kept.push(message),
            }
        }
        if !settled.is_empty() {
            self.store.ack(self.run_id(), settled).await?;
        }
        Ok(kept)
    }

    /// Whether `message` answers the shutdown request the team's end sent.
    async fn answers_the_end_of_run(
        &self,
        message: &muster_mailbox::Message,
    ) -> anyhow::Result<bool> {
        let MessageBody::ShutdownResponse { request_id, .. } = message.body.clone() else {
            return Ok(false);
        };
        Ok(self
            .store
            .request(self.run_id(), &request_id)
            .await?
            .is_some_and(|request| {
                matches!(
                    request.body,
                    MessageBody::ShutdownRequest { reason: Some(ref reason), .. }
                        if reason == END_OF_RUN
                )
            }))
    }

    /// The teammates holding `held` (tasks in progress) when each waits idle after a hook's
    /// `continue: false` ended its turn, nothing having reached its conversation since (the
    /// lead was told; only mail would set it going): (teammate, event, its tasks). `None`
    /// when a task is held by anyone else, who may still move it.
    async fn held_by_stopped_teammates(
        &self,
        held: &[&muster_mailbox::Task],
    ) -> anyhow::Result<Option<Vec<(String, String, Vec<i64>)>>> {
        let states = self.states_of();
        let mut stopped: BTreeMap<String, (String, Vec<i64>)> = BTreeMap::new();
        for task in held {
            let Some(owner) = task.owner.as_deref() else {
                return Ok(None);
            };
            if let Some((_, tasks)) = stopped.get_mut(owner) {
                tasks.push(task.task_id);
                continue;
            }
            let idle = states
                .iter()
                .any(|(id, state)| id == owner && *state == MemberState::Idle);
            if !idle {
                return Ok(None);
            }
            let mut stop = None;
            for record in self
                .store
                .records(self.run_id(), owner, TRANSCRIPT, 0)
                .await?
            {
                match serde_json::from_value::<Record>(record.body) {
                    Ok(Record::HookStopped { event, .. }) => stop = Some(event),
                    Ok(Record::Message { .. }) => stop = None,
                    _ => {}
                }
            }
            let Some(event) = stop else {
                return Ok(None);
            };
            stopped.insert(owner.to_owned(), (event, vec![task.task_id]));
        }
        Ok(Some(
            stopped
                .into_iter()
                .map(|(teammate, (event, tasks))| (teammate, event, tasks))
                .collect(),
        ))
    }

    /// The run's ending when the team is done: no running teammate, no pending or
    /// in-progress task, no undelivered mail; or when the only tasks left in progress are
    /// held by teammates a hook stopped.
    async fn ending_if_done(&self, lead_result: &str) -> anyhow::Result<Option<Ending>> {
        self.refresh_placed_states().await?;
        let running: Vec<String> = self
            .states_of()
            .into_iter()
            .filter(|(_, state)| *state == MemberState::Running)
            .map(|(id, _)| id)
            .collect();
        if self.has_undelivered_mail().await? {
            return Ok(None);
        }
        if !running.is_empty() {
            return self.ending_if_stuck_on_lead(&running, lead_result).await;
        }
        let tasks = self.store.tasks(self.run_id()).await?;
        let open: Vec<_> = tasks
            .iter()
            .filter(|t| matches!(t.status, TaskStatus::Pending | TaskStatus::InProgress))
            .collect();
        if open.iter().any(|t| t.is_claimable()) && self.has_idle_teammate() {
            // An idle teammate is about to claim it.
            self.board.send_modify(|n| *n += 1);
            return Ok(None);
        }
        let held: Vec<&muster_mailbox::Task> = open
            .iter()
            .copied()
            .filter(|t| t.status == TaskStatus::InProgress)
            .collect();
        // A task in progress moves while its teammate works; one a hook stopped (and the
        // lead, told so, left alone) only by mail that is not coming: the run ends.
        let stopped = match self.held_by_stopped_teammates(&held).await? {
            Some(stopped) => stopped,
            None => return Ok(None),
        };
        let failed: Vec<i64> = tasks
            .iter()
            .filter(|t| t.status == TaskStatus::Failed)
            .map(|t| t.task_id)
            .collect();
        let stuck: Vec<i64> = open
            .iter()
            .filter(|t| t.status != TaskStatus::InProgress)
            .map(|t| t.task_id)
            .collect();
        let task_rows: Vec<Value> = tasks
            .iter()
            .map(|t| json!({"task_id": t.task_id, "subject": t.subject, "status": t.status.as_str(), "owner": t.owner}))
            .collect();
        let (status, exit) = if failed.is_empty() && stuck.is_empty() && stopped.is_empty() {
            if let Some(ending) = self.ending_if_merges_wait(lead_result).await? {
                return Ok(Some(ending));
            }
            // A merge applied just now may have gone back to its teammate (a conflict with
            // the moved head, or the test gate failing on it): that mail wakes it, so the run
            // goes on (whether the mail still waits or the teammate took it already: a
            // teammate is running before it acks mail). Otherwise the merges woke no one.
            let woken = self
                .states_of()
                .iter()
                .any(|(_, state)| *state == MemberState::Running);
            if woken || self.has_undelivered_mail().await? {
                return Ok(None);
            }
            (RunStatus::Completed, Exit::Success)
        } else {
            (RunStatus::Failed, Exit::Failed)
        };
        let mut text = lead_result.to_owned();
        if !failed.is_empty() {
            text.push_str(&format!("\nFailed tasks: {failed:?}"));
        }
        if !stuck.is_empty() {
            text.push_str(&format!(
                "\nTasks left pending with no one able to take them: {stuck:?}"
            ));
        }
        for (teammate, event, tasks) in &stopped {
            text.push_str(&format!(
                "\nTasks left in progress by {teammate}, whose turn a {event} hook stopped \
                 (`continue: false`): {tasks:?}"
            ));
        }
        let mut result = json!({"result": lead_result, "tasks": task_rows});
        if !stopped.is_empty() {
            result["stopped_by_hook"] = stopped
                .iter()
                .map(|(teammate, event, tasks)| {
                    json!({"teammate": teammate, "event": event, "tasks": tasks})
                })
                .collect();
        }
        Ok(Some(Ending {
            status,
            exit,
            result,
            text,
        }))
    }

    /// Whether mail to a live agent (not a person nor a policy) waits to be delivered.
    async fn has_undelivered_mail(&self) -> anyhow::Result<bool> {
        Ok(self
            .store
            .messages(self.run_id(), None)
            .await?
            .into_iter()
            .any(|m| {
                m.state != DeliveryState::Acked
                    && m.recipient != muster_mailbox::HUMAN
                    && m.recipient != muster_mailbox::POLICY
                    && self.is_live_recipient(&m.recipient)
            }))
    }

    /// The lead ended its turn, saw all its mail, and every running teammate waits for a
    /// request only the lead answers: nothing can happen any more, so the run ends (exit 1)
    /// instead of hanging.
    async fn ending_if_stuck_on_lead(
        &self,
        running: &[String],
        lead_result: &str,
    ) -> anyhow::Result<Option<Ending>> {
        let mut undecided: Vec<(String, String)> = Vec::new();
        let mut for_a_person: Vec<(String, String)> = Vec::new();
        for request in self.store.requests(self.run_id()).await? {
            // A request in the person's own mailbox (a call a hook deferred to them), or any
            // request for the person when nobody answers them while the run is live.
            let for_the_person = request.recipient == muster_mailbox::HUMAN
                || (request.responder == muster_mailbox::HUMAN
                    && self.nobody_answers_live.load(Ordering::SeqCst));
            if request.response.is_none() && for_the_person {
                for_a_person.push((request.requester, request.request_id));
                continue;
            }
            if request.response.is_some() || request.responder != LEAD {
                continue;
            }
            // A request the lead has not seen yet (committed after the look for its mail)
            // reaches it at its next boundary: the team is not stuck.
            if !self.delivered(&request).await? {
                return Ok(None);
            }
            undecided.push((request.requester, request.request_id));
        }
        let waits_on = |agent: &String, on: &[(String, String)]| {
            on.iter().any(|(requester, _)| requester == agent)
        };
        let stuck = running
            .iter()
            .all(|agent| waits_on(agent, &undecided) || waits_on(agent, &for_a_person));
        if !stuck {
            return Ok(None);
        }
        if running.iter().any(|agent| waits_on(agent, &for_a_person)) {
            // A person's decision (a call a hook deferred) would move the team again.
            let ids: Vec<&str> = for_a_person.iter().map(|(_, id)| id.as_str()).collect();
            return Ok(Some(Ending {
                status: RunStatus::AwaitingDecision,
                exit: Exit::AwaitingDecision,
                result: json!({"result": lead_result, "waiting_on": ids}),
                text: format!(
                    "{lead_result}\nThe team waits for a person's decision on {}: `muster inbox \
                     human` shows them; `muster approve ID` or `muster reject ID --feedback …`, \
                     then `muster resume`.",
                    ids.join(", ")
                ),
            }));
        }
        let ids: Vec<&str> = undecided.iter().map(|(_, id)| id.as_str()).collect();
        Ok(Some(Ending {
            status: RunStatus::Failed,
            exit: Exit::Failed,
            result: json!({"result": lead_result, "undecided": ids}),
            text: format!(
                "{lead_result}\nThe lead ended its turn without deciding {}; the teammates \
                 waiting on it cannot go on.",
                ids.join(", ")
            ),
        }))
    }

    /// Whether a request's message reached its recipient (acked at a turn boundary).
    async fn delivered(&self, request: &muster_mailbox::RequestRecord) -> anyhow::Result<bool> {
        Ok(self
            .store
            .message(&request.message_key)
            .await?
            .is_some_and(|m| m.state == DeliveryState::Acked))
    }

    fn is_live_recipient(&self, agent: &str) -> bool {
        if agent == LEAD {
            return true;
        }
        let members = self.members.lock().unwrap_or_else(|p| p.into_inner());
        members
            .get(agent)
            .is_some_and(|m| m.state != MemberState::Stopped)
    }

    fn has_idle_teammate(&self) -> bool {
        self.states_of()
            .iter()
            .any(|(_, state)| *state == MemberState::Idle)
    }

    /// Whether the run can go on: this process's ledger (the deadline, its agents' spend),
    /// then the run's ledger in the store (every process's spend, teammates on workers
    /// included).
    async fn check_run_budget(
        &self,
    ) -> anyhow::Result<Result<(), muster_agents::budget::BudgetExceeded>> {
        if let Err(exceeded) = self.run.budget.check_run() {
            return Ok(Err(exceeded));
        }
        Ok(match self.store.run_ledger(self.run_id()).await? {
            Some(ledger) => muster_agents::budget::check_stored(
                &ledger,
                muster_agents::budget::StoredCheck::BeforeRequest,
            ),
            None => Ok(()),
        })
    }

    /// At the deadline: exit 5 when the run waits only on a person's decisions, else 3.
    async fn deadline_ending(&self) -> anyhow::Result<Ending> {
        let waiting: Vec<String> = self
            .store
            .requests(self.run_id())
            .await?
            .into_iter()
            .filter(|r| r.response.is_none() && r.responder == muster_mailbox::HUMAN)
            .map(|r| r.request_id)
            .collect();
        if waiting.is_empty() {
            return Ok(Ending {
                status: RunStatus::Budget,
                exit: Exit::Budget,
                result: json!({"error": "the run's deadline passed (--max-duration)"}),
                text: "muster: the run's deadline passed (--max-duration)".into(),
            });
        }
        Ok(Ending {
            status: RunStatus::AwaitingDecision,
            exit: Exit::AwaitingDecision,
            result: json!({"waiting_on": waiting}),
            text: format!(
                "The team waits for a person's decision on {}: `muster inbox human` shows them.",
                waiting.join(", ")
            ),
        })
    }

    /// The teammates not stopped yet.
    fn live_teammates(&self) -> Vec<String> {
        self.states_of()
            .into_iter()
            .filter(|(_, state)| *state != MemberState::Stopped)
            .map(|(id, _)| id)
            .collect()
    }

    /// Sends every live teammate a `shutdown_request`, then stops whoever has not ended
    /// after the shutdown timeout.
    async fn stop_all(&self) {
        let mut live = self.live_teammates();
        // One waiting on a person's decision stops at once, as on an interruption: asked to
        // shut down it would give its task back, and its resume must take the decision.
        let waiting = self.waiting_on_the_person().await.unwrap_or_default();
        live.retain(|id| !waiting.contains(id));
        for id in &waiting {
            self.abort_one(id).await;
        }
        for id in &live {
            let _ = self
                .request_shutdown(id, Some(END_OF_RUN.into()), None)
                .await;
        }
        for id in &live {
            self.stop_after_timeout(id).await;
        }
    }

    /// On an interruption: every agent stops at once — teammates' tasks are aborted (their
    /// Bash process groups killed as the tasks drop) and whatever tool is left unfinished is
    /// killed. Nothing is handed back or reported: `muster resume` continues from the store.
    async fn abort_all(&self) {
        let live = self.live_teammates();
        for id in live.iter().map(String::as_str).chain([LEAD]) {
            self.abort_one(id).await;
        }
    }

    /// Stops one agent at once: its task aborted, its unfinished tools killed.
    async fn abort_one(&self, id: &str) {
        if let Some(handle) = self.take_handle(id) {
            handle.abort();
            let _ = handle.await;
        }
        // A placed teammate's tools run on its worker, which stops them.
        if self.is_placed(id) {
            return;
        }
        let _ = muster_agents::runtime::team::kill_unfinished_tools(
            self.store.as_ref(),
            self.run_id(),
            id,
        )
        .await;
    }

    /// The live teammates waiting on a request in the person's own mailbox.
    async fn waiting_on_the_person(&self) -> anyhow::Result<Vec<String>> {
        let live = self.live_teammates();
        Ok(self
            .store
            .requests(self.run_id())
            .await?
            .into_iter()
            .filter(|r| r.response.is_none() && r.recipient == muster_mailbox::HUMAN)
            .map(|r| r.requester)
            .filter(|requester| live.contains(requester))
            .collect())
    }

    /// Takes a teammate's task handle (once).
    fn take_handle(&self, agent: &str) -> Option<JoinHandle<()>> {
        let mut members = self.members.lock().unwrap_or_else(|p| p.into_inner());
        members.get_mut(agent).and_then(|m| m.task.take())
    }

    /// Waits up to the shutdown timeout for a teammate's task to end, then aborts it;
    /// its unfinished tasks return to the board.
    pub(crate) async fn stop_after_timeout(&self, agent: &str) -> bool {
        let Some(mut handle) = self.take_handle(agent) else {
            return true;
        };
        let ended = tokio::time::timeout(self.shutdown_timeout, &mut handle)
            .await
            .is_ok();
        if !ended {
            handle.abort();
        }
        if !ended && !self.is_placed(agent) {
            let _ = muster_agents::runtime::team::kill_unfinished_tools(
                self.store.as_ref(),
                self.run_id(),
                agent,
            )
            .await;
        }
        // The board and the lead's mail are updated (one commit) before the teammate counts
        // as stopped: whoever watches the states then sees the returned tasks and the
        // undelivered notice, and the run cannot end in between.
        let stopped = if ended {
            self.return_tasks_of(agent).await
        } else {
            let timeout = self.shutdown_timeout.as_millis();
            let summary = |released: &[i64]| {
                format!(
                    "{agent} did not answer the shutdown request within {timeout} ms and was \
                     stopped{}",
                    members::back_on_the_board(released)
                )
            };
            self.stop_with_notice(agent, "stopped", summary).await
        };
        if let Err(error) = stopped {
            tracing::warn!(%agent, %error, "the stopped teammate's tasks");
        }
        self.set_state(agent, MemberState::Stopped);
        ended
    }
}
