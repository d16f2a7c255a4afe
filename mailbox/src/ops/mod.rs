//! Each store operation written once, over [`Tx`]: the statements of one transaction on
//! either backend. The decisions they make are the pure functions of [`crate::rules`]; what
//! is left here is which rows to read and write. SQL is written with SQLite's numbered
//! placeholders (`?1`), which the PostgreSQL side rewrites to `$1`; the few statements the
//! dialects spell differently branch on [`Tx::dialect`].
//!
//! How each backend drives an operation: PostgreSQL awaits it inside the write's transaction
//! (under the run's advisory lock, see `postgres/mod.rs`); SQLite's writer thread calls it
//! inside the operation's SAVEPOINT and polls the future once (`sqlite::ops::drive`): its
//! [`Tx`] never waits, every statement runs synchronously on the writer's connection. Which
//! transaction each store method runs its operation in is written once too ([`backend`]), as
//! are the tables the statements run on ([`schema`]).

pub(crate) mod backend;
pub(crate) mod fork;
pub(crate) mod ledger;
pub(crate) mod mail;
pub(crate) mod runs;
pub(crate) mod schema;
pub(crate) mod tasks;
pub(crate) mod work;

use crate::error::StoreResult;
use crate::rows::Row;

/// A value a statement binds, as each backend hands it to its driver.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SqlValue<'a> {
    Null,
    Int(i64),
    Text(&'a str),
}

/// What a statement binds: `&[&run_id, &seq, &body]`.
pub(crate) trait Arg: Sync {
    fn value(&self) -> SqlValue<'_>;
}

impl Arg for i64 {
    fn value(&self) -> SqlValue<'_> {
        SqlValue::Int(*self)
    }
}

impl Arg for str {
    fn value(&self) -> SqlValue<'_> {
        SqlValue::Text(self)
    }
}

impl Arg for String {
    fn value(&self) -> SqlValue<'_> {
        SqlValue::Text(self)
    }
}

impl<T: Arg> Arg for Option<T> {
    fn value(&self) -> SqlValue<'_> {
        self.as_ref().map_or(SqlValue::Null, Arg::value)
    }
}

impl<T: Arg + ?Sized> Arg for &T {
    fn value(&self) -> SqlValue<'_> {
        (**self).value()
    }
}

/// Which SQL a statement the dialects spell differently is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// The column that keeps roster entries in the order they joined: SQLite's rowid,
    /// PostgreSQL's identity column.
    fn roster_order(self) -> &'static str {
        match self {
            Dialect::Sqlite => "rowid",
            Dialect::Postgres => "position",
        }
    }
}

/// One transaction of either backend: what every operation of this module runs on.
pub(crate) trait Tx {
    fn dialect(&self) -> Dialect;

    /// The largest message body the store accepts, in bytes.
    fn max_body_bytes(&self) -> usize;

    /// Tells other processes that the work queues changed, when this transaction commits
    /// (PostgreSQL: a NOTIFY on the schema's work channel). SQLite's store wakes its own
    /// watchers after COMMIT, and no other process listens: nothing to do.
    async fn announce_work(&self) -> StoreResult<()> {
        Ok(())
    }

    /// Runs a statement; how many rows it changed.
    async fn execute(&self, sql: &str, args: &[&dyn Arg]) -> StoreResult<u64>;

    /// Runs a query and reads each row it returns with `read`.
    async fn query<T>(
        &self,
        sql: &str,
        args: &[&dyn Arg],
        read: impl FnMut(&Row<'_>) -> StoreResult<T>,
    ) -> StoreResult<Vec<T>>;

    /// Runs a query and reads its first row, if any.
    async fn query_opt<T>(
        &self,
        sql: &str,
        args: &[&dyn Arg],
        read: impl FnMut(&Row<'_>) -> StoreResult<T>,
    ) -> StoreResult<Option<T>> {
        Ok(self.query(sql, args, read).await?.into_iter().next())
    }

    /// Runs a query that returns exactly one row and reads it.
    async fn query_one<T>(
        &self,
        sql: &str,
        args: &[&dyn Arg],
        read: impl FnMut(&Row<'_>) -> StoreResult<T>,
    ) -> StoreResult<T> {
        self.query_opt(sql, args, read)
            .await?
            .ok_or_else(|| crate::error::StoreError::CorruptRow {
                table: "(query)",
                detail: format!("no row returned by {sql}"),
            })
    }
}
