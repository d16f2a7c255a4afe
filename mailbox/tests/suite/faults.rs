//! Bad store files and a locked store: clear errors, files unchanged.

use std::time::Duration;

use muster_mailbox::*;

use super::common::*;

#[test]
fn a_file_that_is_not_sqlite_is_refused_and_left_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    for contents in [
        &b"hello, this is my notes file, not a database\n"[..],
        &b"SQLite"[..],
        &[0u8; 4096][..],
    ] {
        let path = dir.path().join("notes.db");
        std::fs::write(&path, contents).unwrap();
        let error = SqliteStore::open(&path, StoreOptions::default())
            .err()
            .unwrap();
        let message = error.to_string();
        assert!(matches!(error, StoreError::NotSqlite { .. }), "{message}");
        assert!(
            message.contains(&path.display().to_string())
                && message.contains("is not an SQLite database"),
            "{message}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), contents, "file unchanged");
        assert!(!dir.path().join("notes.db-wal").exists());
    }
}

#[test]
fn a_store_from_a_newer_schema_is_refused_naming_both_versions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("PRAGMA user_version = 99; CREATE TABLE future (x);")
        .unwrap();
    drop(conn);
    let error = SqliteStore::open(&path, StoreOptions::default())
        .err()
        .unwrap();
    let message = error.to_string();
    assert!(
        message.contains("schema version 99")
            && message.contains(&format!("supports up to {SCHEMA_VERSION}")),
        "{message}"
    );
}

/// A store of schema 4 (before process groups were kept) opens under this build: it gains
/// the table, and what it held reads as before.
#[tokio::test]
async fn a_schema_4_store_gains_process_groups_and_the_ledger_and_keeps_its_records() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let old_record = serde_json::json!({
        "type": "tool_started", "tool_use_id": "t1", "tool": "Bash", "process_group": 77
    });
    {
        let store = SqliteStore::open(&path, StoreOptions::default()).unwrap();
        run_with(&store, RUN, &["alice"]).await;
        store
            .append_records(
                RUN,
                vec![NewRecord {
                    agent: "alice".into(),
                    stream: "transcript".into(),
                    seq: None,
                    body: old_record.clone(),
                }],
            )
            .await
            .unwrap();
    }
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "DROP TABLE ledger_reservations; DROP TABLE run_ledgers; DROP TABLE process_groups; \
         PRAGMA user_version = 4;",
    )
    .unwrap();
    drop(conn);

    let store = SqliteStore::open(&path, StoreOptions::default()).unwrap();
    let rows = store.records(RUN, "alice", "transcript", 0).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].body, old_record);
    assert!(
        store
            .worker_process_groups("w1", "h", "b")
            .await
            .unwrap()
            .is_empty()
    );
    // And the budget ledger's table (schema 6): no ledger until the run's process opens one.
    assert_eq!(store.run_ledger(RUN).await.unwrap(), None);
    store
        .open_ledger(RUN, LedgerLimits::default(), LedgerSpend::default())
        .await
        .unwrap();
    // And the reservations' table (schema 7).
    let estimate = LedgerSpend::of_request(10, None);
    let reserved = store
        .reserve_budget(RUN, "alice", 1, estimate)
        .await
        .unwrap();
    assert_eq!(reserved.decision, ledger::LedgerDecision::Grant);
    drop(store);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    assert_eq!(SCHEMA_VERSION, 7);
}

#[tokio::test]
async fn a_locked_store_gives_up_after_busy_timeout_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let options = StoreOptions {
        busy_timeout: Duration::from_millis(150),
        ..StoreOptions::default()
    };
    let store = open_with(&path, options);
    run_with(&store, RUN, &["alice"]).await;
    let blocker = rusqlite::Connection::open(&path).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let error = store
        .send(text(RUN, "lead", "alice", "stuck"))
        .await
        .unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(error, StoreError::Locked { waited_ms: 150, .. }),
        "{message}"
    );
    assert!(
        message.contains("stayed locked by another process for 150 ms"),
        "{message}"
    );
    blocker.execute_batch("ROLLBACK").unwrap();
    store.send(text(RUN, "lead", "alice", "now")).await.unwrap();
    assert_eq!(
        store.messages(RUN, None).await.unwrap().len(),
        1,
        "the refused send left nothing"
    );
}

#[test]
fn an_empty_file_becomes_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.db");
    std::fs::write(&path, b"").unwrap();
    SqliteStore::open(&path, StoreOptions::default()).unwrap();
}
