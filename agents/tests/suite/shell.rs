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

/// Is there a `>` outside quotes and not escaped by a backslash?
fn has_unquoted_gt(s: &str) -> bool {
    let mut single = false;
    let mut double = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' if !single => {
                chars.next();
            }
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '>' if !single && !double => return true,
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
        #[cfg(unix)]
        "cat src/link",
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
        ("echo $HOME", "expansion"),
        ("cat /etc/shadow", "/etc/shadow"),
        ("git push", "git push"),
        ("rg foo *", "glob"),
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
            ]
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
    ] {
        assert!(git(&args, &[]).expect("git config").status.success());
    }
    std::fs::write(root.join("f"), "a\n").expect("write f");
    std::fs::write(root.join(".gitattributes"), "f diff=evil\n").expect("write attrs");
    assert!(git(&["add", "."], &[]).expect("git add").status.success());
    assert!(
        git(&["-c", "core.fsmonitor=false", "commit", "-qm", "a"], &[])
            .expect("git commit")
            .status
            .success()
    );
    std::fs::write(root.join("f"), "a\nb\n").expect("write f");
    let _ = std::fs::remove_file(&marker);
    let env = read_only_git_env();
    for args in [
        &["status"][..],
        &["diff", "--stat"],
        &["diff", "--no-ext-diff"],
    ] {
        let out = git(args, &env).expect("git");
        assert!(out.status.success(), "git {args:?}: {out:?}");
        assert!(!marker.exists(), "git {args:?} ran a configured program");
    }
    assert!(remove_from_read_only_env("GIT_EXTERNAL_DIFF"));
}
