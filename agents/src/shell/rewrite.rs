//! How muster rewrites a read-only command before it runs, so that what runs is exactly what
//! was classified.
//!
//! - **Forced flags.** `git diff` (and `git stash show`) run the external diff program a
//!   repository configures (`diff.external`), and no environment variable switches that off (an
//!   empty value makes git try to run an empty command). Instead of refusing them, muster
//!   inserts `--no-ext-diff` right after the subcommand word, and the rules check the argv with
//!   the flag.
//! - **Expanded globs.** A glob without a literal prefix (`*.rs`) could expand to a name that
//!   looks like an option, or to something else by the time bash runs it. The rules expand it
//!   themselves, exactly as bash would now, check every match, and the text that runs names the
//!   matches (quoted), not the pattern ([`Expansion`]).
//!
//! [`verify`] re-parses the rewritten text to prove it has exactly the checked argv.

use std::ops::Range;

use super::parse::{self, SimpleCommand, Word};

/// The flag that keeps git's own diff.
const NO_EXT_DIFF: &str = "--no-ext-diff";

/// A change to the command text: replace the bytes in `range` (empty for an insertion).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Edit {
    range: Range<usize>,
    text: String,
}

/// A glob word the rules expanded: the word at `span` becomes the words `values`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Expansion {
    pub span: Range<usize>,
    pub values: Vec<String>,
}

/// Adds `--no-ext-diff` after the subcommand of every `git diff` and `git stash show` that
/// lacks it, in the parsed commands, and returns the same insertions for the text.
pub(crate) fn force_flags(commands: &mut [SimpleCommand]) -> Vec<Edit> {
    let mut insertions = Vec::new();
    for command in commands.iter_mut().filter(|c| c.name == "git") {
        let Some(after) = ext_diff_subcommand_end(&command.args) else {
            continue;
        };
        if command.args.iter().any(|a| a.value == NO_EXT_DIFF) {
            continue;
        }
        let Some(at) = command.args[after].span.as_ref().map(|s| s.end) else {
            continue;
        };
        command.args.insert(after + 1, Word::literal(NO_EXT_DIFF));
        insertions.push(Edit {
            range: at..at,
            text: format!(" {NO_EXT_DIFF}"),
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

/// Replaces each expanded glob word in `commands` by the words it expanded to, and returns
/// the same replacements for the text.
pub(crate) fn splice_expansions(
    commands: &mut [SimpleCommand],
    expansions: &[Expansion],
) -> Vec<Edit> {
    for command in commands.iter_mut() {
        let mut args = Vec::with_capacity(command.args.len());
        for word in command.args.drain(..) {
            match expansions
                .iter()
                .find(|e| word.span.as_ref() == Some(&e.span))
            {
                Some(expansion) => args.extend(expansion.values.iter().map(Word::literal)),
                None => args.push(word),
            }
        }
        command.args = args;
    }
    expansions
        .iter()
        .map(|e| Edit {
            range: e.span.clone(),
            text: e
                .values
                .iter()
                .map(|v| quoted(v))
                .collect::<Vec<_>>()
                .join(" "),
        })
        .collect()
}

/// `value` as one shell word: bare when it has only characters bash gives no meaning to,
/// single-quoted otherwise.
fn quoted(value: &str) -> String {
    let plain = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/+,:@%".contains(c));
    if plain {
        value.to_string()
    } else {
        format!("'{}'", value.replace('\'', "'\\''"))
    }
}

/// The command text with the edits made, or `None` when there are none. Edits never overlap:
/// each is at a different word.
pub(crate) fn apply(command: &str, edits: &[Edit]) -> Option<String> {
    if edits.is_empty() {
        return None;
    }
    let mut sorted: Vec<&Edit> = edits.iter().collect();
    sorted.sort_by_key(|e| (e.range.start, e.range.end));
    let mut text = String::with_capacity(command.len() + 16 * sorted.len());
    let mut from = 0;
    for edit in sorted {
        text.push_str(command.get(from..edit.range.start)?);
        text.push_str(&edit.text);
        from = edit.range.end;
    }
    text.push_str(command.get(from..)?);
    Some(text)
}

/// Does the rewritten text parse to exactly the commands the rules checked, with unquoted glob
/// characters in the same places (none in the words an expansion wrote)?
pub(crate) fn verify(rewritten: &str, checked: &[SimpleCommand]) -> Result<(), String> {
    /// A command's name and its words, each with its unquoted glob offsets.
    type Argv<'c> = (&'c str, Vec<(&'c str, &'c [usize])>);
    fn argv(commands: &[SimpleCommand]) -> Vec<Argv<'_>> {
        commands
            .iter()
            .map(|c| {
                let args = c
                    .args
                    .iter()
                    .map(|w| (w.value.as_str(), w.globs.as_slice()));
                (c.name.as_str(), args.collect())
            })
            .collect()
    }
    let reparsed = parse::parse(rewritten)?;
    if argv(&reparsed) == argv(checked) {
        Ok(())
    } else {
        Err(format!(
            "muster could not rewrite the command safely (adding {NO_EXT_DIFF} or naming the files a glob matches); do it yourself"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewrite(command: &str) -> Option<String> {
        let mut commands = parse::parse(command).expect("parses");
        let edits = force_flags(&mut commands);
        let text = apply(command, &edits)?;
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
