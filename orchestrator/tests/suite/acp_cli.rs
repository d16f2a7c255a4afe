//! `muster acp` through the binary, speaking JSON-RPC on its stdin/stdout against
//! `muster-fake-llm`: a prompt's text and tool calls as `session/update`s, a second prompt
//! continuing the run, `session/cancel` interrupting the turn (committed, resumable), a
//! `session/load` after SIGKILL, a client that disconnects mid-turn, and the bad-input table.
//! Every stdout line must parse as a JSON-RPC 2.0 message.

use std::path::Path;
use std::process::Stdio;

use muster_fake_llm::{Block, Fault, ScriptEntry};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::common::{GUARD, fake, open_store, project, tool, trust};

/// What the client does when a request of muster's arrives, before answering it.
type OnRequest = Box<dyn FnMut(&Value) + Send>;

/// A `muster acp` process and what it has said so far.
struct Acp {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    next_id: u64,
    /// Every notification received, in order.
    notifications: Vec<Value>,
    /// Requests muster sent to the client, in order.
    requests: Vec<Value>,
    /// The results the client gives muster's requests, in order.
    replies: std::collections::VecDeque<Value>,
    /// Run when a request of muster's arrives, before the client answers it.
    on_request: Option<OnRequest>,
}

impl Acp {
    fn spawn(dir: &Path, base_url: &str) -> Acp {
        let mut command = super::common::command(dir, &["acp"]);
        command
            .env("ANTHROPIC_BASE_URL", base_url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = command.spawn().unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        Acp {
            child,
            stdin,
            stdout,
            next_id: 0,
            notifications: Vec::new(),
            requests: Vec::new(),
            replies: std::collections::VecDeque::new(),
            on_request: None,
        }
    }

    async fn write(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.write_all(b"\n").await.unwrap();
        stdin.flush().await.unwrap();
    }

    /// The next message on stdout; every line must be JSON-RPC 2.0.
    async fn read(&mut self) -> Option<Value> {
        let line = tokio::time::timeout(GUARD, self.stdout.next_line())
            .await
            .expect("guard timeout")
            .unwrap()?;
        let message: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout carried a line that is not JSON ({e}): {line}"));
        assert_eq!(message["jsonrpc"], "2.0", "not JSON-RPC: {line}");
        Some(message)
    }

    /// Sends a request without waiting: its id.
    async fn send(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.write(&line.to_string()).await;
        id
    }

    /// Reads until the answer to request `id`, keeping what comes before it.
    async fn answer(&mut self, id: u64) -> Value {
        loop {
            let message = self
                .read()
                .await
                .unwrap_or_else(|| panic!("muster closed stdout before answering {id}"));
            if message.get("method").is_some() {
                if message.get("id").is_some() {
                    if let Some(on_request) = &mut self.on_request {
                        on_request(&message);
                    }
                    let result = self
                        .replies
                        .pop_front()
                        .unwrap_or_else(|| panic!("no reply scripted for {message}"));
                    let reply = json!({"jsonrpc": "2.0", "id": message["id"], "result": result});
                    self.write(&reply.to_string()).await;
                    self.requests.push(message);
                } else {
                    self.notifications.push(message);
                }
            } else if message["id"] == id {
                return message;
            }
        }
    }

    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params).await;
        self.answer(id).await
    }

    async fn initialize(&mut self) {
        self.initialize_with(json!({})).await;
    }

    /// `initialize` with the client's `capabilities`.
    async fn initialize_with(&mut self, capabilities: Value) {
        let answer = self
            .request(
                "initialize",
                json!({"protocolVersion": 1, "clientCapabilities": capabilities}),
            )
            .await;
        assert_eq!(answer["result"]["protocolVersion"], 1, "{answer}");
        assert_eq!(
            answer["result"]["agentCapabilities"]["loadSession"], true,
            "{answer}"
        );
    }

    async fn new_session(&mut self, dir: &Path) -> String {
        let answer = self
            .request("session/new", json!({"cwd": dir, "mcpServers": []}))
            .await;
        answer["result"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {answer}"))
            .to_owned()
    }

    async fn prompt(&mut self, session: &str, text: &str) -> Value {
        self.request(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]}),
        )
        .await
    }

    /// The `update`s of `session` received so far.
    fn updates(&self, session: &str) -> Vec<Value> {
        self.notifications
            .iter()
            .filter(|n| n["method"] == "session/update" && n["params"]["sessionId"] == session)
            .map(|n| n["params"]["update"].clone())
            .collect()
    }

    /// The text of the agent's message chunks.
    fn text(&self, session: &str) -> String {
        self.updates(session)
            .iter()
            .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
            .filter_map(|u| u["content"]["text"].as_str())
            .collect()
    }

    /// Closes stdin and waits for the process to end: its exit code.
    async fn close(&mut self) -> Option<i32> {
        drop(self.stdin.take());
        while self.read().await.is_some() {}
        tokio::time::timeout(GUARD, self.child.wait())
            .await
            .expect("muster acp did not end after its stdin closed")
            .unwrap()
            .code()
    }
}

async fn run_status(dir: &Path, run: &str) -> String {
    let store = open_store(dir);
    store
        .run(run)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no run {run}"))
        .status
        .as_str()
        .to_owned()
}

/// The ids of a `modes` answer's `availableModes`.
fn offered(modes: &Value) -> Vec<String> {
    modes["availableModes"]
        .as_array()
        .unwrap_or_else(|| panic!("no modes offered: {modes}"))
        .iter()
        .filter_map(|m| m["id"].as_str().map(str::to_owned))
        .collect()
}

/// The main agent answers, then writes out.txt, then says `last`.
fn an_answer_then_a_write(last: &str) -> Vec<ScriptEntry> {
    vec![
        ScriptEntry::reply("main", 1, vec![Block::text("First answer.")]),
        ScriptEntry::reply(
            "main",
            2,
            vec![tool(
                "Write",
                json!({"file_path": "out.txt", "content": "out\n"}),
            )],
        ),
        ScriptEntry::reply("main", 3, vec![Block::text(last)]),
    ]
}

fn held(entry: ScriptEntry, gate: &str) -> ScriptEntry {
    entry.fault(Fault {
        hold: Some(gate.into()),
        ..Fault::default()
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_prompt_streams_its_text_and_tool_calls_and_the_next_prompt_continues_the_run() {
    let dir = project(&[(
        ".muster/settings.toml",
        "permission_mode = \"acceptEdits\"\n",
    )]);
    trust(dir.path()).await;
    let fake = fake(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![
                Block::text("Writing it."),
                tool(
                    "Write",
                    json!({"file_path": "out.txt", "content": "new text\n"}),
                ),
            ],
        ),
        ScriptEntry::reply("main", 2, vec![Block::text("All done.")]),
        ScriptEntry::reply("main", 3, vec![Block::text("Second answer.")]),
    ])
    .await;
    let mut acp = Acp::spawn(dir.path(), &fake.base_url());
    acp.initialize().await;
    let session = acp.new_session(dir.path()).await;
    let answer = acp.prompt(&session, "Write out.txt.").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.txt")).unwrap(),
        "new text\n"
    );
    let text = acp.text(&session);
    assert!(
        text.contains("Writing it.") && text.contains("All done."),
        "{text}"
    );
    let updates = acp.updates(&session);
    let started = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call")
        .unwrap_or_else(|| panic!("no tool_call: {updates:#?}"));
    assert_eq!(started["kind"], "edit");
    assert_eq!(started["title"], "Write out.txt");
    let out = dir.path().join("out.txt");
    assert_eq!(started["locations"][0]["path"], out.to_str().unwrap());
    let id = &started["toolCallId"];
    let finished = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call_update" && &u["toolCallId"] == id)
        .unwrap_or_else(|| panic!("no tool_call_update: {updates:#?}"));
    assert_eq!(finished["status"], "completed", "{finished}");
    assert_eq!(finished["content"][0]["type"], "diff", "{finished}");
    assert_eq!(finished["content"][0]["newText"], "new text\n");
    assert_eq!(finished["content"][0]["path"], out.to_str().unwrap());
    // The session is the run: its id names it in the store.
    assert_eq!(run_status(dir.path(), &session).await, "completed");

    // A second prompt is the run's continue: its context kept.
    let answer = acp.prompt(&session, "And now?").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert!(acp.text(&session).contains("Second answer."));
    let last = fake.requests().last().unwrap().body.to_string();
    assert!(
        last.contains("Write out.txt.") && last.contains("And now?"),
        "{last}"
    );
    assert_eq!(acp.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_interrupts_the_turn_committed_and_the_next_prompt_goes_on() {
    let dir = project(&[]);
    let fake = fake(vec![
        held(
            ScriptEntry::reply("main", 1, vec![Block::text("Never shown.")]).attempt(1),
            "held",
        ),
        ScriptEntry {
            turn: None,
            ..ScriptEntry::reply("main", 0, vec![Block::text("After the cancel.")])
        },
    ])
    .await;
    let mut acp = Acp::spawn(dir.path(), &fake.base_url());
    acp.initialize().await;
    let session = acp.new_session(dir.path()).await;
    let prompt = acp
        .send(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "Wait."}]}),
        )
        .await;
    tokio::time::timeout(GUARD, fake.gate_reached("held", 1))
        .await
        .expect("the model call never came");
    acp.write(
        &json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}})
            .to_string(),
    )
    .await;
    let answer = acp.answer(prompt).await;
    assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
    fake.open_gate("held");
    assert_eq!(run_status(dir.path(), &session).await, "interrupted");
    let store = open_store(dir.path());
    let records = super::common::transcript(store.as_ref(), &session, "main").await;
    assert!(
        records
            .iter()
            .any(|r| r.to_string().contains("turn_interrupted")),
        "{records:#?}"
    );
    let answer = acp.prompt(&session, "Go on.").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert!(acp.text(&session).contains("After the cancel."));
    assert!(!acp.text(&session).contains("Never shown."));
    assert_eq!(acp.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_killed_mid_turn_loads_with_its_history_and_finishes() {
    let dir = project(&[]);
    let fake = fake(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![
                Block::text("Looking."),
                tool("Read", json!({"file_path": "README.md"})),
            ],
        ),
        held(
            ScriptEntry::reply("main", 2, vec![Block::text("Finished the first.")]),
            "held",
        ),
        ScriptEntry::reply("main", 3, vec![Block::text("Finished the second.")]),
    ])
    .await;
    let mut first = Acp::spawn(dir.path(), &fake.base_url());
    first.initialize().await;
    let session = first.new_session(dir.path()).await;
    first
        .send(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "Look."}]}),
        )
        .await;
    tokio::time::timeout(GUARD, fake.gate_reached("held", 1))
        .await
        .expect("the second model call never came");
    first.child.start_kill().unwrap();
    first.child.wait().await.unwrap();
    fake.open_gate("held");

    let mut second = Acp::spawn(dir.path(), &fake.base_url());
    second.initialize().await;
    let loaded = second
        .request(
            "session/load",
            json!({"sessionId": session, "cwd": dir.path(), "mcpServers": []}),
        )
        .await;
    assert!(loaded.get("result").is_some(), "{loaded}");
    // Its modes: the main agent's, and nothing above `default` (the project is not trusted).
    assert_eq!(
        loaded["result"]["modes"]["currentModeId"], "default",
        "{loaded}"
    );
    assert_eq!(
        offered(&loaded["result"]["modes"]),
        ["plan", "dontAsk", "default"],
        "{loaded}"
    );
    let replayed = second.updates(&session);
    assert_eq!(replayed[0]["sessionUpdate"], "user_message_chunk");
    assert_eq!(replayed[0]["content"]["text"], "Look.");
    assert!(second.text(&session).contains("Looking."), "{replayed:#?}");
    assert!(
        replayed
            .iter()
            .any(|u| u["sessionUpdate"] == "tool_call" && u["status"] == "completed"),
        "{replayed:#?}"
    );
    let answer = second.prompt(&session, "And then?").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let text = second.text(&session);
    assert!(
        text.contains("Finished the first.") && text.contains("Finished the second."),
        "{text}"
    );
    assert_eq!(run_status(dir.path(), &session).await, "completed");
    assert_eq!(second.close().await, Some(0));
}

/// An editor that goes away mid-turn (its model call held at the gate): `muster acp` ends, no
/// process of it is left, the run is committed `interrupted`, and another editor loads it and
/// carries it on to the end.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_gone_mid_turn_leaves_the_run_interrupted_and_no_process() {
    let dir = project(&[]);
    let fake = fake(vec![
        held(
            ScriptEntry::reply("main", 1, vec![Block::text("Cut off.")]),
            "held",
        ),
        ScriptEntry::reply("main", 2, vec![Block::text("Back again.")]),
    ])
    .await;
    let mut acp = Acp::spawn(dir.path(), &fake.base_url());
    acp.initialize().await;
    let session = acp.new_session(dir.path()).await;
    acp.send(
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": "Wait."}]}),
    )
    .await;
    tokio::time::timeout(GUARD, fake.gate_reached("held", 1))
        .await
        .expect("the model call never came");
    assert_eq!(acp.close().await, Some(0));
    let left = super::common::processes_in(dir.path());
    assert!(left.is_empty(), "left running in the project: {left:?}");
    fake.open_gate("held");
    assert_eq!(run_status(dir.path(), &session).await, "interrupted");
    let mut again = Acp::spawn(dir.path(), &fake.base_url());
    again.initialize().await;
    let loaded = again
        .request(
            "session/load",
            json!({"sessionId": session, "cwd": dir.path(), "mcpServers": []}),
        )
        .await;
    assert!(loaded.get("result").is_some(), "{loaded}");
    let answer = again.prompt(&session, "Go on.").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_eq!(run_status(dir.path(), &session).await, "completed");
    assert_eq!(again.close().await, Some(0));
}

/// Each bad input is a JSON-RPC error that says what to do; a run stored before it comes through
/// unchanged (its record and transcript), and the process takes a good session after.
#[tokio::test(flavor = "multi_thread")]
async fn bad_input_gets_an_error_a_person_can_act_on_and_the_process_stays_usable() {
    let dir = project(&[]);
    let fake = fake(vec![ScriptEntry::reply(
        "main",
        1,
        vec![Block::text("Still here.")],
    )])
    .await;
    let mut acp = Acp::spawn(dir.path(), &fake.base_url());
    acp.write("{not json").await;
    let parse = acp.read().await.unwrap();
    assert_eq!(parse["error"]["code"], -32700, "{parse}");
    acp.initialize().await;
    // A run stored before the bad input, which must come through it as it was.
    let before = acp.new_session(dir.path()).await;
    let answer = acp.prompt(&before, "Hello?").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let store = open_store(dir.path());
    let stored = (
        store.runs().await.unwrap(),
        store.stream_records(&before, "transcript").await.unwrap(),
    );
    assert!(!stored.1.is_empty(), "the run has a transcript");
    let missing = dir.path().join("no-such-dir");
    let rows: Vec<(&str, &str, Value, i64, &str)> = vec![
        ("unknown method", "session/fly", json!({}), -32601, ""),
        (
            "prompt before session/new",
            "session/prompt",
            json!({"sessionId": "r0000000000", "prompt": [{"type": "text", "text": "hi"}]}),
            -32602,
            "call session/new",
        ),
        (
            "relative cwd",
            "session/new",
            json!({"cwd": "relative/dir", "mcpServers": []}),
            -32602,
            "not an absolute path",
        ),
        (
            "missing cwd",
            "session/new",
            json!({"cwd": missing, "mcpServers": []}),
            -32602,
            "not a directory",
        ),
        (
            "load of a run the store has not",
            "session/load",
            json!({"sessionId": "rnosuchrun0", "cwd": dir.path(), "mcpServers": []}),
            -32602,
            "no run rnosuchrun0",
        ),
        (
            "a prompt with no text",
            "session/prompt",
            json!({"sessionId": before, "prompt": []}),
            -32602,
            "no text",
        ),
        (
            "a mode that is no mode",
            "session/set_mode",
            json!({"sessionId": before, "modeId": "sideways"}),
            -32602,
            "sideways",
        ),
        (
            "a prompt to a teammate's thread",
            "session/prompt",
            json!({"sessionId": format!("{before}:alice"),
                   "prompt": [{"type": "text", "text": "hi"}]}),
            -32602,
            "alice's thread",
        ),
    ];
    for (what, method, params, code, says) in rows {
        let answer = acp.request(method, params).await;
        assert_eq!(answer["error"]["code"], code, "{what}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{what}: {answer}");
    }
    // Nothing stored was lost or changed.
    assert_eq!(
        (
            store.runs().await.unwrap(),
            store.stream_records(&before, "transcript").await.unwrap(),
        ),
        stored
    );
    // Usable after all of it.
    let session = acp.new_session(dir.path()).await;
    let answer = acp.prompt(&session, "Hello?").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert!(acp.text(&session).contains("Still here."));
    assert_eq!(acp.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_live_in_another_process_is_not_loaded_twice() {
    let dir = project(&[]);
    let fake = fake(vec![held(
        ScriptEntry::reply("main", 1, vec![Block::text("Done.")]),
        "held",
    )])
    .await;
    let mut first = Acp::spawn(dir.path(), &fake.base_url());
    first.initialize().await;
    let session = first.new_session(dir.path()).await;
    let prompt = first
        .send(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "Wait."}]}),
        )
        .await;
    tokio::time::timeout(GUARD, fake.gate_reached("held", 1))
        .await
        .expect("the model call never came");
    let mut second = Acp::spawn(dir.path(), &fake.base_url());
    second.initialize().await;
    let loaded = second
        .request(
            "session/load",
            json!({"sessionId": session, "cwd": dir.path(), "mcpServers": []}),
        )
        .await;
    let message = loaded["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("live in another process"), "{loaded}");
    assert_eq!(second.close().await, Some(0));
    fake.open_gate("held");
    let answer = first.answer(prompt).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_eq!(first.close().await, Some(0));
}

const PLAN_ONE: &str = "## Goal\nOut.\n## Steps\n1. Write out.txt\n## Files\nout.txt\n";
const PLAN_TWO: &str =
    "## Goal\nOut.\n## Steps\n1. Write out.txt\n## Files\nout.txt\n## Tests\nRead it back.\n";

#[tokio::test(flavor = "multi_thread")]
async fn a_plan_is_a_permission_request_rejected_with_feedback_then_approved_into_a_mode() {
    let dir = project(&[(".muster/settings.toml", "permission_mode = \"plan\"\n")]);
    trust(dir.path()).await;
    let fake = fake(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![tool("ExitPlanMode", json!({"plan": PLAN_ONE}))],
        ),
        ScriptEntry::reply(
            "main",
            2,
            vec![tool("ExitPlanMode", json!({"plan": PLAN_TWO}))],
        ),
        ScriptEntry::reply(
            "main",
            3,
            vec![tool(
                "Write",
                json!({"file_path": "out.txt", "content": "out\n"}),
            )],
        ),
        ScriptEntry::reply("main", 4, vec![Block::text("Done as planned.")]),
    ])
    .await;
    let mut acp = Acp::spawn(dir.path(), &fake.base_url());
    acp.replies.push_back(json!({
        "outcome": {"outcome": "selected", "optionId": "reject"},
        "_meta": {"muster/feedback": "Say how it is tested."}
    }));
    acp.replies.push_back(json!({
        "outcome": {"outcome": "selected", "optionId": "approve:acceptEdits"}
    }));
    acp.initialize().await;
    let session = acp.new_session(dir.path()).await;
    let answer = acp.prompt(&session, "Plan, then write out.txt.").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_eq!(acp.requests.len(), 2, "{:#?}", acp.updates(&session));
    for (request, plan) in acp.requests.iter().zip([PLAN_ONE, PLAN_TWO]) {
        assert_eq!(request["method"], "session/request_permission");
        let params = &request["params"];
        assert_eq!(params["sessionId"], session.as_str());
        assert_eq!(params["toolCall"]["kind"], "switch_mode");
        assert_eq!(params["toolCall"]["content"][0]["content"]["text"], plan);
        let options: Vec<&str> = params["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["optionId"].as_str().unwrap())
            .collect();
        assert_eq!(
            options,
            ["approve:acceptEdits", "approve:default", "reject"]
        );
    }
    // The rejection's feedback reached the model; the approval's mode let the Write run.
    let second = fake.requests()[1].body.to_string();
    assert!(second.contains("Say how it is tested."), "{second}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.txt")).unwrap(),
        "out\n"
    );
    assert!(acp.text(&session).contains("Done as planned."));
    // One decision per request, in the store.
    let db = rusqlite::Connection::open(dir.path().join(".muster/muster.db")).unwrap();
    let mut counts = db
        .prepare(
            "SELECT request_id, COUNT(*) FROM messages WHERE run_id = ?1 \
             AND kind = 'plan_approval_response' GROUP BY request_id ORDER BY request_id",
        )
        .unwrap();
    let counts: Vec<(String, i64)> = counts
        .query_map([&session], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(counts.len(), 2, "{counts:?}");
    assert!(counts.iter().all(|(_, n)| *n == 1), "{counts:?}");
    assert_eq!(acp.close().await, Some(0));
}

/// The editor settings the README shows: each names `muster acp`, and that command, started as
/// the editor would start it, answers `initialize`.
#[tokio::test(flavor = "multi_thread")]
async fn the_readmes_editor_snippets_start_muster_acp() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let section = readme
        .split("## Use it from your editor")
        .nth(1)
        .expect("the README has no \"Use it from your editor\"")
        .split("\n## ")
        .next()
        .unwrap();
    let blocks: Vec<(&str, &str)> = section
        .split("```")
        .skip(1)
        .step_by(2)
        .map(|block| block.split_once('\n').unwrap())
        .collect();
    let json: Vec<Value> = blocks
        .iter()
        .filter(|(language, _)| *language == "json")
        .map(|(_, text)| serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}")))
        .collect();
    assert_eq!(json.len(), 2, "Zed and JetBrains: {blocks:?}");
    for settings in &json {
        let server = &settings["agent_servers"]["muster"];
        assert_eq!(server["command"], "muster", "{settings}");
        assert_eq!(server["args"], json!(["acp"]), "{settings}");
    }
    assert_eq!(
        json[0]["agent_servers"]["muster"]["env"],
        json!({}),
        "Zed's has env"
    );
    let lua = blocks
        .iter()
        .find(|(language, _)| *language == "lua")
        .expect("no CodeCompanion snippet")
        .1;
    assert!(lua.contains(r#"{ "muster", "acp" }"#), "{lua}");

    let dir = project(&[]);
    let args: Vec<String> = json[0]["agent_servers"]["muster"]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|arg| arg.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(args, ["acp"]);
    let mut acp = Acp::spawn(dir.path(), "http://127.0.0.1:9");
    acp.initialize().await;
    assert_eq!(acp.close().await, Some(0));
}

/// An untrusted project: one message chunk says what trust skipped and names `muster trust`.
/// Its Bash command writes to stdout and stderr: the editor sees the output in the call's
/// update, and every line on muster's stdout is still JSON-RPC (checked by every read).
#[tokio::test(flavor = "multi_thread")]
async fn untrusted_settings_are_named_once_and_a_commands_output_never_reaches_stdout() {
    let dir = project(&[(
        ".muster/settings.toml",
        "permission_mode = \"bypassPermissions\"\n",
    )]);
    let fake = fake(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![tool(
                "Bash",
                json!({"command": "echo to-stdout; echo to-stderr >&2"}),
            )],
        ),
        ScriptEntry::reply("main", 2, vec![Block::text("Echoed.")]),
    ])
    .await;
    let mut acp = Acp::spawn(dir.path(), &fake.base_url());
    acp.initialize().await;
    let session = acp.new_session(dir.path()).await;
    let answer = acp.prompt(&session, "Echo.").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let updates = acp.updates(&session);
    let notices: Vec<&Value> = updates
        .iter()
        .filter(|u| {
            u["sessionUpdate"] == "agent_message_chunk"
                && u["content"]["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("muster trust"))
        })
        .collect();
    assert_eq!(notices.len(), 1, "{updates:#?}");
    let echoed = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call_update")
        .unwrap_or_else(|| panic!("{updates:#?}"));
    assert_eq!(echoed["status"], "completed", "{echoed}");
    assert!(echoed.to_string().contains("to-stdout"), "{echoed}");
    assert_eq!(acp.close().await, Some(0));
}

/// `muster approve` decides the plan while the editor's request is open: the editor's later
/// rejection changes nothing, the editor is told, and the store holds the one decision.
#[tokio::test(flavor = "multi_thread")]
async fn a_plan_approved_with_muster_approve_first_leaves_the_editors_selection_without_effect() {
    let dir = project(&[(".muster/settings.toml", "permission_mode = \"plan\"\n")]);
    trust(dir.path()).await;
    let fake = fake(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![tool("ExitPlanMode", json!({"plan": PLAN_ONE}))],
        ),
        ScriptEntry::reply(
            "main",
            2,
            vec![tool(
                "Write",
                json!({"file_path": "out.txt", "content": "out\n"}),
            )],
        ),
        ScriptEntry::reply("main", 3, vec![Block::text("Done as approved.")]),
    ])
    .await;
    let mut acp = Acp::spawn(dir.path(), &fake.base_url());
    let root = dir.path().to_path_buf();
    acp.on_request = Some(Box::new(move |_request| {
        let db = rusqlite::Connection::open(root.join(".muster/muster.db")).unwrap();
        let request_id: String = db
            .query_row(
                "SELECT request_id FROM messages WHERE kind = 'plan_approval_request'",
                [],
                |row| row.get(0),
            )
            .unwrap();
        let approved = super::common::cleared_command(&root, &root)
            .env("XDG_CONFIG_HOME", super::common::config_home())
            .args(["approve", &request_id, "--mode", "acceptEdits"])
            .output()
            .unwrap();
        assert!(
            approved.status.success(),
            "{}",
            String::from_utf8_lossy(&approved.stderr)
        );
    }));
    acp.replies.push_back(json!({
        "outcome": {"outcome": "selected", "optionId": "reject"},
        "_meta": {"muster/feedback": "Too late."}
    }));
    acp.initialize().await;
    let session = acp.new_session(dir.path()).await;
    let answer = acp.prompt(&session, "Plan, then write out.txt.").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let text = acp.text(&session);
    assert!(
        text.contains("was decided first by human elsewhere") && text.contains("Done as approved."),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.txt")).unwrap(),
        "out\n"
    );
    let db = rusqlite::Connection::open(dir.path().join(".muster/muster.db")).unwrap();
    let responses: Vec<String> = db
        .prepare("SELECT body FROM messages WHERE run_id = ?1 AND kind = 'plan_approval_response'")
        .unwrap()
        .query_map([&session], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(responses.len(), 1, "{responses:?}");
    assert!(!responses[0].contains("Too late."), "{responses:?}");
    assert_eq!(acp.close().await, Some(0));
}

/// A session on a team project is a team run (issue 30's `continue` for ACP): its second
/// prompt is the lead's continuation — the teammate shut down at the first run's end is kept
/// and woken by the lead's mail, and its report reaches the lead within the prompt's turn.
#[tokio::test(flavor = "multi_thread")]
async fn a_team_sessions_second_prompt_continues_the_team_with_its_teammate() {
    let dir = project(&[(
        "muster.team.toml",
        "name = \"greeters\"\nisolation = \"shared\"\n\n[[teammates]]\nname = \"alice\"\n",
    )]);
    let when = |agent: &str, mail_type: &str, from: &str, content: Value| -> ScriptEntry {
        serde_json::from_value(json!({"agent": agent,
            "when": {"mail_type": mail_type, "from": from},
            "reply": {"content": content}}))
        .unwrap()
    };
    let fake = fake(vec![
        ScriptEntry::reply("lead", 1, vec![Block::text("First answer.")]),
        ScriptEntry::reply(
            "lead",
            2,
            vec![tool(
                "SendMessage",
                json!({"to": "alice", "message": "Say hi."}),
            )],
        ),
        serde_json::from_value(json!({"agent": "lead",
            "reply": {"content": [{"type": "text", "text": "Waiting."}]}}))
        .unwrap(),
        when(
            "lead",
            "idle_notification",
            "alice",
            json!([{"type": "text", "text": "Alice said hi."}]),
        ),
        when(
            "alice",
            "text",
            "lead",
            json!([{"type": "text", "text": "Hi from alice."}]),
        ),
    ])
    .await;
    let mut acp = Acp::spawn(dir.path(), &fake.base_url());
    acp.initialize().await;
    let session = acp.new_session(dir.path()).await;
    let answer = acp.prompt(&session, "Greet.").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_eq!(run_status(dir.path(), &session).await, "completed");

    let answer = acp.prompt(&session, "Ask alice to say hi.").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let requests = fake.requests();
    let asked: Vec<_> = requests.iter().map(|r| (r.agent.clone(), r.turn)).collect();
    assert!(
        acp.text(&session).contains("Alice said hi."),
        "{:#?}\n{asked:?}",
        acp.updates(&session)
    );
    assert_eq!(run_status(dir.path(), &session).await, "completed");
    assert!(
        requests.iter().any(|r| r.agent.as_deref() == Some("alice")),
        "alice was never woken"
    );
    let continued = requests
        .iter()
        .find(|r| r.agent.as_deref() == Some("lead") && r.turn == Some(2))
        .unwrap()
        .body["messages"]
        .to_string();
    assert!(
        continued.contains("Greet.") && continued.contains("Ask alice to say hi."),
        "{continued}"
    );
    assert_eq!(acp.close().await, Some(0));
}

/// `session/set_mode`: the session offers the modes the project allows (bypass disabled by its
/// settings is not offered, and refused when asked for), a mode that is no mode is an error,
/// and a chosen mode is the main agent's from the next prompt on: an edit the first prompt's
/// `default` mode would have asked about runs without a permission request.
#[tokio::test(flavor = "multi_thread")]
async fn set_mode_changes_the_main_agents_mode_from_the_next_prompt_within_the_settings() {
    let dir = project(&[(
        ".muster/settings.toml",
        "[permissions]\ndisable_bypass_permissions_mode = \"disable\"\n",
    )]);
    trust(dir.path()).await;
    let fake = fake(an_answer_then_a_write("Written.")).await;
    let mut acp = Acp::spawn(dir.path(), &fake.base_url());
    acp.initialize().await;
    let answer = acp
        .request("session/new", json!({"cwd": dir.path(), "mcpServers": []}))
        .await;
    let session = answer["result"]["sessionId"].as_str().unwrap().to_owned();
    let modes = &answer["result"]["modes"];
    assert_eq!(modes["currentModeId"], "default", "{answer}");
    let offered = offered(modes);
    assert!(
        offered.iter().any(|m| m == "acceptEdits") && offered.iter().any(|m| m == "plan"),
        "{offered:?}"
    );
    assert!(
        !offered.iter().any(|m| m == "bypassPermissions"),
        "{offered:?}"
    );
    let first = acp.prompt(&session, "First question.").await;
    assert_eq!(first["result"]["stopReason"], "end_turn", "{first}");
    let set = |mode: &str| json!({"sessionId": session, "modeId": mode});
    let sideways = acp.request("session/set_mode", set("sideways")).await;
    assert!(
        sideways["error"]["message"].as_str().is_some(),
        "{sideways}"
    );
    let bypass = acp
        .request("session/set_mode", set("bypassPermissions"))
        .await;
    assert!(
        bypass["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("bypassPermissions")),
        "{bypass}"
    );
    let accepted = acp.request("session/set_mode", set("acceptEdits")).await;
    assert!(accepted["error"].is_null(), "{accepted}");
    let second = acp.prompt(&session, "Write out.txt.").await;
    assert_eq!(second["result"]["stopReason"], "end_turn", "{second}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.txt")).unwrap(),
        "out\n"
    );
    assert!(acp.requests.is_empty(), "no permission was asked");
    let updates = acp.updates(&session);
    assert!(
        updates
            .iter()
            .any(|u| u["sessionUpdate"] == "current_mode_update"
                && u["currentModeId"] == "acceptEdits"),
        "{updates:#?}"
    );
    assert_eq!(acp.close().await, Some(0));
    // Loaded by another editor, the session's mode is the one its history left.
    let mut again = Acp::spawn(dir.path(), &fake.base_url());
    again.initialize().await;
    let loaded = again
        .request(
            "session/load",
            json!({"sessionId": session, "cwd": dir.path(), "mcpServers": []}),
        )
        .await;
    assert_eq!(
        loaded["result"]["modes"]["currentModeId"], "acceptEdits",
        "{loaded}"
    );
    assert_eq!(again.close().await, Some(0));
}

/// A `session/cancel` sent right behind the prompt, before the run has started its turn, is
/// kept: the turn it meets is interrupted (its model call held at the gate, so only the
/// cancel can end it), and the prompt answers `cancelled`.
#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_before_the_turn_started_still_cancels_it() {
    let dir = project(&[]);
    let fake = fake(vec![held(
        ScriptEntry::reply("main", 1, vec![Block::text("Never shown.")]),
        "held",
    )])
    .await;
    let mut acp = Acp::spawn(dir.path(), &fake.base_url());
    acp.initialize().await;
    let session = acp.new_session(dir.path()).await;
    let prompt = acp
        .send(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "Wait."}]}),
        )
        .await;
    acp.write(
        &json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}})
            .to_string(),
    )
    .await;
    let answer = acp.answer(prompt).await;
    assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
    assert_eq!(run_status(dir.path(), &session).await, "interrupted");
    assert!(!acp.text(&session).contains("Never shown."));
    fake.open_gate("held");
    assert_eq!(acp.close().await, Some(0));
}

/// In an untrusted project the session offers no mode above `default`, and `session/set_mode`
/// refuses one — for a new run (the project's trust now) and for a stored run (the trust it
/// stored at its start, kept even after `muster trust`) — with an error naming `muster trust`;
/// the lead stays in `default`, so its edit is asked about. A new session after `muster trust`
/// gets the mode.
#[tokio::test(flavor = "multi_thread")]
async fn set_mode_above_default_is_refused_in_an_untrusted_project() {
    let dir = project(&[]);
    let fake = fake(an_answer_then_a_write("Not written.")).await;
    let mut acp = Acp::spawn(dir.path(), &fake.base_url());
    acp.initialize().await;
    let answer = acp
        .request("session/new", json!({"cwd": dir.path(), "mcpServers": []}))
        .await;
    let session = answer["result"]["sessionId"].as_str().unwrap().to_owned();
    assert_eq!(
        offered(&answer["result"]["modes"]),
        ["plan", "dontAsk", "default"],
        "{answer}"
    );
    let set = |session: &str, mode: &str| json!({"sessionId": session, "modeId": mode});
    let refused = |answer: &Value, mode: &str| {
        assert_eq!(answer["error"]["code"], -32602, "{mode}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&format!("mode {mode} is above `default`"))
                && message.contains("muster trust"),
            "{mode}: {answer}"
        );
    };
    // A new run: the project's trust now.
    for mode in ["acceptEdits", "auto", "bypassPermissions"] {
        refused(
            &acp.request("session/set_mode", set(&session, mode)).await,
            mode,
        );
    }
    let plan = acp.request("session/set_mode", set(&session, "plan")).await;
    assert!(plan["error"].is_null(), "{plan}");
    let back = acp
        .request("session/set_mode", set(&session, "default"))
        .await;
    assert!(back["error"].is_null(), "{back}");
    let first = acp.prompt(&session, "First question.").await;
    assert_eq!(first["result"]["stopReason"], "end_turn", "{first}");
    // A stored run: the trust it started with, also after `muster trust`.
    refused(
        &acp.request("session/set_mode", set(&session, "bypassPermissions"))
            .await,
        "bypassPermissions",
    );
    trust(dir.path()).await;
    refused(
        &acp.request("session/set_mode", set(&session, "acceptEdits"))
            .await,
        "acceptEdits",
    );
    acp.replies
        .push_back(json!({"outcome": {"outcome": "selected", "optionId": "reject"}}));
    let second = acp.prompt(&session, "Write out.txt.").await;
    assert_eq!(second["result"]["stopReason"], "end_turn", "{second}");
    assert_eq!(
        acp.requests.len(),
        1,
        "the edit was asked about: {:#?}",
        acp.requests
    );
    assert!(!dir.path().join("out.txt").exists());
    // A new session of the project, trusted now, gets the mode.
    let trusted = acp.new_session(dir.path()).await;
    let accepted = acp
        .request("session/set_mode", set(&trusted, "acceptEdits"))
        .await;
    assert!(accepted["error"].is_null(), "{accepted}");
    assert_eq!(acp.close().await, Some(0));
}

/// A trusted session whose hook (before and after every call), MCP server (npm's reference
/// filesystem server, which logs on stderr) and Bash command all write to stdout and stderr:
/// every line on muster's stdout is still JSON-RPC (checked by every read), the hook ran for
/// each call, and the server's listing and the command's output reach the editor in the
/// calls' updates.
#[tokio::test(flavor = "multi_thread")]
async fn a_hooks_an_mcp_servers_and_a_commands_output_never_reach_stdout() {
    let dir = project(&[(
        ".muster/settings.toml",
        "permission_mode = \"bypassPermissions\"\n",
    )]);
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let hooks = root.join(".claude/hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    let noisy = hooks.join("noisy.sh");
    std::fs::write(
        &noisy,
        "#!/bin/sh\ncat > /dev/null\necho hook-to-stdout\necho hook-to-stderr >&2\n\
         echo ran >> \"$CLAUDE_PROJECT_DIR/hook.log\"\n",
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&noisy, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let hook = json!([{"matcher": "*", "hooks": [
        {"type": "command", "command": "\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/noisy.sh"}]}]);
    std::fs::write(
        root.join(".claude/settings.json"),
        json!({"hooks": {"PreToolUse": hook, "PostToolUse": hook}}).to_string(),
    )
    .unwrap();
    std::fs::write(
        root.join(".mcp.json"),
        json!({"mcpServers": {"fs": {
            "command": "node",
            "args": [super::common::filesystem_server(), root],
        }}})
        .to_string(),
    )
    .unwrap();
    trust(&root).await;
    let fake = fake(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![tool("mcp__fs__list_directory", json!({"path": root}))],
        ),
        ScriptEntry::reply(
            "main",
            2,
            vec![tool(
                "Bash",
                json!({"command": "echo to-stdout; echo to-stderr >&2"}),
            )],
        ),
        ScriptEntry::reply("main", 3, vec![Block::text("Quiet.")]),
    ])
    .await;
    let mut acp = Acp::spawn(&root, &fake.base_url());
    acp.initialize().await;
    let session = acp.new_session(&root).await;
    let answer = acp.prompt(&session, "List, then echo.").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let updates = acp.updates(&session);
    let results: Vec<&Value> = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call_update")
        .collect();
    assert_eq!(results.len(), 2, "{updates:#?}");
    for result in &results {
        assert_eq!(result["status"], "completed", "{result}");
    }
    assert!(
        results[0].to_string().contains("README.md"),
        "{}",
        results[0]
    );
    assert!(
        results[1].to_string().contains("to-stdout"),
        "{}",
        results[1]
    );
    assert!(acp.text(&session).contains("Quiet."));
    let ran = std::fs::read_to_string(root.join("hook.log")).unwrap_or_default();
    assert_eq!(
        ran.lines().count(),
        4,
        "the hook ran before and after each call"
    );
    assert_eq!(acp.close().await, Some(0));
}

/// A subagent of the main agent (`main.sub-1`) is a thread for a client that advertises
/// subagents: announced on the session, its text and its Read call on the thread (titled
/// without its name), its state on the session; the `Agent` call that started it stays on the
/// session. A client that does not advertise them is sent no thread: the subagent's call is on
/// the session named after it, its text left out.
#[tokio::test(flavor = "multi_thread")]
async fn a_subagent_is_a_thread_only_for_a_client_that_shows_threads() {
    for threads in [true, false] {
        let dir = project(&[]);
        let fake = fake(vec![
            ScriptEntry::reply(
                "main",
                1,
                vec![tool(
                    "Agent",
                    json!({"description": "read", "prompt": "Read the README.",
                           "subagent_type": "general"}),
                )],
            ),
            ScriptEntry::reply(
                "main.sub-1",
                1,
                vec![
                    Block::text("Reading."),
                    tool("Read", json!({"file_path": "README.md"})),
                ],
            ),
            ScriptEntry::reply("main.sub-1", 2, vec![Block::text("It says hello.")]),
            ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
        ])
        .await;
        let mut acp = Acp::spawn(dir.path(), &fake.base_url());
        let capabilities = if threads {
            json!({"subagents": {}})
        } else {
            json!({})
        };
        acp.initialize_with(capabilities).await;
        let session = acp.new_session(dir.path()).await;
        // `default` asks before a subagent that may edit starts; the editor allows it.
        acp.replies
            .push_back(json!({"outcome": {"outcome": "selected", "optionId": "allow"}}));
        let answer = acp.prompt(&session, "Have it read.").await;
        assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
        let thread = format!("{session}:main.sub-1");
        let on_session = acp.updates(&session);
        let on_thread = acp.updates(&thread);
        let titles = |updates: &[Value]| -> Vec<String> {
            updates
                .iter()
                .filter(|u| u["sessionUpdate"] == "tool_call")
                .filter_map(|u| u["title"].as_str().map(str::to_owned))
                .collect()
        };
        let announced: Vec<&Value> = on_session
            .iter()
            .filter(|u| u["sessionUpdate"] == "subagent_update")
            .collect();
        assert!(
            titles(&on_session).iter().any(|t| t.starts_with("Agent")),
            "{threads}: {on_session:#?}"
        );
        assert_eq!(acp.text(&session), "Done.", "{threads}");
        if threads {
            assert!(
                announced
                    .iter()
                    .any(|u| u["sessionId"] == thread.as_str() && u["title"] == "main.sub-1"),
                "{announced:#?}"
            );
            let states: Vec<&str> = announced
                .iter()
                .filter_map(|u| u["state"]["state"].as_str())
                .collect();
            assert!(states.contains(&"running"), "{states:?}");
            assert_eq!(titles(&on_thread), ["Read README.md"], "{on_thread:#?}");
            assert_eq!(acp.text(&thread), "Reading.It says hello.");
            assert!(
                !titles(&on_session).iter().any(|t| t.contains("Read")),
                "{on_session:#?}"
            );
        } else {
            assert!(announced.is_empty(), "{announced:#?}");
            assert!(on_thread.is_empty(), "{on_thread:#?}");
            assert!(
                titles(&on_session).contains(&"main.sub-1: Read README.md".to_owned()),
                "{on_session:#?}"
            );
        }
        assert_eq!(acp.close().await, Some(0));
    }
}

/// A `session/set_mode` sent while the prompt's turn runs (its model call held at the gate)
/// applies to that turn: the Write of the held response runs without a permission request
/// (in `default` it would ask), and the editor is shown the new mode.
#[tokio::test(flavor = "multi_thread")]
async fn set_mode_during_a_turn_applies_from_its_next_tool_call() {
    let dir = project(&[]);
    trust(dir.path()).await;
    let fake = fake(vec![
        held(
            ScriptEntry::reply(
                "main",
                1,
                vec![tool(
                    "Write",
                    json!({"file_path": "out.txt", "content": "out\n"}),
                )],
            ),
            "held",
        ),
        ScriptEntry::reply("main", 2, vec![Block::text("Written.")]),
    ])
    .await;
    let mut acp = Acp::spawn(dir.path(), &fake.base_url());
    acp.initialize().await;
    let session = acp.new_session(dir.path()).await;
    let prompt = acp
        .send(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "Write out.txt."}]}),
        )
        .await;
    tokio::time::timeout(GUARD, fake.gate_reached("held", 1))
        .await
        .expect("the model call never came");
    let set = acp
        .request(
            "session/set_mode",
            json!({"sessionId": session, "modeId": "acceptEdits"}),
        )
        .await;
    assert!(set["error"].is_null(), "{set}");
    fake.open_gate("held");
    let answer = acp.answer(prompt).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert!(acp.requests.is_empty(), "asked: {:#?}", acp.requests);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.txt")).unwrap(),
        "out\n"
    );
    assert_eq!(acp.close().await, Some(0));
}

/// The MCP servers an editor gives with `session/new` are the user's own: they start in a
/// project nobody trusted (whose own `.mcp.json` server stays off), and the model's call
/// reaches the server; a server muster cannot start as given is that request's error, naming
/// it, and the session is not made.
#[tokio::test(flavor = "multi_thread")]
async fn the_editors_mcp_servers_start_without_project_trust_and_a_bad_one_is_named() {
    let dir = project(&[(
        ".muster/settings.toml",
        "permission_mode = \"bypassPermissions\"\n",
    )]);
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let server = super::common::filesystem_server();
    std::fs::write(
        root.join(".mcp.json"),
        json!({"mcpServers": {"repo": {"command": "node", "args": [&server, &root]}}}).to_string(),
    )
    .unwrap();
    let fake = fake(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![tool("mcp__mine__list_directory", json!({"path": root}))],
        ),
        ScriptEntry::reply("main", 2, vec![Block::text("Listed.")]),
    ])
    .await;
    let mut acp = Acp::spawn(&root, &fake.base_url());
    acp.initialize().await;
    let refused = acp
        .request(
            "session/new",
            json!({"cwd": root, "mcpServers": [
                {"type": "sse", "name": "old", "url": "http://127.0.0.1:9/sse", "headers": []}]}),
        )
        .await;
    let message = refused["error"]["message"].to_string();
    assert!(
        message.contains("`old`") && message.contains("SSE"),
        "{refused}"
    );
    let answer = acp
        .request(
            "session/new",
            json!({"cwd": root, "mcpServers": [
                {"name": "mine", "command": "node", "args": [&server, &root], "env": []}]}),
        )
        .await;
    let session = answer["result"]["sessionId"].as_str().unwrap().to_owned();
    let answer = acp.prompt(&session, "List the project.").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let listed = acp
        .updates(&session)
        .into_iter()
        .find(|u| u["sessionUpdate"] == "tool_call_update")
        .expect("no call result");
    assert_eq!(listed["status"], "completed", "{listed}");
    assert!(listed.to_string().contains("README.md"), "{listed}");
    let asked = fake.requests();
    let tools = asked[0].body["tools"].to_string();
    assert!(tools.contains("mcp__mine__list_directory"), "{tools}");
    assert!(
        !tools.contains("mcp__repo__"),
        "the untrusted project's own server is not started: {tools}"
    );
    assert_eq!(acp.close().await, Some(0));
}
