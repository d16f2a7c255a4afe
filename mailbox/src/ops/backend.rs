//! The store's methods, written once for both backends. [`Backend`] is what a backend
//! provides: one write, one read and one work-queue transaction, each running an operation of
//! [`crate::ops`] on the backend's [`Tx`]. `mailbox_store!` expands the one table of
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
use crate::message::MessageKind;
use crate::types::*;
use crate::wake::{Waiters, Wake};
use crate::work::{NewWorkItem, WorkFence, WorkerInfo};

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

/// An argument as an operation's closure owns it (`Send + 'static`): a borrowed one copied,
/// an owned one moved.
pub(crate) trait Owned {
    type Owned: Send + 'static;
    fn owned(self) -> Self::Owned;
}

impl Owned for &str {
    type Owned = String;
    fn owned(self) -> String {
        self.to_owned()
    }
}

impl Owned for Option<&str> {
    type Owned = Option<String>;
    fn owned(self) -> Option<String> {
        self.map(str::to_owned)
    }
}

impl<T: Clone + Send + 'static> Owned for &[T] {
    type Owned = Vec<T>;
    fn owned(self) -> Vec<T> {
        self.to_vec()
    }
}

/// Borrowed arguments of a type of our own, copied; owned ones, moved.
macro_rules! owned {
    (borrowed: $($ty:ty),*; moved: $($moved:ty),*) => {
        $(impl Owned for &$ty {
            type Owned = $ty;
            fn owned(self) -> $ty {
                self.clone()
            }
        })*
        $(impl Owned for $moved {
            type Owned = $moved;
            fn owned(self) -> $moved {
                self
            }
        })*
    };
}

// The argument types of the table's methods.
owned!(
    borrowed: MessageKind, WorkFence, WorkerInfo;
    moved: i64, usize, std::time::Duration, serde_json::Value, Option<serde_json::Value>,
        Vec<String>, Vec<NewRecord>, Vec<NewWorkItem>, NewRun, RunStatus, AutoGateUpdate,
        RosterEntry, NewMessage, NewResponse, NewTask, TaskUpdate
);

/// `#[async_trait] impl MailboxStore for $store`: the methods given in brackets, then one
/// method for each line of the table that follows: a `read`, a `write` locking the runs in
/// brackets (named before the arguments are copied), or a `work` operation of the given
/// [`WorkAccess`]. A line's body names the arguments as the closure owns them ([`Owned`]).
/// The methods are gathered before the impl is written: `async_trait` must see them all.
macro_rules! store_methods {
    (@impl $store:ty; [$($done:tt)*]) => {
        #[async_trait::async_trait]
        impl $crate::store::MailboxStore for $store {
            $($done)*
        }
    };
    (@impl $store:ty; [$($done:tt)*] read $name:ident($($arg:ident: $ty:ty),*) -> $out:ty
        => |$tx:ident| $body:expr; $($rest:tt)*) => {
        store_methods!(@impl $store; [$($done)*
            async fn $name(&self, $($arg: $ty),*) -> StoreResult<$out> {
                $(let $arg = Owned::owned($arg);)*
                self.read(async move |$tx| $body.await).await
            }
        ] $($rest)*);
    };
    (@impl $store:ty; [$($done:tt)*] write [$($lock:expr),+] $name:ident($($arg:ident: $ty:ty),*)
        -> $out:ty => |$tx:ident, $wakes:tt| $body:expr; $($rest:tt)*) => {
        store_methods!(@impl $store; [$($done)*
            async fn $name(&self, $($arg: $ty),*) -> StoreResult<$out> {
                let locks = [$(<str as ToOwned>::to_owned(&$lock)),+];
                $(let $arg = Owned::owned($arg);)*
                let locks = locks.each_ref().map(String::as_str);
                self.write(&locks, async move |$tx, $wakes| $body.await).await
            }
        ] $($rest)*);
    };
    (@impl $store:ty; [$($done:tt)*] work $access:ident $name:ident($($arg:ident: $ty:ty),*)
        -> $out:ty => |$tx:ident| $body:expr; $($rest:tt)*) => {
        store_methods!(@impl $store; [$($done)*
            async fn $name(&self, $($arg: $ty),*) -> StoreResult<$out> {
                $(let $arg = Owned::owned($arg);)*
                self.work(WorkAccess::$access, async move |$tx| $body.await).await
            }
        ] $($rest)*);
    };
}

/// `impl MailboxStore for $store`: every method both backends run the same way, over the
/// store's [`Backend`] (the few that do more than run one operation, then the table), with
/// the backend's own methods (`$own`: `prune`, `reserve_budget`, `watch_work` and whatever
/// else it overrides).
macro_rules! mailbox_store {
    ($store:ty, { $($own:tt)* }) => {
        const _: () = {
            use $crate::error::StoreResult;
            use $crate::ledger::{LedgerLimits, LedgerReservation, LedgerSpend, RunLedger};
            use $crate::message::MessageKind;
            use $crate::ops::backend::{Backend as _, Owned, WorkAccess, store_methods};
            use $crate::ops::{fork, ledger, mail, runs, tasks, work};
            use $crate::types::*;
            use $crate::work::{
                Heartbeat, NewProcessGroup, NewWorkItem, ProcessGroupRecord, WorkFence, WorkItem,
                WorkerInfo, WorkerRecord,
            };
            use serde_json::Value;
            use std::time::Duration;

            store_methods! { @impl $store; [
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

                async fn next_lease_expiry(
                    &self,
                    queue: Option<&str>,
                ) -> StoreResult<Option<Duration>> {
                    let queue = queue.map(str::to_owned);
                    let millis = self
                        .work(WorkAccess::Read, async move |tx| {
                            work::next_expiry(tx, queue.as_deref()).await
                        })
                        .await?;
                    Ok(millis.map(|ms| Duration::from_millis(ms.max(0) as u64)))
                }

                $($own)*
            ]
                write [run.id] create_run(run: NewRun) -> RunRecord
                    => |tx, _| runs::create_run(tx, &run);
                read run(run_id: &str) -> Option<RunRecord> => |tx| runs::get_run(tx, &run_id);
                read runs() -> Vec<RunRecord> => |tx| runs::list_runs(tx);
                write [run_id]
                    set_run_status(run_id: &str, status: RunStatus, result: Option<Value>)
                    -> RunRecord
                    => |tx, _| runs::set_run_status(tx, &run_id, status, result.as_ref());
                write [run_id] set_launch_options(run_id: &str, launch_options: Value) -> RunRecord
                    => |tx, _| runs::set_launch_options(tx, &run_id, &launch_options);
                write [run_id] open_epoch(run_id: &str) -> i64
                    => |tx, wakes| runs::open_epoch(tx, &run_id, wakes);
                write [run_id] update_auto_gate(run_id: &str, update: AutoGateUpdate) -> AutoGate
                    => |tx, _| runs::update_auto_gate(tx, &run_id, update);
                write [run_id] add_member(run_id: &str, entry: RosterEntry) -> ()
                    => |tx, _| runs::add_member(tx, &run_id, &entry);
                read roster(run_id: &str) -> Vec<RosterEntry> => |tx| runs::roster(tx, &run_id);
                write [message.run_id] send(message: NewMessage) -> Message
                    => |tx, wakes| mail::send(tx, &message, wakes);
                write [run_id] hand_back(run_id: &str, keys: Vec<String>) -> u64
                    => |tx, wakes| mail::hand_back(tx, &run_id, &keys, wakes);
                write [response.run_id] respond(response: NewResponse) -> Message
                    => |tx, wakes| mail::respond(tx, &response, wakes);
                read request(run_id: &str, request_id: &str) -> Option<RequestRecord>
                    => |tx| mail::request(tx, &run_id, &request_id);
                read requests(run_id: &str) -> Vec<RequestRecord>
                    => |tx| mail::list_requests(tx, &run_id);
                read message(key: &str) -> Option<Message> => |tx| mail::message_by_key(tx, &key);
                read messages(run_id: &str, recipient: Option<&str>) -> Vec<Message>
                    => |tx| mail::list_messages(tx, &run_id, recipient.as_deref());
                read newest_messages(run_id: &str, limit: usize) -> NewestMessages
                    => |tx| mail::newest_messages(tx, &run_id, limit);
                read messages_of_kind(run_id: &str, kind: &MessageKind) -> Vec<Message>
                    => |tx| mail::messages_of_kind(tx, &run_id, &kind);
                write [run_id] append_records(run_id: &str, records: Vec<NewRecord>)
                    -> Vec<AgentRecord> => |tx, _| runs::append_records(tx, &run_id, &records);
                read records(run_id: &str, agent: &str, stream: &str, after_seq: i64)
                    -> Vec<AgentRecord>
                    => |tx| runs::records(tx, &run_id, &agent, &stream, after_seq);
                read stream_records(run_id: &str, stream: &str) -> Vec<AgentRecord>
                    => |tx| runs::stream_records(tx, &run_id, &stream);
                write [run_id] next_counter(run_id: &str, name: &str) -> i64
                    => |tx, _| runs::next_counter(tx, &run_id, &name);
                write [run_id] counter_for(run_id: &str, name: &str, key: &str) -> i64
                    => |tx, _| runs::counter_for(tx, &run_id, &name, &key);
                write [run_id] release_reservation(run_id: &str, agent: &str) -> ()
                    => |tx, wakes| ledger::release(tx, &run_id, &agent, wakes);
                read ledger_reservations(run_id: &str) -> Vec<LedgerReservation>
                    => |tx| ledger::reservations(tx, &run_id);
                write [task.run_id] create_task(task: NewTask) -> Task
                    => |tx, wakes| tasks::create_task(tx, &task, wakes);
                read task(run_id: &str, task_id: i64) -> Option<Task>
                    => |tx| tasks::get_task(tx, &run_id, task_id);
                read tasks(run_id: &str) -> Vec<Task> => |tx| tasks::list_tasks(tx, &run_id);
                write [run_id] claim_task(run_id: &str, task_id: i64, agent: &str) -> Task
                    => |tx, _| tasks::claim_task(tx, &run_id, task_id, &agent);
                write [run_id] claim_next_task(run_id: &str, agent: &str) -> Option<Claimed>
                    => |tx, wakes| tasks::claim_next(tx, &run_id, &agent, wakes);
                write [update.run_id] update_task(update: TaskUpdate) -> TaskChange
                    => |tx, wakes| tasks::update_task(tx, &update, wakes);
                write [run_id] release_tasks_of(run_id: &str, agent: &str) -> Vec<i64>
                    => |tx, wakes| tasks::release_tasks_of(tx, &run_id, &agent, wakes);
                write [source, new_id] fork_run(source: &str, new_id: &str, new_slug: &str)
                    -> RunRecord => |tx, _| fork::fork_run(tx, &source, &new_id, &new_slug);
                work Change enqueue_work(items: Vec<NewWorkItem>) -> Vec<WorkItem>
                    => |tx| work::enqueue(tx, &items);
                work Write claim_work(queue: Option<&str>, worker: &str, lease: Duration)
                    -> Option<WorkItem>
                    => |tx| work::claim(tx, queue.as_deref(), &worker, $crate::work::millis(lease));
                work Write heartbeat(worker: &WorkerInfo, leases: &[WorkFence], lease: Duration)
                    -> Heartbeat
                    => |tx| work::heartbeat(tx, &worker, &leases, $crate::work::millis(lease));
                work Change finish_work(fence: &WorkFence, result: Value) -> WorkItem
                    => |tx| work::finish(tx, &fence, &result);
                work Change release_work(fence: &WorkFence) -> WorkItem
                    => |tx| work::release(tx, &fence);
                work Change stop_work(id: &str, result: Value) -> Option<WorkItem>
                    => |tx| work::stop(tx, &id, &result);
                work Change reopen_work(id: &str) -> Option<WorkItem> => |tx| work::reopen(tx, &id);
                work Read work_item(id: &str) -> Option<WorkItem> => |tx| work::item(tx, &id);
                work Read work_items(queue: &str) -> Vec<WorkItem> => |tx| work::items(tx, &queue);
                work Read workers() -> Vec<WorkerRecord> => |tx| work::workers(tx);
                work Read worker_process_groups(worker: &str, host: &str, boot_id: &str)
                    -> Vec<ProcessGroupRecord>
                    => |tx| work::worker_groups(tx, &worker, &host, &boot_id);
                work Write forget_process_group(run_id: &str, agent: &str, tool_use_id: &str) -> ()
                    => |tx| work::forget_group(tx, &run_id, &agent, &tool_use_id);
                work Write retire_worker(name: &str) -> () => |tx| work::retire(tx, &name);
            }
        };
    };
}

pub(crate) use {mailbox_store, store_methods};
