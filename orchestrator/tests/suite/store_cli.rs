//! The store through the `muster` binary: bad store files, the demo, the inspection commands,
//! and a person's decisions from a second process waking a live run.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use muster_mailbox::live::LiveRun;
use muster_mailbox::*;
use serde_json::{Value, json};

use super::common::{stderr, stdout};

const GUARD: Duration = Duration::from_secs(30);

fn muster(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_muster"))
        .current_dir(dir)
        .args(args)
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .unwrap()
}

/// A project directory with a store holding run `r1`: a lead, alice and bob, and a plan
/// request from alice whose responder is `responder`.
async fn project_with_request(responder: &str) -> (tempfile::TempDir, Arc<SqliteStore>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".muster")).unwrap();
    let store = Arc::new(
        SqliteStore::open(
            &dir.path().join(".muster/muster.db"),
            StoreOptions::default(),
        )
        .unwrap(),
    );
    store
        .create_run(NewRun {
            id: "r1".into(),
            slug: "brave-red-fox".into(),
            team: Some("t".into()),
            workspace: dir.path().display().to_string(),
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
                responder: responder.into(),
                revision: 1,
                previous_request_id: None,
                allowed_prompts: Vec::new(),
            },
            idempotency_key: None,
        })
        .await
        .unwrap();
    (dir, store)
}

#[test]
fn a_store_path_that_is_not_sqlite_exits_4_and_leaves_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "my notes\n").unwrap();
    let output = muster(dir.path(), &["--store", path.to_str().unwrap(), "runs"]);
    assert_eq!(output.status.code(), Some(4), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("notes.txt is not a muster store"),
        "{}",
        stderr(&output)
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "my notes\n");
}

#[test]
fn a_store_from_a_newer_muster_exits_4_naming_both_versions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("PRAGMA user_version = 42;")
        .unwrap();
    let output = muster(dir.path(), &["--store", "m.db", "inbox"]);
    assert_eq!(output.status.code(), Some(4));
    assert!(
        stderr(&output).contains("schema version 42"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn the_demo_crashes_a_child_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let output = muster(dir.path(), &["demo", "--crash", "--dir", "d"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}\n{}", stderr(&output));
    assert!(text.contains("killed with SIGKILL"), "{text}");
    assert!(text.contains("0 lost"), "{text}");
    assert!(
        text.contains("Nothing was lost and nothing was repeated."),
        "{text}"
    );

    let store = ["--store", "d/.muster/muster.db"];
    let runs = muster(dir.path(), &[&store[..], &["runs"]].concat());
    assert!(
        stdout(&runs).contains("demo") && stdout(&runs).contains("completed"),
        "{}",
        stdout(&runs)
    );
    let inbox = muster(
        dir.path(),
        &[&store[..], &["inbox", "carol", "--json"]].concat(),
    );
    let rows: Vec<Value> = serde_json::from_slice(&inbox.stdout).unwrap();
    assert_eq!(rows.len(), 24);
    assert!(rows.iter().all(|row| row["message"]["state"] == "acked"));
    let again = muster(dir.path(), &["demo", "--crash", "--dir", "d"]);
    assert_ne!(again.status.code(), Some(0));
    assert!(
        stderr(&again).contains("give `muster demo --dir` an empty directory"),
        "{}",
        stderr(&again)
    );
}

#[tokio::test]
async fn inspection_commands_read_a_run() {
    let (dir, store) = project_with_request("human").await;
    store
        .create_task(NewTask {
            run_id: "r1".into(),
            created_by: "lead".into(),
            subject: "write the parser".into(),
            description: "d".into(),
            blocked_by: vec![],
            idempotency_key: None,
        })
        .await
        .unwrap();
    store
        .create_task(NewTask {
            run_id: "r1".into(),
            created_by: "lead".into(),
            subject: "test it".into(),
            description: "d".into(),
            blocked_by: vec![1],
            idempotency_key: None,
        })
        .await
        .unwrap();
    let human = stdout(&muster(dir.path(), &["inbox", "human"]));
    assert!(
        human.contains("plan approval request") && human.contains("waiting for human"),
        "{human}"
    );
    assert!(human.contains("muster approve ID"), "{human}");
    let tasks = stdout(&muster(dir.path(), &["tasks"]));
    assert!(
        tasks.contains("write the parser") && tasks.contains("blocked") && tasks.contains("#1"),
        "{tasks}"
    );
    // The slug's empty reservation is no plan; a written file no request names is a draft.
    std::fs::create_dir_all(dir.path().join(".muster/plans")).unwrap();
    std::fs::write(dir.path().join(".muster/plans/brave-red-fox.md"), "").unwrap();
    std::fs::write(
        dir.path().join(".muster/plans/brave-red-fox-agent-bob.md"),
        "## Steps\n1. think\n",
    )
    .unwrap();
    let plans = stdout(&muster(dir.path(), &["plans", "--run", "r1"]));
    assert!(
        plans.contains("brave-red-fox-agent-alice.md (missing)") && plans.contains("pending"),
        "{plans}"
    );
    assert!(
        plans
            .lines()
            .any(|l| l.contains("-agent-bob.md") && l.contains("draft")),
        "{plans}"
    );
    assert!(!plans.contains("brave-red-fox.md"), "{plans}");
    let runs = stdout(&muster(dir.path(), &["runs"]));
    assert!(
        runs.contains("interrupted"),
        "a running run with a free lock is shown interrupted: {runs}"
    );
    let unknown = muster(dir.path(), &["tasks", "--run", "nope"]);
    assert_eq!(unknown.status.code(), Some(2));
}

#[tokio::test]
async fn a_person_decides_once_and_only_their_own_requests() {
    let (dir, store) = project_with_request("human").await;
    let approved = muster(
        dir.path(),
        &["approve", "plan-alice-1", "--mode", "acceptEdits"],
    );
    assert_eq!(approved.status.code(), Some(0), "{}", stderr(&approved));
    assert!(
        stdout(&approved).contains("Approved plan-alice-1"),
        "{}",
        stdout(&approved)
    );
    assert!(
        stdout(&approved).contains("not live: `muster resume r1`"),
        "{}",
        stdout(&approved)
    );
    for args in [
        &["approve", "plan-alice-1"][..],
        &["reject", "plan-alice-1", "--feedback", "no"][..],
    ] {
        let again = muster(dir.path(), args);
        assert_eq!(again.status.code(), Some(1), "{args:?}");
        assert!(
            stderr(&again).contains("already decided by human"),
            "{}",
            stderr(&again)
        );
    }
    let decided = store
        .request("r1", "plan-alice-1")
        .await
        .unwrap()
        .unwrap()
        .response
        .unwrap();
    assert_eq!(
        (
            decided.stored_body()["approved"].clone(),
            decided.stored_body()["mode"].clone()
        ),
        (json!(true), json!("acceptEdits"))
    );

    let unknown = muster(dir.path(), &["approve", "plan-zed-9"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        stderr(&unknown).contains("unknown request id \"plan-zed-9\""),
        "{}",
        stderr(&unknown)
    );
    let bad_mode = muster(dir.path(), &["approve", "plan-alice-1", "--mode", "yolo"]);
    assert_ne!(bad_mode.status.code(), Some(0));
}

#[tokio::test]
async fn a_request_for_the_lead_is_not_a_persons_to_answer() {
    let (dir, _store) = project_with_request("lead").await;
    let output = muster(dir.path(), &["approve", "plan-alice-1"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("is answered by lead, not by a person"),
        "{}",
        stderr(&output)
    );
}

#[tokio::test]
async fn approve_from_another_process_wakes_the_live_run_at_once() {
    let (dir, store) = project_with_request("human").await;
    let epoch = store.open_epoch("r1").await.unwrap();
    let _live =
        LiveRun::start(&dir.path().join(".muster/runs"), "r1", store.clone(), None).unwrap();
    let base = store.stats();
    let mut stats = store.watch_stats();
    let waiting = tokio::spawn({
        let store = store.clone();
        async move {
            store
                .receive(
                    "r1",
                    "alice",
                    epoch,
                    MessageFilter::RequestId("plan-alice-1".into()),
                )
                .await
        }
    });
    tokio::time::timeout(GUARD, stats.wait_for(|s| s.looks > base.looks))
        .await
        .unwrap()
        .unwrap();
    let looked = store.stats();
    assert_eq!(
        looked.operations, base.operations,
        "an empty look skips the writer"
    );

    let project = dir.path().to_path_buf();
    let approve = tokio::task::spawn_blocking(move || {
        muster(&project, &["approve", "plan-alice-1", "--feedback", "go"])
    });
    let output = tokio::time::timeout(GUARD, approve).await.unwrap().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("The run is live and alice was woken."),
        "{}",
        stdout(&output)
    );
    let response = tokio::time::timeout(GUARD, waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(response.kind, "plan_approval_response");
    assert_eq!(response.stored_body()["feedback"], "go");
    // The receiver looked once before and once after the wake, and leased once: it never
    // polled.
    let after = store.stats();
    assert_eq!(
        (after.looks, after.operations),
        (looked.looks + 1, looked.operations + 1)
    );
}

#[tokio::test]
async fn prune_keeps_decisions_and_unfinished_runs() {
    let (dir, store) = project_with_request("human").await;
    let zero = muster(dir.path(), &["prune", "--older-than", "0"]);
    assert_eq!(zero.status.code(), Some(2));
    // A finished run with an acked chat message and a decided request, all old enough.
    store
        .set_run_status("r1", RunStatus::Completed, None)
        .await
        .unwrap();
    let report = store.prune(i64::MAX, None).await.unwrap();
    assert_eq!(report.runs_pruned, ["r1"]);
    assert_eq!(
        report.messages_deleted, 0,
        "the only message is a request, and it is pending"
    );
    assert_eq!(report.decisions_kept, 1);
    assert!(store.request("r1", "plan-alice-1").await.unwrap().is_some());
    let output = muster(dir.path(), &["prune", "--older-than", "1"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("kept 1 request(s) and response(s)"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn reading_commands_never_create_a_store() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(".git")).unwrap();
    for args in [
        &["runs"][..],
        &["inbox"][..],
        &["tasks"][..],
        &["plans"][..],
    ] {
        let output = muster(dir.path(), args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&output).contains("no store at"),
            "{}",
            stderr(&output)
        );
    }
    assert!(!dir.path().join(".muster").exists());
}

#[tokio::test]
async fn fork_copies_the_run_and_its_plan_files_under_a_new_slug() {
    let (dir, store) = project_with_request("human").await;
    let plans = dir.path().join(".muster/plans");
    std::fs::create_dir_all(&plans).unwrap();
    std::fs::write(plans.join("brave-red-fox.md"), "main plan").unwrap();
    std::fs::write(plans.join("brave-red-fox-agent-alice.md"), "alice's plan").unwrap();
    std::fs::write(plans.join("other-run-agent-alice.md"), "not ours").unwrap();

    let output = muster(dir.path(), &["fork", "r1"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("with 2 plan file(s) copied"), "{text}");
    let runs = store.runs().await.unwrap();
    let fork = runs.iter().find(|r| r.id != "r1").unwrap();
    assert_eq!(fork.status, RunStatus::Interrupted);
    assert_eq!(
        std::fs::read_to_string(plans.join(format!("{}.md", fork.slug))).unwrap(),
        "main plan"
    );
    assert_eq!(
        std::fs::read_to_string(plans.join(format!("{}-agent-alice.md", fork.slug))).unwrap(),
        "alice's plan"
    );
    assert_eq!(
        std::fs::read_to_string(plans.join("brave-red-fox.md")).unwrap(),
        "main plan",
        "the original stays"
    );
    let request = store
        .request(&fork.id, "plan-alice-1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        request.stored_body()["plan_file"],
        format!(".muster/plans/{}-agent-alice.md", fork.slug)
    );
    assert_eq!(
        store
            .request("r1", "plan-alice-1")
            .await
            .unwrap()
            .unwrap()
            .stored_body()["plan_file"],
        ".muster/plans/brave-red-fox-agent-alice.md"
    );
    let unknown = muster(dir.path(), &["fork", "nope"]);
    assert_eq!(unknown.status.code(), Some(2));
}

/// `muster approve ID --edit` with `editor` as `$EDITOR` (and no `$VISUAL`).
fn approve_with_editor(dir: &Path, editor: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_muster"))
        .current_dir(dir)
        .args(["approve", "plan-alice-1", "--edit"])
        .env("EDITOR", editor)
        .env_remove("VISUAL")
        .env_remove("XDG_RUNTIME_DIR")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

fn script(dir: &Path, name: &str, body: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[tokio::test]
async fn approve_edit_sends_the_plan_the_editor_saved() {
    let (dir, store) = project_with_request("human").await;
    // An editor that fails approves nothing.
    let failing = script(dir.path(), "fail.sh", "exit 3");
    let refused = approve_with_editor(dir.path(), &failing);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("nothing was approved"),
        "{}",
        stderr(&refused)
    );
    assert!(
        store
            .request("r1", "plan-alice-1")
            .await
            .unwrap()
            .unwrap()
            .response
            .is_none()
    );
    let editor = script(
        dir.path(),
        "edit.sh",
        "printf '\\n## Note\\nkeep it small\\n' >> \"$1\"",
    );
    let approved = approve_with_editor(dir.path(), &editor);
    assert_eq!(approved.status.code(), Some(0), "{}", stderr(&approved));
    let response = store
        .request("r1", "plan-alice-1")
        .await
        .unwrap()
        .unwrap()
        .response
        .unwrap();
    assert_eq!(response.stored_body()["approved"], true);
    assert_eq!(
        response.stored_body()["edited_plan"],
        "## Goal\nx\n## Steps\n1. edit\n## Files\nsrc/a.rs\n## Note\nkeep it small\n"
    );
    let again = approve_with_editor(dir.path(), &editor);
    assert_eq!(again.status.code(), Some(1), "{}", stderr(&again));
    assert!(
        stderr(&again).contains("already decided"),
        "{}",
        stderr(&again)
    );
}

#[test]
fn a_store_url_with_an_unknown_scheme_exits_2_naming_the_known_ones_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // A run that would make its store and finish, on the offline provider.
    let cassette = dir.path().join("c.jsonl");
    std::fs::write(
        &cassette,
        r#"{"agent": "main", "turn": 1, "reply": {"content": [{"type": "text", "text": "Hi."}], "stop_reason": "end_turn"}}"#,
    )
    .unwrap();
    let cassette = cassette.to_str().unwrap();
    let run = [
        "run",
        "-p",
        "Hi.",
        "--provider",
        "script",
        "--cassette",
        cassette,
    ];
    for store in [
        "postgress://postgres:secret@127.0.0.1:5432/test",
        "sqlite:///tmp/m.db",
    ] {
        let output = muster(dir.path(), &[&["--store", store][..], &run].concat());
        assert_eq!(
            output.status.code(),
            Some(2),
            "{store}: {}",
            stderr(&output)
        );
        let text = stderr(&output);
        assert!(text.contains("`postgres://`, `postgresql://`"), "{text}");
        assert!(!text.contains("secret"), "the password is masked: {text}");
    }
    std::fs::create_dir_all(dir.path().join(".muster")).unwrap();
    std::fs::write(
        dir.path().join(".muster/settings.toml"),
        "store = \"postgresq://db.example/muster\"\n",
    )
    .unwrap();
    let output = muster(dir.path(), &run);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("`postgresq://`"),
        "{}",
        stderr(&output)
    );
    let mut left: Vec<String> = walk(dir.path());
    left.sort();
    assert_eq!(
        left,
        [".muster", ".muster/settings.toml", "c.jsonl"],
        "nothing was created"
    );
}

/// Every path under `root`, relative to it.
fn walk(root: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            found.push(path.strip_prefix(root).unwrap().display().to_string());
            if path.is_dir() {
                pending.push(path);
            }
        }
    }
    found
}
