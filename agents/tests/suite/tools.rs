//! The tool set on real temporary workspaces: every tool's happy path and its clear errors,
//! path confinement with real symlinks, and `Bash` process groups.

#![allow(clippy::expect_used, reason = "test setup fails loudly")]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use muster_agents::tools::{
    Bash, BashOutcome, Edit, Glob, Grep, HandledBy, Ls, MultiEdit, NotebookEdit, OutputLimits,
    PathAccess, PathUse, ProcessGroupId, ProcessGroupRecorder, Read, RecordFuture, ShutdownSignal,
    TOOL_NAMES, Tool, ToolContext, ToolDetails, ToolOutput, ToolRegistry, Workspace, Write,
};
use serde_json::{Value, json};

/// A temporary workspace and a context on it.
struct Fixture {
    directory: tempfile::TempDir,
    context: ToolContext,
}

impl Fixture {
    fn new() -> Self {
        let directory = tempfile::tempdir().expect("temporary directory");
        let workspace = Workspace::new(directory.path()).expect("workspace");
        let context = ToolContext::new(workspace, std::env::vars_os().collect());
        Self { directory, context }
    }

    fn root(&self) -> PathBuf {
        self.context.workspace().root().to_path_buf()
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.root().join(relative)
    }

    fn write(&self, relative: &str, content: &str) {
        let path = self.path(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create parent");
        }
        std::fs::write(path, content).expect("write fixture file");
    }

    fn read(&self, relative: &str) -> String {
        std::fs::read_to_string(self.path(relative)).expect("read file")
    }

    async fn call(&self, tool: &dyn Tool, input: Value) -> ToolOutput {
        tool.call(&self.context, input).await
    }
}

#[track_caller]
fn assert_ok(output: &ToolOutput) {
    assert!(
        !output.is_error,
        "expected success, got: {}",
        output.content
    );
}

#[track_caller]
fn assert_error(output: &ToolOutput, fragments: &[&str]) {
    assert!(
        output.is_error,
        "expected an error, got: {}",
        output.content
    );
    for fragment in fragments {
        assert!(
            output.content.contains(fragment),
            "error `{}` lacks `{fragment}`",
            output.content
        );
    }
}

// ---- Read ----

#[tokio::test]
async fn read_numbers_lines_like_cat_n() {
    let fixture = Fixture::new();
    fixture.write("notes.txt", "alpha\nbeta\ngamma\n");
    let output = fixture.call(&Read, json!({"file_path": "notes.txt"})).await;
    assert_ok(&output);
    assert_eq!(
        output.content,
        "     1\talpha\n     2\tbeta\n     3\tgamma\n"
    );
}

#[tokio::test]
async fn read_takes_an_absolute_path_inside_the_workspace() {
    let fixture = Fixture::new();
    fixture.write("src/lib.rs", "fn main() {}\n");
    let path = fixture.path("src/lib.rs");
    let output = fixture
        .call(
            &Read,
            json!({"file_path": path.to_str().expect("utf-8 path")}),
        )
        .await;
    assert_ok(&output);
    assert!(output.content.contains("fn main() {}"));
}

#[tokio::test]
async fn read_offset_and_limit_select_a_window() {
    let fixture = Fixture::new();
    let text: String = (1..=10).map(|n| format!("line {n}\n")).collect();
    fixture.write("ten.txt", &text);
    let output = fixture
        .call(
            &Read,
            json!({"file_path": "ten.txt", "offset": 4, "limit": 2}),
        )
        .await;
    assert_ok(&output);
    assert!(
        output
            .content
            .starts_with("     4\tline 4\n     5\tline 5\n")
    );
    assert!(!output.content.contains("line 6"));
    assert!(output.content.contains("showing lines 4-5 of 10"));
    assert!(output.content.contains("offset 6"));
}

#[tokio::test]
async fn read_errors_are_clear() {
    let fixture = Fixture::new();
    fixture.write("short.txt", "one\n");
    std::fs::write(fixture.path("image.bin"), [0x89, b'P', 0, 0, 1, 2]).expect("binary");
    std::fs::create_dir(fixture.path("dir")).expect("dir");
    std::fs::write(fixture.path("big.txt"), "x\n".repeat(200_000)).expect("big");

    let missing = fixture.call(&Read, json!({"file_path": "nope.txt"})).await;
    assert_error(&missing, &["nope.txt", "does not exist"]);
    let binary = fixture.call(&Read, json!({"file_path": "image.bin"})).await;
    assert_error(&binary, &["image.bin", "binary"]);
    let directory = fixture.call(&Read, json!({"file_path": "dir"})).await;
    assert_error(&directory, &["is a directory", "LS"]);
    let past_end = fixture
        .call(&Read, json!({"file_path": "short.txt", "offset": 5}))
        .await;
    assert_error(&past_end, &["has 1 lines", "offset 5"]);
    let too_big = fixture.call(&Read, json!({"file_path": "big.txt"})).await;
    assert_error(&too_big, &["big.txt", "cap", "offset", "limit"]);
    let part = fixture
        .call(
            &Read,
            json!({"file_path": "big.txt", "offset": 10, "limit": 3}),
        )
        .await;
    assert_ok(&part);
    assert!(part.content.contains("    12\tx"));
}

#[cfg(unix)]
#[tokio::test]
async fn file_tools_refuse_fifos_instead_of_blocking() {
    let fixture = Fixture::new();
    let status = std::process::Command::new("mkfifo")
        .arg(fixture.path("pipe"))
        .status()
        .expect("mkfifo");
    assert!(status.success());
    let calls: [(&dyn Tool, Value); 3] = [
        (&Read, json!({"file_path": "pipe"})),
        (&Write, json!({"file_path": "pipe", "content": "x"})),
        (
            &Edit,
            json!({"file_path": "pipe", "old_string": "a", "new_string": "b"}),
        ),
    ];
    for (tool, input) in calls {
        let output = fixture.call(tool, input).await;
        assert_error(&output, &["`pipe` is not a regular file"]);
    }
}

#[tokio::test]
async fn read_of_an_empty_file_says_so() {
    let fixture = Fixture::new();
    fixture.write("empty.txt", "");
    let output = fixture.call(&Read, json!({"file_path": "empty.txt"})).await;
    assert_ok(&output);
    assert!(output.content.contains("empty"));
}

#[tokio::test]
async fn read_caps_output_and_long_lines() {
    let fixture = Fixture::new();
    let long_line = "y".repeat(5000);
    fixture.write("long.txt", &format!("{long_line}\n"));
    let output = fixture.call(&Read, json!({"file_path": "long.txt"})).await;
    assert_ok(&output);
    assert!(output.content.contains("line cut at 2000 characters"));
    assert!(output.content.len() < 2100);

    let many: String = (0..3000).map(|n| format!("{n:0>40}\n")).collect();
    fixture.write("many.txt", &many);
    let output = fixture.call(&Read, json!({"file_path": "many.txt"})).await;
    assert_ok(&output);
    assert!(output.content.len() < 31_000, "{}", output.content.len());
    assert!(output.content.contains("cut at the output cap"));
}

// ---- Write ----

#[tokio::test]
async fn write_creates_parents_and_overwrites() {
    let fixture = Fixture::new();
    let created = fixture
        .call(
            &Write,
            json!({"file_path": "a/b/new.txt", "content": "hello\n"}),
        )
        .await;
    assert_ok(&created);
    assert!(created.content.contains("Created"));
    assert_eq!(fixture.read("a/b/new.txt"), "hello\n");
    assert_eq!(
        created.details,
        ToolDetails::FileWritten {
            path: fixture.path("a/b/new.txt")
        }
    );
    let overwritten = fixture
        .call(
            &Write,
            json!({"file_path": "a/b/new.txt", "content": "bye\n"}),
        )
        .await;
    assert_ok(&overwritten);
    assert!(overwritten.content.contains("Overwrote"));
    assert_eq!(fixture.read("a/b/new.txt"), "bye\n");
}

#[tokio::test]
async fn write_to_a_directory_is_an_error() {
    let fixture = Fixture::new();
    std::fs::create_dir(fixture.path("dir")).expect("dir");
    let output = fixture
        .call(&Write, json!({"file_path": "dir", "content": "x"}))
        .await;
    assert_error(&output, &["`dir` is a directory"]);
}

// ---- Edit ----

#[tokio::test]
async fn edit_replaces_exactly_once() {
    let fixture = Fixture::new();
    fixture.write("code.rs", "let x = 1;\nlet y = 2;\n");
    let output = fixture
        .call(
            &Edit,
            json!({"file_path": "code.rs", "old_string": "x = 1", "new_string": "x = 10"}),
        )
        .await;
    assert_ok(&output);
    assert_eq!(fixture.read("code.rs"), "let x = 10;\nlet y = 2;\n");
}

#[tokio::test]
async fn edit_replace_all_replaces_every_occurrence() {
    let fixture = Fixture::new();
    fixture.write("code.rs", "foo foo foo");
    let output = fixture
        .call(
            &Edit,
            json!({"file_path": "code.rs", "old_string": "foo", "new_string": "bar", "replace_all": true}),
        )
        .await;
    assert_ok(&output);
    assert!(output.content.contains("3 occurrence"));
    assert_eq!(fixture.read("code.rs"), "bar bar bar");
}

#[tokio::test]
async fn edit_errors_are_clear_and_leave_the_file_alone() {
    let fixture = Fixture::new();
    fixture.write("code.rs", "foo foo");
    let cases = [
        (
            json!({"file_path": "code.rs", "old_string": "zzz", "new_string": "y"}),
            vec!["old_string was not found", "code.rs"],
        ),
        (
            json!({"file_path": "code.rs", "old_string": "foo", "new_string": "y"}),
            vec!["occurs 2 times", "replace_all"],
        ),
        (
            json!({"file_path": "code.rs", "old_string": "foo", "new_string": "foo"}),
            vec!["identical"],
        ),
        (
            json!({"file_path": "code.rs", "old_string": "", "new_string": "y"}),
            vec!["old_string is empty"],
        ),
        (
            json!({"file_path": "missing.rs", "old_string": "a", "new_string": "b"}),
            vec!["missing.rs", "does not exist", "Write"],
        ),
    ];
    for (input, fragments) in cases {
        let output = fixture.call(&Edit, input).await;
        assert_error(&output, &fragments);
    }
    assert_eq!(fixture.read("code.rs"), "foo foo");
}

#[tokio::test]
async fn edit_with_an_empty_old_string_creates_a_file() {
    let fixture = Fixture::new();
    let output = fixture
        .call(
            &Edit,
            json!({"file_path": "fresh.txt", "old_string": "", "new_string": "new\n"}),
        )
        .await;
    assert_ok(&output);
    assert_eq!(fixture.read("fresh.txt"), "new\n");
}

#[tokio::test]
async fn edit_refuses_binary_files() {
    let fixture = Fixture::new();
    std::fs::write(fixture.path("blob"), [b'a', 0, b'b']).expect("blob");
    let output = fixture
        .call(
            &Edit,
            json!({"file_path": "blob", "old_string": "a", "new_string": "c"}),
        )
        .await;
    assert_error(&output, &["binary"]);
}

// ---- MultiEdit ----

#[tokio::test]
async fn multi_edit_applies_edits_in_order() {
    let fixture = Fixture::new();
    fixture.write("text.txt", "one two three");
    let output = fixture
        .call(
            &MultiEdit,
            json!({"file_path": "text.txt", "edits": [
                {"old_string": "one", "new_string": "1"},
                {"old_string": "1 two", "new_string": "1 2"},
                {"old_string": "e", "new_string": "E", "replace_all": true}
            ]}),
        )
        .await;
    assert_ok(&output);
    assert_eq!(fixture.read("text.txt"), "1 2 thrEE");
}

#[tokio::test]
async fn multi_edit_is_all_or_nothing() {
    let fixture = Fixture::new();
    fixture.write("text.txt", "one two three");
    let output = fixture
        .call(
            &MultiEdit,
            json!({"file_path": "text.txt", "edits": [
                {"old_string": "one", "new_string": "1"},
                {"old_string": "missing", "new_string": "x"}
            ]}),
        )
        .await;
    assert_error(&output, &["edits[1]", "not found", "no edit was applied"]);
    assert_eq!(fixture.read("text.txt"), "one two three");

    let empty = fixture
        .call(&MultiEdit, json!({"file_path": "text.txt", "edits": []}))
        .await;
    assert_error(&empty, &["`edits` is empty"]);
}

#[tokio::test]
async fn multi_edit_invalid_nested_input_names_the_field() {
    let fixture = Fixture::new();
    fixture.write("text.txt", "one");
    let output = fixture
        .call(
            &MultiEdit,
            json!({"file_path": "text.txt", "edits": [{"old_string": "one"}]}),
        )
        .await;
    assert_error(&output, &["MultiEdit", "edits[0].new_string"]);
}

// ---- Paths ----

fn outside_directory() -> tempfile::TempDir {
    let outside = tempfile::tempdir().expect("outside directory");
    std::fs::write(outside.path().join("secret.txt"), "secret\n").expect("secret");
    outside
}

#[tokio::test]
async fn parent_components_are_refused() {
    let fixture = Fixture::new();
    fixture.write("sub/file.txt", "x");
    for path in ["../escape.txt", "sub/../sub/file.txt"] {
        let output = fixture.call(&Read, json!({"file_path": path})).await;
        assert_error(&output, &[path, "`..`"]);
    }
    let output = fixture
        .call(
            &Write,
            json!({"file_path": "../escape.txt", "content": "x"}),
        )
        .await;
    assert_error(&output, &["`..`"]);
    assert!(!fixture.directory.path().join("../escape.txt").exists());
}

#[tokio::test]
async fn absolute_paths_outside_the_workspace_are_refused() {
    let fixture = Fixture::new();
    let outside = outside_directory();
    let secret = outside.path().join("secret.txt");
    let secret = secret.to_str().expect("utf-8 path");
    let read = fixture.call(&Read, json!({"file_path": secret})).await;
    assert_error(&read, &[secret, "outside the workspace"]);
    let write = fixture
        .call(&Write, json!({"file_path": secret, "content": "pwned"}))
        .await;
    assert_error(&write, &["outside the workspace"]);
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret.txt")).expect("secret"),
        "secret\n"
    );
}

#[cfg(unix)]
#[tokio::test]
async fn a_symlinked_file_pointing_out_is_refused() {
    let fixture = Fixture::new();
    let outside = outside_directory();
    let target = std::fs::canonicalize(outside.path().join("secret.txt")).expect("target");
    std::os::unix::fs::symlink(&target, fixture.path("link.txt")).expect("symlink");
    let read = fixture.call(&Read, json!({"file_path": "link.txt"})).await;
    assert_error(
        &read,
        &[
            "link.txt",
            target.to_str().expect("utf-8"),
            "through a symbolic link",
            "outside the workspace",
        ],
    );
    let write = fixture
        .call(&Write, json!({"file_path": "link.txt", "content": "pwned"}))
        .await;
    assert_error(&write, &["through a symbolic link"]);
    let edit = fixture
        .call(
            &Edit,
            json!({"file_path": "link.txt", "old_string": "secret", "new_string": "pwned"}),
        )
        .await;
    assert_error(&edit, &["outside the workspace"]);
    assert_eq!(
        std::fs::read_to_string(&target).expect("secret"),
        "secret\n"
    );
}

#[cfg(unix)]
#[tokio::test]
async fn a_symlinked_parent_directory_pointing_out_is_refused() {
    let fixture = Fixture::new();
    let outside = outside_directory();
    std::os::unix::fs::symlink(outside.path(), fixture.path("linked")).expect("symlink");
    let read = fixture
        .call(&Read, json!({"file_path": "linked/secret.txt"}))
        .await;
    assert_error(&read, &["linked/secret.txt", "through a symbolic link"]);
    let create = fixture
        .call(
            &Write,
            json!({"file_path": "linked/deeper/new.txt", "content": "x"}),
        )
        .await;
    assert_error(&create, &["outside the workspace"]);
    assert!(!outside.path().join("deeper").exists());
}

#[cfg(unix)]
#[tokio::test]
async fn a_dangling_symlink_is_refused() {
    let fixture = Fixture::new();
    let outside = outside_directory();
    std::os::unix::fs::symlink(outside.path().join("not-yet.txt"), fixture.path("dangling"))
        .expect("symlink");
    let output = fixture
        .call(&Write, json!({"file_path": "dangling", "content": "x"}))
        .await;
    assert_error(&output, &["dangling", "does not exist"]);
    assert!(!outside.path().join("not-yet.txt").exists());
}

#[cfg(unix)]
#[tokio::test]
async fn a_symlink_staying_inside_is_followed() {
    let fixture = Fixture::new();
    fixture.write("real/file.txt", "inside\n");
    std::os::unix::fs::symlink(fixture.path("real"), fixture.path("alias")).expect("symlink");
    let output = fixture
        .call(&Read, json!({"file_path": "alias/file.txt"}))
        .await;
    assert_ok(&output);
    assert!(output.content.contains("inside"));
}

#[tokio::test]
async fn git_and_muster_directories_are_never_written() {
    let fixture = Fixture::new();
    fixture.write(".git/config", "[core]\n");
    fixture.write(".muster/settings.toml", "x = 1\n");
    for path in [
        ".git/config",
        ".git/hooks/pre-commit",
        ".muster/settings.toml",
        "vendor/.git/HEAD",
    ] {
        let output = fixture
            .call(&Write, json!({"file_path": path, "content": "pwned"}))
            .await;
        assert_error(&output, &[path, "never write"]);
    }
    let edit = fixture
        .call(
            &Edit,
            json!({"file_path": ".git/config", "old_string": "core", "new_string": "x"}),
        )
        .await;
    assert_error(&edit, &[".git/"]);
    assert_eq!(fixture.read(".git/config"), "[core]\n");
    assert!(!fixture.path(".git/hooks/pre-commit").exists());
    let read = fixture
        .call(&Read, json!({"file_path": ".git/config"}))
        .await;
    assert_ok(&read);
}

#[cfg(unix)]
#[tokio::test]
async fn a_symlink_into_git_is_refused_for_writes() {
    let fixture = Fixture::new();
    fixture.write(".git/config", "[core]\n");
    std::os::unix::fs::symlink(fixture.path(".git"), fixture.path("alias")).expect("symlink");
    let output = fixture
        .call(
            &Write,
            json!({"file_path": "alias/config", "content": "pwned"}),
        )
        .await;
    assert_error(&output, &["alias/config", ".git/config", "inside `.git/`"]);
    assert_eq!(fixture.read(".git/config"), "[core]\n");
}

#[tokio::test]
async fn the_own_plan_file_is_writable_in_muster_plans() {
    let fixture = Fixture::new();
    std::fs::create_dir_all(fixture.path(".muster/plans")).expect("plans dir");
    let context = fixture
        .context
        .clone()
        .with_plan_file(Path::new(".muster/plans/brave-blue-fox.md"))
        .expect("plan file");
    let own = Write
        .call(
            &context,
            json!({"file_path": ".muster/plans/brave-blue-fox.md", "content": "## Goal\n"}),
        )
        .await;
    assert_ok(&own);
    assert_eq!(fixture.read(".muster/plans/brave-blue-fox.md"), "## Goal\n");
    let absolute = fixture.path(".muster/plans/brave-blue-fox.md");
    let edit = Edit
        .call(
            &context,
            json!({"file_path": absolute.to_str().expect("utf-8"), "old_string": "Goal", "new_string": "Goal!"}),
        )
        .await;
    assert_ok(&edit);
    assert!(context.is_own_plan_file(".muster/plans/brave-blue-fox.md"));
    assert!(context.is_own_plan_file(absolute.to_str().expect("utf-8")));
    assert!(!context.is_own_plan_file(".muster/plans/brave-blue-fox-agent-bob.md"));
    assert!(
        !fixture
            .context
            .is_own_plan_file(".muster/plans/brave-blue-fox.md")
    );
    let other = Write
        .call(
            &context,
            json!({"file_path": ".muster/plans/brave-blue-fox-agent-bob.md", "content": "x"}),
        )
        .await;
    assert_error(&other, &["brave-blue-fox-agent-bob.md", ".muster/"]);
}

#[tokio::test]
async fn the_own_plan_file_may_lie_outside_the_workspace() {
    let project = tempfile::tempdir().expect("project");
    std::fs::create_dir_all(project.path().join("work")).expect("workspace dir");
    std::fs::create_dir_all(project.path().join("plans")).expect("plans dir");
    let workspace = Workspace::new(project.path().join("work")).expect("workspace");
    let plan = std::fs::canonicalize(project.path().join("plans"))
        .expect("plans")
        .join("slug.md");
    let context = ToolContext::new(workspace, Vec::new())
        .with_plan_file(&plan)
        .expect("plan file");
    let output = Write
        .call(
            &context,
            json!({"file_path": plan.to_str().expect("utf-8"), "content": "plan"}),
        )
        .await;
    assert_ok(&output);
    let elsewhere = plan.with_file_name("other.md");
    let refused = Write
        .call(
            &context,
            json!({"file_path": elsewhere.to_str().expect("utf-8"), "content": "x"}),
        )
        .await;
    assert_error(&refused, &["outside the workspace"]);
}

// ---- Input validation ----

#[tokio::test]
async fn invalid_input_names_the_field() {
    let fixture = Fixture::new();
    let cases: [(&dyn Tool, Value, &str); 4] = [
        (&Read, json!({}), "`file_path`"),
        (
            &Read,
            json!({"file_path": "x", "offset": "ten"}),
            "`offset`",
        ),
        (
            &Edit,
            json!({"file_path": "x", "old_string": "a", "new_string": "b", "replace_all": "yes"}),
            "`replace_all`",
        ),
        (
            &Write,
            json!({"file_path": "x", "content": "y", "mode": 1}),
            "`mode`",
        ),
    ];
    for (tool, input, field) in cases {
        let output = fixture.call(tool, input).await;
        assert_error(&output, &["invalid input", tool.name(), field]);
    }
    let not_an_object = fixture.call(&Read, json!(["file_path"])).await;
    assert_error(&not_an_object, &["JSON object"]);
}

// ---- Bash ----

/// Records process groups the way the runtime does, and whether the command had run yet.
struct MarkerRecorder {
    marker: PathBuf,
    recorded: std::sync::Mutex<Vec<(ProcessGroupId, bool)>>,
    groups: tokio::sync::mpsc::UnboundedSender<ProcessGroupId>,
    refuse: bool,
}

impl ProcessGroupRecorder for MarkerRecorder {
    fn record(&self, group: ProcessGroupId) -> RecordFuture<'_> {
        Box::pin(async move {
            let command_ran = self.marker.exists();
            self.recorded
                .lock()
                .expect("recorder lock")
                .push((group, command_ran));
            let _ = self.groups.send(group);
            if self.refuse {
                Err("the store is closed".to_owned())
            } else {
                Ok(())
            }
        })
    }
}

fn marker_recorder(
    marker: PathBuf,
    refuse: bool,
) -> (
    Arc<MarkerRecorder>,
    tokio::sync::mpsc::UnboundedReceiver<ProcessGroupId>,
) {
    let (groups, received) = tokio::sync::mpsc::unbounded_channel();
    let recorder = Arc::new(MarkerRecorder {
        marker,
        recorded: std::sync::Mutex::new(Vec::new()),
        groups,
        refuse,
    });
    (recorder, received)
}

fn bash_outcome(output: &ToolOutput) -> BashOutcome {
    match &output.details {
        ToolDetails::Bash(outcome) => outcome.clone(),
        other => panic!("expected Bash details, got {other:?}"),
    }
}

/// A FIFO that a command's background writer opens and keeps open: reading it to the end
/// waits for the writer and everything it started (they inherit the descriptor) to exit.
struct ExitWitness {
    first_line: tokio::sync::oneshot::Receiver<String>,
    closed: tokio::task::JoinHandle<()>,
}

/// The command: a background subshell (a grandchild of the tool) holds the witness, sleeps,
/// then would write `marker`; the tool's shell waits for it.
const LATE_WRITER: &str =
    "(exec 3>witness.fifo; echo $BASHPID >&3; sleep 30; echo late > marker) & wait";

/// Longer than any kill takes, shorter than the writer's sleep: the writer must die early.
const WITNESS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

impl ExitWitness {
    fn new(fixture: &Fixture) -> Self {
        let path = fixture.path("witness.fifo");
        let status = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .expect("mkfifo");
        assert!(status.success());
        let (sender, first_line) = tokio::sync::oneshot::channel();
        let closed = tokio::task::spawn_blocking(move || {
            use std::io::BufRead;
            let mut reader = std::io::BufReader::new(std::fs::File::open(path).expect("open"));
            let mut line = String::new();
            reader.read_line(&mut line).expect("first line");
            let _ = sender.send(line);
            std::io::copy(&mut reader, &mut std::io::sink()).expect("read to the end");
        });
        Self { first_line, closed }
    }

    /// Waits until every holder of the witness has exited.
    async fn wait_closed(self) {
        tokio::time::timeout(WITNESS_TIMEOUT, self.closed)
            .await
            .expect("the background writer outlived its process group")
            .expect("witness reader");
    }
}

#[tokio::test]
async fn bash_runs_in_the_workspace_and_reports_the_exit_code() {
    let fixture = Fixture::new();
    let output = fixture
        .call(
            &Bash,
            json!({"command": "pwd; echo oops >&2", "description": "where am I"}),
        )
        .await;
    assert_ok(&output);
    let root = fixture.root();
    assert!(output.content.starts_with(root.to_str().expect("utf-8")));
    assert!(output.content.contains("stderr:\noops"));
    assert!(output.content.contains("[exit code 0]"));
    assert_eq!(bash_outcome(&output).exit_code, Some(0));

    let failed = fixture.call(&Bash, json!({"command": "exit 3"})).await;
    assert_error(&failed, &["[exit code 3]"]);
    let outcome = bash_outcome(&failed);
    assert_eq!(outcome.exit_code, Some(3));
    assert!(!outcome.timed_out && !outcome.interrupted);
}

#[tokio::test]
async fn bash_stdin_is_null() {
    let fixture = Fixture::new();
    let output = fixture
        .call(
            &Bash,
            json!({"command": "cat; echo \"stdin=$(readlink /proc/self/fd/0)\""}),
        )
        .await;
    assert_ok(&output);
    assert!(
        output.content.contains("stdin=/dev/null"),
        "{}",
        output.content
    );
}

#[tokio::test]
async fn bash_removes_every_ld_variable() {
    let directory = tempfile::tempdir().expect("workspace");
    let workspace = Workspace::new(directory.path()).expect("workspace");
    let mut environment: Vec<(std::ffi::OsString, std::ffi::OsString)> =
        std::env::vars_os().collect();
    environment.push(("LD_PRELOAD".into(), "/nonexistent/muster.so".into()));
    environment.push(("LD_LIBRARY_PATH".into(), "/nonexistent".into()));
    environment.push(("LD_MUSTER_PROBE".into(), "1".into()));
    environment.push(("MUSTER_KEPT".into(), "yes".into()));
    let context = ToolContext::new(workspace, environment);
    let output = Bash.call(&context, json!({"command": "env"})).await;
    assert_ok(&output);
    assert!(output.content.contains("MUSTER_KEPT=yes"));
    assert!(
        !output.content.lines().any(|line| line.starts_with("LD_")),
        "{}",
        output.content
    );
}

#[tokio::test]
async fn bash_runs_with_an_empty_environment() {
    let directory = tempfile::tempdir().expect("workspace");
    let workspace = Workspace::new(directory.path()).expect("workspace");
    let context = ToolContext::new(workspace, Vec::new());
    let output = Bash
        .call(&context, json!({"command": "echo \"$0 ran\""}))
        .await;
    assert_ok(&output);
    assert!(output.content.starts_with("/"), "{}", output.content);
    assert!(output.content.contains("bash ran"), "{}", output.content);
}

#[tokio::test]
async fn bash_output_is_capped() {
    let fixture = Fixture::new();
    let limits = OutputLimits {
        max_output_bytes: 1000,
        ..OutputLimits::default()
    };
    let context = fixture.context.clone().with_limits(limits);
    let output = Bash
        .call(
            &context,
            json!({"command": "head -c 200000 /dev/zero | tr '\\0' x; head -c 5000 /dev/zero | tr '\\0' e >&2"}),
        )
        .await;
    assert_ok(&output);
    assert!(
        output
            .content
            .contains("[stdout truncated: showed the first 1000 of 200000 bytes]")
    );
    assert!(
        output
            .content
            .contains("[stderr truncated: showed the first 1000 of 5000 bytes]")
    );
    assert!(output.content.len() < 2300, "{}", output.content.len());
}

#[cfg(unix)]
#[tokio::test]
async fn bash_timeout_kills_the_whole_process_group() {
    let fixture = Fixture::new();
    let witness = ExitWitness::new(&fixture);
    let output = fixture
        .call(&Bash, json!({"command": LATE_WRITER, "timeout": 1000}))
        .await;
    assert_error(
        &output,
        &["timed out after 1000 ms", "process group was killed"],
    );
    let outcome = bash_outcome(&output);
    assert!(outcome.timed_out);
    assert_eq!(outcome.exit_code, None);
    witness.wait_closed().await;
    assert!(!fixture.path("marker").exists());
}

#[cfg(unix)]
#[tokio::test]
async fn bash_shutdown_kills_the_whole_process_group() {
    let fixture = Fixture::new();
    let mut witness = ExitWitness::new(&fixture);
    let (trigger, signal) = ShutdownSignal::channel();
    let context = fixture.context.clone().with_shutdown(signal);
    let call = Bash.call(&context, json!({"command": LATE_WRITER}));
    let shut_down = async {
        (&mut witness.first_line).await.expect("the writer started");
        trigger.trigger();
    };
    let (output, ()) = tokio::join!(call, shut_down);
    assert_error(&output, &["interrupted by shutdown"]);
    assert!(bash_outcome(&output).interrupted);
    witness.wait_closed().await;
    assert!(!fixture.path("marker").exists());
}

#[cfg(unix)]
#[tokio::test]
async fn bash_dropped_mid_call_kills_the_whole_process_group() {
    let fixture = Fixture::new();
    let mut witness = ExitWitness::new(&fixture);
    let call = fixture.call(&Bash, json!({"command": LATE_WRITER}));
    tokio::select! {
        output = call => panic!("the command ended early: {}", output.content),
        started = &mut witness.first_line => assert!(started.is_ok()),
    }
    witness.wait_closed().await;
    assert!(!fixture.path("marker").exists());
}

#[tokio::test]
async fn bash_does_not_start_once_shutdown_was_signalled() {
    let fixture = Fixture::new();
    let (trigger, signal) = ShutdownSignal::channel();
    trigger.trigger();
    let context = fixture.context.clone().with_shutdown(signal);
    let output = Bash.call(&context, json!({"command": "touch ran"})).await;
    assert_error(&output, &["did not run", "shutting down"]);
    assert!(!fixture.path("ran").exists());
}

#[cfg(unix)]
#[tokio::test]
async fn bash_records_the_process_group_before_the_command_runs() {
    let fixture = Fixture::new();
    let (recorder, _groups) = marker_recorder(fixture.path("ran"), false);
    let context = fixture
        .context
        .clone()
        .with_process_group_recorder(recorder.clone());
    let output = Bash
        .call(&context, json!({"command": "touch ran; echo $$"}))
        .await;
    assert_ok(&output);
    let outcome = bash_outcome(&output);
    let recorded = recorder.recorded.lock().expect("lock").clone();
    assert_eq!(recorded, vec![(outcome.process_group, false)]);
    let shell_pid: i32 = output
        .content
        .lines()
        .next()
        .and_then(|line| line.trim().parse().ok())
        .expect("shell pid");
    assert_eq!(
        shell_pid, outcome.process_group,
        "the shell leads its group"
    );
    assert!(fixture.path("ran").exists());
}

#[cfg(unix)]
#[tokio::test]
async fn bash_does_not_run_a_command_whose_group_cannot_be_recorded() {
    let fixture = Fixture::new();
    let (recorder, _groups) = marker_recorder(fixture.path("ran"), true);
    let context = fixture
        .context
        .clone()
        .with_process_group_recorder(recorder);
    let output = Bash.call(&context, json!({"command": "touch ran"})).await;
    assert_error(&output, &["did not run", "the store is closed"]);
    assert!(!fixture.path("ran").exists());
}

#[tokio::test]
async fn bash_input_errors_are_clear() {
    let fixture = Fixture::new();
    let cases = [
        (json!({"command": "true", "timeout": 600_001}), "`timeout`"),
        (json!({"command": "true", "timeout": 0}), "`timeout`"),
        (json!({"command": "  "}), "`command`"),
        (json!({"timeout": 5}), "`command`"),
        (json!({"command": "true", "timeout": "soon"}), "`timeout`"),
    ];
    for (input, field) in cases {
        let output = fixture.call(&Bash, input).await;
        assert_error(&output, &["invalid input for Bash", field]);
    }
}

// ---- Glob ----

fn listed_paths(output: &ToolOutput) -> Vec<String> {
    output
        .content
        .lines()
        .filter(|line| !line.starts_with('('))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn glob_matches_recursively_and_respects_gitignore() {
    let fixture = Fixture::new();
    fixture.write("src/main.rs", "fn main() {}\n");
    fixture.write("src/nested/deep.rs", "\n");
    fixture.write("top.rs", "\n");
    fixture.write("README.md", "\n");
    fixture.write("target/debug/build.rs", "\n");
    fixture.write(".gitignore", "target/\n");
    fixture.write(".github/workflow.rs", "\n");
    fixture.write(".git/hooks.rs", "\n");

    let output = fixture.call(&Glob, json!({"pattern": "**/*.rs"})).await;
    assert_ok(&output);
    let mut found = listed_paths(&output);
    found.sort();
    let mut expected: Vec<String> = [
        ".github/workflow.rs",
        "src/main.rs",
        "src/nested/deep.rs",
        "top.rs",
    ]
    .iter()
    .map(|relative| fixture.path(relative).display().to_string())
    .collect();
    expected.sort();
    assert_eq!(found, expected);

    let top_only = fixture.call(&Glob, json!({"pattern": "*.rs"})).await;
    assert_eq!(
        listed_paths(&top_only),
        vec![fixture.path("top.rs").display().to_string()]
    );

    let in_src = fixture
        .call(&Glob, json!({"pattern": "*.rs", "path": "src"}))
        .await;
    assert_eq!(
        listed_paths(&in_src),
        vec![fixture.path("src/main.rs").display().to_string()]
    );

    // A pattern without `**` is searched as deep as its parts reach, braces included.
    let one_down = fixture.call(&Glob, json!({"pattern": "src/*.rs"})).await;
    assert_eq!(
        listed_paths(&one_down),
        vec![fixture.path("src/main.rs").display().to_string()]
    );
    let braced = fixture
        .call(&Glob, json!({"pattern": "src/{main,nested/deep}.rs"}))
        .await;
    let mut braced = listed_paths(&braced);
    braced.sort();
    let mut expected: Vec<String> = ["src/main.rs", "src/nested/deep.rs"]
        .iter()
        .map(|relative| fixture.path(relative).display().to_string())
        .collect();
    expected.sort();
    assert_eq!(braced, expected);
}

#[tokio::test]
async fn glob_lists_newest_first() {
    let fixture = Fixture::new();
    fixture.write("old.txt", "old");
    fixture.write("new.txt", "new");
    let old = std::fs::File::options()
        .write(true)
        .open(fixture.path("old.txt"))
        .expect("open");
    old.set_modified(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000))
        .expect("set mtime");
    let output = fixture.call(&Glob, json!({"pattern": "*.txt"})).await;
    assert_eq!(
        listed_paths(&output),
        vec![
            fixture.path("new.txt").display().to_string(),
            fixture.path("old.txt").display().to_string()
        ]
    );
}

#[tokio::test]
async fn glob_errors_are_clear() {
    let fixture = Fixture::new();
    fixture.write("file.txt", "x");
    let invalid = fixture.call(&Glob, json!({"pattern": "src/[abc"})).await;
    assert_error(&invalid, &["invalid glob", "`pattern`"]);
    let not_a_directory = fixture
        .call(&Glob, json!({"pattern": "*", "path": "file.txt"}))
        .await;
    assert_error(&not_a_directory, &["not a directory", "`path`"]);
    let outside = fixture
        .call(&Glob, json!({"pattern": "*", "path": "/"}))
        .await;
    assert_error(&outside, &["outside the workspace"]);
    let none = fixture.call(&Glob, json!({"pattern": "*.zig"})).await;
    assert_ok(&none);
    assert!(none.content.contains("No files match"));
}

// ---- Grep ----

fn grep_fixture() -> Fixture {
    let fixture = Fixture::new();
    fixture.write("src/a.rs", "fn alpha() {}\n// TODO: one\nfn beta() {}\n");
    fixture.write("src/b.py", "def gamma():\n    pass  # todo two\n");
    fixture.write("notes.md", "nothing here\n");
    fixture.write("ignored/c.rs", "// TODO: hidden by gitignore\n");
    fixture.write(".gitignore", "ignored/\n");
    std::fs::write(fixture.path("blob.bin"), b"TODO\0binary").expect("binary");
    fixture
}

#[tokio::test]
async fn grep_lists_files_with_matches_by_default() {
    let fixture = grep_fixture();
    let output = fixture.call(&Grep, json!({"pattern": "TODO"})).await;
    assert_ok(&output);
    assert_eq!(
        listed_paths(&output),
        vec![fixture.path("src/a.rs").display().to_string()]
    );
    let insensitive = fixture
        .call(&Grep, json!({"pattern": "todo", "-i": true}))
        .await;
    let mut found = listed_paths(&insensitive);
    found.sort();
    assert_eq!(
        found,
        vec![
            fixture.path("src/a.rs").display().to_string(),
            fixture.path("src/b.py").display().to_string()
        ]
    );
}

#[tokio::test]
async fn grep_content_mode_shows_lines_numbers_and_context() {
    let fixture = grep_fixture();
    let a = fixture.path("src/a.rs").display().to_string();
    let output = fixture
        .call(&Grep, json!({"pattern": "TODO", "output_mode": "content"}))
        .await;
    assert_ok(&output);
    assert_eq!(output.content, format!("{a}:2:// TODO: one\n"));

    let with_context = fixture
        .call(
            &Grep,
            json!({"pattern": "TODO", "output_mode": "content", "-C": 1}),
        )
        .await;
    assert_eq!(
        with_context.content,
        format!("{a}-1-fn alpha() {{}}\n{a}:2:// TODO: one\n{a}-3-fn beta() {{}}\n")
    );
    let after_only = fixture
        .call(
            &Grep,
            json!({"pattern": "TODO", "output_mode": "content", "-A": 1, "-n": false}),
        )
        .await;
    assert_eq!(
        after_only.content,
        format!("{a}:// TODO: one\n{a}-fn beta() {{}}\n")
    );
}

#[tokio::test]
async fn grep_filters_by_glob_type_and_path_and_counts() {
    let fixture = grep_fixture();
    let by_glob = fixture
        .call(&Grep, json!({"pattern": "fn|def", "glob": "*.py"}))
        .await;
    assert_eq!(
        listed_paths(&by_glob),
        vec![fixture.path("src/b.py").display().to_string()]
    );
    let by_type = fixture
        .call(&Grep, json!({"pattern": "fn|def", "type": "rust"}))
        .await;
    assert_eq!(
        listed_paths(&by_type),
        vec![fixture.path("src/a.rs").display().to_string()]
    );
    let one_file = fixture
        .call(
            &Grep,
            json!({"pattern": "fn", "path": "src/a.rs", "output_mode": "count"}),
        )
        .await;
    assert_eq!(
        one_file.content,
        format!("{}:2\n", fixture.path("src/a.rs").display())
    );
}

#[tokio::test]
async fn grep_pages_with_offset_and_head_limit() {
    let fixture = Fixture::new();
    let text: String = (1..=5).map(|n| format!("match {n}\n")).collect();
    fixture.write("m.txt", &text);
    let output = fixture
        .call(
            &Grep,
            json!({"pattern": "match", "output_mode": "content", "offset": 1, "head_limit": 2}),
        )
        .await;
    assert_ok(&output);
    let path = fixture.path("m.txt").display().to_string();
    assert!(
        output
            .content
            .starts_with(&format!("{path}:2:match 2\n{path}:3:match 3\n"))
    );
    assert!(output.content.contains("showing entries 2-3 of 5"));
    assert!(output.content.contains("offset 3"));
}

#[tokio::test]
async fn grep_multiline_spans_lines() {
    let fixture = grep_fixture();
    let single = fixture.call(&Grep, json!({"pattern": "alpha.*beta"})).await;
    assert!(single.content.contains("No matches"));
    let multi = fixture
        .call(&Grep, json!({"pattern": "alpha.*beta", "multiline": true}))
        .await;
    assert_eq!(
        listed_paths(&multi),
        vec![fixture.path("src/a.rs").display().to_string()]
    );
}

#[tokio::test]
async fn grep_errors_are_clear() {
    let fixture = grep_fixture();
    let cases = [
        (
            json!({"pattern": "(unclosed"}),
            vec!["invalid regular expression", "`pattern`"],
        ),
        (
            json!({"pattern": "x", "type": "klingon"}),
            vec!["unknown file type", "`type`"],
        ),
        (
            json!({"pattern": "x", "glob": "[z"}),
            vec!["invalid glob", "`glob`"],
        ),
        (
            json!({"pattern": "x", "path": "missing"}),
            vec!["missing", "does not exist"],
        ),
        (
            json!({"pattern": "x", "output_mode": "lines"}),
            vec!["`output_mode`"],
        ),
        (json!({"pattern": "x", "-A": -1}), vec!["`-A`"]),
        (json!({"pattern": "x", "path": "../"}), vec!["`..`"]),
    ];
    for (input, fragments) in cases {
        let output = fixture.call(&Grep, input).await;
        assert_error(&output, &fragments);
    }
}

// ---- LS ----

#[tokio::test]
async fn ls_shows_a_tree_without_ignored_entries() {
    let fixture = Fixture::new();
    fixture.write("src/main.rs", "");
    fixture.write("src/util/mod.rs", "");
    fixture.write("Cargo.toml", "");
    fixture.write("target/out", "");
    fixture.write("node_modules/pkg/index.js", "");
    fixture.write(".gitignore", "target/\n");
    fixture.write(".git/HEAD", "");
    let output = fixture
        .call(&Ls, json!({"path": ".", "ignore": ["node_*"]}))
        .await;
    assert_ok(&output);
    let root = fixture.root();
    assert_eq!(
        output.content,
        format!(
            "- {}/\n  - .gitignore\n  - Cargo.toml\n  - src/\n    - main.rs\n    - util/\n      - mod.rs",
            root.display()
        )
    );
}

#[tokio::test]
async fn ls_errors_are_clear() {
    let fixture = Fixture::new();
    fixture.write("file.txt", "");
    let file = fixture.call(&Ls, json!({"path": "file.txt"})).await;
    assert_error(&file, &["file.txt", "not a directory"]);
    let missing = fixture.call(&Ls, json!({"path": "nowhere"})).await;
    assert_error(&missing, &["nowhere", "does not exist"]);
    let outside = fixture.call(&Ls, json!({"path": "/"})).await;
    assert_error(&outside, &["outside the workspace"]);
    let no_path = fixture.call(&Ls, json!({})).await;
    assert_error(&no_path, &["invalid input for LS", "`path`"]);
}

// ---- NotebookEdit ----

const NOTEBOOK: &str = include_str!("../data/tools-notebook.ipynb");

fn notebook_fixture() -> Fixture {
    let fixture = Fixture::new();
    fixture.write("analysis.ipynb", NOTEBOOK);
    fixture
}

fn cells(fixture: &Fixture) -> Vec<Value> {
    let notebook: Value =
        serde_json::from_str(&fixture.read("analysis.ipynb")).expect("notebook JSON");
    notebook["cells"].as_array().expect("cells").clone()
}

#[tokio::test]
async fn notebook_edit_replaces_a_cell_and_clears_outputs() {
    let fixture = notebook_fixture();
    let output = fixture
        .call(
            &NotebookEdit,
            json!({"notebook_path": "analysis.ipynb", "cell_id": "load", "new_source": "data = load(fast=True)\nshow(data)"}),
        )
        .await;
    assert_ok(&output);
    let cells = cells(&fixture);
    assert_eq!(cells.len(), 2);
    assert_eq!(
        cells[1]["source"],
        json!(["data = load(fast=True)\n", "show(data)"])
    );
    assert_eq!(cells[1]["outputs"], json!([]));
    assert_eq!(cells[1]["execution_count"], Value::Null);
    assert_eq!(
        cells[0]["source"],
        json!(["# Analysis\n", "A small notebook."])
    );
    assert!(
        fixture
            .read("analysis.ipynb")
            .starts_with("{\n \"cells\": [\n  {\n")
    );
}

#[tokio::test]
async fn notebook_edit_inserts_and_deletes_cells() {
    let fixture = notebook_fixture();
    let inserted = fixture
        .call(
            &NotebookEdit,
            json!({"notebook_path": "analysis.ipynb", "cell_id": "intro", "new_source": "import os", "cell_type": "code", "edit_mode": "insert"}),
        )
        .await;
    assert_ok(&inserted);
    let after_insert = cells(&fixture);
    assert_eq!(after_insert.len(), 3);
    assert_eq!(after_insert[1]["cell_type"], "code");
    assert_eq!(after_insert[1]["source"], json!(["import os"]));
    let new_id = after_insert[1]["id"].as_str().expect("new id").to_owned();
    assert!(inserted.content.contains(&new_id));

    let at_start = fixture
        .call(
            &NotebookEdit,
            json!({"notebook_path": "analysis.ipynb", "new_source": "# Title", "cell_type": "markdown", "edit_mode": "insert"}),
        )
        .await;
    assert_ok(&at_start);
    assert_eq!(cells(&fixture)[0]["source"], json!(["# Title"]));

    let deleted = fixture
        .call(
            &NotebookEdit,
            json!({"notebook_path": "analysis.ipynb", "cell_id": "load", "new_source": "", "edit_mode": "delete"}),
        )
        .await;
    assert_ok(&deleted);
    let ids: Vec<Value> = cells(&fixture)
        .iter()
        .map(|cell| cell["id"].clone())
        .collect();
    assert_eq!(ids.len(), 3);
    assert!(!ids.contains(&json!("load")));
}

#[tokio::test]
async fn notebook_edit_addresses_cells_by_index_without_ids() {
    let fixture = Fixture::new();
    fixture.write(
        "old.ipynb",
        r#"{"cells": [{"cell_type": "code", "metadata": {}, "source": ["1"], "outputs": [], "execution_count": null}], "metadata": {}, "nbformat": 4, "nbformat_minor": 2}"#,
    );
    let output = fixture
        .call(
            &NotebookEdit,
            json!({"notebook_path": "old.ipynb", "cell_id": "cell-0", "new_source": "2", "cell_type": "markdown"}),
        )
        .await;
    assert_ok(&output);
    let notebook: Value = serde_json::from_str(&fixture.read("old.ipynb")).expect("JSON");
    assert_eq!(notebook["cells"][0]["cell_type"], "markdown");
    assert_eq!(notebook["cells"][0]["source"], json!(["2"]));
    assert!(notebook["cells"][0].get("outputs").is_none());
}

#[tokio::test]
async fn notebook_edit_errors_are_clear() {
    let fixture = notebook_fixture();
    fixture.write("broken.ipynb", "{not json");
    fixture.write("plain.ipynb", "{\"metadata\": {}}");
    let cases = [
        (
            json!({"notebook_path": "analysis.ipynb", "cell_id": "nope", "new_source": "x"}),
            vec!["no cell `nope`", "`intro`", "`load`"],
        ),
        (
            json!({"notebook_path": "analysis.ipynb", "new_source": "x"}),
            vec!["`cell_id` is required to replace"],
        ),
        (
            json!({"notebook_path": "analysis.ipynb", "new_source": "x", "edit_mode": "insert"}),
            vec!["`cell_type` is required to insert"],
        ),
        (
            json!({"notebook_path": "analysis.ipynb", "new_source": "x", "edit_mode": "delete"}),
            vec!["`cell_id` is required to delete"],
        ),
        (
            json!({"notebook_path": "analysis.ipynb", "cell_id": "load", "new_source": "x", "edit_mode": "merge"}),
            vec!["`edit_mode`"],
        ),
        (
            json!({"notebook_path": "notes.txt", "cell_id": "load", "new_source": "x"}),
            vec!["`notebook_path`", ".ipynb"],
        ),
        (
            json!({"notebook_path": "broken.ipynb", "cell_id": "a", "new_source": "x"}),
            vec!["not valid notebook JSON"],
        ),
        (
            json!({"notebook_path": "plain.ipynb", "cell_id": "a", "new_source": "x"}),
            vec!["no `cells` array"],
        ),
        (
            json!({"notebook_path": "missing.ipynb", "cell_id": "a", "new_source": "x"}),
            vec!["does not exist"],
        ),
        (
            json!({"notebook_path": ".git/x.ipynb", "cell_id": "a", "new_source": "x"}),
            vec!["never write"],
        ),
    ];
    for (input, fragments) in cases {
        let output = fixture.call(&NotebookEdit, input).await;
        assert_error(&output, &fragments);
    }
    assert_eq!(fixture.read("analysis.ipynb"), NOTEBOOK);
}

// ---- Coordination tools and the registry ----

#[test]
fn the_registry_names_every_known_tool() {
    let registry = ToolRegistry::standard();
    let known: Vec<&str> = muster_config::tools::known_tool_names().collect();
    assert_eq!(registry.names(), known);
    assert_eq!(TOOL_NAMES.to_vec(), known);
    // Each tool's read-only flag is the vocabulary's.
    for tool in muster_protocol::ALL_TOOLS {
        let implementation = registry.get(tool.as_str()).unwrap();
        assert_eq!(implementation.is_read_only(), tool.is_read_only(), "{tool}");
    }
}

#[test]
fn read_only_and_runtime_flags_follow_the_design() {
    let registry = ToolRegistry::standard();
    let read_only: Vec<&str> = registry
        .tools()
        .filter(|tool| tool.is_read_only())
        .map(|tool| tool.name())
        .collect();
    assert_eq!(
        read_only,
        [
            "Read",
            "Glob",
            "Grep",
            "LS",
            "EnterPlanMode",
            "TaskList",
            "TaskGet",
            "Skill"
        ]
    );
    let tool_set: Vec<&str> = registry
        .tools()
        .filter(|tool| tool.handled_by() == HandledBy::ToolSet)
        .map(|tool| tool.name())
        .collect();
    assert_eq!(
        tool_set,
        [
            "Read",
            "Write",
            "Edit",
            "MultiEdit",
            "NotebookEdit",
            "Glob",
            "Grep",
            "LS",
            "Bash",
            "Skill"
        ]
    );
    assert!(
        registry
            .tools()
            .filter(|tool| tool.is_read_only())
            .all(|tool| tool.is_idempotent())
    );
    let exit = registry.get("ExitPlanMode").expect("ExitPlanMode");
    assert!(!exit.is_read_only());
}

#[test]
fn every_schema_is_a_closed_object_with_claude_code_fields() {
    let registry = ToolRegistry::standard();
    let definitions = registry.definitions(|_| true);
    assert_eq!(definitions.len(), 23);
    for definition in &definitions {
        let schema = &definition.input_schema;
        assert_eq!(schema["type"], "object", "{}", definition.name);
        assert_eq!(schema["additionalProperties"], false, "{}", definition.name);
        assert!(!definition.description.is_empty());
        let text = schema.to_string();
        assert!(
            !text.contains("$ref"),
            "{} has a $ref: {text}",
            definition.name
        );
    }
    let fields = |name: &str| -> Vec<String> {
        let definition = definitions
            .iter()
            .find(|definition| definition.name == name)
            .expect("definition");
        let mut fields: Vec<String> = definition.input_schema["properties"]
            .as_object()
            .map(|properties| properties.keys().cloned().collect())
            .unwrap_or_default();
        fields.sort();
        fields
    };
    let expected: [(&str, &[&str]); 21] = [
        ("Read", &["file_path", "limit", "offset"]),
        ("Write", &["content", "file_path"]),
        (
            "Edit",
            &["file_path", "new_string", "old_string", "replace_all"],
        ),
        ("MultiEdit", &["edits", "file_path"]),
        (
            "NotebookEdit",
            &[
                "cell_id",
                "cell_type",
                "edit_mode",
                "new_source",
                "notebook_path",
            ],
        ),
        ("Glob", &["path", "pattern"]),
        (
            "Grep",
            &[
                "-A",
                "-B",
                "-C",
                "-i",
                "-n",
                "glob",
                "head_limit",
                "multiline",
                "offset",
                "output_mode",
                "path",
                "pattern",
                "type",
            ],
        ),
        ("LS", &["ignore", "path"]),
        ("Bash", &["command", "description", "timeout"]),
        ("AskUserQuestion", &["questions"]),
        ("EnterPlanMode", &[]),
        (
            "ExitPlanMode",
            &["allowedPrompts", "needs_more_exploration", "plan"],
        ),
        ("Agent", &["description", "prompt", "subagent_type"]),
        (
            "SendMessage",
            &["approve", "message", "reply_to", "summary", "to"],
        ),
        ("TaskCreate", &["blocked_by", "description", "subject"]),
        (
            "TaskUpdate",
            &[
                "add_blocked_by",
                "blocked_reason",
                "description",
                "owner",
                "status",
                "subject",
                "task_id",
            ],
        ),
        ("TaskList", &[]),
        ("TaskGet", &["task_id"]),
        (
            "SpawnTeammate",
            &["agent", "name", "plan_mode_required", "prompt"],
        ),
        (
            "ReviewPlan",
            &[
                "approve",
                "clear_context",
                "edited_plan",
                "feedback",
                "grants",
                "mode",
                "request_id",
            ],
        ),
        ("ShutdownTeammate", &["name", "reason"]),
    ];
    for (name, expected_fields) in expected {
        assert_eq!(fields(name), expected_fields, "{name}");
    }
    let edit = definitions
        .iter()
        .find(|definition| definition.name == "Edit")
        .expect("Edit");
    let mut required: Vec<&str> = edit.input_schema["required"]
        .as_array()
        .expect("required")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    required.sort_unstable();
    assert_eq!(required, ["file_path", "new_string", "old_string"]);
}

#[tokio::test]
async fn coordination_tools_validate_input_and_defer_to_the_runtime() {
    let fixture = Fixture::new();
    let registry = ToolRegistry::standard();
    let valid = [
        (
            "AskUserQuestion",
            json!({"questions": [{"question": "Which?", "header": "Pick", "options": [{"label": "A", "description": "first"}, {"label": "B", "description": "second"}], "multiSelect": false}]}),
        ),
        ("EnterPlanMode", json!({})),
        (
            "ExitPlanMode",
            json!({"plan": "## Steps\n1. x\n## Files\nsrc/a.rs\n"}),
        ),
        (
            "Agent",
            json!({"description": "find it", "prompt": "Find the parser", "subagent_type": "Plan"}),
        ),
        (
            "SendMessage",
            json!({"to": "lead", "message": "done", "reply_to": "question-alice-3"}),
        ),
        (
            "TaskCreate",
            json!({"subject": "Parser", "description": "Write it", "blocked_by": [1]}),
        ),
        (
            "TaskUpdate",
            json!({"task_id": 2, "status": "blocked", "blocked_reason": "waiting on 1"}),
        ),
        ("TaskList", json!({})),
        ("TaskGet", json!({"task_id": 2})),
        (
            "SpawnTeammate",
            json!({"name": "alice", "prompt": "Build the parser", "plan_mode_required": true}),
        ),
        (
            "ReviewPlan",
            json!({"request_id": "plan-alice-2", "approve": true, "mode": "acceptEdits", "clear_context": true}),
        ),
        (
            "ShutdownTeammate",
            json!({"name": "alice", "reason": "done"}),
        ),
    ];
    for (name, input) in valid {
        let tool = registry.get(name).expect("tool");
        assert_eq!(tool.handled_by(), HandledBy::AgentRuntime, "{name}");
        let output = registry.call(name, &fixture.context, input).await;
        assert_error(&output, &[name, "handled by the agent runtime"]);
    }
    let invalid = [
        ("EnterPlanMode", json!({"now": true}), "`now`"),
        ("ExitPlanMode", json!({"plan": 7}), "`plan`"),
        (
            "Agent",
            json!({"description": "x", "prompt": "y"}),
            "`subagent_type`",
        ),
        (
            "TaskUpdate",
            json!({"task_id": 1, "status": "done"}),
            "`status`",
        ),
        ("TaskGet", json!({"task_id": "one"}), "`task_id`"),
        (
            "ReviewPlan",
            json!({"request_id": "plan-a-1", "approve": true, "mode": "plan"}),
            "`mode`",
        ),
        ("SendMessage", json!({"to": "lead"}), "`message`"),
        (
            "AskUserQuestion",
            json!({"questions": [{"question": "?", "header": "h", "options": [{"label": "A"}]}]}),
            "`questions[0].options[0].description`",
        ),
    ];
    for (name, input, field) in invalid {
        let output = registry.call(name, &fixture.context, input).await;
        assert_error(&output, &["invalid input", name, field]);
    }
}

#[tokio::test]
async fn the_registry_refuses_an_unknown_tool() {
    let fixture = Fixture::new();
    let output = ToolRegistry::standard()
        .call("Task", &fixture.context, json!({}))
        .await;
    assert_error(&output, &["unknown tool `Task`", "Agent"]);
}

#[test]
fn accessed_paths_name_what_a_call_reads_and_writes() {
    let registry = ToolRegistry::standard();
    let paths = |name: &str, input: Value| {
        registry
            .get(name)
            .expect("tool")
            .accessed_paths(&input)
            .expect("valid input")
    };
    assert_eq!(
        paths("Write", json!({"file_path": "a.txt", "content": ""})),
        [PathAccess {
            path: "a.txt".to_owned(),
            usage: PathUse::Write
        }]
    );
    assert_eq!(
        paths("Grep", json!({"pattern": "x"})),
        [PathAccess {
            path: ".".to_owned(),
            usage: PathUse::Read
        }]
    );
    assert!(paths("Bash", json!({"command": "ls"})).is_empty());
    let invalid = registry
        .get("Edit")
        .expect("Edit")
        .accessed_paths(&json!({"file_path": 3, "old_string": "a", "new_string": "b"}));
    assert!(invalid.is_err_and(|error| error.field() == Some("file_path")));
}

#[test]
fn granted_modes_are_permission_modes_spelled_the_same() {
    use muster_agents::tools::GrantedMode;
    use muster_config::PermissionMode;
    let granted = [
        GrantedMode::Default,
        GrantedMode::AcceptEdits,
        GrantedMode::DontAsk,
        GrantedMode::Auto,
        GrantedMode::BypassPermissions,
    ];
    for mode in granted {
        let spelled = serde_json::to_value(mode).expect("serialise");
        assert_eq!(spelled, json!(PermissionMode::from(mode).as_str()));
    }
}

// ---- Invariant 6: file tools stay inside the workspace and out of .git/ and .muster/ ----

mod confinement {
    use std::collections::BTreeMap;
    use std::path::Path;

    use muster_agents::tools::{Tool, ToolContext, ToolRegistry, Workspace};
    use proptest::prelude::*;
    use serde_json::{Value, json};

    /// Every tool but `Bash`, which is not path-confined (DESIGN.md) and would run random text.
    const TOOLS: &[&str] = &[
        "Read",
        "Write",
        "Edit",
        "MultiEdit",
        "NotebookEdit",
        "Glob",
        "Grep",
        "LS",
        "AskUserQuestion",
        "ExitPlanMode",
        "TaskUpdate",
        "ReviewPlan",
    ];

    const FIELDS: &[&str] = &[
        "file_path",
        "content",
        "old_string",
        "new_string",
        "replace_all",
        "edits",
        "notebook_path",
        "cell_id",
        "new_source",
        "cell_type",
        "edit_mode",
        "pattern",
        "path",
        "glob",
        "output_mode",
        "-i",
        "-n",
        "-A",
        "-C",
        "head_limit",
        "offset",
        "limit",
        "ignore",
        "multiline",
        "type",
        "plan",
        "task_id",
        "mode",
        "extra",
    ];

    const STRINGS: &[&str] = &[
        "",
        ".",
        "/",
        "a.txt",
        "new.txt",
        "nb.ipynb",
        "out/secret.txt",
        "out/new.txt",
        "out-file",
        "../escape.txt",
        "sub/../../escape.txt",
        "/etc/hostname",
        ".git/config",
        ".git/new.txt",
        "git-alias/config",
        ".muster/settings.toml",
        ".muster/plans/other.md",
        "**/*",
        "*",
        "secret",
        "text",
        "insert",
        "delete",
        "code",
        "content",
        "count",
        "intro",
        "cell-0",
    ];

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|number| json!(number)),
            any::<u64>().prop_map(|number| json!(number)),
            prop::sample::select(STRINGS).prop_map(|text| json!(text)),
            "[a-z./*\\-]{0,12}".prop_map(Value::String),
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        leaf().prop_recursive(2, 8, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::btree_map(prop::sample::select(FIELDS), inner, 0..4).prop_map(
                    |fields| {
                        Value::Object(
                            fields
                                .into_iter()
                                .map(|(key, value)| (key.to_owned(), value))
                                .collect(),
                        )
                    }
                ),
            ]
        })
    }

    fn garbage_input() -> impl Strategy<Value = Value> {
        prop::collection::btree_map(prop::sample::select(FIELDS), value(), 0..6).prop_map(
            |fields| {
                Value::Object(
                    fields
                        .into_iter()
                        .map(|(key, value)| (key.to_owned(), value))
                        .collect(),
                )
            },
        )
    }

    const PATHS: &[&str] = &[
        "a.txt",
        "new.txt",
        "dir/new.txt",
        "out/secret.txt",
        "out/new.txt",
        "out/nb.ipynb",
        "out-file",
        "../escape.txt",
        "sub/../../escape.txt",
        "/etc/hostname",
        ".git/config",
        ".git/nb.ipynb",
        ".git/new.txt",
        "git-alias/config",
        "git-alias/nb.ipynb",
        ".muster/settings.toml",
        ".muster/nb.ipynb",
        ".muster/plans/other.md",
        "nb.ipynb",
        "",
        ".",
        "/",
    ];

    const TEXTS: &[&str] = &["", "secret", "text", "core", "x", "intro", "new\ntext"];

    fn path() -> impl Strategy<Value = Value> {
        prop::sample::select(PATHS).prop_map(|path| json!(path))
    }

    fn text() -> impl Strategy<Value = Value> {
        prop::sample::select(TEXTS).prop_map(|text| json!(text))
    }

    /// Inputs shaped like each tool's, so calls get past validation and reach the paths.
    fn shaped_input() -> impl Strategy<Value = (&'static str, Value)> {
        prop_oneof![
            (path(), text()).prop_map(|(file_path, content)| {
                ("Write", json!({"file_path": file_path, "content": content}))
            }),
            (path(), text(), text(), any::<bool>()).prop_map(|(file_path, old, new, all)| {
                (
                    "Edit",
                    json!({"file_path": file_path, "old_string": old, "new_string": new, "replace_all": all}),
                )
            }),
            (path(), prop::collection::vec((text(), text()), 1..3)).prop_map(|(file_path, edits)| {
                let edits: Vec<Value> = edits
                    .into_iter()
                    .map(|(old, new)| json!({"old_string": old, "new_string": new}))
                    .collect();
                ("MultiEdit", json!({"file_path": file_path, "edits": edits}))
            }),
            (
                path(),
                prop::sample::select(&["intro", "cell-0", "missing"][..]),
                text(),
                prop::sample::select(&["code", "markdown"][..]),
                prop::sample::select(&["replace", "insert", "delete"][..]),
            )
                .prop_map(|(notebook_path, cell_id, source, cell_type, mode)| {
                    (
                        "NotebookEdit",
                        json!({"notebook_path": notebook_path, "cell_id": cell_id, "new_source": source, "cell_type": cell_type, "edit_mode": mode}),
                    )
                }),
            path().prop_map(|file_path| ("Read", json!({"file_path": file_path}))),
            path().prop_map(|path| ("LS", json!({"path": path}))),
            path().prop_map(|path| ("Grep", json!({"pattern": "secret", "path": path, "output_mode": "content"}))),
            path().prop_map(|path| ("Glob", json!({"pattern": "**/*", "path": path}))),
        ]
    }

    fn call() -> impl Strategy<Value = (&'static str, Value)> {
        prop_oneof![
            3 => shaped_input(),
            1 => (prop::sample::select(TOOLS), garbage_input()),
        ]
    }

    const NOTEBOOK: &str = r#"{"cells": [{"cell_type": "markdown", "id": "intro", "metadata": {}, "source": ["x"]}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}"#;

    /// Every file under `root` with its content (symlinks not followed).
    fn snapshot(root: &Path) -> BTreeMap<String, String> {
        let mut files = BTreeMap::new();
        let mut pending = vec![root.to_path_buf()];
        while let Some(directory) = pending.pop() {
            let Ok(entries) = std::fs::read_dir(&directory) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let kind = entry.file_type().expect("file type");
                if kind.is_dir() {
                    pending.push(path);
                } else if kind.is_file() {
                    let content = std::fs::read(&path).expect("read");
                    let content = String::from_utf8_lossy(&content).into_owned();
                    files.insert(path.display().to_string(), content);
                } else {
                    files.insert(path.display().to_string(), "<link>".to_owned());
                }
            }
        }
        files
    }

    fn setup(workspace: &Path, outside: &Path) {
        std::fs::write(outside.join("secret.txt"), "secret").expect("secret");
        std::fs::create_dir_all(workspace.join(".git")).expect(".git");
        std::fs::write(workspace.join(".git/config"), "[core]").expect("git config");
        std::fs::create_dir_all(workspace.join(".muster/plans")).expect(".muster");
        std::fs::write(workspace.join(".muster/settings.toml"), "x = 1").expect("settings");
        for directory in [
            workspace.join(".git"),
            workspace.join(".muster"),
            outside.to_path_buf(),
        ] {
            std::fs::write(directory.join("nb.ipynb"), NOTEBOOK).expect("notebook");
        }
        std::fs::write(workspace.join("a.txt"), "text secret text").expect("a.txt");
        std::fs::write(workspace.join("nb.ipynb"), NOTEBOOK).expect("notebook");
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(outside, workspace.join("out")).expect("symlink");
            std::os::unix::fs::symlink(outside.join("secret.txt"), workspace.join("out-file"))
                .expect("symlink");
            std::os::unix::fs::symlink(workspace.join(".git"), workspace.join("git-alias"))
                .expect("symlink");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn file_tools_never_panic_and_never_write_outside_or_into_protected_directories(
            (tool, input) in call(),
        ) {
            let workspace_dir = tempfile::tempdir().expect("workspace");
            let outside_dir = tempfile::tempdir().expect("outside");
            setup(workspace_dir.path(), outside_dir.path());
            let workspace = Workspace::new(workspace_dir.path()).expect("workspace");
            let root = workspace.root().to_path_buf();
            let context = ToolContext::new(workspace, Vec::new());
            let before = (
                snapshot(outside_dir.path()),
                snapshot(&root.join(".git")),
                snapshot(&root.join(".muster")),
            );
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            let registry = ToolRegistry::standard();
            let output = runtime.block_on(async {
                let tool: &dyn Tool = registry.get(tool).expect("tool").as_ref();
                tool.call(&context, input.clone()).await
            });
            prop_assert!(
                !output.content.contains("failed internally"),
                "{tool} panicked on {input}: {}",
                output.content
            );
            let after = (
                snapshot(outside_dir.path()),
                snapshot(&root.join(".git")),
                snapshot(&root.join(".muster")),
            );
            prop_assert_eq!(before, after, "{} changed protected files with {}", tool, input);
        }
    }
}
