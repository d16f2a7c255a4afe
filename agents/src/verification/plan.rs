//! Reading an approved plan: its `## Steps` items, `## Files` entries and `## Tests` commands,
//! from whatever Markdown a model wrote. Nothing here fails: text that fits no rule is skipped.

use serde::{Deserialize, Serialize};

use super::paths::normalize_relative;

/// One numbered item of `## Steps`, with the mentions it can be checked by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedStep {
    /// The number as written (`3.` → 3); the position (from 1) when it has none.
    pub number: u64,
    /// The item's first line, without its number.
    pub text: String,
    /// Paths (or globs, or directories ending in `/`) the item names, including its
    /// continuation lines and sub-bullets.
    pub mentioned_paths: Vec<String>,
    /// Commands the item names in code spans.
    pub mentioned_commands: Vec<String>,
    /// Every word of the item (lowercase), to find `## Files` entries named by file name.
    #[serde(skip)]
    pub(crate) words: Vec<String>,
    /// The whole item (continuation lines included), whitespace collapsed, to find `## Tests`
    /// commands written without backticks.
    #[serde(skip)]
    pub(crate) collapsed_text: String,
}

/// The parts of a plan the report checks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParsedPlan {
    pub steps: Vec<PlannedStep>,
    /// `## Files`, one entry per line: a path relative to the workspace, a directory (ending
    /// in `/`) or a glob.
    pub files: Vec<String>,
    /// `## Tests` commands.
    pub tests: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    Other,
    Steps,
    Files,
    Tests,
}

impl ParsedPlan {
    /// Parses a plan. Headings of any level whose title is `Steps`, `Files` or `Tests`
    /// (case-insensitive; numbering, emphasis and a trailing colon ignored) open a section;
    /// headings inside fenced code blocks do not count.
    pub fn parse(plan: &str) -> ParsedPlan {
        let mut section = Section::Other;
        let mut fence: Option<String> = None;
        let mut step_lines: Vec<Vec<String>> = Vec::new();
        let mut bullet_lines: Vec<Vec<String>> = Vec::new();
        let mut files: Vec<String> = Vec::new();
        let mut tests: Vec<String> = Vec::new();
        for line in plan.lines() {
            let trimmed = line.trim();
            if let Some(marker) = &fence {
                if trimmed.starts_with(marker.as_str()) {
                    fence = None;
                    continue;
                }
                match section {
                    Section::Files => push_file(&mut files, trimmed),
                    Section::Tests => push_fenced_command(&mut tests, trimmed),
                    Section::Steps => {
                        if let Some(last) = step_lines.last_mut() {
                            last.push(trimmed.to_owned());
                        }
                    }
                    Section::Other => {}
                }
                continue;
            }
            if let Some(marker) = fence_marker(trimmed) {
                fence = Some(marker);
                continue;
            }
            if let Some(title) = heading_title(line) {
                section = section_of(&title);
                continue;
            }
            match section {
                Section::Other => {}
                Section::Steps => collect_step_line(line, &mut step_lines, &mut bullet_lines),
                Section::Files => push_file(&mut files, trimmed),
                Section::Tests => push_test_line(&mut tests, trimmed),
            }
        }
        // A model that wrote bullets instead of numbers still has steps.
        let (items, numbered) = if step_lines.is_empty() {
            (bullet_lines, false)
        } else {
            (step_lines, true)
        };
        let steps = items
            .into_iter()
            .enumerate()
            .filter_map(|(index, lines)| step_of(index, &lines, numbered))
            .collect();
        dedup(&mut files);
        dedup(&mut tests);
        ParsedPlan {
            steps,
            files,
            tests,
        }
    }
}

fn dedup(items: &mut Vec<String>) {
    let mut seen = std::collections::BTreeSet::new();
    items.retain(|item| seen.insert(item.clone()));
}

fn fence_marker(trimmed: &str) -> Option<String> {
    for marker in ["```", "~~~"] {
        if trimmed.starts_with(marker) {
            return Some(marker.to_owned());
        }
    }
    None
}

/// The title of an ATX heading (`#` to `######`, at most 3 spaces of indentation).
fn heading_title(line: &str) -> Option<String> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = line.trim_start();
    let hashes = rest.len() - rest.trim_start_matches('#').len();
    if hashes == 0 || hashes > 6 {
        return None;
    }
    let after = &rest[hashes..];
    if !after.is_empty() && !after.starts_with([' ', '\t']) {
        return None;
    }
    Some(after.trim().trim_end_matches('#').trim().to_owned())
}

fn section_of(title: &str) -> Section {
    let cleaned: String = title
        .chars()
        .filter(|c| c.is_alphanumeric() || c.is_whitespace())
        .collect::<String>()
        .to_lowercase();
    let words: Vec<&str> = cleaned
        .split_whitespace()
        .filter(|word| !word.chars().all(|c| c.is_ascii_digit()))
        .collect();
    match words.first().copied() {
        Some("steps" | "step") => Section::Steps,
        Some("files" | "file") => Section::Files,
        Some("tests" | "test" | "testing") => Section::Tests,
        _ => Section::Other,
    }
}

/// `3. text` or `3) text` → (3, text), with at most 3 spaces of indentation.
fn numbered_item(line: &str) -> Option<(u64, &str)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = line.trim_start();
    let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 || digits > 9 {
        return None;
    }
    let after = rest.get(digits..)?;
    let text = after
        .strip_prefix(". ")
        .or_else(|| after.strip_prefix(") "))
        .or_else(|| after.strip_prefix(".\t"))?;
    let number = rest.get(..digits)?.parse().ok()?;
    Some((number, text))
}

fn bullet_item(line: &str) -> Option<&str> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 1 {
        return None;
    }
    let rest = line.trim_start();
    ["- ", "* ", "+ "]
        .iter()
        .find_map(|marker| rest.strip_prefix(marker))
}

fn collect_step_line(
    line: &str,
    step_lines: &mut Vec<Vec<String>>,
    bullet_lines: &mut Vec<Vec<String>>,
) {
    let trimmed = line.trim();
    if trimmed.is_empty() {
        return;
    }
    if let Some((number, text)) = numbered_item(line) {
        step_lines.push(vec![format!("{number}\u{0}{}", text.trim())]);
        return;
    }
    if let Some(text) = bullet_item(line)
        && step_lines.is_empty()
    {
        bullet_lines.push(vec![format!("\u{0}{}", text.trim())]);
        return;
    }
    if let Some(last) = step_lines.last_mut() {
        last.push(trimmed.to_owned());
    } else if let Some(last) = bullet_lines.last_mut() {
        last.push(trimmed.to_owned());
    }
}

fn step_of(index: usize, lines: &[String], numbered: bool) -> Option<PlannedStep> {
    let (first, rest) = lines.split_first()?;
    let (number_text, text) = first.split_once('\u{0}')?;
    let position = u64::try_from(index).unwrap_or(u64::MAX).saturating_add(1);
    let number = if numbered {
        number_text.parse().unwrap_or(position)
    } else {
        position
    };
    let mut whole = text.to_owned();
    for line in rest {
        whole.push('\n');
        whole.push_str(line);
    }
    let mentions = mentions_in(&whole);
    Some(PlannedStep {
        number,
        text: text.to_owned(),
        mentioned_paths: mentions.paths,
        mentioned_commands: mentions.commands,
        words: words_of(&whole),
        collapsed_text: normalize_command(&whole),
    })
}

/// What a piece of prose names.
#[derive(Debug, Default)]
pub(crate) struct Mentions {
    pub paths: Vec<String>,
    pub commands: Vec<String>,
}

/// Paths and commands named in `text`: code spans that look like commands or paths, and bare
/// words that look like paths (a `/`, or a file extension).
pub(crate) fn mentions_in(text: &str) -> Mentions {
    let mut mentions = Mentions::default();
    let (spans, outside) = split_code_spans(text);
    for span in spans {
        let span = span.trim();
        if looks_like_command(span) {
            mentions.commands.push(normalize_command(span));
        } else if span.contains(['(', ')']) {
            // `greet()`, `a.b()`: code, not a path.
        } else if let Some(path) = bare_path(span) {
            mentions.paths.push(path);
        }
    }
    for word in outside.split_whitespace() {
        if let Some(path) = bare_path(word) {
            mentions.paths.push(path);
        }
    }
    dedup(&mut mentions.paths);
    dedup(&mut mentions.commands);
    mentions
}

/// The contents of `` `code spans` `` and the text outside them.
fn split_code_spans(text: &str) -> (Vec<String>, String) {
    let mut spans = Vec::new();
    let mut outside = String::new();
    let mut rest = text;
    while let Some(start) = rest.find('`') {
        outside.push_str(&rest[..start]);
        let after = &rest[start..];
        let ticks = after.len() - after.trim_start_matches('`').len();
        let delimiter = &after[..ticks];
        let body = &after[ticks..];
        match body.find(delimiter) {
            Some(end) => {
                spans.push(body[..end].to_owned());
                outside.push(' ');
                rest = &body[end + ticks..];
            }
            None => {
                outside.push_str(body);
                rest = "";
            }
        }
    }
    outside.push_str(rest);
    (spans, outside)
}

fn words_of(text: &str) -> Vec<String> {
    let mut words: Vec<String> = text
        .split(|c: char| c.is_whitespace() || matches!(c, '`' | '*' | '"' | '\'' | '(' | ')' | ','))
        .map(|word| {
            word.trim_end_matches(['.', ':', ';', '!', '?'])
                .to_lowercase()
        })
        .filter(|word| !word.is_empty())
        .collect();
    words.sort();
    words.dedup();
    words
}

/// Words that are never a `## Files` entry.
const NOT_PATHS: &[&str] = &["none", "n/a", "na", "nothing", "tbd", "-", "no", "—", "..."];

fn strip_list_marker(line: &str) -> &str {
    let mut rest = line.trim();
    if let Some((_, text)) = numbered_item(rest) {
        rest = text.trim();
    }
    for marker in ["- ", "* ", "+ "] {
        if let Some(text) = rest.strip_prefix(marker) {
            rest = text.trim();
            break;
        }
    }
    for checkbox in ["[ ] ", "[x] ", "[X] "] {
        if let Some(text) = rest.strip_prefix(checkbox) {
            rest = text.trim();
        }
    }
    rest
}

fn push_file(files: &mut Vec<String>, trimmed: &str) {
    let item = strip_list_marker(trimmed);
    if item.is_empty() {
        return;
    }
    let (spans, outside) = split_code_spans(item);
    if let Some(path) = spans.iter().find_map(|span| as_path(span.trim())) {
        files.push(path);
        return;
    }
    if !spans.is_empty() {
        return;
    }
    let words: Vec<&str> = outside.split_whitespace().collect();
    if let Some(path) = words.iter().find_map(|word| bare_path(word)) {
        files.push(path);
    } else if let [only] = words.as_slice()
        && let Some(path) = as_path(only)
    {
        // A lone word such as `Makefile`.
        files.push(path);
    }
}

/// Surrounding emphasis, quotes and trailing punctuation removed.
fn clean_token(token: &str) -> &str {
    token
        .trim_matches(|c: char| matches!(c, '*' | '_' | '"' | '\'' | '<' | '>' | '(' | ')'))
        .trim_end_matches([',', ';', ':', '.', '!', '?'])
}

/// A path when `text` could be one: no whitespace, not a URL, not prose like "none".
fn as_path(text: &str) -> Option<String> {
    let token = clean_token(text.trim());
    if token.is_empty()
        || token.chars().any(char::is_whitespace)
        || token.contains("://")
        || NOT_PATHS.contains(&token.to_lowercase().as_str())
        || !token
            .chars()
            .any(|c| c.is_alphanumeric() || matches!(c, '*' | '?'))
    {
        return None;
    }
    let directory = token.ends_with('/');
    let normalized = normalize_relative(token)?;
    Some(if directory && !normalized.ends_with('/') {
        format!("{normalized}/")
    } else {
        normalized
    })
}

/// A bare word that looks like a path: it has a `/` between names, or a file extension
/// (`name.ext`, the extension 1–8 letters or digits, not all digits).
fn bare_path(word: &str) -> Option<String> {
    let token = clean_token(word);
    if token.contains("://") || token.starts_with('-') || token.contains('=') {
        return None;
    }
    let has_separator = token.trim_matches('/').contains('/')
        && token.split('/').filter(|part| !part.is_empty()).count() >= 2;
    let has_extension = token.rsplit_once('.').is_some_and(|(stem, extension)| {
        let stem_name = stem.rsplit('/').next().unwrap_or(stem);
        !stem_name.is_empty()
            && stem_name.chars().any(char::is_alphanumeric)
            && (1..=8).contains(&extension.len())
            && extension.chars().all(|c| c.is_ascii_alphanumeric())
            && !extension.chars().all(|c| c.is_ascii_digit())
            && !matches!(
                token.to_lowercase().as_str(),
                "e.g" | "i.e" | "etc" | "vs" | "a.k.a"
            )
    });
    if has_separator || has_extension {
        as_path(token)
    } else {
        None
    }
}

/// Programs (first words) that make a line a command.
const COMMAND_WORDS: &[&str] = &[
    "cargo",
    "rustc",
    "rustup",
    "npm",
    "npx",
    "yarn",
    "pnpm",
    "bun",
    "deno",
    "node",
    "pytest",
    "py.test",
    "python",
    "python3",
    "tox",
    "nox",
    "uv",
    "poetry",
    "pip",
    "go",
    "make",
    "just",
    "bash",
    "sh",
    "zsh",
    "mvn",
    "gradle",
    "./gradlew",
    "ant",
    "dotnet",
    "ctest",
    "cmake",
    "bazel",
    "ruby",
    "rake",
    "rspec",
    "bundle",
    "mix",
    "elixir",
    "swift",
    "php",
    "phpunit",
    "composer",
    "jest",
    "vitest",
    "mocha",
    "git",
    "grep",
    "rg",
    "test",
    "diff",
    "cmp",
    "cat",
    "ls",
    "echo",
    "jq",
    "curl",
    "docker",
    "sbt",
    "lein",
    "stack",
    "cabal",
    "dune",
    "zig",
    "perl",
    "prove",
    "julia",
    "rscript",
    "busted",
    "tsc",
    "eslint",
    "ruff",
    "mypy",
    "black",
    "gofmt",
    "rustfmt",
    "clippy-driver",
    "muster",
    "timeout",
    "env",
];

/// A command when its first word (after `$ ` and `NAME=value` assignments) is a known program
/// or a relative executable (`./x`, `bin/x`, `scripts/x`).
pub(crate) fn looks_like_command(text: &str) -> bool {
    let text = text.trim().trim_start_matches("$ ").trim();
    let Some(program) = text
        .split_whitespace()
        .find(|word| !is_assignment(word))
        .map(str::to_lowercase)
    else {
        return false;
    };
    COMMAND_WORDS.contains(&program.as_str())
        || program.starts_with("./")
        || program.starts_with("bin/")
        || program.starts_with("scripts/")
}

/// `NAME=value`.
pub(crate) fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// Whitespace collapsed, a leading `$ ` prompt removed.
pub(crate) fn normalize_command(command: &str) -> String {
    command
        .trim()
        .trim_start_matches("$ ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn push_fenced_command(tests: &mut Vec<String>, trimmed: &str) {
    let line = trimmed.trim_start_matches("$ ").trim();
    if line.is_empty() || line.starts_with('#') || line.starts_with("//") {
        return;
    }
    tests.push(normalize_command(line));
}

fn push_test_line(tests: &mut Vec<String>, trimmed: &str) {
    let item = strip_list_marker(trimmed);
    if item.is_empty() {
        return;
    }
    let (spans, outside) = split_code_spans(item);
    let commands: Vec<String> = spans
        .iter()
        .filter(|span| looks_like_command(span))
        .map(|span| normalize_command(span))
        .collect();
    if !commands.is_empty() {
        tests.extend(commands);
        return;
    }
    if !spans.is_empty() {
        return;
    }
    let mut line = outside.trim();
    for prefix in ["run:", "run ", "execute ", "then "] {
        if line.len() >= prefix.len()
            && line.is_char_boundary(prefix.len())
            && line[..prefix.len()].eq_ignore_ascii_case(prefix)
        {
            line = line[prefix.len()..].trim();
        }
    }
    for cut in [" — ", " # ", " -- to ", " (", " – "] {
        if let Some((head, _)) = line.split_once(cut) {
            line = head.trim();
        }
    }
    if looks_like_command(line) {
        tests.push(normalize_command(line));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: &str = "# Plan: greeting\n\n## Goal\nGreet.\n\n## Steps\n1. Add `greet()` to `src/lib.rs`\n   - export it from src/main.rs\n2) Write hello.txt.\n3. Run `cargo test -p greet`\n10. Update the README\n\n## Files\n- `src/lib.rs`\n- src/main.rs (new)\n* **hello.txt** — the greeting\nMakefile\n- `docs/` \n- none\n\n## Tests\n- `cargo test -p greet`\n- run pytest -q — quick\n```sh\n$ make check\n# a comment\n```\nManual check in the browser.\n\n## Risks\n- `rm -rf /` is not run\n";

    #[test]
    fn reads_steps_files_and_tests_from_realistic_markdown() {
        let plan = ParsedPlan::parse(PLAN);
        let numbers: Vec<u64> = plan.steps.iter().map(|step| step.number).collect();
        assert_eq!(numbers, vec![1, 2, 3, 10]);
        assert_eq!(plan.steps[0].text, "Add `greet()` to `src/lib.rs`");
        assert_eq!(
            plan.steps[0].mentioned_paths,
            vec!["src/lib.rs", "src/main.rs"]
        );
        assert_eq!(plan.steps[1].mentioned_paths, vec!["hello.txt"]);
        assert_eq!(
            plan.steps[2].mentioned_commands,
            vec!["cargo test -p greet"]
        );
        assert!(plan.steps[3].mentioned_paths.is_empty());
        assert_eq!(
            plan.files,
            vec![
                "src/lib.rs",
                "src/main.rs",
                "hello.txt",
                "Makefile",
                "docs/"
            ]
        );
        assert_eq!(
            plan.tests,
            vec!["cargo test -p greet", "pytest -q", "make check"]
        );
    }

    #[test]
    fn table_of_section_titles() {
        let cases = [
            ("## Steps", Section::Steps),
            ("### steps:", Section::Steps),
            ("## 2. Files", Section::Files),
            ("## **Files to change**", Section::Files),
            ("# Tests", Section::Tests),
            ("## Testing plan", Section::Tests),
            ("## Risks", Section::Other),
            ("## Goal", Section::Other),
        ];
        for (line, expected) in cases {
            let title = heading_title(line).unwrap_or_default();
            assert_eq!(section_of(&title), expected, "{line}");
        }
        assert_eq!(heading_title("#hashtag"), None);
        assert_eq!(heading_title("    ## indented code"), None);
    }

    #[test]
    fn table_of_file_lines() {
        let cases: &[(&str, Option<&str>)] = &[
            ("src/a.rs", Some("src/a.rs")),
            ("- `./src/a.rs`", Some("src/a.rs")),
            ("1. src/x/../a.rs: the parser", Some("src/a.rs")),
            ("- [ ] `tests/**/*.rs`", Some("tests/**/*.rs")),
            ("Modify src/a.rs to add x", Some("src/a.rs")),
            ("- `my file.txt`", None),
            ("- none", None),
            ("N/A", None),
            ("Some prose without any path", None),
            ("- https://example.com/a.rs", None),
            ("- ../outside.rs", None),
            ("- ..hidden.rs", Some("..hidden.rs")),
            ("- Dockerfile", Some("Dockerfile")),
        ];
        for (line, expected) in cases {
            let mut files = Vec::new();
            push_file(&mut files, line);
            assert_eq!(files.first().map(String::as_str), *expected, "{line}");
        }
    }

    #[test]
    fn table_of_test_lines() {
        let cases: &[(&str, Option<&str>)] = &[
            ("- `cargo  test`", Some("cargo test")),
            ("Run `npm test` after", Some("npm test")),
            (
                "- RUST_LOG=debug cargo test -- --nocapture",
                Some("RUST_LOG=debug cargo test -- --nocapture"),
            ),
            (
                "- Run: ./scripts/check.sh — all of it",
                Some("./scripts/check.sh"),
            ),
            ("- unit tests in `tests/a.rs`", None),
            ("none", None),
            ("- Check it by hand", None),
        ];
        for (line, expected) in cases {
            let mut tests = Vec::new();
            push_test_line(&mut tests, line);
            assert_eq!(tests.first().map(String::as_str), *expected, "{line}");
        }
    }

    #[test]
    fn bullets_are_steps_when_nothing_is_numbered() {
        let plan = ParsedPlan::parse("## Steps\n- edit a.rs\n- edit b.rs\n## Files\na.rs\n");
        let numbers: Vec<u64> = plan.steps.iter().map(|step| step.number).collect();
        assert_eq!(numbers, vec![1, 2]);
        assert_eq!(plan.steps[1].mentioned_paths, vec!["b.rs"]);
    }

    #[test]
    fn headings_inside_fences_do_not_open_sections() {
        let plan = ParsedPlan::parse("## Files\n```\n## Steps\nsrc/a.rs\n```\n");
        assert!(plan.steps.is_empty());
        assert_eq!(plan.files, vec!["src/a.rs"]);
    }

    proptest::proptest! {
        #[test]
        fn any_text_parses_without_panicking(text in proptest::prelude::any::<String>()) {
            let sections = format!("## Steps\n1. {text}\n## Files\n{text}\n## Tests\n{text}\n");
            for plan in [text.as_str(), sections.as_str()] {
                let parsed = ParsedPlan::parse(plan);
                for file in &parsed.files {
                    // `..name` is a legal file name; only a `..` component would escape.
                    proptest::prop_assert!(
                        !file.is_empty() && !file.split('/').any(|part| part == ".."),
                        "{file}"
                    );
                }
            }
        }
    }

    #[test]
    fn unterminated_spans_and_odd_text_do_not_panic() {
        for text in [
            "## Steps\n1. `unterminated",
            "## Files\n`",
            "##\n#######",
            "## Steps\n99999999999. x",
            "## Tests\nrun ",
            "## Files\n- é/ü.rs\n- `ü`",
        ] {
            let _ = ParsedPlan::parse(text);
        }
    }
}
