//! Where a project lives: the project root and the paths under `.muster/` (DESIGN.md "Files and
//! identifiers").

use std::path::{Path, PathBuf};

/// The project root: the nearest ancestor of the starting directory that contains `.muster/`,
/// else the nearest that contains `.git/`, else the starting directory itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectRoot {
    root: PathBuf,
}

impl ProjectRoot {
    /// Finds the project root from `start` (normally the current directory). `-C DIR` passes
    /// DIR as `explicit`, which is taken as the root as it is.
    pub fn discover(start: &Path, explicit: Option<&Path>) -> ProjectRoot {
        if let Some(dir) = explicit {
            let root = if dir.is_absolute() {
                dir.to_path_buf()
            } else {
                start.join(dir)
            };
            return ProjectRoot { root };
        }
        let found = nearest_ancestor_with(start, ".muster")
            .or_else(|| nearest_ancestor_with(start, ".git"))
            .unwrap_or_else(|| start.to_path_buf());
        ProjectRoot { root: found }
    }

    /// Wraps a directory already known to be the root.
    pub fn at(root: impl Into<PathBuf>) -> ProjectRoot {
        ProjectRoot { root: root.into() }
    }

    pub fn path(&self) -> &Path {
        &self.root
    }

    /// `.muster/` under the root.
    pub fn muster_dir(&self) -> PathBuf {
        self.root.join(".muster")
    }

    /// The default store path, `.muster/muster.db`.
    pub fn default_store_path(&self) -> PathBuf {
        self.muster_dir().join("muster.db")
    }

    /// `.muster/runs/`, where live runs keep their lock and socket.
    pub fn runs_dir(&self) -> PathBuf {
        self.muster_dir().join("runs")
    }

    /// `.muster/logs/`.
    pub fn logs_dir(&self) -> PathBuf {
        self.muster_dir().join("logs")
    }
}

fn nearest_ancestor_with(start: &Path, marker: &str) -> Option<PathBuf> {
    start
        .ancestors()
        .find(|dir| dir.join(marker).is_dir())
        .map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn muster_dir_beats_git_dir_and_nearest_wins() {
        let tmp = tempfile::tempdir().unwrap();
        let outer = tmp.path();
        std::fs::create_dir_all(outer.join(".git")).unwrap();
        std::fs::create_dir_all(outer.join("a/.muster")).unwrap();
        std::fs::create_dir_all(outer.join("a/b/c")).unwrap();
        let found = ProjectRoot::discover(&outer.join("a/b/c"), None);
        assert_eq!(found.path(), outer.join("a"));
        std::fs::create_dir_all(outer.join("g/h")).unwrap();
        let found = ProjectRoot::discover(&outer.join("g/h"), None);
        assert_eq!(found.path(), outer, ".git found when no .muster is");
    }

    #[test]
    fn without_markers_the_start_is_the_root() {
        let tmp = tempfile::tempdir().unwrap();
        let start = tmp.path().join("plain");
        std::fs::create_dir_all(&start).unwrap();
        // The temporary directory's own ancestors hold no .muster or .git on a sane machine.
        if start
            .ancestors()
            .skip(1)
            .any(|d| d.join(".git").is_dir() || d.join(".muster").is_dir())
        {
            return;
        }
        assert_eq!(ProjectRoot::discover(&start, None).path(), start);
    }

    #[test]
    fn explicit_directory_is_the_root() {
        let found = ProjectRoot::discover(Path::new("/work"), Some(Path::new("proj")));
        assert_eq!(found.path(), Path::new("/work/proj"));
    }
}
