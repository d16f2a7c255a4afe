//! The one life of a run, for single-agent runs, team runs and batch lines (a batch line is
//! either): [`execute`] checks the configuration, creates the run or reopens the one to
//! resume, takes it over (live-run lock, log, epoch, a resume's launch options), builds its
//! context ([`context`]), races its drive against a signal, a failure found outside the drive
//! and the loss of the live lock, then commits its ending and prints it ([`printer`]). A run
//! kind ([`RunKind`], [`RunDriver`]) supplies only how it creates its run and drives its
//! agents, so exit codes, errors and resume rules agree by construction. Signals are installed
//! here and nowhere else ([`signals`]); a tidy test keeps `tokio::signal`, the take-over and
//! `RunContext` literals inside this module.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use muster_agents::budget::{BudgetExceeded, Spend};
use muster_agents::runtime::{AgentRuntime, CostReport, PlanFiles};
use muster_mailbox::live::LiveRun;
use muster_mailbox::{MailboxStore, RunRecord, RunStatus};
use serde_json::{Value, json};

use crate::exit::{Exit, ExitError};
use crate::launch::OutputFormat;
use crate::project::Project;
use crate::serve::stop;

pub(crate) mod context;
pub(crate) mod printer;
pub(crate) mod setup;
pub(crate) mod signals;

use context::{CheckedParts, LeadResponder};
use printer::RunPrinter;
use setup::{RunSetup, StoredLaunch};
use signals::Interrupts;

use crate::traces::config::TraceConfig;
use crate::traces::queue::SentNotes;
use crate::traces::{RunTraces, TraceParts};

/// A kind of run (single, team): how it checks its configuration, creates its run and starts
/// its agents. [`execute`] does the rest.
pub(crate) trait RunKind {
    type Driver: RunDriver;
    /// The run log's kind: `single` or `team`.
    const KIND: &'static str;
    /// The agent `run_finished` names: the main agent or the lead.
    const AGENT: &'static str;
    /// Who answers the main agent's own plans when the approver is `lead`.
    const LEAD: LeadResponder;

    /// The kind's launch options, stored with the run.
    type Launch: StoredLaunch;

    fn setup(&self) -> &RunSetup<Self::Launch>;
    fn project(&self) -> &Project {
        &self.setup().project
    }
    fn output(&self) -> OutputFormat {
        self.setup().output
    }
    fn launch(&self) -> &crate::launch::RunLaunch {
        self.setup().launch.run()
    }
    /// The launch options stored with the run (for a resume: with its flags applied).
    fn launch_options(&self) -> anyhow::Result<Value> {
        Ok(serde_json::to_value(&self.setup().launch)?)
    }
    /// Opens the run's store (a team with teammates on workers wakes other processes too).
    async fn open_store(&self) -> anyhow::Result<Arc<dyn MailboxStore>> {
        Ok(self.project().open_store().await?)
    }
    /// Creates a new run (its record and roster): its id and plan files.
    async fn create(&self, store: &Arc<dyn MailboxStore>) -> anyhow::Result<(String, PlanFiles)>;
    /// Builds the run's agents on the taken-over `run`.
    async fn start(self, run: &StartedRun, checked: CheckedParts) -> anyhow::Result<Self::Driver>;
    /// The front end that reads the run's events instead of stdout (`muster acp`), if any.
    fn front_end(&self) -> Option<&FrontEnd> {
        self.setup().front.as_ref()
    }
}

/// A front end driving a run in this process (`muster acp`): it gets every event, nothing of
/// the run is printed on stdout, and it can end the lead's running turn.
#[derive(Clone)]
pub(crate) struct FrontEnd {
    pub events: Arc<dyn muster_agents::runtime::EventSink>,
    /// Filled with the main agent's [`muster_agents::runtime::TurnInterrupt`] once it exists.
    pub turn: Arc<std::sync::Mutex<Option<muster_agents::runtime::TurnInterrupt>>>,
    /// The person at the front end, who answers what the run asks its person; `None` leaves
    /// the requests in the store for `muster approve` and the web inbox (the run stops
    /// awaiting a decision).
    pub person: Option<Arc<dyn muster_agents::runtime::Terminal>>,
    /// The mode the front end's person set for the main agent (`set_permission_mode`,
    /// checked against the run's ceilings), taken with its next new turn.
    pub mode: Option<muster_config::PermissionMode>,
    /// The hook callbacks the front end's program registered (the Agent SDK's `hooks`): they
    /// fire for the agents of this process where the settings' hooks do.
    pub hook_callbacks: Option<Arc<dyn muster_agents::hooks::HookCallbacks>>,
    /// The permission rules the front end's person added for its session
    /// (`updatedPermissions`), decided with the settings' rules.
    pub session_rules: Option<Arc<muster_agents::runtime::SessionRules>>,
    /// The MCP servers the front end gave for its session (an editor's `session/new`, a
    /// program's `--mcp-config`): the user's own, started without project trust, in the
    /// sandbox like every server; each replaces a configured server of its name.
    pub mcp_servers: Vec<muster_config::McpServerConfig>,
    /// Start only those, none of the configured servers (`--strict-mcp-config`).
    pub mcp_servers_only: bool,
    /// The mode the front end's person sets while the main agent's turn runs
    /// (`set_permission_mode` mid-turn), taken at its next tool-call boundary.
    pub mode_request: Option<muster_agents::runtime::ModeRequest>,
}

impl FrontEnd {
    /// Keeps `interrupt` as the handle that ends the running turn.
    pub(crate) fn hold_turn(&self, interrupt: muster_agents::runtime::TurnInterrupt) {
        *self
            .turn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(interrupt);
    }
}

/// A started run's agents, driven to an ending.
pub(crate) trait RunDriver {
    /// Drives the run until it ends (finished, awaiting a person, a budget, an error).
    async fn drive(&self) -> anyhow::Result<Ending>;
    /// Resolves with the ending a failure found outside the drive forces (a store failure in
    /// a teammate's end of turn). Pending by default.
    async fn stopped_from_outside(&self) -> Ending {
        std::future::pending().await
    }
    /// After the race, with the drive dropped: stops what still runs (everything, at once,
    /// after a signal) and turns the drive's result into the ending, with what the kind adds.
    async fn wrap_up(
        &self,
        run: &StartedRun,
        driven: anyhow::Result<Ending>,
        interrupted: bool,
    ) -> anyhow::Result<Ending>;
}

/// A run this process took over, as its kind builds on it.
pub(crate) struct StartedRun {
    pub id: String,
    pub epoch: i64,
    pub store: Arc<dyn MailboxStore>,
    pub plans: PlanFiles,
    /// Whether the run existed before (a resume).
    pub resumed: bool,
    /// Each agent's spend restored from the store (empty for a new run): limits hold across
    /// a crash.
    pub restored: BTreeMap<String, Spend>,
    pub env: BTreeMap<String, String>,
    pub printer: Arc<RunPrinter>,
    /// The run's traces, when they are on.
    pub traces: Option<Arc<RunTraces>>,
}

impl StartedRun {
    /// The run's trace (for its agents' `Bash` commands), when traces are on.
    pub fn trace(&self) -> Option<muster_agents::trace_ids::RunTrace> {
        self.traces
            .as_ref()
            .map(|traces| traces.run_trace().clone())
    }
}

/// The run's traces when the user turned them on (`MUSTER_TELEMETRY=1` or their own
/// `[telemetry] enabled`; never a project's file, whose `[telemetry]` the loader drops).
pub(crate) fn run_traces(
    project: &Project,
    launch: &crate::launch::RunLaunch,
    run_id: &str,
) -> anyhow::Result<Option<Arc<RunTraces>>> {
    let sent = SentNotes::File(project.runs_dir().join(format!("{run_id}.traces")));
    run_traces_noted(project, launch, run_id, sent)
}

/// [`run_traces`], noting the spans sent in `sent`.
pub(crate) fn run_traces_noted(
    project: &Project,
    launch: &crate::launch::RunLaunch,
    run_id: &str,
    sent: SentNotes,
) -> anyhow::Result<Option<Arc<RunTraces>>> {
    let telemetry = &project.settings.telemetry;
    let Some(config) = TraceConfig::from_env(
        &project.process.env,
        telemetry.enabled.value,
        telemetry.content.value,
    )
    .map_err(|e| usage(e.to_string()))?
    else {
        return Ok(None);
    };
    let traces = RunTraces::start(TraceParts {
        config: &config,
        run_id,
        parent: launch.trace_parent(),
        plan_provider: &launch.plan_provider,
        act_provider: &launch.act_provider,
        sent: Some(sent),
    })?;
    Ok(Some(Arc::new(traces)))
}

/// Writes the run-wide limits of this process's settings into the run's ledger in the store,
/// which every process of the run (teammates on workers included) checks and charges. A run
/// stored before ledgers existed starts its ledger from what its records say was spent.
async fn open_ledger(
    store: &dyn MailboxStore,
    run_id: &str,
    settings: &muster_config::Settings,
    restored: &BTreeMap<String, Spend>,
) -> anyhow::Result<()> {
    let limits = muster_agents::budget::SpendLimits::from_settings(&settings.budgets.run);
    let seed = restored
        .values()
        .fold(Spend::default(), |sum, spend| sum.plus(spend));
    store
        .open_ledger(run_id, limits.ledger_limits(), seed.ledger_spend())
        .await?;
    Ok(())
}

/// Runs `kind` to its ending: a new run, or `existing` (picked by [`resume`]) continued.
pub(crate) fn execute<K: RunKind>(kind: K, existing: Option<RunRecord>) -> anyhow::Result<Exit> {
    Ok(execute_to_ending(kind, existing)?.exit)
}

/// [`execute`], giving the run's whole ending (a front end maps it to its own words).
pub(crate) fn execute_to_ending<K: RunKind>(
    kind: K,
    existing: Option<RunRecord>,
) -> anyhow::Result<Ending> {
    drive_to_end(tokio_runtime()?, execute_async(kind, existing))
}

async fn execute_async<K: RunKind>(kind: K, existing: Option<RunRecord>) -> anyhow::Result<Ending> {
    let mut interrupts = Interrupts::install();
    let env = (*kind.project().process.env).clone();
    let resumed = existing.is_some();
    let checked = context::checked_parts(kind.project(), kind.launch(), &env, resumed, K::LEAD)?;
    let store = kind.open_store().await?;
    let (id, plans) = match &existing {
        Some(record) => (
            record.id.clone(),
            PlanFiles::new(kind.project().plans_dir(), &record.slug),
        ),
        None => kind.create(&store).await?,
    };
    let restored = match &existing {
        Some(_) => {
            let models = &kind.project().settings.models;
            AgentRuntime::restored_spends(store.as_ref(), &id, models).await?
        }
        None => BTreeMap::new(),
    };
    let launch_options = kind.launch_options()?;
    let owned = take_over(
        kind.project(),
        &store,
        &id,
        K::KIND,
        existing.as_ref().map(|record| (record, &launch_options)),
        env.get("XDG_RUNTIME_DIR").map(PathBuf::from),
    )
    .await?;
    open_ledger(store.as_ref(), &id, &kind.project().settings, &restored).await?;
    let traces = run_traces(kind.project(), kind.launch(), &id)?;
    if let (Some(traces), true) = (&traces, resumed) {
        let logs = kind.project().root.logs_dir();
        traces
            .send_unsent(&crate::run_log::path(&logs, &id), store.as_ref())
            .await;
    }
    let mut printer = RunPrinter::new(
        &id,
        K::AGENT,
        kind.output(),
        kind.project().process.stdout_is_terminal,
    )
    .with_traces(traces.clone())
    .with_deltas(&kind.project().root.muster_dir());
    if let Some(front) = kind.front_end() {
        printer = printer.for_front_end(front.events.clone());
    }
    let printer = Arc::new(printer);
    let run = StartedRun {
        id,
        epoch: owned.epoch,
        store,
        plans,
        resumed,
        restored,
        env,
        printer,
        traces,
    };
    let run_log = kind.project().process.run_log.clone();
    if resumed
        && let Some(at) =
            stop::apply_pending_run_stop(run.store.as_ref(), &run.id, run.epoch).await?
    {
        // A person stopped the run while no process held it: nothing runs, so Ctrl-C's
        // transition is the ending alone.
        let ending = Ending::stopped_before_resume(&run.id, at);
        finish(run.store.as_ref(), &run.id, &ending, &run_log).await?;
        run.printer.finished(&ending);
        if let Some(traces) = &run.traces {
            end_traces(traces, &run, ending.status).await;
        }
        return Ok(ending);
    }
    // Kept for the cost report: `start` takes the kind.
    let settings = kind.project().settings.clone();
    let driver = kind.start(&run, checked).await?;
    let mut interrupted = false;
    let driven = tokio::select! {
        driven = driver.drive() => driven,
        ending = driver.stopped_from_outside() => Ok(ending),
        signal = interrupts.first() => {
            interrupted = true;
            Ok(Ending::interrupted(signal, &run.id))
        }
        // Another process may own the run now: end without writing its ending.
        lost = owned.lost() => return Err(lost),
    };
    let mut ending = driver.wrap_up(&run, driven, interrupted).await?;
    if let Some(report) = cost_report(&settings, run.store.as_ref(), &run.id).await {
        ending.add_costs(&report);
    }
    finish(run.store.as_ref(), &run.id, &ending, &run_log).await?;
    run.printer.finished(&ending);
    if let Some(traces) = &run.traces {
        end_traces(traces, &run, ending.status).await;
    }
    Ok(ending)
}

/// What the run spent per agent, model and provider, from its records; `None` (with a
/// warning) when the store cannot say, which must not hide the run's own ending.
pub(crate) async fn cost_report(
    settings: &muster_config::Settings,
    store: &dyn MailboxStore,
    run_id: &str,
) -> Option<CostReport> {
    let providers = |mode| settings.mode(mode).provider.value;
    match CostReport::of_run(store, run_id, &settings.models, &providers).await {
        Ok(report) => Some(report),
        Err(error) => {
            tracing::warn!(run = %run_id, %error, "no cost report");
            None
        }
    }
}

/// The run's last spans (its own and its agents', once it is over) after its ending's
/// commit; what the store cannot say is left out rather than guessed.
async fn end_traces(traces: &RunTraces, run: &StartedRun, status: RunStatus) {
    let record = run.store.run(&run.id).await.ok().flatten();
    let roster = run.store.roster(&run.id).await.unwrap_or_default();
    match record {
        Some(record) => {
            traces
                .finish(
                    status,
                    record.created_at,
                    &roster,
                    record.team.as_deref(),
                    run.store.as_ref(),
                )
                .await
        }
        None => traces.flush().await,
    }
}

fn usage(message: impl Into<String>) -> anyhow::Error {
    ExitError::new(Exit::Usage, message).into()
}

/// How a run ended: its status, its exit code, its result (stored and printed) and the text
/// for `--output text`.
#[derive(Debug, Clone)]
pub(crate) struct Ending {
    pub status: RunStatus,
    pub exit: Exit,
    pub result: Value,
    pub text: String,
}

impl Ending {
    /// The run's cost report in its result (`costs`: per agent, model and provider, the
    /// total and what caching saved).
    pub fn add_costs(&mut self, report: &CostReport) {
        if let (Value::Object(result), Ok(costs)) = (&mut self.result, serde_json::to_value(report))
        {
            result.insert("costs".into(), costs);
        }
    }

    /// Whether `--output text` prints the ending's text on stderr (a run that failed, hit a
    /// budget or was interrupted) rather than stdout — for single and team runs alike.
    pub fn is_failure_text(status: RunStatus) -> bool {
        matches!(
            status,
            RunStatus::Failed | RunStatus::Budget | RunStatus::Interrupted
        )
    }

    /// A budget stopped the run: status `budget`, exit 3, the budget named.
    pub fn budget(exceeded: &BudgetExceeded) -> Ending {
        let reason = exceeded.to_string();
        Ending {
            status: RunStatus::Budget,
            exit: Exit::Budget,
            result: json!({"reason": reason, "budget": exceeded.setting_key()}),
            text: format!("muster: {reason}"),
        }
    }

    /// A signal stopped the run: `interrupted`, exit 130, to be resumed.
    pub fn interrupted(signal: &str, run_id: &str) -> Ending {
        let text = signals::interrupted_text(signal, run_id);
        Ending {
            status: RunStatus::Interrupted,
            exit: Exit::Interrupted,
            result: json!({"error": text}),
            text,
        }
    }

    /// A person's stop waited for this resume ([`stop::apply_pending_run_stop`]): the run ends
    /// at once as Ctrl-C would end it, `interrupted`, exit 130; the next resume continues it.
    pub fn stopped_before_resume(run_id: &str, at: i64) -> Ending {
        let text = format!(
            "muster: a person stopped run {run_id} from the web inbox at {} while no process ran \
             it; this resume honoured the stop and ended at once; `muster resume {run_id}` \
             continues it",
            crate::display::time(at)
        );
        Ending {
            status: RunStatus::Interrupted,
            exit: Exit::Interrupted,
            result: json!({"error": text, "stopped_by": muster_protocol::Responder::HUMAN}),
            text,
        }
    }

    /// An error ended the run: a budget it carries ends it as the budget does; otherwise it
    /// failed, with the exit code of its cause (4 for the store's, see [`Exit::for_error`])
    /// and the whole cause chain in words.
    pub fn from_error(error: &anyhow::Error) -> Ending {
        if let Some(exceeded) = budget_exceeded(error) {
            return Ending::budget(&exceeded);
        }
        let mut result = json!({"error": format!("{error:#}")});
        // The runtime's endings (`output_limit`, `stuck`) are named in `run_finished.reason`.
        if let (Some(stop), Some(fields)) = (agent_stop(error), result.as_object_mut()) {
            fields.insert("reason".into(), json!(stop.reason()));
        }
        let exit = Exit::for_error(error);
        Ending {
            // A store failure stops the run, not its work: it stays resumable once the store
            // is back (exit 4 says fix the store and resume).
            status: if exit == Exit::Store {
                RunStatus::Interrupted
            } else {
                RunStatus::Failed
            },
            exit,
            result,
            text: format!("muster: the run failed: {error:#}"),
        }
    }
}

/// The runtime's ending an error carries (a cut answer, a stuck loop), if any.
pub(crate) fn agent_stop(error: &anyhow::Error) -> Option<muster_agents::runtime::AgentStop> {
    error.chain().find_map(|cause| {
        match cause.downcast_ref::<muster_agents::runtime::RuntimeError>() {
            Some(muster_agents::runtime::RuntimeError::Stopped(stop)) => Some(stop.clone()),
            _ => cause
                .downcast_ref::<muster_agents::runtime::AgentStop>()
                .cloned(),
        }
    })
}

/// The budget an error carries, if one stopped the run.
pub(crate) fn budget_exceeded(error: &anyhow::Error) -> Option<BudgetExceeded> {
    error.chain().find_map(|cause| {
        match cause.downcast_ref::<muster_agents::runtime::RuntimeError>() {
            Some(muster_agents::runtime::RuntimeError::Budget(exceeded)) => Some(exceeded.clone()),
            _ => cause.downcast_ref::<BudgetExceeded>().cloned(),
        }
    })
}

/// `muster run`'s typed request: a team run when there is a team file (`--team`, else
/// `muster.team.toml` at the project root), else a single-agent run.
pub(crate) fn run(
    global: &crate::project::Globals,
    mut flags: crate::launch::RunFlags,
) -> anyhow::Result<Exit> {
    crate::command_prompt::choose(global, &mut flags)?;
    match crate::team::team_file_for(global, flags.team.as_deref())? {
        Some(team_file) => crate::team::run(global, flags, team_file),
        None => crate::single_run::run(global, flags),
    }
}

/// `muster resume`'s typed request: the run is picked and checked once, and its kind says who
/// drives it.
pub(crate) fn resume(
    global: &crate::project::Globals,
    flags: crate::launch::ResumeFlags,
) -> anyhow::Result<Exit> {
    let project = Project::locate(global)?;
    let record = picked_run(&project, &flags, Picked::ToResume)?;
    if record.team.is_some() {
        crate::team::resume(global, &flags, record)
    } else {
        crate::single_run::resume(global, flags, record)
    }
}

/// `muster run --continue [RUN] -p PROMPT`: a run that completed or was interrupted takes a
/// new prompt (the one named, else this project's newest such run).
pub(crate) fn continue_run(
    global: &crate::project::Globals,
    prompt: String,
    flags: crate::launch::ResumeFlags,
) -> anyhow::Result<Exit> {
    let project = Project::locate(global)?;
    if let Some(id) = flags.run.as_deref()
        && hand_prompt_to_live_run(&project, id, &prompt)?
    {
        eprintln!("muster: the prompt was handed to live run {id}; its terminal shows the turn");
        return Ok(Exit::Success);
    }
    let record = picked_run(&project, &flags, Picked::ToContinue)?;
    if record.team.is_some() {
        return crate::team::continue_run(global, &flags, record, prompt);
    }
    crate::single_run::continue_run(global, flags, record, prompt)
}

/// `--continue` of run `id` when a process holds it live: the prompt is handed to it (it must
/// be waiting after `muster interrupt`). `false`: the run is not live, it is continued here.
fn hand_prompt_to_live_run(project: &Project, id: &str, prompt: &str) -> anyhow::Result<bool> {
    use crate::turn_requests::{Refused, request_prompt};
    tokio_runtime()?.block_on(async {
        let store = project.open_store().await?;
        let Some(record) = store.run(id).await? else {
            return Ok(false);
        };
        let agent = match record.team {
            Some(_) => crate::team::LEAD,
            None => crate::single_run::MAIN_AGENT,
        };
        match request_prompt(store.as_ref(), &project.runs_dir(), id, agent, prompt).await {
            Ok(()) => Ok(true),
            Err(Refused::NotLive(_)) => Ok(false),
            Err(error) => Err(refused(error)),
        }
    })
}

/// `muster interrupt RUN`: the live run's running turn ends; the run stays live.
pub(crate) fn interrupt(global: &crate::project::Globals, id: &str) -> anyhow::Result<Exit> {
    let project = Project::locate(global)?;
    tokio_runtime()?.block_on(async {
        let store = project.open_store().await?;
        crate::turn_requests::request_interrupt(store.as_ref(), &project.runs_dir(), id)
            .await
            .map_err(refused)
    })?;
    eprintln!(
        "muster: asked run {id} to interrupt its turn; give it the next prompt with \
         `muster run --continue {id} -p …`"
    );
    Ok(Exit::Success)
}

/// A refused request to a live run, with its exit code.
fn refused(error: crate::turn_requests::Refused) -> anyhow::Error {
    use crate::turn_requests::Refused;
    match error {
        Refused::Store(error) => error.into(),
        Refused::Record(text) => usage(text),
        other => ExitError::new(Exit::Failed, other.to_string()).into(),
    }
}

/// Whether a run in `status` may take a new prompt.
fn takes_a_new_prompt(status: RunStatus) -> bool {
    matches!(status, RunStatus::Completed | RunStatus::Interrupted)
}

/// What a run is picked for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Picked {
    /// `muster resume`: an unfinished run.
    ToResume,
    /// `muster run --continue`: a run that completed or was interrupted.
    ToContinue,
}

impl Picked {
    fn takes(self, status: RunStatus) -> bool {
        match self {
            Picked::ToResume => !status.is_finished(),
            Picked::ToContinue => takes_a_new_prompt(status),
        }
    }
}

/// [`pick_run`] with `flags`' run and projects, on the project's store.
fn picked_run(
    project: &Project,
    flags: &crate::launch::ResumeFlags,
    purpose: Picked,
) -> anyhow::Result<RunRecord> {
    tokio_runtime()?.block_on(async {
        let store = project.open_store().await?;
        let scope = crate::project::project_scope(project, flags.all_projects);
        pick_run(
            store.as_ref(),
            project,
            flags.run.as_deref(),
            scope.as_deref(),
            purpose,
        )
        .await
    })
}

/// The run to resume or continue: the one named, else the newest one the purpose takes (of
/// `scope`'s project, when given) — unfinished to resume, completed or interrupted to
/// continue; refused in another status, when live in another process, or when its workspace
/// is not on this machine.
pub(crate) async fn pick_run(
    store: &dyn MailboxStore,
    project: &Project,
    run: Option<&str>,
    scope: Option<&str>,
    purpose: Picked,
) -> anyhow::Result<RunRecord> {
    let record = match run {
        Some(id) => store
            .run(id)
            .await?
            .ok_or_else(|| usage(format!("no run {id:?} in this store (see `muster runs`)")))?,
        None => store
            .runs()
            .await?
            .into_iter()
            .filter(|r| purpose.takes(r.status))
            .filter(|r| scope.is_none_or(|p| r.in_project(p)))
            .max_by_key(|r| (r.updated_at, r.id.clone()))
            .ok_or_else(|| {
                usage(match purpose {
                    Picked::ToResume => "no run to resume (see `muster runs`)",
                    Picked::ToContinue => {
                        "no completed or interrupted run to continue (see `muster runs`)"
                    }
                })
            })?,
    };
    if !purpose.takes(record.status) {
        let (id, status) = (&record.id, record.status.as_str());
        return Err(usage(match purpose {
            Picked::ToResume => format!("run {id} is {status} and cannot be resumed"),
            Picked::ToContinue if record.status.is_finished() => {
                format!(
                    "run {id} is {status}: only a completed or interrupted run takes a new prompt"
                )
            }
            Picked::ToContinue => format!(
                "run {id} is {status}: only a completed or interrupted run takes a new prompt \
                 (`muster resume {id}` carries it on)"
            ),
        }));
    }
    check_here_and_not_live(store, project, &record).await?;
    Ok(record)
}

/// [`check_here_and_not_live`] on the project's store (`muster acp`'s `session/load`).
pub(crate) async fn check_here_and_not_live_in(
    project: &Project,
    record: &RunRecord,
) -> anyhow::Result<()> {
    let store = project.open_store().await?;
    check_here_and_not_live(store.as_ref(), project, record).await
}

/// The stored run `id` of the project `global` names (`muster acp`'s later prompts).
pub(crate) fn record_of(global: &crate::project::Globals, id: &str) -> anyhow::Result<RunRecord> {
    let project = Project::locate(global)?;
    tokio_runtime()?.block_on(async {
        let store = project.open_store().await?;
        store
            .run(id)
            .await?
            .ok_or_else(|| usage(format!("no run {id:?} in this store (see `muster runs`)")))
    })
}

/// Refuses a run whose workspace is not on this machine or that is live in another process.
async fn check_here_and_not_live(
    store: &dyn MailboxStore,
    project: &Project,
    record: &RunRecord,
) -> anyhow::Result<()> {
    if !std::path::Path::new(&record.workspace).is_dir() {
        return Err(usage(format!(
            "run {}'s workspace {} is not on this machine; resume it where it ran (or fork \
             it there)",
            record.id, record.workspace
        )));
    }
    if muster_mailbox::live::is_live_anywhere(store, &project.runs_dir(), &record.id).await? {
        return Err(ExitError::new(
            Exit::Failed,
            format!(
                "run {} is live in another process; it cannot be resumed twice",
                record.id
            ),
        )
        .into());
    }
    Ok(())
}

/// A run this process owns until it is dropped: the live-run lock (and its socket) and the
/// epoch its leases belong to.
struct Owned {
    epoch: i64,
    live: LiveRun,
}

impl Owned {
    /// Resolves when the run's live lock on a shared store is lost for good (its connection
    /// ended and the lock could not be taken again, or another process opened a newer epoch):
    /// the run must stop at once, writing nothing more, and exit 4. Pending forever on SQLite.
    async fn lost(&self) -> anyhow::Error {
        anyhow::Error::from(self.live.lost().await)
    }
}

/// Takes over `run_id` for this process: the live-run lock, the run's log, a new epoch; for a
/// resume, the effective launch options (a new deadline, base URL or cassette from its flags,
/// kept for the next resume; written under the lock, so no other resume races it) and the
/// status `running`.
async fn take_over(
    project: &Project,
    store: &Arc<dyn MailboxStore>,
    run_id: &str,
    kind: &str,
    resumed: Option<(&RunRecord, &Value)>,
    runtime_dir: Option<PathBuf>,
) -> anyhow::Result<Owned> {
    let live = LiveRun::start_shared(
        &project.runs_dir(),
        run_id,
        store.clone(),
        runtime_dir.as_deref(),
    )
    .await?;
    project
        .process
        .run_log
        .start(&project.root.logs_dir(), run_id, kind, resumed.is_some());
    let epoch = store.open_epoch(run_id).await?;
    // Taken again after a lost connection, the hold must find this epoch still the run's.
    live.own_epoch(epoch);
    if let Some((record, effective)) = resumed {
        if *effective != record.launch_options {
            store.set_launch_options(run_id, effective.clone()).await?;
        }
        store
            .set_run_status(run_id, RunStatus::Running, None)
            .await?;
    }
    Ok(Owned { epoch, live })
}

/// Commits the run's ending (status and result) and closes its log.
async fn finish(
    store: &dyn MailboxStore,
    run_id: &str,
    ending: &Ending,
    run_log: &crate::run_log::RunLog,
) -> anyhow::Result<()> {
    store
        .set_run_status(run_id, ending.status, Some(ending.result.clone()))
        .await?;
    run_log.finish(
        ending.exit.code(),
        Some(ending.status.as_str()),
        ending.result["error"].as_str(),
    );
    Ok(())
}

/// The runtime every run drives its agents on.
pub(crate) fn tokio_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// Runs a run's `future` to its end on `runtime`, then shuts the runtime down without
/// waiting on a blocking call that cannot end by itself (a terminal prompt cut by Ctrl-C):
/// dropping a runtime would wait for it forever.
pub(crate) fn drive_to_end<T>(
    runtime: tokio::runtime::Runtime,
    future: impl std::future::Future<Output = T>,
) -> T {
    let output = runtime.block_on(future);
    runtime.shutdown_timeout(Duration::from_millis(500));
    output
}

/// The project's AGENTS.md / CLAUDE.md, joined (empty when there are none or they cannot be
/// read: loading already warned).
pub(crate) fn project_instructions(project: &Project) -> String {
    muster_config::ProjectInstructions::load(
        &project.root,
        project.settings.instructions_max_bytes.value,
        project.process.user_home().as_deref(),
    )
    .map(|loaded| {
        loaded
            .value
            .files
            .iter()
            .map(|f| f.content.clone())
            .collect::<Vec<_>>()
            .join("\n\n")
    })
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_mailbox::StoreError;

    /// Single and team runs end an error the same way: its cause's exit code, its whole
    /// chain in words.
    #[test]
    fn an_error_ends_a_run_by_its_cause() {
        let store = || StoreError::Locked {
            path: "/p/.muster/muster.db".into(),
            waited_ms: 5000,
        };
        let rows: Vec<(anyhow::Error, Exit, &str)> = vec![
            (
                anyhow::Error::from(store()).context("the lead's turn"),
                Exit::Store,
                "the lead's turn: ",
            ),
            (
                anyhow::Error::from(muster_agents::runtime::RuntimeError::Store(store())),
                Exit::Store,
                "store: ",
            ),
            (
                usage("--workspace: no such directory"),
                Exit::Usage,
                "--workspace",
            ),
            (
                anyhow::anyhow!("the model stopped"),
                Exit::Failed,
                "the model stopped",
            ),
        ];
        for (error, exit, text) in rows {
            let ending = Ending::from_error(&error);
            assert_eq!(ending.exit, exit, "{error:#}");
            // A store failure leaves the run resumable (exit 4: fix the store, then resume).
            let status = if exit == Exit::Store {
                RunStatus::Interrupted
            } else {
                RunStatus::Failed
            };
            assert_eq!(ending.status, status, "{error:#}");
            let said = ending.result["error"].as_str().unwrap_or_default();
            assert!(said.starts_with(text), "{said}");
            assert!(ending.text.contains(said), "{}", ending.text);
        }
    }
}
