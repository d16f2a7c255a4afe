//! One agent's plan-mode cycle, scripted once and driven over real HTTP against
//! `muster-fake-llm`: through the Anthropic client, through the OpenAI-compatible client (with
//! vLLM's and Ollama's quirks on), and with the plan-mode turns on OpenAI and the others on
//! Anthropic. Everything else is real: the settings and the policy file load through
//! `muster-config` from a temporary project, the store is a SQLite file, the agent is
//! `muster-agents`' runtime with the permission engine. Every run must end in the same
//! workspace, with the same transcript in the store and the same decisions. The one wait is on
//! the fake's gate (the agent's next request is held while the workspace is checked).

use std::collections::BTreeMap;
use std::path::Path;

use muster_agents::runtime::{AgentOutcome, Record};
use muster_fake_llm::{
    Block, FakeLlm, FakeLlmConfig, FakeLlmHandle, KeyCheck, OpenAiQuirks, RecordedRequest,
    ScriptEntry, StreamOptions, UsageSpec,
};
use serde_json::{Value, json};

use super::harness::{
    AGENT, Finished, SLUG, Wire, comparable, run_agent, transcript, wire_settings,
};

const PLAN: &str = "## Goal\nGreet.\n## Steps\n1. Write hello.txt\n## Files\nhello.txt\n## Tests\nnone\n## Risks\nnone\n";
/// The gate holding the request that follows the refused write.
const AFTER_REFUSAL: &str = "after-refusal";

/// One scripted model turn of `main`. Usage is explicit so that both wires must report the
/// same figures (OpenAI's `prompt_tokens` includes the cached tokens). Small stream chunks
/// split every tool's arguments across many fragments.
fn turn(n: u64, content: Vec<Block>) -> ScriptEntry {
    let mut entry = ScriptEntry::reply(AGENT, n, content);
    if let Some(reply) = entry.reply.as_mut() {
        reply.usage = Some(UsageSpec {
            input_tokens: Some(1000 + 100 * n),
            output_tokens: Some(20 + n),
            cache_read_input_tokens: Some(300),
            cache_creation_input_tokens: Some(0),
        });
    }
    entry.stream = StreamOptions {
        chunk_chars: 7,
        ..StreamOptions::default()
    };
    // vLLM: `finish_reason: "stop"` beside tool calls, and `choices: null` in the usage chunk.
    entry.openai = OpenAiQuirks {
        finish_reason_stop_with_tools: true,
        usage_choices_null: true,
        ..OpenAiQuirks::default()
    };
    entry
}

/// The cycle: enter plan mode; read and try to write (refused); write the plan file; submit
/// it; once the policy approved, write; finish. One script answers both formats.
fn script() -> Vec<ScriptEntry> {
    let tool = Block::tool_use;
    let mut refused = turn(
        2,
        vec![
            tool("Read", json!({"file_path": "README.md"})),
            tool(
                "Write",
                json!({"file_path": "hello.txt", "content": "written while planning\n"}),
            ),
        ],
    );
    // Ollama: every parallel call at index 0.
    refused.openai.tool_index_always_zero = true;
    let mut plan = turn(
        3,
        vec![tool(
            "Write",
            json!({"file_path": format!(".muster/plans/{SLUG}.md"), "content": PLAN}),
        )],
    );
    plan.fault.hold = Some(AFTER_REFUSAL.into());
    vec![
        turn(
            1,
            vec![
                Block::text("I will plan first."),
                tool("EnterPlanMode", json!({})),
            ],
        ),
        refused,
        plan,
        turn(
            4,
            vec![
                Block::text("Submitting the plan."),
                tool("ExitPlanMode", json!({})),
            ],
        ),
        turn(
            5,
            vec![tool(
                "Write",
                json!({"file_path": "hello.txt", "content": "hello, world\n"}),
            )],
        ),
        turn(6, vec![Block::text("Wrote hello.txt.")]),
    ]
}

/// A fake server answering the cycle's script, accepting only `key`.
async fn fake_for(key: &str) -> FakeLlmHandle {
    FakeLlm::start_with(
        FakeLlmConfig {
            keys: KeyCheck::Exact(key.into()),
            ..FakeLlmConfig::default()
        },
        script(),
    )
    .await
    .unwrap()
}

/// Runs the cycle over `wire`.
async fn run_over(wire: Wire) -> Finished {
    let fake = fake_for(wire.key()).await;
    let env = BTreeMap::from([(wire.key_variable().to_owned(), wire.key().to_owned())]);
    run_cycle(&fake, &wire_settings(wire, &fake), env).await
}

/// The cycle against `fake`: the workspace is looked at while the request after the refused
/// write waits.
async fn run_cycle(
    fake: &FakeLlmHandle,
    settings: &str,
    env: BTreeMap<String, String>,
) -> Finished {
    let run = run_agent(
        fake,
        settings,
        env,
        "Add a greeting file.",
        Some(AFTER_REFUSAL),
    )
    .await;
    assert_eq!(
        run.at_gate.as_ref(),
        Some(&run.before),
        "the refused write changed nothing"
    );
    run
}

/// `(tool, decision, is_error)` of every tool call, in order.
fn decisions(records: &[Record]) -> Vec<(String, String, bool)> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::ToolCall {
                tool,
                decision,
                is_error,
                ..
            } => Some((tool.clone(), decision.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

/// Every request went to the wire's path, authenticated the wire's way with the key the
/// settings' default variable held, and had the wire's body shape.
fn assert_wire(wire: Wire, requests: &[RecordedRequest]) {
    assert_eq!(requests.len(), 6, "{wire:?}: one request per turn");
    for r in requests {
        assert_eq!(
            (r.method.as_str(), r.path.as_str()),
            ("POST", wire.path()),
            "{wire:?}"
        );
        assert_eq!(r.status, 200, "{wire:?}: {:?}", r.error);
        assert_eq!(r.body["model"], wire.model());
        assert_eq!(r.body["stream"], true);
        match wire {
            Wire::Anthropic => {
                assert_eq!(r.header("x-api-key"), Some(wire.key()));
                assert!(r.header("anthropic-version").is_some());
                assert!(r.header("authorization").is_none());
                assert!(r.body["tools"][0]["input_schema"].is_object());
            }
            Wire::OpenAi => {
                let bearer = format!("Bearer {}", wire.key());
                assert_eq!(r.header("authorization"), Some(bearer.as_str()));
                assert!(r.header("x-api-key").is_none());
                assert!(r.header("anthropic-version").is_none());
                assert_eq!(r.body["stream_options"]["include_usage"], true);
                assert_eq!(r.body["tools"][0]["type"], "function");
                assert!(r.body["tools"][0]["function"]["parameters"].is_object());
                assert_eq!(r.body["messages"][0]["role"], "system");
            }
        }
    }
    if let Wire::OpenAi = wire {
        // Turn 3 answers turn 2's two parallel calls (sent at index 0): one `tool` message
        // per call, each answering its own call's id.
        let messages = requests[2].body["messages"].as_array().unwrap();
        let last = messages
            .iter()
            .rposition(|m| m["role"] == "assistant")
            .unwrap();
        let assistant = &messages[last];
        let call_ids: Vec<&Value> = assistant["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| &c["id"])
            .collect();
        let answered: Vec<&Value> = messages[last + 1..]
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| &m["tool_call_id"])
            .collect();
        assert_eq!(call_ids.len(), 2, "{assistant:#}");
        assert_eq!(answered, call_ids);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plan_cycle_ends_the_same_over_the_anthropic_and_the_openai_wire() {
    let anthropic = run_over(Wire::Anthropic).await;
    let openai = run_over(Wire::OpenAi).await;
    for (wire, run) in [(Wire::Anthropic, &anthropic), (Wire::OpenAi, &openai)] {
        assert_eq!(
            run.outcome,
            AgentOutcome::Finished {
                result: "Wrote hello.txt.".into()
            },
            "{wire:?}"
        );
        assert!(
            !run.at_gate
                .as_ref()
                .unwrap()
                .contains_key(Path::new("hello.txt"))
        );
        assert_eq!(
            run.workspace.get(Path::new("hello.txt")).map(Vec::as_slice),
            Some(&b"hello, world\n"[..]),
            "{wire:?}: the approved write landed, not the refused one"
        );
        assert_eq!(run.plan_file.as_deref(), Some(PLAN), "{wire:?}");
        assert_eq!(
            decisions(&run.records),
            [
                ("EnterPlanMode", "allow", false),
                ("Read", "allow", false),
                ("Write", "deny", true),
                ("Write", "allow", false),
                ("ExitPlanMode", "allow", false),
                ("Write", "allow", false),
            ]
            .map(|(t, d, e)| (t.to_owned(), d.to_owned(), e)),
            "{wire:?}"
        );
        // Every model turn is recorded with the wire's model, a price, and the usage the
        // fake reported.
        let turns: Vec<(u64, u64, u64, bool)> = run
            .records
            .iter()
            .filter_map(|r| match r {
                Record::Message {
                    turn: Some(turn),
                    model,
                    usage: Some(usage),
                    cost_usd,
                    ..
                } => {
                    assert_eq!(model.as_deref(), Some(wire.model()), "{wire:?}");
                    Some((
                        *turn,
                        usage.input_tokens,
                        usage.cache_read_tokens,
                        cost_usd.is_some_and(|c| c > 0.0),
                    ))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            turns,
            (1..=6)
                .map(|n| (n, 1000 + 100 * n, 300, true))
                .collect::<Vec<_>>(),
            "{wire:?}"
        );
        assert_wire(wire, &run.wire_requests);
    }
    assert_eq!(anthropic.workspace, openai.workspace);
    assert_eq!(transcript(&anthropic), transcript(&openai));
    // The same decisions: one plan request, answered once by the policy with the same body.
    assert_eq!(anthropic.requests.len(), 1, "{:#?}", anthropic.requests);
    let request = &anthropic.requests[0];
    assert_eq!(request["request_id"], "plan-main-1");
    assert_eq!(request["responder"], "policy:approve.toml");
    assert_eq!(request["response"]["responder"], "policy");
    assert_eq!(request["response"]["body"]["approved"], true);
    assert_eq!(request["response"]["body"]["mode"], "acceptEdits");
    let decided = |run: &Finished| -> Vec<Value> {
        let mut ids = Vec::new();
        run.requests
            .iter()
            .map(|r| comparable(r, &run.root, &mut ids))
            .collect()
    };
    assert_eq!(decided(&anthropic), decided(&openai));
}

/// Cline's plan/act split across wires: the plan-mode turns go to the OpenAI-compatible
/// server and the others to Anthropic, one context carried from one to the other. The run
/// must be the one the Anthropic-only run was.
#[tokio::test(flavor = "multi_thread")]
async fn plan_turns_over_openai_and_act_turns_over_anthropic_share_one_context() {
    const KEY: &str = "sk-both-wires";
    let fake = fake_for(KEY).await;
    let settings = format!(
        "[plan]\nprovider = \"openai\"\nmodel = \"gpt-4.1\"\n\n\
         [act]\nprovider = \"anthropic\"\nmodel = \"claude-sonnet-4-5\"\n\n\
         [providers.openai]\nbase_url = \"{}\"\nmax_retries = 0\n\n\
         [providers.anthropic]\nbase_url = \"{}\"\nmax_retries = 0\n",
        fake.openai_base_url(),
        fake.base_url()
    );
    let env = BTreeMap::from([
        ("OPENAI_API_KEY".to_owned(), KEY.to_owned()),
        ("ANTHROPIC_API_KEY".to_owned(), KEY.to_owned()),
    ]);
    let split = run_cycle(&fake, &settings, env).await;
    let anthropic = run_over(Wire::Anthropic).await;
    assert_eq!(split.outcome, anthropic.outcome);
    assert_eq!(split.workspace, anthropic.workspace);
    assert_eq!(split.plan_file.as_deref(), Some(PLAN));
    assert_eq!(transcript(&split), transcript(&anthropic));
    // Turn 1 asks to plan and turns 5 and 6 act after the approval; 2 to 4 plan.
    let (act, plan) = (
        ("/v1/messages", "claude-sonnet-4-5"),
        ("/v1/chat/completions", "gpt-4.1"),
    );
    let wires: Vec<(Option<u64>, (&str, &str))> = split
        .wire_requests
        .iter()
        .map(|r| {
            assert_eq!(r.status, 200, "{:?}", r.error);
            (
                r.turn,
                (r.path.as_str(), r.body["model"].as_str().unwrap_or("")),
            )
        })
        .collect();
    assert_eq!(
        wires,
        [
            (Some(1), act),
            (Some(2), plan),
            (Some(3), plan),
            (Some(4), plan),
            (Some(5), act),
            (Some(6), act),
        ]
    );
}
