//! What tells `muster serve` the store changed, so it can push the change to open pages
//! (DESIGN "Wave 2 → The web inbox", the SQLite rule): a datagram socket registered under
//! `.muster/` that a muster process pokes after it commits, and, as the fallback for commits
//! that do not poke (an agent's turn in a live run), a check once a second of the store
//! file and its write-ahead log. The browser never polls: it holds one server-sent-events
//! stream.

use std::os::unix::net::UnixDatagram as StdDatagram;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tokio::net::UnixDatagram;
use tokio::sync::broadcast;

/// `.muster/serve.sock`: where a running `muster serve` listens for pokes.
pub fn socket_path(muster_dir: &Path) -> PathBuf {
    muster_dir.join("serve.sock")
}

/// Tells a running `muster serve` (if any) that something was committed. Best effort: the
/// commit is already durable, and serve's fallback check would see it within a second.
pub fn poke(muster_dir: &Path) {
    let path = socket_path(muster_dir);
    if !path.exists() {
        return;
    }
    if let Ok(socket) = StdDatagram::unbound() {
        let _ = socket.set_nonblocking(true);
        let _ = socket.send_to(b"changed", &path);
    }
}

/// The socket of a running serve; removed when dropped.
pub struct PokeSocket {
    path: PathBuf,
}

impl Drop for PokeSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Binds the poke socket and forwards every poke as a change. A stale socket file (a serve
/// that was killed) is replaced.
pub fn listen(muster_dir: &Path, changes: broadcast::Sender<()>) -> std::io::Result<PokeSocket> {
    let path = socket_path(muster_dir);
    let _ = std::fs::remove_file(&path);
    let socket = UnixDatagram::bind(&path)?;
    tokio::spawn(async move {
        let mut buf = [0u8; 64];
        while socket.recv(&mut buf).await.is_ok() {
            let _ = changes.send(());
        }
    });
    Ok(PokeSocket { path })
}

/// Checks the store's files once a second and reports a change when their size or time
/// moved: commits that did not poke still reach the pages.
pub fn fallback(store_path: PathBuf, changes: broadcast::Sender<()>) {
    tokio::spawn(async move {
        let mut last = fingerprint(&store_path);
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let now = fingerprint(&store_path);
            if now != last {
                last = now;
                let _ = changes.send(());
            }
        }
    });
}

type Fingerprint = Vec<Option<(u64, SystemTime)>>;

fn fingerprint(store_path: &Path) -> Fingerprint {
    let wal = PathBuf::from(format!("{}-wal", store_path.display()));
    [store_path.to_path_buf(), wal]
        .iter()
        .map(|path| {
            let meta = std::fs::metadata(path).ok()?;
            Some((meta.len(), meta.modified().ok()?))
        })
        .collect()
}
