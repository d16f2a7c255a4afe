//! The PostgreSQL side of [`crate::ops`]: a [`Tx`](crate::ops::Tx) on one server
//! transaction, the error mapping, lock keys and the write's operation id. Every write runs
//! under its runs' transaction-level advisory locks (see `mod.rs`), so writes to one run are
//! serialised as on SQLite's single writer; an `Err` rolls the whole operation back.

use std::sync::Arc;

use postgres_protocol::escape::escape_literal;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use crate::error::{StoreError, StoreResult};
use crate::wake::Wake;

/// A pooled connection, inside the operation's transaction (see `OpenTx` in `mod.rs`).
pub(crate) type Conn = deadpool_postgres::Object;
type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// Settings every operation needs.
#[derive(Debug, Clone)]
pub(crate) struct Ctx {
    /// The store's URL with its password masked: what errors name.
    pub(crate) target: Arc<str>,
    /// The schema the store's tables live in (the connection's `current_schema()`).
    pub(crate) schema: Arc<str>,
    pub(crate) max_body_bytes: usize,
}

impl Ctx {
    /// The advisory lock key that serialises writes to `run_id` in this schema: two schemas
    /// (two tests, two installations in one database) never wait for each other.
    pub(crate) fn run_lock_key(&self, run_id: &str) -> i64 {
        fnv1a(&[self.schema.as_bytes(), b"\0run\0", run_id.as_bytes()]) as i64
    }

    /// The session-level advisory lock key a live run holds (another namespace than the
    /// write locks, which are transaction-level and short).
    pub(crate) fn live_lock_key(&self, run_id: &str) -> i64 {
        fnv1a(&[self.schema.as_bytes(), b"\0live\0", run_id.as_bytes()]) as i64
    }

    /// The channel a live run listens on: one per run and schema (an identifier of at most
    /// 63 bytes, whatever the run id).
    pub(crate) fn wake_channel(&self, run_id: &str) -> String {
        format!(
            "muster_wake_{:016x}",
            fnv1a(&[self.schema.as_bytes(), b"\0wake\0", run_id.as_bytes()])
        )
    }

    /// The advisory lock key migrations take.
    pub(crate) fn schema_lock_key(&self) -> i64 {
        fnv1a(&[self.schema.as_bytes(), b"\0migrate"]) as i64
    }
}

pub(crate) fn fnv1a(parts: &[&[u8]]) -> u64 {
    parts
        .iter()
        .flat_map(|part| part.iter())
        .fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
            (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
        })
}

/// A server error as the store reports it: the server's message, detail and hint when it
/// sent them, else the client's (a lost connection, a protocol error).
pub(crate) fn pg_error(ctx: &Ctx, source: tokio_postgres::Error) -> StoreError {
    let lost = is_connection_lost(&source);
    let detail = match source.as_db_error() {
        Some(db) => {
            let mut text = format!("{}: {}", db.code().code(), db.message());
            if let Some(detail) = db.detail() {
                text.push_str(&format!(" ({detail})"));
            }
            if let Some(hint) = db.hint() {
                text.push_str(&format!("; hint: {hint}"));
            }
            text
        }
        None => with_causes(&source),
    };
    if lost {
        return StoreError::ConnectionLost {
            target: ctx.target.to_string(),
            detail,
        };
    }
    StoreError::Postgres {
        target: ctx.target.to_string(),
        detail,
    }
}

/// The client's error and each of its causes, `: `-separated.
pub(crate) fn with_causes(source: &tokio_postgres::Error) -> String {
    let mut text = source.to_string();
    let mut cause = std::error::Error::source(source);
    while let Some(inner) = cause {
        text.push_str(&format!(": {inner}"));
        cause = inner.source();
    }
    text
}

/// Whether the connection broke (closed, reset, a server restart's 57P01 termination):
/// the transaction did not commit, or its COMMIT's outcome is unknown.
fn is_connection_lost(source: &tokio_postgres::Error) -> bool {
    if source.is_closed() {
        return true;
    }
    if let Some(db) = source.as_db_error() {
        // admin_shutdown, crash_shutdown, cannot_connect_now
        return matches!(db.code().code(), "57P01" | "57P02" | "57P03");
    }
    let mut cause = std::error::Error::source(source);
    while let Some(inner) = cause {
        if inner.downcast_ref::<std::io::Error>().is_some() {
            return true;
        }
        cause = inner.source();
    }
    false
}

/// The channel every change of this schema's work queues is announced on.
pub(crate) fn work_channel(ctx: &Ctx) -> String {
    format!(
        "muster_work_{:016x}",
        fnv1a(&[ctx.schema.as_bytes(), b"\0work"])
    )
}

/// A fresh operation id for one write and its retries.
pub(crate) fn new_operation_key() -> String {
    Uuid::now_v7().to_string()
}

/// What a write stored under its operation id: its result and whom it woke.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredOperation<T> {
    value: T,
    wakes: Vec<Wake>,
}

/// The first attempt's result, when a retried write's first attempt did commit.
pub(crate) async fn stored_operation<T: serde::de::DeserializeOwned>(
    tx: &PgTx<'_>,
    op_key: &str,
) -> StoreResult<Option<(T, Vec<Wake>)>> {
    let sql = "SELECT outcome FROM operation_ids WHERE op_key = ?1";
    let read = |row: &crate::rows::Row<'_>| row.get::<String>("operation_ids", 0);
    let Some(text) = crate::ops::Tx::query_opt(tx, sql, &[&op_key], read).await? else {
        return Ok(None);
    };
    let stored: StoredOperation<T> =
        serde_json::from_str(&text).map_err(|e| StoreError::CorruptRow {
            table: "operation_ids",
            detail: format!("the outcome of operation {op_key} does not read: {e}"),
        })?;
    Ok(Some((stored.value, stored.wakes)))
}

/// The statement that stores a write's result under its operation id, in its transaction,
/// and deletes the rows of writes whose COMMIT was acknowledged since (`confirmed`). Its
/// values are literals (quoted by `postgres-protocol`, as libpq quotes them), so that it
/// travels with the COMMIT in one simple query.
pub(crate) fn operation_statement<T: serde::Serialize>(
    run_id: &str,
    op_key: &str,
    value: &T,
    wakes: &[Wake],
    confirmed: &[String],
) -> StoreResult<String> {
    let text = serde_json::to_string(&StoredOperation {
        value,
        wakes: wakes.to_vec(),
    })
    .map_err(|e| StoreError::CorruptRow {
        table: "operation_ids",
        detail: format!("the outcome of operation {op_key} cannot be stored: {e}"),
    })?;
    let settled: Vec<String> = confirmed.iter().map(|key| escape_literal(key)).collect();
    Ok(format!(
        "WITH settled AS (DELETE FROM operation_ids WHERE op_key = ANY(ARRAY[{}]::text[])) \
         INSERT INTO operation_ids (op_key, run_id, outcome, created_at) VALUES ({}, {}, {}, {})",
        settled.join(", "),
        escape_literal(op_key),
        escape_literal(run_id),
        escape_literal(&text),
        now_millis()
    ))
}

pub(crate) async fn execute(
    tx: &Conn,
    ctx: &Ctx,
    sql: &str,
    params: Params<'_>,
) -> StoreResult<u64> {
    let statement = tx.prepare_cached(sql).await.map_err(|e| pg_error(ctx, e))?;
    tx.execute(&statement, params)
        .await
        .map_err(|e| pg_error(ctx, e))
}

/// Reads one column, naming the table when the stored value has an unexpected type.
pub(crate) fn col<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    table: &'static str,
    index: usize,
) -> StoreResult<T> {
    row.try_get(index).map_err(|e| StoreError::CorruptRow {
        table,
        detail: format!("column {index}: {e}"),
    })
}

pub(crate) use crate::clock::now_millis;
use crate::ops::{Arg, SqlValue};
use crate::rows::StoredRow;

/// One operation's statements in a server transaction.
pub(crate) struct PgTx<'a> {
    pub(crate) tx: &'a Conn,
    pub(crate) ctx: &'a Ctx,
}

/// The statement in PostgreSQL's placeholders: `?1` becomes `$1` (the shared SQL uses no `?`
/// otherwise).
fn dollar_placeholders(sql: &str) -> String {
    sql.replace('?', "$")
}

impl crate::ops::Tx for PgTx<'_> {
    fn dialect(&self) -> crate::ops::Dialect {
        crate::ops::Dialect::Postgres
    }

    fn max_body_bytes(&self) -> usize {
        self.ctx.max_body_bytes
    }

    async fn announce_work(&self) -> StoreResult<()> {
        let sql = "SELECT pg_notify($1, '')";
        execute(self.tx, self.ctx, sql, &[&work_channel(self.ctx)]).await?;
        Ok(())
    }

    async fn execute(&self, sql: &str, args: &[&dyn Arg]) -> StoreResult<u64> {
        let values: Vec<SqlValue<'_>> = args.iter().map(|arg| arg.value()).collect();
        let args: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| v as _).collect();
        execute(self.tx, self.ctx, &dollar_placeholders(sql), &args).await
    }

    async fn query<T>(
        &self,
        sql: &str,
        args: &[&dyn Arg],
        mut read: impl FnMut(&crate::rows::Row<'_>) -> StoreResult<T>,
    ) -> StoreResult<Vec<T>> {
        let values: Vec<SqlValue<'_>> = args.iter().map(|arg| arg.value()).collect();
        let args: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| v as _).collect();
        let sql = dollar_placeholders(sql);
        let statement = self
            .tx
            .prepare_cached(&sql)
            .await
            .map_err(|e| pg_error(self.ctx, e))?;
        let rows = self
            .tx
            .query(&statement, &args)
            .await
            .map_err(|e| pg_error(self.ctx, e))?;
        rows.iter().map(|row| read(row)).collect()
    }
}

impl ToSql for SqlValue<'_> {
    fn to_sql(
        &self,
        ty: &tokio_postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            SqlValue::Null => Ok(tokio_postgres::types::IsNull::Yes),
            SqlValue::Int(value) => value.to_sql_checked(ty, out),
            SqlValue::Text(text) => text.to_sql_checked(ty, out),
        }
    }

    /// The value's own `to_sql_checked` checks the type.
    fn accepts(_: &tokio_postgres::types::Type) -> bool {
        true
    }

    tokio_postgres::types::to_sql_checked!();
}

impl StoredRow for Row {
    fn int(&self, index: usize) -> Result<Option<i64>, String> {
        self.try_get(index).map_err(|e| e.to_string())
    }

    fn text(&self, index: usize) -> Result<Option<String>, String> {
        self.try_get(index).map_err(|e| e.to_string())
    }

    fn flag(&self, index: usize) -> Result<bool, String> {
        self.try_get(index).map_err(|e| e.to_string())
    }
}
