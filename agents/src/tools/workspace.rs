//! The workspace every file tool resolves paths through: relative paths against its root, and
//! nothing outside it, nothing written into `.git/` or `.muster/` — except the agent's own plan
//! file.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::io;
use std::path::{Component, Path, PathBuf};

/// Directories file tools never write into, wherever they appear under the workspace root.
const PROTECTED_DIRECTORIES: [&str; 2] = [".git", ".muster"];

/// Whether a call reads or writes a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PathUse {
    /// The call only reads the path.
    Read,
    /// The call may create, change or delete the path.
    Write,
}

/// A path a call touches, as the model wrote it; the permission engine checks these.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PathAccess {
    /// The path as given in the input (relative paths are relative to the workspace root).
    pub path: String,
    /// Read or write.
    pub usage: PathUse,
}

impl PathAccess {
    pub(crate) fn read(path: &str) -> Self {
        Self {
            path: path.to_owned(),
            usage: PathUse::Read,
        }
    }

    pub(crate) fn write(path: &str) -> Self {
        Self {
            path: path.to_owned(),
            usage: PathUse::Write,
        }
    }
}

/// The workspace root could not be used.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// The root does not exist or cannot be canonicalised.
    #[error("workspace root `{root}` cannot be resolved: {source}")]
    Unresolvable {
        /// The root as given.
        root: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The root is not a directory.
    #[error("workspace root `{root}` is not a directory")]
    NotADirectory {
        /// The root as given.
        root: PathBuf,
    },
}

/// A path a file tool may not use. Every message names the path, what it resolved to and why.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    /// The path is empty.
    #[error("the path is empty; give a file path inside the workspace `{root}`")]
    Empty {
        /// The workspace root.
        root: PathBuf,
    },
    /// The path contains a `..` component.
    #[error(
        "path `{requested}` contains `..`, which file tools refuse; give the path inside the workspace `{root}` without `..`"
    )]
    ParentComponent {
        /// The path as given.
        requested: PathBuf,
        /// The workspace root.
        root: PathBuf,
    },
    /// The path resolves outside the workspace.
    #[error(
        "path `{requested}` resolves to `{resolved}`{how}, which is outside the workspace `{root}`; file tools only use paths inside the workspace",
        how = if *through_symlink { " through a symbolic link" } else { "" }
    )]
    OutsideWorkspace {
        /// The path as given.
        requested: PathBuf,
        /// Where it resolves (symlinks followed).
        resolved: PathBuf,
        /// The workspace root.
        root: PathBuf,
        /// A symbolic link took it outside.
        through_symlink: bool,
    },
    /// The path would write into `.git/` or `.muster/`.
    #[error(
        "path `{requested}` resolves to `{resolved}`, inside `{directory}/`, which file tools never write"
    )]
    Protected {
        /// The path as given.
        requested: PathBuf,
        /// Where it resolves.
        resolved: PathBuf,
        /// The protected directory (`.git` or `.muster`).
        directory: String,
    },
    /// A symbolic link on the path points nowhere, so where it ends cannot be checked.
    #[error(
        "path `{requested}` goes through the symbolic link `{link}`, whose target does not exist; file tools refuse dangling links"
    )]
    DanglingSymlink {
        /// The path as given.
        requested: PathBuf,
        /// The dangling link.
        link: PathBuf,
    },
    /// The file system refused to tell where the path leads.
    #[error("path `{requested}` cannot be resolved at `{at}`: {source}")]
    Unresolvable {
        /// The path as given.
        requested: PathBuf,
        /// The prefix that failed.
        at: PathBuf,
        /// Why.
        source: io::Error,
    },
}

/// Where a path leads: the canonical deepest existing ancestor joined with the rest.
struct Located {
    resolved: PathBuf,
    through_symlink: bool,
}

/// `requested` with a leading `~` or `$HOME` (`~`, `~/x`, `$HOME`, `$HOME/x`, `${HOME}/x`)
/// replaced by `home`. This is the one rule file tools and the permission engine share, so the
/// engine decides the path the tool would open. `~user`, every other `$` and a path when no
/// home directory is known stay literal (a relative name inside the workspace).
pub fn expand_home<'p>(requested: &'p Path, home: Option<&Path>) -> Cow<'p, Path> {
    let (Some(home), Some(text)) = (home, requested.to_str()) else {
        return Cow::Borrowed(requested);
    };
    let rest = ["~", "${HOME}", "$HOME"]
        .iter()
        .find_map(|prefix| text.strip_prefix(prefix))
        .filter(|rest| rest.is_empty() || rest.starts_with('/'));
    match rest {
        Some(rest) => Cow::Owned(home.join(rest.trim_start_matches('/'))),
        None => Cow::Borrowed(requested),
    }
}

/// The directory tree file tools are confined to (its canonical root), and the home directory
/// a leading `~` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    root: PathBuf,
    home: Option<PathBuf>,
    /// Directories outside the root file tools may read and write too (the settings'
    /// `additionalDirectories`, canonical), shared by every agent's workspace.
    additional: Vec<PathBuf>,
}

impl Workspace {
    /// A workspace rooted at `root`, which must be an existing directory; symlinks in `root`
    /// itself are resolved.
    pub fn new(root: impl AsRef<Path>) -> Result<Self, WorkspaceError> {
        let given = root.as_ref();
        let root = std::fs::canonicalize(given).map_err(|source| WorkspaceError::Unresolvable {
            root: given.to_path_buf(),
            source,
        })?;
        if !root.is_dir() {
            return Err(WorkspaceError::NotADirectory {
                root: given.to_path_buf(),
            });
        }
        Ok(Self {
            root,
            home: std::env::home_dir().filter(|home| home.is_absolute()),
            additional: Vec::new(),
        })
    }

    /// The same workspace with `directories` readable and writable too (as Claude Code's
    /// `additionalDirectories`; their `.git/` and `.muster/` stay unwritable). Directories
    /// that cannot be resolved are left out.
    pub fn with_additional(mut self, directories: &[PathBuf]) -> Self {
        self.additional = directories
            .iter()
            .filter_map(|directory| std::fs::canonicalize(directory).ok())
            .filter(|directory| directory.is_dir())
            .collect();
        self
    }

    /// The additional directories (canonical).
    pub fn additional(&self) -> &[PathBuf] {
        &self.additional
    }

    /// The same workspace with `home` as the directory a leading `~` or `$HOME` names (by
    /// default the process's home directory).
    pub fn with_home(mut self, home: Option<PathBuf>) -> Self {
        self.home = home;
        self
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `requested` with a leading `~` or `$HOME` expanded ([`expand_home`]).
    pub fn expand_home<'p>(&self, requested: &'p Path) -> Cow<'p, Path> {
        expand_home(requested, self.home.as_deref())
    }

    /// Resolves a path the call will only read: inside the workspace, or the agent's own plan
    /// file (`plan_file`, as resolved by [`Workspace::resolve_plan_file`]).
    pub fn resolve_read(
        &self,
        requested: &Path,
        plan_file: Option<&Path>,
    ) -> Result<PathBuf, PathError> {
        self.resolve(requested, PathUse::Read, plan_file)
    }

    /// Resolves a path for `usage`: one to read as [`Workspace::resolve_read`] says; one the
    /// call may write inside the workspace and outside `.git/` and `.muster/`, or the agent's
    /// own plan file wherever it lies.
    pub fn resolve(
        &self,
        requested: &Path,
        usage: PathUse,
        plan_file: Option<&Path>,
    ) -> Result<PathBuf, PathError> {
        let located = self.locate(requested)?;
        if plan_file.is_some_and(|plan| plan == located.resolved) {
            return Ok(located.resolved);
        }
        let inside = std::iter::once(&self.root)
            .chain(&self.additional)
            .find_map(|root| located.resolved.strip_prefix(root).ok());
        let Some(inside) = inside else {
            return Err(PathError::OutsideWorkspace {
                requested: requested.to_path_buf(),
                resolved: located.resolved,
                root: self.root.clone(),
                through_symlink: located.through_symlink,
            });
        };
        if usage == PathUse::Write
            && let Some(directory) = protected_directory(inside)
        {
            return Err(PathError::Protected {
                requested: requested.to_path_buf(),
                resolved: located.resolved.clone(),
                directory,
            });
        }
        Ok(located.resolved)
    }

    /// Resolves the agent's plan file (relative to the root, symlinks followed) without
    /// confining it: `plans_dir` may lie outside the workspace.
    pub fn resolve_plan_file(&self, plan_file: &Path) -> Result<PathBuf, PathError> {
        Ok(self.locate(plan_file)?.resolved)
    }

    fn locate(&self, given: &Path) -> Result<Located, PathError> {
        let expanded = self.expand_home(given);
        let requested: &Path = &expanded;
        if requested.as_os_str().is_empty() {
            return Err(PathError::Empty {
                root: self.root.clone(),
            });
        }
        if requested
            .components()
            .any(|component| component == Component::ParentDir)
        {
            return Err(PathError::ParentComponent {
                requested: given.to_path_buf(),
                root: self.root.clone(),
            });
        }
        let lexical: PathBuf = self.root.join(requested).components().collect();
        let (existing, missing) = split_existing(given, &lexical)?;
        let canonical = std::fs::canonicalize(&existing).map_err(|source| {
            if source.kind() == io::ErrorKind::NotFound {
                PathError::DanglingSymlink {
                    requested: given.to_path_buf(),
                    link: existing.clone(),
                }
            } else {
                PathError::Unresolvable {
                    requested: given.to_path_buf(),
                    at: existing.clone(),
                    source,
                }
            }
        })?;
        let through_symlink = canonical != existing;
        let mut resolved = canonical;
        for name in missing.iter().rev() {
            resolved.push(name);
        }
        Ok(Located {
            resolved,
            through_symlink,
        })
    }
}

/// Splits `lexical` into its deepest existing prefix (a symlink counts as existing) and the
/// names below it that do not exist yet, deepest first.
fn split_existing<'a>(
    requested: &Path,
    lexical: &'a Path,
) -> Result<(PathBuf, Vec<&'a OsStr>), PathError> {
    let mut existing = lexical;
    let mut missing = Vec::new();
    loop {
        match std::fs::symlink_metadata(existing) {
            Ok(_) => return Ok((existing.to_path_buf(), missing)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                match (existing.parent(), existing.file_name()) {
                    (Some(parent), Some(name)) => {
                        missing.push(name);
                        existing = parent;
                    }
                    _ => return Ok((existing.to_path_buf(), missing)),
                }
            }
            Err(source) => {
                return Err(PathError::Unresolvable {
                    requested: requested.to_path_buf(),
                    at: existing.to_path_buf(),
                    source,
                });
            }
        }
    }
}

/// The protected directory a path relative to the root lies in, if any.
fn protected_directory(relative: &Path) -> Option<String> {
    relative.components().find_map(|component| match component {
        Component::Normal(name) => PROTECTED_DIRECTORIES
            .iter()
            .find(|protected| name == OsStr::new(protected))
            .map(|protected| (*protected).to_owned()),
        _ => None,
    })
}
