//! Work items for workers (DESIGN, "Wave 2 → Workers"): a queue of items (a batch's lines)
//! that `muster worker` processes claim, each leased to one worker with a deadline its
//! heartbeats push back, and a fencing token.
//!
//! The rules, on both backends:
//! - A claim is one conditional update (PostgreSQL: `FOR UPDATE SKIP LOCKED`) of the oldest
//!   item that is pending or whose lease deadline has passed; it adds one to the item's
//!   `token` and returns it. The token is the item's epoch: for a batch line (one run, one
//!   agent) the per-(run, agent) epoch DESIGN names.
//! - Every operation on a leased item (heartbeat, finish, hand back) names the token it holds;
//!   a token that is no longer the item's current one is refused with
//!   [`StoreError::Fenced`](crate::StoreError::Fenced), whatever the clock says.
//! - A store opened with a [`WorkFence`] (the process running the item) checks the token
//!   inside every write's transaction, under a row lock on the item that a new claim must
//!   wait for, so no write of an old holder lands after a new claim committed.
//! - Expiry is a deadline: [`crate::MailboxStore::next_lease_expiry`] says how long until the
//!   earliest one, and a waiting worker sleeps until then or until
//!   [`WorkWatch::changed`] (a commit that enqueued, handed back or finished items).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Notify;

use crate::error::{StoreError, StoreResult};
use crate::types::UnixMillis;

/// An item to enqueue. An id already in the store is left as it is.
#[derive(Debug, Clone, PartialEq)]
pub struct NewWorkItem {
    pub id: String,
    /// What a worker or a waiting batch asks for (a batch file's key).
    pub queue: String,
    pub payload: Value,
}

/// Where an item is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkState {
    Pending,
    Leased,
    Done,
}

impl WorkState {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkState::Pending => "pending",
            WorkState::Leased => "leased",
            WorkState::Done => "done",
        }
    }

    pub fn parse(text: &str) -> StoreResult<WorkState> {
        match text {
            "pending" => Ok(WorkState::Pending),
            "leased" => Ok(WorkState::Leased),
            "done" => Ok(WorkState::Done),
            other => Err(StoreError::CorruptRow {
                table: "work_items",
                detail: format!("unknown state {other:?}"),
            }),
        }
    }
}

/// A stored work item.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkItem {
    pub id: String,
    pub queue: String,
    pub payload: Value,
    pub state: WorkState,
    /// The worker holding (or that last held) the lease.
    pub worker: Option<String>,
    /// The fencing token: one more at every claim.
    pub token: i64,
    /// When the lease lapses unless a heartbeat pushes it back (the store's clock).
    pub lease_deadline: Option<UnixMillis>,
    /// How many times it was claimed.
    pub attempts: i64,
    pub result: Option<Value>,
    pub created_at: UnixMillis,
    pub finished_at: Option<UnixMillis>,
}

impl WorkItem {
    /// The fence a holder of this item's current lease presents.
    pub fn fence(&self) -> WorkFence {
        WorkFence {
            item: self.id.clone(),
            token: self.token,
        }
    }
}

/// What a lease holder presents: the item and the token its claim got.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WorkFence {
    pub item: String,
    pub token: i64,
}

impl WorkFence {
    /// `ITEM@TOKEN`, how a worker hands the fence to the process running the item.
    pub fn to_arg(&self) -> String {
        format!("{}@{}", self.item, self.token)
    }

    pub fn parse_arg(text: &str) -> Option<WorkFence> {
        let (item, token) = text.rsplit_once('@')?;
        Some(WorkFence {
            item: item.to_owned(),
            token: token.parse().ok()?,
        })
    }
}

/// A worker as it announces itself with each heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerInfo {
    pub name: String,
    pub host: String,
    pub slots: i64,
    pub pid: i64,
}

/// A worker as the store knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerRecord {
    pub name: String,
    pub host: String,
    pub slots: i64,
    pub pid: i64,
    pub started_at: UnixMillis,
    pub last_heartbeat: UnixMillis,
    /// Set when it stopped cleanly.
    pub stopped_at: Option<UnixMillis>,
    /// The items it holds now.
    pub items: Vec<String>,
}

/// A `Bash` call's process group, as the process running a work item records it with the
/// call's `tool_started` record: the machine it runs on (host and boot id), so that only
/// that machine kills it, and (filled in by the store from the item's row) the item, token
/// and worker, so that a worker restarted under the same name finds the groups its earlier
/// incarnation left behind (DESIGN, "Wave 2 → Workers").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewProcessGroup {
    pub agent: String,
    pub tool_use_id: String,
    pub pgid: i64,
    pub host: String,
    pub boot_id: String,
}

/// A recorded process group of a worker's line (see [`NewProcessGroup`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessGroupRecord {
    pub run_id: String,
    pub agent: String,
    pub tool_use_id: String,
    pub pgid: i64,
    pub host: String,
    pub boot_id: String,
    pub item: String,
    pub token: i64,
    pub worker: String,
    pub recorded_at: UnixMillis,
}

/// What a heartbeat found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Heartbeat {
    /// Leases pushed back.
    pub kept: Vec<WorkFence>,
    /// Leases this worker no longer holds (another claim took the item, or it finished):
    /// their holders must stop writing, and the store refuses them if they do not.
    pub lost: Vec<WorkFence>,
}

/// Wakes a waiting worker or batch when a commit changed the queue (items enqueued, handed
/// back or finished). A change before [`WorkWatch::changed`] is called is kept, not lost.
pub struct WorkWatch {
    pub(crate) notify: Arc<Notify>,
    pub(crate) closed: Arc<AtomicBool>,
    pub(crate) _guard: Option<Box<dyn Send + Sync>>,
    pub(crate) target: String,
}

impl WorkWatch {
    pub(crate) fn new(
        notify: Arc<Notify>,
        closed: Arc<AtomicBool>,
        guard: Option<Box<dyn Send + Sync>>,
        target: String,
    ) -> WorkWatch {
        WorkWatch {
            notify,
            closed,
            _guard: guard,
            target,
        }
    }

    /// Returns when the queue changed since the last call (or since the watch was made), or
    /// with an error when the store's notifications stopped (a lost connection).
    pub async fn changed(&self) -> StoreResult<()> {
        self.check()?;
        self.notify.notified().await;
        self.check()
    }

    fn check(&self) -> StoreResult<()> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(StoreError::ConnectionLost {
                target: self.target.clone(),
                detail: "the connection that carried the work queue's notifications ended".into(),
            });
        }
        Ok(())
    }
}

/// The watches of one store handle: each gets its own `Notify`, whose stored permit keeps a
/// change that happened while its owner was busy.
#[derive(Default)]
pub(crate) struct Watchers {
    notifies: std::sync::Mutex<Vec<std::sync::Weak<Notify>>>,
}

impl Watchers {
    pub(crate) fn watch(&self, guard: Option<Box<dyn Send + Sync>>, target: String) -> WorkWatch {
        self.watch_closing(guard, Arc::default(), target)
    }

    pub(crate) fn watch_closing(
        &self,
        guard: Option<Box<dyn Send + Sync>>,
        closed: Arc<AtomicBool>,
        target: String,
    ) -> WorkWatch {
        let notify = Arc::new(Notify::new());
        let mut notifies = match self.notifies.lock() {
            Ok(list) => list,
            Err(poisoned) => poisoned.into_inner(),
        };
        notifies.retain(|weak| weak.strong_count() > 0);
        notifies.push(Arc::downgrade(&notify));
        WorkWatch::new(notify, closed, guard, target)
    }

    pub(crate) fn wake(&self) {
        let notifies = match self.notifies.lock() {
            Ok(list) => list,
            Err(poisoned) => poisoned.into_inner(),
        };
        for notify in notifies.iter().filter_map(std::sync::Weak::upgrade) {
            notify.notify_one();
        }
    }
}

/// A lease length or heartbeat interval as the store takes it.
pub(crate) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Refuses an empty or oversized id or queue name.
pub(crate) fn validate_name(what: &'static str, text: &str) -> StoreResult<()> {
    if text.is_empty() || text.len() > 512 || text.chars().any(char::is_control) {
        return Err(StoreError::InvalidId {
            what,
            value: text.to_owned(),
            rule: "1 to 512 bytes, no control characters",
        });
    }
    Ok(())
}
