//! `muster batch` through the binary against `muster-fake-llm` over real HTTP: result lines
//! and the worst exit code, a bad file refused before anything runs, one workspace's lines in
//! file order while distinct workspaces run together (from the runs' stored times), and a
//! batch killed with SIGKILL then run again: every id finished exactly once, and `--output`
//! formats on stdout beside unchanged `--out` result lines.

use std::path::Path;

use muster_fake_llm::{Block, FakeLlm, FakeLlmHandle, Fault, ScriptEntry};
use muster_mailbox::{MailboxStore, RunRecord, SqliteStore, StoreOptions};
use serde_json::Value;

use super::common::{GUARD, command, json_lines, lines, muster, stderr};

/// A project whose settings send every model request to `fake`: trusted, since a project's
/// own `base_url` would receive the user's API key.
fn project(fake: &FakeLlmHandle) -> tempfile::TempDir {
    let dir = super::common::project(&[(
        ".muster/settings.toml",
        &format!(
            "[providers.anthropic]\nbase_url = \"{}\"\n",
            fake.base_url()
        ),
    )]);
    super::common::trust_blocking(dir.path());
    dir
}

fn by_id<'a>(lines: &'a [Value], id: &str) -> &'a Value {
    let found: Vec<&Value> = lines.iter().filter(|l| l["id"] == id).collect();
    assert_eq!(found.len(), 1, "one result line for {id}: {lines:#?}");
    found[0]
}

fn write_batch(dir: &Path, lines: &[&str]) {
    std::fs::write(dir.join("tasks.jsonl"), lines.join("\n") + "\n").unwrap();
}

async fn stored_runs(dir: &Path) -> Vec<RunRecord> {
    let store = SqliteStore::open(&dir.join(".muster/muster.db"), StoreOptions::default()).unwrap();
    store.runs().await.unwrap()
}

fn runs_of<'a>(runs: &'a [RunRecord], id: &str) -> Vec<&'a RunRecord> {
    let key = format!("tasks.jsonl#{id}");
    runs.iter()
        .filter(|run| run.batch_line_id.as_deref() == Some(key.as_str()))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn each_line_runs_with_a_result_line_and_the_batch_exits_with_the_worst_code() {
    let fake = FakeLlm::start(vec![
        ScriptEntry::reply("main", 1, vec![Block::text("done a")]).attempt(1),
        ScriptEntry::http_error("main", 1, 400).attempt(2),
        ScriptEntry::reply("lead", 1, vec![Block::text("team done")]),
    ])
    .await
    .unwrap();
    let dir = project(&fake);
    std::fs::write(dir.path().join("solo.toml"), "name = \"solo\"\n").unwrap();
    std::fs::write(dir.path().join("broken.toml"), "").unwrap();
    write_batch(
        dir.path(),
        &[
            r#"{"id": "a", "prompt": "Say done."}"#,
            r#"{"id": "b", "prompt": "This one fails."}"#,
            r#"{"id": "t", "prompt": "A team.", "team": "solo.toml"}"#,
            r#"{"id": "x", "prompt": "A broken team.", "team": "broken.toml"}"#,
        ],
    );
    // One workspace: the lines run in file order, so `a` gets attempt 1 and `b` attempt 2.
    let output = muster(dir.path(), &["batch", "tasks.jsonl", "--concurrency", "4"]).await;
    let results = lines(&output);
    assert_eq!(results.len(), 4, "{results:#?}\n{}", stderr(&output));
    assert_eq!(
        results
            .iter()
            .map(|r| r["id"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["a", "b", "t", "x"],
        "file order on one workspace"
    );

    let a = by_id(&results, "a");
    assert_eq!(a["status"], "completed");
    assert_eq!(a["exit_code"], 0);
    assert_eq!(a["result"], "done a");
    let b = by_id(&results, "b");
    assert_eq!(b["status"], "failed");
    assert_eq!(b["exit_code"], 1);
    assert!(b["error"].is_string(), "{b}");
    let t = by_id(&results, "t");
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(t["exit_code"], 0);
    let x = by_id(&results, "x");
    assert_eq!(x["status"], "error", "no run was created: {x}");
    assert_eq!(x["run_id"], Value::Null);
    assert_eq!(x["exit_code"], 2);
    assert!(
        x["error"].as_str().unwrap().contains("name"),
        "the team file's error: {x}"
    );
    // The worst: a line that could not start (2) is worse than a failed run (1).
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));

    let runs = stored_runs(dir.path()).await;
    for (id, status) in [("a", "completed"), ("b", "failed")] {
        let mine = runs_of(&runs, id);
        assert_eq!(mine.len(), 1, "{id}: {runs:#?}");
        assert_eq!(mine[0].status.as_str(), status);
        assert_eq!(
            results
                .iter()
                .find(|r| r["id"] == id)
                .map(|r| r["run_id"].clone()),
            Some(Value::String(mine[0].id.clone()))
        );
    }
    assert!(
        runs.iter()
            .any(|run| Some(run.id.as_str()) == t["run_id"].as_str())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_line_refuses_the_file_before_anything_runs() {
    let fake = FakeLlm::start(vec![]).await.unwrap();
    let dir = project(&fake);
    write_batch(
        dir.path(),
        &[
            r#"{"id": "a", "prompt": "fine"}"#,
            r#"{"id": "b"}"#,
            r#"{"id": "a", "prompt": "again"}"#,
            r#"{"id": "c", "prompt": "x", "workspace": "nowhere"}"#,
            "{not json",
        ],
    );
    let output = muster(
        dir.path(),
        &["batch", "tasks.jsonl", "--out", "results.jsonl"],
    )
    .await;
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let err = stderr(&output);
    for expected in [
        "4 bad lines; nothing was run",
        "line 2: missing field `prompt`",
        "line 3: id \"a\" is already used on line 1",
        "line 4: workspace",
        "line 5: not a JSON object",
    ] {
        assert!(err.contains(expected), "{expected:?} in {err}");
    }
    assert!(output.stdout.is_empty());
    assert!(!dir.path().join(".muster/muster.db").exists(), "no run");
    assert!(fake.requests().is_empty());
    let missing = muster(dir.path(), &["batch", "nope.jsonl"]).await;
    assert_eq!(missing.status.code(), Some(2), "{}", stderr(&missing));
    assert!(
        stderr(&missing).contains("nope.jsonl"),
        "{}",
        stderr(&missing)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn one_workspace_runs_in_file_order_while_distinct_workspaces_run_together() {
    // Every answer is held until two runs wait for theirs at once: x and z (distinct
    // workspaces) must overlap, and y (x's workspace) must wait for x.
    let fake = FakeLlm::start(vec![
        ScriptEntry::reply("main", 1, vec![Block::text("done")]).fault(Fault {
            hold: Some("answers".into()),
            ..Fault::default()
        }),
    ])
    .await
    .unwrap();
    let dir = project(&fake);
    std::fs::create_dir(dir.path().join("other")).unwrap();
    write_batch(
        dir.path(),
        &[
            r#"{"id": "x", "prompt": "First on the root."}"#,
            r#"{"id": "z", "prompt": "Elsewhere.", "workspace": "other"}"#,
            r#"{"id": "y", "prompt": "Second on the root.", "workspace": "."}"#,
        ],
    );
    let args = [
        "batch",
        "tasks.jsonl",
        "--concurrency",
        "4",
        "--out",
        "results.jsonl",
    ];
    let mut batch = command(dir.path(), &args);
    let batch = batch.output();
    let opened = async {
        tokio::time::timeout(GUARD, fake.gate_reached("answers", 2))
            .await
            .expect("two runs in flight at once");
        fake.open_gate("answers");
    };
    let (output, ()) = tokio::join!(async { tokio::time::timeout(GUARD, batch).await }, opened);
    let output = output.expect("guard timeout").unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(output.stdout.is_empty(), "results go to --out");
    let results = json_lines(&std::fs::read_to_string(dir.path().join("results.jsonl")).unwrap());
    assert_eq!(results.len(), 3);
    for id in ["x", "y", "z"] {
        assert_eq!(by_id(&results, id)["status"], "completed");
    }

    let runs = stored_runs(dir.path()).await;
    let [x, y, z] = ["x", "y", "z"].map(|id| {
        let mine = runs_of(&runs, id);
        assert_eq!(mine.len(), 1, "{id}");
        mine[0].clone()
    });
    assert!(
        y.created_at >= x.updated_at,
        "y started after x finished: x {}..{}, y {}..{}",
        x.created_at,
        x.updated_at,
        y.created_at,
        y.updated_at
    );
    assert!(
        z.created_at < x.updated_at && x.created_at < z.updated_at,
        "z ran while x ran: x {}..{}, z {}..{}",
        x.created_at,
        x.updated_at,
        z.created_at,
        z.updated_at
    );
    assert_eq!(
        std::fs::canonicalize(&z.workspace).unwrap(),
        std::fs::canonicalize(dir.path().join("other")).unwrap()
    );

    // Run again: everything finished, so nothing runs and nothing is written twice.
    let requests = fake.requests().len();
    let again = muster(dir.path(), &args).await;
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert_eq!(fake.requests().len(), requests);
    assert_eq!(
        json_lines(&std::fs::read_to_string(dir.path().join("results.jsonl")).unwrap()).len(),
        3
    );
    assert_eq!(stored_runs(dir.path()).await.len(), 3);
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_killed_mid_way_and_run_again_finishes_every_id_exactly_once() {
    use tokio::io::{AsyncBufReadExt as _, BufReader};

    // The first request is answered at once; any other hangs, so `b` is mid-run when the
    // batch is killed.
    let fake = FakeLlm::start(vec![
        ScriptEntry::reply("main", 1, vec![Block::text("done")]).attempt(1),
        ScriptEntry::reply("main", 1, vec![Block::text("late")]).fault(Fault {
            first_byte_delay_ms: 600_000,
            ..Fault::default()
        }),
    ])
    .await
    .unwrap();
    let dir = project(&fake);
    write_batch(
        dir.path(),
        &[
            r#"{"id": "a", "prompt": "One."}"#,
            r#"{"id": "b", "prompt": "Two."}"#,
            r#"{"id": "c", "prompt": "Three."}"#,
        ],
    );
    let args = [
        "--log-level",
        "info",
        "batch",
        "tasks.jsonl",
        "--concurrency",
        "1",
        "--out",
        "results.jsonl",
    ];
    let mut batch = command(dir.path(), &args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stderr_lines = BufReader::new(batch.stderr.take().unwrap()).lines();
    // `b` starts only after `a`'s result line is durable: wait for b's run, then kill.
    let b_run = tokio::time::timeout(GUARD, async {
        while let Some(line) = stderr_lines.next_line().await.unwrap() {
            if let Some(rest) = line.split("batch line b: run ").nth(1) {
                return rest.split(' ').next().unwrap().to_owned();
            }
        }
        panic!("the batch ended before b started");
    })
    .await
    .expect("guard timeout");
    batch.start_kill().unwrap();
    let killed = batch.wait().await.unwrap();
    assert_eq!(killed.code(), None, "killed by a signal");

    let before = json_lines(&std::fs::read_to_string(dir.path().join("results.jsonl")).unwrap());
    assert_eq!(before.len(), 1, "{before:#?}");
    assert_eq!(before[0]["id"], "a");
    assert_eq!(before[0]["status"], "completed");

    let runs = stored_runs(dir.path()).await;
    let b_before = runs_of(&runs, "b");
    assert_eq!(b_before.len(), 1);
    assert_eq!(b_before[0].id, b_run);
    assert!(!b_before[0].status.is_finished(), "b was cut off mid-run");
    assert!(runs_of(&runs, "c").is_empty(), "c never started");

    // From now on every request is answered at once.
    fake.reset();
    fake.append_script(vec![
        ScriptEntry::reply("main", 1, vec![Block::text("done")]),
        ScriptEntry::reply("main", 2, vec![Block::text("done")]),
    ])
    .unwrap();
    let again = muster(dir.path(), &args).await;
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));

    let results = json_lines(&std::fs::read_to_string(dir.path().join("results.jsonl")).unwrap());
    assert_eq!(results.len(), 3, "{results:#?}");
    for id in ["a", "b", "c"] {
        let line = by_id(&results, id);
        assert_eq!(line["status"], "completed", "{line}");
        assert_eq!(line["exit_code"], 0);
    }
    assert_eq!(
        by_id(&results, "b")["run_id"],
        b_run.as_str(),
        "b's interrupted run was resumed, not started again"
    );
    let runs = stored_runs(dir.path()).await;
    assert_eq!(runs.len(), 3, "{runs:#?}");
    for id in ["a", "b", "c"] {
        let mine = runs_of(&runs, id);
        assert_eq!(mine.len(), 1, "{id} ran once: {runs:#?}");
        assert_eq!(mine[0].status.as_str(), "completed");
        assert_eq!(by_id(&results, id)["run_id"], mine[0].id.as_str());
    }
    // After the restart only b (resumed) and c reached the model; a was not asked again.
    let asked: std::collections::BTreeSet<String> = fake
        .requests()
        .iter()
        .filter_map(|r| r.run_id.clone())
        .collect();
    let expected: std::collections::BTreeSet<String> = ["b", "c"]
        .iter()
        .map(|id| by_id(&results, id)["run_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(asked, expected);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_line_awaiting_a_decision_exits_5_and_the_next_batch_resumes_it() {
    const PLAN: &str = "## Goal\nGreet.\n## Steps\n1. Write hello.txt\n## Files\nhello.txt\n## Tests\nnone\n## Risks\nnone\n";
    let fake = FakeLlm::start(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![Block::tool_use(
                "ExitPlanMode",
                serde_json::json!({"plan": PLAN}),
            )],
        ),
        ScriptEntry::reply("main", 2, vec![Block::text("Planned and done.")]),
    ])
    .await
    .unwrap();
    let dir = project(&fake);
    let settings = dir.path().join(".muster/settings.toml");
    let text = std::fs::read_to_string(&settings).unwrap();
    std::fs::write(&settings, format!("permission_mode = \"plan\"\n{text}")).unwrap();
    super::common::trust_blocking(dir.path());
    write_batch(
        dir.path(),
        &[r#"{"id": "p", "prompt": "Plan a greeting."}"#],
    );
    let args = ["batch", "tasks.jsonl", "--out", "results.jsonl"];

    let first = muster(dir.path(), &args).await;
    assert_eq!(first.status.code(), Some(5), "{}", stderr(&first));
    let results = json_lines(&std::fs::read_to_string(dir.path().join("results.jsonl")).unwrap());
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["status"], "awaiting_decision");
    assert_eq!(results[0]["exit_code"], 5);
    assert_eq!(results[0]["request_id"], "plan-main-1");
    let run_id = results[0]["run_id"].as_str().unwrap().to_owned();

    let approve = muster(dir.path(), &["approve", "plan-main-1"]).await;
    assert_eq!(approve.status.code(), Some(0), "{}", stderr(&approve));
    let second = muster(dir.path(), &args).await;
    assert_eq!(second.status.code(), Some(0), "{}", stderr(&second));
    let results = json_lines(&std::fs::read_to_string(dir.path().join("results.jsonl")).unwrap());
    assert_eq!(results.len(), 2, "the new state is appended: {results:#?}");
    assert_eq!(results[1]["id"], "p");
    assert_eq!(
        results[1]["run_id"],
        run_id.as_str(),
        "the same run, resumed"
    );
    assert_eq!(results[1]["status"], "completed");
    assert_eq!(results[1]["result"], "Planned and done.");
    assert_eq!(runs_of(&stored_runs(dir.path()).await, "p").len(), 1);
    fake.verify().unwrap();
}

/// `--output stream-json` puts every run's events on stdout, each with its `run_id` and the
/// task's `id`, while `--out` gets the usual result lines; a re-run with `--output json` prints
/// one `run_finished` per task (finished earlier, so built from the store), with `text` one
/// line per task for a person; a bad format is a usage error.
#[tokio::test(flavor = "multi_thread")]
async fn output_formats_put_each_run_on_stdout_and_leave_the_result_lines_alone() {
    let fake = FakeLlm::start(vec![ScriptEntry::reply(
        "main",
        1,
        vec![Block::text("done")],
    )])
    .await
    .unwrap();
    let dir = project(&fake);
    std::fs::create_dir_all(dir.path().join("other")).unwrap();
    write_batch(
        dir.path(),
        &[
            r#"{"id": "a", "prompt": "Say done."}"#,
            r#"{"id": "b", "prompt": "Say done too.", "workspace": "other"}"#,
        ],
    );
    let output = muster(
        dir.path(),
        &[
            "batch",
            "tasks.jsonl",
            "--output",
            "stream-json",
            "--out",
            "results.jsonl",
        ],
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let events = lines(&output);
    let results = json_lines(&std::fs::read_to_string(dir.path().join("results.jsonl")).unwrap());
    assert_eq!(results.len(), 2, "{results:#?}");
    for id in ["a", "b"] {
        let result = by_id(&results, id);
        // The set of keys, not their order: serde_json keeps insertion order in this build
        // (the ACP crate turns on `preserve_order` for the whole binary).
        let mut keys: Vec<&str> = result
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            ["costs", "exit_code", "id", "result", "run_id", "status"],
            "an unchanged result line: {result}"
        );
        let run_id = result["run_id"].as_str().unwrap();
        let mine: Vec<&Value> = events.iter().filter(|e| e["run_id"] == run_id).collect();
        let kinds: Vec<&str> = mine.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(kinds.first(), Some(&"agent_started"), "{kinds:?}");
        assert_eq!(kinds.last(), Some(&"run_finished"), "{kinds:?}");
        assert!(kinds.contains(&"model_turn"), "{kinds:?}");
        assert!(
            mine.iter().all(|e| e["id"] == id && e["v"] == 1),
            "{mine:#?}"
        );
        // Each line's run keeps its own log file, with its start and finish.
        let log = std::fs::read_to_string(dir.path().join(format!(".muster/logs/{run_id}.jsonl")))
            .unwrap();
        let messages: Vec<Value> = json_lines(&log)
            .iter()
            .filter(|l| l["fields"]["run_id"] == run_id)
            .map(|l| l["fields"]["message"].clone())
            .collect();
        assert_eq!(messages, ["run started", "run finished"], "{log}");
    }
    assert!(
        events.iter().all(|e| e["run_id"].is_string()),
        "every line carries its run_id: {events:#?}"
    );

    let again = muster(dir.path(), &["batch", "tasks.jsonl", "--output", "json"]).await;
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    let finished = lines(&again);
    assert_eq!(finished.len(), 2, "{finished:#?}");
    for id in ["a", "b"] {
        let event = by_id(&finished, id);
        assert_eq!(event["type"], "run_finished");
        assert_eq!(event["run_id"], by_id(&results, id)["run_id"]);
        assert_eq!(event["status"], "completed");
        assert_eq!(event["exit_code"], 0);
        assert_eq!(event["result"], "done");
    }

    let text = muster(dir.path(), &["batch", "tasks.jsonl", "--output", "text"]).await;
    assert_eq!(text.status.code(), Some(0), "{}", stderr(&text));
    let mut lines: Vec<String> = String::from_utf8_lossy(&text.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    let want: Vec<String> = ["a", "b"]
        .iter()
        .map(|id| {
            format!(
                "{id} (run {}): completed, exit 0: done",
                by_id(&results, id)["run_id"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(lines, want);
    let lines_in_out = std::fs::read_to_string(dir.path().join("results.jsonl"))
        .unwrap()
        .lines()
        .count();
    assert_eq!(lines_in_out, 2, "re-runs without --out leave it alone");

    let bad = muster(dir.path(), &["batch", "tasks.jsonl", "--output", "yaml"]).await;
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains(
            "invalid value 'yaml' for '--output <OUTPUT>': expected text, json or stream-json, \
             found \"yaml\""
        ),
        "{}",
        stderr(&bad)
    );
    assert!(bad.stdout.is_empty());
    fake.verify().unwrap();
}
