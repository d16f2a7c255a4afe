//! `muster run -p` and `muster resume` through the binary against `muster-fake-llm` over real
//! HTTP: stream-json events, the human approver's stop (exit 5) → `muster approve` → `muster
//! resume`, `--record` starting a fresh cassette for single and team runs, and each run's JSON
//! lines log under `.muster/logs/`. Each step waits for the child process to exit.

use std::path::{Path, PathBuf};
use std::process::Output;

use muster_fake_llm::{Block, ScriptEntry};
use serde_json::{Value, json};

use super::common::{command, fake, lines, muster, output, project, stderr, stdout, tool};

const PLAN: &str = "## Goal\nGreet.\n## Steps\n1. Write hello.txt\n## Files\nhello.txt\n## Tests\nnone\n## Risks\nnone\n";

#[tokio::test(flavor = "multi_thread")]
async fn a_single_agent_run_streams_each_committed_step() {
    let dir = project(&[]);
    let fake = fake(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![
                Block::text("Reading."),
                tool("Read", json!({"file_path": "README.md"})),
                tool("Write", json!({"file_path": "out.txt", "content": "x"})),
            ],
        ),
        // The second answer takes at least 150 ms: its model_turn says so.
        ScriptEntry::reply("main", 2, vec![Block::text("All done.")]).fault(
            muster_fake_llm::Fault {
                first_byte_delay_ms: 150,
                ..muster_fake_llm::Fault::default()
            },
        ),
    ])
    .await;
    let base = fake.base_url();
    let output = muster(
        dir.path(),
        &[
            "run",
            "-p",
            "Look around.",
            "--base-url",
            &base,
            "--output",
            "stream-json",
        ],
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let events = lines(&output);
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "agent_started",
            "model_turn",
            "tool_call",
            "tool_call",
            "model_turn",
            "run_finished"
        ]
    );
    for event in &events {
        assert_eq!(event["v"], 1);
        assert!(event["ts"].is_i64() && event["run_id"].is_string());
        assert_eq!(event["agent"], "main");
        assert!(event["run_id"].as_str().unwrap().len() <= 16);
    }
    assert_eq!(events[2]["tool"], "Read");
    assert_eq!(events[2]["decision"], "allow");
    assert_eq!(events[3]["tool"], "Write");
    assert_eq!(
        events[3]["decision"], "deny",
        "default mode with no one to ask"
    );
    assert!(
        events[3]["reason"]
            .as_str()
            .unwrap()
            .contains("no one can approve")
    );
    assert_eq!(events[5]["exit_code"], 0);
    assert_eq!(events[5]["result"], "All done.");
    // Each model_turn reports the wait for the model (a lower bound is all timing can prove).
    assert!(events[1]["latency_ms"].as_f64().unwrap() >= 0.0);
    assert!(
        events[4]["latency_ms"].as_f64().unwrap() >= 150.0,
        "{}",
        events[4]
    );
    assert!(!dir.path().join("out.txt").exists());
    fake.verify().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn human_approver_stops_with_exit_5_then_approve_and_resume_land_the_edit() {
    let dir = project(&[]);
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![tool("ExitPlanMode", json!({"plan": PLAN}))]),
        ScriptEntry::reply(
            "main",
            2,
            vec![tool(
                "Write",
                json!({"file_path": "hello.txt", "content": "hello, world\n"}),
            )],
        ),
        ScriptEntry::reply("main", 3, vec![Block::text("Greeted.")]),
    ])
    .await;
    let base = fake.base_url();
    let first = muster(
        dir.path(),
        &[
            "run",
            "-p",
            "Greet the world.",
            "--permission-mode",
            "plan",
            "--base-url",
            &base,
            "--output",
            "json",
        ],
    )
    .await;
    assert_eq!(first.status.code(), Some(5), "{}", stderr(&first));
    let finished = lines(&first);
    assert_eq!(finished.len(), 1, "json prints only run_finished");
    let finished = &finished[0];
    assert_eq!(finished["type"], "run_finished");
    assert_eq!(finished["exit_code"], 5);
    assert_eq!(finished["request_id"], "plan-main-1");
    let plan_file = PathBuf::from(finished["plan_file"].as_str().unwrap());
    assert_eq!(std::fs::read_to_string(&plan_file).unwrap(), PLAN);
    assert!(
        plan_file.starts_with(
            std::fs::canonicalize(dir.path())
                .unwrap()
                .join(".muster/plans")
        ) || plan_file.starts_with(dir.path().join(".muster/plans"))
    );
    let slug = plan_file.file_stem().unwrap().to_str().unwrap().to_owned();
    assert_eq!(slug.split('-').count(), 3, "{slug}");
    let run_id = finished["run_id"].as_str().unwrap().to_owned();

    let edited = format!("{PLAN}\n## Notes\nSay hello, world.\n");
    std::fs::write(dir.path().join("edited.md"), &edited).unwrap();
    let approve = muster(
        dir.path(),
        &[
            "approve",
            "plan-main-1",
            "--mode",
            "acceptEdits",
            "--plan-file",
            "edited.md",
        ],
    )
    .await;
    assert_eq!(approve.status.code(), Some(0), "{}", stderr(&approve));

    let resumed = muster(dir.path(), &["resume", &run_id, "--output", "stream-json"]).await;
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    let events = lines(&resumed);
    let decided = events
        .iter()
        .find(|e| e["type"] == "approval_decided")
        .expect("approval_decided");
    assert_eq!(decided["approved"], true);
    assert_eq!(decided["responder"], "human");
    assert_eq!(decided["mode"], "acceptEdits");
    let write = events
        .iter()
        .find(|e| e["type"] == "tool_call" && e["tool"] == "Write")
        .expect("the Write call");
    assert_eq!(write["decision"], "allow");
    assert_eq!(events.last().unwrap()["exit_code"], 0);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(),
        "hello, world\n"
    );
    assert_eq!(std::fs::read_to_string(&plan_file).unwrap(), edited);
    // The model saw the edited plan in the ExitPlanMode result.
    let requests = fake.requests();
    let turn2 = requests.iter().find(|r| r.turn == Some(2)).unwrap();
    assert!(turn2.body.to_string().contains("Say hello, world."));
    fake.verify().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_invalid_team_file_is_refused_with_exit_2() {
    let dir = project(&[]);
    std::fs::write(dir.path().join("muster.team.toml"), "").unwrap();
    let output = muster(dir.path(), &["run", "-p", "x"]).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("missing required key `name`"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_policy_approves_at_once_per_mode_models_apply_and_the_recording_replays() {
    let dir = project(&[]);
    std::fs::write(
        dir.path().join(".muster/settings.toml"),
        "[plan]\nmodel = \"claude-opus-4-1\"\n[act]\nmodel = \"claude-sonnet-4-5\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("policy.toml"),
        "max_mode = \"acceptEdits\"\nallowed_paths = [\"hello.txt\"]\n",
    )
    .unwrap();
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![tool("EnterPlanMode", json!({}))]),
        ScriptEntry::reply("main", 2, vec![tool("ExitPlanMode", json!({"plan": PLAN}))]),
        ScriptEntry::reply(
            "main",
            3,
            vec![tool(
                "Write",
                json!({"file_path": "hello.txt", "content": "hi\n"}),
            )],
        ),
        ScriptEntry::reply("main", 4, vec![Block::text("Done.")]),
    ])
    .await;
    let base = fake.base_url();
    let cassette = dir.path().join("run.jsonl");
    let cassette_arg = cassette.display().to_string();
    let output = muster(
        dir.path(),
        &[
            "run",
            "-p",
            "Greet.",
            "--permission-mode",
            "acceptEdits",
            "--approver",
            "policy:policy.toml",
            "--base-url",
            &base,
            "--record",
            &cassette_arg,
            "--output",
            "stream-json",
        ],
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let events = lines(&output);
    let turns: Vec<(String, String)> = events
        .iter()
        .filter(|e| e["type"] == "model_turn")
        .map(|e| {
            (
                e["model"].as_str().unwrap().to_owned(),
                e["mode"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        turns,
        [
            ("claude-sonnet-4-5".to_owned(), "acceptEdits".to_owned()),
            ("claude-opus-4-1".to_owned(), "plan".to_owned()),
            ("claude-sonnet-4-5".to_owned(), "acceptEdits".to_owned()),
            ("claude-sonnet-4-5".to_owned(), "acceptEdits".to_owned()),
        ]
    );
    let requested = events
        .iter()
        .position(|e| e["type"] == "approval_requested")
        .unwrap();
    let decided = events
        .iter()
        .position(|e| e["type"] == "approval_decided")
        .unwrap();
    assert!(requested < decided);
    assert_eq!(events[requested]["responder"], "policy:policy.toml");
    assert_eq!(events[decided]["responder"], "policy");
    assert_eq!(events[decided]["mode"], "acceptEdits");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(),
        "hi\n"
    );
    fake.verify().unwrap();

    // The recording replays offline with the script provider.
    std::fs::remove_file(dir.path().join("hello.txt")).unwrap();
    let replay = muster(
        dir.path(),
        &[
            "run",
            "-p",
            "Greet.",
            "--permission-mode",
            "acceptEdits",
            "--approver",
            "policy:policy.toml",
            "--provider",
            "script",
            "--cassette",
            &cassette_arg,
            "--output",
            "json",
        ],
    )
    .await;
    assert_eq!(replay.status.code(), Some(0), "{}", stderr(&replay));
    assert_eq!(lines(&replay)[0]["result"], "Done.");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(),
        "hi\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_deadline_stops_a_run_with_exit_3() {
    let dir = project(&[]);
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![Block::text("late")]).fault(muster_fake_llm::Fault {
            first_byte_delay_ms: 20_000,
            ..Default::default()
        }),
    ])
    .await;
    let base = fake.base_url();
    let output = muster(
        dir.path(),
        &[
            "run",
            "-p",
            "x",
            "--base-url",
            &base,
            "--max-duration",
            "1",
            "--output",
            "json",
        ],
    )
    .await;
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let finished = &lines(&output)[0];
    assert_eq!(finished["status"], "budget");
    assert_eq!(finished["exit_code"], 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_configuration_error_exits_2_before_any_run_is_created() {
    let dir = project(&[]);
    // Without a key: the test's key is taken out again.
    let mut without_key = command(dir.path(), &["run", "-p", "x"]);
    without_key.env_remove("ANTHROPIC_API_KEY");
    let output = output(without_key).await;
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("ANTHROPIC_API_KEY"),
        "{}",
        stderr(&output)
    );
    assert!(
        !dir.path().join(".muster/muster.db").exists(),
        "nothing was created"
    );
    let unknown = muster(dir.path(), &["run", "-p", "x", "--agent", "nobody"]).await;
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        stderr(&unknown).contains("unknown agent"),
        "{}",
        stderr(&unknown)
    );
}

/// A definition from a Claude Code collection naming a model the catalogue lacks loads with a
/// warning; a run that uses it under a cost budget refuses to start (exit 2, naming it), while
/// a run that uses another definition starts.
#[tokio::test(flavor = "multi_thread")]
async fn an_unpriced_agent_model_under_a_cost_budget_fails_at_the_start_naming_it() {
    let dir = project(&[(".muster/settings.toml", "[budgets.run]\ncost_usd = 5.0\n")]);
    std::fs::create_dir_all(dir.path().join(".claude/agents")).unwrap();
    std::fs::write(
        dir.path().join(".claude/agents/local.md"),
        "---\nname: local\ndescription: Uses a model no catalogue prices\nmodel: acme-coder-2\n---\nWork.\n",
    )
    .unwrap();
    // A dated snapshot the catalogue answers to (as `claude-sonnet-4-0`): priced, sent as written.
    std::fs::write(
        dir.path().join(".claude/agents/dated.md"),
        "---\nname: dated\ndescription: Uses a dated model id\nmodel: claude-sonnet-4-20250514\n---\nWork.\n",
    )
    .unwrap();
    let refused = muster(
        dir.path(),
        &[
            "run",
            "-p",
            "x",
            "--agent",
            "local",
            "--base-url",
            "http://127.0.0.1:9",
        ],
    )
    .await;
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let message = stderr(&refused);
    assert!(
        message.contains("agent `local`")
            && message.contains("acme-coder-2")
            && message.contains("cost budget"),
        "{message}"
    );
    assert!(
        message.contains("not in the model catalogue"),
        "the load warning names it too: {message}"
    );
    assert!(
        !message.contains("claude-sonnet-4-20250514"),
        "the dated id is known: {message}"
    );
    assert!(
        !dir.path().join(".muster/muster.db").exists(),
        "no run was created"
    );
    let fake = fake(vec![ScriptEntry::reply(
        "main",
        1,
        vec![Block::text("Done.")],
    )])
    .await;
    let dated = muster(
        dir.path(),
        &[
            "run",
            "-p",
            "x",
            "--agent",
            "dated",
            "--base-url",
            &fake.base_url(),
        ],
    )
    .await;
    assert_eq!(dated.status.code(), Some(0), "{}", stderr(&dated));
    assert_eq!(fake.requests()[0].body["model"], "claude-sonnet-4-20250514");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_agent_turn_budget_stops_a_run_with_exit_3() {
    let dir = project(&[]);
    std::fs::write(
        dir.path().join(".muster/settings.toml"),
        "[budgets.agent]\nturns = 1\n",
    )
    .unwrap();
    let fake = fake(vec![ScriptEntry::reply(
        "main",
        1,
        vec![tool("Read", json!({"file_path": "README.md"}))],
    )])
    .await;
    let base = fake.base_url();
    let output = muster(
        dir.path(),
        &["run", "-p", "x", "--base-url", &base, "--output", "json"],
    )
    .await;
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let finished = &lines(&output)[0];
    assert_eq!(finished["status"], "budget");
    assert!(
        finished["reason"]
            .as_str()
            .unwrap()
            .contains("turn budget (budgets.agent.turns): 1 model requests reached the limit of 1")
    );
    fake.verify().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn text_output_prints_the_result_and_resume_refuses_a_live_run() {
    let dir = project(&[]);
    let fake = fake(vec![ScriptEntry::reply(
        "main",
        1,
        vec![tool("ExitPlanMode", json!({"plan": PLAN}))],
    )])
    .await;
    let base = fake.base_url();
    let first = muster(
        dir.path(),
        &[
            "run",
            "-p",
            "Plan.",
            "--permission-mode",
            "plan",
            "--base-url",
            &base,
        ],
    )
    .await;
    assert_eq!(first.status.code(), Some(5), "{}", stderr(&first));
    let text = String::from_utf8_lossy(&first.stdout).into_owned();
    assert!(text.contains("muster approve plan-main-1"), "{text}");
    let run_id = text
        .split("muster resume ")
        .nth(1)
        .and_then(|rest| rest.split('`').next())
        .unwrap()
        .to_owned();
    // Another process holds the run: resume refuses it.
    let store: std::sync::Arc<dyn muster_mailbox::MailboxStore> = std::sync::Arc::new(
        muster_mailbox::SqliteStore::open(
            &dir.path().join(".muster/muster.db"),
            muster_mailbox::StoreOptions::default(),
        )
        .unwrap(),
    );
    let live = muster_mailbox::live::LiveRun::start(
        &dir.path().join(".muster/runs"),
        &run_id,
        store,
        None,
    )
    .unwrap();
    let refused = muster(dir.path(), &["resume", &run_id]).await;
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("live"), "{}", stderr(&refused));
    drop(live);
    // Not decided yet: resuming stops again with exit 5.
    let again = muster(dir.path(), &["resume", &run_id, "--output", "json"]).await;
    assert_eq!(again.status.code(), Some(5), "{}", stderr(&again));
    assert_eq!(lines(&again)[0]["request_id"], "plan-main-1");
}

/// The whole stream-json log of a run, minus what differs between two runs by design: the
/// time, the model's latency, the run id, and the slug inside plan file names.
fn comparable_log(output: &Output, slug: &str) -> Vec<Value> {
    lines(output)
        .into_iter()
        .map(|mut event| {
            if let Some(fields) = event.as_object_mut() {
                fields.remove("ts");
                fields.remove("run_id");
                fields.remove("latency_ms");
                // A model_turn names the provider that answered: the replay's is `script`.
                fields.remove("provider");
            }
            // The cost report names the provider that answered: the replay's is `script`.
            if let Some(rows) = event["costs"]["agents"].as_array_mut() {
                for row in rows {
                    row["provider"] = Value::Null;
                }
            }
            let text = event.to_string().replace(slug, "<slug>");
            serde_json::from_str(&text).unwrap()
        })
        .collect()
}

async fn newest_slug(dir: &Path) -> String {
    let runs = muster(dir, &["runs", "--json"]).await;
    let rows: Vec<Value> = serde_json::from_slice(&runs.stdout).unwrap();
    let newest = rows
        .iter()
        .max_by_key(|row| row["run"]["created_at"].as_i64().unwrap())
        .unwrap();
    newest["run"]["slug"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_recorded_run_replays_offline_with_the_same_stream_json_log() {
    let dir = project(&[]);
    std::fs::write(
        dir.path().join("policy.toml"),
        "max_mode = \"acceptEdits\"\nallowed_paths = [\"hello.txt\"]\n",
    )
    .unwrap();
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![tool("EnterPlanMode", json!({}))]),
        ScriptEntry::reply(
            "main",
            2,
            vec![
                Block::text("Looking first."),
                tool("Read", json!({"file_path": "README.md"})),
            ],
        ),
        ScriptEntry::reply("main", 3, vec![tool("ExitPlanMode", json!({"plan": PLAN}))]),
        ScriptEntry::reply(
            "main",
            4,
            vec![tool(
                "Write",
                json!({"file_path": "hello.txt", "content": "hi\n"}),
            )],
        ),
        ScriptEntry::reply("main", 5, vec![Block::text("Done.")]),
    ])
    .await;
    let base = fake.base_url();
    let cassette = dir.path().join("recorded.jsonl").display().to_string();
    let common = [
        "run",
        "-p",
        "Greet.",
        "--permission-mode",
        "acceptEdits",
        "--approver",
        "policy:policy.toml",
        "--output",
        "stream-json",
    ];
    let recorded = muster(
        dir.path(),
        &[&common[..], &["--base-url", &base, "--record", &cassette]].concat(),
    )
    .await;
    assert_eq!(recorded.status.code(), Some(0), "{}", stderr(&recorded));
    let recorded_slug = newest_slug(dir.path()).await;
    fake.verify().unwrap();
    drop(fake);

    std::fs::remove_file(dir.path().join("hello.txt")).unwrap();
    let replayed = muster(
        dir.path(),
        &[
            &common[..],
            &["--provider", "script", "--cassette", &cassette, "--strict"],
        ]
        .concat(),
    )
    .await;
    assert_eq!(
        replayed.status.code(),
        Some(0),
        "{}\n{}",
        stderr(&replayed),
        String::from_utf8_lossy(&replayed.stdout)
    );
    let replayed_slug = newest_slug(dir.path()).await;
    assert_ne!(recorded_slug, replayed_slug, "two runs, two slugs");

    let original = comparable_log(&recorded, &recorded_slug);
    let replay = comparable_log(&replayed, &replayed_slug);
    assert!(original.len() >= 8, "{original:#?}");
    assert_eq!(
        original, replay,
        "the replay's log equals the recording's, event for event"
    );
}

/// `--record` starts a fresh cassette for a single run and for a team run alike: what the file
/// held before is replaced, not appended to.
#[tokio::test(flavor = "multi_thread")]
async fn record_starts_a_fresh_cassette_for_single_and_team_runs() {
    let cases: [(&str, &str, &[&str]); 2] = [
        ("single", "main", &[]),
        ("team", "lead", &["--team", "teams/solo.toml"]),
    ];
    for (name, agent, extra) in cases {
        let dir = project(&[]);
        std::fs::create_dir_all(dir.path().join("teams")).unwrap();
        std::fs::write(dir.path().join("teams/solo.toml"), "name = \"solo\"\n").unwrap();
        let cassette = dir.path().join("recorded.jsonl");
        std::fs::write(&cassette, "{\"stale\": \"an earlier recording\"}\n").unwrap();
        let fake = fake(vec![ScriptEntry::reply(
            agent,
            1,
            vec![Block::text("Nothing to do.")],
        )])
        .await;
        let base = fake.base_url();
        let cassette_arg = cassette.display().to_string();
        let args = [
            &[
                "run",
                "-p",
                "Check the README.",
                "--base-url",
                &base,
                "--record",
                &cassette_arg,
                "--output",
                "json",
            ][..],
            extra,
        ]
        .concat();
        let output = muster(dir.path(), &args).await;
        assert_eq!(output.status.code(), Some(0), "{name}: {}", stderr(&output));
        let recorded = std::fs::read_to_string(&cassette).unwrap();
        assert!(!recorded.contains("stale"), "{name}: {recorded}");
        let entries: Vec<Value> = recorded
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(
            entries.len(),
            1,
            "{name}: one request, one entry: {recorded}"
        );
        assert!(recorded.contains("Nothing to do."), "{name}: {recorded}");
        fake.verify().unwrap();
    }
}

/// The JSON lines of run `run_id`'s log file, each checked to be valid JSON.
fn run_log(dir: &Path, run_id: &str) -> Vec<Value> {
    let path = dir.join(format!(".muster/logs/{run_id}.jsonl"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

/// A single run and a team run each leave `.muster/logs/<run_id>.jsonl`: valid JSON lines, the
/// first `run started` and a `run finished` with the exit code; stdout holds only the run's
/// own output, and a resume appends to the same file.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_leaves_its_json_lines_log_and_stdout_stays_clean() {
    let cases: [(&str, &str, &[&str]); 2] = [
        ("single", "main", &[]),
        ("team", "lead", &["--team", "teams/solo.toml"]),
    ];
    for (kind, agent, extra) in cases {
        let dir = project(&[]);
        std::fs::create_dir_all(dir.path().join("teams")).unwrap();
        std::fs::write(dir.path().join("teams/solo.toml"), "name = \"solo\"\n").unwrap();
        let fake = fake(vec![ScriptEntry::reply(
            agent,
            1,
            vec![Block::text("Nothing to do.")],
        )])
        .await;
        let base = fake.base_url();
        let args = [
            &[
                "--log-level",
                "debug",
                "run",
                "-p",
                "Check the README.",
                "--base-url",
                &base,
                "--output",
                "stream-json",
            ][..],
            extra,
        ]
        .concat();
        let output = muster(dir.path(), &args).await;
        assert_eq!(output.status.code(), Some(0), "{kind}: {}", stderr(&output));
        let events = lines(&output);
        assert!(
            events.iter().all(|e| e["v"] == 1 && e["level"].is_null()),
            "{kind}: no log line on stdout: {events:#?}"
        );
        let logged = stderr(&output);
        assert!(logged.contains("DEBUG"), "{kind}: {logged}");
        assert!(
            !logged.contains('\u{1b}'),
            "{kind}: log lines carry colour only on a terminal: {logged}"
        );
        let run_id = events[0]["run_id"].as_str().unwrap().to_owned();
        let log = run_log(dir.path(), &run_id);
        let started = &log[0];
        assert_eq!(
            started["fields"]["message"], "run started",
            "{kind}: {log:#?}"
        );
        assert_eq!(started["fields"]["run_id"], run_id.as_str());
        assert_eq!(started["fields"]["kind"], kind);
        assert_eq!(started["level"], "INFO");
        assert!(started["timestamp"].is_string());
        let finished: Vec<&Value> = log
            .iter()
            .filter(|l| l["fields"]["message"] == "run finished")
            .collect();
        assert_eq!(finished.len(), 1, "{kind}: {log:#?}");
        assert_eq!(finished[0]["fields"]["run_id"], run_id.as_str());
        assert_eq!(finished[0]["fields"]["exit_code"], 0);
        assert!(
            log.len() > 2,
            "{kind}: --log-level debug puts the run's debug events in the file too"
        );
        fake.verify().unwrap();
    }
}

/// Whatever `--output` prints, the run's log file records every event of the run as a
/// `muster::event` line carrying the stream-json object.
#[tokio::test(flavor = "multi_thread")]
async fn the_runs_log_records_every_event_whatever_the_output() {
    let cases: [(&str, &str, &[&str]); 2] = [
        ("single", "main", &[]),
        ("team", "lead", &["--team", "teams/solo.toml"]),
    ];
    for (kind, agent, extra) in cases {
        let dir = project(&[]);
        std::fs::create_dir_all(dir.path().join("teams")).unwrap();
        std::fs::write(dir.path().join("teams/solo.toml"), "name = \"solo\"\n").unwrap();
        let fake = fake(vec![
            ScriptEntry::reply(
                agent,
                1,
                vec![tool("Read", json!({"file_path": "README.md"}))],
            ),
            ScriptEntry::reply(agent, 2, vec![Block::text("Read it.")]),
        ])
        .await;
        let base = fake.base_url();
        let args = [
            &[
                "run",
                "-p",
                "Read the README.",
                "--base-url",
                &base,
                "--output",
                "json",
            ][..],
            extra,
        ]
        .concat();
        let output = muster(dir.path(), &args).await;
        assert_eq!(output.status.code(), Some(0), "{kind}: {}", stderr(&output));
        let finished = &lines(&output)[0];
        let run_id = finished["run_id"].as_str().unwrap().to_owned();
        let events: Vec<Value> = run_log(dir.path(), &run_id)
            .into_iter()
            .filter(|l| l["target"] == "muster::event")
            .map(|l| serde_json::from_str(l["fields"]["event"].as_str().unwrap()).unwrap())
            .collect();
        let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        for expected in ["agent_started", "model_turn", "tool_call", "run_finished"] {
            assert!(kinds.contains(&expected), "{kind}: {expected} in {kinds:?}");
        }
        let call = events.iter().find(|e| e["type"] == "tool_call").unwrap();
        assert_eq!(call["tool"], "Read", "{kind}");
        assert_eq!(call["run_id"], run_id.as_str());
        assert_eq!(events.last().unwrap()["exit_code"], 0, "{kind}");
        fake.verify().unwrap();
    }
}

/// `muster resume` appends to the run's log: a run stopped awaiting a decision, approved, then
/// resumed has two `run started` lines (the second resumed) and two `run finished` (exit 5,
/// then 0) in one file.
#[tokio::test(flavor = "multi_thread")]
async fn resume_appends_to_the_runs_log() {
    let dir = project(&[]);
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![tool("ExitPlanMode", json!({"plan": PLAN}))]),
        ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
    ])
    .await;
    let base = fake.base_url();
    let first = muster(
        dir.path(),
        &[
            "run",
            "-p",
            "Greet.",
            "--permission-mode",
            "plan",
            "--base-url",
            &base,
            "--output",
            "json",
        ],
    )
    .await;
    assert_eq!(first.status.code(), Some(5), "{}", stderr(&first));
    let run_id = lines(&first)[0]["run_id"].as_str().unwrap().to_owned();
    let approve = muster(dir.path(), &["approve", "plan-main-1"]).await;
    assert_eq!(approve.status.code(), Some(0), "{}", stderr(&approve));
    let resumed = muster(
        dir.path(),
        &["resume", &run_id, "--base-url", &base, "--output", "json"],
    )
    .await;
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    let log = run_log(dir.path(), &run_id);
    let marks: Vec<(String, Value, Value)> = log
        .iter()
        .filter(|l| l["fields"]["run_id"] == run_id.as_str())
        .map(|l| {
            (
                l["fields"]["message"].as_str().unwrap().to_owned(),
                l["fields"]["resumed"].clone(),
                l["fields"]["exit_code"].clone(),
            )
        })
        .collect();
    assert_eq!(
        marks,
        vec![
            ("run started".into(), json!(false), Value::Null),
            ("run finished".into(), Value::Null, json!(5)),
            ("run started".into(), json!(true), Value::Null),
            ("run finished".into(), Value::Null, json!(0)),
        ]
    );
    fake.verify().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cut_answer_past_its_continuations_fails_the_run_with_output_limit() {
    let dir = project(&[]);
    let cut = |turn| {
        ScriptEntry::reply("main", turn, vec![Block::text("and on ")]).stop_reason("max_tokens")
    };
    let fake = fake((1..=4).map(cut).collect()).await;
    let base = fake.base_url();
    let output = muster(
        dir.path(),
        &["run", "-p", "x", "--base-url", &base, "--output", "json"],
    )
    .await;
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let finished = &lines(&output)[0];
    assert_eq!(finished["status"], "failed");
    assert_eq!(finished["exit_code"], 1);
    assert_eq!(finished["reason"], "output_limit");
    assert!(
        finished["error"]
            .as_str()
            .unwrap()
            .contains("still cut after 3 continuation(s)"),
        "{finished}"
    );
    fake.verify().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_failing_call_fails_the_run_with_stuck() {
    let dir = project(&[]);
    let read = |turn| {
        ScriptEntry::reply(
            "main",
            turn,
            vec![tool("Read", json!({"file_path": "no-such-file.txt"}))],
        )
    };
    let fake = fake((1..=4).map(read).collect()).await;
    let base = fake.base_url();
    let output = muster(
        dir.path(),
        &["run", "-p", "x", "--base-url", &base, "--output", "json"],
    )
    .await;
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let finished = &lines(&output)[0];
    assert_eq!(finished["status"], "failed");
    assert_eq!(finished["reason"], "stuck");
    assert!(
        finished["error"]
            .as_str()
            .unwrap()
            .contains("no-such-file.txt"),
        "{finished}"
    );
    fake.verify().unwrap();
}

/// `[limits]` sets both counts: one continuation, then `output_limit`; stuck after one
/// identical failure and one more; a `stuck_after` of 0 is refused where it was set.
#[tokio::test(flavor = "multi_thread")]
async fn the_limits_settings_set_the_continuation_and_stuck_counts() {
    let cut = |turn| {
        ScriptEntry::reply("main", turn, vec![Block::text("and on ")]).stop_reason("max_tokens")
    };
    let read = |turn| {
        ScriptEntry::reply(
            "main",
            turn,
            vec![tool("Read", json!({"file_path": "no-such-file.txt"}))],
        )
    };
    let table: Vec<(&str, Vec<ScriptEntry>, u8, &str)> = vec![
        (
            "[limits]\ncontinuations = 1\n",
            (1..=2).map(cut).collect(),
            1,
            "still cut after 1 continuation(s)",
        ),
        (
            "[limits]\nstuck_after = 1\n",
            (1..=2).map(read).collect(),
            1,
            "failed the same way 2 times in a row",
        ),
        (
            "[limits]\nstuck_after = 0\n",
            Vec::new(),
            2,
            "limits.stuck_after: expected a positive integer, found 0",
        ),
    ];
    for (settings, script, code, says) in table {
        let dir = project(&[(".muster/settings.toml", settings)]);
        let fake = fake(script).await;
        let base = fake.base_url();
        let output = muster(
            dir.path(),
            &["run", "-p", "x", "--base-url", &base, "--output", "json"],
        )
        .await;
        assert_eq!(
            output.status.code(),
            Some(i32::from(code)),
            "{settings}: {}",
            stderr(&output)
        );
        if code == 2 {
            assert!(
                stderr(&output).contains(says),
                "{settings}: {}",
                stderr(&output)
            );
            assert!(fake.requests().is_empty());
            continue;
        }
        let finished = &lines(&output)[0];
        assert!(
            finished["error"].as_str().unwrap().contains(says),
            "{settings}: {finished}"
        );
        fake.verify().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn include_partial_streams_model_deltas_that_are_not_durable_and_not_logged() {
    let dir = project(&[]);
    let answer = "A streamed answer in many small pieces.";
    let fake = fake(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![tool("Read", json!({"file_path": "README.md"}))],
        )
        .stream(muster_fake_llm::StreamOptions {
            chunk_chars: 3,
            ..Default::default()
        }),
        ScriptEntry::reply("main", 2, vec![Block::text(answer)]).stream(
            muster_fake_llm::StreamOptions {
                chunk_chars: 4,
                ..Default::default()
            },
        ),
    ])
    .await;
    let base = fake.base_url();
    let args = [
        "run",
        "-p",
        "x",
        "--base-url",
        &base,
        "--output",
        "stream-json",
        "--include-partial",
    ];
    let output = muster(dir.path(), &args).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let events = lines(&output);
    let deltas = |turn: u64, kind: &str| -> Vec<String> {
        events
            .iter()
            .filter(|e| e["type"] == "model_delta" && e["turn"] == turn && e["delta"] == kind)
            .map(|e| {
                assert_eq!(e["durable"], false, "{e}");
                e["text"].as_str().unwrap().to_owned()
            })
            .collect()
    };
    let input = deltas(1, "tool_input");
    assert!(input.len() > 1, "tool input streams in pieces: {input:?}");
    assert_eq!(
        input.concat(),
        json!({"file_path": "README.md"}).to_string()
    );
    let text = deltas(2, "text");
    assert!(text.len() > 1);
    assert_eq!(text.concat(), answer);
    // Each turn's deltas come before its committed model_turn.
    let position = |matches: &dyn Fn(&Value) -> bool| events.iter().position(matches).unwrap();
    let last_delta = events
        .iter()
        .rposition(|e| e["type"] == "model_delta" && e["turn"] == 2)
        .unwrap();
    assert!(last_delta < position(&|e| e["type"] == "model_turn" && e["turn"] == 2));
    let run_id = events[0]["run_id"].as_str().unwrap();
    let logged = run_log(dir.path(), run_id);
    assert!(
        logged.iter().all(|l| l["type"] != "model_delta"),
        "the log holds what was committed"
    );
    // Without the flag, no deltas; with another output, the flag is refused.
    fake.reset();
    fake.append_script(vec![ScriptEntry::reply(
        "main",
        1,
        vec![Block::text(answer)],
    )])
    .unwrap();
    let plain = muster(dir.path(), &args[..7]).await;
    assert_eq!(plain.status.code(), Some(0), "{}", stderr(&plain));
    assert!(lines(&plain).iter().all(|e| e["type"] != "model_delta"));
    let refused = muster(dir.path(), &["run", "-p", "x", "--include-partial"]).await;
    assert_eq!(refused.status.code(), Some(2));
    assert!(stderr(&refused).contains("--include-partial needs --output stream-json"));
}

/// `--output text`: a failed run's text goes to stderr for a single run and a team run alike,
/// and stdout holds none of it.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_runs_text_goes_to_stderr_for_single_and_team_runs() {
    let cases: [(&str, &str, &[&str]); 2] = [
        ("single", "main", &[]),
        ("team", "lead", &["--team", "teams/solo.toml"]),
    ];
    for (kind, agent, extra) in cases {
        let dir = project(&[]);
        std::fs::create_dir_all(dir.path().join("teams")).unwrap();
        std::fs::write(dir.path().join("teams/solo.toml"), "name = \"solo\"\n").unwrap();
        let fake = fake(vec![ScriptEntry::http_error(agent, 1, 400)]).await;
        let base = fake.base_url();
        let args = [&["run", "-p", "Fail.", "--base-url", &base][..], extra].concat();
        let output = muster(dir.path(), &args).await;
        assert_eq!(output.status.code(), Some(1), "{kind}: {}", stderr(&output));
        assert!(
            stderr(&output).contains("muster: the run failed"),
            "{kind}: {}",
            stderr(&output)
        );
        assert!(
            !stdout(&output).contains("the run failed"),
            "{kind}: {}",
            stdout(&output)
        );
    }
}
