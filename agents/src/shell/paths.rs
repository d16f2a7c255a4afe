//! Path checks: every path-like argument of a read-only command is checked as a `Read` of that
//! path. The permission engine implements [`ReadPathCheck`] from its settings (workspace
//! confinement plus `Read(…)` deny rules); [`WorkspaceReadCheck`] is a small standalone
//! implementation for tests and tools that have no engine.

use std::path::{Component, Path, PathBuf};

/// Decides whether reading a path is allowed.
///
/// Paths arrive as the command wrote them: relative ones are relative to the directory the
/// command starts in (the workspace root), already joined with any `cd` target earlier in the
/// same command (`cd src && cat x` asks about `src/x`). Absolute paths and `~…` arrive unchanged.
pub trait ReadPathCheck {
    /// May the file (or directory) at `path` be read? The error is a reason for a person and a
    /// model, e.g. "`/etc/shadow` is outside the workspace".
    fn check_read(&self, path: &str) -> Result<(), String>;

    /// May everything under `path` be read? Called for recursive content searches (`grep -r`,
    /// `rg`, `git grep`, `diff -r`). The default only checks `path` itself; an implementation
    /// with deny rules should also refuse a directory that contains a denied path.
    fn check_read_tree(&self, path: &str) -> Result<(), String> {
        self.check_read(path)
    }

    /// The names of the entries of the directory at `path` (a path as [`Self::check_read`]
    /// gets it), so the classifier can check every file an unquoted glob could expand to.
    /// `Some(vec![])` when there is no such directory (the glob then expands to nothing);
    /// `None` when this check cannot list directories or a name is not UTF-8, and globs are
    /// then refused. The default lists nothing: `None`.
    fn list_dir(&self, path: &str) -> Option<Vec<String>> {
        let _ = path;
        None
    }

    /// What is at `path` (a path as [`Self::check_read`] gets it), following symlinks as
    /// bash's globbing does, so a glob without a literal prefix can be expanded exactly.
    /// `None` when this check cannot tell; such globs are then refused. The default: `None`.
    fn entry_kind(&self, path: &str) -> Option<EntryKind> {
        let _ = path;
        None
    }
}

/// What a path names, for expanding globs exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A directory, or a symlink to one.
    Dir,
    /// Any other entry (a dangling symlink included).
    Other,
    /// Nothing.
    Missing,
}

/// What is at `path`, following symlinks (a dangling symlink is [`EntryKind::Other`]).
pub fn entry_kind_at(path: &Path) -> EntryKind {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => EntryKind::Dir,
        Ok(_) => EntryKind::Other,
        Err(_) if std::fs::symlink_metadata(path).is_ok() => EntryKind::Other,
        Err(_) => EntryKind::Missing,
    }
}

/// The UTF-8 entry names of `dir`; `Some(vec![])` when it cannot be read as a directory,
/// `None` when a name is not UTF-8 (it could not be checked by name).
pub fn list_dir_names(dir: &Path) -> Option<Vec<String>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Some(Vec::new());
    };
    entries
        .flatten()
        .map(|entry| entry.file_name().into_string().ok())
        .collect()
}

/// Confines reads to a workspace root and refuses a list of denied paths (each denied path
/// covers itself and everything below it).
///
/// Lexical: `..` may not climb above the root, `~` is refused, absolute paths must lie under the
/// root. When the root exists on disk, an existing path is also resolved through symlinks and
/// must stay inside the root.
#[derive(Debug, Clone)]
pub struct WorkspaceReadCheck {
    root: PathBuf,
    denied: Vec<Vec<String>>,
}

impl WorkspaceReadCheck {
    /// A check confining reads to `root` (an absolute path) with no deny rules.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            denied: Vec::new(),
        }
    }

    /// Add a denied path, relative to the root (`.env`, `./.env`, `secrets/`) or absolute inside
    /// it; it denies itself and everything below it. Exact paths only, no glob patterns (the
    /// engine's implementation handles the `Read(…)` rule syntax). A path that escapes the root
    /// is ignored: it is unreadable anyway.
    #[must_use]
    pub fn deny(mut self, path: &str) -> Self {
        if let Ok(components) = self.components(path) {
            self.denied.push(components);
        }
        self
    }

    /// The workspace root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The components of `path` relative to the root, or why it is outside.
    fn components(&self, path: &str) -> Result<Vec<String>, String> {
        if path.starts_with('~') {
            return Err(format!(
                "`{path}` is in a home directory, outside the workspace"
            ));
        }
        let p = Path::new(path);
        let relative: PathBuf = if p.is_absolute() {
            let normal =
                lexical(p, &[]).ok_or_else(|| format!("`{path}` is outside the workspace"))?;
            let root = lexical(&self.root, &[]).unwrap_or_default();
            let rel = Path::new("/").join(normal.join("/"));
            let root = Path::new("/").join(root.join("/"));
            rel.strip_prefix(&root)
                .map(Path::to_path_buf)
                .map_err(|_| {
                    format!(
                        "`{path}` is outside the workspace `{}`",
                        self.root.display()
                    )
                })?
        } else {
            p.to_path_buf()
        };
        lexical(&relative, &[])
            .ok_or_else(|| format!("`{path}` climbs out of the workspace with `..`"))
    }

    fn check(&self, path: &str, tree: bool) -> Result<(), String> {
        let components = self.components(path)?;
        let mut candidates = vec![components.clone()];
        if let Some(resolved) = self.resolved(&components)? {
            candidates.push(resolved);
        }
        for candidate in &candidates {
            for denied in &self.denied {
                if candidate.starts_with(denied) {
                    return Err(format!(
                        "`{path}` is denied by the Read rule for `./{}`",
                        denied.join("/")
                    ));
                }
                if tree && denied.starts_with(candidate) {
                    return Err(format!(
                        "`{path}` contains `./{}`, which a Read rule denies; search a narrower path",
                        denied.join("/")
                    ));
                }
            }
        }
        Ok(())
    }

    /// If the root and the path exist, the path's components after resolving symlinks.
    fn resolved(&self, components: &[String]) -> Result<Option<Vec<String>>, String> {
        let Ok(root) = self.root.canonicalize() else {
            return Ok(None);
        };
        let joined = components.iter().fold(root.clone(), |acc, c| acc.join(c));
        let Ok(real) = joined.canonicalize() else {
            return Ok(None);
        };
        match real.strip_prefix(&root) {
            Ok(rel) => Ok(lexical(rel, &[])),
            Err(_) => Err(format!(
                "`{}` resolves (through a symlink) to `{}`, outside the workspace",
                components.join("/"),
                real.display()
            )),
        }
    }
}

impl ReadPathCheck for WorkspaceReadCheck {
    fn check_read(&self, path: &str) -> Result<(), String> {
        self.check(path, false)
    }

    fn check_read_tree(&self, path: &str) -> Result<(), String> {
        self.check(path, true)
    }

    fn list_dir(&self, path: &str) -> Option<Vec<String>> {
        let components = self.components(path).ok()?;
        let dir = components
            .iter()
            .fold(self.root.clone(), |acc, c| acc.join(c));
        list_dir_names(&dir)
    }

    fn entry_kind(&self, path: &str) -> Option<EntryKind> {
        let components = self.components(path).ok()?;
        let at = components
            .iter()
            .fold(self.root.clone(), |acc, c| acc.join(c));
        Some(entry_kind_at(&at))
    }
}

/// Lexically normalise `p` (drop `.`, apply `..`), starting from `base`; `None` if `..` climbs
/// above the start.
fn lexical(p: &Path, base: &[String]) -> Option<Vec<String>> {
    let mut out: Vec<String> = base.to_vec();
    for component in p.components() {
        match component {
            Component::Prefix(_) | Component::RootDir | Component::CurDir => {}
            Component::ParentDir => {
                out.pop()?;
            }
            Component::Normal(part) => out.push(part.to_string_lossy().into_owned()),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confinement_and_denies() {
        let check = WorkspaceReadCheck::new("/nonexistent/ws")
            .deny("./.env")
            .deny("secrets/");
        let table: &[(&str, bool)] = &[
            ("src/main.rs", true),
            (".", true),
            ("", true),
            ("./a/../b", true),
            ("/nonexistent/ws/src", true),
            ("/nonexistent/ws", true),
            ("/nonexistent/wsx", false),
            ("/etc/shadow", false),
            ("..", false),
            ("../x", false),
            ("a/../../x", false),
            ("~/.aws/credentials", false),
            ("~", false),
            (".env", false),
            ("./.env", false),
            ("src/../.env", false),
            ("/nonexistent/ws/.env", false),
            ("secrets", false),
            ("secrets/key", false),
            (".env.example", true),
            ("src/.env", true),
        ];
        for (path, ok) in table {
            assert_eq!(check.check_read(path).is_ok(), *ok, "{path}");
        }
        assert!(check.check_read_tree(".").is_err());
        assert!(check.check_read_tree("src").is_ok());
    }
}
