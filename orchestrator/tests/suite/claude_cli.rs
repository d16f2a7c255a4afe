//! `muster claude` and a `claude` link to the binary, against `muster-fake-llm`: a CI-style
//! reader of `--output-format json`, several prompts on stdin continuing one run, the SDK's
//! control protocol (`initialize`, `can_use_tool` for a plan, `interrupt`), the result's
//! subtypes for budgets and a run awaiting a person, and the bad-input table. Every stdout
//! line must be one JSON message.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use muster_fake_llm::{Block, Fault, ReturnedUsage, ScriptEntry, UsageSpec};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::common::{GUARD, config_home, fake, json_lines, open_store, project, stderr, tool};

/// $1,000 per million tokens in and out: a token costs $0.001.
const PRICES: &str = "[models.\"claude-sonnet-4-5\"]\nprice_in = 1000.0\nprice_out = 1000.0\n\
                      price_cache_read = 1000.0\nprice_cache_write = 1000.0\n";

/// A `claude` link to the `muster` binary, in its own directory of `dir`.
fn claude_link(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let link = bin.join("claude");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_muster"), &link).unwrap();
    link
}

/// `program ARGS` in `dir` with the test environment of `common::command`, the model server
/// at `base`.
fn command(program: &Path, dir: &Path, base: &str, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(program);
    command
        .current_dir(dir)
        .args(args)
        .env("HOME", dir)
        .env("XDG_CONFIG_HOME", config_home())
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("ANTHROPIC_BASE_URL", base)
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("MUSTER_TRUST_PROJECT_HASH")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// `muster claude ARGS` run to its end with `stdin`.
async fn claude(dir: &Path, base: &str, args: &[&str], stdin: &str) -> Output {
    let muster = Path::new(env!("CARGO_BIN_EXE_muster"));
    let mut command = command(muster, dir, base, &[&["claude"], args].concat());
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).await.unwrap();
    drop(input);
    tokio::time::timeout(GUARD, child.wait_with_output())
        .await
        .expect("guard timeout")
        .unwrap()
}

fn user(text: &str) -> String {
    json!({"type": "user", "message": {"role": "user", "content": text}}).to_string() + "\n"
}

fn messages(output: &Output) -> Vec<Value> {
    json_lines(&String::from_utf8_lossy(&output.stdout))
}

fn of_kind<'a>(messages: &'a [Value], kind: &str, subtype: Option<&str>) -> Vec<&'a Value> {
    messages
        .iter()
        .filter(|m| m["type"] == kind && subtype.is_none_or(|s| m["subtype"] == s))
        .collect()
}

fn with_usage(mut entry: ScriptEntry, input: u64, output: u64) -> ScriptEntry {
    if let Some(reply) = entry.reply.as_mut() {
        reply.usage = Some(UsageSpec {
            input_tokens: Some(input),
            output_tokens: Some(output),
            cache_read_input_tokens: Some(0),
            cache_creation_input_tokens: Some(0),
        });
    }
    entry
}

/// What a CI job reads of the result, each field with its type: an error names the first
/// one missing or mistyped.
fn ci_read(result: &Value) -> Result<(), String> {
    type Check = fn(&Value) -> bool;
    let fields: [(&str, Check); 11] = [
        ("/type", |v| v == "result"),
        ("/subtype", Value::is_string),
        ("/is_error", Value::is_boolean),
        ("/result", Value::is_string),
        ("/session_id", Value::is_string),
        ("/num_turns", Value::is_u64),
        ("/duration_ms", Value::is_u64),
        ("/total_cost_usd", Value::is_number),
        ("/usage/input_tokens", Value::is_u64),
        ("/usage/output_tokens", Value::is_u64),
        ("/permission_denials", Value::is_array),
    ];
    for (pointer, check) in fields {
        match result.pointer(pointer) {
            Some(value) if check(value) => {}
            Some(value) => return Err(format!("{pointer} is mistyped: {value}")),
            None => return Err(format!("{pointer} is missing")),
        }
    }
    Ok(())
}

fn cost(usage: &ReturnedUsage) -> f64 {
    (usage.input_tokens
        + usage.output_tokens
        + usage.cache_read_input_tokens
        + usage.cache_creation_input_tokens) as f64
        * 0.001
}

fn settings(dir: &Path, text: &str) {
    std::fs::write(dir.join(".muster/settings.toml"), text).unwrap();
    super::common::trust_blocking(dir);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_ci_script_reads_every_field_of_the_json_result_through_a_claude_link() {
    let dir = project(&[]);
    settings(dir.path(), PRICES);
    let fake = fake(vec![
        with_usage(
            ScriptEntry::reply(
                "main",
                1,
                vec![tool("Read", json!({"file_path": "README.md"}))],
            ),
            1200,
            80,
        ),
        with_usage(
            ScriptEntry::reply("main", 2, vec![Block::text("It says hello.")]),
            1300,
            20,
        ),
    ])
    .await;
    let link = claude_link(dir.path());
    let mut command = command(
        &link,
        dir.path(),
        &fake.base_url(),
        &[
            "-p",
            "What does the readme say?",
            "--output-format",
            "json",
            "--model",
            "claude-sonnet-4-5",
        ],
    );
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let output = super::common::output(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let lines = messages(&output);
    assert_eq!(lines.len(), 1, "one result line: {lines:#?}");
    let result = &lines[0];
    ci_read(result).unwrap_or_else(|error| panic!("{error}: {result:#}"));
    assert_eq!(result["subtype"], "success");
    assert_eq!(result["is_error"], false);
    assert_eq!(result["result"], "It says hello.");
    assert_eq!(result["num_turns"], 2);
    // The figures are what the model server returned, at the configured prices.
    let returned: Vec<ReturnedUsage> = fake.requests().iter().filter_map(|r| r.usage).collect();
    assert_eq!(returned.len(), 2);
    let input: u64 = returned.iter().map(|u| u.input_tokens).sum();
    let output_tokens: u64 = returned.iter().map(|u| u.output_tokens).sum();
    assert_eq!(result["usage"]["input_tokens"], input);
    assert_eq!(result["usage"]["output_tokens"], output_tokens);
    let expected: f64 = returned.iter().map(cost).sum();
    let total = result["total_cost_usd"].as_f64().unwrap();
    assert!((total - expected).abs() < 1e-9, "{total} != {expected}");
    // The session is the run.
    let run = result["session_id"].as_str().unwrap();
    assert_eq!(result["muster"]["run_id"], run);
    let store = open_store(dir.path());
    assert_eq!(
        store.run(run).await.unwrap().unwrap().status.as_str(),
        "completed"
    );
    // The reader fails on a missing or mistyped field.
    for pointer in ["usage", "num_turns", "permission_denials"] {
        let mut broken = result.clone();
        broken.as_object_mut().unwrap().remove(pointer);
        assert!(ci_read(&broken).is_err(), "{pointer}");
    }
    let mut broken = result.clone();
    broken["duration_ms"] = json!("12");
    assert!(ci_read(&broken).is_err());
}

#[tokio::test(flavor = "multi_thread")]
async fn text_output_prints_the_answer_and_a_prompt_comes_from_stdin() {
    let dir = project(&[]);
    let fake = fake(vec![ScriptEntry::reply(
        "main",
        1,
        vec![Block::text("Hello from stdin.")],
    )])
    .await;
    let output = claude(dir.path(), &fake.base_url(), &["-p"], "Say hello.\n").await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "Hello from stdin.\n"
    );
    let body = fake.requests()[0].body.to_string();
    assert!(body.contains("Say hello."), "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn prompts_on_stdin_continue_one_run_with_init_and_state_frames() {
    let dir = project(&[]);
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![Block::text("First answer.")]),
        ScriptEntry::reply("main", 2, vec![Block::text("Second answer.")]),
    ])
    .await;
    let session = "5f0c2a4e-8f6b-4d7e-9a51-1c2d3e4f5a6b";
    let stdin = user("First question.") + &user("Second question.");
    let output = claude(
        dir.path(),
        &fake.base_url(),
        &[
            "--output-format",
            "stream-json",
            "--verbose",
            "--input-format",
            "stream-json",
            &format!("--session-id={session}"),
        ],
        &stdin,
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let lines = messages(&output);
    let inits = of_kind(&lines, "system", Some("init"));
    assert_eq!(inits.len(), 2, "an init per prompt: {lines:#?}");
    for init in &inits {
        assert_eq!(init["muster_version"], env!("CARGO_PKG_VERSION"));
        assert!(
            init["claude_code_version"]
                .as_str()
                .unwrap()
                .starts_with("2.")
        );
        assert_eq!(init["session_id"], session);
    }
    let results = of_kind(&lines, "result", None);
    let texts: Vec<&Value> = results.iter().map(|r| &r["result"]).collect();
    assert_eq!(texts, [&json!("First answer."), &json!("Second answer.")]);
    assert!(results.iter().all(|r| r["session_id"] == session));
    let assistant = of_kind(&lines, "assistant", None);
    assert_eq!(
        assistant[0]["message"]["content"][0]["text"],
        "First answer."
    );
    assert_eq!(assistant[0]["parent_tool_use_id"], Value::Null);
    let states: Vec<&str> = of_kind(&lines, "system", Some("session_state_changed"))
        .iter()
        .map(|m| m["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["running", "idle", "running", "idle"]);
    // The second prompt is the run's continue: its context kept, one run in the store.
    let last = fake.requests().last().unwrap().body.to_string();
    assert!(
        last.contains("First answer.") && last.contains("Second question."),
        "{last}"
    );
    let run = results[0]["muster"]["run_id"].as_str().unwrap().to_owned();
    assert_eq!(results[1]["muster"]["run_id"], run.as_str());
    let store = open_store(dir.path());
    assert_eq!(store.runs().await.unwrap().len(), 1);

    // `--resume` takes the alias: a third prompt continues the same run.
    fake.append_script(vec![ScriptEntry::reply(
        "main",
        3,
        vec![Block::text("Third answer.")],
    )])
    .unwrap();
    let output = claude(
        dir.path(),
        &fake.base_url(),
        &[
            "-p",
            "Third question.",
            "--resume",
            session,
            "--output-format",
            "json",
        ],
        "",
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let result = messages(&output).pop().unwrap();
    assert_eq!(result["result"], "Third answer.");
    assert_eq!(result["session_id"], session);
    assert_eq!(result["muster"]["run_id"], run.as_str());
}

/// A live `muster claude` in stream-json mode, read line by line.
struct Live {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    seen: Vec<Value>,
}

impl Live {
    fn spawn(dir: &Path, base: &str, extra: &[&str]) -> Live {
        let muster = Path::new(env!("CARGO_BIN_EXE_muster"));
        let args = [
            &[
                "claude",
                "--output-format",
                "stream-json",
                "--verbose",
                "--input-format",
                "stream-json",
            ][..],
            extra,
        ]
        .concat();
        let mut command = command(muster, dir, base, &args);
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = command.spawn().unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        Live {
            child,
            stdin,
            stdout,
            seen: Vec::new(),
        }
    }

    async fn write(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(line.as_bytes()).await.unwrap();
        if !line.ends_with('\n') {
            stdin.write_all(b"\n").await.unwrap();
        }
        stdin.flush().await.unwrap();
    }

    async fn until(&mut self, what: &str, matches: impl Fn(&Value) -> bool) -> Value {
        loop {
            let line = tokio::time::timeout(GUARD, self.stdout.next_line())
                .await
                .expect("guard timeout")
                .unwrap()
                .unwrap_or_else(|| panic!("stdout ended before {what}: {:#?}", self.seen));
            let message: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout carried a line that is not JSON ({e}): {line}"));
            self.seen.push(message.clone());
            if matches(&message) {
                return message;
            }
        }
    }

    async fn close(mut self) -> Option<i32> {
        drop(self.stdin.take());
        while let Some(line) = tokio::time::timeout(GUARD, self.stdout.next_line())
            .await
            .expect("guard timeout")
            .unwrap()
        {
            let _: Value = serde_json::from_str(&line).unwrap();
        }
        tokio::time::timeout(GUARD, self.child.wait())
            .await
            .expect("guard timeout")
            .unwrap()
            .code()
    }
}

const PLAN: &str = "## Goal\nOut.\n## Steps\n1. Write out.txt\n## Files\nout.txt\n";

#[tokio::test(flavor = "multi_thread")]
async fn a_plan_is_approved_through_can_use_tool_into_the_mode_it_names() {
    let dir = project(&[(".muster/settings.toml", "permission_mode = \"plan\"\n")]);
    super::common::trust(dir.path()).await;
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![tool("ExitPlanMode", json!({"plan": PLAN}))]),
        ScriptEntry::reply(
            "main",
            2,
            vec![tool(
                "Write",
                json!({"file_path": "out.txt", "content": "out\n"}),
            )],
        ),
        ScriptEntry::reply("main", 3, vec![Block::text("Done as planned.")]),
    ])
    .await;
    let mut live = Live::spawn(
        dir.path(),
        &fake.base_url(),
        &["--permission-prompt-tool", "stdio"],
    );
    live.write(
        &json!({"type": "control_request", "request_id": "init-1",
                "request": {"subtype": "initialize", "hooks": null}})
        .to_string(),
    )
    .await;
    let initialized = live
        .until("initialize's answer", |m| m["type"] == "control_response")
        .await;
    assert_eq!(
        initialized["response"]["subtype"], "success",
        "{initialized}"
    );
    assert_eq!(initialized["response"]["request_id"], "init-1");
    live.write(&user("Plan, then write out.txt.")).await;
    let ask = live
        .until("can_use_tool", |m| m["type"] == "control_request")
        .await;
    let request = &ask["request"];
    assert_eq!(request["subtype"], "can_use_tool", "{ask}");
    assert_eq!(request["tool_name"], "ExitPlanMode");
    assert_eq!(request["input"]["plan"], PLAN);
    assert!(
        request["input"]["planFilePath"]
            .as_str()
            .unwrap()
            .ends_with(".md")
    );
    assert_eq!(request["agent_id"], "main");
    // The stored request's id, as `muster approve` names it.
    assert_eq!(request["input"]["request_id"], "plan-main-1", "{request}");
    let waiting = live
        .seen
        .iter()
        .rev()
        .find(|m| m["subtype"] == "session_state_changed");
    assert_eq!(waiting.unwrap()["state"], "requires_action");
    live.write(
        &json!({"type": "control_response", "response": {
            "subtype": "success", "request_id": ask["request_id"],
            "response": {"behavior": "allow", "updatedInput": request["input"],
                         "updatedPermissions": [{"type": "setMode", "mode": "acceptEdits",
                                                 "destination": "session"}]}}})
        .to_string(),
    )
    .await;
    let result = live.until("the result", |m| m["type"] == "result").await;
    assert_eq!(result["subtype"], "success", "{result}");
    assert_eq!(result["result"], "Done as planned.");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.txt")).unwrap(),
        "out\n",
        "the approval's mode let the Write run"
    );
    let run = result["muster"]["run_id"].as_str().unwrap().to_owned();
    assert_eq!(live.close().await, Some(0));
    // One decision in the store, by the person.
    let db = rusqlite::Connection::open(dir.path().join(".muster/muster.db")).unwrap();
    let responses: Vec<String> = db
        .prepare("SELECT body FROM messages WHERE run_id = ?1 AND kind = 'plan_approval_response'")
        .unwrap()
        .query_map([&run], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(responses.len(), 1, "{responses:?}");
    assert!(responses[0].contains("acceptEdits"), "{responses:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_permission_prompt_tool_a_plan_ends_error_awaiting_decision_exit_5() {
    let dir = project(&[(".muster/settings.toml", "permission_mode = \"plan\"\n")]);
    super::common::trust(dir.path()).await;
    let fake = fake(vec![ScriptEntry::reply(
        "main",
        1,
        vec![tool("ExitPlanMode", json!({"plan": PLAN}))],
    )])
    .await;
    let output = claude(
        dir.path(),
        &fake.base_url(),
        &["-p", "Plan it.", "--output-format", "json"],
        "",
    )
    .await;
    assert_eq!(output.status.code(), Some(5), "{}", stderr(&output));
    let result = messages(&output).pop().unwrap();
    assert_eq!(result["subtype"], "error_awaiting_decision", "{result}");
    assert_eq!(result["is_error"], true);
    let error = result["errors"][0].as_str().unwrap();
    assert!(error.contains("muster approve"), "{error}");
}

#[tokio::test(flavor = "multi_thread")]
async fn budgets_end_the_run_with_their_own_subtype_and_exit_3() {
    let bash = |turn: u64| {
        ScriptEntry::reply("main", turn, vec![tool("Glob", json!({"pattern": "*.md"}))])
    };
    // The cost budget: $1.20 spent crosses $1.00.
    let dir = project(&[]);
    settings(dir.path(), PRICES);
    let fake_cost = fake(vec![
        with_usage(bash(1), 400, 100),
        with_usage(bash(2), 600, 100),
        ScriptEntry::reply("main", 3, vec![Block::text("never asked")]),
    ])
    .await;
    let output = claude(
        dir.path(),
        &fake_cost.base_url(),
        &[
            "-p",
            "Work.",
            "--output-format",
            "json",
            "--model",
            "claude-sonnet-4-5",
            "--max-budget-usd",
            "1.0",
        ],
        "",
    )
    .await;
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let result = messages(&output).pop().unwrap();
    assert_eq!(result["subtype"], "error_max_budget_usd", "{result}");
    assert_eq!(result["is_error"], true);
    assert!((result["total_cost_usd"].as_f64().unwrap() - 1.2).abs() < 1e-9);

    // The turn budget: a second model turn is one too many.
    let dir = project(&[]);
    let fake_turns = fake(vec![
        bash(1),
        ScriptEntry::reply("main", 2, vec![Block::text("never asked")]),
    ])
    .await;
    let output = claude(
        dir.path(),
        &fake_turns.base_url(),
        &["-p", "Work.", "--output-format", "json", "--max-turns", "1"],
        "",
    )
    .await;
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let result = messages(&output).pop().unwrap();
    assert_eq!(result["subtype"], "error_max_turns", "{result}");
    assert_eq!(fake_turns.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn interrupt_ends_the_held_turn_and_the_next_prompt_continues() {
    let dir = project(&[]);
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![Block::text("Never shown.")])
            .attempt(1)
            .fault(Fault {
                hold: Some("held".into()),
                ..Fault::default()
            }),
        ScriptEntry {
            turn: None,
            ..ScriptEntry::reply("main", 0, vec![Block::text("After the interrupt.")])
        },
    ])
    .await;
    let mut live = Live::spawn(dir.path(), &fake.base_url(), &[]);
    live.write(&user("Wait.")).await;
    tokio::time::timeout(GUARD, fake.gate_reached("held", 1))
        .await
        .expect("the model call never came");
    live.write(
        &json!({"type": "control_request", "request_id": "stop-1",
                "request": {"subtype": "interrupt"}})
        .to_string(),
    )
    .await;
    let answer = live
        .until("interrupt's answer", |m| m["type"] == "control_response")
        .await;
    assert_eq!(answer["response"]["subtype"], "success", "{answer}");
    let result = live
        .until("the first result", |m| m["type"] == "result")
        .await;
    assert_eq!(result["subtype"], "error_during_execution", "{result}");
    assert_eq!(result["muster"]["status"], "interrupted");
    fake.open_gate("held");
    live.write(&user("Go on.")).await;
    let result = live
        .until("the second result", |m| m["type"] == "result")
        .await;
    assert_eq!(result["subtype"], "success", "{result}");
    assert_eq!(result["result"], "After the interrupt.");
    assert_eq!(live.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn junk_lines_and_unknown_control_requests_are_named_and_the_session_goes_on() {
    let dir = project(&[]);
    let fake = fake(vec![ScriptEntry::reply(
        "main",
        1,
        vec![Block::text("Still here.")],
    )])
    .await;
    let stdin = "this is not json\n".to_owned()
        + &json!({"type": "control_request", "request_id": "init",
                  "request": {"subtype": "initialize", "agents": {"critic": {}},
                              "hooks": {"Setup": [{"hookCallbackIds": ["hook_0"]}]}}})
        .to_string()
        + "\n"
        + &json!({"type": "control_request", "request_id": "r1",
                  "request": {"subtype": "teleport"}})
        .to_string()
        + "\n{\"type\":\"mystery\"}\n"
        + &user("Hello?");
    let output = claude(
        dir.path(),
        &fake.base_url(),
        &[
            "--output-format",
            "stream-json",
            "--input-format",
            "stream-json",
        ],
        &stdin,
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let lines = messages(&output);
    let answered = of_kind(&lines, "control_response", None);
    assert_eq!(answered.len(), 2, "{lines:#?}");
    assert_eq!(answered[0]["response"]["response"]["hooks_applied"], true);
    let refused = &answered[1..];
    assert_eq!(refused[0]["response"]["subtype"], "error");
    assert_eq!(refused[0]["response"]["request_id"], "r1");
    assert!(
        refused[0]["response"]["error"]
            .as_str()
            .unwrap()
            .contains("\"teleport\""),
        "{}",
        refused[0]
    );
    let errors = stderr(&output);
    assert!(errors.contains("stdin line 1 is not JSON"), "{errors}");
    assert!(errors.contains("\"mystery\""), "{errors}");
    // What initialize asks that muster does not do is named, one line each.
    assert!(errors.contains("initialize's agents"), "{errors}");
    assert!(
        errors.contains("hook callbacks for \"Setup\" are never called"),
        "{errors}"
    );
    assert_eq!(of_kind(&lines, "result", None)[0]["result"], "Still here.");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_command_lines_exit_2_saying_what_to_fix() {
    let dir = project(&[]);
    let rows: &[(&[&str], &str)] = &[
        (&["-p", "hi", "--max-turns", "0"], "--max-turns 0"),
        (&["-p", "hi", "--max-turns"], "--max-turns"),
        (&["-p", "hi", "--output-format"], "--output-format"),
        (
            &["--input-format", "stream-json"],
            "needs --output-format stream-json",
        ),
        (
            &["-p", "hi", "--resume", "nosuchrun"],
            "no session \"nosuchrun\"",
        ),
        (&["-p"], "no prompt"),
    ];
    for (args, words) in rows {
        let output = claude(dir.path(), "http://127.0.0.1:9", args, "").await;
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains(words),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(output.stdout.is_empty(), "{args:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn continue_and_fork_session_carry_a_run_on_and_partial_messages_stream() {
    let dir = project(&[]);
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![Block::text("First answer.")]),
        ScriptEntry::reply("main", 2, vec![Block::text("Continued answer.")]),
        ScriptEntry::reply("main", 3, vec![Block::text("Forked answer.")]),
    ])
    .await;
    let base = fake.base_url();
    let first = claude(
        dir.path(),
        &base,
        &["-p", "One.", "--output-format", "json"],
        "",
    )
    .await;
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let run = messages(&first).pop().unwrap()["session_id"]
        .as_str()
        .unwrap()
        .to_owned();

    // `--continue` takes the newest completed run; partial messages stream while it answers.
    let output = claude(
        dir.path(),
        &base,
        &[
            "-p",
            "Two.",
            "--continue",
            "--output-format",
            "stream-json",
            "--verbose",
            "--include-partial-messages",
        ],
        "",
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let lines = messages(&output);
    let result = of_kind(&lines, "result", None)[0];
    assert_eq!(result["result"], "Continued answer.");
    assert_eq!(result["session_id"], run.as_str());
    let deltas: String = of_kind(&lines, "stream_event", None)
        .iter()
        .filter_map(|e| e["event"]["delta"]["text"].as_str())
        .collect();
    assert_eq!(deltas, "Continued answer.", "{lines:#?}");

    // `--fork-session` continues a copy under the new session id; the original is untouched.
    let alias = "0d6f1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b";
    let output = claude(
        dir.path(),
        &base,
        &[
            "-p",
            "Three.",
            "--resume",
            &run,
            "--fork-session",
            "--session-id",
            alias,
            "--output-format",
            "json",
        ],
        "",
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let forked = messages(&output).pop().unwrap();
    assert_eq!(forked["result"], "Forked answer.");
    assert_eq!(forked["session_id"], alias);
    assert_ne!(forked["muster"]["run_id"], run.as_str());
    let last = fake.requests().last().unwrap().body.to_string();
    assert!(
        last.contains("Continued answer.") && last.contains("Three."),
        "the fork kept the context: {last}"
    );
    let store = open_store(dir.path());
    assert_eq!(store.runs().await.unwrap().len(), 2);
    // The fork's alias names it, not the original.
    fake.append_script(vec![ScriptEntry::reply(
        "main",
        4,
        vec![Block::text("Fourth answer.")],
    )])
    .unwrap();
    let output = claude(
        dir.path(),
        &base,
        &["-p", "Four.", "--resume", alias, "--output-format", "json"],
        "",
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let fourth = messages(&output).pop().unwrap();
    assert_eq!(fourth["result"], "Fourth answer.");
    assert_eq!(fourth["muster"]["run_id"], forked["muster"]["run_id"]);
}

const GREET_PLAN: &str = "## Goal\nGreet.\n## Steps\n1. Write hello.txt\n## Files\nhello.txt\n## Tests\nnone\n## Risks\nnone\n";

/// A team run: the teammate's plan arrives after the lead's turn, goes to the program's
/// `can_use_tool`, and its approval (one decision in the store) completes the run.
#[tokio::test(flavor = "multi_thread")]
async fn a_teammates_plan_goes_to_can_use_tool_and_its_approval_completes_the_team_run() {
    let dir = project(&[(
        "muster.team.toml",
        "name = \"greeters\"\n\n[[teammates]]\nname = \"alice\"\napprover = \"human\"\n",
    )]);
    let any_turn = |agent: &str, text: &str| -> ScriptEntry {
        serde_json::from_value(json!({
            "agent": agent,
            "reply": {"content": [{"type": "text", "text": text}], "stop_reason": "end_turn"},
        }))
        .unwrap()
    };
    let fake = fake(vec![
        ScriptEntry::reply(
            "lead",
            1,
            vec![tool(
                "TaskCreate",
                json!({"subject": "Greet", "description": "Write hello.txt saying hello."}),
            )],
        ),
        any_turn("lead", "Waiting for the team."),
        ScriptEntry::reply(
            "alice",
            1,
            vec![tool("ExitPlanMode", json!({"plan": GREET_PLAN}))],
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
    ])
    .await;
    let mut live = Live::spawn(
        dir.path(),
        &fake.base_url(),
        &["--permission-prompt-tool", "stdio"],
    );
    live.write(&user("Greet the world.")).await;
    let ask = live
        .until("can_use_tool", |m| m["type"] == "control_request")
        .await;
    assert_eq!(ask["request"]["tool_name"], "ExitPlanMode", "{ask}");
    assert_eq!(ask["request"]["agent_id"], "alice");
    assert_eq!(ask["request"]["input"]["plan"], GREET_PLAN);
    assert_eq!(ask["request"]["input"]["request_id"], "plan-alice-1");
    assert!(!dir.path().join("hello.txt").exists());
    live.write(
        &json!({"type": "control_response", "response": {
            "subtype": "success", "request_id": ask["request_id"],
            "response": {"behavior": "allow", "updatedInput": ask["request"]["input"],
                         "updatedPermissions": [{"type": "setMode", "mode": "acceptEdits"}]}}})
        .to_string(),
    )
    .await;
    let result = live.until("the result", |m| m["type"] == "result").await;
    assert_eq!(result["subtype"], "success", "{result}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(),
        "hello, world\n"
    );
    // The lead's messages have no parent; the teammate's text is in the stream too.
    let lead_text = live.seen.iter().find(|m| {
        m["type"] == "assistant" && m["message"]["content"][0]["text"] == "Waiting for the team."
    });
    assert_eq!(lead_text.unwrap()["parent_tool_use_id"], Value::Null);
    assert!(
        live.seen
            .iter()
            .any(|m| m["message"]["content"][0]["text"] == "Wrote hello.txt."),
        "{:#?}",
        live.seen
    );
    let run = result["muster"]["run_id"].as_str().unwrap().to_owned();
    assert_eq!(live.close().await, Some(0));
    let db = rusqlite::Connection::open(dir.path().join(".muster/muster.db")).unwrap();
    let responses: Vec<(String, String)> = db
        .prepare(
            "SELECT sender, body FROM messages WHERE run_id = ?1 \
             AND kind = 'plan_approval_response'",
        )
        .unwrap()
        .query_map([&run], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(responses.len(), 1, "{responses:?}");
    assert_eq!(responses[0].0, "human");
    assert!(responses[0].1.contains("acceptEdits"), "{responses:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn interrupt_ends_a_team_runs_lead_turn_and_the_run_stays_resumable() {
    let dir = project(&[(
        "muster.team.toml",
        "name = \"greeters\"\n\n[[teammates]]\nname = \"alice\"\napprover = \"human\"\n",
    )]);
    let fake = fake(vec![
        ScriptEntry::reply("lead", 1, vec![Block::text("Never shown.")])
            .attempt(1)
            .fault(Fault {
                hold: Some("held".into()),
                ..Fault::default()
            }),
    ])
    .await;
    let mut live = Live::spawn(dir.path(), &fake.base_url(), &[]);
    live.write(&user("Greet the world.")).await;
    tokio::time::timeout(GUARD, fake.gate_reached("held", 1))
        .await
        .expect("the lead's model call never came");
    live.write(
        &json!({"type": "control_request", "request_id": "stop-1",
                "request": {"subtype": "interrupt"}})
        .to_string(),
    )
    .await;
    let result = live.until("the result", |m| m["type"] == "result").await;
    assert_eq!(result["subtype"], "error_during_execution", "{result}");
    assert_eq!(result["muster"]["status"], "interrupted");
    fake.open_gate("held");
    assert_eq!(live.close().await, Some(130));
    let run = result["muster"]["run_id"].as_str().unwrap();
    let store = open_store(dir.path());
    let record = store.run(run).await.unwrap().unwrap();
    assert_eq!(
        record.status.as_str(),
        "interrupted",
        "`muster resume` carries it on"
    );
    assert!(record.team.is_some());
}

/// `muster claude --muster-link-command` prints the command that makes the link, and a link
/// made by it is Claude Code's command line.
#[tokio::test(flavor = "multi_thread")]
async fn muster_prints_the_command_that_makes_a_claude_link() {
    let dir = project(&[]);
    let output = super::common::muster(dir.path(), &["claude", "--muster-link-command"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let command = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    assert!(command.ends_with("~/.local/bin/claude"), "{command}");
    let script = command.replace("~", &dir.path().display().to_string());
    let made = std::process::Command::new("sh")
        .args(["-c", &script])
        .status()
        .unwrap();
    assert!(made.success(), "{script}");
    let link = dir.path().join(".local/bin/claude");
    let output = super::common::output({
        let mut c = command_for(&link, dir.path());
        c.args(["-p", "--max-turns", "0"]);
        c
    })
    .await;
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("--max-turns 0"),
        "{}",
        stderr(&output)
    );
}

fn command_for(program: &Path, dir: &Path) -> tokio::process::Command {
    let mut command = command(program, dir, "http://127.0.0.1:9", &[]);
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    command
}

/// A team session's second prompt on stdin is the lead's `continue` of the same run (issue
/// 30), its context kept.
#[tokio::test(flavor = "multi_thread")]
async fn a_team_sessions_second_prompt_continues_the_team_run() {
    let dir = project(&[(
        "muster.team.toml",
        "name = \"greeters\"\nisolation = \"shared\"\n\n[[teammates]]\nname = \"alice\"\n",
    )]);
    let fake = fake(vec![
        ScriptEntry::reply("lead", 1, vec![Block::text("First answer.")]),
        ScriptEntry::reply("lead", 2, vec![Block::text("Second answer.")]),
    ])
    .await;
    let stdin = user("First question.") + &user("Second question.");
    let output = claude(
        dir.path(),
        &fake.base_url(),
        &[
            "--output-format",
            "stream-json",
            "--verbose",
            "--input-format",
            "stream-json",
        ],
        &stdin,
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let lines = messages(&output);
    let results = of_kind(&lines, "result", None);
    let texts: Vec<&Value> = results.iter().map(|r| &r["result"]).collect();
    assert_eq!(
        texts,
        [&json!("First answer."), &json!("Second answer.")],
        "{lines:#?}"
    );
    let run = results[0]["muster"]["run_id"].as_str().unwrap().to_owned();
    assert_eq!(results[1]["muster"]["run_id"], run.as_str());
    let last = fake.requests().last().unwrap().body.to_string();
    assert!(
        last.contains("First answer.") && last.contains("Second question."),
        "{last}"
    );
    let store = open_store(dir.path());
    assert_eq!(store.runs().await.unwrap().len(), 1);
}

/// A teammate that ended stuck is named in the result's `errors`, and the prompt is no
/// `success` although the run completed (the teammate had no task; the board is done).
#[tokio::test(flavor = "multi_thread")]
async fn a_teammate_that_ended_stuck_is_named_in_errors() {
    let dir = project(&[(
        "muster.team.toml",
        "name = \"readers\"\nisolation = \"shared\"\n\n[[teammates]]\nname = \"alice\"\n",
    )]);
    let read = |turn| {
        ScriptEntry::reply(
            "alice",
            turn,
            vec![tool("Read", json!({"file_path": "no-such-file.txt"}))],
        )
    };
    let lead_on_notice: ScriptEntry = serde_json::from_value(json!({
        "agent": "lead", "when": {"mail_type": "idle_notification"},
        "reply": {"content": [{"type": "text", "text": "alice is stuck; done."}],
                  "stop_reason": "end_turn"},
    }))
    .unwrap();
    let lead_waits: ScriptEntry = serde_json::from_value(json!({
        "agent": "lead",
        "reply": {"content": [{"type": "text", "text": "Waiting for alice."}],
                  "stop_reason": "end_turn"},
    }))
    .unwrap();
    let mut script = vec![
        ScriptEntry::reply(
            "lead",
            1,
            vec![tool(
                "SendMessage",
                json!({"to": "alice", "message": "Read no-such-file.txt."}),
            )],
        ),
        lead_on_notice,
        lead_waits,
    ];
    script.extend((1..=4).map(read));
    let fake = fake(script).await;
    let output = claude(
        dir.path(),
        &fake.base_url(),
        &["-p", "Read it.", "--output-format", "json"],
        "",
    )
    .await;
    let result = messages(&output).pop().unwrap();
    assert_eq!(result["subtype"], "error_during_execution", "{result}");
    assert_eq!(result["is_error"], true);
    assert_eq!(result["muster"]["status"], "completed", "{result}");
    let errors: Vec<&str> = result["errors"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("teammate alice ended stuck") && e.contains("no-such-file.txt")),
        "{errors:?}"
    );
}

/// `set_model` between two prompts: the second prompt's requests go to the new model (the
/// run's continuation), and its `init` says so.
#[tokio::test(flavor = "multi_thread")]
async fn set_model_changes_the_model_of_the_next_prompt() {
    let dir = project(&[]);
    std::fs::write(
        dir.path().join(".muster/settings.toml"),
        "[models.\"claude-opus-4-5\"]\nprice_in = 5.0\nprice_out = 25.0\n",
    )
    .unwrap();
    super::common::trust_blocking(dir.path());
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![Block::text("First answer.")]),
        ScriptEntry::reply("main", 2, vec![Block::text("Second answer.")]),
    ])
    .await;
    let stdin = user("First question.")
        + &json!({"type": "control_request", "request_id": "m1",
                  "request": {"subtype": "set_model", "model": "claude-opus-4-5"}})
        .to_string()
        + "\n"
        + &user("Second question.");
    let output = claude(
        dir.path(),
        &fake.base_url(),
        &[
            "--output-format",
            "stream-json",
            "--verbose",
            "--input-format",
            "stream-json",
        ],
        &stdin,
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let lines = messages(&output);
    let answered = lines
        .iter()
        .find(|m| m["type"] == "control_response" && m["response"]["request_id"] == "m1")
        .expect("set_model answered");
    assert_eq!(answered["response"]["subtype"], "success", "{answered}");
    let inits = of_kind(&lines, "system", Some("init"));
    assert_eq!(inits[1]["model"], "claude-opus-4-5", "{:#?}", inits);
    let models: Vec<String> = fake
        .requests()
        .iter()
        .map(|r| r.body["model"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(models.len(), 2, "{models:?}");
    assert_ne!(models[0], "claude-opus-4-5");
    assert_eq!(models[1], "claude-opus-4-5", "{models:?}");
}

/// `--system-prompt` replaces the main agent's own prompt (its definition's) and
/// `--append-system-prompt` follows it; muster's sections (the modes) stay. In a team run only
/// the lead's prompt changes. The SDK's default `--system-prompt ""` changes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn system_prompt_replaces_only_the_main_agents_own_prompt() {
    const DEFINITION: &str = "You are a careful software engineer";
    let system = |request: &muster_fake_llm::RecordedRequest| request.body["system"].to_string();
    let dir = project(&[]);
    let server = fake(vec![ScriptEntry::reply(
        "main",
        1,
        vec![Block::text("Arr.")],
    )])
    .await;
    let output = claude(
        dir.path(),
        &server.base_url(),
        &[
            "-p",
            "Hello.",
            "--output-format",
            "json",
            "--system-prompt",
            "You are a pirate.",
            "--append-system-prompt",
            "Answer in one word.",
        ],
        "",
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let sent = system(&server.requests()[0]);
    assert!(
        sent.contains("You are a pirate.\\n\\nAnswer in one word."),
        "{sent}"
    );
    assert!(!sent.contains(DEFINITION), "{sent}");
    assert!(
        sent.contains("# Permission modes"),
        "muster's sections stay: {sent}"
    );

    // The SDK's default empty value: the definition's prompt.
    let dir = project(&[]);
    let server = fake(vec![ScriptEntry::reply(
        "main",
        1,
        vec![Block::text("Hi.")],
    )])
    .await;
    let output = claude(
        dir.path(),
        &server.base_url(),
        &[
            "-p",
            "Hello.",
            "--output-format",
            "json",
            "--system-prompt",
            "",
        ],
        "",
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(system(&server.requests()[0]).contains(DEFINITION));
    assert!(!stderr(&output).contains("warning"), "{}", stderr(&output));

    // A team run: the lead's prompt is replaced, a teammate keeps its definition's.
    let dir = project(&[(
        "muster.team.toml",
        "name = \"greeters\"\nisolation = \"shared\"\n\n[[teammates]]\nname = \"alice\"\n",
    )]);
    let server = fake(vec![
        ScriptEntry::reply(
            "lead",
            1,
            vec![tool(
                "SendMessage",
                json!({"to": "alice", "message": "Say hi."}),
            )],
        ),
        serde_json::from_value(json!({
            "agent": "lead",
            "reply": {"content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn"},
        }))
        .unwrap(),
        ScriptEntry::reply("alice", 1, vec![Block::text("Hi.")]),
    ])
    .await;
    let output = claude(
        dir.path(),
        &server.base_url(),
        &[
            "-p",
            "Greet.",
            "--output-format",
            "json",
            "--system-prompt",
            "You are a pirate captain.",
        ],
        "",
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let requests = server.requests();
    let of = |agent: &str| {
        requests
            .iter()
            .find(|r| r.agent.as_deref() == Some(agent))
            .map(system)
            .unwrap_or_default()
    };
    assert!(
        of("lead").contains("You are a pirate captain."),
        "{}",
        of("lead")
    );
    assert!(!of("alice").contains("pirate"), "{}", of("alice"));
    assert!(
        of("alice").contains("# Permission modes"),
        "{}",
        of("alice")
    );
}

/// `set_permission_mode` between two prompts: the continuation's new turn is in that mode (its
/// reminder names it, and an edit the first prompt's mode would have asked about runs); a mode
/// that is no mode gets an error response and the session goes on.
#[tokio::test(flavor = "multi_thread")]
async fn set_permission_mode_switches_the_main_agent_for_the_next_prompt() {
    let dir = project(&[]);
    let server = fake(vec![
        ScriptEntry::reply("main", 1, vec![Block::text("First answer.")]),
        ScriptEntry::reply(
            "main",
            2,
            vec![tool(
                "Write",
                json!({"file_path": "out.txt", "content": "out\n"}),
            )],
        ),
        ScriptEntry::reply("main", 3, vec![Block::text("Written.")]),
    ])
    .await;
    let control = |id: &str, mode: &str| {
        json!({"type": "control_request", "request_id": id,
               "request": {"subtype": "set_permission_mode", "mode": mode}})
        .to_string()
            + "\n"
    };
    let stdin = user("First question.")
        + &control("bad", "sideways")
        + &control("m1", "acceptEdits")
        + &user("Write out.txt.");
    let output = claude(
        dir.path(),
        &server.base_url(),
        &[
            "--output-format",
            "stream-json",
            "--verbose",
            "--input-format",
            "stream-json",
        ],
        &stdin,
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let lines = messages(&output);
    let answer = |id: &str| {
        lines
            .iter()
            .find(|m| m["type"] == "control_response" && m["response"]["request_id"] == id)
            .map(|m| m["response"]["subtype"].clone())
    };
    assert_eq!(answer("bad"), Some(json!("error")));
    assert_eq!(answer("m1"), Some(json!("success")));
    let inits = of_kind(&lines, "system", Some("init"));
    assert_eq!(inits[0]["permissionMode"], "default");
    assert_eq!(inits[1]["permissionMode"], "acceptEdits", "{inits:#?}");
    let results = of_kind(&lines, "result", None);
    assert_eq!(results[1]["subtype"], "success", "{:#?}", results);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.txt")).unwrap(),
        "out\n"
    );
    let second = server.requests()[1].body.to_string();
    assert!(second.contains("Mode: acceptEdits"), "{second}");
}

/// Without `--permission-prompt-tool stdio` nobody at the front end answers the person: a team
/// run whose teammate waits only on a person's plan decision ends awaiting it at once (exit 5,
/// `error_awaiting_decision`, naming the request) instead of waiting for its deadline.
#[tokio::test(flavor = "multi_thread")]
async fn a_team_run_without_a_permission_prompt_tool_ends_awaiting_the_teammates_plan() {
    let dir = project(&[(
        "muster.team.toml",
        "name = \"greeters\"\nshutdown_timeout_ms = 100\n\n[[teammates]]\nname = \"alice\"\napprover = \"human\"\n",
    )]);
    let lead_waits: ScriptEntry = serde_json::from_value(json!({
        "agent": "lead",
        "reply": {"content": [{"type": "text", "text": "Waiting for the team."}],
                  "stop_reason": "end_turn"},
    }))
    .unwrap();
    let fake = fake(vec![
        ScriptEntry::reply(
            "lead",
            1,
            vec![tool(
                "TaskCreate",
                json!({"subject": "Greet", "description": "Write hello.txt saying hello."}),
            )],
        ),
        lead_waits,
        ScriptEntry::reply(
            "alice",
            1,
            vec![tool("ExitPlanMode", json!({"plan": GREET_PLAN}))],
        ),
    ])
    .await;
    let output = claude(
        dir.path(),
        &fake.base_url(),
        &["-p", "Greet the world.", "--output-format", "json"],
        "",
    )
    .await;
    assert_eq!(output.status.code(), Some(5), "{}", stderr(&output));
    let result = messages(&output).pop().unwrap();
    assert_eq!(result["subtype"], "error_awaiting_decision", "{result}");
    assert!(
        result.to_string().contains("plan-alice-1"),
        "the result names the request: {result}"
    );
    let run_id = result["session_id"].as_str().unwrap();
    let store = open_store(dir.path());
    assert_eq!(
        store.run(run_id).await.unwrap().unwrap().status.as_str(),
        "awaiting_decision"
    );
    assert!(!dir.path().join("hello.txt").exists());
}

/// `--mcp-config`'s servers are the session's, the user's own: they start in a project nobody
/// trusted, beside the user's configured servers or, with `--strict-mcp-config`, alone; the
/// model's call reaches the server. One muster cannot start as given exits 2 naming it.
#[tokio::test(flavor = "multi_thread")]
async fn mcp_config_servers_start_without_project_trust_and_strict_keeps_only_them() {
    let dir = project(&[]);
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let server = super::common::filesystem_server();
    // HOME is the project: a user-scope server of ~/.claude.json.
    std::fs::write(
        root.join(".claude.json"),
        json!({"mcpServers": {"user": {"command": "node", "args": [&server, &root]}}}).to_string(),
    )
    .unwrap();
    let config =
        json!({"mcpServers": {"mine": {"command": "node", "args": [&server, &root]}}}).to_string();
    let listing = || {
        fake(vec![
            ScriptEntry::reply(
                "main",
                1,
                vec![tool("mcp__mine__list_directory", json!({"path": root}))],
            ),
            ScriptEntry::reply("main", 2, vec![Block::text("Listed.")]),
        ])
    };
    let run = async |base: &str, strict: bool| {
        let mut args = vec![
            "-p",
            "List the project.",
            "--output-format",
            "json",
            "--permission-mode",
            "bypassPermissions",
            "--mcp-config",
            &config,
        ];
        if strict {
            args.push("--strict-mcp-config");
        }
        claude(&root, base, &args, "").await
    };
    let fake = listing().await;
    let output = run(&fake.base_url(), false).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let result = messages(&output).pop().unwrap();
    assert_eq!(result["result"], "Listed.", "{result}");
    let asked = fake.requests();
    let tools = asked[0].body["tools"].to_string();
    assert!(tools.contains("mcp__mine__list_directory"), "{tools}");
    assert!(tools.contains("mcp__user__list_directory"), "{tools}");
    assert!(
        asked[1].body["messages"].to_string().contains("README.md"),
        "the server's listing reached the model"
    );

    let strict = listing().await;
    let output = run(&strict.base_url(), true).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let tools = strict.requests()[0].body["tools"].to_string();
    assert!(tools.contains("mcp__mine__list_directory"), "{tools}");
    assert!(!tools.contains("mcp__user__"), "strict: {tools}");

    let bad = json!({"mcpServers": {"old": {"type": "sse", "url": "http://127.0.0.1:9/sse"}}})
        .to_string();
    let output = claude(
        &root,
        &fake.base_url(),
        &["-p", "Hi.", "--mcp-config", &bad],
        "",
    )
    .await;
    assert_eq!(output.status.code(), Some(2));
    let said = stderr(&output);
    assert!(
        said.contains("--mcp-config") && said.contains("`old`"),
        "{said}"
    );
}
