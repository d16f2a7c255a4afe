//! The runtime records what non-read-only Bash calls change: scripted agents (the fake model
//! server over real HTTP) run real commands in a real workspace, and their `bash_effects`
//! records are read back from the SQLite store and checked by `build_report`. Concurrency is
//! proven with a FIFO the test controls and the lock's waiter count, never with sleeps.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::path::Path;

use muster_agents::runtime::{AgentKind, AgentRuntime, PlanApprover, Record};
use muster_agents::verification::{BashEffects, Status, bash_calls_waiting, build_report};
use muster_config::PermissionMode;
use muster_fake_llm::{Block, ScriptEntry};
use muster_mailbox::MemberKind;
use serde_json::json;

use super::harness::{GUARD, RunHarness, finished, policy, run, spec, start, teammate};

const PLAN: &str = "## Goal\nFill a.rs.\n## Steps\n1. Write `src/a.rs`\n## Files\nsrc/a.rs\n## Tests\nnone\n## Risks\nnone\n";

/// A run whose workspace has `src/a.rs`; the tests' markers and FIFOs are not the agents'
/// changes.
async fn harness(script: Vec<ScriptEntry>) -> RunHarness {
    RunHarness::setup()
        .file("src/a.rs", "// empty\n")
        .file(".gitignore", "target/\nmarker\n*.fifo\n")
        .start(script)
        .await
}

fn bash(command: &str) -> Block {
    Block::tool_use("Bash", json!({"command": command}))
}

/// Each Bash call's `bash_effects` record, with the index of the record that follows it.
fn effects_of(records: &[Record]) -> Vec<(BashEffects, Option<&Record>)> {
    records
        .iter()
        .enumerate()
        .filter_map(|(index, record)| match record {
            Record::BashEffects(effects) => Some((effects.clone(), records.get(index + 1))),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn bash_edits_after_an_approved_plan_are_recorded_and_verified() {
    let h = harness(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![Block::tool_use("ExitPlanMode", json!({"plan": PLAN}))],
        ),
        ScriptEntry::reply(
            "main",
            2,
            vec![
                bash("printf x > src/a.rs"),
                bash("cat src/a.rs"),
                bash("printf y > notes.txt; exit 3"),
            ],
        ),
        ScriptEntry::reply("main", 3, vec![Block::text("Done.")]),
    ])
    .await;
    h.member("main", MemberKind::Lead).await;
    let approver = policy("approve_all = true\nmax_mode = \"bypassPermissions\"\n");
    let mut main = spec("main", AgentKind::Main, PermissionMode::Plan);
    main.pre_plan_mode = Some(PermissionMode::BypassPermissions);
    let context = h.context(approver);
    let mut agent = start(context.clone(), main, "Fill a.rs.").await;
    assert_eq!(run(&mut agent).await, finished("Done."));
    h.fake.verify().unwrap();
    assert_eq!(agent.mode(), PermissionMode::BypassPermissions);
    assert_eq!(
        std::fs::read_to_string(h.workspace().join("src/a.rs")).unwrap(),
        "x"
    );

    let records = h.records("main").await;
    let effects = effects_of(&records);
    // The read-only `cat` has no record; the two others do, each right before its tool_call.
    assert_eq!(effects.len(), 2, "{effects:?}");
    let expected = [
        ("printf x > src/a.rs", Some(0), vec!["src/a.rs"]),
        ("printf y > notes.txt; exit 3", Some(3), vec!["notes.txt"]),
    ];
    for ((effects, next), (command, exit_code, changed)) in effects.iter().zip(expected) {
        assert_eq!(effects.command, command);
        assert_eq!(effects.exit_code, exit_code);
        assert_eq!(effects.changed, changed);
        assert_eq!(effects.effects_unknown, None);
        assert!(
            matches!(next, Some(Record::ToolCall { tool_use_id, tool, .. })
                if *tool_use_id == effects.tool_use_id && tool == "Bash"),
            "{next:?}"
        );
    }
    let bash_calls = records
        .iter()
        .filter(|record| matches!(record, Record::ToolCall { tool, .. } if tool == "Bash"))
        .count();
    assert_eq!(bash_calls, 3);

    let bodies = h.bodies("main").await;
    let report = build_report("main", &bodies, &h.workspace()).unwrap();
    let file = &report.files[0];
    assert_eq!(
        (file.item.as_str(), file.status),
        ("src/a.rs", Status::Done)
    );
    assert_eq!(
        file.evidence[0].command.as_deref(),
        Some("printf x > src/a.rs")
    );
    assert_eq!(file.evidence[0].exit_code, Some(0));
    assert_eq!(report.steps[0].status, Status::Done);
    assert_eq!(report.unplanned.len(), 1);
    assert_eq!(report.unplanned[0].path, "notes.txt");
    assert_eq!(
        report.unplanned[0].evidence[0].command.as_deref(),
        Some("printf y > notes.txt; exit 3")
    );
    assert_eq!(report.unplanned[0].evidence[0].exit_code, Some(3));
    // The read-only command is listed as run, with nothing changed.
    assert_eq!(report.commands.len(), 3);
    assert!(report.commands[1].changed.is_empty());

    // Resume reads the records back (the new type included) and finds the agent finished.
    let resumed = AgentRuntime::resume(context, "main", None, None)
        .await
        .unwrap();
    assert_eq!(resumed.mode(), PermissionMode::BypassPermissions);
    assert_eq!(resumed.turn(), 3);
}

#[tokio::test]
async fn a_workspace_that_cannot_be_snapshotted_still_runs_the_command() {
    // The command moves the workspace away: the snapshot after it fails.
    let h = harness(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![bash("printf x > src/a.rs && mv \"$PWD\" \"$PWD-moved\"")],
        ),
        ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
    ])
    .await;
    h.member("main", MemberKind::Lead).await;
    let mut agent = start(
        h.context(PlanApprover::Human),
        spec("main", AgentKind::Main, PermissionMode::BypassPermissions),
        "Fill a.rs.",
    )
    .await;
    let outcome = run(&mut agent).await;
    let workspace = h.dir().join("ws");
    std::fs::rename(h.dir().join("ws-moved"), &workspace).unwrap();
    assert_eq!(
        std::fs::read_to_string(workspace.join("src/a.rs")).unwrap(),
        "x"
    );
    assert_eq!(outcome, finished("Done."));
    let records = h.records("main").await;
    let effects = effects_of(&records);
    assert_eq!(effects.len(), 1);
    let (effects, next) = &effects[0];
    assert_eq!(effects.exit_code, Some(0));
    assert!(effects.changed.is_empty());
    let reason = effects.effects_unknown.as_deref().unwrap();
    assert!(reason.starts_with("after the command:"), "{reason}");
    assert!(
        matches!(next, Some(Record::ToolCall { content, is_error: false, .. }) if content.contains("[exit code 0]")),
        "{next:?}"
    );
}

/// Opens `fifo` for writing (waits for a reader) and writes one line: releases the command
/// blocked on it. A guard timeout unblocks the open before failing.
async fn release(fifo: &Path) {
    let path = fifo.to_path_buf();
    let writer = tokio::task::spawn_blocking(move || {
        use std::io::Write as _;
        let mut pipe = std::fs::OpenOptions::new().write(true).open(&path)?;
        pipe.write_all(b"go\n")
    });
    match tokio::time::timeout(GUARD, writer).await {
        Ok(written) => written.unwrap().unwrap(),
        Err(_) => {
            let _ = std::fs::File::open(fifo);
            panic!("guard timeout: no command read the FIFO");
        }
    }
}

#[tokio::test]
async fn concurrent_bash_calls_in_one_workspace_are_serialised_and_each_sees_its_own_files() {
    let h = harness(Vec::new()).await;
    let marker = h.workspace().join("marker");
    let fifo = h.workspace().join("gate.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let mut script = Vec::new();
    for agent in ["alice", "bob"] {
        let command = format!(
            "echo start-{agent} >> '{marker}'; read _ < '{fifo}'; printf {agent} > {agent}.txt; echo end-{agent} >> '{marker}'",
            marker = marker.display(),
            fifo = fifo.display(),
        );
        script.push(ScriptEntry::reply(agent, 1, vec![bash(&command)]));
        script.push(ScriptEntry::reply(agent, 2, vec![Block::text("Done.")]));
    }
    h.fake.append_script(script).unwrap();
    h.member("lead", MemberKind::Lead).await;
    let context = h.context(PlanApprover::Human);
    let mut tasks = Vec::new();
    for agent in ["alice", "bob"] {
        h.member(agent, MemberKind::Teammate).await;
        let mut runtime = start(
            context.clone(),
            teammate(agent, PermissionMode::BypassPermissions),
            "Write your file.",
        )
        .await;
        tasks.push(tokio::spawn(async move { run(&mut runtime).await }));
    }
    // One command holds the workspace (blocked on the FIFO until released) while the other
    // waits for it.
    let mut waiting = bash_calls_waiting(&h.workspace());
    tokio::time::timeout(GUARD, waiting.wait_for(|count| *count == 1))
        .await
        .expect("guard timeout: no Bash call waited for the workspace")
        .unwrap();
    release(&fifo).await;
    // The second call takes the workspace once the first command ended (and closed the FIFO,
    // which a second writer must not meet).
    tokio::time::timeout(GUARD, waiting.wait_for(|count| *count == 0))
        .await
        .expect("guard timeout: the second Bash call never took the workspace")
        .unwrap();
    release(&fifo).await;
    for task in tasks {
        assert_eq!(task.await.unwrap(), finished("Done."));
    }
    h.fake.verify().unwrap();

    let lines: Vec<String> = std::fs::read_to_string(&marker)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let first = lines[0].strip_prefix("start-").unwrap().to_owned();
    let second = if first == "alice" { "bob" } else { "alice" };
    assert_eq!(
        lines,
        [
            format!("start-{first}"),
            format!("end-{first}"),
            format!("start-{second}"),
            format!("end-{second}"),
        ],
        "the commands interleaved"
    );
    for agent in ["alice", "bob"] {
        let records = h.records(agent).await;
        let effects = effects_of(&records);
        assert_eq!(effects.len(), 1, "{agent}");
        assert_eq!(
            effects[0].0.changed,
            vec![format!("{agent}.txt")],
            "{agent}"
        );
        assert_eq!(effects[0].0.exit_code, Some(0), "{agent}");
    }
}

#[tokio::test]
async fn a_file_another_agent_writes_while_a_command_runs_is_not_the_commands() {
    let h = harness(Vec::new()).await;
    let started = h.workspace().join("started.fifo");
    let ending = h.workspace().join("ending.fifo");
    for fifo in [&started, &ending] {
        let made = std::process::Command::new("mkfifo")
            .arg(fifo)
            .status()
            .unwrap();
        assert!(made.success());
    }
    // alice's command waits on one FIFO once started (its "before" snapshot taken), and on
    // another before it ends.
    let command = format!(
        "read _ < '{started}'; printf a > alice.txt; read _ < '{ending}'",
        started = started.display(),
        ending = ending.display()
    );
    h.fake
        .append_script(vec![
            ScriptEntry::reply("alice", 1, vec![bash(&command)]),
            ScriptEntry::reply("alice", 2, vec![Block::text("Done.")]),
            ScriptEntry::reply(
                "bob",
                1,
                vec![Block::tool_use(
                    "Write",
                    json!({"file_path": "bob.txt", "content": "b"}),
                )],
            ),
            ScriptEntry::reply("bob", 2, vec![Block::text("Done.")]),
        ])
        .unwrap();
    h.member("lead", MemberKind::Lead).await;
    let context = h.context(PlanApprover::Human);
    h.member("alice", MemberKind::Teammate).await;
    let mut alice = start(
        context.clone(),
        teammate("alice", PermissionMode::BypassPermissions),
        "Write yours.",
    )
    .await;
    let alice = tokio::spawn(async move { run(&mut alice).await });
    release(&started).await;
    // alice's command is running: bob writes meanwhile, to the end of his run.
    h.member("bob", MemberKind::Teammate).await;
    let mut bob = start(
        context,
        teammate("bob", PermissionMode::BypassPermissions),
        "Write yours.",
    )
    .await;
    run(&mut bob).await;
    assert_eq!(
        std::fs::read_to_string(h.workspace().join("bob.txt")).unwrap(),
        "b"
    );
    release(&ending).await;
    alice.await.unwrap();
    h.fake.verify().unwrap();

    let records = h.records("alice").await;
    let effects = effects_of(&records);
    assert_eq!(effects.len(), 1);
    assert_eq!(effects[0].0.changed, vec!["alice.txt"]);
    // bob's Write is his, by its own input, and took no Bash record.
    assert!(effects_of(&h.records("bob").await).is_empty());
}
