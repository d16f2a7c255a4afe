//! Walking the workspace for `Glob`, `Grep` and `LS`: gitignore-aware (also outside a git
//! repository), hidden files included, `.git/` skipped, symbolic links not followed.

use std::path::Path;
use std::time::SystemTime;

use globset::{Glob as GlobPattern, GlobMatcher};
use ignore::WalkBuilder;

/// A walker over `base` with muster's rules.
pub(crate) fn walker(base: &Path) -> WalkBuilder {
    let mut builder = WalkBuilder::new(base);
    builder
        .hidden(false)
        .git_ignore(true)
        .git_global(false)
        .git_exclude(true)
        .require_git(false)
        .ignore(true)
        .parents(true)
        .follow_links(false)
        .filter_entry(|entry| entry.file_name() != ".git");
    builder
}

/// A glob where `*` does not cross `/`.
pub(crate) fn compile_glob(field: &str, pattern: &str) -> Result<GlobMatcher, String> {
    globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|glob: GlobPattern| glob.compile_matcher())
        .map_err(|error| format!("invalid glob in field `{field}` (`{pattern}`): {error}"))
}

/// The modification time of `path`, or the epoch when it cannot be read.
pub(crate) fn modified(path: &Path) -> SystemTime {
    std::fs::metadata(path)
        .and_then(|metadata| metadata.modified())
        .unwrap_or(SystemTime::UNIX_EPOCH)
}
