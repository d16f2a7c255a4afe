//! A hook's `continue: false` (with `stopReason`) through the binary, with real hook processes
//! and the fake model server: the agent's turn ends at once — the call the hook was about does
//! not run, nor the calls after it — the person reads the reason and the model never does; the
//! stop is committed (a `hook_stopped` record), so a resume ends the same way without running
//! the hook again, and `muster run --continue` gives the agent a new prompt. For the lead of a
//! single run, a subagent and a teammate; at `SessionStart`, `PreToolUse`, `PostToolUse` and
//! `Stop`.

use std::path::Path;

use muster_fake_llm::{Block, ScriptEntry};
use serde_json::{Value, json};

use super::common::{fake, lines, muster, open_store, project, stderr, stdout, tool, trust};

/// What a stopping hook prints: the reason is for the person.
const STOP_REASON: &str = "an edit budget of the review hook ran out";

/// A hook script that logs its stdin to `stops.log` in the agent's workspace, then says
/// `continue: false` (with `extra` fields beside it) when its stdin matches the shell pattern
/// `only` (`*`: always).
fn stopping_hook(only: &str, extra: &str) -> String {
    format!(
        "#!/bin/sh\ninput=$(cat)\necho \"$input\" >> \"$CLAUDE_PROJECT_DIR/stops.log\"\n\
         case \"$input\" in {only}) printf '%s' \
         '{{\"continue\":false,\"stopReason\":\"{STOP_REASON}\"{extra}}}' ;; esac\n"
    )
}

/// Writes `hooks` (event, matcher, script) into `root`'s `.claude/settings.json`, each script
/// under `.claude/hooks/` (so the log it writes is no file its command names, which trust
/// would hash).
fn write_hooks(root: &Path, hooks: &[(&str, &str, &str)]) {
    let scripts = root.join(".claude/hooks");
    std::fs::create_dir_all(&scripts).unwrap();
    let mut settings = serde_json::Map::new();
    for (n, (event, matcher, script)) in hooks.iter().enumerate() {
        let path = scripts.join(format!("hook-{n}.sh"));
        std::fs::write(&path, script).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let command = format!("\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/hook-{n}.sh");
        settings.insert(
            (*event).to_owned(),
            json!([{"matcher": matcher, "hooks": [{"type": "command", "command": command}]}]),
        );
    }
    std::fs::write(
        root.join(".claude/settings.json"),
        json!({ "hooks": settings }).to_string(),
    )
    .unwrap();
}

/// A trusted project with `hooks` (see [`write_hooks`]).
async fn project_with(hooks: &[(&str, &str, &str)]) -> tempfile::TempDir {
    let dir = project(&[]);
    write_hooks(dir.path(), hooks);
    trust(dir.path()).await;
    dir
}

fn run_args(base: &str) -> Vec<String> {
    [
        "run",
        "-p",
        "Write the notes.",
        "--permission-mode",
        "bypassPermissions",
        "--base-url",
        base,
        "--output",
        "json",
    ]
    .map(str::to_owned)
    .to_vec()
}

async fn run(dir: &Path, base: &str) -> std::process::Output {
    let args = run_args(base);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    muster(dir, &args).await
}

/// `--output json`'s result line.
fn result_of(output: &std::process::Output) -> Value {
    lines(output)
        .pop()
        .unwrap_or_else(|| panic!("no result line: {}", stderr(output)))
}

fn logged(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("stops.log"))
        .unwrap_or_default()
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

/// The `hook_stopped` records of `agent` in `run_id`.
async fn hook_stops(dir: &Path, run_id: &str, agent: &str) -> Vec<Value> {
    let store = open_store(dir);
    super::common::transcript(store.as_ref(), run_id, agent)
        .await
        .into_iter()
        .filter(|record| record["type"] == "hook_stopped")
        .collect()
}

/// Says why a run that should have been stopped by a hook was not.
fn told_the_person(output: &std::process::Output) {
    let said = format!("{}{}", stdout(output), stderr(output));
    assert!(said.contains(STOP_REASON), "the person is not told: {said}");
}

/// The lead of a single run: a `PreToolUse` hook's `continue: false` keeps its call and the
/// next one from running, the run ends (exit 0) saying why, the model never reads the
/// reason, and a `--continue` gives the agent a new prompt with both calls answered as not
/// run.
#[tokio::test]
async fn a_pre_tool_use_hooks_continue_false_stops_the_lead_and_only_the_person_reads_why() {
    let dir = project_with(&[("PreToolUse", "Bash", &stopping_hook("*", ""))]).await;
    let fake = fake(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![
                tool("Bash", json!({"command": "echo one > one.txt"})),
                tool("Bash", json!({"command": "echo two > two.txt"})),
            ],
        ),
        ScriptEntry::reply("main", 2, vec![Block::text("Understood.")]),
    ])
    .await;
    let done = run(dir.path(), &fake.base_url()).await;
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    told_the_person(&done);
    let result = result_of(&done);
    assert_eq!(result["stopped_by_hook"]["event"], "PreToolUse", "{result}");
    assert!(!dir.path().join("one.txt").exists(), "the stopped call ran");
    assert!(!dir.path().join("two.txt").exists(), "a later call ran");
    assert_eq!(
        logged(dir.path()).len(),
        1,
        "the hook ran for the next call"
    );
    assert_eq!(fake.requests().len(), 1, "the agent went on after the stop");
    let run_id = result["run_id"].as_str().unwrap().to_owned();
    let stops = hook_stops(dir.path(), &run_id, "main").await;
    assert_eq!(stops.len(), 1, "{stops:?}");
    assert_eq!(stops[0]["reason"], STOP_REASON);

    // The hook keeps stopping Bash calls, but a new prompt answered in text goes through.
    let continued = muster(
        dir.path(),
        &[
            "run",
            "--continue",
            &run_id,
            "-p",
            "Go on.",
            "--base-url",
            &fake.base_url(),
            "--output",
            "json",
        ],
    )
    .await;
    assert_eq!(continued.status.code(), Some(0), "{}", stderr(&continued));
    assert_eq!(result_of(&continued)["result"], "Understood.");
    let requests = fake.requests();
    let body = requests.last().unwrap().body.to_string();
    assert_eq!(
        body.matches("not run: a hook stopped the agent").count(),
        2,
        "{body}"
    );
    assert!(!body.contains(STOP_REASON), "the model read the reason");
}

/// `continue: false` wins over a `Stop` hook's `decision: "block"`: the agent does not keep
/// working, and the run ends saying why.
#[tokio::test]
async fn a_stop_hooks_continue_false_wins_over_its_block() {
    let dir = project_with(&[(
        "Stop",
        "",
        &stopping_hook("*", r#","decision":"block","reason":"run the tests""#),
    )])
    .await;
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![Block::text("Done early.")]),
        ScriptEntry::reply("main", 2, vec![Block::text("Kept working.")]),
    ])
    .await;
    let done = run(dir.path(), &fake.base_url()).await;
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    told_the_person(&done);
    assert_eq!(result_of(&done)["stopped_by_hook"]["event"], "Stop");
    assert_eq!(fake.requests().len(), 1, "the block kept the agent working");
}

/// A `SessionStart` hook's `continue: false`: the agent starts stopped, without asking its
/// model anything.
#[tokio::test]
async fn a_session_start_hooks_continue_false_stops_the_agent_before_its_first_request() {
    let dir = project_with(&[("SessionStart", "", &stopping_hook("*", ""))]).await;
    let fake = fake(vec![ScriptEntry::reply(
        "main",
        1,
        vec![Block::text("Should not be asked.")],
    )])
    .await;
    let done = run(dir.path(), &fake.base_url()).await;
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    told_the_person(&done);
    assert_eq!(result_of(&done)["stopped_by_hook"]["event"], "SessionStart");
    assert!(fake.requests().is_empty(), "the model was asked");
}

/// A subagent stopped by a `PreToolUse` hook ends; its parent reads that it was stopped, not
/// the reason, and goes on.
#[tokio::test]
async fn a_subagent_stopped_by_a_hook_ends_and_its_parent_goes_on() {
    // Only the subagent's calls stop: the hook lets the lead's through.
    let script = stopping_hook(r#"*'"agent_id":"main.sub-1"'*"#, "");
    let dir = project_with(&[("PreToolUse", "Bash", &script)]).await;
    let fake = fake(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![tool(
                "Agent",
                json!({"description": "notes", "prompt": "Write the notes.", "subagent_type": "general"}),
            )],
        ),
        ScriptEntry::reply(
            "main.sub-1",
            1,
            vec![tool("Bash", json!({"command": "echo sub > sub.txt"}))],
        ),
        ScriptEntry::reply("main.sub-1", 2, vec![Block::text("Kept working.")]),
        ScriptEntry::reply(
            "main",
            2,
            vec![tool("Bash", json!({"command": "echo lead > lead.txt"}))],
        ),
        ScriptEntry::reply("main", 3, vec![Block::text("Done.")]),
    ])
    .await;
    let done = run(dir.path(), &fake.base_url()).await;
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    assert_eq!(result_of(&done)["result"], "Done.");
    assert!(
        !dir.path().join("sub.txt").exists(),
        "the subagent's call ran"
    );
    assert!(dir.path().join("lead.txt").exists(), "the lead was stopped");
    let requests = fake.requests();
    assert!(
        !requests
            .iter()
            .any(|r| r.agent.as_deref() == Some("main.sub-1") && r.turn == Some(2)),
        "the subagent went on"
    );
    let parent = requests
        .iter()
        .find(|r| r.agent.as_deref() == Some("main") && r.turn == Some(2))
        .expect("the lead's second request")
        .body
        .to_string();
    assert!(
        parent.contains("main.sub-1 was stopped by a PreToolUse hook"),
        "{parent}"
    );
    assert!(!parent.contains(STOP_REASON), "the model read the reason");
}

/// A teammate stopped by a `PostToolUse` hook (after its call ran) waits idle with its task;
/// the lead is told which event stopped it, not the reason, and its mail sets it going again.
#[tokio::test(flavor = "multi_thread")]
async fn a_teammate_stopped_by_a_hook_waits_until_the_lead_mails_it() {
    use super::hooks_cli::{any_turn, trusted_team_of_one};
    // Only the teammate's first Bash call stops it.
    let script = stopping_hook(r#"*'"agent_id":"one"'*first.txt*"#, "");
    let dir = project(&[]);
    let root = dir.path();
    write_hooks(root, &[("PostToolUse", "Bash", &script)]);
    trusted_team_of_one(root, false).await;
    let fake = fake(vec![
        ScriptEntry::reply(
            "lead",
            1,
            vec![tool(
                "TaskCreate",
                json!({"subject": "notes", "description": "Write the notes."}),
            )],
        ),
        // Its second turn ends at once; the third is woken by the teammate's stop.
        ScriptEntry::reply("lead", 2, vec![Block::text("Waiting for the team.")]),
        ScriptEntry::reply(
            "lead",
            3,
            vec![tool(
                "SendMessage",
                json!({"to": "one", "message": "Go on with the notes."}),
            )],
        ),
        any_turn("lead", "Waiting for the team."),
        ScriptEntry::reply(
            "one",
            1,
            vec![tool("Bash", json!({"command": "echo first > first.txt"}))],
        ),
        ScriptEntry::reply(
            "one",
            2,
            vec![tool("Bash", json!({"command": "echo second > second.txt"}))],
        ),
        any_turn("one", "Notes written."),
    ])
    .await;
    let done = run(root, &fake.base_url()).await;
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    let run_id = result_of(&done)["run_id"].as_str().unwrap().to_owned();
    let stops = hook_stops(root, &run_id, "one").await;
    assert_eq!(stops.len(), 1, "{stops:?}");
    assert_eq!(stops[0]["event"], "PostToolUse");
    let requests = fake.requests();
    let told = requests.iter().any(|request| {
        request.agent.as_deref() == Some("lead")
            && request
                .body
                .to_string()
                .contains("A PostToolUse hook stopped my turn")
    });
    assert!(told, "the lead was not told");
    assert!(
        requests
            .iter()
            .all(|request| !request.body.to_string().contains(STOP_REASON)),
        "a model read the reason"
    );
    // The teammate's second request came after the lead's mail, not after the stop alone.
    let second = requests
        .iter()
        .find(|r| r.agent.as_deref() == Some("one") && r.turn == Some(2))
        .expect("the teammate went on after the lead's mail")
        .body
        .to_string();
    assert!(second.contains("Go on with the notes."), "{second}");
}

/// A teammate a hook stopped while it holds a task in progress, and a lead that, told so,
/// ends its turn without mailing it: nothing can move that task any more, so the run ends
/// (failed, exit 1) naming the task, the teammate and the event (`stopped_by_hook`), instead
/// of waiting forever.
#[tokio::test(flavor = "multi_thread")]
async fn a_team_whose_stopped_teammate_holds_a_task_ends_when_the_lead_leaves_it() {
    use super::hooks_cli::{any_turn, trusted_team_of_one};
    let script = stopping_hook(r#"*'"agent_id":"one"'*"#, "");
    let dir = project(&[]);
    let root = dir.path();
    write_hooks(root, &[("PostToolUse", "Bash", &script)]);
    trusted_team_of_one(root, false).await;
    let fake = fake(vec![
        ScriptEntry::reply(
            "lead",
            1,
            vec![tool(
                "TaskCreate",
                json!({"subject": "notes", "description": "Write the notes."}),
            )],
        ),
        // Every later turn of the lead, the one the teammate's stop wakes included, ends.
        any_turn("lead", "Waiting for the team."),
        ScriptEntry::reply(
            "one",
            1,
            vec![tool("Bash", json!({"command": "echo first > first.txt"}))],
        ),
    ])
    .await;
    let done = run(root, &fake.base_url()).await;
    assert_eq!(done.status.code(), Some(1), "{}", stderr(&done));
    let result = result_of(&done);
    assert_eq!(result["status"], "failed", "{result:#}");
    assert_eq!(
        result["stopped_by_hook"],
        json!([{"teammate": "one", "event": "PostToolUse", "tasks": [1]}]),
        "{result:#}"
    );
    // As the run ended (its teammates' shutdown then puts the task back on the board).
    assert_eq!(result["tasks"][0]["status"], "in_progress", "{result:#}");
    assert_eq!(result["tasks"][0]["owner"], "one", "{result:#}");
    // The lead was told before the run ended.
    assert!(
        fake.requests().iter().any(|request| {
            request.agent.as_deref() == Some("lead")
                && request
                    .body
                    .to_string()
                    .contains("A PostToolUse hook stopped my turn")
        }),
        "the lead was not told"
    );
}

/// The stop is committed with the call's decision: killed right after that decision's
/// commit, or right after the stop's, the resume stops the agent again without running the
/// hook or the call.
#[cfg(feature = "failpoints")]
#[tokio::test(flavor = "multi_thread")]
async fn a_kill_around_a_stop_resumes_to_the_same_stop_without_the_hook() {
    let fake = fake(vec![ScriptEntry::reply(
        "main",
        1,
        vec![tool("Bash", json!({"command": "echo one > one.txt"}))],
    )])
    .await;
    let args = run_args(&fake.base_url());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    for failpoint in ["hook:PreToolUse", "hook_stopped:main"] {
        let project = project_with(&[("PreToolUse", "Bash", &stopping_hook("*", ""))]).await;
        let dir = project.path();
        let mut killed = super::common::command(dir, &args);
        killed.env("MUSTER_FAILPOINT", failpoint);
        let first = super::common::output(killed).await;
        assert_eq!(first.status.code(), None, "{}", stderr(&first));
        assert_eq!(logged(dir).len(), 1, "{failpoint}");
        let resumed = muster(
            dir,
            &["resume", "--base-url", &fake.base_url(), "--output", "json"],
        )
        .await;
        assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
        told_the_person(&resumed);
        assert_eq!(logged(dir).len(), 1, "{failpoint}: the hook ran again");
        assert!(!dir.join("one.txt").exists(), "{failpoint}: the call ran");
        let run_id = result_of(&resumed)["run_id"].as_str().unwrap().to_owned();
        assert_eq!(
            hook_stops(dir, &run_id, "main").await.len(),
            1,
            "{failpoint}"
        );
    }
    assert_eq!(fake.requests().len(), 2, "one model request per run");
}
