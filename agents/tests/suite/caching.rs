//! The prompt-cache breakpoints of the requests an agent sends, read from what
//! `muster-fake-llm` received over real HTTP: the stable prefix (tools, system) and a rolling
//! pair on the conversation, never more than the API's four, each request re-marking the
//! previous request's newest breakpoint over a byte-identical prefix.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use muster_agents::model::MAX_BREAKPOINTS;
use muster_agents::runtime::{AgentKind, PlanApprover};
use muster_config::PermissionMode;
use muster_fake_llm::{Block, ScriptEntry};
use serde_json::{Value, json};

use super::harness::{RunHarness, finished, run, spec, start};

/// The paths (`messages/3/content/1`, `system/0`, `tools/17`) of the blocks marked in `body`.
fn breakpoints(body: &Value) -> Vec<String> {
    let mut marked = Vec::new();
    for (key, list) in [("system", &body["system"]), ("tools", &body["tools"])] {
        for (i, item) in list.as_array().into_iter().flatten().enumerate() {
            if item.get("cache_control").is_some() {
                marked.push(format!("{key}/{i}"));
            }
        }
    }
    for (m, message) in body["messages"].as_array().unwrap().iter().enumerate() {
        for (b, block) in message["content"].as_array().unwrap().iter().enumerate() {
            if block.get("cache_control").is_some() {
                marked.push(format!("messages/{m}/content/{b}"));
            }
        }
    }
    marked
}

/// The messages up to and including `index`, without their cache markers.
fn prefix(body: &Value, index: usize) -> Value {
    let mut messages: Vec<Value> = body["messages"].as_array().unwrap()[..=index].to_vec();
    for message in &mut messages {
        for block in message["content"].as_array_mut().unwrap() {
            block.as_object_mut().unwrap().remove("cache_control");
        }
    }
    Value::Array(messages)
}

fn message_index(path: &str) -> usize {
    path.split('/').nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn each_request_marks_the_newest_turn_and_rereads_the_previous_requests_prefix() {
    let read = |turn, path: &str| {
        ScriptEntry::reply(
            "main",
            turn,
            vec![Block::tool_use("Read", json!({"file_path": path}))],
        )
    };
    let h = RunHarness::setup()
        .file("a.txt", "a\n")
        .file("b.txt", "b\n")
        .start(vec![
            read(1, "a.txt"),
            read(2, "b.txt"),
            read(3, "a.txt"),
            ScriptEntry::reply("main", 4, vec![Block::text("Read them.")]),
        ])
        .await;
    let context = h.context(PlanApprover::Human);
    let mut agent = start(
        context,
        spec("main", AgentKind::Main, PermissionMode::Default),
        "Read.",
    )
    .await;
    assert_eq!(run(&mut agent).await, finished("Read them."));
    let bodies: Vec<Value> = h
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/messages"))
        .map(|r| r.body)
        .collect();
    assert_eq!(bodies.len(), 4);
    let mut previous_newest: Option<(usize, &Value)> = None;
    for (n, body) in bodies.iter().enumerate() {
        let marked = breakpoints(body);
        assert!(marked.len() <= MAX_BREAKPOINTS, "request {n}: {marked:?}");
        assert!(
            marked.contains(&"system/0".to_owned()),
            "request {n}: {marked:?}"
        );
        let tools = body["tools"].as_array().unwrap().len();
        assert!(
            marked.contains(&format!("tools/{}", tools - 1)),
            "request {n}"
        );
        let on_messages: Vec<usize> = marked
            .iter()
            .filter(|p| p.starts_with("messages/"))
            .map(|p| message_index(p))
            .collect();
        let newest = body["messages"].as_array().unwrap().len() - 1;
        assert!(
            on_messages.contains(&newest),
            "request {n}: the newest turn is marked"
        );
        let last_block = body["messages"][newest]["content"]
            .as_array()
            .unwrap()
            .len()
            - 1;
        assert!(marked.contains(&format!("messages/{newest}/content/{last_block}")));
        if let Some((index, earlier)) = previous_newest {
            assert!(
                on_messages.contains(&index),
                "request {n} re-marks where request {} wrote: {marked:?}",
                n - 1
            );
            assert_eq!(
                prefix(body, index),
                prefix(earlier, index),
                "request {n}: same prefix"
            );
        }
        previous_newest = Some((newest, body));
    }
}
