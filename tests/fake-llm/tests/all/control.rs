//! The control plane, script formats, the cut-block fixture, and the `fake-llm` binary.

use super::common::*;
use muster_fake_llm::parse_script;
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

const EXAMPLE: &str = include_str!("../../examples/script.json");

#[tokio::test]
async fn control_health_script_requests_reset_verify() {
    let fake = start(vec![]).await;
    let c = client();
    let url = |p: &str| format!("{}{p}", fake.base_url());
    let health = guard(c.get(url("/_fake/health")).send()).await.unwrap();
    assert_eq!(json_of(health).await, json!({"status": "ok"}));

    // JSON lines through the control plane.
    let lines = "{\"agent\":\"a\",\"turn\":1,\"reply\":{\"content\":[{\"type\":\"text\",\"text\":\"one\"}]}}\n\n{\"agent\":\"a\",\"turn\":2,\"reply\":{\"content\":[{\"type\":\"text\",\"text\":\"two\"}]}}\n";
    let resp = guard(c.post(url("/_fake/script")).body(lines).send())
        .await
        .unwrap();
    assert_eq!(json_of(resp).await, json!({"appended": 2, "entries": 2}));
    let bad = guard(
        c.post(url("/_fake/script"))
            .body("[{\"agent\":\"a\",\"bogus\":1}]")
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(bad.status(), 400);

    let v = json_of(post_anthropic(&fake, &Req::new("a", 1, anthropic_body(false))).await).await;
    assert_eq!(v["content"][0]["text"], "one");
    let verify = guard(c.get(url("/_fake/verify")).send()).await.unwrap();
    assert_eq!(verify.status(), 409);
    assert_eq!(json_of(verify).await["unused"], json!([1]));

    let reqs = json_of(guard(c.get(url("/_fake/requests")).send()).await.unwrap()).await;
    assert_eq!(reqs.as_array().unwrap().len(), 1);
    assert_eq!(reqs[0]["agent"], "a");
    assert_eq!(reqs[0]["turn"], 1);
    assert_eq!(reqs[0]["attempt"], 1);
    assert_eq!(reqs[0]["path"], "/v1/messages");
    assert_eq!(reqs[0]["headers"]["x-muster-run-id"], "run-1");

    let reset = guard(c.post(url("/_fake/reset")).send()).await.unwrap();
    assert_eq!(reset.status(), 200);
    assert!(fake.requests().is_empty());
    fake.verify().unwrap();
    // Counters restart too.
    fake.append_script(entries(json!([{"agent": "a", "turn": 1, "attempt": 1,
        "reply": {"content": [{"type": "text", "text": "again"}]}}])))
        .unwrap();
    let v = json_of(post_anthropic(&fake, &Req::new("a", 1, anthropic_body(false))).await).await;
    assert_eq!(v["id"], "msg_fake_0001");
    let verify = guard(c.get(url("/_fake/verify")).send()).await.unwrap();
    assert_eq!(verify.status(), 200);
}

#[tokio::test]
async fn control_unknown_path_is_a_404_error() {
    let fake = start(vec![]).await;
    let resp = guard(
        client()
            .get(format!("{}/v1/nothing", fake.base_url()))
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(resp.status(), 404);
    assert_eq!(json_of(resp).await["error"]["type"], "not_found_error");
}

#[test]
fn script_formats_array_single_object_and_json_lines() {
    let entries = parse_script(EXAMPLE).unwrap();
    assert_eq!(entries.len(), 6);
    let one = parse_script(r#"{"agent":"a","reply":{"content":[]}}"#).unwrap();
    assert_eq!(one.len(), 1);
    let lines = EXAMPLE_LINES.trim();
    assert_eq!(parse_script(lines).unwrap().len(), 2);
    // Round trip through serde.
    let v = serde_json::to_value(&entries).unwrap();
    let back: Vec<muster_fake_llm::ScriptEntry> = serde_json::from_value(v).unwrap();
    assert_eq!(back, entries);
}

const EXAMPLE_LINES: &str = r#"
{"agent":"a","turn":1,"reply":{"content":[{"type":"text","text":"x"}]}}
{"agent":"a","turn":2,"error":{"status":429}}
"#;

#[test]
fn script_errors_are_typed_not_panics() {
    for bad in [
        r#"[{"agent":"a"}]"#,
        r#"[{"agent":"a","reply":{"content":[]},"error":{"status":500}}]"#,
        r#"[{"agent":"a","reply":{"content":[{"type":"text"}]}}]"#,
        r#"[{"agent":"a","reply":{"content":[]},"typo":1}]"#,
        "not json",
    ] {
        let err = parse_script(bad).unwrap_err();
        assert!(err.to_string().starts_with("fake-llm: bad script"), "{err}");
    }
}

#[tokio::test]
async fn fault_cut_last_block_mid_tool_json_with_max_tokens() {
    let fake = start(entries(json!([{"agent": "a", "turn": 1,
        "reply": {"content": [
            {"type": "text", "text": "Writing."},
            {"type": "tool_use", "name": "write", "input": {"path": "a.rs", "content": "fn main() { println!(\"hi\"); }"}}],
            "stop_reason": "max_tokens"},
        "stream": {"chunk_chars": 8},
        "fault": {"cut_last_block": true}}])))
    .await;
    let events = sse(post_anthropic(&fake, &Req::new("a", 1, anthropic_body(true))).await).await;
    let stops: Vec<Value> = events
        .iter()
        .filter(|e| e.event.as_deref() == Some("content_block_stop"))
        .map(|e| e.json()["index"].clone())
        .collect();
    assert_eq!(stops, [json!(0)], "the tool block never stops");
    let partial: String = events
        .iter()
        .filter(|e| e.event.as_deref() == Some("content_block_delta"))
        .filter_map(|e| {
            e.json()["delta"]["partial_json"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert!(!partial.is_empty());
    assert!(
        serde_json::from_str::<Value>(&partial).is_err(),
        "incomplete JSON: {partial}"
    );
    let n = names(&events);
    assert_eq!(&n[n.len() - 2..], ["message_delta", "message_stop"]);
    assert_eq!(
        events[events.len() - 2].json()["delta"]["stop_reason"],
        "max_tokens"
    );
    let events = sse(post_openai(&fake, &Req::new("a", 1, openai_body(true))).await).await;
    let finish: Vec<Value> = events
        .iter()
        .filter(|e| e.data != "[DONE]")
        .map(|e| e.json()["choices"][0]["finish_reason"].clone())
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finish, [json!("length")]);
}

#[tokio::test]
async fn binary_serve_prints_its_address_and_answers() {
    let dir = std::env::temp_dir().join(format!("fake-llm-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("script.json");
    std::fs::write(&script, EXAMPLE).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_fake-llm"))
        .args(["serve", "--addr", "127.0.0.1:0", "--script"])
        .arg(&script)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    guard(tokio::io::BufReader::new(stdout).read_line(&mut line))
        .await
        .unwrap();
    let base = line.trim().to_owned();
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");
    let resp = guard(
        client()
            .post(format!("{base}/v1/messages"))
            .header("x-api-key", "k")
            .header("anthropic-version", "2023-06-01")
            .header("x-muster-agent-id", "lead")
            .header("x-muster-turn", "1")
            .json(&anthropic_body(false))
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(resp.status(), 200);
    let v = json_of(resp).await;
    assert_eq!(v["content"][2]["name"], "bash");
    let reqs = json_of(
        guard(client().get(format!("{base}/_fake/requests")).send())
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(reqs[0]["agent"], "lead");
    child.start_kill().unwrap();
    guard(child.wait()).await.unwrap();
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn example_script_plays_through() {
    let fake = start(parse_script(EXAMPLE).unwrap()).await;
    let v = json_of(post_anthropic(&fake, &Req::new("lead", 1, anthropic_body(false))).await).await;
    assert_eq!(v["stop_reason"], "tool_use");
    let r = post_anthropic(&fake, &Req::new("lead", 2, anthropic_body(true))).await;
    assert_eq!(r.status(), 529);
    assert_eq!(r.headers()["retry-after-ms"], "20");
    let events = sse(post_anthropic(&fake, &Req::new("lead", 2, anthropic_body(true))).await).await;
    assert_eq!(names(&events).last(), Some(&"message_stop"));
    let raw = raw_post(
        fake.addr(),
        "/v1/messages",
        &[
            ("x-api-key", "k"),
            ("anthropic-version", "2023-06-01"),
            ("x-muster-agent-id", "worker-1"),
            ("x-muster-turn", "1"),
        ],
        &anthropic_body(true),
    )
    .await;
    assert!(!raw.complete);
    let body = json!({"model": "m", "max_tokens": 100, "messages": [
        {"role": "user", "content": "<mail type=\"plan_approval_response\" from=\"lead\" id=\"m7\">approved</mail>"}]});
    let v = json_of(post_anthropic(&fake, &Req::new("worker-1", 2, body)).await).await;
    assert_eq!(v["content"][0]["text"], "Approved; starting.");
    let mut req = Req::new("lead", 3, anthropic_body(false));
    req.purpose = Some("compact");
    let v = json_of(post_anthropic(&fake, &req).await).await;
    assert!(
        v["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("Summary")
    );
    fake.verify().unwrap();
}
