//! Walking the workspace for `Glob`, `Grep` and `LS`: gitignore-aware (also outside a git
//! repository), hidden files included, `.git/` skipped, symbolic links not followed.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{LazyLock, Mutex, PoisonError};
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

/// Patterns compiled in this process, by their text: building a pattern's regex costs more
/// than most searches, and agents repeat their patterns (each turn's `Glob("*.md")`).
static COMPILED: LazyLock<Mutex<HashMap<String, GlobMatcher>>> = LazyLock::new(Mutex::default);

/// Patterns kept in [`COMPILED`] before it starts afresh.
const COMPILED_KEPT: usize = 256;

/// A glob where `*` does not cross `/`.
pub(crate) fn compile_glob(field: &str, pattern: &str) -> Result<GlobMatcher, String> {
    let compiled = || COMPILED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(matcher) = compiled().get(pattern) {
        return Ok(matcher.clone());
    }
    let matcher = globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|glob: GlobPattern| glob.compile_matcher())
        .map_err(|error| format!("invalid glob in field `{field}` (`{pattern}`): {error}"))?;
    let mut kept = compiled();
    if kept.len() >= COMPILED_KEPT {
        kept.clear();
    }
    kept.insert(pattern.to_owned(), matcher.clone());
    Ok(matcher)
}

/// The modification time of `path`, or the epoch when it cannot be read.
pub(crate) fn modified(path: &Path) -> SystemTime {
    std::fs::metadata(path)
        .and_then(|metadata| metadata.modified())
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// A glob pattern that names where it starts: absolute (`/etc/*`), from the home directory
/// (`~/x/*`, `$HOME/*`) or climbing with `..` (`../../**/*.pem`). Such a pattern is searched
/// from its own `base` (its components before the first glob character, below the tool's
/// `path` when relative) with `rest` matched below it, so the file tools and the permission
/// engine decide the directory the search really touches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AnchoredPattern {
    /// The directory the search starts from, as a path the workspace resolves.
    pub base: String,
    /// The pattern below `base`.
    pub rest: String,
}

/// `pattern` split as an [`AnchoredPattern`], or `None` for an ordinary pattern relative to
/// `path`.
pub(crate) fn anchored_pattern(path: &str, pattern: &str) -> Option<AnchoredPattern> {
    let from_home = ["~", "$HOME", "${HOME}"]
        .iter()
        .any(|home| pattern == *home || pattern.starts_with(&format!("{home}/")));
    let absolute = pattern.starts_with('/');
    if !absolute && !from_home && !pattern.split('/').any(|part| part == "..") {
        return None;
    }
    let parts: Vec<&str> = pattern.split('/').collect();
    let literal = parts
        .iter()
        .position(|part| part.contains(['*', '?', '[', '{']))
        .unwrap_or(parts.len().saturating_sub(1))
        .max(usize::from(absolute || from_home));
    let base = parts[..literal].join("/");
    let base = match (absolute, from_home) {
        (true, _) if base.is_empty() => "/".to_owned(),
        (true, _) | (_, true) => base,
        _ if path == "." => base,
        _ => format!("{}/{base}", path.trim_end_matches('/')),
    };
    Some(AnchoredPattern {
        base,
        rest: parts[literal..].join("/"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchored_patterns_name_the_directory_they_start_from() {
        /// The tool's `path`, the pattern, and the expected (base, rest).
        type Row<'a> = (&'a str, &'a str, Option<(&'a str, &'a str)>);
        let table: &[Row<'_>] = &[
            (".", "**/*.rs", None),
            ("src", "*.rs", None),
            (".", "/etc/*", Some(("/etc", "*"))),
            (".", "/*", Some(("/", "*"))),
            (".", "/ws/src/**/*.rs", Some(("/ws/src", "**/*.rs"))),
            (".", "/ws/README.md", Some(("/ws", "README.md"))),
            (".", "~/.ssh/*", Some(("~/.ssh", "*"))),
            (".", "~/*", Some(("~", "*"))),
            (".", "$HOME/**/*.pem", Some(("$HOME", "**/*.pem"))),
            (".", "../../**/*.pem", Some(("../..", "**/*.pem"))),
            ("src", "../*.toml", Some(("src/..", "*.toml"))),
            ("src", "a/../../b/*", Some(("src/a/../../b", "*"))),
            (".", "~user/*", None),
        ];
        for (path, pattern, expected) in table {
            let got = anchored_pattern(path, pattern);
            let got = got.as_ref().map(|a| (a.base.as_str(), a.rest.as_str()));
            assert_eq!(got, *expected, "path {path:?}, pattern {pattern:?}");
        }
    }
}
