//! The git plumbing worktree isolation is made of. Every call runs `git` as a child process in
//! one directory, with muster's own identity and no hooks, never reading a terminal. Nothing
//! here touches the user's index, stash or branches: the base is written through a temporary
//! index, and every ref muster moves is under `muster/<slug>/` or `refs/muster/<slug>/`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use tokio::process::Command;

/// The oldest git with `merge-tree --write-tree` (2.38).
const MIN_VERSION: (u32, u32) = (2, 38);

/// A git failure, in words a person can act on.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error(
        "git could not be started ({0}): worktree isolation needs git 2.38 or newer on PATH; \
         install it, or set isolation = \"shared\" in the team file"
    )]
    Missing(String),
    #[error(
        "git {found} is older than 2.38, which worktree isolation needs (`git merge-tree \
         --write-tree`): upgrade git, or set isolation = \"shared\" in the team file"
    )]
    TooOld { found: String },
    #[error("`git {args}` in {dir} failed{}: {stderr}", code.map(|c| format!(" (exit {c})")).unwrap_or_default())]
    Failed {
        args: String,
        dir: String,
        code: Option<i32>,
        stderr: String,
    },
    #[error("git printed something muster cannot read for `git {args}`: {output}")]
    Unexpected { args: String, output: String },
}

pub type GitResult<T> = Result<T, GitError>;

/// What a finished `git` call printed and how it exited.
#[derive(Debug)]
pub struct GitOutput {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl GitOutput {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// `git` in one directory.
#[derive(Debug, Clone)]
pub struct Git {
    dir: PathBuf,
    /// Extra environment (a temporary `GIT_INDEX_FILE`).
    env: Vec<(OsString, OsString)>,
}

impl Git {
    pub fn new(dir: impl Into<PathBuf>) -> Git {
        Git {
            dir: dir.into(),
            env: Vec::new(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The same directory with `GIT_INDEX_FILE` set (the base is written through its own index
    /// so the user's stays untouched).
    pub fn with_index(&self, index: &Path) -> Git {
        let mut git = self.clone();
        git.env
            .push(("GIT_INDEX_FILE".into(), index.as_os_str().to_owned()));
        git
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("git");
        command
            .arg("-C")
            .arg(&self.dir)
            .args([
                "-c",
                "core.hooksPath=/dev/null",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(["-c", "core.quotepath=off"])
            .args(args)
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .env_remove("GIT_INDEX_FILE")
            .env_remove("GIT_OBJECT_DIRECTORY")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_AUTHOR_NAME", "muster")
            .env("GIT_AUTHOR_EMAIL", "muster@localhost")
            .env("GIT_COMMITTER_NAME", "muster")
            .env("GIT_COMMITTER_EMAIL", "muster@localhost")
            .env("LC_ALL", "C")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        for (key, value) in &self.env {
            command.env(key, value);
        }
        command
    }

    /// Runs `git args…` and gives back how it went, whatever its exit code.
    pub async fn status(&self, args: &[&str]) -> GitResult<GitOutput> {
        let output = self
            .command(args)
            .output()
            .await
            .map_err(|error| GitError::Missing(error.to_string()))?;
        Ok(GitOutput {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }

    /// Runs `git args…`; a non-zero exit is an error. Gives back stdout without its trailing
    /// newline.
    pub async fn run(&self, args: &[&str]) -> GitResult<String> {
        let output = self.status(args).await?;
        if output.success() {
            Ok(output.stdout.trim_end_matches('\n').to_owned())
        } else {
            Err(self.failed(args, &output))
        }
    }

    pub fn failed(&self, args: &[&str], output: &GitOutput) -> GitError {
        GitError::Failed {
            args: args.join(" "),
            dir: self.dir.display().to_string(),
            code: output.code,
            stderr: if output.stderr.is_empty() {
                output.stdout.trim().to_owned()
            } else {
                output.stderr.clone()
            },
        }
    }

    /// Whether `git args…` exits 0 (exit 1 is "no"; anything else is an error).
    pub async fn test(&self, args: &[&str]) -> GitResult<bool> {
        let output = self.status(args).await?;
        match output.code {
            Some(0) => Ok(true),
            Some(1) => Ok(false),
            _ => Err(self.failed(args, &output)),
        }
    }

    /// The installed git's version, refused when older than 2.38.
    pub async fn check_version(&self) -> GitResult<String> {
        let text = self.run(&["--version"]).await?;
        let found = text.trim_start_matches("git version ").trim().to_owned();
        match parse_version(&found) {
            Some(version) if version >= MIN_VERSION => Ok(found),
            Some(_) => Err(GitError::TooOld { found }),
            None => Err(GitError::Unexpected {
                args: "--version".into(),
                output: text,
            }),
        }
    }

    /// The commit `rev` names, or `None` when it names none.
    pub async fn resolve(&self, rev: &str) -> GitResult<Option<String>> {
        let spec = format!("{rev}^{{commit}}");
        let output = self
            .status(&["rev-parse", "--verify", "--quiet", &spec])
            .await?;
        Ok(output
            .success()
            .then(|| output.stdout.trim().to_owned())
            .filter(|id| !id.is_empty()))
    }

    /// The tree of commit `rev`.
    pub async fn tree_of(&self, rev: &str) -> GitResult<String> {
        self.run(&["rev-parse", &format!("{rev}^{{tree}}")]).await
    }

    /// Whether `ancestor` is an ancestor of (or equal to) `of`.
    pub async fn is_ancestor(&self, ancestor: &str, of: &str) -> GitResult<bool> {
        self.test(&["merge-base", "--is-ancestor", ancestor, of])
            .await
    }

    /// Stages every change of the directory's working tree (tracked, untracked not ignored,
    /// deletions) into the current index and writes it as a tree. `exclude` are pathspecs
    /// (from the top) left out.
    pub async fn write_tree_of_work_tree(&self, exclude: &[&str]) -> GitResult<String> {
        let mut args = vec!["add", "-A", "--", ":/"];
        let excludes: Vec<String> = exclude
            .iter()
            .map(|path| format!(":(exclude,top){path}"))
            .collect();
        args.extend(excludes.iter().map(String::as_str));
        self.run(&args).await?;
        self.run(&["write-tree"]).await
    }

    /// A commit of `tree` with `parents` and `message`.
    pub async fn commit_tree(
        &self,
        tree: &str,
        parents: &[&str],
        message: &str,
    ) -> GitResult<String> {
        let mut args = vec!["commit-tree", tree];
        for parent in parents {
            args.push("-p");
            args.push(parent);
        }
        args.push("-m");
        args.push(message);
        self.run(&args).await
    }

    /// Points `reference` at `commit`.
    pub async fn update_ref(&self, reference: &str, commit: &str) -> GitResult<()> {
        self.run(&["update-ref", reference, commit]).await.map(drop)
    }

    /// `git merge-tree --write-tree` of `ours` and `theirs`: the merged tree, and the files
    /// that conflict (empty when the merge is clean). Touches neither side.
    pub async fn merge_tree(&self, ours: &str, theirs: &str) -> GitResult<MergeTree> {
        let args = [
            "merge-tree",
            "--write-tree",
            "--name-only",
            "--no-messages",
            ours,
            theirs,
        ];
        let output = self.status(&args).await?;
        let mut lines = output.stdout.lines();
        let tree = lines.next().unwrap_or_default().trim().to_owned();
        match output.code {
            Some(0) if !tree.is_empty() => Ok(MergeTree {
                tree,
                conflicts: Vec::new(),
            }),
            Some(1) if !tree.is_empty() => Ok(MergeTree {
                tree,
                conflicts: lines
                    .map(str::trim)
                    .filter(|line| !line.is_empty())
                    .map(str::to_owned)
                    .collect(),
            }),
            _ => Err(self.failed(&args, &output)),
        }
    }

    /// The paths that differ between two commits, with their change letter (`A`, `M`, `D`,
    /// `T`), renames seen as a deletion and an addition.
    pub async fn changed_paths(&self, from: &str, to: &str) -> GitResult<Vec<(char, String)>> {
        let text = self
            .run(&["diff", "--name-status", "--no-renames", "-z", from, to])
            .await?;
        let mut fields = text.split('\0').filter(|field| !field.is_empty());
        let mut changes = Vec::new();
        while let (Some(status), Some(path)) = (fields.next(), fields.next()) {
            let letter = status.chars().next().unwrap_or('M');
            changes.push((letter, path.to_owned()));
        }
        Ok(changes)
    }

    /// `git diff --stat` between two commits, for a person to read.
    pub async fn diffstat(&self, from: &str, to: &str) -> GitResult<String> {
        self.run(&["diff", "--stat", "--no-ext-diff", "--no-textconv", from, to])
            .await
    }

    /// The lines added between two commits (without the `+`), for checks on what a merge
    /// would bring in.
    pub async fn added_lines(&self, from: &str, to: &str) -> GitResult<Vec<String>> {
        let text = self
            .run(&[
                "diff",
                "--no-ext-diff",
                "--no-textconv",
                "--no-color",
                "-U0",
                from,
                to,
            ])
            .await?;
        Ok(text
            .lines()
            .filter(|line| line.starts_with('+') && !line.starts_with("+++"))
            .map(|line| line[1..].to_owned())
            .collect())
    }
}

/// What merging a commit onto the integration head adds — the one answer every front end
/// (serve's request page, `muster inbox`) and the lead's merge mail give: the difference from
/// `onto`, the recorded integration head, to the tree `git merge-tree --write-tree onto
/// commit` writes, which is the merge muster checks and applies. Not `git diff onto commit`
/// (it also reverses what `onto` has and the branch lacks, such as another teammate's merged
/// work), nor `onto...commit` (it starts at the merge base, not at what is integrated now).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeAdds {
    /// The integration head the merge goes onto.
    pub onto: String,
    /// The merge muster checks (its tree, and the files that conflict).
    pub merged: MergeTree,
}

impl MergeAdds {
    /// Checks the merge of `commit` onto `onto` without touching either.
    pub async fn of(git: &Git, onto: &str, commit: &str) -> GitResult<MergeAdds> {
        Ok(MergeAdds {
            onto: onto.to_owned(),
            merged: git.merge_tree(onto, commit).await?,
        })
    }

    /// The files the merge changes on the integration head.
    pub async fn files(&self, git: &Git) -> GitResult<Vec<String>> {
        let changes = git.changed_paths(&self.onto, &self.merged.tree).await?;
        Ok(changes.into_iter().map(|(_, path)| path).collect())
    }

    /// `git diff --stat` of the merge, for a person to read.
    pub async fn diffstat(&self, git: &Git) -> GitResult<String> {
        git.diffstat(&self.onto, &self.merged.tree).await
    }

    /// The unified diff of the merge.
    pub async fn diff(&self, git: &Git) -> GitResult<String> {
        git.run(&[
            "diff",
            "--no-ext-diff",
            "--no-textconv",
            "--no-color",
            &self.onto,
            &self.merged.tree,
            "--",
        ])
        .await
    }

    /// A shell command that shows the same diff in any worktree of the repository, for a
    /// person or a model to run (`merge-tree` prints the merged tree on its first line when
    /// the merge is clean, which is when a merge is asked for).
    pub fn command(onto: &str, commit: &str) -> String {
        format!("git diff {onto} $(git merge-tree --write-tree {onto} {commit})")
    }
}

/// What `git merge-tree --write-tree` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeTree {
    pub tree: String,
    pub conflicts: Vec<String>,
}

/// `2.47.3` (or `2.39.2.windows.1`) → (2, 47).
fn parse_version(text: &str) -> Option<(u32, u32)> {
    let mut parts = text.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_as_git_prints_them() {
        for (text, expected) in [
            ("2.47.3", Some((2, 47))),
            ("2.38.0", Some((2, 38))),
            ("2.37.1 (Apple Git-137.1)", Some((2, 37))),
            ("2.39.2.windows.1", Some((2, 39))),
            ("", None),
            ("banana", None),
        ] {
            assert_eq!(parse_version(text), expected, "{text:?}");
        }
    }

    #[test]
    fn the_minimum_is_merge_tree_write_tree() {
        assert!(parse_version("2.38.0").is_some_and(|v| v >= MIN_VERSION));
        assert!(parse_version("2.37.9").is_some_and(|v| v < MIN_VERSION));
    }
}
