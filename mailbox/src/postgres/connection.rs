//! Reaching the server: the pool, connections outside it (a live hold's, a LISTEN's, a wait
//! for a lock), what a failed connection says, and a test's or a benchmark's own schema.

use std::str::FromStr;
use std::sync::Arc;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};

use super::{PostgresStore, ops, tls};
use crate::error::{StoreError, StoreResult};
use ops::Ctx;

/// Connections the pool keeps at most: a run's agents write concurrently, and writes to one
/// run wait for its lock anyway.
const POOL_SIZE: usize = 8;

/// The pool for the server `url` names, the configuration its own connections use, the TLS
/// connector, and the URL with its password masked.
pub(super) fn pool(
    url: &str,
) -> StoreResult<(Pool, tokio_postgres::Config, tls::Connector, Arc<str>)> {
    let target: Arc<str> = muster_config::store_url::mask_password(url).into();
    let invalid = |detail: String| StoreError::InvalidStoreUrl {
        target: target.to_string(),
        detail,
    };
    let config = tokio_postgres::Config::from_str(url).map_err(|e| invalid(e.to_string()))?;
    let tls = tls::connector(&target)?;
    let manager = Manager::from_config(
        config.clone(),
        tls.clone(),
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    let pool = Pool::builder(manager)
        .max_size(POOL_SIZE)
        .build()
        .map_err(|e| invalid(e.to_string()))?;
    Ok((pool, config, tls, target))
}

/// Makes schema `name` on the server `url` names (a benchmark's or a test's own) and returns
/// the URL whose connections use it.
pub async fn create_schema(url: &str, name: &str) -> StoreResult<String> {
    admin(url, &format!("CREATE SCHEMA {name}")).await?;
    let separator = if url.contains('?') { '&' } else { '?' };
    Ok(format!("{url}{separator}options=-csearch_path%3D{name}"))
}

/// Drops schema `name` and everything in it.
pub async fn drop_schema(url: &str, name: &str) -> StoreResult<()> {
    admin(url, &format!("DROP SCHEMA IF EXISTS {name} CASCADE")).await
}

async fn admin(url: &str, sql: &str) -> StoreResult<()> {
    let ctx = Ctx {
        target: muster_config::store_url::mask_password(url).into(),
        schema: "".into(),
        max_body_bytes: 0,
    };
    let (client, connection) = tokio_postgres::connect(url, tls::connector(&ctx.target)?)
        .await
        .map_err(|e| StoreError::PostgresConnect {
            target: ctx.target.to_string(),
            reason: connect_reason(&e),
        })?;
    let driver = tokio::spawn(connection);
    let result = client
        .batch_execute(sql)
        .await
        .map_err(|e| ops::pg_error(&ctx, e));
    drop(client);
    let _ = driver.await;
    result
}

impl PostgresStore {
    pub(super) async fn connection(&self) -> StoreResult<deadpool_postgres::Object> {
        connection(&self.pool, &self.ctx).await
    }

    /// A connection outside the pool, for as long as the caller keeps it (a session lock
    /// must outlive one statement).
    pub(super) async fn dedicated(&self) -> StoreResult<DedicatedConnection> {
        let (client, connection) = self.connect_outside_pool(None).await?;
        let driver = tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(DedicatedConnection {
            client,
            driver: AbortOnDrop(driver),
        })
    }

    /// A dedicated connection listening on the work channel: each notification wakes this
    /// store's work watches; when it ends, `closed` is set and the watches are woken to see it.
    pub(super) async fn work_listener(
        &self,
        closed: Arc<std::sync::atomic::AtomicBool>,
    ) -> StoreResult<DedicatedConnection> {
        let (client, connection) = self.connect_outside_pool(None).await?;
        let watchers = self.work_watchers.clone();
        let driver = tokio::spawn(async move {
            drive_notifications(connection, |_| watchers.wake()).await;
            closed.store(true, std::sync::atomic::Ordering::SeqCst);
            watchers.wake();
        });
        let listener = DedicatedConnection {
            client,
            driver: AbortOnDrop(driver),
        };
        let listen = format!("LISTEN {}", ops::work_channel(&self.ctx));
        listener
            .client
            .batch_execute(&listen)
            .await
            .map_err(|e| ops::pg_error(&self.ctx, e))?;
        Ok(listener)
    }
}

/// A connection of the store's server made outside the pool (its driver is the caller's).
pub(super) type OwnConnection = tokio_postgres::Connection<
    tokio_postgres::Socket,
    <tls::Connector as tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket>>::Stream,
>;

impl PostgresStore {
    /// A connection outside the pool, named `application_name` on the server when given (a
    /// LISTEN connection is found by its name).
    pub(super) async fn connect_outside_pool(
        &self,
        application_name: Option<&str>,
    ) -> StoreResult<(tokio_postgres::Client, OwnConnection)> {
        let mut config = (*self.config).clone();
        if let Some(name) = application_name {
            config.application_name(name);
        }
        config
            .connect(self.tls.clone())
            .await
            .map_err(|e| StoreError::PostgresConnect {
                target: self.ctx.target.to_string(),
                reason: connect_reason(&e),
            })
    }
}

/// Drives `connection` until it ends, giving each notification's payload to
/// `on_notification`.
pub(super) async fn drive_notifications(
    mut connection: OwnConnection,
    mut on_notification: impl FnMut(&str),
) {
    loop {
        match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            Some(Ok(tokio_postgres::AsyncMessage::Notification(note))) => {
                on_notification(note.payload())
            }
            Some(Ok(_)) => {}
            Some(Err(_)) | None => break,
        }
    }
}

/// A task aborted when dropped: a dedicated connection's driver (the connection closes with
/// it), a change feed's loop.
pub(super) struct AbortOnDrop(pub(super) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A connection outside the pool (a live hold, a LISTEN, a wait for a run's lock) and the task
/// driving it: dropping it closes the connection (as the process dying does), which ends
/// what it holds on the server.
pub(super) struct DedicatedConnection {
    pub(super) client: tokio_postgres::Client,
    pub(super) driver: AbortOnDrop,
}

/// A pooled connection, or an error that says why the server could not be reached.
pub(super) async fn connection(pool: &Pool, ctx: &Ctx) -> StoreResult<deadpool_postgres::Object> {
    pool.get().await.map_err(|error| connect_error(ctx, error))
}

fn connect_error(ctx: &Ctx, error: deadpool_postgres::PoolError) -> StoreError {
    let reason = match &error {
        deadpool_postgres::PoolError::Backend(source) => connect_reason(source),
        other => other.to_string(),
    };
    StoreError::PostgresConnect {
        target: ctx.target.to_string(),
        reason,
    }
}

/// What went wrong connecting, and what to do about it.
pub(super) fn connect_reason(source: &tokio_postgres::Error) -> String {
    if let Some(db) = source.as_db_error() {
        let what = db.message();
        return match db.code().code() {
            "28P01" | "28000" => format!(
                "authentication failed ({what}); check the user and password in the URL, \
                 or the server's pg_hba.conf"
            ),
            "3D000" => format!("{what}; create it (createdb NAME) or name another database"),
            code => format!("the server refused the connection ({code}: {what})"),
        };
    }
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(source);
    while let Some(inner) = cause {
        if let Some(io) = inner.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::ConnectionRefused => format!(
                    "connection refused ({io}); is the PostgreSQL server running, and listening \
                     on the host and port the URL names?"
                ),
                _ => format!("{io}; check the host and port in the URL"),
            };
        }
        cause = inner.source();
    }
    ops::with_causes(source)
}
