//! `LS`: a directory tree, gitignore-aware, capped.

use muster_protocol::ToolName;
use std::path::Path;

use globset::GlobMatcher;
use schemars::JsonSchema;
use serde::Deserialize;

use super::TypedTool;
use super::context::ToolContext;
use super::output::ToolOutput;
use super::text::run_blocking_on;
use super::walk::{compile_glob, walker};
use super::workspace::PathAccess;

/// Input of `LS`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LsInput {
    /// The directory to list (absolute, or relative to the workspace root).
    pub path: String,
    /// Globs of names to leave out (with their contents).
    #[serde(default)]
    pub ignore: Option<Vec<String>>,
}

/// Lists a directory tree.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ls;

impl TypedTool for Ls {
    type Input = LsInput;
    const NAME: &'static str = ToolName::LS.as_str();
    const DESCRIPTION: &'static str = "Lists the files and directories under `path` as a tree, skipping what .gitignore \
         ignores and names matching the `ignore` globs. Prefer Glob and Grep when you know what \
         you are looking for.";
    const READ_ONLY: bool = ToolName::LS.is_read_only();
    const IDEMPOTENT: bool = true;

    fn paths(input: &LsInput) -> Vec<PathAccess> {
        vec![PathAccess::read(&input.path)]
    }

    async fn run(&self, context: &ToolContext, input: LsInput) -> ToolOutput {
        let max_entries = context.limits().max_entries;
        run_blocking_on(context.resolve_read(&input.path), move |base| {
            list(&input, &base, max_entries)
        })
        .await
    }
}

fn list(input: &LsInput, base: &Path, max_entries: usize) -> ToolOutput {
    if !base.is_dir() {
        let reason = if base.exists() {
            "is not a directory"
        } else {
            "does not exist"
        };
        return ToolOutput::error(format!(
            "`{}` {reason} (resolved to `{}`); LS lists directories, Read reads files",
            input.path,
            base.display()
        ));
    }
    let ignored: Vec<GlobMatcher> = match input
        .ignore
        .iter()
        .flatten()
        .map(|pattern| compile_glob("ignore", pattern))
        .collect()
    {
        Ok(ignored) => ignored,
        Err(message) => return ToolOutput::error(format!("invalid input for LS: {message}")),
    };
    let mut builder = walker(base);
    builder.sort_by_file_name(|left, right| left.cmp(right));
    builder.filter_entry(move |entry| {
        entry.file_name() != ".git"
            && !ignored
                .iter()
                .any(|matcher| matcher.is_match(entry.file_name()))
    });
    let mut lines = vec![format!("- {}/", base.display())];
    let mut total = 0;
    for entry in builder.build().filter_map(Result::ok) {
        if entry.depth() == 0 {
            continue;
        }
        total += 1;
        if total > max_entries {
            continue;
        }
        let indent = "  ".repeat(entry.depth());
        let name = entry.file_name().to_string_lossy();
        let slash = if entry.file_type().is_some_and(|kind| kind.is_dir()) {
            "/"
        } else {
            ""
        };
        lines.push(format!("{indent}- {name}{slash}"));
    }
    if total == 0 {
        lines.push("  (empty)".to_owned());
    }
    if total > max_entries {
        lines.push(format!(
            "(showing the first {max_entries} of {total} entries; list a subdirectory or use Glob)"
        ));
    }
    ToolOutput::text(lines.join("\n"))
}
