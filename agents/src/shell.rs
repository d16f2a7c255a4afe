//! The read-only shell classifier the permission engine consults for `Bash`.
//!
//! [`classify`] calls a command read-only only when every part of it is provably harmless:
//!
//! - **Structure** ([`parse`]): the text parses with tree-sitter-bash without error and consists
//!   only of simple commands of literal words (plain words, `'…'`, `"…"` without `$` or
//!   backquotes, backslash escapes) joined by `&&`, `||`, `;`, `|` and newlines. Redirections
//!   are allowed only when harmless: output to `/dev/null` (`>`, `>>`, `&>`, `2>`, `>&`),
//!   descriptor duplication (`2>&1`, `>&2`) and `< file`, whose file is checked like a file
//!   argument; any other target (a file, `/dev/tcp/…`), `N>&-`, `<>`, `|&`, a redirection glued
//!   to the word before it (`{fd}>`, `0<`: tree-sitter and bash split those differently),
//!   heredocs, here-strings, command and process substitution,
//!   variables and every expansion (`$X`, `${X}`, `$'…'`, `$"…"`, `$((…))`, braces, a leading
//!   `~`) — except `$?`, `$PWD`, `$HOME`, `$USER`, `$SHELL`, `$PATH` (plain or braced, bare or in
//!   double quotes) as arguments of `echo`, `printf`, `basename` and `dirname`, which hold no
//!   secret and open nothing — assignments, subshells, groups, functions, control flow, `!`, comments, backgrounding
//!   and line continuations are rejected. Unquoted glob characters (`*`, `?`, `[`, `]`) are
//!   recorded for the rules ([`glob`]).
//! - **Programs** ([`rules`]): each program name is a bare literal (no path, quotes or escapes:
//!   `/bin/rm`, `\rm`, `"rm"`, `r''m` are refused) on the allow-list; flag-gated commands refuse
//!   their dangerous options in split, `=`, attached, clustered and abbreviated forms (`find
//!   -exec/-delete/-fprint…`, `sed` other than `-n …p`, `rg --pre/--hostname-bin/-z`, `sort -o`,
//!   `base64 -o`, git subcommands other than the read-only ones, git `-c`/`--config-env`,
//!   `--output`, `--ext-diff`, `--textconv`, `--paginate`, `branch`/`tag` other than listing,
//!   `config` other than reading). `git log -p`, `git show`, `whatchanged`, `reflog -p` print
//!   patches with git's internal diff (git enables external diff programs only for `git diff`,
//!   or with `--ext-diff`). No variable can switch `diff.external` off, so [`rewrite`] inserts
//!   `--no-ext-diff` into every `git diff` / `git stash show` that lacks it, and the command
//!   runs as rewritten ([`ShellVerdict::run_as`], checked by re-parsing). `awk` and `jq`
//!   are read-only when a conservative scan of the program ([`programs`]) finds nothing that
//!   runs a command, writes or reads a file by itself (awk: `system`, `getline`, a lone `|`, a
//!   `>` after `print`, `@load`/`@include`, `ENVIRON`, `ARGV`/`ARGC`, `/inet`; jq: `import`,
//!   `include`, `modulemeta`, `env`/`$ENV`), and no option loads code (`-f`, `-i`, `-l`, `-E`,
//!   `-L`). `test`, `[ … ]` and `[[ … ]]` are read-only with
//!   their file operands path-checked and the operands bash evaluates arithmetically (`-eq`…
//!   `-ge`, `-t`; the name after `-v`/`-R`) plain integers / plain names, since `a[$(cmd)]`
//!   there runs a command; patterns, `=~`, `<`/`>` are refused. `command` only as
//!   `command -v/-V NAME`. Interpreters, wrappers, editors, pagers, package
//!   managers, build tools and network tools are never read-only.
//! - **Paths** ([`paths`]): every path-like argument (and `cd` target) is checked as a `Read` of
//!   that path through [`ReadPathCheck`], so plan-mode Bash cannot read what `Read` refuses;
//!   recursive content searches (`grep -r`, `rg`, `git grep`, `diff -r`) check the whole tree.
//! - **Globs** ([`glob`]): allowed under the literal-prefix rule (a literal prefix that is not
//!   empty and does not start with `-`, no `..` component, so no match is an option or leaves
//!   the directory the prefix names, whatever exists when bash expands it), only where every
//!   match is a file operand (generic file commands, `sed`/`awk`/`jq` files, git after `--`;
//!   not `cd`, `find`, `test`, `uniq`, `echo`, …), and every file it could match now (each
//!   directory listed through [`ReadPathCheck::list_dir`], filtered by an over-approximation
//!   of bash's matching) is checked as a `Read`, which catches symlinks out and deny rules. A
//!   glob in a non-path long option value (`--include=*.rs`) expands only to that option again.
//!   A glob with no literal prefix (`*.rs`, `*/`) is expanded by muster itself, exactly as bash
//!   would now (`*` and `?` only, one working directory, no `..`, no pattern that can match
//!   `.`/`..`; listed through [`ReadPathCheck::list_dir`], kinds from
//!   [`ReadPathCheck::entry_kind`]), refused if a match starts with `-`, every match checked,
//!   and the command runs naming the matches quoted ([`rewrite`]; sorted by bytes, where bash
//!   sorts by the locale's collation), so nothing created later changes its argv.
//!
//! Read-only Bash must run under bash (`bash -c`, not zsh, which expands `=cmd` and more), in
//! the workspace root (relative paths are checked relative to it), with the variables
//! [`remove_from_read_only_env`] names removed (`BASH_ENV`, exported functions,
//! `RIPGREP_CONFIG_PATH`, `GIT_EXTERNAL_DIFF`, …), `PATH` filtered by [`read_only_path`], and
//! [`read_only_git_env`] set (git configuration that would run programs, pagers, hooks,
//! optional index locks).
//!
//! Known limits: deny rules apply to paths named on the command line and to recursive searches
//! of the working tree, not to file contents inside git history (`git log -p` shows a committed
//! `.env`); a recursive search that follows symlinks (`grep -R`, `rg -L`, `find -L`) may leave
//! the workspace through a symlinked directory, as `WorkspaceReadCheck` resolves symlinks only
//! for paths named directly; a text converter selected by `.git/info/attributes` (which file
//! tools cannot write; the work tree's, the user's and the system's attributes are switched
//! off) still runs for `git diff --stat`, `git log -p` and `git show`; `git diff` may refresh
//! the index's stat data; a glob's matches are checked against the file system at
//! classification time, so a symlink created between classification and execution (by
//! another agent) is not seen.
//!
//! [`known_dangerous`] is the separate, narrow list of destructive commands for the `auto` and
//! `bypassPermissions` modes.

mod danger;
mod env;
mod glob;
mod parse;
mod paths;
mod programs;
mod rewrite;
mod rules;

use std::fmt;

pub use danger::known_dangerous;
pub use env::{
    READ_ONLY_ENV_REMOVE, READ_ONLY_ENV_REMOVE_PREFIXES, read_only_git_env, read_only_path,
    remove_from_read_only_env,
};
pub use paths::{EntryKind, ReadPathCheck, WorkspaceReadCheck, entry_kind_at, list_dir_names};

/// The classifier's answer for one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShellVerdict {
    /// Every part is provably harmless. `commands` are the argv of the simple commands it runs,
    /// in source order. `run_as` is the command text to run instead of the one given, when
    /// muster added flags that keep it read-only (`--no-ext-diff` on `git diff`); the argv in
    /// `commands` are those of `run_as`.
    ReadOnly {
        commands: Vec<Vec<String>>,
        run_as: Option<String>,
    },
    /// Not provably read-only. `reason` names the command, argument or construct responsible,
    /// for a person and for the model (e.g. "`find -delete` runs commands, deletes files or
    /// writes files").
    NotReadOnly { reason: String },
}

impl ShellVerdict {
    /// Is the command read-only?
    pub fn is_read_only(&self) -> bool {
        matches!(self, Self::ReadOnly { .. })
    }

    /// The command text to run when muster rewrote it (see [`ShellVerdict::ReadOnly`]).
    pub fn run_as(&self) -> Option<&str> {
        match self {
            Self::ReadOnly { run_as, .. } => run_as.as_deref(),
            Self::NotReadOnly { .. } => None,
        }
    }

    /// Why the command is not read-only, if it is not.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Self::ReadOnly { .. } => None,
            Self::NotReadOnly { reason } => Some(reason),
        }
    }
}

impl fmt::Display for ShellVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ReadOnly { .. } => f.write_str("read-only"),
            Self::NotReadOnly { reason } => write!(f, "not read-only: {reason}"),
        }
    }
}

/// Classify a `Bash` command line: [`ShellVerdict::ReadOnly`] only if every part is provably
/// harmless and every path it reads passes `paths`. Never panics, whatever the input.
pub fn classify(command: &str, paths: &dyn ReadPathCheck) -> ShellVerdict {
    match classify_inner(command, paths) {
        Ok((commands, run_as)) => ShellVerdict::ReadOnly { commands, run_as },
        Err(reason) => ShellVerdict::NotReadOnly { reason },
    }
}

type Classified = (Vec<Vec<String>>, Option<String>);

fn classify_inner(command: &str, paths: &dyn ReadPathCheck) -> Result<Classified, String> {
    let mut commands = parse::parse(command)?;
    let mut edits = rewrite::force_flags(&mut commands);
    let expansions = rules::check_all(paths, &commands)?;
    edits.extend(rewrite::splice_expansions(&mut commands, &expansions));
    let run_as = rewrite::apply(command, &edits);
    if let Some(text) = &run_as {
        rewrite::verify(text, &commands)?;
    }
    let argv = commands
        .into_iter()
        .map(|c| {
            std::iter::once(c.name)
                .chain(c.args.into_iter().map(|w| w.value))
                .collect()
        })
        .collect();
    Ok((argv, run_as))
}
