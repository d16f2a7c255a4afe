//! `muster run --continue [RUN] -p …`: a finished single-agent run takes a new prompt with its
//! context kept, through the binary against `muster-fake-llm`; killed at either side of the
//! transition's one commit, a resume reaches the ending an uncut continue would have.

use std::path::Path;
use std::process::Output;

use muster_fake_llm::{Block, ScriptEntry};
use serde_json::Value;

use super::common::{fake, lines, muster, project, stderr};

/// `--output json`'s one result line.
fn result_of(output: &Output) -> Value {
    lines(output)
        .pop()
        .unwrap_or_else(|| panic!("no result line: {}", stderr(output)))
}

fn run_id_of(output: &Output) -> String {
    result_of(output)["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no run id: {:?}", result_of(output)))
        .to_owned()
}

/// The text of every user turn of the last request the model received.
fn user_texts(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].to_string())
        .collect()
}

async fn killed_at(dir: &Path, failpoint: &str, args: &[&str]) {
    let mut command = super::common::command(dir, args);
    command.env("MUSTER_FAILPOINT", failpoint);
    let output = super::common::output(command).await;
    assert_eq!(
        output.status.code(),
        None,
        "not killed at {failpoint}: {}",
        stderr(&output)
    );
}

#[tokio::test]
async fn a_completed_run_continues_with_its_context_and_survives_a_kill_on_either_side() {
    let dir = project(&[]);
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![Block::text("First answer.")]),
        ScriptEntry::reply("main", 2, vec![Block::text("Second answer.")]),
    ])
    .await;
    let base = fake.base_url();
    let json = ["--output", "json", "--base-url", &base];
    let first = muster(
        dir.path(),
        &[&["run", "-p", "First question."][..], &json].concat(),
    )
    .await;
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let run_id = run_id_of(&first);
    assert_eq!(result_of(&first)["result"], "First answer.");

    // Killed before the new turn is committed: the continue never happened, and a resume
    // ends the run as it had ended, without asking the model.
    let cont = [
        &["run", "--continue", &run_id, "-p", "Second question."][..],
        &json,
    ]
    .concat();
    killed_at(dir.path(), "continue_resumed", &cont).await;
    let resumed = muster(dir.path(), &[&["resume", &run_id][..], &json].concat()).await;
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    assert_eq!(result_of(&resumed)["result"], "First answer.");
    assert_eq!(
        fake.requests().len(),
        1,
        "a resume of a finished turn asks nothing"
    );

    // Killed right after the new turn's commit: a resume answers it.
    killed_at(dir.path(), "continued", &cont).await;
    let resumed = muster(dir.path(), &[&["resume", &run_id][..], &json].concat()).await;
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    assert_eq!(result_of(&resumed)["result"], "Second answer.");
    assert_eq!(run_id_of(&resumed), run_id);

    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "one model request per question");
    let asked = user_texts(&requests[1].body);
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(asked[0].contains("First question."), "{asked:?}");
    assert!(asked[1].contains("Second question."), "{asked:?}");
    let last = &requests[1].body["messages"];
    assert!(
        last.to_string().contains("First answer."),
        "the first answer is in the context: {last}"
    );
}

#[tokio::test]
async fn continue_without_a_run_takes_the_newest_and_refuses_what_it_cannot_continue() {
    let dir = project(&[]);
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![Block::text("Older.")]).attempt(1),
        ScriptEntry::reply("main", 1, vec![Block::text("Newer.")]).attempt(2),
        ScriptEntry::reply("main", 2, vec![Block::text("Continued.")]),
    ])
    .await;
    let base = fake.base_url();
    let json = ["--output", "json", "--base-url", &base];
    let older = muster(dir.path(), &[&["run", "-p", "a"][..], &json].concat()).await;
    assert_eq!(older.status.code(), Some(0), "{}", stderr(&older));
    let newer = muster(dir.path(), &[&["run", "-p", "b"][..], &json].concat()).await;
    assert_eq!(newer.status.code(), Some(0), "{}", stderr(&newer));

    let cont = muster(
        dir.path(),
        &[&["run", "--continue", "-p", "c"][..], &json].concat(),
    )
    .await;
    assert_eq!(cont.status.code(), Some(0), "{}", stderr(&cont));
    assert_eq!(run_id_of(&cont), run_id_of(&newer));
    assert_eq!(result_of(&cont)["result"], "Continued.");

    let unknown = muster(dir.path(), &["run", "--continue", "nope", "-p", "c"]).await;
    assert_eq!(unknown.status.code(), Some(2), "{}", stderr(&unknown));
    assert!(
        stderr(&unknown).contains("no run \"nope\""),
        "{}",
        stderr(&unknown)
    );

    let with_team = muster(
        dir.path(),
        &["run", "--continue", "--team", "t.toml", "-p", "c"],
    )
    .await;
    assert_eq!(with_team.status.code(), Some(2), "{}", stderr(&with_team));
    assert!(
        stderr(&with_team).contains("--team"),
        "{}",
        stderr(&with_team)
    );
}

#[tokio::test]
async fn a_run_awaiting_a_decision_is_refused_and_pointed_at_resume() {
    let dir = project(&[]);
    let plan = "## Goal\nG.\n## Steps\n1. s\n## Files\nnone\n## Tests\nnone\n## Risks\nnone\n";
    let fake = fake(vec![ScriptEntry::reply(
        "main",
        1,
        vec![Block::tool_use(
            "ExitPlanMode",
            serde_json::json!({"plan": plan}),
        )],
    )])
    .await;
    let base = fake.base_url();
    let json = ["--output", "json", "--base-url", &base];
    let waiting = muster(
        dir.path(),
        &[
            &["run", "-p", "Plan.", "--permission-mode", "plan"][..],
            &json,
        ]
        .concat(),
    )
    .await;
    assert_eq!(waiting.status.code(), Some(5), "{}", stderr(&waiting));
    let run_id = run_id_of(&waiting);
    let refused = muster(dir.path(), &["run", "--continue", &run_id, "-p", "more"]).await;
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let text = stderr(&refused);
    assert!(text.contains("awaiting_decision"), "{text}");
    assert!(text.contains(&format!("muster resume {run_id}")), "{text}");
}

/// Issue 33: a run reads its settings files once, at its start, and stores them: a
/// `.claude/settings.local.json` the agent writes during the run (untracked, so it would count
/// as the user's own) gains nothing when the run is continued — its `additionalDirectories`
/// does not open a directory outside the workspace.
#[tokio::test]
async fn settings_an_agent_writes_during_a_run_are_not_read_when_it_continues() {
    let dir = project(&[]);
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("x.txt");
    let settings = serde_json::json!({"permissions": {"additionalDirectories": [outside.path()]}});
    let fake = fake(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![super::common::tool(
                "Bash",
                serde_json::json!({"command": format!(
                    "mkdir -p .claude && printf '%s' '{settings}' > .claude/settings.local.json"
                )}),
            )],
        ),
        ScriptEntry::reply("main", 2, vec![Block::text("Wrote it.")]),
        ScriptEntry::reply(
            "main",
            3,
            vec![super::common::tool(
                "Write",
                serde_json::json!({"file_path": target, "content": "escaped\n"}),
            )],
        ),
        ScriptEntry::reply("main", 4, vec![Block::text("Done.")]),
    ])
    .await;
    let base = fake.base_url();
    let json = [
        "--output",
        "json",
        "--base-url",
        &base,
        "--permission-mode",
        "bypassPermissions",
    ];
    let first = muster(dir.path(), &[&["run", "-p", "Set up."][..], &json].concat()).await;
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    assert!(dir.path().join(".claude/settings.local.json").exists());
    let run_id = run_id_of(&first);
    let cont = muster(
        dir.path(),
        &[
            &["run", "--continue", &run_id, "-p", "Write outside."][..],
            &json[..4],
        ]
        .concat(),
    )
    .await;
    assert_eq!(cont.status.code(), Some(0), "{}", stderr(&cont));
    assert!(!target.exists(), "the agent's own settings file was read");
    let last = fake
        .requests()
        .into_iter()
        .rfind(|r| r.agent.as_deref() == Some("main"))
        .unwrap();
    let said = last.body["messages"].to_string();
    assert!(said.contains("outside the workspace"), "{said}");
}
