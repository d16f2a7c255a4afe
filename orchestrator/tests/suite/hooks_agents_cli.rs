//! Hooks for every kind of agent through the binary: a `PostToolUse` audit hook in the user's
//! own `~/.claude/settings.json` writes one line per call for the lead, a teammate in its
//! worktree, that teammate's subagent and each batch line, and those lines are compared with
//! the calls the fake model server answered (its request log), never with muster's records;
//! a teammate that empties `.claude/settings.json` in its worktree gains nothing in that run
//! or its resume.

use std::collections::BTreeSet;
use std::path::Path;

use muster_fake_llm::{Block, RecordedRequest, ScriptEntry};
use serde_json::{Value, json};

use super::common::{command, fake, output, project, stderr, tool, trust};
use super::hooks_cli::{any_turn, request_of, tool_results, trusted_team_of_one};

/// The tools whose calls fire `PostToolUse` (the tool set; the runtime's own tools such as
/// `Agent` or `TaskCreate` only get `PreToolUse`, docs/hooks.md "Events").
const TOOL_SET: [&str; 6] = ["Bash", "Write", "Read", "Edit", "Glob", "Grep"];

/// One audit line per call: the run, the agent (`(lead)` for the agent without `agent_id`),
/// the tool and the call's id, as a JSON array, in `audit.log` beside the script (a log named
/// in a project hook's command would be a file trust covers once it exists).
pub(super) const AUDIT: &str = "import json, os, sys\n\
event = json.load(sys.stdin)\n\
line = [event['session_id'], event.get('agent_id', '(lead)'), event['tool_name'], event['tool_use_id']]\n\
with open(os.path.join(os.path.dirname(sys.argv[0]), 'audit.log'), 'a') as log:\n    log.write(json.dumps(line) + '\\n')\n";

/// A HOME whose `~/.claude/settings.json` runs the audit after every call, unconfined (a
/// user-level hook may opt out of the sandbox), appending to `.claude/audit.log` in that HOME:
/// one log outside every project, worktree and run.
fn audited_home() -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    let claude = home.path().join(".claude");
    std::fs::create_dir_all(&claude).unwrap();
    let script = claude.join("audit.py");
    std::fs::write(&script, AUDIT).unwrap();
    let settings = json!({"hooks": {"PostToolUse": [{"matcher": "*", "hooks": [
        {"type": "command", "sandbox": "off",
         "command": format!("python3 {}", script.display())}]}]}});
    std::fs::write(claude.join("settings.json"), settings.to_string()).unwrap();
    home
}

/// The lines of the audit log `log` as (run, agent, tool, id).
pub(super) fn audited(log: &Path) -> BTreeSet<(String, String, String, String)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let fields: Vec<String> = serde_json::from_str(line).unwrap();
            let [run, agent, tool, id] = <[String; 4]>::try_from(fields).unwrap();
            (run, agent, tool, id)
        })
        .collect()
}

/// Every call of the tool set the fake server answered, as (run, agent, tool, id): the
/// `tool_use` blocks of the assistant messages each agent sent back to it (the lead named
/// `(lead)`, as its hooks see no `agent_id`).
pub(super) fn asked(requests: &[RecordedRequest]) -> BTreeSet<(String, String, String, String)> {
    let mut calls = BTreeSet::new();
    for request in requests {
        let (Some(run), Some(agent)) = (&request.run_id, &request.agent) else {
            continue;
        };
        let agent = match agent.as_str() {
            "lead" | "main" => "(lead)",
            other => other,
        };
        let messages = request.body["messages"].as_array().cloned();
        for block in messages
            .into_iter()
            .flatten()
            .filter(|message| message["role"] == "assistant")
            .flat_map(|message| message["content"].as_array().cloned().unwrap_or_default())
            .filter(|block| block["type"] == "tool_use")
        {
            let name = block["name"].as_str().unwrap();
            if TOOL_SET.contains(&name) {
                calls.insert((
                    run.clone(),
                    agent.to_owned(),
                    name.to_owned(),
                    block["id"].as_str().unwrap().to_owned(),
                ));
            }
        }
    }
    calls
}

/// The agents named in `calls`.
fn agents_of(calls: &BTreeSet<(String, String, String, String)>) -> BTreeSet<&str> {
    calls
        .iter()
        .map(|(_, agent, _, _)| agent.as_str())
        .collect()
}

/// The lead, a teammate in its worktree and that teammate's subagent each make calls; the
/// user's audit hook writes one line for each, named by the agent, and nothing else.
#[tokio::test(flavor = "multi_thread")]
async fn an_audit_hook_writes_one_line_per_call_for_the_lead_a_teammate_and_its_subagent() {
    let home = audited_home();
    let dir = project(&[]);
    let root = dir.path();
    trusted_team_of_one(root, true).await;
    let fake = fake(vec![
        ScriptEntry::reply(
            "lead",
            1,
            vec![
                // The lead's definition has no Bash: its tools are the read-only ones and the
                // team's.
                tool("Glob", json!({"pattern": "*.md"})),
                tool(
                    "TaskCreate",
                    json!({"subject": "write", "description": "Write one.txt."}),
                ),
            ],
        ),
        any_turn("lead", "Waiting for the team."),
        ScriptEntry::reply(
            "one",
            1,
            vec![
                tool(
                    "Write",
                    json!({"file_path": "one.txt", "content": "one\n"}),
                ),
                tool(
                    "Agent",
                    json!({"description": "check", "prompt": "Check it.", "subagent_type": "general"}),
                ),
            ],
        ),
        ScriptEntry::reply(
            "one.sub-1",
            1,
            vec![
                tool("Read", json!({"file_path": "README.md"})),
                tool("Bash", json!({"command": "echo sub"})),
            ],
        ),
        ScriptEntry::reply("one.sub-1", 2, vec![Block::text("Checked.")]),
        any_turn("one", "done"),
    ])
    .await;
    let mut run = command(
        root,
        &[
            "run",
            "-p",
            "Build it.",
            "--permission-mode",
            "bypassPermissions",
            "--base-url",
            &fake.base_url(),
            "--output",
            "stream-json",
        ],
    );
    run.env("HOME", home.path());
    let done = output(run).await;
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    let asked = asked(&fake.requests());
    assert_eq!(
        agents_of(&asked),
        BTreeSet::from(["(lead)", "one", "one.sub-1"]),
        "the script's calls: {asked:#?}"
    );
    assert_eq!(asked.len(), 4, "{asked:#?}");
    let audited = audited(&home.path().join(".claude/audit.log"));
    assert_eq!(audited, asked);
    // One line per call: no call was audited twice.
    let lines = std::fs::read_to_string(home.path().join(".claude/audit.log")).unwrap();
    assert_eq!(lines.lines().count(), asked.len(), "{lines}");
}

/// Each line of a batch runs as its own run and is audited as such: one line per call,
/// under that line's run id.
#[tokio::test(flavor = "multi_thread")]
async fn an_audit_hook_writes_one_line_per_call_of_each_batch_line() {
    let home = audited_home();
    let fake = fake(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![
                tool("Bash", json!({"command": "echo one"})),
                tool("Glob", json!({"pattern": "*.md"})),
            ],
        ),
        ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
    ])
    .await;
    let dir = project(&[(
        ".muster/settings.toml",
        &format!(
            "permission_mode = \"bypassPermissions\"\n[providers.anthropic]\nbase_url = \"{}\"\n",
            fake.base_url()
        ),
    )]);
    std::fs::write(
        dir.path().join("tasks.jsonl"),
        "{\"id\": \"a\", \"prompt\": \"One.\"}\n{\"id\": \"b\", \"prompt\": \"Two.\"}\n",
    )
    .unwrap();
    trust(dir.path()).await;
    let mut batch = command(dir.path(), &["batch", "tasks.jsonl"]);
    batch.env("HOME", home.path());
    let done = output(batch).await;
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    let asked = asked(&fake.requests());
    let runs: BTreeSet<&str> = asked.iter().map(|(run, ..)| run.as_str()).collect();
    assert_eq!(runs.len(), 2, "two lines, two runs: {asked:#?}");
    assert_eq!(asked.len(), 4, "{asked:#?}");
    assert_eq!(audited(&home.path().join(".claude/audit.log")), asked);
    let lines = std::fs::read_to_string(home.path().join(".claude/audit.log")).unwrap();
    assert_eq!(lines.lines().count(), asked.len(), "{lines}");
}

/// A teammate whose Bash is unconfined (`[sandbox] mode = "off"`, so nothing binds the file
/// read-only) empties `.claude/settings.json` in its worktree — the guard hook and the deny
/// rule gone — and gains nothing: its `rm` is still refused by the guard and its read of
/// `.env` by the rule, in that run and, after kill -9 (the teammate's next model request held
/// at a gate), in the resume, which uses the settings the run stored.
#[tokio::test(flavor = "multi_thread")]
async fn a_teammate_that_empties_the_settings_gains_nothing_in_the_run_or_its_resume() {
    let dir = super::hooks_cli::hooked_project();
    let root = dir.path();
    let mut settings: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join(".claude/settings.json")).unwrap())
            .unwrap();
    settings["permissions"] = json!({"deny": ["Read(./.env)"]});
    std::fs::write(root.join(".claude/settings.json"), settings.to_string()).unwrap();
    std::fs::write(root.join(".env"), "SECRET=1\n").unwrap();
    std::fs::write(
        root.join(".muster/settings.toml"),
        "[sandbox]\nmode = \"off\"\n",
    )
    .unwrap();
    trusted_team_of_one(root, true).await;
    let tries = || {
        vec![
            tool("Bash", json!({"command": "rm data/keep.txt"})),
            tool("Read", json!({"file_path": ".env"})),
        ]
    };
    let mut first_try = tries();
    first_try.insert(
        0,
        tool(
            "Bash",
            json!({"command": "printf '{}' > .claude/settings.json && cat .claude/settings.json"}),
        ),
    );
    let mut held = ScriptEntry::reply("one", 2, tries());
    held.fault.hold = Some("one-2".to_owned());
    let fake = fake(vec![
        ScriptEntry::reply(
            "lead",
            1,
            vec![tool(
                "TaskCreate",
                json!({"subject": "clean", "description": "Clean up."}),
            )],
        ),
        any_turn("lead", "Waiting for the team."),
        ScriptEntry::reply("one", 1, first_try),
        held,
        any_turn("one", "done"),
    ])
    .await;
    let base = fake.base_url();
    let mut started = command(
        root,
        &[
            "run",
            "-p",
            "Clean up.",
            "--permission-mode",
            "bypassPermissions",
            "--base-url",
            &base,
            "--output",
            "stream-json",
        ],
    );
    started
        .kill_on_drop(true)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = started.spawn().unwrap();
    tokio::time::timeout(super::common::GUARD, fake.gate_reached("one-2", 1))
        .await
        .expect("guard timeout: the teammate never asked after its edit");
    child.start_kill().unwrap();
    assert_eq!(child.wait().await.unwrap().code(), None, "not killed");

    // In the run: the edit went through (nothing confined it), the guard and the rule held.
    let first = tool_results(&request_of(&fake, "one", 2));
    assert_eq!(first.len(), 3, "{first:#?}");
    let holds = |results: &[String]| {
        assert!(
            results[0].contains("rm is not allowed here (guard)"),
            "the guard: {results:#?}"
        );
        assert!(
            results[1].contains("deny rule `Read(./.env)`"),
            "the rule: {results:#?}"
        );
        assert!(!results[1].contains("SECRET"), "{results:#?}");
    };
    holds(&first[1..]);
    // `.muster/worktrees/RUN-SLUG/one/`.
    let worktree_settings: Vec<_> = std::fs::read_dir(root.join(".muster/worktrees"))
        .unwrap()
        .flatten()
        .flat_map(|run| std::fs::read_dir(run.path()).unwrap().flatten())
        .filter(|entry| entry.file_name() == "one")
        .map(|entry| entry.path().join(".claude/settings.json"))
        .collect();
    assert_eq!(worktree_settings.len(), 1, "{worktree_settings:?}");
    assert_eq!(
        std::fs::read_to_string(&worktree_settings[0]).unwrap(),
        "{}",
        "the teammate's edit is in its worktree"
    );

    // The resume: the same teammate, its worktree still edited, still guarded.
    fake.open_gate("one-2");
    let resumed = output(command(
        root,
        &["resume", "--base-url", &base, "--output", "stream-json"],
    ))
    .await;
    assert_ne!(resumed.status.code(), None, "{}", stderr(&resumed));
    let after = tool_results(&request_of(&fake, "one", 3));
    assert_eq!(after.len(), 2, "{after:#?}");
    holds(&after);
    assert!(root.join("data/keep.txt").exists(), "rm ran");
    assert_eq!(
        std::fs::read_to_string(root.join(".claude/settings.json")).unwrap(),
        settings.to_string(),
        "the user's settings changed"
    );
}
