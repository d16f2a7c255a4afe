//! `muster serve`: a local web inbox over the store (DESIGN "Wave 2 → The web inbox"). Pages
//! are rendered on the server (`pages.rs`), plans through the inert Markdown of
//! `markdown.rs`; a person's decisions go through [`crate::human_decision`], the code
//! `muster approve` uses, so the responder check, the first answer winning and the live
//! run's wake-up are the same; `security.rs` holds the token, cookie, Host, Origin and CSP
//! rules; `watch.rs` turns commits into server-sent events.

pub mod load;
pub mod markdown;
pub mod pages;
pub mod run_page;
pub mod security;
pub mod stop;
pub mod watch;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Form, Path, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use futures_util::{Stream, StreamExt};
use muster_config::settings::{ModelInfo, ProviderKind};
use muster_mailbox::{
    MailboxStore, MessageBody, MessageKind, RequestRecord, RunStatus, TaskStatus, live,
};
use muster_protocol::Responder;
use serde::Deserialize;
use tokio::sync::broadcast;

use crate::human_decision::{Decision, RefusedDecision, decide_as_human};
use pages::{RequestView, RunRow};
use run_page::RunView;
use security::Secrets;

/// What `muster serve` needs of the project.
#[derive(Clone)]
pub struct ServeProject {
    pub store: Arc<dyn MailboxStore>,
    /// The SQLite file whose `data_version` the fallback check reads.
    pub store_path: Option<PathBuf>,
    pub muster_dir: PathBuf,
    pub runs_dir: PathBuf,
    pub models: BTreeMap<String, ModelInfo>,
    /// The provider of plan-mode and of other requests when an agent names none, from the
    /// project's settings: the cost report's provider column.
    pub plan_provider: ProviderKind,
    pub act_provider: ProviderKind,
    /// This project's id (`""` when it has none yet): the runs page lists its runs unless
    /// asked for every project's (as `muster runs --all-projects`).
    pub project_id: String,
}

struct Served {
    project: ServeProject,
    secrets: Secrets,
    changes: watch::Changes,
    /// Streamed pieces of model responses from the run processes of this host.
    deltas: watch::Deltas,
    /// Whether serve holds this host's socket, which the deltas come through.
    takes_deltas: std::sync::atomic::AtomicBool,
    diffstats: load::DiffstatCache,
}

type Shared = Arc<Served>;

/// A bound server, ready to run.
pub struct Server {
    listener: tokio::net::TcpListener,
    served: Shared,
}

impl Server {
    /// Binds 127.0.0.1 (`port` 0: any free port).
    pub async fn bind(project: ServeProject, port: u16) -> anyhow::Result<Server> {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
            .await
            .map_err(|e| {
                anyhow::anyhow!("cannot listen on 127.0.0.1:{port}: {e} (pick another with --port)")
            })?;
        let port = listener.local_addr()?.port();
        let secrets = Secrets::new(port)
            .map_err(|_| anyhow::anyhow!("no system randomness for the session token"))?;
        let (changes, _) = broadcast::channel(64);
        let deltas = watch::Deltas::new(1024);
        Ok(Server {
            listener,
            served: Arc::new(Served {
                project,
                secrets,
                changes,
                deltas,
                takes_deltas: Default::default(),
                diffstats: load::DiffstatCache::default(),
            }),
        })
    }

    /// The URL to open: it carries the one-time token.
    pub fn url(&self) -> anyhow::Result<String> {
        let port = self.listener.local_addr()?.port();
        let token = self.served.secrets.token().unwrap_or_default();
        Ok(format!("http://127.0.0.1:{port}/?token={token}"))
    }

    /// Serves until `shutdown` completes.
    pub async fn run(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let project = &self.served.project;
        let _watch = watch::start(
            project.store.as_ref(),
            project.store_path.as_deref(),
            &project.muster_dir,
            self.served.changes.clone(),
            self.served.deltas.clone(),
        )
        .await?;
        self.served
            .takes_deltas
            .store(_watch.takes_deltas(), std::sync::atomic::Ordering::Relaxed);
        axum::serve(self.listener, router(self.served))
            .with_graceful_shutdown(shutdown)
            .await?;
        Ok(())
    }
}

fn router(served: Shared) -> Router {
    Router::new()
        .route("/", get(runs))
        .route("/runs/{run}", get(run))
        .route("/runs/{run}/live", get(live_parts))
        .route("/runs/{run}/agents/{agent}", get(agent))
        .route("/runs/{run}/agents/{agent}/diff", get(agent_diff))
        .route("/runs/{run}/agents/{agent}/stop", post(stop_agent))
        .route("/runs/{run}/stop", post(stop_run))
        .route("/runs/{run}/requests/{request}", get(request).post(decide))
        .route("/events", get(events))
        .route("/assets/app.js", get(script))
        .route("/assets/app.css", get(style))
        // Browsers ask for it on every page; no icon, and no 404 in the console.
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
        .layer(middleware::from_fn_with_state(served.clone(), guard))
        .with_state(served)
}

/// Host, then the token exchange, then the session cookie, then Origin for a POST; and the
/// hardening headers on every response, refusals included.
async fn guard(State(served): State<Shared>, request: Request, next: Next) -> Response {
    let mut response = check(&served, request, next).await;
    security::harden(response.headers_mut());
    response
}

async fn check(served: &Served, request: Request, next: Next) -> Response {
    let secrets = &served.secrets;
    let headers = request.headers();
    if !secrets.host_ok(headers) {
        return refuse(
            StatusCode::MISDIRECTED_REQUEST,
            "Wrong host",
            "This server answers only to 127.0.0.1 or localhost with its own port.",
        );
    }
    if let Some(token) = token_of(request.uri().query()) {
        return match secrets.exchange(token) {
            Some(cookie) => {
                let mut response = Redirect::to("/").into_response();
                if let Ok(value) = HeaderValue::from_str(&cookie) {
                    response.headers_mut().insert(header::SET_COOKIE, value);
                }
                response
            }
            None => refuse(
                StatusCode::UNAUTHORIZED,
                "Token used",
                "This link's token was already used or is wrong. Restart `muster serve` for a new link.",
            ),
        };
    }
    if !secrets.has_session(headers) {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "Not signed in",
            "Open the URL `muster serve` printed; it signs this browser in once.",
        );
    }
    if request.method() != Method::GET
        && request.method() != Method::HEAD
        && !secrets.origin_ok(headers)
    {
        return refuse(
            StatusCode::FORBIDDEN,
            "Refused",
            "A change must come from a page of this server (its Origin did not match).",
        );
    }
    next.run(request).await
}

fn token_of(query: Option<&str>) -> Option<&str> {
    query?
        .split('&')
        .find_map(|pair| pair.strip_prefix("token="))
}

fn refuse(status: StatusCode, title: &str, message: &str) -> Response {
    (status, Html(pages::error_page(title, message))).into_response()
}

/// A store error as a page: the store could not be read.
fn store_failure(error: impl std::fmt::Display) -> Response {
    refuse(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Store error",
        &error.to_string(),
    )
}

/// The runs page's query: `?all=1` lists every project's runs.
#[derive(Debug, Deserialize)]
struct RunsQuery {
    #[serde(default)]
    all: Option<String>,
}

async fn runs(
    State(served): State<Shared>,
    axum::extract::Query(query): axum::extract::Query<RunsQuery>,
) -> Response {
    let all_projects = query.all.is_some_and(|all| all == "1");
    match load_runs(&served, all_projects).await {
        Ok(rows) => Html(pages::runs_page(&rows, all_projects)).into_response(),
        Err(error) => store_failure(error),
    }
}

async fn load_runs(served: &Served, all_projects: bool) -> anyhow::Result<Vec<RunRow>> {
    let store = served.project.store.as_ref();
    let project_id = &served.project.project_id;
    let mut runs: Vec<_> = store
        .runs()
        .await?
        .into_iter()
        .filter(|run| all_projects || run.in_project(project_id))
        .collect();
    runs.sort_by_key(|r| std::cmp::Reverse((r.created_at, r.id.clone())));
    let mut rows = Vec::with_capacity(runs.len());
    for run in runs {
        let tasks = store.tasks(&run.id).await?;
        let waiting = store
            .requests(&run.id)
            .await?
            .into_iter()
            .filter(|r| r.response.is_none() && Responder::names_the_person(&r.responder))
            .collect();
        rows.push(RunRow {
            status: status_of(served, &run),
            members: store.roster(&run.id).await?.len(),
            tasks_done: tasks
                .iter()
                .filter(|t| t.status == TaskStatus::Completed)
                .count(),
            tasks: tasks.len(),
            waiting,
            run,
        });
    }
    Ok(rows)
}

/// A run marked running whose lock is free was interrupted (as `muster runs` shows it).
fn status_of(served: &Served, run: &muster_mailbox::RunRecord) -> RunStatus {
    let live = live::is_live(&served.project.runs_dir, &run.id).unwrap_or(false);
    if run.status == RunStatus::Running && !live {
        RunStatus::Interrupted
    } else {
        run.status
    }
}

async fn run(State(served): State<Shared>, Path(run_id): Path<String>) -> Response {
    match load_run_view(&served, &run_id).await {
        Ok(Some(view)) => Html(run_page::run_page(&view)).into_response(),
        Ok(None) => no_such_run(&run_id),
        Err(error) => store_failure(error),
    }
}

fn no_such_run(run_id: &str) -> Response {
    refuse(
        StatusCode::NOT_FOUND,
        "No such run",
        &format!("There is no run {run_id:?} in this store."),
    )
}

fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The run page's HTML as `GET /runs/{run}` renders it, outside a server (`muster bench
/// cockpit` times it); none for a run the store lacks.
pub async fn run_page_html(project: &ServeProject, run_id: &str) -> anyhow::Result<Option<String>> {
    let served = Served {
        project: project.clone(),
        secrets: Secrets::new(0)
            .map_err(|_| anyhow::anyhow!("no system randomness for the session token"))?,
        changes: broadcast::channel(1).0,
        deltas: watch::Deltas::new(1),
        takes_deltas: Default::default(),
        diffstats: load::DiffstatCache::default(),
    };
    Ok(load_run_view(&served, run_id)
        .await?
        .map(|view| run_page::run_page(&view)))
}

/// Everything the run page shows, read from the store now.
async fn load_run_view(served: &Served, run_id: &str) -> anyhow::Result<Option<RunView>> {
    let store = served.project.store.as_ref();
    let Some(run) = store.run(run_id).await? else {
        return Ok(None);
    };
    let status = status_of(served, &run);
    let live = live::is_live(&served.project.runs_dir, &run.id).unwrap_or(false);
    let roster = store.roster(run_id).await?;
    let tasks = store.tasks(run_id).await?;
    let requests = store.requests(run_id).await?;
    let mail = store.newest_messages(run_id, run_page::MAIL_SHOWN).await?;
    let reports = store
        .messages_of_kind(run_id, &MessageKind::VerificationReport)
        .await?;
    let data = load::RunData {
        run: &run,
        live,
        roster: &roster,
        tasks: &tasks,
        requests: &requests,
        models: &served.project.models,
        now: now_millis(),
    };
    let transcripts = load::transcripts(store, run_id).await?;
    let costs = load::cost_report(&served.project, run_id, &transcripts);
    let mut agents = load::agent_rows(store, &served.diffstats, &data, transcripts).await?;
    let committed = agents
        .iter()
        .map(|row| (row.entry.agent.clone(), row.spend.0))
        .collect();
    let mut streamed = served.deltas.streamed(run_id, &committed);
    for row in &mut agents {
        row.streaming = streamed.remove(&row.entry.agent);
    }
    let stops = stop::run_stops(
        &store
            .records(run_id, Responder::HUMAN, stop::STOP_STREAM, 0)
            .await?,
    );
    Ok(Some(RunView {
        status,
        live,
        streams: served
            .takes_deltas
            .load(std::sync::atomic::Ordering::Relaxed),
        agents,
        costs,
        reports,
        mail: mail.messages,
        earlier_mail: mail.earlier,
        now: data.now,
        stops,
        tasks,
        requests,
        run,
    }))
}

/// The run page's parts as they change: all of them once when the page connects (what
/// changed between its render and the connection), then after each burst of commits only
/// those whose HTML changed. Each `part` event's data is the element id (and the id of the
/// element a new one joins), a newline, and the part's HTML. Between them, `delta` events carry
/// what the run's agents stream on this host ([`run_deltas`]).
async fn live_parts(
    State(served): State<Shared>,
    Path(run_id): Path<String>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let receiver = served.changes.subscribe();
    let deltas = run_deltas(served.deltas.subscribe(), run_id.clone());
    let sent: std::collections::HashMap<String, String> = Default::default();
    let start = (served, run_id, receiver, sent, true);
    let stream = futures_util::stream::unfold(
        start,
        |(served, run_id, mut receiver, mut sent, first)| async move {
            if !first && !next_burst(&mut receiver).await {
                return None;
            }
            let events = match load_run_view(&served, &run_id).await {
                Ok(Some(view)) => changed_parts(&view, &mut sent),
                Ok(None) | Err(_) => Vec::new(),
            };
            Some((events, (served, run_id, receiver, sent, false)))
        },
    )
    .flat_map(|events| futures_util::stream::iter(events.into_iter().map(Ok::<_, Infallible>)));
    Sse::new(futures_util::stream::select(stream, deltas)).keep_alive(KeepAlive::default())
}

/// The run's streamed pieces as `delta` events: "AGENT KIND TURN PIECE", a newline, the text. A
/// page that falls behind loses pieces until its agent's row is sent again (the row holds what
/// streamed so far), never a committed part.
fn run_deltas(
    receiver: broadcast::Receiver<watch::Delta>,
    run_id: String,
) -> impl Stream<Item = Result<Event, Infallible>> {
    futures_util::stream::unfold((receiver, run_id), |(mut receiver, run_id)| async move {
        loop {
            match receiver.recv().await {
                Ok(delta) if delta.run == run_id => {
                    let event = Event::default().event("delta").data(format!(
                        "{} {} {} {}\n{}",
                        delta.agent,
                        delta.kind.as_str(),
                        delta.turn,
                        delta.piece,
                        delta.text
                    ));
                    return Some((Ok(event), (receiver, run_id)));
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
}

/// Waits for the next change and takes the rest of its burst; false once serve stops.
async fn next_burst(receiver: &mut broadcast::Receiver<watch::Source>) -> bool {
    match receiver.recv().await {
        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
        Err(broadcast::error::RecvError::Closed) => return false,
    }
    while let Ok(_) | Err(broadcast::error::TryRecvError::Lagged(_)) = receiver.try_recv() {}
    true
}

fn changed_parts(
    view: &RunView,
    sent: &mut std::collections::HashMap<String, String>,
) -> Vec<Event> {
    let mut events = Vec::new();
    for part in run_page::run_parts(view) {
        let html = part.html.into_string();
        if sent.get(&part.id) == Some(&html) {
            continue;
        }
        let head = match part.parent {
            Some(parent) => format!("{} {parent}", part.id),
            None => part.id.clone(),
        };
        events.push(
            Event::default()
                .event("part")
                .data(format!("{head}\n{html}")),
        );
        sent.insert(part.id, html);
    }
    events
}

/// A person stops a teammate ([`stop::stop_teammate`]); back to the run page.
async fn stop_agent(
    State(served): State<Shared>,
    Path((run_id, agent)): Path<(String, String)>,
) -> Response {
    let project = &served.project;
    match stop::stop_teammate(project.store.as_ref(), &project.runs_dir, &run_id, &agent).await {
        Ok(_) => Redirect::to(&format!("/runs/{run_id}")).into_response(),
        Err(refused) => stop_refused(&refused),
    }
}

/// A person stops the run as Ctrl-C would ([`stop::stop_run`]); back to the run page.
async fn stop_run(State(served): State<Shared>, Path(run_id): Path<String>) -> Response {
    let project = &served.project;
    match stop::stop_run(project.store.as_ref(), &project.runs_dir, &run_id).await {
        Ok(_) => Redirect::to(&format!("/runs/{run_id}")).into_response(),
        Err(refused) => stop_refused(&refused),
    }
}

fn stop_refused(refused: &stop::StopRefused) -> Response {
    use stop::StopRefused as R;
    let status = match refused {
        R::NoRun(_) | R::NotATeammate { .. } => StatusCode::NOT_FOUND,
        R::AlreadyAsked { .. }
        | R::AlreadyStopped(_)
        | R::LiveElsewhere
        | R::Finished(_)
        | R::AlreadyStopping
        | R::AlreadyWaiting => StatusCode::CONFLICT,
        R::Signal(_) | R::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    refuse(status, "Not stopped", &format!("Not stopped: {refused}."))
}

/// One agent: its row, what it changed, its transcript.
async fn agent(
    State(served): State<Shared>,
    Path((run_id, agent)): Path<(String, String)>,
) -> Response {
    let store = served.project.store.as_ref();
    let loaded = async {
        let Some(view) = load_run_view(&served, &run_id).await? else {
            return anyhow::Ok(None);
        };
        let Some(row) = view.agents.iter().position(|row| row.entry.agent == agent) else {
            return Ok(Some(None));
        };
        let records = store
            .records(&run_id, &agent, muster_agents::runtime::TRANSCRIPT, 0)
            .await?;
        Ok(Some(Some((view, row, records))))
    }
    .await;
    match loaded {
        Ok(Some(Some((view, row, records)))) => {
            let page = run_page::agent_page(&run_page::AgentView {
                run: &view.run,
                row: &view.agents[row],
                live: view.live,
                records: &records,
                requests: &view.requests,
            });
            Html(page).into_response()
        }
        Ok(Some(None)) => refuse(
            StatusCode::NOT_FOUND,
            "No such agent",
            &format!("Run {run_id:?} has no agent {agent:?}."),
        ),
        Ok(None) => no_such_run(&run_id),
        Err(error) => store_failure(error),
    }
}

async fn newest_checkpoint(
    store: &dyn MailboxStore,
    run_id: &str,
    agent: &str,
) -> anyhow::Result<Option<String>> {
    let records = store
        .records(run_id, agent, muster_agents::runtime::TRANSCRIPT, 0)
        .await?;
    Ok(crate::agent_activity::read(&records, &[], false, 0).checkpoint)
}

/// What merging the agent's newest checkpoint onto the integration head adds, in full.
async fn agent_diff(
    State(served): State<Shared>,
    Path((run_id, agent)): Path<(String, String)>,
) -> Response {
    let store = served.project.store.as_ref();
    let loaded = async {
        let Some(run) = store.run(&run_id).await? else {
            return anyhow::Ok(None);
        };
        let commit = newest_checkpoint(store, &run_id, &agent).await?;
        let lead = newest_checkpoint(store, &run_id, crate::team::LEAD).await?;
        let onto = load::integration_head(store, &run_id, lead.as_deref()).await;
        let diff = match (onto, commit) {
            (Some(onto), Some(commit)) => load::merge_diff(&run.workspace, &onto, &commit).await,
            _ => None,
        };
        Ok(Some(diff))
    }
    .await;
    match loaded {
        Ok(Some(diff)) => {
            Html(run_page::diff_page(&run_id, &agent, diff.as_deref())).into_response()
        }
        Ok(None) => no_such_run(&run_id),
        Err(error) => store_failure(error),
    }
}

async fn request(
    State(served): State<Shared>,
    Path((run_id, request_id)): Path<(String, String)>,
) -> Response {
    request_response(&served, &run_id, &request_id, StatusCode::OK, None).await
}

async fn request_response(
    served: &Served,
    run_id: &str,
    request_id: &str,
    status: StatusCode,
    notice: Option<String>,
) -> Response {
    let store = served.project.store.as_ref();
    let requests = match store.requests(run_id).await {
        Ok(requests) => requests,
        Err(error) => return store_failure(error),
    };
    let Some(request) = requests.iter().find(|r| r.request_id == request_id) else {
        return refuse(
            StatusCode::NOT_FOUND,
            "No such request",
            &format!("There is no request {request_id:?} in run {run_id:?}."),
        );
    };
    let previous = muster_mailbox::revision::stored_previous(request)
        .and_then(|id| requests.iter().find(|r| r.request_id == id));
    let merge_diff = if request.kind == MessageKind::MergeRequest {
        merge_diff(store, request).await
    } else {
        None
    };
    let policy_checks = policy_checks(served, request).await;
    let run = store.run(run_id).await.ok().flatten();
    let restores = match (&request.body, &run) {
        (MessageBody::PlanApprovalRequest { .. }, Some(run)) => {
            restored_mode(store, run, &request.requester).await
        }
        _ => None,
    };
    let view = RequestView {
        request,
        previous,
        merge_diff,
        notice,
        policy_checks,
        restores,
        run_status: run.as_ref().map(|run| status_of(served, run)),
        run_live: live::is_live(&served.project.runs_dir, run_id).unwrap_or(false),
    };
    (status, Html(pages::request_page(&view))).into_response()
}

/// For a plan a policy answers: the policy's rules applied to it, from the run's stored copy
/// of the policy (what the run decides with), else the file.
async fn policy_checks(
    served: &Served,
    request: &RequestRecord,
) -> Option<Result<Vec<muster_config::RuleCheck>, String>> {
    let Ok(Responder::Policy(path)) = Responder::parse(&request.responder) else {
        return None;
    };
    let plan = request.body.plan()?;
    let loaded = async {
        let run = served.project.store.run(&request.run_id).await?;
        let stored = run
            .and_then(|run| run.launch_options.get("policies").cloned())
            .map(serde_json::from_value::<crate::stored_policies::StoredPolicies>)
            .transpose()?
            .unwrap_or_default();
        let root = served
            .project
            .muster_dir
            .parent()
            .unwrap_or(&served.project.muster_dir);
        stored.policy(root, &path)
    }
    .await;
    Some(
        loaded
            .map(|policy| policy.plan_checks(plan))
            .map_err(|error| format!("{error:#}")),
    )
}

/// The mode approving `agent`'s plan with "restore its own" gives: the mode it had before
/// planning, `default` for `auto` once the run's auto gate closed (as the runtime decides).
async fn restored_mode(
    store: &dyn MailboxStore,
    run: &muster_mailbox::RunRecord,
    agent: &str,
) -> Option<muster_config::PermissionMode> {
    let records = store
        .records(&run.id, agent, muster_agents::runtime::TRANSCRIPT, 0)
        .await
        .ok()?;
    if records.is_empty() {
        return None;
    }
    let mode = crate::agent_activity::read(&records, &[], false, 0).restores;
    Some(match mode {
        muster_config::PermissionMode::Auto if !run.auto_gate.open => {
            muster_config::PermissionMode::Default
        }
        mode => mode,
    })
}

/// What a merge request adds ([`crate::worktree::MergeAdds`]: from the recorded integration head to the
/// merged tree), from the run's repository; none when git or either commit is gone.
pub(crate) async fn merge_diff(
    store: &dyn MailboxStore,
    request: &RequestRecord,
) -> Option<String> {
    let run = store.run(&request.run_id).await.ok()??;
    let MessageBody::MergeRequest { onto, commit, .. } = &request.body else {
        return None;
    };
    load::merge_diff(&run.workspace, onto, commit).await
}

/// A form of the request page.
#[derive(Debug, Deserialize)]
struct DecisionForm {
    action: String,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    feedback: Option<String>,
    #[serde(default)]
    clear_context: Option<String>,
    #[serde(default)]
    plan: Option<String>,
    #[serde(default)]
    answer: Option<String>,
    /// The approve form's grant checkboxes (`grant_0`, `grant_1`, …, each the rule text)
    /// and `grants_listed`, set when the form listed the plan's rules.
    #[serde(flatten)]
    grant_fields: std::collections::BTreeMap<String, String>,
}

impl DecisionForm {
    /// The decision the form asks for. Browsers send text areas with CRLF line ends; plans
    /// are stored with LF.
    fn decision(self, submitted_plan: &str) -> Result<Decision, String> {
        let text = |value: Option<String>| {
            value
                .map(|v| v.replace("\r\n", "\n"))
                .filter(|v| !v.trim().is_empty())
        };
        let mode = self.mode.filter(|m| !m.is_empty());
        let clear_context = self.clear_context.is_some();
        let grants = pages::checked_grants(&self.grant_fields);
        match self.action.as_str() {
            "approve" => Ok(Decision::Approve {
                mode,
                feedback: text(self.feedback),
                edited_plan: None,
                clear_context,
                grants,
            }),
            "approve_edited" => {
                let plan = text(self.plan).ok_or("the edited plan is empty")?;
                Ok(Decision::Approve {
                    mode,
                    feedback: text(self.feedback),
                    edited_plan: (plan != submitted_plan).then_some(plan),
                    clear_context,
                    grants,
                })
            }
            "reject" => Ok(Decision::Reject {
                feedback: text(self.feedback)
                    .ok_or("a rejection needs feedback: say what to change")?,
            }),
            "answer" => Ok(Decision::Answer {
                text: text(self.answer).ok_or("the answer is empty")?,
            }),
            other => Err(format!("unknown action {other:?}")),
        }
    }
}

async fn decide(
    State(served): State<Shared>,
    Path((run_id, request_id)): Path<(String, String)>,
    Form(form): Form<DecisionForm>,
) -> Response {
    let store = served.project.store.as_ref();
    let request = match store.request(&run_id, &request_id).await {
        Ok(Some(request)) => request,
        Ok(None) => {
            return refuse(
                StatusCode::NOT_FOUND,
                "No such request",
                &format!("There is no request {request_id:?} in run {run_id:?}."),
            );
        }
        Err(error) => return store_failure(error),
    };
    let submitted = request.body.plan().unwrap_or_default().to_owned();
    let decision = match form.decision(&submitted) {
        Ok(decision) => decision,
        Err(message) => {
            return request_response(
                &served,
                &run_id,
                &request_id,
                StatusCode::BAD_REQUEST,
                Some(message),
            )
            .await;
        }
    };
    // The open pages learn of the decision as of any commit: from the store's watch.
    let outcome = decide_as_human(store, &served.project.runs_dir, &request, decision).await;
    match outcome {
        Ok(_) => Redirect::to(&format!("/runs/{run_id}/requests/{request_id}")).into_response(),
        Err(refused) => {
            let status = match &refused {
                RefusedDecision::AlreadyDecided { .. } => StatusCode::CONFLICT,
                RefusedDecision::NotForAPerson { .. } => StatusCode::FORBIDDEN,
                RefusedDecision::Unfit(_) => StatusCode::BAD_REQUEST,
                RefusedDecision::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
            };
            request_response(
                &served,
                &run_id,
                &request_id,
                status,
                Some(refused.to_string()),
            )
            .await
        }
    }
}

/// One `change` event per change of the store, or per burst of changes queued meanwhile;
/// its data names what noticed them (`poke`, `fallback`, `listen`, `reconnect`, or `missed`
/// after changes were dropped for a slow reader), space-separated. The page reloads itself (or
/// says it is stale while a person is typing).
async fn events(
    State(served): State<Shared>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let receiver = served.changes.subscribe();
    let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
        let mut sources: Vec<&'static str> = Vec::new();
        let mut note = |name: &'static str| {
            if !sources.contains(&name) {
                sources.push(name);
            }
        };
        match receiver.recv().await {
            Ok(source) => note(source.name()),
            Err(broadcast::error::RecvError::Lagged(_)) => note("missed"),
            Err(broadcast::error::RecvError::Closed) => return None,
        }
        loop {
            match receiver.try_recv() {
                Ok(source) => note(source.name()),
                Err(broadcast::error::TryRecvError::Lagged(_)) => note("missed"),
                Err(_) => break,
            }
        }
        let event = Event::default().event("change").data(sources.join(" "));
        Some((Ok(event), receiver))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

async fn script() -> Response {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("assets/app.js"),
    )
}

async fn style() -> Response {
    asset("text/css; charset=utf-8", include_str!("assets/app.css"))
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}
