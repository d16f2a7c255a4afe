//! A team run killed with SIGKILL anywhere resumes to the end an uncut run reaches (issue
//! "Team runs that survive kill -9 exactly").
//!
//! The team: a lead and two plan-required teammates, `alice` and `bob`, whose plans the lead
//! approves with `ReviewPlan`. The lead puts two tasks on the board; each teammate claims one,
//! explores, submits a plan, and once approved runs three side-effecting Bash steps (each
//! appends one marker line to `side.log`), mails the lead once, writes its own file and ends
//! its turn with a report (its task completed, its verification report, its idle
//! notification).
//!
//! Kill points, each on a fresh project, each followed by `muster resume` until the run ends:
//! - after every durable stream-json line of an uncut run (the K-th line read, then SIGKILL),
//!   every fourth of them with the first resume killed too;
//! - failpoints inside the binary (the cargo feature `failpoints`, see muster-mailbox's
//!   `failpoint.rs`): right after a claim, a teammate's end of turn, a plan request, and each
//!   coordination tool's effect before its result is recorded;
//! - inside a Bash step (its command blocks on a FIFO the test opens, then SIGKILL) and inside
//!   a model call (the response held on a fake-llm gate, then SIGKILL).
//!
//! After the last resume: exit 0, the board holds exactly the lead's two tasks, completed;
//! each marker line at most once (once unless its call was cut, which then has the
//! interrupted result); one plan request and one response per teammate; each teammate's
//! verification report and end-of-turn report sent once and delivered once; no mail
//! delivered twice; no `tool_use` with two results. Tests wait on events (lines, a FIFO's
//! open, a gate reached, process exit), never on sleeps.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;

use muster_fake_llm::{Block, FakeLlmHandle, ScriptEntry};
use muster_mailbox::{DeliveryState, TaskStatus};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::common::{GUARD, fake, open_store, tool, transcript};

const TEAMMATES: [&str; 2] = ["alice", "bob"];
const INTERRUPTED: &str = "interrupted by a crash; inspect the workspace before retrying";
const TEAM: &str = "name = \"pair\"\nshutdown_timeout_ms = 5000\n\n[[teammates]]\nname = \"alice\"\nplan_mode_required = true\n\n[[teammates]]\nname = \"bob\"\nplan_mode_required = true\n";

fn plan_of(agent: &str) -> String {
    format!(
        "## Goal\nMark the log.\n## Steps\n1. Append {agent}-1, {agent}-2 and {agent}-3 to side.log\n2. Write {agent}.txt\n## Files\nside.log\n{agent}.txt\n## Tests\nnone\n## Risks\nnone\n"
    )
}

/// A Bash step: one marker line, then (only where the test made the FIFO) a wait on it.
fn step(agent: &str, n: u32) -> Block {
    let line = format!("{agent}-{n}");
    tool(
        "Bash",
        json!({"command": format!("echo {line} >> side.log; if [ -p {line}.fifo ]; then cat {line}.fifo; fi")}),
    )
}

fn entry(value: Value) -> ScriptEntry {
    serde_json::from_value(value).unwrap()
}

fn script() -> Vec<ScriptEntry> {
    let review = |agent: &str| {
        tool(
            "ReviewPlan",
            json!({"request_id": format!("plan-{agent}-1"), "approve": true, "mode": "bypassPermissions"}),
        )
    };
    let mut script = vec![
        ScriptEntry::reply(
            "lead",
            1,
            vec![
                tool(
                    "TaskCreate",
                    json!({"subject": "Part A", "description": "Mark the log, part A."}),
                ),
                tool(
                    "TaskCreate",
                    json!({"subject": "Part B", "description": "Mark the log, part B."}),
                ),
            ],
        ),
        // Whichever plans have arrived, the lead answers both ids: the one not sent yet is an
        // error result, the one decided already is refused; each plan gets one response.
        entry(json!({
            "agent": "lead",
            "when": {"mail_type": "plan_approval_request"},
            "reply": {"content": [review("alice"), review("bob")], "stop_reason": "tool_use"},
        })),
        entry(json!({
            "agent": "lead",
            "reply": {"content": [Block::text("Waiting for the team.")], "stop_reason": "end_turn"},
        })),
    ];
    for agent in TEAMMATES {
        script.extend([
            ScriptEntry::reply(
                agent,
                1,
                vec![
                    tool("Read", json!({"file_path": "README.md"})),
                    tool("ExitPlanMode", json!({"plan": plan_of(agent)})),
                ],
            ),
            ScriptEntry::reply(agent, 2, vec![step(agent, 1)]),
            ScriptEntry::reply(
                agent,
                3,
                vec![
                    step(agent, 2),
                    tool(
                        "SendMessage",
                        json!({"to": "lead", "message": format!("{agent}: halfway")}),
                    ),
                ],
            ),
            ScriptEntry::reply(
                agent,
                4,
                vec![
                    step(agent, 3),
                    tool(
                        "Write",
                        json!({"file_path": format!("{agent}.txt"), "content": format!("{agent} was here\n")}),
                    ),
                ],
            ),
            ScriptEntry::reply(agent, 5, vec![Block::text(&format!("{agent} done."))]),
        ]);
    }
    script
}

/// The same script with `agent`'s response for `turn` held on gate `gate`.
fn script_holding(agent: &str, turn: u64, gate: &str) -> Vec<ScriptEntry> {
    script()
        .into_iter()
        .map(|mut entry| {
            if entry.agent.as_deref() == Some(agent) && entry.turn == Some(turn) {
                entry.fault.hold = Some(gate.to_owned());
            }
            entry
        })
        .collect()
}

fn project() -> tempfile::TempDir {
    super::common::project(&[("muster.team.toml", TEAM)])
}

/// How a run is cut.
#[derive(Debug, Clone)]
enum Cut {
    /// Let it finish.
    Never,
    /// SIGKILL right after the K-th stdout line.
    AfterLine(usize),
    /// The binary kills itself at this failpoint (`name` or `name@N`).
    Failpoint(String),
    /// SIGKILL while this Bash step (`alice-2`) blocks on its FIFO.
    InBash(String),
    /// SIGKILL while the model's response is held on this gate.
    InModelCall(String),
}

/// What one process of the run printed and how it ended.
struct Ended {
    lines: Vec<Value>,
    code: i32,
}

fn run_args(base: &str) -> Vec<String> {
    [
        "run",
        "-p",
        "Mark the log.",
        "--permission-mode",
        "bypassPermissions",
        "--base-url",
        base,
        "--output",
        "stream-json",
    ]
    .map(str::to_owned)
    .to_vec()
}

fn resume_args(run_id: &str, base: &str) -> Vec<String> {
    [
        "resume",
        run_id,
        "--base-url",
        base,
        "--output",
        "stream-json",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// Runs `args` in `dir`, cut as `cut` says.
async fn run(dir: &Path, args: &[String], cut: &Cut, fake: &FakeLlmHandle) -> Ended {
    let label = format!("{cut:?}");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut command = super::common::command(dir, &args);
    command
        .kill_on_drop(true)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Cut::Failpoint(name) = cut {
        command.env(muster_mailbox::failpoint::VARIABLE, name);
    }
    if let Cut::InBash(line) = cut {
        let made = std::process::Command::new("mkfifo")
            .arg(dir.join(format!("{line}.fifo")))
            .status()
            .unwrap();
        assert!(made.success(), "mkfifo {line}.fifo");
    }
    let mut child = command.spawn().unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut lines = Vec::new();
    let read = async {
        let kill_at = match cut {
            Cut::AfterLine(k) => Some(*k),
            _ => None,
        };
        let killer = async {
            match cut {
                Cut::InBash(line) => {
                    // Opening the FIFO for writing returns once the command opened it to read:
                    // the marker line is written and the Bash call is in flight.
                    let fifo = dir.join(format!("{line}.fifo"));
                    let writer = tokio::task::spawn_blocking(move || {
                        std::fs::OpenOptions::new().write(true).open(fifo).unwrap()
                    })
                    .await
                    .unwrap();
                    Some(writer)
                }
                Cut::InModelCall(gate) => {
                    fake.gate_reached(gate, 1).await;
                    None
                }
                _ => std::future::pending().await,
            }
        };
        tokio::pin!(killer);
        let mut killed = false;
        loop {
            tokio::select! {
                line = reader.next_line() => match line.unwrap() {
                    Some(line) => {
                        lines.push(serde_json::from_str::<Value>(&line).unwrap());
                        if Some(lines.len()) == kill_at {
                            child.start_kill().unwrap();
                            break;
                        }
                    }
                    None => break,
                },
                writer = &mut killer, if !killed => {
                    killed = true;
                    child.start_kill().unwrap();
                    drop(writer);
                }
            }
        }
        child.wait().await.unwrap()
    };
    let status = tokio::time::timeout(GUARD, read)
        .await
        .unwrap_or_else(|_| panic!("{label}: guard timeout; lines so far: {lines:#?}"));
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .unwrap_or_else(|| -status.signal().unwrap_or(0));
    Ended { lines, code }
}

async fn the_run_id(dir: &Path) -> String {
    let runs = open_store(dir).runs().await.unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    runs[0].id.clone()
}

/// One kill point: the run cut as `cut`, then (for `resume_cut`) a first resume cut too, then
/// resumes until the run ends (at most three). Gives back whether the run was cut.
async fn cut_and_resume(
    dir: &Path,
    fake: &FakeLlmHandle,
    cut: &Cut,
    resume_cut: Option<Cut>,
) -> bool {
    let base = fake.base_url();
    let first = run(dir, &run_args(&base), cut, fake).await;
    if first.code == 0 && matches!(cut, Cut::AfterLine(_)) {
        // The run ended by itself: the interleaving of two teammates varies the number of
        // lines, so its K-th line was among its last (or it had fewer) and it exited before
        // the kill landed. Its end state is checked all the same.
        return false;
    }
    assert_eq!(
        first.code, -9,
        "{cut:?}: the cut run was killed: {:#?}",
        first.lines
    );
    if let Cut::InModelCall(gate) = cut {
        fake.open_gate(gate);
    }
    let run_id = the_run_id(dir).await;
    let mut next = resume_cut.unwrap_or(Cut::Never);
    for _ in 0..3 {
        let status = open_store(dir).run(&run_id).await.unwrap().unwrap().status;
        if status.is_finished() {
            // Killed after the run's ending was committed (its last lines unprinted).
            return true;
        }
        let ended = run(dir, &resume_args(&run_id, &base), &next, fake).await;
        if matches!(next, Cut::Never) {
            assert_eq!(
                ended.code, 0,
                "{cut:?}: the resume ended with {}: {:#?}",
                ended.code, ended.lines
            );
            return true;
        }
        if ended.code == 0 && matches!(next, Cut::AfterLine(_)) {
            // As for the first run: the resume ended by itself before its K-th line landed.
            return true;
        }
        assert_eq!(ended.code, -9, "{cut:?}: the cut resume was killed");
        next = Cut::Never;
    }
    unreachable!()
}

/// What a finished run left, in the terms the checks compare.
#[derive(Debug, PartialEq)]
struct EndState {
    status: String,
    tasks: Vec<(String, String, Option<String>)>,
    plan_requests: Vec<(String, String, bool)>,
    files: Vec<(String, String)>,
}

async fn end_state(dir: &Path) -> EndState {
    let store = open_store(dir);
    let run_id = the_run_id(dir).await;
    let run = store.run(&run_id).await.unwrap().unwrap();
    let tasks = store
        .tasks(&run_id)
        .await
        .unwrap()
        .into_iter()
        .map(|t| {
            (
                t.subject,
                t.status.as_str().to_owned(),
                t.owner.map(|_| "owned".into()),
            )
        })
        .collect();
    let mut plan_requests: Vec<_> = store
        .requests(&run_id)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.kind == "plan_approval_request")
        .map(|r| {
            let approved = r
                .response
                .as_ref()
                .is_some_and(|x| x.stored_body()["approved"] == true);
            (r.request_id, r.requester, approved)
        })
        .collect();
    plan_requests.sort();
    let files = TEAMMATES
        .iter()
        .map(|agent| {
            let name = format!("{agent}.txt");
            let text = std::fs::read_to_string(dir.join(&name)).unwrap_or_default();
            (name, text)
        })
        .collect();
    EndState {
        status: run.status.as_str().to_owned(),
        tasks,
        plan_requests,
        files,
    }
}

/// Every check of "once" and "delivered once" on the finished run in `dir`.
async fn check_exactly_once(dir: &Path, label: &str) {
    let store = open_store(dir);
    let run_id = the_run_id(dir).await;
    let mut interrupted_lines = Vec::new();
    let mut deliveries: BTreeMap<String, usize> = BTreeMap::new();
    for agent in ["lead", "alice", "bob"] {
        let records = transcript(store.as_ref(), &run_id, agent).await;
        let mut results: BTreeMap<String, usize> = BTreeMap::new();
        let mut uses = BTreeMap::new();
        for record in &records {
            match record["type"].as_str() {
                Some("tool_call") => {
                    *results
                        .entry(record["tool_use_id"].as_str().unwrap().to_owned())
                        .or_default() += 1;
                }
                Some("message") => {
                    for block in record["message"]["content"]
                        .as_array()
                        .into_iter()
                        .flatten()
                    {
                        if block["type"] == "tool_use" {
                            uses.insert(block["id"].as_str().unwrap().to_owned(), block.clone());
                        }
                        if let Some(text) = block["text"].as_str() {
                            for key in text.split(" id=\"").skip(1) {
                                let key = key.split('"').next().unwrap().to_owned();
                                *deliveries.entry(key).or_default() += 1;
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        for (id, count) in &results {
            assert_eq!(*count, 1, "{label}: {agent}'s {id} has {count} results");
        }
        for (id, block) in &uses {
            assert!(
                results.contains_key(id),
                "{label}: {agent}'s {id} ({}) has no result",
                block["name"]
            );
        }
        for record in &records {
            if record["type"] == "tool_call" && record["content"] == INTERRUPTED {
                let block = &uses[record["tool_use_id"].as_str().unwrap()];
                assert_eq!(block["name"], "Bash", "{label}: only Bash is cut: {block}");
                let command = block["input"]["command"].as_str().unwrap();
                let line = command.split(' ').nth(1).unwrap().to_owned();
                interrupted_lines.push(line);
            }
        }
    }
    for (key, count) in &deliveries {
        assert_eq!(*count, 1, "{label}: mail {key} delivered {count} times");
    }
    // Side effects: each marker line at most once, and once unless its call was cut.
    let log = std::fs::read_to_string(dir.join("side.log")).unwrap_or_default();
    for agent in TEAMMATES {
        for n in 1..=3 {
            let line = format!("{agent}-{n}");
            let count = log.lines().filter(|l| *l == line).count();
            if interrupted_lines.contains(&line) {
                assert!(count <= 1, "{label}: {line} ran {count} times:\n{log}");
            } else {
                assert_eq!(count, 1, "{label}: {line} ran {count} times:\n{log}");
            }
        }
    }
    // The team's reports: sent once, delivered once; no mail left undelivered.
    let messages = store.messages(&run_id, None).await.unwrap();
    for agent in TEAMMATES {
        for kind in ["verification_report", "idle_notification"] {
            let sent: Vec<_> = messages
                .iter()
                .filter(|m| m.sender == agent && m.recipient == "lead" && m.kind == kind)
                .collect();
            assert_eq!(sent.len(), 1, "{label}: {agent}'s {kind}: {sent:#?}");
            assert_eq!(
                deliveries.get(&sent[0].key),
                Some(&1),
                "{label}: {agent}'s {kind} delivered once"
            );
        }
    }
    for message in &messages {
        // The teammates' answers to the end-of-run shutdown arrive after the lead is done.
        let at_the_end = message.kind == "shutdown_response";
        if ["lead", "alice", "bob"].contains(&message.recipient.as_str()) && !at_the_end {
            assert_eq!(
                message.state,
                DeliveryState::Acked,
                "{label}: left undelivered: {message:#?}"
            );
        }
    }
    let tasks = store.tasks(&run_id).await.unwrap();
    assert_eq!(
        tasks.len(),
        2,
        "{label}: the board holds the lead's two tasks: {tasks:#?}"
    );
    assert!(
        tasks.iter().all(|t| t.status == TaskStatus::Completed),
        "{label}: {tasks:#?}"
    );
}

/// The failpoints of this scenario, each with the hits it is expected to reach.
fn failpoints() -> Vec<String> {
    let mut points: Vec<String> = [
        "claim@1",
        "claim@2",
        "turn_end@1",
        "turn_end@2",
        "plan_request_sent@1",
        "plan_request_sent@2",
        "effect:TaskCreate@1",
        "effect:TaskCreate@2",
        "effect:ReviewPlan@1",
        "effect:ReviewPlan@2",
        "effect:ExitPlanMode@1",
        "effect:ExitPlanMode@2",
        "effect:SendMessage@1",
        "effect:SendMessage@2",
    ]
    .map(str::to_owned)
    .to_vec();
    points.sort();
    points
}

#[tokio::test(flavor = "multi_thread")]
async fn a_team_run_killed_anywhere_resumes_to_the_end_an_uncut_run_reaches() {
    let fake = Arc::new(fake(script()).await);
    let reference = project();
    let uncut = run(
        reference.path(),
        &run_args(&fake.base_url()),
        &Cut::Never,
        &fake,
    )
    .await;
    assert_eq!(uncut.code, 0, "{:#?}", uncut.lines);
    check_exactly_once(reference.path(), "uncut").await;
    let expected = end_state(reference.path()).await;
    assert_eq!(expected.status, "completed");

    let mut cuts: Vec<(Cut, Option<Cut>)> = Vec::new();
    for k in 1..uncut.lines.len() {
        let resume_cut = (k % 4 == 0).then_some(Cut::AfterLine(3));
        cuts.push((Cut::AfterLine(k), resume_cut));
    }
    for point in failpoints() {
        cuts.push((Cut::Failpoint(point), None));
    }
    // A resume cut at a failpoint of its own.
    cuts.push((
        Cut::Failpoint("claim@1".into()),
        Some(Cut::Failpoint("turn_end@1".into())),
    ));
    cuts.push((Cut::InBash("alice-2".into()), None));
    cuts.push((Cut::InBash("bob-3".into()), Some(Cut::AfterLine(2))));

    // Two kill points at a time: each its own project, the one fake model server.
    let limit = Arc::new(tokio::sync::Semaphore::new(2));
    let mut runs = tokio::task::JoinSet::new();
    for (cut, resume_cut) in cuts {
        let (fake, limit) = (fake.clone(), limit.clone());
        runs.spawn(async move {
            let _slot = limit.acquire().await.unwrap();
            let project = project();
            let dir = project.path();
            let label = format!("{cut:?} then {resume_cut:?}");
            let was_cut = cut_and_resume(dir, &fake, &cut, resume_cut).await;
            check_exactly_once(dir, &label).await;
            (label, was_cut, end_state(dir).await)
        });
    }
    let (mut cut_count, mut points) = (0, 0);
    while let Some(done) = runs.join_next().await {
        let (label, was_cut, state) = done.unwrap();
        assert_eq!(
            state, expected,
            "{label}: the end state differs from the uncut run's"
        );
        points += 1;
        cut_count += usize::from(was_cut);
    }
    assert!(
        cut_count + 5 >= points && cut_count > 60,
        "{cut_count} of {points} kill points cut the run"
    );
    eprintln!(
        "team crash: {points} kill points ({} lines in the uncut run), {cut_count} cut the run",
        uncut.lines.len()
    );

    // Inside a model call: bob's third response is held until the run is killed.
    let held = fake_holding("bob", 3, "bob-3").await;
    let dir = project();
    let was_cut = cut_and_resume(dir.path(), &held, &Cut::InModelCall("bob-3".into()), None).await;
    assert!(was_cut, "the run was killed in bob's third model call");
    check_exactly_once(dir.path(), "in bob's third model call").await;
    assert_eq!(
        end_state(dir.path()).await,
        expected,
        "in bob's third model call"
    );
    let resent = held
        .requests()
        .iter()
        .filter(|r| r.agent.as_deref() == Some("bob") && r.turn == Some(3))
        .count();
    assert_eq!(resent, 2, "the request in flight was sent again on resume");
}

async fn fake_holding(agent: &str, turn: u64, gate: &str) -> FakeLlmHandle {
    fake(script_holding(agent, turn, gate)).await
}
