//! A read-only connection beside the writer, for the one question asked far more often than it
//! is answered yes: is any mail pending for this recipient? An agent asks at every turn
//! boundary, and most of the time there is none. Asked on the writer, the look waits behind
//! other agents' commits and their syncs; asked here, it reads the latest committed state (a
//! WAL reader never waits for the writer) and only a yes goes to the writer to lease.
//!
//! A no read here may be older than a commit under way, never older than one answered: a
//! caller told its send committed has been told after its COMMIT, which any read begun later
//! sees. A look that fails says "maybe", and the writer decides as before.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OpenFlags};
use tokio::sync::watch;

use crate::types::StoreStats;

const PENDING_FOR: &str = "SELECT EXISTS (SELECT 1 FROM messages \
    WHERE run_id = ?1 AND recipient = ?2 AND state = 0)";

/// The store's read-only connection, opened at the first look.
#[derive(Clone)]
pub(crate) struct Reader {
    path: PathBuf,
    conn: Arc<Mutex<Option<Connection>>>,
    stats: watch::Sender<StoreStats>,
}

impl Reader {
    pub(crate) fn new(path: PathBuf, stats: watch::Sender<StoreStats>) -> Reader {
        Reader {
            path,
            conn: Arc::default(),
            stats,
        }
    }

    /// Whether mail may be pending for `recipient` of `run_id`: false only when a read of the
    /// latest committed state found none.
    pub(crate) async fn may_have_pending(&self, run_id: &str, recipient: &str) -> bool {
        let reader = self.clone();
        let (run_id, recipient) = (run_id.to_owned(), recipient.to_owned());
        let pending = tokio::task::spawn_blocking(move || reader.look(&run_id, &recipient))
            .await
            .unwrap_or(true);
        self.stats.send_modify(|stats| stats.looks += 1);
        pending
    }

    fn look(&self, run_id: &str, recipient: &str) -> bool {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if conn.is_none() {
            *conn = self.open().ok();
        }
        let Some(conn) = conn.as_ref() else {
            return true;
        };
        conn.prepare_cached(PENDING_FOR)
            .and_then(|mut statement| {
                statement.query_row([run_id, recipient], |row| row.get::<_, bool>(0))
            })
            .unwrap_or(true)
    }

    fn open(&self) -> rusqlite::Result<Connection> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(&self.path, flags)?;
        super::open::keep_statements_prepared(&conn)?;
        Ok(conn)
    }
}
