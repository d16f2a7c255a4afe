//! The workspace's files hashed, to see what a Bash command changed: take a
//! [`WorkspaceSnapshot`] before the command and one after, and [`WorkspaceSnapshot::diff`]
//! them.
//!
//! The walk follows the rules of `Glob`/`Grep`/`LS`: gitignore-aware (also outside a git
//! repository), hidden files included, symbolic links not followed (a link is hashed by its
//! target's path). It skips `.git/` and `.muster/` (the store, logs and plans change while
//! other agents work; they are never a teammate's change). Only regular files are read: a
//! FIFO, socket or device is recorded as present (opening a FIFO would block). The hashes are
//! for comparing two snapshots in one process: never store them, they may differ between
//! builds.
//!
//! # Cost
//! [`WorkspaceSnapshot::take_reusing`] takes the previous snapshot of the same root and
//! re-hashes only files whose metadata (size, mtime, ctime, inode, device) changed since it;
//! a file whose mtime or ctime was within [`SnapshotLimits::racy_margin`] of the moment the
//! previous snapshot started is hashed again anyway (a write in the same timestamp tick leaves the metadata
//! equal: git's "racily clean" entries). The walk stats every file first and fails with
//! [`VerificationError::WorkspaceTooLarge`] before reading anything when the workspace has
//! more files, or more bytes to hash, than its [`SnapshotLimits`].
//!
//! Taking a snapshot reads files: it is blocking work (call it from `spawn_blocking`).

use std::collections::BTreeMap;
use std::hash::Hasher;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::VerificationError;

/// Directories never walked.
pub const SKIPPED_DIRECTORIES: &[&str] = &[".git", ".muster"];

/// The default [`SnapshotLimits::racy_margin`]: more than file-system timestamp granularity
/// (coarse kernel clock ticks; 2 s on FAT).
pub const RACY_MARGIN: Duration = Duration::from_secs(3);

/// How much one snapshot may cost before it gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotLimits {
    /// Files (not ignored, not skipped) the workspace may hold.
    pub max_files: usize,
    /// Bytes the snapshot may read (files whose hash is reused cost nothing).
    pub max_hashed_bytes: u64,
    /// How much older than a snapshot's start a file's timestamps must be for the next
    /// snapshot to trust its hash without reading it again.
    pub racy_margin: Duration,
}

impl Default for SnapshotLimits {
    /// 100 000 files, 512 MiB read: a normal project's sources are far below; a workspace
    /// beyond is not hashed around every Bash call.
    fn default() -> Self {
        SnapshotLimits {
            max_files: 100_000,
            max_hashed_bytes: 512 * 1024 * 1024,
            racy_margin: RACY_MARGIN,
        }
    }
}

/// What a file held when the snapshot was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fingerprint {
    /// Its length and content hash.
    Content { len: u64, hash: u64 },
    /// A symbolic link, by the hash of its target's path.
    Link { hash: u64 },
    /// A FIFO, socket or device: present, never read.
    Special,
    /// It could not be read (permissions, removed during the walk).
    Unreadable,
}

/// The metadata that must be unchanged for a regular file's fingerprint to be reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    inode: u64,
    device: u64,
}

impl Stamp {
    #[cfg(unix)]
    fn of(metadata: &std::fs::Metadata) -> Option<Stamp> {
        use std::os::unix::fs::MetadataExt;
        let nanos =
            |seconds: i64, nanos: i64| i128::from(seconds) * 1_000_000_000 + i128::from(nanos);
        Some(Stamp {
            len: metadata.len(),
            mtime_ns: nanos(metadata.mtime(), metadata.mtime_nsec()),
            ctime_ns: nanos(metadata.ctime(), metadata.ctime_nsec()),
            inode: metadata.ino(),
            device: metadata.dev(),
        })
    }

    /// Without a change time no stamp is trustworthy: every file is read.
    #[cfg(not(unix))]
    fn of(_metadata: &std::fs::Metadata) -> Option<Stamp> {
        None
    }

    /// Both timestamps are older than `settled_before` (nanoseconds since the epoch).
    fn settled(&self, settled_before: i128) -> bool {
        self.mtime_ns < settled_before && self.ctime_ns < settled_before
    }
}

/// One file of a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    fingerprint: Fingerprint,
    /// Set when the next snapshot may reuse `fingerprint` if the file's stamp is still this.
    reusable: Option<Stamp>,
}

/// The workspace's files (relative `/`-separated paths) and their fingerprints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceSnapshot {
    root: PathBuf,
    files: BTreeMap<String, Entry>,
    /// Files read (not reused) to take this snapshot.
    hashed_files: usize,
}

/// How two snapshots differ, each list sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotDiff {
    pub created: Vec<String>,
    pub modified: Vec<String>,
    pub deleted: Vec<String>,
}

impl SnapshotDiff {
    /// Every path that differs (created, modified or deleted), sorted: the `changed` of a
    /// [`super::BashEffects`] record.
    pub fn changed_paths(&self) -> Vec<String> {
        let mut paths: Vec<String> = self
            .created
            .iter()
            .chain(&self.modified)
            .chain(&self.deleted)
            .cloned()
            .collect();
        paths.sort();
        paths
    }

    pub fn is_empty(&self) -> bool {
        self.created.is_empty() && self.modified.is_empty() && self.deleted.is_empty()
    }
}

/// One file found by the walk, before it is fingerprinted.
struct Found {
    name: String,
    path: PathBuf,
    kind: FoundKind,
    stamp: Option<Stamp>,
}

enum FoundKind {
    Regular,
    Link,
    Special,
    Unreadable,
}

impl WorkspaceSnapshot {
    /// Hashes every file under `root` (see the module documentation for which), within the
    /// default [`SnapshotLimits`].
    pub fn take(root: &Path) -> Result<WorkspaceSnapshot, VerificationError> {
        WorkspaceSnapshot::take_reusing(root, None, SnapshotLimits::default())
    }

    /// Like [`WorkspaceSnapshot::take`], reusing the hashes of `previous` (a snapshot of the
    /// same root) for files whose metadata did not change, within `limits`.
    pub fn take_reusing(
        root: &Path,
        previous: Option<&WorkspaceSnapshot>,
        limits: SnapshotLimits,
    ) -> Result<WorkspaceSnapshot, VerificationError> {
        let started = SystemTime::now();
        let metadata = std::fs::metadata(root).map_err(|source| VerificationError::Workspace {
            root: root.to_path_buf(),
            detail: source.to_string(),
        })?;
        if !metadata.is_dir() {
            return Err(VerificationError::Workspace {
                root: root.to_path_buf(),
                detail: "not a directory".to_owned(),
            });
        }
        // A root that cannot be listed would look empty: every file deleted.
        std::fs::read_dir(root).map_err(|source| VerificationError::Workspace {
            root: root.to_path_buf(),
            detail: source.to_string(),
        })?;
        let previous = previous.filter(|previous| previous.root == root);
        let found = walk(root, limits.max_files)?;
        // What must be read: regular files whose previous hash cannot be reused.
        let reused = |file: &Found| -> Option<Fingerprint> {
            let stamp = file.stamp?;
            let entry = previous?.files.get(&file.name)?;
            (entry.reusable == Some(stamp)).then_some(entry.fingerprint)
        };
        let to_read: u64 = found
            .iter()
            .filter(|file| matches!(file.kind, FoundKind::Regular) && reused(file).is_none())
            .map(|file| file.stamp.map_or(0, |stamp| stamp.len))
            .fold(0, u64::saturating_add);
        if to_read > limits.max_hashed_bytes {
            return Err(VerificationError::WorkspaceTooLarge {
                root: root.to_path_buf(),
                detail: format!(
                    "{to_read} bytes to hash, more than the limit of {}",
                    limits.max_hashed_bytes
                ),
            });
        }
        let settled_before = started
            .checked_sub(limits.racy_margin)
            .and_then(|time| time.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(i128::MIN, |since| {
                i128::try_from(since.as_nanos()).unwrap_or(i128::MIN)
            });
        let mut files = BTreeMap::new();
        let mut hashed_files = 0;
        for file in found {
            let entry = match file.kind {
                FoundKind::Regular => match reused(&file) {
                    Some(fingerprint) => Entry {
                        fingerprint,
                        reusable: file.stamp,
                    },
                    None => {
                        hashed_files += 1;
                        let fingerprint = fingerprint_file(&file.path);
                        Entry {
                            fingerprint,
                            reusable: file.stamp.filter(|stamp| {
                                stamp.settled(settled_before)
                                    && !matches!(fingerprint, Fingerprint::Unreadable)
                            }),
                        }
                    }
                },
                FoundKind::Link => Entry {
                    fingerprint: std::fs::read_link(&file.path)
                        .map(|target| Fingerprint::Link {
                            hash: hash_bytes(target.to_string_lossy().as_bytes()),
                        })
                        .unwrap_or(Fingerprint::Unreadable),
                    reusable: None,
                },
                FoundKind::Special => Entry {
                    fingerprint: Fingerprint::Special,
                    reusable: None,
                },
                FoundKind::Unreadable => Entry {
                    fingerprint: Fingerprint::Unreadable,
                    reusable: None,
                },
            };
            files.insert(file.name, entry);
        }
        Ok(WorkspaceSnapshot {
            root: root.to_path_buf(),
            files,
            hashed_files,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// How many files the snapshot holds.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// How many files were read to take it (the others' hashes were reused).
    pub fn hashed_files(&self) -> usize {
        self.hashed_files
    }

    /// Whether `path` (relative, `/`-separated) is in the snapshot.
    pub fn contains(&self, path: &str) -> bool {
        self.files.contains_key(path)
    }

    /// What changed from `before` to `self`. A file unreadable in either snapshot counts as
    /// modified unless it was unreadable in both.
    pub fn diff(&self, before: &WorkspaceSnapshot) -> SnapshotDiff {
        let mut diff = SnapshotDiff::default();
        for (path, after) in &self.files {
            match before.files.get(path) {
                None => diff.created.push(path.clone()),
                Some(earlier) if earlier.fingerprint != after.fingerprint => {
                    diff.modified.push(path.clone());
                }
                Some(_) => {}
            }
        }
        for path in before.files.keys() {
            if !self.files.contains_key(path) {
                diff.deleted.push(path.clone());
            }
        }
        diff
    }
}

/// Every file under `root` the snapshot covers, with its metadata; more than `max_files` is
/// an error (found before anything is read).
fn walk(root: &Path, max_files: usize) -> Result<Vec<Found>, VerificationError> {
    // The tools' walker (the same gitignore rules as Glob and Grep), skipping more.
    let walker = crate::tools::walk::walker(root)
        .filter_entry(|entry| {
            !(entry.depth() > 0
                && entry.file_type().is_some_and(|kind| kind.is_dir())
                && SKIPPED_DIRECTORIES
                    .iter()
                    .any(|skipped| entry.file_name() == *skipped))
        })
        .build();
    let mut found = Vec::new();
    for entry in walker {
        // An entry that vanished or cannot be listed is simply not part of the snapshot.
        let Ok(entry) = entry else { continue };
        let Some(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            continue;
        }
        let Ok(relative) = entry.path().strip_prefix(root) else {
            continue;
        };
        let name = relative
            .components()
            .map(|component| component.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        if name.is_empty() {
            continue;
        }
        if found.len() >= max_files {
            return Err(VerificationError::WorkspaceTooLarge {
                root: root.to_path_buf(),
                detail: format!("more than {max_files} files"),
            });
        }
        // Not followed: the link's own metadata.
        let metadata = entry.metadata().ok();
        let (kind, stamp) = if kind.is_symlink() {
            (FoundKind::Link, None)
        } else if kind.is_file() {
            match &metadata {
                Some(metadata) => (FoundKind::Regular, Stamp::of(metadata)),
                None => (FoundKind::Unreadable, None),
            }
        } else {
            (FoundKind::Special, None)
        };
        found.push(Found {
            name,
            path: entry.into_path(),
            kind,
            stamp,
        });
    }
    Ok(found)
}

fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    hasher.write(bytes);
    hasher.finish()
}

fn fingerprint_file(path: &Path) -> Fingerprint {
    let Ok(mut file) = std::fs::File::open(path) else {
        return Fingerprint::Unreadable;
    };
    let mut hasher = std::hash::DefaultHasher::new();
    let mut buffer = vec![0_u8; 64 * 1024];
    let mut len: u64 = 0;
    loop {
        match file.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => {
                let chunk = buffer.get(..read).unwrap_or_default();
                hasher.write(chunk);
                len = len.saturating_add(u64::try_from(read).unwrap_or(u64::MAX));
            }
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Fingerprint::Unreadable,
        }
    }
    Fingerprint::Content {
        len,
        hash: hasher.finish(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_lists_created_modified_and_deleted_files_and_respects_gitignore() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join(".gitignore"), "target/\n*.log\n").unwrap();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::create_dir_all(root.join(".muster/plans")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join("src/a.rs"), "a").unwrap();
        std::fs::write(root.join("src/b.rs"), "b").unwrap();
        std::fs::write(root.join("src/c.rs"), "c").unwrap();
        let before = WorkspaceSnapshot::take(root).unwrap();
        assert!(before.contains("src/a.rs") && before.contains(".gitignore"));

        std::fs::write(root.join("src/a.rs"), "a changed").unwrap();
        std::fs::write(root.join("src/b.rs"), "b").unwrap(); // same content: not a change
        std::fs::remove_file(root.join("src/c.rs")).unwrap();
        std::fs::write(root.join("src/d.rs"), "d").unwrap();
        std::fs::create_dir_all(root.join("target")).unwrap();
        std::fs::write(root.join("target/out.bin"), "x").unwrap();
        std::fs::write(root.join("run.log"), "x").unwrap();
        std::fs::write(root.join(".muster/plans/p.md"), "x").unwrap();
        std::fs::write(root.join(".git/index"), "x").unwrap();
        let after = WorkspaceSnapshot::take(root).unwrap();

        let diff = after.diff(&before);
        assert_eq!(diff.created, vec!["src/d.rs"]);
        assert_eq!(diff.modified, vec!["src/a.rs"]);
        assert_eq!(diff.deleted, vec!["src/c.rs"]);
        assert_eq!(
            diff.changed_paths(),
            vec!["src/a.rs", "src/c.rs", "src/d.rs"]
        );
        assert!(after.diff(&after).is_empty());
    }

    fn write_files(root: &Path, count: usize) {
        for index in 0..count {
            std::fs::write(root.join(format!("f{index}.txt")), format!("file {index}")).unwrap();
        }
    }

    #[test]
    fn unchanged_files_are_not_read_again_and_changed_ones_are() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write_files(root, 5);
        // No margin: files written before the snapshot started count as settled.
        let limits = SnapshotLimits {
            racy_margin: Duration::ZERO,
            ..SnapshotLimits::default()
        };
        let first = WorkspaceSnapshot::take_reusing(root, None, limits).unwrap();
        assert_eq!(first.hashed_files(), 5);
        let second = WorkspaceSnapshot::take_reusing(root, Some(&first), limits).unwrap();
        assert_eq!(second.hashed_files(), 0);
        assert!(second.diff(&first).is_empty());
        std::fs::write(root.join("f2.txt"), "changed, and longer").unwrap();
        let third = WorkspaceSnapshot::take_reusing(root, Some(&second), limits).unwrap();
        assert_eq!(third.hashed_files(), 1);
        assert_eq!(third.diff(&second).modified, vec!["f2.txt"]);
        // A snapshot of another root is no base.
        let other = tempfile::tempdir().unwrap();
        write_files(other.path(), 1);
        let elsewhere = WorkspaceSnapshot::take_reusing(other.path(), Some(&third), limits);
        assert_eq!(elsewhere.unwrap().hashed_files(), 1);
    }

    #[test]
    fn a_same_size_rewrite_within_the_racy_margin_is_still_seen() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("a.txt"), "aaa").unwrap();
        let before =
            WorkspaceSnapshot::take_reusing(root, None, SnapshotLimits::default()).unwrap();
        // Likely the same timestamp tick, same size and inode: only the content differs.
        std::fs::write(root.join("a.txt"), "bbb").unwrap();
        let after = WorkspaceSnapshot::take_reusing(root, Some(&before), SnapshotLimits::default())
            .unwrap();
        assert_eq!(after.hashed_files(), 1, "a fresh file is never trusted");
        assert_eq!(after.diff(&before).modified, vec!["a.txt"]);
    }

    #[test]
    fn limits_stop_the_snapshot_before_it_reads_anything() {
        let dir = tempfile::tempdir().unwrap();
        write_files(dir.path(), 3);
        let too_many = SnapshotLimits {
            max_files: 2,
            ..SnapshotLimits::default()
        };
        let too_big = SnapshotLimits {
            max_hashed_bytes: 5,
            ..SnapshotLimits::default()
        };
        for (limits, detail) in [
            (too_many, "more than 2 files"),
            (too_big, "more than the limit of 5"),
        ] {
            match WorkspaceSnapshot::take_reusing(dir.path(), None, limits) {
                Err(VerificationError::WorkspaceTooLarge { detail: found, .. }) => {
                    assert!(found.contains(detail), "{found}");
                }
                other => panic!("expected too large, got {other:?}"),
            }
        }
    }

    #[test]
    fn a_fifo_is_present_but_never_opened() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let made = std::process::Command::new("mkfifo")
            .arg(root.join("pipe"))
            .status()
            .unwrap();
        assert!(made.success());
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = sender.send(WorkspaceSnapshot::take(&root));
        });
        let snapshot = receiver
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the snapshot blocked on the FIFO")
            .unwrap();
        assert!(snapshot.contains("pipe"));
        assert_eq!(snapshot.hashed_files(), 0);
    }

    #[test]
    fn a_missing_root_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        assert!(matches!(
            WorkspaceSnapshot::take(&missing),
            Err(VerificationError::Workspace { .. })
        ));
    }
}
