//! Ctrl-C (SIGINT) on a live run, single and team: muster stops at once with exit 130, kills
//! the Bash commands its agents were running (their process groups), marks the run
//! `interrupted`, and `muster resume` continues it, the cut call reported as interrupted.
//! Linux only: the test watches the killed command through a pidfd.

#![cfg(target_os = "linux")]

use std::path::Path;

use muster_fake_llm::{Block, FakeLlm, FakeLlmHandle, ScriptEntry};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::common::{GUARD, Running, command, lines, muster};

/// The command an agent runs: it hands its pid to the test through a FIFO (so the test knows
/// it runs), then sleeps far longer than any test.
const HANDSHAKE: &str = "echo $$ > ready.fifo; exec sleep 300";

fn project(team: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".muster")).unwrap();
    std::fs::create_dir_all(dir.path().join(".git")).unwrap();
    std::fs::write(
        dir.path().join(".muster/settings.toml"),
        "[permissions]\nallow = [\"Bash\"]\n",
    )
    .unwrap();
    // The user trusted the project: its allow rule applies.
    super::common::trust_blocking(dir.path());
    if let Some(team) = team {
        std::fs::write(dir.path().join("muster.team.toml"), team).unwrap();
    }
    let made = std::process::Command::new("mkfifo")
        .arg(dir.path().join("ready.fifo"))
        .status()
        .unwrap();
    assert!(made.success());
    dir
}

fn bash(command: &str) -> Block {
    Block::tool_use("Bash", json!({ "command": command }))
}

/// Starts `muster run` on the fake server, waits until the agent's Bash command runs, sends
/// muster SIGINT, and waits for both to end; gives back muster's exit code and its events.
async fn interrupt_while_bash_runs(dir: &Path, fake: &FakeLlmHandle) -> (Option<i32>, Vec<Value>) {
    let mut run = Running::spawn(command(
        dir,
        &[
            "run",
            "-p",
            "Work.",
            "--base-url",
            &fake.base_url(),
            "--output",
            "stream-json",
        ],
    ));
    // Read and write: the open never blocks, and no EOF comes before the command writes.
    let fifo = tokio::net::unix::pipe::OpenOptions::new()
        .read_write(true)
        .open_receiver(dir.join("ready.fifo"))
        .unwrap();
    let pid = tokio::time::timeout(GUARD, BufReader::new(fifo).lines().next_line())
        .await
        .expect("the Bash command never ran")
        .unwrap()
        .unwrap();
    let pid = rustix::process::Pid::from_raw(pid.trim().parse().unwrap()).unwrap();
    let command = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).unwrap();
    let muster = rustix::process::Pid::from_raw(run.child.id().unwrap() as i32).unwrap();
    rustix::process::kill_process(muster, rustix::process::Signal::INT).unwrap();
    let code = run.finish().await;
    // The command was killed, not left running without its run: its pidfd turns readable
    // when it ends (poll's own timeout guards the wait).
    let ended = tokio::task::spawn_blocking(move || {
        let mut fds = [rustix::event::PollFd::new(
            &command,
            rustix::event::PollFlags::IN,
        )];
        let guard = rustix::event::Timespec {
            tv_sec: GUARD.as_secs() as i64,
            tv_nsec: 0,
        };
        rustix::event::poll(&mut fds, Some(&guard)).unwrap()
    })
    .await
    .unwrap();
    assert_eq!(ended, 1, "the Bash command outlived muster");
    (code, run.events)
}

async fn resume(dir: &Path, run_id: &str, fake: &FakeLlmHandle) -> (Option<i32>, Vec<Value>) {
    let output = muster(
        dir,
        &[
            "resume",
            run_id,
            "--base-url",
            &fake.base_url(),
            "--output",
            "stream-json",
        ],
    )
    .await;
    let events = lines(&output);
    (output.status.code(), events)
}

/// The result the resumed agent's model saw for the cut Bash call.
fn cut_call_result(fake: &FakeLlmHandle, agent: &str) -> String {
    let request = fake
        .requests()
        .into_iter()
        .rfind(|r| r.agent.as_deref() == Some(agent))
        .unwrap();
    request.body["messages"].to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn sigint_stops_a_single_run_kills_its_bash_and_resume_continues() {
    let dir = project(None);
    let fake = FakeLlm::start(vec![
        ScriptEntry::reply("main", 1, vec![bash(HANDSHAKE)]),
        ScriptEntry::reply("main", 2, vec![Block::text("Stopped; nothing else to do.")]),
    ])
    .await
    .unwrap();
    let (code, events) = interrupt_while_bash_runs(dir.path(), &fake).await;
    assert_eq!(code, Some(130), "{events:#?}");
    let finished = events.last().unwrap();
    assert_eq!(finished["type"], "run_finished");
    assert_eq!(finished["status"], "interrupted", "{finished}");
    let run_id = finished["run_id"].as_str().unwrap().to_owned();
    assert!(
        finished["error"]
            .as_str()
            .unwrap()
            .contains("muster resume"),
        "{finished}"
    );

    let (code, events) = resume(dir.path(), &run_id, &fake).await;
    assert_eq!(code, Some(0), "{events:#?}");
    assert_eq!(
        events.last().unwrap()["result"],
        "Stopped; nothing else to do."
    );
    assert!(
        cut_call_result(&fake, "main").contains("interrupted"),
        "the model is told the call was cut"
    );
    fake.verify().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn sigint_stops_a_team_run_at_once_kills_a_teammates_bash_and_resume_continues() {
    let dir = project(Some(
        "name = \"solo\"\n\n[[teammates]]\nname = \"alice\"\nplan_mode_required = false\n",
    ));
    let fake = FakeLlm::start(vec![
        ScriptEntry::reply(
            "lead",
            1,
            vec![Block::tool_use(
                "TaskCreate",
                json!({"subject": "Wait", "description": "Run the long command."}),
            )],
        ),
        // Every later lead turn (any turn index) just waits for the team.
        serde_json::from_value(json!({
            "agent": "lead",
            "reply": {"content": [{"type": "text", "text": "Waiting for alice."}]},
        }))
        .unwrap(),
        ScriptEntry::reply("alice", 1, vec![bash(HANDSHAKE)]),
        ScriptEntry::reply("alice", 2, vec![Block::text("The command was cut.")]),
    ])
    .await
    .unwrap();
    let (code, events) = interrupt_while_bash_runs(dir.path(), &fake).await;
    assert_eq!(code, Some(130), "{events:#?}");
    let finished = events.last().unwrap();
    assert_eq!(finished["status"], "interrupted", "{finished}");
    let run_id = finished["run_id"].as_str().unwrap().to_owned();
    // Stopped at once: no shutdown request waited out the teammate.
    assert!(
        !events
            .iter()
            .any(|e| e["type"] == "mail_sent" && e["kind"] == "shutdown_request"),
        "{events:#?}"
    );

    let (code, events) = resume(dir.path(), &run_id, &fake).await;
    assert_eq!(code, Some(0), "{events:#?}");
    assert!(cut_call_result(&fake, "alice").contains("interrupted"));
    let tasks = &events.last().unwrap()["tasks"];
    assert_eq!(tasks[0]["status"], "completed", "{tasks}");
    fake.verify().unwrap();
}
