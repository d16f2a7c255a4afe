//! A read-only connection beside the writer: for the store's reads, and for the one question
//! asked far more often than it is answered yes — is any mail pending for this recipient? An
//! agent asks at every turn boundary, and most of the time there is none. On the writer, a
//! read or a look waits behind other agents' commits and their syncs; here it reads the latest
//! committed state (a WAL reader never waits for the writer), and for a look only a yes goes
//! to the writer to lease.
//!
//! What a read here sees may be older than a commit under way, never older than one answered:
//! a caller told its write committed has been told after its COMMIT, which any read begun later
//! sees. With SQLite's own sync a commit is visible only once it is on disk (SQLite syncs the
//! WAL before it publishes the commit), so a read here tells nothing a power loss could take
//! back; with the store's pipelined sync it could, and the store reads on the writer instead
//! (see `sqlite/mod.rs`). A look that fails says "maybe", and the writer decides as before.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::watch;

use super::ops::sql_error;
use crate::error::{StoreError, StoreResult};
use crate::ops::mail::PENDING_FOR;
use crate::types::StoreStats;

/// The store's read-only connection, opened at its first use.
#[derive(Clone)]
pub(crate) struct Reader {
    path: PathBuf,
    busy_timeout: Duration,
    conn: Arc<Mutex<Option<Connection>>>,
    stats: watch::Sender<StoreStats>,
}

impl Reader {
    pub(crate) fn new(
        path: PathBuf,
        busy_timeout: Duration,
        stats: watch::Sender<StoreStats>,
    ) -> Reader {
        Reader {
            path,
            busy_timeout,
            conn: Arc::default(),
            stats,
        }
    }

    /// Whether mail may be pending for `recipient` of `run_id`: false only when a read of the
    /// latest committed state found none.
    ///
    /// The look is one indexed read of a few pages: when the connection is open and free, it
    /// runs on the caller's thread, sparing an agent's turn the wake of a blocking thread and
    /// the wake back. A WAL reader does not wait for the writer (only, rarely, for another
    /// connection recovering the WAL), so it does not hold the thread.
    pub(crate) async fn may_have_pending(&self, run_id: &str, recipient: &str) -> bool {
        let pending = match self.look_here(run_id, recipient) {
            Some(pending) => pending,
            None => {
                let reader = self.clone();
                let (run_id, recipient) = (run_id.to_owned(), recipient.to_owned());
                tokio::task::spawn_blocking(move || reader.look(&run_id, &recipient))
                    .await
                    .unwrap_or(true)
            }
        };
        self.stats.send_modify(|stats| stats.looks += 1);
        pending
    }

    /// The look on this thread, if the connection is open and no read holds it.
    fn look_here(&self, run_id: &str, recipient: &str) -> Option<bool> {
        let conn = self.conn.try_lock().ok()?;
        Some(pending_for(conn.as_ref()?, run_id, recipient))
    }

    fn look(&self, run_id: &str, recipient: &str) -> bool {
        self.with_connection(|conn| pending_for(conn, run_id, recipient))
            .unwrap_or(true)
    }

    /// Runs `read` in one read transaction (one snapshot for all its statements), on a
    /// blocking thread.
    pub(crate) async fn read<T, F>(&self, read: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    {
        let reader = self.clone();
        let path = self.path.clone();
        let run = move || {
            reader
                .with_connection(|conn| in_snapshot(conn, &reader.path, read))
                .map_err(|error| sql_error(&reader.path, error))?
        };
        // The blocking task ends only by returning, or by a panic or the runtime's shutdown.
        tokio::task::spawn_blocking(run)
            .await
            .map_err(|error| StoreError::Open {
                path,
                source: std::io::Error::other(format!("a read of the store stopped: {error}")),
            })?
    }

    /// `use_it` on the connection, opened at first use; an error when it cannot be opened.
    fn with_connection<T>(&self, use_it: impl FnOnce(&Connection) -> T) -> rusqlite::Result<T> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let conn = match conn.as_mut() {
            Some(conn) => conn,
            None => conn.insert(self.open()?),
        };
        Ok(use_it(conn))
    }

    fn open(&self) -> rusqlite::Result<Connection> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(&self.path, flags)?;
        conn.busy_timeout(self.busy_timeout)?;
        super::open::keep_statements_prepared(&conn)?;
        Ok(conn)
    }
}

/// Whether `conn` finds mail pending for `recipient`; yes when the look fails.
fn pending_for(conn: &Connection, run_id: &str, recipient: &str) -> bool {
    conn.prepare_cached(PENDING_FOR)
        .and_then(|mut statement| {
            statement.query_row([run_id, recipient], |row| row.get::<_, bool>(0))
        })
        .unwrap_or(true)
}

/// `read` between a BEGIN and its end: the statements of one read see one committed state.
fn in_snapshot<T>(
    conn: &Connection,
    path: &Path,
    read: impl FnOnce(&Connection) -> StoreResult<T>,
) -> StoreResult<T> {
    let control = |sql: &str| conn.prepare_cached(sql).and_then(|mut s| s.execute([]));
    control("BEGIN").map_err(|source| sql_error(path, source))?;
    let result = read(conn);
    // A read transaction has nothing to keep: it ends the same way either way.
    let _ = control("ROLLBACK");
    result
}
