//! Worktree isolation (DESIGN.md "Wave 2 → Worktree isolation"): a run's base commit, the
//! integration worktree where the lead works, a branch and a worktree per teammate, muster's
//! checkpoints of a worktree's state, the merge check, merges and the final apply to the
//! user's working tree. This module does the git side only; what is recorded when, and in
//! which transaction, is the team's (`team::isolation`).

pub mod git;

use std::path::{Path, PathBuf};

use muster_config::team::Isolation;
use serde::{Deserialize, Serialize};

pub use git::{Git, GitError, GitResult, MergeAdds, MergeTree};

/// Where a run's worktrees live, under the project's `.muster/`.
pub const WORKTREES_DIR: &str = "worktrees";

/// Why worktree isolation could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum IsolationError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("{0}")]
    Refused(String),
    #[error("{what} {path}: {error}")]
    Io {
        what: &'static str,
        path: String,
        error: std::io::Error,
    },
}

pub type IsolationResult<T> = Result<T, IsolationError>;

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> IsolationError + use<> {
    let path = path.display().to_string();
    move |error| IsolationError::Io { what, path, error }
}

/// What a team run works with: worktrees, or the one shared working tree (with the warning
/// that says why, when the user did not ask for it).
#[derive(Debug)]
pub enum Chosen {
    Worktrees(Worktrees),
    Shared { warning: Option<String> },
}

/// A run's recorded base: the user's HEAD when the run started, and the commit of HEAD plus
/// the working tree's changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Base {
    pub head: String,
    pub commit: String,
}

/// A worktree's state as muster recorded it: a commit, and the integration commit being
/// merged into it when muster handed its teammate a conflict to resolve.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub commit: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merging: Option<String>,
}

/// The worktrees of one run.
#[derive(Debug, Clone)]
pub struct Worktrees {
    /// `git` at the top of the user's repository.
    repo: Git,
    toplevel: PathBuf,
    /// The workspace relative to the repository's top (empty at the top).
    subdir: PathBuf,
    /// `.muster/worktrees/<slug>`.
    root: PathBuf,
    /// `.muster/worktrees` relative to the top, when it lies inside the repository (left
    /// out of the base).
    excluded: Option<String>,
    slug: String,
    /// Held while the repository's worktree list changes (`worktree add`, `prune`,
    /// `remove`): git does not make those safe against each other, and a `prune` beside an
    /// `add` removes the half-made worktree's administrative files.
    admin: std::sync::Arc<tokio::sync::Mutex<()>>,
}

/// The operations in progress that make a repository's HEAD ambiguous as a base.
const IN_PROGRESS: &[(&str, &str)] = &[
    ("MERGE_HEAD", "a merge (git merge --continue or --abort)"),
    (
        "rebase-merge",
        "a rebase (git rebase --continue or --abort)",
    ),
    ("rebase-apply", "a rebase or git am (--continue or --abort)"),
    (
        "CHERRY_PICK_HEAD",
        "a cherry-pick (git cherry-pick --continue or --abort)",
    ),
    ("REVERT_HEAD", "a revert (git revert --continue or --abort)"),
    ("BISECT_LOG", "a bisect (git bisect reset)"),
];

/// Chooses a team run's isolation: `requested` from the team file (`None`: the default,
/// worktrees when `workspace` is in a git repository with a commit). A default that cannot
/// be met falls back to `shared` with a warning; an explicit `worktree` that cannot be met is
/// an error. A repository in the middle of a merge or rebase is an error either way.
pub async fn choose(
    requested: Option<Isolation>,
    workspace: &Path,
    muster_dir: &Path,
    slug: &str,
) -> IsolationResult<Chosen> {
    if requested == Some(Isolation::Shared) {
        return Ok(Chosen::Shared { warning: None });
    }
    let explicit = requested == Some(Isolation::Worktree);
    let fallback = |reason: String| -> IsolationResult<Chosen> {
        if explicit {
            Err(IsolationError::Refused(format!(
                "isolation = \"worktree\" needs {reason}"
            )))
        } else {
            Ok(Chosen::Shared {
                warning: Some(format!(
                    "teammates share one working tree: worktree isolation needs {reason}; \
                     set isolation = \"shared\" in the team file to silence this"
                )),
            })
        }
    };
    let here = Git::new(workspace);
    if let Err(error) = here.check_version().await {
        return fallback(format!("git 2.38 or newer ({error})"));
    }
    let top = here.status(&["rev-parse", "--show-toplevel"]).await?;
    if !top.success() {
        return fallback(format!(
            "a git repository with a commit, and {} is not in one (git init, then commit)",
            workspace.display()
        ));
    }
    let toplevel = PathBuf::from(top.stdout.trim());
    let repo = Git::new(&toplevel);
    if repo.resolve("HEAD").await?.is_none() {
        return fallback(format!(
            "a commit, and the repository at {} has none yet (commit once)",
            toplevel.display()
        ));
    }
    refuse_operation_in_progress(&repo).await?;
    if let Some(reason) = submodules(&repo).await? {
        return fallback(format!("a repository without submodules ({reason})"));
    }
    Ok(Chosen::Worktrees(Worktrees::new(
        repo, toplevel, workspace, muster_dir, slug,
    )?))
}

async fn refuse_operation_in_progress(repo: &Git) -> IsolationResult<()> {
    for (name, what) in IN_PROGRESS {
        let path = repo.run(&["rev-parse", "--git-path", name]).await?;
        let path = repo.dir().join(path);
        if path.exists() {
            return Err(IsolationError::Refused(format!(
                "the repository at {} is in the middle of {what}: finish it first, or set \
                 isolation = \"shared\" in the team file; nothing was changed",
                repo.dir().display()
            )));
        }
    }
    Ok(())
}

/// Why the repository's submodules rule worktrees out, if it has any (a worktree would not
/// check them out, so teammates would see empty directories).
async fn submodules(repo: &Git) -> IsolationResult<Option<String>> {
    let staged = repo.run(&["ls-files", "--stage"]).await?;
    let gitlinks = staged
        .lines()
        .filter(|line| line.starts_with("160000 "))
        .count();
    Ok((gitlinks > 0).then(|| format!("it has {gitlinks} submodule(s)")))
}

impl Worktrees {
    fn new(
        repo: Git,
        toplevel: PathBuf,
        workspace: &Path,
        muster_dir: &Path,
        slug: &str,
    ) -> IsolationResult<Worktrees> {
        let canonical =
            |path: &Path| std::fs::canonicalize(path).map_err(io("cannot resolve", path));
        let toplevel = canonical(&toplevel)?;
        let subdir = canonical(workspace)?
            .strip_prefix(&toplevel)
            .map(Path::to_path_buf)
            .unwrap_or_default();
        std::fs::create_dir_all(muster_dir).map_err(io("cannot create", muster_dir))?;
        let worktrees = canonical(muster_dir)?.join(WORKTREES_DIR);
        let excluded = worktrees
            .strip_prefix(&toplevel)
            .ok()
            .map(|path| path.to_string_lossy().into_owned());
        Ok(Worktrees {
            repo,
            toplevel,
            subdir,
            root: worktrees.join(slug),
            excluded,
            slug: slug.to_owned(),
            admin: std::sync::Arc::new(tokio::sync::Mutex::new(())),
        })
    }

    /// The integration branch.
    pub fn lead_branch(&self) -> String {
        self.branch("lead")
    }

    /// The branch of agent `agent` (`lead` is the integration branch).
    pub fn branch(&self, agent: &str) -> String {
        format!("muster/{}/{agent}", self.slug)
    }

    fn base_ref(&self) -> String {
        format!("refs/muster/{}/base", self.slug)
    }

    /// Agent `agent`'s worktree.
    pub fn path_of(&self, agent: &str) -> PathBuf {
        self.root.join(agent)
    }

    /// Where agent `agent` works: its worktree, or the same subdirectory of it as the
    /// workspace is of the repository.
    pub fn workspace_of(&self, agent: &str) -> PathBuf {
        self.path_of(agent).join(&self.subdir)
    }

    /// A merge gate's scratch worktree `name`, under the run's worktrees (so removing them,
    /// and `muster prune`, removes it too).
    pub fn scratch_path(&self, name: &str) -> PathBuf {
        self.root.join(format!(".gate-{name}"))
    }

    /// Adds merge gate scratch worktree `name` (at [`Self::scratch_path`]), detached at
    /// `commit`, under the lock every change of the worktree list takes.
    pub async fn add_scratch(&self, name: &str, commit: &str) -> IsolationResult<PathBuf> {
        let _admin = self.admin.lock().await;
        let path = self.scratch_path(name);
        let _ = std::fs::remove_dir_all(&path);
        self.forget_half_made().await?;
        let where_to = path.to_string_lossy().into_owned();
        // `--force`: the registration a killed gate left for this path is taken over.
        self.repo
            .run(&[
                "worktree", "add", "--quiet", "--force", "--detach", &where_to, commit,
            ])
            .await?;
        Ok(path)
    }

    /// Removes, with their trees, the administrative entries of this run's worktrees that a
    /// kill during `git worktree add` left half made: git cannot prune one still locked as
    /// `initializing`, and one whose `commondir` is empty makes every `git worktree` command
    /// in the repository fail (`failed to read …/commondir`). Callers hold the admin lock, so
    /// no add of this run is under way.
    async fn forget_half_made(&self) -> IsolationResult<()> {
        let common = self.repo.run(&["rev-parse", "--git-common-dir"]).await?;
        let admin_root = self.toplevel.join(common).join("worktrees");
        let Ok(entries) = std::fs::read_dir(&admin_root) else {
            return Ok(());
        };
        for admin in entries.flatten().map(|entry| entry.path()) {
            let tree = std::fs::read_to_string(admin.join("gitdir"))
                .ok()
                .and_then(|gitdir| Path::new(gitdir.trim_end()).parent().map(Path::to_path_buf));
            let Some(tree) = tree.filter(|tree| tree.starts_with(&self.root)) else {
                continue;
            };
            if half_made(&admin) {
                let _ = std::fs::remove_dir_all(&tree);
                std::fs::remove_dir_all(&admin).map_err(io("cannot remove", &admin))?;
            }
        }
        Ok(())
    }

    /// The workspace's subdirectory of the repository (empty at its top).
    pub fn subdir(&self) -> &Path {
        &self.subdir
    }

    pub fn toplevel(&self) -> &Path {
        &self.toplevel
    }

    /// `.muster/worktrees` as a pathspec to leave out, unless git ignores it already (git
    /// refuses a pathspec that names an ignored path).
    async fn excludes(&self) -> IsolationResult<Vec<&str>> {
        let Some(path) = &self.excluded else {
            return Ok(Vec::new());
        };
        let ignored = self.repo.test(&["check-ignore", "-q", path]).await?;
        Ok(if ignored {
            Vec::new()
        } else {
            vec![path.as_str()]
        })
    }

    /// Refuses a new run whose branches or worktree directory are already taken.
    pub async fn refuse_taken(&self) -> IsolationResult<()> {
        let prefix = format!("refs/heads/muster/{}/", self.slug);
        let taken = self
            .repo
            .run(&["for-each-ref", "--format=%(refname:short)", &prefix])
            .await?;
        if let Some(branch) = taken.lines().next() {
            return Err(IsolationError::Refused(format!(
                "branch {branch} already exists: delete it (git branch -D {branch}) or run \
                 muster prune, then start again; nothing was changed"
            )));
        }
        if self.root.exists() {
            return Err(IsolationError::Refused(format!(
                "{} already exists: remove it (git worktree remove, or delete the directory \
                 and run git worktree prune), then start again; nothing was changed",
                self.root.display()
            )));
        }
        Ok(())
    }

    /// Writes the base: HEAD plus the working tree's changes (tracked, and untracked files
    /// that are not ignored) as one commit, through a temporary index, kept alive by
    /// `refs/muster/<slug>/base`.
    pub async fn make_base(&self) -> IsolationResult<Base> {
        let head = self
            .repo
            .resolve("HEAD")
            .await?
            .ok_or_else(|| IsolationError::Refused("the repository has no commit".into()))?;
        let tree = self.tree_of_user_work_tree().await?;
        let message = format!("muster: base of run {}", self.slug);
        let commit = self.repo.commit_tree(&tree, &[&head], &message).await?;
        self.repo.update_ref(&self.base_ref(), &commit).await?;
        Ok(Base { head, commit })
    }

    /// The tree of the user's working tree as it is now (HEAD plus every change), written
    /// through a temporary index.
    async fn tree_of_user_work_tree(&self) -> IsolationResult<String> {
        std::fs::create_dir_all(&self.root).map_err(io("cannot create", &self.root))?;
        let index = self.root.with_extension("index");
        let _ = std::fs::remove_file(&index);
        let git = self.repo.with_index(&index);
        git.run(&["read-tree", "HEAD"]).await?;
        let excludes = self.excludes().await?;
        let tree = git.write_tree_of_work_tree(&excludes).await;
        let _ = std::fs::remove_file(&index);
        Ok(tree?)
    }

    /// Makes sure agent `agent`'s worktree exists on its branch; a new branch starts at
    /// `start`. Idempotent: a half-made worktree (a kill during `git worktree add`) is
    /// removed and made again; the branch is reused.
    pub async fn ensure(&self, agent: &str, start: &str) -> IsolationResult<PathBuf> {
        let _admin = self.admin.lock().await;
        let path = self.path_of(agent);
        let branch = self.branch(agent);
        if self.is_worktree_on(&path, &branch).await? {
            return Ok(path);
        }
        if path.exists() {
            std::fs::remove_dir_all(&path).map_err(io("cannot remove", &path))?;
        }
        self.forget_half_made().await?;
        self.repo.run(&["worktree", "prune"]).await?;
        std::fs::create_dir_all(&self.root).map_err(io("cannot create", &self.root))?;
        let path_text = path.to_string_lossy().into_owned();
        let exists = self
            .repo
            .resolve(&format!("refs/heads/{branch}"))
            .await?
            .is_some();
        if exists {
            self.repo
                .run(&["worktree", "add", "--quiet", &path_text, &branch])
                .await?;
        } else {
            self.repo
                .run(&[
                    "worktree", "add", "--quiet", "-b", &branch, &path_text, start,
                ])
                .await?;
        }
        Ok(path)
    }

    async fn is_worktree_on(&self, path: &Path, branch: &str) -> IsolationResult<bool> {
        if !path.join(".git").exists() {
            return Ok(false);
        }
        let here = Git::new(path);
        let top = here.status(&["rev-parse", "--show-toplevel"]).await?;
        let canonical = std::fs::canonicalize(path).ok();
        if !top.success() || canonical.as_deref() != Some(Path::new(top.stdout.trim())) {
            return Ok(false);
        }
        let head = here.status(&["symbolic-ref", "--quiet", "HEAD"]).await?;
        Ok(head.success() && head.stdout.trim() == format!("refs/heads/{branch}"))
    }

    /// Puts agent `agent`'s worktree back to `checkpoint` exactly (made again if it was
    /// lost): its branch at the commit, every tracked file as recorded, untracked files that
    /// are not ignored removed, and a conflict hand-over merged in again.
    pub async fn restore(&self, agent: &str, checkpoint: &Checkpoint) -> IsolationResult<PathBuf> {
        let path = self.ensure(agent, &checkpoint.commit).await?;
        let git = Git::new(&path);
        if git.resolve("MERGE_HEAD").await?.is_some() {
            git.run(&["merge", "--abort"]).await?;
        }
        git.run(&["reset", "--quiet", "--hard", &checkpoint.commit])
            .await?;
        git.run(&["clean", "-fdq"]).await?;
        if let Some(merging) = &checkpoint.merging {
            self.start_merge(&path, merging).await?;
        }
        Ok(path)
    }

    /// Commits the worktree's state on its branch when it changed (a merge in progress is
    /// concluded with both parents) and gives back the checkpoint. `onto`, for the
    /// integration worktree, is the recorded integration head the commit must follow.
    pub async fn checkpoint(&self, agent: &str) -> IsolationResult<Checkpoint> {
        let path = self.path_of(agent);
        let git = Git::new(&path);
        let head = git
            .resolve("HEAD")
            .await?
            .ok_or_else(|| IsolationError::Refused(format!("{} has no HEAD", path.display())))?;
        let merging = git.resolve("MERGE_HEAD").await?;
        let tree = git.write_tree_of_work_tree(&[]).await?;
        if merging.is_none() && tree == git.tree_of(&head).await? {
            return Ok(Checkpoint {
                commit: head,
                merging: None,
            });
        }
        let mut parents = vec![head.as_str()];
        parents.extend(merging.as_deref());
        let message = format!("muster: checkpoint of {agent}");
        let commit = git.commit_tree(&tree, &parents, &message).await?;
        git.run(&["update-ref", "HEAD", &commit, &head]).await?;
        if merging.is_some() {
            git.run(&["merge", "--quit"]).await?;
        }
        Ok(Checkpoint {
            commit,
            merging: None,
        })
    }

    /// Whether the merge of `theirs` into `ours` is clean, without touching either.
    pub async fn merge_check(&self, ours: &str, theirs: &str) -> IsolationResult<MergeTree> {
        Ok(self.repo.merge_tree(ours, theirs).await?)
    }

    /// Whether `commit` is already contained in `head` (nothing left to merge).
    pub async fn contains(&self, head: &str, commit: &str) -> IsolationResult<bool> {
        Ok(self.repo.is_ancestor(commit, head).await?)
    }

    /// Merges `integration` into the worktree at `path` without committing, leaving conflict
    /// markers for its teammate to resolve. Gives back the conflicting files.
    pub async fn start_merge(
        &self,
        path: &Path,
        integration: &str,
    ) -> IsolationResult<Vec<String>> {
        let git = Git::new(path);
        let args = [
            "merge",
            "--no-ff",
            "--no-commit",
            "--quiet",
            "-m",
            "muster: merge the integration branch",
            integration,
        ];
        let output = git.status(&args).await?;
        if !matches!(output.code, Some(0 | 1)) {
            return Err(git.failed(&args, &output).into());
        }
        let unmerged = git.run(&["diff", "--name-only", "--diff-filter=U"]).await?;
        Ok(unmerged.lines().map(str::to_owned).collect())
    }

    /// The merge commit of `theirs` into `ours`, from the tree `merge_check` wrote.
    pub async fn merge_commit(
        &self,
        ours: &str,
        theirs: &str,
        tree: &str,
        message: &str,
    ) -> IsolationResult<String> {
        Ok(self
            .repo
            .commit_tree(tree, &[ours, theirs], message)
            .await?)
    }

    /// What merging `commit` onto `head` adds ([`MergeAdds`]: the files and diffstat from
    /// `head` to the merged tree, and the files that conflict), and the added lines that look
    /// like conflict markers among the branch's own changes (since the merge base).
    pub async fn changes(&self, head: &str, commit: &str) -> IsolationResult<Changes> {
        let adds = MergeAdds::of(&self.repo, head, commit).await?;
        let files = adds.files(&self.repo).await?;
        let diffstat = adds.diffstat(&self.repo).await?;
        let since = self.repo.run(&["merge-base", head, commit]).await?;
        let added = self.repo.added_lines(&since, commit).await?;
        let markers = added
            .iter()
            .filter(|line| line.starts_with("<<<<<<< ") || line.starts_with(">>>>>>> "))
            .count();
        Ok(Changes {
            conflicts: adds.merged.conflicts,
            files,
            diffstat,
            conflict_markers: markers,
        })
    }

    /// Fast-forwards the integration worktree to `commit` (a merge on top of its HEAD),
    /// keeping the lead's uncommitted changes; refused (and nothing changed) when they are in
    /// the way.
    pub async fn advance_lead(&self, commit: &str) -> IsolationResult<()> {
        let git = Git::new(self.path_of("lead"));
        git.run(&["merge", "--ff-only", "--quiet", commit]).await?;
        Ok(())
    }

    /// Commits the integration worktree's changes on top of `head` (the recorded integration
    /// head), or gives back `None` when there are none.
    pub async fn lead_checkpoint(&self, head: &str) -> IsolationResult<Option<String>> {
        let git = Git::new(self.path_of("lead"));
        let tree = git.write_tree_of_work_tree(&[]).await?;
        if tree == git.tree_of(head).await? {
            return Ok(None);
        }
        let commit = git
            .commit_tree(&tree, &[head], "muster: checkpoint of lead")
            .await?;
        let current = git.resolve("HEAD").await?.unwrap_or_default();
        git.run(&["update-ref", "HEAD", &commit, &current]).await?;
        Ok(Some(commit))
    }

    /// Whether the user's HEAD and working tree still match the base.
    pub async fn user_tree_matches(&self, base: &Base) -> IsolationResult<bool> {
        if self.repo.resolve("HEAD").await?.as_deref() != Some(base.head.as_str()) {
            return Ok(false);
        }
        let tree = self.tree_of_user_work_tree().await?;
        Ok(tree == self.repo.tree_of(&base.commit).await?)
    }

    /// Writes `result`'s changes against the base into the user's working tree as
    /// uncommitted changes: each changed path is made exactly as in `result` (a deleted one
    /// removed), so applying twice (a kill half-way) ends the same. The user's index and
    /// HEAD are not touched.
    pub async fn apply_to_user_tree(&self, base: &Base, result: &str) -> IsolationResult<usize> {
        let changes = self.repo.changed_paths(&base.commit, result).await?;
        let index = self.root.with_extension("apply-index");
        let _ = std::fs::remove_file(&index);
        let git = self.repo.with_index(&index);
        git.run(&["read-tree", result]).await?;
        let written: Vec<&str> = changes
            .iter()
            .filter(|(letter, _)| *letter != 'D')
            .map(|(_, path)| path.as_str())
            .collect();
        for chunk in written.chunks(200) {
            let mut args = vec!["checkout-index", "--force", "--"];
            args.extend(chunk);
            git.run(&args).await?;
        }
        let _ = std::fs::remove_file(&index);
        for (_, path) in changes.iter().filter(|(letter, _)| *letter == 'D') {
            let file = self.toplevel.join(path);
            match std::fs::remove_file(&file) {
                Ok(()) => remove_empty_parents(&file, &self.toplevel),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => return Err(io("cannot remove", &file)(error)),
            }
        }
        Ok(changes.len())
    }

    /// Removes the run's worktrees (its branches stay until `muster prune`).
    pub async fn remove_worktrees(&self) -> IsolationResult<()> {
        let _admin = self.admin.lock().await;
        let entries = match std::fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(error) => return Err(io("cannot read", &self.root)(error)),
        };
        self.forget_half_made().await?;
        for entry in entries.flatten() {
            let path = entry.path().to_string_lossy().into_owned();
            let _ = self
                .repo
                .run(&["worktree", "remove", "--force", "--force", &path])
                .await;
        }
        let _ = std::fs::remove_dir_all(&self.root);
        self.repo.run(&["worktree", "prune"]).await?;
        Ok(())
    }

    /// Deletes the run's worktrees, its branches (`muster/<slug>/…`) and its base ref, for
    /// `muster prune` once the run is finished. Gives back how many refs were deleted.
    pub async fn delete_run(&self) -> IsolationResult<usize> {
        self.remove_worktrees().await?;
        let listed = self
            .repo
            .run(&[
                "for-each-ref",
                "--format=%(refname)",
                &format!("refs/heads/muster/{}/", self.slug),
                &format!("refs/muster/{}/", self.slug),
            ])
            .await?;
        let refs: Vec<&str> = listed.lines().filter(|l| !l.is_empty()).collect();
        for name in &refs {
            self.repo.run(&["update-ref", "-d", name]).await?;
        }
        Ok(refs.len())
    }
}

/// What a teammate's branch brings against the integration head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changes {
    /// The files whose merge conflicts (empty when the merge is clean).
    pub conflicts: Vec<String>,
    /// What the merge changes on the head ([`MergeAdds`]).
    pub files: Vec<String>,
    pub diffstat: String,
    /// Added lines that look like conflict markers (an unresolved hand-over).
    pub conflict_markers: usize,
}

/// Whether worktree administrative entry `admin` was left half made by `git worktree add`:
/// still locked as `initializing` (the add removes that lock last), or with an empty
/// `commondir` (the add was killed while writing it).
fn half_made(admin: &Path) -> bool {
    let read = |name: &str| std::fs::read_to_string(admin.join(name));
    let initializing = read("locked").is_ok_and(|reason| reason.trim() == "initializing");
    let empty_commondir = read("commondir").is_ok_and(|dir| dir.trim().is_empty());
    initializing || empty_commondir
}

fn remove_empty_parents(file: &Path, top: &Path) {
    let mut dir = file.parent();
    while let Some(current) = dir {
        if current == top || std::fs::remove_dir(current).is_err() {
            break;
        }
        dir = current.parent();
    }
}

#[cfg(test)]
mod tests;
