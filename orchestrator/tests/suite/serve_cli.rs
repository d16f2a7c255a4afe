//! `muster serve` against a real server on loopback: every endpoint's guard (Host, token,
//! cookie, Origin), hostile plans rendered inert, the revision diff, and decisions made in the
//! page going through the same path as `muster approve` (the first answer wins).

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;

use muster_mailbox::*;
use reqwest::StatusCode;
use reqwest::header::{CONTENT_SECURITY_POLICY, COOKIE, HOST, LOCATION, ORIGIN, SET_COOKIE};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

use super::common::{GUARD, command, muster, stderr};

/// A running `muster serve` child and a signed-in session.
pub struct Serve {
    child: Child,
    pub base: String,
    pub port: u16,
    /// The first URL, with its one-time token.
    pub url: String,
    pub client: reqwest::Client,
}

impl Serve {
    /// Starts `muster serve --port 0` in `dir` and reads the URL it prints.
    pub async fn start(dir: &Path) -> Serve {
        Serve::start_with(dir, &[]).await
    }

    /// [`Serve::start`] with global flags before `serve` (`--store URL`).
    pub async fn start_with(dir: &Path, globals: &[&str]) -> Serve {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut args = globals.to_vec();
        args.extend(["serve", "--port", "0"]);
        let mut child = command(dir, &args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let url = tokio::time::timeout(GUARD, lines.next_line())
            .await
            .expect("guard timeout")
            .unwrap()
            .expect("serve printed no URL");
        let rest = url.strip_prefix("http://127.0.0.1:").expect(&url);
        let port: u16 = rest.split('/').next().unwrap().parse().unwrap();
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        Serve {
            child,
            base: format!("http://127.0.0.1:{port}"),
            port,
            url,
            client,
        }
    }

    /// Exchanges the token for the session cookie (`name=value`).
    pub async fn sign_in(&self) -> String {
        let response = self.client.get(&self.url).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::SEE_OTHER);
        assert_eq!(
            response.headers()[LOCATION],
            "/",
            "the token leaves the URL"
        );
        let cookie = response.headers()[SET_COOKIE].to_str().unwrap().to_owned();
        assert!(
            cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
            "{cookie}"
        );
        cookie.split(';').next().unwrap().to_owned()
    }

    pub async fn get(&self, cookie: &str, path: &str) -> reqwest::Response {
        self.client
            .get(format!("{}{path}", self.base))
            .header(COOKIE, cookie)
            .send()
            .await
            .unwrap()
    }

    /// Posts a form as the page would (same Origin).
    pub async fn post(&self, cookie: &str, path: &str, form: &[(&str, &str)]) -> reqwest::Response {
        self.client
            .post(format!("{}{path}", self.base))
            .header(COOKIE, cookie)
            .header(ORIGIN, self.base.clone())
            .form(form)
            .send()
            .await
            .unwrap()
    }

    /// Reads the event stream until a `change` event arrives.
    pub async fn next_change(stream: &mut reqwest::Response) {
        Serve::change_from(stream, "").await;
    }

    /// Reads the event stream until a `change` event whose data names `source` (what
    /// noticed the change: `poke`, `fallback`, `listen`, `reconnect`; "" for any) arrives.
    pub async fn change_from(stream: &mut reqwest::Response, source: &str) {
        let mut seen = String::new();
        loop {
            while let Some(end) = seen.find("\n\n") {
                let event: String = seen.drain(..end + 2).collect();
                let data = event
                    .lines()
                    .find_map(|line| line.strip_prefix("data:"))
                    .unwrap_or_default();
                if event.contains("event: change")
                    && (source.is_empty() || data.split_whitespace().any(|s| s == source))
                {
                    return;
                }
            }
            let chunk = tokio::time::timeout(GUARD, stream.chunk())
                .await
                .unwrap_or_else(|_| panic!("no change event from {source:?} before the guard"))
                .unwrap()
                .expect("the event stream ended");
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

impl Serve {
    /// Kills serve with SIGKILL (nothing of it cleans up) and waits until it is gone.
    pub async fn kill(mut self) {
        self.child.kill().await.unwrap();
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

const HOSTILE: &str = "## Goal\nx <img src=x onerror=alert(1)>\n<script>alert('owned')</script>\n\
## Steps\n1. [docs](javascript:alert(2))\n2. [site](https://example.com/)\n## Files\nsrc/a.rs\n";

/// A project whose SQLite store holds [`fill`]'s run.
async fn project() -> (tempfile::TempDir, Arc<SqliteStore>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".muster")).unwrap();
    let store = Arc::new(
        SqliteStore::open(
            &dir.path().join(".muster/muster.db"),
            StoreOptions::default(),
        )
        .unwrap(),
    );
    fill(dir.path(), store.as_ref()).await;
    (dir, store)
}

/// Run `r1`: alice's plan rejected at revision 1 and pending at revision 2 (a hostile plan),
/// bob's plan answered by the lead, and a question for a person.
async fn fill(dir: &Path, store: &dyn MailboxStore) {
    store
        .create_run(NewRun {
            id: "r1".into(),
            slug: "brave-red-fox".into(),
            team: Some("t".into()),
            workspace: dir.display().to_string(),
            batch_line_id: None,
            auto_gate: AutoGate::default(),
            launch_options: json!({}),
            project_id: None,
        })
        .await
        .unwrap();
    for (agent, kind) in [
        ("lead", MemberKind::Lead),
        ("alice", MemberKind::Teammate),
        ("bob", MemberKind::Teammate),
    ] {
        let entry = RosterEntry {
            agent: agent.into(),
            kind,
            definition: None,
            parent: None,
        };
        store.add_member("r1", entry).await.unwrap();
    }
    let plan =
        |id: &str, agent: &str, plan: &str, responder: &str, revision, previous: Option<&str>| {
            NewMessage {
                run_id: "r1".into(),
                sender: agent.into(),
                recipient: "lead".into(),
                body: MessageBody::PlanApprovalRequest {
                    request_id: id.into(),
                    plan_file: format!(".muster/plans/brave-red-fox-agent-{agent}.md"),
                    plan: plan.into(),
                    responder: responder.into(),
                    revision,
                    previous_request_id: previous.map(str::to_owned),
                    allowed_prompts: Vec::new(),
                },
                idempotency_key: None,
            }
        };
    let first = "## Goal\nx\n## Steps\n1. edit src/a.rs only\n## Files\nsrc/a.rs\n";
    store
        .send(plan("plan-alice-1", "alice", first, "human", 1, None))
        .await
        .unwrap();
    store
        .respond(NewResponse {
            run_id: "r1".into(),
            sender: "human".into(),
            body: MessageBody::PlanApprovalResponse {
                request_id: "plan-alice-1".into(),
                approved: false,
                feedback: Some("add the docs".into()),
                mode: None,
                lowered_from: None,
                edited_plan: None,
                clear_context: false,
                rule: None,
                dropped_grants: Vec::new(),
                grants: Vec::new(),
            },
            idempotency_key: None,
        })
        .await
        .unwrap();
    store
        .send(plan(
            "plan-alice-2",
            "alice",
            HOSTILE,
            "human",
            2,
            Some("plan-alice-1"),
        ))
        .await
        .unwrap();
    store
        .send(plan("plan-bob-1", "bob", first, "lead", 1, None))
        .await
        .unwrap();
    store
        .send(NewMessage {
            run_id: "r1".into(),
            sender: "bob".into(),
            recipient: "lead".into(),
            body: MessageBody::Question {
                request_id: "question-bob-1".into(),
                question: "Which port?".into(),
                options: vec![],
                responder: "human".into(),
            },
            idempotency_key: None,
        })
        .await
        .unwrap();
}

const PAGES: [&str; 9] = [
    "/",
    "/runs/r1",
    "/runs/r1/requests/plan-alice-2",
    "/runs/r1/agents/alice",
    "/runs/r1/agents/alice/diff",
    "/events",
    "/runs/r1/live",
    "/assets/app.js",
    "/assets/app.css",
];

/// Every form that changes something: a decision, a teammate's stop, the run's stop.
const FORMS: [(&str, &[(&str, &str)]); 3] = [
    (
        "/runs/r1/requests/question-bob-1",
        &[("action", "answer"), ("answer", "8080")],
    ),
    ("/runs/r1/agents/bob/stop", &[]),
    ("/runs/r1/stop", &[]),
];

#[tokio::test(flavor = "multi_thread")]
async fn every_endpoint_needs_the_host_the_cookie_and_for_changes_the_origin() {
    let (dir, _store) = project().await;
    let serve = Serve::start(dir.path()).await;
    for path in PAGES {
        let response = serve
            .client
            .get(format!("{}{path}", serve.base))
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::UNAUTHORIZED,
            "{path} without the cookie"
        );
        assert!(
            response.headers().contains_key(CONTENT_SECURITY_POLICY),
            "{path}"
        );
    }
    let wrong_token = serve
        .client
        .get(format!("{}/?token=guess", serve.base))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_token.status(), StatusCode::UNAUTHORIZED);
    let cookie = serve.sign_in().await;
    let again = serve.client.get(&serve.url).send().await.unwrap();
    assert_eq!(
        again.status(),
        StatusCode::UNAUTHORIZED,
        "the token works once"
    );
    for path in PAGES {
        let wrong_host = serve
            .client
            .get(format!("{}{path}", serve.base))
            .header(COOKIE, &cookie)
            .header(HOST, format!("attacker.example:{}", serve.port))
            .send()
            .await
            .unwrap();
        assert_eq!(
            wrong_host.status(),
            StatusCode::MISDIRECTED_REQUEST,
            "{path}"
        );
        let mut ok = serve.get(&cookie, path).await;
        assert_eq!(ok.status(), StatusCode::OK, "{path}");
        let csp = ok.headers()[CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
            "{csp}"
        );
        if path == "/events" || path.ends_with("/live") {
            assert_eq!(ok.headers()["content-type"], "text/event-stream");
        } else {
            let _ = ok.chunk().await;
        }
    }
    for (form_path, form) in FORMS {
        let path = format!("{}{form_path}", serve.base);
        for origin in [None, Some("http://attacker.example"), Some("null")] {
            let mut post = serve.client.post(&path).header(COOKIE, &cookie);
            if let Some(origin) = origin {
                post = post.header(ORIGIN, origin);
            }
            let refused = post.form(form).send().await.unwrap();
            assert_eq!(
                refused.status(),
                StatusCode::FORBIDDEN,
                "{form_path} origin {origin:?}"
            );
        }
        let no_cookie = serve
            .client
            .post(&path)
            .header(ORIGIN, serve.base.clone())
            .form(form)
            .send()
            .await
            .unwrap();
        assert_eq!(no_cookie.status(), StatusCode::UNAUTHORIZED, "{form_path}");
        let wrong_host = serve
            .client
            .post(&path)
            .header(COOKIE, &cookie)
            .header(ORIGIN, serve.base.clone())
            .header(HOST, format!("attacker.example:{}", serve.port))
            .form(form)
            .send()
            .await
            .unwrap();
        assert_eq!(
            wrong_host.status(),
            StatusCode::MISDIRECTED_REQUEST,
            "{form_path}"
        );
    }
    let request = _store
        .request("r1", "question-bob-1")
        .await
        .unwrap()
        .unwrap();
    assert!(request.response.is_none(), "nothing refused was stored");
    let stops = _store.requests("r1").await.unwrap();
    assert!(
        stops.iter().all(|r| r.kind != MessageKind::ShutdownRequest),
        "no refused stop was stored"
    );
    let run_stops = _store.records("r1", "human", "stop", 0).await.unwrap();
    assert!(run_stops.is_empty(), "{run_stops:?}");
}

/// On a run no process holds, a person's stop of a teammate is stored as the lead's would be
/// (a `shutdown_request`, from `human`) and waits for `muster resume`; a second is refused.
/// A stop of the run is stored for the next resume (`at_resume`), once.
#[tokio::test(flavor = "multi_thread")]
async fn a_stop_of_a_teammate_on_a_stopped_run_is_stored_for_resume_and_asked_once() {
    let (dir, store) = project().await;
    let serve = Serve::start(dir.path()).await;
    let cookie = serve.sign_in().await;
    let stopped = serve.post(&cookie, "/runs/r1/agents/bob/stop", &[]).await;
    assert_eq!(stopped.status(), StatusCode::SEE_OTHER);
    assert_eq!(stopped.headers()[LOCATION], "/runs/r1");
    let request = store
        .request("r1", "shutdown-bob-1")
        .await
        .unwrap()
        .expect("the stop is a stored shutdown request");
    assert_eq!(request.kind, MessageKind::ShutdownRequest);
    assert_eq!(
        (request.requester.as_str(), request.recipient.as_str()),
        ("human", "bob")
    );
    assert!(request.response.is_none());
    let mail = store.messages("r1", Some("bob")).await.unwrap();
    assert!(
        mail.iter()
            .any(|m| m.kind == MessageKind::ShutdownRequest && m.state == DeliveryState::Pending),
        "it waits in bob's mail for the resume: {mail:?}"
    );
    let again = serve.post(&cookie, "/runs/r1/agents/bob/stop", &[]).await;
    assert_eq!(again.status(), StatusCode::CONFLICT);
    let text = again.text().await.unwrap();
    assert!(
        text.contains("already asked to stop (shutdown-bob-1)"),
        "{text}"
    );
    for (path, status) in [
        ("/runs/r1/agents/lead/stop", StatusCode::NOT_FOUND),
        ("/runs/r1/agents/nobody/stop", StatusCode::NOT_FOUND),
    ] {
        let refused = serve.post(&cookie, path, &[]).await;
        assert_eq!(refused.status(), status, "{path}");
    }
    let page = serve.get(&cookie, "/runs/r1").await.text().await.unwrap();
    assert!(page.contains("Stop at resume"), "{page}");
    let run_stop = serve.post(&cookie, "/runs/r1/stop", &[]).await;
    assert_eq!(run_stop.status(), StatusCode::SEE_OTHER);
    let stops = store.records("r1", "human", "stop", 0).await.unwrap();
    assert_eq!(stops.len(), 1, "{stops:?}");
    assert_eq!(stops[0].body["at_resume"], true);
    let again = serve.post(&cookie, "/runs/r1/stop", &[]).await;
    assert_eq!(again.status(), StatusCode::CONFLICT);
    let text = again.text().await.unwrap();
    assert!(text.contains("already waits for its next"), "{text}");
    let page = serve.get(&cookie, "/runs/r1").await.text().await.unwrap();
    assert!(page.contains("stop asked (shutdown-bob-1)"), "{page}");
    assert!(
        page.contains("while no process ran it: the next") && !page.contains("id=\"stop-run\""),
        "{page}"
    );
    assert!(
        page.contains("muster resume r1"),
        "the page says how to continue the run: {page}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hostile_plan_renders_inert_beside_the_diff_to_its_previous_revision() {
    let (dir, _store) = project().await;
    let serve = Serve::start(dir.path()).await;
    let cookie = serve.sign_in().await;
    let page = serve
        .get(&cookie, "/runs/r1/requests/plan-alice-2")
        .await
        .text()
        .await
        .unwrap();
    // The only script element is the page's own, from this server.
    assert_eq!(page.matches("<script").count(), 1, "{page}");
    assert!(page.contains("<script src=\"/assets/app.js\" defer></script>"));
    assert!(
        page.contains("&lt;script&gt;alert(&#39;owned&#39;)&lt;/script&gt;")
            || page.contains("&lt;script&gt;alert('owned')&lt;/script&gt;"),
        "{page}"
    );
    assert!(!page.contains("<img"), "{page}");
    assert!(
        page.contains("&lt;img src=x onerror=alert(1)&gt;"),
        "{page}"
    );
    assert!(
        !page.to_ascii_lowercase().contains("href=\"javascript"),
        "{page}"
    );
    assert!(
        page.contains("<a href=\"https://example.com/\">site</a>"),
        "{page}"
    );
    // The diff to revision 1, and who may answer.
    assert!(page.contains("Changes since revision 1"), "{page}");
    assert!(
        page.contains("<span class=\"removed\">- 1. edit src/a.rs only</span>"),
        "{page}"
    );
    assert!(
        page.contains("<span class=\"added\">+ 2. [site](https://example.com/)</span>"),
        "{page}"
    );
    assert!(
        page.contains("<dt>who may answer</dt><dd>human</dd>"),
        "{page}"
    );
    assert!(page.contains("id=\"approve-edited\""), "{page}");
    // A request a person does not answer has no forms.
    let lead_page = serve
        .get(&cookie, "/runs/r1/requests/plan-bob-1")
        .await
        .text()
        .await
        .unwrap();
    assert!(!lead_page.contains("<form"), "{lead_page}");
    assert!(
        lead_page.contains("a person cannot answer this request"),
        "{lead_page}"
    );
    let run = serve.get(&cookie, "/runs/r1").await.text().await.unwrap();
    assert!(
        run.contains("plan-alice-2") && run.contains("question-bob-1"),
        "{run}"
    );
    let runs = serve.get(&cookie, "/").await.text().await.unwrap();
    assert!(
        runs.contains("/runs/r1/requests/plan-alice-2"),
        "waiting for a person: {runs}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_decision_in_the_page_is_stored_once_and_the_cli_loses_after_it() {
    let (dir, store) = project().await;
    let serve = Serve::start(dir.path()).await;
    let cookie = serve.sign_in().await;
    let mut events = serve.get(&cookie, "/events").await;
    // An edit from the browser comes with CRLF line ends; the stored plan has LF.
    let edited = "## Goal\r\nx\r\n## Steps\r\n1. edit src/a.rs\r\n## Files\r\nsrc/a.rs\r\n";
    let path = "/runs/r1/requests/plan-alice-2";
    let approved = serve
        .post(
            &cookie,
            path,
            &[
                ("action", "approve_edited"),
                ("plan", edited),
                ("mode", "acceptEdits"),
                ("clear_context", "on"),
                ("feedback", "trimmed"),
            ],
        )
        .await;
    assert_eq!(approved.status(), StatusCode::SEE_OTHER);
    Serve::next_change(&mut events).await;
    let response = store
        .request("r1", "plan-alice-2")
        .await
        .unwrap()
        .unwrap()
        .response
        .unwrap();
    assert_eq!(response.responder, "human");
    assert_eq!(response.stored_body()["approved"], true);
    assert_eq!(response.stored_body()["mode"], "acceptEdits");
    assert_eq!(response.stored_body()["clear_context"], true);
    assert_eq!(
        response.stored_body()["edited_plan"],
        edited.replace("\r\n", "\n")
    );
    let second = serve
        .post(&cookie, path, &[("action", "reject"), ("feedback", "no")])
        .await;
    assert_eq!(second.status(), StatusCode::CONFLICT);
    assert!(
        second
            .text()
            .await
            .unwrap()
            .contains("already decided by human")
    );
    let cli = muster(
        dir.path(),
        &["reject", "plan-alice-2", "--feedback", "late"],
    )
    .await;
    assert_eq!(cli.status.code(), Some(1), "{}", stderr(&cli));
    // Not a person's request, and an answer that does not fit.
    let lead_only = serve
        .post(
            &cookie,
            "/runs/r1/requests/plan-bob-1",
            &[("action", "approve")],
        )
        .await;
    assert_eq!(lead_only.status(), StatusCode::FORBIDDEN);
    let unfit = serve
        .post(
            &cookie,
            "/runs/r1/requests/question-bob-1",
            &[("action", "approve")],
        )
        .await;
    assert_eq!(unfit.status(), StatusCode::BAD_REQUEST);
    // A decision from another process (the CLI) reaches the open page as an event.
    let answered = muster(dir.path(), &["answer", "question-bob-1", "8080"]).await;
    assert_eq!(answered.status.code(), Some(0), "{}", stderr(&answered));
    Serve::next_change(&mut events).await;
    let page = serve
        .get(&cookie, "/runs/r1/requests/question-bob-1")
        .await
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("Answered by human") && page.contains("8080"),
        "{page}"
    );
}

/// A message from bob to the lead, committed by the test's own store handle.
fn note(text: &str) -> NewMessage {
    NewMessage {
        run_id: "r1".into(),
        sender: "bob".into(),
        recipient: "lead".into(),
        body: MessageBody::Text {
            text: text.into(),
            summary: None,
        },
        idempotency_key: None,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn on_sqlite_a_commit_by_another_muster_process_pokes_serve_and_others_reach_it_by_the_fallback()
 {
    let (dir, store) = project().await;
    let serve = Serve::start(dir.path()).await;
    assert!(
        dir.path().join(".muster/serve.sock").exists(),
        "serve registers its socket under .muster/"
    );
    let cookie = serve.sign_in().await;
    let mut events = serve.get(&cookie, "/events").await;
    // `muster answer` commits, and its store's commit hook pokes serve's socket.
    let answered = muster(dir.path(), &["answer", "question-bob-1", "8080"]).await;
    assert_eq!(answered.status.code(), Some(0), "{}", stderr(&answered));
    Serve::change_from(&mut events, "poke").await;
    // A commit by a store without the hook (this test's own) is seen by data_version.
    store.send(note("hello")).await.unwrap();
    Serve::change_from(&mut events, "fallback").await;
    // A serve killed with SIGKILL leaves its socket file: a commit poking it fails nothing.
    drop(events);
    serve.kill().await;
    assert!(dir.path().join(".muster/serve.sock").exists());
    let rejected = muster(
        dir.path(),
        &["reject", "plan-alice-2", "--feedback", "later"],
    )
    .await;
    assert_eq!(rejected.status.code(), Some(0), "{}", stderr(&rejected));
    // The next serve replaces the dead socket and is poked again.
    let serve = Serve::start(dir.path()).await;
    let cookie = serve.sign_in().await;
    let mut events = serve.get(&cookie, "/events").await;
    store.send(note("again")).await.unwrap();
    Serve::change_from(&mut events, "fallback").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn on_postgres_serve_listens_for_every_commit_and_reconnects_a_lost_feed() {
    let schema = super::store_pg::Schema::new().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".muster")).unwrap();
    std::fs::write(
        dir.path().join(".muster/settings.local.toml"),
        format!("store = \"{}\"\n", schema.url()),
    )
    .unwrap();
    let store = PostgresStore::open(&schema.url(), StoreOptions::default())
        .await
        .unwrap();
    fill(dir.path(), &store).await;
    let serve = Serve::start(dir.path()).await;
    assert!(
        !dir.path().join(".muster/serve.sock").exists(),
        "no socket on PostgreSQL"
    );
    let cookie = serve.sign_in().await;
    let mut events = serve.get(&cookie, "/events").await;
    let answered = muster(dir.path(), &["answer", "question-bob-1", "8080"]).await;
    assert_eq!(answered.status.code(), Some(0), "{}", stderr(&answered));
    Serve::change_from(&mut events, "listen").await;
    // The feed's connection is cut by the server: serve re-opens it and says so.
    super::store_pg::admin(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '{}'",
        muster_mailbox::postgres::feed_application_name(schema.name())
    ))
    .await;
    Serve::change_from(&mut events, "reconnect").await;
    store.send(note("after the cut")).await.unwrap();
    Serve::change_from(&mut events, "listen").await;
    drop(events);
    drop(serve);
    schema.drop_now().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plan_for_a_policy_shows_every_rule_of_the_policy_passed_or_failed() {
    let (dir, store) = project().await;
    // The run's stored copy decides, whatever the file says now.
    let policy = "required_sections = [\"Steps\", \"Tests\"]\nmax_files = 1\n\
                  denied_paths = [\"src/secrets/**\"]\n";
    std::fs::write(dir.path().join("p.toml"), "approve_all = true\n").unwrap();
    store
        .create_run(NewRun {
            id: "r2".into(),
            slug: "calm-blue-owl".into(),
            team: Some("t".into()),
            workspace: dir.path().display().to_string(),
            batch_line_id: None,
            auto_gate: AutoGate::default(),
            launch_options: json!({"policies": {"p.toml": {"text": policy, "sha256": "0"}}}),
            project_id: None,
        })
        .await
        .unwrap();
    for (agent, kind) in [("lead", MemberKind::Lead), ("alice", MemberKind::Teammate)] {
        let entry = RosterEntry {
            agent: agent.into(),
            kind,
            definition: None,
            parent: None,
        };
        store.add_member("r2", entry).await.unwrap();
    }
    store
        .send(NewMessage {
            run_id: "r2".into(),
            sender: "alice".into(),
            recipient: "lead".into(),
            body: MessageBody::PlanApprovalRequest {
                request_id: "plan-alice-1".into(),
                plan_file: ".muster/plans/calm-blue-owl-agent-alice.md".into(),
                plan: "## Steps\n1. x\n## Files\nsrc/a.rs\nsrc/secrets/k.rs\n".into(),
                responder: "policy:p.toml".into(),
                revision: 1,
                previous_request_id: None,
                allowed_prompts: Vec::new(),
            },
            idempotency_key: None,
        })
        .await
        .unwrap();
    let serve = Serve::start(dir.path()).await;
    let cookie = serve.sign_in().await;
    let page = serve
        .get(&cookie, "/runs/r2/requests/plan-alice-1")
        .await
        .text()
        .await
        .unwrap();
    assert!(page.contains("<h2>Rules of p.toml</h2>"), "{page}");
    let rows = [
        ("required section `## Steps`", "passed", "present"),
        ("required section `## Tests`", "failed", "missing or empty"),
        ("max_files = 1", "failed", "`## Files` lists 2 paths"),
        (
            "denied_paths `src/secrets/**`",
            "failed",
            "`src/secrets/k.rs` match",
        ),
    ];
    for (rule, result, found) in rows {
        let row =
            format!("<tr class=\"{result}\"><td>{rule}</td><td>{result}</td><td>{found}</td></tr>");
        assert!(page.contains(&row), "{rule}: {page}");
    }
    assert_eq!(page.matches("<tr class=").count(), rows.len(), "{page}");
    // A person's request shows no policy rules.
    let human = serve
        .get(&cookie, "/runs/r1/requests/plan-alice-2")
        .await
        .text()
        .await
        .unwrap();
    assert!(!human.contains("policy-rules"), "{human}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_runs_page_lists_this_projects_runs_unless_asked_for_all_projects() {
    let (dir, store) = project().await;
    std::fs::write(dir.path().join(".muster/project-id"), "mine\n").unwrap();
    for (id, slug, project) in [
        ("r-mine", "mine-run", "mine"),
        ("r-other", "other-run", "other"),
    ] {
        store
            .create_run(NewRun {
                id: id.into(),
                slug: slug.into(),
                team: None,
                workspace: dir.path().display().to_string(),
                batch_line_id: None,
                auto_gate: AutoGate::default(),
                launch_options: json!({}),
                project_id: Some(project.into()),
            })
            .await
            .unwrap();
    }
    let serve = Serve::start(dir.path()).await;
    let cookie = serve.sign_in().await;
    let listed = |page: &str| -> Vec<&str> {
        ["r1", "r-mine", "r-other"]
            .into_iter()
            .filter(|id| page.contains(&format!("<a href=\"/runs/{id}\">")))
            .collect()
    };
    // (query, runs listed, the link to the other choice)
    let cases = [
        (
            "/",
            vec!["r1", "r-mine"],
            "<a href=\"/?all=1\">all projects</a>",
        ),
        (
            "/?all=1",
            vec!["r1", "r-mine", "r-other"],
            "<a href=\"/\">only this project's</a>",
        ),
    ];
    for (path, runs, link) in cases {
        let page = serve.get(&cookie, path).await.text().await.unwrap();
        assert_eq!(listed(&page), runs, "{path}: {page}");
        assert!(page.contains(link), "{path}: {page}");
    }
}

/// Plan-scoped grants on the request page: the rules a plan asks for are listed (escaped),
/// the approve form has a checked box for each, and approving with some unchecked stores
/// only the checked ones, the rest reported as left out.
#[tokio::test(flavor = "multi_thread")]
async fn the_request_page_lists_the_rules_a_plan_asks_for_and_grants_the_checked_ones() {
    let (dir, store) = project().await;
    store
        .send(NewMessage {
            run_id: "r1".into(),
            sender: "bob".into(),
            recipient: "lead".into(),
            body: MessageBody::PlanApprovalRequest {
                request_id: "plan-bob-9".into(),
                plan_file: ".muster/plans/brave-red-fox-agent-bob.md".into(),
                plan: "## Goal\nx\n## Steps\n1. test\n## Files\nsrc/a.rs\n".into(),
                responder: "human".into(),
                revision: 1,
                previous_request_id: None,
                allowed_prompts: vec![
                    "Bash(cargo test:*)".into(),
                    "Edit(src/**)".into(),
                    "Bash(echo <b>hi</b>:*)".into(),
                ],
            },
            idempotency_key: None,
        })
        .await
        .unwrap();
    let serve = Serve::start(dir.path()).await;
    let cookie = serve.sign_in().await;
    let path = "/runs/r1/requests/plan-bob-9";
    let page = serve.get(&cookie, path).await.text().await.unwrap();
    assert!(
        page.contains("Permission rules the plan asks for"),
        "{page}"
    );
    assert!(
        page.contains("<li><code>Bash(cargo test:*)</code></li>"),
        "{page}"
    );
    assert!(
        page.contains("<li><code>Edit(src/**)</code></li>"),
        "{page}"
    );
    assert!(page.contains("echo &lt;b&gt;hi&lt;/b&gt;"), "{page}");
    assert!(!page.contains("<b>hi</b>"), "{page}");
    assert!(
        page.contains("name=\"grant_0\" value=\"Bash(cargo test:*)\" checked"),
        "{page}"
    );
    let mut events = serve.get(&cookie, "/events").await;
    let approved = serve
        .post(
            &cookie,
            path,
            &[
                ("action", "approve"),
                ("grants_listed", "1"),
                ("grant_1", "Edit(src/**)"),
            ],
        )
        .await;
    assert_eq!(approved.status(), StatusCode::SEE_OTHER);
    Serve::next_change(&mut events).await;
    let response = store
        .request("r1", "plan-bob-9")
        .await
        .unwrap()
        .unwrap()
        .response
        .unwrap();
    assert_eq!(response.stored_body()["grants"], json!(["Edit(src/**)"]));
    let stored = response.stored_body();
    let dropped = stored["dropped_grants"].as_array().unwrap();
    assert_eq!(dropped[0]["rule"], "Bash(cargo test:*)");
    assert_eq!(dropped[0]["reason"], "left out by the approver");
    assert_eq!(dropped[1]["rule"], "Bash(echo <b>hi</b>:*)");
    let decided = serve.get(&cookie, path).await.text().await.unwrap();
    assert!(
        decided.contains("Granted until the verification report"),
        "{decided}"
    );
    assert!(decided.contains("left out by the approver"), "{decided}");
}

/// DESIGN "Wave 2 → Tests": the browser test's prerequisites come from `scripts/test`; without
/// them the test fails naming it, never skips.
fn browser_prerequisites() -> (std::path::PathBuf, std::path::PathBuf) {
    let browser_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/browser");
    let chromium = std::env::var_os("CHROMIUM")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/usr/bin/chromium".into());
    assert!(
        browser_dir.join("node_modules/playwright-core").is_dir() && chromium.exists(),
        "the browser test needs Chromium and tests/browser's npm packages: run `scripts/test`"
    );
    (browser_dir, chromium)
}

/// Any turn of `agent` answered with `content`.
fn any_turn(agent: &str, content: Vec<muster_fake_llm::Block>) -> muster_fake_llm::ScriptEntry {
    serde_json::from_value(json!({
        "agent": agent,
        "reply": {"content": content, "stop_reason": "end_turn"},
    }))
    .unwrap()
}

fn held(entry: muster_fake_llm::ScriptEntry, gate: &str) -> muster_fake_llm::ScriptEntry {
    entry.fault(muster_fake_llm::Fault {
        hold: Some(gate.into()),
        ..muster_fake_llm::Fault::default()
    })
}

/// Alice's last reply, streamed: the page shows its first piece before it is committed.
const STREAMED: &str = "Wrote hello.txt, and read it back.";

/// What alice writes and reads back: a tool result carrying script.
const SCRIPTED: &str = "<script>document.title='owned';window.__owned=1</script>\n";

/// A team run on the fake model server watched in Chromium (`tests/browser/cockpit.mjs`):
/// alice's first model request is held at a gate while the page shows her thinking; released,
/// she asks a person to approve her plan and the page (never reloaded) shows her waiting on
/// it; the person stops bob, idle, from the page and he stops; the plan page shows the Files
/// section line by line and what "restore its own" gives alice; approved, alice writes a file
/// with a `<script>` in it and reads it back; the run completes without bob; the run page
/// shows her verification report as a checklist and the timeline; her transcript shows the
/// script as text. Her last reply is held mid-stream: its first piece shows in her row, in
/// italics, before it is committed (a delta from the run process through serve's socket), and
/// the committed row replaces it. Then a second run, killed while its lead waited on the model: the person
/// stops it from its page ("Stop at resume"), `muster resume` ends at once with exit 130, and
/// the page, not reloaded, says the resume honoured the stop. Screenshots in
/// `target/web-inbox/`.
#[tokio::test(flavor = "multi_thread")]
async fn in_chromium_a_person_watches_a_team_stops_a_teammate_and_reads_a_transcript() {
    use super::common::{Running, fake, tool};
    use muster_fake_llm::{Block, ScriptEntry};
    let (browser_dir, chromium) = browser_prerequisites();
    let dir = super::common::project(&[
        (
            "muster.team.toml",
            "name = \"greeters\"\nshutdown_timeout_ms = 300\n\n[[teammates]]\nname = \"alice\"\napprover = \"human\"\n",
        ),
        ("solo.team.toml", "name = \"solo\"\n"),
    ]);
    let plan = "## Goal\nGreet.\n## Steps\n1. Write hello.txt\n## Files\nhello.txt\nREADME.md\n## Tests\nnone\n## Risks\nnone\n";
    let fake = fake(vec![
        ScriptEntry::reply(
            "lead",
            1,
            vec![
                tool(
                    "TaskCreate",
                    json!({"subject": "Greet", "description": "Write hello.txt saying hello."}),
                ),
                tool(
                    "SpawnTeammate",
                    json!({"name": "bob", "prompt": "Stand by until asked."}),
                ),
            ],
        ),
        any_turn("lead", vec![Block::text("Waiting for the team.")]),
        held(
            ScriptEntry::reply(
                "alice",
                1,
                vec![tool("ExitPlanMode", json!({"plan": plan}))],
            ),
            "alice-plan",
        ),
        ScriptEntry::reply(
            "alice",
            2,
            vec![tool(
                "Write",
                json!({"file_path": "hello.txt", "content": SCRIPTED}),
            )],
        ),
        ScriptEntry::reply(
            "alice",
            3,
            vec![tool("Read", json!({"file_path": "hello.txt"}))],
        ),
        // Held before its first byte until the page's stream is open, then mid-way, after
        // its first piece of text, until the page has shown it.
        ScriptEntry::reply("alice", 4, vec![Block::text(STREAMED)]).fault(muster_fake_llm::Fault {
            hold: Some("alice-4".into()),
            stall: Some(muster_fake_llm::Stall {
                after_events: 4,
                gate: Some("alice-streams".into()),
                ..muster_fake_llm::Stall::default()
            }),
            ..muster_fake_llm::Fault::default()
        }),
        any_turn("bob", vec![Block::text("Standing by.")]),
    ])
    .await;
    let mut run = Running::spawn(command(
        dir.path(),
        &[
            "run",
            "-p",
            "Greet the world.",
            "--base-url",
            &fake.base_url(),
            "--output",
            "stream-json",
        ],
    ));
    let started = run
        .until("the run's start", |event| event["run_id"].is_string())
        .await;
    let run_id = started["run_id"].as_str().unwrap().to_owned();
    tokio::time::timeout(GUARD, fake.gate_reached("alice-plan", 1))
        .await
        .expect("alice never asked the model");
    let serve = Serve::start(dir.path()).await;
    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/web-inbox");
    std::fs::create_dir_all(&shots).unwrap();
    let mut browser = tokio::process::Command::new("node")
        .arg(browser_dir.join("cockpit.mjs"))
        .args([serve.url.as_str(), run_id.as_str()])
        .env("SCREENSHOTS", &shots)
        .env("CHROMIUM", &chromium)
        .env("HOME", dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut to_browser = browser.stdin.take().unwrap();
    let mut from_browser = BufReader::new(browser.stdout.take().unwrap()).lines();
    let mut browser_err = browser.stderr.take().unwrap();
    let mut seen = Vec::new();
    let idle_fake = super::common::fake(vec![held(
        ScriptEntry::reply("lead", 1, vec![Block::text("Done.")]),
        "idle-lead",
    )])
    .await;
    let mut idle_run = None;
    while let Some(line) = tokio::time::timeout(GUARD, from_browser.next_line())
        .await
        .expect("guard timeout")
        .unwrap()
    {
        let Some(name) = line.strip_prefix("STEP ") else {
            continue;
        };
        seen.push(name.to_owned());
        match name {
            "alice-thinking" => {
                fake.open_gate("alice-plan");
                go(&mut to_browser, name, "").await;
            }
            "stream-ready" => {
                tokio::time::timeout(GUARD, fake.gate_reached("alice-4", 1))
                    .await
                    .expect("alice never asked for her last reply");
                fake.open_gate("alice-4");
                go(&mut to_browser, name, "").await;
            }
            "alice-streaming" => {
                fake.open_gate("alice-streams");
                go(&mut to_browser, name, "").await;
            }
            "idle-run" => {
                assert_eq!(run.finish().await, Some(0), "the run completes without bob");
                idle_run = Some(killed_while_waiting(dir.path(), &idle_fake).await);
                go(&mut to_browser, name, idle_run.as_deref().unwrap()).await;
            }
            "resume" => {
                let id = idle_run.as_deref().unwrap();
                let resumed = muster(dir.path(), &["resume", id]).await;
                assert_eq!(resumed.status.code(), Some(130), "{}", stderr(&resumed));
                go(&mut to_browser, name, "").await;
            }
            "done" => break,
            other => panic!("unknown step {other}"),
        }
    }
    // Its stdin closed, the script has nothing left to wait for.
    drop(to_browser);
    let status = tokio::time::timeout(GUARD, browser.wait())
        .await
        .expect("guard timeout")
        .unwrap();
    let mut err = String::new();
    use tokio::io::AsyncReadExt;
    let _ = browser_err.read_to_string(&mut err).await;
    assert!(
        status.success() && seen.contains(&"done".to_owned()),
        "{seen:?}\n{err}"
    );
    let store = super::common::open_store(dir.path());
    let stop = store
        .request(&run_id, "shutdown-bob-1")
        .await
        .unwrap()
        .expect("the stop is a stored shutdown request");
    assert_eq!(stop.requester, "human");
    assert_eq!(stop.response.unwrap().body.approved(), Some(true));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(),
        SCRIPTED
    );
    for shot in [
        "run-thinking.png",
        "run-waiting.png",
        "run-bob-stopped.png",
        "request.png",
        "run-reported.png",
        "agent.png",
        "run-streaming.png",
        "run-stop-at-resume.png",
        "run-stop-honoured.png",
    ] {
        assert!(shots.join(shot).is_file(), "{shot}");
    }
    let runs = muster(dir.path(), &["runs", "--json"]).await;
    let runs: serde_json::Value = serde_json::from_slice(&runs.stdout).unwrap();
    let waits = &runs[0]["waits"];
    assert!(
        waits["agents"]["alice"]["decisions_ms"].as_u64().unwrap() > 0
            && waits["total"]["model_ms"].as_u64().is_some(),
        "{waits}"
    );
}

/// Answers the browser's `STEP name` with `GO name word`.
async fn go(to_browser: &mut tokio::process::ChildStdin, name: &str, word: &str) {
    use tokio::io::AsyncWriteExt;
    to_browser
        .write_all(format!("GO {name} {word}\n").as_bytes())
        .await
        .unwrap();
}

/// Starts the `solo` team's run in `dir` on `fake` (its lead's first request held at
/// `idle-lead`), kills it there with SIGKILL and gives back its id: a run no process holds.
async fn killed_while_waiting(dir: &Path, fake: &muster_fake_llm::FakeLlmHandle) -> String {
    let mut run = super::common::Running::spawn(command(
        dir,
        &[
            "run",
            "--team",
            "solo.team.toml",
            "-p",
            "Wait.",
            "--base-url",
            &fake.base_url(),
            "--output",
            "stream-json",
        ],
    ));
    let started = run
        .until("the run's start", |event| event["run_id"].is_string())
        .await;
    tokio::time::timeout(GUARD, fake.gate_reached("idle-lead", 1))
        .await
        .expect("the lead never asked the model");
    run.child.start_kill().unwrap();
    let _ = run.child.wait().await;
    started["run_id"].as_str().unwrap().to_owned()
}

/// A person stops a live run from the page: the stop is stored (who, which epoch), then the
/// run takes Ctrl-C's transition: it ends `interrupted` with exit 130, for `muster resume`.
/// A second stop finds nothing live: it waits for the next resume.
#[tokio::test(flavor = "multi_thread")]
async fn a_person_stops_a_live_run_as_ctrl_c_would_and_the_stop_is_stored_first() {
    use super::common::{Running, fake};
    use muster_fake_llm::{Block, ScriptEntry};
    let dir = super::common::project(&[("muster.team.toml", "name = \"solo\"\n")]);
    let fake = fake(vec![held(
        ScriptEntry::reply("lead", 1, vec![Block::text("Done.")]),
        "lead-held",
    )])
    .await;
    let mut run = Running::spawn(command(
        dir.path(),
        &[
            "run",
            "-p",
            "Greet the world.",
            "--base-url",
            &fake.base_url(),
            "--output",
            "stream-json",
        ],
    ));
    let started = run
        .until("the run's start", |event| event["run_id"].is_string())
        .await;
    let run_id = started["run_id"].as_str().unwrap().to_owned();
    tokio::time::timeout(GUARD, fake.gate_reached("lead-held", 1))
        .await
        .expect("the lead never asked the model");
    let serve = Serve::start(dir.path()).await;
    let cookie = serve.sign_in().await;
    let page = serve
        .get(&cookie, &format!("/runs/{run_id}"))
        .await
        .text()
        .await
        .unwrap();
    assert!(page.contains("id=\"stop-run\""), "{page}");
    let stopped = serve
        .post(&cookie, &format!("/runs/{run_id}/stop"), &[])
        .await;
    assert_eq!(stopped.status(), StatusCode::SEE_OTHER);
    assert_eq!(run.finish().await, Some(130), "Ctrl-C's exit code");
    let store = super::common::open_store(dir.path());
    let record = store.run(&run_id).await.unwrap().unwrap();
    assert_eq!(record.status, RunStatus::Interrupted);
    let stops = store.records(&run_id, "human", "stop", 0).await.unwrap();
    assert_eq!(stops.len(), 1);
    assert_eq!(stops[0].body["epoch"], record.epoch);
    let page = serve
        .get(&cookie, &format!("/runs/{run_id}"))
        .await
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("A person stopped the run from this page")
            && page.contains(&format!("muster resume {run_id}")),
        "{page}"
    );
    // Nothing runs now: a second stop waits for the next resume, and a third is refused.
    let again = serve
        .post(&cookie, &format!("/runs/{run_id}/stop"), &[])
        .await;
    assert_eq!(again.status(), StatusCode::SEE_OTHER);
    let stops = store.records(&run_id, "human", "stop", 0).await.unwrap();
    assert_eq!(
        stops
            .iter()
            .map(|r| r.body["at_resume"] == true)
            .collect::<Vec<_>>(),
        [false, true]
    );
    let third = serve
        .post(&cookie, &format!("/runs/{run_id}/stop"), &[])
        .await;
    assert_eq!(third.status(), StatusCode::CONFLICT);
}

/// Reads `part` events from the run page's live stream until every part in `wanted` has
/// arrived; gives back the ids of the parts sent. One commit's parts may come in two bursts: a
/// render begun before the commit (serve's fallback timer) reads some parts before it and
/// some after, and the commit's own render sends the rest.
async fn parts_until(
    stream: &mut reqwest::Response,
    seen: &mut String,
    wanted: &[&str],
) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    loop {
        while let Some(end) = seen.find("\n\n") {
            let event: String = seen.drain(..end + 2).collect();
            if !event.contains("event: part") {
                continue;
            }
            let first_data = event
                .lines()
                .find_map(|line| line.strip_prefix("data: "))
                .unwrap_or_default();
            ids.push(first_data.split(' ').next().unwrap_or_default().to_owned());
            if wanted.iter().all(|id| ids.iter().any(|sent| sent == id)) {
                return ids;
            }
        }
        let chunk = tokio::time::timeout(GUARD, stream.chunk())
            .await
            .expect("no part before the guard")
            .unwrap()
            .expect("the stream ended");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
}

/// The run page's live stream sends every part once when it connects, then after a commit only
/// the parts whose HTML changed: a person's stop of bob changes bob's row, the requests and the
/// mail, not the summary, the other agents, the tasks or the timeline.
#[tokio::test(flavor = "multi_thread")]
async fn the_run_page_gets_only_the_parts_a_commit_changed() {
    let (dir, _store) = project().await;
    let serve = Serve::start(dir.path()).await;
    let cookie = serve.sign_in().await;
    let mut stream = serve.get(&cookie, "/runs/r1/live").await;
    let mut seen = String::new();
    // The first render sends every part, the mail last.
    let first = parts_until(&mut stream, &mut seen, &["mail"]).await;
    for id in [
        "run-summary",
        "agent-alice",
        "agent-bob",
        "requests",
        "tasks",
        "timeline",
    ] {
        assert!(first.contains(&id.to_owned()), "{id} in {first:?}");
    }
    let stopped = serve.post(&cookie, "/runs/r1/agents/bob/stop", &[]).await;
    assert_eq!(stopped.status(), StatusCode::SEE_OTHER);
    let after = parts_until(&mut stream, &mut seen, &["agent-bob", "requests", "mail"]).await;
    for id in [
        "run-summary",
        "agent-alice",
        "agent-lead",
        "tasks",
        "reports",
        "timeline",
    ] {
        assert!(!after.contains(&id.to_owned()), "{id} resent: {after:?}");
    }
}

/// A person stops a run no process holds (killed while its lead waited on the model): the stop
/// is stored, and the next `muster resume` honours it at once (exit 130, `interrupted`, the
/// model not asked), which the page says. A second stop, and a resume killed right after it
/// marked that stop applied (failpoint `run_stop_applied`): the stop is spent, so the next
/// resume continues the run to its end with one more model request.
#[tokio::test(flavor = "multi_thread")]
async fn a_stop_of_a_run_no_process_holds_ends_the_next_resume_and_the_one_after_continues() {
    use super::common::{Running, fake, output};
    use muster_fake_llm::{Block, ScriptEntry};
    let dir = super::common::project(&[("muster.team.toml", "name = \"solo\"\n")]);
    let fake = fake(vec![held(
        ScriptEntry::reply("lead", 1, vec![Block::text("Done.")]),
        "lead-held",
    )])
    .await;
    let mut run = Running::spawn(command(
        dir.path(),
        &[
            "run",
            "-p",
            "Greet the world.",
            "--base-url",
            &fake.base_url(),
            "--output",
            "stream-json",
        ],
    ));
    let started = run
        .until("the run's start", |event| event["run_id"].is_string())
        .await;
    let run_id = started["run_id"].as_str().unwrap().to_owned();
    tokio::time::timeout(GUARD, fake.gate_reached("lead-held", 1))
        .await
        .expect("the lead never asked the model");
    run.child.start_kill().unwrap();
    let _ = run.child.wait().await;
    let lead_requests = || {
        fake.requests()
            .iter()
            .filter(|r| r.agent.as_deref() == Some("lead"))
            .count()
    };
    assert_eq!(lead_requests(), 1);
    let serve = Serve::start(dir.path()).await;
    let cookie = serve.sign_in().await;
    let page_path = format!("/runs/{run_id}");
    let stop_path = format!("/runs/{run_id}/stop");
    let stopped = serve.post(&cookie, &stop_path, &[]).await;
    assert_eq!(stopped.status(), StatusCode::SEE_OTHER);

    let resume = ["resume", run_id.as_str(), "--output", "stream-json"];
    let honoured = muster(dir.path(), &resume).await;
    assert_eq!(honoured.status.code(), Some(130), "{}", stderr(&honoured));
    let end = super::common::lines(&honoured).last().cloned().unwrap();
    assert_eq!(end["status"], "interrupted", "{end:#}");
    let store = super::common::open_store(dir.path());
    let record = store.run(&run_id).await.unwrap().unwrap();
    assert_eq!(record.status, RunStatus::Interrupted);
    assert!(
        record.result.as_ref().unwrap()["error"]
            .as_str()
            .unwrap()
            .contains("a person stopped run"),
        "{:?}",
        record.result
    );
    assert_eq!(lead_requests(), 1, "the honouring resume asked the model");
    let page = serve.get(&cookie, &page_path).await.text().await.unwrap();
    assert!(page.contains("honoured it and ended at once"), "{page}");

    let stopped = serve.post(&cookie, &stop_path, &[]).await;
    assert_eq!(stopped.status(), StatusCode::SEE_OTHER);
    let mut cut = command(dir.path(), &resume);
    cut.env("MUSTER_FAILPOINT", "run_stop_applied");
    let cut = output(cut).await;
    assert_eq!(
        cut.status.code(),
        None,
        "killed at the failpoint: {}",
        stderr(&cut)
    );
    let applied = store.records(&run_id, "human", "stop", 0).await.unwrap();
    assert_eq!(
        applied
            .iter()
            .filter(|r| r.body["applied"].is_array())
            .count(),
        2,
        "{applied:?}"
    );
    assert_eq!(lead_requests(), 1);

    fake.open_gate("lead-held");
    let finished = muster(dir.path(), &resume).await;
    assert_eq!(finished.status.code(), Some(0), "{}", stderr(&finished));
    let end = super::common::lines(&finished).last().cloned().unwrap();
    assert_eq!(end["status"], "completed", "{end:#}");
    assert_eq!(
        lead_requests(),
        2,
        "one more model request, by the last resume"
    );
}
