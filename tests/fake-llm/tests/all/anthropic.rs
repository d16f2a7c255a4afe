//! The Anthropic Messages API: streaming and not.

use super::common::*;
use serde_json::json;

fn tool_turn() -> serde_json::Value {
    json!([{
        "agent": "lead", "turn": 1,
        "reply": {"content": [
            {"type": "thinking", "thinking": "Let me think.", "signature": "sig-1"},
            {"type": "text", "text": "Let me run the tests first."},
            {"type": "tool_use", "name": "bash", "input": {"cmd": "cargo test -q"}}
        ]},
        "stream": {"chunk_chars": 10}
    }])
}

#[tokio::test]
async fn anthropic_stream_has_the_exact_event_sequence() {
    let fake = start(entries(tool_turn())).await;
    let resp = post_anthropic(&fake, &Req::new("lead", 1, anthropic_body(true))).await;
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    assert_eq!(resp.headers()["request-id"], "req_fake_0001");
    let events = sse(resp).await;
    let n = names(&events);
    assert_eq!(n.first(), Some(&"message_start"));
    assert_eq!(n[1], "content_block_start");
    assert_eq!(
        n[2], "ping",
        "a ping right after the first content_block_start"
    );
    assert_eq!(n[3], "content_block_delta");
    assert_eq!(&n[n.len() - 2..], &["message_delta", "message_stop"]);
    // Every event's data carries its own name as `type`.
    for e in &events {
        assert_eq!(e.json()["type"], e.event.as_deref().unwrap());
    }
    let start = events[0].json();
    assert_eq!(start["message"]["id"], "msg_fake_0001");
    assert_eq!(start["message"]["content"], json!([]));
    assert_eq!(start["message"]["model"], "claude-sonnet-4-5");

    // Reassemble the blocks from the deltas, as a client would.
    let mut thinking = String::new();
    let mut signature = String::new();
    let mut text = String::new();
    let mut partial = Vec::new();
    let mut starts = Vec::new();
    for e in &events {
        let v = e.json();
        match e.event.as_deref().unwrap() {
            "content_block_start" => starts.push(v["content_block"].clone()),
            "content_block_delta" => {
                let d = &v["delta"];
                match d["type"].as_str().unwrap() {
                    "thinking_delta" => thinking.push_str(d["thinking"].as_str().unwrap()),
                    "signature_delta" => signature.push_str(d["signature"].as_str().unwrap()),
                    "text_delta" => text.push_str(d["text"].as_str().unwrap()),
                    "input_json_delta" => {
                        partial.push(d["partial_json"].as_str().unwrap().to_owned())
                    }
                    other => panic!("unexpected delta {other}"),
                }
            }
            _ => {}
        }
    }
    assert_eq!(thinking, "Let me think.");
    assert_eq!(signature, "sig-1");
    assert_eq!(text, "Let me run the tests first.");
    assert_eq!(partial[0], "", "the first input_json_delta is empty");
    assert!(partial.len() > 2, "tool JSON is split: {partial:?}");
    let input: serde_json::Value = serde_json::from_str(&partial.concat()).unwrap();
    assert_eq!(input, json!({"cmd": "cargo test -q"}));
    assert_eq!(starts[2]["type"], "tool_use");
    assert_eq!(starts[2]["id"], "toolu_fake_0001");
    assert_eq!(starts[2]["name"], "bash");
    assert_eq!(starts[2]["input"], json!({}));

    let delta = events[events.len() - 2].json();
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    let usage = &delta["usage"];
    assert!(usage["output_tokens"].as_u64().unwrap() > 1);
    assert!(
        usage["input_tokens"].as_u64().unwrap() >= 1,
        "usage is cumulative"
    );
    fake.verify().unwrap();
}

#[tokio::test]
async fn anthropic_non_streaming_message() {
    let fake = start(entries(tool_turn())).await;
    let resp = post_anthropic(&fake, &Req::new("lead", 1, anthropic_body(false))).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["request-id"], "req_fake_0001");
    assert_eq!(resp.headers()["content-type"], "application/json");
    assert!(
        resp.headers().contains_key("content-length"),
        "a plain JSON body"
    );
    let v = json_of(resp).await;
    assert_eq!(v["id"], "msg_fake_0001");
    assert_eq!(v["type"], "message");
    assert_eq!(v["role"], "assistant");
    assert_eq!(v["stop_reason"], "tool_use");
    assert_eq!(
        v["content"][0],
        json!({"type": "thinking", "thinking": "Let me think.", "signature": "sig-1"})
    );
    assert_eq!(
        v["content"][1],
        json!({"type": "text", "text": "Let me run the tests first."})
    );
    assert_eq!(
        v["content"][2],
        json!({"type": "tool_use", "id": "toolu_fake_0001", "name": "bash", "input": {"cmd": "cargo test -q"}})
    );
    // "List files" = 10 chars -> 3 tokens; output = "Let me think." + text + tool JSON.
    assert_eq!(v["usage"]["input_tokens"], 3);
    let out_chars = "Let me think.".len()
        + "Let me run the tests first.".len()
        + r#"{"cmd":"cargo test -q"}"#.len();
    assert_eq!(v["usage"]["output_tokens"], out_chars.div_ceil(4) as u64);
}

#[tokio::test]
async fn anthropic_usage_override_and_stop_reason() {
    let fake = start(entries(json!([{
        "agent": "a", "turn": 1,
        "reply": {"content": [{"type": "text", "text": "cut"}], "stop_reason": "max_tokens",
                  "usage": {"input_tokens": 412, "output_tokens": 48, "cache_read_input_tokens": 1800,
                            "cache_creation_input_tokens": 7}}
    }]))).await;
    let events = sse(post_anthropic(&fake, &Req::new("a", 1, anthropic_body(true))).await).await;
    let start = events[0].json();
    assert_eq!(start["message"]["usage"]["input_tokens"], 412);
    assert_eq!(start["message"]["usage"]["cache_read_input_tokens"], 1800);
    assert_eq!(start["message"]["usage"]["output_tokens"], 1);
    let delta = events[events.len() - 2].json();
    assert_eq!(delta["delta"]["stop_reason"], "max_tokens");
    assert_eq!(delta["usage"]["output_tokens"], 48);
    assert_eq!(delta["usage"]["cache_creation_input_tokens"], 7);
}

#[tokio::test]
async fn anthropic_ids_come_from_counters() {
    let fake = start(entries(json!([
        {"agent": "a", "turn": 1, "reply": {"content": [
            {"type": "tool_use", "name": "x", "input": {}},
            {"type": "tool_use", "name": "y", "input": {}}]}},
        {"agent": "a", "turn": 2, "reply": {"content": [
            {"type": "tool_use", "name": "z", "input": {}, "id": "toolu_given"}]}}
    ])))
    .await;
    let v1 = json_of(post_anthropic(&fake, &Req::new("a", 1, anthropic_body(false))).await).await;
    let v2 = json_of(post_anthropic(&fake, &Req::new("a", 2, anthropic_body(false))).await).await;
    assert_eq!(v1["id"], "msg_fake_0001");
    assert_eq!(v1["content"][0]["id"], "toolu_fake_0001");
    assert_eq!(v1["content"][1]["id"], "toolu_fake_0002");
    assert_eq!(v2["id"], "msg_fake_0002");
    assert_eq!(v2["content"][0]["id"], "toolu_given");
}

#[tokio::test]
async fn anthropic_count_tokens() {
    let fake = start(vec![]).await;
    let body = json!({"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "12345678"}]});
    let resp = guard(
        client()
            .post(format!("{}/v1/messages/count_tokens", fake.base_url()))
            .header("x-api-key", "k")
            .header("anthropic-version", "2023-06-01")
            .json(&body)
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(json_of(resp).await, json!({"input_tokens": 2}));
    assert_eq!(fake.requests()[0].path, "/v1/messages/count_tokens");
}
