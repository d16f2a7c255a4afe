//! A live run's hold on the server: the session advisory lock and the LISTEN on one dedicated
//! connection, kept by a supervisor task. When that connection ends (the backend terminated,
//! the server restarted, a network cut), the supervisor connects again, re-takes the lock,
//! re-checks that the run's epoch is still the one this process opened, LISTENs again and
//! wakes every receiver of the run, so mail committed while it was away is looked at (its
//! NOTIFY went to no one). When the lock is another process's or the epoch moved, the hold is
//! lost for good: [`crate::live::LiveHold::lost`] reports it and the run must stop (exit 4).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::connection::{AbortOnDrop, DedicatedConnection};
use super::{PostgresStore, ops};
use crate::error::{StoreError, StoreResult};
use crate::types::validate_agent_id;
use crate::wake::BOARD_WAKE;

/// How long the supervisor keeps trying to reach the server after the connection ends: a
/// restart (`pg_ctl restart -m fast`) or a failover takes seconds.
const RECONNECT_WINDOW: Duration = Duration::from_secs(30);

/// Tries at the lock once connected: another process's `is_held_live` probe holds it for
/// one statement, so a busy lock is tried again briefly before it counts as taken over.
const LOCK_TRIES: u32 = 10;
const LOCK_RETRY: Duration = Duration::from_millis(100);

/// Why taking the hold failed: the server could not be reached (worth another try within the
/// window), or the run is another process's now (final, with the reason).
enum Refused {
    Unreachable(StoreError),
    TakenOver(TakenOver),
}

enum TakenOver {
    Locked,
    EpochMoved { from: i64, to: Option<i64> },
}

/// The supervisor's task; aborting it (dropping the hold) closes the connection, which
/// releases the lock.
pub(super) struct Supervisor {
    task: JoinHandle<()>,
    /// A live run's hold: the run its store no longer holds once this is dropped.
    held: Option<(PostgresStore, String)>,
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.task.abort();
        if let Some((store, run_id)) = &self.held {
            store.unlimited.let_go(run_id);
        }
    }
}

impl PostgresStore {
    /// Takes run `run_id`'s live hold, or refuses it (another process holds the run live).
    pub(super) async fn take_hold(&self, run_id: &str) -> StoreResult<crate::live::LiveHold> {
        let epoch = Arc::new(AtomicI64::new(0));
        let held = match self.hold_once(run_id, None, 1).await {
            Ok(held) => held,
            Err(Refused::Unreachable(error)) => return Err(error),
            Err(Refused::TakenOver(_)) => {
                return Err(StoreError::RunLocked {
                    run: run_id.into(),
                    lock: format!(
                        "advisory lock {} on {}",
                        self.ctx.live_lock_key(run_id),
                        self.ctx.target
                    )
                    .into(),
                });
            }
        };
        self.unlimited.hold(run_id);
        let (lost_tx, lost_rx) = watch::channel(None);
        let task = tokio::spawn(supervise(
            self.clone(),
            run_id.to_owned(),
            held,
            epoch.clone(),
            lost_tx,
        ));
        Ok(crate::live::LiveHold::supervised(
            Supervisor {
                task,
                held: Some((self.clone(), run_id.to_owned())),
            },
            run_id,
            epoch,
            lost_rx,
        ))
    }

    /// One attempt: connect, take the lock (`lock_tries` times at most), check that the run's
    /// epoch is still `epoch` (when this process owns one), LISTEN.
    async fn hold_once(
        &self,
        run_id: &str,
        epoch: Option<i64>,
        lock_tries: u32,
    ) -> Result<DedicatedConnection, Refused> {
        let unreachable =
            |error: tokio_postgres::Error| Refused::Unreachable(ops::pg_error(&self.ctx, error));
        let held = self
            .live_connection(run_id, live_application_name(&self.ctx.schema, run_id))
            .await
            .map_err(Refused::Unreachable)?;
        let key = self.ctx.live_lock_key(run_id);
        let mut tries = 0;
        loop {
            tries += 1;
            let row = held
                .client
                .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
                .await
                .map_err(unreachable)?;
            if row.try_get::<_, bool>(0).map_err(unreachable)? {
                break;
            }
            if tries >= lock_tries {
                return Err(Refused::TakenOver(TakenOver::Locked));
            }
            tokio::time::sleep(LOCK_RETRY).await;
        }
        if let Some(epoch) = epoch {
            let row = held
                .client
                .query_opt("SELECT epoch FROM runs WHERE id = $1", &[&run_id])
                .await
                .map_err(unreachable)?;
            let stored: Option<i64> = row.map(|r| r.try_get(0)).transpose().map_err(unreachable)?;
            if stored != Some(epoch) {
                return Err(Refused::TakenOver(TakenOver::EpochMoved {
                    from: epoch,
                    to: stored,
                }));
            }
        }
        held.client
            .batch_execute(&format!("LISTEN {}", self.ctx.wake_channel(run_id)))
            .await
            .map_err(unreachable)?;
        Ok(held)
    }

    /// A LISTEN on run `run_id`'s wake channel without its lock (a teammate's process on a
    /// worker, whose lead holds the run): its notifications wake this store's receivers. When
    /// its connection ends (the backend terminated, a restart, a network cut) it is opened
    /// again, for as long as the hold lives, and every receiver of the run is woken: what was
    /// announced meanwhile went to no one.
    pub(super) async fn listen_only(&self, run_id: &str) -> StoreResult<crate::live::LiveHold> {
        let first = self.listening(run_id).await?;
        let task = tokio::spawn(keep_listening(self.clone(), run_id.to_owned(), first));
        Ok(crate::live::LiveHold::new(Supervisor { task, held: None }))
    }

    /// One listening connection, named [`listen_application_name`] on the server.
    async fn listening(&self, run_id: &str) -> StoreResult<DedicatedConnection> {
        let name = listen_application_name(&self.ctx.schema, run_id);
        let held = self.live_connection(run_id, name).await?;
        held.client
            .batch_execute(&format!("LISTEN {}", self.ctx.wake_channel(run_id)))
            .await
            .map_err(|e| ops::pg_error(&self.ctx, e))?;
        Ok(held)
    }

    /// A connection outside the pool, named `application_name` on the server: its
    /// notifications wake this store's receivers of `run_id` (the payload names the
    /// recipient).
    async fn live_connection(
        &self,
        run_id: &str,
        application_name: String,
    ) -> StoreResult<DedicatedConnection> {
        let (client, connection) = self.connect_outside_pool(Some(&application_name)).await?;
        let (waiters, run) = (self.waiters.clone(), run_id.to_owned());
        let driver = tokio::spawn(super::connection::drive_notifications(
            connection,
            move |payload| {
                if is_wake_payload(payload) {
                    waiters.wake(&run, payload);
                }
            },
        ));
        Ok(DedicatedConnection {
            client,
            driver: AbortOnDrop(driver),
        })
    }
}

/// A payload names a recipient to wake: an agent, the run's task board, or the agents
/// waiting for budget.
fn is_wake_payload(payload: &str) -> bool {
    payload == BOARD_WAKE
        || payload == crate::ledger::LEDGER_WAKE
        || validate_agent_id(payload).is_ok()
}

/// The `application_name` of a run's dedicated connection (at most 63 bytes, the server's
/// limit), so an operator sees it in `pg_stat_activity`.
pub fn live_application_name(schema: &str, run_id: &str) -> String {
    server_name(format!("muster live {schema}.{run_id}"))
}

/// The `application_name` of a listen-only connection (a teammate's process on a worker), so
/// an operator, or a test cutting it, tells it from the lead's `muster live` connection.
pub fn listen_application_name(schema: &str, run_id: &str) -> String {
    server_name(format!("muster listen {schema}.{run_id}"))
}

/// `name` cut to the server's limit of 63 bytes (on a character boundary).
fn server_name(mut name: String) -> String {
    while name.len() > 63 {
        name.pop();
    }
    name
}

/// Keeps a listen-only connection open: each time it ends, opens it again (trying with a
/// growing pause while the server cannot be reached) and wakes every receiver of the run.
async fn keep_listening(store: PostgresStore, run_id: String, mut held: DedicatedConnection) {
    loop {
        let _ = (&mut held.driver.0).await;
        tracing::warn!(
            store = %store.ctx.target, run = %run_id,
            "the run's LISTEN connection to the store ended; opening it again"
        );
        let mut pause = Duration::from_millis(20);
        held = loop {
            match store.listening(&run_id).await {
                Ok(again) => break again,
                Err(error) => {
                    tracing::debug!(%error, "the run's LISTEN connection cannot be opened yet");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
            }
        };
        tracing::info!(
            store = %store.ctx.target, run = %run_id,
            "listening on the run's wake channel again"
        );
        // Mail and board changes announced while it was down reached no one.
        store.waiters.wake_run(&run_id);
    }
}

/// Watches the dedicated connection; when it ends, takes the hold again or reports it lost.
async fn supervise(
    store: PostgresStore,
    run_id: String,
    mut held: DedicatedConnection,
    epoch: Arc<AtomicI64>,
    lost: watch::Sender<Option<String>>,
) {
    loop {
        let _ = (&mut held.driver.0).await;
        // The server may have released the lock already, and another process may take the
        // run over and write limits: its ledger is looked at again from now on.
        store.unlimited.let_go(&run_id);
        tracing::warn!(
            store = %store.ctx.target, run = %run_id,
            "the live run's connection to the store ended; re-taking its lock"
        );
        match retake(&store, &run_id, epoch.load(Ordering::SeqCst)).await {
            Ok(again) => {
                held = again;
                store.unlimited.hold(&run_id);
                tracing::info!(
                    store = %store.ctx.target, run = %run_id,
                    "the live run's lock is held again"
                );
                // Mail committed while the connection was down was announced to no one.
                store.waiters.wake_run(&run_id);
            }
            Err(error) => {
                tracing::error!(
                    store = %store.ctx.target, run = %run_id, %error,
                    "the live run's lock is lost"
                );
                let _ = lost.send(Some(error));
                return;
            }
        }
    }
}

/// Connects again within [`RECONNECT_WINDOW`] and takes the hold, or says why it cannot.
async fn retake(
    store: &PostgresStore,
    run_id: &str,
    epoch: i64,
) -> Result<DedicatedConnection, String> {
    let deadline = tokio::time::Instant::now() + RECONNECT_WINDOW;
    let mut pause = Duration::from_millis(20);
    loop {
        // With no epoch yet (the run is still being taken over), the lock alone decides.
        let owned = (epoch != 0).then_some(epoch);
        match store.hold_once(run_id, owned, LOCK_TRIES).await {
            Ok(held) => return Ok(held),
            Err(Refused::TakenOver(TakenOver::Locked)) => {
                return Err(
                    "another process holds the run's lock now (it took the run over \
                            while the connection was down)"
                        .into(),
                );
            }
            Err(Refused::TakenOver(TakenOver::EpochMoved { from, to })) => {
                return Err(match to {
                    Some(to) => format!(
                        "the run's epoch moved from {from} to {to}: another process took the \
                         run over while the connection was down"
                    ),
                    None => "the run is no longer in the store".into(),
                });
            }
            Err(Refused::Unreachable(error)) => {
                if tokio::time::Instant::now() + pause > deadline {
                    return Err(format!(
                        "the server could not be reached again within {}s ({error})",
                        RECONNECT_WINDOW.as_secs()
                    ));
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// The checks and wake-ups other processes make on a run's live hold.
impl PostgresStore {
    /// Waits until no session holds `run_id` live (see
    /// [`wait_until_not_live`](crate::store::MailboxStore::wait_until_not_live)).
    pub(super) async fn wait_for_holder(&self, run_id: &str) -> StoreResult<()> {
        // The server queues this session behind the holder and grants the lock when the
        // holder's session ends; it is given back at once.
        let waiting = self.dedicated().await?;
        let key = self.ctx.live_lock_key(run_id);
        waiting
            .client
            .batch_execute(&format!(
                "SELECT pg_advisory_lock({key}); SELECT pg_advisory_unlock({key})"
            ))
            .await
            .map_err(|e| ops::pg_error(&self.ctx, e))
    }

    /// Whether a session holds `run_id` live.
    pub(super) async fn held_by_anyone(&self, run_id: &str) -> StoreResult<bool> {
        let conn = self.connection().await?;
        // Taking the lock and giving it straight back tells whether another session holds it.
        let row = conn
            .query_one(
                "SELECT CASE WHEN pg_try_advisory_lock($1) THEN NOT pg_advisory_unlock($1) \
                 ELSE true END",
                &[&self.ctx.live_lock_key(run_id)],
            )
            .await
            .map_err(|e| ops::pg_error(&self.ctx, e))?;
        ops::col(&row, "pg_locks", 0)
    }

    /// Wakes `recipient` in the process holding `run_id` live, if one does.
    pub(super) async fn announce_wake(&self, run_id: &str, recipient: &str) -> StoreResult<bool> {
        if !self.held_by_anyone(run_id).await? {
            return Ok(false);
        }
        // Its own statement, after the decision's COMMIT: NOTIFY takes a global lock at
        // commit time, so it stays out of the hot transactions.
        let conn = self.connection().await?;
        conn.execute(
            "SELECT pg_notify($1, $2)",
            &[&self.ctx.wake_channel(run_id), &recipient],
        )
        .await
        .map_err(|e| ops::pg_error(&self.ctx, e))?;
        Ok(true)
    }
}
