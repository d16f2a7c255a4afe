//! The model clients over real HTTP against `muster-fake-llm`: both APIs streaming, tool calls,
//! thinking round trips, headers, every fault, the OpenAI quirks, retry caps, cost accounting,
//! and cassette record → replay. Backoff goes through a recording sleeper (no waiting); stalls
//! and deadlines use short real timeouts. Timeouts here are failure guards only.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use muster_agents::model::script::{CassetteReply, request_hash};
use muster_agents::model::{
    AnthropicOptions, Cassette, CassetteEntry, ClientConfig, ContentBlock, FailureKind, GaveUp,
    HttpClient, Message, ModelError, ModelProvider, ModelRequest, ModelResponse, OpenAiOptions,
    ProviderOptions, Recorder, RecordingSleeper, Redaction, RequestContext, ResponseStream, Role,
    ScriptOptions, ScriptProvider, SetupError, StopReason, StreamEvent, ThinkingForm,
    ThinkingSettings, ToolDefinition, Usage, UsageTotals, client_config,
};
use muster_config::settings::{ModelInfo, ProviderKind, ProviderSettings, ReasoningEffort};
use muster_config::{Origin, Sourced};
use muster_fake_llm::{
    Block, ErrorEvent, FakeLlm, FakeLlmConfig, FakeLlmHandle, Fault, HttpError, KeyCheck,
    OpenAiQuirks, RecordedRequest, ScriptEntry, Stall, StreamOptions, UsageSpec, When,
};
use serde_json::{Value, json};

use super::harness::{load_settings, sonnet_info};

const GUARD: Duration = Duration::from_secs(30);
const MODEL: &str = "claude-sonnet-4-5";

fn ctx(agent: &str, turn: u64) -> RequestContext {
    RequestContext::new("run-abc", agent, turn)
}

fn request(model: &str) -> ModelRequest {
    ModelRequest {
        model: model.into(),
        system: "You are lead.".into(),
        messages: vec![Message::user("List the files.")],
        tools: vec![
            ToolDefinition {
                name: "Read".into(),
                description: "Read a file".into(),
                input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            },
            ToolDefinition {
                name: "Bash".into(),
                description: "Run a command".into(),
                input_schema: json!({"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}),
            },
        ]
        .into(),
        max_tokens: 4096,
        thinking: ThinkingSettings::default(),
    }
}

fn prices() -> BTreeMap<String, ModelInfo> {
    let info = sonnet_info();
    BTreeMap::from([
        (MODEL.to_owned(), info.clone()),
        ("gpt-test".to_owned(), info),
    ])
}

fn config(base: String, sleeper: &RecordingSleeper) -> ClientConfig {
    super::harness::install_tls_provider();
    let mut c = ClientConfig::new(base, Some("test-key".into()));
    c.retry.max_retries = 3;
    c.retry.initial_backoff = Duration::from_millis(1);
    c.retry.max_backoff = Duration::from_millis(4);
    c.retry.jitter = false;
    c.stream_idle_timeout = Duration::from_secs(5);
    c.request_timeout = Duration::from_secs(20);
    c.connect_timeout = Duration::from_secs(2);
    c.sleeper = Arc::new(sleeper.clone());
    c.models = prices();
    c
}

fn anthropic(fake: &FakeLlmHandle, sleeper: &RecordingSleeper) -> HttpClient {
    HttpClient::anthropic(
        config(fake.base_url(), sleeper),
        AnthropicOptions::default(),
    )
    .unwrap()
}

fn openai(fake: &FakeLlmHandle, sleeper: &RecordingSleeper) -> HttpClient {
    HttpClient::openai(
        config(fake.openai_base_url(), sleeper),
        OpenAiOptions::default(),
    )
    .unwrap()
}

/// Every event of a stream, and its result.
async fn collect(
    mut stream: ResponseStream,
) -> (Vec<StreamEvent>, Result<ModelResponse, ModelError>) {
    let mut events = Vec::new();
    let run = async {
        while let Some(item) = stream.next_event().await {
            match item {
                Ok(StreamEvent::Completed(r)) => return Ok(r),
                Ok(e) => events.push(e),
                Err(e) => return Err(e),
            }
        }
        panic!("the stream ended without a result");
    };
    let result = tokio::time::timeout(GUARD, run)
        .await
        .expect("guard timeout");
    (events, result)
}

async fn complete(
    provider: &dyn ModelProvider,
    c: &RequestContext,
    r: &ModelRequest,
) -> Result<ModelResponse, ModelError> {
    tokio::time::timeout(GUARD, provider.stream(c, r).response())
        .await
        .expect("guard timeout")
}

fn model_requests(fake: &FakeLlmHandle) -> Vec<RecordedRequest> {
    fake.requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/messages") || r.path.ends_with("/chat/completions"))
        .collect()
}

fn tool_uses(r: &ModelResponse) -> Vec<(String, Value)> {
    r.tool_calls()
        .into_iter()
        .map(|c| (c.name, c.input))
        .collect()
}

fn entry(agent: &str, turn: u64, blocks: Vec<Block>) -> ScriptEntry {
    ScriptEntry::reply(agent, turn, blocks)
}

fn reply_ok(agent: &str, turn: u64) -> ScriptEntry {
    entry(agent, turn, vec![Block::text("Recovered.")])
}

// ---------------------------------------------------------------------------------------
// Anthropic streaming

#[tokio::test]
async fn anthropic_streams_text_and_tool_call() {
    let fake = FakeLlm::start(vec![entry(
        "lead",
        1,
        vec![
            Block::text("Let me run the tests first, then report."),
            Block::tool_use("Bash", json!({"cmd": "cargo test -q", "env": {"A": "ü"}})),
        ],
    )])
    .await
    .unwrap();
    let sleeper = RecordingSleeper::new();
    let client = anthropic(&fake, &sleeper);
    let (events, result) = collect(client.stream(&ctx("lead", 1), &request(MODEL))).await;
    let r = result.unwrap();
    assert_eq!(r.text(), "Let me run the tests first, then report.");
    assert_eq!(
        tool_uses(&r),
        vec![(
            "Bash".to_owned(),
            json!({"cmd": "cargo test -q", "env": {"A": "ü"}})
        )]
    );
    assert!(r.tool_calls()[0].id.starts_with("toolu_fake_"));
    assert_eq!(r.stop_reason, StopReason::ToolUse);
    assert_eq!(r.attempts, 1);
    assert_eq!(r.model, MODEL);
    assert!(r.usage.input_tokens > 0 && r.usage.output_tokens > 0);
    let deltas: String = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, r.text());
    assert!(
        events.len() > 3,
        "text arrives in several deltas: {events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, StreamEvent::ToolCall { call, .. } if call.name == "Bash"))
    );
    assert_eq!(events[0], StreamEvent::AttemptStarted { attempt: 1 });
    fake.verify().unwrap();
}

#[tokio::test]
async fn anthropic_sends_headers_caching_and_muster_ids() {
    let fake = FakeLlm::start_with(
        FakeLlmConfig {
            keys: KeyCheck::Exact("test-key".into()),
            ..FakeLlmConfig::default()
        },
        vec![
            entry("alice", 7, vec![Block::text("ok")]),
            ScriptEntry {
                purpose: Some("compact".into()),
                ..entry("alice", 8, vec![Block::text("summary")])
            },
        ],
    )
    .await
    .unwrap();
    let sleeper = RecordingSleeper::new();
    let client = anthropic(&fake, &sleeper);
    complete(&client, &ctx("alice", 7), &request(MODEL))
        .await
        .unwrap();
    let r = complete(&client, &ctx("alice", 8).compact(), &request(MODEL))
        .await
        .unwrap();
    assert_eq!(r.text(), "summary");
    let reqs = model_requests(&fake);
    assert_eq!(reqs.len(), 2);
    let first = &reqs[0];
    assert_eq!(first.path, "/v1/messages");
    assert_eq!(first.header("x-api-key"), Some("test-key"));
    assert_eq!(first.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(first.header("x-muster-run-id"), Some("run-abc"));
    assert_eq!(first.header("x-muster-agent-id"), Some("alice"));
    assert_eq!(first.header("x-muster-turn"), Some("7"));
    assert_eq!(first.header("x-muster-purpose"), None);
    assert_eq!(first.header("authorization"), None);
    assert_eq!(reqs[1].header("x-muster-purpose"), Some("compact"));
    assert_eq!(reqs[1].purpose.as_deref(), Some("compact"));
    let body = &first.body;
    assert_eq!(body["stream"], json!(true));
    assert_eq!(body["max_tokens"], json!(4096));
    assert_eq!(
        body["system"],
        json!([{"type": "text", "text": "You are lead.", "cache_control": {"type": "ephemeral"}}])
    );
    assert!(body["tools"][0].get("cache_control").is_none());
    assert_eq!(
        body["tools"][1]["cache_control"],
        json!({"type": "ephemeral"})
    );
    assert_eq!(body["tools"][1]["input_schema"]["required"], json!(["cmd"]));
    assert!(body.get("thinking").is_none());
    fake.verify().unwrap();
}

#[tokio::test]
async fn anthropic_thinking_and_unknown_blocks_go_back_unchanged() {
    let future_block = json!({"type": "fake_future_block", "payload": {"k": [1, 2]}});
    let fake = FakeLlm::start(vec![
        entry(
            "lead",
            1,
            vec![
                Block::thinking("Check the files before running anything.", "EqSig+/abc=="),
                Block::Raw(future_block.clone()),
                Block::Raw(json!({"type": "redacted_thinking", "data": "opaque=="})),
                Block::tool_use("Read", json!({"path": "a.rs"})),
            ],
        ),
        entry("lead", 2, vec![Block::text("Done.")]),
    ])
    .await
    .unwrap();
    let sleeper = RecordingSleeper::new();
    let client = anthropic(&fake, &sleeper);
    let mut req = request(MODEL);
    req.max_tokens = 8192;
    req.thinking.budget_tokens = Some(2048);
    let (events, first) = collect(client.stream(&ctx("lead", 1), &req)).await;
    let first = first.unwrap();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, StreamEvent::ThinkingDelta { .. }))
    );
    assert_eq!(
        first.content[0],
        ContentBlock::Thinking {
            thinking: "Check the files before running anything.".into(),
            signature: "EqSig+/abc==".into(),
        }
    );
    assert_eq!(first.content[1], ContentBlock::Other(future_block.clone()));
    assert_eq!(
        first.content[2],
        ContentBlock::Other(json!({"type": "redacted_thinking", "data": "opaque=="}))
    );
    let call = &first.tool_calls()[0];
    req.messages.push(Message::assistant(first.content.clone()));
    req.messages.push(Message {
        role: Role::User,
        content: vec![ContentBlock::tool_result(call.id.clone(), "fn main() {}")],
    });
    let second = complete(&client, &ctx("lead", 2), &req).await.unwrap();
    assert_eq!(second.text(), "Done.");
    let reqs = model_requests(&fake);
    assert_eq!(
        reqs[0].body["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
    let sent = &reqs[1].body["messages"][1]["content"];
    assert_eq!(
        sent[0],
        json!({"type": "thinking", "thinking": "Check the files before running anything.", "signature": "EqSig+/abc=="})
    );
    assert_eq!(sent[1], future_block);
    assert_eq!(
        sent[2],
        json!({"type": "redacted_thinking", "data": "opaque=="})
    );
    assert_eq!(sent[3]["type"], json!("tool_use"));
    assert_eq!(sent[3]["id"], json!(call.id));
    assert_eq!(
        reqs[1].body["messages"][2]["content"][0]["tool_use_id"],
        json!(call.id)
    );
    fake.verify().unwrap();
}

#[tokio::test]
async fn anthropic_thinking_form_per_model_and_budget_clipping() {
    let fake = FakeLlm::start(vec![ScriptEntry {
        agent: Some("lead".into()),
        reply: Some(muster_fake_llm::Reply {
            content: vec![Block::text("ok")],
            ..Default::default()
        }),
        ..ScriptEntry::default()
    }])
    .await
    .unwrap();
    let sleeper = RecordingSleeper::new();
    let mut options = AnthropicOptions::default();
    options
        .thinking_forms
        .insert("custom-adaptive".into(), ThinkingForm::Adaptive);
    let client = HttpClient::anthropic(config(fake.base_url(), &sleeper), options).unwrap();
    let cases: Vec<(&str, u64, ThinkingSettings, Value)> = vec![
        (
            MODEL,
            4096,
            ThinkingSettings {
                budget_tokens: Some(100),
                effort: None,
            },
            json!({"type": "enabled", "budget_tokens": 1024}),
        ),
        (
            MODEL,
            4096,
            ThinkingSettings {
                budget_tokens: Some(50_000),
                effort: None,
            },
            json!({"type": "enabled", "budget_tokens": 4095}),
        ),
        (
            MODEL,
            1024,
            ThinkingSettings {
                budget_tokens: Some(2048),
                effort: None,
            },
            Value::Null,
        ),
        (
            "claude-opus-4-6",
            4096,
            ThinkingSettings {
                budget_tokens: Some(2048),
                effort: Some(ReasoningEffort::High),
            },
            json!({"type": "adaptive"}),
        ),
        (
            "custom-adaptive",
            4096,
            ThinkingSettings {
                budget_tokens: None,
                effort: Some(ReasoningEffort::Low),
            },
            json!({"type": "adaptive"}),
        ),
    ];
    for (turn, (model, max, thinking, _)) in cases.iter().enumerate() {
        let mut req = request(model);
        req.max_tokens = *max;
        req.thinking = *thinking;
        complete(&client, &ctx("lead", turn as u64 + 1), &req)
            .await
            .unwrap();
    }
    let reqs = model_requests(&fake);
    assert_eq!(
        reqs.len(),
        cases.len(),
        "every request accepted by the fake's validation"
    );
    for (r, (model, _, _, want)) in reqs.iter().zip(&cases) {
        assert_eq!(r.status, 200, "{model}: {:?}", r.error);
        assert_eq!(
            r.body.get("thinking").cloned().unwrap_or(Value::Null),
            *want,
            "{model}"
        );
    }
    assert_eq!(reqs[3].body["output_config"], json!({"effort": "high"}));
    assert_eq!(reqs[4].body["output_config"], json!({"effort": "low"}));
}

#[tokio::test]
async fn anthropic_unknown_event_skipped_and_byte_splitting_inside_utf8() {
    let text = "héllo wörld — ✓ 日本語 🦀 done";
    let fake = FakeLlm::start(vec![
        entry(
            "lead",
            1,
            vec![
                Block::text(text),
                Block::tool_use("Read", json!({"path": "日本/ü.rs"})),
            ],
        )
        .stream(StreamOptions {
            tcp_chunk_bytes: 3,
            chunk_chars: 5,
            crlf: true,
            trailing_whitespace: true,
            ..Default::default()
        })
        .fault(Fault {
            unknown_event_after_events: Some(2),
            ..Default::default()
        }),
        entry("lead", 2, vec![Block::text(text)]).stream(StreamOptions {
            tcp_chunk_bytes: 1,
            ..Default::default()
        }),
    ])
    .await
    .unwrap();
    let sleeper = RecordingSleeper::new();
    let client = anthropic(&fake, &sleeper);
    let r = complete(&client, &ctx("lead", 1), &request(MODEL))
        .await
        .unwrap();
    assert_eq!(r.text(), text);
    assert_eq!(
        tool_uses(&r),
        vec![("Read".to_owned(), json!({"path": "日本/ü.rs"}))]
    );
    assert_eq!(r.attempts, 1);
    let r = complete(&client, &ctx("lead", 2), &request(MODEL))
        .await
        .unwrap();
    assert_eq!(r.text(), text);
    assert_eq!(model_requests(&fake).len(), 2, "no retries");
}

#[tokio::test]
async fn anthropic_cut_tool_block_at_max_tokens_is_kept_with_an_empty_input() {
    let fake = FakeLlm::start(vec![
        entry(
            "lead",
            1,
            vec![
                Block::text("Writing the file."),
                Block::tool_use(
                    "Write",
                    json!({"path": "a.rs", "content": "fn main() { println!(\"a long body\"); }"}),
                ),
            ],
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
    ])
    .await
    .unwrap();
    let sleeper = RecordingSleeper::new();
    let r = complete(
        &anthropic(&fake, &sleeper),
        &ctx("lead", 1),
        &request(MODEL),
    )
    .await
    .unwrap();
    assert_eq!(r.stop_reason, StopReason::MaxTokens);
    assert_eq!(r.text(), "Writing the file.");
    let calls = r.tool_calls();
    assert_eq!(
        calls.len(),
        1,
        "the cut call is kept, for the runtime to answer"
    );
    assert_eq!(calls[0].name, "Write");
    assert!(!calls[0].id.is_empty());
    assert_eq!(
        calls[0].input,
        json!({}),
        "its incomplete input is not guessed at"
    );
}

#[tokio::test]
async fn openai_cut_tool_call_at_length_is_kept_and_the_answer_stays_cut() {
    // A complete call, then one whose arguments the limit cut (`finish_reason: "length"`).
    let body = concat!(
        "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"index\":0,\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"LS\",\"arguments\":\"{\\\"path\\\":\\\".\\\"}\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_b\",\"type\":\"function\",\"function\":{\"name\":\"Write\",\"arguments\":\"{\\\"path\\\":\\\"a.rs\\\",\\\"content\\\":\\\"fn ma\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n",
        "data: [DONE]\n\n",
    );
    let base = canned_sse(body).await;
    let sleeper = RecordingSleeper::new();
    let client = HttpClient::openai(
        config(format!("{base}/v1"), &sleeper),
        OpenAiOptions::default(),
    )
    .unwrap();
    let r = complete(&client, &ctx("lead", 1), &request("gpt-test"))
        .await
        .unwrap();
    assert_eq!(r.stop_reason, StopReason::MaxTokens, "cut, calls or not");
    assert_eq!(
        tool_uses(&r),
        vec![
            ("LS".to_owned(), json!({"path": "."})),
            ("Write".to_owned(), json!({})),
        ],
        "a complete call keeps its input; the cut one is kept with an empty input"
    );
    assert_eq!(r.tool_calls()[1].id, "call_b");
}

// ---------------------------------------------------------------------------------------
// HTTP errors and retries

#[tokio::test]
async fn retryable_statuses_are_retried_with_server_delays() {
    for status in [408u16, 409, 429, 500, 502, 503, 504, 529] {
        let fake = FakeLlm::start(vec![
            ScriptEntry {
                error: Some(HttpError {
                    status,
                    retry_after_ms: Some(20),
                    ..Default::default()
                }),
                ..ScriptEntry::http_error("lead", 1, status).attempt(1)
            },
            ScriptEntry::http_error("lead", 1, status).attempt(2),
            reply_ok("lead", 1),
        ])
        .await
        .unwrap();
        let sleeper = RecordingSleeper::new();
        let (events, r) =
            collect(anthropic(&fake, &sleeper).stream(&ctx("lead", 1), &request(MODEL))).await;
        let r = r.unwrap_or_else(|e| panic!("{status}: {e}"));
        assert_eq!(r.text(), "Recovered.");
        assert_eq!(r.attempts, 3, "{status}");
        assert_eq!(model_requests(&fake).len(), 3, "{status}");
        // retry-after-ms honoured, then the computed backoff (1 ms doubled).
        assert_eq!(
            sleeper.delays(),
            vec![Duration::from_millis(20), Duration::from_millis(2)],
            "{status}"
        );
        let retries: Vec<_> = events
            .iter()
            .filter(|e| matches!(e, StreamEvent::Retrying { .. }))
            .collect();
        assert_eq!(retries.len(), 2);
        fake.verify().unwrap();
    }
}

#[tokio::test]
async fn retry_after_seconds_and_should_retry_header() {
    let fake = FakeLlm::start(vec![
        ScriptEntry {
            error: Some(HttpError {
                status: 429,
                retry_after: Some("2".into()),
                ..Default::default()
            }),
            ..ScriptEntry::http_error("lead", 1, 429).attempt(1)
        },
        reply_ok("lead", 1),
        // x-should-retry: false beats a retryable status.
        ScriptEntry {
            error: Some(HttpError {
                status: 503,
                x_should_retry: Some(false),
                ..Default::default()
            }),
            ..ScriptEntry::http_error("lead", 2, 503)
        },
        // x-should-retry: true makes another 5xx retryable.
        ScriptEntry {
            error: Some(HttpError {
                status: 501,
                x_should_retry: Some(true),
                ..Default::default()
            }),
            ..ScriptEntry::http_error("lead", 3, 501).attempt(1)
        },
        reply_ok("lead", 3),
    ])
    .await
    .unwrap();
    let sleeper = RecordingSleeper::new();
    let client = anthropic(&fake, &sleeper);
    complete(&client, &ctx("lead", 1), &request(MODEL))
        .await
        .unwrap();
    assert_eq!(sleeper.delays(), vec![Duration::from_secs(2)]);
    let e = complete(&client, &ctx("lead", 2), &request(MODEL))
        .await
        .unwrap_err();
    assert_eq!(e.attempts, 1);
    assert_eq!(e.gave_up, GaveUp::NotRetryable);
    let r = complete(&client, &ctx("lead", 3), &request(MODEL))
        .await
        .unwrap();
    assert_eq!(r.attempts, 2);
    fake.verify().unwrap();
}

#[tokio::test]
async fn other_client_errors_are_never_retried() {
    for status in [400u16, 401, 403, 404, 413, 422] {
        let fake = FakeLlm::start(vec![ScriptEntry {
            error: Some(HttpError {
                status,
                retry_after_ms: Some(5),
                message: Some(format!("scripted {status}")),
                ..Default::default()
            }),
            ..ScriptEntry::http_error("bob", 4, status)
        }])
        .await
        .unwrap();
        let sleeper = RecordingSleeper::new();
        let e = complete(&anthropic(&fake, &sleeper), &ctx("bob", 4), &request(MODEL))
            .await
            .unwrap_err();
        assert_eq!(
            model_requests(&fake).len(),
            1,
            "{status} must not be retried"
        );
        assert!(sleeper.delays().is_empty());
        assert_eq!(e.gave_up, GaveUp::NotRetryable);
        assert!(
            matches!(&e.kind, FailureKind::Http { status: s, request_id: Some(_), .. } if *s == status),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.starts_with("anthropic: agent bob turn 4: HTTP "),
            "{text}"
        );
        assert!(text.contains(&format!("scripted {status}")), "{text}");
        assert!(text.contains("request-id req_fake_"), "{text}");
        if status == 401 {
            assert!(text.contains("check the anthropic API key"), "{text}");
        }
        if status == 404 {
            assert!(text.contains("without /v1"), "{text}");
        }
    }
}

#[tokio::test]
async fn validation_error_from_the_server_is_not_retried() {
    // A real 400 from request validation: tool_use without tool_result.
    let fake = FakeLlm::start(vec![reply_ok("lead", 1)]).await.unwrap();
    let sleeper = RecordingSleeper::new();
    let mut req = request(MODEL);
    req.messages
        .push(Message::assistant(vec![ContentBlock::ToolUse {
            id: "toolu_x".into(),
            name: "Read".into(),
            input: json!({}),
        }]));
    req.messages.push(Message::user("no result"));
    let e = complete(&anthropic(&fake, &sleeper), &ctx("lead", 1), &req)
        .await
        .unwrap_err();
    assert_eq!(model_requests(&fake).len(), 1);
    assert!(
        e.to_string()
            .contains("`tool_use` ids were found without `tool_result` blocks"),
        "{e}"
    );
}

#[tokio::test]
async fn attempt_cap_and_wait_cap() {
    let fake = FakeLlm::start(vec![ScriptEntry::http_error("lead", 1, 529)])
        .await
        .unwrap();
    let sleeper = RecordingSleeper::new();
    let e = complete(
        &anthropic(&fake, &sleeper),
        &ctx("lead", 1),
        &request(MODEL),
    )
    .await
    .unwrap_err();
    assert_eq!(e.attempts, 4, "max_retries 3 → 4 attempts");
    assert_eq!(e.gave_up, GaveUp::AttemptCap);
    assert_eq!(model_requests(&fake).len(), 4);
    assert_eq!(
        sleeper.delays(),
        vec![
            Duration::from_millis(1),
            Duration::from_millis(2),
            Duration::from_millis(4)
        ]
    );
    assert!(e.to_string().contains("attempt cap reached"), "{e}");
    assert!(e.to_string().contains("overloaded_error"), "{e}");

    let fake = FakeLlm::start(vec![ScriptEntry {
        error: Some(HttpError {
            status: 429,
            retry_after_ms: Some(50),
            ..Default::default()
        }),
        ..ScriptEntry::http_error("lead", 1, 429)
    }])
    .await
    .unwrap();
    let sleeper = RecordingSleeper::new();
    let mut c = config(fake.base_url(), &sleeper);
    c.retry.max_retries = 100;
    c.retry.max_total_wait = Duration::from_millis(120);
    let client = HttpClient::anthropic(c, AnthropicOptions::default()).unwrap();
    let e = complete(&client, &ctx("lead", 1), &request(MODEL))
        .await
        .unwrap_err();
    assert_eq!(e.gave_up, GaveUp::WaitCap);
    assert_eq!(
        sleeper.delays(),
        vec![Duration::from_millis(50), Duration::from_millis(50)]
    );
    assert_eq!(model_requests(&fake).len(), 3);
}

// ---------------------------------------------------------------------------------------
// Stream faults

/// Scripts attempt 1 of (lead, 1) with `fault` (after some text), attempt 2 normal; checks
/// the retry, that `Retrying` separates the attempts and that the reason mentions `reason`.
async fn fault_then_recovery(fault: Fault, stream: StreamOptions, openai_api: bool, reason: &str) {
    let fake = FakeLlm::start(vec![
        entry(
            "lead",
            1,
            vec![
                Block::text("partial answer that will be discarded"),
                Block::tool_use("Bash", json!({"cmd": "ls"})),
            ],
        )
        .attempt(1)
        .fault(fault)
        .stream(stream),
        reply_ok("lead", 1),
    ])
    .await
    .unwrap();
    let sleeper = RecordingSleeper::new();
    let mut c = config(
        if openai_api {
            fake.openai_base_url()
        } else {
            fake.base_url()
        },
        &sleeper,
    );
    c.stream_idle_timeout = Duration::from_millis(500);
    let client = if openai_api {
        HttpClient::openai(c, OpenAiOptions::default()).unwrap()
    } else {
        HttpClient::anthropic(c, AnthropicOptions::default()).unwrap()
    };
    let (events, r) = collect(client.stream(
        &ctx("lead", 1),
        &request(if openai_api { "gpt-test" } else { MODEL }),
    ))
    .await;
    let r = r.unwrap_or_else(|e| panic!("{reason}: {e}"));
    assert_eq!(r.text(), "Recovered.", "{reason}");
    assert!(
        r.tool_calls().is_empty(),
        "{reason}: nothing of the failed attempt survives"
    );
    assert_eq!(r.attempts, 2, "{reason}");
    let retry = events
        .iter()
        .position(|e| matches!(e, StreamEvent::Retrying { .. }))
        .unwrap_or_else(|| panic!("{reason}: no Retrying in {events:?}"));
    let StreamEvent::Retrying {
        reason: why,
        attempt,
        ..
    } = &events[retry]
    else {
        unreachable!()
    };
    assert_eq!(*attempt, 1);
    assert!(why.contains(reason), "{why:?} should mention {reason:?}");
    assert_eq!(
        events[retry + 1],
        StreamEvent::AttemptStarted { attempt: 2 }
    );
    assert_eq!(model_requests(&fake).len(), 2, "{reason}");
    let reqs = model_requests(&fake);
    assert_eq!(
        reqs[0].body, reqs[1].body,
        "a retry resends the identical body"
    );
    fake.verify().unwrap();
}

#[tokio::test]
async fn anthropic_error_event_after_200_is_retried() {
    fault_then_recovery(
        Fault {
            error_event: Some(ErrorEvent {
                after_events: 4,
                ..Default::default()
            }),
            ..Default::default()
        },
        StreamOptions::default(),
        false,
        "error event in the stream: overloaded_error: Overloaded",
    )
    .await;
}

#[tokio::test]
async fn anthropic_error_event_of_a_bad_request_is_not_retried() {
    let fake = FakeLlm::start(vec![entry("lead", 1, vec![Block::text("x")]).fault(
        Fault {
            error_event: Some(ErrorEvent {
                after_events: 1,
                error_type: Some("invalid_request_error".into()),
                message: Some("prompt is too long".into()),
            }),
            ..Default::default()
        },
    )])
    .await
    .unwrap();
    let sleeper = RecordingSleeper::new();
    let e = complete(
        &anthropic(&fake, &sleeper),
        &ctx("lead", 1),
        &request(MODEL),
    )
    .await
    .unwrap_err();
    assert_eq!(e.attempts, 1);
    assert!(e.to_string().contains("prompt is too long"), "{e}");
}

#[tokio::test]
async fn anthropic_disconnect_mid_stream_is_retried() {
    fault_then_recovery(
        Fault {
            disconnect_after_events: Some(5),
            ..Default::default()
        },
        StreamOptions::default(),
        false,
        "connection dropped mid-stream",
    )
    .await;
}

#[tokio::test]
async fn anthropic_truncated_stream_without_message_stop_is_retried() {
    fault_then_recovery(
        Fault {
            truncate_after_events: Some(9),
            ..Default::default()
        },
        StreamOptions::default(),
        false,
        "stream ended without message_stop",
    )
    .await;
}

#[tokio::test]
async fn anthropic_malformed_chunk_is_retried() {
    fault_then_recovery(
        Fault {
            malformed_after_events: Some(3),
            ..Default::default()
        },
        StreamOptions::default(),
        false,
        "malformed chunk",
    )
    .await;
}

#[tokio::test]
async fn anthropic_stall_hits_the_idle_timeout_and_is_retried() {
    fault_then_recovery(
        Fault {
            stall: Some(Stall {
                after_events: 3,
                ms: 5_000,
                ping_every_ms: 0,
                then_disconnect: false,
                gate: None,
            }),
            ..Default::default()
        },
        StreamOptions::default(),
        false,
        "stream stalled: no bytes for 500 ms",
    )
    .await;
}

#[tokio::test]
async fn keep_alive_pings_during_a_stall_are_not_idle() {
    let fake = FakeLlm::start(vec![
        entry("lead", 1, vec![Block::text("slow but alive")]).fault(Fault {
            stall: Some(Stall {
                after_events: 3,
                ms: 1200,
                ping_every_ms: 50,
                then_disconnect: false,
                gate: None,
            }),
            ..Default::default()
        }),
    ])
    .await
    .unwrap();
    let sleeper = RecordingSleeper::new();
    let mut c = config(fake.base_url(), &sleeper);
    c.stream_idle_timeout = Duration::from_millis(500);
    let r = complete(
        &HttpClient::anthropic(c, AnthropicOptions::default()).unwrap(),
        &ctx("lead", 1),
        &request(MODEL),
    )
    .await
    .unwrap();
    assert_eq!(r.text(), "slow but alive");
    assert_eq!(r.attempts, 1);
}

#[tokio::test]
async fn overall_deadline_is_a_retried_failure() {
    fault_then_recovery_deadline().await;
}

async fn fault_then_recovery_deadline() {
    let fake = FakeLlm::start(vec![
        entry("lead", 1, vec![Block::text("late")])
            .attempt(1)
            .fault(Fault {
                first_byte_delay_ms: 3_000,
                ..Default::default()
            }),
        reply_ok("lead", 1),
    ])
    .await
    .unwrap();
    let sleeper = RecordingSleeper::new();
    let mut c = config(fake.base_url(), &sleeper);
    c.request_timeout = Duration::from_millis(300);
    let (events, r) = collect(
        HttpClient::anthropic(c, AnthropicOptions::default())
            .unwrap()
            .stream(&ctx("lead", 1), &request(MODEL)),
    )
    .await;
    assert_eq!(r.unwrap().text(), "Recovered.");
    assert!(events.iter().any(|e| matches!(e, StreamEvent::Retrying { reason, .. } if reason.contains("deadline of 300 ms"))), "{events:?}");
}

#[tokio::test]
async fn connection_refused_is_retried_then_reported() {
    // A port with nothing listening: bind, read the port, close.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let sleeper = RecordingSleeper::new();
    let client = HttpClient::anthropic(
        config(format!("http://127.0.0.1:{port}"), &sleeper),
        AnthropicOptions::default(),
    )
    .unwrap();
    let e = complete(&client, &ctx("carol", 2), &request(MODEL))
        .await
        .unwrap_err();
    assert!(matches!(e.kind, FailureKind::Connect { .. }), "{e:?}");
    assert_eq!(e.attempts, 4);
    assert_eq!(e.gave_up, GaveUp::AttemptCap);
    let text = e.to_string();
    assert!(
        text.starts_with("anthropic: agent carol turn 2: cannot connect"),
        "{text}"
    );
    assert!(text.contains("check the anthropic base URL"), "{text}");
}

/// A one-shot HTTP server answering every connection with `body` as an SSE stream.
async fn canned_sse(body: &'static str) -> String {
    canned("text/event-stream", body).await
}

/// A one-shot HTTP server answering every connection with `body` as `content_type`.
async fn canned(content_type: &'static str, body: &'static str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                // Read the head and the body (content-length).
                loop {
                    let n = sock.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text[..end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + len {
                            break;
                        }
                    }
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\nconnection: close\r\n\r\n"
                );
                let _ = sock.write_all(head.as_bytes()).await;
                let _ = sock.write_all(body.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test]
async fn anthropic_sdk_fixture_edge_cases() {
    // Deltas for a block never started, an unknown delta type, message_delta usage overrides,
    // an event without `event:` name, and a tool whose JSON is empty.
    let body = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"m\",\"content\":[],\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":5,\"delta\":{\"type\":\"text_delta\",\"text\":\"orphan\"}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"citations_delta\",\"citation\":{}}}\n\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"LS\",\"input\":{},\"caller\":{\"type\":\"direct\"}}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":7,\"input_tokens\":12,\"cache_read_input_tokens\":100}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    );
    let base = canned_sse(body).await;
    let sleeper = RecordingSleeper::new();
    let r = complete(
        &HttpClient::anthropic(config(base, &sleeper), AnthropicOptions::default()).unwrap(),
        &ctx("lead", 1),
        &request(MODEL),
    )
    .await
    .unwrap();
    assert_eq!(r.text(), "Hi");
    assert_eq!(tool_uses(&r), vec![("LS".to_owned(), json!({}))]);
    assert_eq!(
        r.usage,
        Usage {
            input_tokens: 12,
            output_tokens: 7,
            cache_read_tokens: 100,
            cache_write_tokens: 0
        }
    );
    assert_eq!(r.id.as_deref(), Some("msg_1"));
}

// ---------------------------------------------------------------------------------------
// OpenAI-compatible

#[tokio::test]
async fn openai_streams_text_tool_calls_and_tool_messages() {
    let fake = FakeLlm::start_with(
        FakeLlmConfig {
            keys: KeyCheck::Exact("test-key".into()),
            ..FakeLlmConfig::default()
        },
        vec![
            entry(
                "dave",
                1,
                vec![
                    Block::text("Looking — ✓ 日本."),
                    Block::tool_use("Bash", json!({"cmd": "ls -la"})),
                ],
            )
            .stream(StreamOptions {
                tcp_chunk_bytes: 5,
                chunk_chars: 3,
                ..Default::default()
            }),
            entry("dave", 2, vec![Block::text("Two files.")]),
        ],
    )
    .await
    .unwrap();
    let sleeper = RecordingSleeper::new();
    let client = openai(&fake, &sleeper);
    let mut req = request("gpt-test");
    let (events, first) = collect(client.stream(&ctx("dave", 1), &req)).await;
    let first = first.unwrap();
    assert_eq!(first.text(), "Looking — ✓ 日本.");
    assert_eq!(
        tool_uses(&first),
        vec![("Bash".to_owned(), json!({"cmd": "ls -la"}))]
    );
    assert_eq!(first.stop_reason, StopReason::ToolUse);
    assert!(
        first.usage.input_tokens > 0 && first.usage.output_tokens > 0,
        "usage from the include_usage chunk"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, StreamEvent::ToolCall { .. }))
    );
    let call = first.tool_calls()[0].clone();
    assert!(call.id.starts_with("call_fake_"));
    req.messages.push(Message::assistant(first.content.clone()));
    req.messages.push(Message {
        role: Role::User,
        content: vec![
            ContentBlock::tool_result(call.id.clone(), "a.rs\nb.rs"),
            ContentBlock::text("continue"),
        ],
    });
    let second = complete(&client, &ctx("dave", 2), &req).await.unwrap();
    assert_eq!(second.text(), "Two files.");
    assert_eq!(second.stop_reason, StopReason::EndTurn);
    let reqs = model_requests(&fake);
    assert_eq!(reqs[0].path, "/v1/chat/completions");
    assert_eq!(reqs[0].header("authorization"), Some("Bearer test-key"));
    assert_eq!(reqs[0].header("x-muster-agent-id"), Some("dave"));
    assert_eq!(reqs[0].header("x-muster-turn"), Some("1"));
    assert_eq!(reqs[0].header("x-muster-run-id"), Some("run-abc"));
    assert_eq!(reqs[0].header("x-api-key"), None);
    let body = &reqs[0].body;
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert_eq!(
        body["messages"][0],
        json!({"role": "system", "content": "You are lead."})
    );
    assert_eq!(body["tools"][1]["type"], json!("function"));
    assert_eq!(body["tools"][1]["function"]["name"], json!("Bash"));
    let msgs = reqs[1].body["messages"].as_array().unwrap();
    assert_eq!(msgs[2]["role"], json!("assistant"));
    assert_eq!(
        msgs[2]["tool_calls"][0]["function"]["arguments"],
        json!("{\"cmd\":\"ls -la\"}")
    );
    assert_eq!(
        msgs[3],
        json!({"role": "tool", "tool_call_id": call.id, "content": "a.rs\nb.rs"})
    );
    assert_eq!(msgs[4], json!({"role": "user", "content": "continue"}));
    fake.verify().unwrap();
}

#[tokio::test]
async fn openai_quirks_are_defended() {
    let two_calls = vec![
        Block::tool_use("Read", json!({"path": "a"})),
        Block::tool_use("Read", json!({"path": "b"})),
    ];
    let quirks = [
        (
            "tool_index_always_zero",
            OpenAiQuirks {
                tool_index_always_zero: true,
                ..Default::default()
            },
        ),
        (
            "omit_tool_index",
            OpenAiQuirks {
                omit_tool_index: true,
                ..Default::default()
            },
        ),
        (
            "finish_reason_stop_with_tools",
            OpenAiQuirks {
                finish_reason_stop_with_tools: true,
                ..Default::default()
            },
        ),
        (
            "usage_choices_null",
            OpenAiQuirks {
                usage_choices_null: true,
                ..Default::default()
            },
        ),
        (
            "no_done",
            OpenAiQuirks {
                no_done: true,
                ..Default::default()
            },
        ),
        (
            "all at once",
            OpenAiQuirks {
                tool_index_always_zero: true,
                finish_reason_stop_with_tools: true,
                usage_choices_null: true,
                no_done: true,
                omit_tool_index: false,
            },
        ),
    ];
    for (name, q) in quirks {
        let fake = FakeLlm::start(vec![ScriptEntry {
            openai: q,
            ..entry("lead", 1, two_calls.clone())
        }])
        .await
        .unwrap();
        let sleeper = RecordingSleeper::new();
        let r = complete(
            &openai(&fake, &sleeper),
            &ctx("lead", 1),
            &request("gpt-test"),
        )
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            tool_uses(&r),
            vec![
                ("Read".to_owned(), json!({"path": "a"})),
                ("Read".to_owned(), json!({"path": "b"}))
            ],
            "{name}"
        );
        let ids: Vec<String> = r.tool_calls().into_iter().map(|c| c.id).collect();
        assert_ne!(ids[0], ids[1], "{name}");
        assert_eq!(r.stop_reason, StopReason::ToolUse, "{name}");
        assert!(r.usage.output_tokens > 0, "{name}: usage kept");
        assert_eq!(r.attempts, 1, "{name}");
        assert_eq!(model_requests(&fake).len(), 1, "{name}");
    }
}

#[tokio::test]
async fn openai_arguments_as_object_and_empty_string() {
    let body = concat!(
        "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"tool_calls\":[{\"index\":0,\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"Read\",\"arguments\":{\"path\":\"x\"}}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_b\",\"type\":\"function\",\"function\":{\"name\":\"LS\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n",
        ": keep-alive comment\n\n",
        "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
        "data: {\"id\":\"c1\",\"model\":\"m\",\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":9,\"prompt_tokens_details\":{\"cached_tokens\":60}}}\n\n",
    );
    let base = canned_sse(body).await;
    let sleeper = RecordingSleeper::new();
    let client = HttpClient::openai(
        config(format!("{base}/v1"), &sleeper),
        OpenAiOptions::default(),
    )
    .unwrap();
    let r = complete(&client, &ctx("lead", 1), &request("gpt-test"))
        .await
        .unwrap();
    assert_eq!(
        tool_uses(&r),
        vec![
            ("Read".to_owned(), json!({"path": "x"})),
            ("LS".to_owned(), json!({}))
        ]
    );
    assert_eq!(
        r.usage,
        Usage {
            input_tokens: 40,
            output_tokens: 9,
            cache_read_tokens: 60,
            cache_write_tokens: 0
        }
    );
}

#[tokio::test]
async fn openai_reasoning_content_becomes_unsigned_thinking_not_sent_to_anthropic() {
    let fake = FakeLlm::start(vec![entry(
        "lead",
        1,
        vec![Block::thinking("hmm", "sig"), Block::text("Answer.")],
    )])
    .await
    .unwrap();
    let sleeper = RecordingSleeper::new();
    let r = complete(
        &openai(&fake, &sleeper),
        &ctx("lead", 1),
        &request("gpt-test"),
    )
    .await
    .unwrap();
    assert_eq!(
        r.content[0],
        ContentBlock::Thinking {
            thinking: "hmm".into(),
            signature: String::new()
        }
    );
    assert_eq!(r.text(), "Answer.");
    let client = HttpClient::anthropic(
        config(fake.base_url(), &sleeper),
        AnthropicOptions::default(),
    )
    .unwrap();
    let mut req = request(MODEL);
    req.messages.push(Message::assistant(r.content.clone()));
    req.messages.push(Message::user("go on"));
    let body = client.body(&req);
    assert_eq!(
        body["messages"][1]["content"],
        json!([{"type": "text", "text": "Answer."}])
    );
}

#[tokio::test]
async fn openai_faults_are_retried() {
    let cases: Vec<(&str, Fault)> = vec![
        (
            "error event in the stream",
            Fault {
                error_event: Some(ErrorEvent {
                    after_events: 2,
                    error_type: Some("server_error".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ),
        (
            "connection dropped mid-stream",
            Fault {
                disconnect_after_events: Some(2),
                ..Default::default()
            },
        ),
        (
            "stream ended without a finish_reason or [DONE]",
            Fault {
                truncate_after_events: Some(2),
                ..Default::default()
            },
        ),
        (
            "malformed chunk",
            Fault {
                malformed_after_events: Some(1),
                ..Default::default()
            },
        ),
        (
            "stream stalled",
            Fault {
                stall: Some(Stall {
                    after_events: 1,
                    ms: 5_000,
                    ..Default::default()
                }),
                ..Default::default()
            },
        ),
    ];
    for (reason, fault) in cases {
        fault_then_recovery(fault, StreamOptions::default(), true, reason).await;
    }
}

#[tokio::test]
async fn openai_http_error_retry_and_never_retry() {
    let fake = FakeLlm::start(vec![
        ScriptEntry {
            error: Some(HttpError {
                status: 429,
                retry_after_ms: Some(7),
                ..Default::default()
            }),
            ..ScriptEntry::http_error("lead", 1, 429).attempt(1)
        },
        reply_ok("lead", 1),
        ScriptEntry::http_error("lead", 2, 400),
    ])
    .await
    .unwrap();
    let sleeper = RecordingSleeper::new();
    let client = openai(&fake, &sleeper);
    assert_eq!(
        complete(&client, &ctx("lead", 1), &request("gpt-test"))
            .await
            .unwrap()
            .attempts,
        2
    );
    assert_eq!(sleeper.delays(), vec![Duration::from_millis(7)]);
    let e = complete(&client, &ctx("lead", 2), &request("gpt-test"))
        .await
        .unwrap_err();
    assert_eq!(e.attempts, 1);
    assert!(
        e.to_string()
            .starts_with("openai: agent lead turn 2: HTTP 400 invalid_request_error"),
        "{e}"
    );
    assert!(e.to_string().contains("including /v1") || !e.to_string().contains("404"));
}

#[tokio::test]
async fn local_server_without_key_gets_no_auth_header() {
    let fake = FakeLlm::start_with(
        FakeLlmConfig {
            keys: KeyCheck::None,
            ..FakeLlmConfig::default()
        },
        vec![reply_ok("lead", 1), reply_ok("lead", 2)],
    )
    .await
    .unwrap();
    let sleeper = RecordingSleeper::new();
    let mut c = config(fake.openai_base_url(), &sleeper);
    c.api_key = None;
    complete(
        &HttpClient::openai(c, OpenAiOptions::default()).unwrap(),
        &ctx("lead", 1),
        &request("gpt-test"),
    )
    .await
    .unwrap();
    let mut c = config(fake.base_url(), &sleeper);
    c.api_key = None;
    complete(
        &HttpClient::anthropic(c, AnthropicOptions::default()).unwrap(),
        &ctx("lead", 2),
        &request(MODEL),
    )
    .await
    .unwrap();
    let reqs = model_requests(&fake);
    assert_eq!(reqs[0].header("authorization"), None);
    assert_eq!(reqs[1].header("x-api-key"), None);
}

// ---------------------------------------------------------------------------------------
// Settings, keys, cost

fn provider_settings(base_url: Option<&str>, key_env: Option<&str>) -> ProviderSettings {
    let s = |v: &str| Sourced::new(v.to_owned(), Origin::built_in());
    let n = |v: u64| Sourced::new(v, Origin::built_in());
    ProviderSettings {
        base_url: base_url.map(s),
        api_key_env: key_env.map(s),
        api_key: None,
        connect_timeout_ms: n(1000),
        request_timeout_ms: n(5000),
        stream_idle_timeout_ms: n(250),
        max_retries: n(2),
        retry_backoff_ms: n(3),
        cassette: None,
    }
}

#[test]
fn keys_come_from_the_lookup_never_the_process_environment() {
    let env = BTreeMap::from([
        ("MY_KEY".to_owned(), "k-from-map".to_owned()),
        ("ANTHROPIC_API_KEY".to_owned(), "k-default".to_owned()),
    ]);
    let lookup = |name: &str| env.get(name).cloned();
    let options = ProviderOptions::default();
    let c = client_config(
        ProviderKind::Anthropic,
        &provider_settings(None, Some("MY_KEY")),
        &prices(),
        &lookup,
        &options,
    )
    .unwrap();
    assert_eq!(c.api_key.as_deref(), Some("k-from-map"));
    assert_eq!(c.base_url, "https://api.anthropic.com");
    assert_eq!(c.stream_idle_timeout, Duration::from_millis(250));
    assert_eq!(c.retry.max_retries, 2);
    assert_eq!(c.retry.initial_backoff, Duration::from_millis(3));
    let c = client_config(
        ProviderKind::Anthropic,
        &provider_settings(None, None),
        &prices(),
        &lookup,
        &options,
    )
    .unwrap();
    assert_eq!(c.api_key.as_deref(), Some("k-default"));
    // No key for the official endpoint: an error naming the variable.
    let empty = |_: &str| None;
    let e = client_config(
        ProviderKind::OpenAi,
        &provider_settings(None, None),
        &prices(),
        &empty,
        &options,
    )
    .unwrap_err();
    assert!(
        matches!(&e, SetupError::MissingKey { variable, .. } if variable == "OPENAI_API_KEY"),
        "{e}"
    );
    assert!(e.to_string().contains("OPENAI_API_KEY"));
    // A local server needs none; a trailing /v1 on an Anthropic base URL is dropped.
    let c = client_config(
        ProviderKind::OpenAi,
        &provider_settings(Some("http://localhost:11434/v1"), None),
        &prices(),
        &empty,
        &options,
    )
    .unwrap();
    assert_eq!(
        (c.api_key, c.base_url.as_str()),
        (None, "http://localhost:11434/v1")
    );
    let c = client_config(
        ProviderKind::Anthropic,
        &provider_settings(Some("http://localhost:8080/v1/"), None),
        &prices(),
        &empty,
        &options,
    )
    .unwrap();
    assert_eq!(c.base_url, "http://localhost:8080");
    // ANTHROPIC_BASE_URL from the map when settings name none.
    let env2 = BTreeMap::from([(
        "ANTHROPIC_BASE_URL".to_owned(),
        "http://gateway:1".to_owned(),
    )]);
    let lookup2 = |name: &str| env2.get(name).cloned();
    let c = client_config(
        ProviderKind::Anthropic,
        &provider_settings(None, None),
        &prices(),
        &lookup2,
        &options,
    )
    .unwrap();
    assert_eq!(c.base_url, "http://gateway:1");
}

#[tokio::test]
async fn cost_is_computed_per_request_and_totalled() {
    let usage = UsageSpec {
        input_tokens: Some(1_000),
        output_tokens: Some(500),
        cache_read_input_tokens: Some(2_000),
        cache_creation_input_tokens: Some(100),
    };
    let fake = FakeLlm::start(vec![
        ScriptEntry {
            reply: Some(muster_fake_llm::Reply {
                content: vec![Block::text("a")],
                usage: Some(usage.clone()),
                ..Default::default()
            }),
            ..ScriptEntry::reply("lead", 1, vec![])
        },
        ScriptEntry {
            reply: Some(muster_fake_llm::Reply {
                content: vec![Block::text("b")],
                usage: Some(usage),
                ..Default::default()
            }),
            ..ScriptEntry::reply("lead", 2, vec![])
        },
    ])
    .await
    .unwrap();
    let sleeper = RecordingSleeper::new();
    for (client, model) in [
        (anthropic(&fake, &sleeper), MODEL),
        (openai(&fake, &sleeper), "gpt-test"),
    ] {
        let r = complete(&client, &ctx("lead", 1), &request(model))
            .await
            .unwrap();
        let want = Usage {
            input_tokens: 1_000,
            output_tokens: 500,
            cache_read_tokens: 2_000,
            cache_write_tokens: 100,
        };
        if client.name() == "anthropic" {
            assert_eq!(r.usage, want);
            // 1000·3 + 500·15 + 2000·0.3 + 100·3.75 per million.
            let cost = r.cost_usd.unwrap();
            assert!((cost - 0.011_475).abs() < 1e-9, "{cost}");
        } else {
            // OpenAI reports prompt tokens (cache reads included) and no cache writes.
            assert_eq!(r.usage.output_tokens, 500);
            assert!(r.cost_usd.is_some());
        }
    }
    let r = complete(
        &anthropic(&fake, &sleeper),
        &ctx("lead", 2),
        &request(MODEL),
    )
    .await
    .unwrap();
    let mut totals = UsageTotals::default();
    totals.add(&r);
    totals.add(&r);
    assert_eq!(totals.requests, 2);
    assert_eq!(totals.total_tokens(), 2 * 3_600);
    assert!((totals.cost_usd - 0.022_95).abs() < 1e-9);
    let mut unpriced = r.clone();
    unpriced.cost_usd = None;
    totals.add(&unpriced);
    assert_eq!(totals.unpriced_requests, 1);
}

// ---------------------------------------------------------------------------------------
// Script provider, recorder

fn cassette_entry(agent: &str, turn: Option<u64>, text: &str) -> CassetteEntry {
    CassetteEntry {
        agent: agent.into(),
        turn,
        purpose: None,
        when: None,
        reply: Some(CassetteReply {
            content: vec![ContentBlock::text(text)],
            stop_reason: None,
            usage: Some(Usage {
                input_tokens: 3,
                output_tokens: 2,
                ..Usage::default()
            }),
            model: None,
        }),
        request_hash: None,
    }
}

#[tokio::test]
async fn script_provider_selects_by_agent_turn_and_mail() {
    let mut when = cassette_entry("alice", None, "approved reply");
    when.when = Some(muster_agents::model::script::When {
        mail_type: Some("plan_approval_response".into()),
        from: Some("lead".into()),
    });
    let cassette = Cassette {
        entries: vec![
            cassette_entry("alice", Some(1), "turn one"),
            when,
            cassette_entry("alice", Some(2), "turn two"),
            cassette_entry("bob", Some(1), "bob one"),
        ],
    };
    let provider = ScriptProvider::new(cassette, ScriptOptions::default());
    let r = complete(&provider, &ctx("alice", 1), &request(MODEL))
        .await
        .unwrap();
    assert_eq!(r.text(), "turn one");
    assert_eq!(r.model, MODEL);
    assert_eq!(
        complete(&provider, &ctx("alice", 2), &request(MODEL))
            .await
            .unwrap()
            .text(),
        "turn two"
    );
    assert_eq!(
        complete(&provider, &ctx("bob", 1), &request(MODEL))
            .await
            .unwrap()
            .text(),
        "bob one"
    );
    let mut mail = request(MODEL);
    mail.messages.push(Message::user(
        "<mail type=\"plan_approval_response\" from='lead' id=\"m-1\">Approved.</mail>",
    ));
    assert_eq!(
        complete(&provider, &ctx("alice", 9), &mail)
            .await
            .unwrap()
            .text(),
        "approved reply"
    );
    // A turn scripted exactly beats a mail match.
    assert_eq!(
        complete(&provider, &ctx("alice", 2), &mail)
            .await
            .unwrap()
            .text(),
        "turn two"
    );
    // Missing entry: an error naming agent and turn.
    let e = complete(&provider, &ctx("alice", 3), &request(MODEL))
        .await
        .unwrap_err();
    assert_eq!(
        e.kind,
        FailureKind::MissingCassetteEntry {
            agent: "alice".into(),
            turn: 3
        }
    );
    assert!(
        e.to_string().contains(
            "script: agent alice turn 3: the cassette has no entry for agent alice turn 3"
        ),
        "{e}"
    );
    assert!(e.to_string().contains("--record"), "{e}");
}

#[tokio::test]
async fn hash_mismatch_warns_or_fails_in_strict_mode_and_placeholders_apply() {
    let redactions = vec![
        Redaction::literal("run-abc", "{run_id}").unwrap(),
        Redaction::pattern(r"nonce-[0-9a-f]{8}", "nonce-NONCE").unwrap(),
    ];
    let mut recorded = request(MODEL);
    recorded.messages = vec![Message::user("run run-abc <data nonce-0123abcd>")];
    let mut same_after_placeholders = request(MODEL);
    same_after_placeholders.messages = vec![Message::user("run run-abc <data nonce-fedc9876>")];
    assert_eq!(
        request_hash(&recorded, &redactions),
        request_hash(&same_after_placeholders, &redactions)
    );
    assert_ne!(
        request_hash(&recorded, &[]),
        request_hash(&same_after_placeholders, &[])
    );
    let mut e = cassette_entry("lead", Some(1), "hello");
    e.request_hash = Some(request_hash(&recorded, &redactions));
    let cassette = Cassette { entries: vec![e] };

    let lenient = ScriptProvider::new(
        cassette.clone(),
        ScriptOptions {
            strict: false,
            redactions: redactions.clone(),
        },
    );
    complete(&lenient, &ctx("lead", 1), &same_after_placeholders)
        .await
        .unwrap();
    assert!(lenient.warnings().is_empty());
    let drifted = request(MODEL);
    assert_eq!(
        complete(&lenient, &ctx("lead", 1), &drifted)
            .await
            .unwrap()
            .text(),
        "hello"
    );
    let warnings = lenient.warnings();
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0].contains("agent lead turn 1") && warnings[0].contains("drifted"),
        "{warnings:?}"
    );

    let strict = ScriptProvider::new(
        cassette,
        ScriptOptions {
            strict: true,
            redactions,
        },
    );
    let err = complete(&strict, &ctx("lead", 1), &drifted)
        .await
        .unwrap_err();
    assert!(
        matches!(err.kind, FailureKind::HashMismatch { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("without --strict"), "{err}");
}

#[tokio::test]
async fn record_then_replay_gives_the_same_responses() {
    let fake = FakeLlm::start(vec![
        entry(
            "lead",
            1,
            vec![
                Block::thinking("plan it", "sig-1"),
                Block::text("Reading."),
                Block::tool_use("Read", json!({"path": "a.rs"})),
            ],
        ),
        entry(
            "lead",
            2,
            vec![
                Block::Raw(json!({"type": "fake_future_block", "v": 1})),
                Block::text("Done — ✓."),
            ],
        ),
        ScriptEntry {
            purpose: Some("compact".into()),
            ..entry("lead", 3, vec![Block::text("summary")])
        },
        ScriptEntry::http_error("worker-2", 1, 529).attempt(1),
        entry("worker-2", 1, vec![Block::text("worker answer")]),
    ])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model-run.cassette.jsonl");
    let sleeper = RecordingSleeper::new();
    let redactions = vec![Redaction::literal("run-abc", "{run_id}").unwrap()];
    let inner: Arc<dyn ModelProvider> = Arc::new(anthropic(&fake, &sleeper));
    let recorder = Recorder::create(inner, &path, redactions.clone()).unwrap();

    // A small agent loop: the same requests are rebuilt from the responses on replay.
    async fn drive(p: &dyn ModelProvider) -> Vec<ModelResponse> {
        let mut out = Vec::new();
        let mut req = request(MODEL);
        let first = complete(p, &ctx("lead", 1), &req).await.unwrap();
        let call = first.tool_calls()[0].clone();
        req.messages.push(Message::assistant(first.content.clone()));
        req.messages.push(Message {
            role: Role::User,
            content: vec![ContentBlock::tool_result(call.id, "fn a() {}")],
        });
        out.push(first);
        let second = complete(p, &ctx("lead", 2), &req).await.unwrap();
        req.messages
            .push(Message::assistant(second.content.clone()));
        req.messages.push(Message::user("summarise"));
        out.push(second);
        out.push(complete(p, &ctx("lead", 3).compact(), &req).await.unwrap());
        out.push(
            complete(p, &ctx("worker-2", 1), &request(MODEL))
                .await
                .unwrap(),
        );
        out
    }
    let recorded = drive(&recorder).await;
    assert_eq!(
        recorded[3].attempts, 2,
        "the recorder sees the retried answer only"
    );
    fake.verify().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 4, "{text}");

    let replay = ScriptProvider::open(
        &path,
        ScriptOptions {
            strict: true,
            redactions,
        },
    )
    .unwrap();
    let replayed = drive(&replay).await;
    assert!(replay.warnings().is_empty(), "{:?}", replay.warnings());
    let strip = |r: &ModelResponse| {
        (
            r.content.clone(),
            r.stop_reason.clone(),
            r.usage,
            r.model.clone(),
        )
    };
    assert_eq!(
        recorded.iter().map(strip).collect::<Vec<_>>(),
        replayed.iter().map(strip).collect::<Vec<_>>()
    );
    assert!(
        matches!(&replayed[1].content[0], ContentBlock::Other(v) if v["type"] == "fake_future_block")
    );

    // The cassette (minus request_hash) is a fake-server script giving the same answers.
    let cassette = Cassette::parse(&text).unwrap();
    let script = muster_fake_llm::parse_script(&cassette.to_fake_script()).unwrap();
    assert_eq!(script.len(), 4);
    assert_eq!(script[2].purpose.as_deref(), Some("compact"));
    let fake2 = FakeLlm::start(script).await.unwrap();
    let again = drive(&anthropic(&fake2, &sleeper)).await;
    let content = |r: &ModelResponse| r.content.clone();
    assert_eq!(
        recorded.iter().map(content).collect::<Vec<_>>(),
        again.iter().map(content).collect::<Vec<_>>()
    );
    fake2.verify().unwrap();
}

#[test]
fn a_fake_server_script_replays_as_a_cassette() {
    // Fake-server fields the replayer does not use are ignored; error entries are skipped;
    // tool calls without ids get deterministic ones.
    let text = r#"
{"agent":"lead","turn":1,"attempt":1,"error":{"status":529}}
{"agent":"lead","turn":1,"reply":{"content":[{"type":"tool_use","name":"LS","input":{}}]},"stream":{"tcp_chunk_bytes":3}}
"#;
    let cassette = Cassette::parse(text).unwrap();
    let provider = ScriptProvider::new(cassette, ScriptOptions::default());
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let r = rt
        .block_on(provider.stream(&ctx("lead", 1), &request(MODEL)).response())
        .unwrap();
    assert_eq!(r.stop_reason, StopReason::ToolUse);
    assert_eq!(r.tool_calls()[0].id, "toolu_script_lead_1_1");
    let _ = When::default();
}

#[tokio::test]
async fn silent_server_before_headers_hits_the_idle_timeout() {
    fault_then_recovery(
        Fault {
            first_byte_delay_ms: 5_000,
            ..Default::default()
        },
        StreamOptions::default(),
        false,
        "stream stalled: no bytes for 500 ms",
    )
    .await;
}

#[tokio::test]
async fn a_json_answer_to_a_streaming_request_is_accepted() {
    let sleeper = RecordingSleeper::new();
    let base = canned(
        "application/json",
        r#"{"id":"msg_j","type":"message","role":"assistant","model":"m","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"text","text":"Hi"},{"type":"tool_use","id":"toolu_j","name":"LS","input":{"path":"."}}],"stop_reason":"tool_use","usage":{"input_tokens":5,"output_tokens":3}}"#,
    )
    .await;
    let client =
        HttpClient::anthropic(config(base, &sleeper), AnthropicOptions::default()).unwrap();
    let r = complete(&client, &ctx("lead", 1), &request(MODEL))
        .await
        .unwrap();
    assert_eq!(r.text(), "Hi");
    assert_eq!(
        r.content[0],
        ContentBlock::Thinking {
            thinking: "t".into(),
            signature: "s".into()
        }
    );
    assert_eq!(tool_uses(&r), vec![("LS".to_owned(), json!({"path": "."}))]);
    assert_eq!(r.usage.input_tokens, 5);
    let base = canned(
        "application/json; charset=utf-8",
        r#"{"id":"c","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"LS","arguments":"{\"path\":\".\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":9,"completion_tokens":4}}"#,
    )
    .await;
    let client = HttpClient::openai(
        config(format!("{base}/v1"), &sleeper),
        OpenAiOptions::default(),
    )
    .unwrap();
    let r = complete(&client, &ctx("lead", 1), &request("gpt-test"))
        .await
        .unwrap();
    assert_eq!(tool_uses(&r), vec![("LS".to_owned(), json!({"path": "."}))]);
    assert_eq!(r.stop_reason, StopReason::ToolUse);
    assert_eq!(r.usage.output_tokens, 4);
}

#[test]
fn the_key_is_masked_and_streams_are_send() {
    let c = ClientConfig::new("http://localhost:1", Some("sk-secret-123".into()));
    let shown = format!("{c:?}");
    assert!(!shown.contains("sk-secret"), "{shown}");
    fn is_send<T: Send>(_: &T) {}
    let provider = ScriptProvider::new(Cassette::default(), ScriptOptions::default());
    is_send(&provider.stream(&ctx("a", 1), &request(MODEL)));
}

#[tokio::test]
async fn build_provider_from_settings_and_a_key_lookup() {
    use muster_agents::model::build_provider;
    // Run alone (nextest gives each test its own process), no other test installed it.
    super::harness::install_tls_provider();
    let dir = tempfile::tempdir().unwrap();
    let cassette = dir.path().join("model-replay.jsonl");
    std::fs::write(
        &cassette,
        serde_json::to_string(&cassette_entry("lead", Some(1), "from the cassette")).unwrap()
            + "\n",
    )
    .unwrap();
    let fake = FakeLlm::start(vec![reply_ok("lead", 1)]).await.unwrap();
    let cli = muster_config::CliOverrides::new()
        .set(
            "providers.script.cassette",
            cassette.display().to_string(),
            "--cassette",
        )
        .set(
            "providers.openai.base_url",
            fake.openai_base_url(),
            "--base-url",
        );
    let settings = load_settings(dir.path(), cli).unwrap_or_else(|e| panic!("{e}"));
    let env = BTreeMap::from([("OPENAI_API_KEY".to_owned(), "k".to_owned())]);
    let lookup = |name: &str| env.get(name).cloned();
    let options = ProviderOptions::default();

    let script = build_provider(ProviderKind::Script, &settings, &lookup, &options).unwrap();
    assert_eq!(script.name(), "script");
    let r = complete(script.as_ref(), &ctx("lead", 1), &request(MODEL))
        .await
        .unwrap();
    assert_eq!(r.text(), "from the cassette");

    let openai = build_provider(ProviderKind::OpenAi, &settings, &lookup, &options).unwrap();
    let r = complete(openai.as_ref(), &ctx("lead", 1), &request("gpt-5"))
        .await
        .unwrap();
    assert_eq!(r.text(), "Recovered.");
    assert!(r.cost_usd.is_some(), "built-in prices for gpt-5");
    assert_eq!(
        model_requests(&fake)[0].header("authorization"),
        Some("Bearer k")
    );

    // The official Anthropic endpoint with no key in the lookup.
    let e = build_provider(
        ProviderKind::Anthropic,
        &settings,
        &|_: &str| None,
        &options,
    )
    .unwrap_err();
    assert!(e.to_string().contains("ANTHROPIC_API_KEY"), "{e}");
}

#[tokio::test]
async fn openai_keep_alive_comments_during_a_stall_are_not_idle() {
    let fake = FakeLlm::start(vec![
        entry("lead", 1, vec![Block::text("slow but alive")]).fault(Fault {
            stall: Some(Stall {
                after_events: 2,
                ms: 1200,
                ping_every_ms: 50,
                then_disconnect: false,
                gate: None,
            }),
            ..Default::default()
        }),
    ])
    .await
    .unwrap();
    let sleeper = RecordingSleeper::new();
    let mut c = config(fake.openai_base_url(), &sleeper);
    c.stream_idle_timeout = Duration::from_millis(500);
    let client = HttpClient::openai(c, OpenAiOptions::default()).unwrap();
    let r = complete(&client, &ctx("lead", 1), &request("gpt-test"))
        .await
        .unwrap();
    assert_eq!(r.text(), "slow but alive");
    assert_eq!(r.attempts, 1);
}

#[tokio::test]
async fn a_stall_that_ends_in_a_disconnect_is_retried() {
    fault_then_recovery(
        Fault {
            stall: Some(Stall {
                after_events: 3,
                ms: 100,
                ping_every_ms: 0,
                then_disconnect: true,
                gate: None,
            }),
            ..Default::default()
        },
        StreamOptions::default(),
        false,
        "connection dropped mid-stream",
    )
    .await;
}

#[tokio::test]
async fn https_goes_through_rustls_and_a_failed_handshake_is_a_connect_error() {
    // The fake speaks plain HTTP: a TLS client hello gets no valid answer.
    let fake = FakeLlm::start(vec![]).await.unwrap();
    let sleeper = RecordingSleeper::new();
    let base = format!("https://{}", fake.addr());
    let mut c = config(base, &sleeper);
    c.retry.max_retries = 0;
    let client = HttpClient::anthropic(c, AnthropicOptions::default()).unwrap();
    let e = complete(&client, &ctx("lead", 1), &request(MODEL))
        .await
        .unwrap_err();
    assert!(matches!(e.kind, FailureKind::Connect { .. }), "{e:?}");
    assert_eq!(e.attempts, 1);
    assert!(model_requests(&fake).is_empty());
    assert!(e.to_string().contains("received corrupt message"), "{e}");
}

#[tokio::test]
async fn the_example_cassette_replays_and_drives_the_fake_server() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/model-cassette.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    // Without request hashes it is also a fake-server script as it stands.
    let script = muster_fake_llm::parse_script(&text).unwrap();
    assert_eq!(script.len(), 3);
    let provider = ScriptProvider::open(
        &path,
        ScriptOptions {
            strict: true,
            redactions: vec![],
        },
    )
    .unwrap();
    let fake = FakeLlm::start(script).await.unwrap();
    let sleeper = RecordingSleeper::new();
    let http = anthropic(&fake, &sleeper);
    let mut mail = request(MODEL);
    mail.messages = vec![Message::user(
        "<mail type=\"plan_approval_response\" from=\"lead\" id=\"m1\">Approved.</mail>",
    )];
    for (c, req) in [
        (ctx("lead", 1), request(MODEL)),
        (ctx("lead", 2), request(MODEL)),
        (ctx("alice", 5), mail),
    ] {
        let replayed = complete(&provider, &c, &req).await.unwrap();
        let served = complete(&http, &c, &req).await.unwrap();
        assert_eq!(replayed.content, served.content, "{c:?}");
        assert_eq!(replayed.stop_reason, served.stop_reason, "{c:?}");
    }
    let first = complete(&provider, &ctx("lead", 1), &request(MODEL))
        .await
        .unwrap();
    assert_eq!(first.usage.cache_write_tokens, 900);
    fake.verify().unwrap();
}

// ---------------------------------------------------------------------------------------
// OpenAI-compatible prompt caching

fn reply_with_usage(agent: &str, turn: u64, usage: UsageSpec) -> ScriptEntry {
    ScriptEntry {
        reply: Some(muster_fake_llm::Reply {
            content: vec![Block::text("ok")],
            usage: Some(usage),
            ..Default::default()
        }),
        ..ScriptEntry::reply(agent, turn, vec![])
    }
}

#[tokio::test]
async fn openai_prompt_cache_key_is_stable_per_agent_and_sent_only_where_enabled() {
    let usage = UsageSpec::default();
    let fake = FakeLlm::start(vec![
        reply_with_usage("lead", 1, usage.clone()),
        reply_with_usage("lead", 2, usage.clone()),
        reply_with_usage("alice", 1, usage.clone()),
        reply_with_usage("bob", 1, usage),
    ])
    .await
    .unwrap();
    let sleeper = RecordingSleeper::new();
    let keyed = HttpClient::openai(
        config(fake.openai_base_url(), &sleeper),
        OpenAiOptions {
            prompt_cache_key: Some(true),
            ..OpenAiOptions::default()
        },
    )
    .unwrap();
    for (agent, turn) in [("lead", 1), ("lead", 2), ("alice", 1)] {
        complete(&keyed, &ctx(agent, turn), &request("gpt-test"))
            .await
            .unwrap();
    }
    // A compatible server (not api.openai.com) gets no key unless it is switched on.
    complete(
        &openai(&fake, &sleeper),
        &ctx("bob", 1),
        &request("gpt-test"),
    )
    .await
    .unwrap();
    let keys: Vec<Option<String>> = model_requests(&fake)
        .iter()
        .map(|r| r.body["prompt_cache_key"].as_str().map(str::to_owned))
        .collect();
    let lead = muster_agents::model::prompt_cache_key("run-abc", "lead");
    let alice = muster_agents::model::prompt_cache_key("run-abc", "alice");
    assert_eq!(
        keys,
        [
            Some(lead.clone()),
            Some(lead.clone()),
            Some(alice.clone()),
            None
        ]
    );
    assert_ne!(lead, alice);
    assert_ne!(
        lead,
        muster_agents::model::prompt_cache_key("run-xyz", "lead")
    );
    assert!(lead.starts_with("muster-") && lead.len() <= 64, "{lead}");
}

#[tokio::test]
async fn openai_cached_tokens_are_counted_and_cost_at_the_cache_read_price() {
    // The fake reports prompt_tokens = input + cached, with prompt_tokens_details.cached_tokens.
    let usage = UsageSpec {
        input_tokens: Some(400_000),
        output_tokens: Some(10_000),
        cache_read_input_tokens: Some(600_000),
        cache_creation_input_tokens: None,
    };
    let fake = FakeLlm::start(vec![reply_with_usage("lead", 1, usage)])
        .await
        .unwrap();
    let sleeper = RecordingSleeper::new();
    let r = complete(
        &openai(&fake, &sleeper),
        &ctx("lead", 1),
        &request("gpt-test"),
    )
    .await
    .unwrap();
    assert_eq!(
        r.usage,
        Usage {
            input_tokens: 400_000,
            output_tokens: 10_000,
            cache_read_tokens: 600_000,
            cache_write_tokens: 0,
        }
    );
    assert_eq!(r.usage.prompt_tokens(), 1_000_000);
    // sonnet_info's prices: 3.0 in, 15.0 out, 0.3 cache read (per million).
    let expected = 0.4 * 3.0 + 0.01 * 15.0 + 0.6 * 0.3;
    let cost = r.cost_usd.unwrap();
    assert!((cost - expected).abs() < 1e-9, "{cost} != {expected}");
    let mut totals = UsageTotals::default();
    totals.add(&r);
    assert_eq!(totals.usage.cache_read_tokens, 600_000);
}

#[tokio::test]
async fn openai_requests_of_consecutive_turns_extend_the_previous_prefix() {
    // The stable prefix OpenAI caches automatically: the next turn's body starts with the
    // previous body's messages, unchanged, and the tools do not move.
    let fake = FakeLlm::start(vec![
        reply_with_usage("lead", 1, UsageSpec::default()),
        reply_with_usage("lead", 2, UsageSpec::default()),
    ])
    .await
    .unwrap();
    let sleeper = RecordingSleeper::new();
    let client = openai(&fake, &sleeper);
    let first = request("gpt-test");
    let answer = complete(&client, &ctx("lead", 1), &first).await.unwrap();
    let mut second = first.clone();
    second.messages.push(Message {
        role: Role::Assistant,
        content: answer.content,
    });
    second.messages.push(Message::user(
        "<mail type=\"message\" from=\"alice\" id=\"m-1\">Done.</mail>\n\n<system-reminder>\nMode: default.\n</system-reminder>",
    ));
    complete(&client, &ctx("lead", 2), &second).await.unwrap();
    let bodies: Vec<Value> = model_requests(&fake).into_iter().map(|r| r.body).collect();
    let (a, b) = (&bodies[0], &bodies[1]);
    let earlier = a["messages"].as_array().unwrap();
    assert_eq!(
        &b["messages"].as_array().unwrap()[..earlier.len()],
        earlier.as_slice()
    );
    assert_eq!(a["tools"], b["tools"]);
}
