//! The schema and its migrations. The version lives in `PRAGMA user_version`; new message
//! kinds never change it, only table or column changes do.

use rusqlite::Connection;

use crate::ops::schema;

/// Migrations in order; migration `i` takes the schema from version `i` to `i + 1` (the
/// steps' text: [`crate::ops::schema`]).
const MIGRATIONS: &[&str] = &[
    schema::FIRST,          // 0 -> 1
    schema::OPERATIONS,     // 1 -> 2
    schema::PROJECTS,       // 2 -> 3
    schema::WORK,           // 3 -> 4
    schema::PROCESS_GROUPS, // 4 -> 5
    schema::LEDGERS,        // 5 -> 6
    schema::RESERVATIONS,   // 6 -> 7
];

/// The newest schema version this build knows.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Brings the schema up to [`SCHEMA_VERSION`], each step in one transaction that re-reads the
/// version under the write lock, so two processes opening a new store at once do not collide.
pub(crate) fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    // The common case, a current store, takes no write lock and no transaction.
    if stored_version(conn)? >= SCHEMA_VERSION {
        return Ok(());
    }
    for (index, sql) in MIGRATIONS.iter().enumerate() {
        let to = index as i64 + 1;
        conn.execute_batch("BEGIN IMMEDIATE")?;
        let step = (|| {
            let current: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
            if current < to {
                conn.execute_batch(sql)?;
                conn.execute_batch(&format!("PRAGMA user_version = {to}"))?;
            }
            conn.execute_batch("COMMIT")
        })();
        if step.is_err() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        step?;
    }
    Ok(())
}

/// The schema version a store file declares.
pub(crate) fn stored_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |row| row.get(0))
}
