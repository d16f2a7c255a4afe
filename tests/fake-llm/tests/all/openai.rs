//! The OpenAI Chat Completions API: streaming and not, and `GET /v1/models`.

use super::common::*;
use serde_json::{Value, json};

fn tool_turn() -> Value {
    json!([{
        "agent": "w", "turn": 1,
        "reply": {"content": [
            {"type": "text", "text": "Running two commands."},
            {"type": "tool_use", "name": "bash", "input": {"cmd": "ls"}},
            {"type": "tool_use", "name": "read", "input": {"path": "a.rs"}}
        ]},
        "stream": {"chunk_chars": 5}
    }])
}

/// A call assembled from fragments: (index, id, name, arguments).
type Call = (Option<u64>, Option<String>, Option<String>, String);

/// Assembles text and tool calls from chunks, keyed by fragment position in the stream.
fn fragments(events: &[Sse]) -> (String, Vec<Call>) {
    let mut text = String::new();
    let mut calls: Vec<Call> = Vec::new();
    for e in events {
        if e.data == "[DONE]" {
            continue;
        }
        let v = e.json();
        let Some(choice) = v["choices"].get(0) else {
            continue;
        };
        if let Some(t) = choice["delta"]["content"].as_str() {
            text.push_str(t);
        }
        for tc in choice["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let args = tc["function"]["arguments"]
                .as_str()
                .unwrap_or("")
                .to_owned();
            if tc.get("id").is_some() {
                calls.push((
                    tc["index"].as_u64(),
                    tc["id"].as_str().map(str::to_owned),
                    tc["function"]["name"].as_str().map(str::to_owned),
                    args,
                ));
            } else {
                assert!(
                    tc["function"].get("name").is_none(),
                    "name only in the first fragment"
                );
                calls.last_mut().unwrap().3.push_str(&args);
            }
        }
    }
    (text, calls)
}

#[tokio::test]
async fn openai_stream_chunks_tool_calls_usage_and_done() {
    let fake = start(entries(tool_turn())).await;
    let resp = post_openai(&fake, &Req::new("w", 1, openai_body(true))).await;
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let events = sse(resp).await;
    assert!(
        events.iter().all(|e| e.event.is_none()),
        "OpenAI streams have no event names"
    );
    assert_eq!(events.last().unwrap().data, "[DONE]");
    let first = events[0].json();
    assert_eq!(first["object"], "chat.completion.chunk");
    assert_eq!(first["id"], "chatcmpl-fake-0001");
    assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
    let (text, calls) = fragments(&events);
    assert_eq!(text, "Running two commands.");
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].0, Some(0));
    assert_eq!(calls[1].0, Some(1));
    assert_eq!(calls[0].1.as_deref(), Some("call_fake_0001"));
    assert_eq!(calls[1].1.as_deref(), Some("call_fake_0002"));
    assert_eq!(calls[0].2.as_deref(), Some("bash"));
    assert_eq!(
        serde_json::from_str::<Value>(&calls[0].3).unwrap(),
        json!({"cmd": "ls"})
    );
    assert_eq!(
        serde_json::from_str::<Value>(&calls[1].3).unwrap(),
        json!({"path": "a.rs"})
    );
    // The argument fragments of one call carry its index.
    let frag_count = events
        .iter()
        .filter(|e| e.data.contains("\"arguments\""))
        .count();
    assert!(frag_count > 4, "arguments are fragmented");

    let n = events.len();
    let finish = events[n - 3].json();
    assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(
        finish["usage"],
        Value::Null,
        "non-usage chunks carry usage: null"
    );
    let usage = events[n - 2].json();
    assert_eq!(usage["choices"], json!([]));
    assert!(usage["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    assert_eq!(
        usage["usage"]["total_tokens"].as_u64().unwrap(),
        usage["usage"]["prompt_tokens"].as_u64().unwrap()
            + usage["usage"]["completion_tokens"].as_u64().unwrap()
    );
    fake.verify().unwrap();
}

#[tokio::test]
async fn openai_stream_without_include_usage_has_no_usage_chunk() {
    let fake = start(entries(json!([{"agent": "w", "turn": 1,
        "reply": {"content": [{"type": "text", "text": "hi"}]}}])))
    .await;
    let mut body = openai_body(true);
    body.as_object_mut().unwrap().remove("stream_options");
    let events = sse(post_openai(&fake, &Req::new("w", 1, body)).await).await;
    assert!(events.iter().all(|e| !e.data.contains("\"usage\"")));
    let n = events.len();
    assert_eq!(events[n - 2].json()["choices"][0]["finish_reason"], "stop");
    assert_eq!(events[n - 1].data, "[DONE]");
}

#[tokio::test]
async fn openai_non_streaming_completion() {
    let fake = start(entries(tool_turn())).await;
    let resp = post_openai(&fake, &Req::new("w", 1, openai_body(false))).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-request-id"], "req_fake_0001");
    let v = json_of(resp).await;
    assert_eq!(v["object"], "chat.completion");
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["message"]["content"], "Running two commands.");
    assert_eq!(
        choice["message"]["tool_calls"][0],
        json!({"id": "call_fake_0001", "type": "function",
               "function": {"name": "bash", "arguments": "{\"cmd\":\"ls\"}"}})
    );
    assert!(v["usage"]["completion_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn one_entry_renders_stop_reasons_into_finish_reasons() {
    let table = [
        ("end_turn", "stop"),
        ("max_tokens", "length"),
        ("stop_sequence", "stop"),
        ("refusal", "content_filter"),
    ];
    let script: Vec<_> = table
        .iter()
        .enumerate()
        .map(|(i, (stop, _))| {
            json!({"agent": "w", "turn": i + 1, "reply": {"content": [{"type": "text", "text": "x"}], "stop_reason": stop}})
        })
        .collect();
    let fake = start(entries(Value::Array(script))).await;
    for (i, (stop, finish)) in table.iter().enumerate() {
        let turn = i as u64 + 1;
        let o = json_of(post_openai(&fake, &Req::new("w", turn, openai_body(false))).await).await;
        assert_eq!(o["choices"][0]["finish_reason"], *finish, "{stop}");
        let a =
            json_of(post_anthropic(&fake, &Req::new("w", turn, anthropic_body(false))).await).await;
        assert_eq!(a["stop_reason"], *stop);
    }
}

#[tokio::test]
async fn openai_thinking_becomes_reasoning_content() {
    let fake = start(entries(
        json!([{"agent": "w", "turn": 1, "reply": {"content": [
        {"type": "thinking", "thinking": "hmm", "signature": "s"},
        {"type": "text", "text": "ok"}]}}]),
    ))
    .await;
    let events = sse(post_openai(&fake, &Req::new("w", 1, openai_body(true))).await).await;
    assert!(
        events
            .iter()
            .any(|e| e.data.contains("\"reasoning_content\":\"hmm\""))
    );
}

#[tokio::test]
async fn models_lists_for_both_apis() {
    let fake = start(vec![]).await;
    let v = json_of(
        guard(
            client()
                .get(format!("{}/models", fake.openai_base_url()))
                .bearer_auth("k")
                .send(),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"][0]["id"], "claude-sonnet-4-5");
    assert_eq!(v["data"][0]["object"], "model");
    assert_eq!(v["data"][0]["type"], "model");
    let resp = guard(
        client()
            .get(format!("{}/v1/models", fake.base_url()))
            .header("x-api-key", "k")
            .header("anthropic-version", "2023-06-01")
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(json_of(resp).await["has_more"], false);
    let unauth = guard(
        client()
            .get(format!("{}/v1/models", fake.base_url()))
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(unauth.status(), 401);
}
