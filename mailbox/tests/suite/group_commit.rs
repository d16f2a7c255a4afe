//! Group commit, pushed wake-ups (no polling), and delivery through an index.

use std::sync::Arc;
use std::time::Duration;

use muster_mailbox::*;

use super::common::*;

#[tokio::test]
async fn thirty_two_sends_queued_behind_a_held_writer_commit_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("m.db"));
    run_with(&store, RUN, &["alice"]).await;
    let hold = store.hold_writer().await.unwrap();
    let before = store.stats();
    let sends: Vec<_> = (0..32)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .send(text(RUN, "lead", "alice", &format!("m{i}")))
                    .await
            })
        })
        .collect();
    let mut queued = store.queued();
    tokio::time::timeout(GUARD, queued.wait_for(|n| *n >= 32))
        .await
        .unwrap()
        .unwrap();
    drop(hold);
    for send in sends {
        send.await.unwrap().unwrap();
    }
    let after = store.stats();
    assert_eq!(
        after.commits - before.commits,
        1,
        "all 32 sends shared one commit"
    );
    assert_eq!(after.operations - before.operations, 32);
    assert_eq!(store.messages(RUN, Some("alice")).await.unwrap().len(), 32);
}

#[tokio::test]
async fn a_refused_operation_in_a_group_fails_only_its_caller() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("m.db"));
    run_with(&store, RUN, &["alice"]).await;
    let hold = store.hold_writer().await.unwrap();
    let good = tokio::spawn({
        let store = store.clone();
        async move { store.send(text(RUN, "lead", "alice", "ok")).await }
    });
    let bad = tokio::spawn({
        let store = store.clone();
        async move { store.send(text(RUN, "lead", "ghost", "lost?")).await }
    });
    let mut queued = store.queued();
    tokio::time::timeout(GUARD, queued.wait_for(|n| *n >= 2))
        .await
        .unwrap()
        .unwrap();
    drop(hold);
    assert!(good.await.unwrap().is_ok());
    assert!(matches!(
        bad.await.unwrap(),
        Err(StoreError::UnknownRecipient { .. })
    ));
    assert_eq!(store.messages(RUN, None).await.unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_waiting_receiver_makes_no_queries_and_wakes_on_commit() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open(&dir.path().join("m.db")));
    let epoch = run_with(&store, RUN, &["alice"]).await;
    let base = store.stats();
    let mut stats = store.watch_stats();
    let receiver = tokio::spawn({
        let store = store.clone();
        async move { store.receive(RUN, "alice", epoch, MessageFilter::Any).await }
    });
    // The receiver looks once (on the read-only connection, not the writer), finds nothing,
    // and sleeps.
    stats.wait_for(|s| s.looks > base.looks).await.unwrap();
    let after_first_look = store.stats();
    assert_eq!(after_first_look.looks, base.looks + 1);
    assert_eq!(
        after_first_look.operations, base.operations,
        "an empty inbox is seen without the writer"
    );
    tokio::time::advance(Duration::from_secs(60)).await;
    tokio::task::yield_now().await;
    let after_waiting = store.stats();
    assert_eq!(
        (after_waiting.operations, after_waiting.looks),
        (after_first_look.operations, after_first_look.looks),
        "no queries while waiting 60 s"
    );
    assert!(!receiver.is_finished());

    // Real time again for the guard, which must not fire through the paused clock.
    tokio::time::resume();
    let sent = store
        .send(text(RUN, "lead", "alice", "wake up"))
        .await
        .unwrap();
    let got = tokio::time::timeout(GUARD, receiver)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(got.key, sent.key);
}

#[tokio::test]
async fn next_message_for_a_recipient_uses_the_delivery_index() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let store = open(&path);
    run_with(&store, RUN, &["alice"]).await;
    let conn = rusqlite::Connection::open(&path).unwrap();
    let plan: Vec<String> = conn
        .prepare(&format!(
            "EXPLAIN QUERY PLAN {}",
            muster_mailbox::sqlite::DELIVERY_QUERY
        ))
        .unwrap()
        .query_map(rusqlite::params![RUN, "alice"], |row| {
            row.get::<_, String>(3)
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let plan = plan.join("\n");
    assert!(
        plan.contains("USING COVERING INDEX messages_delivery")
            || plan.contains("USING INDEX messages_delivery"),
        "{plan}"
    );
    assert!(!plan.contains("SCAN messages"), "{plan}");
    assert!(!plan.contains("TEMP B-TREE"), "{plan}");
}

/// The run page's newest mails are found through the delivery index alone (it holds `run_id`,
/// and `seq` as the row id): the sort takes the run's seqs, never its rows.
#[tokio::test]
async fn the_newest_mails_of_a_run_are_found_through_an_index() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let store = open(&path);
    run_with(&store, RUN, &["alice"]).await;
    let conn = rusqlite::Connection::open(&path).unwrap();
    let plan: Vec<String> = conn
        .prepare(&format!(
            "EXPLAIN QUERY PLAN {}",
            muster_mailbox::sqlite::NEWEST_SEQS_QUERY
        ))
        .unwrap()
        .query_map(rusqlite::params![RUN, 100], |row| row.get::<_, String>(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let plan = plan.join("\n");
    assert!(
        plan.contains("USING COVERING INDEX messages_delivery (run_id=?)"),
        "{plan}"
    );
    assert!(!plan.contains("SCAN"), "{plan}");
}

/// A run without run-wide limits (most runs): the reservation before each model request looks
/// at the ledger once per epoch; every later request of that epoch is granted without the
/// writer. Writing limits, or a request of another epoch, makes the store look again.
#[tokio::test]
async fn an_unlimited_runs_requests_skip_the_writer_after_the_first_look_of_the_epoch() {
    use muster_mailbox::ledger::LedgerDecision::{Grant, Wait};
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("m.db"));
    let epoch = run_with(&store, RUN, &["alice"]).await;
    store
        .open_ledger(RUN, LedgerLimits::default(), LedgerSpend::default())
        .await
        .unwrap();
    let request = LedgerSpend {
        turns: 1,
        tokens: 10,
        cost_nanos: 60,
    };
    let reserve = |agent: &'static str, epoch: i64| {
        let store = store.clone();
        async move {
            store
                .reserve_budget(RUN, agent, epoch, request)
                .await
                .unwrap()
                .decision
        }
    };
    let base = store.stats().operations;
    assert_eq!(reserve("lead", epoch).await, Grant);
    assert_eq!(store.stats().operations, base + 1, "the first look");
    for _ in 0..10 {
        assert_eq!(reserve("lead", epoch).await, Grant);
        assert_eq!(reserve("alice", epoch).await, Grant);
    }
    assert_eq!(
        store.stats().operations,
        base + 1,
        "later requests of the epoch use no writer"
    );
    // Another epoch looks again.
    assert_eq!(reserve("lead", epoch + 1).await, Grant);
    assert_eq!(store.stats().operations, base + 2);

    // Limits written (a resume's process with budgets.run): every request reserves again,
    // so two that do not fit together wait on each other.
    let limits = LedgerLimits {
        cost_nanos: Some(100),
        ..LedgerLimits::default()
    };
    store
        .open_ledger(RUN, limits, LedgerSpend::default())
        .await
        .unwrap();
    assert_eq!(reserve("lead", epoch).await, Grant);
    assert_eq!(reserve("alice", epoch).await, Wait);
}

/// Pipelined sync (`synchronous=full`, `pipelined_sync` on): a batch's rows are visible to the next
/// batch before the WAL's fsync, so no caller — the writer's, or a reader who may have seen
/// them — is answered before a sync that covers them. The writer is held between two batches
/// so the first is handed to the syncer (work is waiting) and the second runs behind it.
#[tokio::test]
async fn no_caller_hears_of_a_row_before_the_wal_sync_that_covers_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let store = open_pipelined(&path);
    run_with(&store, RUN, &["alice"]).await;
    let syncs = store.hold_syncs();
    let first_hold = store.hold_writer().await.unwrap();
    let mut queued = store.queued();
    let send = tokio::spawn({
        let store = store.clone();
        async move { store.send(text(RUN, "lead", "alice", "held")).await }
    });
    wait(&mut queued, 1).await;
    let second_hold = tokio::spawn({
        let store = store.clone();
        async move { store.hold_writer().await }
    });
    wait(&mut queued, 2).await;
    let read = tokio::spawn({
        let store = store.clone();
        async move { store.messages(RUN, Some("alice")).await }
    });
    wait(&mut queued, 3).await;
    let before = store.stats();
    let mut unanswered = store.unanswered();

    // The send commits and goes to the syncer; the writer stops at the second hold.
    drop(first_hold);
    let second_hold = tokio::time::timeout(GUARD, second_hold)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        *unanswered.borrow(),
        1,
        "the send is committed, not answered"
    );
    // The read runs and sees the committed row; it waits behind the send's sync.
    drop(second_hold);
    tokio::time::timeout(GUARD, unanswered.wait_for(|n| *n == 2))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store.stats().commits,
        before.commits,
        "nothing answered yet"
    );
    assert!(!send.is_finished() && !read.is_finished());

    drop(syncs);
    send.await.unwrap().unwrap();
    let read = read.await.unwrap().unwrap();
    assert_eq!(
        read.len(),
        1,
        "the read saw the row, and heard of it once it was on disk"
    );
    let after = store.stats();
    assert_eq!(after.commits - before.commits, 2);
    assert!(after.syncs > before.syncs);
}

/// Another connection (another process) may read a row committed but not yet synced: its
/// read syncs the WAL itself before answering; a read that saw no other connection's commit
/// since its store's last look does not sync.
#[tokio::test]
async fn a_read_of_another_connections_commit_syncs_first() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let writer = open_pipelined(&path);
    run_with(&writer, RUN, &["alice"]).await;
    let reader = open_pipelined(&path);
    reader.messages(RUN, None).await.unwrap();
    let before = reader.stats().syncs;
    reader.messages(RUN, None).await.unwrap();
    assert_eq!(reader.stats().syncs, before, "nothing new: no sync");

    writer
        .send(text(RUN, "lead", "alice", "from elsewhere"))
        .await
        .unwrap();
    let seen = reader.messages(RUN, Some("alice")).await.unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        reader.stats().syncs,
        before + 1,
        "another connection's commit: synced before the answer"
    );
    reader.messages(RUN, Some("alice")).await.unwrap();
    assert_eq!(reader.stats().syncs, before + 1);
}

/// Sync full with SQLite's own sync (the pipeline off) and sync normal make no syncs of
/// their own; the pipelined sync makes one per lone write.
#[tokio::test]
async fn only_the_pipelined_full_sync_syncs_the_wal_itself() {
    let dir = tempfile::tempdir().unwrap();
    for (name, options, syncs) in [
        (
            "pipelined",
            StoreOptions {
                pipelined_sync: true,
                ..StoreOptions::default()
            },
            1,
        ),
        ("inline, the default", StoreOptions::default(), 0),
        (
            "normal",
            StoreOptions {
                sync: SyncMode::Normal,
                ..StoreOptions::default()
            },
            0,
        ),
    ] {
        let store = open_with(&dir.path().join(format!("{name}.db")), options);
        run_with(&store, RUN, &["alice"]).await;
        let before = store.stats().syncs;
        store.send(text(RUN, "lead", "alice", "m")).await.unwrap();
        assert_eq!(store.stats().syncs - before, syncs, "{name}");
    }
}

async fn wait(queued: &mut tokio::sync::watch::Receiver<u64>, at_least: u64) {
    tokio::time::timeout(GUARD, queued.wait_for(|n| *n >= at_least))
        .await
        .unwrap()
        .unwrap();
}

/// The WAL's size before SQLite checkpoints it: its header, then 1000 frames of a 4096-byte
/// page and a 24-byte frame header (SQLite's defaults).
const WAL_ROOM: u64 = 32 + 1000 * (4096 + 24);

fn wal_size(db: &std::path::Path) -> u64 {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(wal).map_or(0, |m| m.len())
}

#[tokio::test]
async fn sixteen_writes_give_the_wal_its_room_and_a_copy_taken_then_opens_with_every_row() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let store = open(&db);
    run_with(&store, RUN, &["alice"]).await;
    for i in 0..20 {
        store
            .send(text(RUN, "lead", "alice", &format!("m{i}")))
            .await
            .unwrap();
    }
    assert_eq!(wal_size(&db), WAL_ROOM, "the WAL got its room");
    // A copy taken while the store is open (as a backup tool would): the zeros past the last
    // frame are no frames, and every committed row is there.
    let copy = dir.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    for file in ["m.db", "m.db-wal"] {
        std::fs::copy(dir.path().join(file), copy.join(file)).unwrap();
    }
    let copied = open(&copy.join("m.db"));
    let texts: Vec<_> = copied
        .messages(RUN, Some("alice"))
        .await
        .unwrap()
        .iter()
        .map(text_of)
        .collect();
    let sent: Vec<_> = (0..20).map(|i| format!("m{i}")).collect();
    assert_eq!(texts, sent);
}

#[tokio::test]
async fn a_store_that_reads_or_writes_a_few_times_leaves_the_wal_as_sqlite_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let store = open(&db);
    run_with(&store, RUN, &["alice"]).await;
    store.send(text(RUN, "lead", "alice", "m")).await.unwrap();
    for _ in 0..20 {
        store.messages(RUN, None).await.unwrap();
    }
    let size = wal_size(&db);
    assert!(size > 0 && size < WAL_ROOM / 10, "WAL of {size} bytes");
}

#[tokio::test]
async fn a_read_does_not_wait_for_the_writer_and_sees_every_answered_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("m.db"));
    run_with(&store, RUN, &["alice"]).await;
    let sent = store
        .send(text(RUN, "lead", "alice", "before"))
        .await
        .unwrap();
    let hold = store.hold_writer().await.unwrap();
    // The writer is stopped; a read answers from the store's read-only connection, with the
    // write answered before it.
    let read = tokio::time::timeout(GUARD, store.messages(RUN, Some("alice")))
        .await
        .expect("a read waited for a held writer")
        .unwrap();
    assert_eq!(read.iter().map(|m| &m.key).collect::<Vec<_>>(), [&sent.key]);
    drop(hold);
}
