//! Skills and slash commands through the real binary, on the fake model server (which logs
//! every request): a skill's body reaches the model only after its `Skill` call; a slash
//! command expands its arguments and its shell lines, a line plan mode refuses fails the
//! expansion, and a run killed mid-turn and resumed never runs a line again.

use std::path::Path;

use muster_fake_llm::{Block, Fault, ScriptEntry};
use serde_json::{Value, json};

use super::common::{GUARD, Running, command, fake, muster, project, stderr, stdout, tool};

const SKILL: &str = "---\nname: release\ndescription: Cut a release of this project\nallowed-tools: Bash(git tag:*)\n---\n# Release\nTag it: the secret step is PLUM-7731.\n";

fn write(dir: &Path, relative: &str, text: &str) {
    let path = dir.join(relative);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The text of every block of every message of a logged model request.
fn message_text(request: &Value) -> String {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| message["content"].to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|tool| tool["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The system prompt: a string, or the text of its blocks.
fn system_text(request: &Value) -> String {
    match &request["system"] {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|block| block["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_skills_body_reaches_the_model_only_after_its_skill_call() {
    let dir = project(&[]);
    write(dir.path(), ".claude/skills/release/SKILL.md", SKILL);
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![tool("Skill", json!({"skill": "release"}))]),
        ScriptEntry::reply("main", 2, vec![Block::text("Released.")]),
    ])
    .await;
    let base = fake.base_url();
    let output = muster(
        dir.path(),
        &[
            "run",
            "-p",
            "Cut the release.",
            "--base-url",
            &base,
            "--output",
            "json",
        ],
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stderr(&output).contains(
            "skill `release` sets `allowed-tools`, which muster shows and does not apply"
        ),
        "{}",
        stderr(&output)
    );
    let requests: Vec<Value> = fake
        .requests()
        .into_iter()
        .filter(|r| r.agent.as_deref() == Some("main"))
        .map(|r| r.body)
        .collect();
    assert_eq!(requests.len(), 2);
    let first = &requests[0];
    assert!(tool_names(first).contains(&"Skill".to_owned()));
    let system = system_text(first);
    assert!(
        system.contains("# Skills\n")
            && system.contains("- release: Cut a release of this project"),
        "{system}"
    );
    assert!(
        !system.contains("PLUM-7731"),
        "the body is not in the prompt"
    );
    assert!(!message_text(first).contains("PLUM-7731"));
    let second = message_text(&requests[1]);
    assert!(second.contains("PLUM-7731"), "{second}");
    assert!(
        second.contains("are not applied: your own tools and permissions hold"),
        "{second}"
    );

    // A project without skills sends what it always did: no `Skill`, no section.
    let plain = project(&[]);
    let other = super::common::fake(vec![ScriptEntry::reply(
        "main",
        1,
        vec![Block::text("Hi.")],
    )])
    .await;
    let other_base = other.base_url();
    let output = muster(
        plain.path(),
        &[
            "run",
            "-p",
            "Hello.",
            "--base-url",
            &other_base,
            "--output",
            "json",
        ],
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let request = &other.requests()[0].body;
    assert!(!tool_names(request).contains(&"Skill".to_owned()));
    assert!(!system_text(request).contains("# Skills"));
}

const REVIEW: &str = "---\ndescription: Review a file\nargument-hint: <file> [focus]\n---\nReview $1 with focus on $2 (all: $ARGUMENTS).\nLines so far: !`echo shell-ran >> ran.log; wc -l < ran.log`\nReadme: !`cat README.md`\n";

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn a_slash_command_expands_once_and_a_resume_after_a_kill_never_runs_its_lines_again() {
    let dir = project(&[]);
    write(dir.path(), ".claude/commands/code/review.md", REVIEW);
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![Block::text("Reviewed.")]).fault(Fault {
            hold: Some("answer".into()),
            ..Fault::default()
        }),
    ])
    .await;
    let base = fake.base_url();
    let listed = muster(dir.path(), &["commands"]).await;
    assert!(listed.status.success(), "{}", stderr(&listed));
    assert!(
        stdout(&listed).contains("/code:review <file> [focus]  (project: "),
        "{}",
        stdout(&listed)
    );
    let args = [
        "run",
        "-p",
        "/review src/lib.rs 'error paths'",
        "--permission-mode",
        "bypassPermissions",
        "--base-url",
        &base,
        "--output",
        "stream-json",
    ];
    let mut running = Running::spawn(command(dir.path(), &args));
    running
        .until("agent_started", |e| e["type"] == "agent_started")
        .await;
    tokio::time::timeout(GUARD, fake.gate_reached("answer", 1))
        .await
        .expect("the first turn is held");
    running.child.start_kill().unwrap();
    running.child.wait().await.unwrap();
    fake.open_gate("answer");
    let resumed = muster(dir.path(), &["resume", "--base-url", &base]).await;
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));

    let ran = std::fs::read_to_string(dir.path().join("ran.log")).unwrap();
    assert_eq!(ran, "shell-ran\n", "the shell line ran once");
    let requests = fake.requests();
    assert!(
        requests.len() >= 2,
        "the turn was asked before and after the kill"
    );
    for request in &requests {
        let text = message_text(&request.body);
        assert!(
            text.contains(
                "Review src/lib.rs with focus on error paths (all: src/lib.rs 'error paths')."
            ) && text.contains("Lines so far: 1")
                && text.contains("Readme: hello"),
            "{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shell_line_plan_mode_refuses_fails_the_expansion_and_starts_no_run() {
    let dir = project(&[]);
    write(dir.path(), ".claude/commands/review.md", REVIEW);
    let fake = fake(vec![ScriptEntry::reply("main", 1, vec![Block::text("x")])]).await;
    let base = fake.base_url();
    let output = muster(
        dir.path(),
        &[
            "run",
            "-p",
            "/review a.rs",
            "--permission-mode",
            "plan",
            "--base-url",
            &base,
        ],
    )
    .await;
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(
        err.contains(
            "/review: the line `!`echo shell-ran >> ran.log; wc -l < ran.log`` was not run"
        ) && err.contains("denied"),
        "{err}"
    );
    assert!(!dir.path().join("ran.log").exists());
    assert!(fake.requests().is_empty(), "no run started");

    // A read-only line expands in plan mode: the classifier proves `cat` read-only.
    write(
        dir.path(),
        ".claude/commands/readme.md",
        "Summarise: !`cat README.md`\n",
    );
    let output = muster(
        dir.path(),
        &[
            "run",
            "-p",
            "/readme",
            "--permission-mode",
            "plan",
            "--base-url",
            &base,
            "--output",
            "json",
        ],
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = message_text(&fake.requests()[0].body);
    assert!(text.contains("Summarise: hello"), "{text}");
}

/// A batch line's prompt names a command: it expands as `muster run -p` does (the project's
/// own mode, trusted), and running the batch again never runs its shell line again.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_line_expands_a_command_and_a_second_batch_runs_no_line_again() {
    let fake = fake(vec![ScriptEntry::reply(
        "main",
        1,
        vec![Block::text("Counted.")],
    )])
    .await;
    let dir = project(&[(
        ".muster/settings.toml",
        &format!(
            "permission_mode = \"bypassPermissions\"\n[providers.anthropic]\nbase_url = \"{}\"\n",
            fake.base_url()
        ),
    )]);
    write(
        dir.path(),
        ".claude/commands/count.md",
        "Count $ARGUMENTS: !`echo counted >> ran.log; wc -l < ran.log`\n",
    );
    std::fs::write(
        dir.path().join("tasks.jsonl"),
        "{\"id\": \"a\", \"prompt\": \"/count apples\"}\n",
    )
    .unwrap();
    super::common::trust(dir.path()).await;
    for _ in 0..2 {
        let output = muster(dir.path(), &["batch", "tasks.jsonl", "--out", "out.jsonl"]).await;
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    }
    assert_eq!(
        std::fs::read_to_string(dir.path().join("ran.log")).unwrap(),
        "counted\n"
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 1, "the second batch ran nothing");
    let text = message_text(&requests[0].body);
    assert!(text.contains("Count apples: 1"), "{text}");
}
