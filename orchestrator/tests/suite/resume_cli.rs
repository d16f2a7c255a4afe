//! `muster resume` after `kill -9`, budgets, plan recovery and fork, through the binary against
//! `muster-fake-llm` over real HTTP.
//!
//! The crash test runs a scripted single-agent run once uninterrupted, then, for every K, starts
//! the same run as a real child printing stream-json (each line is a durable fact), kills it
//! with SIGKILL right after its K-th line, and finishes it with `muster resume`. Tests wait on
//! events (lines read from the child's stdout, process exit), never on sleeps.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use muster_fake_llm::{Block, FakeLlm, ScriptEntry};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::common::{GUARD, lines, open_store, output, stderr, transcript};

const INTERRUPTED: &str = "interrupted by a crash; inspect the workspace before retrying";
const PLAN: &str = "## Goal\nMark.\n## Steps\n1. Append two and three to marker.txt\n2. Write out.txt\n## Files\nmarker.txt\nout.txt\n## Tests\nnone\n## Risks\nnone\n";
pub(super) const MARKER_LINES: [&str; 3] = ["one", "two", "three"];

/// A project whose `policy.toml` approves every plan up to `bypassPermissions`.
pub(super) fn project() -> tempfile::TempDir {
    super::common::project(&[(
        "policy.toml",
        "approve_all = true\nmax_mode = \"bypassPermissions\"\n",
    )])
}

/// The shared command, killed when dropped: a run killed mid-way never outlives its test.
fn command(dir: &Path, args: &[&str]) -> tokio::process::Command {
    let mut command = super::common::command(dir, args);
    command.kill_on_drop(true);
    command
}

pub(super) async fn muster(dir: &Path, args: &[&str]) -> Output {
    output(command(dir, args)).await
}

fn bash(line: &str) -> Block {
    Block::tool_use(
        "Bash",
        json!({"command": format!("echo {line} >> marker.txt")}),
    )
}

/// Bash (side effect) → a read-only `Plan` subagent (its own requests; a crash while it works
/// gives its parent an error result) → EnterPlanMode → ExitPlanMode (a policy approves: a
/// request, a decision, a response mail acked) → Bash + Write → Bash → done.
pub(super) fn crash_script() -> Vec<ScriptEntry> {
    vec![
        ScriptEntry::reply("main", 1, vec![Block::text("First."), bash("one")]),
        ScriptEntry::reply(
            "main",
            2,
            vec![Block::tool_use(
                "Agent",
                json!({"description": "read", "prompt": "Read README.md", "subagent_type": "Plan"}),
            )],
        ),
        ScriptEntry::reply(
            "main.sub-1",
            1,
            vec![Block::tool_use("Read", json!({"file_path": "README.md"}))],
        ),
        ScriptEntry::reply("main.sub-1", 2, vec![Block::text("README.md says hello.")]),
        ScriptEntry::reply("main", 3, vec![Block::tool_use("EnterPlanMode", json!({}))]),
        ScriptEntry::reply(
            "main",
            4,
            vec![Block::tool_use("ExitPlanMode", json!({"plan": PLAN}))],
        ),
        ScriptEntry::reply(
            "main",
            5,
            vec![
                bash("two"),
                Block::tool_use(
                    "Write",
                    json!({"file_path": "out.txt", "content": "written once\n"}),
                ),
            ],
        ),
        ScriptEntry::reply("main", 6, vec![bash("three")]),
        ScriptEntry::reply("main", 7, vec![Block::text("All marked.")]),
    ]
}

pub(super) fn run_args(base: &str) -> Vec<String> {
    [
        "run",
        "-p",
        "Mark the file.",
        "--permission-mode",
        "bypassPermissions",
        "--approver",
        "policy:policy.toml",
        "--base-url",
        base,
        "--output",
        "stream-json",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// Runs `args` as a child and kills it with SIGKILL right after its `kill_at`-th stdout line
/// (`None`: lets it finish). Gives back the lines read and the exit status code.
pub(super) async fn run_killed_at(
    dir: &Path,
    args: &[String],
    kill_at: Option<usize>,
) -> (Vec<Value>, i32) {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = command(dir, &args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let read = async {
        while let Some(line) = reader.next_line().await.unwrap() {
            seen.push(serde_json::from_str::<Value>(&line).unwrap());
            if Some(seen.len()) == kill_at {
                child.start_kill().unwrap();
                break;
            }
        }
        child.wait().await.unwrap()
    };
    let status = tokio::time::timeout(GUARD, read)
        .await
        .expect("guard timeout");
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .unwrap_or_else(|| -status.signal().unwrap_or(0));
    (seen, code)
}

pub(super) fn marker(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("marker.txt"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn plan_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join(".muster/plans"))
        .map(|entries| entries.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    files.sort();
    files
}

/// The marker line a Bash tool_use appends, by its input.
fn marker_line_of(input: &Value) -> Option<String> {
    let command = input["command"].as_str()?;
    let line = command
        .strip_prefix("echo ")?
        .strip_suffix(" >> marker.txt")?;
    Some(line.to_owned())
}

/// The Bash calls of a transcript whose result is the interrupted error, as marker lines.
fn interrupted_bash_lines(records: &[Value]) -> Vec<String> {
    let mut inputs = std::collections::BTreeMap::new();
    for record in records {
        if record["type"] == "message" {
            for block in record["message"]["content"]
                .as_array()
                .into_iter()
                .flatten()
            {
                if block["type"] == "tool_use" && block["name"] == "Bash" {
                    inputs.insert(
                        block["id"].as_str().unwrap().to_owned(),
                        block["input"].clone(),
                    );
                }
            }
        }
    }
    records
        .iter()
        .filter(|r| r["type"] == "tool_call" && r["tool"] == "Bash" && r["content"] == INTERRUPTED)
        .filter_map(|r| inputs.get(r["tool_use_id"].as_str().unwrap()))
        .filter_map(marker_line_of)
        .collect()
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn a_run_killed_at_each_durable_event_is_finished_by_resume() {
    // The uninterrupted run: what every resumed run must end with.
    let reference = project();
    let fake = FakeLlm::start(crash_script()).await.unwrap();
    let (reference_lines, code) =
        run_killed_at(reference.path(), &run_args(&fake.base_url()), None).await;
    assert_eq!(code, 0, "{reference_lines:?}");
    fake.verify().unwrap();
    let events = reference_lines.len();
    assert!(events >= 12, "{reference_lines:?}");
    assert!(
        reference_lines.iter().any(|e| e["agent"] == "main.sub-1"),
        "the subagent's steps are durable events too, so some K fall inside it: {reference_lines:?}"
    );
    assert_eq!(marker(reference.path()), MARKER_LINES);
    let reference_out = std::fs::read_to_string(reference.path().join("out.txt")).unwrap();
    let reference_plans = plan_files(reference.path());
    assert_eq!(reference_plans.len(), 1);
    assert_eq!(std::fs::read_to_string(&reference_plans[0]).unwrap(), PLAN);

    // Every K but the last line (run_finished) itself.
    for kill_at in 1..events {
        let dir = project();
        let fake = FakeLlm::start(crash_script()).await.unwrap();
        let (before, code) =
            run_killed_at(dir.path(), &run_args(&fake.base_url()), Some(kill_at)).await;
        assert_eq!(before.len(), kill_at);
        assert_eq!(code, -9, "K={kill_at}: killed with SIGKILL");
        let run_id = before[0]["run_id"].as_str().unwrap().to_owned();
        let store = open_store(dir.path());
        let status = store.run(&run_id).await.unwrap().unwrap().status;
        if status.is_finished() {
            // The kill landed after the run's ending was committed (only its last line was
            // unprinted): nothing is left to resume, and nothing ran twice.
            assert_eq!(status.as_str(), "completed", "K={kill_at}");
            assert_eq!(marker(dir.path()), MARKER_LINES, "K={kill_at}");
            continue;
        }

        let resumed = muster(dir.path(), &["resume", "--output", "stream-json"]).await;
        assert_eq!(
            resumed.status.code(),
            Some(0),
            "K={kill_at}: {}{}",
            stderr(&resumed),
            String::from_utf8_lossy(&resumed.stdout)
        );
        let after = lines(&resumed);
        let finished = after.last().unwrap();
        assert_eq!(finished["type"], "run_finished", "K={kill_at}");
        assert_eq!(finished["run_id"], run_id.as_str(), "K={kill_at}");
        assert_eq!(finished["result"], "All marked.", "K={kill_at}");
        assert!(
            fake.failures().is_empty(),
            "K={kill_at}: {:?}",
            fake.failures()
        );

        let store = open_store(dir.path());
        let records = transcript(store.as_ref(), &run_id, "main").await;
        let interrupted = interrupted_bash_lines(&records);
        assert!(interrupted.len() <= 1, "K={kill_at}: {interrupted:?}");

        // No side-effecting tool executed twice: no marker line twice.
        let lines_now = marker(dir.path());
        for line in MARKER_LINES {
            let count = lines_now.iter().filter(|l| *l == line).count();
            assert!(
                count <= 1,
                "K={kill_at}: {line} ran {count} times: {lines_now:?}"
            );
        }

        // No tool call resolved twice; no mail acked twice.
        let mut resolved = std::collections::BTreeSet::new();
        for record in records.iter().filter(|r| r["type"] == "tool_call") {
            let id = record["tool_use_id"].as_str().unwrap();
            assert!(
                resolved.insert(id.to_owned()),
                "K={kill_at}: {id} resolved twice"
            );
        }
        let mail = store.messages(&run_id, Some("main")).await.unwrap();
        assert_eq!(
            mail.len(),
            1,
            "K={kill_at}: one plan decision for main: {mail:?}"
        );
        assert!(
            mail.iter().all(|m| m.acked_at.is_some()),
            "K={kill_at}: {mail:?}"
        );
        let applied = records
            .iter()
            .filter(|r| {
                r["type"] == "mode" && r["reason"].as_str().unwrap().contains("approved by")
            })
            .count();
        assert_eq!(
            applied, 1,
            "K={kill_at}: the approval mail was applied once"
        );

        // No decision made twice: one request, one response, one approval_decided line.
        let requests = store.requests(&run_id).await.unwrap();
        assert_eq!(requests.len(), 1, "K={kill_at}: {requests:?}");
        assert!(requests[0].response.is_some(), "K={kill_at}");
        let decided = before
            .iter()
            .chain(after.iter())
            .filter(|e| e["type"] == "approval_decided")
            .count();
        assert!(
            decided <= 1,
            "K={kill_at}: approval_decided printed {decided} times"
        );

        // The final workspace equals the uninterrupted run's, except that a Bash call cut
        // between its tool_started and its result may have left its line out, and shows the
        // interrupted error.
        let expected: Vec<&str> = MARKER_LINES
            .iter()
            .copied()
            .filter(|line| {
                !interrupted.iter().any(|i| i == line) || lines_now.iter().any(|l| l == line)
            })
            .collect();
        assert_eq!(
            lines_now, expected,
            "K={kill_at}: interrupted {interrupted:?}"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("out.txt")).unwrap(),
            reference_out,
            "K={kill_at}"
        );
        let plans = plan_files(dir.path());
        assert_eq!(plans.len(), 1, "K={kill_at}: {plans:?}");
        assert_eq!(
            std::fs::read_to_string(&plans[0]).unwrap(),
            PLAN,
            "K={kill_at}"
        );
        let status = store.run(&run_id).await.unwrap().unwrap().status;
        assert_eq!(status.as_str(), "completed", "K={kill_at}");
    }
}

/// The policy that approves the run's plan is the copy stored when the run started: edited
/// between a crash and the resume (to one that would reject the plan), it still approves, and
/// the resume says the file changed.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn a_policy_edited_between_a_crash_and_the_resume_decides_as_stored() {
    let dir = project();
    let fake = FakeLlm::start(crash_script()).await.unwrap();
    let (before, code) = run_killed_at(dir.path(), &run_args(&fake.base_url()), Some(1)).await;
    assert_eq!(code, -9, "{before:?}");
    let run_id = before[0]["run_id"].as_str().unwrap().to_owned();
    std::fs::write(
        dir.path().join("policy.toml"),
        "max_files = 0
",
    )
    .unwrap();
    let resumed = muster(
        dir.path(),
        &[
            "resume",
            &run_id,
            "--base-url",
            &fake.base_url(),
            "--output",
            "json",
        ],
    )
    .await;
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    assert!(
        stderr(&resumed).contains("policy.toml changed since this run started"),
        "{}",
        stderr(&resumed)
    );
    let store = open_store(dir.path());
    let requests = store.requests(&run_id).await.unwrap();
    let response = requests[0].response.as_ref().unwrap();
    assert_eq!(response.stored_body()["approved"], true, "{response:?}");
    assert!(
        response.stored_body()["rule"]
            .as_str()
            .unwrap()
            .contains("approve_all"),
        "{response:?}"
    );
    assert_eq!(marker(dir.path()), MARKER_LINES);
}

/// A crash inside a Bash call (the command kills `muster` itself, after its side effect): the
/// call is not run again on resume; the model gets the interrupted error and goes on.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn a_crash_inside_a_bash_call_gives_the_interrupted_error_and_never_reruns_it() {
    let dir = project();
    killing_muster_from_bash(dir.path());
    let fake = FakeLlm::start(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![Block::tool_use(
                "Bash",
                json!({"command": "echo crash >> marker.txt; kill -9 $PPID"}),
            )],
        ),
        ScriptEntry::reply("main", 2, vec![bash("after")]),
        ScriptEntry::reply("main", 3, vec![Block::text("Recovered.")]),
    ])
    .await
    .unwrap();
    let (before, code) = run_killed_at(dir.path(), &run_args(&fake.base_url()), None).await;
    assert_eq!(code, -9, "the command killed muster: {before:?}");
    let run_id = before[0]["run_id"].as_str().unwrap().to_owned();
    assert_eq!(marker(dir.path()), ["crash"]);

    let store = open_store(dir.path());
    let listed = muster(dir.path(), &["runs", "--json"]).await;
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("interrupted"),
        "a running run whose lock is free shows as interrupted: {}",
        String::from_utf8_lossy(&listed.stdout)
    );
    let resumed = muster(dir.path(), &["resume", &run_id, "--output", "stream-json"]).await;
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    assert_eq!(lines(&resumed).last().unwrap()["result"], "Recovered.");
    assert_eq!(
        marker(dir.path()),
        ["crash", "after"],
        "the crashed call ran once"
    );
    let records = transcript(store.as_ref(), &run_id, "main").await;
    let interrupted = records
        .iter()
        .filter(|r| r["type"] == "tool_call" && r["content"] == INTERRUPTED)
        .count();
    assert_eq!(interrupted, 1);
    assert!(
        records
            .iter()
            .any(|r| r["type"] == "tool_started" && r["process_group"].is_i64()),
        "the Bash call's process group was recorded before it ran"
    );
    // The model saw the interrupted error as the call's result.
    let turn2 = fake
        .requests()
        .into_iter()
        .find(|r| r.turn == Some(2))
        .unwrap();
    assert!(turn2.body.to_string().contains(INTERRUPTED));
    fake.verify().unwrap();
}

fn with_usage(mut entry: ScriptEntry, input: u64, output: u64) -> ScriptEntry {
    if let Some(reply) = entry.reply.as_mut() {
        reply.usage = Some(muster_fake_llm::UsageSpec {
            input_tokens: Some(input),
            output_tokens: Some(output),
            cache_read_input_tokens: Some(0),
            cache_creation_input_tokens: Some(0),
        });
    }
    entry
}

/// These tests crash muster from inside a Bash call (`kill -9 $PPID`), which the Bash sandbox
/// forbids (a confined command cannot signal processes outside it): they turn it off.
fn killing_muster_from_bash(dir: &Path) {
    settings(dir, "[sandbox]\nmode = \"off\"\n");
}

/// Writes the project's settings, and trusts the project as its user would (a project's own
/// `[sandbox] mode = "off"` takes effect only in a trusted project).
fn settings(dir: &Path, text: &str) {
    std::fs::write(dir.join(".muster/settings.toml"), text).unwrap();
    super::common::trust_blocking(dir);
}

async fn run_json(dir: &Path, base: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "run",
        "-p",
        "Work.",
        "--permission-mode",
        "bypassPermissions",
        "--base-url",
        base,
        "--output",
        "stream-json",
    ];
    args.extend_from_slice(extra);
    muster(dir, &args).await
}

#[tokio::test(flavor = "multi_thread")]
async fn no_model_request_is_sent_once_the_turn_budget_is_reached() {
    let dir = project();
    settings(dir.path(), "[budgets.agent]\nturns = 2\n");
    let fake = FakeLlm::start(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![Block::tool_use("Read", json!({"file_path": "README.md"}))],
        ),
        ScriptEntry::reply("main", 2, vec![bash("two")]),
        ScriptEntry::reply("main", 3, vec![Block::text("never asked")]),
    ])
    .await
    .unwrap();
    let output = run_json(dir.path(), &fake.base_url(), &[]).await;
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let events = lines(&output);
    let finished = events.last().unwrap();
    assert_eq!(finished["type"], "run_finished");
    assert_eq!(finished["status"], "budget");
    assert_eq!(finished["exit_code"], 3);
    assert_eq!(finished["budget"], "budgets.agent.turns");
    let reason = finished["reason"].as_str().unwrap();
    assert!(
        reason.contains("turn budget (budgets.agent.turns)"),
        "{reason}"
    );
    assert!(reason.contains("limit of 2"), "{reason}");
    // Two requests, and the second response's tool call ran (it crossed nothing).
    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert_eq!(marker(dir.path()), ["two"]);
    assert_eq!(fake.unused_entries(), [2]);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_response_that_crosses_the_token_budget_stops_the_agent_before_its_tool_calls() {
    let dir = project();
    settings(dir.path(), "[budgets.run]\ntokens = 1000\n");
    let fake = FakeLlm::start(vec![
        with_usage(
            ScriptEntry::reply(
                "main",
                1,
                vec![Block::tool_use("Read", json!({"file_path": "README.md"}))],
            ),
            400,
            100,
        ),
        with_usage(
            ScriptEntry::reply("main", 2, vec![bash("crossed")]),
            600,
            100,
        ),
        ScriptEntry::reply("main", 3, vec![Block::text("never asked")]),
    ])
    .await
    .unwrap();
    let output = run_json(dir.path(), &fake.base_url(), &[]).await;
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let events = lines(&output);
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "agent_started",
            "model_turn",
            "tool_call",
            "model_turn",
            "run_finished"
        ],
        "nothing runs after the crossing response"
    );
    let finished = events.last().unwrap();
    assert_eq!(finished["status"], "budget");
    assert_eq!(finished["exit_code"], 3);
    let reason = finished["reason"].as_str().unwrap();
    assert!(
        reason.contains("the run's token budget (budgets.run.tokens): 1200 tokens"),
        "{reason}"
    );
    assert_eq!(fake.requests().len(), 2, "no request follows the crossing");
    assert!(
        !dir.path().join("marker.txt").exists(),
        "the crossing response's Bash call never ran"
    );
    let store = open_store(dir.path());
    let run_id = finished["run_id"].as_str().unwrap();
    let run = store.run(run_id).await.unwrap().unwrap();
    assert_eq!(run.status.as_str(), "budget");
}

/// The ledger is rebuilt from the records' usage on resume: tokens spent before the stop
/// count against the budget after it.
#[tokio::test(flavor = "multi_thread")]
async fn resume_restores_the_spend_from_the_records() {
    let dir = project();
    settings(dir.path(), "[budgets.agent]\ntokens = 1000\n");
    let fake = FakeLlm::start(vec![
        with_usage(
            ScriptEntry::reply(
                "main",
                1,
                vec![Block::tool_use("ExitPlanMode", json!({"plan": PLAN}))],
            ),
            500,
            100,
        ),
        with_usage(ScriptEntry::reply("main", 2, vec![bash("two")]), 400, 100),
        ScriptEntry::reply("main", 3, vec![Block::text("never asked")]),
    ])
    .await
    .unwrap();
    let base = fake.base_url();
    let first = muster(
        dir.path(),
        &[
            "run",
            "-p",
            "Plan.",
            "--permission-mode",
            "plan",
            "--base-url",
            &base,
            "--output",
            "json",
        ],
    )
    .await;
    assert_eq!(first.status.code(), Some(5), "{}", stderr(&first));
    let approve = muster(
        dir.path(),
        &["approve", "plan-main-1", "--mode", "bypassPermissions"],
    )
    .await;
    assert_eq!(approve.status.code(), Some(0), "{}", stderr(&approve));
    let resumed = muster(dir.path(), &["resume", "--output", "stream-json"]).await;
    assert_eq!(resumed.status.code(), Some(3), "{}", stderr(&resumed));
    let finished = lines(&resumed).pop().unwrap();
    let reason = finished["reason"].as_str().unwrap();
    assert!(
        reason.contains("agent `main`'s token budget (budgets.agent.tokens): 1100 tokens"),
        "{reason}"
    );
    assert_eq!(fake.requests().len(), 2);
    assert!(!dir.path().join("marker.txt").exists());
}

/// Deletes every plan snapshot record of a run (as if the store had lost them).
fn delete_snapshots(dir: &Path, run_id: &str) -> usize {
    let connection = rusqlite::Connection::open(dir.join(".muster/muster.db")).unwrap();
    connection
        .execute(
            "DELETE FROM agent_records WHERE run_id = ?1 AND body LIKE '%\"plan_snapshot\"%'",
            [run_id],
        )
        .unwrap()
}

/// A plan-mode run with the human approver: stops with exit 5 after writing the plan.
async fn plan_then_stop(dir: &Path, base: &str) -> (String, PathBuf) {
    let first = muster(
        dir,
        &[
            "run",
            "-p",
            "Plan.",
            "--permission-mode",
            "plan",
            "--base-url",
            base,
            "--output",
            "json",
        ],
    )
    .await;
    assert_eq!(first.status.code(), Some(5), "{}", stderr(&first));
    let finished = lines(&first).pop().unwrap();
    let plan_file = PathBuf::from(finished["plan_file"].as_str().unwrap());
    assert_eq!(std::fs::read_to_string(&plan_file).unwrap(), PLAN);
    (finished["run_id"].as_str().unwrap().to_owned(), plan_file)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_plan_file_is_restored_from_the_snapshot_then_from_exit_plan_mode() {
    let dir = project();
    let fake = FakeLlm::start(vec![ScriptEntry::reply(
        "main",
        1,
        vec![Block::tool_use("ExitPlanMode", json!({"plan": PLAN}))],
    )])
    .await
    .unwrap();
    let (run_id, plan_file) = plan_then_stop(dir.path(), &fake.base_url()).await;

    // 1. From the store's snapshot.
    std::fs::remove_file(&plan_file).unwrap();
    let again = muster(dir.path(), &["resume", &run_id, "--output", "json"]).await;
    assert_eq!(again.status.code(), Some(5), "{}", stderr(&again));
    assert_eq!(std::fs::read_to_string(&plan_file).unwrap(), PLAN);

    // 2. With the snapshots gone too: from the ExitPlanMode input in the history.
    std::fs::remove_file(&plan_file).unwrap();
    assert!(delete_snapshots(dir.path(), &run_id) >= 1);
    let again = muster(dir.path(), &["resume", &run_id, "--output", "json"]).await;
    assert_eq!(again.status.code(), Some(5), "{}", stderr(&again));
    assert_eq!(std::fs::read_to_string(&plan_file).unwrap(), PLAN);
    assert_eq!(fake.requests().len(), 1, "the model was not asked again");
}

/// After an approval with an edited plan and `clear_context`, the newest plan in the history
/// is the one the fresh context carries: with the file and the snapshots gone, it comes back.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn a_missing_plan_file_is_restored_from_the_plan_carried_after_a_context_reset() {
    let dir = project();
    killing_muster_from_bash(dir.path());
    let fake = FakeLlm::start(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![Block::tool_use("ExitPlanMode", json!({"plan": PLAN}))],
        ),
        // The command kills muster itself: the run is interrupted after the reset.
        ScriptEntry::reply(
            "main",
            2,
            vec![Block::tool_use("Bash", json!({"command": "kill -9 $PPID"}))],
        ),
        ScriptEntry::reply("main", 3, vec![Block::text("Done.")]),
    ])
    .await
    .unwrap();
    let (run_id, plan_file) = plan_then_stop(dir.path(), &fake.base_url()).await;
    let edited = format!("{PLAN}\n## Notes\nThe edited plan.\n");
    std::fs::write(dir.path().join("edited.md"), &edited).unwrap();
    let approve = muster(
        dir.path(),
        &[
            "approve",
            "plan-main-1",
            "--mode",
            "bypassPermissions",
            "--plan-file",
            "edited.md",
            "--clear-context",
        ],
    )
    .await;
    assert_eq!(approve.status.code(), Some(0), "{}", stderr(&approve));
    let crashed = muster(dir.path(), &["resume", &run_id, "--output", "json"]).await;
    assert_eq!(crashed.status.code(), None, "killed: {}", stderr(&crashed));
    let turn2 = fake
        .requests()
        .into_iter()
        .find(|r| r.turn == Some(2))
        .unwrap();
    assert!(
        turn2
            .body
            .to_string()
            .contains("Implement this approved plan"),
        "the context was reset with the plan"
    );

    std::fs::remove_file(&plan_file).unwrap();
    assert!(delete_snapshots(dir.path(), &run_id) >= 2);
    let finished = muster(dir.path(), &["resume", &run_id, "--output", "json"]).await;
    assert_eq!(finished.status.code(), Some(0), "{}", stderr(&finished));
    assert_eq!(std::fs::read_to_string(&plan_file).unwrap(), edited);
    fake.verify().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forked_run_and_its_original_continue_independently_with_distinct_plan_files() {
    let dir = project();
    let write = |name: &str, text: &str| {
        Block::tool_use("Write", json!({"file_path": name, "content": text}))
    };
    let original_model = FakeLlm::start(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![Block::tool_use("ExitPlanMode", json!({"plan": PLAN}))],
        ),
        ScriptEntry::reply("main", 2, vec![write("original.txt", "original\n")]),
        ScriptEntry::reply("main", 3, vec![Block::text("Original done.")]),
    ])
    .await
    .unwrap();
    let fork_model = FakeLlm::start(vec![
        ScriptEntry::reply("main", 2, vec![write("fork.txt", "fork\n")]),
        ScriptEntry::reply("main", 3, vec![Block::text("Fork done.")]),
    ])
    .await
    .unwrap();
    let (original, original_plan) = plan_then_stop(dir.path(), &original_model.base_url()).await;

    let forked = muster(dir.path(), &["fork", &original]).await;
    assert_eq!(forked.status.code(), Some(0), "{}", stderr(&forked));
    let text = String::from_utf8_lossy(&forked.stdout).into_owned();
    let fork = text
        .split(" as ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap()
        .to_owned();
    assert_ne!(fork, original);
    let plans = plan_files(dir.path());
    assert_eq!(plans.len(), 2, "{plans:?}");
    let fork_plan = plans.iter().find(|p| **p != original_plan).unwrap().clone();
    assert_eq!(std::fs::read_to_string(&fork_plan).unwrap(), PLAN);

    // Each run is approved with its own edit of the plan.
    for (run, note) in [(&original, "original"), (&fork, "fork")] {
        let edited = dir.path().join(format!("{note}-plan.md"));
        std::fs::write(&edited, format!("{PLAN}\n## Notes\n{note}\n")).unwrap();
        let approve = muster(
            dir.path(),
            &[
                "approve",
                "plan-main-1",
                "--run",
                run,
                "--mode",
                "acceptEdits",
                "--plan-file",
                edited.to_str().unwrap(),
            ],
        )
        .await;
        assert_eq!(approve.status.code(), Some(0), "{}", stderr(&approve));
    }
    let fork_base = fork_model.base_url();
    let resumed_fork = muster(
        dir.path(),
        &[
            "resume",
            &fork,
            "--base-url",
            &fork_base,
            "--output",
            "json",
        ],
    )
    .await;
    assert_eq!(
        resumed_fork.status.code(),
        Some(0),
        "{}",
        stderr(&resumed_fork)
    );
    assert_eq!(lines(&resumed_fork)[0]["result"], "Fork done.");
    let resumed_original = muster(dir.path(), &["resume", &original, "--output", "json"]).await;
    assert_eq!(
        resumed_original.status.code(),
        Some(0),
        "{}",
        stderr(&resumed_original)
    );
    assert_eq!(lines(&resumed_original)[0]["result"], "Original done.");

    assert_eq!(
        std::fs::read_to_string(&original_plan).unwrap(),
        format!("{PLAN}\n## Notes\noriginal\n")
    );
    assert_eq!(
        std::fs::read_to_string(&fork_plan).unwrap(),
        format!("{PLAN}\n## Notes\nfork\n")
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("original.txt")).unwrap(),
        "original\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("fork.txt")).unwrap(),
        "fork\n"
    );
    assert!(
        fork_model
            .requests()
            .iter()
            .all(|r| r.run_id.as_deref() == Some(fork.as_str()))
    );
    assert!(
        original_model
            .requests()
            .iter()
            .all(|r| r.run_id.as_deref() == Some(original.as_str()))
    );
    original_model.verify().unwrap();
    fork_model.verify().unwrap();
    let store = open_store(dir.path());
    for run in [&original, &fork] {
        let status = store.run(run).await.unwrap().unwrap().status;
        assert_eq!(status.as_str(), "completed", "{run}");
    }
}

/// The `tool_use` ids and `tool_result` ids of a recorded request's messages: every result
/// must answer a call made before it.
fn assert_no_orphan_tool_results(body: &Value) {
    let mut calls = std::collections::BTreeSet::new();
    for message in body["messages"].as_array().unwrap() {
        for block in message["content"].as_array().into_iter().flatten() {
            match block["type"].as_str() {
                Some("tool_use") => {
                    calls.insert(block["id"].as_str().unwrap().to_owned());
                }
                Some("tool_result") => {
                    let id = block["tool_use_id"].as_str().unwrap();
                    assert!(calls.contains(id), "orphan tool result {id}: {body}");
                }
                _ => {}
            }
        }
    }
}

/// A scripted long run crosses the compaction threshold (window 20,000, max output 1,000: the
/// threshold is 6,000 tokens): the model is asked for a handoff note (`x-muster-purpose:
/// compact`, the next turn index), the next request carries the note and the plan re-read
/// from disk and no orphan tool result; killed after that, the resumed run continues from the
/// compacted context.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn a_long_run_is_compacted_and_resume_continues_from_the_compacted_context() {
    let dir = project();
    settings(
        dir.path(),
        "[models.\"claude-sonnet-4-5\"]\ncontext_window = 20000\nmax_output = 1000\n[sandbox]\nmode = \"off\"\n",
    );
    let note = "HANDOFF: the plan is approved and README.md was read.";
    let mut compact = with_usage(
        ScriptEntry::reply("main", 3, vec![Block::text(note)]),
        2000,
        40,
    );
    compact.purpose = Some("compact".into());
    let fake = FakeLlm::start(vec![
        with_usage(
            ScriptEntry::reply(
                "main",
                1,
                vec![Block::tool_use("ExitPlanMode", json!({"plan": PLAN}))],
            ),
            300,
            50,
        ),
        with_usage(
            ScriptEntry::reply(
                "main",
                2,
                vec![Block::tool_use("Read", json!({"file_path": "README.md"}))],
            ),
            7000,
            50,
        ),
        compact,
        with_usage(
            ScriptEntry::reply(
                "main",
                4,
                vec![Block::tool_use("Bash", json!({"command": "kill -9 $PPID"}))],
            ),
            900,
            20,
        ),
        with_usage(
            ScriptEntry::reply("main", 5, vec![Block::text("Done.")]),
            900,
            20,
        ),
    ])
    .await
    .unwrap();
    let base = fake.base_url();
    let args = [
        "run",
        "-p",
        "Plan, read, then finish.",
        "--permission-mode",
        "plan",
        "--approver",
        "policy:policy.toml",
        "--model",
        "claude-sonnet-4-5",
        "--base-url",
        &base,
        "--output",
        "stream-json",
    ];
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    let (before, code) = run_killed_at(dir.path(), &args, None).await;
    assert_eq!(code, -9, "the Bash call killed muster: {before:?}");
    let run_id = before[0]["run_id"].as_str().unwrap().to_owned();

    let requests = fake.requests();
    let compaction = requests.iter().find(|r| r.turn == Some(3)).unwrap();
    assert_eq!(compaction.purpose.as_deref(), Some("compact"));
    assert!(compaction.body.to_string().contains("<compaction-request>"));
    let after = requests.iter().find(|r| r.turn == Some(4)).unwrap();
    assert_eq!(after.purpose, None);
    let body = after.body.to_string();
    assert!(body.contains(note), "the summary follows: {body}");
    assert!(
        body.contains("1. Append two and three to marker.txt"),
        "the plan, re-read"
    );
    assert_no_orphan_tool_results(&after.body);

    // Plan recovery from the plan reference kept by compaction: the file, the snapshots and
    // the ExitPlanMode call are gone; the compacted context still holds the plan.
    let plan_file = plan_files(dir.path()).pop().unwrap();
    std::fs::remove_file(&plan_file).unwrap();
    assert!(delete_snapshots(dir.path(), &run_id) >= 1);
    let connection = rusqlite::Connection::open(dir.path().join(".muster/muster.db")).unwrap();
    let deleted = connection
        .execute(
            "DELETE FROM agent_records WHERE run_id = ?1 AND body LIKE '%\"type\":\"message\"%' \
             AND body LIKE '%\"ExitPlanMode\"%'",
            [&run_id],
        )
        .unwrap();
    assert_eq!(deleted, 1);
    drop(connection);

    let resumed = muster(dir.path(), &["resume", &run_id, "--output", "json"]).await;
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    assert_eq!(lines(&resumed)[0]["result"], "Done.");
    let last = fake
        .requests()
        .into_iter()
        .find(|r| r.turn == Some(5))
        .unwrap();
    let body = last.body.to_string();
    assert!(
        body.contains(note),
        "resume continues from the compacted context"
    );
    assert!(
        !body.contains("<compaction-request>"),
        "the handoff prompt is not part of the context"
    );
    assert_no_orphan_tool_results(&last.body);
    assert_eq!(std::fs::read_to_string(&plan_file).unwrap(), PLAN);
    let store = open_store(dir.path());
    let records = transcript(store.as_ref(), &run_id, "main").await;
    assert_eq!(
        records.iter().filter(|r| r["type"] == "compacted").count(),
        1
    );
    fake.verify().unwrap();
}

/// Cost at the catalogue's prices (here $1,000 per million tokens: $0.001 a token).
#[tokio::test(flavor = "multi_thread")]
async fn the_response_that_crosses_the_cost_budget_stops_the_run_with_exit_3() {
    let dir = project();
    settings(
        dir.path(),
        "[models.\"claude-sonnet-4-5\"]\nprice_in = 1000.0\nprice_out = 1000.0\n\
         [budgets.run]\ncost_usd = 1.0\n",
    );
    let fake = FakeLlm::start(vec![
        with_usage(ScriptEntry::reply("main", 1, vec![bash("one")]), 400, 100),
        with_usage(ScriptEntry::reply("main", 2, vec![bash("two")]), 600, 100),
        ScriptEntry::reply("main", 3, vec![Block::text("never asked")]),
    ])
    .await
    .unwrap();
    let output = run_json(
        dir.path(),
        &fake.base_url(),
        &["--model", "claude-sonnet-4-5"],
    )
    .await;
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let finished = lines(&output).pop().unwrap();
    assert_eq!(finished["status"], "budget");
    assert_eq!(finished["budget"], "budgets.run.cost_usd");
    let reason = finished["reason"].as_str().unwrap();
    assert!(
        reason.contains(
            "the run's cost budget (budgets.run.cost_usd): $1.2000 reached the limit of $1.0000"
        ),
        "{reason}"
    );
    assert_eq!(fake.requests().len(), 2, "no request follows the crossing");
    assert_eq!(
        marker(dir.path()),
        ["one"],
        "the crossing response's call never ran"
    );
}

/// `muster resume --max-duration` overrides the stored deadline; the run stops with exit 3 and
/// the reason names the deadline.
#[tokio::test(flavor = "multi_thread")]
async fn resume_with_max_duration_stops_at_the_new_deadline() {
    let dir = project();
    let fake = FakeLlm::start(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![Block::tool_use("ExitPlanMode", json!({"plan": PLAN}))],
        ),
        ScriptEntry::reply("main", 2, vec![Block::text("late")]).fault(muster_fake_llm::Fault {
            first_byte_delay_ms: 20_000,
            ..Default::default()
        }),
    ])
    .await
    .unwrap();
    let (run_id, _) = plan_then_stop(dir.path(), &fake.base_url()).await;
    let approve = muster(dir.path(), &["approve", "plan-main-1"]).await;
    assert_eq!(approve.status.code(), Some(0), "{}", stderr(&approve));
    let resumed = muster(
        dir.path(),
        &["resume", &run_id, "--max-duration", "1", "--output", "json"],
    )
    .await;
    assert_eq!(resumed.status.code(), Some(3), "{}", stderr(&resumed));
    let finished = lines(&resumed).pop().unwrap();
    assert_eq!(finished["status"], "budget");
    assert_eq!(finished["budget"], "budgets.run.duration_secs");
    let reason = finished["reason"].as_str().unwrap();
    assert!(reason.contains("the run's deadline passed"), "{reason}");
}

/// The stored absolute deadline of a run.
async fn stored_deadline(dir: &Path, run_id: &str) -> Option<i64> {
    let store = open_store(dir);
    let record = store.run(run_id).await.unwrap().unwrap();
    record.launch_options["deadline_ms"].as_i64()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// `muster resume --max-duration` stores the new duration in the run's launch options: after
/// a second crash, a resume without the flag starts that duration again from its own start
/// (the time stopped does not count).
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn a_deadline_given_to_resume_survives_a_second_crash() {
    use std::os::unix::process::ExitStatusExt;
    let dir = project();
    killing_muster_from_bash(dir.path());
    let kill = |turn| {
        ScriptEntry::reply(
            "main",
            turn,
            vec![Block::tool_use("Bash", json!({"command": "kill -9 $PPID"}))],
        )
    };
    let fake = FakeLlm::start(vec![
        kill(1),
        kill(2),
        ScriptEntry::reply("main", 3, vec![Block::text("Done.")]),
    ])
    .await
    .unwrap();
    let (seen, code) = run_killed_at(dir.path(), &run_args(&fake.base_url()), None).await;
    assert_eq!(code, -9, "the first Bash call killed muster: {seen:?}");
    let run_id = seen[0]["run_id"].as_str().unwrap().to_owned();
    assert_eq!(stored_deadline(dir.path(), &run_id).await, None);

    let before = now_ms();
    let resumed = muster(
        dir.path(),
        &[
            "resume",
            &run_id,
            "--max-duration",
            "3600",
            "--output",
            "json",
        ],
    )
    .await;
    let after = now_ms();
    assert_eq!(
        resumed.status.signal(),
        Some(9),
        "the second Bash call killed muster: {}",
        stderr(&resumed)
    );
    let deadline = stored_deadline(dir.path(), &run_id)
        .await
        .expect("the new deadline is stored");
    assert!(
        (before + 3_600_000..=after + 3_600_000).contains(&deadline),
        "{before} {deadline} {after}"
    );

    let before = now_ms();
    let finished = muster(dir.path(), &["resume", &run_id, "--output", "json"]).await;
    let after = now_ms();
    assert_eq!(finished.status.code(), Some(0), "{}", stderr(&finished));
    assert_eq!(lines(&finished).pop().unwrap()["result"], "Done.");
    let restarted = stored_deadline(dir.path(), &run_id).await.unwrap();
    assert!(
        restarted > deadline && (before + 3_600_000..=after + 3_600_000).contains(&restarted),
        "a resume without --max-duration restarts the stored duration: {before} {restarted} {after}"
    );
    fake.verify().unwrap();
}

/// Moves a run's stored deadline into the past, as if it had waited stopped for longer than
/// its `--max-duration`.
fn wait_past_the_deadline(dir: &Path, run_id: &str) {
    let connection = rusqlite::Connection::open(dir.join(".muster/muster.db")).unwrap();
    let changed = connection
        .execute(
            "UPDATE runs SET launch_options = json_set(launch_options, '$.deadline_ms', ?1) \
             WHERE id = ?2",
            rusqlite::params![now_ms() - 60_000, run_id],
        )
        .unwrap();
    assert_eq!(changed, 1);
}

/// A run stopped awaiting a decision waits as long as the person takes: resumed undecided it
/// stops again with exit 5 (never `budget`), and once approved, the command `muster approve`
/// prints continues it to its end — however long ago its `--max-duration` would have passed.
#[tokio::test(flavor = "multi_thread")]
async fn time_stopped_awaiting_a_decision_never_counts_against_the_deadline() {
    let dir = project();
    let fake = FakeLlm::start(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![Block::tool_use("ExitPlanMode", json!({"plan": PLAN}))],
        ),
        ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
    ])
    .await
    .unwrap();
    let first = muster(
        dir.path(),
        &[
            "run",
            "-p",
            "Plan.",
            "--permission-mode",
            "plan",
            "--max-duration",
            "30",
            "--base-url",
            &fake.base_url(),
            "--output",
            "json",
        ],
    )
    .await;
    assert_eq!(first.status.code(), Some(5), "{}", stderr(&first));
    let run_id = lines(&first).pop().unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_past_the_deadline(dir.path(), &run_id);
    let undecided = muster(dir.path(), &["resume", &run_id, "--output", "json"]).await;
    assert_eq!(undecided.status.code(), Some(5), "{}", stderr(&undecided));
    assert_eq!(
        lines(&undecided).pop().unwrap()["status"],
        "awaiting_decision"
    );

    wait_past_the_deadline(dir.path(), &run_id);
    let approve = muster(dir.path(), &["approve", "plan-main-1"]).await;
    assert_eq!(approve.status.code(), Some(0), "{}", stderr(&approve));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&approve.stdout),
        stderr(&approve)
    );
    let printed = said
        .split('`')
        .find(|part| part.starts_with("muster resume"))
        .unwrap_or_else(|| panic!("approve names no resume command: {said}"));
    let args: Vec<&str> = printed.split_whitespace().skip(1).collect();
    let resumed = muster(dir.path(), &args).await;
    assert_eq!(
        resumed.status.code(),
        Some(0),
        "{printed}: {}",
        stderr(&resumed)
    );
    let store = open_store(dir.path());
    let run = store.run(&run_id).await.unwrap().unwrap();
    assert_eq!(run.status.as_str(), "completed");
}

/// The `[compaction]` settings reach a run: the same prompt size (7,000 tokens after turn 2)
/// compacts or not as `enabled` and `trigger_ratio` say, against the catalogue's window.
#[tokio::test(flavor = "multi_thread")]
async fn compaction_settings_decide_when_a_run_compacts() {
    // (settings, compacts): window 20,000 and max output 1,000 give 6,000 by default.
    let cases = [
        ("context_window = 20000\nmax_output = 1000\n", "", true),
        (
            "context_window = 20000\nmax_output = 1000\n",
            "[compaction]\nenabled = false\n",
            false,
        ),
        // 85 % of 100,000 is far above 7,000; a ratio of 0.05 puts it at 5,000.
        ("context_window = 100000\nmax_output = 1000\n", "", false),
        (
            "context_window = 100000\nmax_output = 1000\n",
            "[compaction]\ntrigger_ratio = 0.05\n",
            true,
        ),
    ];
    for (model, compaction, compacts) in cases {
        let dir = project();
        settings(
            dir.path(),
            &format!("[models.\"claude-sonnet-4-5\"]\n{model}{compaction}"),
        );
        let read = |turn, input| {
            with_usage(
                ScriptEntry::reply(
                    "main",
                    turn,
                    vec![Block::tool_use("Read", json!({"file_path": "README.md"}))],
                ),
                input,
                20,
            )
        };
        let mut script = vec![read(1, 300), read(2, 7000)];
        if compacts {
            let mut note = with_usage(
                ScriptEntry::reply("main", 3, vec![Block::text("HANDOFF: read twice.")]),
                2000,
                20,
            );
            note.purpose = Some("compact".into());
            script.push(note);
            script.push(ScriptEntry::reply("main", 4, vec![Block::text("Done.")]));
        } else {
            script.push(ScriptEntry::reply("main", 3, vec![Block::text("Done.")]));
        }
        let fake = FakeLlm::start(script).await.unwrap();
        let output = run_json(dir.path(), &fake.base_url(), &[]).await;
        let case = format!("{model}{compaction}");
        assert_eq!(output.status.code(), Some(0), "{case}: {}", stderr(&output));
        let compacted = fake
            .requests()
            .iter()
            .any(|r| r.purpose.as_deref() == Some("compact"));
        assert_eq!(compacted, compacts, "{case}");
        fake.verify().unwrap();
    }
}

/// The run's ledger in the store is charged in the commit that records each response: killed
/// right after any of the three turns' commits (the third one crossing `budgets.run.cost_usd`),
/// `muster resume` reaches the end an uncut run reaches — exit 3 at the crossing response,
/// whose call never runs, no request sent twice — and the ledger equals both what the records
/// carry and what the fake server returned.
#[tokio::test(flavor = "multi_thread")]
async fn the_run_ledger_survives_a_kill_after_each_charged_commit() {
    ledger_survives_kills(false).await;
}

/// [`the_run_ledger_survives_a_kill_after_each_charged_commit`] on PostgreSQL.
#[tokio::test(flavor = "multi_thread")]
async fn the_run_ledger_on_postgres_survives_a_kill_after_each_charged_commit() {
    ledger_survives_kills(true).await;
}

async fn ledger_survives_kills(postgres: bool) {
    // (where the first process is killed, or none: the uncut run)
    let cuts = [None, Some(1), Some(2), Some(3)];
    for cut in cuts {
        let dir = project();
        let schema = match postgres {
            true => Some(super::store_pg::Schema::new().await),
            false => None,
        };
        if let Some(schema) = &schema {
            super::store_pg::use_store(dir.path(), &schema.url());
        }
        settings(
            dir.path(),
            "[models.\"claude-sonnet-4-5\"]\nprice_in = 1000.0\nprice_out = 1000.0\n\
             [budgets.run]\ncost_usd = 1.0\n",
        );
        let fake = FakeLlm::start(vec![
            with_usage(ScriptEntry::reply("main", 1, vec![bash("one")]), 300, 100),
            with_usage(ScriptEntry::reply("main", 2, vec![bash("two")]), 300, 100),
            with_usage(ScriptEntry::reply("main", 3, vec![bash("three")]), 300, 100),
            ScriptEntry::reply("main", 4, vec![Block::text("never asked")]),
        ])
        .await
        .unwrap();
        let base = fake.base_url();
        let args = [
            "run",
            "-p",
            "Work.",
            "--permission-mode",
            "bypassPermissions",
            "--base-url",
            &base,
            "--output",
            "stream-json",
            "--model",
            "claude-sonnet-4-5",
        ];
        let last = match cut {
            Some(n) => {
                let mut killed = command(dir.path(), &args);
                killed.env("MUSTER_FAILPOINT", format!("model_turn@{n}"));
                let first = output(killed).await;
                assert_eq!(first.status.code(), None, "{cut:?}: {}", stderr(&first));
                muster(dir.path(), &["resume", "--output", "stream-json"]).await
            }
            None => muster(dir.path(), &args).await,
        };
        assert_eq!(last.status.code(), Some(3), "{cut:?}: {}", stderr(&last));
        let finished = lines(&last).pop().unwrap();
        assert_eq!(finished["budget"], "budgets.run.cost_usd", "{cut:?}");
        assert!(
            finished["reason"]
                .as_str()
                .unwrap()
                .contains("$1.2000 reached the limit of $1.0000"),
            "{cut:?}: {finished}"
        );
        let requests = fake.requests();
        assert_eq!(
            requests.len(),
            3,
            "{cut:?}: a request sent twice or a fourth"
        );
        assert_eq!(marker(dir.path()), ["one", "two"], "{cut:?}");

        let run_id = finished["run_id"].as_str().unwrap();
        let store = match &schema {
            Some(schema) => super::store_pg::open(&schema.url()).await,
            None => open_store(dir.path()),
        };
        let ledger = store.run_ledger(run_id).await.unwrap().unwrap();
        let recorded: f64 = transcript(store.as_ref(), run_id, "main")
            .await
            .iter()
            .filter_map(|r| r["cost_usd"].as_f64())
            .sum();
        let returned: f64 = requests
            .iter()
            .filter_map(|r| r.usage)
            .map(|u| (u.input_tokens + u.output_tokens) as f64 * 0.001)
            .sum();
        assert_eq!(ledger.spent.turns, 3, "{cut:?}: {ledger:?}");
        assert!(
            (ledger.spent.cost_usd() - recorded).abs() < 1e-9,
            "{cut:?}: {ledger:?} vs {recorded}"
        );
        assert!(
            (ledger.spent.cost_usd() - returned).abs() < 1e-9,
            "{cut:?}: {ledger:?} vs {returned}"
        );
        let runs = muster(dir.path(), &["runs", "--json"]).await;
        let runs: Value = serde_json::from_slice(&runs.stdout).unwrap();
        let budget = &runs[0]["budget"];
        assert_eq!(budget["limits"]["cost_usd"], 1.0, "{cut:?}: {budget}");
        assert_eq!(budget["spent"]["turns"], 3, "{cut:?}: {budget}");
        assert!(
            (budget["spent"]["cost_usd"].as_f64().unwrap() - returned).abs() < 1e-9,
            "{budget}"
        );
        drop(store);
        if let Some(schema) = schema {
            schema.drop_now().await;
        }
    }
}
