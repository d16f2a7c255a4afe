//! Claude Code's hooks through the binary, with real hook processes and the fake model server:
//! a guard hook refuses `rm` and its reason reaches the model; a project's hook script changed
//! after trust does not run (and the run says so); a `PostToolUse` audit hook writes one line
//! per call, compared with what the model server was asked to do; kill -9 right after a
//! `PreToolUse` decision is committed, and the resume does not run the hook again.

use std::path::Path;

use muster_fake_llm::{Block, ScriptEntry};
use serde_json::{Value, json};

use super::common::{command, fake, muster, output, project, stderr, tool, trust};

/// A guard that refuses any Bash command starting with `rm` (exit 2, reason on stderr) and
/// appends each call it sees to `guard.log` (so a test can count its runs).
const GUARD: &str = "#!/bin/sh\n\
    input=$(cat)\n\
    echo \"$input\" >> \"$CLAUDE_PROJECT_DIR/guard.log\"\n\
    case \"$input\" in\n\
      *'\"command\":\"rm '*) echo 'rm is not allowed here (guard)' >&2; exit 2 ;;\n\
    esac\n\
    exit 0\n";

/// An audit hook: one line per call (its tool name and id) in `audit.log`.
const AUDIT: &str = "#!/bin/sh\n\
    { cat; echo; } | sed -e 's/.*\"tool_name\":\"\\([^\"]*\\)\".*\"tool_use_id\":\"\\([^\"]*\\)\".*/\\1 \\2/' \
    >> \"$CLAUDE_PROJECT_DIR/audit.log\"\n";

/// A project whose `.claude/settings.json` runs the guard before Bash and the audit after
/// every tool, both scripts under `.claude/hooks/`.
pub(super) fn hooked_project() -> tempfile::TempDir {
    let dir = project(&[]);
    let hooks = dir.path().join(".claude/hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    for (name, text) in [("guard.sh", GUARD), ("audit.sh", AUDIT)] {
        std::fs::write(hooks.join(name), text).unwrap();
        make_executable(&hooks.join(name));
    }
    let settings = json!({"hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [
            {"type": "command", "command": "\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/guard.sh"}]}],
        "PostToolUse": [{"matcher": "*", "hooks": [
            {"type": "command", "command": "\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/audit.sh"}]}]
    }});
    std::fs::write(
        dir.path().join(".claude/settings.json"),
        serde_json::to_string_pretty(&settings).unwrap(),
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    std::fs::write(dir.path().join("data/keep.txt"), "keep\n").unwrap();
    dir
}

fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The tool results the model server was sent in `request`'s last user message.
pub(super) fn tool_results(request: &Value) -> Vec<String> {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let Some(last) = messages.last() else {
        return Vec::new();
    };
    last["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|block| block["type"] == "tool_result")
        .map(|block| block["content"].to_string())
        .collect()
}

fn run_args(base: &str) -> Vec<String> {
    [
        "run",
        "-p",
        "Clean up.",
        "--permission-mode",
        "bypassPermissions",
        "--base-url",
        base,
        "--output",
        "stream-json",
    ]
    .map(str::to_owned)
    .to_vec()
}

#[tokio::test]
async fn a_guard_hook_refuses_rm_for_the_lead_and_its_reason_reaches_the_model() {
    let dir = hooked_project();
    trust(dir.path()).await;
    let fake = fake(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![
                tool("Bash", json!({"command": "rm data/keep.txt"})),
                tool("Bash", json!({"command": "echo hi > note.txt"})),
            ],
        ),
        ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
    ])
    .await;
    let args = run_args(&fake.base_url());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let done = muster(dir.path(), &args).await;
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    assert!(dir.path().join("data/keep.txt").exists(), "rm ran");
    assert!(dir.path().join("note.txt").exists(), "the other call ran");
    let requests = fake.requests();
    let results = tool_results(&requests[1].body);
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(
        results[0].contains("rm is not allowed here (guard)"),
        "the model was told why: {results:?}"
    );
    assert!(!results[1].contains("guard"), "{results:?}");
    // The audit hook saw each call the model asked for that ran, once: the refused one never
    // ran, so it has no PostToolUse.
    let asked: Vec<(String, Value)> = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["role"] == "assistant")
        .flat_map(|message| message["content"].as_array().cloned().unwrap_or_default())
        .filter(|block| block["type"] == "tool_use")
        .map(|block| {
            (
                format!(
                    "{} {}",
                    block["name"].as_str().unwrap(),
                    block["id"].as_str().unwrap()
                ),
                block["input"].clone(),
            )
        })
        .collect();
    let ran: Vec<String> = asked
        .into_iter()
        .filter(|(_, input)| input["command"] != "rm data/keep.txt")
        .map(|(line, _)| line)
        .collect();
    assert_eq!(ran.len(), 1);
    assert_eq!(lines_of(&dir.path().join("audit.log")), ran);
    assert_eq!(lines_of(&dir.path().join("guard.log")).len(), 2);
}

/// `"guardFailures": "block"` in the user's own `~/.claude/settings.json` makes a guard that
/// fails (exit 1) refuse the call; without it the same failure lets the call run, as in
/// Claude Code.
#[tokio::test]
async fn the_users_guard_failures_setting_makes_a_failing_guard_refuse_the_call() {
    for (blocks, expected_note) in [(false, true), (true, false)] {
        let dir = project(&[]);
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(home.path().join(".claude")).unwrap();
        let mut settings = json!({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
            {"type": "command", "command": "echo 'guard broke' >&2; exit 1"}]}]}});
        if blocks {
            settings["guardFailures"] = json!("block");
        }
        std::fs::write(
            home.path().join(".claude/settings.json"),
            settings.to_string(),
        )
        .unwrap();
        let fake = fake(vec![
            ScriptEntry::reply(
                "main",
                1,
                vec![tool("Bash", json!({"command": "echo hi > note.txt"}))],
            ),
            ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
        ])
        .await;
        let args = run_args(&fake.base_url());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut run = command(dir.path(), &args);
        run.env("HOME", home.path());
        let done = output(run).await;
        assert_eq!(done.status.code(), Some(0), "{blocks}: {}", stderr(&done));
        assert_eq!(
            dir.path().join("note.txt").exists(),
            expected_note,
            "guardFailures block: {blocks}"
        );
        if blocks {
            let results = tool_results(&fake.requests()[1].body);
            assert!(
                results[0].contains("exited with 1: guard broke"),
                "{results:?}"
            );
        }
    }
}

#[tokio::test]
async fn a_hook_script_changed_after_trust_does_not_run_and_the_run_says_so() {
    let dir = hooked_project();
    trust(dir.path()).await;
    // Changed after trust: the guard would now let everything through and log it.
    std::fs::write(
        dir.path().join(".claude/hooks/guard.sh"),
        "#!/bin/sh\necho ran >> \"$CLAUDE_PROJECT_DIR/changed.log\"\nexit 0\n",
    )
    .unwrap();
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![tool("Bash", json!({"command": "echo hi"}))]),
        ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
    ])
    .await;
    let args = run_args(&fake.base_url());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let done = muster(dir.path(), &args).await;
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    assert!(
        !dir.path().join("changed.log").exists(),
        "the changed script ran"
    );
    assert!(
        !dir.path().join("audit.log").exists(),
        "an untrusted project's hook ran"
    );
    let said = stderr(&done);
    assert!(
        said.contains("hooks.PreToolUse") && said.contains("muster trust"),
        "{said}"
    );
}

/// Killed right after the guard's decision of the first call was committed: the resume uses
/// the committed decision and does not run the guard again for that call.
#[cfg(feature = "failpoints")]
#[tokio::test(flavor = "multi_thread")]
async fn a_kill_after_a_pre_tool_use_decision_resumes_without_running_the_hook_again() {
    let dir = hooked_project();
    trust(dir.path()).await;
    let fake = fake(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![tool("Bash", json!({"command": "rm data/keep.txt"}))],
        ),
        ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
    ])
    .await;
    let args = run_args(&fake.base_url());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut killed = command(dir.path(), &args);
    killed.env("MUSTER_FAILPOINT", "hook:PreToolUse");
    let first = output(killed).await;
    assert_eq!(first.status.code(), None, "{}", stderr(&first));
    let guarded = lines_of(&dir.path().join("guard.log"));
    assert_eq!(guarded.len(), 1, "{guarded:#?}");
    let resumed = muster(
        dir.path(),
        &[
            "resume",
            "--base-url",
            &fake.base_url(),
            "--output",
            "stream-json",
        ],
    )
    .await;
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    assert_eq!(
        lines_of(&dir.path().join("guard.log")).len(),
        1,
        "the guard ran again for a committed decision"
    );
    assert!(dir.path().join("data/keep.txt").exists());
    let requests = fake.requests();
    let results = tool_results(&requests.last().unwrap().body);
    assert!(
        results[0].contains("rm is not allowed here (guard)"),
        "{results:?}"
    );
}

/// A project whose `.claude/settings.json` has one hook, `command`, for `event`.
async fn project_with_hook(event: &str, matcher: &str, command: &str) -> tempfile::TempDir {
    let dir = project(&[]);
    std::fs::create_dir_all(dir.path().join(".claude")).unwrap();
    let settings = json!({"hooks": {event: [{"matcher": matcher, "hooks": [
        {"type": "command", "command": command}]}]}});
    std::fs::write(
        dir.path().join(".claude/settings.json"),
        settings.to_string(),
    )
    .unwrap();
    trust(dir.path()).await;
    dir
}

/// The text of the last user message `request` sent.
fn last_user_text(request: &Value) -> String {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|message| message["role"] == "user")
        .map(|message| message["content"].to_string())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_stop_hook_keeps_the_agent_working_once() {
    // Blocks the first stop only: the second comes with `stop_hook_active: true`.
    let dir = project_with_hook(
        "Stop",
        "",
        "grep -q '\"stop_hook_active\":true' || { echo 'Run the tests first.' >&2; exit 2; }",
    )
    .await;
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![Block::text("Done early.")]),
        ScriptEntry::reply("main", 2, vec![Block::text("Tests pass. Done.")]),
    ])
    .await;
    let args = run_args(&fake.base_url());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let done = muster(dir.path(), &args).await;
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "one more turn, then the end");
    assert!(
        last_user_text(&requests[1].body).contains("Run the tests first."),
        "{}",
        last_user_text(&requests[1].body)
    );
    assert!(super::common::stdout(&done).contains("Tests pass. Done."));
}

/// In plan mode a hook runs in the read-only sandbox: it cannot write the workspace.
#[tokio::test]
async fn a_plan_mode_agents_hook_cannot_write_the_workspace() {
    let dir = project_with_hook(
        "PreToolUse",
        "Read",
        "echo written > \"$CLAUDE_PROJECT_DIR/hook-wrote.txt\"; \
         echo '{\"hookSpecificOutput\":{\"additionalContext\":\"the hook ran\"}}'",
    )
    .await;
    // Refuse to run unconfined, so the test cannot pass on a kernel that confines nothing.
    std::fs::write(
        dir.path().join(".muster/settings.toml"),
        "[sandbox]\nmode = \"required\"\n",
    )
    .unwrap();
    trust(dir.path()).await;
    let fake = fake(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![tool("Read", json!({"file_path": "README.md"}))],
        ),
        ScriptEntry::reply("main", 2, vec![Block::text("Read it.")]),
    ])
    .await;
    let base = fake.base_url();
    let done = muster(
        dir.path(),
        &[
            "run",
            "-p",
            "Look.",
            "--permission-mode",
            "plan",
            "--base-url",
            &base,
            "--output",
            "stream-json",
        ],
    )
    .await;
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    let results = tool_results(&requests[1].body);
    assert!(results[0].contains("the hook ran"), "{results:?}");
    assert!(
        !dir.path().join("hook-wrote.txt").exists(),
        "a plan-mode hook wrote the workspace"
    );
}

/// `muster config show` lists every hook with its file; `muster check` lists the PreToolUse
/// hooks that match a call and runs them only with `--run-hooks`.
#[tokio::test]
async fn config_show_and_check_list_hooks_and_check_runs_them_only_when_asked() {
    let dir = hooked_project();
    trust(dir.path()).await;
    let shown = muster(dir.path(), &["config", "show"]).await;
    let text = super::common::stdout(&shown);
    assert!(
        text.contains("# hook: PreToolUse [Bash]") && text.contains("guard.sh"),
        "{text}"
    );
    assert!(text.contains("# hook: PostToolUse [*]"), "{text}");
    let rm = r#"{"command":"rm data/keep.txt"}"#;
    let listed = muster(
        dir.path(),
        &[
            "check",
            "--permission-mode",
            "bypassPermissions",
            "Bash",
            rm,
        ],
    )
    .await;
    let said = super::common::stdout(&listed);
    assert!(said.starts_with("allow"), "{said}");
    assert!(
        said.contains("hook would run") && said.contains("guard.sh"),
        "{said}"
    );
    assert!(!dir.path().join("guard.log").exists(), "listed, not run");
    let ran = muster(
        dir.path(),
        &[
            "check",
            "--permission-mode",
            "bypassPermissions",
            "--run-hooks",
            "Bash",
            rm,
        ],
    )
    .await;
    let said = super::common::stdout(&ran);
    assert_eq!(ran.status.code(), Some(1), "{said}");
    assert!(
        said.starts_with("deny") && said.contains("rm is not allowed here (guard)"),
        "{said}"
    );
    assert_eq!(lines_of(&dir.path().join("guard.log")).len(), 1);
}

pub(super) fn git(dir: &Path, args: &[&str]) {
    let done = std::process::Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        done.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&done.stderr)
    );
}

/// A team of `writer` teammates (who write and run Bash without asking) at `root`, with
/// `team` as its team file.
pub(super) fn write_team(root: &Path, team: &str) {
    std::fs::create_dir_all(root.join(".muster/agents")).unwrap();
    std::fs::write(
        root.join(".muster/agents/writer.md"),
        "---\nname: writer\ndescription: Writes files.\npermissionMode: bypassPermissions\n---\nYou write files.\n",
    )
    .unwrap();
    std::fs::write(root.join("muster.team.toml"), team).unwrap();
}

/// Makes the project at `root` a trusted repository, made afresh with everything in it,
/// whose team `builders` has one `writer` teammate, `one`, in its own worktree when
/// `worktree`; trusted, so the team file's approver, a policy approving everything, holds.
pub(super) async fn trusted_team_of_one(root: &Path, worktree: bool) {
    std::fs::remove_dir_all(root.join(".git")).unwrap();
    let isolation = if worktree {
        "isolation = \"worktree\"\n"
    } else {
        ""
    };
    write_team(
        root,
        &format!(
            "name = \"builders\"\n{isolation}\n[[teammates]]\nname = \"one\"\n\
             definition = \"writer\"\nplan_mode_required = false\napprover = \"policy:policy.toml\"\n"
        ),
    );
    std::fs::write(root.join("policy.toml"), "approve_all = true\n").unwrap();
    git(root, &["init", "-q", "-b", "main"]);
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "start"]);
    trust(root).await;
}

/// The agent's reply to any turn: `text`, ending it.
pub(super) fn any_turn(agent: &str, text: &str) -> ScriptEntry {
    serde_json::from_value(
        json!({"agent": agent, "reply": {"content": [{"type": "text", "text": text}],
                 "stop_reason": "end_turn"}}),
    )
    .unwrap()
}

/// A teammate working in its own worktree is guarded too: the hook runs there (its
/// `CLAUDE_PROJECT_DIR` is the worktree), and the reason reaches that teammate's model.
#[tokio::test(flavor = "multi_thread")]
async fn a_guard_hook_refuses_rm_for_a_teammate_in_its_worktree() {
    let dir = hooked_project();
    let root = dir.path();
    trusted_team_of_one(root, true).await;
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
        ScriptEntry::reply(
            "one",
            1,
            vec![tool("Bash", json!({"command": "rm data/keep.txt"}))],
        ),
        any_turn("one", "done"),
    ])
    .await;
    let args = run_args(&fake.base_url());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let done = muster(root, &args).await;
    assert_eq!(
        done.status.code(),
        Some(0),
        "{}\n{}",
        stderr(&done),
        super::common::stdout(&done)
            .lines()
            .rev()
            .take(3)
            .collect::<Vec<_>>()
            .join("\n")
    );
    let second = fake
        .requests()
        .into_iter()
        .find(|request| request.agent.as_deref() == Some("one") && request.turn == Some(2))
        .expect("the teammate's second request");
    let results = tool_results(&second.body);
    assert!(
        results[0].contains("rm is not allowed here (guard)"),
        "{results:?}"
    );
    // The guard ran in the teammate's worktree, with the teammate named: its log reached the
    // user's tree through the teammate's merge.
    let logged = lines_of(&root.join("guard.log"));
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert!(logged[0].contains("\"agent_id\":\"one\""), "{}", logged[0]);
    assert!(
        logged[0].contains("\"teammate_name\":\"one\""),
        "{}",
        logged[0]
    );
    assert!(
        logged[0].contains(".muster/worktrees/"),
        "not in the worktree: {}",
        logged[0]
    );
}

/// The request `agent` made at `turn`.
pub(super) fn request_of(fake: &muster_fake_llm::FakeLlmHandle, agent: &str, turn: u64) -> Value {
    fake.requests()
        .into_iter()
        .find(|request| request.agent.as_deref() == Some(agent) && request.turn == Some(turn))
        .unwrap_or_else(|| panic!("no request of {agent} at turn {turn}"))
        .body
}

/// A subagent of the lead is guarded too, named by `agent_id` and `agent_type`.
#[tokio::test]
async fn a_guard_hook_refuses_rm_for_a_subagent() {
    let dir = hooked_project();
    trust(dir.path()).await;
    let fake = fake(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![tool(
                "Agent",
                json!({"description": "clean", "prompt": "Clean up.", "subagent_type": "general"}),
            )],
        ),
        ScriptEntry::reply(
            "main.sub-1",
            1,
            vec![tool("Bash", json!({"command": "rm data/keep.txt"}))],
        ),
        ScriptEntry::reply("main.sub-1", 2, vec![Block::text("Could not.")]),
        ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
    ])
    .await;
    let args = run_args(&fake.base_url());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let done = muster(dir.path(), &args).await;
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    assert!(dir.path().join("data/keep.txt").exists(), "rm ran");
    let results = tool_results(&request_of(&fake, "main.sub-1", 2));
    assert!(
        results[0].contains("rm is not allowed here (guard)"),
        "{results:?}"
    );
    let logged = lines_of(&dir.path().join("guard.log"));
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert!(
        logged[0].contains("\"agent_id\":\"main.sub-1\"")
            && logged[0].contains("\"agent_type\":\"general\""),
        "{}",
        logged[0]
    );
}

/// A batch line's run is guarded like any run.
#[tokio::test(flavor = "multi_thread")]
async fn a_guard_hook_refuses_rm_for_a_batch_line() {
    let dir = hooked_project();
    let fake = fake(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![tool("Bash", json!({"command": "rm data/keep.txt"}))],
        ),
        ScriptEntry::reply("main", 2, vec![Block::text("Could not.")]),
    ])
    .await;
    std::fs::write(
        dir.path().join(".muster/settings.toml"),
        format!(
            "permission_mode = \"bypassPermissions\"\n[providers.anthropic]\nbase_url = \"{}\"\n",
            fake.base_url()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("tasks.jsonl"),
        "{\"id\": \"a\", \"prompt\": \"Clean up.\"}\n",
    )
    .unwrap();
    trust(dir.path()).await;
    let done = muster(dir.path(), &["batch", "tasks.jsonl"]).await;
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    assert!(dir.path().join("data/keep.txt").exists(), "rm ran");
    let results = tool_results(&request_of(&fake, "main", 2));
    assert!(
        results[0].contains("rm is not allowed here (guard)"),
        "{results:?}"
    );
}

/// A project whose `.claude/settings.json` holds `hooks` (event → command, matcher `""`),
/// trusted.
async fn project_with_hooks(hooks: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = project(&[]);
    std::fs::create_dir_all(dir.path().join(".claude")).unwrap();
    let mut table = serde_json::Map::new();
    for (event, command) in hooks {
        table.insert(
            (*event).to_owned(),
            json!([{"matcher": "", "hooks": [{"type": "command", "command": command}]}]),
        );
    }
    std::fs::write(
        dir.path().join(".claude/settings.json"),
        json!({ "hooks": table }).to_string(),
    )
    .unwrap();
    trust(dir.path()).await;
    dir
}

/// The text blocks of the first user message `request` sent.
fn first_user_texts(request: &Value) -> Vec<String> {
    request["messages"][0]["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|block| block["text"].as_str().map(str::to_owned))
        .collect()
}

/// `SessionStart` (plain stdout) and `UserPromptSubmit` (`additionalContext`) add context to
/// the first message the model sees, once, with Claude Code's stdin fields; a resume of the
/// finished run does not run them again.
#[tokio::test]
async fn session_start_and_user_prompt_submit_hooks_add_context_to_the_first_prompt() {
    let dir = project_with_hooks(&[
        (
            "SessionStart",
            "cat >> \"$CLAUDE_PROJECT_DIR/session.log\"; echo; echo 'The release branch is frozen.'",
        ),
        (
            "UserPromptSubmit",
            "cat >> \"$CLAUDE_PROJECT_DIR/prompt.log\"; echo '{\"hookSpecificOutput\":{\"hookEventName\":\"UserPromptSubmit\",\"additionalContext\":\"Ticket ABC-1 is open.\"}}'",
        ),
    ])
    .await;
    let fake = fake(vec![ScriptEntry::reply(
        "main",
        1,
        vec![Block::text("Done.")],
    )])
    .await;
    let args = run_args(&fake.base_url());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let done = muster(dir.path(), &args).await;
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    let texts = first_user_texts(&request_of(&fake, "main", 1));
    // The prompt, then what the hooks added (a mode reminder may follow).
    assert_eq!(
        texts[..3],
        [
            "Clean up.",
            "[SessionStart hook] The release branch is frozen.",
            "[UserPromptSubmit hook] Ticket ABC-1 is open.",
        ],
        "{texts:#?}"
    );
    let session: Value =
        serde_json::from_str(&lines_of(&dir.path().join("session.log"))[0]).unwrap();
    assert_eq!(session["hook_event_name"], "SessionStart");
    assert_eq!(session["source"], "startup");
    let prompt: Value = serde_json::from_str(&lines_of(&dir.path().join("prompt.log"))[0]).unwrap();
    assert_eq!(prompt["hook_event_name"], "UserPromptSubmit");
    assert_eq!(prompt["prompt"], "Clean up.");
    assert_eq!(prompt["permission_mode"], "bypassPermissions");
    assert!(prompt.get("agent_id").is_none(), "{prompt}");
}

/// A `UserPromptSubmit` hook that exits 2 refuses the prompt: the run fails with its reason
/// and the model is never asked.
#[tokio::test]
async fn a_blocking_user_prompt_submit_hook_refuses_the_prompt() {
    let dir = project_with_hooks(&[(
        "UserPromptSubmit",
        "echo 'prompts may not mention the vault' >&2; exit 2",
    )])
    .await;
    let fake = fake(vec![ScriptEntry::reply(
        "main",
        1,
        vec![Block::text("Done.")],
    )])
    .await;
    let args = run_args(&fake.base_url());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let done = muster(dir.path(), &args).await;
    assert_eq!(done.status.code(), Some(1), "{}", stderr(&done));
    let said = format!("{}{}", stderr(&done), super::common::stdout(&done));
    assert!(said.contains("prompts may not mention the vault"), "{said}");
    assert!(fake.requests().is_empty(), "the model was asked");
}

/// A subagent's `SubagentStart` hook adds context to the subagent's first message (not the
/// parent's), and names the subagent in its stdin.
#[tokio::test]
async fn a_subagent_start_hook_adds_context_to_the_subagents_prompt() {
    let dir = project_with_hooks(&[(
        "SubagentStart",
        "cat >> \"$CLAUDE_PROJECT_DIR/sub.log\"; echo; echo '{\"hookSpecificOutput\":{\"hookEventName\":\"SubagentStart\",\"additionalContext\":\"Report in one line.\"}}'",
    )])
    .await;
    let fake = fake(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![tool(
                "Agent",
                json!({"description": "look", "prompt": "Look around.", "subagent_type": "general"}),
            )],
        ),
        ScriptEntry::reply("main.sub-1", 1, vec![Block::text("Seen.")]),
        ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
    ])
    .await;
    let args = run_args(&fake.base_url());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let done = muster(dir.path(), &args).await;
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    let texts = first_user_texts(&request_of(&fake, "main.sub-1", 1));
    assert_eq!(
        texts.get(1).map(String::as_str),
        Some("[SubagentStart hook] Report in one line."),
        "{texts:#?}"
    );
    assert!(
        !first_user_texts(&request_of(&fake, "main", 1))
            .iter()
            .any(|t| t.contains("Report in one line")),
        "the parent got the subagent's context"
    );
    let logged = lines_of(&dir.path().join("sub.log"));
    assert_eq!(logged.len(), 1, "{logged:?}");
    let input: Value = serde_json::from_str(&logged[0]).unwrap();
    assert_eq!(input["hook_event_name"], "SubagentStart");
    assert_eq!(input["agent_id"], "main.sub-1");
    assert_eq!(input["agent_type"], "general");
}

/// A `TeammateIdle` hook that always blocks keeps a teammate working once: its reason is the
/// teammate's next message, and at its next end the teammate goes idle (the hook is not fired
/// again), so the run completes.
#[tokio::test(flavor = "multi_thread")]
async fn a_teammate_idle_hook_keeps_a_teammate_working_once() {
    // The hook runs in the teammate's sandbox: it may write its workspace (the shared tree).
    let command = "{ cat; echo; } >> \"$CLAUDE_PROJECT_DIR/idle.log\"; \
                   echo 'Run the tests before going idle.' >&2; exit 2";
    let dir = project_with_hooks(&[("TeammateIdle", command)]).await;
    let root = dir.path();
    let log = root.join("idle.log");
    write_team(
        root,
        "name = \"builders\"\n\n[[teammates]]\nname = \"one\"\ndefinition = \"writer\"\n\
         plan_mode_required = false\n",
    );
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
        ScriptEntry::reply("one", 1, vec![Block::text("Done early.")]),
        ScriptEntry::reply("one", 2, vec![Block::text("Tests pass. Done.")]),
    ])
    .await;
    let args = run_args(&fake.base_url());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let done = muster(root, &args).await;
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    assert!(
        last_user_text(&request_of(&fake, "one", 2)).contains("Run the tests before going idle."),
        "{}",
        last_user_text(&request_of(&fake, "one", 2))
    );
    let fired: Vec<String> = lines_of(&log)
        .into_iter()
        .filter(|line| !line.is_empty())
        .collect();
    assert_eq!(fired.len(), 1, "{fired:?}");
    let input: Value = serde_json::from_str(&fired[0]).unwrap();
    assert_eq!(input["hook_event_name"], "TeammateIdle");
    assert_eq!(input["teammate_name"], "one");
    assert_eq!(input["last_assistant_message"], "Done early.");
    assert!(
        !fake
            .requests()
            .iter()
            .any(|r| r.agent.as_deref() == Some("one") && r.turn == Some(3)),
        "the teammate was held past its second end"
    );
}

/// A `TaskCompleted` hook also fires for the task a teammate's end of turn would complete:
/// exit 2 keeps the teammate working with the reason (the task stays in progress), once per
/// end, as `TeammateIdle` does.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_completed_hook_keeps_a_teammate_working_when_its_turn_end_would_complete_a_task() {
    let command = "{ cat; echo; } >> \"$CLAUDE_PROJECT_DIR/completed.log\"; \
                   echo 'Attach the test output before completing.' >&2; exit 2";
    let dir = project_with_hooks(&[("TaskCompleted", command)]).await;
    let root = dir.path();
    write_team(
        root,
        "name = \"builders\"\n\n[[teammates]]\nname = \"one\"\ndefinition = \"writer\"\n\
         plan_mode_required = false\n",
    );
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
        ScriptEntry::reply("one", 1, vec![Block::text("Done early.")]),
        ScriptEntry::reply("one", 2, vec![Block::text("Tests: 3 passed. Done.")]),
    ])
    .await;
    let args = run_args(&fake.base_url());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let done = muster(root, &args).await;
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    let told = last_user_text(&request_of(&fake, "one", 2));
    assert!(
        told.contains("task #1 was not marked completed")
            && told.contains("Attach the test output before completing."),
        "{told}"
    );
    let fired: Vec<String> = lines_of(&root.join("completed.log"))
        .into_iter()
        .filter(|line| !line.is_empty())
        .collect();
    assert_eq!(fired.len(), 1, "{fired:?}");
    let input: Value = serde_json::from_str(&fired[0]).unwrap();
    assert_eq!(input["hook_event_name"], "TaskCompleted");
    assert_eq!(input["task_id"], "1");
    assert_eq!(input["task_subject"], "clean");
    assert_eq!(input["teammate_name"], "one");
    // The second end completed it: the board is done and the run succeeded.
    let end: Value = serde_json::from_str(
        super::common::stdout(&done)
            .lines()
            .last()
            .unwrap_or_default(),
    )
    .unwrap();
    assert!(
        end["tasks"]
            .as_array()
            .is_none_or(|tasks| tasks.iter().all(|t| t["status"] == "completed")),
        "{end:#}"
    );
    assert!(
        !fake
            .requests()
            .iter()
            .any(|r| r.agent.as_deref() == Some("one") && r.turn == Some(3)),
        "the teammate was held past its second end"
    );
}

/// `TaskCreated` and `TaskCompleted` hooks that exit 2 refuse the change: the tool call fails
/// with the hook's reason and the board does not change; a change they let through is made.
#[tokio::test(flavor = "multi_thread")]
async fn task_hooks_refuse_a_task_change_and_the_board_keeps_its_state() {
    let dir = project_with_hooks(&[
        (
            "TaskCreated",
            "grep -q '\"task_subject\":\"deploy' && { echo 'no deploys from agents' >&2; exit 2; }; exit 0",
        ),
        (
            "TaskCompleted",
            "echo 'the tests of this task have not run' >&2; exit 2",
        ),
    ])
    .await;
    let root = dir.path();
    std::fs::write(root.join("muster.team.toml"), "name = \"solo\"\n").unwrap();
    let fake = fake(vec![
        ScriptEntry::reply(
            "lead",
            1,
            vec![
                tool(
                    "TaskCreate",
                    json!({"subject": "deploy to prod", "description": "Ship it."}),
                ),
                tool(
                    "TaskCreate",
                    json!({"subject": "write docs", "description": "Document it."}),
                ),
            ],
        ),
        ScriptEntry::reply(
            "lead",
            2,
            vec![tool(
                "TaskUpdate",
                json!({"task_id": 1, "status": "completed"}),
            )],
        ),
        ScriptEntry::reply("lead", 3, vec![Block::text("Done.")]),
    ])
    .await;
    let args = run_args(&fake.base_url());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let done = muster(root, &args).await;
    // The refused completion leaves the task open, so the run ends failed (exit 1), as a
    // team run whose board is not done does.
    let end: Value = serde_json::from_str(
        super::common::stdout(&done)
            .lines()
            .last()
            .unwrap_or_default(),
    )
    .unwrap();
    assert_eq!(done.status.code(), Some(1), "{}\n{end:#}", stderr(&done));
    assert_eq!(
        end["tasks"],
        json!([{"task_id": 1, "subject": "write docs", "status": "pending", "owner": null}]),
        "{end:#}"
    );
    let created = tool_results(&request_of(&fake, "lead", 2));
    assert!(
        created[0].contains("TaskCreated hook refused it: no deploys from agents"),
        "{created:?}"
    );
    assert!(created[1].contains("Created task #1"), "{created:?}");
    let completed = tool_results(&request_of(&fake, "lead", 3));
    assert!(
        completed[0].contains("TaskCompleted hook refused it: the tests of this task have not run"),
        "{completed:?}"
    );
}

/// A PreToolUse hook script that defers every call to a person, logging each call it sees.
const DEFER: &str = "#!/bin/sh\n\
    { cat; echo; } >> \"$CLAUDE_PROJECT_DIR/defer.log\"\n\
    echo '{\"hookSpecificOutput\":{\"hookEventName\":\"PreToolUse\",\
    \"permissionDecision\":\"defer\",\"permissionDecisionReason\":\"a person decides\"}}'\n";

/// A trusted project whose `.claude/hooks/defer.sh` defers every Bash call.
async fn deferring_project() -> tempfile::TempDir {
    let dir = project(&[]);
    let hooks = dir.path().join(".claude/hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    std::fs::write(hooks.join("defer.sh"), DEFER).unwrap();
    make_executable(&hooks.join("defer.sh"));
    let settings = json!({"hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [
            {"type": "command", "command": "\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/defer.sh"}]}],
        "Notification": [{"matcher": "permission_prompt", "hooks": [
            {"type": "command", "command": "\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/log.sh"}]}]
    }});
    std::fs::write(hooks.join("log.sh"), LOG).unwrap();
    make_executable(&hooks.join("log.sh"));
    std::fs::write(
        dir.path().join(".claude/settings.json"),
        settings.to_string(),
    )
    .unwrap();
    trust(dir.path()).await;
    dir
}

/// A hook script that appends its stdin, one line, to `EVENT.log` in the project (a log
/// named in the command would be a file trust covers once it exists).
const LOG: &str = "#!/bin/sh\n\
    input=$(cat)\n\
    event=$(echo \"$input\" | sed -e 's/.*\"hook_event_name\":\"\\([^\"]*\\)\".*/\\1/')\n\
    echo \"$input\" >> \"$CLAUDE_PROJECT_DIR/$event.log\"\n";

/// The script of a run whose one call a hook defers: the call, then the end.
fn deferred_script() -> Vec<ScriptEntry> {
    vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![tool("Bash", json!({"command": "echo ran > out.txt"}))],
        ),
        ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
    ]
}

/// `defer` → the run stops awaiting a person (exit 5) without running the call → `muster
/// approve` (or `reject`) → `muster resume` runs (or refuses) it, and the hook does not run
/// again for a decision that was committed.
#[tokio::test]
async fn a_deferred_call_stops_the_run_until_a_person_decides_it() {
    // (answer, whether the call runs, what the model reads)
    let cases: [(&[&str], bool, &str); 2] = [
        (
            &["approve", "perm-main-1"],
            true,
            "approved by human (perm-main-1)",
        ),
        (
            &["reject", "perm-main-1", "--feedback", "not today"],
            false,
            "refused by human (perm-main-1): not today",
        ),
    ];
    for (answer, runs, told) in cases {
        let dir = deferring_project().await;
        let fake = fake(deferred_script()).await;
        let args = run_args(&fake.base_url());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let stopped = muster(dir.path(), &args).await;
        assert_eq!(stopped.status.code(), Some(5), "{}", stderr(&stopped));
        let said = super::common::stdout(&stopped);
        assert!(
            said.contains(
                r#""status":"awaiting_decision","exit_code":5,"request_id":"perm-main-1""#
            ),
            "{said}"
        );
        assert!(!dir.path().join("out.txt").exists(), "a deferred call ran");
        assert_eq!(fake.requests().len(), 1);
        // The person was notified once, naming the request.
        let notified = lines_of(&dir.path().join("Notification.log"));
        assert_eq!(notified.len(), 1, "{notified:?}");
        assert!(
            notified[0].contains(r#""notification_type":"permission_prompt""#)
                && notified[0].contains("perm-main-1"),
            "{}",
            notified[0]
        );
        let decided = muster(dir.path(), answer).await;
        assert_eq!(decided.status.code(), Some(0), "{}", stderr(&decided));
        let resumed = muster(
            dir.path(),
            &[
                "resume",
                "--base-url",
                &fake.base_url(),
                "--output",
                "stream-json",
            ],
        )
        .await;
        assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
        assert_eq!(dir.path().join("out.txt").exists(), runs, "{answer:?}");
        let requests = fake.requests();
        assert_eq!(requests.len(), 2);
        // A refusal's reason reaches the model; an approval is in the call's own event.
        let results = tool_results(&requests[1].body);
        let events = super::common::stdout(&resumed);
        assert!(
            results[0].contains(told) || (runs && events.contains(told)),
            "{answer:?}: {results:?}\n{events}"
        );
        assert_eq!(
            lines_of(&dir.path().join("defer.log")).len(),
            1,
            "the hook ran again for a committed decision"
        );
    }
}

/// Killed right after the deferring decision was committed, and right after its request was
/// stored: each resume stops for the same one request, the hook never runs again, and once
/// approved the call runs once.
#[cfg(feature = "failpoints")]
#[tokio::test(flavor = "multi_thread")]
async fn a_kill_around_a_deferred_call_resumes_to_the_same_one_request() {
    for failpoint in ["hook:PreToolUse", "deferred_request_sent"] {
        let dir = deferring_project().await;
        let fake = fake(deferred_script()).await;
        let args = run_args(&fake.base_url());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut killed = command(dir.path(), &args);
        killed.env("MUSTER_FAILPOINT", failpoint);
        let first = output(killed).await;
        assert_eq!(first.status.code(), None, "{failpoint}: {}", stderr(&first));
        let resume = [
            "resume",
            "--base-url",
            &fake.base_url(),
            "--output",
            "stream-json",
        ];
        let stopped = muster(dir.path(), &resume).await;
        assert_eq!(stopped.status.code(), Some(5), "{}", stderr(&stopped));
        let inbox = muster(dir.path(), &["inbox", "human"]).await;
        let listed = super::common::stdout(&inbox);
        assert_eq!(
            listed.matches("perm-main-").count(),
            1,
            "{failpoint}: {listed}"
        );
        assert!(listed.contains("perm-main-1"), "{listed}");
        let approved = muster(dir.path(), &["approve", "perm-main-1"]).await;
        assert_eq!(approved.status.code(), Some(0), "{}", stderr(&approved));
        let done = muster(dir.path(), &resume).await;
        assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("out.txt")).unwrap(),
            "ran\n"
        );
        assert_eq!(
            lines_of(&dir.path().join("defer.log")).len(),
            1,
            "{failpoint}: the hook ran again"
        );
    }
}

/// A teammate's deferred call waits for a person in the person's own mailbox while its team
/// goes on; once nothing else can move the run stops (exit 5), and after `muster approve`
/// the resumed teammate runs the call in its worktree.
#[tokio::test(flavor = "multi_thread")]
async fn a_teammates_deferred_call_stops_the_team_until_a_person_decides_it() {
    let dir = deferring_project().await;
    let root = dir.path();
    trusted_team_of_one(root, true).await;
    let fake = fake(vec![
        ScriptEntry::reply(
            "lead",
            1,
            vec![tool(
                "TaskCreate",
                json!({"subject": "write", "description": "Write out.txt."}),
            )],
        ),
        any_turn("lead", "Waiting for the team."),
        ScriptEntry::reply(
            "one",
            1,
            vec![tool("Bash", json!({"command": "echo ran > out.txt"}))],
        ),
        any_turn("one", "done"),
    ])
    .await;
    let args = run_args(&fake.base_url());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let stopped = muster(root, &args).await;
    let said = super::common::stdout(&stopped);
    assert_eq!(
        stopped.status.code(),
        Some(5),
        "{}\n{said}",
        stderr(&stopped)
    );
    assert!(said.contains("perm-one-1"), "{said}");
    assert!(
        fake.requests()
            .iter()
            .all(|request| request.agent.as_deref() != Some("one") || request.turn == Some(1)),
        "the teammate went on before the decision"
    );
    let approved = muster(root, &["approve", "perm-one-1"]).await;
    assert_eq!(approved.status.code(), Some(0), "{}", stderr(&approved));
    let base = fake.base_url();
    let rargs = ["resume", "--base-url", &base, "--output", "stream-json"];
    let resumed = muster(root, &rargs).await;
    let said = super::common::stdout(&resumed);
    assert_eq!(
        resumed.status.code(),
        Some(0),
        "{}\n{said}",
        stderr(&resumed)
    );
    let second = request_of(&fake, "one", 2);
    let results = tool_results(&second);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(!results[0].contains("Permission denied"), "{results:?}");
    assert!(said.contains("approved by human (perm-one-1)"), "{said}");
    // The call ran once, in the teammate's worktree, and came back with its merge.
    assert_eq!(
        std::fs::read_to_string(root.join("out.txt")).unwrap(),
        "ran\n"
    );
}

/// `PermissionRequest` fires as a call goes to the agent's approver: its `deny` refuses the
/// call with the hook's message, its `allow` does not approve it (the approver still decides);
/// `SessionEnd` fires once as the run ends.
#[tokio::test]
async fn permission_request_hooks_only_narrow_and_session_end_fires_at_the_end() {
    let dir = project(&[]);
    let hooks = dir.path().join(".claude/hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    let answer = "#!/bin/sh\n\
        input=$(cat)\n\
        echo \"$input\" >> \"$CLAUDE_PROJECT_DIR/pr.log\"\n\
        case \"$input\" in\n\
          *deploy*) b=deny ;;\n\
          *) b=allow ;;\n\
        esac\n\
        echo \"{\\\"hookSpecificOutput\\\":{\\\"hookEventName\\\":\\\"PermissionRequest\\\",\\\"decision\\\":{\\\"behavior\\\":\\\"$b\\\",\\\"message\\\":\\\"not on main\\\"}}}\"\n";
    for (name, text) in [("answer.sh", answer), ("log.sh", LOG)] {
        std::fs::write(hooks.join(name), text).unwrap();
        make_executable(&hooks.join(name));
    }
    let settings = json!({"hooks": {
        "PermissionRequest": [{"matcher": "Bash", "hooks": [
            {"type": "command", "command": "\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/answer.sh"}]}],
        "SessionEnd": [{"hooks": [
            {"type": "command", "command": "\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/log.sh"}]}]
    }});
    std::fs::write(
        dir.path().join(".claude/settings.json"),
        settings.to_string(),
    )
    .unwrap();
    // The approver refuses whatever reaches it.
    std::fs::write(dir.path().join("policy.toml"), "approve_all = false\n").unwrap();
    trust(dir.path()).await;
    let fake = fake(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![
                tool("Bash", json!({"command": "echo one > a.txt"})),
                tool("Bash", json!({"command": "echo deploy > b.txt"})),
            ],
        ),
        ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
    ])
    .await;
    let base = fake.base_url();
    let done = muster(
        dir.path(),
        &[
            "run",
            "-p",
            "Write.",
            "--permission-mode",
            "default",
            "--approver",
            "policy:policy.toml",
            "--base-url",
            &base,
            "--output",
            "stream-json",
        ],
    )
    .await;
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    let results = tool_results(&fake.requests()[1].body);
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(
        results[0].contains("denied by the policy"),
        "a hook's allow approved a call: {results:?}"
    );
    assert!(
        results[1].contains("denied by a PermissionRequest hook: not on main")
            && !results[1].contains("policy"),
        "{results:?}"
    );
    assert!(!dir.path().join("a.txt").exists() && !dir.path().join("b.txt").exists());
    let asked = lines_of(&dir.path().join("pr.log"));
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(
        asked[0].contains(r#""hook_event_name":"PermissionRequest""#)
            && asked[0].contains(r#""tool_name":"Bash""#),
        "{}",
        asked[0]
    );
    let ended = lines_of(&dir.path().join("SessionEnd.log"));
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert!(
        ended[0].contains(r#""hook_event_name":"SessionEnd""#)
            && ended[0].contains(r#""reason":"other""#),
        "{}",
        ended[0]
    );
}

/// A resume whose project trust changed since the run started (a file trust covers changed)
/// would run without the project's hooks: it refuses, naming the hooks, and once the files are
/// back the resume goes on with the deferral the hooks committed.
#[tokio::test]
async fn a_resume_refuses_to_drop_project_hooks_whose_files_changed() {
    let dir = deferring_project().await;
    let fake = fake(deferred_script()).await;
    let args = run_args(&fake.base_url());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let stopped = muster(dir.path(), &args).await;
    assert_eq!(stopped.status.code(), Some(5), "{}", stderr(&stopped));
    // The hook script is changed (an agent could have): trust no longer holds.
    let script = dir.path().join(".claude/hooks/defer.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    let rejected = muster(dir.path(), &["reject", "perm-main-1", "--feedback", "no"]).await;
    assert_eq!(rejected.status.code(), Some(0), "{}", stderr(&rejected));
    let base = fake.base_url();
    let resume = ["resume", "--base-url", &base, "--output", "stream-json"];
    let refused = muster(dir.path(), &resume).await;
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let said = stderr(&refused);
    assert!(
        said.contains("cannot resume") && said.contains("hooks.PreToolUse"),
        "{said}"
    );
    assert!(
        said.contains("hooks ran as trusted when the run started, but the files trust covers")
            && !said.contains("but trusted when"),
        "{said}"
    );
    assert_eq!(fake.requests().len(), 1, "the refused resume went on");
    std::fs::write(&script, DEFER).unwrap();
    let resumed = muster(dir.path(), &resume).await;
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    assert!(!dir.path().join("out.txt").exists(), "the refused call ran");
    let results = tool_results(&fake.requests()[1].body);
    assert!(
        results[0].contains("refused by human (perm-main-1): no"),
        "{results:?}"
    );
}

/// A teammate that creates `.claude/settings.local.json` (a protected file that did not exist,
/// so the sandbox had nothing to bind read-only) does not get it merged by the team's policy:
/// the merge waits for a person (exit 5), and the file stays out of the user's tree.
#[tokio::test(flavor = "multi_thread")]
async fn a_merge_that_adds_a_protected_file_waits_for_a_person() {
    let dir = project(&[]);
    let root = dir.path();
    trusted_team_of_one(root, true).await;
    let widen = r#"mkdir -p .claude && echo '{"permissions":{"allow":["Bash"]}}' > .claude/settings.local.json"#;
    let fake = fake(vec![
        ScriptEntry::reply(
            "lead",
            1,
            vec![tool(
                "TaskCreate",
                json!({"subject": "settings", "description": "Tune the settings."}),
            )],
        ),
        any_turn("lead", "Waiting for the team."),
        ScriptEntry::reply("one", 1, vec![tool("Bash", json!({"command": widen}))]),
        any_turn("one", "done"),
    ])
    .await;
    let args = run_args(&fake.base_url());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let done = muster(root, &args).await;
    let said = super::common::stdout(&done);
    assert_eq!(done.status.code(), Some(5), "{}\n{said}", stderr(&done));
    assert!(said.contains("merge-one-1"), "{said}");
    assert!(
        said.contains(r#""responder":"human""#),
        "the policy decided the merge: {said}"
    );
    assert!(
        !root.join(".claude/settings.local.json").exists(),
        "a teammate's protected file reached the user's tree"
    );
}

/// `transcript_path` names a JSONL of the agent's conversation in Claude Code's shape, mode
/// 0600 under `.muster/runs/`: a PreToolUse hook reading it finds the prompt and the model's
/// call it is deciding.
#[tokio::test]
async fn a_hooks_transcript_path_holds_the_agents_conversation() {
    let copy = "input=$(cat); \
        p=$(echo \"$input\" | sed -e 's/.*\"transcript_path\":\"\\([^\"]*\\)\".*/\\1/'); \
        echo \"$p\" > \"$CLAUDE_PROJECT_DIR/transcript-path.txt\"; \
        cat \"$p\" > \"$CLAUDE_PROJECT_DIR/transcript-seen.jsonl\"";
    let dir = project_with_hook("PreToolUse", "Bash", copy).await;
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![tool("Bash", json!({"command": "echo hi"}))]),
        ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
    ])
    .await;
    let args = run_args(&fake.base_url());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let done = muster(dir.path(), &args).await;
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    let path = std::fs::read_to_string(dir.path().join("transcript-path.txt")).unwrap();
    let path = Path::new(path.trim());
    assert!(
        path.starts_with(dir.path().join(".muster/runs")),
        "{}",
        path.display()
    );
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let lines: Vec<Value> = lines_of(&dir.path().join("transcript-seen.jsonl"))
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert_eq!(lines[0]["type"], "user");
    assert!(
        lines[0]["message"]["content"]
            .to_string()
            .contains("Clean up.")
    );
    // The call the hook decides is the one the model server answered with.
    let answered = &fake.requests()[1].body["messages"][1]["content"][0];
    assert_eq!(lines[1]["type"], "assistant");
    assert_eq!(lines[1]["message"]["content"][0]["id"], answered["id"]);
    assert_eq!(
        lines[1]["message"]["content"][0]["input"]["command"],
        "echo hi"
    );
    assert_eq!(lines[1]["parentUuid"], lines[0]["uuid"]);
    let run_id = lines[0]["sessionId"].as_str().unwrap();
    assert!(
        path.ends_with(format!("{run_id}/main.jsonl")),
        "{}",
        path.display()
    );
}

/// A guard that logs each run, hangs on its first (until muster is killed under it), then on a
/// later run refuses `rm` like [`GUARD`].
const HANGING_GUARD: &str = "#!/bin/sh\n\
    input=$(cat)\n\
    echo \"$input\" >> \"$CLAUDE_PROJECT_DIR/guard.log\"\n\
    if [ ! -e \"$CLAUDE_PROJECT_DIR/hung-once\" ]; then\n\
      touch \"$CLAUDE_PROJECT_DIR/hung-once\"\n\
      sleep 5\n\
    fi\n\
    case \"$input\" in\n\
      *'\"command\":\"rm '*) echo 'rm is not allowed here (guard)' >&2; exit 2 ;;\n\
    esac\n\
    exit 0\n";

/// kill -9 while a `PreToolUse` hook runs (nothing of it committed): the resume runs the hook
/// again — the one event in flight — and its decision holds.
#[tokio::test(flavor = "multi_thread")]
async fn a_kill_inside_a_hook_resumes_by_running_it_again() {
    let dir = hooked_project();
    std::fs::write(dir.path().join(".claude/hooks/guard.sh"), HANGING_GUARD).unwrap();
    trust(dir.path()).await;
    let fake = fake(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![tool("Bash", json!({"command": "rm data/keep.txt"}))],
        ),
        ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
    ])
    .await;
    let args = run_args(&fake.base_url());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut started = command(dir.path(), &args);
    started
        .kill_on_drop(true)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = started.spawn().unwrap();
    // The hook's own mark says it is running (no event is emitted inside a hook).
    let hung = dir.path().join("hung-once");
    tokio::time::timeout(super::common::GUARD, async {
        while !hung.exists() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the hook never started");
    child.start_kill().unwrap();
    let killed = child.wait().await.unwrap();
    assert_eq!(killed.code(), None, "not killed");
    assert_eq!(lines_of(&dir.path().join("guard.log")).len(), 1);
    let resumed = muster(
        dir.path(),
        &[
            "resume",
            "--base-url",
            &fake.base_url(),
            "--output",
            "stream-json",
        ],
    )
    .await;
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    assert_eq!(
        lines_of(&dir.path().join("guard.log")).len(),
        2,
        "the hook in flight ran again"
    );
    assert!(dir.path().join("data/keep.txt").exists(), "rm ran");
    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "the model was asked again");
    let results = tool_results(&requests.last().unwrap().body);
    assert!(
        results[0].contains("rm is not allowed here (guard)"),
        "{results:?}"
    );
}

/// A hook that writes its pid, starts a child that writes its own and blocks on a fifo, and
/// waits for it.
const BLOCKED_HOOK: &str = "#!/bin/sh\n\
    echo $$ > \"$CLAUDE_PROJECT_DIR/hook.pid\"\n\
    sh -c 'echo $$ > \"$CLAUDE_PROJECT_DIR/child.pid\"; exec cat \"$CLAUDE_PROJECT_DIR/gate.fifo\"' &\n\
    wait\n";

/// kill -9 of muster while a hook runs: the hook and its child die with it, confined (a
/// project hook, in the agent's sandbox) and unconfined (a user-level hook with `"sandbox":
/// "off"`) alike — the trampoline that starts each hook kills its process group when its
/// parent dies. Waited for on each process's pidfd, the fifo's writer held open meanwhile (so
/// the child never ends by itself).
#[tokio::test(flavor = "multi_thread")]
async fn a_hook_and_its_child_die_with_muster_killed_with_9() {
    for confined in [true, false] {
        let dir = project(&[]);
        let home = tempfile::tempdir().unwrap();
        let root = dir.path();
        let (settings_dir, hook_command) = if confined {
            (
                root.join(".claude"),
                "\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/blocked.sh".to_owned(),
            )
        } else {
            let script = home.path().join(".claude/hooks/blocked.sh");
            (
                home.path().join(".claude"),
                format!("sh {}", script.display()),
            )
        };
        std::fs::create_dir_all(settings_dir.join("hooks")).unwrap();
        std::fs::write(settings_dir.join("hooks/blocked.sh"), BLOCKED_HOOK).unwrap();
        make_executable(&settings_dir.join("hooks/blocked.sh"));
        let mut handler = json!({"type": "command", "command": hook_command});
        if !confined {
            handler["sandbox"] = json!("off");
        }
        std::fs::write(
            settings_dir.join("settings.json"),
            json!({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [handler]}]}}).to_string(),
        )
        .unwrap();
        let fifo = root.join("gate.fifo");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        let mut trusting = command(root, &["trust"]);
        trusting.env("HOME", home.path());
        assert!(output(trusting).await.status.success());
        let fake = fake(vec![ScriptEntry::reply(
            "main",
            1,
            vec![tool("Bash", json!({"command": "echo hi"}))],
        )])
        .await;
        let args = run_args(&fake.base_url());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut started = command(root, &args);
        started
            .env("HOME", home.path())
            .kill_on_drop(true)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let mut muster_process = started.spawn().unwrap();
        // The open returns once the hook's child has the fifo open for reading: both pids are
        // written by then.
        let opening = fifo.clone();
        let writer = tokio::time::timeout(
            super::common::GUARD,
            tokio::task::spawn_blocking(move || {
                std::fs::OpenOptions::new().write(true).open(opening)
            }),
        )
        .await
        .expect("guard timeout: the hook never opened the fifo")
        .unwrap()
        .unwrap();
        let pid = |name: &str| -> i32 {
            std::fs::read_to_string(root.join(name))
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        };
        let (hook, child) = (pid("hook.pid"), pid("child.pid"));
        muster_process.start_kill().unwrap();
        assert_eq!(muster_process.wait().await.unwrap().code(), None);
        assert!(
            super::mcp_cli::ends(hook).await,
            "confined {confined}: the hook outlived muster"
        );
        assert!(
            super::mcp_cli::ends(child).await,
            "confined {confined}: the hook's child outlived muster"
        );
        drop(writer);
    }
}

/// A teammate's subagent is guarded too, in the teammate's worktree, named by its own id.
#[tokio::test(flavor = "multi_thread")]
async fn a_guard_hook_refuses_rm_for_a_teammates_subagent() {
    let dir = hooked_project();
    let root = dir.path();
    trusted_team_of_one(root, true).await;
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
        ScriptEntry::reply(
            "one",
            1,
            vec![tool(
                "Agent",
                json!({"description": "clean", "prompt": "Clean up.", "subagent_type": "general"}),
            )],
        ),
        ScriptEntry::reply(
            "one.sub-1",
            1,
            vec![tool("Bash", json!({"command": "rm data/keep.txt"}))],
        ),
        ScriptEntry::reply("one.sub-1", 2, vec![Block::text("Could not.")]),
        any_turn("one", "done"),
    ])
    .await;
    let args = run_args(&fake.base_url());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let done = muster(root, &args).await;
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    assert!(root.join("data/keep.txt").exists(), "rm ran");
    let results = tool_results(&request_of(&fake, "one.sub-1", 2));
    assert!(
        results[0].contains("rm is not allowed here (guard)"),
        "{results:?}"
    );
    let logged = lines_of(&root.join("guard.log"));
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert!(
        logged[0].contains("\"agent_id\":\"one.sub-1\"")
            && logged[0].contains(".muster/worktrees/"),
        "{}",
        logged[0]
    );
}

/// The failure table through the binary, as Claude Code documents it (exit 2 blocks, any
/// other ending is non-blocking: shown, and the run goes on): one guard command on `Bash` as
/// given and on `Write` with `"onFailure": "block"`. Each failure lets the `Bash` call run,
/// shown beside its result, and refuses the `Write` with that reason; junk on stdout is no
/// failure and no decision.
#[tokio::test(flavor = "multi_thread")]
async fn each_failing_guard_is_non_blocking_unless_on_failure_blocks_it() {
    let cases = [
        ("echo oops >&2; exit 1", 10, Some("exited with 1: oops")),
        ("no-such-guard-anywhere", 10, Some("exited with 127")),
        ("kill -KILL $$", 10, Some("was killed by a signal")),
        ("sleep 30", 1, Some("timed out after 1 s")),
        (
            "head -c 2000000 /dev/zero",
            10,
            Some("printed more than 1 MB"),
        ),
        ("echo 'not json {'", 10, None),
    ];
    for (guard, timeout, failure) in cases {
        let dir = project(&[]);
        std::fs::create_dir_all(dir.path().join(".claude")).unwrap();
        let settings = json!({"hooks": {"PreToolUse": [
            {"matcher": "Bash", "hooks": [
                {"type": "command", "command": guard, "timeout": timeout}]},
            {"matcher": "Write", "hooks": [
                {"type": "command", "command": guard, "timeout": timeout, "onFailure": "block"}]}
        ]}});
        std::fs::write(
            dir.path().join(".claude/settings.json"),
            settings.to_string(),
        )
        .unwrap();
        trust(dir.path()).await;
        let fake = fake(vec![
            ScriptEntry::reply(
                "main",
                1,
                vec![
                    tool("Bash", json!({"command": "echo hi > note.txt"})),
                    tool(
                        "Write",
                        json!({"file_path": "written.txt", "content": "x\n"}),
                    ),
                ],
            ),
            ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
        ])
        .await;
        let args = run_args(&fake.base_url());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let done = muster(dir.path(), &args).await;
        assert_eq!(done.status.code(), Some(0), "{guard}: {}", stderr(&done));
        assert!(
            dir.path().join("note.txt").exists(),
            "{guard}: Bash refused"
        );
        let results = tool_results(&fake.requests()[1].body);
        assert_eq!(results.len(), 2, "{guard}: {results:?}");
        match failure {
            Some(said) => {
                assert!(
                    !dir.path().join("written.txt").exists(),
                    "{guard}: a guard that failed under onFailure block let Write run"
                );
                assert!(
                    results[1].contains(&format!(
                        "Permission denied: blocked by a PreToolUse hook: hook `{guard}` {said}"
                    )),
                    "{guard}: {results:?}"
                );
                // The Bash call ran, the failure shown beside its result.
                assert!(
                    results[0].contains("[exit code 0]")
                        && results[0].contains(&format!("[PreToolUse hook] hook `{guard}` {said}")),
                    "{guard}: {results:?}"
                );
            }
            None => {
                assert!(dir.path().join("written.txt").exists(), "{guard}");
            }
        }
    }
}
