//! `muster demo`: a whole team changes `examples/demo` offline, and the summary is the same
//! every time (ids, paths and times redacted) — compared with `tests/data/demo-summary.txt`.
//! Set `MUSTER_UPDATE_SNAPSHOTS=1` to rewrite that file after a deliberate change.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::common::{stderr, stdout};

const SNAPSHOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/demo-summary.txt");

fn demo(home: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_muster"));
    command
        .current_dir(home)
        .arg("demo")
        .args(args)
        .env("HOME", home)
        .env("TMPDIR", home)
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::null());
    command
}

/// The text between `start` and the first `end` after it.
fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = text.find(start)? + start.len();
    let to = text[from..].find(end)? + from;
    Some(&text[from..to])
}

/// The summary with the project directory, the run id, the plan slug and the time replaced.
fn redact(summary: &str, dir: &Path) -> String {
    let mut text = summary
        .replace(&dir.display().to_string(), "<DIR>")
        .replace(env!("CARGO_BIN_EXE_muster"), "<MUSTER>");
    if let Some(run) = between(&text, "\n  run      ", ",").map(str::to_owned) {
        text = text.replace(&run, "<RUN>");
    }
    if let Some(slug) = between(&text, ".muster/plans/", "-agent-").map(str::to_owned) {
        text = text.replace(&slug, "<SLUG>");
    }
    if let Some(time) = between(&text, "The demo took ", " s.").map(str::to_owned) {
        text = text.replace(&format!("took {time} s."), "took <TIME> s.");
    }
    text
}

#[test]
fn the_demo_runs_a_team_offline_and_its_summary_matches_the_snapshot() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("demo");
    let output = demo(home.path(), &["--dir", dir.to_str().unwrap()])
        .output()
        .unwrap();
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}\n{}", stderr(&output));
    // The story, whatever the snapshot says.
    for expected in [
        "Agent: starts a Plan subagent",
        "lead.sub-1",
        "alice.sub-1",
        "plan-alice-1 (approved by lead, mode acceptEdits)",
        "plan-bob-1 (rejected by policy)",
        "plan-bob-2 (approved by policy, mode acceptEdits)",
        "feedback: \"`tests/run.sh` matches a denied path\"",
        "7 passed, 0 failed",
        "The run ended: completed, exit code 0.",
    ] {
        assert!(text.contains(expected), "no {expected:?} in\n{text}");
    }
    assert!(dir.join(".git").is_dir() || text.contains("git was not found"));
    let redacted = redact(&text, &std::path::absolute(&dir).unwrap());
    if std::env::var_os("MUSTER_UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(SNAPSHOT, &redacted).unwrap();
    }
    let expected = std::fs::read_to_string(SNAPSHOT).unwrap();
    assert!(
        redacted == expected,
        "the summary differs from {SNAPSHOT} (MUSTER_UPDATE_SNAPSHOTS=1 rewrites it):\n{redacted}"
    );

    // The closing advice works as printed, with no muster on PATH (a build never installed).
    let advice = between(&text, "Look closer: `", ".\n").unwrap();
    let commands: Vec<&str> = advice.split('`').step_by(2).collect();
    let (cd, runs) = (commands[0], commands[1]);
    assert!(runs.ends_with(" runs"), "{advice}");
    let shell = Command::new("bash")
        .arg("-c")
        .arg(format!("{cd} && {runs}"))
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", home.path())
        .output()
        .unwrap();
    assert!(shell.status.success(), "{advice}: {}", stderr(&shell));
    assert!(stdout(&shell).contains("completed"), "{}", stdout(&shell));
}

#[test]
fn without_dir_the_demo_runs_in_a_new_temporary_directory_and_prints_it() {
    let home = tempfile::tempdir().unwrap();
    let output = demo(home.path(), &[]).output().unwrap();
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}\n{}", stderr(&output));
    let project = between(&text, "\n  project  ", "\n").unwrap();
    let project = PathBuf::from(project);
    assert!(project.starts_with(home.path()), "{}", project.display());
    assert!(project.join("slugify.sh").is_file());
    assert!(project.join(".muster/muster.db").is_file());
}

#[test]
fn a_directory_that_is_not_empty_is_refused_with_exit_2() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("used");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("keep.txt"), "mine\n").unwrap();
    let output = demo(home.path(), &["--dir", "used"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stdout(&output));
    assert!(
        stderr(&output).contains("is not empty"),
        "{}",
        stderr(&output)
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("keep.txt")).unwrap(),
        "mine\n"
    );
}

/// Where `program` is on this machine's PATH.
fn which(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
}

#[cfg(unix)]
#[test]
fn without_git_the_demo_works_without_a_repository_and_diffs_by_itself() {
    let home = tempfile::tempdir().unwrap();
    // A PATH with what the project's tests and the agents' Bash need, and no git.
    let bin = home.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for program in [
        "bash", "sh", "dirname", "basename", "tr", "sed", "cat", "env",
    ] {
        if let Some(path) = which(program) {
            std::os::unix::fs::symlink(path, bin.join(program)).unwrap();
        }
    }
    let dir = home.path().join("demo");
    let output = demo(home.path(), &["--dir", "demo"])
        .env("PATH", &bin)
        .output()
        .unwrap();
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}\n{}", stderr(&output));
    assert!(!dir.join(".git").exists());
    assert!(
        text.contains("(git was not found: no repository)"),
        "{text}"
    );
    assert!(
        text.contains("--- a/slugify.sh\n+++ b/slugify.sh\n"),
        "{text}"
    );
    assert!(
        text.contains("+SMALL_WORDS=\"a an and at but by for in of on or the to\""),
        "{text}"
    );
}
