//! What `muster run --output stream-json` tells a front end, checked against what crossed the
//! wire: each `tool_call` carries the input the model gave and the result the model was sent
//! back (as the fake model server received it in the next request), an edit its diff; each
//! `model_turn` the usage the fake server returned (its own log) and the cost at the
//! configured prices; `tool_started` (not durable) comes before its call, with
//! `--include-partial` only.

use muster_fake_llm::{Block, ReturnedUsage, ScriptEntry, UsageSpec};
use serde_json::{Value, json};

use super::common::{fake, lines, muster, project, stderr, tool};

/// Dollars per million tokens: input, output, cache read, cache write.
const PRICES: [f64; 4] = [3.0, 15.0, 0.3, 3.75];

fn cost(usage: &ReturnedUsage) -> f64 {
    let tokens = [
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_input_tokens,
        usage.cache_creation_input_tokens,
    ];
    tokens
        .iter()
        .zip(PRICES)
        .map(|(&n, price)| n as f64 * price / 1_000_000.0)
        .sum()
}

/// The text of each `tool_result` in the request body `body`, by tool_use_id.
fn tool_results(body: &Value) -> Vec<(String, String)> {
    let mut results = Vec::new();
    for message in body["messages"].as_array().unwrap() {
        let Some(blocks) = message["content"].as_array() else {
            continue;
        };
        for block in blocks.iter().filter(|b| b["type"] == "tool_result") {
            let text = match &block["content"] {
                Value::String(text) => text.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(|p| p["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n"),
                other => panic!("a tool_result's content: {other}"),
            };
            results.push((block["tool_use_id"].as_str().unwrap().to_owned(), text));
        }
    }
    results
}

#[tokio::test(flavor = "multi_thread")]
async fn the_stream_carries_tool_inputs_results_diffs_and_the_usage_the_model_returned() {
    let dir = project(&[]);
    std::fs::write(
        dir.path().join(".muster/settings.toml"),
        format!(
            "[models.\"claude-sonnet-4-5\"]\nprice_in = {}\nprice_out = {}\n\
             price_cache_read = {}\nprice_cache_write = {}\n",
            PRICES[0], PRICES[1], PRICES[2], PRICES[3]
        ),
    )
    .unwrap();
    let inputs = [
        ("Read", json!({"file_path": "README.md"})),
        (
            "Edit",
            json!({"file_path": "README.md", "old_string": "hello", "new_string": "hello, world"}),
        ),
        (
            "Write",
            json!({"file_path": "notes.txt", "content": "one\ntwo\n"}),
        ),
    ];
    let mut first = ScriptEntry::reply(
        "main",
        1,
        inputs
            .iter()
            .map(|(name, input)| tool(name, input.clone()))
            .collect(),
    );
    first.reply.as_mut().unwrap().usage = Some(UsageSpec {
        input_tokens: Some(1200),
        output_tokens: Some(80),
        cache_read_input_tokens: Some(300),
        cache_creation_input_tokens: Some(40),
    });
    let fake = fake(vec![
        first,
        // Its usage is the fake server's own estimate: the test reads it from the server.
        ScriptEntry::reply("main", 2, vec![Block::text("Edited.")]),
    ])
    .await;
    let output = muster(
        dir.path(),
        &[
            "run",
            "-p",
            "Edit the readme.",
            "--base-url",
            &fake.base_url(),
            "--model",
            "claude-sonnet-4-5",
            "--permission-mode",
            "acceptEdits",
            "--output",
            "stream-json",
            "--include-partial",
        ],
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let events = lines(&output);
    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "{requests:#?}");

    // model_turn: the usage the server returned, and the cost at the configured prices.
    let turns: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "model_turn")
        .collect();
    assert_eq!(turns.len(), 2);
    for turn in turns {
        let request = requests
            .iter()
            .find(|r| r.turn == turn["turn"].as_u64())
            .unwrap();
        let returned = request.usage.unwrap();
        assert_eq!(
            turn["usage"],
            json!({"input_tokens": returned.input_tokens,
                   "output_tokens": returned.output_tokens,
                   "cache_read_input_tokens": returned.cache_read_input_tokens,
                   "cache_creation_input_tokens": returned.cache_creation_input_tokens}),
            "{turn}"
        );
        let cost_usd = turn["cost_usd"].as_f64().unwrap();
        assert!((cost_usd - cost(&returned)).abs() < 1e-9, "{turn}");
    }
    assert_eq!(
        requests[0].usage.unwrap(),
        ReturnedUsage {
            input_tokens: 1200,
            output_tokens: 80,
            cache_read_input_tokens: 300,
            cache_creation_input_tokens: 40,
        }
    );

    // tool_call: the input given, the result the model was sent back, an edit's diff.
    let calls: Vec<&Value> = events.iter().filter(|e| e["type"] == "tool_call").collect();
    assert_eq!(calls.len(), 3, "{events:#?}");
    let sent_back = tool_results(&requests[1].body);
    assert_eq!(sent_back.len(), 3, "{:#?}", requests[1].body);
    let diffs = [
        None,
        Some("--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-hello\n+hello, world\n"),
        Some("--- /dev/null\n+++ b/notes.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n"),
    ];
    for ((call, (name, input)), diff) in calls.iter().zip(&inputs).zip(diffs) {
        assert_eq!(call["tool"], *name);
        assert_eq!(call["decision"], "allow", "{call}");
        assert_eq!(call["is_error"], false, "{call}");
        assert_eq!(call["input"], *input);
        let id = call["tool_use_id"].as_str().unwrap();
        let (_, result) = sent_back.iter().find(|(i, _)| i == id).unwrap();
        assert_eq!(call["content"], result.as_str(), "{name}");
        assert_eq!(call["diff"].as_str(), diff, "{name}");
        // Its start, not durable, came before it with the same input.
        let started = events
            .iter()
            .position(|e| e["type"] == "tool_started" && e["tool_use_id"] == id)
            .unwrap_or_else(|| panic!("no tool_started for {id}: {events:#?}"));
        let finished = events.iter().position(|e| e == *call).unwrap();
        assert!(started < finished);
        assert_eq!(events[started]["input"], *input);
        assert_eq!(events[started]["durable"], false);
    }
    assert!(
        sent_back[0].1.contains("hello"),
        "the Read's result is the file: {}",
        sent_back[0].1
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("README.md")).unwrap(),
        "hello, world\n"
    );

    // The run log holds the durable lines, none of the others.
    let run_id = events[0]["run_id"].as_str().unwrap();
    let log =
        std::fs::read_to_string(dir.path().join(format!(".muster/logs/{run_id}.jsonl"))).unwrap();
    let logged: Vec<Value> = log
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|line| {
            line["fields"]["event"]
                .as_str()
                .and_then(|e| serde_json::from_str(e).ok())
        })
        .collect();
    let logged_types: Vec<&str> = logged.iter().filter_map(|e| e["type"].as_str()).collect();
    assert!(logged_types.contains(&"tool_call"), "{logged_types:?}");
    assert!(logged_types.contains(&"agent_state"), "{logged_types:?}");
    assert!(
        !logged_types.contains(&"tool_started") && !logged_types.contains(&"model_delta"),
        "{logged_types:?}"
    );
    fake.verify().unwrap();
}
