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
//!   to bind); [`Source::Fallback`]. The run processes of this host also send the pieces of
//!   model responses as they stream ([`DeltaPublisher`]): not durable, passed to the run pages
//!   as they come, replaced by the committed response.

use std::collections::HashMap;
use std::os::unix::net::UnixDatagram as StdDatagram;
use std::path::{Path, PathBuf};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use muster_agents::runtime::RunEvent;
use muster_mailbox::live::{ChangeCause, LiveHold};
use muster_mailbox::{CommitHook, DataVersion, MailboxStore};
use muster_protocol::DeltaKind;
use serde::{Deserialize, Serialize};
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

/// A piece of a model response while it streams, published by the run process on this host
/// (not durable: what counts is the committed response that follows).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Delta {
    pub run: String,
    pub agent: String,
    /// The model request it belongs to (the agent's turn index).
    pub turn: u64,
    /// Text, tool input, or a discard (the attempt failed: what it showed is void); never
    /// thinking, which the run process does not send.
    pub kind: DeltaKind,
    pub text: String,
    /// Its place among the pieces serve received for this agent and turn, from 0 (serve
    /// numbers them; the run process leaves it out). A page that already holds the piece, in a
    /// row rendered from [`Streamed`], knows it by this.
    #[serde(default)]
    pub piece: u64,
}

/// What an agent's current model response streamed so far, as serve received it: a row
/// rendered now shows it, so a page that connects, or whose row is replaced, mid-stream does
/// not lose the pieces sent before.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Streamed {
    pub turn: u64,
    /// How many pieces `text` holds (a discard counts: it emptied the text).
    pub pieces: u64,
    pub text: String,
}

/// The streamed pieces of this host's runs: each passed on to the open pages, and kept per run
/// and agent ([`Streamed`]) until the committed response replaces it.
#[derive(Clone)]
pub struct Deltas {
    sender: broadcast::Sender<Delta>,
    streamed: Arc<Mutex<HashMap<(String, String), Streamed>>>,
}

impl Deltas {
    pub fn new(capacity: usize) -> Deltas {
        Deltas {
            sender: broadcast::channel(capacity).0,
            streamed: Default::default(),
        }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Delta> {
        self.sender.subscribe()
    }

    /// Numbers the piece, keeps it, then passes it on, under one lock: a row rendered from
    /// [`Deltas::streamed`] holds exactly the pieces numbered before it.
    pub fn publish(&self, mut delta: Delta) {
        let Ok(mut streamed) = self.streamed.lock() else {
            return;
        };
        let kept = streamed
            .entry((delta.run.clone(), delta.agent.clone()))
            .or_default();
        if kept.turn != delta.turn {
            *kept = Streamed {
                turn: delta.turn,
                ..Streamed::default()
            };
        }
        if delta.kind == DeltaKind::Discard {
            kept.text.clear();
        } else {
            kept.text.push_str(&delta.text);
        }
        delta.piece = kept.pieces;
        kept.pieces += 1;
        let _ = self.sender.send(delta);
    }

    /// What each agent of the run streamed in a turn after its `committed` model requests
    /// (an agent missing from `committed` has none); a turn already committed is forgotten.
    pub fn streamed(
        &self,
        run: &str,
        committed: &HashMap<String, u64>,
    ) -> HashMap<String, Streamed> {
        let Ok(mut streamed) = self.streamed.lock() else {
            return HashMap::new();
        };
        streamed.retain(|(of_run, agent), kept| {
            of_run != run || kept.turn > committed.get(agent).copied().unwrap_or(0)
        });
        streamed
            .iter()
            .filter(|((of_run, _), _)| of_run == run)
            .map(|((_, agent), kept)| (agent.clone(), kept.clone()))
            .collect()
    }
}

/// What starts a delta's datagram; a poke is any other datagram.
const DELTA_PREFIX: &[u8] = b"delta ";

/// The largest datagram serve reads (a delta is a few bytes to a few KiB).
const DATAGRAM_MAX: usize = 64 * 1024;

/// The run process's side: each streamed piece of text or tool input as one datagram to
/// `.muster/serve.sock`. The model's stream never waits on it: a piece goes into a bounded
/// queue that one sender thread drains in order. That thread's send waits up to
/// [`DELTA_SEND_WAIT`] for room, because the socket's queue is short (the kernel's
/// `net.unix.max_dgram_qlen`, 10 by default) and every commit's poke shares it: a busy serve
/// that does not drain it at once would otherwise lose pieces a page is showing. No serve, a
/// dead one, or one that stays full drops the piece: nothing decides on a delta.
pub struct DeltaPublisher {
    path: PathBuf,
    send_wait: Duration,
    queue: OnceLock<Option<SyncSender<Vec<u8>>>>,
}

/// How many pieces wait for the sender thread before more are dropped.
const DELTA_QUEUE: usize = 256;

/// How long the sender thread waits for room in serve's socket before it drops a piece.
const DELTA_SEND_WAIT: Duration = Duration::from_millis(200);

impl DeltaPublisher {
    pub fn new(muster_dir: &Path) -> DeltaPublisher {
        DeltaPublisher {
            path: socket_path(muster_dir),
            send_wait: DELTA_SEND_WAIT,
            queue: OnceLock::new(),
        }
    }

    pub fn publish(&self, run_id: &str, event: &RunEvent) {
        let Some(datagram) = delta_datagram(run_id, event) else {
            return;
        };
        let queue = self
            .queue
            .get_or_init(|| start_delta_sender(self.path.clone(), self.send_wait));
        if let Some(queue) = queue {
            let _ = queue.try_send(datagram);
        }
    }
}

/// The datagram of a streamed piece, or `None` for any other event (and for thinking, which
/// pages do not show).
fn delta_datagram(run_id: &str, event: &RunEvent) -> Option<Vec<u8>> {
    let RunEvent::ModelDelta {
        agent,
        turn,
        delta,
        text,
        ..
    } = event
    else {
        return None;
    };
    if *delta == DeltaKind::Thinking {
        return None;
    }
    let delta = Delta {
        run: run_id.to_owned(),
        agent: agent.clone(),
        turn: *turn,
        kind: *delta,
        text: text.clone(),
        piece: 0,
    };
    let mut datagram = DELTA_PREFIX.to_vec();
    serde_json::to_writer(&mut datagram, &delta).ok()?;
    (datagram.len() <= DATAGRAM_MAX).then_some(datagram)
}

/// The thread that sends queued pieces in order; it ends when its publisher is dropped.
/// `None` when no socket or thread can be had: the pieces are then dropped.
fn start_delta_sender(path: PathBuf, send_wait: Duration) -> Option<SyncSender<Vec<u8>>> {
    let socket = StdDatagram::unbound().ok()?;
    socket.set_write_timeout(Some(send_wait)).ok()?;
    let (queue, pieces) = std::sync::mpsc::sync_channel::<Vec<u8>>(DELTA_QUEUE);
    std::thread::Builder::new()
        .name("muster-deltas".into())
        .spawn(move || {
            for datagram in pieces {
                let _ = socket.send_to(&datagram, &path);
            }
        })
        .ok()?;
    Some(queue)
}

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
    socket: Option<PokeSocket>,
}

impl Watch {
    /// Whether serve holds this host's socket, so runs here reach it with their deltas.
    pub fn takes_deltas(&self) -> bool {
        self.socket.is_some()
    }
}

/// Starts watching the store: the backend's change feed when it has one, else (SQLite) the
/// poke socket and the fallback check.
pub async fn start(
    store: &dyn MailboxStore,
    store_path: Option<&Path>,
    muster_dir: &Path,
    changes: Changes,
    deltas: Deltas,
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
            socket: None,
        });
    }
    let Some(store_path) = store_path else {
        return Ok(Watch {
            _feed: None,
            socket: None,
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
    tokio::spawn(sqlite_watch(version, socket, changes, deltas));
    Ok(Watch {
        _feed: None,
        socket: bound,
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
/// the same commit again. A delta's datagram is passed on to the pages as it is.
async fn sqlite_watch(
    version: DataVersion,
    mut socket: Option<UnixDatagram>,
    changes: Changes,
    deltas: Deltas,
) {
    let read = |version: &DataVersion| version.read().ok();
    let mut last = read(&version);
    let mut tick = tokio::time::interval(FALLBACK_PERIOD);
    let mut buf = vec![0u8; DATAGRAM_MAX];
    loop {
        let received = async {
            match &socket {
                Some(socket) => socket.recv(&mut buf).await.ok(),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            got = received => {
                match got {
                    Some(len) => match buf[..len].strip_prefix(DELTA_PREFIX) {
                        Some(json) => {
                            if let Ok(delta) = serde_json::from_slice::<Delta>(json) {
                                deltas.publish(delta);
                            }
                        }
                        None => {
                            last = read(&version);
                            let _ = changes.send(Source::Poke);
                        }
                    },
                    None => {
                        tracing::warn!("serve's poke socket failed: changes show within a second instead");
                        socket = None;
                    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(text: &str) -> RunEvent {
        RunEvent::ModelDelta {
            agent: "alice".into(),
            turn: 4,
            delta: DeltaKind::Text,
            attempt: 1,
            text: text.into(),
        }
    }

    /// More pieces than the kernel queues for a datagram socket (10 by default), sent while
    /// serve is not reading, all reach it in order once it reads: the publisher waits for
    /// room instead of dropping them (a non-blocking send lost every piece past the tenth).
    #[test]
    fn pieces_past_the_sockets_queue_wait_for_room_and_arrive_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let serve = StdDatagram::bind(socket_path(dir.path())).unwrap();
        serve
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let publisher = DeltaPublisher {
            send_wait: Duration::from_secs(30),
            ..DeltaPublisher::new(dir.path())
        };
        let count = 40;
        for i in 0..count {
            publisher.publish("r1", &piece(&format!("piece {i}")));
        }
        let mut buf = vec![0u8; DATAGRAM_MAX];
        for i in 0..count {
            let len = serve.recv(&mut buf).expect("a piece was dropped");
            let json = buf[..len].strip_prefix(DELTA_PREFIX).unwrap();
            let delta: Delta = serde_json::from_slice(json).unwrap();
            assert_eq!(delta.text, format!("piece {i}"));
            assert_eq!((delta.run.as_str(), delta.turn), ("r1", 4));
        }
    }

    fn delta(agent: &str, turn: u64, kind: DeltaKind, text: &str) -> Delta {
        Delta {
            run: "r1".into(),
            agent: agent.into(),
            turn,
            kind,
            text: text.into(),
            piece: 0,
        }
    }

    /// Serve keeps what each agent streamed so far and numbers the pieces it passes on, so a
    /// row rendered mid-stream (a page that connects late, or a row replaced by a commit)
    /// holds the text and says how many pieces it holds; a discard empties it, a new turn
    /// starts over, and a committed turn is forgotten.
    #[test]
    fn serve_keeps_the_streamed_text_per_agent_and_numbers_its_pieces() {
        let deltas = Deltas::new(16);
        let mut page = deltas.subscribe();
        let committed = |alice: u64| HashMap::from([("alice".to_owned(), alice)]);
        deltas.publish(delta("alice", 4, DeltaKind::Text, "Wrote "));
        deltas.publish(delta("alice", 4, DeltaKind::Text, "hello.txt,"));
        deltas.publish(delta("bob", 2, DeltaKind::Text, "Standing"));
        let alice = |streamed: HashMap<String, Streamed>| streamed.get("alice").cloned();
        assert_eq!(
            alice(deltas.streamed("r1", &committed(3))),
            Some(Streamed {
                turn: 4,
                pieces: 2,
                text: "Wrote hello.txt,".into()
            })
        );
        assert_eq!(deltas.streamed("r2", &committed(3)), HashMap::new());
        let numbered: Vec<(String, u64)> = (0..3)
            .map(|_| page.try_recv().unwrap())
            .map(|d| (d.agent, d.piece))
            .collect();
        assert_eq!(
            numbered,
            [("alice".into(), 0), ("alice".into(), 1), ("bob".into(), 0)]
        );
        deltas.publish(delta("alice", 4, DeltaKind::Discard, ""));
        deltas.publish(delta("alice", 4, DeltaKind::Text, "Retried"));
        let retried = alice(deltas.streamed("r1", &committed(3))).unwrap();
        assert_eq!((retried.pieces, retried.text.as_str()), (4, "Retried"));
        deltas.publish(delta("alice", 5, DeltaKind::Text, "Next"));
        let next = alice(deltas.streamed("r1", &committed(4))).unwrap();
        assert_eq!((next.turn, next.pieces, next.text.as_str()), (5, 1, "Next"));
        assert_eq!(alice(deltas.streamed("r1", &committed(5))), None);
        assert_eq!(
            alice(deltas.streamed("r1", &committed(3))),
            None,
            "forgotten"
        );
    }

    /// No serve: a piece is dropped at once, and publishing never blocks the stream.
    #[test]
    fn without_serve_pieces_are_dropped_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let publisher = DeltaPublisher::new(dir.path());
        for i in 0..(DELTA_QUEUE * 2) {
            publisher.publish("r1", &piece(&format!("piece {i}")));
        }
    }
}
