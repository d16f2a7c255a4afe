//! Flags muster adds to a read-only command before it runs.
//!
//! `git diff` (and `git stash show`) run the external diff program a repository configures
//! (`diff.external`), and no environment variable switches that off (an empty value makes git
//! try to run an empty command). Instead of refusing them, muster inserts `--no-ext-diff` right
//! after the subcommand word, in the command text itself, and the rules then check the argv
//! with the flag: the text that runs is exactly what was classified. [`verify`] re-parses the
//! rewritten text to prove it.

use super::parse::{self, SimpleCommand, Word};

/// The flag that keeps git's own diff.
const NO_EXT_DIFF: &str = "--no-ext-diff";

/// A flag to insert into the command text at a byte offset (just after a word).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Insertion {
    at: usize,
    flag: &'static str,
}

/// Adds `--no-ext-diff` after the subcommand of every `git diff` and `git stash show` that
/// lacks it, in the parsed commands, and returns where the text needs the same flag.
pub(crate) fn force_flags(commands: &mut [SimpleCommand]) -> Vec<Insertion> {
    let mut insertions = Vec::new();
    for command in commands.iter_mut().filter(|c| c.name == "git") {
        let Some(after) = ext_diff_subcommand_end(&command.args) else {
            continue;
        };
        if command.args.iter().any(|a| a.value == NO_EXT_DIFF) {
            continue;
        }
        let Some(at) = command.args[after].end else {
            continue;
        };
        command.args.insert(after + 1, Word::literal(NO_EXT_DIFF));
        insertions.push(Insertion {
            at,
            flag: NO_EXT_DIFF,
        });
    }
    insertions
}

/// The index of the last word of `diff` / `stash show` in a git argument list, if the command
/// is one of them.
fn ext_diff_subcommand_end(args: &[Word]) -> Option<usize> {
    let sub = git_subcommand_index(args);
    match (
        args.get(sub).map(|w| w.value.as_str()),
        args.get(sub + 1).map(|w| w.value.as_str()),
    ) {
        (Some("diff"), _) => Some(sub),
        (Some("stash"), Some("show")) => Some(sub + 1),
        _ => None,
    }
}

/// Where git's subcommand is: after the global options, of which `-C`, `--git-dir`,
/// `--work-tree` and `--namespace` take the next word as their value. (The rules refuse every
/// global option they do not know, so a misplaced flag is refused, never run.)
fn git_subcommand_index(args: &[Word]) -> usize {
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        if !arg.value.starts_with('-') {
            break;
        }
        i += 1;
        if matches!(
            arg.value.as_str(),
            "-C" | "--git-dir" | "--work-tree" | "--namespace"
        ) {
            i += 1;
        }
    }
    i
}

/// The command text with the insertions made, or `None` when there are none.
pub(crate) fn apply(command: &str, insertions: &[Insertion]) -> Option<String> {
    if insertions.is_empty() {
        return None;
    }
    let mut sorted: Vec<&Insertion> = insertions.iter().collect();
    sorted.sort_by_key(|i| i.at);
    let mut text = String::with_capacity(command.len() + 16 * sorted.len());
    let mut from = 0;
    for insertion in sorted {
        text.push_str(command.get(from..insertion.at)?);
        text.push(' ');
        text.push_str(insertion.flag);
        from = insertion.at;
    }
    text.push_str(command.get(from..)?);
    Some(text)
}

/// Does the rewritten text parse to exactly the commands the rules checked?
pub(crate) fn verify(rewritten: &str, checked: &[SimpleCommand]) -> Result<(), String> {
    let reparsed = parse::parse(rewritten)?;
    let argv = |commands: &[SimpleCommand]| -> Vec<Vec<String>> {
        commands
            .iter()
            .map(|c| {
                std::iter::once(c.name.clone())
                    .chain(c.args.iter().map(|w| w.value.clone()))
                    .collect()
            })
            .collect()
    };
    if argv(&reparsed) == argv(checked) {
        Ok(())
    } else {
        Err(format!(
            "muster could not add {NO_EXT_DIFF} to the command safely; add it yourself"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewrite(command: &str) -> Option<String> {
        let mut commands = parse::parse(command).expect("parses");
        let insertions = force_flags(&mut commands);
        let text = apply(command, &insertions)?;
        verify(&text, &commands).expect("the rewrite parses to the checked commands");
        Some(text)
    }

    #[test]
    fn forced_flag_table() {
        let cases: &[(&str, Option<&str>)] = &[
            ("git diff", Some("git diff --no-ext-diff")),
            (
                "git diff HEAD~1 -- src",
                Some("git diff --no-ext-diff HEAD~1 -- src"),
            ),
            (
                "git -C sub --no-pager diff --cached|tail -5",
                Some("git -C sub --no-pager diff --no-ext-diff --cached|tail -5"),
            ),
            (
                "git status && git diff; git diff --stat",
                Some("git status && git diff --no-ext-diff; git diff --no-ext-diff --stat"),
            ),
            (
                "git \"diff\" 2>/dev/null",
                Some("git \"diff\" --no-ext-diff 2>/dev/null"),
            ),
            ("git stash show -p", Some("git stash show --no-ext-diff -p")),
            ("git diff --no-ext-diff", None),
            ("git log -p", None),
            ("git stash list", None),
            ("echo git diff", None),
        ];
        for (command, expected) in cases {
            assert_eq!(
                rewrite(command).as_deref(),
                *expected,
                "rewriting {command:?}"
            );
        }
    }
}
