//! Known-dangerous commands, for the modes that otherwise run commands without asking (`auto`
//! denies them, `bypassPermissions` asks).
//!
//! Deliberately narrow — it names the few commands whose damage is large and hard to undo, and
//! everything else is left to the read-only classifier and the mode — but conservative inside
//! that scope: it looks at every command anywhere in the text (inside subshells, substitutions,
//! `bash -c '…'` and `find -exec`), through wrappers (`sudo`, `env`, `xargs`, `timeout`, …), with
//! quotes and backslashes removed from words and any path stripped from the program name.
//!
//! Flagged:
//! - `rm` with `-r`, `-R`, `-f`, `--recursive` or `--force` (in any cluster: `-rf`, `-fr`, `-Rf`);
//! - `git push` with `--force`, `-f`, `--force-with-lease`, `--force-if-includes`, `--mirror`,
//!   `--delete`, `-d` or a `+refspec`/`:refspec`; `git reset --hard`; `git clean` with `-f`/`--force`;
//!   `git branch -D`; `git checkout`/`git switch` with `-f`/`--force`; `git checkout .` and
//!   `git restore .` (whole work tree); `git stash clear`;
//! - `dd` with `of=`; `mkfs`, `mkfs.*`, `mke2fs`, `mkswap`, `wipefs`, `fdisk`, `sfdisk`, `parted`,
//!   `shred`;
//! - `chmod`/`chown`/`chgrp` recursive (`-R`, `--recursive`) on `/`, `/*`, `~` or a top-level
//!   system directory;
//! - `find … -delete`;
//! - a redirection onto a disk device (`> /dev/sda`).
//!
//! Not flagged: everything else, including `git push` without force, `mv`/`cp` over files,
//! commands run remotely (`ssh host rm -rf /`) and fork bombs.

use tree_sitter::{Node, Parser};

/// Wrappers that run their arguments as a command, with the options that take a value.
const WRAPPERS: &[(&str, &[&str])] = &[
    (
        "sudo",
        &["-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T"],
    ),
    ("doas", &["-u", "-C"]),
    ("env", &["-u", "-C", "--unset", "--chdir"]),
    ("nice", &["-n", "--adjustment"]),
    ("nohup", &[]),
    ("timeout", &["-s", "-k", "--signal", "--kill-after"]),
    ("time", &["-f", "-o"]),
    ("command", &[]),
    ("builtin", &[]),
    ("exec", &["-a"]),
    (
        "xargs",
        &[
            "-I",
            "-n",
            "-P",
            "-L",
            "-d",
            "-E",
            "-s",
            "-a",
            "--max-args",
            "--max-procs",
        ],
    ),
    ("stdbuf", &["-i", "-o", "-e"]),
    ("ionice", &["-c", "-n", "-p"]),
    ("setsid", &[]),
    ("chronic", &[]),
    ("caffeinate", &[]),
    ("watch", &["-n", "-d"]),
    ("strace", &["-o", "-e", "-p"]),
    ("su", &[]),
];

const SHELLS: &[&str] = &["bash", "sh", "zsh", "dash", "ksh", "eval"];

const MAX_DEPTH: usize = 8;

/// Is `command` one of the few known-dangerous commands? Returns the reason if so. Never
/// panics; text that does not parse is still scanned word by word.
pub fn known_dangerous(command: &str) -> Option<String> {
    scan(command, 0)
}

fn scan(command: &str, depth: usize) -> Option<String> {
    if depth > MAX_DEPTH || command.len() > 256 * 1024 {
        return None;
    }
    let mut parser = Parser::new();
    parser
        .set_language(&tree_sitter_bash::LANGUAGE.into())
        .ok()?;
    let bytes = command.as_bytes();
    if let Some(tree) = parser.parse(super::parse::ascii_shadow(command), None) {
        let mut stack = vec![tree.root_node()];
        while let Some(node) = stack.pop() {
            match node.kind() {
                "command" => {
                    let argv = argv(node, bytes);
                    if let Some(reason) = check_argv(&argv, depth) {
                        return Some(reason);
                    }
                }
                "file_redirect" => {
                    let target = words_under(node, bytes);
                    if let Some(dev) = target.iter().find(|w| disk_device(w)) {
                        return Some(format!("writes directly to the disk device `{dev}`"));
                    }
                }
                _ => {}
            }
            let mut cursor = node.walk();
            stack.extend(node.children(&mut cursor));
        }
        if !tree.root_node().has_error() {
            return None;
        }
    }
    // Unparsable text: split on blanks and shell operators and check each piece.
    let normalized: String = command
        .chars()
        .map(|c| {
            if matches!(c, ';' | '&' | '|' | '(' | ')' | '\n' | '`' | '{' | '}') {
                '\n'
            } else {
                c
            }
        })
        .collect();
    normalized.lines().find_map(|line| {
        let argv: Vec<String> = line.split_whitespace().map(unquote).collect();
        check_argv(&argv, depth)
    })
}

fn text(node: Node<'_>, bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes.get(node.start_byte()..node.end_byte()).unwrap_or(&[]))
        .into_owned()
}

/// Best-effort literal value of a word: quotes and backslashes removed, `$'…'` unwrapped.
fn unquote(raw: &str) -> String {
    let raw = raw.replace("$'", "'").replace("$\"", "\"");
    let mut out = String::new();
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {}
            '\\' => {
                if let Some(next) = chars.next() {
                    out.push(next);
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// The words of a command; adjacent nodes (`'-'rf`) are one word, as in bash.
fn argv(node: Node<'_>, bytes: &[u8]) -> Vec<String> {
    let mut cursor = node.walk();
    let mut words: Vec<String> = Vec::new();
    let mut prev_end = None;
    for c in node.named_children(&mut cursor) {
        if matches!(
            c.kind(),
            "variable_assignment" | "file_redirect" | "herestring_redirect"
        ) {
            prev_end = None;
            continue;
        }
        let word = unquote(&text(c, bytes));
        match words.last_mut() {
            Some(last) if prev_end == Some(c.start_byte()) => last.push_str(&word),
            _ => words.push(word),
        }
        prev_end = Some(c.end_byte());
    }
    words
}

fn words_under(node: Node<'_>, bytes: &[u8]) -> Vec<String> {
    let mut cursor = node.walk();
    node.named_children(&mut cursor)
        .map(|c| unquote(&text(c, bytes)))
        .collect()
}

fn disk_device(path: &str) -> bool {
    [
        "/dev/sd",
        "/dev/hd",
        "/dev/vd",
        "/dev/xvd",
        "/dev/nvme",
        "/dev/mmcblk",
        "/dev/disk",
    ]
    .iter()
    .any(|p| path.starts_with(p))
}

fn program(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// Short-option cluster or long option present among the options (before `--`).
fn has_flag(args: &[String], shorts: &str, longs: &[&str]) -> bool {
    args.iter()
        .take_while(|a| *a != "--")
        .any(|a| match a.strip_prefix("--") {
            Some(long) => longs.contains(&long.split('=').next().unwrap_or(long)),
            None => a.starts_with('-') && a.chars().skip(1).any(|c| shorts.contains(c)),
        })
}

fn check_argv(argv: &[String], depth: usize) -> Option<String> {
    let (first, args) = argv.split_first()?;
    let name = program(first);
    if depth > MAX_DEPTH {
        return None;
    }
    if let Some((_, with_value)) = WRAPPERS.iter().find(|(w, _)| *w == name) {
        let mut i = 0;
        while let Some(a) = args.get(i) {
            if with_value.contains(&a.as_str()) {
                i += 2;
            } else if a.starts_with('-') || (name == "env" && a.contains('=')) {
                if name == "env" && (a == "-S" || a.starts_with("--split-string")) {
                    let script = args.get(i + 1..).unwrap_or(&[]).join(" ");
                    return scan(&script, depth + 1);
                }
                i += 1;
            } else if name == "timeout" && a.chars().next().is_some_and(|c| c.is_ascii_digit()) {
                i += 1;
            } else {
                break;
            }
        }
        return check_argv(args.get(i..).unwrap_or(&[]), depth + 1);
    }
    if SHELLS.contains(&name) {
        if name == "eval" {
            return scan(&args.join(" "), depth + 1);
        }
        if let Some(pos) = args
            .iter()
            .position(|a| a.starts_with('-') && a.contains('c'))
            && let Some(script) = args.get(pos + 1)
        {
            return scan(script, depth + 1);
        }
        return None;
    }
    match name {
        "rm" => has_flag(args, "rRf", &["recursive", "force"]).then(|| {
            format!(
                "`{}` deletes files recursively or without asking",
                argv.join(" ")
            )
        }),
        "git" => git(args),
        "dd" => args
            .iter()
            .any(|a| a.starts_with("of="))
            .then(|| "`dd of=…` overwrites a file or device block by block".to_string()),
        "mke2fs" | "mkswap" | "wipefs" | "fdisk" | "sfdisk" | "parted" | "shred" => Some(format!(
            "`{name}` destroys data on a disk, partition or file"
        )),
        n if n == "mkfs" || n.starts_with("mkfs.") => Some(format!(
            "`{name}` creates a file system, erasing the device"
        )),
        "chmod" | "chown" | "chgrp" => {
            let recursive = has_flag(args, "R", &["recursive"]);
            let system = args.iter().filter(|a| !a.starts_with('-')).any(|a| {
                matches!(a.as_str(), "/" | "/*" | "~" | "~/" | "$HOME")
                    || (a.starts_with('/') && a.trim_end_matches('/').matches('/').count() == 1)
            });
            (recursive && system).then(|| {
                format!(
                    "`{}` changes permissions of a whole system tree",
                    argv.join(" ")
                )
            })
        }
        "find" => {
            if args.iter().any(|a| a == "-delete") {
                return Some("`find … -delete` deletes files".to_string());
            }
            let mut rest = args;
            while let Some(pos) = rest
                .iter()
                .position(|a| matches!(a.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir"))
            {
                let after = rest.get(pos + 1..).unwrap_or(&[]);
                let end = after
                    .iter()
                    .position(|a| a == ";" || a == "+")
                    .unwrap_or(after.len());
                if let Some(reason) = check_argv(after.get(..end).unwrap_or(&[]), depth + 1) {
                    return Some(reason);
                }
                rest = after.get(end..).unwrap_or(&[]);
            }
            None
        }
        _ => None,
    }
}

/// A pathspec naming the whole work tree.
fn whole_tree(a: &str) -> bool {
    matches!(a, "." | "./" | ":/" | "*" | ":(top)")
}

fn git(args: &[String]) -> Option<String> {
    let mut i = 0;
    while let Some(a) = args.get(i) {
        if !a.starts_with('-') {
            break;
        }
        i += if matches!(
            a.as_str(),
            "-C" | "-c" | "--git-dir" | "--work-tree" | "--namespace"
        ) {
            2
        } else {
            1
        };
    }
    let sub = args.get(i)?.as_str();
    let rest = args.get(i + 1..).unwrap_or(&[]);
    let found = match sub {
        "push" => {
            has_flag(
                rest,
                "fd",
                &[
                    "force",
                    "force-with-lease",
                    "force-if-includes",
                    "mirror",
                    "delete",
                    "prune",
                ],
            ) || rest
                .iter()
                .any(|a| a.starts_with('+') || (a.starts_with(':') && a.len() > 1))
        }
        "reset" => rest.iter().any(|a| a == "--hard"),
        "clean" => has_flag(rest, "f", &["force"]),
        "branch" => {
            has_flag(rest, "D", &[])
                || (has_flag(rest, "d", &["delete"]) && has_flag(rest, "f", &["force"]))
        }
        "checkout" | "switch" => {
            has_flag(rest, "f", &["force", "discard-changes"])
                || (sub == "checkout" && rest.iter().any(|a| whole_tree(a)))
        }
        "restore" => rest.iter().any(|a| whole_tree(a)),
        "stash" => matches!(rest.first().map(String::as_str), Some("clear")),
        _ => false,
    };
    found.then(|| {
        format!(
            "`git {sub} {}` discards or overwrites work that may not be recoverable",
            rest.join(" ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::known_dangerous;

    #[test]
    fn table() {
        let dangerous = [
            "rm -rf /",
            "rm -f x",
            "rm -fr build",
            "rm -R dir",
            "rm --recursive x",
            "sudo rm -rf /",
            "sudo -u root rm -rf /",
            "/bin/rm -rf x",
            "\\rm -rf x",
            "'rm' -rf x",
            "r''m -rf x",
            "ls && rm -rf x",
            "echo $(rm -rf x)",
            "(rm -rf x)",
            "bash -c 'rm -rf x'",
            "env FOO=1 rm -rf x",
            "xargs rm -rf < list",
            "timeout 5 rm -rf x",
            "nice -n 5 rm -rf x",
            "git push --force",
            "git push -f origin main",
            "git push origin +main",
            "git push --force-with-lease",
            "git reset --hard HEAD~1",
            "git -C repo reset --hard",
            "git clean -fdx",
            "git clean -f",
            "git branch -D feature",
            "git checkout -- .",
            "git restore .",
            "git checkout -f main",
            "dd if=/dev/zero of=/dev/sda",
            "mkfs.ext4 /dev/sda1",
            "mkfs -t ext4 /dev/sda1",
            "chmod -R 777 /",
            "chown -R user /etc",
            "find . -delete",
            "find . -exec rm -rf {} +",
            "echo x > /dev/sda",
            "rm -rf x; (",
            "rm '-'rf x",
            "rm \"-r\"\\f x",
            "git push '--'force",
        ];
        for c in dangerous {
            assert!(known_dangerous(c).is_some(), "{c} should be dangerous");
        }
        let fine = [
            "rm x",
            "rm -i x",
            "git push",
            "git push origin main",
            "git reset HEAD~1",
            "git reset --soft HEAD~1",
            "git clean -n",
            "git branch -d merged",
            "git checkout main",
            "git restore --staged src/a.rs",
            "ls -la",
            "dd if=a",
            "chmod -R 755 src",
            "chmod 777 x",
            "find . -name x",
            "cargo build",
            "echo rm -rf",
        ];
        for c in fine {
            assert_eq!(known_dangerous(c), None, "{c}");
        }
    }
}
