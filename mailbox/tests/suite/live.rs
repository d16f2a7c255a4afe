//! The cross-process wake: a live run holds its lock and socket; another process commits,
//! then pokes, and the waiting recipient wakes at once.

use std::sync::Arc;

use muster_mailbox::live::{self, LiveRun, PokeOutcome};
use muster_mailbox::*;

use super::child::{Action, spawn};
use super::common::*;

#[tokio::test]
async fn another_process_commits_then_wakes_the_live_run() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let runs_dir = dir.path().join("runs");
    let store = Arc::new(open(&db));
    let epoch = run_with(&store, RUN, &["alice"]).await;
    let _live = LiveRun::start(&runs_dir, RUN, store.clone(), None).unwrap();
    assert!(live::is_live(&runs_dir, RUN).unwrap());

    let base = store.stats().looks;
    let mut stats = store.watch_stats();
    let receiver = tokio::spawn({
        let store = store.clone();
        async move { store.receive(RUN, "alice", epoch, MessageFilter::Any).await }
    });
    // The receiver has looked (on the store's read-only connection) and waits.
    tokio::time::timeout(GUARD, stats.wait_for(|s| s.looks > base))
        .await
        .unwrap()
        .unwrap();

    let mut child = spawn(&Action::SendAndPoke {
        db: db.clone(),
        runs_dir: runs_dir.clone(),
        text: "approved".into(),
    });
    assert_eq!(child.next_event().as_deref(), Some("poked Woken"));
    let got = tokio::time::timeout(GUARD, receiver)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(text_of(&got), "approved");
}

#[tokio::test]
async fn a_run_is_live_in_one_process_only_and_a_free_lock_means_not_live() {
    let dir = tempfile::tempdir().unwrap();
    let runs_dir = dir.path().join("runs");
    let store: Arc<dyn MailboxStore> = Arc::new(open(&dir.path().join("m.db")));
    assert_eq!(
        live::poke(&runs_dir, RUN, "alice").unwrap(),
        PokeOutcome::NotLive
    );
    let first = LiveRun::start(&runs_dir, RUN, store.clone(), None).unwrap();
    let second = LiveRun::start(&runs_dir, RUN, store.clone(), None)
        .err()
        .unwrap();
    assert!(
        second.to_string().contains("is live in another process"),
        "{second}"
    );
    let socket = first.socket().to_path_buf();
    drop(first);
    assert!(!socket.exists(), "the socket goes with the run");
    assert!(!live::is_live(&runs_dir, RUN).unwrap());
    assert_eq!(
        live::poke(&runs_dir, RUN, "alice").unwrap(),
        PokeOutcome::NotLive
    );
    LiveRun::start(&runs_dir, RUN, store, None).unwrap();
}
