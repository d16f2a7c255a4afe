//! The workspace's files hashed, to see what a Bash command changed: take a
//! [`WorkspaceSnapshot`] before the command and one after, and [`WorkspaceSnapshot::diff`]
//! them.
//!
//! The walk follows the rules of `Glob`/`Grep`/`LS`: gitignore-aware (also outside a git
//! repository), hidden files included, symbolic links not followed (a link is hashed by its
//! target's path). It skips `.git/` and `.muster/` (the store, logs and plans change while
//! other agents work; they are never a teammate's change). The hashes are for comparing two
//! snapshots in one process: never store them, they may differ between builds.
//!
//! Taking a snapshot reads every file: it is blocking work (call it from `spawn_blocking`).

use std::collections::BTreeMap;
use std::hash::Hasher;
use std::io::Read;
use std::path::{Path, PathBuf};

use ignore::WalkBuilder;
use serde::{Deserialize, Serialize};

use super::VerificationError;

/// Directories never walked.
pub const SKIPPED_DIRECTORIES: &[&str] = &[".git", ".muster"];

/// What a file held when the snapshot was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fingerprint {
    /// Its length and content hash.
    Content { len: u64, hash: u64 },
    /// A symbolic link, by the hash of its target's path.
    Link { hash: u64 },
    /// It could not be read (permissions, removed during the walk).
    Unreadable,
}

/// The workspace's files (relative `/`-separated paths) and their fingerprints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceSnapshot {
    root: PathBuf,
    files: BTreeMap<String, Fingerprint>,
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

impl WorkspaceSnapshot {
    /// Hashes every file under `root` (see the module documentation for which).
    pub fn take(root: &Path) -> Result<WorkspaceSnapshot, VerificationError> {
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
        let mut files = BTreeMap::new();
        let walker = WalkBuilder::new(root)
            .hidden(false)
            .git_ignore(true)
            .git_global(false)
            .git_exclude(true)
            .require_git(false)
            .ignore(true)
            .parents(true)
            .follow_links(false)
            .filter_entry(|entry| {
                !(entry.depth() > 0
                    && entry.file_type().is_some_and(|kind| kind.is_dir())
                    && SKIPPED_DIRECTORIES
                        .iter()
                        .any(|skipped| entry.file_name() == *skipped))
            })
            .build();
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
            let fingerprint = if kind.is_symlink() {
                std::fs::read_link(entry.path())
                    .map(|target| Fingerprint::Link {
                        hash: hash_bytes(target.to_string_lossy().as_bytes()),
                    })
                    .unwrap_or(Fingerprint::Unreadable)
            } else {
                fingerprint_file(entry.path())
            };
            files.insert(name, fingerprint);
        }
        Ok(WorkspaceSnapshot {
            root: root.to_path_buf(),
            files,
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
                Some(earlier) if earlier != after => diff.modified.push(path.clone()),
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
