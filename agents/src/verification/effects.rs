//! Measuring what a non-read-only Bash call changes, for its `bash_effects` record:
//! [`BashMeasurement::begin`] waits for the workspace's Bash lock and snapshots the workspace;
//! [`BashMeasurement::finish`] (after the command) snapshots again, diffs, releases the lock
//! and returns the [`BashEffects`].
//!
//! # Serialised per workspace
//! The diff of two snapshots is everything that changed in between, whoever changed it. So
//! non-read-only Bash calls take a process-wide lock keyed by the canonical workspace path,
//! held from the snapshot before the command to the one after: two agents' commands in one
//! workspace never overlap, and neither is credited with the other's files. File tools take
//! no lock: their changes are attributed from their own inputs, and making every `Write` wait
//! for a long `cargo test` would serialise the team. Instead they announce the paths they
//! write ([`FileEdits::begin`], held while the tool runs), and a path another agent's file
//! tool wrote while a command was measured is left out of that command's record (it is
//! attributed to the edit; should the command have changed it too, that goes unrecorded).
//! Read-only Bash takes no lock either: it changes nothing. Agents in other processes are not
//! serialised (a run's agents share one process).
//!
//! # Cost
//! The lock also keeps the workspace's newest snapshot, so each snapshot re-reads only files
//! whose metadata changed since the previous one ([`WorkspaceSnapshot::take_reusing`]). A
//! snapshot that fails or exceeds its [`SnapshotLimits`] never stops the command: the record
//! then says its effects are unknown (`effects_unknown`), and the report says evidence may be
//! missing rather than inventing any.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use tokio::sync::{OwnedMutexGuard, watch};

use super::paths::Root;
use super::snapshot::{SnapshotLimits, WorkspaceSnapshot};
use super::tool_log::BashEffects;

/// One workspace's Bash lock, guarding its newest snapshot.
struct WorkspaceSlot {
    newest: Arc<tokio::sync::Mutex<Option<WorkspaceSnapshot>>>,
    /// How many calls wait for the lock.
    waiting: watch::Sender<usize>,
    edits: Mutex<EditJournal>,
}

/// What file tools write in the workspace, as relative paths.
#[derive(Debug, Default)]
struct EditJournal {
    /// Paths being written now, with how many tools write each.
    in_flight: BTreeMap<String, usize>,
    /// Paths written since the measured command began (`None`: no command is measured).
    during_command: Option<BTreeSet<String>>,
}

impl WorkspaceSlot {
    fn journal(&self) -> std::sync::MutexGuard<'_, EditJournal> {
        self.edits.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Slots by canonical workspace path. Never pruned: a process works in a handful of
/// workspaces.
fn slot(root: &Path) -> (PathBuf, Arc<WorkspaceSlot>) {
    static SLOTS: OnceLock<Mutex<HashMap<PathBuf, Arc<WorkspaceSlot>>>> = OnceLock::new();
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let mut slots = SLOTS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let slot = slots
        .entry(root.clone())
        .or_insert_with(|| {
            Arc::new(WorkspaceSlot {
                newest: Arc::new(tokio::sync::Mutex::new(None)),
                waiting: watch::Sender::new(0),
                edits: Mutex::default(),
            })
        })
        .clone();
    (root, slot)
}

/// How many non-read-only Bash calls of this process wait for `root`'s lock while another
/// holds it, as it changes (for observers: a UI, tests).
pub fn bash_calls_waiting(root: &Path) -> watch::Receiver<usize> {
    slot(root).1.waiting.subscribe()
}

/// Counts a waiting call until dropped (also when the wait is cancelled).
struct Waiting(Arc<WorkspaceSlot>);

impl Waiting {
    fn new(slot: Arc<WorkspaceSlot>) -> Waiting {
        slot.waiting.send_modify(|count| *count += 1);
        Waiting(slot)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0
            .waiting
            .send_modify(|count| *count = count.saturating_sub(1));
    }
}

/// The paths a file tool is writing, announced until dropped (see the module documentation).
pub struct FileEdits {
    slot: Arc<WorkspaceSlot>,
    paths: Vec<String>,
}

impl FileEdits {
    /// Announces that a file tool writes `paths` (as given in its input: relative to `root`,
    /// or absolute) in workspace `root`, until the returned value is dropped.
    pub fn begin<'a>(root: &Path, paths: impl IntoIterator<Item = &'a str>) -> FileEdits {
        let (_, slot) = slot(root);
        // Absolute paths under the root as given or as resolved become relative; paths
        // outside it are never in a snapshot.
        let root = Root::new(root);
        let paths: Vec<String> = paths
            .into_iter()
            .filter_map(|path| root.relative(path))
            .filter(|path| !path.starts_with('/'))
            .collect();
        {
            let mut journal = slot.journal();
            for path in &paths {
                *journal.in_flight.entry(path.clone()).or_default() += 1;
                if let Some(during) = &mut journal.during_command {
                    during.insert(path.clone());
                }
            }
        }
        FileEdits { slot, paths }
    }
}

impl Drop for FileEdits {
    fn drop(&mut self) {
        let mut journal = self.slot.journal();
        for path in &self.paths {
            if let Some(count) = journal.in_flight.get_mut(path) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    journal.in_flight.remove(path);
                }
            }
        }
    }
}

/// A Bash call being measured: holds the workspace's lock until [`BashMeasurement::finish`]
/// (or until dropped, when the call is cancelled).
pub struct BashMeasurement {
    slot: Arc<WorkspaceSlot>,
    root: PathBuf,
    limits: SnapshotLimits,
    lock: OwnedMutexGuard<Option<WorkspaceSnapshot>>,
    before: Result<WorkspaceSnapshot, String>,
}

impl BashMeasurement {
    /// Waits for the Bash lock of workspace `root`, then snapshots it (on a blocking thread).
    /// Never fails: a failed snapshot is kept as the reason the effects will be unknown.
    pub async fn begin(root: &Path, limits: SnapshotLimits) -> BashMeasurement {
        let (root, slot) = slot(root);
        // Counted as waiting only when another call holds the lock.
        let mut lock = match slot.newest.clone().try_lock_owned() {
            Ok(lock) => lock,
            Err(_) => {
                let waiting = Waiting::new(slot.clone());
                let lock = slot.newest.clone().lock_owned().await;
                drop(waiting);
                lock
            }
        };
        {
            // Edits in flight now may land after the snapshot: they are not the command's.
            let mut journal = slot.journal();
            journal.during_command = Some(journal.in_flight.keys().cloned().collect());
        }
        let previous = lock.take();
        let task_root = root.clone();
        let taken = tokio::task::spawn_blocking(move || {
            let before = WorkspaceSnapshot::take_reusing(&task_root, previous.as_ref(), limits);
            (previous, before)
        })
        .await;
        let before = match taken {
            Ok((previous, before)) => {
                if before.is_err() {
                    *lock = previous;
                }
                before.map_err(|error| error.to_string())
            }
            Err(error) => Err(format!("the snapshot task failed: {error}")),
        };
        BashMeasurement {
            slot,
            root,
            limits,
            lock,
            before: before.map_err(|error| format!("before the command: {error}")),
        }
    }

    /// Snapshots the workspace again, releases the lock and returns the call's record.
    pub async fn finish(
        mut self,
        tool_use_id: &str,
        command: &str,
        exit_code: Option<i32>,
    ) -> BashEffects {
        let before = self.before;
        let cached = self.lock.take();
        let root = self.root;
        let limits = self.limits;
        let taken = tokio::task::spawn_blocking(move || {
            let base = before.as_ref().ok().or(cached.as_ref());
            let after = WorkspaceSnapshot::take_reusing(&root, base, limits);
            (before, cached, after)
        })
        .await;
        let edited = self
            .slot
            .journal()
            .during_command
            .take()
            .unwrap_or_default();
        let (changed, effects_unknown) = match taken {
            Ok((Ok(before), _, Ok(after))) => {
                let mut changed = after.diff(&before).changed_paths();
                changed.retain(|path| !edited.contains(path));
                *self.lock = Some(after);
                (changed, None)
            }
            Ok((Err(reason), _, after)) => {
                *self.lock = after.ok();
                (Vec::new(), Some(reason))
            }
            Ok((Ok(before), _, Err(error))) => {
                // Stale, but reuse is checked file by file against the metadata.
                *self.lock = Some(before);
                (Vec::new(), Some(format!("after the command: {error}")))
            }
            Err(error) => (
                Vec::new(),
                Some(format!(
                    "after the command: the snapshot task failed: {error}"
                )),
            ),
        };
        BashEffects {
            tool_use_id: tool_use_id.to_owned(),
            command: command.to_owned(),
            exit_code,
            changed,
            effects_unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> SnapshotLimits {
        SnapshotLimits::default()
    }

    #[tokio::test]
    async fn a_measurement_lists_what_changed_between_begin_and_finish() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("kept.txt"), "k").unwrap();
        std::fs::write(dir.path().join("gone.txt"), "g").unwrap();
        let measurement = BashMeasurement::begin(dir.path(), limits()).await;
        std::fs::write(dir.path().join("new.txt"), "n").unwrap();
        std::fs::remove_file(dir.path().join("gone.txt")).unwrap();
        let effects = measurement.finish("toolu_1", "do it", Some(0)).await;
        assert_eq!(effects.changed, vec!["gone.txt", "new.txt"]);
        assert_eq!(effects.effects_unknown, None);
        assert_eq!(effects.exit_code, Some(0));
        // The next call starts from the cached snapshot and sees only its own change.
        let measurement = BashMeasurement::begin(dir.path(), limits()).await;
        std::fs::write(dir.path().join("kept.txt"), "changed").unwrap();
        let effects = measurement.finish("toolu_2", "again", Some(1)).await;
        assert_eq!(effects.changed, vec!["kept.txt"]);
    }

    #[tokio::test]
    async fn a_workspace_beyond_the_limits_has_unknown_effects() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["a", "b", "c"] {
            std::fs::write(dir.path().join(name), name).unwrap();
        }
        let tight = SnapshotLimits {
            max_files: 2,
            ..limits()
        };
        let measurement = BashMeasurement::begin(dir.path(), tight).await;
        std::fs::write(dir.path().join("d"), "d").unwrap();
        let effects = measurement.finish("toolu_1", "touch d", Some(0)).await;
        assert!(effects.changed.is_empty());
        let reason = effects.effects_unknown.unwrap();
        assert!(
            reason.starts_with("before the command:") && reason.contains("more than 2 files"),
            "{reason}"
        );
    }

    #[tokio::test]
    async fn a_missing_workspace_has_unknown_effects_and_no_panic() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        let measurement = BashMeasurement::begin(&missing, limits()).await;
        let effects = measurement.finish("toolu_1", "true", None).await;
        assert!(effects.changed.is_empty());
        assert!(effects.effects_unknown.is_some());
    }

    #[tokio::test]
    async fn files_written_by_file_tools_during_a_command_are_left_out_of_its_record() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src")).unwrap();
        // An edit in flight when the command begins, finishing during it.
        let early = FileEdits::begin(root, ["src/early.rs"]);
        let measurement = BashMeasurement::begin(root, limits()).await;
        std::fs::write(root.join("src/early.rs"), "e").unwrap();
        drop(early);
        // An edit made while the command runs, by absolute path.
        let absolute = root.join("src/during.rs");
        let during = FileEdits::begin(root, [absolute.to_str().unwrap()]);
        std::fs::write(&absolute, "d").unwrap();
        drop(during);
        std::fs::write(root.join("src/command.rs"), "c").unwrap();
        let effects = measurement.finish("toolu_1", "cmd", Some(0)).await;
        assert_eq!(effects.changed, vec!["src/command.rs"]);
        // An edit after the command is nobody's concern here; the next command does not skip
        // the paths of earlier edits.
        let later = FileEdits::begin(root, ["src/early.rs"]);
        drop(later);
        let measurement = BashMeasurement::begin(root, limits()).await;
        std::fs::write(root.join("src/early.rs"), "changed by the command").unwrap();
        let effects = measurement.finish("toolu_2", "cmd", Some(0)).await;
        assert_eq!(effects.changed, vec!["src/early.rs"]);
    }

    #[tokio::test]
    async fn the_lock_is_per_workspace_and_counts_its_waiters() {
        let one = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let first = BashMeasurement::begin(one.path(), limits()).await;
        // Another workspace is not blocked.
        let elsewhere = BashMeasurement::begin(other.path(), limits()).await;
        let mut waiting = bash_calls_waiting(one.path());
        let root = one.path().to_path_buf();
        let second = tokio::spawn(async move {
            BashMeasurement::begin(&root, SnapshotLimits::default())
                .await
                .finish("toolu_2", "second", Some(0))
                .await
        });
        tokio::time::timeout(
            std::time::Duration::from_secs(30),
            waiting.wait_for(|count| *count == 1),
        )
        .await
        .expect("guard timeout")
        .unwrap();
        assert!(!second.is_finished());
        std::fs::write(one.path().join("first.txt"), "1").unwrap();
        let effects = first.finish("toolu_1", "first", Some(0)).await;
        assert_eq!(effects.changed, vec!["first.txt"]);
        let effects = second.await.unwrap();
        assert!(effects.changed.is_empty());
        assert_eq!(*waiting.borrow(), 0);
        drop(elsewhere);
    }
}
