//! DESIGN.md's crash pattern: a real child prints `sent`/`acked` after each call returns; the
//! parent kills it with SIGKILL at its K-th event, reopens the store and checks every id.

use std::collections::{BTreeMap, BTreeSet};

use muster_mailbox::*;

use super::child::{Action, keyed, seen, spawn_killed_at};
use super::common::*;

on_both_backends!(kill_nine_at_the_kth_event_loses_and_repeats_nothing);

const PER_SENDER: usize = 15;

async fn crash_at(backend: Backend, k: usize) {
    crash_where(backend, k, None).await;
}

/// The child is killed at its `k`-th event by the test, or before it at `failpoint` by itself.
async fn crash_where(backend: Backend, k: usize, failpoint: Option<&str>) {
    let place = Place::new(backend).await;
    let db = place.location();
    {
        let store = db.open().await;
        run_with(&store, RUN, &["alice", "bob", "carol"]).await;
    }
    let mut child = spawn_killed_at(
        &Action::SendAndAck {
            db: db.clone(),
            per_sender: PER_SENDER,
        },
        failpoint,
    );
    let mut sent = BTreeSet::new();
    let mut acked = BTreeSet::new();
    for _ in 0..k {
        let Some(event) = child.next_event() else {
            break;
        };
        let mut words = event.split_whitespace();
        match (words.next(), words.next()) {
            (Some("sent"), Some(key)) => sent.insert(key.to_owned()),
            (Some("acked"), Some(key)) => acked.insert(key.to_owned()),
            _ => false,
        };
    }
    if failpoint.is_none() {
        child.child.kill().unwrap();
    }
    let status = child.child.wait().unwrap();
    if let Some(failpoint) = failpoint {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            status.signal(),
            Some(9),
            "the child was killed at {failpoint} ({} sent)",
            sent.len()
        );
    }

    let store = db.open().await;
    for key in &sent {
        assert!(
            store.message(key).await.unwrap().is_some(),
            "K={k}: printed sent {key} is lost"
        );
    }
    for key in &acked {
        let message = store.message(key).await.unwrap().unwrap();
        assert_eq!(
            message.state,
            DeliveryState::Acked,
            "K={k}: printed acked {key} is not acked"
        );
    }

    // Resume: the senders send everything again under the same keys, carol drains.
    let epoch = store.open_epoch(RUN).await.unwrap();
    for sender in ["alice", "bob"] {
        for i in 0..PER_SENDER {
            store.send(keyed(sender, i)).await.unwrap();
        }
    }
    while let Some(message) = store
        .try_receive(RUN, "carol", epoch, MessageFilter::Any)
        .await
        .unwrap()
    {
        assert!(
            !acked.contains(&message.key),
            "K={k}: acked {} delivered again",
            message.key
        );
        store.commit_turn(seen(&message.key)).await.unwrap();
    }

    let all = store.messages(RUN, Some("carol")).await.unwrap();
    assert_eq!(
        all.len(),
        2 * PER_SENDER,
        "K={k}: no message lost or duplicated"
    );
    assert!(all.iter().all(|m| m.state == DeliveryState::Acked));
    let mut seen_count: BTreeMap<String, usize> = BTreeMap::new();
    for record in store.records(RUN, "carol", "seen", 0).await.unwrap() {
        *seen_count
            .entry(record.body["key"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    assert_eq!(
        seen_count.len(),
        2 * PER_SENDER,
        "K={k}: carol saw every message"
    );
    assert!(
        seen_count.values().all(|n| *n == 1),
        "K={k}: carol saw a message twice: {seen_count:?}"
    );
    // Per-sender order survived the crash.
    for sender in ["alice", "bob"] {
        let texts: Vec<String> = all
            .iter()
            .filter(|m| m.sender == sender)
            .map(text_of)
            .collect();
        let expected: Vec<String> = (0..PER_SENDER).map(|i| format!("{sender}-{i}")).collect();
        assert_eq!(texts, expected, "K={k}");
    }
}

/// Killed while it writes the WAL's room (after its 16th writing transaction): the zeros
/// written so far are no frames, and every write answered before is there.
#[cfg(feature = "failpoints")]
#[tokio::test]
async fn killed_while_making_the_wals_room_loses_and_repeats_nothing() {
    crash_where(Backend::Sqlite, usize::MAX, Some("wal_room@2")).await;
}

async fn kill_nine_at_the_kth_event_loses_and_repeats_nothing(backend: Backend) {
    for k in [1, 2, 7, 16, 31, 55] {
        crash_at(backend, k).await;
    }
}
