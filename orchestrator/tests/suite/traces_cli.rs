//! Traces through the `muster` binary, received by an OTLP/HTTP receiver built on the
//! OpenTelemetry project's protobuf bindings (`tests/traces/otlp_receiver.py`, PyPI
//! `opentelemetry-proto`, in the virtualenv `scripts/test` makes): the spans, their ids and
//! parents, the usage the fake model server logged as returned, `TRACEPARENT` in and out, no
//! content attribute unless the user's settings ask, and no connection at all with traces off
//! or turned on only by a project's file.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;

use muster_fake_llm::{Block, RecordedRequest, ScriptEntry, UsageSpec};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

use super::common::{GUARD, command, fake, output, project, stderr, tool};

/// The Python with `opentelemetry-proto`: `MUSTER_TEST_TRACES_PYTHON` (set by `scripts/test`).
fn traces_python() -> String {
    let python = std::env::var("MUSTER_TEST_TRACES_PYTHON").unwrap_or_else(|_| "python3".into());
    let found = std::process::Command::new(&python)
        .args([
            "-c",
            "import opentelemetry.proto.collector.trace.v1.trace_service_pb2",
        ])
        .output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "the traces tests need Python with opentelemetry-proto: run scripts/test, which \
         installs it, or set MUSTER_TEST_TRACES_PYTHON to such a python"
    );
    python
}

/// Attributes that are content: never sent unless the user's settings say so.
const CONTENT_KEYS: [&str; 5] = [
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "muster.response.text",
    "muster.permission.reason",
    "muster.decision.feedback",
];

/// A running receiver: its port, and every line it printed so far.
pub struct Receiver {
    pub port: u16,
    child: tokio::process::Child,
    lines: mpsc::UnboundedReceiver<Value>,
    pub spans: Vec<Value>,
    pub connections: usize,
}

impl Receiver {
    pub async fn start(extra: &[&str]) -> Receiver {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/traces/otlp_receiver.py");
        let mut child = tokio::process::Command::new(traces_python())
            .arg(script)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let (sender, mut lines) = mpsc::unbounded_channel();
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stdout.next_line().await {
                let value: Value = serde_json::from_str(&line).unwrap();
                if sender.send(value).is_err() {
                    break;
                }
            }
        });
        let first = tokio::time::timeout(GUARD, lines.recv())
            .await
            .expect("guard timeout")
            .expect("the receiver did not start");
        Receiver {
            port: first["listening"].as_u64().unwrap() as u16,
            child,
            lines,
            spans: Vec::new(),
            connections: 0,
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn take(&mut self, line: Value) {
        if let Some(span) = line.get("span") {
            self.spans.push(span.clone());
        } else if line.get("connection").is_some() {
            self.connections += 1;
        }
    }

    /// Reads lines until `done` holds of the spans received.
    pub async fn until(&mut self, what: &str, done: impl Fn(&[Value]) -> bool) {
        while !done(&self.spans) {
            let line = tokio::time::timeout(GUARD, self.lines.recv())
                .await
                .unwrap_or_else(|_| panic!("no {what} in {:#?}", self.spans))
                .expect("the receiver stopped");
            self.take(line);
        }
    }

    /// The connections accepted before this call: a probe connection is made and its line
    /// (by its port) waited for — connections are accepted in order, so every earlier one has
    /// been read by then.
    pub async fn connections_so_far(&mut self) -> usize {
        let probe = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .unwrap();
        let port = u64::from(probe.local_addr().unwrap().port());
        loop {
            let line = tokio::time::timeout(GUARD, self.lines.recv())
                .await
                .expect("guard timeout")
                .expect("the receiver stopped");
            let probe_seen = line["peer_port"].as_u64() == Some(port);
            self.take(line);
            if probe_seen {
                return self.connections - 1;
            }
        }
    }

    pub async fn stop(mut self) {
        drop(self.child.stdin.take());
        let _ = tokio::time::timeout(GUARD, self.child.wait()).await;
    }
}

/// The one span named `name` whose attribute `key` is `value`.
pub fn span_with<'s>(
    spans: &'s [Value],
    name_prefix: &str,
    key: &str,
    value: &Value,
) -> Vec<&'s Value> {
    spans
        .iter()
        .filter(|s| {
            s["name"]
                .as_str()
                .is_some_and(|n| n.starts_with(name_prefix))
                && &s["attributes"][key] == value
        })
        .collect()
}

/// Spans by id, checking that every copy of an id (a re-export after a crash) is the same
/// span.
pub fn by_id(spans: &[Value]) -> BTreeMap<String, Value> {
    let mut found: BTreeMap<String, Value> = BTreeMap::new();
    for span in spans {
        let id = span["span_id"].as_str().unwrap().to_owned();
        if let Some(before) = found.get(&id) {
            for field in ["name", "parent_span_id", "trace_id", "attributes"] {
                assert_eq!(
                    before[field], span[field],
                    "span {id} sent twice, differently"
                );
            }
        }
        found.insert(id, span.clone());
    }
    found
}

/// The usage attributes of a `chat` span equal what the fake server logged as returned.
pub fn assert_usage(span: &Value, request: &RecordedRequest) {
    let returned = request.usage.unwrap();
    let attributes = &span["attributes"];
    for (key, expected) in [
        ("gen_ai.usage.input_tokens", returned.input_tokens),
        ("gen_ai.usage.output_tokens", returned.output_tokens),
        (
            "gen_ai.usage.cache_read.input_tokens",
            returned.cache_read_input_tokens,
        ),
        (
            "gen_ai.usage.cache_creation.input_tokens",
            returned.cache_creation_input_tokens,
        ),
    ] {
        assert_eq!(attributes[key], json!(expected), "{key} of {span:#}");
    }
}

/// No span carries a content attribute, nor the text `secret` anywhere.
pub fn assert_no_content(spans: &[Value], secret: &str) {
    for span in spans {
        for key in CONTENT_KEYS {
            assert!(span["attributes"].get(key).is_none(), "{key} in {span:#}");
        }
        assert!(!span.to_string().contains(secret), "{secret:?} in {span:#}");
    }
}

const PARENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN: &str = "00f067aa0ba902b7";

/// A single run with a Bash call, started under a `TRACEPARENT`: every span in the caller's
/// trace, the root under the caller's span, each agent span under the root, each `chat` and
/// `execute_tool` under its agent; usage as the fake server returned it; the command saw its
/// own `execute_tool` span as `TRACEPARENT`. Content attributes appear only when the user's
/// own settings file asks; the collector's header is sent and never logged.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_is_one_trace_under_the_callers_traceparent_and_bash_sees_its_span() {
    for content in [false, true] {
        let dir = project(&[]);
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(home.path().join(".muster")).unwrap();
        std::fs::write(
            home.path().join(".muster/settings.toml"),
            format!("[telemetry]\nenabled = true\ncontent = {content}\n"),
        )
        .unwrap();
        let seen = dir.path().join("seen-traceparent");
        let command_text = format!(
            "printf %s \"$TRACEPARENT\" > {}; echo marker-text",
            seen.display()
        );
        let mut first = ScriptEntry::reply(
            "main",
            1,
            vec![tool("Bash", json!({"command": command_text}))],
        );
        first.reply.as_mut().unwrap().usage = Some(UsageSpec {
            input_tokens: Some(1200),
            output_tokens: Some(80),
            cache_read_input_tokens: Some(300),
            cache_creation_input_tokens: Some(40),
        });
        let fake = fake(vec![
            first,
            ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
        ])
        .await;
        let mut receiver = Receiver::start(&[]).await;
        let mut run = command(
            dir.path(),
            &[
                "run",
                "-p",
                "Look around.",
                "--base-url",
                &fake.base_url(),
                "--permission-mode",
                "bypassPermissions",
                "--output",
                "json",
            ],
        );
        run.env("HOME", home.path())
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
            .env("OTEL_EXPORTER_OTLP_HEADERS", "x-collector-key=sekrit-value")
            .env("TRACEPARENT", format!("00-{PARENT_TRACE}-{PARENT_SPAN}-01"));
        let ran = output(run).await;
        assert_eq!(ran.status.code(), Some(0), "{}", stderr(&ran));
        let result: Value = serde_json::from_slice(&ran.stdout).unwrap();
        let run_id = result["run_id"].as_str().unwrap().to_owned();
        receiver
            .until("the run's span", |spans| {
                spans
                    .iter()
                    .any(|s| s["name"].as_str().unwrap().starts_with("invoke_workflow"))
            })
            .await;
        let spans = receiver.spans.clone();
        let ids = by_id(&spans);
        assert_eq!(ids.len(), spans.len(), "content {content}: {spans:#?}");
        for span in &spans {
            assert_eq!(span["trace_id"], PARENT_TRACE, "{span:#}");
            assert_eq!(span["path"], "/v1/traces");
            assert_eq!(span["content_type"], "application/x-protobuf");
            assert_eq!(span["headers"]["x-collector-key"], "sekrit-value");
            assert_eq!(span["resource"]["service.name"], "muster");
            assert_eq!(
                span["attributes"]["gen_ai.conversation.id"],
                run_id.as_str()
            );
        }
        let root = span_with(
            &spans,
            "invoke_workflow",
            "gen_ai.operation.name",
            &json!("invoke_workflow"),
        );
        assert_eq!(root.len(), 1, "{spans:#?}");
        let root = root[0];
        assert_eq!(root["parent_span_id"], PARENT_SPAN);
        let agent = span_with(&spans, "invoke_agent", "gen_ai.agent.id", &json!("main"));
        assert_eq!(agent.len(), 1, "{spans:#?}");
        let agent = agent[0];
        assert_eq!(agent["parent_span_id"], root["span_id"]);
        let requests = fake.requests();
        assert_eq!(requests.len(), 2);
        for request in &requests {
            let chat = span_with(&spans, "chat", "muster.turn", &json!(request.turn.unwrap()));
            assert_eq!(chat.len(), 1, "{spans:#?}");
            assert_eq!(chat[0]["parent_span_id"], agent["span_id"]);
            assert_eq!(chat[0]["attributes"]["gen_ai.provider.name"], "anthropic");
            assert_eq!(
                chat[0]["attributes"]["gen_ai.request.model"],
                "claude-sonnet-4-5"
            );
            assert_usage(chat[0], request);
        }
        let bash = span_with(&spans, "execute_tool", "gen_ai.tool.name", &json!("Bash"));
        assert_eq!(bash.len(), 1, "{spans:#?}");
        let bash = bash[0];
        assert_eq!(bash["parent_span_id"], agent["span_id"]);
        assert_eq!(bash["attributes"]["muster.permission.decision"], "allow");
        assert_eq!(bash["attributes"]["muster.tool.exit_status"], 0);
        assert!(
            ["read-only", "workspace-write", "unconfined"].contains(
                &bash["attributes"]["muster.sandbox.profile"]
                    .as_str()
                    .unwrap_or("")
            ),
            "{bash:#}"
        );
        assert_eq!(
            std::fs::read_to_string(&seen).unwrap(),
            format!("00-{PARENT_TRACE}-{}-01", bash["span_id"].as_str().unwrap())
        );
        assert_eq!(spans.len(), 5, "{spans:#?}");
        if content {
            assert_eq!(
                bash["attributes"]["gen_ai.tool.call.arguments"],
                json!({"command": command_text}).to_string()
            );
            assert!(
                bash["attributes"]["gen_ai.tool.call.result"]
                    .as_str()
                    .unwrap()
                    .contains("marker-text"),
                "{bash:#}"
            );
        } else {
            assert_no_content(&spans, "marker-text");
        }
        // The collector's key is in no log.
        assert!(!stderr(&ran).contains("sekrit"));
        let log = std::fs::read_to_string(dir.path().join(format!(".muster/logs/{run_id}.jsonl")))
            .unwrap();
        assert!(!log.contains("sekrit"));
        assert!(log.contains("traces sent"), "{log}");
        receiver.stop().await;
    }
}

/// Traces off (no variable, no user setting — an endpoint alone turns nothing on), or turned
/// on only by the project's own settings file, trusted or not: the collector gets no
/// connection, and the project's setting is reported as ignored.
#[tokio::test(flavor = "multi_thread")]
async fn traces_off_or_turned_on_by_a_project_file_make_no_connection() {
    // (what, the project's settings file, trust the project)
    let rows: &[(&str, Option<&str>, bool)] = &[
        ("off", None, false),
        (
            "a project file",
            Some("[telemetry]\nenabled = true\n"),
            false,
        ),
        (
            "a trusted project file",
            Some("[telemetry]\nenabled = true\n"),
            true,
        ),
        ("a project's local file", None, true),
    ];
    for (what, settings, trusted) in rows {
        let dir = project(&[]);
        let home = tempfile::tempdir().unwrap();
        if let Some(settings) = settings {
            std::fs::write(dir.path().join(".muster/settings.toml"), settings).unwrap();
        }
        if *what == "a project's local file" {
            std::fs::write(
                dir.path().join(".muster/settings.local.toml"),
                "[telemetry]\nenabled = true\n",
            )
            .unwrap();
        }
        if *trusted {
            super::common::trust(dir.path()).await;
        }
        let fake = fake(vec![
            ScriptEntry::reply("main", 1, vec![tool("Bash", json!({"command": "true"}))]),
            ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
        ])
        .await;
        let mut receiver = Receiver::start(&[]).await;
        let mut run = command(
            dir.path(),
            &[
                "run",
                "-p",
                "Look around.",
                "--base-url",
                &fake.base_url(),
                "--permission-mode",
                "bypassPermissions",
            ],
        );
        run.env("HOME", home.path())
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint());
        let ran = output(run).await;
        assert_eq!(ran.status.code(), Some(0), "{what}: {}", stderr(&ran));
        assert_eq!(receiver.connections_so_far().await, 0, "{what}");
        assert!(receiver.spans.is_empty(), "{what}");
        if *what != "off" {
            assert!(
                stderr(&ran).contains("telemetry.enabled` is ignored in a project's settings"),
                "{what}: {}",
                stderr(&ran)
            );
        }
        receiver.stop().await;
    }
}

/// Each `chat` span names the provider and the model of the agent that sent the request, as
/// the model server received it: a lead on the Anthropic API with the run's model, and a
/// teammate whose team entry puts it on an OpenAI-compatible endpoint with a model of its own
/// (not the run's provider for the mode).
#[tokio::test(flavor = "multi_thread")]
async fn each_chat_span_carries_the_provider_and_model_of_its_own_agent() {
    const LOCAL_MODEL: &str = "qwen-local";
    let mut lead_first = ScriptEntry::reply(
        "lead",
        1,
        vec![tool(
            "TaskCreate",
            json!({"subject": "One", "description": "Say one."}),
        )],
    );
    lead_first.turn = Some(1);
    let mut lead_rest = ScriptEntry::reply("lead", 0, vec![Block::text("Waiting for the team.")]);
    lead_rest.turn = None;
    let mut teammate = ScriptEntry::reply("local", 0, vec![Block::text("Done.")]);
    teammate.turn = None;
    let fake = fake(vec![lead_first, lead_rest, teammate]).await;
    let team = format!(
        "name = \"mixed\"\n\n[[teammates]]\nname = \"local\"\nplan_mode_required = false\n\
         provider = \"openai\"\nmodel = \"{LOCAL_MODEL}\"\nbase_url = \"{}\"\n\
         api_key_env = \"LOCAL_LLM_KEY\"\n",
        fake.openai_base_url()
    );
    let dir = project(&[("muster.team.toml", &team)]);
    // A repository's base_url and api_key_env apply only once the user trusts it.
    super::common::trust(dir.path()).await;
    let mut receiver = Receiver::start(&[]).await;
    let mut run = command(
        dir.path(),
        &[
            "run",
            "-p",
            "Split the greeting.",
            "--base-url",
            &fake.base_url(),
            "--output",
            "json",
        ],
    );
    run.env("MUSTER_TELEMETRY", "1")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env("LOCAL_LLM_KEY", "sk-local");
    let ran = output(run).await;
    assert_eq!(ran.status.code(), Some(0), "{}", stderr(&ran));
    receiver
        .until("the run's span", |spans| {
            spans
                .iter()
                .any(|s| s["name"].as_str().unwrap().starts_with("invoke_workflow"))
        })
        .await;
    let spans = receiver.spans.clone();
    let requests = fake.requests();
    let answered: Vec<&RecordedRequest> = requests
        .iter()
        .filter(|r| r.usage.is_some() && r.purpose.is_none())
        .collect();
    let agents: std::collections::BTreeSet<&str> =
        answered.iter().filter_map(|r| r.agent.as_deref()).collect();
    assert_eq!(agents, ["lead", "local"].into(), "{requests:#?}");
    for request in answered {
        let agent = request.agent.as_deref().unwrap();
        let chat: Vec<&Value> = span_with(&spans, "chat", "gen_ai.agent.id", &json!(agent))
            .into_iter()
            .filter(|s| s["attributes"]["muster.turn"] == json!(request.turn.unwrap()))
            .collect();
        assert_eq!(chat.len(), 1, "{agent} {:?}: {spans:#?}", request.turn);
        let provider = match request.path.as_str() {
            "/v1/messages" => "anthropic",
            "/v1/chat/completions" => "openai",
            other => panic!("{other}"),
        };
        let attributes = &chat[0]["attributes"];
        assert_eq!(attributes["gen_ai.provider.name"], provider, "{agent}");
        assert_eq!(
            attributes["gen_ai.request.model"], request.body["model"],
            "{agent}"
        );
    }
    let local = span_with(&spans, "chat", "gen_ai.agent.id", &json!("local"));
    assert_eq!(local[0]["attributes"]["gen_ai.request.model"], LOCAL_MODEL);
    receiver.stop().await;
}

/// Hooks run under the span that fired them: a `PreToolUse` hook of a `Bash` call gets that
/// call's `execute_tool` span as `TRACEPARENT` (not the one the run was started under), a
/// `Stop` hook its agent's `invoke_agent` span.
#[tokio::test(flavor = "multi_thread")]
async fn hooks_get_the_traceparent_of_the_span_that_fired_them() {
    let dir = project(&[]);
    let home = tempfile::tempdir().unwrap();
    let (pre, stop) = (dir.path().join("pre.txt"), dir.path().join("stop.txt"));
    let hook = |file: &Path| {
        json!([{"matcher": "", "hooks": [{"type": "command",
            "command": format!("printf %s \"$TRACEPARENT\" > {}", file.display())}]}])
    };
    std::fs::create_dir_all(home.path().join(".claude")).unwrap();
    std::fs::write(
        home.path().join(".claude/settings.json"),
        json!({"hooks": {"PreToolUse": hook(&pre), "Stop": hook(&stop)}}).to_string(),
    )
    .unwrap();
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![tool("Bash", json!({"command": "true"}))]),
        ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
    ])
    .await;
    let mut receiver = Receiver::start(&[]).await;
    let mut run = command(
        dir.path(),
        &[
            "run",
            "-p",
            "Look around.",
            "--base-url",
            &fake.base_url(),
            "--permission-mode",
            "bypassPermissions",
        ],
    );
    run.env("HOME", home.path())
        .env("MUSTER_TELEMETRY", "1")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env("TRACEPARENT", format!("00-{PARENT_TRACE}-{PARENT_SPAN}-01"));
    let ran = output(run).await;
    assert_eq!(ran.status.code(), Some(0), "{}", stderr(&ran));
    receiver
        .until("the run's span", |spans| {
            spans
                .iter()
                .any(|s| s["name"].as_str().unwrap().starts_with("invoke_workflow"))
        })
        .await;
    let spans = receiver.spans.clone();
    let bash = span_with(&spans, "execute_tool", "gen_ai.tool.name", &json!("Bash"));
    let agent = span_with(&spans, "invoke_agent", "gen_ai.agent.id", &json!("main"));
    assert_eq!((bash.len(), agent.len()), (1, 1), "{spans:#?}");
    for (file, span) in [(&pre, bash[0]), (&stop, agent[0])] {
        assert_eq!(
            std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{e}: {}", stderr(&ran))),
            format!("00-{PARENT_TRACE}-{}-01", span["span_id"].as_str().unwrap()),
            "{}",
            file.display()
        );
    }
    receiver.stop().await;
}

/// A run killed (SIGKILL) while an attempt was under way — a model request the server held,
/// or a Bash call past its PreToolUse hook — then resumed: the resume sends that attempt
/// once, as its own span (`error.type = "interrupted"`, status error) under the agent, beside
/// the span of the request or call that the resume committed.
#[tokio::test(flavor = "multi_thread")]
async fn an_attempt_a_kill_cut_is_sent_once_on_resume_marked_interrupted() {
    // (what was cut, its span's name, the first process's failpoint)
    let rows = [
        ("a model request", "chat", None),
        ("a tool call", "execute_tool", Some("hook:PreToolUse")),
    ];
    for (what, name, failpoint) in rows {
        let dir = project(&[]);
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(home.path().join(".claude")).unwrap();
        std::fs::write(
            home.path().join(".claude/settings.json"),
            json!({"hooks": {"PreToolUse": [{"matcher": "Bash",
                "hooks": [{"type": "command", "command": "true"}]}]}})
            .to_string(),
        )
        .unwrap();
        let mut first =
            ScriptEntry::reply("main", 1, vec![tool("Bash", json!({"command": "true"}))]);
        if failpoint.is_none() {
            first = first.attempt(1);
            first.fault.hold = Some("held".into());
        }
        let mut script = vec![
            first,
            ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
        ];
        if failpoint.is_none() {
            script.push(
                ScriptEntry::reply("main", 1, vec![tool("Bash", json!({"command": "true"}))])
                    .attempt(2),
            );
        }
        let fake = fake(script).await;
        let mut receiver = Receiver::start(&[]).await;
        let telemetry = [
            ("HOME", home.path().display().to_string()),
            ("MUSTER_TELEMETRY", "1".to_owned()),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint()),
        ];
        let mut started = command(
            dir.path(),
            &[
                "run",
                "-p",
                "Look around.",
                "--base-url",
                &fake.base_url(),
                "--permission-mode",
                "bypassPermissions",
                "--output",
                "stream-json",
            ],
        );
        started.envs(telemetry.iter().map(|(k, v)| (*k, v.as_str())));
        if let Some(point) = failpoint {
            started.env("MUSTER_FAILPOINT", point);
        }
        let mut run = super::common::Running::spawn(started);
        let first_line = run.until("a first event", |_| true).await;
        let run_id = first_line["run_id"].as_str().unwrap().to_owned();
        if failpoint.is_none() {
            tokio::time::timeout(GUARD, fake.gate_reached("held", 1))
                .await
                .expect("guard timeout: the request was never held");
            run.child.start_kill().unwrap();
        }
        let status = tokio::time::timeout(GUARD, run.child.wait())
            .await
            .expect("guard timeout")
            .unwrap();
        assert_eq!(status.code(), None, "{what}: killed by a signal");
        let mut resumed = command(dir.path(), &["resume", &run_id, "--output", "json"]);
        resumed.envs(telemetry.iter().map(|(k, v)| (*k, v.as_str())));
        let ran = output(resumed).await;
        assert_eq!(ran.status.code(), Some(0), "{what}: {}", stderr(&ran));
        fake.open_gate("held");
        receiver
            .until("the run's span", |spans| {
                spans
                    .iter()
                    .any(|s| s["name"].as_str().unwrap().starts_with("invoke_workflow"))
            })
            .await;
        let spans = receiver.spans.clone();
        let ids = by_id(&spans);
        let cut: Vec<&Value> = spans
            .iter()
            .filter(|s| s["attributes"]["error.type"] == "interrupted")
            .collect();
        assert_eq!(cut.len(), 1, "{what}: {spans:#?}");
        let cut = cut[0];
        assert!(
            cut["name"].as_str().unwrap().starts_with(name),
            "{what}: {cut:#}"
        );
        assert_eq!(cut["status"], 2, "{what}: status error: {cut:#}");
        let agent = span_with(&spans, "invoke_agent", "gen_ai.agent.id", &json!("main"));
        assert_eq!(cut["parent_span_id"], agent[0]["span_id"], "{what}");
        // The request or call the resume committed has a span of its own, once.
        let (key, value) = match name {
            "chat" => ("muster.turn", json!(1)),
            _ => (
                "gen_ai.tool.call.id",
                cut["attributes"]["gen_ai.tool.call.id"].clone(),
            ),
        };
        assert_eq!(cut["attributes"][key], value, "{what}: {cut:#}");
        let committed: Vec<&Value> = ids
            .values()
            .filter(|s| {
                s["name"].as_str().unwrap().starts_with(name)
                    && s["attributes"][key] == value
                    && s["span_id"] != cut["span_id"]
            })
            .collect();
        assert_eq!(committed.len(), 1, "{what}: {spans:#?}");
        assert!(
            committed[0]["attributes"].get("error.type").is_none(),
            "{what}"
        );
        receiver.stop().await;
    }
}

/// A subagent's `invoke_agent` span hangs under the `execute_tool` span of the `Agent` call
/// that started it; its own model requests under its agent span.
#[tokio::test(flavor = "multi_thread")]
async fn a_subagents_span_hangs_under_the_agent_call_that_started_it() {
    let dir = project(&[]);
    let fake = fake(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![tool(
                "Agent",
                json!({"description": "look", "prompt": "Look around.", "subagent_type": "general"}),
            )],
        ),
        ScriptEntry::reply("main.sub-1", 1, vec![Block::text("Nothing here.")]),
        ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
    ])
    .await;
    let mut receiver = Receiver::start(&[]).await;
    let mut run = command(
        dir.path(),
        &[
            "run",
            "-p",
            "Look around.",
            "--base-url",
            &fake.base_url(),
            "--permission-mode",
            "bypassPermissions",
        ],
    );
    run.env("MUSTER_TELEMETRY", "1")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint());
    let ran = output(run).await;
    assert_eq!(ran.status.code(), Some(0), "{}", stderr(&ran));
    receiver
        .until("the run's span", |spans| {
            spans
                .iter()
                .any(|s| s["name"].as_str().unwrap().starts_with("invoke_workflow"))
        })
        .await;
    let spans = receiver.spans.clone();
    let call = span_with(&spans, "execute_tool", "gen_ai.tool.name", &json!("Agent"));
    let sub = span_with(
        &spans,
        "invoke_agent",
        "gen_ai.agent.id",
        &json!("main.sub-1"),
    );
    let main = span_with(&spans, "invoke_agent", "gen_ai.agent.id", &json!("main"));
    assert_eq!((call.len(), sub.len(), main.len()), (1, 1, 1), "{spans:#?}");
    assert_eq!(call[0]["parent_span_id"], main[0]["span_id"]);
    assert_eq!(sub[0]["parent_span_id"], call[0]["span_id"], "{spans:#?}");
    assert_eq!(sub[0]["attributes"]["muster.agent.kind"], "subagent");
    let chat = span_with(&spans, "chat", "gen_ai.agent.id", &json!("main.sub-1"));
    assert_eq!(chat.len(), 1, "{spans:#?}");
    assert_eq!(chat[0]["parent_span_id"], sub[0]["span_id"]);
    receiver.stop().await;
}

/// A run killed (SIGKILL) right after a model response's commit, before its event reached the
/// run log: the resume sends that request's `chat` span once, from the store (the usage the
/// fake server logged as returned), and no span marks it interrupted — it was not cut.
#[tokio::test(flavor = "multi_thread")]
async fn a_response_committed_but_never_logged_before_a_kill_is_sent_once_by_the_resume() {
    let dir = project(&[]);
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![tool("Bash", json!({"command": "true"}))]),
        ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
    ])
    .await;
    let mut receiver = Receiver::start(&[]).await;
    let telemetry = [
        ("MUSTER_TELEMETRY", "1".to_owned()),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint()),
    ];
    let mut started = command(
        dir.path(),
        &[
            "run",
            "-p",
            "Look around.",
            "--base-url",
            &fake.base_url(),
            "--permission-mode",
            "bypassPermissions",
            "--output",
            "stream-json",
        ],
    );
    started
        .envs(telemetry.iter().map(|(k, v)| (*k, v.as_str())))
        .env("MUSTER_FAILPOINT", "model_turn@1");
    let mut run = super::common::Running::spawn(started);
    let first_line = run.until("a first event", |_| true).await;
    let run_id = first_line["run_id"].as_str().unwrap().to_owned();
    assert_eq!(
        run.finish().await,
        None,
        "killed at the failpoint: {:#?}",
        run.events
    );
    assert!(
        !run.events.iter().any(|e| e["type"] == "model_turn"),
        "{:#?}",
        run.events
    );
    let mut resumed = command(dir.path(), &["resume", &run_id, "--output", "json"]);
    resumed.envs(telemetry.iter().map(|(k, v)| (*k, v.as_str())));
    let ran = output(resumed).await;
    assert_eq!(ran.status.code(), Some(0), "{}", stderr(&ran));
    receiver
        .until("the run's span", |spans| {
            spans
                .iter()
                .any(|s| s["name"].as_str().unwrap().starts_with("invoke_workflow"))
        })
        .await;
    let spans = receiver.spans.clone();
    by_id(&spans);
    let requests = fake.requests();
    assert_eq!(
        requests.len(),
        2,
        "the committed response is not asked again"
    );
    for request in &requests {
        let chat = span_with(&spans, "chat", "muster.turn", &json!(request.turn.unwrap()));
        assert_eq!(chat.len(), 1, "turn {:?}: {spans:#?}", request.turn);
        assert_usage(chat[0], request);
    }
    assert!(
        !spans
            .iter()
            .any(|s| s["attributes"]["error.type"] == "interrupted"),
        "{spans:#?}"
    );
    receiver.stop().await;
}
