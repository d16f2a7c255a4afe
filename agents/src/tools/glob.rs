//! `Glob`: files whose path matches a glob pattern, newest first, gitignore-aware.

use muster_protocol::ToolName;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Deserialize;

use super::TypedTool;
use super::context::ToolContext;
use super::output::ToolOutput;
use super::text::run_blocking;
use super::walk::{anchored_pattern, compile_glob, modified, walker};
use super::workspace::PathAccess;

/// Files `Glob` lists at most.
const GLOB_RESULT_LIMIT: usize = 100;

/// Input of `Glob`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlobInput {
    /// The glob to match file paths against, relative to `path` (`**/*.rs`, `src/**/*.ts`).
    /// `*` does not cross `/`; `**` does.
    pub pattern: String,
    /// The directory to search (default: the workspace root).
    #[serde(default)]
    pub path: Option<String>,
}

/// Finds files by glob pattern.
#[derive(Debug, Clone, Copy, Default)]
pub struct Glob;

impl TypedTool for Glob {
    type Input = GlobInput;
    const NAME: &'static str = ToolName::Glob.as_str();
    const DESCRIPTION: &'static str = "Finds files whose path matches a glob pattern (`**/*.rs`, `src/**/*.{ts,tsx}`), \
         searching `path` (default: the workspace root). Files ignored by .gitignore are skipped. \
         Returns absolute paths, most recently modified first, at most 100.";
    const READ_ONLY: bool = ToolName::Glob.is_read_only();
    const IDEMPOTENT: bool = true;

    fn paths(input: &GlobInput) -> Vec<PathAccess> {
        let (searched, _) = search_root(input);
        vec![PathAccess::read(&searched)]
    }

    async fn run(&self, context: &ToolContext, input: GlobInput) -> ToolOutput {
        let (requested, pattern) = search_root(&input);
        let base = match context.resolve_read(&requested) {
            Ok(base) => base,
            Err(error) => return ToolOutput::error(error.to_string()),
        };
        run_blocking(move || find_files(&pattern, &requested, &base)).await
    }
}

/// The directory a call searches and the pattern below it: `path` (default the workspace
/// root) and the pattern, or the directory an absolute, `~` or climbing pattern names.
fn search_root(input: &GlobInput) -> (String, String) {
    let path = input.path.as_deref().unwrap_or(".");
    match anchored_pattern(path, &input.pattern) {
        Some(anchored) => (anchored.base, anchored.rest),
        None => (path.to_owned(), input.pattern.clone()),
    }
}

/// How many levels below the base `pattern` can match: `*` does not cross `/`, so a pattern
/// without `**` matches no deeper than its parts. Every `/` is counted (in braces and classes
/// too), which may only walk deeper than needed, never less. `None`: no limit.
fn deepest_match(pattern: &str) -> Option<usize> {
    (!pattern.contains("**")).then(|| 1 + pattern.matches('/').count())
}

fn find_files(pattern: &str, requested: &str, base: &Path) -> ToolOutput {
    if !base.is_dir() {
        return ToolOutput::error(format!(
            "`{requested}` is not a directory (resolved to `{}`); give a directory in field `path`",
            base.display()
        ));
    }
    let matcher = match compile_glob("pattern", pattern) {
        Ok(matcher) => matcher,
        Err(message) => return ToolOutput::error(message),
    };
    let mut found: Vec<PathBuf> = walker(base)
        .max_depth(deepest_match(pattern))
        .build()
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_some_and(|kind| !kind.is_dir()))
        .filter(|entry| {
            entry
                .path()
                .strip_prefix(base)
                .is_ok_and(|relative| matcher.is_match(relative))
        })
        .map(ignore::DirEntry::into_path)
        .collect();
    if found.is_empty() {
        return ToolOutput::text(format!("No files match `{pattern}`."));
    }
    found.sort_by_cached_key(|path| (std::cmp::Reverse(modified(path)), path.clone()));
    let total = found.len();
    let mut listing: Vec<String> = found
        .iter()
        .take(GLOB_RESULT_LIMIT)
        .map(|path| path.display().to_string())
        .collect();
    if total > GLOB_RESULT_LIMIT {
        listing.push(format!(
            "(showing the {GLOB_RESULT_LIMIT} most recent of {total} files; narrow the pattern or the path)"
        ));
    }
    ToolOutput::text(listing.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::deepest_match;

    #[test]
    fn a_pattern_is_searched_only_as_deep_as_it_can_match() {
        let table = [
            ("*.md", Some(1)),
            ("src/*.rs", Some(2)),
            ("src/{main,nested/deep}.rs", Some(3)),
            ("**/*.rs", None),
            ("src/**", None),
        ];
        for (pattern, depth) in table {
            assert_eq!(deepest_match(pattern), depth, "{pattern}");
        }
    }
}
