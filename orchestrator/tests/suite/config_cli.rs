//! `muster config show` and `muster agents list` through the binary, on a project mixing
//! `.muster/` and `.claude/` files. The child gets its own HOME and environment; the test
//! process's environment is never changed.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use super::common::{cleared_command, stderr};

struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("project");
        let home = tmp.path().join("home");
        std::fs::create_dir_all(root.join(".muster")).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        Fixture {
            _tmp: tmp,
            root,
            home,
        }
    }

    fn write(&self, base: &Path, relative: &str, text: &str) -> PathBuf {
        let path = base.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }

    fn muster(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut command = cleared_command(&self.root, &self.home);
        command.args(args);
        for (name, value) in env {
            command.env(name, value);
        }
        command.output().unwrap()
    }

    fn json(&self, args: &[&str], env: &[(&str, &str)]) -> Value {
        let output = self.muster(args, env);
        assert!(output.status.success(), "{}", stderr(&output));
        serde_json::from_slice(&output.stdout).unwrap()
    }

    /// The mixed project of the "done when".
    fn mixed() -> Fixture {
        let fixture = Fixture::new();
        fixture.write(
            &fixture.home,
            ".muster/settings.toml",
            "auto_gate_denial_limit = 9\n[permissions]\nallow = [\"Bash(git status)\"]\n",
        );
        fixture.write(
            &fixture.root,
            ".muster/settings.toml",
            "permission_mode = \"acceptEdits\"\n[permissions]\nallow = [\"Bash(git diff:*)\"]\ndeny = [\"Read(./.env)\"]\n",
        );
        fixture.write(
            &fixture.root,
            ".muster/agents/reviewer.md",
            "---\nname: reviewer\ndescription: Reviews diffs\ntools: Read, Grep\npermissionMode: plan\n---\nReview.\n",
        );
        fixture.write(
            &fixture.root,
            ".claude/agents/code-reviewer.md",
            "---\nname: code-reviewer\ndescription: Claude reviewer\ntools: Read, WebFetch, Task\ncolor: purple\n---\nReview.\n",
        );
        fixture.write(
            &fixture.root,
            ".muster/agents/general.md",
            "---\nname: general\ndescription: Our general\n---\nBody.\n",
        );
        fixture
    }
}

#[test]
fn config_show_json_gives_each_value_with_its_layer() {
    let fixture = Fixture::mixed();
    // Untrusted, the project's mode and allow rule are listed as skipped, and why.
    let document = fixture.json(&["config", "show", "--json"], &[]);
    assert_eq!(document["trust"]["trusted"], false);
    assert_eq!(document["settings"]["permission_mode"]["value"], "default");
    let skipped = &document["skipped"];
    assert_eq!(skipped[0]["key"], "permission_mode", "{skipped}");
    assert_eq!(skipped[0]["layer"], "project");
    assert_eq!(skipped[1]["key"], "permissions.allow", "{skipped}");
    assert_eq!(skipped[1]["value"], "Bash(git diff:*)");
    assert!(
        skipped[1]["why"].as_str().unwrap().contains("not trusted"),
        "{skipped}"
    );
    // The user trusts the project: its own settings apply.
    let trusted = fixture.muster(&["trust"], &[]);
    assert!(trusted.status.success(), "{}", stderr(&trusted));
    let document = fixture.json(
        &["config", "show", "--json"],
        &[("MUSTER_MAILBOX__SYNC", "normal")],
    );
    let settings = &document["settings"];
    assert_eq!(settings["permission_mode"]["value"], "acceptEdits");
    assert_eq!(settings["permission_mode"]["layer"], "project");
    assert_eq!(settings["permission_mode"]["line"], 1);
    assert_eq!(settings["auto_gate_denial_limit"]["value"], 9);
    assert_eq!(settings["auto_gate_denial_limit"]["layer"], "user");
    assert_eq!(settings["mailbox.sync"]["value"], "normal");
    assert_eq!(settings["mailbox.sync"]["layer"], "env");
    assert_eq!(settings["mailbox.sync"]["source"], "MUSTER_MAILBOX__SYNC");
    assert_eq!(settings["mailbox.max_body_bytes"]["value"], 1048576);
    assert_eq!(settings["mailbox.max_body_bytes"]["layer"], "default");
    let allow: Vec<(&str, &str)> = settings["permissions.allow"]
        .as_array()
        .unwrap()
        .iter()
        .map(|rule| {
            (
                rule["value"].as_str().unwrap(),
                rule["layer"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        allow,
        vec![
            ("Bash(git status)", "user"),
            ("Bash(git diff:*)", "project")
        ]
    );
    assert_eq!(settings["permissions.deny"][0]["value"], "Read(./.env)");
    let plans = document["resolved"]["plans_directory"].as_str().unwrap();
    assert!(plans.ends_with(".muster/plans"), "{plans}");
}

#[test]
fn config_show_text_names_layers_and_flags_override() {
    let fixture = Fixture::mixed();
    let output = fixture.muster(
        &["--store", "state/db.sqlite", "config", "show"],
        &[("MUSTER_PERMISSION_MODE", "plan")],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.contains("permission_mode = \"plan\"  # env (MUSTER_PERMISSION_MODE)"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "store = \"{}\"  # cli (--store)",
            fixture.root.join("state/db.sqlite").display()
        )),
        "{text}"
    );
    assert!(
        text.contains("mailbox.busy_timeout_ms = 5000  # default (built-in)"),
        "{text}"
    );
}

#[test]
fn config_errors_exit_2_with_file_line_and_key() {
    let fixture = Fixture::new();
    let file = fixture.write(
        &fixture.root,
        ".muster/settings.toml",
        "[mailbox]\nsink = \"full\"\n",
    );
    let output = fixture.muster(&["config", "show"], &[]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output).trim(),
        format!(
            "muster: {}:2:1: mailbox.sink: unknown key `sink` (did you mean `sync`?)",
            file.display()
        )
    );
    let fixture = Fixture::new();
    let output = fixture.muster(&["config", "show"], &[("MUSTER_PERMISSION_MODE", "yolo")]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains(
            "environment variable MUSTER_PERMISSION_MODE: permission_mode: expected one of"
        )
    );
}

#[test]
fn agents_list_json_shows_sources_overrides_and_warnings() {
    let fixture = Fixture::mixed();
    let document = fixture.json(&["agents", "list", "--json"], &[]);
    let agents = document["agents"].as_array().unwrap();
    let names: Vec<&str> = agents.iter().map(|a| a["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        vec!["Plan", "code-reviewer", "general", "lead", "reviewer"]
    );
    let by_name = |name: &str| agents.iter().find(|a| a["name"] == name).unwrap();
    assert_eq!(by_name("lead")["source"], "built-in");
    assert_eq!(by_name("lead")["permissionMode"], "acceptEdits");
    assert_eq!(by_name("Plan")["read_only"], true);
    let general = by_name("general");
    assert!(
        general["source"]
            .as_str()
            .unwrap()
            .ends_with(".muster/agents/general.md")
    );
    assert_eq!(general["overrides"], serde_json::json!(["built-in"]));
    let reviewer = by_name("reviewer");
    assert_eq!(reviewer["tools"], serde_json::json!(["Read", "Grep"]));
    assert_eq!(reviewer["permissionMode"], "plan");
    let claude = by_name("code-reviewer");
    assert_eq!(claude["tools"], serde_json::json!(["Read", "Agent"]));
    let warnings: Vec<&str> = claude["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].ends_with("code-reviewer.md:4:8: tools: ignored: unknown tool `WebFetch`"),
        "{warnings:?}"
    );
    assert!(
        warnings[1].ends_with("code-reviewer.md:5:1: color: ignored: unknown key `color`"),
        "{warnings:?}"
    );
    assert_eq!(document["warnings"].as_array().unwrap().len(), 2);
}

#[test]
fn agents_list_text_and_errors() {
    let fixture = Fixture::mixed();
    fixture.write(&fixture.root, "CLAUDE.md", "Keep it short.\n");
    let output = fixture.muster(&["agents", "list"], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("lead  built-in\n"), "{text}");
    assert!(text.contains("(overrides built-in)"), "{text}");
    assert!(text.contains("instructions: "), "{text}");
    assert!(text.contains("warning: "), "{text}");

    let file = fixture.write(
        &fixture.root,
        ".muster/agents/bad.md",
        "---\nname: bad\ndescription: d\ntools: Read, WebFetch\n---\n",
    );
    let output = fixture.muster(&["agents", "list"], &[]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output).trim(),
        format!(
            "muster: {}:4:8: tools: unknown tool `WebFetch`: muster has no `WebFetch`; remove \
             it, or keep the file in .claude/agents (where what muster lacks is ignored)",
            file.display()
        )
    );
}

#[test]
fn dash_c_to_a_missing_directory_or_a_file_says_so_with_exit_2() {
    let fixture = Fixture::new();
    let file = fixture.write(&fixture.root, "notes.txt", "mine\n");
    let cases = [
        ("no-such-dir", "-C no-such-dir: there is no such directory"),
        ("notes.txt", "-C notes.txt: it is not a directory"),
    ];
    for (dir, said) in cases {
        for command in [&["runs"][..], &["config", "show"]] {
            let output = fixture.muster(&[&["-C", dir][..], command].concat(), &[]);
            assert_eq!(output.status.code(), Some(2), "{dir} {command:?}");
            assert!(stderr(&output).contains(said), "{}", stderr(&output));
        }
    }
    assert!(
        !fixture.root.join("no-such-dir").exists(),
        "nothing was made"
    );
    assert_eq!(std::fs::read_to_string(file).unwrap(), "mine\n");
}

/// Variables muster's tests and scripts read are not settings and never warn.
#[test]
fn test_only_variables_do_not_warn() {
    let fixture = Fixture::new();
    let output = fixture.muster(
        &["config", "show"],
        &[
            ("MUSTER_TEST_MCP_PYTHON", "/venv/bin/python"),
            (
                "MUSTER_TEST_DATABASE_URL",
                "postgres://postgres@127.0.0.1/test",
            ),
        ],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        !stderr(&output).contains("names no setting"),
        "{}",
        stderr(&output)
    );
}
