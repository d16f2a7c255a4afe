//! Stores written by an earlier muster still load, read back the same and fork: the files under
//! `tests/data/compat-VERSION/` are the demo's team run as `main` at VERSION stored it, on
//! SQLite (an SQL dump with its `user_version`) and on PostgreSQL (`pg_dump --inserts` of its
//! schema), with what that version's `runs`, `tasks`, `plans` and `inbox --json` printed.
//! 853ba00 wrote SQLite schema 5 / PostgreSQL 6; e280e34 wrote 6 / 7 (the run ledger), the
//! last before wave 3's budget reservations.
//!
//! Remaking them (only when the wire formats change on purpose): run that version's
//! `muster demo --dir D` (and `--store postgres://…?options=-csearch_path%3DS`), dump the
//! store as above, copy `.muster/plans` and `.muster/project-id`, and save those commands'
//! output, with the project's path written `__ROOT__` and the schema's `__SCHEMA__`. A
//! `pg_dump` from 15.14 on writes `\restrict` lines for psql: delete them (the test runs the
//! dump as plain SQL).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::common::{muster, stderr, stdout};
use super::store_pg::{Schema, admin};

const COMMANDS: [(&str, &[&str]); 7] = [
    ("runs", &["runs", "--json"]),
    ("tasks", &["tasks", "--json"]),
    ("plans", &["plans", "--json"]),
    ("inbox-lead", &["inbox", "lead", "--json"]),
    ("inbox-alice", &["inbox", "alice", "--json"]),
    ("inbox-bob", &["inbox", "bob", "--json"]),
    ("inbox-human", &["inbox", "human", "--json"]),
];

fn fixture(version: &str, backend: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/data/compat-{version}"))
        .join(backend)
}

/// A project whose `.muster` holds the fixture's project id and plan files.
fn project_for(version: &str, backend: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let muster_dir = dir.path().join(".muster");
    std::fs::create_dir_all(muster_dir.join("plans")).unwrap();
    let from = fixture(version, backend);
    std::fs::copy(from.join("project-id"), muster_dir.join("project-id")).unwrap();
    for entry in std::fs::read_dir(from.join("plans")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(
            entry.path(),
            muster_dir.join("plans").join(entry.file_name()),
        )
        .unwrap();
    }
    dir
}

/// A fixture file with the project root it was written in (`__ROOT__`) put back.
fn fixture_text(version: &str, backend: &str, file: &str, root: &Path) -> String {
    let text = std::fs::read_to_string(fixture(version, backend).join(file)).unwrap();
    text.replace("__ROOT__", root.to_str().unwrap())
}

/// Each command's JSON equals what the version that wrote the store printed.
async fn reads_back_as_written(dir: &Path, store: &[&str], version: &str, backend: &str) {
    for (name, args) in COMMANDS {
        let args: Vec<&str> = store.iter().chain(args).copied().collect();
        let output = muster(dir, &args).await;
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
        let now: Value = serde_json::from_str(&stdout(&output)).unwrap();
        let expected = fixture_text(version, backend, &format!("expected/{name}.json"), dir);
        let then: Value = serde_json::from_str(&expected).unwrap();
        assert_eq!(
            now,
            then,
            "`muster {}` on the {backend} store written at {version}",
            args.join(" ")
        );
    }
}

/// A fork copies every message of the old run through today's write path; the copy reads back
/// with the same kinds and bodies.
async fn forks(dir: &Path, store: &[&str]) {
    let runs = muster(dir, &[store, &["runs", "--json"]].concat()).await;
    let runs: Value = serde_json::from_str(&stdout(&runs)).unwrap();
    let run_id = runs[0]["run"]["id"].as_str().unwrap().to_owned();
    let fork = muster(dir, &[store, &["fork", &run_id]].concat()).await;
    assert!(fork.status.success(), "{}", stderr(&fork));
    let after: Value = serde_json::from_str(&stdout(
        &muster(dir, &[store, &["runs", "--json"]].concat()).await,
    ))
    .unwrap();
    let fork = after
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["run"])
        .find(|run| run["id"] != run_id.as_str())
        .unwrap();
    let (fork_id, fork_slug) = (fork["id"].as_str().unwrap(), fork["slug"].as_str().unwrap());
    let bodies = |text: String| -> Vec<(Value, Value)> {
        let inbox: Value = serde_json::from_str(&text).unwrap();
        inbox
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["message"]["kind"].clone(), m["message"]["body"].clone()))
            .collect()
    };
    let inbox = |run: String| {
        let store = store.to_vec();
        async move {
            let args = [&store[..], &["inbox", "lead", "--json", "--run", &run]].concat();
            stdout(&muster(dir, &args).await)
        }
    };
    let original = bodies(inbox(run_id).await);
    assert!(original.len() > 10, "the demo's lead got its mail");
    // A fork has its own slug, so its plan files (and the mail naming them) are its own: the
    // rest is the same.
    let slug = runs[0]["run"]["slug"].as_str().unwrap();
    let renamed = |(kind, body): (Value, Value)| {
        let text = body.to_string().replace(slug, fork_slug);
        (kind, serde_json::from_str::<Value>(&text).unwrap())
    };
    let original: Vec<_> = original.into_iter().map(renamed).collect();
    assert_eq!(bodies(inbox(fork_id.to_owned()).await), original);
}

async fn an_sqlite_store_reads_back_and_forks(version: &str) {
    let dir = project_for(version, "sqlite");
    let dump = fixture_text(version, "sqlite", "store.sql", dir.path());
    let connection = rusqlite::Connection::open(dir.path().join(".muster/muster.db")).unwrap();
    connection.execute_batch(&dump).unwrap();
    drop(connection);
    reads_back_as_written(dir.path(), &[], version, "sqlite").await;
    forks(dir.path(), &[]).await;
}

async fn a_postgres_store_reads_back_and_forks(version: &str) {
    let schema = Schema::new().await;
    let dir = project_for(version, "postgres");
    let dump = fixture_text(version, "postgres", "store.sql", dir.path());
    // The dump creates its schema: start from none.
    admin(&format!(
        "DROP SCHEMA {name} CASCADE; {}",
        dump.replace("__SCHEMA__", schema.name()),
        name = schema.name()
    ))
    .await;
    let url = schema.url();
    let store = ["--store", url.as_str()];
    reads_back_as_written(dir.path(), &store, version, "postgres").await;
    forks(dir.path(), &store).await;
    schema.drop_now().await;
}

#[tokio::test]
async fn an_sqlite_store_written_by_main_at_853ba00_reads_back_the_same_and_forks() {
    an_sqlite_store_reads_back_and_forks("853ba00").await;
}

#[tokio::test]
async fn a_postgres_store_written_by_main_at_853ba00_reads_back_the_same_and_forks() {
    a_postgres_store_reads_back_and_forks("853ba00").await;
}

#[tokio::test]
async fn an_sqlite_store_written_by_main_at_e280e34_reads_back_the_same_and_forks() {
    an_sqlite_store_reads_back_and_forks("e280e34").await;
}

#[tokio::test]
async fn a_postgres_store_written_by_main_at_e280e34_reads_back_the_same_and_forks() {
    a_postgres_store_reads_back_and_forks("e280e34").await;
}
