//! Verification against the approved plan: after a teammate finishes an approved plan, its
//! own transcript is compared with the plan, and a [`VerificationReport`] (the `report` of a
//! `verification_report` message) marks each `## Steps` item, each `## Files` entry and each
//! `## Tests` command `done`, `deviated` or `missing`, lists unplanned changes, and gives the
//! evidence of each: a path, or a command and its exit status.
//!
//! # Calling it
//! ```text
//! let rows = store.records(run_id, agent, TRANSCRIPT, 0).await?;   // the agent's transcript
//! // Reads no file (it only resolves the root once): fine on the async runtime.
//! let report = build_report(agent, rows.iter().map(|row| &row.body), workspace_root)?;
//! MessageBody::VerificationReport { request_id: report.request_id.clone(), report: report.to_json() }
//! report.render_text()                                               // for summaries
//! ```
//! [`build_report`] finds the newest `plan_snapshot` with `state: "approved"` (its content is
//! the plan, an edited approval included) and reads only the records after it. A caller that
//! tracks the approval itself passes the plan text and the records after it to
//! [`report_for_plan`]; the parts are public too ([`ParsedPlan::parse`],
//! [`ToolLog::from_records`], [`VerificationReport::check`]).
//!
//! # What counts as evidence (attribution)
//! Only `tool_call` records after the approval whose `decision` is `allow` or `ask` (denied
//! and invalid calls did not run). Their inputs come from the `tool_use` blocks of `message`
//! records (the whole transcript is searched).
//! - `Write`, `Edit`, `MultiEdit` (`file_path`) and `NotebookEdit` (`notebook_path`): the path
//!   (made relative to the workspace root) changed when `is_error` is false; a failed call is
//!   an attempt, kept as evidence of a deviation, never of a change.
//! - `Bash`: the command and its exit code; the files it changed come from its
//!   [`BashEffects`] record (`type: "bash_effects"`), which the runtime writes around every
//!   non-read-only Bash call ([`BashMeasurement`]: the workspace's Bash lock taken, a
//!   [`WorkspaceSnapshot`] before the command and one after, [`WorkspaceSnapshot::diff`]).
//!   A Bash call without that record (a read-only one, or one from before this record
//!   existed) changed nothing as far as the report knows (its exit code is then read from the
//!   `[exit code N]` status line). A record with `effects_unknown` is no evidence of any
//!   change: the notes of missing files and steps then say that evidence may be missing.
//!
//! ## The `bash_effects` record (for the runtime)
//! ```text
//! {"type": "bash_effects", "tool_use_id": "toolu_…", "command": "sed -i … src/a.rs",
//!  "exit_code": 0 | null, "changed": ["src/a.rs", …],
//!  "effects_unknown": "before the command: …"}        // only when the changes are unknown
//! ```
//! Written for every Bash call that ran allowed without the permission engine's read-only
//! verdict (`read_only_shell`), while the workspace's non-read-only Bash calls are serialised
//! by a process-wide lock keyed by the canonical workspace path (so the diff is the command's
//! own; file tools take no lock but announce their paths with [`FileEdits`], and what another
//! agent's file tool wrote meanwhile is left out, see [`BashMeasurement`]): snapshot before
//! spawning, snapshot after the process group ends (also on timeout or interruption, with
//! `exit_code: null`), then the record in the same commit as the call's `tool_call`, just
//! before it (`Record::BashEffects`, which resume skips). `changed` holds created, modified and deleted
//! paths, relative to the workspace root, `/`-separated, sorted. When a snapshot fails or the
//! workspace exceeds [`SnapshotLimits`] (100 000 files, 512 MiB to read), the command still
//! runs and returns its result; `changed` is then empty and `effects_unknown` says why.
//! [`BashEffects::to_record_body`] writes this JSON. A call interrupted by a crash has no
//! record: whatever it changed is unattributed.
//!
//! Subagents keep their own transcripts: to count a subagent's edits, chain its record
//! bodies after the teammate's (everything after the approval counts).
//!
//! Files changed any other way (by hand, by another agent, by a Bash call that was not
//! recorded) are not evidence: a status without evidence is `missing`.
//!
//! # Matching (simple and explainable)
//! - **Paths.** A plan path matches a changed path when they are equal; an entry ending in `/`
//!   matches everything under it; an entry with `*`, `?`, `[` or `{` is a glob (`*` stays
//!   within one directory, `**` crosses them); an entry without `/` also matches by its last
//!   component (`lib.rs` matches `src/lib.rs`).
//! - **Commands.** A command line is split into simple commands at `&&`, `||`, `;`, `|` and
//!   newlines; leading `NAME=value` assignments and redirections (`2>&1`, `> out`) are
//!   dropped. A planned command is *run as
//!   written* when one of those equals it (whitespace collapsed); it is *run differently* when
//!   one runs the same program and subcommand (`cargo test`, `npm test`, `python -m pytest`,
//!   `pytest`) with other arguments.
//! - **`## Files` entries:** `done` if a change to it applied; `deviated` if only failed edits
//!   touched it; `missing` otherwise.
//! - **`## Tests` commands:** `done` if run as written and it exited 0; `deviated` if run as
//!   written but never exited 0, or only run differently; `missing` if never run.
//! - **`## Steps` items:** a step is checked by what it names, in its text, continuation lines
//!   and sub-bullets: paths (code spans or words with a `/` or a file extension), commands
//!   (code spans starting with a known program such as `cargo`, `npm`, `pytest`, `make`, or
//!   `./…`), `## Tests` commands written in it without backticks, and `## Files` entries
//!   named by file name (`lib.rs`) or stem of 3+ characters (`hello` for `hello.txt`). Each named path is satisfied by an applied change, each named
//!   command by a run as written that exited 0. All satisfied → `done`; none with any
//!   evidence → `missing`; anything between (some missing, failed, run differently) →
//!   `deviated`. A step that names nothing checkable is `missing` (its note says so).
//! - **Unplanned changes:** every applied change whose path no `## Files` entry matches,
//!   except the plan file itself, with the calls that made it.
//! - **No evidence, no status:** `done` or `deviated` without evidence becomes `missing`, also
//!   when a report is read back with [`VerificationReport::from_json`].
//!
//! # Parsing plans
//! [`ParsedPlan::parse`] accepts any Markdown: headings of any level titled Steps/Files/Tests
//! (case, numbering, emphasis and a trailing colon ignored); steps are items numbered `1.` or
//! `1)` (bullets when nothing is numbered); `## Files` takes one path per line (bullets,
//! numbering, checkboxes, backticks and trailing descriptions tolerated; "none" skipped);
//! `## Tests` takes code spans and fenced lines that look like commands, and plain lines
//! starting with a known program. Nothing in this module panics on any input.

mod effects;
mod paths;
mod plan;
mod report;
mod snapshot;
mod tool_log;

use std::path::{Path, PathBuf};

use serde_json::Value;

pub use effects::{BashMeasurement, FileEdits, bash_calls_waiting};
pub use plan::{ParsedPlan, PlannedStep};
pub use report::{
    CheckedItem, CommandRun, Evidence, ReportSummary, Status, UnplannedChange, VerificationReport,
};
pub use snapshot::{
    RACY_MARGIN, SKIPPED_DIRECTORIES, SnapshotDiff, SnapshotLimits, WorkspaceSnapshot,
};
pub use tool_log::{BASH_EFFECTS, BashEffects, ToolLog};

/// Why no report could be built.
#[derive(Debug, thiserror::Error)]
pub enum VerificationError {
    /// The records hold no `plan_snapshot` with `state: "approved"`.
    #[error("agent {agent} has no approved plan in its records")]
    NoApprovedPlan { agent: String },
    /// The workspace cannot be walked.
    #[error("workspace {root}: {detail}")]
    Workspace { root: PathBuf, detail: String },
    /// The workspace is beyond what a snapshot may cost ([`SnapshotLimits`]).
    #[error("workspace {root} is too large to snapshot: {detail}")]
    WorkspaceTooLarge { root: PathBuf, detail: String },
    /// A `verification_report`'s JSON is not a report.
    #[error("malformed verification report: {0}")]
    MalformedReport(String),
}

/// The report for `agent` from its transcript record bodies (in `seq` order; the `body` of
/// each stored row, or [`crate::runtime::Record::body`]), with paths made relative to
/// `workspace_root` (the agent's workspace). Fails only when there is no approved plan.
pub fn build_report<'a>(
    agent: &str,
    records: impl IntoIterator<Item = &'a Value>,
    workspace_root: &Path,
) -> Result<VerificationReport, VerificationError> {
    let records: Vec<&Value> = records.into_iter().collect();
    let approved =
        tool_log::approved_plan(&records).ok_or_else(|| VerificationError::NoApprovedPlan {
            agent: agent.to_owned(),
        })?;
    let after = records.get(approved.index..).unwrap_or_default();
    let log = ToolLog::from_records(after, &records, workspace_root);
    let plan = ParsedPlan::parse(&approved.content);
    Ok(VerificationReport::check(
        agent,
        &approved.path,
        approved.request_id,
        &plan,
        &log,
    ))
}

/// The report for a plan given as text, against `records` taken as all after the approval
/// (for callers that track the approval themselves).
pub fn report_for_plan<'a>(
    agent: &str,
    plan_path: &str,
    plan: &str,
    records: impl IntoIterator<Item = &'a Value>,
    workspace_root: &Path,
) -> VerificationReport {
    let records: Vec<&Value> = records.into_iter().collect();
    let log = ToolLog::from_records(&records, &records, workspace_root);
    VerificationReport::check(agent, plan_path, None, &ParsedPlan::parse(plan), &log)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn write_call(id: &str, path: &str, is_error: bool) -> [Value; 2] {
        [
            json!({"type": "message", "mode": "default", "message": {"role": "assistant",
                "content": [{"type": "tool_use", "id": id, "name": "Write",
                "input": {"file_path": path, "content": "x"}}]}}),
            json!({"type": "tool_call", "tool_use_id": id, "tool": "Write", "decision": "allow",
                "reason": "", "content": "", "is_error": is_error}),
        ]
    }

    #[test]
    fn table_of_steps_and_their_status() {
        let plan = "## Steps\n1. Edit a.rs and b.rs\n2. Make it nicer\n3. Touch the hello file\n4. Edit c.rs\n5. Then run make check\n## Files\na.rs\nb.rs\nhello.txt\nc.rs\n## Tests\nmake check\n";
        let records: Vec<Value> = [
            write_call("t1", "/ws/a.rs", false),
            write_call("t2", "hello.txt", false),
            write_call("t3", "c.rs", true),
        ]
        .concat();
        let report = report_for_plan("w", "p.md", plan, &records, Path::new("/ws"));
        let statuses: Vec<(u64, Status)> = report
            .steps
            .iter()
            .map(|step| (step.number.unwrap_or_default(), step.status))
            .collect();
        assert_eq!(
            statuses,
            vec![
                (1, Status::Deviated), // a.rs changed, b.rs not
                (2, Status::Missing),  // names nothing checkable
                (3, Status::Done),     // `hello` names hello.txt
                (4, Status::Deviated), // only a failed Write
                (5, Status::Missing),  // the planned test, never run
            ]
        );
        assert!(report.steps[1].note.contains("names no file or command"));
        assert_eq!(
            report.render_text(),
            "Verification of w's plan p.md: 3 done, 3 deviated, 4 missing, 0 unplanned changes
Steps:
  [deviated] 1. Edit a.rs and b.rs — b.rs: not changed; evidence: Write a.rs
  [missing] 2. Make it nicer — names no file or command, so nothing in the tool log can show it
  [done] 3. Touch the hello file — Write hello.txt
  [deviated] 4. Edit c.rs — c.rs: only failed attempts; evidence: Write c.rs (failed)
  [missing] 5. Then run make check — `make check`: never run
Files:
  [done] a.rs — Write a.rs
  [missing] b.rs — no change to it in the tool log
  [done] hello.txt — Write hello.txt
  [deviated] c.rs — only failed attempts to change it; evidence: Write c.rs (failed)
Tests:
  [missing] make check — never run
"
        );
        assert_eq!(report.files[0].evidence[0].path.as_deref(), Some("a.rs"));
    }

    #[test]
    fn writes_outside_the_workspace_are_unplanned_by_their_absolute_path() {
        let records = write_call("t1", "/elsewhere/x.rs", false);
        let report = report_for_plan("w", "p.md", "## Files\na.rs\n", &records, Path::new("/ws"));
        assert_eq!(report.unplanned[0].path, "/elsewhere/x.rs");
        assert_eq!(report.files[0].status, Status::Missing);
        assert!(!report.is_clean());
    }

    #[test]
    fn only_records_after_the_newest_approval_count() {
        let snapshot = |state: &str, plan: &str| {
            json!({"type": "plan_snapshot", "path": ".muster/plans/p.md", "content": plan,
                "state": state, "request_id": "r2"})
        };
        let mut records = vec![snapshot("approved", "## Files\nold.rs\n")];
        records.extend(write_call("t1", "a.rs", false));
        records.push(snapshot("edited", "## Files\na.rs\n"));
        records.push(snapshot("approved", "## Files\nb.rs\n"));
        records.extend(write_call("t2", "b.rs", false));
        let report = build_report("w", &records, Path::new("/ws")).unwrap();
        assert_eq!(report.request_id.as_deref(), Some("r2"));
        assert_eq!(report.files.len(), 1);
        assert_eq!(report.files[0].item, "b.rs");
        assert_eq!(report.files[0].status, Status::Done);
        assert!(report.unplanned.is_empty());
    }

    #[test]
    fn a_report_that_is_not_one_is_an_error() {
        assert!(matches!(
            VerificationReport::from_json(&json!({"steps": 3})),
            Err(VerificationError::MalformedReport(_))
        ));
    }
}
