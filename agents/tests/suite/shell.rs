//! The read-only shell classifier: the tagged corpus, property tests, the `Read(./.env)` deny
//! rule, and the git environment.

use std::collections::BTreeMap;

use muster_agents::shell::{
    ReadPathCheck, ShellVerdict, WorkspaceReadCheck, classify, known_dangerous, read_only_git_env,
    remove_from_read_only_env,
};
use proptest::prelude::*;

/// The corpus: `category<TAB>allow|refuse<TAB>command`, `#` comments; in the command `␤` stands
/// for a newline and `␉` for a tab. Categories starting with `deny-` run with `Read` deny rules
/// for `./.env` and `./secrets`; every other line runs with workspace confinement only.
const CORPUS: &str = include_str!("../data/shell-corpus.tsv");

const ROOT: &str = "/workspace/project";

struct Case {
    line: usize,
    category: String,
    allow: bool,
    command: String,
}

fn corpus() -> Vec<Case> {
    CORPUS
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|(n, l)| {
            let mut fields = l.splitn(3, '\t');
            let category = fields.next().unwrap_or_default().to_string();
            let verdict = fields.next().unwrap_or_default();
            let command = fields
                .next()
                .unwrap_or_else(|| panic!("line {}: expected 3 tab-separated fields", n + 1))
                .replace('␤', "\n")
                .replace('␉', "\t");
            let allow = match verdict {
                "allow" => true,
                "refuse" => false,
                other => panic!(
                    "line {}: verdict must be allow or refuse, not {other:?}",
                    n + 1
                ),
            };
            Case {
                line: n + 1,
                category,
                allow,
                command,
            }
        })
        .collect()
}

#[test]
fn corpus_verdicts() {
    let plain = WorkspaceReadCheck::new(ROOT);
    let denying = WorkspaceReadCheck::new(ROOT).deny("./.env").deny("secrets");
    let cases = corpus();
    let mut counts: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut mismatches = Vec::new();
    for case in &cases {
        let check: &dyn ReadPathCheck = if case.category.starts_with("deny-") {
            &denying
        } else {
            &plain
        };
        let verdict = classify(&case.command, check);
        let entry = counts.entry(case.category.as_str()).or_default();
        if verdict.is_read_only() {
            entry.1 += 1;
        } else {
            entry.0 += 1;
            assert!(
                verdict.reason().is_some_and(|r| !r.trim().is_empty()),
                "line {}: empty reason",
                case.line
            );
        }
        if verdict.is_read_only() != case.allow {
            mismatches.push(format!(
                "line {} [{}] expected {}, got {verdict}: {:?}",
                case.line,
                case.category,
                if case.allow { "allow" } else { "refuse" },
                case.command
            ));
        }
    }
    println!("{:<28} {:>8} {:>8}", "category", "refused", "allowed");
    for (category, (refused, allowed)) in &counts {
        println!("{category:<28} {refused:>8} {allowed:>8}");
    }
    let (refused, allowed) = counts
        .values()
        .fold((0, 0), |(r, a), (cr, ca)| (r + cr, a + ca));
    println!("{:<28} {refused:>8} {allowed:>8}", "total");
    assert!(
        mismatches.is_empty(),
        "{} mismatches:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    assert!(cases.len() >= 400, "corpus has {} commands", cases.len());
    let explorations = cases
        .iter()
        .filter(|c| c.category.starts_with("ok-") && c.allow)
        .count();
    assert!(explorations >= 150, "{explorations} read-only explorations");
    for (category, (refused, allowed)) in &counts {
        assert!(
            refused + allowed >= 5,
            "category {category} has fewer than 5 commands"
        );
    }
}

/// Runs command lines under bash with every program replaced by a stub that records its argv
/// (builtins disabled with `enable -n`), to compare with the argv the classifier checked.
#[cfg(unix)]
/// The stub shell's `HOME`, `USER` and `SHELL`.
const STUB_HOME: &str = "/home/stub";
const STUB_USER: &str = "stub";
const STUB_SHELL: &str = "/bin/bash";

struct StubShell {
    bash: String,
    dir: tempfile::TempDir,
    stubs: std::collections::BTreeSet<String>,
}

#[cfg(unix)]
#[expect(
    clippy::expect_used,
    reason = "test helper: a failed setup step fails the test"
)]
impl StubShell {
    /// `None` when there is no bash on this machine.
    fn new() -> Option<Self> {
        let found = std::process::Command::new("bash")
            .args(["-c", "command -v bash"])
            .output()
            .ok()?;
        let bash = String::from_utf8(found.stdout).ok()?.trim().to_string();
        let dir = tempfile::tempdir().expect("tempdir");
        for d in ["bin", "log", "work"] {
            std::fs::create_dir(dir.path().join(d)).expect("mkdir");
        }
        // The files the corpus's read-only lines redirect input from (`wc -l < data.csv`).
        for d in ["work/src", "work/secrets"] {
            std::fs::create_dir(dir.path().join(d)).expect("mkdir");
        }
        for f in ["a.txt", "data.csv", "README.md", ".env", "secrets/key"] {
            std::fs::write(dir.path().join("work").join(f), "x\n").expect("write input");
        }
        Some(Self {
            bash,
            dir,
            stubs: std::collections::BTreeSet::new(),
        })
    }

    /// Run `command` (whose simple commands are `commands`); the sorted argvs bash ran.
    fn run(&mut self, command: &str, commands: &[Vec<String>]) -> Vec<Vec<String>> {
        use std::os::unix::fs::PermissionsExt;
        let bin = self.dir.path().join("bin");
        let log = self.dir.path().join("log");
        for argv in commands {
            // `[[` is a keyword, not a program: bash runs nothing for it.
            if argv[0] != "[[" && self.stubs.insert(argv[0].clone()) {
                let stub = bin.join(&argv[0]);
                std::fs::write(
                    &stub,
                    "#!/bin/sh\nprintf '%s\\0' \"${0##*/}\" \"$@\" > \"$STUB_LOG/$$\"\n",
                )
                .expect("write stub");
                std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755))
                    .expect("chmod stub");
            }
        }
        // A stub just written may still be open for writing in a child another test thread
        // forked meanwhile (until it execs): running it then fails with ETXTBSY, bash's exit
        // 126. That is the test machine's race, not the classifier's: run the line again.
        let mut attempts = 0;
        loop {
            for entry in std::fs::read_dir(&log).expect("read log dir") {
                std::fs::remove_file(entry.expect("entry").path()).expect("clear log");
            }
            let output = std::process::Command::new(&self.bash)
                .arg("-c")
                .arg(format!(
                    // `set -f`: globs stay as written, as the classifier reports them (this
                    // compares word boundaries and quote removal, not expansion).
                    "set -f\nenable -n echo printf pwd true false type cd test [ command\n{command}"
                ))
                .current_dir(self.dir.path().join("work"))
                .env_clear()
                .env("PATH", &bin)
                .env("HOME", STUB_HOME)
                .env("USER", STUB_USER)
                .env("SHELL", STUB_SHELL)
                .env("STUB_LOG", &log)
                .stdin(std::process::Stdio::null())
                .output()
                .expect("run bash");
            let stderr = String::from_utf8_lossy(&output.stderr);
            attempts += 1;
            if output.status.code() == Some(126) && stderr.contains("busy") && attempts < 20 {
                continue;
            }
            // Stubs exit 0, so a quiet exit 1 is a `[[ … ]]`/`[`/`test` that evaluated false.
            let false_test = output.status.code() == Some(1) && stderr.is_empty();
            assert!(
                output.status.success() || false_test,
                "bash failed: {command:?}: {stderr}"
            );
            break;
        }
        let mut ran: Vec<Vec<String>> = std::fs::read_dir(&log)
            .expect("read log dir")
            .map(|e| {
                let bytes = std::fs::read(e.expect("entry").path()).expect("read log");
                String::from_utf8(bytes)
                    .expect("utf-8 argv")
                    .split_terminator('\0')
                    .map(str::to_string)
                    .collect()
            })
            .collect();
        ran.sort();
        ran
    }

    /// The value each variable the classifier may let through has in the stub shell (`$?` is
    /// 0: every stub exits 0).
    fn shown_values(&self) -> Vec<(&'static str, String)> {
        let bin = self.dir.path().join("bin").display().to_string();
        let pwd = self.dir.path().join("work").display().to_string();
        vec![
            ("PATH", bin),
            ("PWD", pwd),
            ("HOME", STUB_HOME.to_owned()),
            ("USER", STUB_USER.to_owned()),
            ("SHELL", STUB_SHELL.to_owned()),
            ("?", "0".to_owned()),
        ]
    }

    /// Bash ran exactly `commands` (only some of them when `command` has `||`); with
    /// `expanded`, the shown variables the classifier kept as written (`$HOME`) are replaced by
    /// their values first (a line whose text has a literal `\$` must not ask for that).
    fn assert_agrees(&mut self, command: &str, commands: &[Vec<String>], expanded: bool) {
        let ran = self.run(command, commands);
        let values = if expanded {
            self.shown_values()
        } else {
            Vec::new()
        };
        let expand = |word: &String| {
            values.iter().fold(word.clone(), |word, (name, value)| {
                word.replace(&format!("${{{name}}}"), value)
                    .replace(&format!("${name}"), value)
            })
        };
        let mut expected: Vec<Vec<String>> = commands
            .iter()
            .filter(|argv| argv[0] != "[[")
            .map(|argv| argv.iter().map(expand).collect())
            .collect();
        expected.sort();
        // After `||` or a test that may be false, only some of the commands run.
        let conditional = commands
            .iter()
            .any(|argv| matches!(argv[0].as_str(), "[[" | "[" | "test"));
        if command.contains("||") || conditional {
            for argv in &ran {
                assert!(
                    expected.contains(argv),
                    "{command:?}: bash ran {argv:?}, not among {expected:?}"
                );
            }
        } else {
            assert_eq!(ran, expected, "{command:?}");
        }
    }
}

/// Every command line of the corpus the classifier calls read-only, run by bash: bash runs
/// exactly the argv the classifier checked (quote removal, escapes and word boundaries agree).
#[cfg(unix)]
#[test]
fn bash_runs_the_argv_the_classifier_checked() {
    let Some(mut shell) = StubShell::new() else {
        return;
    };
    let check = WorkspaceReadCheck::new(ROOT);
    let mut checked = 0;
    for case in corpus() {
        if let ShellVerdict::ReadOnly { commands, run_as } = classify(&case.command, &check) {
            // What runs is the rewritten text when muster added flags (`--no-ext-diff`).
            let expanded = !case.command.contains("\\$");
            shell.assert_agrees(
                run_as.as_deref().unwrap_or(&case.command),
                &commands,
                expanded,
            );
            checked += 1;
        }
    }
    assert!(checked >= 150, "only {checked} read-only lines were run");
}

/// Words built from quoting and escaping pieces: whenever the classifier accepts the line, bash
/// passes the same argv.
#[cfg(unix)]
#[test]
fn bash_agrees_on_random_quoting() {
    const PIECES: &[&str] = &[
        "a",
        "-n",
        "--x=y",
        "'b c'",
        "\"d e\"",
        "\"d\\\"e\"",
        "\\x",
        "\\ ",
        "'\\'",
        "\"\\\\\"",
        "\"\\$\"",
        "\"\\`\"",
        "\"a\\b\"",
        "x'y'z",
        "#",
        "a#b",
        "!",
        "=",
        "%",
        "@",
        "^",
        ",",
        ":",
        "\\*",
        "'*'",
        "\"?\"",
        "\\[",
        "{}",
        "x{1}",
        "'{a,b}'",
        "\\{a,b}",
        "é",
        "''",
        "\"\"",
        "'\t'",
        "\"x\ny\"",
        "\\#",
        "~x",
        "a~",
        "\\~",
        "'~'",
        "-",
        "--",
        "..",
        "/x",
        "./y",
    ];
    const JOINS: &[&str] = &[" ", " ", " ", "", " && ", " ; ", " | ", "\n"];
    let Some(shell) = StubShell::new() else {
        return;
    };
    let shell = std::cell::RefCell::new(shell);
    let check = WorkspaceReadCheck::new(ROOT);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(300));
    let strategy = proptest::collection::vec((0..PIECES.len(), 0..JOINS.len()), 1..10);
    runner
        .run(&strategy, |picks| {
            let mut command = String::from("echo ");
            for (piece, join) in picks {
                command.push_str(PIECES[piece]);
                let j = JOINS[join];
                command.push_str(j);
                if j.trim().len() == 1 || j.contains('&') || j == "\n" {
                    command.push_str("echo ");
                }
            }
            if let ShellVerdict::ReadOnly { commands, run_as } = classify(&command, &check) {
                shell.borrow_mut().assert_agrees(
                    run_as.as_deref().unwrap_or(&command),
                    &commands,
                    false,
                );
            }
            Ok(())
        })
        .expect("bash and the classifier agree");
}

/// A path check over a real directory that allows everything and records what it was asked.
#[cfg(unix)]
struct RecordingCheck {
    root: std::path::PathBuf,
    asked: std::cell::RefCell<Vec<String>>,
}

#[cfg(unix)]
impl ReadPathCheck for RecordingCheck {
    fn check_read(&self, path: &str) -> Result<(), String> {
        self.asked.borrow_mut().push(path.replace("//", "/"));
        Ok(())
    }

    fn list_dir(&self, path: &str) -> Option<Vec<String>> {
        muster_agents::shell::list_dir_names(&self.root.join(path))
    }
}

/// Every file name bash expands an allowed glob to was checked as a `Read`: the classifier's
/// candidates cover bash's matches (dot files, `-` names, quoted glob characters, brackets).
#[cfg(unix)]
#[test]
fn every_glob_match_bash_makes_was_checked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    for d in ["src", "src/sub", "docs", "-d"] {
        std::fs::create_dir_all(root.join(d)).expect("mkdir");
    }
    for f in [
        "src/a.rs",
        "src/b.rs",
        "src/-rf.rs",
        "src/.hidden.rs",
        "src/a*b",
        "src/ab",
        "src/[x]",
        "src/x",
        "src/sub/c.rs",
        "docs/g.md",
        ".env",
        "a.txt",
        "ab.txt",
    ] {
        std::fs::write(root.join(f), "").expect("write");
    }
    let patterns = [
        "src/*",
        "src/*.rs",
        "src/?.rs",
        "src/.*",
        "src/[ab].rs",
        "src/[!a].rs",
        "src/[]x[]",
        "src/[x]",
        "'src/a*'*",
        "src/a'*'b",
        "src/*/*.rs",
        "src//*.rs",
        "./*",
        "./.*",
        "a*",
        ".e*",
        "d*/*",
        "./-*",
    ];
    let mut allowed = 0;
    for pattern in patterns {
        let check = RecordingCheck {
            root: root.to_path_buf(),
            asked: std::cell::RefCell::new(Vec::new()),
        };
        let command = format!("cat {pattern}");
        if !classify(&command, &check).is_read_only() {
            continue;
        }
        allowed += 1;
        let output = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("printf '%s\\0' {pattern}"))
            .current_dir(root)
            .env_clear()
            .output()
            .expect("run bash");
        let asked = check.asked.borrow();
        for word in String::from_utf8_lossy(&output.stdout).split_terminator('\0') {
            let word = word.replace("//", "/");
            assert!(
                asked.contains(&word),
                "{pattern}: bash expands to {word:?}, never checked (checked: {asked:?})"
            );
        }
    }
    assert!(allowed >= 12, "only {allowed} patterns allowed");
}

/// A glob without a literal prefix runs as the names muster expanded it to: exactly the
/// names bash itself expands it to (in the C locale), quoted so that running the rewritten
/// text through bash gives the same argv; a match that looks like an option, a symlink out
/// of the workspace and a denied path refuse the command.
#[cfg(unix)]
#[test]
fn globs_without_a_prefix_run_as_the_names_bash_would_expand_them_to() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonical tempdir");
    for d in ["src", "src/sub", "docs", "crate one", "linked-target"] {
        std::fs::create_dir_all(root.join(d)).expect("mkdir");
    }
    for f in [
        "a.rs",
        "b.rs",
        ".hidden.rs",
        "it's here.rs",
        "star*name.rs",
        "ünï.rs",
        "src/c.rs",
        "src/sub/d.rs",
        "crate one/Cargo.toml",
        "docs/Cargo.toml",
        "README.md",
    ] {
        std::fs::write(root.join(f), "").expect("write");
    }
    std::os::unix::fs::symlink(root.join("linked-target"), root.join("linked")).expect("symlink");
    std::os::unix::fs::symlink(root.join("nowhere"), root.join("dangling.rs")).expect("symlink");
    let check = WorkspaceReadCheck::new(root.to_str().expect("utf-8 tempdir"));
    let bash_words = |args: &str| -> Vec<String> {
        let output = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("printf '%s\\0' {args}"))
            .current_dir(&root)
            .env_clear()
            .output()
            .expect("run bash");
        String::from_utf8(output.stdout)
            .expect("utf-8")
            .split_terminator('\0')
            .map(str::to_string)
            .collect()
    };
    for pattern in [
        "*",
        "*.rs",
        "?.rs",
        "*/",
        "*/*.rs",
        "*/Cargo.toml",
        "*.none",
        "*s",
    ] {
        let command = format!("ls -d {pattern}");
        let verdict = classify(&command, &check);
        let ShellVerdict::ReadOnly { commands, run_as } = &verdict else {
            panic!("{command:?} refused: {verdict}");
        };
        let run_as = run_as.as_deref().expect("a prefix-less glob is rewritten");
        let expected = bash_words(pattern);
        assert_eq!(commands[0][2..], expected[..], "{command:?} checked argv");
        let rewritten_args = run_as.strip_prefix("ls -d ").expect("same command");
        assert_eq!(
            bash_words(rewritten_args),
            expected,
            "{run_as:?} through bash"
        );
    }

    std::fs::write(root.join("-rf"), "").expect("write");
    let outside = tempfile::tempdir().expect("second tempdir");
    std::os::unix::fs::symlink(outside.path(), root.join("src/escape")).expect("symlink");
    let denied = WorkspaceReadCheck::new(root.to_str().expect("utf-8")).deny("docs");
    let refusals: &[(&str, &dyn ReadPathCheck, &str)] = &[
        ("cat *", &check, "-rf"),
        ("ls src/*", &check, "outside"),
        ("cd src && ls *", &check, "outside"),
        ("cat */Cargo.toml", &denied, "docs"),
    ];
    for (command, paths, needle) in refusals {
        match classify(command, *paths) {
            ShellVerdict::NotReadOnly { reason } => {
                assert!(
                    reason.contains(needle),
                    "{command:?}: {reason:?} lacks {needle:?}"
                )
            }
            verdict => panic!("{command:?} must be refused, got {verdict:?}"),
        }
    }
}

/// Is there a `>` outside quotes and not escaped by a backslash that is not part of a harmless
/// redirection (`>/dev/null`, `>> /dev/null`, `&>/dev/null`, `N>&M`)?
fn has_unquoted_gt(s: &str) -> bool {
    let mut single = false;
    let mut double = false;
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' if !single => {
                chars.next();
            }
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '>' if !single && !double => {
                let rest = s[i + 1..].trim_start_matches('>').trim_start_matches('&');
                let rest = rest.trim_start_matches([' ', '\t']);
                let fd =
                    rest.starts_with(|c: char| c.is_ascii_digit()) && s[i + 1..].starts_with('&');
                if !(fd || rest.starts_with("/dev/null")) {
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}

const TOKENS: &[&str] = &[
    "ls",
    "cat",
    "git",
    "status",
    "log",
    "rg",
    "grep",
    "find",
    ".",
    "-la",
    "-n",
    "foo",
    "src",
    "'a b'",
    "\"x\"",
    "|",
    "&&",
    "||",
    ";",
    "\n",
    ">",
    ">>",
    "<",
    "2>&1",
    "&",
    "$(",
    ")",
    "(",
    "`",
    "$X",
    "${IFS}",
    "$'\\x41'",
    "*",
    "?",
    "[a]",
    "{a,b}",
    "~",
    "..",
    "/etc/passwd",
    "-exec",
    "-delete",
    "--pre=x",
    "-z",
    "sed",
    "-i",
    "-n",
    "1p",
    "echo",
    "rm",
    "-rf",
    "\\",
    "'",
    "\"",
    "#",
    "=",
    "A=1",
    "<<EOF",
    "<<<",
    "cd",
    "head",
    "-c",
    "--output=x",
    "branch",
    "-D",
    "x>y",
    "'>'",
    "\">\"",
    "\\>",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let text = String::from_utf8_lossy(&bytes);
        let check = WorkspaceReadCheck::new(ROOT).deny(".env");
        let verdict = classify(&text, &check);
        let _ = known_dangerous(&text);
        if has_unquoted_gt(&text) {
            prop_assert!(!verdict.is_read_only(), "{text:?} has an unquoted > but is read-only");
        }
    }

    #[test]
    fn token_soups_never_panic(picks in proptest::collection::vec(0..TOKENS.len(), 0..24), glue in proptest::collection::vec(prop_oneof![Just(" "), Just(""), Just("  ")], 24)) {
        let mut text = String::new();
        for (i, p) in picks.iter().enumerate() {
            text.push_str(TOKENS[*p]);
            text.push_str(glue[i % glue.len()]);
        }
        let check = WorkspaceReadCheck::new(ROOT).deny(".env");
        let verdict = classify(&text, &check);
        let _ = known_dangerous(&text);
        if has_unquoted_gt(&text) {
            prop_assert!(!verdict.is_read_only(), "{text:?} has an unquoted > but is read-only");
        }
    }
}

/// tree-sitter-bash crashes (SIGSEGV) on `{` followed by some astral characters; the classifier
/// parses an ASCII shadow of the text instead. Non-ASCII words stay literal words.
#[test]
fn non_ascii_input_is_parsed_safely() {
    let check = WorkspaceReadCheck::new(ROOT);
    for crash in [
        "{\u{E0000}",
        "'a'{\u{44FFD}",
        "'\u{FFFD}'{\u{44FFD}",
        "{\u{10FFFF}",
        "ls {\u{F0000}",
    ] {
        let _ = known_dangerous(crash);
        assert!(!classify(crash, &check).is_read_only(), "{crash:?}");
    }
    for ok in [
        "cat 'docs/résumé.md'",
        "grep -rn café src",
        "echo 日本語",
        "ls données",
        "rg -n 'naïve' src",
    ] {
        assert!(
            classify(ok, &check).is_read_only(),
            "{ok:?}: {}",
            classify(ok, &check)
        );
    }
    for refused in [
        "é",
        "ls\u{a0}-la",
        "ls \u{200b}",
        "cat x\u{2028}y",
        "rm\u{0301} x",
    ] {
        assert!(!classify(refused, &check).is_read_only(), "{refused:?}");
    }
}

#[test]
fn read_deny_on_dot_env_applies_to_bash() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    std::fs::write(root.join(".env"), "SECRET=1\n").expect("write .env");
    std::fs::write(root.join(".env.example"), "SECRET=\n").expect("write .env.example");
    std::fs::create_dir(root.join("src")).expect("mkdir src");
    std::fs::write(root.join("src/main.rs"), "fn main() {}\n").expect("write main.rs");
    #[cfg(unix)]
    std::os::unix::fs::symlink(root.join(".env"), root.join("src/link")).expect("symlink");
    let check = WorkspaceReadCheck::new(root).deny("./.env");
    let abs_env = format!("cat {}", root.join(".env").display());
    let refused = [
        "cat .env",
        "head .env",
        "grep x .env",
        "cat ./.env",
        "cat src/../.env",
        "tail -n 5 .env",
        "grep -f .env src/main.rs",
        "grep -e x -- .env",
        "rg x .env",
        "sed -n 1p .env",
        "wc -l .env",
        "cd src && cat ../.env",
        "git show HEAD:.env",
        "grep -r SECRET .",
        "rg SECRET",
        "diff -r . src",
        abs_env.as_str(),
        "cat .e*",
        "grep -rn SECRET ./.e*",
        #[cfg(unix)]
        "cat src/link",
        #[cfg(unix)]
        "cat src/*",
    ];
    for command in refused {
        let verdict = classify(command, &check);
        assert!(!verdict.is_read_only(), "{command:?} should be refused");
        let reason = verdict.reason().unwrap_or_default();
        assert!(
            reason.contains(".env") || reason.contains("link"),
            "{command:?}: {reason}"
        );
    }
    for command in [
        "cat .env.example",
        "head src/main.rs",
        "grep -rn main src",
        "rg -n main src",
        "ls -la",
        "cat src/.env",
        "cat .env.ex*",
        "head src/*.rs",
    ] {
        assert!(
            classify(command, &check).is_read_only(),
            "{command:?} should be read-only"
        );
    }
}

#[test]
fn verdict_reasons_name_the_culprit() {
    let check = WorkspaceReadCheck::new(ROOT);
    let table: &[(&str, &str)] = &[
        ("find . -delete", "-delete"),
        ("ls > out.txt", "redirection"),
        ("cat a && touch b", "touch"),
        ("rg --pre=./x.sh foo", "--pre"),
        ("echo $SECRET", "expansion"),
        ("cat /etc/shadow", "/etc/shadow"),
        ("git push", "git push"),
        ("rg foo [ab]*", "glob"),
        ("python3 -c 'print(1)'", "interpreter"),
        ("xargs rm", "runs another command"),
    ];
    for (command, needle) in table {
        match classify(command, &check) {
            ShellVerdict::NotReadOnly { reason } => {
                assert!(
                    reason.contains(needle),
                    "{command:?}: {reason:?} lacks {needle:?}"
                );
            }
            ShellVerdict::ReadOnly { .. } => panic!("{command:?} should be refused"),
        }
    }
    assert_eq!(
        classify("cat a | head -5", &check),
        ShellVerdict::ReadOnly {
            commands: vec![
                vec!["cat".to_string(), "a".to_string()],
                vec!["head".to_string(), "-5".to_string()],
            ],
            run_as: None,
        }
    );
}

/// `git status` and `git diff --stat` in a repository configured to run programs (fsmonitor,
/// a textconv driver selected by `.gitattributes`) run none of them under the read-only env.
#[test]
fn read_only_git_env_disables_repository_programs() {
    let Ok(dir) = tempfile::tempdir() else { return };
    let root = dir.path();
    let git = |args: &[&str], env: &[(String, String)]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(root)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .output()
    };
    let Ok(out) = git(&["init", "-q"], &[]) else {
        return; // no git on this machine
    };
    assert!(out.status.success());
    let marker = root.join("ran");
    let hook = format!("touch {}", marker.display());
    for args in [
        ["config", "user.email", "a@b"],
        ["config", "user.name", "a"],
        ["config", "core.fsmonitor", hook.as_str()],
        ["config", "diff.evil.textconv", hook.as_str()],
        ["config", "diff.evil.command", hook.as_str()],
        ["config", "diff.external", hook.as_str()],
        ["config", "diff.user.textconv", hook.as_str()],
    ] {
        assert!(git(&args, &[]).expect("git config").status.success());
    }
    std::fs::write(root.join("f"), "a\n").expect("write f");
    std::fs::write(root.join(".gitattributes"), "f diff=evil\n").expect("write attrs");
    // The user's attributes file (`core.attributesFile`) selects a converter for `g`.
    let user_attributes = root.join("user-attributes");
    std::fs::write(&user_attributes, "g diff=user\n").expect("write user attrs");
    let user_attributes = user_attributes.display().to_string();
    assert!(
        git(
            &["config", "core.attributesFile", user_attributes.as_str()],
            &[]
        )
        .expect("git config")
        .status
        .success()
    );
    std::fs::write(root.join("g"), "a\n").expect("write g");
    assert!(git(&["add", "."], &[]).expect("git add").status.success());
    assert!(
        git(&["-c", "core.fsmonitor=false", "commit", "-qm", "a"], &[])
            .expect("git commit")
            .status
            .success()
    );
    // A second commit, so `log -p` and `show` print a patch of `f` and `g`.
    std::fs::write(root.join("f"), "a\nb\n").expect("write f");
    std::fs::write(root.join("g"), "a\nb\n").expect("write g");
    assert!(
        git(
            &[
                "-c",
                "core.fsmonitor=false",
                "commit",
                "-qam",
                "b",
                "--no-verify"
            ],
            &[]
        )
        .expect("git commit")
        .status
        .success()
    );
    std::fs::write(root.join("f"), "a\nb\nc\n").expect("write f");
    let _ = std::fs::remove_file(&marker);
    let env = read_only_git_env();
    for args in [
        &["status"][..],
        &["diff", "--stat"],
        &["diff", "--no-ext-diff"],
        &["log", "-p"],
        &["log", "-p", "--cc", "-1"],
        &["show"],
        &["show", "HEAD~1"],
        &["whatchanged", "-p", "-1"],
        &["reflog", "-p", "-1"],
    ] {
        let out = git(args, &env).expect("git");
        assert!(out.status.success(), "git {args:?}: {out:?}");
        assert!(!marker.exists(), "git {args:?} ran a configured program");
    }
    // The classifier allows these, and must: without the read-only environment they run the
    // configured converters, so the environment is what stops them.
    let check = WorkspaceReadCheck::new(root);
    for command in ["git log -p", "git show", "git whatchanged -p -1"] {
        assert!(classify(command, &check).is_read_only(), "{command}");
    }
    let out = git(&["show"], &[]).expect("git show");
    assert!(out.status.success());
    assert!(
        marker.exists(),
        "the repository's converter should run without the env"
    );
    assert!(remove_from_read_only_env("GIT_EXTERNAL_DIFF"));
}

/// Real read-only agent commands, one a line: see each file's header. Two sets written
/// independently before issue 20's relaxations, with the floor (per mille) each must keep.
const READ_ONLY_SETS: &[(&str, &str, usize)] = &[
    (
        "read-only-commands.txt",
        include_str!("../data/read-only-commands.txt"),
        970,
    ),
    (
        "shell-readonly-real.txt",
        include_str!("../data/shell-readonly-real.txt"),
        970,
    ),
];

/// Measures false refusals: prints the allow rate on each set of real read-only commands and
/// every refused line with its reason, and fails if a rate falls below its recorded floor.
#[test]
fn read_only_allow_rate() {
    let check = WorkspaceReadCheck::new(ROOT);
    for (name, text, floor) in READ_ONLY_SETS {
        let commands: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .collect();
        let mut allowed = 0;
        for command in &commands {
            match classify(command, &check) {
                ShellVerdict::ReadOnly { .. } => allowed += 1,
                ShellVerdict::NotReadOnly { reason } => {
                    println!("{name}: refused {command:?}: {reason}");
                }
            }
        }
        let per_mille = allowed * 1000 / commands.len();
        println!(
            "{name}: read-only allow rate: {allowed}/{} = {}.{}%",
            commands.len(),
            per_mille / 10,
            per_mille % 10
        );
        assert!(
            commands.len() >= 120,
            "{name}: only {} commands",
            commands.len()
        );
        assert!(
            per_mille >= *floor,
            "{name}: allow rate {per_mille}‰ fell below {floor}‰"
        );
    }
}
