//! The binary on a PostgreSQL store (`--store postgres://…` or `store = "postgres://…"`):
//! the same commands, the same crash-exact resume after SIGKILL, and errors a person can act
//! on. Each test gets a fresh schema on the test server (`MUSTER_TEST_DATABASE_URL`, else the
//! local server on 127.0.0.1:5432; scripts/test prepares one), dropped at its end.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use muster_fake_llm::FakeLlm;
use muster_mailbox::{MailboxStore, PostgresStore, StoreOptions};

use super::common::{lines, stderr};

#[path = "../../../mailbox/tests/suite/pg_cluster.rs"]
mod pg_cluster;
use super::resume_cli::{
    MARKER_LINES, crash_script, marker, muster, project, run_args, run_killed_at,
};

/// The test server's base URL.
pub(super) fn server_url() -> String {
    std::env::var("MUSTER_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

pub(super) async fn admin(sql: &str) {
    let (client, connection) = tokio_postgres::connect(&server_url(), tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "no PostgreSQL server at {} for the store tests ({e}); run scripts/test, or set \
                 MUSTER_TEST_DATABASE_URL",
                server_url()
            )
        });
    let driver = tokio::spawn(connection);
    client.batch_execute(sql).await.unwrap();
    drop(client);
    let _ = driver.await;
}

/// A fresh schema; [`Schema::drop_now`] removes it.
pub(super) struct Schema {
    name: String,
}

impl Schema {
    pub(super) async fn new() -> Schema {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "muster_cli_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        admin(&format!(
            "DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"
        ))
        .await;
        Schema { name }
    }

    pub(super) fn name(&self) -> &str {
        &self.name
    }

    pub(super) fn url(&self) -> String {
        let base = server_url();
        let separator = if base.contains('?') { '&' } else { '?' };
        format!("{base}{separator}options=-csearch_path%3D{}", self.name)
    }

    pub(super) async fn drop_now(self) {
        admin(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name)).await;
    }
}

/// Points the project at `url` through its local settings, so every command there uses it.
pub(super) fn use_store(dir: &Path, url: &str) {
    std::fs::write(
        dir.join(".muster/settings.local.toml"),
        format!("store = \"{url}\"\n"),
    )
    .unwrap();
}

pub(super) async fn open(url: &str) -> Arc<dyn MailboxStore> {
    Arc::new(
        PostgresStore::open(url, StoreOptions::default())
            .await
            .unwrap(),
    )
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn a_run_on_postgres_killed_at_each_durable_event_is_finished_by_resume() {
    let fake = FakeLlm::start(crash_script()).await.unwrap();
    let reference = project();
    let reference_schema = Schema::new().await;
    use_store(reference.path(), &reference_schema.url());
    let (reference_lines, code) =
        run_killed_at(reference.path(), &run_args(&fake.base_url()), None).await;
    assert_eq!(code, 0, "{reference_lines:?}");
    assert_eq!(marker(reference.path()), MARKER_LINES);
    assert!(
        !reference.path().join(".muster/muster.db").exists(),
        "the run used the server, not a file"
    );
    let events = reference_lines.len();
    reference_schema.drop_now().await;

    for kill_at in 1..events {
        let dir = project();
        let schema = Schema::new().await;
        use_store(dir.path(), &schema.url());
        let fake = FakeLlm::start(crash_script()).await.unwrap();
        let (before, code) =
            run_killed_at(dir.path(), &run_args(&fake.base_url()), Some(kill_at)).await;
        assert_eq!(before.len(), kill_at);
        assert_eq!(code, -9, "K={kill_at}: killed with SIGKILL");
        let run_id = before[0]["run_id"].as_str().unwrap().to_owned();
        let store = open(&schema.url()).await;
        let status = store.run(&run_id).await.unwrap().unwrap().status;
        if !status.is_finished() {
            let resumed = muster(dir.path(), &["resume", "--output", "stream-json"]).await;
            assert_eq!(
                resumed.status.code(),
                Some(0),
                "K={kill_at}: {}{}",
                stderr(&resumed),
                String::from_utf8_lossy(&resumed.stdout)
            );
            let finished = lines(&resumed).last().cloned().unwrap();
            assert_eq!(finished["type"], "run_finished", "K={kill_at}");
            assert_eq!(finished["run_id"], run_id.as_str(), "K={kill_at}");
            assert_eq!(finished["result"], "All marked.", "K={kill_at}");
            assert!(
                fake.failures().is_empty(),
                "K={kill_at}: {:?}",
                fake.failures()
            );
        }
        let run = store.run(&run_id).await.unwrap().unwrap();
        assert_eq!(run.status.as_str(), "completed", "K={kill_at}");
        // The same end as the uninterrupted run: every marker line once.
        assert_eq!(marker(dir.path()), MARKER_LINES, "K={kill_at}");
        let requests = store.requests(&run_id).await.unwrap();
        assert_eq!(
            requests.len(),
            1,
            "K={kill_at}: one plan request: {requests:?}"
        );
        assert!(requests[0].response.is_some(), "K={kill_at}: decided once");
        let mail = store.messages(&run_id, Some("main")).await.unwrap();
        assert_eq!(
            mail.len(),
            1,
            "K={kill_at}: one decision for main: {mail:?}"
        );
        assert!(mail.iter().all(|m| m.acked_at.is_some()), "K={kill_at}");
        drop(store);
        schema.drop_now().await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn config_show_masks_the_password_of_a_store_url() {
    let dir = project();
    let output = muster(
        dir.path(),
        &[
            "--store",
            "postgres://muster:hunter2@db.example:5432/m",
            "config",
            "show",
        ],
    )
    .await;
    assert!(output.status.success(), "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("store = \"postgres://muster:***@db.example:5432/m\"  # cli (--store)"),
        "{text}"
    );
    assert!(!text.contains("hunter2"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_is_not_running_exits_4_saying_what_to_check() {
    let dir = project();
    let output = muster(
        dir.path(),
        &["--store", "postgres://muster:hunter2@127.0.0.1:1/m", "runs"],
    )
    .await;
    assert_eq!(output.status.code(), Some(4), "{}", stderr(&output));
    let text = stderr(&output);
    assert!(
        text.contains("connection refused") && text.contains("is the PostgreSQL server running"),
        "{text}"
    );
    assert!(!text.contains("hunter2"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_schema_that_is_not_musters_exits_4_and_is_left_unchanged() {
    let schema = Schema::new().await;
    admin(&format!("CREATE TABLE {}.orders (id INT)", schema.name)).await;
    let dir = project();
    let output = muster(dir.path(), &["--store", &schema.url(), "runs"]).await;
    assert_eq!(output.status.code(), Some(4), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("is not a muster store"),
        "{}",
        stderr(&output)
    );
    schema.drop_now().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_demo_on_postgres_ends_as_on_sqlite() {
    let schema = Schema::new().await;
    let parent = tempfile::tempdir().unwrap();
    let mut endings = Vec::new();
    for (name, store) in [("on-sqlite", None), ("on-postgres", Some(schema.url()))] {
        let dir = parent.path().join(name);
        let dir_text = dir.display().to_string();
        let mut args = vec!["demo", "--dir", dir_text.as_str()];
        if let Some(url) = &store {
            args.splice(0..0, ["--store", url.as_str()]);
        }
        let output = muster(parent.path(), &args).await;
        assert_eq!(output.status.code(), Some(0), "{name}: {}", stderr(&output));
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            text.contains("The run ended: completed, exit code 0."),
            "{name}: {text}"
        );
        assert!(text.contains("7 passed, 0 failed"), "{name}: {text}");
        let mail = text
            .lines()
            .find(|line| line.starts_with("Mail ("))
            .map(|line| line.split(';').next().unwrap_or_default().to_owned());
        endings.push(mail);
    }
    assert_eq!(endings[0], endings[1], "the same mail on both stores");
    let store = open(&schema.url()).await;
    let runs = store.runs().await.unwrap();
    assert_eq!(runs.len(), 1, "the Postgres demo's run is in the server");
    assert_eq!(runs[0].status.as_str(), "completed");
    drop(store);
    schema.drop_now().await;
}

/// Run `r1` with a lead and alice, and alice's plan request for a person.
async fn seed_request(store: &dyn MailboxStore, workspace: &Path) {
    use muster_mailbox::{AutoGate, MemberKind, MessageBody, NewMessage, NewRun, RosterEntry};
    store
        .create_run(NewRun {
            id: "r1".into(),
            slug: "brave-red-fox".into(),
            team: Some("t".into()),
            workspace: workspace.display().to_string(),
            batch_line_id: None,
            auto_gate: AutoGate::default(),
            launch_options: serde_json::json!({}),
            project_id: None,
        })
        .await
        .unwrap();
    for (agent, kind) in [("lead", MemberKind::Lead), ("alice", MemberKind::Teammate)] {
        store
            .add_member(
                "r1",
                RosterEntry {
                    agent: agent.into(),
                    kind,
                    definition: None,
                    parent: None,
                },
            )
            .await
            .unwrap();
    }
    store
        .send(NewMessage {
            run_id: "r1".into(),
            sender: "alice".into(),
            recipient: "lead".into(),
            body: MessageBody::PlanApprovalRequest {
                request_id: "plan-alice-1".into(),
                plan_file: ".muster/plans/brave-red-fox-agent-alice.md".into(),
                plan: "## Goal\nx\n## Steps\n1. edit\n## Files\nsrc/a.rs".into(),
                responder: "human".into(),
                revision: 1,
                previous_request_id: None,
                allowed_prompts: Vec::new(),
            },
            idempotency_key: None,
        })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn approve_from_another_process_wakes_the_live_run_through_notify() {
    let schema = Schema::new().await;
    let dir = project();
    use_store(dir.path(), &schema.url());
    let store = open(&schema.url()).await;
    seed_request(store.as_ref(), dir.path()).await;
    let epoch = store.open_epoch("r1").await.unwrap();
    // Only the server's hold: no lock file, no socket, so the wake can only come by NOTIFY.
    let held = store.hold_live("r1").await.unwrap().unwrap();
    assert!(!dir.path().join(".muster/runs/r1.sock").exists());
    let waiting = tokio::spawn({
        let store = store.clone();
        async move {
            store
                .receive(
                    "r1",
                    "alice",
                    epoch,
                    muster_mailbox::MessageFilter::RequestId("plan-alice-1".into()),
                )
                .await
        }
    });
    let output = muster(dir.path(), &["approve", "plan-alice-1", "--feedback", "go"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("The run is live and alice was woken."),
        "{text}"
    );
    let response = tokio::time::timeout(super::common::GUARD, waiting)
        .await
        .expect("woken")
        .unwrap()
        .unwrap();
    assert_eq!(response.kind, "plan_approval_response");
    assert_eq!(response.stored_body()["feedback"], "go");

    // A second live process for the run is refused while this one holds it.
    let resume = muster(dir.path(), &["resume", "r1"]).await;
    assert_eq!(resume.status.code(), Some(1), "{}", stderr(&resume));
    assert!(
        stderr(&resume).contains("is live in another process"),
        "{}",
        stderr(&resume)
    );
    drop(held);
    drop(store);
    schema.drop_now().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_projects_share_one_server_store_and_each_sees_its_own_runs() {
    use muster_mailbox::{AutoGate, NewRun, RunStatus};
    let schema = Schema::new().await;
    let (alpha, beta) = (project(), project());
    for (dir, id) in [(&alpha, "proj-alpha"), (&beta, "proj-beta")] {
        use_store(dir.path(), &schema.url());
        std::fs::write(dir.path().join(".muster/project-id"), format!("{id}\n")).unwrap();
    }
    let store = open(&schema.url()).await;
    let runs = [
        ("ra", "proj-alpha", alpha.path().display().to_string()),
        ("rb", "proj-beta", beta.path().display().to_string()),
        (
            "rgone",
            "proj-beta",
            "/nonexistent/muster-workspace".to_string(),
        ),
    ];
    for (id, project_id, workspace) in &runs {
        store
            .create_run(NewRun {
                id: (*id).into(),
                slug: format!("slug-{id}"),
                team: None,
                workspace: workspace.clone(),
                batch_line_id: None,
                auto_gate: AutoGate::default(),
                launch_options: serde_json::json!({}),
                project_id: Some((*project_id).into()),
            })
            .await
            .unwrap();
        store
            .set_run_status(id, RunStatus::Interrupted, None)
            .await
            .unwrap();
    }
    let listed = |output: &std::process::Output| -> Vec<String> {
        let rows: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).unwrap();
        let mut ids: Vec<String> = rows
            .iter()
            .map(|row| row["run"]["id"].as_str().unwrap().to_owned())
            .collect();
        ids.sort();
        ids
    };
    let mine = muster(alpha.path(), &["runs", "--json"]).await;
    assert_eq!(listed(&mine), ["ra"], "{}", stderr(&mine));
    let all = muster(alpha.path(), &["runs", "--json", "--all-projects"]).await;
    assert_eq!(listed(&all), ["ra", "rb", "rgone"]);

    // A bare resume in beta picks beta's newest unfinished run, whose workspace is gone.
    let resume = muster(beta.path(), &["resume"]).await;
    assert_eq!(resume.status.code(), Some(2), "{}", stderr(&resume));
    assert!(
        stderr(&resume)
            .contains("rgone's workspace /nonexistent/muster-workspace is not on this machine"),
        "{}",
        stderr(&resume)
    );
    drop(store);
    schema.drop_now().await;
}

/// Two projects on one server store, each with a batch file of the same name and line ids: the
/// second project's batch runs its lines instead of reporting the first project's runs as its
/// own.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_never_takes_another_projects_lines_for_its_own() {
    use muster_fake_llm::{Block, ScriptEntry};
    let schema = Schema::new().await;
    let mut finished = Vec::new();
    for name in ["alpha", "beta"] {
        let dir = project();
        let fake = FakeLlm::start(vec![ScriptEntry::reply(
            "main",
            1,
            vec![Block::text(&format!("done in {name}"))],
        )])
        .await
        .unwrap();
        std::fs::write(
            dir.path().join(".muster/settings.local.toml"),
            format!(
                "store = \"{}\"\n[providers.anthropic]\nbase_url = \"{}\"\n",
                schema.url(),
                fake.base_url()
            ),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("tasks.jsonl"),
            "{\"id\": \"a\", \"prompt\": \"Say done.\"}\n",
        )
        .unwrap();
        let output = muster(
            dir.path(),
            &["batch", "tasks.jsonl", "--out", "results.jsonl"],
        )
        .await;
        assert_eq!(output.status.code(), Some(0), "{name}: {}", stderr(&output));
        assert_eq!(
            fake.requests().len(),
            1,
            "{name}'s line ran its own model call"
        );
        let results = std::fs::read_to_string(dir.path().join("results.jsonl")).unwrap();
        let result: serde_json::Value = serde_json::from_str(results.trim()).unwrap();
        assert_eq!(result["result"], format!("done in {name}"), "{result}");
        finished.push(result["run_id"].clone());
    }
    assert_ne!(finished[0], finished[1]);
    schema.drop_now().await;
}

/// A connection of the test's own to the test server (the driver runs until it is dropped).
async fn client() -> tokio_postgres::Client {
    client_of(&server_url()).await
}

async fn client_of(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// alice's plan waits on a person; once approved she writes hello.txt and the run ends.
const HUMAN_GATED_TEAM: &str =
    "name = \"greeters\"\n\n[[teammates]]\nname = \"alice\"\napprover = \"human\"\n";

fn human_gated_script() -> Vec<muster_fake_llm::ScriptEntry> {
    use super::common::tool;
    use muster_fake_llm::{Block, ScriptEntry};
    use serde_json::json;
    const PLAN: &str = "## Goal\nGreet.\n## Steps\n1. Write hello.txt\n## Files\nhello.txt\n\
                        ## Tests\nnone\n## Risks\nnone\n";
    let any_turn = |agent: &str, text: &str| -> ScriptEntry {
        serde_json::from_value(json!({
            "agent": agent,
            "reply": {"content": [Block::text(text)], "stop_reason": "end_turn"},
        }))
        .unwrap()
    };
    vec![
        ScriptEntry::reply(
            "lead",
            1,
            vec![tool(
                "TaskCreate",
                json!({"subject": "Greet", "description": "Write hello.txt saying hello."}),
            )],
        ),
        any_turn("lead", "Waiting for the team."),
        ScriptEntry::reply(
            "alice",
            1,
            vec![tool("ExitPlanMode", json!({"plan": PLAN}))],
        ),
        ScriptEntry::reply(
            "alice",
            2,
            vec![tool(
                "Write",
                json!({"file_path": "hello.txt", "content": "hello, world\n"}),
            )],
        ),
        ScriptEntry::reply("alice", 3, vec![Block::text("Wrote hello.txt.")]),
    ]
}

/// A team run on `schema` started in a fresh project, read until alice's plan waits on a
/// person; gives the project, the run, its id and the fake model server (kept alive).
async fn run_waiting_on_a_person(
    url: &str,
) -> (
    tempfile::TempDir,
    super::common::Running,
    String,
    muster_fake_llm::FakeLlmHandle,
) {
    let dir = super::common::project(&[("muster.team.toml", HUMAN_GATED_TEAM)]);
    use_store(dir.path(), url);
    let fake = super::common::fake(human_gated_script()).await;
    let mut run = super::common::Running::spawn(super::common::command(
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
    let asked = run
        .until("alice's request to a person", |event| {
            event["type"] == "approval_requested" && event["responder"] == "human"
        })
        .await;
    let run_id = asked["run_id"].as_str().unwrap().to_owned();
    (dir, run, run_id, fake)
}

/// The server pid of the run's dedicated connection (named `muster live <schema>.<run>`)
/// once it holds the lock and listens, other than `not`: polled on the server's own view,
/// with the guard as the failure bound.
async fn live_backend(
    client: &tokio_postgres::Client,
    schema: &str,
    run_id: &str,
    not: Option<i32>,
) -> i32 {
    let name = format!("muster live {schema}.{run_id}");
    let found = async {
        loop {
            let rows = client
                .query(
                    "SELECT a.pid FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid \
                     WHERE a.application_name = $1 AND a.state = 'idle' \
                     AND a.query LIKE 'LISTEN %' AND l.locktype = 'advisory' AND l.granted",
                    &[&name],
                )
                .await
                .unwrap();
            let pids: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
            if let [pid] = pids[..]
                && Some(pid) != not
            {
                return pid;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(super::common::GUARD, found)
        .await
        .expect("the run's dedicated connection holds its lock and listens")
}

/// The bigint key of the advisory lock the session `pid` holds.
async fn held_lock_key(client: &tokio_postgres::Client, pid: i32) -> i64 {
    client
        .query_one(
            "SELECT (classid::bigint << 32) | objid::bigint FROM pg_locks \
             WHERE pid = $1 AND locktype = 'advisory' AND objsubid = 1 AND granted",
            &[&pid],
        )
        .await
        .unwrap()
        .get(0)
}

fn run_log_text(dir: &Path, run_id: &str) -> String {
    std::fs::read_to_string(dir.join(format!(".muster/logs/{run_id}.jsonl"))).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_whose_live_connection_is_killed_retakes_its_lock_and_a_decision_still_wakes_it() {
    let schema = Schema::new().await;
    let (dir, mut run, run_id, fake) = run_waiting_on_a_person(&schema.url()).await;
    let client = client().await;
    let first = live_backend(&client, &schema.name, &run_id, None).await;
    let killed: bool = client
        .query_one("SELECT pg_terminate_backend($1)", &[&first])
        .await
        .unwrap()
        .get(0);
    assert!(killed);
    // A new connection takes the lock again and listens again.
    let second = live_backend(&client, &schema.name, &run_id, Some(first)).await;
    assert_ne!(first, second);
    let approve = muster(
        dir.path(),
        &["approve", "plan-alice-1", "--mode", "acceptEdits"],
    )
    .await;
    assert_eq!(approve.status.code(), Some(0), "{}", stderr(&approve));
    assert!(
        String::from_utf8_lossy(&approve.stdout).contains("was woken"),
        "woken through the new LISTEN: {}",
        String::from_utf8_lossy(&approve.stdout)
    );
    assert_eq!(run.finish().await, Some(0), "{:#?}", run.events);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(),
        "hello, world\n"
    );
    fake.verify().unwrap();
    schema.drop_now().await;
}

/// Kills the run's live connection while the test's own session waits for the run's lock,
/// so the server grants the lock to the test before the run can connect again; `then` runs
/// holding it, and the lock is released when it returns.
async fn take_the_lock_from_the_run<F, Fut>(schema: &str, run_id: &str, then: F)
where
    F: FnOnce(i64) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let observer = client().await;
    let pid = live_backend(&observer, schema, run_id, None).await;
    let key = held_lock_key(&observer, pid).await;
    let taker = client().await;
    let waiting = tokio::spawn(async move {
        taker
            .execute("SELECT pg_advisory_lock($1)", &[&key])
            .await
            .unwrap();
        taker
    });
    // The waiter is queued before the holder goes (a queued waiter is granted first).
    let queued = async {
        loop {
            let waiting: i64 = observer
                .query_one(
                    "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' \
                     AND NOT granted AND (classid::bigint << 32) | objid::bigint = $1",
                    &[&key],
                )
                .await
                .unwrap()
                .get(0);
            if waiting == 1 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(super::common::GUARD, queued)
        .await
        .expect("queued");
    observer
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    let taker = tokio::time::timeout(super::common::GUARD, waiting)
        .await
        .expect("granted")
        .unwrap();
    then(key).await;
    drop(taker);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_whose_lock_another_process_took_while_disconnected_stops_with_exit_4_and_resumes() {
    let schema = Schema::new().await;
    let (dir, mut run, run_id, fake) = run_waiting_on_a_person(&schema.url()).await;
    take_the_lock_from_the_run(&schema.name, &run_id, |_| async {
        // Held for the run's whole re-take: it gives up and stops.
        assert_eq!(run.finish().await, Some(4), "{:#?}", run.events);
    })
    .await;
    let log = run_log_text(dir.path(), &run_id);
    assert!(
        log.contains("lost its live lock")
            && log.contains("another process holds the run's lock now"),
        "{log}"
    );
    assert!(
        !run.events.iter().any(|e| e["type"] == "run_finished"),
        "no ending is written for a run another process may own"
    );
    let store = open(&schema.url()).await;
    let record = store.run(&run_id).await.unwrap().unwrap();
    assert_eq!(record.status.as_str(), "running", "left resumable");
    // Nothing was lost: the decision waits in the store and a resume finishes the run.
    let approve = muster(
        dir.path(),
        &["approve", "plan-alice-1", "--mode", "acceptEdits"],
    )
    .await;
    assert_eq!(approve.status.code(), Some(0), "{}", stderr(&approve));
    let resumed = muster(
        dir.path(),
        &["resume", &run_id, "--base-url", &fake.base_url()],
    )
    .await;
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(),
        "hello, world\n"
    );
    drop(store);
    schema.drop_now().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_whose_epoch_moved_while_disconnected_stops_with_exit_4() {
    let schema = Schema::new().await;
    let (dir, mut run, run_id, _fake) = run_waiting_on_a_person(&schema.url()).await;
    let store = open(&schema.url()).await;
    let before = store.run(&run_id).await.unwrap().unwrap().epoch;
    take_the_lock_from_the_run(&schema.name, &run_id, |_| async {
        // Another owner opens a newer epoch, then lets the lock go.
        store.open_epoch(&run_id).await.unwrap();
    })
    .await;
    assert_eq!(run.finish().await, Some(4), "{:#?}", run.events);
    let log = run_log_text(dir.path(), &run_id);
    assert!(
        log.contains(&format!(
            "the run's epoch moved from {before} to {}",
            before + 1
        )),
        "{log}"
    );
    assert_eq!(
        store.run(&run_id).await.unwrap().unwrap().status.as_str(),
        "running"
    );
    drop(store);
    schema.drop_now().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_password_exits_4_naming_authentication_with_the_password_masked() {
    let cluster = tokio::task::spawn_blocking(pg_cluster::Cluster::start)
        .await
        .unwrap();
    let dir = project();
    let url = cluster.url_with_password("not-the-password");
    let output = muster(dir.path(), &["--store", &url, "runs"]).await;
    assert_eq!(output.status.code(), Some(4), "{}", stderr(&output));
    let text = stderr(&output);
    assert!(
        text.contains("cannot connect to the store postgres://muster:***@127.0.0.1:")
            && text.contains("authentication failed")
            && text.contains("check the user and password in the URL"),
        "{text}"
    );
    assert!(!text.contains("not-the-password"), "{text}");
    // The right password reaches the same server.
    let right = muster(dir.path(), &["--store", &cluster.url(), "runs"]).await;
    assert_eq!(right.status.code(), Some(0), "{}", stderr(&right));
}

/// `pg_ctl stop -m fast` then start, while a live run waits on a person: the server ends
/// every session (the pool's and the live one), the run connects again, re-takes its lock
/// and its LISTEN, and the decision made after the restart wakes it; it completes as if
/// nothing happened.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_restarted_in_the_middle_of_a_run_is_reconnected_and_the_run_completes() {
    let cluster = tokio::task::spawn_blocking(pg_cluster::Cluster::start)
        .await
        .unwrap();
    let (dir, mut run, run_id, fake) = run_waiting_on_a_person(&cluster.url()).await;
    {
        let client = client_of(&cluster.url()).await;
        live_backend(&client, "public", &run_id, None).await;
    }
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.stop_fast();
        cluster.start_again();
        cluster
    })
    .await
    .unwrap();
    let client = client_of(&cluster.url()).await;
    live_backend(&client, "public", &run_id, None).await;
    let approve = muster(
        dir.path(),
        &["approve", "plan-alice-1", "--mode", "acceptEdits"],
    )
    .await;
    assert_eq!(approve.status.code(), Some(0), "{}", stderr(&approve));
    assert!(
        String::from_utf8_lossy(&approve.stdout).contains("was woken"),
        "{}",
        String::from_utf8_lossy(&approve.stdout)
    );
    let code = run.finish().await;
    let log = run_log_text(dir.path(), &run_id);
    // Once seen failing under a full test run's load (exit 4, 57P03 "the database system is
    // shutting down" seconds after the restart): the server's log says who asked it to stop.
    assert_eq!(
        code,
        Some(0),
        "{:#?}\nrun log:\n{log}\nserver log:\n{}",
        run.events,
        cluster.server_log()
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(),
        "hello, world\n"
    );
    assert!(log.contains("the live run's lock is held again"), "{log}");
    fake.verify().unwrap();
    drop(client);
}

/// A store failure inside a teammate's end of turn is the run's: the run stops with exit 4
/// (not 0, not a teammate's "failed"), naming where it happened, and stays resumable, so a
/// script that retries on 4 finishes it once the store is back. The store fails for real: the
/// server answers alice's end of turn with "relation does not exist", its `tasks` table renamed
/// while her last answer is held at the fake model's gate.
#[tokio::test(flavor = "multi_thread")]
async fn a_store_failure_in_a_teammates_end_of_turn_stops_the_run_with_exit_4_and_resume_finishes_it()
 {
    use muster_fake_llm::{Block, ScriptEntry};
    use serde_json::json;

    use super::common::{Running, command, fake, tool};

    let dir = super::common::project(&[(
        "muster.team.toml",
        "name = \"one\"\n\n[[teammates]]\nname = \"alice\"\nplan_mode_required = false\n",
    )]);
    let schema = Schema::new().await;
    use_store(dir.path(), &schema.url());
    let turn = |agent: &str, text: &str, hold: Option<&str>| -> ScriptEntry {
        let mut entry = json!({"agent": agent,
            "reply": {"content": [Block::text(text)], "stop_reason": "end_turn"}});
        if let Some(gate) = hold {
            entry["fault"] = json!({"hold": gate});
        }
        serde_json::from_value(entry).unwrap()
    };
    let fake = fake(vec![
        ScriptEntry::reply(
            "lead",
            1,
            vec![tool(
                "TaskCreate",
                json!({"subject": "Read", "description": "Say what README.md says."}),
            )],
        ),
        ScriptEntry::reply(
            "alice",
            1,
            vec![tool("Read", json!({"file_path": "README.md"}))],
        ),
        turn("alice", "It says hello.", Some("alice-last")),
        turn("lead", "Waiting for the team.", None),
    ])
    .await;
    let args = [
        "run",
        "-p",
        "Read the README.",
        "--base-url",
        &fake.base_url(),
        "--output",
        "stream-json",
    ];
    let mut run = Running::spawn(command(dir.path(), &args));
    tokio::time::timeout(super::common::GUARD, fake.gate_reached("alice-last", 1))
        .await
        .expect("guard timeout");
    let tasks = format!("{}.tasks", schema.name());
    admin(&format!("ALTER TABLE {tasks} RENAME TO tasks_gone")).await;
    fake.open_gate("alice-last");
    assert_eq!(run.finish().await, Some(4), "{:#?}", run.events);
    let finished = run.events.last().unwrap();
    assert_eq!(finished["type"], "run_finished", "{:#?}", run.events);
    let error = finished["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{finished:#}"));
    assert!(error.contains("alice's end of turn"), "{error}");
    assert!(
        error.contains("tasks"),
        "the server's words are kept: {error}"
    );

    admin(&format!(
        "ALTER TABLE {}.tasks_gone RENAME TO tasks",
        schema.name()
    ))
    .await;
    let resumed = muster(dir.path(), &["resume", "--output", "stream-json"]).await;
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    let finished = lines(&resumed).last().cloned().unwrap();
    assert_eq!(finished["status"], "completed", "{finished:#}");
    let tasks = finished["tasks"].as_array().unwrap();
    assert!(
        tasks.iter().all(|t| t["status"] == "completed"),
        "{tasks:?}"
    );
    schema.drop_now().await;
}

/// `muster interrupt` from another machine (a second project directory on the same server
/// store: no lock file, no socket of the run there) reaches the live run through the
/// server's hold and NOTIFY; the prompt handed from there too is the run's next turn.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn an_interrupt_from_another_machine_reaches_the_live_run_through_notify() {
    use super::continue_cli::interrupt::{Live, interrupt, model, next_prompt_and_end, run_args};
    let schema = Schema::new().await;
    let dir = super::common::project(&[]);
    let elsewhere = super::common::project(&[]);
    use_store(dir.path(), &schema.url());
    use_store(elsewhere.path(), &schema.url());
    let fake = model("main").await;
    let base = fake.base_url();
    let mut live = Live::spawn(super::common::command(dir.path(), &run_args(&base)));
    let first = live.next_event().await.expect("no event");
    let run_id = first["run_id"].as_str().unwrap().to_owned();
    assert!(
        !elsewhere
            .path()
            .join(".muster/runs")
            .join(format!("{run_id}.lock"))
            .exists()
    );
    interrupt(elsewhere.path(), &fake, &run_id).await;
    next_prompt_and_end(elsewhere.path(), &fake, &mut live, &run_id).await;
    schema.drop_now().await;
}
