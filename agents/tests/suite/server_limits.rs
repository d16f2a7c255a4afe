//! What a model server reports about its limits (`GET /v1/models`, llama.cpp's `GET /props`)
//! and what it refuses (a prompt too long), against `muster-fake-llm` over real HTTP and a
//! real SQLite store: the output limit clipped to the report and kept in the `started` record
//! for a resume that never asks again; a model the catalogue lacks compacted by the window its
//! server reports; a prompt the server refuses as too long compacted and sent once more, on
//! both wires and in each server's words, and a clear failure when that does not help.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::sync::Arc;

use muster_agents::model::{ClientConfig, HttpClient, OpenAiOptions, ServerLimits};
use muster_agents::runtime::{
    AgentKind, AgentRuntime, ModeModel, ModelRouter, PlanApprover, Record, RunContext, RuntimeError,
};
use muster_config::PermissionMode;
use muster_fake_llm::{
    Block, FakeLlm, FakeLlmConfig, FakeLlmHandle, HttpError, ScriptEntry, UsageSpec,
};
use serde_json::{Value, json};

use super::harness::{GUARD, RunHarness, SONNET, finished, run, spec, start};

/// A server that reports an output limit of 1000 in its model list and an `n_ctx`-token slot
/// in llama.cpp's `/props` (`n_predict: -1`: no cap of its own).
fn reporting_server(n_ctx: u64) -> FakeLlmConfig {
    let mut config = FakeLlmConfig::default();
    config
        .model_fields
        .insert("max_output_tokens".into(), json!(1000));
    config.props = Some(json!({
        "default_generation_settings": {"n_ctx": n_ctx, "params": {"n_predict": -1}},
        "total_slots": 1,
    }));
    config
}

fn read(agent: &str, turn: u64) -> ScriptEntry {
    ScriptEntry::reply(
        agent,
        turn,
        vec![Block::tool_use("Read", json!({"file_path": "README.md"}))],
    )
}

fn with_usage(mut entry: ScriptEntry, input: u64) -> ScriptEntry {
    if let Some(reply) = entry.reply.as_mut() {
        reply.usage = Some(UsageSpec {
            input_tokens: Some(input),
            output_tokens: Some(20),
            cache_read_input_tokens: Some(0),
            cache_creation_input_tokens: Some(0),
        });
    }
    entry
}

fn summary(agent: &str, turn: u64) -> ScriptEntry {
    ScriptEntry {
        purpose: Some("compact".into()),
        ..ScriptEntry::reply(
            agent,
            turn,
            vec![Block::text("HANDOFF: the README was read.")],
        )
    }
}

fn max_tokens(fake: &FakeLlmHandle, agent: &str) -> Vec<Value> {
    fake.requests()
        .into_iter()
        .filter(|r| r.agent.as_deref() == Some(agent) && r.purpose.is_none())
        .map(|r| r.body["max_tokens"].clone())
        .collect()
}

fn model_limits(records: &[Record]) -> std::collections::BTreeMap<String, ServerLimits> {
    match records.first() {
        Some(Record::Started { model_limits, .. }) => model_limits.clone(),
        other => panic!("a started record first, got {other:?}"),
    }
}

#[tokio::test]
async fn the_output_limit_is_clipped_to_the_report_and_a_resume_uses_the_recorded_one() {
    let h = RunHarness::setup()
        .file("README.md", "hello\n")
        .fake_config(reporting_server(100_000))
        .start(vec![
            read("main", 1),
            ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
        ])
        .await;
    let context = h.context(PlanApprover::Human);
    let mut agent = start(
        context.clone(),
        spec("main", AgentKind::Main, PermissionMode::Default),
        "Read the README.",
    )
    .await;
    assert_eq!(run(&mut agent).await, finished("Done."));
    // The smallest of the mode's 4096, the server's 1000 and a quarter of its window.
    assert_eq!(max_tokens(&h.fake, "main"), vec![json!(1000), json!(1000)]);
    let reported = ServerLimits {
        context_window: Some(100_000),
        max_output: Some(1000),
    };
    assert_eq!(
        model_limits(&h.records("main").await),
        std::collections::BTreeMap::from([(SONNET.to_owned(), reported)])
    );
    let asked: Vec<(String, String, Option<String>)> = h
        .fake
        .metadata_requests()
        .into_iter()
        .map(|r| {
            (
                r.method.clone(),
                r.path.clone(),
                r.header("anthropic-version").map(str::to_owned),
            )
        })
        .collect();
    assert_eq!(
        asked.iter().map(|a| a.1.as_str()).collect::<Vec<_>>(),
        vec!["/v1/models", "/props"],
        "asked once, with the client's headers: {asked:?}"
    );
    assert!(asked.iter().all(|a| a.0 == "GET" && a.2.is_some()));

    // A second agent of the run: the provider answers from its cache.
    let other = start(
        context,
        spec("other", AgentKind::Main, PermissionMode::Default),
        "Read it too.",
    )
    .await;
    assert_eq!(h.fake.metadata_requests().len(), 2, "cached for the run");
    assert_eq!(model_limits(&h.records("other").await).len(), 1);

    // Resumed in another process against a server that reports nothing: the recorded limits
    // decide, and the server is never asked.
    let elsewhere = FakeLlm::start(vec![ScriptEntry::reply(
        "other",
        1,
        vec![Block::text("Read.")],
    )])
    .await
    .unwrap();
    let mut config = ClientConfig::new(elsewhere.base_url(), Some("test-key".into()));
    config.retry.max_retries = 0;
    let resumed_context = Arc::new(RunContext {
        agent_models: Default::default(),
        models: ModelRouter::single(ModeModel {
            provider: Arc::new(HttpClient::anthropic(config, Default::default()).unwrap()),
            ..h.model(SONNET)
        }),
        ..h.run_context(PlanApprover::Human)
    });
    drop(other);
    let mut resumed = AgentRuntime::resume(resumed_context, "other", None, None)
        .await
        .unwrap();
    assert_eq!(run(&mut resumed).await, finished("Read."));
    assert_eq!(max_tokens(&elsewhere, "other"), vec![json!(1000)]);
    assert!(
        elsewhere.metadata_requests().is_empty(),
        "never asked again"
    );
}

#[tokio::test]
async fn a_model_the_catalogue_lacks_is_compacted_by_the_window_its_server_reports() {
    // Window 2048, output 512: the threshold is 2048 − 512 − 2048/8 = 1280 prompt tokens.
    let h = RunHarness::setup()
        .file("README.md", "hello\n")
        .fake_config(reporting_server(2048))
        .start(vec![
            with_usage(read("main", 1), 300),
            with_usage(read("main", 2), 1500),
            summary("main", 3),
            ScriptEntry::reply("main", 4, vec![Block::text("Done.")]),
        ])
        .await;
    let context = Arc::new(RunContext {
        agent_models: Default::default(),
        models: ModelRouter::single(h.model("local-model")),
        ..h.run_context(PlanApprover::Human)
    });
    assert!(context.compaction.models.is_empty(), "no catalogue entry");
    let mut agent = start(
        context,
        spec("main", AgentKind::Main, PermissionMode::Default),
        "Read the README, twice.",
    )
    .await;
    assert_eq!(run(&mut agent).await, finished("Done."));
    // A quarter of the 2048-token window, below the server's 1000 and the mode's 4096.
    assert_eq!(max_tokens(&h.fake, "main"), vec![json!(512); 3]);
    let records = h.records("main").await;
    assert!(
        records
            .iter()
            .any(|r| matches!(r, Record::Compacted { turn: 3, .. })),
        "{records:#?}"
    );
    h.fake.verify().unwrap();
}

/// A 400 answering `turn` of `main`, first attempt only.
fn refused(turn: u64, error_type: &str, message: &str, code: Option<&str>) -> ScriptEntry {
    ScriptEntry {
        error: Some(HttpError {
            status: 400,
            error_type: Some(error_type.into()),
            message: Some(message.into()),
            code: code.map(str::to_owned),
            ..HttpError::default()
        }),
        ..ScriptEntry::http_error("main", turn, 400)
    }
}

#[tokio::test]
async fn a_prompt_refused_as_too_long_is_compacted_and_sent_once_more_on_both_wires() {
    let table = [
        (
            "anthropic",
            "invalid_request_error",
            "prompt is too long: 208310 tokens > 200000 maximum",
            None,
        ),
        (
            "openai",
            "invalid_request_error",
            "This model's maximum context length is 128000 tokens. However, your messages resulted in 130512 tokens.",
            Some("context_length_exceeded"),
        ),
        (
            "openai",
            "exceed_context_size_error",
            "the request exceeds the available context size, try increasing it",
            None,
        ),
    ];
    for (wire, error_type, message, code) in table {
        let h = RunHarness::setup()
            .file("README.md", "hello\n")
            .start(vec![
                read("main", 1),
                read("main", 2),
                refused(3, error_type, message, code),
                summary("main", 3),
                ScriptEntry::reply("main", 4, vec![Block::text("Done.")]),
            ])
            .await;
        let context = Arc::new(RunContext {
            agent_models: Default::default(),
            models: ModelRouter::single(model_on(&h, wire)),
            ..h.run_context(PlanApprover::Human)
        });
        let mut agent = start(
            context,
            spec("main", AgentKind::Main, PermissionMode::Default),
            "Read the README, twice.",
        )
        .await;
        assert_eq!(run(&mut agent).await, finished("Done."), "{wire} {message}");
        let asked: Vec<(Option<u64>, Option<String>, u16)> = h
            .fake
            .requests()
            .into_iter()
            .map(|r| (r.turn, r.purpose.clone(), r.status))
            .collect();
        assert_eq!(
            asked,
            vec![
                (Some(1), None, 200),
                (Some(2), None, 200),
                (Some(3), None, 400),
                (Some(3), Some("compact".into()), 200),
                (Some(4), None, 200),
            ],
            "{wire} {message}"
        );
        let records = h.records("main").await;
        assert!(
            records
                .iter()
                .any(|r| matches!(r, Record::Compacted { turn: 3, .. })),
            "{wire}"
        );
        h.fake.verify().unwrap();
    }
}

#[tokio::test]
async fn a_prompt_still_too_long_after_compaction_or_with_nothing_to_compact_fails_clearly() {
    let too_long = "prompt is too long: 300000 tokens > 200000 maximum";
    // Refused again after the compaction.
    let h = RunHarness::setup()
        .file("README.md", "hello\n")
        .start(vec![
            read("main", 1),
            read("main", 2),
            refused(3, "invalid_request_error", too_long, None),
            summary("main", 3),
            refused(4, "invalid_request_error", too_long, None),
        ])
        .await;
    let mut agent = start(
        h.context(PlanApprover::Human),
        spec("main", AgentKind::Main, PermissionMode::Default),
        "Read the README, twice.",
    )
    .await;
    let error = run_err(&mut agent).await;
    assert!(
        matches!(&error, RuntimeError::PromptTooLong { after, .. } if after.contains("even after")),
        "{error}"
    );
    let text = error.to_string();
    assert!(
        text.contains(SONNET) && text.contains("context_window"),
        "{text}"
    );
    assert_eq!(h.fake.requests().len(), 5, "one retry, no more");

    // The first request refused, and the request to compact it too.
    let h = RunHarness::setup()
        .start(vec![refused(1, "invalid_request_error", too_long, None)])
        .await;
    let mut agent = start(
        h.context(PlanApprover::Human),
        spec("main", AgentKind::Main, PermissionMode::Default),
        "Hello.",
    )
    .await;
    let error = run_err(&mut agent).await;
    assert!(
        matches!(&error, RuntimeError::PromptTooLong { after, .. } if after.contains("compaction request")),
        "{error}"
    );
    let purposes: Vec<Option<String>> = h.fake.requests().into_iter().map(|r| r.purpose).collect();
    assert_eq!(purposes, vec![None, Some("compact".into())]);
}

fn model_on(h: &RunHarness, wire: &str) -> ModeModel {
    if wire == "anthropic" {
        return h.model(SONNET);
    }
    let mut config = ClientConfig::new(h.fake.openai_base_url(), Some("test-key".into()));
    config.retry.max_retries = 0;
    ModeModel {
        provider: Arc::new(HttpClient::openai(config, OpenAiOptions::default()).unwrap()),
        ..h.model("gpt-4.1")
    }
}

async fn run_err(agent: &mut AgentRuntime) -> RuntimeError {
    tokio::time::timeout(GUARD, agent.run())
        .await
        .expect("guard timeout")
        .expect_err("the agent fails")
}
