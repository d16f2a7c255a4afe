//! Worktree isolation through the `muster` binary, on real git repositories and the fake
//! model server: each teammate works on its own branch in its own worktree, a clean merge is
//! asked for and decided (the lead's `ReviewMerge`, a policy, a person), a conflict goes back
//! to its teammate, and the result reaches the user's tree — or a branch when the user changed
//! the tree meanwhile. Kill points inside a merge and the final apply resume to the same end.
//! Tests wait for processes and stdout lines, never on sleeps.

use std::path::Path;
use std::process::Output;

use muster_fake_llm::{Block, ScriptEntry};
use serde_json::{Value, json};

use super::common::{Running, command, fake, lines, muster, stderr, tool};

const WRITER: &str = "---\nname: writer\ndescription: Writes files.\npermissionMode: acceptEdits\n---\nYou write files.\n";

/// Runs git in `dir`, failing the test on an error; gives back its stdout.
pub(super) fn git(dir: &Path, args: &[&str]) -> String {
    let output = std::process::Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A git repository with one commit (README.md, the team file, the writer definition), and
/// `dirty` left uncommitted on top (path, content); its user trusted it (the team file's
/// policy approvers apply).
pub(super) fn repo(team: &str, dirty: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join(".muster/agents")).unwrap();
    std::fs::write(root.join(".muster/agents/writer.md"), WRITER).unwrap();
    std::fs::write(root.join("README.md"), "hello\n").unwrap();
    std::fs::write(root.join("muster.team.toml"), team).unwrap();
    std::fs::write(root.join("policy.toml"), "approve_all = true\n").unwrap();
    git(root, &["init", "-q", "-b", "main"]);
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "start"]);
    for (path, content) in dirty {
        std::fs::write(root.join(path), content).unwrap();
    }
    super::common::trust_blocking(root);
    dir
}

pub(super) fn team(approver: &str, names: &[&str]) -> String {
    let mut text = "name = \"builders\"\nisolation = \"worktree\"\n".to_owned();
    for name in names {
        text.push_str(&format!(
            "\n[[teammates]]\nname = \"{name}\"\ndefinition = \"writer\"\nplan_mode_required = false\napprover = \"{approver}\"\n"
        ));
    }
    text
}

pub(super) fn entry(value: Value) -> ScriptEntry {
    serde_json::from_value(value).unwrap()
}

fn reply(agent: &str, turn: u64, content: Vec<Block>) -> ScriptEntry {
    ScriptEntry::reply(agent, turn, content)
}

/// A reply to `agent` whenever nothing more specific matches.
pub(super) fn any_turn(agent: &str, text: &str) -> ScriptEntry {
    entry(
        json!({"agent": agent, "reply": {"content": [{"type": "text", "text": text}],
                 "stop_reason": "end_turn"}}),
    )
}

/// The lead's reply when a merge request from `from` arrives: it approves `ids` (an id not
/// requested yet, or decided already, only gets a refusal back).
pub(super) fn lead_merges(from: &str, ids: &[&str]) -> ScriptEntry {
    let calls: Vec<Value> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            json!({"type": "tool_use", "id": format!("toolu_merge_{from}_{i}"), "name": "ReviewMerge",
                   "input": {"request_id": id, "approve": true, "feedback": "good"}})
        })
        .collect();
    entry(
        json!({"agent": "lead", "when": {"mail_type": "merge_request", "from": from},
                 "reply": {"content": calls, "stop_reason": "tool_use"}}),
    )
}

/// The lead's first turn: one task per teammate.
fn lead_tasks(count: usize) -> ScriptEntry {
    let tasks = (0..count)
        .map(|i| {
            tool(
                "TaskCreate",
                json!({"subject": format!("part {i}"), "description": "Write your file."}),
            )
        })
        .collect();
    reply("lead", 1, tasks)
}

fn run_command(dir: &Path, base: &str) -> tokio::process::Command {
    command(
        dir,
        &[
            "run",
            "-p",
            "Build it.",
            "--base-url",
            base,
            "--output",
            "stream-json",
        ],
    )
}

async fn team_run(dir: &Path, base: &str) -> Output {
    super::common::output(run_command(dir, base)).await
}

/// [`team_run`] with every agent in `bypassPermissions`.
async fn bypassing_team_run(dir: &Path, base: &str) -> Output {
    let mut command = run_command(dir, base);
    command.args(["--permission-mode", "bypassPermissions"]);
    super::common::output(command).await
}

fn finished(output: &Output) -> Value {
    let events = lines(output);
    let last = events.last().cloned().unwrap_or_default();
    assert_eq!(
        last["type"],
        "run_finished",
        "{events:#?}\n{}",
        stderr(output)
    );
    last
}

pub(super) fn read(dir: &Path, path: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(path)).ok()
}

/// The run's slug (from its branches).
fn slug(dir: &Path) -> String {
    let branches = git(
        dir,
        &["branch", "--list", "muster/*", "--format=%(refname:short)"],
    );
    let first = branches.lines().next().expect("no muster branch");
    first.split('/').nth(1).unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn two_teammates_work_apart_and_both_merges_land_in_the_users_tree() {
    let dir = repo(
        &team("lead", &["one", "two"]),
        &[
            ("README.md", "hello\nlocal edit\n"),
            ("notes.txt", "untracked\n"),
        ],
    );
    let root = dir.path();
    let mut script = vec![
        lead_tasks(2),
        lead_merges("one", &["merge-one-1", "merge-two-1"]),
        lead_merges("two", &["merge-two-1", "merge-one-1"]),
        any_turn("lead", "Waiting for the team."),
    ];
    for name in ["one", "two"] {
        script.push(reply(
            name,
            1,
            vec![tool(
                "Write",
                json!({"file_path": format!("{name}.txt"), "content": format!("{name}\n")}),
            )],
        ));
        script.push(any_turn(name, "done"));
    }
    let fake = fake(script).await;
    let output = team_run(root, &fake.base_url()).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let end = finished(&output);
    assert_eq!(end["status"], "completed");
    assert_eq!(end["files_changed"], 2, "{end:#}");
    // Both results, uncommitted, over the user's own uncommitted work, on the same HEAD.
    assert_eq!(read(root, "one.txt").as_deref(), Some("one\n"));
    assert_eq!(read(root, "two.txt").as_deref(), Some("two\n"));
    assert_eq!(
        read(root, "README.md").as_deref(),
        Some("hello\nlocal edit\n")
    );
    assert_eq!(read(root, "notes.txt").as_deref(), Some("untracked\n"));
    assert_eq!(git(root, &["rev-list", "--count", "HEAD"]).trim(), "1");
    // Each teammate's branch holds only its own work, on the base (which had the dirty tree).
    let slug = slug(root);
    let one = format!("muster/{slug}/one");
    assert_eq!(git(root, &["show", &format!("{one}:one.txt")]), "one\n");
    assert_eq!(
        git(root, &["show", &format!("{one}:notes.txt")]),
        "untracked\n"
    );
    let files = git(root, &["ls-tree", "--name-only", &one]);
    assert!(!files.contains("two.txt"), "{files}");
    let lead = format!("muster/{slug}/lead");
    let files = git(root, &["ls-tree", "--name-only", &lead]);
    assert!(
        files.contains("one.txt") && files.contains("two.txt"),
        "{files}"
    );
    // Merge decisions and merges are on the stream; the worktrees are gone, the branches stay.
    let events = lines(&output);
    for agent in ["one", "two"] {
        assert!(
            events.iter().any(|e| e["type"] == "approval_decided"
                && e["kind"] == "merge"
                && e["agent"] == agent
                && e["approved"] == true),
            "{events:#?}"
        );
        assert!(
            events
                .iter()
                .any(|e| e["type"] == "merge_applied" && e["agent"] == agent),
            "{events:#?}"
        );
    }
    assert!(!root.join(format!(".muster/worktrees/{slug}/one")).exists());
    let status = git(root, &["status", "--porcelain"]);
    assert!(!status.contains("worktrees"), "{status}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_conflict_goes_back_to_its_teammate_and_its_resolution_is_merged() {
    let dir = repo(&team("policy:policy.toml", &["one", "two"]), &[]);
    let root = dir.path();
    let fake = fake(vec![
        lead_tasks(2),
        any_turn("lead", "Waiting for the team."),
        reply(
            "one",
            1,
            vec![tool(
                "Write",
                json!({"file_path": "README.md", "content": "hello\none\n"}),
            )],
        ),
        any_turn("one", "done"),
        entry(json!({"agent": "two", "turn": 1, "fault": {"hold": "two"},
                     "reply": {"content": [{"type": "tool_use", "id": "toolu_two_1", "name": "Write",
                               "input": {"file_path": "README.md", "content": "hello\ntwo\n"}}],
                               "stop_reason": "tool_use"}})),
        reply("two", 2, vec![Block::text("done")]),
        // Told of the conflict, it resolves the file keeping both sides.
        reply(
            "two",
            3,
            vec![tool(
                "Write",
                json!({"file_path": "README.md", "content": "hello\none\ntwo\n"}),
            )],
        ),
        any_turn("two", "resolved"),
    ])
    .await;
    let mut run = Running::spawn(run_command(root, &fake.base_url()));
    run.until("one's merge", |e| {
        e["type"] == "merge_applied" && e["agent"] == "one"
    })
    .await;
    fake.open_gate("two");
    assert_eq!(run.finish().await, Some(0), "{:#?}", run.events);
    let end = run.events.last().unwrap();
    assert_eq!(end["status"], "completed", "{end:#}");
    assert_eq!(
        read(root, "README.md").as_deref(),
        Some("hello\none\ntwo\n")
    );
    // The conflict was told to two, which asked again: two merge requests from one agent
    // would mean the first was sent despite the conflict.
    let notice = run
        .events
        .iter()
        .find(|e| e["type"] == "mail_sent" && e["to"] == "two" && e["kind"] == "text")
        .unwrap_or_else(|| panic!("no conflict notice: {:#?}", run.events));
    assert_eq!(notice["from"], "lead");
    let requests: Vec<&Value> = run
        .events
        .iter()
        .filter(|e| e["type"] == "mail_sent" && e["kind"] == "merge_request" && e["from"] == "two")
        .collect();
    assert_eq!(requests.len(), 1, "{requests:#?}");
    // Its branch holds the merge of the integration branch it resolved.
    let slug = slug(root);
    let history = git(root, &["log", "--format=%P", &format!("muster/{slug}/two")]);
    assert!(
        history.lines().any(|p| p.split_whitespace().count() == 2),
        "no merge commit on two's branch: {history}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_merge_a_person_decides_stops_the_run_with_exit_5_and_lands_after_approve_and_resume() {
    let dir = repo(&team("human", &["one"]), &[]);
    let root = dir.path();
    let fake = fake(vec![
        lead_tasks(1),
        any_turn("lead", "Waiting for the team."),
        reply(
            "one",
            1,
            vec![tool(
                "Write",
                json!({"file_path": "one.txt", "content": "one\n"}),
            )],
        ),
        any_turn("one", "done"),
    ])
    .await;
    let output = team_run(root, &fake.base_url()).await;
    assert_eq!(output.status.code(), Some(5), "{}", stderr(&output));
    let end = finished(&output);
    assert_eq!(end["waiting_on"], json!(["merge-one-1"]), "{end:#}");
    assert!(
        read(root, "one.txt").is_none(),
        "nothing lands before the decision"
    );
    let events = lines(&output);
    assert!(events.iter().any(|e| e["type"] == "approval_requested"
        && e["kind"] == "merge"
        && e["responder"] == "human"));
    let approve = muster(root, &["approve", "merge-one-1"]).await;
    assert!(approve.status.success(), "{}", stderr(&approve));
    let resumed = muster(
        root,
        &[
            "resume",
            "--base-url",
            &fake.base_url(),
            "--output",
            "stream-json",
        ],
    )
    .await;
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    assert_eq!(read(root, "one.txt").as_deref(), Some("one\n"));
}

#[tokio::test(flavor = "multi_thread")]
async fn when_the_user_edits_the_tree_during_the_run_the_result_stays_on_the_integration_branch() {
    let dir = repo(&team("policy:policy.toml", &["one"]), &[]);
    let root = dir.path();
    let fake = fake(vec![
        lead_tasks(1),
        any_turn("lead", "Waiting for the team."),
        entry(json!({"agent": "one", "turn": 1, "fault": {"hold": "one"},
                     "reply": {"content": [{"type": "tool_use", "id": "toolu_one_1", "name": "Write",
                               "input": {"file_path": "one.txt", "content": "one\n"}}],
                               "stop_reason": "tool_use"}})),
        any_turn("one", "done"),
    ])
    .await;
    let mut run = Running::spawn(run_command(root, &fake.base_url()));
    fake.gate_reached("one", 1).await;
    std::fs::write(root.join("README.md"), "hello\nmine\n").unwrap();
    fake.open_gate("one");
    assert_eq!(run.finish().await, Some(0), "{:#?}", run.events);
    let end = run.events.last().unwrap();
    assert_eq!(end["status"], "completed");
    let branch = end["result_branch"]
        .as_str()
        .unwrap_or_else(|| panic!("{end:#}"));
    assert_eq!(read(root, "README.md").as_deref(), Some("hello\nmine\n"));
    assert!(read(root, "one.txt").is_none());
    assert_eq!(git(root, &["show", &format!("{branch}:one.txt")]), "one\n");
}

#[cfg(feature = "failpoints")]
/// A run killed at `failpoint` (inside a merge, or inside the final apply), then resumed,
/// ends as an uncut run does: both teammates' files in the user's tree. With
/// `lose_worktrees`, the worktree directories are deleted before the resume.
async fn killed_and_resumed(failpoint: &str, lose_worktrees: bool) {
    let dir = repo(&team("policy:policy.toml", &["one", "two"]), &[]);
    let root = dir.path();
    let mut script = vec![lead_tasks(2), any_turn("lead", "Waiting for the team.")];
    for name in ["one", "two"] {
        script.push(reply(
            name,
            1,
            vec![tool(
                "Write",
                json!({"file_path": format!("{name}.txt"), "content": format!("{name}\n")}),
            )],
        ));
        script.push(any_turn(name, "done"));
    }
    let fake = fake(script).await;
    let mut killed = run_command(root, &fake.base_url());
    killed.env("MUSTER_FAILPOINT", failpoint);
    let output = super::common::output(killed).await;
    assert_eq!(
        output.status.code(),
        None,
        "killed at {failpoint}: {}",
        stderr(&output)
    );
    if lose_worktrees {
        // Moved away rather than deleted: a git child of the killed process may still be
        // finishing inside; for the resume the directory is gone either way.
        let lost = tempfile::tempdir().unwrap();
        std::fs::rename(root.join(".muster/worktrees"), lost.path().join("lost")).unwrap();
    }
    let resumed = muster(
        root,
        &[
            "resume",
            "--base-url",
            &fake.base_url(),
            "--output",
            "stream-json",
        ],
    )
    .await;
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    assert_eq!(read(root, "one.txt").as_deref(), Some("one\n"));
    assert_eq!(read(root, "two.txt").as_deref(), Some("two\n"));
    assert_eq!(git(root, &["rev-list", "--count", "HEAD"]).trim(), "1");
}

#[cfg(feature = "failpoints")]
#[tokio::test(flavor = "multi_thread")]
async fn a_kill_inside_a_merge_resumes_to_the_same_end() {
    killed_and_resumed("merge_apply", false).await;
}

#[cfg(feature = "failpoints")]
#[tokio::test(flavor = "multi_thread")]
async fn a_kill_inside_a_merge_with_the_worktrees_lost_resumes_to_the_same_end() {
    killed_and_resumed("merge_apply@2", true).await;
}

#[cfg(feature = "failpoints")]
#[tokio::test(flavor = "multi_thread")]
async fn a_kill_inside_the_final_apply_resumes_to_the_same_end() {
    killed_and_resumed("final_apply", false).await;
}

#[cfg(feature = "failpoints")]
#[tokio::test(flavor = "multi_thread")]
async fn a_kill_right_after_a_worktree_is_made_resumes_to_the_same_end() {
    killed_and_resumed("worktree_made@2", false).await;
}

#[cfg(feature = "failpoints")]
#[tokio::test(flavor = "multi_thread")]
async fn a_kill_between_a_checkpoint_commit_and_its_turn_resumes_to_the_same_end() {
    killed_and_resumed("checkpoint", true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn worktree_isolation_asked_for_outside_a_repository_is_refused_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".muster/agents")).unwrap();
    std::fs::write(dir.path().join(".muster/agents/writer.md"), WRITER).unwrap();
    std::fs::write(dir.path().join("muster.team.toml"), team("lead", &["one"])).unwrap();
    let output = team_run(dir.path(), "http://127.0.0.1:9").await;
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let text = stderr(&output);
    assert!(text.contains("isolation"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn two_teammates_bash_commands_run_at_the_same_time_in_their_own_worktrees() {
    let meeting = tempfile::tempdir().unwrap();
    let dir = repo(&team("policy:policy.toml", &["one", "two"]), &[]);
    let root = dir.path();
    // The meeting point lies outside both worktrees: the sandbox lets them write it only
    // because the settings add it.
    std::fs::write(
        root.join(".muster/settings.toml"),
        format!("[sandbox]\nwritable = \"{}\"\n", meeting.path().display()),
    )
    .unwrap();
    // A project's own `[sandbox] writable` applies only in a project its user trusted.
    super::common::trust(root).await;
    std::fs::write(
        root.join(".muster/agents/writer.md"),
        WRITER.replace("acceptEdits", "bypassPermissions"),
    )
    .unwrap();
    // Each command says it is here, then waits for the other's: under a shared workspace's
    // one-at-a-time Bash both would give up after 20 s and fail.
    let meet = |me: &str, other: &str| {
        let at = meeting.path().display();
        format!(
            "touch {at}/{me}; pwd > {me}.where; for i in $(seq 2000); do [ -e {at}/{other} ] && exit 0; sleep 0.01; done; exit 1"
        )
    };
    let mut script = vec![lead_tasks(2), any_turn("lead", "Waiting for the team.")];
    for (me, other) in [("one", "two"), ("two", "one")] {
        script.push(reply(
            me,
            1,
            vec![tool("Bash", json!({"command": meet(me, other)}))],
        ));
        script.push(any_turn(me, "done"));
    }
    let fake = fake(script).await;
    let output = bypassing_team_run(root, &fake.base_url()).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let events = lines(&output);
    let bash: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_call" && e["tool"] == "Bash")
        .collect();
    assert_eq!(bash.len(), 2, "{events:#?}");
    assert!(bash.iter().all(|e| e["is_error"] == false), "{bash:#?}");
    // Each ran in its own worktree; both files reached the user's tree through the merges.
    let slug = slug(root);
    for name in ["one", "two"] {
        let wrote = read(root, &format!("{name}.where")).unwrap();
        assert!(
            wrote
                .trim_end()
                .ends_with(&format!(".muster/worktrees/{slug}/{name}")),
            "{name} ran in {wrote}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rejected_merge_goes_back_with_its_feedback_and_the_next_revision_is_merged() {
    let dir = repo(&team("policy:policy.toml", &["one"]), &[]);
    let root = dir.path();
    std::fs::write(
        root.join("policy.toml"),
        "denied_paths = [\"secret.txt\"]\n",
    )
    .unwrap();
    super::common::trust(root).await;
    std::fs::write(
        root.join(".muster/agents/writer.md"),
        WRITER.replace("acceptEdits", "bypassPermissions"),
    )
    .unwrap();
    let fake = fake(vec![
        lead_tasks(1),
        any_turn("lead", "Waiting for the team."),
        reply(
            "one",
            1,
            vec![
                tool("Write", json!({"file_path": "one.txt", "content": "one\n"})),
                tool("Write", json!({"file_path": "secret.txt", "content": "key\n"})),
            ],
        ),
        reply("one", 2, vec![Block::text("done")]),
        entry(json!({"agent": "one", "when": {"mail_type": "merge_response"},
                     "reply": {"content": [{"type": "tool_use", "id": "toolu_one_rm", "name": "Bash",
                               "input": {"command": "rm secret.txt"}}], "stop_reason": "tool_use"}})),
        any_turn("one", "removed the secret"),
    ])
    .await;
    let output = bypassing_team_run(root, &fake.base_url()).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let events = lines(&output);
    let decided: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "approval_decided" && e["kind"] == "merge")
        .collect();
    assert_eq!(decided.len(), 2, "{decided:#?}");
    assert_eq!(decided[0]["request_id"], "merge-one-1");
    assert_eq!(decided[0]["approved"], false);
    assert!(
        decided[0]["feedback"]
            .as_str()
            .unwrap()
            .contains("`secret.txt` matches a denied path"),
        "{decided:#?}"
    );
    assert_eq!(decided[1]["request_id"], "merge-one-2");
    assert_eq!(decided[1]["approved"], true);
    assert_eq!(read(root, "one.txt").as_deref(), Some("one\n"));
    assert!(
        read(root, "secret.txt").is_none(),
        "a rejected file never lands"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forked_run_works_on_its_own_branches_from_the_recorded_checkpoints() {
    let dir = repo(&team("human", &["one"]), &[]);
    let root = dir.path();
    let fake = fake(vec![
        lead_tasks(1),
        any_turn("lead", "Waiting for the team."),
        reply(
            "one",
            1,
            vec![tool(
                "Write",
                json!({"file_path": "one.txt", "content": "one\n"}),
            )],
        ),
        any_turn("one", "done"),
    ])
    .await;
    let output = team_run(root, &fake.base_url()).await;
    assert_eq!(output.status.code(), Some(5), "{}", stderr(&output));
    let original = finished(&output)["run_id"].as_str().unwrap().to_owned();
    let original_slug = slug(root);
    // The worktrees are deleted: the fork rebuilds its own from the store's checkpoints.
    let lost = tempfile::tempdir().unwrap();
    std::fs::rename(root.join(".muster/worktrees"), lost.path().join("lost")).unwrap();
    let forked = muster(root, &["fork", &original]).await;
    assert_eq!(forked.status.code(), Some(0), "{}", stderr(&forked));
    let text = String::from_utf8_lossy(&forked.stdout).into_owned();
    let fork = text
        .split(" as ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("{text}"))
        .to_owned();
    let approve = muster(root, &["approve", "merge-one-1", "--run", &fork]).await;
    assert!(approve.status.success(), "{}", stderr(&approve));
    let resumed = muster(
        root,
        &[
            "resume",
            &fork,
            "--base-url",
            &fake.base_url(),
            "--output",
            "stream-json",
        ],
    )
    .await;
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    assert_eq!(read(root, "one.txt").as_deref(), Some("one\n"));
    let branches = git(
        root,
        &["branch", "--list", "muster/*", "--format=%(refname:short)"],
    );
    let slugs: std::collections::BTreeSet<&str> = branches
        .lines()
        .filter_map(|b| b.split('/').nth(1))
        .collect();
    assert_eq!(slugs.len(), 2, "the fork has its own branches: {branches}");
    assert!(slugs.contains(original_slug.as_str()), "{branches}");
    // The original still waits for its own decision.
    let store = super::common::open_store(root);
    let request = store
        .request(&original, "merge-one-1")
        .await
        .unwrap()
        .unwrap();
    assert!(request.response.is_none(), "{request:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_run_names_the_branch_holding_what_was_merged_and_leaves_the_tree_alone() {
    let dir = repo(&team("policy:policy.toml", &["one"]), &[]);
    let root = dir.path();
    let fake = fake(vec![
        lead_tasks(1),
        entry(
            json!({"agent": "lead", "when": {"mail_type": "idle_notification", "from": "one"},
                     "reply": {"content": [
                         {"type": "tool_use", "id": "toolu_lead_fail_1", "name": "TaskCreate",
                          "input": {"subject": "impossible", "description": "It cannot be done."}},
                         {"type": "tool_use", "id": "toolu_lead_fail_2", "name": "TaskUpdate",
                          "input": {"task_id": 2, "status": "failed"}}],
                     "stop_reason": "tool_use"}}),
        ),
        any_turn("lead", "Waiting for the team."),
        reply(
            "one",
            1,
            vec![tool(
                "Write",
                json!({"file_path": "one.txt", "content": "one\n"}),
            )],
        ),
        any_turn("one", "done"),
    ])
    .await;
    let output = team_run(root, &fake.base_url()).await;
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let end = finished(&output);
    assert_eq!(end["status"], "failed", "{end:#}");
    let branch = end["result_branch"]
        .as_str()
        .unwrap_or_else(|| panic!("{end:#}"));
    assert_eq!(git(root, &["show", &format!("{branch}:one.txt")]), "one\n");
    assert!(
        read(root, "one.txt").is_none(),
        "a failed run applies nothing"
    );
}

/// Runs `script` with bash in `dir`; gives back its stdout.
fn bash(dir: &Path, script: &str) -> String {
    let output = std::process::Command::new("bash")
        .current_dir(dir)
        .args(["-ceu", script])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A run where `one` (approved by policy) changes README.md and is merged, then `two`
/// (approved by `two_approver`) writes two.txt and asks for its merge onto that new head.
/// Gives back the repository, the fake model server and the run's events.
async fn second_teammates_merge(
    two_approver: &str,
    lead_on_merge: Vec<ScriptEntry>,
    exit: i32,
) -> (
    tempfile::TempDir,
    muster_fake_llm::FakeLlmHandle,
    Vec<Value>,
) {
    let team = format!(
        "name = \"builders\"\nisolation = \"worktree\"\n\
        [[teammates]]\nname = \"one\"\ndefinition = \"writer\"\nplan_mode_required = false\napprover = \"policy:policy.toml\"\n\
        [[teammates]]\nname = \"two\"\ndefinition = \"writer\"\nplan_mode_required = false\napprover = \"{two_approver}\"\n"
    );
    let dir = repo(&team, &[]);
    let mut script = lead_on_merge;
    script.extend([
        lead_tasks(2),
        any_turn("lead", "Waiting for the team."),
        reply(
            "one",
            1,
            vec![tool(
                "Write",
                json!({"file_path": "README.md", "content": "hello\nSMALL_WORDS=one\n"}),
            )],
        ),
        any_turn("one", "done"),
        // Two starts only once one's merge has landed, so its request goes onto that head.
        entry(json!({"agent": "two", "turn": 1, "fault": {"hold": "two"},
                     "reply": {"content": [{"type": "tool_use", "id": "toolu_two_1", "name": "Write",
                               "input": {"file_path": "two.txt", "content": "two\n"}}],
                               "stop_reason": "tool_use"}})),
        any_turn("two", "done"),
    ]);
    let fake = fake(script).await;
    let mut run = Running::spawn(run_command(dir.path(), &fake.base_url()));
    run.until("one's merge", |e| {
        e["type"] == "merge_applied" && e["agent"] == "one"
    })
    .await;
    fake.open_gate("two");
    assert_eq!(run.finish().await, Some(exit), "{:#?}", run.events);
    let events = std::mem::take(&mut run.events);
    (dir, fake, events)
}

/// Asserts `diff` is what two's merge adds: two.txt, and none of one's merged work reversed.
fn only_twos_work(diff: &str) {
    assert!(diff.contains("+two"), "{diff}");
    assert!(
        !diff.contains("SMALL_WORDS") && !diff.contains("README.md"),
        "one's merged work is not shown reversed: {diff}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_leads_merge_mail_shows_what_a_second_teammates_merge_adds_and_how_to_see_it() {
    let (dir, fake, _) =
        second_teammates_merge("lead", vec![lead_merges("two", &["merge-two-1"])], 0).await;
    let mail = fake
        .requests()
        .iter()
        .filter(|r| r.agent.as_deref() == Some("lead"))
        .filter_map(|r| {
            let content = r.body["messages"].as_array()?.last()?["content"].as_array()?;
            Some(
                content
                    .iter()
                    .filter_map(|b| b["text"].as_str())
                    .collect::<String>(),
            )
        })
        .find(|text| text.contains("Merge request merge-two-1"))
        .expect("the lead got two's merge request");
    assert!(mail.contains("two.txt | 1 +"), "{mail}");
    assert!(!mail.contains("README.md |"), "{mail}");
    let marker = "The same diff, in your worktree: `";
    let start = mail.find(marker).unwrap_or_else(|| panic!("{mail}")) + marker.len();
    let command = &mail[start..start + mail[start..].find('`').unwrap()];
    only_twos_work(&bash(dir.path(), command));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_person_sees_what_a_second_teammates_merge_adds_in_the_inbox_and_the_page() {
    let (dir, _fake, events) = second_teammates_merge("human", Vec::new(), 5).await;
    let root = dir.path();
    let run_id = events.last().unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let serve = super::serve_cli::Serve::start(root).await;
    let cookie = serve.sign_in().await;
    let page = serve
        .get(&cookie, &format!("/runs/{run_id}/requests/merge-two-1"))
        .await
        .text()
        .await
        .unwrap();
    only_twos_work(&page);
    assert!(page.contains("two.txt | 1 +"), "{page}");

    // The cockpit shows two's branch and what merging its newest checkpoint adds, from the
    // same function: the run page's diffstat and the agent's diff page.
    let run_page = serve
        .get(&cookie, &format!("/runs/{run_id}"))
        .await
        .text()
        .await
        .unwrap();
    let two_row = &run_page[run_page.find("id=\"agent-two\"").expect("two's row")..];
    let two_row = &two_row[..two_row.find("</tr>").unwrap()];
    assert!(
        two_row.contains("/two</code>") && two_row.contains("two.txt | 1 +"),
        "{two_row}"
    );
    let agent_diff = serve
        .get(&cookie, &format!("/runs/{run_id}/agents/two/diff"))
        .await
        .text()
        .await
        .unwrap();
    only_twos_work(&agent_diff);

    // `muster inbox human` says how to see the same diff.
    let inbox = muster(root, &["inbox", "human"]).await;
    let text = String::from_utf8_lossy(&inbox.stdout).into_owned();
    let marker = "What merge-two-1 adds: `";
    let start = text.find(marker).unwrap_or_else(|| panic!("{text}")) + marker.len();
    let command = &text[start..start + text[start..].find('`').unwrap()];
    only_twos_work(&bash(root, command));
}

const BYPASSER: &str = "---\nname: bypasser\ndescription: Runs anything.\npermissionMode: bypassPermissions\n---\nYou run anything.\n";

/// The tool results `agent` got back in the request of `turn`, joined.
fn tool_results(fake: &muster_fake_llm::FakeLlmHandle, agent: &str, turn: u64) -> Vec<String> {
    let request = fake
        .requests()
        .into_iter()
        .find(|r| r.agent.as_deref() == Some(agent) && r.turn == Some(turn))
        .unwrap_or_else(|| panic!("no request of {agent} turn {turn}"));
    let messages = request.body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let last = messages.last().cloned().unwrap_or_default();
    last["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|block| block["type"] == "tool_result")
        .map(|block| block["content"].to_string())
        .collect()
}

/// Issue 33: Claude Code's deny rules of each anchor form (`./x`, `/x` from the project's file,
/// a bare glob, `//abs`) and a Bash prefix rule hold for a teammate in its worktree, in
/// `bypassPermissions`; a teammate that rewrites `.claude/settings.json` gains nothing: its
/// `Write` asks (the policy approver refuses it), its Bash write hits the sandbox's read-only
/// bind, and a settings file it creates in its worktree is never read by the run.
#[tokio::test(flavor = "multi_thread")]
async fn a_teammate_in_bypass_keeps_the_users_deny_rules_and_cannot_rewrite_them() {
    let outside = tempfile::tempdir().unwrap();
    let outside_file = outside.path().join("outside.txt");
    std::fs::write(&outside_file, "outside\n").unwrap();
    let settings = json!({"permissions": {"deny": [
        "Read(./.env)",
        "Read(/secrets.txt)",
        "Read(*.pem)",
        format!("Read(/{}/**)", outside.path().display()),
        "Bash(curl:*)",
    ]}});
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join(".muster/agents")).unwrap();
    std::fs::create_dir_all(root.join(".claude")).unwrap();
    std::fs::create_dir_all(root.join("keys")).unwrap();
    std::fs::write(root.join(".muster/agents/bypasser.md"), BYPASSER).unwrap();
    std::fs::write(root.join(".claude/settings.json"), settings.to_string()).unwrap();
    for (path, text) in [
        ("README.md", "hello\n"),
        (".env", "SECRET=1\n"),
        ("secrets.txt", "s3cret\n"),
        ("keys/a.pem", "KEY\n"),
        (
            "policy.toml",
            "approve_all = true\n[permissions]\ndeny = [\"Write\"]\n",
        ),
    ] {
        std::fs::write(root.join(path), text).unwrap();
    }
    std::fs::write(
        root.join("muster.team.toml"),
        "name = \"builders\"\nisolation = \"worktree\"\n\n[[teammates]]\nname = \"one\"\n\
         definition = \"bypasser\"\nplan_mode_required = false\napprover = \"policy:policy.toml\"\n",
    )
    .unwrap();
    git(root, &["init", "-q", "-b", "main"]);
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "start"]);
    super::common::trust_blocking(root);
    let read = |path: &str| tool("Read", json!({"file_path": path}));
    let bash = |command: &str| tool("Bash", json!({"command": command}));
    let fake = fake(vec![
        lead_tasks(1),
        any_turn("lead", "Waiting for the team."),
        reply(
            "one",
            1,
            vec![
                read(".env"),
                read("secrets.txt"),
                read("keys/a.pem"),
                read(&outside_file.display().to_string()),
                bash("curl -s http://127.0.0.1:9"),
            ],
        ),
        reply(
            "one",
            2,
            vec![
                tool(
                    "Write",
                    json!({"file_path": ".claude/settings.json", "content": "{}"}),
                ),
                bash("printf '{}' > .claude/settings.json"),
                bash(
                    r#"printf '{"permissions": {"deny": ["Read(README.md)"]}}' > .claude/settings.local.json"#,
                ),
            ],
        ),
        reply("one", 3, vec![read(".env"), read("README.md")]),
        any_turn("one", "done"),
    ])
    .await;
    let output = bypassing_team_run(root, &fake.base_url()).await;
    let end = finished(&output);
    // The teammate created `.claude/settings.local.json` (nothing existed to bind read-only):
    // its merge waits for a person, whoever approves merges otherwise.
    assert_eq!(
        end["status"],
        "awaiting_decision",
        "{end:#}\n{}",
        stderr(&output)
    );
    assert_eq!(end["waiting_on"], json!(["merge-one-1"]), "{end:#}");
    assert!(!root.join(".claude/settings.local.json").exists());

    let denied = tool_results(&fake, "one", 2);
    let expected = [
        "deny rule `Read(./.env)`",
        "deny rule `Read(/secrets.txt)`",
        "deny rule `Read(*.pem)`",
        "deny rule `Read(/",
        "deny rule `Bash(curl:*)`",
    ];
    assert_eq!(denied.len(), expected.len(), "{denied:#?}");
    for (result, rule) in denied.iter().zip(expected) {
        assert!(result.contains(rule), "expected {rule}: {result}");
    }
    let rewrites = tool_results(&fake, "one", 3);
    assert_eq!(rewrites.len(), 3, "{rewrites:#?}");
    assert!(
        rewrites[0].contains("denied by policy rule `Write`"),
        "{}",
        rewrites[0]
    );
    assert!(
        !rewrites[1].contains("exit code 0") && rewrites[1].to_lowercase().contains("read-only"),
        "{}",
        rewrites[1]
    );
    let after = tool_results(&fake, "one", 4);
    assert!(
        after[0].contains("deny rule `Read(./.env)`"),
        "{}",
        after[0]
    );
    assert!(after[1].contains("hello"), "{}", after[1]);
    // A person or approver was asked about the protected write; the policy refused it.
    let events = lines(&output);
    assert!(
        events
            .iter()
            .any(|e| e.to_string().contains("protected file")),
        "{events:#?}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join(".claude/settings.json")).unwrap(),
        settings.to_string()
    );
}
