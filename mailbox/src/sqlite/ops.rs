//! The SQLite side of [`crate::ops`]: a [`Tx`] on the writer's connection, inside the
//! operation's SAVEPOINT (an `Err` rolls back only that operation), and how the writer
//! thread runs an operation written as a future.

use std::future::Future;
use std::path::Path;
use std::task::{Context, Poll, Waker};

use rusqlite::Connection;

use crate::error::{StoreError, StoreResult};
use crate::ops::{Arg, Dialect, SqlValue, Tx};
use crate::rows::{Row, StoredRow};

/// Settings every operation needs.
#[derive(Debug, Clone)]
pub(crate) struct OpContext {
    pub(crate) path: std::sync::Arc<std::path::PathBuf>,
    pub(crate) max_body_bytes: usize,
}

impl OpContext {
    pub(crate) fn sql(&self) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        move |source| sql_error(&self.path, source)
    }
}

pub(crate) fn sql_error(path: &Path, source: rusqlite::Error) -> StoreError {
    let busy = matches!(
        source.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    );
    if busy {
        StoreError::Locked {
            path: path.to_path_buf(),
            waited_ms: 0,
        }
    } else {
        StoreError::Sqlite {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// One operation's statements on the writer's connection.
pub(crate) struct SqliteTx<'c> {
    pub(crate) conn: &'c Connection,
    pub(crate) ctx: &'c OpContext,
}

fn args<'a>(args: &'a [&'a dyn Arg]) -> impl Iterator<Item = SqlValue<'a>> {
    args.iter().map(|arg| arg.value())
}

impl rusqlite::ToSql for SqlValue<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match *self {
            SqlValue::Null => ValueRef::Null,
            SqlValue::Int(value) => ValueRef::Integer(value),
            SqlValue::Text(text) => ValueRef::Text(text.as_bytes()),
        }))
    }
}

impl StoredRow for rusqlite::Row<'_> {
    fn int(&self, index: usize) -> Result<Option<i64>, String> {
        self.get(index).map_err(|e| e.to_string())
    }

    fn text(&self, index: usize) -> Result<Option<String>, String> {
        self.get(index).map_err(|e| e.to_string())
    }

    fn flag(&self, index: usize) -> Result<bool, String> {
        self.get(index).map_err(|e| e.to_string())
    }
}

impl Tx for SqliteTx<'_> {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn max_body_bytes(&self) -> usize {
        self.ctx.max_body_bytes
    }

    async fn execute(&self, sql: &str, values: &[&dyn Arg]) -> StoreResult<u64> {
        let mut statement = self.conn.prepare_cached(sql).map_err(self.ctx.sql())?;
        let changed = statement
            .execute(rusqlite::params_from_iter(args(values)))
            .map_err(self.ctx.sql())?;
        Ok(changed as u64)
    }

    async fn query<T>(
        &self,
        sql: &str,
        values: &[&dyn Arg],
        mut read: impl FnMut(&Row<'_>) -> StoreResult<T>,
    ) -> StoreResult<Vec<T>> {
        let mut statement = self.conn.prepare_cached(sql).map_err(self.ctx.sql())?;
        let mut rows = statement
            .query(rusqlite::params_from_iter(args(values)))
            .map_err(self.ctx.sql())?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(self.ctx.sql())? {
            out.push(read(row)?);
        }
        Ok(out)
    }

    async fn query_opt<T>(
        &self,
        sql: &str,
        values: &[&dyn Arg],
        mut read: impl FnMut(&Row<'_>) -> StoreResult<T>,
    ) -> StoreResult<Option<T>> {
        let mut statement = self.conn.prepare_cached(sql).map_err(self.ctx.sql())?;
        let mut rows = statement
            .query(rusqlite::params_from_iter(args(values)))
            .map_err(self.ctx.sql())?;
        match rows.next().map_err(self.ctx.sql())? {
            Some(row) => read(row).map(Some),
            None => Ok(None),
        }
    }
}

/// Runs an operation of [`crate::ops`] on the writer thread. Every statement of a
/// [`SqliteTx`] runs synchronously, so the future is ready at its first poll; one that is not
/// is a bug, refused rather than blocked on.
pub(crate) fn drive<T>(
    path: &Path,
    operation: impl Future<Output = StoreResult<T>>,
) -> StoreResult<T> {
    let mut operation = std::pin::pin!(operation);
    match operation
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(result) => result,
        Poll::Pending => Err(StoreError::CommitFailed {
            path: path.to_path_buf(),
            detail: "an operation waited on the writer thread (a bug: nothing was written)".into(),
        }),
    }
}
