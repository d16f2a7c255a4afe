//! `muster acp`: muster as an Agent Client Protocol agent (JSON-RPC 2.0 on stdin/stdout, the
//! stable protocol v1) for editors — Zed, JetBrains, Neovim. A session is a run: its id is the
//! run's id, its first prompt starts the run, a later prompt continues it, `session/cancel`
//! interrupts the running turn (`interrupt_turn`, committed and resumable) and `session/load`
//! reopens a stored run, replaying its history. Behaviour: docs/acp.md.
//!
//! Stdout carries JSON-RPC only: before anything else the process keeps its real stdout for
//! the protocol and points file descriptor 1 at stderr, so nothing this process or its
//! children (Bash, hooks, MCP servers) print can reach the editor; stdin is kept the same way
//! and replaced by `/dev/null`, so no child reads the editor's messages.

mod asks;
mod board;
mod threads;
mod updates;

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, ContentBlock, Implementation, InitializeRequest,
    InitializeResponse, LoadSessionRequest, LoadSessionResponse, McpCapabilities, McpServer,
    NewSessionRequest, NewSessionResponse, PromptCapabilities, PromptRequest, PromptResponse,
    SessionId, SessionMode, SessionModeId, SessionModeState, SessionNotification, SessionUpdate,
    SetSessionModeRequest, SetSessionModeResponse, StopReason,
};
use agent_client_protocol::{Agent, ByteStreams, Client};
use muster_agents::runtime::{EventSink, RunEvent, TurnInterrupt};
use muster_config::PermissionMode;
use muster_config::settings::CliOverrides;
use muster_mailbox::{RunRecord, RunStatus};
use serde_json::Value;

use crate::exit::Exit;
use crate::launch::RunFlags;
use crate::lifecycle::{Ending, FrontEnd};
use crate::person_requests::TeamPerson;
use crate::project::{Globals, Project};
use updates::{Shown, chunk, updates_for};

/// The agent a single run's text comes from.
const LEAD: &str = crate::single_run::MAIN_AGENT;

/// `muster acp`: serves one editor on stdin/stdout until it closes its end.
pub fn serve(global: &Globals) -> anyhow::Result<Exit> {
    let (rpc_in, rpc_out) = take_stdio()?;
    let runtime = crate::lifecycle::tokio_runtime()?;
    let server = Server {
        global: global.clone(),
        sessions: Arc::new(Mutex::new(HashMap::new())),
        threads: Arc::new(AtomicBool::new(false)),
    };
    let served = server.clone();
    let result = runtime.block_on(async move {
        let transport = ByteStreams::new(
            blocking::Unblock::new(rpc_out),
            blocking::Unblock::new(rpc_in),
        );
        served.connect(transport).await
    });
    // The editor is gone (or the connection broke): every running turn is interrupted and its
    // ending committed before the process ends, so the runs stay resumable.
    server.end_every_turn();
    crate::lifecycle::drive_to_end(runtime, async {});
    result.map_err(|error| anyhow::anyhow!("the editor's connection failed: {error}"))?;
    Ok(Exit::Success)
}

/// The protocol's own ends of stdin and stdout; fd 1 becomes stderr and fd 0 `/dev/null`.
fn take_stdio() -> anyhow::Result<(File, File)> {
    let rpc_out = File::from(std::io::stdout().as_fd().try_clone_to_owned()?);
    let rpc_in = File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
    rustix::stdio::dup2_stdout(std::io::stderr())?;
    rustix::stdio::dup2_stdin(File::open("/dev/null")?)?;
    Ok((rpc_in, rpc_out))
}

/// One editor's sessions.
#[derive(Clone)]
struct Server {
    global: Globals,
    sessions: Arc<Mutex<HashMap<String, Session>>>,
    /// Whether the editor advertised subagent threads (`clientCapabilities.subagents`).
    threads: Arc<AtomicBool>,
}

/// A session: a run in a project.
struct Session {
    /// The project directory the editor opened (absolute).
    cwd: PathBuf,
    /// The run's workspace (the project's root), under which relative paths are shown.
    workspace: PathBuf,
    /// Whether the run exists in the store (after its first prompt, or loaded).
    stored: bool,
    /// The prompt under way, if any.
    turn: Option<Turn>,
    /// The agent whose text is the session's messages: `main`, or a team run's lead.
    main_agent: &'static str,
    /// A `session/set_mode` not taken yet: the main agent's (lead's) mode from the next
    /// prompt on.
    mode_change: Option<PermissionMode>,
    /// The same mode for the turn under way: the main agent takes it at its next tool-call
    /// boundary (a new prompt clears it and takes `mode_change` itself).
    mode_request: muster_agents::runtime::ModeRequest,
    /// The MCP servers the editor gave with `session/new` (or `session/load`): the user's own.
    mcp_servers: Vec<muster_config::McpServerConfig>,
}

/// The agent whose text a run's session shows as its messages.
fn main_agent_of(team: bool) -> &'static str {
    if team { crate::team::LEAD } else { LEAD }
}

/// A prompt under way: what ends its turn.
#[derive(Clone)]
struct Turn {
    front: FrontEnd,
    cancelled: Arc<AtomicBool>,
    /// Resolves when the prompt's thread has committed its ending.
    done: Arc<tokio::sync::Notify>,
    finished: Arc<AtomicBool>,
}

impl Turn {
    /// Interrupts the running turn; whether one was running (a prompt whose run has not
    /// started its turn yet has none).
    fn interrupt(&self) -> bool {
        self.cancelled.store(true, Ordering::SeqCst);
        self.front
            .turn
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(|turn| turn.interrupt())
    }
}

/// A JSON-RPC error a person can act on.
fn invalid(message: impl Into<String>) -> agent_client_protocol::Error {
    agent_client_protocol::Error::new(agent_client_protocol::ErrorCode::INVALID_PARAMS, message)
}

/// The error for a session id this connection has not opened: a teammate's thread takes no
/// requests of its own (the protocol's subagent sessions are restricted).
fn no_session(id: &str) -> agent_client_protocol::Error {
    match id.split_once(':') {
        Some((session, agent)) => invalid(format!(
            "session {id} is {agent}'s thread in session {session}: a thread takes no prompt or \
             mode of its own; send them to {session}"
        )),
        None => invalid(format!(
            "no session {id} in this connection: call session/new (or session/load) first"
        )),
    }
}

fn failed(message: impl Into<String>) -> agent_client_protocol::Error {
    agent_client_protocol::Error::new(agent_client_protocol::ErrorCode::INTERNAL_ERROR, message)
}

impl Server {
    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn connect(
        &self,
        transport: impl agent_client_protocol::ConnectTo<Agent>,
    ) -> Result<(), agent_client_protocol::Error> {
        let (on_init, on_new, on_load, on_prompt, on_cancel, on_close, on_set_mode) = (
            self.clone(),
            self.clone(),
            self.clone(),
            self.clone(),
            self.clone(),
            self.clone(),
            self.clone(),
        );
        Agent
            .v1()
            .name("muster")
            // The editor closed its end: every running turn is interrupted at once (the
            // prompts' tasks then answer into a closed connection and end).
            .on_close(async move |_cx| {
                on_close.interrupt_every_turn();
                Ok(())
            })
            .on_receive_request(
                async move |request: InitializeRequest, responder, _cx| {
                    on_init.threads.store(
                        request.client_capabilities.subagents.is_some(),
                        Ordering::SeqCst,
                    );
                    responder.respond(initialize(&request))
                },
                agent_client_protocol::on_receive_request!(),
            )
            .on_receive_request(
                async move |request: NewSessionRequest, responder, cx| match on_new
                    .new_session(&request)
                {
                    Ok((id, notice, modes)) => {
                        let id = SessionId::new(id);
                        responder.respond(NewSessionResponse::new(id.clone()).modes(modes))?;
                        if let Some(notice) = notice {
                            send(&cx, &id, SessionUpdate::AgentMessageChunk(chunk(&notice)));
                        }
                        Ok(())
                    }
                    Err(error) => responder.respond_with_error(error),
                },
                agent_client_protocol::on_receive_request!(),
            )
            .on_receive_request(
                async move |request: LoadSessionRequest, responder, cx| match on_load
                    .load_session(&request, &cx)
                    .await
                {
                    Ok(modes) => responder.respond(LoadSessionResponse::new().modes(modes)),
                    Err(error) => responder.respond_with_error(error),
                },
                agent_client_protocol::on_receive_request!(),
            )
            .on_receive_request(
                async move |request: PromptRequest, responder, cx| {
                    let started = on_prompt.start_prompt(&request, &cx);
                    match started {
                        Ok(prompt) => cx.spawn(async move {
                            match prompt.await {
                                Ok(stop) => responder.respond(PromptResponse::new(stop)),
                                Err(error) => responder.respond_with_error(error),
                            }
                        }),
                        Err(error) => responder.respond_with_error(error),
                    }
                },
                agent_client_protocol::on_receive_request!(),
            )
            .on_receive_request(
                async move |request: SetSessionModeRequest, responder, cx| match on_set_mode
                    .set_mode(&request)
                    .await
                {
                    Ok(mode) => {
                        responder.respond(SetSessionModeResponse::new())?;
                        send(
                            &cx,
                            &request.session_id,
                            SessionUpdate::CurrentModeUpdate(
                                agent_client_protocol::v1::schema::CurrentModeUpdate::new(
                                    SessionModeId::new(mode.as_str()),
                                ),
                            ),
                        );
                        Ok(())
                    }
                    Err(error) => responder.respond_with_error(error),
                },
                agent_client_protocol::on_receive_request!(),
            )
            .on_receive_notification(
                async move |notification: CancelNotification, _cx| {
                    on_cancel.cancel(&notification.session_id);
                    Ok(())
                },
                agent_client_protocol::on_receive_notification!(),
            )
            .connect_to(transport)
            .await
    }

    /// The globals of a session's project: its directory as `-C`.
    fn globals_at(&self, cwd: &Path) -> Globals {
        let mut global = self.global.clone();
        global.directory = Some(cwd.to_path_buf());
        global
    }

    /// Opens the project at the request's `cwd` for a new session (its run is made by the
    /// first prompt): the session's id, and what trust skipped, said once.
    fn new_session(
        &self,
        request: &NewSessionRequest,
    ) -> Result<(String, Option<String>, SessionModeState), agent_client_protocol::Error> {
        let cwd = checked_cwd(&request.cwd)?;
        let global = self.globals_at(&cwd);
        let project = load_project(&global)?;
        // A project with a team file is a team run (checked here, so a bad path is this
        // request's error).
        let team = crate::team::team_file_for(&global, None)
            .map_err(|error| invalid(format!("{error:#}")))?
            .is_some();
        let notice = trust_notice(&project);
        let mcp_servers = session_servers(&request.mcp_servers, &project)?;
        let modes = modes_of(
            &project,
            &project.settings.trust,
            project.settings.permission_mode.value,
        );
        let id = crate::ids::new_run_id(&mut fastrand::Rng::new());
        self.sessions().insert(
            id.clone(),
            Session {
                cwd,
                workspace: project.root.path().to_path_buf(),
                stored: false,
                turn: None,
                main_agent: main_agent_of(team),
                mode_change: None,
                mode_request: Default::default(),
                mcp_servers,
            },
        );
        Ok((id, notice, modes))
    }

    /// `session/set_mode`: the lead's (a single run's main agent's) mode from the next prompt
    /// on — a new run's flag, or a switch committed with a stored run's next turn — and, while
    /// a turn runs, from that turn's next tool-call boundary; teammates keep their own. A mode the project's settings disable is refused, and so is a mode
    /// above `default` unless the launch is trusted (docs/trust.md): the project's trust now
    /// for a run the next prompt starts, the trust the run stored at its start for a stored
    /// one (what `muster resume` gates its settings by). An editor may set its last mode on
    /// every session it opens, so this keeps a cloned repository from getting it unasked.
    async fn set_mode(
        &self,
        request: &SetSessionModeRequest,
    ) -> Result<PermissionMode, agent_client_protocol::Error> {
        let id = request.session_id.0.to_string();
        let asked = request.mode_id.0.as_ref();
        let mode = asked
            .parse::<PermissionMode>()
            .map_err(|error| invalid(format!("mode {asked:?}: {error}")))?;
        let (cwd, stored) = {
            let sessions = self.sessions();
            let session = sessions.get(&id).ok_or_else(|| no_session(&id))?;
            (session.cwd.clone(), session.stored)
        };
        let project = load_project(&self.globals_at(&cwd))?;
        if let Some(refused) = project.settings.refuse_disabled_mode(mode, "") {
            return Err(invalid(format!(
                "mode {mode} is not available in this project: {refused}"
            )));
        }
        let record = if stored {
            let store = project
                .open_store()
                .await
                .map_err(|error| failed(format!("the store cannot be opened: {error:#}")))?;
            store
                .run(&id)
                .await
                .map_err(|error| failed(format!("the store cannot be read: {error}")))?
        } else {
            None
        };
        // A first prompt's run not created yet starts with the project's trust now.
        let trust = match &record {
            Some(record) => stored_trust(&project, record)?,
            None => project.settings.trust.clone(),
        };
        if let Some(refused) = refuse_untrusted_mode(&trust, mode, &project) {
            return Err(invalid(refused));
        }
        let mut sessions = self.sessions();
        let session = sessions
            .get_mut(&id)
            .ok_or_else(|| invalid(format!("session {id} was closed meanwhile")))?;
        session.mode_change = Some(mode);
        if session.turn.is_some() {
            session.mode_request.request(mode);
        }
        Ok(mode)
    }

    /// Reopens a stored run as a session: refused when it is live elsewhere; its history is
    /// sent as updates before the answer, which gives the session's modes (the main agent's
    /// mode as its history left it; those the settings and the run's stored trust allow).
    async fn load_session(
        &self,
        request: &LoadSessionRequest,
        cx: &ConnectionTo<Client>,
    ) -> Result<SessionModeState, agent_client_protocol::Error> {
        let cwd = checked_cwd(&request.cwd)?;
        let id = request.session_id.0.to_string();
        if self
            .sessions()
            .get(&id)
            .is_some_and(|session| session.turn.is_some())
        {
            return Err(invalid(format!(
                "session {id} has a prompt under way in this connection"
            )));
        }
        let global = self.globals_at(&cwd);
        let project = load_project(&global)?;
        let mcp_servers = session_servers(&request.mcp_servers, &project)?;
        let record = stored_run(&project, &id).await?;
        crate::lifecycle::check_here_and_not_live_in(&project, &record)
            .await
            .map_err(|error| invalid(format!("{error:#}")))?;
        let threads = threads::Threads::new(
            cx.clone(),
            request.session_id.clone(),
            main_agent_of(record.team.is_some()),
            self.threads.load(Ordering::SeqCst),
        );
        let replayed_mode = replay(&project, &record, &threads);
        let current = replayed_mode
            .or_else(|| {
                record.launch_options["permission_mode"]
                    .as_str()
                    .and_then(|mode| mode.parse().ok())
            })
            .unwrap_or(project.settings.permission_mode.value);
        let modes = modes_of(&project, &stored_trust(&project, &record)?, current);
        self.sessions().insert(
            id,
            Session {
                cwd,
                workspace: PathBuf::from(&record.workspace),
                stored: true,
                turn: None,
                main_agent: main_agent_of(record.team.is_some()),
                mode_change: None,
                mode_request: Default::default(),
                mcp_servers,
            },
        );
        Ok(modes)
    }

    /// Starts a prompt's turn on its own thread (the run's lifecycle has its runtime); the
    /// future resolves with its stop reason once its ending is committed.
    fn start_prompt(
        &self,
        request: &PromptRequest,
        cx: &ConnectionTo<Client>,
    ) -> Result<
        impl std::future::Future<Output = Result<StopReason, agent_client_protocol::Error>>
        + Send
        + 'static,
        agent_client_protocol::Error,
    > {
        let id = request.session_id.0.to_string();
        let text = prompt_text(&request.prompt);
        if text.trim().is_empty() {
            return Err(invalid("the prompt has no text"));
        }
        let mut sessions = self.sessions();
        let session = sessions.get_mut(&id).ok_or_else(|| no_session(&id))?;
        if session.turn.is_some() {
            return Err(invalid(format!(
                "session {id} has a prompt under way: wait for its answer, or send \
                 session/cancel"
            )));
        }
        // A `session/set_mode` is a new run's flag, or a switch with a stored run's next turn.
        let mode_change = session.mode_change.take();
        session.mode_request.clear();
        let (new_run_mode, stored_mode) = if session.stored {
            (None, mode_change)
        } else {
            (mode_change, None)
        };
        let threads = Arc::new(threads::Threads::new(
            cx.clone(),
            request.session_id.clone(),
            session.main_agent,
            self.threads.load(Ordering::SeqCst),
        ));
        let editor = Arc::new(asks::EditorAsks {
            cx: cx.clone(),
            threads: threads.clone(),
            next: std::sync::atomic::AtomicU64::new(0),
        });
        // A team run waits on its person's requests live: each is put to the editor as it
        // is committed (a single run asks through the runtime's terminal instead).
        let team_person = (session.main_agent == crate::team::LEAD).then(|| {
            Arc::new(TeamPerson::new(
                self.globals_at(&session.cwd),
                editor.clone(),
                id.clone(),
            ))
        });
        // A team run's task board is the session's plan.
        let board = (session.main_agent == crate::team::LEAD)
            .then(|| {
                board::Board::start(
                    self.globals_at(&session.cwd),
                    id.clone(),
                    cx.clone(),
                    request.session_id.clone(),
                )
            })
            .flatten()
            .map(Arc::new);
        let sink = Arc::new(Sink {
            threads,
            workspace: session.workspace.clone(),
            shown: Mutex::new(Shown::default()),
            main_agent: session.main_agent,
            team_person: team_person.clone(),
            board: board.clone(),
        });
        let turn = Turn {
            front: FrontEnd {
                events: sink,
                turn: Arc::new(Mutex::new(None::<TurnInterrupt>)),
                person: Some(editor),
                mode: stored_mode,
                hook_callbacks: None,
                session_rules: None,
                mcp_servers: session.mcp_servers.clone(),
                mcp_servers_only: false,
                mode_request: Some(session.mode_request.clone()),
            },
            cancelled: Arc::new(AtomicBool::new(false)),
            done: Arc::new(tokio::sync::Notify::new()),
            finished: Arc::new(AtomicBool::new(false)),
        };
        session.turn = Some(turn.clone());
        let stored = session.stored;
        session.stored = true;
        let global = self.globals_at(&session.cwd);
        drop(sessions);
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let thread_turn = turn.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("acp-{id}"))
            .spawn({
                let id = id.clone();
                move || {
                    let ending = drive_prompt(
                        &global,
                        &id,
                        stored,
                        text,
                        &thread_turn.front,
                        team_person.as_deref(),
                        new_run_mode,
                    );
                    if let Some(board) = &board {
                        board.settle();
                    }
                    thread_turn.finished.store(true, Ordering::SeqCst);
                    thread_turn.done.notify_waiters();
                    let _ = sender.send(ending);
                }
            });
        if let Err(error) = spawned {
            self.end_turn(&id);
            return Err(failed(format!(
                "could not start the prompt's thread: {error}"
            )));
        }
        let server = self.clone();
        let cx = cx.clone();
        let session_id = request.session_id.clone();
        Ok(async move {
            let ending = receiver.await;
            server.end_turn(&id);
            let ending = match ending {
                Ok(Ok(ending)) => ending,
                Ok(Err(error)) => return Err(failed(format!("{error:#}"))),
                Err(_) => return Err(failed("the prompt's thread ended without an answer")),
            };
            let stop = stop_reason(&ending, turn.cancelled.load(Ordering::SeqCst));
            match stop {
                Some(stop) => {
                    if ending.status != RunStatus::Completed {
                        send(
                            &cx,
                            &session_id,
                            SessionUpdate::AgentMessageChunk(chunk(&format!(
                                "\n{}\n",
                                ending.text
                            ))),
                        );
                    }
                    Ok(stop)
                }
                None => Err(failed(ending.text).data(ending.result)),
            }
        })
    }

    fn end_turn(&self, id: &str) {
        if let Some(session) = self.sessions().get_mut(id) {
            session.turn = None;
        }
    }

    /// `session/cancel`: the running turn is interrupted (a session without a prompt under
    /// way ignores it). A cancel that comes before the prompt's run has started its turn is
    /// kept: it is given again until a turn takes it or the prompt ends.
    fn cancel(&self, session: &SessionId) {
        let Some(turn) = self
            .sessions()
            .get(session.0.as_ref())
            .and_then(|session| session.turn.clone())
        else {
            return;
        };
        if turn.interrupt() {
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("acp-cancel".into())
            .spawn(move || until_interrupted(&turn));
        if let Err(error) = spawned {
            tracing::warn!("a cancel before the turn started is not kept (no thread: {error})");
        }
    }

    fn running_turns(&self) -> Vec<Turn> {
        self.sessions()
            .values()
            .filter_map(|session| session.turn.clone())
            .collect()
    }

    fn interrupt_every_turn(&self) {
        for turn in self.running_turns() {
            turn.interrupt();
        }
    }

    /// Interrupts every running turn and waits until each has committed its ending.
    fn end_every_turn(&self) {
        for turn in self.running_turns() {
            wait_blocking(&turn);
        }
    }
}

/// Gives `turn`'s interrupt again until a running turn takes it or the prompt has finished
/// (on a thread with no runtime). The agent arms its turn without telling anyone, so the look
/// is repeated on a short timer as well as when the prompt ends.
fn until_interrupted(turn: &Turn) {
    repeat_interrupt(turn, Duration::from_millis(20), true);
}

/// Waits on a thread with no runtime until `turn`'s thread has finished. An interrupt that
/// came before the turn was armed is given again.
fn wait_blocking(turn: &Turn) {
    repeat_interrupt(turn, Duration::from_millis(200), false);
}

/// Gives `turn`'s interrupt every `every` (and whenever the turn says it is done) until the
/// turn has finished or, with `until_taken`, a running turn took the interrupt.
fn repeat_interrupt(turn: &Turn, every: Duration, until_taken: bool) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
    else {
        return;
    };
    runtime.block_on(async {
        loop {
            let waiting = turn.done.notified();
            if turn.finished.load(Ordering::SeqCst) || (turn.interrupt() && until_taken) {
                return;
            }
            let _ = tokio::time::timeout(every, waiting).await;
        }
    });
}

/// Runs one prompt of session `id` to its ending (on a thread of its own): a new run, the
/// run continued, or — a run left mid-turn by a crash or a signal — the run carried on first.
/// A team run that stops awaiting its person is carried on while the editor decides what
/// waits (a merge is asked then).
fn drive_prompt(
    global: &Globals,
    id: &str,
    stored: bool,
    prompt: String,
    front: &FrontEnd,
    person: Option<&TeamPerson>,
    mode: Option<PermissionMode>,
) -> anyhow::Result<Ending> {
    let settled = |ending: Ending| {
        crate::person_requests::carry_on_while_decided(global, id, ending, front, person)
    };
    if !stored {
        let flags = RunFlags {
            prompt,
            permission_mode: mode,
            ..RunFlags::default()
        };
        return match crate::team::team_file_for(global, None)? {
            Some(team_file) => {
                let mut flags = flags;
                crate::command_prompt::choose(global, &mut flags)?;
                settled(crate::team::run_for_front(
                    global,
                    flags,
                    team_file,
                    id.to_owned(),
                    front.clone(),
                )?)
            }
            None => crate::single_run::run_for_front(global, flags, id.to_owned(), front.clone()),
        };
    }
    let record = crate::lifecycle::record_of(global, id)?;
    if !matches!(record.status, RunStatus::Completed | RunStatus::Interrupted) {
        let ending = settled(resume_for_front(global, record, None, front)?)?;
        if ending.status != RunStatus::Completed {
            return Ok(ending);
        }
        let record = crate::lifecycle::record_of(global, id)?;
        return settled(resume_for_front(global, record, Some(prompt), front)?);
    }
    settled(resume_for_front(global, record, Some(prompt), front)?)
}

/// The stored run `record` carried on (`None`) or continued with a prompt, by its kind: a
/// team run's later prompt is the lead's continuation (teammates kept, see `team::continuation`).
fn resume_for_front(
    global: &Globals,
    record: muster_mailbox::RunRecord,
    continuation: Option<String>,
    front: &FrontEnd,
) -> anyhow::Result<Ending> {
    if record.team.is_some() {
        crate::team::resume_for_front(global, record, continuation, front.clone())
    } else {
        crate::single_run::resume_for_front(global, record, continuation, front.clone())
    }
}

/// The stop reason of a turn's ending; `None` for a failure (answered with an error).
fn stop_reason(ending: &Ending, cancelled: bool) -> Option<StopReason> {
    match ending.status {
        RunStatus::Completed | RunStatus::AwaitingDecision => Some(StopReason::EndTurn),
        RunStatus::Interrupted if cancelled => Some(StopReason::Cancelled),
        RunStatus::Budget => Some(StopReason::MaxTurnRequests),
        RunStatus::Interrupted => Some(StopReason::Cancelled),
        _ => None,
    }
}

/// `initialize`'s answer: protocol v1, sessions that load, text prompts.
fn initialize(_request: &InitializeRequest) -> InitializeResponse {
    InitializeResponse::new(ProtocolVersion::V1)
        .agent_capabilities(
            AgentCapabilities::new()
                .load_session(true)
                .prompt_capabilities(PromptCapabilities::new().embedded_context(true))
                .mcp_capabilities(McpCapabilities::new().http(true)),
        )
        .agent_info(Implementation::new("muster", env!("CARGO_PKG_VERSION")))
}

/// The session's modes: every mode the project's settings and the launch's `trust` allow, the
/// current one first named.
fn modes_of(
    project: &Project,
    trust: &muster_config::trust::TrustDecision,
    current: PermissionMode,
) -> SessionModeState {
    let available = PermissionMode::ALL
        .iter()
        .filter(|mode| project.settings.refuse_disabled_mode(**mode, "").is_none())
        .filter(|mode| refuse_untrusted_mode(trust, **mode, project).is_none())
        .map(|mode| SessionMode::new(SessionModeId::new(mode.as_str()), mode.as_str()))
        .collect();
    SessionModeState::new(SessionModeId::new(current.as_str()), available)
}

/// Why `mode` is above what a launch gated by `trust` may use: a mode above `default` needs a
/// trusted project, as the project's own `permission_mode` does (docs/trust.md).
fn refuse_untrusted_mode(
    trust: &muster_config::trust::TrustDecision,
    mode: PermissionMode,
    project: &Project,
) -> Option<String> {
    (!trust.trusted && mode > PermissionMode::Default).then(|| {
        format!(
            "mode {mode} is above `default`, which needs a trusted project, and {} is not \
             trusted ({}): run `muster trust` there and open a new session (a stored run keeps \
             the trust it started with), or choose default or plan",
            project.root.path().display(),
            trust.why
        )
    })
}

/// The trust decision a stored run's settings are gated by, as `muster resume` reads it (a
/// run stored before it kept one is decided by the project's trust now).
fn stored_trust(
    project: &Project,
    record: &RunRecord,
) -> Result<muster_config::trust::TrustDecision, agent_client_protocol::Error> {
    let Some(stored) = record.launch_options.get("trust").filter(|v| !v.is_null()) else {
        return Ok(project.settings.trust.clone());
    };
    let stored: crate::launch::StoredTrust =
        serde_json::from_value(stored.clone()).map_err(|error| {
            failed(format!(
                "run {}'s stored trust does not read: {error}",
                record.id
            ))
        })?;
    stored
        .decision_now(project.root.path())
        .map(|(decision, _)| decision)
        .map_err(|error| failed(format!("{error:#}")))
}

/// A `cwd` that is absolute and a directory.
fn checked_cwd(cwd: &Path) -> Result<PathBuf, agent_client_protocol::Error> {
    if !cwd.is_absolute() {
        return Err(invalid(format!(
            "cwd {:?} is not an absolute path: send the project's absolute directory",
            cwd.display().to_string()
        )));
    }
    if !cwd.is_dir() {
        return Err(invalid(format!(
            "cwd {} is not a directory on this machine",
            cwd.display()
        )));
    }
    Ok(cwd.to_path_buf())
}

fn load_project(global: &Globals) -> Result<Project, agent_client_protocol::Error> {
    crate::loading::project_root(global)
        .and_then(|root| Project::load(global, root, CliOverrides::new()))
        .map_err(|error| invalid(format!("{error:#}")))
}

async fn stored_run(
    project: &Project,
    id: &str,
) -> Result<RunRecord, agent_client_protocol::Error> {
    let store = project
        .open_store()
        .await
        .map_err(|error| failed(format!("the store cannot be opened: {error:#}")))?;
    store
        .run(id)
        .await
        .map_err(|error| failed(format!("the store cannot be read: {error}")))?
        .ok_or_else(|| {
            invalid(format!(
                "no run {id} in {}'s store (see `muster runs`; a session never prompted has \
                 no run to load: open a new session)",
                project.root.path().display()
            ))
        })
}

/// The MCP servers an editor gives for a session: the user's own choice, so they start without
/// project trust (in the sandbox, like every server); `${VAR}` expanded from muster's
/// environment. A server that cannot be started as given is this request's error.
fn session_servers(
    servers: &[McpServer],
    project: &Project,
) -> Result<Vec<muster_config::McpServerConfig>, agent_client_protocol::Error> {
    let pairs = |items: Vec<(String, String)>| {
        items
            .into_iter()
            .collect::<std::collections::BTreeMap<String, String>>()
    };
    servers
        .iter()
        .map(|server| {
            let (name, entry) = match server {
                McpServer::Stdio(stdio) => (
                    &stdio.name,
                    serde_json::json!({
                        "command": stdio.command.display().to_string(),
                        "args": stdio.args,
                        "env": pairs(stdio.env.iter().map(|v| (v.name.clone(), v.value.clone())).collect()),
                    }),
                ),
                McpServer::Http(http) => (
                    &http.name,
                    serde_json::json!({
                        "type": "http",
                        "url": http.url,
                        "headers": pairs(http.headers.iter().map(|h| (h.name.clone(), h.value.clone())).collect()),
                    }),
                ),
                McpServer::Sse(sse) => (&sse.name, serde_json::json!({"type": "sse", "url": sse.url})),
                _ => {
                    return Err(invalid(
                        "an MCP server of a transport muster does not speak (stdio and http only)",
                    ));
                }
            };
            muster_config::mcp::session_server(name, &entry, &project.process.env)
                .map_err(|why| invalid(format!("mcpServers: {why}")))
        })
        .collect()
}

/// What trust skipped of the project, said as `muster run` says it on stderr.
fn trust_notice(project: &Project) -> Option<String> {
    let (servers, _) =
        crate::mcp::load_servers(project.root.path(), &project.settings, &project.process);
    let skipped = servers.servers.iter().filter(|s| s.untrusted).count();
    crate::loading::trust_notice(&project.settings, skipped, &[])
}

/// The prompt's text: its text blocks, and the resources it names or embeds.
fn prompt_text(blocks: &[ContentBlock]) -> String {
    let parts: Vec<String> = blocks
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.clone()),
            ContentBlock::ResourceLink(link) => Some(format!("@{}", link.uri)),
            ContentBlock::Resource(resource) => serde_json::to_value(&resource.resource)
                .ok()
                .and_then(|value| {
                    let uri = value["uri"].as_str()?.to_owned();
                    let text = value["text"].as_str()?.to_owned();
                    Some(format!("<file uri=\"{uri}\">\n{text}\n</file>"))
                }),
            _ => None,
        })
        .collect();
    parts.join("\n")
}

/// Sends one update; a connection that is gone loses a line of display, never a decision.
fn send(cx: &ConnectionTo<Client>, session: &SessionId, update: SessionUpdate) {
    if let Err(error) = cx.send_notification(SessionNotification::new(session.clone(), update)) {
        tracing::debug!("session/update not sent: {error}");
    }
}

/// The run's events as the session's (and its threads') updates.
struct Sink {
    threads: Arc<threads::Threads>,
    workspace: PathBuf,
    shown: Mutex<Shown>,
    main_agent: &'static str,
    /// A team run's requests to the person go to the editor.
    team_person: Option<Arc<TeamPerson>>,
    /// A team run's task board, shown as the session's plan.
    board: Option<Arc<board::Board>>,
}

impl EventSink for Sink {
    fn emit(&self, event: RunEvent) {
        if let Some(person) = &self.team_person {
            person.ask_if_for_the_person(&event);
        }
        if let Some(board) = &self.board {
            board.saw(&event);
        }
        self.threads.saw(&event);
        let updates = {
            let mut shown = self.shown.lock().unwrap_or_else(PoisonError::into_inner);
            updates_for(
                &event,
                &mut shown,
                self.main_agent,
                &self.workspace,
                self.threads.enabled(),
            )
        };
        for (to, update) in updates {
            self.threads.send(&to, update);
        }
    }
}

/// Sends a stored run's history: its first prompt, then each committed event of its log (a
/// teammate's on its thread, when the editor shows threads). The main agent's last mode the
/// log tells, if it tells one.
fn replay(
    project: &Project,
    record: &RunRecord,
    threads: &threads::Threads,
) -> Option<PermissionMode> {
    if let Some(prompt) = record.launch_options["prompt"].as_str() {
        threads.send(
            &updates::To::Session,
            SessionUpdate::UserMessageChunk(chunk(prompt)),
        );
    }
    let log = project.root.logs_dir().join(format!("{}.jsonl", record.id));
    let Ok(text) = std::fs::read_to_string(&log) else {
        return None;
    };
    let mut shown = Shown::default();
    let workspace = Path::new(&record.workspace);
    let main_agent = main_agent_of(record.team.is_some());
    let mut mode = None;
    for event in text.lines().filter_map(logged_event) {
        match &event {
            RunEvent::AgentStarted {
                agent, mode: now, ..
            }
            | RunEvent::ModeChanged {
                agent, mode: now, ..
            } if agent == main_agent => {
                mode = now.parse().ok().or(mode);
            }
            _ => {}
        }
        threads.saw(&event);
        for (to, update) in
            updates_for(&event, &mut shown, main_agent, workspace, threads.enabled())
        {
            threads.send(&to, update);
        }
    }
    mode
}

/// The event a run log's line records, if it is one.
fn logged_event(line: &str) -> Option<RunEvent> {
    let value: Value = serde_json::from_str(line).ok()?;
    let recorded = value
        .get("fields")
        .and_then(|fields| fields.get("event"))
        .or_else(|| value.get("event"))?;
    let event = match recorded {
        Value::String(text) => serde_json::from_str(text).ok()?,
        other => other.clone(),
    };
    RunEvent::from_line(&event).ok()
}
