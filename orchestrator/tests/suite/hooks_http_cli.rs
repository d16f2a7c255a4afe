//! `http` hook handlers through the binary, against a real HTTP server (axum) and the fake
//! model server: the event's JSON is POSTed (with a header carrying an allowed environment
//! variable), a 2xx answer's JSON decides as a command's stdout would (a guard refuses `rm`
//! and its reason reaches the model), a 500 is a non-blocking failure, an unreachable URL with
//! `"onFailure": "block"` refuses the call, and an untrusted project's `http` hooks are not
//! posted.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use muster_fake_llm::{Block, ScriptEntry};
use serde_json::{Value, json};

use super::common::{command, fake, output, project, stderr, tool, trust};

/// What the server was sent: (path, Authorization header, body).
type Seen = Arc<Mutex<Vec<(String, String, Value)>>>;

/// A server with `/guard` (denies a Bash `rm`, says nothing otherwise) and `/broken` (500).
async fn hook_server() -> (String, Seen) {
    let seen: Seen = Arc::default();
    // Bodies as text (axum is built without its `json` feature here).
    async fn guard(State(seen): State<Seen>, headers: HeaderMap, body: String) -> String {
        let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        let authorization = headers
            .get("authorization")
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let command = body["tool_input"]["command"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        seen.lock()
            .unwrap()
            .push(("/guard".into(), authorization, body));
        (match command.starts_with("rm ") {
            true => json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": "rm is refused over http"}}),
            false => json!({}),
        })
        .to_string()
    }
    async fn broken(
        State(seen): State<Seen>,
        body: String,
    ) -> (axum::http::StatusCode, &'static str) {
        let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        seen.lock()
            .unwrap()
            .push(("/broken".into(), String::new(), body));
        (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "boom")
    }
    async fn slow() -> String {
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        "{}".into()
    }
    async fn huge() -> String {
        "x".repeat(2 * 1024 * 1024)
    }
    async fn junk() -> &'static str {
        "not json {"
    }
    let app = axum::Router::new()
        .route("/guard", post(guard))
        .route("/broken", post(broken))
        .route("/slow", post(slow))
        .route("/huge", post(huge))
        .route("/junk", post(junk))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}"), seen)
}

/// A project whose `.claude/settings.json` has `hooks`.
fn project_with(hooks: Value) -> tempfile::TempDir {
    let dir = project(&[]);
    std::fs::create_dir_all(dir.path().join(".claude")).unwrap();
    std::fs::write(
        dir.path().join(".claude/settings.json"),
        json!({ "hooks": hooks }).to_string(),
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    std::fs::write(dir.path().join("data/keep.txt"), "keep\n").unwrap();
    dir
}

async fn run(dir: &std::path::Path, base: &str) -> std::process::Output {
    let mut run = command(
        dir,
        &[
            "run",
            "-p",
            "Clean up.",
            "--permission-mode",
            "bypassPermissions",
            "--base-url",
            base,
            "--output",
            "json",
        ],
    );
    run.env("HOOK_TOKEN", "s3cret");
    output(run).await
}

fn two_calls() -> Vec<ScriptEntry> {
    vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![
                tool("Bash", json!({"command": "rm data/keep.txt"})),
                tool("Bash", json!({"command": "echo hi > note.txt"})),
            ],
        ),
        ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
    ]
}

/// The results of the calls, as the model was sent them at turn 2.
fn results_at_turn_two(fake: &muster_fake_llm::FakeLlmHandle) -> String {
    fake.requests()
        .into_iter()
        .find(|request| request.turn == Some(2))
        .expect("a second request")
        .body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_http_guard_refuses_rm_and_a_failing_http_hook_does_not_stop_the_run() {
    let (server, seen) = hook_server().await;
    let dir = project_with(json!({
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "http", "url": format!("{server}/guard"),
            "headers": {"Authorization": "Bearer $HOOK_TOKEN"}, "allowedEnvVars": ["HOOK_TOKEN"]}]}],
        "PostToolUse": [{"matcher": "*", "hooks": [{"type": "http", "url": format!("{server}/broken")}]}]
    }));
    trust(dir.path()).await;
    let fake = fake(two_calls()).await;
    let done = run(dir.path(), &fake.base_url()).await;
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    assert!(dir.path().join("data/keep.txt").exists(), "rm ran");
    assert!(
        dir.path().join("note.txt").exists(),
        "the 500 stopped the other call"
    );
    let results = results_at_turn_two(&fake);
    assert!(results.contains("rm is refused over http"), "{results}");
    let seen = seen.lock().unwrap().clone();
    let guarded: Vec<_> = seen.iter().filter(|(path, ..)| path == "/guard").collect();
    assert_eq!(guarded.len(), 2, "{seen:#?}");
    for (_, authorization, body) in &guarded {
        assert_eq!(authorization, "Bearer s3cret");
        assert_eq!(body["hook_event_name"], "PreToolUse");
        assert_eq!(body["tool_name"], "Bash");
        assert!(
            body["session_id"].is_string() && body["cwd"].is_string(),
            "{body}"
        );
    }
    let broken: Vec<_> = seen.iter().filter(|(path, ..)| path == "/broken").collect();
    assert_eq!(
        broken.len(),
        1,
        "one PostToolUse for the call that ran: {seen:#?}"
    );
    assert_eq!(broken[0].2["hook_event_name"], "PostToolUse");
}

/// An unreachable guard with `"onFailure": "block"` refuses the call; in a project nobody
/// trusted, the same hooks are not posted at all and the run says so.
#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_blocking_http_guard_refuses_and_an_untrusted_ones_is_never_posted() {
    // A port nothing listens on: bound, then closed.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let dir = project_with(json!({
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "http",
            "url": format!("http://{closed}/guard"), "onFailure": "block", "timeout": 5}]}]
    }));
    trust(dir.path()).await;
    let model = fake(two_calls()).await;
    let done = run(dir.path(), &model.base_url()).await;
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    assert!(dir.path().join("data/keep.txt").exists(), "rm ran");
    assert!(
        !dir.path().join("note.txt").exists(),
        "a call ran unguarded"
    );
    let results = results_at_turn_two(&model);
    assert!(results.contains("could not start"), "{results}");

    let (server, seen) = hook_server().await;
    let untrusted = project_with(json!({
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "http", "url": format!("{server}/guard")}]}]
    }));
    let model = fake(two_calls()).await;
    let done = run(untrusted.path(), &model.base_url()).await;
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    assert!(
        seen.lock().unwrap().is_empty(),
        "an untrusted hook was posted"
    );
    assert!(stderr(&done).contains("muster trust"), "{}", stderr(&done));
}

/// The failure table for an `http` guard with `"onFailure": "block"`: a timeout, a body over
/// 1 MB and a 500 refuse the call (each a failure of the hook); junk in a 2xx answer is no
/// decision, and the call runs.
#[tokio::test(flavor = "multi_thread")]
async fn an_http_guards_failures_follow_the_command_failure_table() {
    let (server, _) = hook_server().await;
    let cases = [
        ("/slow", true, "timed out"),
        ("/huge", true, "more than 1 MB"),
        ("/broken", true, "answered HTTP 500: boom"),
        ("/junk", false, ""),
    ];
    for (route, blocks, said) in cases {
        let dir = project_with(json!({
            "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "http",
                "url": format!("{server}{route}"), "onFailure": "block", "timeout": 1}]}]
        }));
        trust(dir.path()).await;
        let model = fake(vec![
            ScriptEntry::reply(
                "main",
                1,
                vec![tool("Bash", json!({"command": "echo hi > note.txt"}))],
            ),
            ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
        ])
        .await;
        let done = run(dir.path(), &model.base_url()).await;
        assert_eq!(done.status.code(), Some(0), "{route}: {}", stderr(&done));
        assert_eq!(dir.path().join("note.txt").exists(), !blocks, "{route}");
        let results = results_at_turn_two(&model);
        assert!(results.contains(said), "{route}: {results}");
    }
}
