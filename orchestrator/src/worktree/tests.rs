//! Worktree isolation's git side against real repositories in temporary directories.

use std::path::Path;
use std::process::Command;

use super::*;

fn sh(dir: &Path, script: &str) -> String {
    let output = Command::new("bash")
        .arg("-ceu")
        .arg(script)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// A repository with one commit (`a.txt`, `b.txt`), `.muster/` ignored as muster writes it.
fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    sh(
        dir.path(),
        "git init -q -b main . && printf 'a1\\na2\\na3\\n' > a.txt && printf 'b\\n' > b.txt \
         && mkdir -p .muster && printf 'muster.db*\\nworktrees/\\n' > .muster/.gitignore \
         && git add -A && git commit -qm one",
    );
    dir
}

async fn worktrees(dir: &Path) -> Worktrees {
    match choose(None, dir, &dir.join(".muster"), "brisk-otter")
        .await
        .unwrap()
    {
        Chosen::Worktrees(worktrees) => worktrees,
        Chosen::Shared { warning } => panic!("shared: {warning:?}"),
    }
}

#[tokio::test]
async fn the_default_falls_back_to_shared_with_a_warning_and_an_explicit_worktree_is_refused() {
    let plain = tempfile::tempdir().unwrap();
    let muster = plain.path().join(".muster");
    match choose(None, plain.path(), &muster, "s").await.unwrap() {
        Chosen::Shared { warning: Some(w) } => {
            assert!(w.contains("git init, then commit"), "{w}");
            assert!(w.contains("isolation = \"shared\""), "{w}");
        }
        other => panic!("{other:?}"),
    }
    let error = choose(Some(Isolation::Worktree), plain.path(), &muster, "s")
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("isolation = \"worktree\" needs"), "{error}");
    sh(plain.path(), "git init -q .");
    let error = choose(Some(Isolation::Worktree), plain.path(), &muster, "s")
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("has none yet"), "{error}");
    assert!(matches!(
        choose(Some(Isolation::Shared), plain.path(), &muster, "s")
            .await
            .unwrap(),
        Chosen::Shared { warning: None }
    ));
}

#[tokio::test]
async fn a_merge_in_progress_is_refused_either_way_and_nothing_changes() {
    let dir = repo();
    sh(
        dir.path(),
        "git checkout -qb other && echo x > a.txt && git commit -qam x && git checkout -q main \
         && echo y > a.txt && git commit -qam y && (git merge -q other || true)",
    );
    let status_before = sh(dir.path(), "git status --porcelain=v2 && git stash list");
    for requested in [None, Some(Isolation::Worktree)] {
        let error = choose(requested, dir.path(), &dir.path().join(".muster"), "s")
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains("in the middle of a merge"), "{error}");
    }
    assert_eq!(
        sh(dir.path(), "git status --porcelain=v2 && git stash list"),
        status_before
    );
}

#[tokio::test]
async fn submodules_fall_back_to_shared() {
    let dir = repo();
    let inner = repo();
    sh(
        dir.path(),
        &format!(
            "git -c protocol.file.allow=always submodule add -q {} sub && git commit -qm sub",
            inner.path().display()
        ),
    );
    match choose(None, dir.path(), &dir.path().join(".muster"), "s")
        .await
        .unwrap()
    {
        Chosen::Shared { warning: Some(w) } => assert!(w.contains("submodule"), "{w}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn the_base_holds_uncommitted_and_untracked_changes_and_leaves_the_user_index_alone() {
    let dir = repo();
    sh(
        dir.path(),
        "echo staged > b.txt && git add b.txt && echo changed > a.txt && echo new > c.txt \
         && echo 'ignored' > .muster/muster.db && git stash list > /dev/null",
    );
    let before = sh(
        dir.path(),
        "git status --porcelain=v2; git diff --cached; git stash list",
    );
    let worktrees = worktrees(dir.path()).await;
    worktrees.refuse_taken().await.unwrap();
    let base = worktrees.make_base().await.unwrap();
    assert_eq!(base.head, sh(dir.path(), "git rev-parse HEAD"));
    let files = sh(
        dir.path(),
        &format!("git ls-tree -r --name-only {}", base.commit),
    );
    assert_eq!(
        files.lines().collect::<Vec<_>>(),
        [".muster/.gitignore", "a.txt", "b.txt", "c.txt"]
    );
    assert_eq!(
        sh(dir.path(), &format!("git show {}:a.txt", base.commit)),
        "changed"
    );
    assert_eq!(
        sh(
            dir.path(),
            "git status --porcelain=v2; git diff --cached; git stash list"
        ),
        before
    );
    assert_eq!(
        sh(dir.path(), "git rev-parse refs/muster/brisk-otter/base"),
        base.commit
    );
    assert!(worktrees.user_tree_matches(&base).await.unwrap());
    sh(dir.path(), "echo later >> c.txt");
    assert!(!worktrees.user_tree_matches(&base).await.unwrap());
}

#[tokio::test]
async fn a_worktree_is_made_once_made_again_when_half_made_and_refused_when_taken() {
    let dir = repo();
    let worktrees = worktrees(dir.path()).await;
    let base = worktrees.make_base().await.unwrap();
    let path = worktrees.ensure("alice", &base.commit).await.unwrap();
    assert_eq!(
        sh(&path, "git symbolic-ref HEAD"),
        "refs/heads/muster/brisk-otter/alice"
    );
    assert_eq!(sh(&path, "cat a.txt | head -1"), "a1");
    // A second ensure is a no-op; a half-made one (the .git file lost) is made again.
    assert_eq!(worktrees.ensure("alice", &base.commit).await.unwrap(), path);
    std::fs::remove_file(path.join(".git")).unwrap();
    worktrees.ensure("alice", &base.commit).await.unwrap();
    assert_eq!(
        sh(&path, "git symbolic-ref HEAD"),
        "refs/heads/muster/brisk-otter/alice"
    );
    let error = worktrees.refuse_taken().await.unwrap_err().to_string();
    assert!(
        error.contains("branch muster/brisk-otter/alice already exists"),
        "{error}"
    );
}

/// What `git worktree add` leaves when killed part way (git 2.47's order: the admin entry
/// locked `initializing`, `gitdir`, the tree's `.git` file, `commondir`, `HEAD`, the
/// checkout, then the lock removed): `commondir` written empty, or everything but the lock.
fn half_made_entry(dir: &Path, tree: &Path, empty_commondir: bool) {
    let admin = dir.join(".git/worktrees/-gate-two");
    std::fs::create_dir_all(&admin).unwrap();
    std::fs::create_dir_all(tree).unwrap();
    std::fs::write(admin.join("locked"), "initializing").unwrap();
    std::fs::write(
        admin.join("gitdir"),
        format!("{}\n", tree.join(".git").display()),
    )
    .unwrap();
    std::fs::write(tree.join(".git"), format!("gitdir: {}\n", admin.display())).unwrap();
    let commondir = if empty_commondir { "" } else { "../..\n" };
    std::fs::write(admin.join("commondir"), commondir).unwrap();
    if !empty_commondir {
        let head = sh(dir, "git rev-parse HEAD");
        std::fs::write(admin.join("HEAD"), format!("{head}\n")).unwrap();
    }
}

/// A gate killed inside `git worktree add` (a kill -9 of the run, or of a gate racing the
/// first): every later worktree operation of the run — a new scratch tree, a teammate's
/// worktree, removing the run's trees — removes the half-made entry, so the user's `git
/// worktree list` works again and nothing of it is left. Before, an empty `commondir` made
/// every `git worktree` command fail, and a locked entry survived `git worktree prune`.
#[tokio::test]
async fn a_worktree_add_killed_part_way_is_cleared_by_the_next_worktree_operation() {
    for empty_commondir in [true, false] {
        for operation in ["add_scratch", "ensure", "remove_worktrees"] {
            let dir = repo();
            let worktrees = worktrees(dir.path()).await;
            let base = worktrees.make_base().await.unwrap();
            let tree = worktrees.scratch_path("two");
            half_made_entry(dir.path(), &tree, empty_commondir);
            let case = format!("{operation}, empty commondir {empty_commondir}");
            match operation {
                "add_scratch" => {
                    let path = worktrees.add_scratch("one", &base.commit).await.unwrap();
                    assert_eq!(sh(&path, "head -1 a.txt"), "a1", "{case}");
                }
                "ensure" => {
                    worktrees.ensure("alice", &base.commit).await.unwrap();
                }
                _ => worktrees.remove_worktrees().await.unwrap(),
            }
            let listed = sh(dir.path(), "git worktree list --porcelain");
            assert!(!listed.contains(".gate-two"), "{case}: {listed}");
            assert!(!tree.exists(), "{case}");
            assert!(
                !dir.path().join(".git/worktrees/-gate-two").exists(),
                "{case}"
            );
        }
    }
}

#[tokio::test]
async fn checkpoints_restore_exactly_even_when_the_worktree_directory_was_lost() {
    let dir = repo();
    let worktrees = worktrees(dir.path()).await;
    let base = worktrees.make_base().await.unwrap();
    let path = worktrees.ensure("bob", &base.commit).await.unwrap();
    let unchanged = worktrees.checkpoint("bob").await.unwrap();
    assert_eq!(unchanged.commit, base.commit, "no change, no commit");
    sh(&path, "echo bob >> b.txt && echo n > new.txt && rm a.txt");
    let first = worktrees.checkpoint("bob").await.unwrap();
    assert_ne!(first.commit, base.commit);
    assert_eq!(
        sh(&path, "git status --porcelain"),
        "",
        "the worktree is clean after"
    );
    sh(&path, "echo stray > stray.txt && echo more >> b.txt");
    worktrees.restore("bob", &first).await.unwrap();
    assert_eq!(sh(&path, "ls"), "b.txt\nnew.txt");
    assert_eq!(sh(&path, "cat b.txt"), "b\nbob");
    std::fs::remove_dir_all(&path).unwrap();
    worktrees.restore("bob", &first).await.unwrap();
    assert_eq!(sh(&path, "ls"), "b.txt\nnew.txt");
    assert_eq!(sh(&path, "git rev-parse HEAD"), first.commit);
}

#[tokio::test]
async fn disjoint_changes_merge_clean_and_a_conflict_is_handed_over_then_merges() {
    let dir = repo();
    let worktrees = worktrees(dir.path()).await;
    let base = worktrees.make_base().await.unwrap();
    let lead = worktrees.ensure("lead", &base.commit).await.unwrap();
    let alice = worktrees.ensure("alice", &base.commit).await.unwrap();
    let bob = worktrees.ensure("bob", &base.commit).await.unwrap();
    sh(&alice, "sed -i 's/a1/alice/' a.txt");
    sh(&bob, "sed -i 's/a1/bob/' a.txt && echo bob > bob.txt");
    let alice_cp = worktrees.checkpoint("alice").await.unwrap();
    let bob_cp = worktrees.checkpoint("bob").await.unwrap();

    let check = worktrees
        .merge_check(&base.commit, &alice_cp.commit)
        .await
        .unwrap();
    assert!(check.conflicts.is_empty());
    let changes = worktrees
        .changes(&base.commit, &alice_cp.commit)
        .await
        .unwrap();
    assert_eq!(changes.files, ["a.txt"]);
    assert!(changes.diffstat.contains("a.txt"), "{}", changes.diffstat);
    let merged = worktrees
        .merge_commit(&base.commit, &alice_cp.commit, &check.tree, "merge alice")
        .await
        .unwrap();
    worktrees.advance_lead(&merged).await.unwrap();
    assert_eq!(sh(&lead, "head -1 a.txt"), "alice");

    // Bob's change to the same line conflicts with the new head: caught before any request.
    let check = worktrees
        .merge_check(&merged, &bob_cp.commit)
        .await
        .unwrap();
    assert_eq!(check.conflicts, ["a.txt"]);
    let files = worktrees.start_merge(&bob, &merged).await.unwrap();
    assert_eq!(files, ["a.txt"]);
    let handed = Checkpoint {
        commit: bob_cp.commit.clone(),
        merging: Some(merged.clone()),
    };
    // A restore of the hand-over (a crash) gives the same conflict back.
    worktrees.restore("bob", &handed).await.unwrap();
    assert!(sh(&bob, "cat a.txt").contains("<<<<<<<"));
    let unresolved = worktrees.checkpoint("bob").await.unwrap();
    let changes = worktrees
        .changes(&merged, &unresolved.commit)
        .await
        .unwrap();
    assert!(changes.conflict_markers >= 2, "{changes:?}");
    worktrees.restore("bob", &handed).await.unwrap();
    sh(&bob, "printf 'alice+bob\\na2\\na3\\n' > a.txt");
    let resolved = worktrees.checkpoint("bob").await.unwrap();
    assert_eq!(
        sh(
            &bob,
            &format!("git rev-list --parents -n1 {}", resolved.commit)
        )
        .split(' ')
        .count(),
        3,
        "the resolution records the integration head as its second parent"
    );
    let check = worktrees
        .merge_check(&merged, &resolved.commit)
        .await
        .unwrap();
    assert!(check.conflicts.is_empty(), "{check:?}");
    let changes = worktrees.changes(&merged, &resolved.commit).await.unwrap();
    assert_eq!(changes.conflict_markers, 0);
    let twice = worktrees
        .merge_commit(&merged, &resolved.commit, &check.tree, "merge bob")
        .await
        .unwrap();
    assert!(worktrees.contains(&twice, &resolved.commit).await.unwrap());
    assert!(!worktrees.contains(&merged, &resolved.commit).await.unwrap());

    // The result lands in the user's tree as uncommitted changes; applying twice is the same.
    assert!(worktrees.user_tree_matches(&base).await.unwrap());
    let index_before = sh(dir.path(), "git diff --cached --stat; git rev-parse HEAD");
    for _ in 0..2 {
        worktrees.apply_to_user_tree(&base, &twice).await.unwrap();
        assert_eq!(sh(dir.path(), "head -1 a.txt"), "alice+bob");
        assert_eq!(sh(dir.path(), "cat bob.txt"), "bob");
    }
    assert_eq!(
        sh(dir.path(), "git diff --cached --stat; git rev-parse HEAD"),
        index_before
    );
    assert_eq!(
        sh(dir.path(), "git status --porcelain"),
        "M a.txt\n?? bob.txt"
    );
    worktrees.remove_worktrees().await.unwrap();
    assert!(!lead.exists());
    assert_eq!(sh(dir.path(), "git worktree list | wc -l"), "1");
    assert!(
        !sh(dir.path(), "git branch --list 'muster/*'").is_empty(),
        "branches stay"
    );
}

#[tokio::test]
async fn a_workspace_subdirectory_maps_into_each_worktree() {
    let dir = repo();
    sh(
        dir.path(),
        "mkdir -p pkg/src && echo x > pkg/src/x && git add -A && git commit -qm pkg",
    );
    let sub = dir.path().join("pkg");
    let worktrees = match choose(None, &sub, &sub.join(".muster"), "s").await.unwrap() {
        Chosen::Worktrees(worktrees) => worktrees,
        Chosen::Shared { warning } => panic!("{warning:?}"),
    };
    let base = worktrees.make_base().await.unwrap();
    worktrees.ensure("alice", &base.commit).await.unwrap();
    let workspace = worktrees.workspace_of("alice");
    assert!(workspace.ends_with("alice/pkg"), "{}", workspace.display());
    assert!(workspace.join("src/x").is_file());
}

#[tokio::test]
async fn deletions_and_lead_checkpoints_follow_the_recorded_head() {
    let dir = repo();
    sh(
        dir.path(),
        "mkdir -p d/e && echo f > d/e/f && git add -A && git commit -qm d",
    );
    let worktrees = worktrees(dir.path()).await;
    let base = worktrees.make_base().await.unwrap();
    let lead = worktrees.ensure("lead", &base.commit).await.unwrap();
    assert_eq!(worktrees.lead_checkpoint(&base.commit).await.unwrap(), None);
    sh(&lead, "rm b.txt && rm -r d && echo g > g.txt");
    let head = worktrees
        .lead_checkpoint(&base.commit)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(sh(&lead, "git status --porcelain"), "");
    assert_eq!(sh(&lead, "git rev-parse HEAD"), head);
    for _ in 0..2 {
        worktrees.apply_to_user_tree(&base, &head).await.unwrap();
        assert!(!dir.path().join("b.txt").exists());
        assert!(
            !dir.path().join("d").exists(),
            "empty directories go with their files"
        );
        assert!(dir.path().join("g.txt").is_file());
    }
}

#[tokio::test]
async fn deleting_a_run_removes_its_worktrees_branches_and_base_and_nothing_else() {
    let dir = repo();
    let worktrees = worktrees(dir.path()).await;
    let base = worktrees.make_base().await.unwrap();
    worktrees.ensure("lead", &base.commit).await.unwrap();
    let alice = worktrees.ensure("alice", &base.commit).await.unwrap();
    sh(dir.path(), "git branch muster/other-run/alice");
    assert_eq!(
        worktrees.delete_run().await.unwrap(),
        3,
        "lead, alice and the base"
    );
    assert!(!alice.exists());
    let refs = sh(dir.path(), "git for-each-ref --format='%(refname)'");
    assert!(!refs.contains("brisk-otter"), "{refs}");
    assert!(refs.contains("refs/heads/muster/other-run/alice"), "{refs}");
    assert_eq!(sh(dir.path(), "git worktree list | wc -l"), "1");
    // Deleting again finds nothing left.
    assert_eq!(worktrees.delete_run().await.unwrap(), 0);
}

/// Merges `agent`'s checkpoint onto `head` as muster applies an approved merge; gives back
/// the merge commit and what [`Worktrees::changes`] and [`MergeAdds`] said it adds.
async fn merged_onto(
    worktrees: &Worktrees,
    head: &str,
    agent: &str,
    commit: &str,
) -> (String, Changes, String) {
    let changes = worktrees.changes(head, commit).await.unwrap();
    assert!(changes.conflicts.is_empty(), "{changes:?}");
    let repo = Git::new(worktrees.path_of("lead"));
    let adds = MergeAdds::of(&repo, head, commit).await.unwrap();
    let diff = adds.diff(&repo).await.unwrap();
    let check = worktrees.merge_check(head, commit).await.unwrap();
    let merged = worktrees
        .merge_commit(head, commit, &check.tree, &format!("merge {agent}"))
        .await
        .unwrap();
    // What it adds is exactly what the merge muster applies changes on the head, and the
    // command the mail and inbox print shows the same diff.
    let applied = repo
        .run(&["diff", "--no-ext-diff", "--no-color", head, &merged, "--"])
        .await
        .unwrap();
    assert_eq!(diff, applied);
    let shown = sh(
        &worktrees.path_of(agent),
        &format!(
            "{} --no-ext-diff --no-color",
            MergeAdds::command(head, commit)
        ),
    );
    assert_eq!(shown, diff.trim());
    (merged, changes, diff)
}

#[tokio::test]
async fn a_second_teammates_merge_adds_only_its_own_work_not_the_reverse_of_the_first() {
    let dir = repo();
    let worktrees = worktrees(dir.path()).await;
    let base = worktrees.make_base().await.unwrap();
    worktrees.ensure("lead", &base.commit).await.unwrap();
    let alice = worktrees.ensure("alice", &base.commit).await.unwrap();
    let bob = worktrees.ensure("bob", &base.commit).await.unwrap();
    sh(
        &alice,
        "sed -i 's/a1/SMALL_WORDS=alice/' a.txt && echo alice > alice.txt",
    );
    sh(&bob, "echo bob >> b.txt && echo bob > bob.txt");
    let alice_cp = worktrees.checkpoint("alice").await.unwrap();
    let bob_cp = worktrees.checkpoint("bob").await.unwrap();
    let (first, changes, _) =
        merged_onto(&worktrees, &base.commit, "alice", &alice_cp.commit).await;
    assert_eq!(changes.files, ["a.txt", "alice.txt"]);

    let (_, changes, diff) = merged_onto(&worktrees, &first, "bob", &bob_cp.commit).await;
    assert_eq!(changes.files, ["b.txt", "bob.txt"]);
    assert!(
        changes.diffstat.contains("2 files changed"),
        "{}",
        changes.diffstat
    );
    assert!(diff.contains("+bob"), "{diff}");
    assert!(
        !diff.contains("alice") && !diff.contains("SMALL_WORDS"),
        "the first teammate's merged work is not shown reversed: {diff}"
    );
}

#[tokio::test]
async fn a_teammate_that_merged_the_integration_branch_to_resolve_a_conflict_adds_its_resolution() {
    let dir = repo();
    let worktrees = worktrees(dir.path()).await;
    let base = worktrees.make_base().await.unwrap();
    worktrees.ensure("lead", &base.commit).await.unwrap();
    let alice = worktrees.ensure("alice", &base.commit).await.unwrap();
    let bob = worktrees.ensure("bob", &base.commit).await.unwrap();
    let carol = worktrees.ensure("carol", &base.commit).await.unwrap();
    sh(&alice, "sed -i 's/a1/alice/' a.txt");
    sh(&bob, "sed -i 's/a1/bob/' a.txt && echo bob > bob.txt");
    sh(&carol, "echo carol >> b.txt && echo carol > carol.txt");
    let alice_cp = worktrees.checkpoint("alice").await.unwrap();
    let bob_cp = worktrees.checkpoint("bob").await.unwrap();
    let carol_cp = worktrees.checkpoint("carol").await.unwrap();
    let (first, _, _) = merged_onto(&worktrees, &base.commit, "alice", &alice_cp.commit).await;

    // Bob conflicts with the new head and resolves it by merging the integration branch.
    let changes = worktrees.changes(&first, &bob_cp.commit).await.unwrap();
    assert_eq!(changes.conflicts, ["a.txt"]);
    worktrees.start_merge(&bob, &first).await.unwrap();
    sh(&bob, "printf 'alice+bob\\na2\\na3\\n' > a.txt");
    let resolved = worktrees.checkpoint("bob").await.unwrap();
    // Carol's merge lands meanwhile: the head moves past what bob merged.
    let (second, _, _) = merged_onto(&worktrees, &first, "carol", &carol_cp.commit).await;

    let (_, changes, diff) = merged_onto(&worktrees, &second, "bob", &resolved.commit).await;
    assert_eq!(changes.files, ["a.txt", "bob.txt"]);
    assert!(diff.contains("-alice\n+alice+bob"), "{diff}");
    assert!(
        !diff.contains("carol"),
        "what landed after bob's merge of the integration branch is not reversed: {diff}"
    );
}
