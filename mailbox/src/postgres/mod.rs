//! The PostgreSQL backend: the SQLite store's relational model and contract on a server that
//! several processes and machines reach.
//!
//! Each operation is one transaction on a pooled connection (`deadpool-postgres`). A write
//! first takes the transaction-level advisory lock of each run it touches
//! (`pg_advisory_xact_lock`, keyed by schema and run, in key order so two never deadlock):
//! writes to one run are serialised exactly as on SQLite's single writer, so every check an
//! operation makes before it writes still holds at COMMIT, and message `seq` order is commit
//! order within a run. Reads run in a `REPEATABLE READ` snapshot and take no lock. The server
//! releases the locks at COMMIT or ROLLBACK, and when a connection dies. Wake-ups are pushed
//! in process after COMMIT, as on SQLite; across processes the live run's socket carries
//! them (see [`crate::live`]).

mod changes;
mod connection;
mod live;
pub(crate) mod ops;
mod schema;
mod tls;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use deadpool_postgres::Pool;

use crate::error::{StoreError, StoreResult};
use crate::ops::backend::{Backend, WorkAccess, mailbox_store};
use crate::ops::{ledger as ops_ledger, mail, work as ops_work};
use crate::options::StoreOptions;
use crate::types::*;
use crate::wake::{Waiters, Wake};
use crate::work::{WorkFence, WorkWatch};
pub use changes::feed_application_name;
use connection::connection;
pub use connection::{create_schema, drop_schema};
pub use live::{listen_application_name, live_application_name};
use ops::{Ctx, PgTx};
pub use schema::PG_SCHEMA_VERSION;

/// The PostgreSQL implementation of [`MailboxStore`](crate::store::MailboxStore).
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    /// For the dedicated connection a live run holds (its lock and its LISTEN).
    config: Arc<tokio_postgres::Config>,
    tls: tls::Connector,
    waiters: Arc<Waiters>,
    ctx: Ctx,
    /// Operation ids of writes whose COMMIT was acknowledged: the next write deletes them.
    confirmed: Arc<std::sync::Mutex<Vec<String>>>,
    /// Set for the process running a work item: every write first checks, in its
    /// transaction, that the item's lease is still this token's (see [`crate::work`]).
    fence: Option<Arc<WorkFence>>,
    work_watchers: Arc<crate::work::Watchers>,
    /// Announces this store's commits on the schema's change channel.
    changes: Arc<changes::Announcer>,
    /// Runs read to have no run-wide limit in an epoch while this store holds them live:
    /// their requests skip the server.
    unlimited: Arc<ops_ledger::UnlimitedRuns>,
    /// Whether each write also tells other processes whom it woke (`NOTIFY` on the run's
    /// wake channel, delivered at its COMMIT): a team whose teammates run on workers.
    announce_wakes: bool,
}

/// Attempts of one write when the connection is lost under it (the server restarted, a
/// network cut): each on a fresh connection, under the same operation id.
const WRITE_ATTEMPTS: u32 = 3;

impl PostgresStore {
    /// Connects to the server `url` names, refuses a schema that is not muster's or is newer,
    /// and brings an older or empty one up to date. The tables live in the connection's
    /// current schema (`public` unless the URL's `options` set a `search_path`).
    pub async fn open(url: &str, options: StoreOptions) -> StoreResult<PostgresStore> {
        let (pool, config, tls, target) = connection::pool(url)?;
        let mut ctx = Ctx {
            target: target.clone(),
            schema: "".into(),
            max_body_bytes: options.max_body_bytes,
        };
        let mut conn = connection(&pool, &ctx).await?;
        let schema: Option<String> = conn
            .query_one("SELECT current_schema()::text", &[])
            .await
            .map_err(|e| ops::pg_error(&ctx, e))?
            .try_get(0)
            .map_err(|e| ops::pg_error(&ctx, e))?;
        let schema = schema.ok_or_else(|| StoreError::PostgresConnect {
            target: target.to_string(),
            reason: "no schema of the connection's search_path exists; create it \
                     (CREATE SCHEMA …) or fix the URL's options"
                .into(),
        })?;
        ctx.schema = schema.into();
        schema::migrate(&mut conn, &ctx).await?;
        Ok(PostgresStore {
            changes: Arc::new(changes::Announcer::new(&ctx, options.announce_changes)),
            pool,
            config: Arc::new(config),
            tls,
            waiters: Arc::new(Waiters::default()),
            ctx,
            confirmed: Arc::default(),
            fence: None,
            work_watchers: Arc::default(),
            announce_wakes: false,
            unlimited: Arc::new(ops_ledger::UnlimitedRuns::held_only()),
        })
    }

    /// This store, announcing every write's wake-ups to the processes that listen on the
    /// run ([`listen_run`](crate::store::MailboxStore::listen_run), and the live run's own
    /// hold): agents of one run in several processes (a team with teammates on workers) wake
    /// each other on commit.
    pub fn announcing(mut self) -> PostgresStore {
        self.announce_wakes = true;
        self
    }

    /// This store, refusing every write once `fence` no longer holds its work item's lease
    /// (checked in the write's transaction, under a row lock a new claim must wait for).
    pub fn fenced(mut self, fence: WorkFence) -> PostgresStore {
        self.fence = Some(Arc::new(fence));
        self
    }

    /// The URL with its password masked.
    pub fn target(&self) -> &str {
        &self.ctx.target
    }

    /// The schema the store's tables live in.
    pub fn schema(&self) -> &str {
        &self.ctx.schema
    }

    /// Begins a write transaction holding the advisory locks of `runs`, in one round-trip.
    async fn begin_write(&self, runs: &[&str]) -> StoreResult<OpenTx> {
        let mut keys: Vec<i64> = runs.iter().map(|run| self.ctx.run_lock_key(run)).collect();
        keys.sort_unstable();
        keys.dedup();
        let mut begin = String::from("BEGIN ISOLATION LEVEL READ COMMITTED");
        for key in keys {
            begin.push_str(&format!("; SELECT pg_advisory_xact_lock({key})"));
        }
        OpenTx::begin(self.connection().await?, &begin, &self.ctx).await
    }

    /// Begins a read-only transaction on one snapshot.
    async fn begin_read(&self) -> StoreResult<OpenTx> {
        let begin = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";
        OpenTx::begin(self.connection().await?, begin, &self.ctx).await
    }

    /// Commits an operation that succeeded, with `last` (its final statement, sent with the
    /// COMMIT), then wakes its recipients; or rolls back one that failed.
    async fn finish<T>(
        &self,
        tx: &OpenTx,
        result: StoreResult<T>,
        wakes: Vec<Wake>,
        last: Option<String>,
    ) -> StoreResult<T> {
        let committed = match result {
            Ok(value) if !self.announce_wakes => Ok(value),
            Ok(value) => self
                .notify_wakes(tx.client(&self.ctx)?, &wakes)
                .await
                .map(|()| value),
            Err(error) => Err(error),
        };
        let value = match committed {
            Ok(value) => value,
            Err(error) => {
                tx.rollback(&self.ctx).await;
                return Err(error);
            }
        };
        let end = match last {
            Some(statement) => format!("{statement}; COMMIT"),
            None => "COMMIT".to_owned(),
        };
        tx.commit(&self.ctx, &end).await?;
        self.waiters.wake_all(&wakes);
        Ok(value)
    }

    /// `NOTIFY` of each recipient a write woke, in the write's transaction: delivered to the
    /// listeners at its COMMIT, never for a write that rolled back.
    async fn notify_wakes(&self, tx: &ops::Conn, wakes: &[Wake]) -> StoreResult<()> {
        let mut sent: Vec<(&str, &str)> = Vec::new();
        for wake in wakes {
            let pair = (wake.run_id.as_str(), wake.recipient.as_str());
            if sent.contains(&pair) {
                continue;
            }
            sent.push(pair);
            ops::execute(
                tx,
                &self.ctx,
                "SELECT pg_notify($1, $2)",
                &[&self.ctx.wake_channel(pair.0), &pair.1],
            )
            .await?;
        }
        Ok(())
    }

    /// Takes the acknowledged operation ids for the next write to delete.
    fn take_confirmed(&self) -> Vec<String> {
        match self.confirmed.lock() {
            Ok(mut keys) => std::mem::take(&mut *keys),
            Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
        }
    }

    /// Gives back ids a write took but did not delete (it failed), or adds one acknowledged.
    fn add_confirmed(&self, keys: impl IntoIterator<Item = String>) {
        match self.confirmed.lock() {
            Ok(mut list) => list.extend(keys),
            Err(poisoned) => poisoned.into_inner().extend(keys),
        }
    }
}

/// A pooled connection inside a transaction the store began with its own statements: BEGIN
/// goes with the run locks in one round-trip, and a write's last statement with its COMMIT
/// in another. Left inside the transaction (an error before its end, a caller that gave up
/// waiting), the connection is closed instead of going back to the pool: the server rolls
/// the transaction back, and no later operation can run inside it.
struct OpenTx {
    /// `Some` until dropped.
    conn: Option<ops::Conn>,
    open: AtomicBool,
}

impl OpenTx {
    /// Sends `begin` (BEGIN and what runs first) on `conn`.
    async fn begin(conn: ops::Conn, begin: &str, ctx: &Ctx) -> StoreResult<OpenTx> {
        let tx = OpenTx {
            conn: Some(conn),
            open: AtomicBool::new(true),
        };
        let client = tx.client(ctx)?;
        client
            .batch_execute(begin)
            .await
            .map_err(|e| ops::pg_error(ctx, e))?;
        Ok(tx)
    }

    fn client(&self, ctx: &Ctx) -> StoreResult<&ops::Conn> {
        self.conn.as_ref().ok_or_else(|| StoreError::Postgres {
            target: ctx.target.to_string(),
            detail: "the transaction's connection was already given up".into(),
        })
    }

    /// Sends `end` (ending with COMMIT); the transaction is over once it succeeds.
    async fn commit(&self, ctx: &Ctx, end: &str) -> StoreResult<()> {
        let client = self.client(ctx)?;
        client
            .batch_execute(end)
            .await
            .map_err(|e| commit_error(ctx, e))?;
        self.open.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Rolls back; a connection whose ROLLBACK fails is closed when dropped.
    async fn rollback(&self, ctx: &Ctx) {
        if let Ok(client) = self.client(ctx)
            && client.batch_execute("ROLLBACK").await.is_ok()
        {
            self.open.store(false, Ordering::SeqCst);
        }
    }
}

impl Drop for OpenTx {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take()
            && *self.open.get_mut()
        {
            drop(deadpool_postgres::Object::take(conn));
        }
    }
}

fn commit_error(ctx: &Ctx, source: tokio_postgres::Error) -> StoreError {
    match ops::pg_error(ctx, source) {
        StoreError::Postgres { target, detail } => StoreError::Postgres {
            target,
            detail: format!("COMMIT failed ({detail}); whether the operation was kept is unknown"),
        },
        other => other,
    }
}

impl PostgresStore {
    /// One attempt of a write (see [`Backend::write`]): a connection, a transaction holding
    /// the runs' locks, the body, its outcome stored under the write's operation id, COMMIT.
    /// Only a `retry` looks for an earlier attempt's outcome: a first attempt's id is new.
    async fn write_once<T, F>(
        &self,
        runs: &[&str],
        (op_key, retry): (&str, bool),
        confirmed: &[String],
        body: &F,
    ) -> StoreResult<T>
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
        F: AsyncFn(&PgTx<'_>, &mut Vec<Wake>) -> StoreResult<T>,
    {
        let open = self.begin_write(runs).await?;
        let conn = open.client(&self.ctx)?;
        let tx = PgTx {
            tx: conn,
            ctx: &self.ctx,
        };
        if let Some(fence) = &self.fence {
            ops_work::check_fence(&tx, fence).await?;
        }
        if retry && let Some((first, wakes)) = ops::stored_operation(&tx, op_key).await? {
            let first = self.finish(&open, Ok(first), wakes, None).await?;
            self.changes.after_commit(conn).await;
            return Ok(first);
        }
        let mut wakes = Vec::new();
        let op_run = runs.first().copied().unwrap_or_default();
        let result = body(&tx, &mut wakes).await;
        let last = match &result {
            Ok(value) => Some(ops::operation_statement(
                op_run, op_key, value, &wakes, confirmed,
            )),
            Err(_) => None,
        };
        let (result, last) = match last.transpose() {
            Ok(last) => (result, last),
            Err(error) => (Err(error), None),
        };
        let value = self.finish(&open, result, wakes, last).await?;
        self.changes.after_commit(conn).await;
        Ok(value)
    }

    /// A connection, a transaction (`write`: one that locks no run; else a read-only
    /// snapshot), the body, its end.
    async fn plain<T, F>(&self, write: bool, body: F) -> StoreResult<T>
    where
        F: AsyncFnOnce(&PgTx<'_>) -> StoreResult<T>,
    {
        let open = match write {
            true => self.begin_write(&[]).await?,
            false => self.begin_read().await?,
        };
        let result = body(&PgTx {
            tx: open.client(&self.ctx)?,
            ctx: &self.ctx,
        })
        .await;
        self.finish(&open, result, Vec::new(), None).await
    }

    /// For `muster bench mailbox` only: a decision whose NOTIFY is sent inside its own
    /// transaction (so the server's global notification lock is taken at its COMMIT),
    /// measured against the placement every command uses —
    /// [`respond`](crate::store::MailboxStore::respond), then
    /// [`announce`](crate::store::MailboxStore::announce) after COMMIT. No setting switches a
    /// run to this path.
    #[doc(hidden)]
    pub async fn bench_only_respond_with_notify_in_transaction(
        &self,
        response: NewResponse,
    ) -> StoreResult<Message> {
        let id = response.run_id.clone();
        self.write(&[&id], async move |tx, wakes| {
            let message = mail::respond(tx, &response, wakes).await?;
            ops::execute(
                tx.tx,
                tx.ctx,
                "SELECT pg_notify($1, $2)",
                &[&tx.ctx.wake_channel(&response.run_id), &message.recipient],
            )
            .await?;
            Ok(message)
        })
        .await
    }
}

impl Backend for PostgresStore {
    type Tx<'t> = PgTx<'t>;

    fn fence(&self) -> Option<&Arc<WorkFence>> {
        self.fence.as_ref()
    }

    fn waiters(&self) -> &Waiters {
        &self.waiters
    }

    fn unlimited(&self) -> &ops_ledger::UnlimitedRuns {
        &self.unlimited
    }

    /// One statement on a pooled connection, outside any transaction: a lease that finds
    /// nothing then takes no run lock and commits nothing (no WAL flush). A fenced store
    /// leases every time (the lease checks the fence); a failed look counts as a yes.
    async fn may_have_pending(&self, run_id: &str, recipient: &str) -> bool {
        if self.fence.is_some() {
            return true;
        }
        let look = async {
            let conn = self.connection().await?;
            let tx = PgTx {
                tx: &conn,
                ctx: &self.ctx,
            };
            let read = |row: &crate::rows::Row<'_>| row.get::<bool>("messages", 0);
            crate::ops::Tx::query_one(&tx, mail::PENDING_FOR, &[&run_id, &recipient], read).await
        };
        look.await.unwrap_or(true)
    }

    /// When the connection is lost (the outcome of a COMMIT unknown), the write is tried again
    /// on a new connection under the same operation id: if the first attempt committed, its
    /// stored outcome is returned and nothing runs twice.
    async fn write<T, F>(&self, runs: &[&str], body: F) -> StoreResult<T>
    where
        T: serde::Serialize + serde::de::DeserializeOwned + Send + 'static,
        F: AsyncFn(&Self::Tx<'_>, &mut Vec<Wake>) -> StoreResult<T> + Send + 'static,
    {
        let op_key = ops::new_operation_key();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let confirmed = self.take_confirmed();
            let key = (op_key.as_str(), attempt > 1);
            match self.write_once(runs, key, &confirmed, &body).await {
                Ok(value) => {
                    self.add_confirmed([op_key]);
                    break Ok(value);
                }
                Err(StoreError::ConnectionLost { .. }) if attempt < WRITE_ATTEMPTS => {
                    self.add_confirmed(confirmed);
                }
                Err(error) => {
                    self.add_confirmed(confirmed);
                    break Err(error);
                }
            }
        }
    }

    async fn read<T, F>(&self, body: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: AsyncFnOnce(&Self::Tx<'_>) -> StoreResult<T> + Send + 'static,
    {
        self.plain(false, body).await
    }

    /// A write here locks no run and has no operation id: a claim whose COMMIT
    /// acknowledgement is lost simply lapses.
    async fn work<T, F>(&self, access: WorkAccess, body: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: AsyncFnOnce(&Self::Tx<'_>) -> StoreResult<T> + Send + 'static,
    {
        self.plain(access != WorkAccess::Read, body).await
    }
}

mailbox_store!(PostgresStore, {
    async fn hold_live(&self, run_id: &str) -> StoreResult<Option<crate::live::LiveHold>> {
        self.take_hold(run_id).await.map(Some)
    }

    async fn listen_run(&self, run_id: &str) -> StoreResult<Option<crate::live::LiveHold>> {
        self.listen_only(run_id).await.map(Some)
    }

    async fn wait_until_not_live(&self, run_id: &str) -> StoreResult<()> {
        self.wait_for_holder(run_id).await
    }

    async fn is_held_live(&self, run_id: &str) -> StoreResult<Option<bool>> {
        self.held_by_anyone(run_id).await.map(Some)
    }

    async fn announce(&self, run_id: &str, recipient: &str) -> StoreResult<Option<bool>> {
        self.announce_wake(run_id, recipient).await.map(Some)
    }

    async fn watch_changes(
        &self,
        on_change: crate::live::OnChange,
    ) -> StoreResult<Option<crate::live::LiveHold>> {
        changes::watch(self, on_change).await.map(Some)
    }

    async fn reserve_budget(
        &self,
        run_id: &str,
        agent: &str,
        epoch: i64,
        estimate: crate::ledger::LedgerSpend,
    ) -> StoreResult<crate::ledger::Reserved> {
        if self.fence.is_none() {
            // Most runs have no run-wide limit: once a look found none in this epoch, the
            // request asks the server nothing; the first look is one read, without the write
            // transaction (a durable COMMIT) a reservation takes. A fenced store checks its
            // lease in a write transaction, so it always takes the write. Only a run this
            // store holds live is skipped, and only while the hold is unbroken: a process
            // whose hold ended may have been taken over by one that wrote limits.
            if let Some(granted) = self.unlimited.grant(run_id, epoch) {
                return Ok(granted);
            }
            let look = self.unlimited.look();
            let run = run_id.to_owned();
            let ledger = self
                .read(async move |tx| ops_ledger::run_ledger(tx, &run).await)
                .await?;
            if let Some(granted) = ops_ledger::grant_if_unlimited(ledger) {
                self.unlimited.learn(run_id, epoch, look, &granted);
                return Ok(granted);
            }
        }
        let (run, agent) = (run_id.to_owned(), agent.to_owned());
        self.write(&[run_id], async move |tx, wakes| {
            ops_ledger::reserve(tx, &run, &agent, epoch, &estimate, wakes).await
        })
        .await
    }

    async fn prune(&self, cutoff: UnixMillis, project: Option<&str>) -> StoreResult<PruneReport> {
        // Lock every run the snapshot lists, then read them again under the locks: a run
        // that finished or started meanwhile is judged by its committed status.
        let listed: Vec<RunRecord> = self
            .runs()
            .await?
            .into_iter()
            .filter(|run| project.is_none_or(|p| run.in_project(p)))
            .collect();
        let ids: Vec<&str> = listed.iter().map(|run| run.id.as_str()).collect();
        let open = self.begin_write(&ids).await?;
        let conn = open.client(&self.ctx)?;
        let result = async {
            let pg = PgTx {
                tx: conn,
                ctx: &self.ctx,
            };
            let runs = runs::list_runs(&pg).await?;
            let runs = runs
                .into_iter()
                .filter(|run| ids.contains(&run.id.as_str()));
            runs::prune(&pg, runs.collect(), cutoff).await
        }
        .await;
        let report = self.finish(&open, result, Vec::new(), None).await?;
        self.changes.after_commit(conn).await;
        Ok(report)
    }

    async fn watch_work(&self) -> StoreResult<WorkWatch> {
        let closed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let listener = self.work_listener(closed.clone()).await?;
        Ok(self.work_watchers.watch_closing(
            Some(Box::new(listener)),
            closed,
            self.ctx.target.to_string(),
        ))
    }
});
