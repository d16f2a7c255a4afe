//! Request validation as the real APIs do it; each rule has its own test.

use super::common::*;
use muster_fake_llm::{FakeLlmConfig, FakeLlmHandle, KeyCheck};
use serde_json::{Value, json};

async fn send_anthropic(
    fake: &FakeLlmHandle,
    headers: &[(&str, &str)],
    body: &Value,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut rb = client().post(format!("{}/v1/messages", fake.base_url()));
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    let resp = guard(
        rb.header("x-muster-agent-id", "a")
            .header("x-muster-turn", "1")
            .json(body)
            .send(),
    )
    .await
    .unwrap();
    let status = resp.status().as_u16();
    let h = resp.headers().clone();
    (status, h, json_of(resp).await)
}

const GOOD: [(&str, &str); 2] = [("x-api-key", "k"), ("anthropic-version", "2023-06-01")];

/// Asserts an Anthropic error answer: status, type, exact message, request id.
async fn anthropic_rejects(body: Value, status: u16, ty: &str, message: &str) {
    let fake = start(vec![]).await;
    let (s, h, v) = send_anthropic(&fake, &GOOD, &body).await;
    assert_eq!(s, status, "{v}");
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], ty);
    assert_eq!(v["error"]["message"], message);
    assert!(h["request-id"].to_str().unwrap().starts_with("req_fake_"));
    assert_eq!(v["request_id"], h["request-id"].to_str().unwrap());
    let rec = &fake.requests()[0];
    assert_eq!(rec.status, status);
    assert_eq!(rec.error.as_deref(), Some(message));
    assert!(!rec.unmatched);
}

fn body_with(messages: Value) -> Value {
    json!({"model": "claude-sonnet-4-5", "max_tokens": 2048, "messages": messages})
}

#[tokio::test]
async fn validation_anthropic_missing_api_key_is_401() {
    let fake = start(vec![]).await;
    let (s, h, v) = send_anthropic(
        &fake,
        &[("anthropic-version", "2023-06-01")],
        &anthropic_body(false),
    )
    .await;
    assert_eq!(s, 401);
    assert_eq!(v["error"]["type"], "authentication_error");
    assert_eq!(v["error"]["message"], "x-api-key header is required");
    assert!(h.contains_key("request-id"));
}

#[tokio::test]
async fn validation_anthropic_wrong_api_key_is_401_with_exact_key_check() {
    let config = FakeLlmConfig {
        keys: KeyCheck::Exact("right".into()),
        ..FakeLlmConfig::default()
    };
    let fake = start_with(config, vec![]).await;
    let (s, _, v) = send_anthropic(
        &fake,
        &[("x-api-key", "wrong"), ("anthropic-version", "2023-06-01")],
        &anthropic_body(false),
    )
    .await;
    assert_eq!(s, 401);
    assert_eq!(v["error"]["message"], "invalid x-api-key");
}

#[tokio::test]
async fn validation_no_key_needed_with_key_check_none() {
    let config = FakeLlmConfig {
        keys: KeyCheck::None,
        ..FakeLlmConfig::default()
    };
    let fake = start_with(
        config,
        entries(json!([{"reply": {"content": [{"type": "text", "text": "local"}]}}])),
    )
    .await;
    let (s, _, _) = send_anthropic(
        &fake,
        &[("anthropic-version", "2023-06-01")],
        &anthropic_body(false),
    )
    .await;
    assert_eq!(s, 200);
    let resp = guard(
        client()
            .post(format!("{}/chat/completions", fake.openai_base_url()))
            .json(&openai_body(false))
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(resp.status(), 200);
}

#[tokio::test]
async fn validation_anthropic_missing_version_is_400() {
    let fake = start(vec![]).await;
    let (s, _, v) = send_anthropic(&fake, &[("x-api-key", "k")], &anthropic_body(false)).await;
    assert_eq!(s, 400);
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(
        v["error"]["message"],
        "anthropic-version: header is required"
    );
}

#[tokio::test]
async fn validation_anthropic_missing_model_is_400() {
    let mut body = anthropic_body(false);
    body.as_object_mut().unwrap().remove("model");
    anthropic_rejects(body, 400, "invalid_request_error", "model: Field required").await;
}

#[tokio::test]
async fn validation_anthropic_missing_max_tokens_is_400() {
    let mut body = anthropic_body(false);
    body.as_object_mut().unwrap().remove("max_tokens");
    anthropic_rejects(
        body,
        400,
        "invalid_request_error",
        "max_tokens: Field required",
    )
    .await;
}

#[tokio::test]
async fn validation_anthropic_missing_messages_is_400() {
    let mut body = anthropic_body(false);
    body.as_object_mut().unwrap().remove("messages");
    anthropic_rejects(
        body,
        400,
        "invalid_request_error",
        "messages: Field required",
    )
    .await;
}

#[tokio::test]
async fn validation_anthropic_empty_messages_is_400() {
    anthropic_rejects(
        body_with(json!([])),
        400,
        "invalid_request_error",
        "messages: at least one message is required",
    )
    .await;
}

#[tokio::test]
async fn validation_body_not_json_is_400_not_a_panic() {
    let fake = start(vec![]).await;
    let resp = guard(
        client()
            .post(format!("{}/v1/messages", fake.base_url()))
            .header("x-api-key", "k")
            .header("anthropic-version", "2023-06-01")
            .body("{not json")
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(resp.status(), 400);
    let v = json_of(resp).await;
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("There was an error parsing")
    );
    assert_eq!(fake.requests()[0].body, json!("{not json"));
}

#[tokio::test]
async fn validation_tool_result_not_at_beginning_is_400() {
    let body = body_with(json!([
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}}]},
        {"role": "user", "content": [
            {"type": "text", "text": "here"},
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]}
    ]));
    anthropic_rejects(
        body,
        400,
        "invalid_request_error",
        "messages.2: Did not find 1 tool_result block(s) at the beginning of this message. Messages following tool_use blocks must begin with a matching number of tool_result blocks.",
    )
    .await;
}

#[tokio::test]
async fn validation_tool_use_without_tool_result_is_400() {
    let body = body_with(json!([
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "two calls"},
            {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}},
            {"type": "tool_use", "id": "toolu_2", "name": "bash", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]}
    ]));
    anthropic_rejects(
        body,
        400,
        "invalid_request_error",
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_2. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
    )
    .await;
}

#[tokio::test]
async fn validation_tool_use_followed_by_plain_text_is_400() {
    let body = body_with(json!([
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_9", "name": "bash", "input": {}}]},
        {"role": "user", "content": "forgot the result"}
    ]));
    anthropic_rejects(
        body,
        400,
        "invalid_request_error",
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_9. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
    )
    .await;
}

#[tokio::test]
async fn validation_unexpected_tool_use_id_is_400() {
    let body = body_with(json!([
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "no tools"},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "?"}]}
    ]));
    anthropic_rejects(
        body,
        400,
        "invalid_request_error",
        "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_x. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.",
    )
    .await;
}

#[tokio::test]
async fn validation_well_paired_tools_pass() {
    let fake = start(entries(json!([{"agent": "a", "turn": 1, "reply": {"content": [{"type": "text", "text": "fine"}]}}]))).await;
    let body = body_with(json!([
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "t", "signature": "s"},
            {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}},
            {"type": "tool_use", "id": "toolu_2", "name": "bash", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "b"},
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a", "is_error": true},
            {"type": "text", "text": "<mail type=\"text\" from=\"lead\">hi</mail>"}]}
    ]));
    let (s, _, v) = send_anthropic(&fake, &GOOD, &body).await;
    assert_eq!(s, 200, "{v}");
}

#[tokio::test]
async fn validation_thinking_budget_below_1024_is_400() {
    let mut body = anthropic_body(false);
    body["thinking"] = json!({"type": "enabled", "budget_tokens": 1023});
    anthropic_rejects(
        body,
        400,
        "invalid_request_error",
        "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024",
    )
    .await;
}

#[tokio::test]
async fn validation_thinking_budget_not_below_max_tokens_is_400() {
    let mut body = anthropic_body(false);
    body["max_tokens"] = json!(2048);
    body["thinking"] = json!({"type": "enabled", "budget_tokens": 2048});
    anthropic_rejects(
        body,
        400,
        "invalid_request_error",
        "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size",
    )
    .await;
}

#[tokio::test]
async fn validation_thinking_budget_in_bounds_and_adaptive_pass() {
    let fake = start(entries(
        json!([{"reply": {"content": [{"type": "text", "text": "ok"}]}}]),
    ))
    .await;
    let mut body = anthropic_body(false);
    body["max_tokens"] = json!(2048);
    body["thinking"] = json!({"type": "enabled", "budget_tokens": 1024});
    assert_eq!(send_anthropic(&fake, &GOOD, &body).await.0, 200);
    body["thinking"] = json!({"type": "adaptive"});
    assert_eq!(send_anthropic(&fake, &GOOD, &body).await.0, 200);
}

#[tokio::test]
async fn validation_body_over_limit_is_413() {
    let config = FakeLlmConfig {
        max_body_bytes: 1000,
        ..FakeLlmConfig::default()
    };
    let fake = start_with(config, vec![]).await;
    let body = body_with(json!([{"role": "user", "content": "x".repeat(2000)}]));
    let (s, h, v) = send_anthropic(&fake, &GOOD, &body).await;
    assert_eq!(s, 413);
    assert_eq!(v["error"]["type"], "request_too_large");
    assert!(h.contains_key("request-id"));
    let resp = guard(
        client()
            .post(format!("{}/chat/completions", fake.openai_base_url()))
            .bearer_auth("k")
            .json(
                &json!({"model": "m", "messages": [{"role": "user", "content": "x".repeat(2000)}]}),
            )
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(resp.status(), 413);
}

// ---------------------------------------------------------------- OpenAI

async fn send_openai(fake: &FakeLlmHandle, bearer: Option<&str>, body: &Value) -> (u16, Value) {
    let mut rb = client().post(format!("{}/chat/completions", fake.openai_base_url()));
    if let Some(b) = bearer {
        rb = rb.bearer_auth(b);
    }
    let resp = guard(rb.json(body).send()).await.unwrap();
    let status = resp.status().as_u16();
    (status, json_of(resp).await)
}

#[tokio::test]
async fn validation_openai_missing_bearer_is_401() {
    let fake = start(vec![]).await;
    let (s, v) = send_openai(&fake, None, &openai_body(false)).await;
    assert_eq!(s, 401);
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("You didn't provide an API key.")
    );
    assert_eq!(v["error"]["param"], Value::Null);
    let config = FakeLlmConfig {
        keys: KeyCheck::Exact("right".into()),
        ..FakeLlmConfig::default()
    };
    let fake = start_with(config, vec![]).await;
    let (s, v) = send_openai(&fake, Some("wrong"), &openai_body(false)).await;
    assert_eq!(s, 401);
    assert_eq!(v["error"]["code"], "invalid_api_key");
}

#[tokio::test]
async fn validation_openai_missing_model_is_400() {
    let fake = start(vec![]).await;
    let (s, v) = send_openai(
        &fake,
        Some("k"),
        &json!({"messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    assert_eq!(s, 400);
    assert_eq!(v["error"]["message"], "you must provide a model parameter");
}

#[tokio::test]
async fn validation_openai_missing_or_empty_messages_is_400() {
    let fake = start(vec![]).await;
    let (s, v) = send_openai(&fake, Some("k"), &json!({"model": "m"})).await;
    assert_eq!(s, 400);
    assert_eq!(
        v["error"]["message"],
        "Missing required parameter: 'messages'."
    );
    assert_eq!(v["error"]["param"], "messages");
    let (s, v) = send_openai(&fake, Some("k"), &json!({"model": "m", "messages": []})).await;
    assert_eq!(s, 400);
    assert_eq!(
        v["error"]["message"],
        "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead."
    );
}

#[tokio::test]
async fn validation_openai_missing_tool_reply_is_400() {
    let fake = start(vec![]).await;
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{}"}},
            {"id": "call_2", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a"},
        {"role": "user", "content": "next"}
    ]});
    let (s, v) = send_openai(&fake, Some("k"), &body).await;
    assert_eq!(s, 400);
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(
        v["error"]["message"],
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: call_2"
    );
}

#[tokio::test]
async fn validation_openai_answered_tool_calls_pass() {
    let fake = start(entries(
        json!([{"reply": {"content": [{"type": "text", "text": "ok"}]}}]),
    ))
    .await;
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a"}
    ]});
    let (s, v) = send_openai(&fake, Some("k"), &body).await;
    assert_eq!(s, 200, "{v}");
}

#[tokio::test]
async fn validation_count_tokens_checks_headers_and_body() {
    let fake = start(vec![]).await;
    let url = format!("{}/v1/messages/count_tokens", fake.base_url());
    let resp = guard(
        client()
            .post(&url)
            .header("x-api-key", "k")
            .json(&json!({"model": "m", "messages": []}))
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(resp.status(), 400, "missing anthropic-version");
    let resp = guard(
        client()
            .post(&url)
            .header("x-api-key", "k")
            .header("anthropic-version", "2023-06-01")
            .json(&json!({"model": "m", "messages": []}))
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(resp.status(), 400);
    assert_eq!(
        json_of(resp).await["error"]["message"],
        "messages: at least one message is required"
    );
}
