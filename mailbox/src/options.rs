//! How a store is opened, whichever the backend: the options both `SqliteStore::open` and
//! `PostgresStore::open` take.

use std::sync::Arc;
use std::time::Duration;

/// How hard a commit waits for the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SyncMode {
    /// WAL synced on every commit: survives power loss (the default).
    #[default]
    Full,
    /// WAL synced at checkpoints: survives a process crash, not a power loss.
    Normal,
}

/// How to open a store.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub sync: SyncMode,
    pub busy_timeout: Duration,
    pub max_body_bytes: usize,
    /// Called on the writer thread after each COMMIT that succeeded, before any caller of the
    /// committed operations learns of it (SQLite only; PostgreSQL announces commits on its
    /// change channel). It must be quick and must not fail: the commit is already durable.
    pub after_commit: Option<CommitHook>,
    /// PostgreSQL only: after each write's COMMIT, a NOTIFY on the schema's change channel, so
    /// a `muster serve` on any machine sees the commit. On by default; `muster bench mailbox`
    /// turns it off beside it to show what it costs.
    pub announce_changes: bool,
    /// SQLite only: the writer waits a moment (at most half its last COMMIT) for the callers
    /// its last commit released before beginning the next transaction, so closed-loop writers
    /// share one fsync. On by default.
    pub gather_released: bool,
    /// SQLite only, at [`SyncMode::Full`]: SQLite commits at `synchronous=NORMAL` and a
    /// thread of the store syncs the WAL before any caller of the batch (or of a later batch,
    /// which may have read it) hears of it, while the writer runs the next batch. Every
    /// acknowledged write is as durable as at `synchronous=FULL`, and no caller is ever
    /// answered from a row not yet on disk. Off by default: SQLite syncs inside COMMIT
    /// (`synchronous=FULL`), which measured as fast or faster on the disk muster was
    /// benchmarked on (see docs/store.md); `muster bench mailbox` runs the two side by side.
    pub pipelined_sync: bool,
}

/// What a process does after each of its commits: the orchestrator tells an open web inbox.
#[derive(Clone)]
pub struct CommitHook(Arc<dyn Fn() + Send + Sync>);

impl CommitHook {
    pub fn new(hook: impl Fn() + Send + Sync + 'static) -> CommitHook {
        CommitHook(Arc::new(hook))
    }

    pub(crate) fn call(&self) {
        (self.0)()
    }
}

impl std::fmt::Debug for CommitHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CommitHook")
    }
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            sync: SyncMode::Full,
            busy_timeout: Duration::from_millis(5000),
            max_body_bytes: 1024 * 1024,
            after_commit: None,
            announce_changes: true,
            gather_released: true,
            pipelined_sync: false,
        }
    }
}
