//! Child processes for crash, race and cross-process tests: this test binary re-runs itself
//! with one ignored test selected and the action in an environment variable set on the child
//! only. The child prints one line per durable event, after the call returns.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};

use muster_mailbox::*;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::common::*;

const ACTION_VAR: &str = "MUSTER_MAILBOX_TEST_CHILD";

#[derive(Debug, Serialize, Deserialize)]
pub enum Action {
    /// `alice` and `bob` each send `per_sender` keyed messages to `carol`, who receives and
    /// acks each one with a record of what she saw.
    SendAndAck { db: Location, per_sender: usize },
    /// Waits for "go" on stdin, then claims task 1 as `agent`.
    Claim { db: Location, agent: String },
    /// Waits for "go" on stdin, then answers `plan-alice-1` as `human`.
    Respond { db: Location, approved: bool },
    /// Sends `text` to `alice` and pokes the live run.
    SendAndPoke {
        db: PathBuf,
        runs_dir: PathBuf,
        text: String,
    },
}

pub struct Spawned {
    pub child: Child,
    pub lines: std::io::Lines<BufReader<ChildStdout>>,
}

impl Spawned {
    pub fn next_event(&mut self) -> Option<String> {
        self.lines
            .by_ref()
            .map_while(Result::ok)
            .find(|line| is_event(line))
    }

    pub fn go(&mut self) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(b"go\n").unwrap();
        stdin.flush().unwrap();
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn is_event(line: &str) -> bool {
    [
        "sent ", "acked ", "won", "lost ", "accepted", "refused ", "poked ", "done",
    ]
    .iter()
    .any(|prefix| line.starts_with(prefix))
}

pub fn spawn(action: &Action) -> Spawned {
    spawn_killed_at(action, None)
}

/// [`spawn`], the child killed at the named failpoint (`MUSTER_FAILPOINT`) when it is given.
pub fn spawn_killed_at(action: &Action, failpoint: Option<&str>) -> Spawned {
    let mut command = Command::new(std::env::current_exe().unwrap());
    if let Some(failpoint) = failpoint {
        command.env(muster_mailbox::failpoint::VARIABLE, failpoint);
    }
    let mut child = command
        .args([
            "--ignored",
            "--exact",
            "suite::child::entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ACTION_VAR, serde_json::to_string(action).unwrap())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    Spawned { child, lines }
}

#[test]
#[ignore = "run by other tests as a child process"]
fn entry() {
    let Ok(spec) = std::env::var(ACTION_VAR) else {
        return;
    };
    let action: Action = serde_json::from_str(&spec).unwrap();
    // End the harness's "test … " line so every event starts its own line.
    println!();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(run(action));
}

fn wait_for_go() {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
}

async fn run(action: Action) {
    match action {
        Action::SendAndAck { db, per_sender } => send_and_ack(&db, per_sender).await,
        Action::Claim { db, agent } => {
            let store = db.open().await;
            wait_for_go();
            match store.claim_task(RUN, 1, &agent).await {
                Ok(_) => println!("won"),
                Err(error) => println!("lost {error}"),
            }
        }
        Action::Respond { db, approved } => {
            let store = db.open().await;
            wait_for_go();
            match store.respond(plan_response(approved)).await {
                Ok(_) => println!("accepted"),
                Err(error) => println!("refused {error}"),
            }
        }
        Action::SendAndPoke {
            db,
            runs_dir,
            text: body,
        } => {
            let store = open(&db);
            store.send(text(RUN, "lead", "alice", &body)).await.unwrap();
            let outcome = live::poke(&runs_dir, RUN, "alice").unwrap();
            println!("poked {outcome:?}");
        }
    }
}

pub fn plan_response(approved: bool) -> NewResponse {
    NewResponse {
        run_id: RUN.into(),
        sender: "human".into(),
        body: MessageBody::PlanApprovalResponse {
            request_id: "plan-alice-1".into(),
            approved,
            feedback: None,
            mode: None,
            lowered_from: None,
            edited_plan: None,
            clear_context: false,
            rule: None,
            dropped_grants: Vec::new(),
            grants: Vec::new(),
        },
        idempotency_key: None,
    }
}

/// The keyed message `sender` sends as its `i`-th.
pub fn keyed(sender: &str, i: usize) -> NewMessage {
    NewMessage {
        idempotency_key: Some(format!("{sender}:m{i}")),
        ..text(RUN, sender, "carol", &format!("{sender}-{i}"))
    }
}

/// Carol's turn: record what she saw and ack it, in one transaction.
pub fn seen(key: &str) -> CommitTurn {
    CommitTurn {
        run_id: RUN.into(),
        agent: "carol".into(),
        acks: vec![key.to_owned()],
        records: vec![NewRecord {
            agent: "carol".into(),
            stream: "seen".into(),
            seq: None,
            body: json!({"key": key}),
        }],
        ..CommitTurn::default()
    }
}

async fn send_and_ack(db: &Location, per_sender: usize) {
    let store = db.open().await;
    let epoch = store.open_epoch(RUN).await.unwrap();
    let senders: Vec<_> = ["alice", "bob"]
        .into_iter()
        .map(|sender| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0..per_sender {
                    let message = store.send(keyed(sender, i)).await.unwrap();
                    println!("sent {} {sender} {i}", message.key);
                }
            })
        })
        .collect();
    let receiver = tokio::spawn({
        let store = store.clone();
        async move {
            for _ in 0..2 * per_sender {
                let message = store
                    .receive(RUN, "carol", epoch, MessageFilter::Any)
                    .await
                    .unwrap();
                store.commit_turn(seen(&message.key)).await.unwrap();
                println!("acked {}", message.key);
            }
        }
    });
    for sender in senders {
        sender.await.unwrap();
    }
    receiver.await.unwrap();
    println!("done");
}
