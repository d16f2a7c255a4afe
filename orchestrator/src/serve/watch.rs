//! What tells `muster serve` the store changed, so it can push the change to open pages
//! (DESIGN "Wave 2 → The web inbox"). The browser never polls: it holds one server-sent-events
//! stream, and each change reaches it as one `change` event whose data names what noticed it.
//!
//! - PostgreSQL: a LISTEN on the schema's change channel (every write's NOTIFY after COMMIT),
//!   re-opened when its connection is lost ([`Source::Listen`], then [`Source::Reconnect`]).
//! - SQLite: every muster process that commits pokes `.muster/serve.sock`, a datagram socket
//!   serve binds ([`commit_hook`], installed by [`crate::project::Project::store_options`]);
//!   [`Source::Poke`]. A check of `PRAGMA data_version` once a second is the fallback for a
//!   commit no poke announced (a process of another muster version, a socket path too long
//!   to bind); [`Source::Fallback`].

use std::os::unix::net::UnixDatagram as StdDatagram;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use muster_mailbox::live::{ChangeCause, LiveHold};
use muster_mailbox::{CommitHook, DataVersion, MailboxStore};
use tokio::net::UnixDatagram;
use tokio::sync::broadcast;

/// What noticed a change: the data of the page's `change` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A muster process poked serve's socket after its SQLite commit.
    Poke,
    /// The once-a-second `PRAGMA data_version` check saw a commit no poke announced.
    Fallback,
    /// PostgreSQL's change channel announced a commit.
    Listen,
    /// The change channel's connection came back: commits in between may be missed.
    Reconnect,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Poke => "poke",
            Source::Fallback => "fallback",
            Source::Listen => "listen",
            Source::Reconnect => "reconnect",
        }
    }
}

pub type Changes = broadcast::Sender<Source>;

/// How often the SQLite fallback looks.
const FALLBACK_PERIOD: Duration = Duration::from_secs(1);

/// `.muster/serve.sock`: where a running `muster serve` listens for pokes.
pub fn socket_path(muster_dir: &Path) -> PathBuf {
    muster_dir.join("serve.sock")
}

/// The hook every SQLite store of this process runs after each COMMIT: one non-blocking
/// datagram to `.muster/serve.sock`. A missing socket (no serve), a dead one (a serve that
/// was killed) or a full one fails the send at once, and is ignored: the commit is durable,
/// and serve's fallback would see it.
pub fn commit_hook(muster_dir: &Path) -> CommitHook {
    let path = socket_path(muster_dir);
    let socket: OnceLock<Option<StdDatagram>> = OnceLock::new();
    CommitHook::new(move || {
        let socket = socket.get_or_init(|| {
            let socket = StdDatagram::unbound().ok()?;
            socket.set_nonblocking(true).ok()?;
            Some(socket)
        });
        if let Some(socket) = socket {
            let _ = socket.send_to(b"changed", &path);
        }
    })
}

/// What keeps the watch going; dropping it stops it (and removes serve's socket).
pub struct Watch {
    _feed: Option<LiveHold>,
    _socket: Option<PokeSocket>,
}

/// Starts watching the store: the backend's change feed when it has one, else (SQLite) the
/// poke socket and the fallback check.
pub async fn start(
    store: &dyn MailboxStore,
    store_path: Option<&Path>,
    muster_dir: &Path,
    changes: Changes,
) -> anyhow::Result<Watch> {
    let sender = changes.clone();
    let on_change = Arc::new(move |cause: ChangeCause| {
        let _ = sender.send(match cause {
            ChangeCause::Notified => Source::Listen,
            ChangeCause::Reconnected => Source::Reconnect,
        });
    });
    if let Some(feed) = store.watch_changes(on_change).await? {
        return Ok(Watch {
            _feed: Some(feed),
            _socket: None,
        });
    }
    let Some(store_path) = store_path else {
        return Ok(Watch {
            _feed: None,
            _socket: None,
        });
    };
    let version = DataVersion::open(store_path)?;
    let (socket, bound) = match bind(muster_dir) {
        Ok(bound) => (Some(bound.0), Some(bound.1)),
        Err(error) => {
            tracing::warn!(%error, "no poke socket under .muster/: changes show within a second instead");
            (None, None)
        }
    };
    tokio::spawn(sqlite_watch(version, socket, changes));
    Ok(Watch {
        _feed: None,
        _socket: bound,
    })
}

/// Serve's socket; removed when dropped.
pub struct PokeSocket {
    path: PathBuf,
}

impl Drop for PokeSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Binds `.muster/serve.sock`. A socket file nobody listens on (a serve that was killed) is
/// replaced; one another serve of this project listens on is left to it.
fn bind(muster_dir: &Path) -> std::io::Result<(UnixDatagram, PokeSocket)> {
    let path = socket_path(muster_dir);
    if path.exists() {
        let probe = StdDatagram::unbound()?;
        probe.set_nonblocking(true)?;
        if probe.send_to(b"probe", &path).is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!(
                    "another `muster serve` listens on {}; pokes go to it",
                    path.display()
                ),
            ));
        }
        let _ = std::fs::remove_file(&path);
    }
    let socket = UnixDatagram::bind(&path)?;
    Ok((socket, PokeSocket { path }))
}

/// Turns pokes into changes at once and, once a second, a `data_version` that moved without
/// a poke into a change. A poke also records the version, so the fallback does not announce
/// the same commit again.
async fn sqlite_watch(version: DataVersion, mut socket: Option<UnixDatagram>, changes: Changes) {
    let read = |version: &DataVersion| version.read().ok();
    let mut last = read(&version);
    let mut tick = tokio::time::interval(FALLBACK_PERIOD);
    let mut buf = [0u8; 64];
    loop {
        let poked = async {
            match &socket {
                Some(socket) => socket.recv(&mut buf).await.is_ok(),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            got = poked => {
                if got {
                    last = read(&version);
                    let _ = changes.send(Source::Poke);
                } else {
                    tracing::warn!("serve's poke socket failed: changes show within a second instead");
                    socket = None;
                }
            }
            _ = tick.tick() => {
                let now = read(&version);
                if now != last {
                    last = now;
                    let _ = changes.send(Source::Fallback);
                }
            }
        }
    }
}
