//! The PostgreSQL schema and its migrations: the SQLite store's relational model, table for
//! table, in the connection's current schema (the first of its `search_path`). The version
//! lives in the one-row table `muster_schema`, which also marks the schema as muster's.

use tokio_postgres::Client;

use crate::error::{StoreError, StoreResult};
use crate::ops::schema;
use crate::postgres::ops::{Ctx, pg_error};

/// Migrations in order; migration `i` takes the schema from version `i` to `i + 1`: the
/// SQLite store's steps ([`crate::ops::schema`], run as [`schema::postgres`] renders them), so
/// both backends keep one model, and one step of the server's own.
const MIGRATIONS: &[&str] = &[
    schema::FIRST,          // 0 -> 1
    schema::OPERATIONS,     // 1 -> 2
    OPERATION_IDS,          // 2 -> 3
    schema::PROJECTS,       // 3 -> 4
    schema::WORK,           // 4 -> 5
    schema::PROCESS_GROUPS, // 5 -> 6
    schema::LEDGERS,        // 6 -> 7
    schema::RESERVATIONS,   // 7 -> 8
];

/// PostgreSQL only: every write stores its outcome under a fresh operation id in
/// its own transaction, so a retry after a lost COMMIT acknowledgement returns the first
/// result instead of writing twice. A row is deleted by the store's next write once its
/// COMMIT was acknowledged.
const OPERATION_IDS: &str = r#"
    CREATE TABLE operation_ids (
        op_key     TEXT PRIMARY KEY,
        run_id     TEXT NOT NULL,
        outcome    TEXT NOT NULL,
        created_at BIGINT NOT NULL
    );
    "#;

/// The newest schema version this build knows (versions 1 and 2 are SQLite's; 3 adds the
/// operation ids only a server store needs).
pub const PG_SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// What marks a schema as muster's: the version table with this application name in it.
const APPLICATION: &str = "muster";

/// Refuses a schema that holds someone else's tables or a newer muster's, then brings it up
/// to [`PG_SCHEMA_VERSION`]. Each step runs in one transaction under an advisory lock on the
/// schema, so two processes opening a new store at once do not collide; DDL is
/// transactional in PostgreSQL, so a step is applied whole or not at all.
pub(crate) async fn migrate(client: &mut Client, ctx: &Ctx) -> StoreResult<()> {
    let tx = client.transaction().await.map_err(|e| pg_error(ctx, e))?;
    match migrate_in(&tx, ctx).await {
        Ok(()) => tx.commit().await.map_err(|e| pg_error(ctx, e)),
        Err(error) => {
            // Release the schema lock now, not when the connection happens to close.
            let _ = tx.rollback().await;
            Err(error)
        }
    }
}

async fn migrate_in(tx: &tokio_postgres::Transaction<'_>, ctx: &Ctx) -> StoreResult<()> {
    tx.execute(
        "SELECT pg_advisory_xact_lock($1)",
        &[&ctx.schema_lock_key()],
    )
    .await
    .map_err(|e| pg_error(ctx, e))?;
    let found = stored_version(tx, ctx).await?;
    if found > PG_SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            path: ctx.target.to_string().into(),
            found,
            supported: PG_SCHEMA_VERSION,
        });
    }
    if found == 0 {
        tx.batch_execute(
            "CREATE TABLE muster_schema (application TEXT NOT NULL, version BIGINT NOT NULL)",
        )
        .await
        .map_err(|e| pg_error(ctx, e))?;
        tx.execute(
            "INSERT INTO muster_schema (application, version) VALUES ($1, 0)",
            &[&APPLICATION],
        )
        .await
        .map_err(|e| pg_error(ctx, e))?;
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(found.max(0) as usize) {
        let to = index as i64 + 1;
        tx.batch_execute(&schema::postgres(sql))
            .await
            .map_err(|e| pg_error(ctx, e))?;
        tx.execute("UPDATE muster_schema SET version = $1", &[&to])
            .await
            .map_err(|e| pg_error(ctx, e))?;
    }
    Ok(())
}

/// The version the current schema declares: 0 for an empty schema; refuses one that holds
/// tables but no muster version table, or a version table of another application.
async fn stored_version(tx: &tokio_postgres::Transaction<'_>, ctx: &Ctx) -> StoreResult<i64> {
    let tables: Vec<String> = tx
        .query(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = current_schema() ORDER BY table_name",
            &[],
        )
        .await
        .map_err(|e| pg_error(ctx, e))?
        .iter()
        .map(|row| row.try_get(0))
        .collect::<Result<_, _>>()
        .map_err(|e| pg_error(ctx, e))?;
    if tables.is_empty() {
        return Ok(0);
    }
    let not_ours = |detail: String| StoreError::NotMusterDatabase {
        target: ctx.target.to_string(),
        schema: ctx.schema.to_string(),
        detail,
    };
    if !tables.iter().any(|t| t == "muster_schema") {
        let shown: Vec<&str> = tables.iter().take(5).map(String::as_str).collect();
        return Err(not_ours(format!(
            "it holds {} table(s) ({}{}) and no muster_schema table",
            tables.len(),
            shown.join(", "),
            if tables.len() > shown.len() {
                ", …"
            } else {
                ""
            }
        )));
    }
    let row = tx
        .query_opt("SELECT application, version FROM muster_schema", &[])
        .await
        .map_err(|e| not_ours(format!("its muster_schema table does not read: {e}")))?
        .ok_or_else(|| not_ours("its muster_schema table is empty".into()))?;
    let application: String = row
        .try_get(0)
        .map_err(|e| not_ours(format!("its muster_schema table does not read: {e}")))?;
    if application != APPLICATION {
        return Err(not_ours(format!(
            "its muster_schema table belongs to {application:?}"
        )));
    }
    row.try_get(1)
        .map_err(|e| not_ours(format!("its muster_schema version does not read: {e}")))
}
