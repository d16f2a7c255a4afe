//! The one writer thread that owns the SQLite connection. Operations queue up while a commit
//! is in flight and are grouped into the next transaction (group commit); each runs in its own
//! SAVEPOINT, so a refused operation fails only its caller.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use std::sync::mpsc;

use tokio::sync::{oneshot, watch};

use crate::error::{StoreError, StoreResult};
use crate::options::CommitHook;
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
}

impl Writer {
    /// Starts the writer thread on an open connection.
    pub(crate) fn start(
        conn: Connection,
        path: PathBuf,
        busy_timeout_ms: u64,
        waiters: Arc<Waiters>,
        after_commit: Option<CommitHook>,
        gather_released: bool,
    ) -> StoreResult<Writer> {
        let (jobs, receiver) = mpsc::channel();
        let (queued, _) = watch::channel(0);
        let (stats, _) = watch::channel(StoreStats::default());
        let path = Arc::new(path);
        let writer = Writer {
            jobs,
            path: path.clone(),
            busy_timeout_ms,
            queued,
            stats,
        };
        let thread_state = WriterThread {
            conn,
            receiver,
            waiters,
            after_commit,
            stats: writer.stats.clone(),
            queued: writer.queued.clone(),
            gather_released,
            last_batch: 0,
            last_commit: Duration::ZERO,
        };
        std::thread::Builder::new()
            .name("muster-store-writer".into())
            .spawn(move || thread_state.run())
            .map_err(|source| StoreError::Open {
                path: path.to_path_buf(),
                source,
            })?;
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

    /// Commits and operations so far, updated after every transaction.
    pub(crate) fn stats(&self) -> watch::Receiver<StoreStats> {
        self.stats.subscribe()
    }
}

struct WriterThread {
    conn: Connection,
    receiver: mpsc::Receiver<Job>,
    waiters: Arc<Waiters>,
    after_commit: Option<CommitHook>,
    stats: watch::Sender<StoreStats>,
    queued: watch::Sender<u64>,
    gather_released: bool,
    /// Operations in the last transaction: the callers it released, who (in a closed loop)
    /// are about to queue their next operation.
    last_batch: usize,
    /// How long the last COMMIT took.
    last_commit: Duration,
}

impl WriterThread {
    fn run(mut self) {
        while let Ok(first) = self.receiver.recv() {
            let started = Instant::now();
            let mut batch = Vec::new();
            let mut next = Some(first);
            while let Some(job) = next.take() {
                self.queued.send_modify(|n| *n = n.saturating_sub(1));
                match job {
                    Job::Hold { entered, release } => {
                        // Commit what came before the hold, then wait.
                        self.commit_batch(std::mem::take(&mut batch));
                        let _ = entered.send(());
                        let _ = release.recv();
                    }
                    Job::Checkpoint(done) => {
                        self.commit_batch(std::mem::take(&mut batch));
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
            self.commit_batch(batch);
        }
    }

    /// Group commit's blind spot: the callers the last COMMIT released queue their next
    /// operation a few microseconds after the writer found the queue empty, and would each
    /// wait a whole COMMIT (an fsync) more. While fewer operations are gathered than the last
    /// transaction held, wait for them — at most half the last COMMIT's time (bounded by
    /// [`MAX_GATHER`]), so a lone caller (a last batch of one) never waits and a waiting batch
    /// pays less than the commit it saves.
    fn straggler(&self, gathered: usize, started: Instant) -> Option<Job> {
        if !self.gather_released {
            return None;
        }
        let window = gather_window(gathered, self.last_batch, self.last_commit)?;
        let left = (started + window).checked_duration_since(Instant::now())?;
        self.receiver.recv_timeout(left).ok()
    }

    fn commit_batch(&mut self, batch: Vec<Box<dyn Operation>>) {
        if batch.is_empty() {
            return;
        }
        let began = Instant::now();
        let queued: Duration = batch
            .iter()
            .map(|operation| began.saturating_duration_since(operation.queued_at()))
            .sum();
        let mut finishes = Vec::with_capacity(batch.len());
        let mut wakes = Vec::new();
        if let Err(error) = self.conn.execute_batch("BEGIN IMMEDIATE") {
            let failure = batch_failure(&error);
            for operation in batch {
                operation.refuse(&failure);
            }
            return;
        }
        let begun = Instant::now();
        for operation in batch {
            finishes.push(self.run_in_savepoint(operation, &mut wakes));
        }
        let executed = Instant::now();
        let failure = self.conn.execute_batch("COMMIT").err().map(|error| {
            let _ = self.conn.execute_batch("ROLLBACK");
            batch_failure(&error)
        });
        let committed = Instant::now();
        // Before the callers hear of it: a process that exits as soon as its write returns
        // has already told whoever watches.
        if failure.is_none()
            && let Some(hook) = &self.after_commit
        {
            hook.call();
        }
        let operations = finishes.len() as u64;
        self.last_batch = finishes.len();
        self.last_commit = committed - executed;
        let phases = CommitTime {
            queued_us: micros(queued),
            begin_us: micros(begun - began),
            statements_us: micros(executed - begun),
            commit_us: micros(committed - executed),
            deliver_us: 0,
        };
        // Counted before the callers hear of it, so a caller whose write returned reads it.
        self.stats.send_modify(|stats| {
            stats.operations += operations;
            stats.commits += u64::from(failure.is_none());
            stats.time.add(&phases);
        });
        for finish in finishes {
            finish(failure.as_ref());
        }
        if failure.is_none() {
            self.waiters.wake_all(&wakes);
        }
        let delivered = micros(committed.elapsed());
        // Not a change a watcher waits for: no notification.
        self.stats.send_if_modified(|stats| {
            stats.time.deliver_us = stats.time.deliver_us.saturating_add(delivered);
            false
        });
    }

    fn run_in_savepoint(&mut self, operation: Box<dyn Operation>, wakes: &mut Vec<Wake>) -> Finish {
        if let Err(error) = self.conn.execute_batch("SAVEPOINT operation") {
            let failure = batch_failure(&error);
            operation.refuse(&failure);
            return Box::new(|_| {});
        }
        let mut own_wakes = Vec::new();
        let (ok, finish) = operation.execute(&self.conn, &mut own_wakes);
        if ok {
            wakes.append(&mut own_wakes);
        } else {
            let _ = self.conn.execute_batch("ROLLBACK TO operation");
        }
        let _ = self.conn.execute_batch("RELEASE operation");
        finish
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
