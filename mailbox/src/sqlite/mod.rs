//! The SQLite backend: one file, WAL, one writer thread with group commit.

mod open;
pub(crate) mod ops;
mod reader;
mod schema;
mod version;
mod wal_room;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::StoreResult;
use crate::ops::backend::{Backend, WorkAccess, mailbox_store};
pub use crate::ops::mail::{DELIVERY_QUERY, NEWEST_SEQS_QUERY};
use crate::ops::{ledger as ops_ledger, mail, work as ops_work};
pub use crate::options::{CommitHook, StoreOptions, SyncMode};
use crate::types::*;
use crate::wake::{Waiters, Wake};
use crate::work::WorkFence;
use ops::{OpContext, SqliteTx};
pub use schema::SCHEMA_VERSION;
pub use version::DataVersion;
pub use writer::SyncHold;
use writer::Writer;

/// The SQLite implementation of [`MailboxStore`](crate::store::MailboxStore).
#[derive(Clone)]
pub struct SqliteStore {
    /// Reads, and looks for pending mail, without the writer (see [`reader`]). Declared (so
    /// dropped) before the writer: the writer's connection, closing last, is the one SQLite
    /// lets checkpoint the WAL and delete it (a read-only connection cannot).
    reader: reader::Reader,
    writer: Writer,
    /// Whether the store syncs the WAL itself: a commit is then visible before it is on
    /// disk, and reads stay on the writer (see [`reader`]).
    pipelined: bool,
    waiters: Arc<Waiters>,
    ctx: OpContext,
    /// Set for the process running a work item: every operation first checks that the item's
    /// lease is still this token's (see [`crate::work`]).
    fence: Option<Arc<crate::work::WorkFence>>,
    work_watchers: Arc<crate::work::Watchers>,
    /// Runs read to have no run-wide limit in an epoch: their requests skip the writer.
    unlimited: Arc<ops_ledger::UnlimitedRuns>,
}

impl SqliteStore {
    /// Opens the store at `path`, creating it if absent. Refuses a file that is not SQLite
    /// (leaving it unchanged) and a store written by a newer schema.
    pub fn open(path: &Path, options: StoreOptions) -> StoreResult<SqliteStore> {
        let (conn, pipelined) = open::open_connection(path, &options)?;
        let absolute = open::database_path(&conn, path);
        let waiters = Arc::new(Waiters::default());
        let busy_ms = options.busy_timeout.as_millis() as u64;
        let writer = Writer::start(
            conn,
            path.to_path_buf(),
            busy_ms,
            waiters.clone(),
            options.after_commit.clone(),
            options.gather_released,
            pipelined,
        )?;
        let ctx = OpContext {
            path: Arc::new(PathBuf::from(path)),
            max_body_bytes: options.max_body_bytes,
        };
        Ok(SqliteStore {
            reader: reader::Reader::new(absolute, options.busy_timeout, writer.stats_sender()),
            pipelined,
            writer,
            waiters,
            ctx,
            fence: None,
            work_watchers: Arc::default(),
            unlimited: Arc::default(),
        })
    }

    /// This store, refusing every operation once `fence` no longer holds its work item's
    /// lease (checked in the operation's transaction).
    pub fn fenced(mut self, fence: crate::work::WorkFence) -> SqliteStore {
        self.fence = Some(Arc::new(fence));
        self
    }

    pub fn path(&self) -> &Path {
        &self.ctx.path
    }

    /// What this instance's writer has done so far.
    pub fn stats(&self) -> StoreStats {
        *self.writer.stats().borrow()
    }

    /// The writer's counters as they change, to wait on in tests without polling.
    pub fn watch_stats(&self) -> tokio::sync::watch::Receiver<StoreStats> {
        self.writer.stats()
    }

    /// Stops the writer between transactions until the returned guard is dropped; operations
    /// queue meanwhile. For tests and benchmarks of group commit.
    pub async fn hold_writer(&self) -> StoreResult<std::sync::mpsc::Sender<()>> {
        self.writer.hold().await
    }

    /// Holds the store's syncs of the WAL (pipelined `synchronous=full`) until the returned
    /// guard is dropped: batches commit, and their callers wait. For tests of what a caller
    /// may hear before its batch is on disk.
    pub fn hold_syncs(&self) -> SyncHold {
        self.writer.hold_syncs()
    }

    /// The number of committed batches whose callers are not answered yet, as it changes.
    pub fn unanswered(&self) -> tokio::sync::watch::Receiver<u64> {
        self.writer.unanswered()
    }

    /// The number of operations queued and not yet taken by the writer, as it changes.
    pub fn queued(&self) -> tokio::sync::watch::Receiver<u64> {
        self.writer.queued()
    }

    /// Copies the write-ahead log into the database file and restarts the log from its
    /// beginning (between transactions). For maintenance, and to start benchmarks from a
    /// settled file.
    pub async fn checkpoint(&self) -> StoreResult<()> {
        self.writer.checkpoint().await
    }

    /// Sends many plain messages in one operation (one transaction): broadcasts, and
    /// prefilling large inboxes for benchmarks. Requests and keyed messages are refused here.
    pub async fn send_many(&self, messages: Vec<NewMessage>) -> StoreResult<usize> {
        self.op(async move |tx, wakes| mail::send_many(tx, &messages, wakes).await)
            .await
    }

    /// An operation of [`crate::ops`], run by the writer thread in its own SAVEPOINT (see
    /// [`ops::drive`]); on a fenced store, after checking the fence in the same transaction.
    async fn op<T, F>(&self, body: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: AsyncFnOnce(&SqliteTx<'_>, &mut Vec<crate::wake::Wake>) -> StoreResult<T>
            + Send
            + 'static,
    {
        let ctx = self.ctx.clone();
        let fence = self.fence.clone();
        self.writer
            .submit(move |conn, wakes| {
                let tx = SqliteTx { conn, ctx: &ctx };
                if let Some(fence) = &fence {
                    ops::drive(&ctx.path, ops_work::check_fence(&tx, fence))?;
                }
                ops::drive(&ctx.path, body(&tx, wakes))
            })
            .await
    }
}

/// Every write runs on the writer thread (see [`ops::drive`]); reads on the reader's
/// connection.
impl Backend for SqliteStore {
    type Tx<'t> = SqliteTx<'t>;

    fn fence(&self) -> Option<&Arc<WorkFence>> {
        self.fence.as_ref()
    }

    fn waiters(&self) -> &Waiters {
        &self.waiters
    }

    fn unlimited(&self) -> &ops_ledger::UnlimitedRuns {
        &self.unlimited
    }

    /// Looked up on the read-only connection; a fenced store leases on the writer every time
    /// (the lease checks the fence).
    async fn may_have_pending(&self, run_id: &str, recipient: &str) -> bool {
        self.fence.is_some() || self.reader.may_have_pending(run_id, recipient).await
    }

    async fn write<T, F>(&self, _runs: &[&str], body: F) -> StoreResult<T>
    where
        T: serde::Serialize + serde::de::DeserializeOwned + Send + 'static,
        F: AsyncFn(&Self::Tx<'_>, &mut Vec<Wake>) -> StoreResult<T> + Send + 'static,
    {
        self.op(body).await
    }

    /// On the read-only connection; on the writer when the store is fenced (the read checks
    /// the fence in its transaction) or syncs the WAL itself (see [`reader`]).
    async fn read<T, F>(&self, body: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: AsyncFnOnce(&Self::Tx<'_>) -> StoreResult<T> + Send + 'static,
    {
        if self.fence.is_some() || self.pipelined {
            return self.op(async move |tx, _| body(tx).await).await;
        }
        let ctx = self.ctx.clone();
        self.reader
            .read(move |conn| ops::drive(&ctx.path, body(&SqliteTx { conn, ctx: &ctx })))
            .await
    }

    /// `Change` wakes the queues' watchers after COMMIT.
    async fn work<T, F>(&self, access: WorkAccess, body: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: AsyncFnOnce(&Self::Tx<'_>) -> StoreResult<T> + Send + 'static,
    {
        let ctx = self.ctx.clone();
        let result = self
            .writer
            .submit(move |conn, _| ops::drive(&ctx.path, body(&SqliteTx { conn, ctx: &ctx })))
            .await;
        if access == WorkAccess::Change && result.is_ok() {
            self.work_watchers.wake();
        }
        result
    }
}

mailbox_store!(SqliteStore, {
    async fn reserve_budget(
        &self,
        run_id: &str,
        agent: &str,
        epoch: i64,
        estimate: LedgerSpend,
    ) -> StoreResult<crate::ledger::Reserved> {
        // Most runs have no run-wide limit: once a look found none in this epoch, the
        // request skips the writer. A fenced store looks every time (the look checks the
        // lease).
        let unfenced = self.fence.is_none();
        if unfenced && let Some(granted) = self.unlimited.grant(run_id, epoch) {
            return Ok(granted);
        }
        let look = self.unlimited.look();
        let run = run_id.to_owned();
        let agent = agent.to_owned();
        let reserved = self
            .op(async move |tx, wakes| {
                ops_ledger::reserve(tx, &run, &agent, epoch, &estimate, wakes).await
            })
            .await?;
        if unfenced {
            self.unlimited.learn(run_id, epoch, look, &reserved);
        }
        Ok(reserved)
    }

    async fn prune(&self, cutoff: UnixMillis, project: Option<&str>) -> StoreResult<PruneReport> {
        let project = project.map(str::to_owned);
        self.op(async move |tx, _| {
            let runs = runs::list_runs(tx).await?;
            let runs = runs
                .into_iter()
                .filter(|run| project.as_deref().is_none_or(|p| run.in_project(p)));
            runs::prune(tx, runs.collect(), cutoff).await
        })
        .await
    }

    async fn watch_work(&self) -> StoreResult<crate::work::WorkWatch> {
        Ok(self
            .work_watchers
            .watch(None, self.ctx.path.display().to_string()))
    }
});
