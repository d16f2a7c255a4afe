//! The `MailboxStore` trait: the contract every backend keeps (SQLite now, Postgres later).
//! No backend type appears in it.

use async_trait::async_trait;
use std::time::Duration;

use serde_json::Value;

use crate::error::StoreResult;
use crate::message::MessageKind;
use crate::types::*;
use crate::work::{
    Heartbeat, NewWorkItem, WorkFence, WorkItem, WorkWatch, WorkerInfo, WorkerRecord,
};

/// The durable store behind the mailbox. Every method that changes state returns only once
/// the change is committed (durable per the store's sync mode).
///
/// It is a trait object (`Arc<dyn MailboxStore>`) because the backend is chosen at run time
/// from configuration; `async_trait` boxes each call's future, which costs nothing next to a
/// commit.
#[async_trait]
pub trait MailboxStore: Send + Sync {
    // ---- runs
    async fn create_run(&self, run: NewRun) -> StoreResult<RunRecord>;
    async fn run(&self, run_id: &str) -> StoreResult<Option<RunRecord>>;
    async fn runs(&self) -> StoreResult<Vec<RunRecord>>;
    /// Sets the status, and the result when given.
    async fn set_run_status(
        &self,
        run_id: &str,
        status: RunStatus,
        result: Option<Value>,
    ) -> StoreResult<RunRecord>;
    /// Replaces the run's launch options (a resume that overrides some, such as a new
    /// deadline, keeps them for the next resume).
    async fn set_launch_options(
        &self,
        run_id: &str,
        launch_options: Value,
    ) -> StoreResult<RunRecord>;
    /// Takes ownership of a run for this process: a new epoch, and every lease taken by an
    /// older epoch returns to pending, every budget reservation taken under one is freed.
    async fn open_epoch(&self, run_id: &str) -> StoreResult<i64>;
    async fn update_auto_gate(&self, run_id: &str, update: AutoGateUpdate)
    -> StoreResult<AutoGate>;

    // ---- roster
    async fn add_member(&self, run_id: &str, entry: RosterEntry) -> StoreResult<()>;
    async fn roster(&self, run_id: &str) -> StoreResult<Vec<RosterEntry>>;

    // ---- mail
    /// Durable when it returns. A repeated idempotency key returns the original message.
    async fn send(&self, message: NewMessage) -> StoreResult<Message>;
    /// Leases the next message for `recipient` if there is one, without waiting.
    async fn try_receive(
        &self,
        run_id: &str,
        recipient: &str,
        epoch: i64,
        filter: MessageFilter,
    ) -> StoreResult<Option<Message>>;
    /// Waits (without polling) until a message for `recipient` can be leased.
    async fn receive(
        &self,
        run_id: &str,
        recipient: &str,
        epoch: i64,
        filter: MessageFilter,
    ) -> StoreResult<Message> {
        crate::wake::until_found(&self.woken(run_id, recipient), || {
            self.try_receive(run_id, recipient, epoch, filter.clone())
        })
        .await
    }
    /// Leases up to `max` messages for `recipient` in one operation, in delivery order,
    /// without waiting (none: an empty batch).
    async fn try_receive_batch(
        &self,
        run_id: &str,
        recipient: &str,
        epoch: i64,
        max: usize,
    ) -> StoreResult<Vec<Message>>;
    /// Waits (without polling) until mail for `recipient` is pending, then leases up to `max`
    /// messages in one operation, in delivery order: what an agent takes at a turn boundary.
    async fn receive_batch(
        &self,
        run_id: &str,
        recipient: &str,
        epoch: i64,
        max: usize,
    ) -> StoreResult<Vec<Message>> {
        crate::wake::until_found(&self.woken(run_id, recipient), || async move {
            let batch = self
                .try_receive_batch(run_id, recipient, epoch, max)
                .await?;
            Ok((!batch.is_empty()).then_some(batch))
        })
        .await
    }
    async fn ack(&self, run_id: &str, keys: Vec<String>) -> StoreResult<()>;
    /// Returns mail this process leased and could not use (the turn that leased it was
    /// dropped by an interrupt before it acknowledged it) to pending, waking its recipients,
    /// as a new epoch would; mail acknowledged already, or pending, is left as it is. How many
    /// came back.
    async fn hand_back(&self, run_id: &str, keys: Vec<String>) -> StoreResult<u64>;
    /// Answers a request; only its responder may, and only the first answer is accepted.
    async fn respond(&self, response: NewResponse) -> StoreResult<Message>;
    async fn request(&self, run_id: &str, request_id: &str) -> StoreResult<Option<RequestRecord>>;
    async fn requests(&self, run_id: &str) -> StoreResult<Vec<RequestRecord>>;
    async fn message(&self, key: &str) -> StoreResult<Option<Message>>;
    async fn messages(&self, run_id: &str, recipient: Option<&str>) -> StoreResult<Vec<Message>>;
    /// The newest `limit` mails of a run, in commit order, and how many came before them;
    /// reads only the rows it returns.
    async fn newest_messages(&self, run_id: &str, limit: usize) -> StoreResult<NewestMessages>;
    /// A run's mail of one kind, in commit order.
    async fn messages_of_kind(&self, run_id: &str, kind: &MessageKind)
    -> StoreResult<Vec<Message>>;
    /// Records what an agent saw, acks the mail it consumed, sends and answers, in one
    /// transaction.
    async fn commit_turn(&self, turn: CommitTurn) -> StoreResult<CommitTurnOutcome>;
    /// Wakes in-process receivers of `recipient` (used when another process committed mail
    /// and poked this one through the run's socket).
    fn wake(&self, run_id: &str, recipient: &str);
    /// The in-process signal of `recipient` of `run_id`: notified after every commit (or
    /// announcement from another process) that wakes it. A waiter enables its `notified()`
    /// before it looks, so a wake between the look and the sleep is not lost.
    fn woken(&self, run_id: &str, recipient: &str) -> std::sync::Arc<tokio::sync::Notify>;

    // ---- live runs across machines (a backend several machines share)
    /// Holds the run's live lock on the server and wakes this process's receivers when
    /// another process announces committed mail for the run ([`Self::announce`]); released
    /// when the hold is dropped, and by the server if this process dies. `None`: the backend
    /// has no such lock, and the live run's lock file and socket ([`crate::live`]) serve.
    async fn hold_live(&self, _run_id: &str) -> StoreResult<Option<crate::live::LiveHold>> {
        Ok(None)
    }
    /// Wakes this process's receivers of `run_id` when another process's write woke them
    /// (a store opened `announcing`), without the live lock: an agent of the run in a
    /// process other than the lead's (a teammate on a worker). `None`: not this backend's.
    async fn listen_run(&self, _run_id: &str) -> StoreResult<Option<crate::live::LiveHold>> {
        Ok(None)
    }
    /// Whether some process holds the run's server-side live lock; `None`: not this backend's.
    async fn is_held_live(&self, _run_id: &str) -> StoreResult<Option<bool>> {
        Ok(None)
    }
    /// Waits (without polling) until no process holds the run's server-side live lock: a
    /// worker taking over a line whose old holder may still be alive elsewhere. Returns at
    /// once on a backend without such a lock.
    async fn wait_until_not_live(&self, _run_id: &str) -> StoreResult<()> {
        Ok(())
    }
    /// After a commit: tells the process that holds the run live to wake `recipient`.
    /// `Some(false)`: no process holds it; `None`: the backend cannot reach other processes.
    async fn announce(&self, _run_id: &str, _recipient: &str) -> StoreResult<Option<bool>> {
        Ok(None)
    }

    /// Calls `on_change` after every commit by any process to this store, for as long as the
    /// returned hold lives (PostgreSQL: a LISTEN on the schema's change channel, on a
    /// dedicated connection that is re-opened when lost). `None`: the backend has no such
    /// feed (SQLite: see [`crate::CommitHook`] and [`crate::DataVersion`]).
    async fn watch_changes(
        &self,
        _on_change: crate::live::OnChange,
    ) -> StoreResult<Option<crate::live::LiveHold>> {
        Ok(None)
    }

    // ---- agents' records
    async fn append_records(
        &self,
        run_id: &str,
        records: Vec<NewRecord>,
    ) -> StoreResult<Vec<AgentRecord>>;
    /// Appends `records` (a `Bash` call's `tool_started`) and, on a store fenced by a work
    /// item, records `group` in the same transaction under the item, its token and its
    /// current holder (the worker), for [`MailboxStore::worker_process_groups`]. An unfenced
    /// store (a run of no worker) appends the records only.
    async fn record_tool_start(
        &self,
        run_id: &str,
        records: Vec<NewRecord>,
        group: crate::work::NewProcessGroup,
    ) -> StoreResult<Vec<AgentRecord>>;
    async fn records(
        &self,
        run_id: &str,
        agent: &str,
        stream: &str,
        after_seq: i64,
    ) -> StoreResult<Vec<AgentRecord>>;
    /// Every agent's records of `stream` in one read, by agent, each agent's in order.
    async fn stream_records(&self, run_id: &str, stream: &str) -> StoreResult<Vec<AgentRecord>>;
    /// A per-run counter (request numbers and the like): 1, 2, 3, …
    async fn next_counter(&self, run_id: &str, name: &str) -> StoreResult<i64>;
    /// The counter's next value once per `key`: a repeat of the key (the same tool call run
    /// again after a crash) returns the number it got first, so the request id it builds
    /// does not shift.
    async fn counter_for(&self, run_id: &str, name: &str, key: &str) -> StoreResult<i64>;

    // ---- the run's budget ledger (see [`crate::ledger`])
    /// Sets the run's run-wide limits; a run without a ledger gets one holding `seed` (what
    /// its records say it spent: a run stored before ledgers existed), an existing one keeps
    /// its totals. The ledger as it now is.
    async fn open_ledger(
        &self,
        run_id: &str,
        limits: crate::ledger::LedgerLimits,
        seed: crate::ledger::LedgerSpend,
    ) -> StoreResult<crate::ledger::RunLedger>;
    /// The run's ledger (`None`: the run has none yet).
    async fn run_ledger(&self, run_id: &str) -> StoreResult<Option<crate::ledger::RunLedger>>;
    /// Before a model request: whether `agent` (working under `epoch`) may send a request
    /// estimated at `estimate`, decided by [`crate::ledger::decide`] in one transaction. A
    /// grant holds the estimate as the agent's reservation until the commit that charges the
    /// response settles it ([`CommitTurn::charge`]), [`Self::release_reservation`] frees it,
    /// or a new epoch ([`Self::open_epoch`]) frees it; the agent asked to wait looks again
    /// when [`crate::ledger::LEDGER_WAKE`] is woken. On a fenced store, refused once the
    /// lease is lost.
    async fn reserve_budget(
        &self,
        run_id: &str,
        agent: &str,
        epoch: i64,
        estimate: crate::ledger::LedgerSpend,
    ) -> StoreResult<crate::ledger::Reserved>;
    /// Frees `agent`'s reservation (its request failed), waking the agents waiting for budget.
    async fn release_reservation(&self, run_id: &str, agent: &str) -> StoreResult<()>;
    /// The run's reservations in flight (one per agent at most), by agent.
    async fn ledger_reservations(
        &self,
        run_id: &str,
    ) -> StoreResult<Vec<crate::ledger::LedgerReservation>>;

    // ---- the task board
    /// Creates a task; a repeated idempotency key returns the original task.
    async fn create_task(&self, task: NewTask) -> StoreResult<Task>;
    async fn task(&self, run_id: &str, task_id: i64) -> StoreResult<Option<Task>>;
    async fn tasks(&self, run_id: &str) -> StoreResult<Vec<Task>>;
    async fn claim_task(&self, run_id: &str, task_id: i64, agent: &str) -> StoreResult<Task>;
    /// Claims the lowest-numbered claimable task for `agent` and sends `agent` its
    /// `task_assignment`, in one transaction.
    async fn claim_next_task(&self, run_id: &str, agent: &str) -> StoreResult<Option<Claimed>>;
    /// Changes a task; a new owner is sent a `task_assignment` in the same transaction. A
    /// repeated idempotency key changes nothing and returns the original change.
    async fn update_task(&self, update: TaskUpdate) -> StoreResult<TaskChange>;
    /// Returns a stopped agent's unfinished tasks to `pending`; gives back their ids.
    async fn release_tasks_of(&self, run_id: &str, agent: &str) -> StoreResult<Vec<i64>>;

    // ---- retention
    /// Deletes settled history (acknowledged messages created before `cutoff`) of finished
    /// runs only. Requests and responses are never deleted, nor anything of a run that is
    /// not finished; those runs are reported as skipped. `project`: only that project's runs
    /// (and runs from before runs carried one); `None`: every run.
    async fn prune(&self, cutoff: UnixMillis, project: Option<&str>) -> StoreResult<PruneReport>;

    // ---- forks
    /// Copies run `source` whole under `new_id` and `new_slug`, in one transaction: roster,
    /// messages (new keys, same order; leases returned to pending), requests and responses,
    /// agents' records, tasks and counters. Mentions of the old slug in records and mail are
    /// renamed to the new one (plan file names carry it). The copy is `interrupted` (or keeps
    /// a finished status) with epoch 0, so `muster resume` continues it independently.
    async fn fork_run(&self, source: &str, new_id: &str, new_slug: &str) -> StoreResult<RunRecord>;

    // ---- work items for workers (see [`crate::work`])
    /// Adds items to their queues, pending; an id already stored is left as it is. Returns
    /// every item as stored.
    async fn enqueue_work(&self, items: Vec<NewWorkItem>) -> StoreResult<Vec<WorkItem>>;
    /// Leases the oldest item (of `queue`, or of any queue) that is pending or whose lease
    /// deadline passed, to `worker` for `lease`, with the next fencing token; without waiting.
    async fn claim_work(
        &self,
        queue: Option<&str>,
        worker: &str,
        lease: Duration,
    ) -> StoreResult<Option<WorkItem>>;
    /// Records that `worker` is alive and pushes back the deadline of each lease it still
    /// holds; the rest come back as lost.
    async fn heartbeat(
        &self,
        worker: &WorkerInfo,
        leases: &[WorkFence],
        lease: Duration,
    ) -> StoreResult<Heartbeat>;
    /// Marks the item done with its result; refused (`Fenced`) unless `fence` holds its lease.
    async fn finish_work(&self, fence: &WorkFence, result: Value) -> StoreResult<WorkItem>;
    /// Hands the item back (pending) for another claim; refused unless `fence` holds it.
    async fn release_work(&self, fence: &WorkFence) -> StoreResult<WorkItem>;
    /// Stops the item whoever holds its lease (the decision of the item's owner, such as the
    /// lead of a teammate's run ending): pending or leased becomes done with `result`; the
    /// holder's writes are refused from this commit on and its worker, at its next heartbeat,
    /// finds the lease lost and stops the item's process. An item done already is left as it
    /// is. `None`: no such item.
    async fn stop_work(&self, id: &str, result: Value) -> StoreResult<Option<WorkItem>>;
    /// Puts a done item back in its queue, pending, its result cleared (a stopped teammate
    /// whose run is resumed). An item not done is left as it is. `None`: no such item.
    async fn reopen_work(&self, id: &str) -> StoreResult<Option<WorkItem>>;
    async fn work_item(&self, id: &str) -> StoreResult<Option<WorkItem>>;
    async fn work_items(&self, queue: &str) -> StoreResult<Vec<WorkItem>>;
    /// How long until the earliest lease deadline (of `queue`, or of any), zero when one has
    /// passed: what a waiting worker's deadline timer is set to.
    async fn next_lease_expiry(&self, queue: Option<&str>) -> StoreResult<Option<Duration>>;
    /// Wakes on every committed change of the work queues (items enqueued, handed back,
    /// finished), from this process and, on a shared server, from any process.
    async fn watch_work(&self) -> StoreResult<WorkWatch>;
    async fn workers(&self) -> StoreResult<Vec<WorkerRecord>>;
    /// The process groups recorded by lines of `worker` on `host` during boot `boot_id`:
    /// what a restarted worker checks for orphans of its earlier incarnations.
    async fn worker_process_groups(
        &self,
        worker: &str,
        host: &str,
        boot_id: &str,
    ) -> StoreResult<Vec<crate::work::ProcessGroupRecord>>;
    /// Forgets a recorded process group (its call finished, or it was killed or is gone).
    async fn forget_process_group(
        &self,
        run_id: &str,
        agent: &str,
        tool_use_id: &str,
    ) -> StoreResult<()>;
    /// Marks a worker stopped (it stopped cleanly).
    async fn retire_worker(&self, name: &str) -> StoreResult<()>;
}
