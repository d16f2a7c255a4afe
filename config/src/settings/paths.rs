//! Paths in settings: lexical normalisation, confinement to the project root after symlink
//! resolution, and the check that API keys do not sit in files git tracks.

use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};

use crate::diagnostic::Diagnostic;
use crate::settings::layers::LayerValues;

/// `a/./b/../c` as `a/c`, without touching the file system.
pub fn normalize(path: &Path) -> PathBuf {
    let mut normal = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !normal.pop() {
                    normal.push("..");
                }
            }
            other => normal.push(other.as_os_str()),
        }
    }
    normal
}

/// `path` with symlinks resolved for the part that exists (the rest appended as it is).
fn resolve_symlinks(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut missing = Vec::new();
    loop {
        if let Ok(canonical) = existing.canonicalize() {
            let mut resolved = canonical;
            for part in missing.iter().rev() {
                resolved.push(part);
            }
            return normalize(&resolved);
        }
        match (
            existing.file_name().map(ToOwned::to_owned),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                missing.push(name);
                existing = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// A path that resolved outside the project root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutsideRoot {
    pub resolved: PathBuf,
    pub root: PathBuf,
}

/// Resolves `value` against `root` (normalised, symlinks resolved) and checks it stays inside.
pub fn resolve_inside_root(root: &Path, value: &str) -> Result<PathBuf, OutsideRoot> {
    let root = resolve_symlinks(&normalize(root));
    let joined = normalize(&root.join(value));
    let resolved = resolve_symlinks(&joined);
    if resolved.starts_with(&root) {
        Ok(resolved)
    } else {
        Err(OutsideRoot { resolved, root })
    }
}

/// Warnings for API keys written in `file` when git does not ignore it.
pub(crate) fn api_key_warnings(file: &Path, values: &LayerValues) -> Vec<Diagnostic> {
    let keys: Vec<_> = values
        .leaves()
        .filter(|(key, _, _)| key.ends_with(".api_key"))
        .map(|(key, _, origin)| (key, origin.position))
        .collect();
    if keys.is_empty() || git_ignores(file) != Some(false) {
        return Vec::new();
    }
    keys.into_iter()
        .map(|(key, position)| {
            Diagnostic::new(
                "an API key sits in a file that git does not ignore; name an environment variable with `api_key_env` instead, or move the key to .muster/settings.local.toml",
            )
            .in_source(file.display().to_string())
            .at(position)
            .for_key(key)
        })
        .collect()
}

/// `Some(true)` when git ignores `file`, `Some(false)` when the file is in a git work tree and
/// not ignored, `None` when it is in no work tree. If git cannot be run, a file in a work tree
/// counts as not ignored.
fn git_ignores(file: &Path) -> Option<bool> {
    let directory = file.parent()?;
    directory
        .ancestors()
        .find(|dir| dir.join(".git").exists())?;
    let status = Command::new("git")
        .arg("-C")
        .arg(directory)
        .arg("check-ignore")
        .arg("-q")
        .arg(file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match status {
        Ok(status) => Some(status.code() == Some(0)),
        Err(_) => Some(false),
    }
}

/// Whether git tracks `file` (a committed file belongs to the repository, not to the user).
/// A file in no work tree, or when git cannot be run, is not tracked.
pub(crate) fn git_tracks(file: &Path) -> bool {
    let Some(directory) = file.parent() else {
        return false;
    };
    if !directory.ancestors().any(|dir| dir.join(".git").exists()) {
        return false;
    }
    Command::new("git")
        .arg("-C")
        .arg(directory)
        .args(["ls-files", "--error-unmatch", "--"])
        .arg(file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_removes_dots() {
        assert_eq!(normalize(Path::new("/a/./b/../c")), PathBuf::from("/a/c"));
        assert_eq!(normalize(Path::new("a/../../b")), PathBuf::from("../b"));
    }
}
