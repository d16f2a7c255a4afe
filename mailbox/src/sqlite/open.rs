//! Opening a store file safely: never over something that is not SQLite, never a newer schema.

use std::io::Read;
use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use crate::error::{StoreError, StoreResult};
use crate::options::{StoreOptions, SyncMode};
use crate::sqlite::ops::sql_error;
use crate::sqlite::schema::{self, SCHEMA_VERSION};

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

/// Statements the store runs again and again stay prepared: the cache holds every one of them
/// (a few dozen, with room to spare), and SQLite's query planner stability guarantee keeps a
/// cached statement valid when its values change. Without it, a statement whose plan looked at
/// a bound value (a `MAX(seq)` over an index, an `ORDER BY` with a `LIMIT ?`) is expired when the
/// cache clears its bindings and is prepared anew at each run: measured, 8% of the process's CPU
/// in a team run.
pub(crate) fn keep_statements_prepared(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    Ok(())
}

/// More than the store's distinct statements, so none is evicted by another.
const STATEMENT_CACHE: usize = 256;

/// SQLite's own (absolute) name for the connection's database file, or `path` when it has none:
/// a later change of directory cannot point a sync or a second connection elsewhere.
pub(crate) fn database_path(conn: &Connection, path: &Path) -> std::path::PathBuf {
    conn.path()
        .filter(|p| !p.is_empty())
        .map_or_else(|| path.to_path_buf(), std::path::PathBuf::from)
}

/// Opens (creating if absent) and migrates a store file, returning the writer's connection and
/// whether the store syncs the WAL itself (see [`StoreOptions::pipelined_sync`]).
pub(crate) fn open_connection(
    path: &Path,
    options: &StoreOptions,
) -> StoreResult<(Connection, bool)> {
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
    keep_statements_prepared(&conn).map_err(locked)?;
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
    let journal: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(locked)?;
    // The store syncs the WAL itself only in WAL mode: there, SQLite's FULL adds nothing to
    // NORMAL but that sync at each COMMIT.
    let pipelined = options.sync == SyncMode::Full
        && options.pipelined_sync
        && journal.eq_ignore_ascii_case("wal");
    let synchronous = match options.sync {
        SyncMode::Full if !pipelined => "FULL",
        SyncMode::Full | SyncMode::Normal => "NORMAL",
    };
    conn.pragma_update(None, "synchronous", synchronous)
        .map_err(locked)?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(locked)?;
    schema::migrate(&conn).map_err(locked)?;
    Ok((conn, pipelined))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Statements of the store whose plans look at a bound value: the next task id (a MAX
    /// over an index) and the next message to lease (an ORDER BY with LIMIT).
    const HOT: [&str; 2] = [
        crate::ops::tasks::NEXT_TASK_ID,
        crate::ops::mail::DELIVERY_QUERY,
    ];

    #[test]
    fn a_statement_run_again_with_other_values_is_not_planned_again() {
        let dir = tempfile::tempdir().unwrap();
        let (conn, _) =
            open_connection(&dir.path().join("store.db"), &StoreOptions::default()).unwrap();
        for sql in HOT {
            for run in ["run-a", "run-b", "run-c"] {
                let mut statement = conn.prepare_cached(sql).unwrap();
                let mut rows = statement
                    .query(rusqlite::params_from_iter(
                        [run, "worker", "out"].iter().take(sql.matches('?').count()),
                    ))
                    .unwrap();
                while rows.next().unwrap().is_some() {}
            }
            let statement = conn.prepare_cached(sql).unwrap();
            assert_eq!(
                statement.get_status(rusqlite::StatementStatus::RePrepare),
                0,
                "{sql}"
            );
        }
    }
}
