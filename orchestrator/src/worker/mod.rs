//! `muster worker`: a long-running process that claims work items (batch lines) from a
//! PostgreSQL store and runs each as a batch runs a line: a child process per item
//! (`muster worker --run-item ITEM@TOKEN`, see [`run_item`]) that starts the line's run as
//! `muster run` would, or resumes it as `muster resume` would when an earlier holder left it
//! unfinished (a worker killed mid-line).
//!
//! Leases and fencing (see `muster_mailbox::work`): each claim raises the item's token; the
//! worker's heartbeat task pushes its leases back every `heartbeat` and learns of leases it
//! lost (it stops that item's child at once); the child's store is fenced by the token, so a
//! child that wakes up late cannot write; the item's result is committed with the token, so a
//! late worker cannot report it either. While it has free slots and nothing to claim, the
//! worker sleeps until the store announces a change or until the earliest lease deadline (a
//! timer, not a poll), when an expired item may be taken over.
//!
//! The first SIGTERM or SIGINT stops claiming, stops each running line (its run interrupted,
//! committed) and hands the items back for another worker; a second signal exits at once.

pub mod line;
mod orphans;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use muster_config::store_url::StoreLocation;
use muster_mailbox::{MailboxStore, StoreError, WorkFence, WorkItem, WorkerInfo};

use crate::exit::{Exit, ExitError};
use crate::project::{Globals, Project};

/// What `muster worker` was asked to do.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    pub name: Option<String>,
    pub slots: usize,
    /// Where lines' workspaces are made (default: `work/` under the worker's directory).
    pub repo_cache: Option<PathBuf>,
    /// How long a lease lasts without a heartbeat.
    pub lease: Duration,
    /// How often the worker renews its leases.
    pub heartbeat: Duration,
}

/// The lease a worker asks for when none is configured: a few heartbeats long.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(6);
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(2);

/// Refuses a store that other machines cannot reach.
pub fn require_shared_store(project: &Project, what: &str) -> anyhow::Result<()> {
    match project.store_location() {
        StoreLocation::Postgres(_) => Ok(()),
        StoreLocation::File(path) => Err(ExitError::new(
            Exit::Usage,
            format!(
                "{what} needs a store that every worker reaches, and {} is an SQLite file; \
                 give --store postgres://… (or set `store` to one)",
                path.display()
            ),
        )
        .into()),
    }
}

/// This machine's name, as `muster workers` shows it and process groups are recorded with.
pub fn host_name() -> String {
    muster_agents::machine::host_name()
}

/// One item this worker runs.
struct Held {
    fence: WorkFence,
    /// The child's process id (its own process group), once it started.
    child: Option<u32>,
    /// A heartbeat found the lease lost (acted on once).
    lost: bool,
    /// Held by the item's line task while it runs: a later claim of the same item by this
    /// worker (its own lease lapsed, then it claimed the item again) waits for it, so the
    /// line never runs twice here at once.
    line: Arc<tokio::sync::Mutex<()>>,
}

/// What the worker's tasks share.
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn MailboxStore>,
    pub(crate) info: WorkerInfo,
    pub(crate) project: Project,
    pub(crate) global: Globals,
    pub(crate) workspaces: PathBuf,
    pub(crate) lease: Duration,
    held: Mutex<HashMap<String, Held>>,
    /// Children of leases this worker claimed again (see [`Held::line`]), being stopped.
    superseded: Mutex<HashMap<WorkFence, u32>>,
    /// No claims before this instant: the repo cache was full (see [`line::CacheFull`]).
    claims_paused_until: Mutex<Option<tokio::time::Instant>>,
    /// Set once a signal asked the worker to stop: a line interrupted then is handed back.
    stopping: std::sync::atomic::AtomicBool,
}

impl Shared {
    pub(crate) fn stopping(&self) -> bool {
        self.stopping.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn fences(&self) -> Vec<WorkFence> {
        self.held
            .lock()
            .map(|held| held.values().map(|h| h.fence.clone()).collect())
            .unwrap_or_default()
    }

    fn running(&self) -> usize {
        self.held.lock().map(|held| held.len()).unwrap_or(0)
    }

    /// The child of `fence`'s line task started (`Some`) or exited (`None`).
    pub(crate) fn set_child(&self, fence: &WorkFence, pid: Option<u32>) {
        if let Ok(mut held) = self.held.lock()
            && let Some(entry) = held.get_mut(&fence.item)
            && entry.fence.token == fence.token
        {
            entry.child = pid;
            return;
        }
        // A superseded lease's child: stopped already.
        if let Ok(mut superseded) = self.superseded.lock() {
            match pid {
                Some(pid) => {
                    superseded.insert(fence.clone(), pid);
                    signal_group(pid, rustix::process::Signal::TERM);
                }
                None => {
                    superseded.remove(fence);
                }
            }
        }
    }

    fn children(&self) -> Vec<u32> {
        self.held
            .lock()
            .map(|held| held.values().filter_map(|h| h.child).collect())
            .unwrap_or_default()
    }

    /// Stops the child of a lease this worker lost: it must not run on beside the new holder.
    /// SIGTERM first, so the line's run kills its own Bash process groups (its writes are
    /// refused anyway, fenced); SIGKILL after `grace` if it is still there.
    fn lost(self: &Arc<Self>, fence: &WorkFence, grace: Duration) {
        let child = match self.held.lock() {
            Ok(mut held) => match held.get_mut(&fence.item) {
                Some(entry) if !entry.lost && entry.fence.token == fence.token => {
                    entry.lost = true;
                    entry.child
                }
                _ => return,
            },
            Err(_) => return,
        };
        eprintln!(
            "muster worker {}: lost the lease of {} (token {}): another worker took it over, \
             or its run stopped it; stopping its line",
            self.info.name, fence.item, fence.token
        );
        if let Some(pid) = child {
            self.stop_child(fence, pid, grace);
        }
    }

    /// SIGTERM to `fence`'s child now, SIGKILL after `grace` if that child is still there.
    fn stop_child(self: &Arc<Self>, fence: &WorkFence, pid: u32, grace: Duration) {
        signal_group(pid, rustix::process::Signal::TERM);
        let (shared, fence) = (self.clone(), fence.clone());
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            if shared.child_of(&fence) == Some(pid) {
                signal_group(pid, rustix::process::Signal::KILL);
            }
        });
    }

    /// How long claims stay paused, if they are.
    fn claims_paused(&self) -> Option<Duration> {
        let until = (*self.claims_paused_until.lock().ok()?)?;
        let now = tokio::time::Instant::now();
        (until > now).then(|| until - now)
    }

    /// Pauses claims for two lease lengths: a line handed back for want of room here goes to
    /// another worker first.
    fn pause_claims(&self) {
        if let Ok(mut until) = self.claims_paused_until.lock() {
            *until = Some(tokio::time::Instant::now() + self.lease * 2);
        }
    }

    fn child_of(&self, fence: &WorkFence) -> Option<u32> {
        let held = self.held.lock().ok().and_then(|held| {
            held.get(&fence.item)
                .filter(|h| h.fence.token == fence.token)
                .and_then(|h| h.child)
        });
        held.or_else(|| {
            self.superseded
                .lock()
                .ok()
                .and_then(|superseded| superseded.get(fence).copied())
        })
    }
}

/// Sends `signal` to the process group led by `pid` (each line's child leads its own).
pub(crate) fn signal_group(pid: u32, signal: rustix::process::Signal) {
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pid, signal);
    }
}

/// `muster worker --store postgres://… [--name NAME] [--slots N] [--repo-cache DIR]`.
pub fn run(global: &Globals, options: WorkerOptions) -> anyhow::Result<Exit> {
    if options.slots == 0 {
        return Err(crate::batch::usage("--slots must be at least 1"));
    }
    if options.heartbeat.is_zero() || options.lease <= options.heartbeat {
        return Err(crate::batch::usage(format!(
            "the lease ({} ms) must be longer than the heartbeat ({} ms, more than 0)",
            options.lease.as_millis(),
            options.heartbeat.as_millis()
        )));
    }
    let project = Project::locate(global)?;
    require_shared_store(&project, "muster worker")?;
    let workspaces = match &options.repo_cache {
        Some(dir) => std::path::absolute(dir)?,
        None => project.root.path().join("work"),
    };
    std::fs::create_dir_all(&workspaces).map_err(|e| {
        ExitError::new(
            Exit::Usage,
            format!("cannot create the repo cache {}: {e}", workspaces.display()),
        )
    })?;
    let host = host_name();
    let pid = std::process::id();
    let info = WorkerInfo {
        name: options
            .name
            .clone()
            .unwrap_or_else(|| format!("{host}-{pid}")),
        host,
        slots: i64::try_from(options.slots).unwrap_or(i64::MAX),
        pid: i64::from(pid),
    };
    let runtime = crate::lifecycle::tokio_runtime()?;
    runtime.block_on(async {
        let store = project.open_store().await?;
        let shared = Arc::new(Shared {
            store,
            info,
            project,
            global: global.clone(),
            workspaces,
            lease: options.lease,
            held: Mutex::new(HashMap::new()),
            superseded: Mutex::new(HashMap::new()),
            claims_paused_until: Mutex::new(None),
            stopping: Default::default(),
        });
        serve(shared, options).await
    })
}

async fn serve(shared: Arc<Shared>, options: WorkerOptions) -> anyhow::Result<Exit> {
    let store = shared.store.clone();
    let mut interrupts = crate::lifecycle::signals::Interrupts::install();
    // Before the first heartbeat, which names this process as the worker's.
    orphans::kill_orphans(&shared).await;
    store
        .heartbeat(&shared.info, &[], shared.lease)
        .await
        .map_err(|e| store_error("could not register with the store", e))?;
    eprintln!(
        "muster worker {}: ready on {} ({} slots, lease {} ms, heartbeat {} ms)",
        shared.info.name,
        shared.project.store_location(),
        options.slots,
        options.lease.as_millis(),
        options.heartbeat.as_millis()
    );
    let beats = tokio::spawn(heartbeats(shared.clone(), options.heartbeat));
    let (ended_tx, mut ended) = tokio::sync::mpsc::unbounded_channel::<String>();
    let mut lines = tokio::task::JoinSet::new();
    let mut watch: Option<muster_mailbox::WorkWatch> = None;
    let mut backoff = FIRST_BACKOFF;
    let outcome: anyhow::Result<()> = loop {
        let step = next_wait(&shared, &options, &mut watch, &mut lines, &ended_tx).await;
        let expiry = match step {
            Ok(expiry) => {
                backoff = FIRST_BACKOFF;
                expiry
            }
            // The store unreachable for a while (a restart, a network cut): say so and try
            // again later; running lines go on or fail on their own, and a lease that lapses
            // meanwhile is taken over, so nothing is lost.
            Err(error) if is_transient(&error) => {
                eprintln!(
                    "muster worker {}: the store is unreachable ({error}); trying again in {} ms",
                    shared.info.name,
                    backoff.as_millis()
                );
                watch = None;
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    signal = interrupts.first() => {
                        stopping_note(&shared, signal);
                        break Ok(());
                    }
                }
                backoff = (backoff * 2).min(LAST_BACKOFF);
                continue;
            }
            Err(error) => break Err(store_error("the work queue failed", error)),
        };
        let Some(current) = watch.as_ref() else {
            continue;
        };
        tokio::select! {
            changed = current.changed() => {
                if let Err(error) = changed {
                    eprintln!(
                        "muster worker {}: {error}; listening again",
                        shared.info.name
                    );
                    watch = None;
                }
            }
            _ = sleep_until_expiry(expiry) => {}
            Some(_) = ended.recv() => {}
            signal = interrupts.first() => {
                stopping_note(&shared, signal);
                break Ok(());
            }
        }
    };
    // Stop every running line (its run is interrupted and committed by the child), then hand
    // the items back (the line tasks do once their child has exited).
    shared
        .stopping
        .store(true, std::sync::atomic::Ordering::SeqCst);
    for pid in shared.children() {
        signal_group(pid, rustix::process::Signal::TERM);
    }
    while lines.join_next().await.is_some() {}
    beats.abort();
    for fence in shared.fences() {
        if let Err(error) = store.release_work(&fence).await {
            eprintln!(
                "muster worker {}: could not hand back {}: {error}",
                shared.info.name, fence.item
            );
        }
    }
    let _ = store.retire_worker(&shared.info.name).await;
    outcome?;
    Ok(Exit::Success)
}

/// The first and the longest wait before trying an unreachable store again.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const LAST_BACKOFF: Duration = Duration::from_secs(10);

/// Errors that a later try may not meet: the server or the network, not the request.
fn is_transient(error: &StoreError) -> bool {
    matches!(
        error,
        StoreError::ConnectionLost { .. } | StoreError::PostgresConnect { .. }
    )
}

fn stopping_note(shared: &Shared, signal: &str) {
    eprintln!(
        "muster worker {}: {signal}: handing back {} item(s); a second signal exits at once",
        shared.info.name,
        shared.running()
    );
}

/// Listens (again) when not listening, fills the free slots, and gives back the earliest
/// lease deadline when a slot is still free (when an item may free up).
async fn next_wait(
    shared: &Arc<Shared>,
    options: &WorkerOptions,
    watch: &mut Option<muster_mailbox::WorkWatch>,
    lines: &mut tokio::task::JoinSet<()>,
    ended: &tokio::sync::mpsc::UnboundedSender<String>,
) -> Result<Option<Duration>, StoreError> {
    let store = &shared.store;
    if watch.is_none() {
        // Listen before claiming: a change between the claim and the wait still wakes it.
        *watch = Some(store.watch_work().await?);
    }
    if let Some(pause) = shared.claims_paused() {
        return Ok(Some(pause));
    }
    while shared.running() < options.slots {
        match store
            .claim_work(None, &shared.info.name, shared.lease)
            .await?
        {
            Some(item) => start(shared, lines, item, ended.clone()),
            None => break,
        }
    }
    if shared.running() < options.slots {
        store.next_lease_expiry(None).await
    } else {
        Ok(None)
    }
}

async fn sleep_until_expiry(expiry: Option<Duration>) {
    match expiry {
        // A few milliseconds past the deadline: the store compares with its own clock.
        Some(wait) => tokio::time::sleep(wait + Duration::from_millis(5)).await,
        None => std::future::pending().await,
    }
}

fn store_error(what: &str, error: StoreError) -> anyhow::Error {
    anyhow::Error::new(error).context(what.to_owned())
}

/// Starts the line task of a claimed item.
fn start(
    shared: &Arc<Shared>,
    lines: &mut tokio::task::JoinSet<()>,
    item: WorkItem,
    ended: tokio::sync::mpsc::UnboundedSender<String>,
) {
    let fence = item.fence();
    eprintln!(
        "muster worker {}: claimed {} (token {}, attempt {})",
        shared.info.name, item.id, item.token, item.attempts
    );
    let (earlier, line_lock) = match shared.held.lock() {
        Ok(mut held) => {
            let earlier = held.remove(&item.id);
            let line = earlier
                .as_ref()
                .map_or_else(Arc::default, |earlier| earlier.line.clone());
            let entry = Held {
                fence: fence.clone(),
                child: None,
                lost: false,
                line: line.clone(),
            };
            held.insert(item.id.clone(), entry);
            (earlier, line)
        }
        Err(_) => (None, Arc::default()),
    };
    if let Some(earlier) = earlier {
        supersede(shared, earlier, &item);
    }
    let shared = shared.clone();
    lines.spawn(async move {
        // Waits for an earlier line task of this item here to end (see `Held::line`).
        let _line = line_lock.lock_owned().await;
        let stopping = line::run_line(&shared, &item).await;
        if let Err(error) = &stopping {
            // The line could not be run or reported (the store unreachable, say): hand it
            // back for another try rather than hold its lease with nothing running.
            eprintln!(
                "muster worker {}: {}: {error:#}; handing it back",
                shared.info.name, item.id
            );
            if error.downcast_ref::<line::CacheFull>().is_some() {
                shared.pause_claims();
            }
            if let Err(error) = shared.store.release_work(&item.fence()).await {
                eprintln!(
                    "muster worker {}: could not hand back {}: {error}; its lease lapses",
                    shared.info.name, item.id
                );
            }
        }
        // A line that finished, whose lease was lost or that was handed back is no longer
        // held; one stopped by a signal stays held until the worker hands it back.
        // Only this task's lease: a later claim of the same item (this worker's own lease
        // lapsed while the store was unreachable, then it claimed the item again) is another.
        if !matches!(stopping, Ok(line::LineEnd::Stopped))
            && let Ok(mut held) = shared.held.lock()
            && held
                .get(&item.id)
                .is_some_and(|h| h.fence.token == item.token)
        {
            held.remove(&item.id);
        }
        let _ = ended.send(item.id);
    });
}

/// This worker claimed `item` again while a line task of an earlier claim still runs here
/// (its lease lapsed, say while the store was unreachable, and nobody else took it): that
/// task's writes are fenced now, and its child is stopped as a lost lease's is; the new task
/// waits on the line lock until the earlier one ended.
fn supersede(shared: &Arc<Shared>, earlier: Held, item: &WorkItem) {
    eprintln!(
        "muster worker {}: claimed {} again (token {}) while its line under token {} still \
         runs here: stopping that one first",
        shared.info.name, item.id, item.token, earlier.fence.token
    );
    if let Some(pid) = earlier.child {
        if let Ok(mut superseded) = shared.superseded.lock() {
            superseded.insert(earlier.fence.clone(), pid);
        }
        shared.stop_child(&earlier.fence, pid, shared.lease);
    }
}

/// Renews the worker's leases every `every`; a lost lease stops its line.
async fn heartbeats(shared: Arc<Shared>, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let fences = shared.fences();
        match shared
            .store
            .heartbeat(&shared.info, &fences, shared.lease)
            .await
        {
            Ok(beat) => {
                for fence in &beat.lost {
                    shared.lost(fence, shared.lease);
                }
            }
            Err(error) => eprintln!(
                "muster worker {}: heartbeat failed: {error}; its leases lapse unless the \
                 next one lands",
                shared.info.name
            ),
        }
    }
}

/// The child process of one item: `muster worker --run-item ITEM@TOKEN [--resume-run RUN]`.
pub fn run_item(
    global: &Globals,
    fence: &str,
    repo_cache: &std::path::Path,
    resume: Option<&str>,
) -> anyhow::Result<Exit> {
    let fence = WorkFence::parse_arg(fence)
        .ok_or_else(|| crate::batch::usage(format!("--run-item {fence:?}: expected ITEM@TOKEN")))?;
    // Every store this process opens from here on is fenced by the item's claim.
    let mut global = global.clone();
    global.process.work_fence = Some(fence.clone());
    line::run_child(&global, &fence, repo_cache, resume)
}
