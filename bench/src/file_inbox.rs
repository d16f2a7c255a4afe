//! The baseline: Claude Code's per-agent file inbox, reproduced faithfully in Rust so the two
//! designs are measured in one process on one disk. Each inbox is one JSON array in a file,
//! guarded by a lock directory (`<inbox>.lock`, taken with `mkdir`, retried 10 times with
//! backoff from 5 ms doubling to at most 100 ms, as proper-lockfile does), and rewritten whole
//! for every message and for every read-marking. Readers poll.

use std::fs;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One entry of an inbox array, as Claude Code stores it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InboxEntry {
    pub from: String,
    pub text: String,
    pub summary: Option<String>,
    pub timestamp: String,
    pub read: bool,
}

/// Lock retries: 10 retries, 5 ms doubling to a 100 ms cap (proper-lockfile's `retry`).
const LOCK_RETRIES: u32 = 10;
const LOCK_MIN_WAIT: Duration = Duration::from_millis(5);
const LOCK_MAX_WAIT: Duration = Duration::from_millis(100);

#[derive(Debug, thiserror::Error)]
pub enum InboxError {
    #[error("inbox {0} stayed locked through {LOCK_RETRIES} retries (ELOCKED)")]
    Locked(PathBuf),
    #[error("inbox {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("inbox {path} is not a JSON array: {source}")]
    Corrupt {
        path: PathBuf,
        source: serde_json::Error,
    },
}

/// A directory of per-agent inbox files.
#[derive(Debug, Clone)]
pub struct FileInboxes {
    dir: PathBuf,
    /// Whether every rewrite is followed by an fsync (the `full` sync setting).
    fsync: bool,
}

struct LockDir(PathBuf);

impl Drop for LockDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir(&self.0);
    }
}

impl FileInboxes {
    pub fn new(dir: &Path, fsync: bool) -> Result<FileInboxes, InboxError> {
        let dir = dir.join("inboxes");
        fs::create_dir_all(&dir).map_err(|source| InboxError::Io {
            path: dir.clone(),
            source,
        })?;
        Ok(FileInboxes { dir, fsync })
    }

    pub fn path(&self, agent: &str) -> PathBuf {
        self.dir.join(format!("{agent}.json"))
    }

    /// Appends one message: lock, re-read, push, rewrite. Claude Code first creates a missing
    /// file as `[]` outside the lock (its lock library needs the file to exist); a lock
    /// directory does not, so the baseline creates the file under the lock and avoids that
    /// race, which would otherwise lose messages. Returns how many lock attempts failed.
    pub fn send(&self, to: &str, entry: InboxEntry) -> Result<u32, InboxError> {
        let path = self.path(to);
        let (_lock, contended) = self.lock(&path)?;
        let mut entries = self.read(&path)?;
        entries.push(entry);
        self.write(&path, &entries)?;
        Ok(contended)
    }

    /// Marks every unread message read and returns them: a locked read-modify-write.
    pub fn take_unread(&self, agent: &str) -> Result<Vec<InboxEntry>, InboxError> {
        let path = self.path(agent);
        if !path.exists() {
            return Ok(Vec::new());
        }
        let (_lock, _) = self.lock(&path)?;
        let mut entries = self.read(&path)?;
        let unread: Vec<InboxEntry> = entries.iter().filter(|e| !e.read).cloned().collect();
        if !unread.is_empty() {
            entries.iter_mut().for_each(|e| e.read = true);
            self.write(&path, &entries)?;
        }
        Ok(unread)
    }

    /// Every entry, read without the lock (as a viewer would).
    pub fn all(&self, agent: &str) -> Result<Vec<InboxEntry>, InboxError> {
        self.read(&self.path(agent))
    }

    /// Writes a whole inbox at once (prefilling benchmarks).
    pub fn prefill(&self, agent: &str, entries: &[InboxEntry]) -> Result<(), InboxError> {
        self.write(&self.path(agent), entries)
    }

    fn lock(&self, path: &Path) -> Result<(LockDir, u32), InboxError> {
        let lock = path.with_extension("json.lock");
        let mut wait = LOCK_MIN_WAIT;
        for attempt in 0..=LOCK_RETRIES {
            match fs::create_dir(&lock) {
                Ok(()) => return Ok((LockDir(lock), attempt)),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    if attempt == LOCK_RETRIES {
                        break;
                    }
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(LOCK_MAX_WAIT);
                }
                Err(source) => return Err(io(&lock, source)),
            }
        }
        Err(InboxError::Locked(path.to_path_buf()))
    }

    fn read(&self, path: &Path) -> Result<Vec<InboxEntry>, InboxError> {
        let text = match fs::read(path) {
            Ok(text) => text,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(io(path, source)),
        };

        serde_json::from_slice(&text).map_err(|source| InboxError::Corrupt {
            path: path.to_path_buf(),
            source,
        })
    }

    fn write(&self, path: &Path, entries: &[InboxEntry]) -> Result<(), InboxError> {
        let text = serde_json::to_vec_pretty(entries).map_err(|source| InboxError::Corrupt {
            path: path.to_path_buf(),
            source,
        })?;
        let mut file = fs::File::create(path).map_err(|source| io(path, source))?;
        file.write_all(&text).map_err(|source| io(path, source))?;
        if self.fsync {
            file.sync_data().map_err(|source| io(path, source))?;
        }
        Ok(())
    }
}

fn io(path: &Path, source: std::io::Error) -> InboxError {
    InboxError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Sends until it gets through: a lock failure is retried whole, so the baseline loses
/// nothing and is measured at its best. Returns the failed lock rounds.
pub fn send_retrying(
    inboxes: &FileInboxes,
    to: &str,
    entry: InboxEntry,
) -> Result<u32, InboxError> {
    let mut failed_rounds = 0;
    loop {
        match inboxes.send(to, entry.clone()) {
            Ok(_) => return Ok(failed_rounds),
            Err(InboxError::Locked(_)) => failed_rounds += 1,
            Err(other) => return Err(other),
        }
    }
}

/// The baseline's no-loss check: `senders` threads each send `per_sender` messages to one
/// inbox at once; every message must be there exactly once.
pub fn no_loss_check(dir: &Path, senders: usize, per_sender: usize) -> Result<(), String> {
    let inboxes = FileInboxes::new(dir, false).map_err(|e| e.to_string())?;
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..senders)
            .map(|s| {
                let inboxes = inboxes.clone();
                scope.spawn(move || {
                    for i in 0..per_sender {
                        let entry = entry(&format!("s{s}"), &format!("s{s}-{i}"), 16);
                        send_retrying(&inboxes, "lead", entry).map_err(|e| e.to_string())?;
                    }
                    Ok::<_, String>(())
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().map_err(|_| "a sender panicked".to_owned())?)
    })?;
    let all = inboxes.all("lead").map_err(|e| e.to_string())?;
    let mut texts: Vec<&str> = all
        .iter()
        .map(|e| e.text.split(' ').next().unwrap_or_default())
        .collect();
    texts.sort_unstable();
    texts.dedup();
    if all.len() == senders * per_sender && texts.len() == all.len() {
        Ok(())
    } else {
        Err(format!(
            "the file-inbox baseline lost or duplicated messages: {} stored, {} distinct, {} sent",
            all.len(),
            texts.len(),
            senders * per_sender
        ))
    }
}

/// An entry carrying `id` first, padded to about `body_bytes`.
pub fn entry(from: &str, id: &str, body_bytes: usize) -> InboxEntry {
    let padding = "x".repeat(body_bytes.saturating_sub(id.len() + 1));
    InboxEntry {
        from: from.to_owned(),
        text: format!("{id} {padding}"),
        summary: None,
        timestamp: "2026-11-30T00:00:00.000Z".to_owned(),
        read: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_baseline_loses_nothing_with_eight_concurrent_senders() {
        let dir = tempfile::tempdir().unwrap();
        no_loss_check(dir.path(), 8, 20).unwrap();
    }

    #[test]
    fn reading_marks_read_and_a_held_lock_is_elocked_after_the_retries() {
        let dir = tempfile::tempdir().unwrap();
        let inboxes = FileInboxes::new(dir.path(), true).unwrap();
        inboxes.send("lead", entry("a", "a-1", 8)).unwrap();
        assert_eq!(inboxes.take_unread("lead").unwrap().len(), 1);
        assert!(inboxes.take_unread("lead").unwrap().is_empty());
        std::fs::create_dir(inboxes.path("lead").with_extension("json.lock")).unwrap();
        assert!(matches!(
            inboxes.send("lead", entry("a", "a-2", 8)),
            Err(InboxError::Locked(_))
        ));
    }
}
