//! The schema's change channel: after a write commits, one NOTIFY on a channel all runs of the
//! schema share, so a watcher (`muster serve`) learns of every commit by every process.
//!
//! The NOTIFY is its own statement after COMMIT: NOTIFY takes a global lock when its
//! transaction commits, so it stays out of the writes' transactions. Writes that commit while
//! one is in flight share it: at most one NOTIFY is in flight per store, and a write that
//! commits meanwhile has its sender send once more (one notification can cover many commits;
//! a watcher reads the store afresh anyway).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::PostgresStore;
use super::connection::{AbortOnDrop, DedicatedConnection};
use super::ops::{Ctx, fnv1a};
use crate::error::StoreResult;
use crate::live::{ChangeCause, LiveHold, OnChange};

impl Ctx {
    /// The channel every commit to this schema is announced on (at most 63 bytes).
    pub(crate) fn changes_channel(&self) -> String {
        format!(
            "muster_changes_{:016x}",
            fnv1a(&[self.schema.as_bytes(), b"\0changes"])
        )
    }
}

/// The `application_name` of a change feed's connection, so an operator (or a test) can find
/// it in `pg_stat_activity`.
pub fn feed_application_name(schema: &str) -> String {
    format!("muster changes {schema}")
}

/// One store's announcements of its commits.
pub(crate) struct Announcer {
    /// `None` when the store was opened with `announce_changes` off.
    sql: Option<String>,
    in_flight: AtomicBool,
    pending: AtomicBool,
}

/// Clears the in-flight mark even when the announcing write is cancelled mid-NOTIFY.
struct InFlight<'a>(&'a AtomicBool);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

impl Announcer {
    pub(crate) fn new(ctx: &Ctx, enabled: bool) -> Announcer {
        Announcer {
            sql: enabled.then(|| format!("NOTIFY {}", ctx.changes_channel())),
            in_flight: AtomicBool::new(false),
            pending: AtomicBool::new(false),
        }
    }

    /// After a COMMIT returned: announces it, or leaves it to the NOTIFY already in flight.
    /// Best effort: the commit is durable, and a watcher that misses one sees the next.
    pub(crate) async fn after_commit(&self, client: &tokio_postgres::Client) {
        let Some(sql) = &self.sql else {
            return;
        };
        self.pending.store(true, Ordering::SeqCst);
        if self.in_flight.swap(true, Ordering::SeqCst) {
            return;
        }
        loop {
            let guard = InFlight(&self.in_flight);
            self.pending.store(false, Ordering::SeqCst);
            if let Err(error) = client.batch_execute(sql).await {
                tracing::debug!(%error, "could not announce a commit on the change channel");
            }
            drop(guard);
            // A commit that came while ours was in flight left `pending` for us; whoever
            // takes `in_flight` first sends it.
            if !self.pending.load(Ordering::SeqCst) || self.in_flight.swap(true, Ordering::SeqCst) {
                break;
            }
        }
    }
}

/// Longest wait between two attempts to re-open a lost feed connection.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(5);

/// Starts the feed: the first connection is opened here (its failure is the caller's error),
/// later ones by the feed's task after a loss, each followed by a `Reconnected` call.
pub(crate) async fn watch(store: &PostgresStore, on_change: OnChange) -> StoreResult<LiveHold> {
    let first = listen(store, on_change.clone()).await?;
    let store = store.clone();
    let task = tokio::spawn(async move {
        let mut current = first;
        loop {
            let _ = (&mut current.driver.0).await;
            tracing::warn!(
                store = %store.ctx.target,
                "the change feed's connection to the store ended; re-opening it"
            );
            let mut delay = Duration::from_millis(100);
            current = loop {
                tokio::time::sleep(delay).await;
                match listen(&store, on_change.clone()).await {
                    Ok(listening) => break listening,
                    Err(error) => {
                        tracing::debug!(%error, "the change feed could not reconnect yet");
                        delay = (delay * 2).min(MAX_RECONNECT_DELAY);
                    }
                }
            };
            on_change(ChangeCause::Reconnected);
        }
    });
    Ok(LiveHold::new(AbortOnDrop(task)))
}

/// A dedicated connection that LISTENs on the change channel and calls `on_change` for each
/// notification.
async fn listen(store: &PostgresStore, on_change: OnChange) -> StoreResult<DedicatedConnection> {
    let name = feed_application_name(&store.ctx.schema);
    let (client, connection) = store.connect_outside_pool(Some(&name)).await?;
    let driver = tokio::spawn(super::connection::drive_notifications(
        connection,
        move |_| on_change(ChangeCause::Notified),
    ));
    let listening = DedicatedConnection {
        client,
        driver: AbortOnDrop(driver),
    };
    listening
        .client
        .batch_execute(&format!("LISTEN {}", store.ctx.changes_channel()))
        .await
        .map_err(|e| super::ops::pg_error(&store.ctx, e))?;
    Ok(listening)
}
