//! `SessionStart` with each `source` muster has an equivalent for, through the binary with a
//! real hook script and the fake model server: `startup` (a new run), `compact` (after a
//! compaction: its context joins the compacted context), `resume` (`muster run --continue`
//! and `muster resume`: its context joins the next user message) and `clear` (an approval
//! with `--clear-context`: its context joins the new first message). Hooks are matched on the
//! source, as in Claude Code.

use std::path::Path;

use muster_fake_llm::{Block, ScriptEntry};
use serde_json::{Value, json};

use super::common::{fake, lines, muster, project, stderr, tool};

/// Logs the event's `source` to `sources.log` and adds `context for SOURCE`.
const LOG_SOURCE: &str = "#!/bin/sh\n\
    source=$(cat | sed -e 's/.*\"source\":\"\\([a-z]*\\)\".*/\\1/')\n\
    echo \"$source\" >> \"$CLAUDE_PROJECT_DIR/sources.log\"\n\
    printf '{\"hookSpecificOutput\":{\"hookEventName\":\"SessionStart\",\"additionalContext\":\"context for %s\"}}' \"$source\"\n";

/// A plan with the sections plan mode asks for.
const PLAN: &str =
    "## Goal\nNothing.\n## Steps\n1. Nothing\n## Files\nnone\n## Tests\nnone\n## Risks\nnone\n";

/// A project with two `SessionStart` hooks: [`LOG_SOURCE`] for every source, and plain text
/// (context too, for this event) only on `resume`; `muster_settings` in
/// `.muster/settings.toml`; trusted.
async fn project_with_session_hooks(muster_settings: &str) -> tempfile::TempDir {
    let dir = project(&[]);
    let hooks = dir.path().join(".claude/hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    std::fs::write(hooks.join("source.sh"), LOG_SOURCE).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(
        hooks.join("source.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let settings = json!({"hooks": {"SessionStart": [
        {"matcher": "*", "hooks": [{"type": "command",
            "command": "\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/source.sh"}]},
        {"matcher": "resume", "hooks": [{"type": "command", "command": "echo only on resume"}]}
    ]}});
    std::fs::write(
        dir.path().join(".claude/settings.json"),
        settings.to_string(),
    )
    .unwrap();
    std::fs::write(dir.path().join(".muster/settings.toml"), muster_settings).unwrap();
    super::common::trust(dir.path()).await;
    dir
}

fn sources(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("sources.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn with_usage(mut entry: ScriptEntry, input: u64) -> ScriptEntry {
    if let Some(reply) = entry.reply.as_mut() {
        reply.usage = Some(muster_fake_llm::UsageSpec {
            input_tokens: Some(input),
            output_tokens: Some(20),
            cache_read_input_tokens: Some(0),
            cache_creation_input_tokens: Some(0),
        });
    }
    entry
}

/// The request the main agent made at `turn`.
fn request_at(fake: &muster_fake_llm::FakeLlmHandle, turn: u64) -> Value {
    fake.requests()
        .into_iter()
        .find(|request| request.turn == Some(turn))
        .unwrap_or_else(|| panic!("no request at turn {turn}"))
        .body
}

/// The text of the newest user message of `request`.
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

/// A new run fires `startup`; its compaction fires `compact`, whose context the compacted
/// context carries; `muster run --continue` fires `resume` (and the hook matched on
/// `resume` only), whose context follows the new prompt.
#[tokio::test(flavor = "multi_thread")]
async fn session_start_fires_for_startup_compact_and_resume_matched_on_its_source() {
    // Window 20,000 and max output 1,000: a 7,000-token prompt is compacted.
    let dir = project_with_session_hooks(
        "[models.\"claude-sonnet-4-5\"]\ncontext_window = 20000\nmax_output = 1000\n",
    )
    .await;
    let read = |turn, input| {
        with_usage(
            ScriptEntry::reply(
                "main",
                turn,
                vec![tool("Read", json!({"file_path": "README.md"}))],
            ),
            input,
        )
    };
    let mut note = with_usage(
        ScriptEntry::reply("main", 3, vec![Block::text("HANDOFF: read twice.")]),
        2000,
    );
    note.purpose = Some("compact".into());
    let fake = fake(vec![
        read(1, 300),
        read(2, 7000),
        note,
        ScriptEntry::reply("main", 4, vec![Block::text("Done.")]),
        ScriptEntry::reply("main", 5, vec![Block::text("Done again.")]),
    ])
    .await;
    let base = fake.base_url();
    let first = muster(
        dir.path(),
        &[
            "run",
            "-p",
            "Read twice.",
            "--permission-mode",
            "bypassPermissions",
            "--base-url",
            &base,
            "--output",
            "json",
        ],
    )
    .await;
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    assert_eq!(sources(dir.path()), ["startup", "compact"]);
    assert!(last_user_text(&request_at(&fake, 1)).contains("context for startup"));
    let compacted = request_at(&fake, 4).to_string();
    assert!(compacted.contains("<compaction-summary>"), "{compacted}");
    assert!(compacted.contains("context for compact"), "{compacted}");
    assert!(!compacted.contains("only on resume"), "{compacted}");

    let run_id = lines(&first).pop().unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let continued = muster(
        dir.path(),
        &[
            "run",
            "--continue",
            &run_id,
            "-p",
            "Again.",
            "--base-url",
            &base,
            "--output",
            "json",
        ],
    )
    .await;
    assert_eq!(continued.status.code(), Some(0), "{}", stderr(&continued));
    assert_eq!(sources(dir.path()), ["startup", "compact", "resume"]);
    let prompt = last_user_text(&request_at(&fake, 5));
    for said in ["Again.", "context for resume", "only on resume"] {
        assert!(prompt.contains(said), "{said}: {prompt}");
    }
}

/// An approval with `--clear-context` fires `clear` (after the resume's `resume`): the fresh
/// context's first message carries what both added, and nothing of the old context.
#[tokio::test(flavor = "multi_thread")]
async fn an_approval_that_clears_the_context_fires_session_start_clear() {
    let dir = project_with_session_hooks("").await;
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![tool("ExitPlanMode", json!({"plan": PLAN}))]),
        ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
    ])
    .await;
    let base = fake.base_url();
    let planned = muster(
        dir.path(),
        &[
            "run",
            "-p",
            "Plan.",
            "--permission-mode",
            "plan",
            "--base-url",
            &base,
            "--output",
            "json",
        ],
    )
    .await;
    assert_eq!(
        planned.status.code(),
        Some(5),
        "{}\n{}",
        stderr(&planned),
        super::common::stdout(&planned)
    );
    let run_id = lines(&planned).pop().unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let approved = muster(
        dir.path(),
        &[
            "approve",
            "plan-main-1",
            "--mode",
            "bypassPermissions",
            "--clear-context",
        ],
    )
    .await;
    assert_eq!(approved.status.code(), Some(0), "{}", stderr(&approved));
    let resumed = muster(
        dir.path(),
        &["resume", &run_id, "--base-url", &base, "--output", "json"],
    )
    .await;
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    // In plan mode the hook ran read-only: only the `clear` after the approval could log.
    assert_eq!(sources(dir.path()), ["clear"]);
    assert!(last_user_text(&request_at(&fake, 1)).contains("context for startup"));
    let fresh = request_at(&fake, 2);
    assert_eq!(
        fresh["messages"].as_array().unwrap().len(),
        1,
        "the context was not cleared: {fresh}"
    );
    let first = last_user_text(&fresh);
    for said in [
        "Implement this approved plan",
        "context for clear",
        "context for resume",
        "only on resume",
    ] {
        assert!(first.contains(said), "{said}: {first}");
    }
    assert!(!first.contains("context for startup"), "{first}");
}
