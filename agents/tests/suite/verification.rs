//! Verification reports from realistic transcripts on a real temporary workspace: the records
//! are the runtime's own types ([`Record`], [`Message`]), files are really written, and Bash
//! commands really run with the workspace hashed around them into `bash_effects` records, as
//! the runtime is to do.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::path::Path;
use std::process::Command;

use muster_agents::model::{ContentBlock, Message, Role};
use muster_agents::runtime::{AgentKind, Record};
use muster_agents::verification::{
    BashEffects, Status, VerificationError, VerificationReport, WorkspaceSnapshot, build_report,
};
use muster_config::PermissionMode;
use proptest::prelude::*;
use serde_json::{Value, json};

const PLAN_PATH: &str = ".muster/plans/brave-quiet-otter-agent-worker.md";

const PLAN: &str = "## Goal\nA greeting for the CLI.\n\n## Steps\n1. Add `greet()` to `src/lib.rs`\n2. Call it from src/main.rs\n3. Document it in the README\n4. Run `cargo test -p greet` and fix what fails\n\n## Files\n- `src/lib.rs`\n- `src/main.rs`\n- README.md\n\n## Tests\n- `cargo test -p greet`\n\n## Risks\nNone.\n";

/// A teammate's transcript being written, on a real workspace.
struct Transcript {
    workspace: tempfile::TempDir,
    records: Vec<Value>,
    next_id: u32,
    turn: u64,
}

impl Transcript {
    /// A teammate that planned, submitted and got `plan` approved.
    fn approved(plan: &str) -> Transcript {
        let workspace = tempfile::tempdir().unwrap();
        let root = workspace.path();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::create_dir_all(root.join(".muster/plans")).unwrap();
        std::fs::write(
            root.join("src/lib.rs"),
            "pub fn add(a: i32, b: i32) -> i32 { a + b }\n",
        )
        .unwrap();
        std::fs::write(root.join("src/main.rs"), "fn main() {}\n").unwrap();
        std::fs::write(root.join("README.md"), "# greet\n").unwrap();
        std::fs::write(root.join(".gitignore"), "target/\n").unwrap();
        std::fs::write(root.join(PLAN_PATH), plan).unwrap();
        let mut transcript = Transcript {
            workspace,
            records: Vec::new(),
            next_id: 0,
            turn: 0,
        };
        transcript.push(&Record::Started {
            definition: "worker".to_owned(),
            agent_kind: AgentKind::Teammate {
                lead: "lead".to_owned(),
            },
            mode: PermissionMode::Plan,
            pre_plan_mode: Some(PermissionMode::Default),
            plan_file: Some(PLAN_PATH.to_owned()),
            system: "You are worker.".to_owned(),
            tools: vec!["Read".to_owned(), "Write".to_owned(), "Bash".to_owned()],
            mcp_tools: Vec::new(),
            model_limits: Default::default(),
            endpoint: None,
        });
        // Before the approval: edits in plan mode are never evidence.
        transcript.write("src/lib.rs", "// sketch\n");
        let exit_plan = transcript.tool_use("ExitPlanMode", json!({}));
        for (state, request_id) in [("draft", None), ("submitted", Some("req-1"))] {
            transcript.push(&Record::PlanSnapshot {
                path: PLAN_PATH.to_owned(),
                content: plan.to_owned(),
                state: state.to_owned(),
                request_id: request_id.map(str::to_owned),
            });
        }
        transcript.push(&Record::Awaiting {
            request_id: "req-1".to_owned(),
            tool_use_id: exit_plan.clone(),
            responder: "lead".to_owned(),
        });
        transcript.push(&Record::PlanSnapshot {
            path: PLAN_PATH.to_owned(),
            content: plan.to_owned(),
            state: "approved".to_owned(),
            request_id: Some("req-1".to_owned()),
        });
        transcript.push(&Record::Mode {
            mode: PermissionMode::Default,
            pre_plan_mode: None,
            reason: "plan approved".to_owned(),
        });
        transcript.tool_call(&exit_plan, "ExitPlanMode", "allow", "approved", false);
        transcript
    }

    fn root(&self) -> &Path {
        self.workspace.path()
    }

    fn push(&mut self, record: &Record) {
        self.records.push(record.body());
    }

    /// An assistant message with one `tool_use`; returns its id.
    fn tool_use(&mut self, tool: &str, input: Value) -> String {
        self.next_id += 1;
        self.turn += 1;
        let id = format!("toolu_{:04}", self.next_id);
        // The `message` record as the runtime writes it (built as JSON: the record's other
        // fields change with the runtime, the shape read here does not).
        let message = Message {
            role: Role::Assistant,
            content: vec![ContentBlock::ToolUse {
                id: id.clone(),
                name: tool.to_owned(),
                input,
            }],
        };
        self.records.push(json!({
            "type": "message",
            "message": serde_json::to_value(&message).unwrap(),
            "turn": self.turn,
            "model": "claude-test",
            "mode": "default",
            "stop_reason": "tool_use",
        }));
        id
    }

    fn tool_call(&mut self, id: &str, tool: &str, decision: &str, content: &str, is_error: bool) {
        self.push(&Record::ToolStarted {
            tool_use_id: id.to_owned(),
            tool: tool.to_owned(),
            process_group: None,
            host: None,
            boot_id: None,
        });
        self.push(&Record::ToolCall {
            tool_use_id: id.to_owned(),
            tool: tool.to_owned(),
            decision: decision.to_owned(),
            reason: "allowed by mode".to_owned(),
            content: content.to_owned(),
            is_error,
        });
    }

    /// `Write` with an absolute path, as models send it; the file is really written.
    fn write(&mut self, path: &str, content: &str) {
        let absolute = self.root().join(path);
        std::fs::create_dir_all(absolute.parent().unwrap()).unwrap();
        std::fs::write(&absolute, content).unwrap();
        let id = self.tool_use(
            "Write",
            json!({"file_path": absolute.to_string_lossy(), "content": content}),
        );
        self.tool_call(&id, "Write", "allow", &format!("Wrote {path}"), false);
    }

    /// An `Edit` that did not apply (its `old_string` was not found).
    fn failed_edit(&mut self, path: &str) {
        let id = self.tool_use(
            "Edit",
            json!({"file_path": path, "old_string": "nope", "new_string": "x"}),
        );
        self.tool_call(&id, "Edit", "allow", "old_string not found", true);
    }

    /// A Bash call the permission engine denied: it never ran.
    fn denied_bash(&mut self, command: &str) {
        let id = self.tool_use("Bash", json!({"command": command}));
        self.tool_call(&id, "Bash", "deny", "denied by rule", true);
    }

    /// A non-read-only Bash call: really run in the workspace, hashed around, recorded with
    /// `bash_effects` as the runtime will.
    fn bash(&mut self, command: &str) -> i32 {
        let before = WorkspaceSnapshot::take(self.root()).unwrap();
        let exit_code = self.run(command);
        let after = WorkspaceSnapshot::take(self.root()).unwrap();
        let id = self.tool_use("Bash", json!({"command": command, "description": "run it"}));
        self.records.push(
            BashEffects {
                tool_use_id: id.clone(),
                command: command.to_owned(),
                exit_code: Some(exit_code),
                changed: after.diff(&before).changed_paths(),
                effects_unknown: None,
            }
            .to_record_body(),
        );
        self.tool_call(
            &id,
            "Bash",
            "allow",
            &format!("ok\n[exit code {exit_code}]"),
            exit_code != 0,
        );
        exit_code
    }

    /// A Bash call whose `bash_effects` record says its changes are unknown (the workspace was
    /// too large to hash); the command really runs.
    fn bash_with_unknown_effects(&mut self, command: &str) {
        let exit_code = self.run(command);
        let id = self.tool_use("Bash", json!({"command": command}));
        self.records.push(
            BashEffects {
                tool_use_id: id.clone(),
                command: command.to_owned(),
                exit_code: Some(exit_code),
                changed: Vec::new(),
                effects_unknown: Some(
                    "before the command: workspace is too large to snapshot: more than 100000 files"
                        .to_owned(),
                ),
            }
            .to_record_body(),
        );
        self.tool_call(&id, "Bash", "allow", "[exit code 0]", exit_code != 0);
    }

    /// A Bash call run without a `bash_effects` record (as a read-only call is).
    fn unrecorded_bash(&mut self, command: &str) -> i32 {
        let exit_code = self.run(command);
        let id = self.tool_use("Bash", json!({"command": command}));
        self.tool_call(
            &id,
            "Bash",
            "allow",
            &format!("[exit code {exit_code}]"),
            exit_code != 0,
        );
        exit_code
    }

    fn run(&self, command: &str) -> i32 {
        let status = Command::new("bash")
            .arg("-c")
            .arg(command)
            .current_dir(self.root())
            .status()
            .unwrap();
        status.code().unwrap_or(-1)
    }

    fn finish(&mut self) {
        self.push(&Record::Finished {
            result: "All steps are done.".to_owned(),
        });
    }

    fn report(&self) -> VerificationReport {
        let report = build_report("worker", &self.records, self.root()).unwrap();
        // What the lead receives reads back the same.
        assert_eq!(
            VerificationReport::from_json(&report.to_json()).unwrap(),
            report
        );
        report
    }
}

/// A stand-in for `cargo test -p greet` that exits with the given code.
fn fake_test_runner(transcript: &Transcript) {
    let bin = transcript.root().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("cargo"), "#!/bin/sh\nexit \"${FAKE_EXIT:-0}\"\n").unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(bin.join("cargo"))
        .status()
        .unwrap();
    std::fs::write(transcript.root().join(".gitignore"), "target/\nbin/\n").unwrap();
}

fn status_of<'a>(
    items: &'a [muster_agents::verification::CheckedItem],
    item: &str,
) -> &'a muster_agents::verification::CheckedItem {
    items
        .iter()
        .find(|checked| checked.item == item || checked.item.starts_with(item))
        .unwrap_or_else(|| panic!("no item {item}"))
}

#[test]
fn everything_as_planned_is_done_with_its_evidence() {
    let mut transcript = Transcript::approved(PLAN);
    fake_test_runner(&transcript);
    transcript.write("src/lib.rs", "pub fn greet() -> &'static str { \"hi\" }\n");
    transcript.write(
        "src/main.rs",
        "fn main() { println!(\"{}\", greet::greet()); }\n",
    );
    transcript.bash("printf 'Call greet().\\n' >> README.md");
    transcript.unrecorded_bash("PATH=bin:$PATH cargo test -p greet");
    transcript.finish();

    let report = transcript.report();
    assert!(report.is_clean(), "{}", report.render_text());
    assert_eq!(report.request_id.as_deref(), Some("req-1"));
    assert_eq!(report.plan_path, PLAN_PATH);
    assert_eq!(report.summary.done, 3 + 4 + 1);
    let readme = status_of(&report.files, "README.md");
    assert_eq!(
        readme.evidence[0].command.as_deref(),
        Some("printf 'Call greet().\\n' >> README.md")
    );
    // Only changes after the approval count: one Write to src/lib.rs, not the sketch.
    assert_eq!(status_of(&report.files, "src/lib.rs").evidence.len(), 1);
    let text = report.render_text();
    assert!(
        text.starts_with(&format!(
            "Verification of worker's plan {PLAN_PATH}: 8 done, 0 deviated, 0 missing, 0 unplanned changes\n"
        )),
        "{text}"
    );
    assert!(
        text.contains("[done] 4. Run `cargo test -p greet`"),
        "{text}"
    );
}

#[test]
fn a_planned_file_left_untouched_is_missing() {
    let mut transcript = Transcript::approved(PLAN);
    transcript.write("src/lib.rs", "pub fn greet() {}\n");
    transcript.write("README.md", "# greet\nCall greet().\n");
    transcript.finish();

    let report = transcript.report();
    let main = status_of(&report.files, "src/main.rs");
    assert_eq!(main.status, Status::Missing);
    assert!(main.evidence.is_empty());
    assert_eq!(
        status_of(&report.steps, "Call it from").status,
        Status::Missing
    );
    assert_eq!(status_of(&report.files, "src/lib.rs").status, Status::Done);
    assert!(report.render_text().contains("[missing] src/main.rs"));
}

#[test]
fn an_edit_outside_files_is_unplanned_with_its_evidence() {
    let mut transcript = Transcript::approved(PLAN);
    transcript.write("src/lib.rs", "pub fn greet() {}\n");
    transcript.write("src/util.rs", "pub fn helper() {}\n");
    transcript.bash("mkdir -p scripts && echo 'echo hi' > scripts/hi.sh");
    transcript.finish();

    let report = transcript.report();
    let unplanned: Vec<&str> = report
        .unplanned
        .iter()
        .map(|change| change.path.as_str())
        .collect();
    assert_eq!(unplanned, vec!["scripts/hi.sh", "src/util.rs"]);
    assert_eq!(report.unplanned[1].evidence[0].tool, "Write");
    assert_eq!(
        report.unplanned[0].evidence[0].command.as_deref(),
        Some("mkdir -p scripts && echo 'echo hi' > scripts/hi.sh")
    );
    assert_eq!(report.unplanned[0].evidence[0].exit_code, Some(0));
    assert_eq!(report.summary.unplanned, 2);
    assert!(
        report
            .render_text()
            .contains("Unplanned changes:\n  scripts/hi.sh")
    );
}

#[test]
fn table_of_test_runs_and_their_status() {
    // (the command run, FAKE_EXIT, expected status of the planned `cargo test -p greet`)
    let cases = [
        ("PATH=bin:$PATH cargo test -p greet", 0, Status::Done),
        (
            "PATH=bin:$PATH cargo test -p greet 2>&1 | tail -3",
            0,
            Status::Done,
        ),
        ("PATH=bin:$PATH cargo test", 0, Status::Deviated),
        (
            "PATH=bin:$PATH cargo test -p greet --no-run",
            0,
            Status::Deviated,
        ),
        (
            "export FAKE_EXIT=101; PATH=bin:$PATH cargo test -p greet",
            101,
            Status::Deviated,
        ),
        ("PATH=bin:$PATH cargo build -p greet", 0, Status::Missing),
    ];
    for (command, fake_exit, expected) in cases {
        let mut transcript = Transcript::approved(PLAN);
        fake_test_runner(&transcript);
        let exit = transcript.unrecorded_bash(&format!("export FAKE_EXIT={fake_exit}; {command}"));
        assert_eq!(exit, fake_exit, "{command}");
        transcript.finish();
        let report = transcript.report();
        let test = status_of(&report.tests, "cargo test -p greet");
        assert_eq!(test.status, expected, "{command}: {}", report.render_text());
        if expected != Status::Missing {
            assert_eq!(test.evidence[0].exit_code, Some(fake_exit), "{command}");
            assert!(
                test.evidence[0]
                    .command
                    .as_deref()
                    .unwrap()
                    .contains("cargo")
            );
        }
        // Step 4 names the same command: it follows the test.
        let step = status_of(&report.steps, "Run `cargo test");
        assert_eq!(step.status, expected, "{command}");
    }
}

#[test]
fn a_status_without_evidence_counts_as_missing() {
    let mut transcript = Transcript::approved(PLAN);
    // The file really changes, but by a Bash call the runtime did not record effects for,
    // and the agent claims it is done: no evidence, so missing.
    transcript.unrecorded_bash("echo 'pub fn greet() {}' >> src/lib.rs");
    // A denied call never ran; an edit whose input is lost shows nothing.
    transcript.denied_bash("echo x >> src/main.rs");
    transcript.push(&Record::ToolCall {
        tool_use_id: "toolu_lost".to_owned(),
        tool: "Write".to_owned(),
        decision: "allow".to_owned(),
        reason: String::new(),
        content: "Wrote README.md".to_owned(),
        is_error: false,
    });
    transcript.finish();

    let report = transcript.report();
    for file in ["src/lib.rs", "src/main.rs", "README.md"] {
        assert_eq!(
            status_of(&report.files, file).status,
            Status::Missing,
            "{file}"
        );
    }
    assert_eq!(report.summary.done, 0);
    assert!(report.unplanned.is_empty());

    // A report that claims `done` without evidence reads back as missing.
    let mut claimed = report.to_json();
    claimed["files"][0]["status"] = json!("done");
    claimed["summary"]["done"] = json!(99);
    let read = VerificationReport::from_json(&claimed).unwrap();
    assert_eq!(read.files[0].status, Status::Missing);
    assert_eq!(read.summary.done, 0);
}

#[test]
fn a_bash_call_that_changed_a_planned_file_is_done_with_the_command_as_evidence() {
    let mut transcript = Transcript::approved(PLAN);
    transcript.bash("sed -i 's/sketch/greet/' src/lib.rs");
    transcript.finish();

    let report = transcript.report();
    let lib = status_of(&report.files, "src/lib.rs");
    assert_eq!(lib.status, Status::Done);
    assert_eq!(lib.evidence.len(), 1);
    assert_eq!(lib.evidence[0].tool, "Bash");
    assert_eq!(
        lib.evidence[0].command.as_deref(),
        Some("sed -i 's/sketch/greet/' src/lib.rs")
    );
    assert_eq!(lib.evidence[0].exit_code, Some(0));
    assert_eq!(lib.evidence[0].path.as_deref(), Some("src/lib.rs"));
    assert_eq!(
        status_of(&report.steps, "Add `greet()`").status,
        Status::Done
    );
    assert_eq!(report.commands.len(), 1);
    assert_eq!(report.commands[0].changed, vec!["src/lib.rs"]);
}

#[test]
fn a_bash_call_with_unknown_effects_is_no_evidence_and_the_report_says_so() {
    let mut transcript = Transcript::approved(PLAN);
    transcript.bash_with_unknown_effects("sed -i 's/sketch/greet/' src/lib.rs");
    transcript.write("src/main.rs", "fn main() {}\n");
    transcript.finish();

    let report = transcript.report();
    let lib = status_of(&report.files, "src/lib.rs");
    assert_eq!(lib.status, Status::Missing, "the change is not invented");
    assert!(lib.evidence.is_empty());
    assert!(
        lib.note
            .contains("the files changed by `sed -i 's/sketch/greet/' src/lib.rs`")
            && lib.note.contains("more than 100000 files")
            && lib.note.contains("evidence may be missing"),
        "{}",
        lib.note
    );
    let step = status_of(&report.steps, "Add `greet()`");
    assert_eq!(step.status, Status::Missing);
    assert!(
        step.note.contains("evidence may be missing"),
        "{}",
        step.note
    );
    // What did change by a file tool is unaffected.
    assert_eq!(status_of(&report.files, "src/main.rs").status, Status::Done);
    assert!(report.commands[0].effects_unknown.is_some());
    assert!(
        report
            .render_text()
            .contains("(exit 0; files changed unknown: before the command:"),
        "{}",
        report.render_text()
    );
}

#[test]
fn only_failed_edits_to_a_planned_file_are_a_deviation() {
    let mut transcript = Transcript::approved(PLAN);
    transcript.failed_edit("src/main.rs");
    transcript.write("src/lib.rs", "pub fn greet() {}\n");
    transcript.finish();
    let report = transcript.report();
    let main = status_of(&report.files, "src/main.rs");
    assert_eq!(main.status, Status::Deviated);
    assert!(main.evidence[0].is_error);
    assert_eq!(
        status_of(&report.steps, "Call it from").status,
        Status::Deviated
    );
}

#[test]
fn no_approved_plan_is_an_error() {
    let records = vec![
        Record::PlanSnapshot {
            path: PLAN_PATH.to_owned(),
            content: PLAN.to_owned(),
            state: "submitted".to_owned(),
            request_id: Some("req-1".to_owned()),
        }
        .body(),
    ];
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        build_report("worker", &records, dir.path()),
        Err(VerificationError::NoApprovedPlan { .. })
    ));
}

fn arbitrary_record() -> impl Strategy<Value = Value> {
    let text = "[ -~\\n`#*./]{0,40}";
    prop_oneof![
        (text, text, any::<bool>(), prop::sample::select(vec!["allow", "ask", "deny", "x"]),
            prop::sample::select(vec!["Write", "Edit", "Bash", "NotebookEdit", "Read"]))
            .prop_map(|(id, content, is_error, decision, tool)| json!({
                "type": "tool_call", "tool_use_id": id, "tool": tool, "decision": decision,
                "reason": "", "content": content, "is_error": is_error})),
        (text, text, prop::sample::select(vec!["Write", "Edit", "Bash", "NotebookEdit"]))
            .prop_map(|(id, path, tool)| json!({"type": "message", "mode": "default",
                "message": {"role": "assistant", "content": [{"type": "tool_use", "id": id,
                "name": tool, "input": {"file_path": path, "notebook_path": path, "command": path}}]}})),
        (text, text, prop::option::of(any::<i32>()), prop::collection::vec(text, 0..3))
            .prop_map(|(id, command, exit_code, changed)| json!({"type": "bash_effects",
                "tool_use_id": id, "command": command, "exit_code": exit_code, "changed": changed})),
        (text, prop::sample::select(vec!["approved", "draft"]))
            .prop_map(|(content, state)| json!({"type": "plan_snapshot", "path": "p.md",
                "content": content, "state": state})),
        Just(json!({"type": "tool_call", "tool_use_id": 5, "is_error": "no"})),
        Just(json!(null)),
        Just(json!([1, 2])),
        Just(json!({"type": "bash_effects", "changed": "not a list"})),
        (text, text).prop_map(|(id, why)| json!({"type": "bash_effects", "tool_use_id": id,
            "command": "x", "exit_code": null, "changed": [], "effects_unknown": why})),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_plan_and_any_records_never_panic(
        plan in "(## (Steps|Files|Tests|Goal)\\n|[0-9]{1,12}[.)] |- |`|```|\\.\\./|/|[ -~]|\\n|é){0,200}",
        records in prop::collection::vec(arbitrary_record(), 0..20),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut all = vec![json!({"type": "plan_snapshot", "path": "p.md", "content": plan,
            "state": "approved"})];
        all.extend(records);
        if let Ok(report) = build_report("worker", &all, dir.path()) {
            let _ = report.render_text();
            let read = VerificationReport::from_json(&report.to_json()).unwrap();
            for item in read.steps.iter().chain(&read.files).chain(&read.tests) {
                prop_assert!(item.status == Status::Missing || !item.evidence.is_empty());
            }
        }
    }
}
