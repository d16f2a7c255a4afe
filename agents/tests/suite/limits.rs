//! What ends an agent its model does not end (see `muster_agents::runtime` limits), against
//! `muster-fake-llm` over real HTTP and a real SQLite store: a cut final answer continued and
//! then ended with `output_limit`, a cut tool call answered with an error, the same failing
//! call ended with `stuck`, each kept by a resume; and the output limit of an agent's own model.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::sync::Arc;

use muster_agents::runtime::{
    AgentKind, AgentRuntime, AgentStop, CONTINUE_PROMPT, PlanApprover, Record, RunContext,
    RuntimeError,
};
use muster_config::PermissionMode;
use muster_fake_llm::{Block, Fault, ScriptEntry, StreamOptions};
use serde_json::{Value, json};

use super::harness::{GUARD, RunHarness, finished, run, spec, start};

fn text(agent_turn: u64, text: &str) -> ScriptEntry {
    ScriptEntry::reply("main", agent_turn, vec![Block::text(text)])
}

fn cut(entry: ScriptEntry) -> ScriptEntry {
    entry.stop_reason("max_tokens")
}

async fn run_err(agent: &mut AgentRuntime) -> RuntimeError {
    tokio::time::timeout(GUARD, agent.run())
        .await
        .expect("guard timeout")
        .expect_err("the agent is stopped")
}

fn model_bodies(run: &RunHarness) -> Vec<Value> {
    run.fake
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/messages"))
        .map(|r| r.body)
        .collect()
}

/// The first text of the newest user message of a request body.
fn last_user_text(body: &Value) -> String {
    let messages = body["messages"].as_array().unwrap();
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "user");
    last["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn assistant_turns(records: &[Record]) -> Vec<(u64, String)> {
    records
        .iter()
        .filter_map(|record| match record {
            Record::Message {
                turn: Some(turn),
                stop_reason: Some(stop),
                ..
            } => Some((*turn, stop.as_str().to_owned())),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_cut_answer_is_continued_each_continuation_a_turn_and_the_result_is_joined() {
    let h = RunHarness::setup()
        .start(vec![
            cut(text(1, "The first half, ")),
            cut(text(2, "the second half, ")),
            text(3, "and the end."),
        ])
        .await;
    let context = h.context(PlanApprover::Human);
    let mut agent = start(
        context,
        spec("main", AgentKind::Main, PermissionMode::Default),
        "Write.",
    )
    .await;
    let outcome = run(&mut agent).await;
    assert_eq!(
        outcome,
        finished("The first half, the second half, and the end.")
    );
    let bodies = model_bodies(&h);
    assert_eq!(bodies.len(), 3);
    assert_eq!(last_user_text(&bodies[0]), "Write.");
    for body in &bodies[1..] {
        assert_eq!(
            last_user_text(body),
            CONTINUE_PROMPT,
            "continued by a user turn, not a prefill"
        );
    }
    let records = h.records("main").await;
    assert_eq!(
        assistant_turns(&records),
        vec![
            (1, "max_tokens".into()),
            (2, "max_tokens".into()),
            (3, "end_turn".into())
        ]
    );
    assert!(
        matches!(records.last(), Some(Record::Finished { result }) if result.ends_with("the end."))
    );
}

#[tokio::test]
async fn a_cut_answer_past_the_continuations_ends_with_output_limit_and_resume_keeps_it() {
    let h = RunHarness::setup()
        .start((1..=4).map(|turn| cut(text(turn, "more "))).collect())
        .await;
    let context = h.context(PlanApprover::Human);
    let mut agent = start(
        context.clone(),
        spec("main", AgentKind::Main, PermissionMode::Default),
        "Write.",
    )
    .await;
    let error = run_err(&mut agent).await;
    let RuntimeError::Stopped(stop) = &error else {
        panic!("expected the runtime's ending, got {error}");
    };
    assert_eq!(stop.reason(), "output_limit");
    assert_eq!(
        *stop,
        AgentStop::OutputLimit {
            max_tokens: 4096,
            continuations: 3
        }
    );
    assert!(error.to_string().starts_with("output_limit: "), "{error}");
    assert_eq!(
        model_bodies(&h).len(),
        4,
        "three continuations, then the end"
    );
    let records = h.records("main").await;
    assert!(
        !records.iter().any(|r| matches!(r, Record::Finished { .. })),
        "never a normal end"
    );
    // A resume ends the same way without asking the model again.
    let mut resumed = AgentRuntime::resume(context, "main", None, None)
        .await
        .unwrap();
    let again = run_err(&mut resumed).await;
    assert!(matches!(
        again,
        RuntimeError::Stopped(AgentStop::OutputLimit {
            continuations: 3,
            ..
        })
    ));
    assert_eq!(model_bodies(&h).len(), 4);
}

#[tokio::test]
async fn a_cut_tool_call_is_kept_with_an_empty_input_and_answered_with_an_error() {
    let write = json!({"file_path": "notes.txt", "content": "a long body that the limit cuts in the middle"});
    let h = RunHarness::setup()
        .start(vec![
            ScriptEntry::reply(
                "main",
                1,
                vec![Block::text("Writing."), Block::tool_use("Write", write)],
            )
            .stop_reason("max_tokens")
            .stream(StreamOptions {
                chunk_chars: 4,
                ..Default::default()
            })
            .fault(Fault {
                cut_last_block: true,
                ..Default::default()
            }),
            text(2, "I will write it in smaller pieces."),
        ])
        .await;
    let context = h.context(PlanApprover::Human);
    let mut agent = start(
        context,
        spec("main", AgentKind::Main, PermissionMode::AcceptEdits),
        "Note it.",
    )
    .await;
    assert_eq!(
        run(&mut agent).await,
        finished("I will write it in smaller pieces.")
    );
    assert!(
        !h.workspace().join("notes.txt").exists(),
        "a cut call never runs"
    );
    let records = h.records("main").await;
    let calls: Vec<_> = records
        .iter()
        .filter_map(|r| match r {
            Record::ToolCall {
                tool,
                decision,
                content,
                is_error,
                ..
            } => Some((tool.clone(), decision.clone(), content.clone(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 1);
    let (tool, decision, content, is_error) = &calls[0];
    assert_eq!(
        (tool.as_str(), decision.as_str(), *is_error),
        ("Write", "invalid", true)
    );
    assert!(content.contains("cut off by the output limit"), "{content}");
    // The model saw its call, with its id and an empty input, and the error for it.
    let bodies = model_bodies(&h);
    let messages = bodies[1]["messages"].as_array().unwrap();
    let call = &messages[1]["content"][1];
    assert_eq!(call["type"], "tool_use");
    assert_eq!(call["input"], json!({}));
    let result = &messages[2]["content"][0];
    assert_eq!(result["tool_use_id"], call["id"]);
    assert_eq!(result["is_error"], true);
}

#[tokio::test]
async fn the_same_failing_call_gets_a_warning_then_ends_with_stuck_and_resume_keeps_it() {
    let read = json!({"file_path": "missing.txt"});
    let h = RunHarness::setup()
        .start(
            (1..=4)
                .map(|turn| {
                    ScriptEntry::reply("main", turn, vec![Block::tool_use("Read", read.clone())])
                })
                .collect(),
        )
        .await;
    let context = h.context(PlanApprover::Human);
    let mut agent = start(
        context.clone(),
        spec("main", AgentKind::Main, PermissionMode::Default),
        "Read it.",
    )
    .await;
    let error = run_err(&mut agent).await;
    let RuntimeError::Stopped(AgentStop::Stuck { tool, times, .. }) = &error else {
        panic!("expected stuck, got {error}");
    };
    assert_eq!((tool.as_str(), *times), ("Read", 4));
    assert!(
        error.to_string().contains("missing.txt"),
        "names the call: {error}"
    );
    let contents: Vec<String> = h
        .records("main")
        .await
        .into_iter()
        .filter_map(|r| match r {
            Record::ToolCall { content, .. } => Some(content),
            _ => None,
        })
        .collect();
    let noted: Vec<bool> = contents
        .iter()
        .map(|c| c.contains("change course"))
        .collect();
    assert_eq!(noted, vec![false, false, true, true], "{contents:#?}");
    assert_eq!(model_bodies(&h).len(), 4);
    let mut resumed = AgentRuntime::resume(context, "main", None, None)
        .await
        .unwrap();
    assert!(matches!(
        run_err(&mut resumed).await,
        RuntimeError::Stopped(AgentStop::Stuck { .. })
    ));
    assert_eq!(model_bodies(&h).len(), 4, "no request after the end");
}

#[tokio::test]
async fn a_failing_call_that_changes_never_counts_as_stuck() {
    let h = RunHarness::setup()
        .start(
            (1..=5)
                .map(|turn| {
                    let read = json!({"file_path": format!("missing-{turn}.txt")});
                    ScriptEntry::reply("main", turn, vec![Block::tool_use("Read", read)])
                })
                .chain([text(6, "Nothing there.")])
                .collect(),
        )
        .await;
    let context = h.context(PlanApprover::Human);
    let mut agent = start(
        context,
        spec("main", AgentKind::Main, PermissionMode::Default),
        "Read.",
    )
    .await;
    assert_eq!(run(&mut agent).await, finished("Nothing there."));
}

#[tokio::test]
async fn an_agent_naming_its_own_model_sends_that_models_output_limit() {
    let h = RunHarness::setup()
        .file(
            ".muster/agents/writer.md",
            "---\nname: writer\ndescription: Writes.\nmodel: opus\n---\nYou write.\n",
        )
        .start(vec![
            text(1, "Done."),
            ScriptEntry::reply("other", 1, vec![Block::text("Done too.")]),
        ])
        .await;
    let root = muster_config::project::ProjectRoot::at(h.workspace());
    let catalog = muster_config::AgentCatalog::load(&root, None)
        .unwrap()
        .value;
    let mut models = std::collections::BTreeMap::new();
    models.insert("claude-opus-4-1".to_owned(), super::harness::sonnet_info());
    models.get_mut("claude-opus-4-1").unwrap().max_output = Some(32_000);
    let context = Arc::new(RunContext {
        agent_models: Default::default(),
        catalog: Arc::new(catalog),
        compaction: muster_agents::runtime::CompactionPolicy {
            models,
            ..Default::default()
        },
        ..h.run_context(PlanApprover::Human)
    });
    let writer = muster_agents::runtime::AgentSpec {
        definition: "writer".into(),
        ..spec("main", AgentKind::Main, PermissionMode::Default)
    };
    let mut agent = start(context.clone(), writer, "Write.").await;
    assert_eq!(run(&mut agent).await, finished("Done."));
    // A model the catalogue does not know gets the default limit, not the mode model's.
    let unknown = muster_agents::runtime::AgentSpec {
        inherited_model: Some("local-model".into()),
        definition: "Plan".into(),
        ..spec("other", AgentKind::Main, PermissionMode::Default)
    };
    let mut other = start(context, unknown, "Plan.").await;
    let _ = tokio::time::timeout(GUARD, other.run())
        .await
        .expect("guard timeout");
    let bodies = model_bodies(&h);
    assert_eq!(bodies[0]["model"], "claude-opus-4-1");
    assert_eq!(
        bodies[0]["max_tokens"], 32_000,
        "opus's limit, not the mode model's 4096"
    );
    assert_eq!(bodies[1]["model"], "local-model");
    assert_eq!(
        bodies[1]["max_tokens"],
        muster_agents::runtime::DEFAULT_MAX_OUTPUT
    );
}
