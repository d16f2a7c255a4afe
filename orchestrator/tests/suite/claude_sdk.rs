//! The real Python Agent SDK (`claude-agent-sdk`, pinned in tests/claude-sdk/requirements.txt
//! and installed by `scripts/test`) driving muster through a `claude` link, against
//! `muster-fake-llm`: tests/claude-sdk/scenarios.py holds the programs, written as for Claude
//! Code; this side scripts the model, runs them with `ANTHROPIC_API_KEY` and `CLAUDE_*` unset,
//! and checks the store.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use muster_fake_llm::{Block, FakeLlmHandle, Fault, ScriptEntry, UsageSpec};
use serde_json::{Value, json};

use super::common::{GUARD, config_home, fake, open_store, project, tool};

/// The Python with the SDK: `MUSTER_TEST_CLAUDE_SDK_PYTHON` (set by `scripts/test`).
fn python() -> String {
    let python =
        std::env::var("MUSTER_TEST_CLAUDE_SDK_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = std::process::Command::new(&python)
        // Found, not imported: the import itself takes seconds, and the scenario pays it once.
        .args([
            "-c",
            "import importlib.util, sys; sys.exit(importlib.util.find_spec('claude_agent_sdk') is None)",
        ])
        .output();
    match probe {
        Ok(output) if output.status.success() => python,
        _ => panic!(
            "the SDK tests need Python with `claude-agent-sdk`: run `scripts/test`, which \
             installs it, or set MUSTER_TEST_CLAUDE_SDK_PYTHON to such a python"
        ),
    }
}

fn scenarios() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/claude-sdk/scenarios.py")
}

fn claude_link(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let link = bin.join("claude");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_muster"), &link).unwrap();
    link
}

/// The scenario's command: no Anthropic key nor `CLAUDE_*` variable; muster finds the model
/// server and its key through its own settings variables.
fn scenario(name: &str, dir: &Path, fake: &FakeLlmHandle) -> tokio::process::Command {
    let link = claude_link(dir);
    let mut command = tokio::process::Command::new(python());
    command.arg(scenarios()).arg(name).arg(&link).arg(dir);
    for (variable, _) in std::env::vars() {
        if variable.starts_with("CLAUDE") || variable.starts_with("ANTHROPIC_") {
            command.env_remove(variable);
        }
    }
    command
        .current_dir(dir)
        .env("HOME", dir)
        .env("XDG_CONFIG_HOME", config_home())
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("MUSTER_TRUST_PROJECT_HASH")
        .env("MUSTER_PROVIDERS__ANTHROPIC__BASE_URL", fake.base_url())
        .env(
            "MUSTER_PROVIDERS__ANTHROPIC__API_KEY_ENV",
            "MUSTER_TEST_MODEL_KEY",
        )
        .env("MUSTER_TEST_MODEL_KEY", "test-key")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Runs a scenario to its end: what it printed, failing the test with its stderr when it
/// failed.
async fn run(command: tokio::process::Command) -> Value {
    let output = super::common::output(command).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the scenario failed:\n{stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("no outcome line ({e}): {stdout}\n{stderr}"))
}

fn with_usage(mut entry: ScriptEntry, input: u64, output: u64) -> ScriptEntry {
    if let Some(reply) = entry.reply.as_mut() {
        reply.usage = Some(UsageSpec {
            input_tokens: Some(input),
            output_tokens: Some(output),
            cache_read_input_tokens: Some(0),
            cache_creation_input_tokens: Some(0),
        });
    }
    entry
}

const PLAN: &str = "## Goal\nOut.\n## Steps\n1. Write out.txt\n## Files\nout.txt\n";

fn settings(dir: &Path, text: &str) {
    std::fs::write(dir.join(".muster/settings.toml"), text).unwrap();
    super::common::trust_blocking(dir);
}

#[tokio::test(flavor = "multi_thread")]
async fn query_with_a_string_prompt_has_its_plan_approved_through_can_use_tool() {
    let dir = project(&[]);
    settings(
        dir.path(),
        "[models.\"claude-sonnet-4-5\"]\nprice_in = 3.0\nprice_out = 15.0\n",
    );
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![tool("ExitPlanMode", json!({"plan": PLAN}))]),
        ScriptEntry::reply(
            "main",
            2,
            vec![tool(
                "Write",
                json!({"file_path": "out.txt", "content": "out\n"}),
            )],
        ),
        ScriptEntry::reply("main", 3, vec![Block::text("Done as planned.")]),
    ])
    .await;
    let outcome = run(scenario("query_plan", dir.path(), &fake)).await;
    let run_id = outcome["session_id"].as_str().unwrap();
    // The usage the SDK read is what the model server returned.
    let returned: Vec<_> = fake.requests().iter().filter_map(|r| r.usage).collect();
    let input: u64 = returned.iter().map(|u| u.input_tokens).sum();
    assert_eq!(outcome["usage"]["input_tokens"], input);
    // One decision in the store, by the person the program answered for.
    let db = rusqlite::Connection::open(dir.path().join(".muster/muster.db")).unwrap();
    let responses: Vec<String> = db
        .prepare("SELECT body FROM messages WHERE run_id = ?1 AND kind = 'plan_approval_response'")
        .unwrap()
        .query_map([run_id], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(responses.len(), 1, "{responses:?}");
    let store = open_store(dir.path());
    let record = store.run(run_id).await.unwrap().unwrap();
    assert_eq!(record.status.as_str(), "completed");
    // The program was asked about the stored request, by its id (as `muster approve` names it).
    let requests = store.requests(run_id).await.unwrap();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(outcome["request_id"], requests[0].request_id.as_str());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_sends_two_prompts_in_one_process() {
    let dir = project(&[]);
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![Block::text("First answer.")]),
        ScriptEntry::reply("main", 2, vec![Block::text("Second answer.")]),
    ])
    .await;
    let outcome = run(scenario("client_two_prompts", dir.path(), &fake)).await;
    let last = fake.requests().last().unwrap().body.to_string();
    assert!(
        last.contains("First answer."),
        "the second prompt continued: {last}"
    );
    let store = open_store(dir.path());
    assert_eq!(store.runs().await.unwrap().len(), 1);
    assert!(outcome["session_id"].is_string());
}

#[tokio::test(flavor = "multi_thread")]
async fn interrupt_ends_a_held_turn_and_the_next_query_continues() {
    let dir = project(&[]);
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![Block::text("Never shown.")])
            .attempt(1)
            .fault(Fault {
                hold: Some("held".into()),
                ..Fault::default()
            }),
        ScriptEntry {
            turn: None,
            ..ScriptEntry::reply("main", 0, vec![Block::text("After the interrupt.")])
        },
    ])
    .await;
    let mut child = scenario("interrupt", dir.path(), &fake).spawn().unwrap();
    tokio::time::timeout(GUARD, fake.gate_reached("held", 1))
        .await
        .expect("the model call never came");
    std::fs::write(dir.path().join("gate-reached"), "").unwrap();
    let status = tokio::time::timeout(GUARD, child.wait())
        .await
        .expect("guard timeout")
        .unwrap();
    fake.open_gate("held");
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        use tokio::io::AsyncReadExt as _;
        let _ = pipe.read_to_string(&mut stderr).await;
    }
    assert!(status.success(), "the scenario failed:\n{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_budget_run_ends_error_max_budget_usd() {
    let dir = project(&[]);
    settings(
        dir.path(),
        "[models.\"claude-sonnet-4-5\"]\nprice_in = 1000.0\nprice_out = 1000.0\n",
    );
    let glob =
        |turn| ScriptEntry::reply("main", turn, vec![tool("Glob", json!({"pattern": "*.md"}))]);
    let fake = fake(vec![
        with_usage(glob(1), 400, 100),
        with_usage(glob(2), 600, 100),
        ScriptEntry::reply("main", 3, vec![Block::text("never asked")]),
    ])
    .await;
    let outcome = run(scenario("budget", dir.path(), &fake)).await;
    assert_eq!(fake.requests().len(), 2, "{outcome}");
    let store = open_store(dir.path());
    let run_id = outcome["session_id"].as_str().unwrap();
    assert_eq!(
        store.run(run_id).await.unwrap().unwrap().status.as_str(),
        "budget"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_awaiting_a_person_ends_error_awaiting_decision_and_the_sdk_raises() {
    let dir = project(&[]);
    let fake = fake(vec![ScriptEntry::reply(
        "main",
        1,
        vec![tool("ExitPlanMode", json!({"plan": PLAN}))],
    )])
    .await;
    let outcome = run(scenario("awaiting", dir.path(), &fake)).await;
    let store = open_store(dir.path());
    let run_id = outcome["session_id"].as_str().unwrap();
    assert_eq!(
        store.run(run_id).await.unwrap().unwrap().status.as_str(),
        "awaiting_decision"
    );
}

const GREET_PLAN: &str = "## Goal\nGreet.\n## Steps\n1. Write hello.txt\n## Files\nhello.txt\n## Tests\nnone\n## Risks\nnone\n";

#[tokio::test(flavor = "multi_thread")]
async fn query_in_a_team_run_has_the_teammates_plan_approved_through_can_use_tool() {
    let dir = project(&[(
        "muster.team.toml",
        "name = \"greeters\"\n\n[[teammates]]\nname = \"alice\"\napprover = \"human\"\n",
    )]);
    let lead_waits: ScriptEntry = serde_json::from_value(json!({
        "agent": "lead",
        "reply": {"content": [{"type": "text", "text": "Waiting for the team."}],
                  "stop_reason": "end_turn"},
    }))
    .unwrap();
    let fake = fake(vec![
        ScriptEntry::reply(
            "lead",
            1,
            vec![tool(
                "TaskCreate",
                json!({"subject": "Greet", "description": "Write hello.txt saying hello."}),
            )],
        ),
        lead_waits,
        ScriptEntry::reply(
            "alice",
            1,
            vec![tool("ExitPlanMode", json!({"plan": GREET_PLAN}))],
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
    ])
    .await;
    let outcome = run(scenario("query_team", dir.path(), &fake)).await;
    let run_id = outcome["session_id"].as_str().unwrap();
    let db = rusqlite::Connection::open(dir.path().join(".muster/muster.db")).unwrap();
    let decisions: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM messages WHERE run_id = ?1 AND kind = 'plan_approval_response'",
            [run_id],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(decisions, 1, "one decision in the store");
    let store = open_store(dir.path());
    assert_eq!(
        store.run(run_id).await.unwrap().unwrap().status.as_str(),
        "completed"
    );
}

/// A team run driven by a `ClaudeSDKClient`: `interrupt()` ends the lead's turn the model
/// server holds, the next query continues the run, and later processes resume it by its
/// session id and continue it as the newest run — each a `continue` of the one team run.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_interrupts_continues_and_resumes_a_team_run() {
    let dir = project(&[(
        "muster.team.toml",
        "name = \"greeters\"\nisolation = \"shared\"\n\n[[teammates]]\nname = \"alice\"\n",
    )]);
    let any_lead_turn: ScriptEntry = serde_json::from_value(json!({
        "agent": "lead",
        "reply": {"content": [{"type": "text", "text": "Answered."}], "stop_reason": "end_turn"},
    }))
    .unwrap();
    let fake = fake(vec![
        ScriptEntry::reply("lead", 1, vec![Block::text("Never shown.")])
            .attempt(1)
            .fault(Fault {
                hold: Some("held".into()),
                ..Fault::default()
            }),
        any_lead_turn,
    ])
    .await;
    let child = scenario("team_interrupt_continue_resume", dir.path(), &fake)
        .spawn()
        .unwrap();
    tokio::time::timeout(GUARD, fake.gate_reached("held", 1))
        .await
        .expect("the lead's model call never came");
    std::fs::write(dir.path().join("gate-reached"), "").unwrap();
    let output = tokio::time::timeout(GUARD, child.wait_with_output())
        .await
        .expect("guard timeout")
        .unwrap();
    fake.open_gate("held");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the scenario failed:\n{stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let outcome: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("no outcome line ({e}): {stdout}\n{stderr}"));
    let store = open_store(dir.path());
    let runs = store.runs().await.unwrap();
    assert_eq!(runs.len(), 1, "one run throughout: {runs:?}");
    assert_eq!(runs[0].id, outcome["session_id"].as_str().unwrap());
    assert!(runs[0].team.is_some());
    assert_eq!(runs[0].status.as_str(), "completed");
    // The last lead request carries every prompt of the three processes: one context.
    let last = fake.requests().last().unwrap().body.to_string();
    for prompt in ["Go on.", "Resumed question.", "Continued question."] {
        assert!(last.contains(prompt), "{prompt:?} not in {last}");
    }
}

/// A teammate's merge for the person (worktree isolation, `approver = "human"`) reaches the
/// program's `can_use_tool` as `ReviewMerge` with the diff it adds; the program's approval is
/// the one decision in the store, the merge lands, and the run completes.
#[tokio::test(flavor = "multi_thread")]
async fn a_merge_for_the_person_is_approved_through_can_use_tool() {
    use super::worktree_cli::{any_turn, repo, team};
    let dir = repo(&team("human", &["one"]), &[]);
    let fake = fake(vec![
        ScriptEntry::reply(
            "lead",
            1,
            vec![tool(
                "TaskCreate",
                json!({"subject": "part 0", "description": "Write your file."}),
            )],
        ),
        any_turn("lead", "Waiting for the team."),
        ScriptEntry::reply(
            "one",
            1,
            vec![tool(
                "Write",
                json!({"file_path": "one.txt", "content": "one\n"}),
            )],
        ),
        any_turn("one", "done"),
    ])
    .await;
    let outcome = run(scenario("merge_review", dir.path(), &fake)).await;
    let run_id = outcome["session_id"].as_str().unwrap();
    let store = open_store(dir.path());
    assert_eq!(
        store.run(run_id).await.unwrap().unwrap().status.as_str(),
        "completed"
    );
    let merges: Vec<_> = store
        .requests(run_id)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.kind == muster_mailbox::MessageKind::MergeRequest)
        .collect();
    assert_eq!(merges.len(), 1, "{merges:?}");
    assert_eq!(outcome["request_id"], merges[0].request_id.as_str());
    let response = merges[0].response.as_ref().expect("decided");
    assert_eq!(response.responder, "human");
    assert_eq!(response.body.approved(), Some(true));
}

/// The SDK's `set_model` and `set_permission_mode` between two queries of a client: the
/// second query's request goes to that model, and its edit runs in `acceptEdits`.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_sets_the_model_and_the_mode_of_its_next_query() {
    let dir = project(&[]);
    settings(
        dir.path(),
        "[models.\"claude-opus-4-5\"]\nprice_in = 5.0\nprice_out = 25.0\n",
    );
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![Block::text("First answer.")]),
        ScriptEntry::reply(
            "main",
            2,
            vec![tool(
                "Write",
                json!({"file_path": "out.txt", "content": "out\n"}),
            )],
        ),
        ScriptEntry::reply("main", 3, vec![Block::text("Written.")]),
    ])
    .await;
    run(scenario("set_model_and_mode", dir.path(), &fake)).await;
    let models: Vec<String> = fake
        .requests()
        .iter()
        .map(|r| r.body["model"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(models.len(), 3, "{models:?}");
    assert_ne!(models[0], "claude-opus-4-5");
    assert!(
        models[1..].iter().all(|m| m == "claude-opus-4-5"),
        "{models:?}"
    );
}

/// The SDK's hook callbacks run where muster runs hooks: a PreToolUse callback denies Bash
/// with a reason, which the model reads in the call's result; a callback's allow of a Write
/// narrows nothing (the mode's ask still goes to `can_use_tool`); a PostToolUse callback sees
/// each call that ran, with its id.
#[tokio::test(flavor = "multi_thread")]
async fn the_sdks_hook_callbacks_deny_a_call_with_a_reason_and_see_each_call() {
    let dir = project(&[]);
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![tool("Bash", json!({"command": "ls"}))]),
        ScriptEntry::reply(
            "main",
            2,
            vec![tool(
                "Write",
                json!({"file_path": "out.txt", "content": "out\n"}),
            )],
        ),
        ScriptEntry::reply("main", 3, vec![tool("Glob", json!({"pattern": "*.md"}))]),
        ScriptEntry::reply("main", 4, vec![Block::text("Done.")]),
    ])
    .await;
    let outcome = run(scenario("hook_callbacks", dir.path(), &fake)).await;
    let requests = fake.requests();
    assert_eq!(requests.len(), 4, "{outcome}");
    // The model's second request carries the Bash call's refusal with the callback's reason.
    let results: Vec<&Value> = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|message| message["content"].as_array().into_iter().flatten())
        .filter(|block| block["type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0]["tool_use_id"], outcome["bash_id"]);
    let refusal = results[0]["content"].to_string();
    assert!(
        refusal.contains("No shell in this project: use Glob to list files."),
        "{refusal}"
    );
    assert!(
        outcome["glob_response"]
            .as_str()
            .is_some_and(|listing| listing.contains("README.md")),
        "{outcome}"
    );
    assert_eq!(outcome["init_session"], outcome["session_id"]);
    // The combined decision of the denied call is committed, as for a command hook.
    let db = rusqlite::Connection::open(dir.path().join(".muster/muster.db")).unwrap();
    let decisions: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM agent_records WHERE run_id = ?1 \
             AND body LIKE '%\"type\":\"hook_decision\"%'",
            [outcome["session_id"].as_str().unwrap()],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(decisions, 2, "Bash's deny and Write's allow");
}

/// `updatedPermissions` aimed at a settings file (`addRules`, `projectSettings`) writes no
/// file: the rule applies to the session from the next call, with one warning on stderr.
#[tokio::test(flavor = "multi_thread")]
async fn updated_permissions_aimed_at_a_settings_file_apply_to_the_session_only() {
    let dir = project(&[]);
    let fake = fake(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![tool("Bash", json!({"command": "touch a.txt"}))],
        ),
        ScriptEntry::reply(
            "main",
            2,
            vec![tool("Bash", json!({"command": "touch b.txt"}))],
        ),
        ScriptEntry::reply("main", 3, vec![Block::text("Touched.")]),
    ])
    .await;
    let outcome = run(scenario("session_rules", dir.path(), &fake)).await;
    assert_eq!(fake.requests().len(), 3, "{outcome}");
    assert!(!dir.path().join(".claude").exists(), "no settings file");
    let store = open_store(dir.path());
    let run_id = outcome["session_id"].as_str().unwrap();
    assert_eq!(
        store.run(run_id).await.unwrap().unwrap().status.as_str(),
        "completed"
    );
}

/// `set_permission_mode` during a running turn: the main agent switches at its next tool-call
/// boundary (one `mode` record, reason `set_permission_mode`), so the turn's next edit runs in
/// `acceptEdits` without asking.
#[tokio::test(flavor = "multi_thread")]
async fn set_permission_mode_mid_turn_applies_from_the_next_tool_call() {
    let dir = project(&[]);
    let write = |turn, name: &str| {
        ScriptEntry::reply(
            "main",
            turn,
            vec![tool(
                "Write",
                json!({"file_path": format!("{name}.txt"), "content": format!("{name}\n")}),
            )],
        )
    };
    let fake = fake(vec![
        write(1, "a"),
        write(2, "b"),
        ScriptEntry::reply("main", 3, vec![Block::text("Written.")]),
    ])
    .await;
    let outcome = run(scenario("mode_mid_turn", dir.path(), &fake)).await;
    let db = rusqlite::Connection::open(dir.path().join(".muster/muster.db")).unwrap();
    let modes: Vec<String> = db
        .prepare(
            "SELECT body FROM agent_records WHERE run_id = ?1 \
             AND body LIKE '%\"type\":\"mode\"%'",
        )
        .unwrap()
        .query_map([outcome["session_id"].as_str().unwrap()], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(modes.len(), 1, "{modes:?}");
    assert!(
        modes[0].contains("acceptEdits") && modes[0].contains("set_permission_mode"),
        "{modes:?}"
    );
}

/// A hook callback's `updatedInput` is decided by the engine again: a callback that allows a
/// Write while pointing it at a file a deny rule protects gets the call refused, and the
/// model reads the deny.
#[tokio::test(flavor = "multi_thread")]
async fn a_hook_callbacks_updated_input_is_decided_by_the_engine_again() {
    let dir = project(&[]);
    let fake = fake(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![tool(
                "Write",
                json!({"file_path": "out.txt", "content": "out\n"}),
            )],
        ),
        ScriptEntry::reply("main", 2, vec![Block::text("Refused, then.")]),
    ])
    .await;
    run(scenario("callback_updated_input", dir.path(), &fake)).await;
    let requests = fake.requests();
    let result = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|message| message["content"].as_array().into_iter().flatten())
        .find(|block| block["type"] == "tool_result")
        .cloned()
        .unwrap();
    assert_eq!(result["is_error"], true, "{result}");
    assert!(
        result["content"].to_string().contains("secret.txt"),
        "{result}"
    );
}

/// Failing callbacks: one that raises under `on_failure="block"` refuses its call (the model
/// reads why); one past its matcher's timeout is cancelled and decides nothing, so its call
/// runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_failing_hook_callback_blocks_under_on_failure_block_and_a_late_one_is_cancelled() {
    let dir = project(&[]);
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![tool("Bash", json!({"command": "ls"}))]),
        ScriptEntry::reply("main", 2, vec![tool("Glob", json!({"pattern": "*.md"}))]),
        ScriptEntry::reply("main", 3, vec![Block::text("Looked.")]),
    ])
    .await;
    let outcome = run(scenario("failing_callbacks", dir.path(), &fake)).await;
    let results = |request: usize| -> Vec<Value> {
        fake.requests()[request].body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|message| message["content"].as_array().cloned().unwrap_or_default())
            .filter(|block| block["type"] == "tool_result")
            .collect()
    };
    let refused = results(1);
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0]["is_error"], true, "{refused:?}");
    assert!(
        refused[0]["content"]
            .to_string()
            .contains("the guard's database is down"),
        "{refused:?}"
    );
    let listed = results(2);
    assert!(
        listed[1]["content"].to_string().contains("README.md"),
        "{listed:?}"
    );
    assert_eq!(outcome["cancelled"], json!(["Glob"]));
}

/// A teammate's call a hook callback deferred to the person is put to `can_use_tool` while
/// the team works; the program answers only after the run stopped awaiting it, and the same
/// prompt carries the run on with that answer to its end.
#[tokio::test(flavor = "multi_thread")]
async fn a_teammates_deferred_call_answered_after_the_run_stopped_is_carried_on() {
    use super::worktree_cli::{any_turn, repo};
    let dir = repo(
        "name = \"builders\"\nisolation = \"shared\"\n\n[[teammates]]\nname = \"one\"\n\
         definition = \"writer\"\nplan_mode_required = false\napprover = \"human\"\n",
        &[],
    );
    let fake = fake(vec![
        ScriptEntry::reply(
            "lead",
            1,
            vec![tool(
                "TaskCreate",
                json!({"subject": "part 0", "description": "Write your file."}),
            )],
        ),
        any_turn("lead", "Waiting for the team."),
        ScriptEntry::reply(
            "one",
            1,
            vec![tool(
                "Write",
                json!({"file_path": "one.txt", "content": "one\n"}),
            )],
        ),
        any_turn("one", "done"),
    ])
    .await;
    let outcome = run(scenario("team_answer_after_the_stop", dir.path(), &fake)).await;
    let store = open_store(dir.path());
    let run_id = outcome["session_id"].as_str().unwrap();
    assert_eq!(
        store.run(run_id).await.unwrap().unwrap().status.as_str(),
        "completed"
    );
    let asks: Vec<_> = store
        .requests(run_id)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.kind == muster_mailbox::MessageKind::PermissionRequest)
        .collect();
    assert_eq!(asks.len(), 1, "{asks:?}");
    let response = asks[0].response.as_ref().expect("decided");
    assert_eq!(response.responder, "human");
    assert_eq!(response.body.approved(), Some(true));
}
