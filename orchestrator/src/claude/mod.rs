//! muster as Claude Code's headless mode: selected when the program's file name is `claude`
//! (a link to the `muster` binary) or by `muster claude ARGS…`. It parses Claude Code's
//! command line ([`args`]), drives a run as `muster acp` does (a team run in a project with a
//! team file) — the first prompt starts the run, each later one (`--input-format
//! stream-json`, or a later process's `--resume`/`--continue`) continues it, `interrupt` is
//! `interrupt_turn` — and prints Claude Code's messages ([`messages`]). With
//! `--permission-prompt-tool stdio`, what the run asks its person goes to the program as the
//! SDK's `can_use_tool` control requests ([`asks`]), answered through the one decision path.
//! Exit codes stay muster's. Behaviour: docs/claude-compat.md.
//!
//! Stdout carries the protocol only: the process keeps its real stdout for the messages and
//! points file descriptor 1 at stderr (as `muster acp` does), so nothing a child prints
//! reaches the program; in `stream-json` input mode stdin is kept the same way and replaced
//! by `/dev/null`.

pub mod args;
mod asks;
mod hook_callbacks;
mod input;
mod messages;
mod team_asks;
mod teammates;

use std::fs::File;
use std::io::{Read as _, Write as _};
use std::os::fd::AsFd as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use muster_agents::runtime::{EventSink, RunEvent, TurnInterrupt};
use muster_config::settings::CliOverrides;
use muster_mailbox::{RunRecord, RunStatus};
use serde_json::{Value, json};

use crate::exit::{Exit, ExitError};
use crate::launch::RunFlags;
use crate::lifecycle::{Ending, FrontEnd};
use crate::project::{Globals, Project};
use args::{Output, Request};
use messages::Translator;

pub use messages::CLAUDE_CODE_VERSION;

/// The file name that selects this mode.
pub const PROGRAM_NAME: &str = "claude";

/// Whether the program was started under the name `claude` (`argv[0]`'s file name).
pub fn invoked_as_claude(argv0: &std::ffi::OsStr) -> bool {
    Path::new(argv0)
        .file_name()
        .is_some_and(|name| name == PROGRAM_NAME)
}

/// Runs Claude Code's headless mode as `request` asks.
pub fn main(global: &Globals, request: Request) -> anyhow::Result<Exit> {
    for warning in &request.warnings {
        eprintln!("muster claude: warning: {warning}");
    }
    let (program_in, program_out) = take_stdio(request.stream_input)?;
    let shared = Arc::new(Shared::new(program_out));
    let hooks = Arc::new(hook_callbacks::ProgramHooks::new(shared.clone()));
    let session_rules = Arc::new(muster_agents::runtime::SessionRules::default());
    let session = open_session(global, &request)?;
    shared
        .bypass_disabled
        .store(session.init.bypass_disabled, Ordering::SeqCst);
    let prompts = match program_in {
        Some(stdin) => input::spawn_reader(stdin, shared.clone(), hooks.clone()),
        None => one_prompt(&request)?,
    };
    let mut driver = Driver {
        global: global.clone(),
        request,
        shared,
        hooks,
        session_rules,
        session,
        exit: Exit::Success,
        mode_change: None,
    };
    while let Ok(input) = prompts.recv() {
        match input {
            input::Input::Prompt(prompt) => driver.prompt(prompt),
            input::Input::ModelChange(model) => driver.change_model(model),
            input::Input::ModeChange(mode) => driver.change_mode(mode),
        }
    }
    Ok(driver.exit)
}

/// `-p PROMPT`, or the whole of stdin as the one prompt.
fn one_prompt(request: &Request) -> anyhow::Result<std::sync::mpsc::Receiver<input::Input>> {
    let prompt = match &request.prompt {
        Some(prompt) => prompt.clone(),
        None => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|error| {
                    ExitError::new(Exit::Usage, format!("stdin could not be read: {error}"))
                })?;
            text
        }
    };
    if prompt.trim().is_empty() {
        return Err(ExitError::new(
            Exit::Usage,
            "no prompt: give it as an argument (`claude -p \"…\"`) or on stdin",
        )
        .into());
    }
    let (sender, receiver) = std::sync::mpsc::channel();
    let _ = sender.send(input::Input::Prompt(prompt));
    Ok(receiver)
}

/// The protocol's own stdout (fd 1 becomes stderr) and, when prompts come as JSON lines, its
/// own stdin (fd 0 becomes `/dev/null`).
fn take_stdio(keep_stdin: bool) -> anyhow::Result<(Option<File>, File)> {
    let out = File::from(std::io::stdout().as_fd().try_clone_to_owned()?);
    rustix::stdio::dup2_stdout(std::io::stderr())?;
    let input = if keep_stdin {
        let input = File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
        rustix::stdio::dup2_stdin(File::open("/dev/null")?)?;
        Some(input)
    } else {
        None
    };
    Ok((input, out))
}

/// What the reader of stdin and the prompts' threads share.
pub(crate) struct Shared {
    out: Mutex<File>,
    /// Control requests sent to the program, awaiting its `control_response` (its
    /// `response`, or the error it answered with).
    pending: Mutex<std::collections::HashMap<String, std::sync::mpsc::Sender<Answer>>>,
    next_request: AtomicU64,
    /// The running prompt's turn handle, while one runs.
    turn: Mutex<Option<Arc<Mutex<Option<TurnInterrupt>>>>>,
    /// An `interrupt` came for the running prompt.
    interrupted: AtomicBool,
    /// The session's id, once known (for `session_state_changed`).
    session_id: Mutex<String>,
    /// `set_permission_mode` for the running turn: the main agent takes it at its next
    /// tool-call boundary.
    mode_request: muster_agents::runtime::ModeRequest,
    /// `disableBypassPermissionsMode = "disable"`: no mode change reaches `bypassPermissions`.
    bypass_disabled: AtomicBool,
}

impl Shared {
    fn new(out: File) -> Shared {
        Shared {
            out: Mutex::new(out),
            pending: Mutex::new(std::collections::HashMap::new()),
            next_request: AtomicU64::new(0),
            turn: Mutex::new(None),
            interrupted: AtomicBool::new(false),
            session_id: Mutex::new(String::new()),
            mode_request: muster_agents::runtime::ModeRequest::default(),
            bypass_disabled: AtomicBool::new(false),
        }
    }

    /// `set_permission_mode`'s mode within the session's ceiling: `bypassPermissions`
    /// disabled by `disableBypassPermissionsMode` is lowered to `acceptEdits` (one warning).
    fn capped(&self, mode: muster_config::PermissionMode) -> muster_config::PermissionMode {
        if mode == muster_config::PermissionMode::BypassPermissions
            && self.bypass_disabled.load(Ordering::SeqCst)
        {
            eprintln!(
                "muster claude: warning: bypassPermissions is disabled by \
                 disableBypassPermissionsMode; set_permission_mode sets acceptEdits"
            );
            return muster_config::PermissionMode::AcceptEdits;
        }
        mode
    }

    /// `set_permission_mode`: the running turn switches at its next tool-call boundary, and
    /// the session's next prompts run in the mode (the returned, capped one).
    pub(crate) fn set_mode(
        &self,
        mode: muster_config::PermissionMode,
    ) -> muster_config::PermissionMode {
        let mode = self.capped(mode);
        self.mode_request.request(mode);
        mode
    }

    /// Writes one message as a line of stdout; a program that is gone loses the line.
    pub(crate) fn write(&self, message: &Value) {
        let mut out = self.out.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(error) = writeln!(out, "{message}").and_then(|()| out.flush()) {
            tracing::debug!("a message to the program was not written: {error}");
        }
    }

    fn session_id(&self) -> String {
        self.session_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// `system`/`session_state_changed`: `running`, `requires_action` or `idle`.
    pub(crate) fn state(&self, state: &str) {
        self.write(&json!({
            "type": "system",
            "subtype": "session_state_changed",
            "state": state,
            "session_id": self.session_id(),
            "uuid": uuid::Uuid::new_v4().to_string(),
        }));
    }

    /// `interrupt`: ends the running prompt's turn (committed, resumable). Asked before the
    /// turn's handle exists, it is given at the run's next event.
    pub(crate) fn interrupt(&self) {
        self.interrupted.store(true, Ordering::SeqCst);
        self.interrupt_if_asked();
    }

    fn interrupt_if_asked(&self) {
        if !self.interrupted.load(Ordering::SeqCst) {
            return;
        }
        let turn = self
            .turn
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(turn) = turn
            && let Some(interrupt) = turn.lock().unwrap_or_else(PoisonError::into_inner).as_ref()
        {
            interrupt.interrupt();
            self.interrupted.store(false, Ordering::SeqCst);
        }
    }

    /// Sends a request a person answers to the program (the session `requires_action`
    /// meanwhile) and blocks until its answer (`None`: the program closed stdin or answered
    /// with an error, said on stderr).
    pub(crate) fn ask(&self, request: Value) -> Option<Value> {
        self.state("requires_action");
        let (id, receiver) = self.send_request(request);
        let answer = receiver.recv().unwrap_or_else(|_| Err(closed()));
        self.state("running");
        answer
            .inspect_err(|error| {
                eprintln!(
                    "muster claude: the program answered {id} with {error}; taken as a refusal"
                )
            })
            .ok()
    }

    /// Sends a request the program answers by itself (a hook callback) and waits for its
    /// answer at most `timeout`; past it the request is cancelled (`control_cancel_request`).
    pub(crate) fn request_within(&self, request: Value, timeout: Duration) -> Answer {
        let (id, receiver) = self.send_request(request);
        match receiver.recv_timeout(timeout) {
            Ok(answer) => answer,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(closed()),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                self.pending
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&id);
                self.write(&json!({"type": "control_cancel_request", "request_id": id}));
                Err(format!(
                    "gave no answer within {} s (cancelled)",
                    timeout.as_secs_f64()
                ))
            }
        }
    }

    /// Writes a control request, its answer awaited on the returned receiver.
    fn send_request(&self, request: Value) -> (String, std::sync::mpsc::Receiver<Answer>) {
        let id = format!(
            "muster-{}",
            self.next_request.fetch_add(1, Ordering::SeqCst) + 1
        );
        let (sender, receiver) = std::sync::mpsc::channel();
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.clone(), sender);
        self.write(&json!({"type": "control_request", "request_id": id, "request": request}));
        (id, receiver)
    }

    /// Routes a `control_response` to the request waiting for it.
    pub(crate) fn answered(&self, response: &Value) {
        let Some(id) = response["request_id"].as_str() else {
            eprintln!("muster claude: a control_response without request_id was ignored");
            return;
        };
        let waiting = self
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
        match waiting {
            Some(sender) if response["subtype"] == "success" => {
                let _ = sender.send(Ok(response["response"].clone()));
            }
            Some(sender) => {
                let _ = sender.send(Err(format!("an error ({})", response["error"])));
            }
            None => {
                eprintln!("muster claude: a control_response to unknown request {id} was ignored")
            }
        }
    }

    /// The program closed stdin: every request waiting on it gets no answer.
    pub(crate) fn abandon_requests(&self) {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}

/// The program's answer to a control request: its `response`, or why there is none.
pub(crate) type Answer = Result<Value, String>;

fn closed() -> String {
    "no answer (the program closed its input)".to_owned()
}

/// The run a session drives, and how it is named.
struct Session {
    /// The run's id, once it exists (a resumed run's at once).
    run_id: String,
    /// Whether the run is in the store.
    stored: bool,
    /// `session_id` in the output: the alias when there is one, else the run id.
    session_id: String,
    /// For `system`/`init`.
    init: InitFacts,
    /// Whether the run is a single-agent or a team run.
    shape: RunShape,
    /// `--mcp-config`'s servers, for every prompt of the session.
    mcp_servers: Vec<muster_config::McpServerConfig>,
}

/// What kind of run a session drives.
enum RunShape {
    Single,
    /// A team run: a new one from the project's team file (`file`), or the stored one
    /// `--resume`/`--continue` picked (`None`: its launch options name its team).
    Team {
        file: Option<std::path::PathBuf>,
    },
}

/// What `system`/`init` says of the session.
struct InitFacts {
    cwd: String,
    model: String,
    permission_mode: String,
    tools: Vec<String>,
    mcp_servers: Vec<Value>,
    /// `disableBypassPermissionsMode = "disable"`.
    bypass_disabled: bool,
}

/// Picks the session's run: a new one (a team run in a project with a team file), or the
/// one `--resume`/`--continue` names (forked with `--fork-session`, single-agent runs only).
fn open_session(global: &Globals, request: &Request) -> anyhow::Result<Session> {
    let root = crate::loading::project_root(global)?;
    let mut overrides = CliOverrides::new();
    if let Some(model) = &request.model {
        overrides = overrides.model(model);
    }
    if let Some(mode) = request.permission_mode {
        overrides = overrides.permission_mode(mode.to_string());
    }
    for (key, value, flag) in &request.settings {
        overrides = overrides.set(key, value, flag);
    }
    let project = Project::load(global, root, overrides)?;
    let team_file = crate::team::team_file_for(global, None)?;
    let mcp_servers = session_mcp_servers(&project, &request.mcp_configs)?;
    let init = init_facts(&project, request, &mcp_servers);
    let existing = match (&request.resume, request.continue_last) {
        (Some(id), _) => Some(find_run(&project, Some(id))?),
        (None, true) => Some(find_run(&project, None)?),
        (None, false) => None,
    };
    let Some(record) = existing else {
        let run_id = crate::ids::new_run_id(&mut fastrand::Rng::new());
        let session_id = request.session_alias.clone().unwrap_or(run_id.clone());
        return Ok(Session {
            run_id,
            stored: false,
            session_id,
            init,
            shape: match team_file {
                Some(file) => RunShape::Team { file: Some(file) },
                None => RunShape::Single,
            },
            mcp_servers,
        });
    };
    let shape = match record.team {
        Some(_) => RunShape::Team { file: None },
        None => RunShape::Single,
    };
    if request.fork && matches!(shape, RunShape::Team { .. }) {
        return Err(ExitError::new(
            Exit::Usage,
            format!(
                "run {} is a team run: --fork-session copies single-agent runs only; \
                 continue it without --fork-session",
                record.id
            ),
        )
        .into());
    }
    let (run_id, alias) = if request.fork {
        let runtime = crate::lifecycle::tokio_runtime()?;
        let store = runtime.block_on(project.open_store())?;
        let forked = crate::fork::fork_run(&project, store.as_ref(), &runtime, &record.id)?;
        set_alias(&project, &forked.id, request.session_alias.as_deref())?;
        (forked.id, request.session_alias.clone())
    } else {
        let alias = record.launch_options["session_alias"]
            .as_str()
            .map(str::to_owned);
        (record.id, alias)
    };
    Ok(Session {
        session_id: alias.unwrap_or(run_id.clone()),
        run_id,
        stored: true,
        init,
        shape,
        mcp_servers,
    })
}

/// `--mcp-config`'s servers: each value a file or a JSON text of `{"mcpServers": {…}}` in
/// `.mcp.json`'s shape, the user's own choice (started without project trust, in the
/// sandbox). Anything muster cannot start as given is a usage error naming it.
fn session_mcp_servers(
    project: &Project,
    configs: &[String],
) -> anyhow::Result<Vec<muster_config::McpServerConfig>> {
    let usage = |message: String| ExitError::new(Exit::Usage, format!("--mcp-config {message}"));
    let mut servers = Vec::new();
    for given in configs {
        let (source, text) = if given.trim_start().starts_with('{') {
            ("(JSON text)".to_owned(), given.clone())
        } else {
            let path = match &project.process.current_dir {
                Ok(cwd) => cwd.join(given),
                Err(_) => Path::new(given).to_path_buf(),
            };
            let text = std::fs::read_to_string(&path)
                .map_err(|error| usage(format!("{}: cannot be read: {error}", path.display())))?;
            (path.display().to_string(), text)
        };
        let document: Value = serde_json::from_str(&text)
            .map_err(|error| usage(format!("{source}: not JSON: {error}")))?;
        let Some(declared) = document.get("mcpServers").and_then(Value::as_object) else {
            return Err(usage(format!(
                "{source}: expected {{\"mcpServers\": {{NAME: {{…}}}}}}, as in .mcp.json"
            ))
            .into());
        };
        for (name, entry) in declared {
            let server = muster_config::mcp::session_server(name, entry, &project.process.env)
                .map_err(|why| usage(format!("{source}: {why}")))?;
            servers.retain(|known: &muster_config::McpServerConfig| known.name != server.name);
            servers.push(server);
        }
    }
    Ok(servers)
}

fn init_facts(
    project: &Project,
    request: &Request,
    session_servers: &[muster_config::McpServerConfig],
) -> InitFacts {
    let settings = &project.settings;
    let (servers, _) = crate::mcp::load_servers(project.root.path(), settings, &project.process);
    let configured = servers
        .servers
        .iter()
        .filter(|_| !request.strict_mcp)
        .filter(|server| !session_servers.iter().any(|s| s.name == server.server.name))
        .map(|server| {
            let status = match (server.enabled, server.untrusted) {
                (true, false) => "pending",
                (_, true) => "needs-trust",
                (false, _) => "disabled",
            };
            json!({"name": server.server.name, "status": status})
        });
    let given = session_servers
        .iter()
        .map(|server| json!({"name": server.name, "status": "pending"}));
    let mcp_servers = configured.chain(given).collect();
    InitFacts {
        cwd: project.root.path().display().to_string(),
        model: request
            .model
            .clone()
            .unwrap_or_else(|| settings.act.model.value.clone()),
        permission_mode: settings.permission_mode.value.to_string(),
        tools: muster_config::tools::standard_tools()
            .into_iter()
            .map(str::to_owned)
            .collect(),
        mcp_servers,
        bypass_disabled: settings
            .refuse_disabled_mode(muster_config::PermissionMode::BypassPermissions, "")
            .is_some(),
    }
}

/// The run `--resume ID` names (its id or its `--session-id` alias), else the newest run that
/// takes a new prompt.
fn find_run(project: &Project, id: Option<&str>) -> anyhow::Result<RunRecord> {
    let usage = |message: String| anyhow::Error::from(ExitError::new(Exit::Usage, message));
    let scope = crate::project::project_scope(project, false);
    crate::lifecycle::tokio_runtime()?.block_on(async {
        let store = project.open_store().await?;
        let runs = store.runs().await?;
        let found = match id {
            Some(id) => runs
                .into_iter()
                .filter(|run| {
                    run.id == id || run.launch_options["session_alias"].as_str() == Some(id)
                })
                .max_by_key(|run| (run.id == id, run.updated_at)),
            None => runs
                .into_iter()
                .filter(|run| scope.as_deref().is_none_or(|p| run.in_project(p)))
                .filter(|run| matches!(run.status, RunStatus::Completed | RunStatus::Interrupted))
                .max_by_key(|run| (run.updated_at, run.id.clone())),
        };
        let record = found.ok_or_else(|| match id {
            Some(id) => usage(format!(
                "no session {id:?} in this store: give a run id or a --session-id used before \
                 (see `muster runs`)"
            )),
            None => usage("no completed or interrupted run to continue (see `muster runs`)".into()),
        })?;
        crate::lifecycle::check_here_and_not_live_in(project, &record).await?;
        Ok(record)
    })
}

/// Stores `model` as the stored run's model of both modes (its launch options, which a
/// continuation's settings are rebuilt from).
fn set_stored_model(global: &Globals, run_id: &str, model: &str) -> anyhow::Result<()> {
    let project = Project::locate(global)?;
    crate::lifecycle::tokio_runtime()?.block_on(async {
        let store = project.open_store().await?;
        let record = store
            .run(run_id)
            .await?
            .ok_or_else(|| anyhow::anyhow!("no run {run_id:?} in this store"))?;
        let mut options = record.launch_options.clone();
        if let Some(fields) = options.as_object_mut() {
            fields.insert("plan_model".into(), json!(model));
            fields.insert("act_model".into(), json!(model));
        }
        store.set_launch_options(run_id, options).await?;
        anyhow::Ok(())
    })
}

/// Stores `alias` (or none) as the forked run's session alias.
fn set_alias(project: &Project, run_id: &str, alias: Option<&str>) -> anyhow::Result<()> {
    crate::lifecycle::tokio_runtime()?.block_on(async {
        let store = project.open_store().await?;
        let Some(record) = store.run(run_id).await? else {
            return Ok(());
        };
        let mut options = record.launch_options.clone();
        if let Some(fields) = options.as_object_mut() {
            match alias {
                Some(alias) => fields.insert("session_alias".into(), json!(alias)),
                None => fields.remove("session_alias"),
            };
        }
        store.set_launch_options(run_id, options).await?;
        Ok(())
    })
}

/// Runs a session's prompts one after the other.
struct Driver {
    global: Globals,
    request: Request,
    shared: Arc<Shared>,
    /// The hook callbacks the program registered.
    hooks: Arc<hook_callbacks::ProgramHooks>,
    /// The rules the program's answers added for the session (`updatedPermissions`).
    session_rules: Arc<muster_agents::runtime::SessionRules>,
    session: Session,
    /// The last prompt's exit code: the process's.
    exit: Exit,
    /// A `set_permission_mode` for a stored run, taken by its next prompt's new turn.
    mode_change: Option<muster_config::PermissionMode>,
}

impl Driver {
    fn prompt(&mut self, prompt: String) {
        *self
            .shared
            .session_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = self.session.session_id.clone();
        self.shared.interrupted.store(false, Ordering::SeqCst);
        let team = matches!(self.session.shape, RunShape::Team { .. });
        let main = if team {
            crate::team::LEAD
        } else {
            crate::single_run::MAIN_AGENT
        };
        let translator = Arc::new(Mutex::new(Translator::new(
            self.session.session_id.clone(),
            main,
            self.request.partial,
        )));
        let asks = Arc::new(asks::ProgramAsks {
            shared: self.shared.clone(),
            bypass_disabled: self.session.init.bypass_disabled,
            session_rules: self.session_rules.clone(),
        });
        // A team run waits on its person's requests live: they are put to the program as
        // they are committed.
        let team_asks = (self.request.ask_program && team).then(|| {
            Arc::new(
                TeamAsks::new(
                    self.global.clone(),
                    asks.clone(),
                    self.session.run_id.clone(),
                )
                .waiting_for_answers_in_flight(),
            )
        });
        let streaming = self.request.output == Output::StreamJson;
        if streaming {
            self.shared.write(&self.init_message());
            self.shared.state("running");
        }
        // A mode set before this prompt comes with it (`mode` below, or the new run's flag).
        self.shared.mode_request.clear();
        let turn = Arc::new(Mutex::new(None::<TurnInterrupt>));
        *self
            .shared
            .turn
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(turn.clone());
        let front = FrontEnd {
            events: Arc::new(PromptSink {
                shared: self.shared.clone(),
                translator: translator.clone(),
                streaming,
                team_asks: team_asks.clone(),
            }),
            turn,
            person: self
                .request
                .ask_program
                .then_some(asks as Arc<dyn muster_agents::runtime::Terminal>),
            mode: self.mode_change.take(),
            hook_callbacks: Some(self.hooks.clone() as Arc<dyn muster_agents::hooks::HookCallbacks>),
            session_rules: Some(self.session_rules.clone()),
            mcp_servers: self.session.mcp_servers.clone(),
            mcp_servers_only: self.request.strict_mcp,
            mode_request: Some(self.shared.mode_request.clone()),
        };
        // A team run's teammates that end badly during this prompt are named in its result:
        // those whose notice is committed after the run's newest message now.
        let before = if team && self.session.stored {
            self.newest_message()
        } else {
            Some(0)
        };
        let ending = self
            .drive(prompt, &front, team_asks.as_deref())
            .unwrap_or_else(|error| Ending::from_error(&error));
        let ended_badly = match (team, before) {
            (true, Some(before)) => self.teammates_ended_badly(before),
            _ => Vec::new(),
        };
        *self
            .shared
            .turn
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        // A prompt that failed before its run was created leaves the next one to create it.
        self.session.stored = self.session.stored
            || crate::lifecycle::record_of(&self.global, &self.session.run_id).is_ok();
        self.exit = ending.exit;
        let result = translator
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .result(&ending, &self.session.run_id, &ended_badly);
        self.report(&result);
    }

    /// Prints the prompt's result as the output format asks.
    fn report(&self, result: &Value) {
        match self.request.output {
            Output::StreamJson => {
                self.shared.write(result);
                self.shared.state("idle");
            }
            Output::Json => self.shared.write(result),
            Output::Text => {
                let text = result["result"].as_str().unwrap_or_default();
                if result["is_error"] == true {
                    eprintln!("{text}");
                } else {
                    let mut out = self
                        .shared
                        .out
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    let _ = writeln!(out, "{text}");
                }
            }
        }
    }

    fn init_message(&self) -> Value {
        let init = &self.session.init;
        json!({
            "type": "system",
            "subtype": "init",
            "session_id": self.session.session_id,
            "cwd": init.cwd,
            "model": init.model,
            "permissionMode": init.permission_mode,
            "apiKeySource": "none",
            "tools": init.tools,
            "mcp_servers": init.mcp_servers,
            "slash_commands": [],
            "agents": [],
            "skills": [],
            "plugins": [],
            "output_style": "default",
            "claude_code_version": CLAUDE_CODE_VERSION,
            "muster_version": env!("CARGO_PKG_VERSION"),
            "muster_run_id": self.session.run_id,
            "uuid": uuid::Uuid::new_v4().to_string(),
        })
    }

    /// A new run's flags.
    fn run_flags(&self, prompt: String) -> RunFlags {
        RunFlags {
            prompt,
            model: self.request.model.clone(),
            permission_mode: self.request.permission_mode,
            settings: self.request.settings.clone(),
            session_alias: self.request.session_alias.clone(),
            system_prompt: self.request.system_prompt.clone(),
            append_system_prompt: self.request.append_system_prompt.clone(),
            ..RunFlags::default()
        }
    }

    /// Runs one prompt to its ending: a new run, the run continued, or — a run left
    /// awaiting a decision or mid-turn — the run carried on first.
    fn drive(
        &self,
        prompt: String,
        front: &FrontEnd,
        team_asks: Option<&TeamAsks>,
    ) -> anyhow::Result<Ending> {
        let global = &self.global;
        let id = &self.session.run_id;
        if let RunShape::Team { file } = &self.session.shape {
            if self.session.stored {
                // A later prompt is the lead's continuation: teammates kept, the team's
                // worktrees from the user's tree when its result was applied.
                let record = crate::lifecycle::record_of(global, id)?;
                if !matches!(record.status, RunStatus::Completed | RunStatus::Interrupted) {
                    let ending =
                        crate::team::resume_for_front(global, record, None, front.clone())?;
                    let ending = self.until_the_program_decides(ending, front, team_asks)?;
                    if ending.status != RunStatus::Completed {
                        return Ok(ending);
                    }
                }
                let record = crate::lifecycle::record_of(global, id)?;
                let ending =
                    crate::team::resume_for_front(global, record, Some(prompt), front.clone())?;
                return self.until_the_program_decides(ending, front, team_asks);
            }
            let Some(team_file) = file else {
                return Err(ExitError::new(
                    Exit::Usage,
                    format!("run {id} is not in the store: it cannot be continued"),
                )
                .into());
            };
            let flags = self.run_flags(prompt);
            let ending = crate::team::run_for_front(
                global,
                flags,
                team_file.clone(),
                id.clone(),
                front.clone(),
            )?;
            return self.until_the_program_decides(ending, front, team_asks);
        }
        if !self.session.stored {
            let flags = self.run_flags(prompt);
            return crate::single_run::run_for_front(global, flags, id.clone(), front.clone());
        }
        let record = crate::lifecycle::record_of(global, id)?;
        if !matches!(record.status, RunStatus::Completed | RunStatus::Interrupted) {
            let ending = crate::single_run::resume_for_front(global, record, None, front.clone())?;
            if ending.status != RunStatus::Completed {
                return Ok(ending);
            }
            let record = crate::lifecycle::record_of(global, id)?;
            return crate::single_run::resume_for_front(
                global,
                record,
                Some(prompt),
                front.clone(),
            );
        }
        crate::single_run::resume_for_front(global, record, Some(prompt), front.clone())
    }
}

impl Driver {
    /// `set_permission_mode` (already capped, [`Shared::set_mode`]), in order with the
    /// prompts: the main agent works in `mode` from the next prompt on — a new run's flag, or a
    /// switch committed with a stored run's next turn (a no-op when the running turn already
    /// took it at a tool-call boundary).
    fn change_mode(&mut self, mode: muster_config::PermissionMode) {
        self.session.init.permission_mode = mode.to_string();
        if self.session.stored {
            self.mode_change = Some(mode);
        } else {
            self.request.permission_mode = Some(mode);
        }
    }

    /// `set_model`: the prompts after it use `model` — a new run's flags, and a stored run's
    /// launch options (both modes' model, one store write), which its continuation is
    /// rebuilt from.
    fn change_model(&mut self, model: String) {
        if self.session.stored
            && let Err(error) = set_stored_model(&self.global, &self.session.run_id, &model)
        {
            eprintln!(
                "muster claude: warning: set_model {model:?} could not be stored with the run \
                 ({error:#}); the run keeps its model"
            );
            return;
        }
        self.session.init.model = model.clone();
        self.request.model = Some(model);
    }

    /// The run's newest message before a prompt; `None` when the store cannot say (the
    /// prompt's result then names no teammate, rather than every one of earlier prompts).
    fn newest_message(&self) -> Option<i64> {
        let read = || -> anyhow::Result<i64> {
            let project = Project::locate(&self.global)?;
            crate::lifecycle::tokio_runtime()?.block_on(async {
                let store = project.open_store().await?;
                teammates::newest_message(store.as_ref(), &self.session.run_id).await
            })
        };
        read()
            .inspect_err(|error| {
                eprintln!("muster claude: warning: the run's messages could not be read: {error:#}")
            })
            .ok()
    }

    /// The team run's teammates that ended badly after message `after`, in words.
    fn teammates_ended_badly(&self, after: i64) -> Vec<String> {
        let read = || -> anyhow::Result<Vec<String>> {
            let project = Project::locate(&self.global)?;
            crate::lifecycle::tokio_runtime()?.block_on(async {
                let store = project.open_store().await?;
                teammates::ended_badly(store.as_ref(), &self.session.run_id, after).await
            })
        };
        read().unwrap_or_else(|error| {
            vec![format!(
                "how the teammates ended could not be read from the store: {error:#}"
            )]
        })
    }

    /// A team run that stopped awaiting its person: each request still waiting that was not
    /// put to the program live (a merge, a request of an earlier process) is put to it now,
    /// and the run carried on while the program decides one; else the ending stands.
    fn until_the_program_decides(
        &self,
        ending: Ending,
        front: &FrontEnd,
        team_asks: Option<&TeamAsks>,
    ) -> anyhow::Result<Ending> {
        crate::person_requests::carry_on_while_decided(
            &self.global,
            &self.session.run_id,
            ending,
            front,
            team_asks,
        )
    }
}

/// The run's events as the prompt's messages (printed in `stream-json`, counted always).
struct PromptSink {
    shared: Arc<Shared>,
    translator: Arc<Mutex<Translator>>,
    streaming: bool,
    /// A team run's requests to its person go to the program.
    team_asks: Option<Arc<TeamAsks>>,
}

/// What a team run's request to its person is put to the program with.
type TeamAsks = crate::person_requests::TeamPerson;

impl EventSink for PromptSink {
    fn emit(&self, event: RunEvent) {
        if let Some(team) = &self.team_asks {
            team.ask_if_for_the_person(&event);
        }
        let messages = self
            .translator
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .messages_for(&event);
        if self.streaming {
            for message in messages {
                self.shared.write(&message);
            }
        }
        self.shared.interrupt_if_asked();
    }
}
