//! The Bash sandbox through the binary: real runs against `muster-fake-llm` whose Bash calls
//! run through `muster sandbox-exec` on the running kernel, and `[sandbox] mode = "required"`
//! on a kernel without Landlock (simulated under the `failpoints` feature, test builds only).

use std::path::Path;

use muster_fake_llm::{Block, FakeLlm, ScriptEntry};
use serde_json::{Value, json};

use super::common::{lines, muster, open_store, project, stderr, transcript};

fn bash(command: &str) -> Block {
    Block::tool_use("Bash", json!({ "command": command }))
}

/// The stored results of the main agent's Bash calls, in order.
async fn bash_results(dir: &Path, events: &[Value]) -> Vec<Value> {
    let run_id = events[0]["run_id"].as_str().unwrap();
    let store = open_store(dir);
    transcript(store.as_ref(), run_id, "main")
        .await
        .into_iter()
        .filter(|r| r["type"] == "tool_call" && r["tool"] == "Bash")
        .collect()
}

async fn run(dir: &Path, base: &str, mode: &str) -> std::process::Output {
    muster(
        dir,
        &[
            "run",
            "-p",
            "Work.",
            "--permission-mode",
            mode,
            "--base-url",
            base,
            "--output",
            "stream-json",
        ],
    )
    .await
}

/// `acceptEdits` with a `Bash` allow rule: a command that is not read-only runs in the
/// workspace-write profile — it writes the workspace, but not outside it (a path in the system
/// temporary directory), and not into `.muster/`, where the run's own store lives.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread")]
async fn accept_edits_bash_writes_the_workspace_but_not_outside_or_into_muster() {
    let dir = project(&[]);
    std::fs::write(
        dir.path().join(".muster/settings.toml"),
        "[permissions]\nallow = [\"Bash\"]\n",
    )
    .unwrap();
    // The user trusted the project: its allow rule applies.
    super::common::trust(dir.path()).await;
    let outside = tempfile::tempdir().unwrap();
    let escaped = outside.path().join("escaped.txt");
    let fake = FakeLlm::start(vec![
        ScriptEntry::reply("main", 1, vec![bash("echo inside > inside.txt")]),
        ScriptEntry::reply(
            "main",
            2,
            vec![bash(&format!("echo out > {}", escaped.display()))],
        ),
        ScriptEntry::reply("main", 3, vec![bash("echo forged > .muster/forged.md")]),
        ScriptEntry::reply("main", 4, vec![Block::text("Done.")]),
    ])
    .await
    .unwrap();
    let output = run(dir.path(), &fake.base_url(), "acceptEdits").await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let results = bash_results(dir.path(), &lines(&output)).await;
    assert_eq!(results.len(), 3, "{results:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("inside.txt")).unwrap(),
        "inside\n"
    );
    assert!(!escaped.exists(), "the command wrote outside the workspace");
    assert!(!dir.path().join(".muster/forged.md").exists());
    for refused in &results[1..] {
        let content = refused["content"].as_str().unwrap_or_default();
        assert!(
            content.contains("workspace-write sandbox") && content.contains("[sandbox]"),
            "no hint on how to widen the sandbox: {content}"
        );
    }
}

/// `[sandbox] mode = "required"` on a kernel without Landlock refuses the run before any model
/// request, with exit 2 and the kernel's Landlock ABI named.
#[tokio::test(flavor = "multi_thread")]
async fn required_sandbox_without_landlock_fails_at_run_start() {
    let dir = project(&[]);
    std::fs::write(
        dir.path().join(".muster/settings.toml"),
        "[sandbox]\nmode = \"required\"\n",
    )
    .unwrap();
    let fake = FakeLlm::start(vec![ScriptEntry::reply(
        "main",
        1,
        vec![Block::text("never asked")],
    )])
    .await
    .unwrap();
    let mut command = super::common::command(
        dir.path(),
        &["run", "-p", "Work.", "--base-url", &fake.base_url()],
    );
    command.env("MUSTER_TEST_LANDLOCK_ABI", "0");
    let output = super::common::output(command).await;
    assert_eq!(
        output.status.code(),
        Some(2),
        "{} (this test simulates a kernel without Landlock, which only a muster built with the failpoints feature can: run scripts/test)",
        stderr(&output)
    );
    let message = stderr(&output);
    assert!(
        message.contains("required") && message.contains("Landlock ABI 0"),
        "{message}"
    );
    assert!(fake.requests().is_empty(), "a model request was sent");
}

/// Even in `bypassPermissions`, a confined command cannot signal muster: `kill -9 $PPID`
/// fails and the run goes on to its end.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread")]
async fn a_bash_command_cannot_kill_muster() {
    let dir = project(&[]);
    let fake = FakeLlm::start(vec![
        ScriptEntry::reply("main", 1, vec![bash("kill -9 $PPID")]),
        ScriptEntry::reply("main", 2, vec![Block::text("Still here.")]),
    ])
    .await
    .unwrap();
    let output = run(dir.path(), &fake.base_url(), "bypassPermissions").await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let results = bash_results(dir.path(), &lines(&output)).await;
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["is_error"], true, "{:?}", results[0]);
}
