//! `Grep`: a regular-expression search on ripgrep's crates, gitignore-aware, with ripgrep's
//! options under Claude Code's names (`-i`, `-n`, `-A`, `-B`, `-C`, `glob`, `type`, …).

use muster_protocol::ToolName;
use std::io;
use std::path::{Path, PathBuf};

use globset::GlobMatcher;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{
    BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkContextKind, SinkMatch,
};
use schemars::JsonSchema;
use serde::Deserialize;

use super::TypedTool;
use super::context::{OutputLimits, ToolContext};
use super::output::ToolOutput;
use super::text::{run_blocking, truncate_line};
use super::walk::{anchored_pattern, compile_glob, modified, walker};
use super::workspace::PathAccess;

/// Files with matches `Grep` collects at most, whatever the mode.
const MAX_FILES: usize = 10_000;

/// What `Grep` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GrepOutputMode {
    /// Matching lines, with context lines if asked for.
    Content,
    /// The paths of files with a match, most recently modified first (the default).
    #[default]
    FilesWithMatches,
    /// The number of matching lines per file.
    Count,
}

/// Input of `Grep`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepInput {
    /// The regular expression to search for (Rust regex syntax, like ripgrep).
    pub pattern: String,
    /// The file or directory to search (default: the workspace root).
    #[serde(default)]
    pub path: Option<String>,
    /// Only search files matching this glob (`*.rs`, `*.{ts,tsx}`, `src/**/*.py`); a glob
    /// without `/` matches file names.
    #[serde(default)]
    pub glob: Option<String>,
    /// `content`, `files_with_matches` (default) or `count`.
    #[serde(default)]
    pub output_mode: Option<GrepOutputMode>,
    /// Lines of context before each match (content mode).
    #[serde(rename = "-B", default)]
    pub before_context: Option<u64>,
    /// Lines of context after each match (content mode).
    #[serde(rename = "-A", default)]
    pub after_context: Option<u64>,
    /// Lines of context before and after each match (content mode).
    #[serde(rename = "-C", default)]
    pub context: Option<u64>,
    /// Show line numbers (content mode; default true).
    #[serde(rename = "-n", default)]
    pub line_numbers: Option<bool>,
    /// Case-insensitive search.
    #[serde(rename = "-i", default)]
    pub case_insensitive: Option<bool>,
    /// Only search files of this ripgrep type (`rust`, `py`, `js`, …).
    #[serde(rename = "type", default)]
    pub file_type: Option<String>,
    /// Return at most this many lines or entries.
    #[serde(default)]
    pub head_limit: Option<u64>,
    /// Skip this many lines or entries first.
    #[serde(default)]
    pub offset: Option<u64>,
    /// Let `.` match newlines and patterns span lines.
    #[serde(default)]
    pub multiline: Option<bool>,
}

/// Searches file contents.
#[derive(Debug, Clone, Copy, Default)]
pub struct Grep;

impl TypedTool for Grep {
    type Input = GrepInput;
    const NAME: &'static str = ToolName::Grep.as_str();
    const DESCRIPTION: &'static str = "Searches file contents with a regular expression (ripgrep syntax), skipping files ignored \
         by .gitignore and binary files. `output_mode` is `files_with_matches` (default), \
         `content` (matching lines; `-n`, `-A`, `-B`, `-C` apply) or `count`. Filter files with \
         `glob` or `type`; page with `offset` and `head_limit`.";
    const READ_ONLY: bool = ToolName::Grep.is_read_only();
    const IDEMPOTENT: bool = true;

    fn paths(input: &GrepInput) -> Vec<PathAccess> {
        let path = input.path.as_deref().unwrap_or(".");
        let mut paths = vec![PathAccess::read(path)];
        if let Some(anchored) = glob_anchor(input) {
            paths.push(PathAccess::read(&anchored.base));
        }
        paths
    }

    async fn run(&self, context: &ToolContext, input: GrepInput) -> ToolOutput {
        let requested = input.path.clone().unwrap_or_else(|| ".".to_owned());
        let target = match context.resolve_read(&requested) {
            Ok(target) => target,
            Err(error) => return ToolOutput::error(error.to_string()),
        };
        let anchor = match glob_anchor(&input) {
            Some(anchored) => match context.resolve_read(&anchored.base) {
                Ok(base) => Some((base, anchored.rest)),
                Err(error) => return ToolOutput::error(format!("field `glob`: {error}")),
            },
            None => None,
        };
        let limits = context.limits().clone();
        run_blocking(move || search(&input, &requested, &target, anchor, &limits)).await
    }
}

/// The directory an absolute, `~` or climbing `glob` names, with the pattern below it.
fn glob_anchor(input: &GrepInput) -> Option<super::walk::AnchoredPattern> {
    let glob = input.glob.as_deref()?;
    anchored_pattern(input.path.as_deref().unwrap_or("."), glob)
}

/// What a `glob` is matched against.
enum GlobScope {
    /// A glob without `/`: file names.
    Name,
    /// Paths relative to the searched directory.
    Target,
    /// Paths relative to the directory an anchored glob names.
    Below(PathBuf),
}

/// Matches in one file, as output lines.
struct FileMatches {
    path: PathBuf,
    lines: Vec<String>,
    matched_lines: usize,
}

/// Collects one file's matching and context lines in ripgrep's format.
struct LineCollector<'a> {
    shown_path: String,
    line_numbers: bool,
    max_line_chars: usize,
    stop_at_first: bool,
    found: &'a mut FileMatches,
}

impl LineCollector<'_> {
    fn push(&mut self, separator: char, number: Option<u64>, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        let text = truncate_line(text.trim_end_matches(['\n', '\r']), self.max_line_chars);
        let line = match number.filter(|_| self.line_numbers) {
            Some(number) => format!("{}{separator}{number}{separator}{text}", self.shown_path),
            None => format!("{}{separator}{text}", self.shown_path),
        };
        self.found.lines.push(line);
    }
}

impl Sink for LineCollector<'_> {
    type Error = io::Error;

    fn matched(&mut self, _searcher: &Searcher, found: &SinkMatch<'_>) -> Result<bool, io::Error> {
        let first = found.line_number();
        for (index, line) in found.lines().enumerate() {
            self.found.matched_lines += 1;
            if !self.stop_at_first {
                self.push(':', first.map(|number| number + index as u64), line);
            }
        }
        Ok(!self.stop_at_first)
    }

    fn context(
        &mut self,
        _searcher: &Searcher,
        context: &SinkContext<'_>,
    ) -> Result<bool, io::Error> {
        if matches!(
            context.kind(),
            SinkContextKind::Before | SinkContextKind::After
        ) {
            self.push('-', context.line_number(), context.bytes());
        }
        Ok(true)
    }

    fn context_break(&mut self, _searcher: &Searcher) -> Result<bool, io::Error> {
        self.found.lines.push("--".to_owned());
        Ok(true)
    }
}

/// Everything one search needs, checked.
struct SearchPlan {
    matcher: RegexMatcher,
    searcher: Searcher,
    mode: GrepOutputMode,
    line_numbers: bool,
    glob: Option<(GlobMatcher, GlobScope)>,
    file_type: Option<ignore::types::Types>,
    with_context: bool,
}

fn plan_search(input: &GrepInput, anchor: Option<(PathBuf, String)>) -> Result<SearchPlan, String> {
    let multiline = input.multiline.unwrap_or(false);
    let mut builder = RegexMatcherBuilder::new();
    builder
        .case_insensitive(input.case_insensitive.unwrap_or(false))
        .multi_line(true)
        .dot_matches_new_line(multiline);
    if !multiline {
        builder.line_terminator(Some(b'\n'));
    }
    let matcher = builder.build(&input.pattern).map_err(|error| {
        format!(
            "invalid regular expression in field `pattern` (`{}`): {error}",
            input.pattern
        )
    })?;
    let mode = input.output_mode.unwrap_or_default();
    let before = input.before_context.or(input.context).unwrap_or(0);
    let after = input.after_context.or(input.context).unwrap_or(0);
    let with_context = mode == GrepOutputMode::Content && (before > 0 || after > 0);
    let (before, after) = if with_context {
        (before, after)
    } else {
        (0, 0)
    };
    let searcher = SearcherBuilder::new()
        .line_number(true)
        .multi_line(multiline)
        .before_context(usize::try_from(before).unwrap_or(usize::MAX))
        .after_context(usize::try_from(after).unwrap_or(usize::MAX))
        .binary_detection(BinaryDetection::quit(0))
        .build();
    let glob = match (&input.glob, anchor) {
        (_, Some((base, rest))) => Some((compile_glob("glob", &rest)?, GlobScope::Below(base))),
        (Some(pattern), None) if pattern.contains('/') => {
            Some((compile_glob("glob", pattern)?, GlobScope::Target))
        }
        (Some(pattern), None) => Some((compile_glob("glob", pattern)?, GlobScope::Name)),
        (None, None) => None,
    };
    let file_type = match &input.file_type {
        Some(name) => Some(file_types(name)?),
        None => None,
    };
    Ok(SearchPlan {
        matcher,
        searcher,
        mode,
        line_numbers: input.line_numbers.unwrap_or(true),
        glob,
        file_type,
        with_context,
    })
}

fn file_types(name: &str) -> Result<ignore::types::Types, String> {
    let mut builder = ignore::types::TypesBuilder::new();
    builder.add_defaults();
    if !builder.definitions().iter().any(|kind| kind.name() == name) {
        return Err(format!(
            "unknown file type `{name}` in field `type`; use a ripgrep type such as `rust`, `py`, `js` or `ts`, or give `glob` instead"
        ));
    }
    builder.select(name);
    builder
        .build()
        .map_err(|error| format!("invalid file type `{name}` in field `type`: {error}"))
}

/// The files to search under `target`: the file itself, or a filtered walk.
fn candidate_files(plan: &SearchPlan, target: &Path) -> Vec<PathBuf> {
    if target.is_file() {
        return vec![target.to_path_buf()];
    }
    let mut builder = walker(target);
    if let Some(types) = &plan.file_type {
        builder.types(types.clone());
    }
    let mut files: Vec<PathBuf> = builder
        .build()
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_some_and(|kind| kind.is_file()))
        .map(ignore::DirEntry::into_path)
        .filter(|path| glob_keeps(plan, target, path))
        .collect();
    files.sort();
    files
}

fn glob_keeps(plan: &SearchPlan, base: &Path, path: &Path) -> bool {
    match &plan.glob {
        None => true,
        Some((matcher, GlobScope::Target)) => path
            .strip_prefix(base)
            .is_ok_and(|relative| matcher.is_match(relative)),
        Some((matcher, GlobScope::Below(anchor))) => path
            .strip_prefix(anchor)
            .is_ok_and(|relative| matcher.is_match(relative)),
        Some((matcher, GlobScope::Name)) => {
            path.file_name().is_some_and(|name| matcher.is_match(name))
        }
    }
}

fn search(
    input: &GrepInput,
    requested: &str,
    target: &Path,
    anchor: Option<(PathBuf, String)>,
    limits: &OutputLimits,
) -> ToolOutput {
    if !target.exists() {
        return ToolOutput::error(format!(
            "`{requested}` does not exist (resolved to `{}`)",
            target.display()
        ));
    }
    let mut plan = match plan_search(input, anchor) {
        Ok(plan) => plan,
        Err(message) => return ToolOutput::error(format!("invalid input for Grep: {message}")),
    };
    let mut results = Vec::new();
    for path in candidate_files(&plan, target) {
        if results.len() >= MAX_FILES {
            break;
        }
        if let Some(found) = search_file(&mut plan, &path, limits) {
            results.push(found);
        }
    }
    if results.is_empty() {
        return ToolOutput::text(format!("No matches for `{}`.", input.pattern));
    }
    let entries = entries_of(&plan, results);
    ToolOutput::text(page(entries, input, limits))
}

fn search_file(plan: &mut SearchPlan, path: &Path, limits: &OutputLimits) -> Option<FileMatches> {
    let mut found = FileMatches {
        path: path.to_path_buf(),
        lines: Vec::new(),
        matched_lines: 0,
    };
    let collector = LineCollector {
        shown_path: path.display().to_string(),
        line_numbers: plan.line_numbers,
        max_line_chars: limits.max_line_chars,
        stop_at_first: plan.mode == GrepOutputMode::FilesWithMatches,
        found: &mut found,
    };
    // An unreadable file is skipped, as ripgrep does.
    plan.searcher
        .search_path(&plan.matcher, path, collector)
        .ok()?;
    (found.matched_lines > 0).then_some(found)
}

/// The output entries of a mode: lines, paths, or `path:count`.
fn entries_of(plan: &SearchPlan, mut results: Vec<FileMatches>) -> Vec<String> {
    match plan.mode {
        GrepOutputMode::FilesWithMatches => {
            results.sort_by_cached_key(|found| {
                (std::cmp::Reverse(modified(&found.path)), found.path.clone())
            });
            results
                .iter()
                .map(|found| found.path.display().to_string())
                .collect()
        }
        GrepOutputMode::Count => results
            .iter()
            .map(|found| format!("{}:{}", found.path.display(), found.matched_lines))
            .collect(),
        GrepOutputMode::Content => {
            let mut lines = Vec::new();
            for found in results {
                if plan.with_context && !lines.is_empty() {
                    lines.push("--".to_owned());
                }
                lines.extend(found.lines);
            }
            lines
        }
    }
}

/// Applies `offset`, `head_limit` and the output cap, and says what was left out.
fn page(entries: Vec<String>, input: &GrepInput, limits: &OutputLimits) -> String {
    let total = entries.len();
    let skip = usize::try_from(input.offset.unwrap_or(0)).unwrap_or(usize::MAX);
    let take = input
        .head_limit
        .and_then(|limit| usize::try_from(limit).ok())
        .unwrap_or(usize::MAX);
    let mut shown = String::new();
    let mut count = 0;
    let mut capped = false;
    for entry in entries.iter().skip(skip).take(take) {
        if shown.len() + entry.len() + 1 > limits.max_output_bytes {
            capped = true;
            break;
        }
        shown.push_str(entry);
        shown.push('\n');
        count += 1;
    }
    let after = skip.saturating_add(count);
    if after < total {
        let reason = if capped { " (output cap reached)" } else { "" };
        shown.push_str(&format!(
            "(showing entries {}-{after} of {total}{reason}; continue with offset {after})\n",
            skip.saturating_add(1)
        ));
    } else if count == 0 {
        shown.push_str(&format!(
            "(offset {skip} is past the {total} entries found)\n"
        ));
    }
    shown
}
