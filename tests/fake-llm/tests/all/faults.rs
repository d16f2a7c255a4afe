//! Fault injection: HTTP errors with retry headers, error events after 200, disconnects,
//! truncation, stalls, malformed and unknown events, byte-level splitting, delays, and the
//! OpenAI-compatible servers' quirks. Timing checks only assert lower bounds.

use super::common::*;
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn text_entry(text: &str, extra: Value) -> Vec<muster_fake_llm::ScriptEntry> {
    let mut e =
        json!({"agent": "a", "turn": 1, "reply": {"content": [{"type": "text", "text": text}]}});
    for (k, v) in extra.as_object().unwrap() {
        e[k] = v.clone();
    }
    entries(json!([e]))
}

async fn anthropic_raw(fake: &muster_fake_llm::FakeLlmHandle, stream: bool) -> Raw {
    raw_post(
        fake.addr(),
        "/v1/messages",
        &ANTHROPIC_HEADERS,
        &anthropic_body(stream),
    )
    .await
}

async fn openai_raw(fake: &muster_fake_llm::FakeLlmHandle, stream: bool) -> Raw {
    raw_post(
        fake.addr(),
        "/v1/chat/completions",
        &OPENAI_HEADERS,
        &openai_body(stream),
    )
    .await
}

/// The normal Anthropic event names for `text_entry("hello", {})`.
const NORMAL: [&str; 7] = [
    "message_start",
    "content_block_start",
    "ping",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
];

#[tokio::test]
async fn fault_normal_sequence_for_reference() {
    let fake = start(text_entry("hello", json!({}))).await;
    let raw = anthropic_raw(&fake, true).await;
    assert!(raw.complete);
    assert_eq!(names(&parse_sse(&raw.text())), NORMAL);
}

#[tokio::test]
async fn fault_http_errors_with_retry_headers() {
    let table: [(u16, &str); 13] = [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (408, "timeout_error"),
        (409, "invalid_request_error"),
        (413, "request_too_large"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (502, "api_error"),
        (503, "api_error"),
        (504, "timeout_error"),
        (529, "overloaded_error"),
    ];
    let script: Vec<Value> = table
        .iter()
        .enumerate()
        .map(|(i, (status, _))| {
            json!({"agent": "a", "turn": i + 1, "error": {
                "status": status, "retry_after": "2", "retry_after_ms": 1500, "x_should_retry": true,
                "headers": {"anthropic-ratelimit-requests-remaining": "0"}}})
        })
        .collect();
    let fake = start(entries(Value::Array(script))).await;
    for (i, (status, ty)) in table.iter().enumerate() {
        let resp = post_anthropic(&fake, &Req::new("a", i as u64 + 1, anthropic_body(true))).await;
        assert_eq!(resp.status().as_u16(), *status);
        let h = resp.headers().clone();
        assert_eq!(h["retry-after"], "2");
        assert_eq!(h["retry-after-ms"], "1500");
        assert_eq!(h["x-should-retry"], "true");
        assert_eq!(h["anthropic-ratelimit-requests-remaining"], "0");
        assert!(h["request-id"].to_str().unwrap().starts_with("req_fake_"));
        let v = json_of(resp).await;
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], *ty, "status {status}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
        assert_eq!(v["request_id"], h["request-id"].to_str().unwrap());
    }
    fake.verify().unwrap();
}

#[tokio::test]
async fn fault_http_error_openai_shape_and_custom_message() {
    let fake = start(entries(json!([
        {"agent": "a", "turn": 1, "error": {"status": 429, "retry_after_ms": 10}},
        {"agent": "a", "turn": 2, "error": {"status": 503, "type": "overloaded", "message": "busy", "x_should_retry": false}}
    ])))
    .await;
    let resp = post_openai(&fake, &Req::new("a", 1, openai_body(true))).await;
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after-ms"], "10");
    let v = json_of(resp).await;
    assert_eq!(v["error"]["code"], "rate_limit_exceeded");
    assert!(v["error"].get("param").is_some());
    let resp = post_openai(&fake, &Req::new("a", 2, openai_body(true))).await;
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["x-should-retry"], "false");
    let v = json_of(resp).await;
    assert_eq!(v["error"]["type"], "overloaded");
    assert_eq!(v["error"]["message"], "busy");
    let rec = fake.requests();
    assert_eq!(rec[1].status, 503);
    assert_eq!(rec[1].error.as_deref(), Some("busy"));
}

#[tokio::test]
async fn fault_error_event_after_200() {
    let fake = start(text_entry(
        "hello",
        json!({"fault": {"error_event": {"after_events": 3}}}),
    ))
    .await;
    let raw = anthropic_raw(&fake, true).await;
    assert_eq!(raw.status, 200);
    let events = parse_sse(&raw.text());
    assert_eq!(
        names(&events),
        ["message_start", "content_block_start", "ping", "error"]
    );
    assert_eq!(
        events[3].json(),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    );
    // OpenAI: an error object in a data line, and no [DONE].
    fake.reset();
    fake.append_script(text_entry("hello", json!({"fault": {"error_event": {"after_events": 1, "type": "server_error", "message": "boom"}}})))
        .unwrap();
    let raw = openai_raw(&fake, true).await;
    let events = parse_sse(&raw.text());
    assert_eq!(events.len(), 2);
    assert_eq!(events[1].json()["error"]["message"], "boom");
    assert_eq!(events[1].json()["error"]["type"], "server_error");
}

#[tokio::test]
async fn fault_disconnect_after_n_events() {
    let fake = start(text_entry(
        "hello",
        json!({"fault": {"disconnect_after_events": 3}}),
    ))
    .await;
    let raw = anthropic_raw(&fake, true).await;
    assert_eq!(raw.status, 200);
    assert!(raw.head.contains("request-id: req_fake_"), "{}", raw.head);
    assert!(
        !raw.complete,
        "no terminating chunk: the connection was dropped"
    );
    assert_eq!(names(&parse_sse(&raw.text())), NORMAL[..3]);
    // A real client sees a body error, not a clean end.
    let resp = post_anthropic(&fake, &Req::new("a", 1, anthropic_body(true))).await;
    let mut stream = resp.bytes_stream();
    let mut saw_error = false;
    while let Some(item) = guard(stream.next()).await {
        if item.is_err() {
            saw_error = true;
            break;
        }
    }
    assert!(saw_error, "the client saw the connection drop");
}

#[tokio::test]
async fn fault_disconnect_openai_has_no_done() {
    let fake = start(text_entry(
        "hello",
        json!({"fault": {"disconnect_after_events": 2}}),
    ))
    .await;
    let raw = openai_raw(&fake, true).await;
    assert!(!raw.complete);
    let events = parse_sse(&raw.text());
    assert_eq!(events.len(), 2);
    assert!(events.iter().all(|e| e.data != "[DONE]"));
}

#[tokio::test]
async fn fault_disconnect_non_streaming_cuts_the_json() {
    let fake = start(text_entry(
        "hello",
        json!({"fault": {"disconnect_after_events": 1}}),
    ))
    .await;
    let raw = anthropic_raw(&fake, false).await;
    assert!(!raw.complete);
    assert!(serde_json::from_slice::<Value>(&raw.body()).is_err());
    assert!(!raw.body().is_empty());
}

#[tokio::test]
async fn fault_truncate_after_n_events_ends_cleanly_without_terminal_event() {
    let fake = start(text_entry(
        "hello",
        json!({"fault": {"truncate_after_events": 5}}),
    ))
    .await;
    let raw = anthropic_raw(&fake, true).await;
    assert!(raw.complete, "the body ends cleanly");
    assert_eq!(names(&parse_sse(&raw.text())), NORMAL[..5]);
    // reqwest reads it to the end without error; the stream just lacks message_stop.
    let events = sse(post_anthropic(&fake, &Req::new("a", 1, anthropic_body(true))).await).await;
    assert!(!names(&events).contains(&"message_stop"));
    // OpenAI: a finish chunk but no usage chunk and no [DONE].
    fake.append_script(entries(json!([{"agent": "b", "turn": 1,
        "reply": {"content": [{"type": "text", "text": "hi"}]},
        "fault": {"truncate_after_events": 3}}])))
        .unwrap();
    let events = sse(post_openai(&fake, &Req::new("b", 1, openai_body(true))).await).await;
    assert_eq!(events.len(), 3);
    assert_eq!(events[2].json()["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn fault_stall_after_n_events() {
    let fake = start(text_entry(
        "hello",
        json!({"fault": {"stall": {"after_events": 2, "ms": 300}}}),
    ))
    .await;
    let t0 = Instant::now();
    let resp = post_anthropic(&fake, &Req::new("a", 1, anthropic_body(true))).await;
    let mut stream = resp.bytes_stream();
    let mut text = String::new();
    // The event counts seen after each read: the stall separates the first two events from
    // the rest.
    let mut seen = Vec::new();
    while let Some(item) = guard(stream.next()).await {
        text.push_str(std::str::from_utf8(&item.unwrap()).unwrap());
        seen.push(parse_sse(&text).len());
    }
    // Lower bounds only: a loaded machine can make the stall longer, never shorter.
    assert!(
        t0.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t0.elapsed()
    );
    assert!(
        seen.contains(&2),
        "the client read the first two events before the stall: {seen:?}"
    );
    assert_eq!(
        names(&parse_sse(&text)),
        NORMAL,
        "the stream resumes and completes"
    );
}

#[tokio::test]
async fn fault_stall_with_only_pings() {
    let fake = start(text_entry(
        "hello",
        json!({"fault": {"stall": {"after_events": 1, "ms": 400, "ping_every_ms": 50}}}),
    ))
    .await;
    let raw = anthropic_raw(&fake, true).await;
    let events = parse_sse(&raw.text());
    let n = names(&events);
    assert_eq!(n[0], "message_start");
    let pings = n[1..].iter().take_while(|e| **e == "ping").count();
    assert!(pings >= 3, "pings during the stall: {n:?}");
    assert_eq!(n.last(), Some(&"message_stop"));
    // OpenAI keep-alives are SSE comments.
    fake.append_script(entries(json!([{"agent": "b", "turn": 1,
        "reply": {"content": [{"type": "text", "text": "hi"}]},
        "fault": {"stall": {"after_events": 1, "ms": 200, "ping_every_ms": 40}}}])))
        .unwrap();
    let mut headers = OPENAI_HEADERS.to_vec();
    headers[1] = ("x-muster-agent-id", "b");
    let raw = raw_post(
        fake.addr(),
        "/v1/chat/completions",
        &headers,
        &openai_body(true),
    )
    .await;
    assert!(raw.text().contains(": ping\n\n"));
}

#[tokio::test]
async fn fault_stall_then_disconnect() {
    let fake = start(text_entry(
        "hello",
        json!({"fault": {"stall": {"after_events": 2, "ms": 50, "then_disconnect": true}}}),
    ))
    .await;
    let raw = anthropic_raw(&fake, true).await;
    assert!(!raw.complete);
    assert_eq!(names(&parse_sse(&raw.text())), NORMAL[..2]);
}

#[tokio::test]
async fn fault_malformed_data_line() {
    let fake = start(text_entry(
        "hello",
        json!({"fault": {"malformed_after_events": 2}}),
    ))
    .await;
    let raw = anthropic_raw(&fake, true).await;
    let events = parse_sse(&raw.text());
    assert_eq!(events.len(), NORMAL.len() + 1);
    assert_eq!(events[2].event.as_deref(), Some("content_block_delta"));
    assert!(
        serde_json::from_str::<Value>(&events[2].data).is_err(),
        "not JSON: {}",
        events[2].data
    );
    fake.append_script(entries(json!([{"agent": "b", "turn": 1,
        "reply": {"content": [{"type": "text", "text": "hi"}]},
        "fault": {"malformed_after_events": 1}}])))
        .unwrap();
    let events = sse(post_openai(&fake, &Req::new("b", 1, openai_body(true))).await).await;
    assert!(serde_json::from_str::<Value>(&events[1].data).is_err());
    assert_eq!(events.last().unwrap().data, "[DONE]");
}

#[tokio::test]
async fn fault_unknown_event_type() {
    let fake = start(text_entry(
        "hello",
        json!({"fault": {"unknown_event_after_events": 1}}),
    ))
    .await;
    let events = sse(post_anthropic(&fake, &Req::new("a", 1, anthropic_body(true))).await).await;
    assert_eq!(events[1].event.as_deref(), Some("fake_future_event"));
    assert_eq!(events[1].json()["type"], "fake_future_event");
    assert_eq!(names(&events).last(), Some(&"message_stop"));
}

#[tokio::test]
async fn fault_unknown_content_block_type() {
    let fake = start(entries(
        json!([{"agent": "a", "turn": 1, "reply": {"content": [
        {"type": "text", "text": "a"},
        {"type": "fancy_future_block", "payload": {"x": 1}},
        {"type": "text", "text": "b"}]}}]),
    ))
    .await;
    let events = sse(post_anthropic(&fake, &Req::new("a", 1, anthropic_body(true))).await).await;
    let starts: Vec<Value> = events
        .iter()
        .filter(|e| e.event.as_deref() == Some("content_block_start"))
        .map(|e| e.json())
        .collect();
    assert_eq!(starts[1]["index"], 1);
    assert_eq!(
        starts[1]["content_block"],
        json!({"type": "fancy_future_block", "payload": {"x": 1}})
    );
    let v = json_of(post_anthropic(&fake, &Req::new("a", 1, anthropic_body(false))).await).await;
    assert_eq!(v["content"][1]["type"], "fancy_future_block");
    // The OpenAI rendering skips it.
    let v = json_of(post_openai(&fake, &Req::new("a", 1, openai_body(false))).await).await;
    assert_eq!(v["choices"][0]["message"]["content"], "ab");
}

#[tokio::test]
async fn fault_tcp_chunk_bytes_split_inside_utf8() {
    let text = "héllo wörld ✓ 日本語 🦀 done";
    let plain = start(text_entry(text, json!({}))).await;
    let normal = anthropic_raw(&plain, true).await;
    let fake = start(text_entry(text, json!({"stream": {"tcp_chunk_bytes": 7}}))).await;
    let raw = anthropic_raw(&fake, true).await;
    assert!(raw.complete);
    assert!(raw.chunks.len() > 20);
    assert!(raw.chunks.iter().all(|c| c.len() <= 7 && !c.is_empty()));
    assert!(
        raw.chunks.iter().any(|c| std::str::from_utf8(c).is_err()),
        "some chunk ends inside a multi-byte character"
    );
    assert_eq!(
        raw.body(),
        normal.body(),
        "the same bytes, only split differently"
    );
    // A real client reassembles the text.
    let events = sse(post_anthropic(&fake, &Req::new("a", 1, anthropic_body(true))).await).await;
    let joined: String = events
        .iter()
        .filter(|e| e.event.as_deref() == Some("content_block_delta"))
        .map(|e| e.json()["delta"]["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(joined, text);
    // Non-streaming bodies are split too.
    let raw = anthropic_raw(&fake, false).await;
    assert!(raw.chunks.iter().all(|c| c.len() <= 7));
    assert_eq!(
        serde_json::from_slice::<Value>(&raw.body()).unwrap()["content"][0]["text"],
        text
    );
}

#[tokio::test]
async fn fault_first_byte_delay() {
    let fake = start(text_entry(
        "hello",
        json!({"fault": {"first_byte_delay_ms": 200}}),
    ))
    .await;
    let t0 = Instant::now();
    let resp = post_anthropic(&fake, &Req::new("a", 1, anthropic_body(true))).await;
    assert!(
        t0.elapsed() >= Duration::from_millis(180),
        "headers after {:?}",
        t0.elapsed()
    );
    assert_eq!(resp.status(), 200);
    // Scripted errors are delayed too.
    fake.append_script(entries(json!([{"agent": "b", "turn": 1, "error": {"status": 500}, "fault": {"first_byte_delay_ms": 150}}])))
        .unwrap();
    let t0 = Instant::now();
    let resp = post_anthropic(&fake, &Req::new("b", 1, anthropic_body(true))).await;
    assert!(t0.elapsed() >= Duration::from_millis(130));
    assert_eq!(resp.status(), 500);
}

#[tokio::test]
async fn fault_inter_event_delay() {
    let fake = start(text_entry(
        "hello",
        json!({"stream": {"inter_event_delay_ms": 30}}),
    ))
    .await;
    let t0 = Instant::now();
    let events = sse(post_anthropic(&fake, &Req::new("a", 1, anthropic_body(true))).await).await;
    assert_eq!(events.len(), NORMAL.len());
    assert!(t0.elapsed() >= Duration::from_millis(30 * (NORMAL.len() as u64 - 1)));
}

#[tokio::test]
async fn fault_stream_format_options_crlf_trailing_whitespace_no_ping() {
    let fake = start(text_entry(
        "hello",
        json!({"stream": {"crlf": true, "trailing_whitespace": true, "no_ping": true}}),
    ))
    .await;
    let raw = anthropic_raw(&fake, true).await;
    let text = raw.text();
    assert!(text.contains("}  \r\n\r\n"), "{text}");
    assert!(!text.contains("\n\n"));
    let events = parse_sse(&text);
    assert!(!names(&events).contains(&"ping"));
    assert!(
        events
            .iter()
            .all(|e| serde_json::from_str::<Value>(e.data.trim_end()).is_ok())
    );
}

// ---------------------------------------------------------------- OpenAI quirks

fn two_calls(quirks: Value) -> Vec<muster_fake_llm::ScriptEntry> {
    entries(json!([{"agent": "a", "turn": 1, "reply": {"content": [
        {"type": "tool_use", "name": "read", "input": {"path": "a"}},
        {"type": "tool_use", "name": "read", "input": {"path": "b"}}]},
        "openai": quirks}]))
}

fn tool_fragments(events: &[Sse]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e.data != "[DONE]")
        .flat_map(|e| {
            e.json()["choices"][0]["delta"]["tool_calls"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .collect()
}

#[tokio::test]
async fn quirk_tool_index_always_zero() {
    let fake = start(two_calls(json!({"tool_index_always_zero": true}))).await;
    let events = sse(post_openai(&fake, &Req::new("a", 1, openai_body(true))).await).await;
    let frags = tool_fragments(&events);
    assert!(frags.iter().all(|f| f["index"] == 0));
    let ids: Vec<&str> = frags.iter().filter_map(|f| f["id"].as_str()).collect();
    assert_eq!(
        ids,
        ["call_fake_0001", "call_fake_0002"],
        "different ids at the same index"
    );
}

#[tokio::test]
async fn quirk_omit_tool_index() {
    let fake = start(two_calls(json!({"omit_tool_index": true}))).await;
    let events = sse(post_openai(&fake, &Req::new("a", 1, openai_body(true))).await).await;
    let frags = tool_fragments(&events);
    assert!(!frags.is_empty());
    assert!(frags.iter().all(|f| f.get("index").is_none()));
}

#[tokio::test]
async fn quirk_finish_reason_stop_with_tools() {
    let fake = start(two_calls(json!({"finish_reason_stop_with_tools": true}))).await;
    let events = sse(post_openai(&fake, &Req::new("a", 1, openai_body(true))).await).await;
    let finish: Vec<Value> = events
        .iter()
        .filter(|e| e.data != "[DONE]")
        .map(|e| e.json()["choices"][0]["finish_reason"].clone())
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finish, [json!("stop")]);
    assert_eq!(
        tool_fragments(&events).len(),
        4,
        "tool calls are still sent: first fragment + arguments, twice"
    );
    let v = json_of(post_openai(&fake, &Req::new("a", 1, openai_body(false))).await).await;
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        v["choices"][0]["message"]["tool_calls"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[tokio::test]
async fn quirk_usage_chunk_with_choices_null() {
    let fake = start(two_calls(json!({"usage_choices_null": true}))).await;
    let events = sse(post_openai(&fake, &Req::new("a", 1, openai_body(true))).await).await;
    let usage = events[events.len() - 2].json();
    assert_eq!(usage["choices"], Value::Null);
    assert!(usage["usage"]["total_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn quirk_no_done_sentinel() {
    let fake = start(two_calls(json!({"no_done": true}))).await;
    let raw = openai_raw(&fake, true).await;
    assert!(raw.complete, "the stream ends cleanly at EOF");
    let events = parse_sse(&raw.text());
    assert!(events.iter().all(|e| e.data != "[DONE]"));
    assert!(events.last().unwrap().json()["usage"].is_object());
}

#[tokio::test]
async fn fault_hold_keeps_the_response_until_its_gate_opens() {
    let fake =
        std::sync::Arc::new(start(text_entry("held", json!({"fault": {"hold": "g1"}}))).await);
    let request = tokio::spawn({
        let fake = fake.clone();
        async move { anthropic_raw(&fake, true).await }
    });
    tokio::time::timeout(Duration::from_secs(30), fake.gate_reached("g1", 1))
        .await
        .expect("the request reached the gate");
    // Held: the request has not been answered while the gate is shut.
    assert!(!request.is_finished());
    fake.open_gate("g1");
    let raw = tokio::time::timeout(Duration::from_secs(30), request)
        .await
        .expect("the response after the gate opened")
        .unwrap();
    assert!(raw.complete);
    assert_eq!(names(&parse_sse(&raw.text())), NORMAL);
    // An open gate lets later requests through at once, and the control route opens gates
    // by name.
    let again = anthropic_raw(&fake, true).await;
    assert!(again.complete);
    let opened = raw_post(fake.addr(), "/_fake/gates/g2/open", &[], &json!({})).await;
    assert!(
        opened.text().contains("\"gate\":\"g2\""),
        "{}",
        opened.text()
    );
}
