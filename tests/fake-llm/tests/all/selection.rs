//! Response selection by (agent, turn, attempt), `when` mail matches and purpose; never by
//! pop order.

use super::common::*;
use muster_fake_llm::{Block, ScriptEntry};
use serde_json::{Value, json};

fn text_of(v: &Value) -> String {
    v["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn ask(fake: &muster_fake_llm::FakeLlmHandle, agent: &str, turn: u64) -> (u16, Value) {
    let resp = post_anthropic(fake, &Req::new(agent, turn, anthropic_body(false))).await;
    let status = resp.status().as_u16();
    (status, json_of(resp).await)
}

fn reply(agent: &str, turn: u64, text: &str) -> ScriptEntry {
    ScriptEntry::reply(agent, turn, vec![Block::text(text)])
}

#[tokio::test]
async fn selection_is_by_agent_and_turn_not_by_order() {
    let fake = start(vec![
        reply("b", 2, "b2"),
        reply("a", 2, "a2"),
        reply("a", 1, "a1"),
        reply("b", 1, "b1"),
    ])
    .await;
    // Requests in an order unrelated to the script's.
    assert_eq!(text_of(&ask(&fake, "a", 1).await.1), "a1");
    assert_eq!(text_of(&ask(&fake, "b", 1).await.1), "b1");
    assert_eq!(text_of(&ask(&fake, "b", 2).await.1), "b2");
    assert_eq!(text_of(&ask(&fake, "a", 2).await.1), "a2");
    fake.verify().unwrap();
    let reqs = fake.requests();
    assert_eq!(reqs[0].agent.as_deref(), Some("a"));
    assert_eq!(reqs[0].turn, Some(1));
    assert_eq!(reqs[0].attempt, 1);
    assert_eq!(reqs[0].entry, Some(2));
    assert_eq!(reqs[0].run_id.as_deref(), Some("run-1"));
    assert_eq!(reqs[0].headers["anthropic-version"], "2023-06-01");
    assert_eq!(reqs[0].body["model"], "claude-sonnet-4-5");
}

#[tokio::test]
async fn attempt_specific_entries_and_no_attempt_answers_all_remaining() {
    let fake = start(vec![
        reply("a", 1, "any other attempt"),
        ScriptEntry::http_error("a", 1, 529).attempt(1),
        reply("a", 1, "third").attempt(3),
    ])
    .await;
    let (s1, _) = ask(&fake, "a", 1).await;
    assert_eq!(s1, 529);
    let (s2, v2) = ask(&fake, "a", 1).await;
    assert_eq!((s2, text_of(&v2).as_str()), (200, "any other attempt"));
    let (_, v3) = ask(&fake, "a", 1).await;
    assert_eq!(text_of(&v3), "third");
    let (_, v4) = ask(&fake, "a", 1).await;
    assert_eq!(text_of(&v4), "any other attempt");
    let attempts: Vec<u32> = fake.requests().iter().map(|r| r.attempt).collect();
    assert_eq!(attempts, [1, 2, 3, 4]);
    // Attempts count per (agent, turn).
    let fake2 = start(vec![
        reply("a", 1, "x").attempt(1),
        reply("a", 2, "y").attempt(1),
    ])
    .await;
    ask(&fake2, "a", 1).await;
    ask(&fake2, "a", 2).await;
    fake2.verify().unwrap();
}

#[tokio::test]
async fn unmatched_request_is_a_loud_500_and_a_recorded_failure() {
    let fake = start(vec![reply("a", 1, "x")]).await;
    let (status, v) = ask(&fake, "a", 2).await;
    assert_eq!(status, 500);
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "api_error");
    assert_eq!(
        v["error"]["message"],
        "fake-llm: no script entry for agent a turn 2 attempt 1"
    );
    let failures = fake.failures();
    assert_eq!(failures.len(), 1);
    assert!(failures[0].unmatched);
    let err = fake.verify().unwrap_err().to_string();
    assert!(err.contains("agent a turn 2 attempt 1"), "{err}");
    assert!(err.contains("unused script entries [0]"), "{err}");
    // OpenAI shape for the same failure.
    let resp = post_openai(&fake, &Req::new("zed", 9, openai_body(true))).await;
    assert_eq!(resp.status(), 500);
    assert_eq!(resp.headers()["x-should-retry"], "false");
    let v = json_of(resp).await;
    assert_eq!(v["error"]["type"], "server_error");
    assert_eq!(
        v["error"]["message"],
        "fake-llm: no script entry for agent zed turn 9 attempt 1"
    );
}

#[tokio::test]
async fn unused_entry_fails_verify() {
    let fake = start(vec![reply("a", 1, "x"), reply("a", 2, "y")]).await;
    ask(&fake, "a", 1).await;
    assert_eq!(fake.unused_entries(), vec![1]);
    assert!(fake.verify().is_err());
}

fn mail_body(user_content: Value) -> Value {
    json!({
        "model": "claude-sonnet-4-5", "max_tokens": 1000,
        "messages": [
            {"role": "user", "content": "<mail type=\"task_assignment\" from=\"lead\">do it</mail>"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": user_content}
        ]
    })
}

#[tokio::test]
async fn when_matches_mail_in_the_newest_user_turn() {
    let fake = start(entries(json!([
        {"agent": "w", "when": {"mail_type": "plan_approval_response", "from": "lead"},
         "reply": {"content": [{"type": "text", "text": "approved path"}]}},
        {"agent": "w", "when": {"mail_type": "plan_approval_response", "from": "human"},
         "reply": {"content": [{"type": "text", "text": "human path"}]}},
        {"agent": "w", "when": {"mail_type": "task_assignment"},
         "reply": {"content": [{"type": "text", "text": "task path"}]}}
    ])))
    .await;
    let send = |content: Value| {
        let fake = &fake;
        async move { json_of(post_anthropic(fake, &Req::new("w", 7, mail_body(content))).await).await }
    };
    // Text blocks of the newest user turn, mail tag with extra attributes and escapes.
    let v = send(json!([
        {"type": "text", "text": "New mail:\n<mail id=\"m1\" type=\"plan_approval_response\" from='lead' note=\"a &quot;b&quot;\">approved</mail>"}
    ]))
    .await;
    assert_eq!(text_of(&v), "approved path");
    let v = send(json!(
        "<mail from=\"human\" type=\"plan_approval_response\">no</mail>"
    ))
    .await;
    assert_eq!(text_of(&v), "human path");
    // Only the newest user turn counts: the first message's task_assignment is old.
    let v = send(json!(
        "<mail type=\"task_assignment\" from=\"lead\">again</mail>"
    ))
    .await;
    assert_eq!(text_of(&v), "task path");
    let resp = post_anthropic(&fake, &Req::new("w", 8, mail_body(json!("no mail here")))).await;
    assert_eq!(resp.status(), 500, "the older mail does not match");
    // A mail tag inside a tool_result is not mail.
    let body = json!({
        "model": "m", "max_tokens": 100,
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "<mail type=\"task_assignment\">"}]}
        ]
    });
    let resp = post_anthropic(&fake, &Req::new("w", 9, body)).await;
    assert_eq!(resp.status(), 500);
}

#[tokio::test]
async fn turn_entry_beats_when_entry_and_when_works_for_openai() {
    let fake = start(entries(json!([
        {"agent": "w", "when": {"mail_type": "answer"}, "reply": {"content": [{"type": "text", "text": "by mail"}]}},
        {"agent": "w", "turn": 2, "reply": {"content": [{"type": "text", "text": "by turn"}]}}
    ])))
    .await;
    let body = json!({"model": "gpt-4.1", "messages": [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "<mail type=\"answer\" from=\"lead\">42</mail>"}]});
    let v = json_of(post_openai(&fake, &Req::new("w", 1, body.clone())).await).await;
    assert_eq!(v["choices"][0]["message"]["content"], "by mail");
    let v = json_of(post_openai(&fake, &Req::new("w", 2, body)).await).await;
    assert_eq!(v["choices"][0]["message"]["content"], "by turn");
}

#[tokio::test]
async fn purpose_and_run_id_are_recorded_and_purpose_selects() {
    let fake = start(entries(json!([
        {"agent": "a", "turn": 5, "reply": {"content": [{"type": "text", "text": "normal"}]}},
        {"agent": "a", "turn": 5, "purpose": "compact", "reply": {"content": [{"type": "text", "text": "summary"}]}}
    ])))
    .await;
    let mut req = Req::new("a", 5, anthropic_body(false));
    req.purpose = Some("compact");
    let v = json_of(post_anthropic(&fake, &req).await).await;
    assert_eq!(text_of(&v), "summary");
    let (_, v) = ask(&fake, "a", 5).await;
    assert_eq!(text_of(&v), "normal");
    let reqs = fake.requests();
    assert_eq!(reqs[0].purpose.as_deref(), Some("compact"));
    assert_eq!(reqs[1].purpose, None);
    assert_eq!(reqs[0].run_id.as_deref(), Some("run-1"));
    assert_eq!(
        reqs[1].attempt, 2,
        "attempts count per (agent, turn), whatever the purpose"
    );
}

#[tokio::test]
async fn entry_without_agent_answers_any_agent() {
    let fake = start(entries(json!([
        {"reply": {"content": [{"type": "text", "text": "anyone"}]}},
        {"agent": "lead", "reply": {"content": [{"type": "text", "text": "lead"}]}}
    ])))
    .await;
    assert_eq!(text_of(&ask(&fake, "x", 1).await.1), "anyone");
    assert_eq!(text_of(&ask(&fake, "lead", 1).await.1), "lead");
    let mut req = Req::new("x", 1, anthropic_body(false));
    req.agent = None;
    req.turn = None;
    let v = json_of(post_anthropic(&fake, &req).await).await;
    assert_eq!(text_of(&v), "anyone");
}

#[tokio::test]
async fn concurrent_agents_each_get_their_own_answer() {
    let mut script = Vec::new();
    for agent in ["a", "b", "c", "d"] {
        for turn in 1..=3 {
            script.push(reply(agent, turn, &format!("{agent}{turn}")));
        }
    }
    let fake = start(script).await;
    let tasks: Vec<_> = ["a", "b", "c", "d"]
        .into_iter()
        .map(|agent| {
            let base = fake.base_url();
            tokio::spawn(async move {
                let mut got = Vec::new();
                for turn in 1..=3u64 {
                    let resp = guard(
                        client()
                            .post(format!("{base}/v1/messages"))
                            .header("x-api-key", "k")
                            .header("anthropic-version", "2023-06-01")
                            .header("x-muster-agent-id", agent)
                            .header("x-muster-turn", turn.to_string())
                            .json(&anthropic_body(true))
                            .send(),
                    )
                    .await
                    .unwrap();
                    let events = sse(resp).await;
                    let text: String = events
                        .iter()
                        .filter(|e| e.event.as_deref() == Some("content_block_delta"))
                        .map(|e| e.json()["delta"]["text"].as_str().unwrap().to_owned())
                        .collect();
                    got.push(text);
                }
                (agent, got)
            })
        })
        .collect();
    for t in tasks {
        let (agent, got) = guard(t).await.unwrap();
        assert_eq!(
            got,
            (1..=3).map(|n| format!("{agent}{n}")).collect::<Vec<_>>()
        );
    }
    fake.verify().unwrap();
    let recorded = fake.requests();
    assert_eq!(recorded.len(), 12);
    assert!(recorded.iter().all(|r| r.attempt == 1));
    assert_eq!(recorded[0].header("X-Muster-Run-Id"), None);
    assert_eq!(recorded[0].header("Anthropic-Version"), Some("2023-06-01"));
}
