//! Helpers shared by the suites.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use muster_mailbox::*;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::pg;

pub const RUN: &str = "r1";

pub fn open(path: &Path) -> SqliteStore {
    SqliteStore::open(path, StoreOptions::default()).unwrap()
}

/// A store with the pipelined WAL sync (off by default).
pub fn open_pipelined(path: &Path) -> SqliteStore {
    open_with(
        path,
        StoreOptions {
            pipelined_sync: true,
            ..StoreOptions::default()
        },
    )
}

pub fn open_with(path: &Path, options: StoreOptions) -> SqliteStore {
    SqliteStore::open(path, options).unwrap()
}

/// The backends every contract, transition, race and crash test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Where a store lives: what a test reopens and hands to its child processes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Location {
    File(PathBuf),
    Postgres(String),
}

impl Location {
    /// The store as the process running work item `fence` opens it: every write checked
    /// against the item's lease.
    pub async fn open_fenced(&self, fence: WorkFence) -> Arc<dyn MailboxStore> {
        match self {
            Location::File(path) => Arc::new(open(path).fenced(fence)),
            Location::Postgres(url) => Arc::new(
                PostgresStore::open(url, StoreOptions::default())
                    .await
                    .unwrap()
                    .fenced(fence),
            ),
        }
    }

    pub async fn open(&self) -> Arc<dyn MailboxStore> {
        self.open_with(StoreOptions::default()).await
    }

    pub async fn open_with(&self, options: StoreOptions) -> Arc<dyn MailboxStore> {
        match self {
            Location::File(path) => Arc::new(open_with(path, options)),
            Location::Postgres(url) => Arc::new(PostgresStore::open(url, options).await.unwrap()),
        }
    }
}

/// One test's store place: a file in a temporary directory, or a fresh schema on the test
/// server; both removed when the test ends.
pub struct Place {
    location: Location,
    _dir: Option<tempfile::TempDir>,
    _schema: Option<pg::Schema>,
}

impl Place {
    pub async fn new(backend: Backend) -> Place {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                Place {
                    location: Location::File(dir.path().join("m.db")),
                    _dir: Some(dir),
                    _schema: None,
                }
            }
            Backend::Postgres => {
                let schema = tokio::task::spawn_blocking(pg::Schema::new).await.unwrap();
                Place {
                    location: Location::Postgres(schema.url()),
                    _dir: None,
                    _schema: Some(schema),
                }
            }
        }
    }

    pub fn location(&self) -> Location {
        self.location.clone()
    }

    pub async fn open(&self) -> Arc<dyn MailboxStore> {
        self.location.open().await
    }

    pub async fn open_with(&self, options: StoreOptions) -> Arc<dyn MailboxStore> {
        self.location.open_with(options).await
    }
}

/// Instantiates each named `async fn NAME(backend: Backend)` of the enclosing module as a
/// test on SQLite (`sqlite::NAME`) and on PostgreSQL (`postgres::NAME`): one suite, two
/// backends, no copies.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::suite::common::Backend::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::suite::common::Backend::Postgres).await
                }
            )*
        }
    };
}
pub(crate) use on_both_backends;

/// Either kind of store handle the tests hold.
pub trait AsStore {
    fn store(&self) -> &dyn MailboxStore;
}

impl AsStore for SqliteStore {
    fn store(&self) -> &dyn MailboxStore {
        self
    }
}

impl AsStore for Arc<SqliteStore> {
    fn store(&self) -> &dyn MailboxStore {
        self.as_ref()
    }
}

impl AsStore for Arc<dyn MailboxStore> {
    fn store(&self) -> &dyn MailboxStore {
        self.as_ref()
    }
}

pub fn new_run(id: &str) -> NewRun {
    NewRun {
        id: id.into(),
        slug: format!("slug-of-{id}"),
        team: Some("t".into()),
        workspace: "/ws".into(),
        batch_line_id: None,
        auto_gate: AutoGate {
            open: true,
            consecutive_denials: 0,
            limit: 3,
        },
        launch_options: json!({"provider": "script"}),
        project_id: None,
    }
}

/// A run with a lead and the given teammates.
pub async fn run_with(store: &impl AsStore, id: &str, teammates: &[&str]) -> i64 {
    let store = store.store();
    store.create_run(new_run(id)).await.unwrap();
    store
        .add_member(
            id,
            RosterEntry {
                agent: "lead".into(),
                kind: MemberKind::Lead,
                definition: Some("lead".into()),
                parent: None,
            },
        )
        .await
        .unwrap();
    for name in teammates {
        store
            .add_member(
                id,
                RosterEntry {
                    agent: (*name).into(),
                    kind: MemberKind::Teammate,
                    definition: Some("general".into()),
                    parent: None,
                },
            )
            .await
            .unwrap();
    }
    store.open_epoch(id).await.unwrap()
}

pub fn text(run: &str, from: &str, to: &str, text: &str) -> NewMessage {
    NewMessage {
        run_id: run.into(),
        sender: from.into(),
        recipient: to.into(),
        body: MessageBody::Text {
            text: text.into(),
            summary: None,
        },
        idempotency_key: None,
    }
}

pub fn text_of(message: &Message) -> String {
    match message.body.clone() {
        MessageBody::Text { text, .. } => text,
        other => panic!("not a text message: {other:?}"),
    }
}

/// A failure guard for waits on events; never a way to wait.
pub const GUARD: Duration = Duration::from_secs(20);
