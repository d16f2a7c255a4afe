//! Opening a store file safely: never over something that is not SQLite, never a newer schema.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use crate::error::{StoreError, StoreResult};
use crate::sqlite::ops::sql_error;
use crate::sqlite::schema::{self, SCHEMA_VERSION};

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
        }
    }
}

const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

/// Refuses a non-empty file whose header is not SQLite's, before SQLite touches it.
fn check_header(path: &Path) -> StoreResult<()> {
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(StoreError::Open {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let mut header = [0u8; 16];
    let mut read = 0;
    while read < header.len() {
        match file.read(&mut header[read..]) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(source) => {
                return Err(StoreError::Open {
                    path: path.to_path_buf(),
                    source,
                });
            }
        }
    }
    if read == 0 || (read == header.len() && &header == SQLITE_HEADER) {
        Ok(())
    } else {
        Err(StoreError::NotSqlite {
            path: path.to_path_buf(),
        })
    }
}

/// Opens (creating if absent) and migrates a store file, returning the writer's connection.
pub(crate) fn open_connection(path: &Path, options: &StoreOptions) -> StoreResult<Connection> {
    check_header(path)?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| StoreError::Open {
            path: path.to_path_buf(),
            source,
        })?;
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| sql_error(path, e))?;
    let busy_ms = options.busy_timeout.as_millis() as u64;
    let locked = |e: rusqlite::Error| match sql_error(path, e) {
        StoreError::Locked { path, .. } => StoreError::Locked {
            path,
            waited_ms: busy_ms,
        },
        other => other,
    };
    conn.busy_timeout(options.busy_timeout).map_err(locked)?;
    let found = schema::stored_version(&conn).map_err(|e| match sql_error(path, e) {
        // SQLite reports a garbled header as "file is not a database".
        StoreError::Sqlite { source, .. }
            if source.sqlite_error_code() == Some(rusqlite::ErrorCode::NotADatabase) =>
        {
            StoreError::NotSqlite {
                path: path.to_path_buf(),
            }
        }
        other => other,
    })?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            path: path.to_path_buf(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(locked)?;
    let synchronous = match options.sync {
        SyncMode::Full => "FULL",
        SyncMode::Normal => "NORMAL",
    };
    conn.pragma_update(None, "synchronous", synchronous)
        .map_err(locked)?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(locked)?;
    schema::migrate(&conn).map_err(locked)?;
    Ok(conn)
}
