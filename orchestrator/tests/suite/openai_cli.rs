//! `muster run --provider openai` through the binary against `muster-fake-llm`'s
//! OpenAI-compatible endpoint over real HTTP (what Ollama, vLLM and llama.cpp users run): a
//! team whose plan-mode teammate is approved by the lead's model, and a single agent whose
//! model streams parallel tool calls in the shapes compatible servers send. Tests wait for the
//! child process to exit, never on sleeps.

use std::path::Path;
use std::process::Output;

use muster_fake_llm::{
    Block, FakeLlm, FakeLlmConfig, FakeLlmHandle, KeyCheck, OpenAiQuirks, RecordedRequest,
    ScriptEntry,
};
use serde_json::{Value, json};

use super::common::{command, lines, output, position, project, stderr, tool};

const MODEL: &str = "gpt-4.1";
const PLAN: &str = "## Goal\nGreet.\n## Steps\n1. Write hello.txt\n## Files\nhello.txt\n## Tests\nnone\n## Risks\nnone\n";

/// `muster run --provider openai` at the fake's OpenAI base URL, then `extra`.
async fn run_openai(
    dir: &Path,
    fake: &FakeLlmHandle,
    keys: &[(&str, &str)],
    extra: &[&str],
) -> Output {
    let base = fake.openai_base_url();
    let mut args = vec![
        "run",
        "-p",
        "Greet the world.",
        "--provider",
        "openai",
        "--base-url",
        &base,
        "--model",
        MODEL,
        "--output",
        "stream-json",
    ];
    args.extend_from_slice(extra);
    muster(dir, keys, &args).await
}

/// The shared `muster` command in `dir`, but without its test Anthropic key: no Anthropic key
/// nor base URL is in the environment, and only the variables in `keys` hold OpenAI keys.
async fn muster(dir: &Path, keys: &[(&str, &str)], args: &[&str]) -> Output {
    let mut command = command(dir, args);
    command
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL");
    for (name, value) in keys {
        command.env(name, value);
    }
    output(command).await
}

async fn fake_with_key(key: &str, script: Vec<ScriptEntry>) -> FakeLlmHandle {
    FakeLlm::start_with(
        FakeLlmConfig {
            keys: KeyCheck::Exact(key.into()),
            ..FakeLlmConfig::default()
        },
        script,
    )
    .await
    .unwrap()
}

/// vLLM's shape: `finish_reason: "stop"` beside tool calls, `choices: null` in the usage chunk.
fn vllm(mut entry: ScriptEntry) -> ScriptEntry {
    entry.openai = OpenAiQuirks {
        finish_reason_stop_with_tools: true,
        usage_choices_null: true,
        ..OpenAiQuirks::default()
    };
    entry
}

/// An entry answering `agent` whenever its newest user turn carries mail of `mail_type`.
fn when_mail(agent: &str, mail_type: &str, content: Vec<Block>) -> ScriptEntry {
    let mut entry = ScriptEntry::reply(agent, 0, content);
    entry.turn = None;
    entry.when = Some(serde_json::from_value(json!({"mail_type": mail_type})).unwrap());
    entry
}

/// An entry answering `agent` at any turn no other entry scripts.
fn any_turn(agent: &str, content: Vec<Block>) -> ScriptEntry {
    let mut entry = ScriptEntry::reply(agent, 0, content);
    entry.turn = None;
    entry
}

/// Every request was an OpenAI chat completion for `MODEL`, authenticated with `key` as a
/// bearer token, in OpenAI's body shape.
fn assert_openai_shape(requests: &[RecordedRequest], key: &str) {
    assert!(!requests.is_empty());
    let bearer = format!("Bearer {key}");
    for r in requests {
        assert_eq!(
            (r.method.as_str(), r.path.as_str()),
            ("POST", "/v1/chat/completions")
        );
        assert_eq!(r.status, 200, "{:?}", r.error);
        assert_eq!(r.header("authorization"), Some(bearer.as_str()));
        assert!(r.header("x-api-key").is_none());
        assert!(r.header("anthropic-version").is_none());
        assert_eq!(r.body["model"], MODEL);
        assert_eq!(r.body["stream"], true);
        assert_eq!(r.body["stream_options"]["include_usage"], true);
        assert_eq!(r.body["messages"][0]["role"], "system");
        assert!(r.body.get("system").is_none(), "no Anthropic system field");
        for t in r.body["tools"].as_array().unwrap() {
            assert_eq!(t["type"], "function");
            assert!(t["function"]["parameters"].is_object(), "{t}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_team_over_the_openai_wire_plans_gets_the_leads_approval_then_writes() {
    let dir = project(&[(
        "muster.team.toml",
        "name = \"greeters\"\n\n[[teammates]]\nname = \"alice\"\nplan_mode_required = true\napprover = \"lead\"\n",
    )]);
    let script = vec![
        ScriptEntry::reply(
            "lead",
            1,
            vec![tool(
                "TaskCreate",
                json!({"subject": "Greet", "description": "Write hello.txt saying hello."}),
            )],
        ),
        when_mail(
            "lead",
            "plan_approval_request",
            vec![tool(
                "ReviewPlan",
                json!({"request_id": "plan-alice-1", "approve": true, "mode": "acceptEdits"}),
            )],
        ),
        any_turn("lead", vec![Block::text("Waiting for the team.")]),
        ScriptEntry::reply(
            "alice",
            1,
            vec![
                Block::text("Looking first."),
                tool("Read", json!({"file_path": "README.md"})),
                tool("ExitPlanMode", json!({"plan": PLAN})),
            ],
        ),
        ScriptEntry::reply(
            "alice",
            2,
            vec![tool(
                "Write",
                json!({"file_path": "hello.txt", "content": "hello, world\n"}),
            )],
        ),
        ScriptEntry::reply("alice", 3, vec![Block::text("Wrote hello.txt.")]),
    ]
    .into_iter()
    .map(vllm)
    .collect();
    let fake = fake_with_key("sk-openai-team", script).await;
    let output = run_openai(
        dir.path(),
        &fake,
        &[("OPENAI_API_KEY", "sk-openai-team")],
        &[],
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let events = lines(&output);
    let claimed = position(&events, "alice's claim", |e| {
        e["type"] == "mail_sent" && e["to"] == "alice" && e["kind"] == "task_assignment"
    });
    let requested = position(&events, "approval_requested", |e| {
        e["type"] == "approval_requested" && e["agent"] == "alice"
    });
    assert_eq!(events[requested]["request_id"], "plan-alice-1");
    assert_eq!(events[requested]["responder"], "lead");
    let review = position(&events, "the lead's ReviewPlan", |e| {
        e["type"] == "tool_call" && e["agent"] == "lead" && e["tool"] == "ReviewPlan"
    });
    let decided = position(&events, "approval_decided", |e| {
        e["type"] == "approval_decided" && e["agent"] == "alice"
    });
    let write = position(&events, "alice's Write", |e| {
        e["type"] == "tool_call" && e["agent"] == "alice" && e["tool"] == "Write"
    });
    assert!(claimed < requested && requested < review && requested < decided);
    assert!(
        decided < write && review < write,
        "the write came after the approval"
    );
    assert_eq!(events[decided]["approved"], true);
    assert_eq!(events[decided]["responder"], "lead");
    assert_eq!(events[write]["decision"], "allow");
    // Both agents' turns ran on the model named on the command line.
    for agent in ["lead", "alice"] {
        assert!(
            events
                .iter()
                .any(|e| e["type"] == "model_turn" && e["agent"] == agent),
            "{agent}"
        );
    }
    let finished = events.last().unwrap();
    assert_eq!(finished["type"], "run_finished");
    assert_eq!(finished["exit_code"], 0);
    assert_eq!(finished["tasks"][0]["status"], "completed");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(),
        "hello, world\n"
    );
    let requests = fake.requests();
    assert_openai_shape(&requests, "sk-openai-team");
    for agent in ["lead", "alice"] {
        assert!(
            requests.iter().any(|r| r.agent.as_deref() == Some(agent)),
            "{agent} made no request"
        );
    }
    fake.verify().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn parallel_tool_calls_over_the_openai_wire_both_run_whatever_their_index() {
    // Ollama sends every parallel call at index 0; older versions send no index at all.
    let rows = [
        ("indexed", OpenAiQuirks::default()),
        (
            "tool_index_always_zero",
            OpenAiQuirks {
                tool_index_always_zero: true,
                ..OpenAiQuirks::default()
            },
        ),
        (
            "omit_tool_index",
            OpenAiQuirks {
                omit_tool_index: true,
                ..OpenAiQuirks::default()
            },
        ),
    ];
    for (name, quirks) in rows {
        // The key comes from the variable the settings name, not OPENAI_API_KEY.
        let dir = project(&[(
            ".muster/settings.toml",
            "[providers.openai]\napi_key_env = \"FAKE_OPENAI_KEY\"\n",
        )]);
        // A project's own `api_key_env` applies only in a trusted project.
        super::common::trust_blocking(dir.path());
        let mut calls = ScriptEntry::reply(
            "main",
            1,
            vec![
                Block::text("Writing both."),
                tool("Write", json!({"file_path": "a.txt", "content": "first\n"})),
                tool(
                    "Write",
                    json!({"file_path": "b.txt", "content": "second\n"}),
                ),
            ],
        );
        calls.openai = quirks;
        let fake = fake_with_key(
            "sk-from-settings-variable",
            vec![
                calls,
                ScriptEntry::reply("main", 2, vec![Block::text("Both written.")]),
            ],
        )
        .await;
        let output = run_openai(
            dir.path(),
            &fake,
            &[
                ("FAKE_OPENAI_KEY", "sk-from-settings-variable"),
                ("OPENAI_API_KEY", "sk-not-this-one"),
            ],
            &["--permission-mode", "acceptEdits"],
        )
        .await;
        assert_eq!(output.status.code(), Some(0), "{name}: {}", stderr(&output));
        let events = lines(&output);
        let writes: Vec<&Value> = events
            .iter()
            .filter(|e| e["type"] == "tool_call" && e["tool"] == "Write")
            .map(|e| &e["decision"])
            .collect();
        assert_eq!(writes, [&json!("allow"); 2], "{name}: {events:#?}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
            "first\n",
            "{name}"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("b.txt")).unwrap(),
            "second\n",
            "{name}"
        );
        assert_eq!(events.last().unwrap()["result"], "Both written.", "{name}");
        let requests = fake.requests();
        assert_openai_shape(&requests, "sk-from-settings-variable");
        // The second request answers both calls, each under its own id.
        let messages = requests[1].body["messages"].as_array().unwrap();
        let assistant = messages.iter().find(|m| m["role"] == "assistant").unwrap();
        let call_ids: Vec<&Value> = assistant["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| &c["id"])
            .collect();
        let answered: Vec<&Value> = messages
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| &m["tool_call_id"])
            .collect();
        assert_eq!(call_ids.len(), 2, "{name}: {assistant:#}");
        assert_eq!(answered, call_ids, "{name}");
        fake.verify().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_openai_run_stopped_for_a_person_resumes_on_the_same_provider_url_and_model() {
    let dir = project(&[]);
    let keys = [("OPENAI_API_KEY", "sk-openai-resume")];
    let fake = fake_with_key(
        "sk-openai-resume",
        vec![
            vllm(ScriptEntry::reply(
                "main",
                1,
                vec![tool("ExitPlanMode", json!({"plan": PLAN}))],
            )),
            vllm(ScriptEntry::reply(
                "main",
                2,
                vec![tool(
                    "Write",
                    json!({"file_path": "hello.txt", "content": "hello, world\n"}),
                )],
            )),
            ScriptEntry::reply("main", 3, vec![Block::text("Greeted.")]),
        ],
    )
    .await;
    let first = run_openai(dir.path(), &fake, &keys, &["--permission-mode", "plan"]).await;
    assert_eq!(first.status.code(), Some(5), "{}", stderr(&first));
    let finished = lines(&first).pop().unwrap();
    assert_eq!(finished["request_id"], "plan-main-1");
    let run_id = finished["run_id"].as_str().unwrap().to_owned();
    let approve = muster(
        dir.path(),
        &keys,
        &["approve", "plan-main-1", "--mode", "acceptEdits"],
    )
    .await;
    assert_eq!(approve.status.code(), Some(0), "{}", stderr(&approve));
    // No --provider, --base-url nor --model: the run's launch options hold them.
    let resumed = muster(
        dir.path(),
        &keys,
        &["resume", &run_id, "--output", "stream-json"],
    )
    .await;
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    let events = lines(&resumed);
    let write = position(&events, "the Write call", |e| {
        e["type"] == "tool_call" && e["tool"] == "Write"
    });
    assert_eq!(events[write]["decision"], "allow");
    assert_eq!(events.last().unwrap()["result"], "Greeted.");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(),
        "hello, world\n"
    );
    let requests = fake.requests();
    assert_eq!(
        requests.iter().map(|r| r.turn).collect::<Vec<_>>(),
        [Some(1), Some(2), Some(3)]
    );
    assert_openai_shape(&requests, "sk-openai-resume");
    fake.verify().unwrap();
}
