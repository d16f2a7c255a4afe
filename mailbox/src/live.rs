//! Live runs across processes. A live run holds an exclusive lock on
//! `.muster/runs/<run_id>.lock` and listens on a Unix socket; another muster process commits
//! first, then writes one line to that socket, and the run wakes the recipient. When the lock
//! is free the run is not live, and the committed mail waits for `muster resume`. On a shared
//! backend the run also holds the server's [`LiveHold`], which is kept across a lost
//! connection or reported lost ([`LiveRun::lost`]): the run then stops with exit 4.

use std::fs::{File, TryLockError};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use tokio::io::AsyncBufReadExt;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::{StoreError, StoreResult};
use crate::store::MailboxStore;
use crate::types::validate_agent_id;

/// Unix socket paths longer than this do not fit `sockaddr_un` everywhere.
const MAX_SOCKET_PATH: usize = 100;

pub fn lock_path(runs_dir: &Path, run_id: &str) -> PathBuf {
    runs_dir.join(format!("{run_id}.lock"))
}

/// The socket a live run listens on: beside its lock when the path is short enough, else
/// `muster-<hash>.sock` in the runtime directory (`$XDG_RUNTIME_DIR`, passed in by `main`) or
/// `/tmp`.
pub fn socket_path(runs_dir: &Path, run_id: &str, runtime_dir: Option<&Path>) -> PathBuf {
    let preferred = runs_dir.join(format!("{run_id}.sock"));
    if preferred.as_os_str().len() <= MAX_SOCKET_PATH {
        return preferred;
    }
    let dir = runtime_dir.unwrap_or(Path::new("/tmp"));
    dir.join(format!(
        "muster-{:016x}.sock",
        fnv1a(preferred.as_os_str().as_encoded_bytes())
    ))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A backend's own hold on a live run (PostgreSQL: a session-level advisory lock and a
/// LISTEN on a dedicated connection, taken again when the connection is lost); released when
/// dropped.
pub struct LiveHold {
    _inner: Box<dyn std::any::Any + Send + Sync>,
    /// The epoch the owning process opened (0 until it has): a hold taken again after a lost
    /// connection must find it still in the store.
    epoch: Arc<AtomicI64>,
    /// Set, with the reason, when the hold is lost for good.
    lost: watch::Receiver<Option<String>>,
    run_id: String,
}

impl LiveHold {
    /// A hold nothing supervises (a change feed): it is never reported lost while it lives.
    pub fn new(inner: impl std::any::Any + Send + Sync) -> LiveHold {
        let (keeper, lost) = watch::channel(None);
        LiveHold::supervised((inner, keeper), "", Arc::new(AtomicI64::new(0)), lost)
    }

    /// A hold whose keeper reports through `lost` when it cannot be kept, and checks `epoch`
    /// when it takes the hold again.
    pub fn supervised(
        inner: impl std::any::Any + Send + Sync,
        run_id: &str,
        epoch: Arc<AtomicI64>,
        lost: watch::Receiver<Option<String>>,
    ) -> LiveHold {
        LiveHold {
            _inner: Box::new(inner),
            epoch,
            lost,
            run_id: run_id.to_owned(),
        }
    }

    /// Records the epoch this process opened for the run (after taking the hold).
    pub fn own_epoch(&self, epoch: i64) {
        self.epoch.store(epoch, Ordering::SeqCst);
    }

    /// Resolves when the hold is lost for good (another process took the run over, its epoch
    /// moved, or the server stayed unreachable): the run must stop writing and end.
    pub async fn lost(&self) -> StoreError {
        let mut lost = self.lost.clone();
        let reason = match lost.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone().unwrap_or_default(),
            Err(_) => "the hold's keeper ended".to_owned(),
        };
        StoreError::LiveLost {
            run: self.run_id.clone(),
            reason,
        }
    }
}

/// Why a store's change feed ([`MailboxStore::watch_changes`]) called back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeCause {
    /// Some process committed to the store.
    Notified,
    /// The feed's connection was lost and is back: commits in between were not announced.
    Reconnected,
}

/// What a change feed calls; quick, and on the feed's own task.
pub type OnChange = Arc<dyn Fn(ChangeCause) + Send + Sync>;

/// Held by the process that owns a run: the lock, and the socket listener that turns
/// `wake <recipient>` lines into in-process wake-ups; on a shared backend, also the server's
/// hold (its lock and its wake-ups from other machines).
pub struct LiveRun {
    _lock: File,
    socket: PathBuf,
    listener: JoinHandle<()>,
    _server: Option<LiveHold>,
}

impl LiveRun {
    /// Takes the run's lock (refusing if another live process holds it) and starts listening.
    /// Must be called inside a tokio runtime.
    pub fn start(
        runs_dir: &Path,
        run_id: &str,
        store: Arc<dyn MailboxStore>,
        runtime_dir: Option<&Path>,
    ) -> StoreResult<LiveRun> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| StoreError::Open { path, source }
        };
        std::fs::create_dir_all(runs_dir).map_err(io(runs_dir))?;
        let lock_path = lock_path(runs_dir, run_id);
        let mut lock = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(io(&lock_path))?;
        take_run_lock(&lock, &lock_path, run_id)?;
        let socket = socket_path(runs_dir, run_id, runtime_dir);
        // A socket file left by a crashed owner is stale: we hold the lock now.
        let _ = std::fs::remove_file(&socket);
        let listener = tokio::net::UnixListener::bind(&socket).map_err(io(&socket))?;
        lock.set_len(0).map_err(io(&lock_path))?;
        writeln!(lock, "{}\n{}", socket.display(), std::process::id()).map_err(io(&lock_path))?;
        lock.sync_all().map_err(io(&lock_path))?;
        let run_id = run_id.to_owned();
        let listener = tokio::spawn(listen(listener, run_id, store));
        Ok(LiveRun {
            _lock: lock,
            socket,
            listener,
            _server: None,
        })
    }

    /// [`LiveRun::start`], then the backend's own hold when it has one (PostgreSQL: refused
    /// when a process on any machine holds the run live).
    pub async fn start_shared(
        runs_dir: &Path,
        run_id: &str,
        store: Arc<dyn MailboxStore>,
        runtime_dir: Option<&Path>,
    ) -> StoreResult<LiveRun> {
        let mut live = LiveRun::start(runs_dir, run_id, store.clone(), runtime_dir)?;
        live._server = store.hold_live(run_id).await?;
        Ok(live)
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Records the epoch this process opened for the run, for the backend's hold to check
    /// when it takes the hold again after a lost connection.
    pub fn own_epoch(&self, epoch: i64) {
        if let Some(hold) = &self._server {
            hold.own_epoch(epoch);
        }
    }

    /// Resolves when the backend's hold on the run is lost for good; never on a backend
    /// without one (the lock file cannot be lost while the process lives).
    pub async fn lost(&self) -> StoreError {
        match &self._server {
            Some(hold) => hold.lost().await,
            None => std::future::pending().await,
        }
    }
}

impl Drop for LiveRun {
    fn drop(&mut self) {
        self.listener.abort();
        let _ = std::fs::remove_file(&self.socket);
    }
}

async fn listen(listener: tokio::net::UnixListener, run_id: String, store: Arc<dyn MailboxStore>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let (run_id, store) = (run_id.clone(), store.clone());
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stream).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(recipient) = line.strip_prefix("wake ").map(str::trim)
                    && validate_agent_id(recipient).is_ok()
                {
                    store.wake(&run_id, recipient);
                }
            }
        });
    }
}

/// What happened to a wake-up sent to a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PokeOutcome {
    /// The live run was told to wake the recipient.
    Woken,
    /// No process holds the run's lock: the mail waits for `muster resume`.
    NotLive,
}

/// Takes the run's lock exclusively. A check of [`is_live`] holds the lock shared for an
/// instant; a run that finds only such checks in its way (a shared lock it can also take) tries
/// again, so a page or a poke looking at the run never makes its owner think it is taken.
fn take_run_lock(lock: &File, lock_path: &Path, run_id: &str) -> StoreResult<()> {
    const TRIES: u32 = 1_000;
    let open_error = |source| StoreError::Open {
        path: lock_path.to_path_buf(),
        source,
    };
    for _ in 0..TRIES {
        match lock.try_lock() {
            Ok(()) => return Ok(()),
            Err(TryLockError::Error(source)) => return Err(open_error(source)),
            Err(TryLockError::WouldBlock) => {}
        }
        match lock.try_lock_shared() {
            // Only checks hold it: let them finish.
            Ok(()) => {
                lock.unlock().map_err(open_error)?;
                std::thread::yield_now();
            }
            Err(TryLockError::WouldBlock) => break,
            Err(TryLockError::Error(source)) => return Err(open_error(source)),
        }
    }
    Err(StoreError::RunLocked {
        run: run_id.into(),
        lock: lock_path.to_path_buf(),
    })
}

/// Whether a process holds the run's lock. The check takes the lock shared for an instant, so
/// two checks never see each other as the run's owner.
pub fn is_live(runs_dir: &Path, run_id: &str) -> StoreResult<bool> {
    let lock_path = lock_path(runs_dir, run_id);
    let file = match File::options().read(true).write(true).open(&lock_path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(source) => {
            return Err(StoreError::Open {
                path: lock_path,
                source,
            });
        }
    };
    match file.try_lock_shared() {
        Ok(()) => Ok(false),
        Err(TryLockError::WouldBlock) => Ok(true),
        Err(TryLockError::Error(source)) => Err(StoreError::Open {
            path: lock_path,
            source,
        }),
    }
}

/// Whether the run is live here (its lock file) or, on a shared backend, anywhere.
pub async fn is_live_anywhere(
    store: &dyn MailboxStore,
    runs_dir: &Path,
    run_id: &str,
) -> StoreResult<bool> {
    if is_live(runs_dir, run_id)? {
        return Ok(true);
    }
    Ok(store.is_held_live(run_id).await?.unwrap_or(false))
}

/// Tells a live run that mail for `recipient` has been committed, after the commit: through
/// the backend when it reaches other processes (PostgreSQL's NOTIFY, whichever machine holds
/// the run), else through the run's socket.
pub async fn announce(
    store: &dyn MailboxStore,
    runs_dir: &Path,
    run_id: &str,
    recipient: &str,
) -> StoreResult<PokeOutcome> {
    match store.announce(run_id, recipient).await? {
        Some(true) => Ok(PokeOutcome::Woken),
        Some(false) => Ok(PokeOutcome::NotLive),
        None => poke(runs_dir, run_id, recipient),
    }
}

/// Tells a live run that mail for `recipient` has been committed. Call it after the commit.
pub fn poke(runs_dir: &Path, run_id: &str, recipient: &str) -> StoreResult<PokeOutcome> {
    if !is_live(runs_dir, run_id)? {
        return Ok(PokeOutcome::NotLive);
    }
    let lock_path = lock_path(runs_dir, run_id);
    let mut contents = String::new();
    File::open(&lock_path)
        .and_then(|mut file| file.read_to_string(&mut contents))
        .map_err(|source| StoreError::Open {
            path: lock_path.clone(),
            source,
        })?;
    let socket = PathBuf::from(contents.lines().next().unwrap_or_default());
    let wake_error = |source| StoreError::Wake {
        run: run_id.into(),
        socket: socket.clone(),
        source,
    };
    let mut stream = std::os::unix::net::UnixStream::connect(&socket).map_err(wake_error)?;
    stream
        .write_all(format!("wake {recipient}\n").as_bytes())
        .map_err(wake_error)?;
    Ok(PokeOutcome::Woken)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_socket_paths_fall_back_to_the_runtime_dir() {
        let short = socket_path(Path::new("/p/.muster/runs"), "r1", None);
        assert_eq!(short, Path::new("/p/.muster/runs/r1.sock"));
        let deep = format!("/{}/.muster/runs", "d".repeat(120));
        let long = socket_path(Path::new(&deep), "r1", Some(Path::new("/run/user/7")));
        assert!(long.starts_with("/run/user/7"), "{long:?}");
        assert!(long.as_os_str().len() <= MAX_SOCKET_PATH);
        assert_eq!(
            long,
            socket_path(Path::new(&deep), "r1", Some(Path::new("/run/user/7")))
        );
        assert!(socket_path(Path::new(&deep), "r1", None).starts_with("/tmp"));
    }

    fn lock_file(runs_dir: &Path) -> File {
        File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(lock_path(runs_dir, "r1"))
            .unwrap()
    }

    /// The page's check and a poke's check of the same run at once: neither takes the other for
    /// the run's owner (the run page once showed an idle run as live, and a resume once found
    /// its lock taken, while a check held it).
    #[test]
    fn a_check_in_progress_is_not_an_owner_to_another_check_or_to_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let checking = lock_file(dir.path());
        checking.try_lock_shared().unwrap();
        assert!(!is_live(dir.path(), "r1").unwrap());
        let owner = lock_file(dir.path());
        checking.unlock().unwrap();
        take_run_lock(&owner, &lock_path(dir.path(), "r1"), "r1").unwrap();
        assert!(is_live(dir.path(), "r1").unwrap());
        let second = lock_file(dir.path());
        let refused = take_run_lock(&second, &lock_path(dir.path(), "r1"), "r1");
        assert!(
            matches!(refused, Err(StoreError::RunLocked { .. })),
            "{refused:?}"
        );
    }
}
