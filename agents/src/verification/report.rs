//! The report: plan items checked against the tool log, and its text for people.

use muster_protocol::ToolName;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use globset::GlobBuilder;
use serde::{Deserialize, Serialize};

use super::plan::{ParsedPlan, PlannedStep, is_assignment, normalize_command};
use super::tool_log::{LoggedCall, ToolLog};

/// How a plan item went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Everything it names happened, and the evidence shows it.
    Done,
    /// Part of it happened, or it happened otherwise than planned (a test run with other
    /// arguments, a failed command, an edit that failed).
    Deviated,
    /// Nothing in the tool log shows it happened.
    Missing,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Done => "done",
            Status::Deviated => "deviated",
            Status::Missing => "missing",
        }
    }
}

/// One tool call that shows something happened: a path, or a command and its exit status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    pub tool_use_id: String,
    /// `Write`, `Edit`, `MultiEdit`, `NotebookEdit` or `Bash`.
    pub tool: String,
    /// The file it changed (or tried to), relative to the workspace root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The Bash command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// The command's exit code (`None`: killed, timed out or unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The call failed (an edit that did not apply, a command that did not exit 0).
    #[serde(default)]
    pub is_error: bool,
}

impl Evidence {
    /// `Edit src/a.rs`, `` Bash `cargo test` (exit 0) ``, for people.
    pub fn render_text(&self) -> String {
        match (&self.command, &self.path) {
            (Some(command), path) => {
                let status = match self.exit_code {
                    Some(code) => format!("exit {code}"),
                    None => "no exit code".to_owned(),
                };
                match path {
                    Some(path) => format!("{} `{command}` ({status}) changed {path}", self.tool),
                    None => format!("{} `{command}` ({status})", self.tool),
                }
            }
            (None, Some(path)) if self.is_error => format!("{} {path} (failed)", self.tool),
            (None, Some(path)) => format!("{} {path}", self.tool),
            (None, None) => format!("{} ({})", self.tool, self.tool_use_id),
        }
    }
}

/// A plan item (a step, a `## Files` entry, a `## Tests` command) and how it went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckedItem {
    /// A step's number as written; absent for files and tests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number: Option<u64>,
    /// The step's text, the path or the command.
    pub item: String,
    pub status: Status,
    pub evidence: Vec<Evidence>,
    /// Why this status, in a sentence.
    pub note: String,
}

impl CheckedItem {
    /// An item whose status needs evidence: `done` or `deviated` without any is `missing`.
    fn new(
        number: Option<u64>,
        item: String,
        status: Status,
        evidence: Vec<Evidence>,
        note: String,
    ) -> CheckedItem {
        let mut checked = CheckedItem {
            number,
            item,
            status,
            evidence,
            note,
        };
        checked.require_evidence();
        checked
    }

    /// A status without evidence counts as missing.
    fn require_evidence(&mut self) {
        if self.status != Status::Missing && self.evidence.is_empty() {
            self.status = Status::Missing;
            self.note = format!("no evidence in the tool log (was: {})", self.note);
        }
    }
}

/// A file changed that `## Files` does not name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnplannedChange {
    pub path: String,
    pub evidence: Vec<Evidence>,
}

/// A Bash command run after the approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandRun {
    pub tool_use_id: String,
    pub command: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The files it changed (from its `bash_effects` record).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<String>,
    /// Why the files it changed are unknown (its `bash_effects` record says so): the report
    /// then lacks evidence for them, and says so in the notes of what is missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effects_unknown: Option<String>,
}

/// Counts over steps, files and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportSummary {
    pub done: usize,
    pub deviated: usize,
    pub missing: usize,
    pub unplanned: usize,
}

/// The `report` of a `verification_report` message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerificationReport {
    /// The agent the report is about.
    pub agent: String,
    /// The approved plan's file (as its snapshot names it).
    pub plan_path: String,
    /// The approved request, when the snapshot names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    pub steps: Vec<CheckedItem>,
    pub files: Vec<CheckedItem>,
    pub tests: Vec<CheckedItem>,
    pub unplanned: Vec<UnplannedChange>,
    pub commands: Vec<CommandRun>,
    pub summary: ReportSummary,
}

/// Where a plan names a path: exactly, under a directory (`docs/`), by a glob, or (a path
/// without `/`) by its last components (`lib.rs` names `src/lib.rs`).
#[derive(Debug, Clone)]
struct PathPattern {
    written: String,
    glob: Option<globset::GlobMatcher>,
}

impl PathPattern {
    fn new(written: &str) -> PathPattern {
        let glob = written
            .contains(['*', '?', '[', '{'])
            .then(|| {
                GlobBuilder::new(written)
                    .literal_separator(true)
                    .build()
                    .ok()
                    .map(|glob| glob.compile_matcher())
            })
            .flatten();
        PathPattern {
            written: written.to_owned(),
            glob,
        }
    }

    fn matches(&self, path: &str) -> bool {
        if let Some(glob) = &self.glob {
            return glob.is_match(path);
        }
        let written = self.written.as_str();
        if written.ends_with('/') {
            return path.starts_with(written);
        }
        path == written
            || (!written.contains('/')
                && !written.starts_with('/')
                && path.ends_with(&format!("/{written}")))
    }
}

/// One change of one file, as evidence.
struct FileChange {
    path: String,
    evidence: Evidence,
    /// The file did change (an edit that succeeded, a command's recorded effect).
    applied: bool,
}

/// Everything the tool log shows, indexed for matching.
struct Attribution {
    changes: Vec<FileChange>,
    commands: Vec<(Evidence, String)>,
    /// Bash calls whose changes are unknown: `` `command` (why) ``.
    unknown_effects: Vec<String>,
}

impl Attribution {
    fn of(log: &ToolLog) -> Attribution {
        let mut changes = Vec::new();
        let mut commands = Vec::new();
        let mut unknown_effects = Vec::new();
        for call in &log.calls {
            match call {
                LoggedCall::FileEdit {
                    tool_use_id,
                    tool,
                    path,
                    is_error,
                } => {
                    // An edit whose path is unknown shows nothing.
                    let Some(path) = path else { continue };
                    changes.push(FileChange {
                        path: path.clone(),
                        evidence: Evidence {
                            tool_use_id: tool_use_id.clone(),
                            tool: tool.clone(),
                            path: Some(path.clone()),
                            command: None,
                            exit_code: None,
                            is_error: *is_error,
                        },
                        applied: !is_error,
                    });
                }
                LoggedCall::Command {
                    tool_use_id,
                    command,
                    exit_code,
                    changed,
                    effects_unknown,
                } => {
                    if let Some(why) = effects_unknown {
                        unknown_effects.push(format!("`{command}` ({why})"));
                    }
                    let evidence = Evidence {
                        tool_use_id: tool_use_id.clone(),
                        tool: ToolName::Bash.to_string(),
                        path: None,
                        command: Some(command.clone()),
                        exit_code: *exit_code,
                        is_error: *exit_code != Some(0),
                    };
                    for path in changed {
                        changes.push(FileChange {
                            path: path.clone(),
                            evidence: Evidence {
                                path: Some(path.clone()),
                                ..evidence.clone()
                            },
                            applied: true,
                        });
                    }
                    commands.push((evidence, normalize_command(command)));
                }
            }
        }
        Attribution {
            changes,
            commands,
            unknown_effects,
        }
    }

    /// `note`, with the Bash calls whose effects are unknown when there are any: what they
    /// changed is not evidence either way.
    fn note_unknown_effects(&self, note: String) -> String {
        if self.unknown_effects.is_empty() {
            return note;
        }
        format!(
            "{note}; the files changed by {} are unknown, so evidence may be missing",
            self.unknown_effects.join(", ")
        )
    }

    /// The changes `pattern` names: (evidence, whether any of them applied).
    fn changes_named(&self, pattern: &PathPattern) -> (Vec<Evidence>, bool) {
        let matching: Vec<&FileChange> = self
            .changes
            .iter()
            .filter(|change| pattern.matches(&change.path))
            .collect();
        let applied = matching.iter().any(|change| change.applied);
        (
            matching
                .iter()
                .map(|change| change.evidence.clone())
                .collect(),
            applied,
        )
    }

    /// Runs of `planned`: those run as written, those run otherwise (same program and
    /// subcommand).
    fn runs_of(&self, planned: &str) -> (Vec<&Evidence>, Vec<&Evidence>) {
        let planned = without_redirections(&normalize_command(planned));
        let planned_key = command_key(&planned);
        let mut as_written = Vec::new();
        let mut otherwise = Vec::new();
        for (evidence, command) in &self.commands {
            let segments = segments_of(command);
            if *command == planned || segments.contains(&planned) {
                as_written.push(evidence);
            } else if planned_key.is_some()
                && segments
                    .iter()
                    .any(|segment| command_key(segment) == planned_key)
            {
                otherwise.push(evidence);
            }
        }
        (as_written, otherwise)
    }
}

/// The simple commands of a command line: split at `&&`, `||`, `;`, `|` and newlines, each
/// without leading `NAME=value` assignments and redirections (quotes are not parsed: a
/// heuristic).
fn segments_of(command: &str) -> Vec<String> {
    command
        .split(['\n', ';'])
        .flat_map(|part| part.split("&&"))
        .flat_map(|part| part.split("||"))
        .flat_map(|part| part.split('|'))
        .map(without_redirections)
        .filter(|segment| !segment.is_empty())
        .collect()
}

/// A simple command without its leading `NAME=value` assignments and its redirections
/// (`2>&1`, `> out.txt`, `2>/dev/null`), whitespace collapsed.
fn without_redirections(segment: &str) -> String {
    let mut words = Vec::new();
    let mut skip_target = false;
    for word in segment
        .split_whitespace()
        .skip_while(|word| is_assignment(word))
    {
        if skip_target {
            skip_target = false;
            continue;
        }
        let operator = word.trim_start_matches(|c: char| c.is_ascii_digit() || c == '&');
        if operator.starts_with(['>', '<']) {
            // `>` alone takes the next word as its target; `>file` and `>&1` carry it.
            skip_target = operator.trim_start_matches(['>', '<', '&']).is_empty()
                && !operator.ends_with('&')
                && !word.ends_with(|c: char| c.is_ascii_digit());
            continue;
        }
        words.push(word);
    }
    words.join(" ")
}

/// Programs whose first argument is a subcommand that says what runs (`cargo test`).
const SUBCOMMAND_PROGRAMS: &[&str] = &[
    "cargo",
    "npm",
    "yarn",
    "pnpm",
    "bun",
    "deno",
    "go",
    "git",
    "dotnet",
    "mix",
    "poetry",
    "uv",
    "bundle",
    "npx",
    "make",
    "just",
    "rake",
    "gradle",
    "./gradlew",
    "mvn",
    "docker",
];

/// What a command runs: its program (after `NAME=value` assignments), with the subcommand for
/// [`SUBCOMMAND_PROGRAMS`] and the module for `python -m`.
fn command_key(command: &str) -> Option<String> {
    let mut words = command
        .split_whitespace()
        .skip_while(|word| is_assignment(word));
    let program = words.next()?.to_lowercase();
    let next = words.next();
    if SUBCOMMAND_PROGRAMS.contains(&program.as_str())
        && let Some(subcommand) = next.filter(|word| !word.starts_with('-'))
    {
        return Some(format!("{program} {subcommand}"));
    }
    if program.starts_with("python") && next == Some("-m") {
        return Some(format!("{program} -m {}", words.next().unwrap_or_default()));
    }
    Some(program)
}

fn dedup_evidence(evidence: &mut Vec<Evidence>) {
    let mut seen = std::collections::BTreeSet::new();
    evidence.retain(|item| {
        seen.insert((
            item.tool_use_id.clone(),
            item.path.clone(),
            item.command.clone(),
        ))
    });
}

/// How one thing a step names went.
enum MentionOutcome {
    Satisfied,
    Partial,
    Absent,
}

impl VerificationReport {
    /// Checks `plan` against `log` (see the module documentation of [`super`] for the rules).
    pub fn check(
        agent: &str,
        plan_path: &str,
        request_id: Option<String>,
        plan: &ParsedPlan,
        log: &ToolLog,
    ) -> VerificationReport {
        let attribution = Attribution::of(log);
        let file_patterns: Vec<PathPattern> = plan
            .files
            .iter()
            .map(|file| PathPattern::new(file))
            .collect();

        let files = file_patterns
            .iter()
            .map(|pattern| check_file(pattern, &attribution))
            .collect();
        let tests = plan
            .tests
            .iter()
            .map(|test| check_test(test, &attribution))
            .collect();
        let steps = plan
            .steps
            .iter()
            .map(|step| check_step(step, plan, &attribution))
            .collect();

        let plan_file = super::paths::normalize_relative(plan_path);
        let mut unplanned: BTreeMap<String, Vec<Evidence>> = BTreeMap::new();
        for change in attribution.changes.iter().filter(|change| change.applied) {
            let planned = file_patterns
                .iter()
                .any(|pattern| pattern.matches(&change.path));
            let is_plan_file = plan_file.as_deref().is_some_and(|plan_file| {
                plan_file == change.path || plan_file.ends_with(&format!("/{}", change.path))
            });
            if !planned && !is_plan_file {
                unplanned
                    .entry(change.path.clone())
                    .or_default()
                    .push(change.evidence.clone());
            }
        }
        let unplanned = unplanned
            .into_iter()
            .map(|(path, mut evidence)| {
                dedup_evidence(&mut evidence);
                UnplannedChange { path, evidence }
            })
            .collect();

        let commands = log
            .calls
            .iter()
            .filter_map(|call| match call {
                LoggedCall::Command {
                    tool_use_id,
                    command,
                    exit_code,
                    changed,
                    effects_unknown,
                } => Some(CommandRun {
                    tool_use_id: tool_use_id.clone(),
                    command: command.clone(),
                    exit_code: *exit_code,
                    changed: changed.clone(),
                    effects_unknown: effects_unknown.clone(),
                }),
                LoggedCall::FileEdit { .. } => None,
            })
            .collect();

        let mut report = VerificationReport {
            agent: agent.to_owned(),
            plan_path: plan_path.to_owned(),
            request_id,
            steps,
            files,
            tests,
            unplanned,
            commands,
            summary: ReportSummary::default(),
        };
        report.recount();
        report
    }

    /// Reads a report from a `verification_report`'s JSON. Statuses without evidence become
    /// `missing`, and the summary is recounted, whatever the sender wrote.
    pub fn from_json(
        report: &serde_json::Value,
    ) -> Result<VerificationReport, super::VerificationError> {
        let mut parsed: VerificationReport = serde_json::from_value(report.clone())
            .map_err(|error| super::VerificationError::MalformedReport(error.to_string()))?;
        for item in parsed
            .steps
            .iter_mut()
            .chain(&mut parsed.files)
            .chain(&mut parsed.tests)
        {
            item.require_evidence();
        }
        parsed
            .unplanned
            .retain(|change| !change.evidence.is_empty());
        parsed.recount();
        Ok(parsed)
    }

    /// The `report` JSON of a `verification_report` message.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    fn recount(&mut self) {
        let mut summary = ReportSummary {
            unplanned: self.unplanned.len(),
            ..ReportSummary::default()
        };
        for item in self.steps.iter().chain(&self.files).chain(&self.tests) {
            match item.status {
                Status::Done => summary.done += 1,
                Status::Deviated => summary.deviated += 1,
                Status::Missing => summary.missing += 1,
            }
        }
        self.summary = summary;
    }

    /// Whether everything planned is done and nothing unplanned changed.
    pub fn is_clean(&self) -> bool {
        self.summary.deviated == 0 && self.summary.missing == 0 && self.summary.unplanned == 0
    }

    /// The report for people (summaries, the lead's inbox).
    pub fn render_text(&self) -> String {
        let summary = &self.summary;
        let mut text = format!(
            "Verification of {}'s plan {}: {} done, {} deviated, {} missing, {} unplanned change{}\n",
            self.agent,
            self.plan_path,
            summary.done,
            summary.deviated,
            summary.missing,
            summary.unplanned,
            if summary.unplanned == 1 { "" } else { "s" }
        );
        for (title, items) in [
            ("Steps", &self.steps),
            ("Files", &self.files),
            ("Tests", &self.tests),
        ] {
            if items.is_empty() {
                continue;
            }
            let _ = writeln!(text, "{title}:");
            for item in items {
                let label = match item.number {
                    Some(number) => format!("{number}. {}", item.item),
                    None => item.item.clone(),
                };
                let evidence: Vec<String> =
                    item.evidence.iter().map(Evidence::render_text).collect();
                let detail = match (item.status, evidence.is_empty()) {
                    (Status::Done, false) => evidence.join("; "),
                    (_, true) => item.note.clone(),
                    (_, false) => format!("{}; evidence: {}", item.note, evidence.join("; ")),
                };
                let _ = writeln!(text, "  [{}] {label} — {detail}", item.status.as_str());
            }
        }
        if !self.unplanned.is_empty() {
            let _ = writeln!(text, "Unplanned changes:");
            for change in &self.unplanned {
                let evidence: Vec<String> =
                    change.evidence.iter().map(Evidence::render_text).collect();
                let _ = writeln!(text, "  {} — {}", change.path, evidence.join("; "));
            }
        }
        if !self.commands.is_empty() {
            let _ = writeln!(text, "Commands run:");
            for run in &self.commands {
                let mut status = match run.exit_code {
                    Some(code) => format!("exit {code}"),
                    None => "no exit code".to_owned(),
                };
                if let Some(why) = &run.effects_unknown {
                    let _ = write!(status, "; files changed unknown: {why}");
                }
                let _ = writeln!(text, "  `{}` ({status})", run.command);
            }
        }
        text
    }
}

fn check_file(pattern: &PathPattern, attribution: &Attribution) -> CheckedItem {
    let (mut evidence, applied) = attribution.changes_named(pattern);
    dedup_evidence(&mut evidence);
    let (status, note) = if applied {
        (Status::Done, "changed".to_owned())
    } else if !evidence.is_empty() {
        (
            Status::Deviated,
            "only failed attempts to change it".to_owned(),
        )
    } else {
        (
            Status::Missing,
            attribution.note_unknown_effects("no change to it in the tool log".to_owned()),
        )
    };
    CheckedItem::new(None, pattern.written.clone(), status, evidence, note)
}

fn check_test(test: &str, attribution: &Attribution) -> CheckedItem {
    let (as_written, otherwise) = attribution.runs_of(test);
    let passed: Vec<Evidence> = as_written
        .iter()
        .filter(|evidence| evidence.exit_code == Some(0))
        .map(|evidence| (*evidence).clone())
        .collect();
    let (status, evidence, note) = if !passed.is_empty() {
        (Status::Done, passed, "run as planned, exit 0".to_owned())
    } else if !as_written.is_empty() {
        (
            Status::Deviated,
            as_written.into_iter().cloned().collect(),
            "run as planned but it did not exit 0".to_owned(),
        )
    } else if !otherwise.is_empty() {
        (
            Status::Deviated,
            otherwise.into_iter().cloned().collect(),
            "run differently from the plan".to_owned(),
        )
    } else {
        (Status::Missing, Vec::new(), "never run".to_owned())
    };
    CheckedItem::new(None, normalize_command(test), status, evidence, note)
}

/// The `## Files` entries a step names by file name (`lib.rs`) or by stem (`hello` for
/// `hello.txt`, stems of 3 characters or more).
fn files_named_by_words(step: &PlannedStep, plan: &ParsedPlan) -> Vec<String> {
    plan.files
        .iter()
        .filter(|file| {
            let name = file
                .trim_end_matches('/')
                .rsplit('/')
                .next()
                .unwrap_or_default();
            let name = name.to_lowercase();
            let stem = name.split_once('.').map_or(name.as_str(), |(stem, _)| stem);
            !name.is_empty()
                && !name.contains(['*', '?', '['])
                && (step.words.contains(&name)
                    || (stem.len() >= 3 && step.words.iter().any(|word| word == stem)))
        })
        .cloned()
        .collect()
}

fn check_step(step: &PlannedStep, plan: &ParsedPlan, attribution: &Attribution) -> CheckedItem {
    let mut paths = step.mentioned_paths.clone();
    for file in files_named_by_words(step, plan) {
        if !paths.contains(&file) {
            paths.push(file);
        }
    }
    let mut commands = step.mentioned_commands.clone();
    for test in &plan.tests {
        if !commands.contains(test) && step.collapsed_text.contains(test.as_str()) {
            commands.push(test.clone());
        }
    }
    if paths.is_empty() && commands.is_empty() {
        return CheckedItem::new(
            Some(step.number),
            step.text.clone(),
            Status::Missing,
            Vec::new(),
            "names no file or command, so nothing in the tool log can show it".to_owned(),
        );
    }
    let mut evidence = Vec::new();
    let mut outcomes = Vec::new();
    let mut notes = Vec::new();
    let mut path_absent = false;
    for path in &paths {
        let (found, applied) = attribution.changes_named(&PathPattern::new(path));
        let outcome = if applied {
            MentionOutcome::Satisfied
        } else if !found.is_empty() {
            notes.push(format!("{path}: only failed attempts"));
            MentionOutcome::Partial
        } else {
            notes.push(format!("{path}: not changed"));
            path_absent = true;
            MentionOutcome::Absent
        };
        outcomes.push(outcome);
        evidence.extend(found);
    }
    for command in &commands {
        let (as_written, otherwise) = attribution.runs_of(command);
        let outcome = if as_written.iter().any(|run| run.exit_code == Some(0)) {
            MentionOutcome::Satisfied
        } else if !as_written.is_empty() {
            notes.push(format!("`{command}`: did not exit 0"));
            MentionOutcome::Partial
        } else if !otherwise.is_empty() {
            notes.push(format!("`{command}`: run differently"));
            MentionOutcome::Partial
        } else {
            notes.push(format!("`{command}`: never run"));
            MentionOutcome::Absent
        };
        outcomes.push(outcome);
        evidence.extend(as_written.into_iter().chain(otherwise).cloned());
    }
    dedup_evidence(&mut evidence);
    let all = outcomes
        .iter()
        .all(|outcome| matches!(outcome, MentionOutcome::Satisfied));
    let none = outcomes
        .iter()
        .all(|outcome| matches!(outcome, MentionOutcome::Absent));
    let status = if all {
        Status::Done
    } else if none {
        Status::Missing
    } else {
        Status::Deviated
    };
    let note = if notes.is_empty() {
        "everything it names happened".to_owned()
    } else if path_absent {
        attribution.note_unknown_effects(notes.join("; "))
    } else {
        notes.join("; ")
    };
    CheckedItem::new(Some(step.number), step.text.clone(), status, evidence, note)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_of_path_patterns() {
        let cases = [
            ("src/a.rs", "src/a.rs", true),
            ("src/a.rs", "src/ab.rs", false),
            ("a.rs", "src/a.rs", true),
            ("a.rs", "src/xa.rs", false),
            ("docs/", "docs/guide.md", true),
            ("docs/", "docsx/guide.md", false),
            ("tests/*.rs", "tests/a.rs", true),
            ("tests/*.rs", "tests/deep/a.rs", false),
            ("tests/**/*.rs", "tests/deep/a.rs", true),
            ("[unclosed", "[unclosed", true),
        ];
        for (pattern, path, expected) in cases {
            assert_eq!(
                PathPattern::new(pattern).matches(path),
                expected,
                "{pattern} {path}"
            );
        }
    }

    #[test]
    fn table_of_command_keys() {
        let cases = [
            ("cargo test -p greet", Some("cargo test")),
            ("RUST_LOG=1 cargo test", Some("cargo test")),
            ("cargo --locked test", Some("cargo")),
            ("pytest -q tests/a.py", Some("pytest")),
            ("python3 -m pytest -x", Some("python3 -m pytest")),
            ("make", Some("make")),
            ("", None),
        ];
        for (command, expected) in cases {
            assert_eq!(command_key(command).as_deref(), expected, "{command}");
        }
    }

    #[test]
    fn segments_split_compound_commands() {
        assert_eq!(
            segments_of("cd crate && cargo test -p greet 2>&1 | tail -5; echo done"),
            vec!["cd crate", "cargo test -p greet", "tail -5", "echo done"]
        );
        assert_eq!(
            segments_of("cargo test > out.txt 2>/dev/null"),
            vec!["cargo test"]
        );
        assert_eq!(segments_of("cargo test &> log"), vec!["cargo test"]);
        assert_eq!(
            segments_of("PATH=bin:$PATH A=1 cargo test"),
            vec!["cargo test"]
        );
    }

    #[test]
    fn a_status_without_evidence_is_missing() {
        for status in [Status::Done, Status::Deviated, Status::Missing] {
            let item = CheckedItem::new(None, "x".to_owned(), status, Vec::new(), "n".to_owned());
            assert_eq!(item.status, Status::Missing);
        }
    }
}
