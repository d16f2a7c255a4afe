//! Context compaction over both wires: the usage a model reports (OpenAI: in vLLM's usage chunk
//! with `choices: null`) crosses the threshold the settings' model catalogue sets, the summary
//! request carries `x-muster-purpose: compact`, and the rebuilt context is a valid request in
//! each format. Both runs must record the same transcript.

use std::collections::BTreeMap;

use muster_agents::runtime::{AgentOutcome, Record};
use muster_fake_llm::{Block, FakeLlm, OpenAiQuirks, ScriptEntry, UsageSpec};
use serde_json::{Value, json};

use super::harness::{AGENT, Finished, Wire, run_agent, transcript, wire_settings};

const SUMMARY: &str = "HANDOFF: README.md says hello; nothing else to do.";

/// A turn of `main` whose answer reports `input` prompt tokens, in vLLM's shape.
fn turn(n: u64, input: u64, content: Vec<Block>) -> ScriptEntry {
    let mut entry = ScriptEntry::reply(AGENT, n, content);
    if let Some(reply) = entry.reply.as_mut() {
        reply.usage = Some(UsageSpec {
            input_tokens: Some(input),
            output_tokens: Some(20),
            cache_read_input_tokens: Some(0),
            cache_creation_input_tokens: Some(0),
        });
    }
    entry.openai = OpenAiQuirks {
        finish_reason_stop_with_tools: true,
        usage_choices_null: true,
        ..OpenAiQuirks::default()
    };
    entry
}

/// Two reads; the second answer reports 7,000 prompt tokens, past the threshold of a
/// 20,000-token window with 1,000 tokens of output (20,000 − 1,000 − 13,000 reserved), so
/// the third request is the summary and the fourth continues from it.
fn script() -> Vec<ScriptEntry> {
    let read = || Block::tool_use("Read", json!({"file_path": "README.md"}));
    let mut summary = turn(3, 2000, vec![Block::text(SUMMARY)]);
    summary.purpose = Some("compact".into());
    vec![
        turn(1, 300, vec![Block::text("Reading."), read()]),
        turn(2, 7000, vec![read()]),
        summary,
        turn(4, 900, vec![Block::text("Done.")]),
    ]
}

async fn run_over(wire: Wire) -> (Finished, Vec<Value>) {
    let fake = FakeLlm::start(script()).await.unwrap();
    let settings = format!(
        "{}\n[models.\"{}\"]\ncontext_window = 20000\nmax_output = 1000\n",
        wire_settings(wire, &fake),
        wire.model()
    );
    let env = BTreeMap::from([(wire.key_variable().to_owned(), "sk-test".to_owned())]);
    let run = run_agent(&fake, &settings, env, "Read the README, twice.", None).await;
    let bodies = fake
        .requests()
        .into_iter()
        .map(|r| {
            assert_eq!(r.path, wire.path(), "{wire:?}");
            assert_eq!(r.status, 200, "{wire:?}: {:?}", r.error);
            let purpose = if r.turn == Some(3) {
                Some("compact")
            } else {
                None
            };
            assert_eq!(r.header("x-muster-purpose"), purpose, "{wire:?}");
            r.body
        })
        .collect();
    (run, bodies)
}

/// OpenAI: every `tool` message answers a call of the assistant message before it (a real
/// server refuses an orphan; the fake only checks that calls get answers).
fn assert_tool_messages_answer_calls(body: &Value) {
    let mut open: Vec<&Value> = Vec::new();
    for message in body["messages"].as_array().unwrap() {
        match message["role"].as_str() {
            Some("assistant") => {
                open = message["tool_calls"]
                    .as_array()
                    .map(|calls| calls.iter().map(|c| &c["id"]).collect())
                    .unwrap_or_default();
            }
            Some("tool") => {
                let id = &message["tool_call_id"];
                assert!(
                    open.contains(&id),
                    "orphan tool message {message} in {body:#}"
                );
            }
            _ => open.clear(),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn compaction_triggers_and_continues_the_same_over_both_wires() {
    let (anthropic, anthropic_bodies) = run_over(Wire::Anthropic).await;
    let (openai, openai_bodies) = run_over(Wire::OpenAi).await;
    for (wire, run, bodies) in [
        (Wire::Anthropic, &anthropic, &anthropic_bodies),
        (Wire::OpenAi, &openai, &openai_bodies),
    ] {
        assert_eq!(
            run.outcome,
            AgentOutcome::Finished {
                result: "Done.".into()
            },
            "{wire:?}"
        );
        assert_eq!(bodies.len(), 4, "{wire:?}");
        let compacted: Vec<u64> = run
            .records
            .iter()
            .filter_map(|r| match r {
                Record::Compacted { turn, summary, .. } => {
                    assert_eq!(summary, SUMMARY, "{wire:?}");
                    Some(*turn)
                }
                _ => None,
            })
            .collect();
        assert_eq!(compacted, [3], "{wire:?}");
        // The request after the summary carries it.
        let after = bodies[3]["messages"].to_string();
        assert!(after.contains(SUMMARY), "{wire:?}: {after}");
        if let Wire::OpenAi = wire {
            for body in bodies {
                assert_tool_messages_answer_calls(body);
            }
        }
    }
    assert_eq!(transcript(&anthropic), transcript(&openai));
}
