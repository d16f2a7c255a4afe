//! The store's methods, written once for both backends. [`Backend`] is what a backend
//! provides: one write, one read and one work-queue transaction, each running an operation of
//! [`crate::ops`] on the backend's [`Tx`]. `mailbox_store!` expands the one list of
//! [`MailboxStore`](crate::store::MailboxStore) methods over it into each backend's impl,
//! beside the few methods a backend makes its own way (`prune`, `reserve_budget`,
//! `watch_work`, and PostgreSQL's live holds and change feed).
//!
//! A macro, not `impl<B: Backend> MailboxStore for B`: `async_trait` needs each method's
//! future to be `Send`, which generic code cannot show for both backends at once. A SQLite
//! operation's future is not `Send` (it borrows the writer thread's connection, which is not
//! `Sync`, and never leaves that thread: only its closure is sent there); a PostgreSQL one is.
//! Expanded once per store type, the compiler sees each backend's futures as they are.
//!
//! Every operation is a closure owning what it needs (`Send + 'static`): SQLite sends it to
//! its writer thread (see `sqlite::ops::drive`); PostgreSQL awaits it in the caller's task,
//! and may call a write's closure again on a new connection when the connection is lost
//! (see `postgres/mod.rs`), so a write's closure is an `AsyncFn`.

use std::sync::Arc;

use super::Tx;
use super::ledger::UnlimitedRuns;
use crate::error::StoreResult;
use crate::wake::{Waiters, Wake};
use crate::work::WorkFence;

/// One backend's transactions (see the module's documentation).
pub(crate) trait Backend {
    /// One operation's statements.
    type Tx<'t>: Tx;

    /// The work item whose lease this store's operations are fenced by (see [`crate::work`]).
    fn fence(&self) -> Option<&Arc<WorkFence>>;

    /// This process's receivers, woken after COMMIT.
    fn waiters(&self) -> &Waiters;

    /// The runs read to have no run-wide budget limit (see [`UnlimitedRuns`]).
    fn unlimited(&self) -> &UnlimitedRuns;

    /// Whether mail may be pending for `recipient`: false lets a lease without waiting skip
    /// its transaction. Yes unless the backend can look more cheaply than it leases.
    async fn may_have_pending(&self, _run_id: &str, _recipient: &str) -> bool {
        true
    }

    /// One write to `runs` (PostgreSQL holds their locks), refused when the store's fence no
    /// longer holds; `body` names whom it woke, woken after COMMIT.
    async fn write<T, F>(&self, runs: &[&str], body: F) -> StoreResult<T>
    where
        T: serde::Serialize + serde::de::DeserializeOwned + Send + 'static,
        F: AsyncFn(&Self::Tx<'_>, &mut Vec<Wake>) -> StoreResult<T> + Send + 'static;

    /// One read (SQLite: on the writer, fenced as a write is; PostgreSQL: one snapshot).
    async fn read<T, F>(&self, body: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: AsyncFnOnce(&Self::Tx<'_>) -> StoreResult<T> + Send + 'static;

    /// One operation on the work queues: never fenced (the worker holding a lease makes them,
    /// and each names its token itself), no run locked.
    async fn work<T, F>(&self, access: WorkAccess, body: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: AsyncFnOnce(&Self::Tx<'_>) -> StoreResult<T> + Send + 'static;
}

/// What a work-queue operation does (see [`Backend::work`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WorkAccess {
    /// Reads only (PostgreSQL: a read-only snapshot).
    Read,
    /// Writes what no waiting worker acts on (a claim, a heartbeat, a worker's record).
    Write,
    /// Changes the queues: SQLite wakes the store's work watchers after COMMIT (PostgreSQL's
    /// operations announce their changes themselves, [`Tx::announce_work`]).
    Change,
}

/// `impl MailboxStore for $store`: every method both backends run the same way, over the
/// store's [`Backend`], then the backend's own methods (`$own`: `prune`, `reserve_budget`,
/// `watch_work` and whatever else it overrides). The arguments a closure needs are copied
/// into it (`'static`); a write locks the runs it names by the caller's borrowed ids.
macro_rules! mailbox_store {
    ($store:ty, { $($own:tt)* }) => {
        const _: () = {
            use $crate::error::StoreResult;
            use $crate::ledger::{LedgerLimits, LedgerReservation, LedgerSpend, RunLedger};
            use $crate::message::MessageKind;
            use $crate::ops::backend::{Backend as _, WorkAccess};
            use $crate::ops::{fork, ledger, mail, runs, tasks, work};
            use $crate::types::*;
            use $crate::work::{
                Heartbeat, NewProcessGroup, NewWorkItem, ProcessGroupRecord, WorkFence, WorkItem,
                WorkerInfo, WorkerRecord,
            };
            use serde_json::Value;

            #[async_trait::async_trait]
            impl $crate::store::MailboxStore for $store {
                async fn create_run(&self, run: NewRun) -> StoreResult<RunRecord> {
                    let id = run.id.clone();
                    self.write(&[&id], async move |tx, _| runs::create_run(tx, &run).await)
                        .await
                }

                async fn run(&self, run_id: &str) -> StoreResult<Option<RunRecord>> {
                    let run_id = run_id.to_owned();
                    self.read(async move |tx| runs::get_run(tx, &run_id).await)
                        .await
                }

                async fn runs(&self) -> StoreResult<Vec<RunRecord>> {
                    self.read(async |tx| runs::list_runs(tx).await).await
                }

                async fn set_run_status(
                    &self,
                    run_id: &str,
                    status: RunStatus,
                    result: Option<Value>,
                ) -> StoreResult<RunRecord> {
                    let id = run_id.to_owned();
                    self.write(&[run_id], async move |tx, _| {
                        runs::set_run_status(tx, &id, status, result.as_ref()).await
                    })
                    .await
                }

                async fn set_launch_options(
                    &self,
                    run_id: &str,
                    launch_options: Value,
                ) -> StoreResult<RunRecord> {
                    let id = run_id.to_owned();
                    self.write(&[run_id], async move |tx, _| {
                        runs::set_launch_options(tx, &id, &launch_options).await
                    })
                    .await
                }

                async fn open_epoch(&self, run_id: &str) -> StoreResult<i64> {
                    let id = run_id.to_owned();
                    self.write(&[run_id], async move |tx, wakes| {
                        runs::open_epoch(tx, &id, wakes).await
                    })
                    .await
                }

                async fn update_auto_gate(
                    &self,
                    run_id: &str,
                    update: AutoGateUpdate,
                ) -> StoreResult<AutoGate> {
                    let id = run_id.to_owned();
                    self.write(&[run_id], async move |tx, _| {
                        runs::update_auto_gate(tx, &id, update).await
                    })
                    .await
                }

                async fn add_member(&self, run_id: &str, entry: RosterEntry) -> StoreResult<()> {
                    let id = run_id.to_owned();
                    self.write(&[run_id], async move |tx, _| {
                        runs::add_member(tx, &id, &entry).await
                    })
                    .await
                }

                async fn roster(&self, run_id: &str) -> StoreResult<Vec<RosterEntry>> {
                    let run_id = run_id.to_owned();
                    self.read(async move |tx| runs::roster(tx, &run_id).await)
                        .await
                }

                async fn send(&self, message: NewMessage) -> StoreResult<Message> {
                    let id = message.run_id.clone();
                    self.write(&[&id], async move |tx, wakes| {
                        mail::send(tx, &message, wakes).await
                    })
                    .await
                }

                async fn try_receive(
                    &self,
                    run_id: &str,
                    recipient: &str,
                    epoch: i64,
                    filter: MessageFilter,
                ) -> StoreResult<Option<Message>> {
                    if !self.may_have_pending(run_id, recipient).await {
                        return Ok(None);
                    }
                    let (id, recipient) = (run_id.to_owned(), recipient.to_owned());
                    self.write(&[run_id], async move |tx, _| {
                        mail::lease_next(tx, &id, &recipient, epoch, &filter).await
                    })
                    .await
                }

                async fn try_receive_batch(
                    &self,
                    run_id: &str,
                    recipient: &str,
                    epoch: i64,
                    max: usize,
                ) -> StoreResult<Vec<Message>> {
                    if !self.may_have_pending(run_id, recipient).await {
                        return Ok(Vec::new());
                    }
                    let (id, recipient) = (run_id.to_owned(), recipient.to_owned());
                    self.write(&[run_id], async move |tx, _| {
                        mail::lease_batch(tx, &id, &recipient, epoch, max).await
                    })
                    .await
                }

                async fn ack(&self, run_id: &str, keys: Vec<String>) -> StoreResult<()> {
                    let id = run_id.to_owned();
                    let acker = mail::Acker::of_store(self.fence().is_some());
                    self.write(&[run_id], async move |tx, _| {
                        mail::ack(tx, &id, &keys, acker).await
                    })
                    .await
                }

                async fn hand_back(&self, run_id: &str, keys: Vec<String>) -> StoreResult<u64> {
                    let id = run_id.to_owned();
                    self.write(&[run_id], async move |tx, wakes| {
                        mail::hand_back(tx, &id, &keys, wakes).await
                    })
                    .await
                }

                async fn respond(&self, response: NewResponse) -> StoreResult<Message> {
                    let id = response.run_id.clone();
                    self.write(&[&id], async move |tx, wakes| {
                        mail::respond(tx, &response, wakes).await
                    })
                    .await
                }

                async fn request(
                    &self,
                    run_id: &str,
                    request_id: &str,
                ) -> StoreResult<Option<RequestRecord>> {
                    let (run_id, request_id) = (run_id.to_owned(), request_id.to_owned());
                    self.read(async move |tx| mail::request(tx, &run_id, &request_id).await)
                        .await
                }

                async fn requests(&self, run_id: &str) -> StoreResult<Vec<RequestRecord>> {
                    let run_id = run_id.to_owned();
                    self.read(async move |tx| mail::list_requests(tx, &run_id).await)
                        .await
                }

                async fn message(&self, key: &str) -> StoreResult<Option<Message>> {
                    let key = key.to_owned();
                    self.read(async move |tx| mail::message_by_key(tx, &key).await)
                        .await
                }

                async fn messages(
                    &self,
                    run_id: &str,
                    recipient: Option<&str>,
                ) -> StoreResult<Vec<Message>> {
                    let (run_id, recipient) = (run_id.to_owned(), recipient.map(str::to_owned));
                    self.read(async move |tx| {
                        mail::list_messages(tx, &run_id, recipient.as_deref()).await
                    })
                    .await
                }

                async fn newest_messages(
                    &self,
                    run_id: &str,
                    limit: usize,
                ) -> StoreResult<NewestMessages> {
                    let run_id = run_id.to_owned();
                    self.read(async move |tx| mail::newest_messages(tx, &run_id, limit).await)
                        .await
                }

                async fn messages_of_kind(
                    &self,
                    run_id: &str,
                    kind: &MessageKind,
                ) -> StoreResult<Vec<Message>> {
                    let (run_id, kind) = (run_id.to_owned(), kind.clone());
                    self.read(async move |tx| mail::messages_of_kind(tx, &run_id, &kind).await)
                        .await
                }

                async fn commit_turn(&self, turn: CommitTurn) -> StoreResult<CommitTurnOutcome> {
                    let id = turn.run_id.clone();
                    let acker = mail::Acker::of_store(self.fence().is_some());
                    self.write(&[&id], async move |tx, wakes| {
                        runs::commit_turn(tx, &turn, acker, wakes).await
                    })
                    .await
                }

                fn wake(&self, run_id: &str, recipient: &str) {
                    self.waiters().wake(run_id, recipient);
                }

                fn woken(
                    &self,
                    run_id: &str,
                    recipient: &str,
                ) -> std::sync::Arc<tokio::sync::Notify> {
                    self.waiters().notify_for(run_id, recipient)
                }

                async fn append_records(
                    &self,
                    run_id: &str,
                    records: Vec<NewRecord>,
                ) -> StoreResult<Vec<AgentRecord>> {
                    let id = run_id.to_owned();
                    self.write(&[run_id], async move |tx, _| {
                        runs::append_records(tx, &id, &records).await
                    })
                    .await
                }

                async fn record_tool_start(
                    &self,
                    run_id: &str,
                    records: Vec<NewRecord>,
                    group: NewProcessGroup,
                ) -> StoreResult<Vec<AgentRecord>> {
                    let id = run_id.to_owned();
                    let fence = self.fence().cloned();
                    self.write(&[run_id], async move |tx, _| {
                        let rows = runs::append_records(tx, &id, &records).await?;
                        if let Some(fence) = &fence {
                            work::record_group(tx, &id, fence, &group).await?;
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
                    let (run_id, agent) = (run_id.to_owned(), agent.to_owned());
                    let stream = stream.to_owned();
                    self.read(async move |tx| {
                        runs::records(tx, &run_id, &agent, &stream, after_seq).await
                    })
                    .await
                }

                async fn stream_records(
                    &self,
                    run_id: &str,
                    stream: &str,
                ) -> StoreResult<Vec<AgentRecord>> {
                    let (run_id, stream) = (run_id.to_owned(), stream.to_owned());
                    self.read(async move |tx| runs::stream_records(tx, &run_id, &stream).await)
                        .await
                }

                async fn next_counter(&self, run_id: &str, name: &str) -> StoreResult<i64> {
                    let (id, name) = (run_id.to_owned(), name.to_owned());
                    self.write(&[run_id], async move |tx, _| {
                        runs::next_counter(tx, &id, &name).await
                    })
                    .await
                }

                async fn counter_for(
                    &self,
                    run_id: &str,
                    name: &str,
                    key: &str,
                ) -> StoreResult<i64> {
                    let (id, name, key) = (run_id.to_owned(), name.to_owned(), key.to_owned());
                    self.write(&[run_id], async move |tx, _| {
                        runs::counter_for(tx, &id, &name, &key).await
                    })
                    .await
                }

                async fn open_ledger(
                    &self,
                    run_id: &str,
                    limits: LedgerLimits,
                    seed: LedgerSpend,
                ) -> StoreResult<RunLedger> {
                    self.unlimited().forget(run_id);
                    let id = run_id.to_owned();
                    self.write(&[run_id], async move |tx, _| {
                        ledger::open_ledger(tx, &id, &limits, &seed).await
                    })
                    .await
                }

                async fn run_ledger(&self, run_id: &str) -> StoreResult<Option<RunLedger>> {
                    let id = run_id.to_owned();
                    if self.fence().is_some() {
                        // A worker's store: the read an agent makes before each model request
                        // is refused once the item's lease is lost, as its writes are
                        // (fencing), so a worker that lost its teammate sends it no further
                        // request.
                        return self
                            .write(&[run_id], async move |tx, _| {
                                ledger::run_ledger(tx, &id).await
                            })
                            .await;
                    }
                    self.read(async move |tx| ledger::run_ledger(tx, &id).await)
                        .await
                }

                async fn release_reservation(&self, run_id: &str, agent: &str) -> StoreResult<()> {
                    let (id, agent) = (run_id.to_owned(), agent.to_owned());
                    self.write(&[run_id], async move |tx, wakes| {
                        ledger::release(tx, &id, &agent, wakes).await
                    })
                    .await
                }

                async fn ledger_reservations(
                    &self,
                    run_id: &str,
                ) -> StoreResult<Vec<LedgerReservation>> {
                    let run_id = run_id.to_owned();
                    self.read(async move |tx| ledger::reservations(tx, &run_id).await)
                        .await
                }

                async fn create_task(&self, task: NewTask) -> StoreResult<Task> {
                    let id = task.run_id.clone();
                    self.write(&[&id], async move |tx, wakes| {
                        tasks::create_task(tx, &task, wakes).await
                    })
                    .await
                }

                async fn task(&self, run_id: &str, task_id: i64) -> StoreResult<Option<Task>> {
                    let run_id = run_id.to_owned();
                    self.read(async move |tx| tasks::get_task(tx, &run_id, task_id).await)
                        .await
                }

                async fn tasks(&self, run_id: &str) -> StoreResult<Vec<Task>> {
                    let run_id = run_id.to_owned();
                    self.read(async move |tx| tasks::list_tasks(tx, &run_id).await)
                        .await
                }

                async fn claim_task(
                    &self,
                    run_id: &str,
                    task_id: i64,
                    agent: &str,
                ) -> StoreResult<Task> {
                    let (id, agent) = (run_id.to_owned(), agent.to_owned());
                    self.write(&[run_id], async move |tx, _| {
                        tasks::claim_task(tx, &id, task_id, &agent).await
                    })
                    .await
                }

                async fn claim_next_task(
                    &self,
                    run_id: &str,
                    agent: &str,
                ) -> StoreResult<Option<Claimed>> {
                    let (id, agent) = (run_id.to_owned(), agent.to_owned());
                    self.write(&[run_id], async move |tx, wakes| {
                        tasks::claim_next(tx, &id, &agent, wakes).await
                    })
                    .await
                }

                async fn update_task(&self, update: TaskUpdate) -> StoreResult<TaskChange> {
                    let id = update.run_id.clone();
                    self.write(&[&id], async move |tx, wakes| {
                        tasks::update_task(tx, &update, wakes).await
                    })
                    .await
                }

                async fn release_tasks_of(
                    &self,
                    run_id: &str,
                    agent: &str,
                ) -> StoreResult<Vec<i64>> {
                    let (id, agent) = (run_id.to_owned(), agent.to_owned());
                    self.write(&[run_id], async move |tx, wakes| {
                        tasks::release_tasks_of(tx, &id, &agent, wakes).await
                    })
                    .await
                }

                async fn fork_run(
                    &self,
                    source: &str,
                    new_id: &str,
                    new_slug: &str,
                ) -> StoreResult<RunRecord> {
                    let (from, to) = (source.to_owned(), new_id.to_owned());
                    let new_slug = new_slug.to_owned();
                    self.write(&[source, new_id], async move |tx, _| {
                        fork::fork_run(tx, &from, &to, &new_slug).await
                    })
                    .await
                }

                async fn enqueue_work(
                    &self,
                    items: Vec<NewWorkItem>,
                ) -> StoreResult<Vec<WorkItem>> {
                    self.work(WorkAccess::Change, async move |tx| {
                        work::enqueue(tx, &items).await
                    })
                    .await
                }

                async fn claim_work(
                    &self,
                    queue: Option<&str>,
                    worker: &str,
                    lease: std::time::Duration,
                ) -> StoreResult<Option<WorkItem>> {
                    let (queue, worker) = (queue.map(str::to_owned), worker.to_owned());
                    let lease = $crate::work::millis(lease);
                    self.work(WorkAccess::Write, async move |tx| {
                        work::claim(tx, queue.as_deref(), &worker, lease).await
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
                    let lease = $crate::work::millis(lease);
                    self.work(WorkAccess::Write, async move |tx| {
                        work::heartbeat(tx, &worker, &leases, lease).await
                    })
                    .await
                }

                async fn finish_work(
                    &self,
                    fence: &WorkFence,
                    result: Value,
                ) -> StoreResult<WorkItem> {
                    let fence = fence.clone();
                    self.work(WorkAccess::Change, async move |tx| {
                        work::finish(tx, &fence, &result).await
                    })
                    .await
                }

                async fn release_work(&self, fence: &WorkFence) -> StoreResult<WorkItem> {
                    let fence = fence.clone();
                    self.work(WorkAccess::Change, async move |tx| {
                        work::release(tx, &fence).await
                    })
                    .await
                }

                async fn stop_work(
                    &self,
                    id: &str,
                    result: Value,
                ) -> StoreResult<Option<WorkItem>> {
                    let id = id.to_owned();
                    self.work(WorkAccess::Change, async move |tx| {
                        work::stop(tx, &id, &result).await
                    })
                    .await
                }

                async fn reopen_work(&self, id: &str) -> StoreResult<Option<WorkItem>> {
                    let id = id.to_owned();
                    self.work(WorkAccess::Change, async move |tx| {
                        work::reopen(tx, &id).await
                    })
                    .await
                }

                async fn work_item(&self, id: &str) -> StoreResult<Option<WorkItem>> {
                    let id = id.to_owned();
                    self.work(WorkAccess::Read, async move |tx| work::item(tx, &id).await)
                        .await
                }

                async fn work_items(&self, queue: &str) -> StoreResult<Vec<WorkItem>> {
                    let queue = queue.to_owned();
                    self.work(WorkAccess::Read, async move |tx| {
                        work::items(tx, &queue).await
                    })
                    .await
                }

                async fn next_lease_expiry(
                    &self,
                    queue: Option<&str>,
                ) -> StoreResult<Option<std::time::Duration>> {
                    let queue = queue.map(str::to_owned);
                    let millis = self
                        .work(WorkAccess::Read, async move |tx| {
                            work::next_expiry(tx, queue.as_deref()).await
                        })
                        .await?;
                    Ok(millis.map(|ms| std::time::Duration::from_millis(ms.max(0) as u64)))
                }

                async fn workers(&self) -> StoreResult<Vec<WorkerRecord>> {
                    self.work(WorkAccess::Read, async |tx| work::workers(tx).await)
                        .await
                }

                async fn worker_process_groups(
                    &self,
                    worker: &str,
                    host: &str,
                    boot_id: &str,
                ) -> StoreResult<Vec<ProcessGroupRecord>> {
                    let (worker, host) = (worker.to_owned(), host.to_owned());
                    let boot_id = boot_id.to_owned();
                    self.work(WorkAccess::Read, async move |tx| {
                        work::worker_groups(tx, &worker, &host, &boot_id).await
                    })
                    .await
                }

                async fn forget_process_group(
                    &self,
                    run_id: &str,
                    agent: &str,
                    tool_use_id: &str,
                ) -> StoreResult<()> {
                    let (run_id, agent) = (run_id.to_owned(), agent.to_owned());
                    let tool_use_id = tool_use_id.to_owned();
                    self.work(WorkAccess::Write, async move |tx| {
                        work::forget_group(tx, &run_id, &agent, &tool_use_id).await
                    })
                    .await
                }

                async fn retire_worker(&self, name: &str) -> StoreResult<()> {
                    let name = name.to_owned();
                    self.work(WorkAccess::Write, async move |tx| {
                        work::retire(tx, &name).await
                    })
                    .await
                }

                $($own)*
            }
        };
    };
}

pub(crate) use mailbox_store;
