//! The SQLite backend: one file, WAL, one writer thread with group commit.

mod open;
pub(crate) mod ops;
mod schema;
mod version;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::error::StoreResult;
use crate::message::MessageKind;
pub use crate::ops::mail::{DELIVERY_QUERY, NEWEST_SEQS_QUERY};
use crate::ops::{
    fork as ops_fork, ledger as ops_ledger, mail, runs, tasks as ops_tasks, work as ops_work,
};
pub use crate::options::{CommitHook, StoreOptions, SyncMode};
use crate::store::MailboxStore;
use crate::types::*;
use crate::wake::Waiters;
use crate::work::{
    Heartbeat, NewWorkItem, WorkFence, WorkItem, WorkWatch, WorkerInfo, WorkerRecord,
};
use ops::{OpContext, SqliteTx};
pub use schema::SCHEMA_VERSION;
pub use version::DataVersion;
pub use writer::SyncHold;
use writer::Writer;

/// The SQLite implementation of [`MailboxStore`].
#[derive(Clone)]
pub struct SqliteStore {
    writer: Writer,
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

    /// A work-queue operation: never fenced (the worker holding the lease makes them, and
    /// each names its token itself); `changed` wakes the queue's watchers after COMMIT.
    async fn work_op<T, F>(&self, changed: bool, body: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: AsyncFnOnce(&SqliteTx<'_>) -> StoreResult<T> + Send + 'static,
    {
        let ctx = self.ctx.clone();
        let result = self
            .writer
            .submit(move |conn, _| ops::drive(&ctx.path, body(&SqliteTx { conn, ctx: &ctx })))
            .await;
        if changed && result.is_ok() {
            self.work_watchers.wake();
        }
        result
    }
}

#[async_trait]
impl MailboxStore for SqliteStore {
    async fn create_run(&self, run: NewRun) -> StoreResult<RunRecord> {
        self.op(async move |tx, _| runs::create_run(tx, &run).await)
            .await
    }

    async fn run(&self, run_id: &str) -> StoreResult<Option<RunRecord>> {
        let run_id = run_id.to_owned();
        self.op(async move |tx, _| runs::get_run(tx, &run_id).await)
            .await
    }

    async fn runs(&self) -> StoreResult<Vec<RunRecord>> {
        self.op(async move |tx, _| runs::list_runs(tx).await).await
    }

    async fn set_run_status(
        &self,
        run_id: &str,
        status: RunStatus,
        result: Option<Value>,
    ) -> StoreResult<RunRecord> {
        let run_id = run_id.to_owned();
        self.op(async move |tx, _| runs::set_run_status(tx, &run_id, status, result.as_ref()).await)
            .await
    }

    async fn set_launch_options(
        &self,
        run_id: &str,
        launch_options: Value,
    ) -> StoreResult<RunRecord> {
        let run_id = run_id.to_owned();
        self.op(async move |tx, _| runs::set_launch_options(tx, &run_id, &launch_options).await)
            .await
    }

    async fn open_epoch(&self, run_id: &str) -> StoreResult<i64> {
        let run_id = run_id.to_owned();
        self.op(async move |tx, wakes| runs::open_epoch(tx, &run_id, wakes).await)
            .await
    }

    async fn update_auto_gate(
        &self,
        run_id: &str,
        update: AutoGateUpdate,
    ) -> StoreResult<AutoGate> {
        let run_id = run_id.to_owned();
        self.op(async move |tx, _| runs::update_auto_gate(tx, &run_id, update).await)
            .await
    }

    async fn add_member(&self, run_id: &str, entry: RosterEntry) -> StoreResult<()> {
        let run_id = run_id.to_owned();
        self.op(async move |tx, _| runs::add_member(tx, &run_id, &entry).await)
            .await
    }

    async fn roster(&self, run_id: &str) -> StoreResult<Vec<RosterEntry>> {
        let run_id = run_id.to_owned();
        self.op(async move |tx, _| runs::roster(tx, &run_id).await)
            .await
    }

    async fn send(&self, message: NewMessage) -> StoreResult<Message> {
        self.op(async move |tx, wakes| mail::send(tx, &message, wakes).await)
            .await
    }

    async fn try_receive(
        &self,
        run_id: &str,
        recipient: &str,
        epoch: i64,
        filter: MessageFilter,
    ) -> StoreResult<Option<Message>> {
        let (run_id, recipient) = (run_id.to_owned(), recipient.to_owned());
        self.op(async move |tx, _| mail::lease_next(tx, &run_id, &recipient, epoch, &filter).await)
            .await
    }

    async fn try_receive_batch(
        &self,
        run_id: &str,
        recipient: &str,
        epoch: i64,
        max: usize,
    ) -> StoreResult<Vec<Message>> {
        let (run_id, recipient) = (run_id.to_owned(), recipient.to_owned());
        self.op(async move |tx, _| mail::lease_batch(tx, &run_id, &recipient, epoch, max).await)
            .await
    }

    async fn ack(&self, run_id: &str, keys: Vec<String>) -> StoreResult<()> {
        let run_id = run_id.to_owned();
        let acker = mail::Acker::of_store(self.fence.is_some());
        self.op(async move |tx, _| mail::ack(tx, &run_id, &keys, acker).await)
            .await
    }

    async fn hand_back(&self, run_id: &str, keys: Vec<String>) -> StoreResult<u64> {
        let run_id = run_id.to_owned();
        self.op(async move |tx, wakes| mail::hand_back(tx, &run_id, &keys, wakes).await)
            .await
    }

    async fn respond(&self, response: NewResponse) -> StoreResult<Message> {
        self.op(async move |tx, wakes| mail::respond(tx, &response, wakes).await)
            .await
    }

    async fn request(&self, run_id: &str, request_id: &str) -> StoreResult<Option<RequestRecord>> {
        let (run_id, request_id) = (run_id.to_owned(), request_id.to_owned());
        self.op(async move |tx, _| mail::request(tx, &run_id, &request_id).await)
            .await
    }

    async fn requests(&self, run_id: &str) -> StoreResult<Vec<RequestRecord>> {
        let run_id = run_id.to_owned();
        self.op(async move |tx, _| mail::list_requests(tx, &run_id).await)
            .await
    }

    async fn message(&self, key: &str) -> StoreResult<Option<Message>> {
        let key = key.to_owned();
        self.op(async move |tx, _| mail::message_by_key(tx, &key).await)
            .await
    }

    async fn messages(&self, run_id: &str, recipient: Option<&str>) -> StoreResult<Vec<Message>> {
        let (run_id, recipient) = (run_id.to_owned(), recipient.map(str::to_owned));
        self.op(async move |tx, _| mail::list_messages(tx, &run_id, recipient.as_deref()).await)
            .await
    }

    async fn newest_messages(&self, run_id: &str, limit: usize) -> StoreResult<NewestMessages> {
        let run_id = run_id.to_owned();
        self.op(async move |tx, _| mail::newest_messages(tx, &run_id, limit).await)
            .await
    }

    async fn messages_of_kind(
        &self,
        run_id: &str,
        kind: &MessageKind,
    ) -> StoreResult<Vec<Message>> {
        let (run_id, kind) = (run_id.to_owned(), kind.clone());
        self.op(async move |tx, _| mail::messages_of_kind(tx, &run_id, &kind).await)
            .await
    }

    async fn commit_turn(&self, turn: CommitTurn) -> StoreResult<CommitTurnOutcome> {
        let acker = mail::Acker::of_store(self.fence.is_some());
        self.op(async move |tx, wakes| runs::commit_turn(tx, &turn, acker, wakes).await)
            .await
    }

    fn wake(&self, run_id: &str, recipient: &str) {
        self.waiters.wake(run_id, recipient);
    }

    fn woken(&self, run_id: &str, recipient: &str) -> std::sync::Arc<tokio::sync::Notify> {
        self.waiters.notify_for(run_id, recipient)
    }

    async fn append_records(
        &self,
        run_id: &str,
        records: Vec<NewRecord>,
    ) -> StoreResult<Vec<AgentRecord>> {
        let run_id = run_id.to_owned();
        self.op(async move |tx, _| runs::append_records(tx, &run_id, &records).await)
            .await
    }

    async fn record_tool_start(
        &self,
        run_id: &str,
        records: Vec<NewRecord>,
        group: crate::work::NewProcessGroup,
    ) -> StoreResult<Vec<AgentRecord>> {
        let run_id = run_id.to_owned();
        let fence = self.fence.clone();
        self.op(async move |tx, _| {
            let rows = runs::append_records(tx, &run_id, &records).await?;
            if let Some(fence) = &fence {
                ops_work::record_group(tx, &run_id, fence, &group).await?;
            }
            Ok(rows)
        })
        .await
    }

    async fn records(
        &self,
        run_id: &str,
        agent: &str,
        stream: &str,
        after_seq: i64,
    ) -> StoreResult<Vec<AgentRecord>> {
        let (run_id, agent, stream) = (run_id.to_owned(), agent.to_owned(), stream.to_owned());
        self.op(async move |tx, _| runs::records(tx, &run_id, &agent, &stream, after_seq).await)
            .await
    }

    async fn open_ledger(
        &self,
        run_id: &str,
        limits: crate::ledger::LedgerLimits,
        seed: crate::ledger::LedgerSpend,
    ) -> StoreResult<crate::ledger::RunLedger> {
        self.unlimited.forget(run_id);
        let run_id = run_id.to_owned();
        self.op(async move |tx, _| ops_ledger::open_ledger(tx, &run_id, &limits, &seed).await)
            .await
    }

    async fn run_ledger(&self, run_id: &str) -> StoreResult<Option<crate::ledger::RunLedger>> {
        let run_id = run_id.to_owned();
        self.op(async move |tx, _| ops_ledger::run_ledger(tx, &run_id).await)
            .await
    }

    async fn reserve_budget(
        &self,
        run_id: &str,
        agent: &str,
        epoch: i64,
        estimate: crate::ledger::LedgerSpend,
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

    async fn release_reservation(&self, run_id: &str, agent: &str) -> StoreResult<()> {
        let (run_id, agent) = (run_id.to_owned(), agent.to_owned());
        self.op(async move |tx, wakes| ops_ledger::release(tx, &run_id, &agent, wakes).await)
            .await
    }

    async fn ledger_reservations(
        &self,
        run_id: &str,
    ) -> StoreResult<Vec<crate::ledger::LedgerReservation>> {
        let run_id = run_id.to_owned();
        self.op(async move |tx, _| ops_ledger::reservations(tx, &run_id).await)
            .await
    }

    async fn stream_records(&self, run_id: &str, stream: &str) -> StoreResult<Vec<AgentRecord>> {
        let (run_id, stream) = (run_id.to_owned(), stream.to_owned());
        self.op(async move |tx, _| runs::stream_records(tx, &run_id, &stream).await)
            .await
    }

    async fn next_counter(&self, run_id: &str, name: &str) -> StoreResult<i64> {
        let (run_id, name) = (run_id.to_owned(), name.to_owned());
        self.op(async move |tx, _| runs::next_counter(tx, &run_id, &name).await)
            .await
    }

    async fn counter_for(&self, run_id: &str, name: &str, key: &str) -> StoreResult<i64> {
        let (run_id, name) = (run_id.to_owned(), name.to_owned());
        let key = key.to_owned();
        self.op(async move |tx, _| runs::counter_for(tx, &run_id, &name, &key).await)
            .await
    }

    async fn create_task(&self, task: NewTask) -> StoreResult<Task> {
        self.op(async move |tx, wakes| ops_tasks::create_task(tx, &task, wakes).await)
            .await
    }

    async fn task(&self, run_id: &str, task_id: i64) -> StoreResult<Option<Task>> {
        let run_id = run_id.to_owned();
        self.op(async move |tx, _| ops_tasks::get_task(tx, &run_id, task_id).await)
            .await
    }

    async fn tasks(&self, run_id: &str) -> StoreResult<Vec<Task>> {
        let run_id = run_id.to_owned();
        self.op(async move |tx, _| ops_tasks::list_tasks(tx, &run_id).await)
            .await
    }

    async fn claim_task(&self, run_id: &str, task_id: i64, agent: &str) -> StoreResult<Task> {
        let (run_id, agent) = (run_id.to_owned(), agent.to_owned());
        self.op(async move |tx, _| ops_tasks::claim_task(tx, &run_id, task_id, &agent).await)
            .await
    }

    async fn claim_next_task(&self, run_id: &str, agent: &str) -> StoreResult<Option<Claimed>> {
        let (run_id, agent) = (run_id.to_owned(), agent.to_owned());
        self.op(async move |tx, wakes| ops_tasks::claim_next(tx, &run_id, &agent, wakes).await)
            .await
    }

    async fn update_task(&self, update: TaskUpdate) -> StoreResult<TaskChange> {
        self.op(async move |tx, wakes| ops_tasks::update_task(tx, &update, wakes).await)
            .await
    }

    async fn release_tasks_of(&self, run_id: &str, agent: &str) -> StoreResult<Vec<i64>> {
        let (run_id, agent) = (run_id.to_owned(), agent.to_owned());
        self.op(async move |tx, wakes| {
            ops_tasks::release_tasks_of(tx, &run_id, &agent, wakes).await
        })
        .await
    }

    async fn fork_run(&self, source: &str, new_id: &str, new_slug: &str) -> StoreResult<RunRecord> {
        let (source, new_id, new_slug) =
            (source.to_owned(), new_id.to_owned(), new_slug.to_owned());
        self.op(async move |tx, _| ops_fork::fork_run(tx, &source, &new_id, &new_slug).await)
            .await
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

    async fn enqueue_work(&self, items: Vec<NewWorkItem>) -> StoreResult<Vec<WorkItem>> {
        self.work_op(true, async move |tx| ops_work::enqueue(tx, &items).await)
            .await
    }

    async fn claim_work(
        &self,
        queue: Option<&str>,
        worker: &str,
        lease: std::time::Duration,
    ) -> StoreResult<Option<WorkItem>> {
        let (queue, worker) = (queue.map(str::to_owned), worker.to_owned());
        let lease = crate::work::millis(lease);
        self.work_op(false, async move |tx| {
            ops_work::claim(tx, queue.as_deref(), &worker, lease).await
        })
        .await
    }

    async fn heartbeat(
        &self,
        worker: &WorkerInfo,
        leases: &[WorkFence],
        lease: std::time::Duration,
    ) -> StoreResult<Heartbeat> {
        let (worker, leases) = (worker.clone(), leases.to_vec());
        let lease = crate::work::millis(lease);
        self.work_op(false, async move |tx| {
            ops_work::heartbeat(tx, &worker, &leases, lease).await
        })
        .await
    }

    async fn finish_work(&self, fence: &WorkFence, result: Value) -> StoreResult<WorkItem> {
        let fence = fence.clone();
        self.work_op(true, async move |tx| {
            ops_work::finish(tx, &fence, &result).await
        })
        .await
    }

    async fn release_work(&self, fence: &WorkFence) -> StoreResult<WorkItem> {
        let fence = fence.clone();
        self.work_op(true, async move |tx| ops_work::release(tx, &fence).await)
            .await
    }

    async fn stop_work(&self, id: &str, result: Value) -> StoreResult<Option<WorkItem>> {
        let id = id.to_owned();
        self.work_op(true, async move |tx| ops_work::stop(tx, &id, &result).await)
            .await
    }

    async fn reopen_work(&self, id: &str) -> StoreResult<Option<WorkItem>> {
        let id = id.to_owned();
        self.work_op(true, async move |tx| ops_work::reopen(tx, &id).await)
            .await
    }

    async fn worker_process_groups(
        &self,
        worker: &str,
        host: &str,
        boot_id: &str,
    ) -> StoreResult<Vec<crate::work::ProcessGroupRecord>> {
        let (worker, host, boot_id) = (worker.to_owned(), host.to_owned(), boot_id.to_owned());
        self.work_op(false, async move |tx| {
            ops_work::worker_groups(tx, &worker, &host, &boot_id).await
        })
        .await
    }

    async fn forget_process_group(
        &self,
        run_id: &str,
        agent: &str,
        tool_use_id: &str,
    ) -> StoreResult<()> {
        let (run_id, agent, tool_use_id) =
            (run_id.to_owned(), agent.to_owned(), tool_use_id.to_owned());
        self.work_op(false, async move |tx| {
            ops_work::forget_group(tx, &run_id, &agent, &tool_use_id).await
        })
        .await
    }

    async fn work_item(&self, id: &str) -> StoreResult<Option<WorkItem>> {
        let id = id.to_owned();
        self.work_op(false, async move |tx| ops_work::item(tx, &id).await)
            .await
    }

    async fn work_items(&self, queue: &str) -> StoreResult<Vec<WorkItem>> {
        let queue = queue.to_owned();
        self.work_op(false, async move |tx| ops_work::items(tx, &queue).await)
            .await
    }

    async fn next_lease_expiry(
        &self,
        queue: Option<&str>,
    ) -> StoreResult<Option<std::time::Duration>> {
        let queue = queue.map(str::to_owned);
        let millis = self
            .work_op(false, async move |tx| {
                ops_work::next_expiry(tx, queue.as_deref()).await
            })
            .await?;
        Ok(millis.map(|ms| std::time::Duration::from_millis(ms.max(0) as u64)))
    }

    async fn watch_work(&self) -> StoreResult<WorkWatch> {
        Ok(self
            .work_watchers
            .watch(None, self.ctx.path.display().to_string()))
    }

    async fn workers(&self) -> StoreResult<Vec<WorkerRecord>> {
        self.work_op(false, async |tx| ops_work::workers(tx).await)
            .await
    }

    async fn retire_worker(&self, name: &str) -> StoreResult<()> {
        let name = name.to_owned();
        self.work_op(false, async move |tx| ops_work::retire(tx, &name).await)
            .await
    }
}
