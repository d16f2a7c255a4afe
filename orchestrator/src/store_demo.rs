//! The store demonstration behind `muster demo` until the team demo replaces it: two senders
//! and a recipient in a child process, a SIGKILL mid-stream, then a resume that loses and
//! repeats nothing. The child prints one line per durable event after the call returns.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use anyhow::Context;
use muster_mailbox::*;
use serde_json::json;

use crate::exit::Exit;

pub const RUN: &str = "demo";
const SENDERS: [&str; 2] = ["alice", "bob"];
const RECIPIENT: &str = "carol";
const PER_SENDER: usize = 12;
/// The child is killed after this many durable events: mid-stream, whatever the disk speed.
const KILL_AFTER: usize = 17;

/// Runs the demonstration in `dir` (a fresh temporary directory when `None`).
pub fn run(dir: Option<&Path>) -> anyhow::Result<Exit> {
    let dir = match dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            dir.to_path_buf()
        }
        None => tempfile::Builder::new()
            .prefix("muster-demo-")
            .tempdir()?
            .keep(),
    };
    let db = dir.join(".muster").join("muster.db");
    let runtime = tokio::runtime::Runtime::new()?;
    println!("muster store demo: two senders, one recipient, a crash and a resume");
    println!("store: {}\n", db.display());
    runtime.block_on(prepare(&db))?;

    println!(
        "1. A child process owns run {RUN:?}: alice and bob each send {PER_SENDER} messages to carol,"
    );
    println!(
        "   who takes each one and, in one transaction, records that she saw it and acknowledges it."
    );
    let crash = crash_child(&db)?;
    println!(
        "2. After {} durable events the child (pid {}) was killed with SIGKILL.",
        crash.events, crash.pid
    );
    println!(
        "   Before dying it had printed {} messages as sent and {} as acknowledged.\n",
        crash.sent.len(),
        crash.acked.len()
    );
    runtime.block_on(resume(&db, &crash))
}

async fn prepare(db: &Path) -> anyhow::Result<()> {
    let store = SqliteStore::open(db, StoreOptions::default())?;
    if store.run(RUN).await?.is_some() {
        anyhow::bail!(
            "{} already holds a run {RUN:?}: give `muster demo --dir` an empty directory",
            db.display()
        );
    }
    store
        .create_run(NewRun {
            id: RUN.into(),
            slug: "demo-store-run".into(),
            team: None,
            workspace: db
                .parent()
                .and_then(Path::parent)
                .unwrap_or(db)
                .display()
                .to_string(),
            batch_line_id: None,
            auto_gate: AutoGate::default(),
            launch_options: json!({"demo": "store"}),
            project_id: None,
        })
        .await?;
    for agent in SENDERS.iter().chain([&RECIPIENT]) {
        store
            .add_member(
                RUN,
                RosterEntry {
                    agent: (*agent).into(),
                    kind: MemberKind::Teammate,
                    definition: None,
                    parent: None,
                },
            )
            .await?;
    }
    Ok(())
}

struct Crash {
    pid: u32,
    events: usize,
    sent: BTreeSet<String>,
    acked: BTreeSet<String>,
}

fn crash_child(db: &Path) -> anyhow::Result<Crash> {
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .arg("demo")
        .arg("--store-child")
        .arg(db)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("cannot start the demo's child process")?;
    let stdout = child.stdout.take().context("the child has no stdout")?;
    let mut crash = Crash {
        pid: child.id(),
        events: 0,
        sent: BTreeSet::new(),
        acked: BTreeSet::new(),
    };
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["sent", key, sender, n] => {
                crash.sent.insert((*key).to_owned());
                println!("   child: {sender} -> carol  message {n} is durable");
            }
            ["acked", key, text] => {
                crash.acked.insert((*key).to_owned());
                println!("   child: carol saw {text:<8} and acknowledged it");
            }
            _ => continue,
        }
        crash.events += 1;
        if crash.events == KILL_AFTER {
            break;
        }
    }
    // SIGKILL: no destructor, no flush, no goodbye.
    child.kill().context("cannot kill the child")?;
    child.wait()?;
    Ok(crash)
}

/// The child's side: owns the run, sends and receives, prints each durable event.
pub fn child(db: &Path) -> anyhow::Result<Exit> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let store = Arc::new(SqliteStore::open(db, StoreOptions::default())?);
        let epoch = store.open_epoch(RUN).await?;
        let senders: Vec<_> = SENDERS
            .into_iter()
            .map(|sender| {
                let store = store.clone();
                tokio::spawn(async move {
                    for n in 1..=PER_SENDER {
                        let message = store.send(keyed_message(sender, n)).await?;
                        println!("sent {} {sender} {n}", message.key);
                    }
                    Ok::<_, StoreError>(())
                })
            })
            .collect();
        for _ in 0..SENDERS.len() * PER_SENDER {
            let message = store
                .receive(RUN, RECIPIENT, epoch, MessageFilter::Any)
                .await?;
            store.commit_turn(seen(&message)).await?;
            println!("acked {} {}", message.key, text_of(&message));
        }
        for sender in senders {
            sender.await??;
        }
        Ok(Exit::Success)
    })
}

fn keyed_message(sender: &str, n: usize) -> NewMessage {
    NewMessage {
        run_id: RUN.into(),
        sender: sender.into(),
        recipient: RECIPIENT.into(),
        body: MessageBody::Text {
            text: format!("{sender}-{n}"),
            summary: None,
        },
        idempotency_key: Some(format!("{sender}:message-{n}")),
    }
}

fn seen(message: &Message) -> CommitTurn {
    CommitTurn {
        run_id: RUN.into(),
        agent: RECIPIENT.into(),
        acks: vec![message.key.clone()],
        records: vec![NewRecord {
            agent: RECIPIENT.into(),
            stream: "seen".into(),
            seq: None,
            body: json!({"key": message.key, "text": text_of(message)}),
        }],
        ..CommitTurn::default()
    }
}

fn text_of(message: &Message) -> String {
    match message.body.clone() {
        MessageBody::Text { text, .. } => text,
        other => other.kind().to_string(),
    }
}

async fn resume(db: &Path, crash: &Crash) -> anyhow::Result<Exit> {
    let store = SqliteStore::open(db, StoreOptions::default())?;
    let stored: BTreeMap<String, Message> = store
        .messages(RUN, Some(RECIPIENT))
        .await?
        .into_iter()
        .map(|m| (m.key.clone(), m))
        .collect();
    let lost: Vec<&String> = crash
        .sent
        .iter()
        .filter(|key| !stored.contains_key(*key))
        .collect();
    let leased = stored
        .values()
        .filter(|m| m.state == DeliveryState::Leased)
        .count();
    println!(
        "3. Reopened the store: {} messages are in it; every one printed as sent is there ({} lost).",
        stored.len(),
        lost.len()
    );
    let unannounced = stored.len().saturating_sub(crash.sent.len());
    if unannounced > 0 {
        println!(
            "   {unannounced} more had committed but the child died before it could print so: durable all the same."
        );
    }
    println!(
        "   {leased} message(s) were leased by the dead process but not acknowledged: a new owner gets them back."
    );

    let epoch = store.open_epoch(RUN).await?;
    let mut resent = 0;
    for sender in SENDERS {
        for n in 1..=PER_SENDER {
            let before = store.messages(RUN, Some(RECIPIENT)).await?.len();
            store.send(keyed_message(sender, n)).await?;
            resent += usize::from(store.messages(RUN, Some(RECIPIENT)).await?.len() > before);
        }
    }
    println!(
        "4. Resume: alice and bob send all {} messages again under the same idempotency keys;",
        SENDERS.len() * PER_SENDER
    );
    println!(
        "   {resent} were new, {} were recognised as already sent.",
        SENDERS.len() * PER_SENDER - resent
    );
    let mut redelivered_acked = 0;
    let mut drained = Vec::new();
    while let Some(message) = store
        .try_receive(RUN, RECIPIENT, epoch, MessageFilter::Any)
        .await?
    {
        redelivered_acked += usize::from(crash.acked.contains(&message.key));
        store.commit_turn(seen(&message)).await?;
        drained.push(text_of(&message));
    }
    println!("   carol received the rest: {}", drained.join(" "));

    let records = store.records(RUN, RECIPIENT, "seen", 0).await?;
    let mut seen_count: BTreeMap<&str, usize> = BTreeMap::new();
    for record in &records {
        *seen_count
            .entry(record.body["key"].as_str().unwrap_or_default())
            .or_default() += 1;
    }
    let all = store.messages(RUN, Some(RECIPIENT)).await?;
    let twice = seen_count.values().filter(|n| **n > 1).count();
    let in_order = SENDERS.iter().all(|sender| {
        let texts: Vec<String> = all
            .iter()
            .filter(|m| m.sender == *sender)
            .map(text_of)
            .collect();
        texts
            == (1..=PER_SENDER)
                .map(|n| format!("{sender}-{n}"))
                .collect::<Vec<_>>()
    });
    let ok = lost.is_empty()
        && redelivered_acked == 0
        && twice == 0
        && all.len() == SENDERS.len() * PER_SENDER
        && seen_count.len() == all.len()
        && all.iter().all(|m| m.state == DeliveryState::Acked)
        && in_order;
    println!(
        "\n5. Result: {} messages, {} seen by carol, {} seen twice, {} acknowledged messages delivered again;",
        all.len(),
        seen_count.len(),
        twice,
        redelivered_acked
    );
    println!(
        "   each sender's order {}.",
        if in_order { "is intact" } else { "was BROKEN" }
    );
    println!(
        "   {}",
        if ok {
            "Nothing was lost and nothing was repeated."
        } else {
            "SOMETHING WENT WRONG: see above."
        }
    );
    let status = if ok {
        RunStatus::Completed
    } else {
        RunStatus::Failed
    };
    store
        .set_run_status(
            RUN,
            status,
            Some(json!({"messages": all.len(), "lost": lost.len()})),
        )
        .await?;
    println!(
        "\nLook inside: muster --store {} inbox carol --run {RUN}",
        db.display()
    );
    Ok(if ok { Exit::Success } else { Exit::Failed })
}
