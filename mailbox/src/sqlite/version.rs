//! `PRAGMA data_version` on a connection of its own: a watcher's cheap check whether any other
//! connection (any process) committed to the store since it last looked.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

use crate::error::{StoreError, StoreResult};
use crate::sqlite::ops::sql_error;

/// A read-only connection that tells whether the store changed.
pub struct DataVersion {
    conn: Connection,
    path: PathBuf,
}

impl DataVersion {
    /// Opens the existing store at `path` read-only (never creating or migrating it).
    pub fn open(path: &Path) -> StoreResult<DataVersion> {
        if !path.exists() {
            return Err(StoreError::Open {
                path: path.to_path_buf(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no store file"),
            });
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(|e| sql_error(path, e))?;
        Ok(DataVersion {
            conn,
            path: path.to_path_buf(),
        })
    }

    /// The current value: it differs from the last one read whenever another connection
    /// committed in between (this connection never writes).
    pub fn read(&self) -> StoreResult<i64> {
        self.conn
            .query_row("PRAGMA data_version", [], |row| row.get(0))
            .map_err(|e| sql_error(&self.path, e))
    }
}
