//! `muster check` through the binary: each flag and exit code, and `--stdin` over the shell
//! corpus giving the same verdicts as the library engine. The child gets its own HOME and
//! environment, and its stdin is piped from the test (the test never reads its own stdin).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use muster_agents::permission::{AgentKind, PermissionContext, PermissionEngine, Verdict};
use muster_agents::tools::Workspace;
use muster_config::{AgentCatalog, Origin, PermissionMode, PermissionRules, Sourced};
use serde_json::{Value, json};

use super::common::cleared_command;

/// The shell classifier's corpus (see `agents/tests/suite/shell.rs` for the format).
const CORPUS: &str = include_str!("../../../agents/tests/data/shell-corpus.tsv");
/// The workspace root the corpus is written for.
const CORPUS_ROOT: &str = "/workspace/project";

struct Project {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
}

impl Project {
    /// A project with `src/a.rs`, `.env`, `secrets/key` and the given deny rules.
    fn new(deny: &[&str]) -> Project {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("project");
        let home = tmp.path().join("home");
        std::fs::create_dir_all(root.join(".muster/plans")).unwrap();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::create_dir_all(root.join("secrets")).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(root.join("src/a.rs"), "fn a() {}\n").unwrap();
        std::fs::write(root.join(".env"), "SECRET=1\n").unwrap();
        std::fs::write(root.join("secrets/key"), "k\n").unwrap();
        let rules: Vec<String> = deny.iter().map(|rule| format!("{rule:?}")).collect();
        std::fs::write(
            root.join(".muster/settings.toml"),
            format!("[permissions]\ndeny = [{}]\n", rules.join(", ")),
        )
        .unwrap();
        let root = root.canonicalize().unwrap();
        Project {
            _tmp: tmp,
            root,
            home,
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = cleared_command(&self.root, &self.home);
        command.arg("check").args(args);
        command
    }

    fn check(&self, args: &[&str]) -> Output {
        self.command(args).stdin(Stdio::null()).output().unwrap()
    }

    /// Runs `muster check --stdin` with `input` piped in.
    fn check_stdin(&self, args: &[&str], input: &str) -> Output {
        let mut child = self
            .command(args)
            .arg("--stdin")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let input = input.to_string();
        let writer = std::thread::spawn(move || {
            stdin.write_all(input.as_bytes()).unwrap();
        });
        let output = child.wait_with_output().unwrap();
        writer.join().unwrap();
        output
    }
}

fn code(output: &Output) -> i32 {
    output.status.code().unwrap_or(-1)
}

#[test]
fn flags_decisions_and_exit_codes() {
    let project = Project::new(&["Read(./.env)"]);
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("b.rs"), "x").unwrap();
    let other_workspace = other.path().to_str().unwrap().to_string();
    let own_plan = ".muster/plans/main.md";
    // (args, exit code, decision in --json, reason fragment)
    let table: Vec<(Vec<&str>, i32, &str, &str)> = vec![
        (
            vec![
                "--permission-mode",
                "plan",
                "Bash",
                r#"{"command":"find . -delete"}"#,
            ],
            1,
            "deny",
            "`find -delete`",
        ),
        (
            vec![
                "--mode",
                "plan",
                "Bash",
                r#"{"command":"git log --oneline -5"}"#,
            ],
            0,
            "allow",
            "read-only",
        ),
        (
            vec!["--mode", "plan", "Bash", r#"{"command":"cat .env"}"#],
            1,
            "deny",
            "Read(./.env)",
        ),
        (
            vec![
                "--mode",
                "default",
                "Write",
                r#"{"file_path":"src/b.rs","content":"x"}"#,
            ],
            1,
            "ask",
            "needs approval",
        ),
        (
            vec![
                "--mode",
                "acceptEdits",
                "Write",
                r#"{"file_path":"src/b.rs","content":"x"}"#,
            ],
            0,
            "allow",
            "inside the workspace",
        ),
        (
            vec![
                "--mode",
                "dontAsk",
                "Edit",
                r#"{"file_path":"src/a.rs","old_string":"a","new_string":"b"}"#,
            ],
            1,
            "deny",
            "dontAsk",
        ),
        (
            vec!["--mode", "auto", "Bash", r#"{"command":"rm -rf src"}"#],
            1,
            "deny",
            "known-dangerous",
        ),
        (
            vec![
                "--mode",
                "bypassPermissions",
                "Bash",
                r#"{"command":"rm -rf src"}"#,
            ],
            1,
            "ask",
            "known-dangerous",
        ),
        (
            vec![
                "--mode",
                "bypassPermissions",
                "Read",
                r#"{"file_path":".env"}"#,
            ],
            1,
            "deny",
            "deny rule `Read(./.env)`",
        ),
        (
            vec![
                "--agent-kind",
                "teammate",
                "SpawnTeammate",
                r#"{"name":"a","prompt":"p"}"#,
            ],
            1,
            "deny",
            "only for the lead",
        ),
        (
            vec![
                "--agent-kind",
                "subagent",
                "AskUserQuestion",
                r#"{"questions":[]}"#,
            ],
            1,
            "deny",
            "a subagent cannot call",
        ),
        (
            vec![
                "--mode",
                "plan",
                "Agent",
                r#"{"description":"d","prompt":"p","subagent_type":"general"}"#,
            ],
            1,
            "deny",
            "not read_only",
        ),
        (
            vec![
                "--mode",
                "plan",
                "Agent",
                r#"{"description":"d","prompt":"p","subagent_type":"Plan"}"#,
            ],
            0,
            "allow",
            "definition `Plan` is read_only",
        ),
        (
            vec![
                "--agent-kind",
                "subagent",
                "--agent",
                "Plan",
                "--parent-mode",
                "bypassPermissions",
                "Write",
                r#"{"file_path":"src/b.rs","content":"x"}"#,
            ],
            1,
            "deny",
            "not among the tools of agent definition `Plan`",
        ),
        (
            vec![
                "--agent-kind",
                "subagent",
                "--agent",
                "general",
                "--parent-mode",
                "plan",
                "Write",
                r#"{"file_path":"src/b.rs","content":"x"}"#,
            ],
            1,
            "deny",
            "plan mode allows only",
        ),
        (
            vec![
                "--agent",
                "lead",
                "Write",
                r#"{"file_path":"src/b.rs","content":"x"}"#,
            ],
            1,
            "deny",
            "not among the tools of agent definition `lead`",
        ),
        (
            vec!["--mode", "plan", "ExitPlanMode", r#"{"plan":"the plan"}"#],
            0,
            "allow",
            "by name",
        ),
        (
            vec![
                "--mode",
                "plan",
                "--plan-file",
                own_plan,
                "Write",
                r#"{"file_path":".muster/plans/main.md","content":"x"}"#,
            ],
            0,
            "allow",
            "your own plan file",
        ),
        (
            vec![
                "--mode",
                "plan",
                "--plan-file",
                own_plan,
                "Write",
                r#"{"file_path":".muster/plans/main-agent-alice.md","content":"x"}"#,
            ],
            1,
            "deny",
            "only your own plan file",
        ),
        (
            vec![
                "--mode",
                "acceptEdits",
                "--workspace",
                &other_workspace,
                "Edit",
                r#"{"file_path":"b.rs","old_string":"x","new_string":"y"}"#,
            ],
            0,
            "allow",
            "inside the workspace",
        ),
        (
            vec![
                "--mode",
                "acceptEdits",
                "--workspace",
                &other_workspace,
                "Write",
                r#"{"file_path":"../x.rs","content":"x"}"#,
            ],
            1,
            "deny",
            "path limits",
        ),
    ];
    for (args, exit, decision, fragment) in &table {
        let text = project.check(args);
        assert_eq!(
            code(&text),
            *exit,
            "{args:?}: {}",
            String::from_utf8_lossy(&text.stderr)
        );
        let stdout = String::from_utf8(text.stdout).unwrap();
        assert!(
            stdout.starts_with(&format!("{decision}: ")),
            "{args:?}: {stdout}"
        );
        let mut with_json = args.clone();
        with_json.insert(0, "--json");
        let output = project.check(&with_json);
        assert_eq!(code(&output), *exit, "{with_json:?}");
        let value: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(value["tool"], json!(args[args.len() - 2]), "{args:?}");
        assert_eq!(value["decision"], json!(decision), "{args:?}: {value}");
        let reason = value["reason"].as_str().unwrap();
        assert!(
            reason.contains(fragment),
            "{args:?}: {reason:?} lacks {fragment:?}"
        );
    }
    // Nothing ran.
    assert!(!project.root.join("src/b.rs").exists());
    assert!(project.root.join("src/a.rs").exists());
}

#[test]
fn bad_arguments_exit_2() {
    let project = Project::new(&[]);
    let table: Vec<(Vec<&str>, &str)> = vec![
        (vec![], "expected TOOL and INPUT_JSON"),
        (vec!["Bash"], "expected INPUT_JSON"),
        (vec!["Bash", "{not json"], "INPUT_JSON is not valid JSON"),
        (
            vec!["--mode", "planning", "Read", "{}"],
            "unknown permission mode `planning`",
        ),
        (
            vec![
                "--parent-mode",
                "x",
                "--agent-kind",
                "subagent",
                "Read",
                "{}",
            ],
            "--parent-mode",
        ),
        (
            vec!["--agent-kind", "boss", "Read", "{}"],
            "unknown agent kind `boss`",
        ),
        (
            vec!["--agent", "Plam", "Read", "{}"],
            "no agent definition named `Plam`",
        ),
        (
            vec!["--parent-mode", "plan", "Read", "{}"],
            "only to --agent-kind subagent",
        ),
        (
            vec!["--workspace", "/nonexistent/muster", "Read", "{}"],
            "--workspace",
        ),
        (vec!["--stdin", "Read", "{}"], "give no TOOL"),
        (vec!["--bogus-flag", "Read", "{}"], "--bogus-flag"),
    ];
    for (args, fragment) in table {
        let output = project.check(&args);
        assert_eq!(code(&output), 2, "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(fragment), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn stdin_prints_one_verdict_per_line_in_order() {
    let project = Project::new(&["Read(./.env)"]);
    let input = [
        r#"{"tool":"Read","input":{"file_path":"src/a.rs"}}"#,
        r#"{"tool":"Bash","input":{"command":"cat .env"}}"#,
        "not json",
        r#"{"tool":"Write","input":{"file_path":"src/b.rs","content":"x"}}"#,
        r#"{"input":{}}"#,
        r#"{"tool":"LS","input":{"path":"src"}}"#,
    ]
    .join("\n");
    let output = project.check_stdin(&["--mode", "plan", "--json"], &input);
    assert_eq!(code(&output), 2, "a bad line exits 2");
    let lines: Vec<Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let decisions: Vec<&str> = lines
        .iter()
        .map(|line| line["decision"].as_str().unwrap())
        .collect();
    assert_eq!(
        decisions,
        ["allow", "deny", "error", "deny", "error", "allow"]
    );
    assert!(
        lines[2]["reason"]
            .as_str()
            .unwrap()
            .starts_with("line 3: not valid JSON")
    );
    assert!(
        lines[4]["reason"]
            .as_str()
            .unwrap()
            .contains("no string `tool`")
    );
    // All allowed: 0; any refused: 1. Text output has one line per call too.
    let allowed = r#"{"tool":"Read","input":{"file_path":"src/a.rs"}}"#;
    let output = project.check_stdin(&["--mode", "plan"], &format!("{allowed}\n{allowed}\n"));
    assert_eq!(code(&output), 0);
    assert_eq!(String::from_utf8(output.stdout).unwrap().lines().count(), 2);
    let refused = r#"{"tool":"Bash","input":{"command":"touch x"}}"#;
    let output = project.check_stdin(&["--mode", "plan"], &format!("{allowed}\n{refused}\n"));
    assert_eq!(code(&output), 1);
    let output = project.check_stdin(&["--mode", "plan"], "");
    assert_eq!(code(&output), 0);
    assert!(output.stdout.is_empty());
}

struct CorpusLine {
    category: String,
    allow: bool,
    command: String,
}

/// The corpus with `/workspace/project` replaced by `root`.
fn corpus(root: &Path) -> Vec<CorpusLine> {
    let root = root.to_str().unwrap();
    CORPUS
        .lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .map(|line| {
            let mut fields = line.splitn(3, '\t');
            let category = fields.next().unwrap().to_string();
            let allow = fields.next().unwrap() == "allow";
            let command = fields
                .next()
                .unwrap()
                .replace('␤', "\n")
                .replace('␉', "\t")
                .replace(CORPUS_ROOT, root);
            CorpusLine {
                category,
                allow,
                command,
            }
        })
        .collect()
}

/// `muster check --stdin` in plan mode over every corpus command; the verdicts equal the
/// library engine's on the same workspace and rules, line for line. `deny-` categories run
/// with `Read` deny rules for `./.env` and `./secrets`, the others with none (as in the shell
/// suite). The engine agrees with the corpus's expectation everywhere except where a settings
/// rule is stricter; the per-category agreement is printed.
#[test]
fn stdin_over_the_shell_corpus_matches_the_library() {
    let deny = ["Read(./.env)", "Read(./secrets)", "Read(./secrets/**)"];
    let configurations: [(&[&str], bool); 2] = [(&deny, true), (&[], false)];
    let engine = PermissionEngine::standard();
    let catalog = AgentCatalog::built_in().unwrap();
    let mut agreement: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut total = 0;
    for (rules_text, deny_categories) in configurations {
        let project = Project::new(rules_text);
        let lines: Vec<CorpusLine> = corpus(&project.root)
            .into_iter()
            .filter(|line| line.category.starts_with("deny-") == deny_categories)
            .collect();
        let input: String = lines
            .iter()
            .map(|line| {
                format!(
                    "{}\n",
                    json!({"tool": "Bash", "input": {"command": line.command}})
                )
            })
            .collect();
        let output = project.check_stdin(&["--mode", "plan", "--json"], &input);
        assert!(
            [0, 1].contains(&code(&output)),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let verdicts: Vec<Value> = String::from_utf8(output.stdout)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(verdicts.len(), lines.len(), "one verdict per line");

        let rules = PermissionRules {
            deny: rules_text
                .iter()
                .map(|text| Sourced::new(text.parse().unwrap(), Origin::built_in()))
                .collect(),
            ..PermissionRules::default()
        };
        let workspace = Workspace::new(&project.root).unwrap();
        let context = PermissionContext::new(
            AgentKind::Lead,
            PermissionMode::Plan,
            &workspace,
            &rules,
            &catalog,
        );
        for (line, verdict) in lines.iter().zip(&verdicts) {
            total += 1;
            let library = engine.decide(&context, "Bash", &json!({"command": line.command}));
            assert_eq!(
                verdict["decision"],
                json!(library.verdict.as_str()),
                "[{}] {:?}: cli {verdict}, library {}",
                line.category,
                line.command,
                library.reason
            );
            let entry = agreement.entry(line.category.clone()).or_default();
            if (library.verdict == Verdict::Allow) == line.allow {
                entry.0 += 1;
            } else {
                entry.1 += 1;
                // The only difference allowed: settings rules are stricter than the shell
                // suite's lexical check, because `Read(./.env)` (no `/`) matches `.env` at any
                // depth (`src/.env` too).
                assert!(
                    line.allow
                        && line.category.starts_with("deny-")
                        && library.reason.contains("Read(./.env)"),
                    "[{}] {:?}: the corpus expects {}, the engine says {}",
                    line.category,
                    line.command,
                    if line.allow { "allow" } else { "refuse" },
                    library.reason
                );
            }
        }
    }
    println!("{:<28} {:>6} {:>9}", "category", "agree", "disagree");
    for (category, (agree, disagree)) in &agreement {
        println!("{category:<28} {agree:>6} {disagree:>9}");
    }
    assert!(total >= 400, "{total} corpus commands");
}

/// A user's Claude Code settings hold in muster: the deny rules of `.claude/settings.json`
/// deny (in `bypassPermissions` too), the user's own allow rules apply, and a repository's allow
/// rules and hooks are skipped in an untrusted project and said, never silently dropped. A
/// committed `.claude/settings.local.json` counts as the repository's.
#[test]
fn claude_code_settings_deny_in_every_mode_and_a_repository_cannot_allow() {
    let project = Project::new(&[]);
    let claude = project.root.join(".claude");
    std::fs::create_dir_all(&claude).unwrap();
    std::fs::write(
        claude.join("settings.json"),
        r#"{"permissions": {"deny": ["Read(./.env)", "Bash(curl:*)"], "allow": ["Bash(touch a:*)"]},
            "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "guard.sh"}]}]}}"#,
    )
    .unwrap();
    std::fs::create_dir_all(project.home.join(".claude")).unwrap();
    std::fs::write(
        project.home.join(".claude/settings.json"),
        r#"{"permissions": {"allow": ["Bash(touch b:*)"]}}"#,
    )
    .unwrap();
    let json = |args: &[&str]| -> (Value, String) {
        let output = project.check(&[&["--json"], args].concat());
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        let value =
            serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
        (value, stderr)
    };
    let (decision, stderr) = json(&["Read", r#"{"file_path":".env"}"#]);
    assert_eq!(decision["decision"], "deny", "{decision}");
    assert!(
        stderr.contains("muster: project not trusted")
            && stderr.contains("skipped hooks.PreToolUse = \"guard.sh\", 1 allow rule(s)"),
        "{stderr}"
    );
    let (decision, _) = json(&[
        "--permission-mode",
        "bypassPermissions",
        "Bash",
        r#"{"command":"curl https://example.com"}"#,
    ]);
    assert_eq!(decision["decision"], "deny", "{decision}");
    // The repository's allow rule does not apply; the user's own does.
    let (decision, _) = json(&["Bash", r#"{"command":"touch a"}"#]);
    assert_eq!(decision["decision"], "ask", "{decision}");
    let (decision, _) = json(&["Bash", r#"{"command":"touch b"}"#]);
    assert_eq!(decision["decision"], "allow", "{decision}");

    // An untracked settings.local.json is the user's; committed, it is the repository's.
    std::fs::write(
        claude.join("settings.local.json"),
        r#"{"permissions": {"allow": ["Bash(touch c:*)"]}}"#,
    )
    .unwrap();
    let git = |args: &[&str]| {
        let status = Command::new("git")
            .arg("-C")
            .arg(&project.root)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    };
    git(&["init", "-q"]);
    let (decision, _) = json(&["Bash", r#"{"command":"touch c"}"#]);
    assert_eq!(decision["decision"], "allow", "untracked: {decision}");
    git(&["add", "-f", ".claude/settings.local.json"]);
    let (decision, stderr) = json(&["Bash", r#"{"command":"touch c"}"#]);
    assert_eq!(decision["decision"], "ask", "committed: {decision}");
    assert!(stderr.contains("2 allow rule(s)"), "{stderr}");

    // Trusted, the repository's own allow rules apply too (its deny rules always did).
    let trusted = cleared_command(&project.root, &project.home)
        .arg("trust")
        .output()
        .unwrap();
    assert!(
        trusted.status.success(),
        "{}",
        String::from_utf8_lossy(&trusted.stderr)
    );
    let (decision, _) = json(&["Bash", r#"{"command":"touch a"}"#]);
    assert_eq!(decision["decision"], "allow", "trusted: {decision}");
    let (decision, _) = json(&["Bash", r#"{"command":"curl https://example.com"}"#]);
    assert_eq!(decision["decision"], "deny", "trusted: {decision}");
}
