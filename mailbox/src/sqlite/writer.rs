//! The one writer thread that owns the SQLite connection. Operations queue up while a commit
//! is in flight and are grouped into the next transaction (group commit); each runs in its own
//! SAVEPOINT, so a refused operation fails only its caller.
//!
//! At `synchronous=full` the WAL's fsync is pipelined (see [`StoreOptions::pipelined_sync`]):
//! SQLite commits without syncing, and the batch waits for an fsync of the WAL begun after its
//! COMMIT before any of its callers hears of it. While work is waiting (or a sync is under
//! way), that wait happens on the syncer thread and the writer runs the next batch meanwhile;
//! a lone caller's batch is synced on the writer thread itself, with no hand-over.
//!
//! Rows a batch commits are visible to the next batch (and to other connections) before they
//! are on disk, so the rule is about answers, not visibility: a batch is answered only after
//! every batch before it (in commit order, one FIFO) and after a sync begun after its own
//! COMMIT — unless it wrote nothing and saw no other connection's commit since the batch
//! before it, whose answer it then follows. The WAL is appended in commit order and one fsync
//! covers all of it, so whatever a caller is told — its own write, or a row it read — is on
//! disk: a power loss can only lose writes no caller has heard of, nor acted on.
//!
//! [`StoreOptions::pipelined_sync`]: crate::options::StoreOptions::pipelined_sync

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use std::sync::mpsc;

use tokio::sync::{oneshot, watch};

use crate::error::{StoreError, StoreResult};
use crate::options::CommitHook;
use crate::sqlite::open::database_path;
use crate::sqlite::wal_room::{self, ROOM_AFTER_WRITES};
use crate::types::{CommitTime, StoreStats};
use crate::wake::{Waiters, Wake};

/// Largest number of operations grouped into one transaction.
const MAX_BATCH: usize = 512;

/// The longest the writer waits for the callers its last commit released before it begins the
/// next transaction without them (see [`WriterThread::straggler`]).
const MAX_GATHER: Duration = Duration::from_micros(250);

/// Why a batch's COMMIT (or BEGIN) failed; cloned into every caller's error.
#[derive(Debug, Clone)]
pub(crate) struct BatchFailure {
    busy: bool,
    detail: String,
}

impl BatchFailure {
    fn into_error(self, path: &Path, busy_timeout_ms: u64) -> StoreError {
        if self.busy {
            StoreError::Locked {
                path: path.to_path_buf(),
                waited_ms: busy_timeout_ms,
            }
        } else {
            StoreError::CommitFailed {
                path: path.to_path_buf(),
                detail: self.detail,
            }
        }
    }
}

/// What an executed operation leaves to do once its transaction's fate is known.
pub(crate) type Finish = Box<dyn FnOnce(Option<&BatchFailure>) + Send>;

/// A queued operation: run it on the connection, report whether it succeeded, and hand back
/// what delivers its result after COMMIT.
pub(crate) trait Operation: Send {
    fn execute(self: Box<Self>, conn: &Connection, wakes: &mut Vec<Wake>) -> (bool, Finish);
    /// Reports a failure that stopped the operation before it ran.
    fn refuse(self: Box<Self>, failure: &BatchFailure);
    /// When the caller queued it.
    fn queued_at(&self) -> Instant;
}

struct TypedOperation<T, F> {
    body: F,
    queued_at: Instant,
    reply: oneshot::Sender<StoreResult<T>>,
    path: Arc<PathBuf>,
    busy_timeout_ms: u64,
}

impl<T, F> Operation for TypedOperation<T, F>
where
    T: Send + 'static,
    F: FnOnce(&Connection, &mut Vec<Wake>) -> StoreResult<T> + Send,
{
    fn execute(self: Box<Self>, conn: &Connection, wakes: &mut Vec<Wake>) -> (bool, Finish) {
        let this = *self;
        let result = (this.body)(conn, wakes);
        let ok = result.is_ok();
        let reply = this.reply;
        let path = this.path;
        let busy_timeout_ms = this.busy_timeout_ms;
        let finish: Finish = Box::new(move |failure| {
            let outcome = match (failure, result) {
                (Some(failure), Ok(_)) => Err(failure.clone().into_error(&path, busy_timeout_ms)),
                (_, result) => result,
            };
            // The caller may have given up waiting; its result is durable either way.
            let _ = reply.send(outcome);
        });
        (ok, finish)
    }

    fn refuse(self: Box<Self>, failure: &BatchFailure) {
        let error = failure.clone().into_error(&self.path, self.busy_timeout_ms);
        let _ = self.reply.send(Err(error));
    }

    fn queued_at(&self) -> Instant {
        self.queued_at
    }
}

pub(crate) enum Job {
    Operation(Box<dyn Operation>),
    /// Moves the WAL's pages into the database file and restarts the WAL from its beginning
    /// (the file keeps its size, as in steady operation), between transactions (a checkpoint
    /// cannot run inside one).
    Checkpoint(oneshot::Sender<Result<(), BatchFailure>>),
    /// Test hook: the writer stops taking jobs until the sender side is dropped.
    Hold {
        entered: oneshot::Sender<()>,
        release: std::sync::mpsc::Receiver<()>,
    },
}

/// The handle callers use to queue operations on the writer thread.
#[derive(Clone)]
pub(crate) struct Writer {
    jobs: mpsc::Sender<Job>,
    path: Arc<PathBuf>,
    busy_timeout_ms: u64,
    queued: watch::Sender<u64>,
    stats: watch::Sender<StoreStats>,
    /// Test hook: syncs of the WAL wait while it is held.
    sync_gate: Arc<SyncGate>,
    /// Batches committed and not yet answered, as it changes.
    unanswered: watch::Sender<u64>,
}

impl Writer {
    /// Starts the writer thread on an open connection; with `pipelined`, a syncer thread too.
    pub(crate) fn start(
        conn: Connection,
        path: PathBuf,
        busy_timeout_ms: u64,
        waiters: Arc<Waiters>,
        after_commit: Option<CommitHook>,
        gather_released: bool,
        pipelined: bool,
    ) -> StoreResult<Writer> {
        let (jobs, receiver) = mpsc::channel();
        let (queued, _) = watch::channel(0);
        let (stats, _) = watch::channel(StoreStats::default());
        let (unanswered, _) = watch::channel(0);
        let path = Arc::new(path);
        let writer = Writer {
            jobs,
            path: path.clone(),
            busy_timeout_ms,
            queued,
            stats,
            sync_gate: Arc::default(),
            unanswered,
        };
        let delivery = Arc::new(Delivery {
            waiters,
            after_commit,
            stats: writer.stats.clone(),
            unanswered: writer.unanswered.clone(),
        });
        let spawn_error = |source| StoreError::Open {
            path: path.to_path_buf(),
            source,
        };
        let pipeline = if pipelined {
            let wal = WalFile::of(&conn, &path, writer.sync_gate.clone());
            let (to_syncer, committed) = mpsc::channel();
            let syncer = Syncer {
                wal: wal.clone(),
                committed,
                delivery: delivery.clone(),
            };
            std::thread::Builder::new()
                .name("muster-store-syncer".into())
                .spawn(move || syncer.run())
                .map_err(spawn_error)?;
            Some(Pipeline {
                wal,
                to_syncer,
                data_version: None,
            })
        } else {
            None
        };
        let thread_state = WriterThread {
            room: Some(WalRoom {
                wal: wal_path(&conn, &path),
                writes: 0,
            }),
            conn,
            receiver,
            delivery,
            queued: writer.queued.clone(),
            gather_released,
            last_batch: 0,
            last_commit: Duration::ZERO,
            pipeline,
        };
        std::thread::Builder::new()
            .name("muster-store-writer".into())
            .spawn(move || thread_state.run())
            .map_err(spawn_error)?;
        Ok(writer)
    }

    /// Queues `body` and waits for its committed result.
    pub(crate) async fn submit<T, F>(&self, body: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &mut Vec<Wake>) -> StoreResult<T> + Send + 'static,
    {
        let (reply, result) = oneshot::channel();
        let operation = TypedOperation {
            body,
            queued_at: Instant::now(),
            reply,
            path: self.path.clone(),
            busy_timeout_ms: self.busy_timeout_ms,
        };
        self.enqueue(Job::Operation(Box::new(operation)))?;
        result.await.map_err(|_| StoreError::WriterGone)?
    }

    fn enqueue(&self, job: Job) -> StoreResult<()> {
        self.queued.send_modify(|n| *n += 1);
        self.jobs.send(job).map_err(|_| StoreError::WriterGone)
    }

    /// Test hook: stops the writer between transactions until the returned sender is dropped.
    pub(crate) async fn hold(&self) -> StoreResult<std::sync::mpsc::Sender<()>> {
        let (entered_tx, entered) = oneshot::channel();
        let (release_tx, release) = std::sync::mpsc::channel();
        self.enqueue(Job::Hold {
            entered: entered_tx,
            release,
        })?;
        entered.await.map_err(|_| StoreError::WriterGone)?;
        Ok(release_tx)
    }

    /// Test hook: the store's syncs of the WAL wait until the returned guard is dropped.
    pub(crate) fn hold_syncs(&self) -> SyncHold {
        self.sync_gate.set(true);
        SyncHold(self.sync_gate.clone())
    }

    /// Checkpoints the WAL into the database file; the next commit starts the WAL over.
    pub(crate) async fn checkpoint(&self) -> StoreResult<()> {
        let (done, result) = oneshot::channel();
        self.enqueue(Job::Checkpoint(done))?;
        match result.await.map_err(|_| StoreError::WriterGone)? {
            Ok(()) => Ok(()),
            Err(failure) => Err(failure.into_error(&self.path, self.busy_timeout_ms)),
        }
    }

    /// Jobs queued and not yet taken by the writer thread.
    pub(crate) fn queued(&self) -> watch::Receiver<u64> {
        self.queued.subscribe()
    }

    /// Batches committed whose callers have not been answered yet (waiting for their sync).
    pub(crate) fn unanswered(&self) -> watch::Receiver<u64> {
        self.unanswered.subscribe()
    }

    /// Commits and operations so far, updated after every transaction.
    pub(crate) fn stats(&self) -> watch::Receiver<StoreStats> {
        self.stats.subscribe()
    }

    /// The counters' sender, for the store's reader to count its looks in.
    pub(crate) fn stats_sender(&self) -> watch::Sender<StoreStats> {
        self.stats.clone()
    }
}

/// Releases [`Writer::hold_syncs`] when dropped.
pub struct SyncHold(Arc<SyncGate>);

impl Drop for SyncHold {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

/// Whether syncs are held (a test hook); a sync waits while they are.
#[derive(Default)]
struct SyncGate {
    held: Mutex<bool>,
    changed: Condvar,
}

impl SyncGate {
    fn set(&self, held: bool) {
        *self.held.lock().unwrap_or_else(|p| p.into_inner()) = held;
        self.changed.notify_all();
    }

    fn pass(&self) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        while *held {
            held = self.changed.wait(held).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// The WAL file, synced by the store (pipelined sync). Opened on first use: SQLite creates it
/// with the first transaction, and keeps it (same file) while its connection is open.
#[derive(Clone)]
struct WalFile {
    path: Arc<PathBuf>,
    /// Why a sync failed, once one has: the store answers nothing more (what is on disk is
    /// unknown), as PostgreSQL stops at a failed fsync.
    failed: Arc<OnceLock<BatchFailure>>,
    gate: Arc<SyncGate>,
}

/// The WAL beside the database (see [`database_path`]).
fn wal_path(conn: &Connection, path: &Path) -> PathBuf {
    let mut wal = database_path(conn, path).into_os_string();
    wal.push("-wal");
    PathBuf::from(wal)
}

impl WalFile {
    fn of(conn: &Connection, path: &Path, gate: Arc<SyncGate>) -> WalFile {
        WalFile {
            path: Arc::new(wal_path(conn, path)),
            failed: Arc::default(),
            gate,
        }
    }

    /// Syncs the WAL's data (`file` keeps the opened file between calls). A failure is kept:
    /// every later sync fails with it.
    fn sync(&self, file: &mut Option<std::fs::File>) -> Result<(), BatchFailure> {
        self.gate.pass();
        if let Some(failure) = self.failed.get() {
            return Err(failure.clone());
        }
        let synced = match file {
            Some(file) => file.sync_data(),
            None => std::fs::File::open(&*self.path).and_then(|opened| {
                let synced = opened.sync_data();
                *file = Some(opened);
                synced
            }),
        };
        synced.map_err(|error| {
            let failure = BatchFailure {
                busy: false,
                detail: format!(
                    "the write-ahead log {} could not be synced ({error}); the store answers \
                     nothing more until it is opened again",
                    self.path.display()
                ),
            };
            self.failed.get_or_init(|| failure).clone()
        })
    }
}

/// A committed batch on its way to its callers.
struct Committed {
    finishes: Vec<Finish>,
    wakes: Vec<Wake>,
    failure: Option<BatchFailure>,
    /// Whether a sync begun after its COMMIT must come first.
    needs_sync: bool,
    phases: CommitTime,
    committed: Instant,
    operations: u64,
}

/// What answers a committed batch, on whichever thread its sync ran.
struct Delivery {
    waiters: Arc<Waiters>,
    after_commit: Option<CommitHook>,
    stats: watch::Sender<StoreStats>,
    unanswered: watch::Sender<u64>,
}

impl Delivery {
    /// Answers `batch`, durable (or failed with `synced`'s failure).
    fn deliver(&self, batch: Committed, synced: Result<bool, BatchFailure>) {
        let Committed {
            finishes,
            wakes,
            failure,
            mut phases,
            committed,
            operations,
            ..
        } = batch;
        let durable = Instant::now();
        phases.sync_us = micros(durable - committed);
        let (failure, syncs) = match (failure, synced) {
            (Some(failure), _) | (None, Err(failure)) => (Some(failure), 0),
            (None, Ok(synced)) => (None, u64::from(synced)),
        };
        // Before the callers hear of it: a process that exits as soon as its write returns
        // has already told whoever watches.
        if failure.is_none()
            && let Some(hook) = &self.after_commit
        {
            hook.call();
        }
        // Counted before the callers hear of it, so a caller whose write returned reads it.
        self.stats.send_modify(|stats| {
            stats.operations += operations;
            stats.commits += u64::from(failure.is_none());
            stats.syncs += syncs;
            stats.time.add(&phases);
        });
        for finish in finishes {
            finish(failure.as_ref());
        }
        if failure.is_none() {
            self.waiters.wake_all(&wakes);
        }
        self.unanswered.send_modify(|n| *n = n.saturating_sub(1));
        let delivered = micros(durable.elapsed());
        // Not a change a watcher waits for: no notification.
        self.stats.send_if_modified(|stats| {
            stats.time.deliver_us = stats.time.deliver_us.saturating_add(delivered);
            false
        });
    }
}

/// The syncer thread: syncs the WAL behind the writer, once for every batch committed by the
/// time it begins, and answers them in commit order.
struct Syncer {
    wal: WalFile,
    committed: mpsc::Receiver<Committed>,
    delivery: Arc<Delivery>,
}

impl Syncer {
    fn run(self) {
        let mut file = None;
        while let Ok(first) = self.committed.recv() {
            let mut group = vec![first];
            group.extend(self.committed.try_iter());
            let synced = if group.iter().any(|batch| batch.needs_sync) {
                self.wal.sync(&mut file).map(|()| true)
            } else {
                Ok(false)
            };
            for (index, batch) in group.into_iter().enumerate() {
                // One sync counted, however many batches it covers.
                let synced = synced.clone().map(|synced| synced && index == 0);
                self.delivery.deliver(batch, synced);
            }
        }
    }
}

/// The writer's side of the pipelined sync.
struct Pipeline {
    wal: WalFile,
    to_syncer: mpsc::Sender<Committed>,
    /// `PRAGMA data_version` as the last batch that wrote nothing read it: another
    /// connection's commit since changes it.
    data_version: Option<i64>,
}

struct WriterThread {
    conn: Connection,
    receiver: mpsc::Receiver<Job>,
    delivery: Arc<Delivery>,
    queued: watch::Sender<u64>,
    gather_released: bool,
    /// Operations in the last transaction: the callers it released, who (in a closed loop)
    /// are about to queue their next operation.
    last_batch: usize,
    /// How long the last COMMIT took (with the pipelined sync, and its sync when the writer
    /// synced it).
    last_commit: Duration,
    pipeline: Option<Pipeline>,
    /// The WAL's room, until it is made (see [`wal_room`]).
    room: Option<WalRoom>,
}

/// Writing transactions counted until the WAL gets its room.
struct WalRoom {
    wal: PathBuf,
    writes: u64,
}

impl WriterThread {
    fn run(mut self) {
        // The writer's own handle on the WAL, for the batches it syncs itself.
        let mut wal_file = None;
        while let Ok(first) = self.receiver.recv() {
            let started = Instant::now();
            let mut batch = Vec::new();
            let mut next = Some(first);
            while let Some(job) = next.take() {
                self.queued.send_modify(|n| *n = n.saturating_sub(1));
                match job {
                    Job::Hold { entered, release } => {
                        // Commit what came before the hold, then wait.
                        self.commit_batch(std::mem::take(&mut batch), &mut wal_file);
                        let _ = entered.send(());
                        let _ = release.recv();
                    }
                    Job::Checkpoint(done) => {
                        self.commit_batch(std::mem::take(&mut batch), &mut wal_file);
                        let result = self
                            .conn
                            .query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(()))
                            .map_err(|error| batch_failure(&error));
                        let _ = done.send(result);
                    }
                    Job::Operation(operation) => batch.push(operation),
                }
                if batch.len() < MAX_BATCH {
                    next = match self.receiver.try_recv() {
                        Ok(job) => Some(job),
                        Err(_) => self.straggler(batch.len(), started),
                    };
                }
            }
            self.commit_batch(batch, &mut wal_file);
        }
    }

    /// Group commit's blind spot: the callers the last COMMIT released queue their next
    /// operation a few microseconds after the writer found the queue empty, and would each
    /// wait a whole COMMIT (an fsync) more. While fewer operations are gathered than the last
    /// transaction held, wait for them — at most half the last COMMIT's time (bounded by
    /// [`MAX_GATHER`]), so a lone caller (a last batch of one) never waits and a waiting batch
    /// pays less than the commit it saves. Kept with the pipelined sync: not waiting splits
    /// closed-loop callers into groups whose statements could overlap another group's fsync,
    /// but on two shared cores that measured slower (8 senders: 11.5k against 12.5k msgs/s
    /// gathered), the CPU being as busy as the disk.
    fn straggler(&self, gathered: usize, started: Instant) -> Option<Job> {
        if !self.gather_released {
            return None;
        }
        let window = gather_window(gathered, self.last_batch, self.last_commit)?;
        let left = (started + window).checked_duration_since(Instant::now())?;
        self.receiver.recv_timeout(left).ok()
    }

    fn commit_batch(
        &mut self,
        batch: Vec<Box<dyn Operation>>,
        wal_file: &mut Option<std::fs::File>,
    ) {
        if batch.is_empty() {
            return;
        }
        if let Some(failure) = self.pipeline.as_ref().and_then(|p| p.wal.failed.get()) {
            for operation in batch {
                operation.refuse(failure);
            }
            return;
        }
        let began = Instant::now();
        let queued: Duration = batch
            .iter()
            .map(|operation| began.saturating_duration_since(operation.queued_at()))
            .sum();
        let mut finishes = Vec::with_capacity(batch.len());
        let mut wakes = Vec::new();
        if let Err(error) = self.control("BEGIN IMMEDIATE") {
            let failure = batch_failure(&error);
            for operation in batch {
                operation.refuse(&failure);
            }
            return;
        }
        let begun = Instant::now();
        let changes_before = self.conn.total_changes();
        for operation in batch {
            finishes.push(self.run_in_savepoint(operation, &mut wakes));
        }
        let wrote = self.conn.total_changes() != changes_before;
        let needs_sync = self.needs_sync(wrote);
        let executed = Instant::now();
        let failure = self.control("COMMIT").err().map(|error| {
            let _ = self.conn.execute_batch("ROLLBACK");
            batch_failure(&error)
        });
        let committed = Instant::now();
        let count_write = wrote && failure.is_none();
        self.last_batch = finishes.len();
        self.last_commit = committed - executed;
        let batch = Committed {
            operations: finishes.len() as u64,
            finishes,
            wakes,
            needs_sync: needs_sync && failure.is_none(),
            failure,
            phases: CommitTime {
                queued_us: micros(queued),
                begin_us: micros(begun - began),
                statements_us: micros(executed - begun),
                commit_us: micros(committed - executed),
                sync_us: 0,
                deliver_us: 0,
            },
            committed,
        };
        self.answer(batch, wal_file);
        if count_write {
            self.count_write();
        }
    }

    /// Answers a committed batch: here, or behind earlier ones by the syncer.
    fn answer(&mut self, batch: Committed, wal_file: &mut Option<std::fs::File>) {
        self.delivery.unanswered.send_modify(|n| *n += 1);
        let Some(pipeline) = &self.pipeline else {
            self.delivery.deliver(batch, Ok(false));
            return;
        };
        // Answered here when nothing is waiting for the writer and no earlier batch is still
        // to be answered (a lone caller: no hand-over); otherwise behind those, by the syncer,
        // while this thread runs the next batch.
        let earlier = *self.delivery.unanswered.borrow() > 1;
        if earlier || *self.queued.borrow() > 0 {
            if let Err(mpsc::SendError(batch)) = pipeline.to_syncer.send(batch) {
                // The syncer is gone only if its thread panicked: answer from here.
                let synced = sync_if(&pipeline.wal, wal_file, batch.needs_sync);
                self.delivery.deliver(batch, synced);
            }
        } else {
            let synced = sync_if(&pipeline.wal, wal_file, batch.needs_sync);
            // What a straggler would have paid: the gathering window is half of it, as with
            // SQLite's own sync inside COMMIT (see [`Self::straggler`]).
            if synced.as_ref().is_ok_and(|synced| *synced) {
                self.last_commit += batch.committed.elapsed();
            }
            self.delivery.deliver(batch, synced);
        }
    }

    /// Whether the batch just executed must wait for a sync of its own: it wrote, or it may
    /// have read another connection's commit that no sync of ours has covered.
    fn needs_sync(&mut self, wrote: bool) -> bool {
        let Some(pipeline) = &mut self.pipeline else {
            return false;
        };
        if wrote {
            return true;
        }
        let version = self
            .conn
            .prepare_cached("PRAGMA data_version")
            .and_then(|mut statement| statement.query_row([], |row| row.get::<_, i64>(0)))
            .ok();
        let seen = std::mem::replace(&mut pipeline.data_version, version);
        version.is_none() || version != seen
    }

    fn run_in_savepoint(&mut self, operation: Box<dyn Operation>, wakes: &mut Vec<Wake>) -> Finish {
        if let Err(error) = self.control("SAVEPOINT operation") {
            let failure = batch_failure(&error);
            operation.refuse(&failure);
            return Box::new(|_| {});
        }
        let mut own_wakes = Vec::new();
        let (ok, finish) = operation.execute(&self.conn, &mut own_wakes);
        if ok {
            wakes.append(&mut own_wakes);
        } else {
            let _ = self.control("ROLLBACK TO operation");
        }
        let _ = self.control("RELEASE operation");
        finish
    }

    /// Runs a transaction-control statement, kept prepared: four of them run for every
    /// operation, and parsing them anew each time showed in the writer's profile.
    fn control(&self, sql: &str) -> rusqlite::Result<()> {
        self.conn.prepare_cached(sql)?.execute([]).map(|_| ())
    }

    /// Counts a committed write; the [`ROOM_AFTER_WRITES`]th makes the WAL's room, once (a
    /// failure only leaves the WAL as SQLite keeps it).
    fn count_write(&mut self) {
        let Some(room) = &mut self.room else {
            return;
        };
        room.writes += 1;
        if room.writes >= ROOM_AFTER_WRITES {
            if let Err(error) = wal_room::make_room(&self.conn, &room.wal) {
                tracing::debug!(wal = %room.wal.display(), %error, "the WAL got no room");
            }
            self.room = None;
        }
    }
}

fn sync_if(
    wal: &WalFile,
    file: &mut Option<std::fs::File>,
    needed: bool,
) -> Result<bool, BatchFailure> {
    if needed {
        wal.sync(file).map(|()| true)
    } else {
        Ok(false)
    }
}

/// How long, from the batch's start, the writer may wait for more of the callers the last
/// transaction released; `None` once as many are gathered as it held (or it held none).
fn gather_window(gathered: usize, last_batch: usize, last_commit: Duration) -> Option<Duration> {
    (gathered > 0 && gathered < last_batch).then(|| (last_commit / 2).min(MAX_GATHER))
}

fn micros(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX)
}

fn batch_failure(error: &rusqlite::Error) -> BatchFailure {
    let busy = matches!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    );
    BatchFailure {
        busy,
        detail: error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writer_waits_only_for_callers_the_last_commit_released_and_never_long() {
        let ms = Duration::from_millis;
        let us = Duration::from_micros;
        let table = [
            // (gathered, last batch, last COMMIT, window)
            (1, 1, ms(5), None),             // a lone caller never waits
            (1, 0, ms(5), None),             // the first transaction
            (8, 8, ms(5), None),             // all of them are back
            (3, 8, us(200), Some(us(100))),  // half the last COMMIT
            (3, 8, ms(5), Some(MAX_GATHER)), // never more than the bound
            (0, 8, ms(5), None),
        ];
        for (gathered, last_batch, last_commit, window) in table {
            assert_eq!(
                gather_window(gathered, last_batch, last_commit),
                window,
                "{gathered} of {last_batch} after a {last_commit:?} COMMIT"
            );
        }
    }
}
