//! Test-gated merges through the `muster` binary on a real git repository: the team file's
//! `[merge] test` runs on the merged result in a scratch worktree. Two teammates whose edits
//! each pass alone but break the tests together (a semantic conflict, no textual one) both
//! ask for their merge; the first lands, the second is tested again on the moved head, fails,
//! goes back to its teammate with the output, is fixed and lands. Tests wait for processes,
//! never on sleeps.

use std::path::Path;

use muster_fake_llm::{Block, ScriptEntry};
use serde_json::{Value, json};

use super::common::{Running, fake, lines, muster, stderr, tool};

const WRITER: &str = "---\nname: writer\ndescription: Writes files.\npermissionMode: acceptEdits\n---\nYou write files.\n";

/// Fails only when both teammates' files are present and neither knows of the other.
const TEST: &str = "test ! -f one.txt || test ! -f two.txt || grep -q compatible one.txt two.txt || { echo 'one.txt and two.txt disagree' >&2; exit 1; }";

fn git(dir: &Path, args: &[&str]) -> String {
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

/// A repository with one commit: the team (two writers, merges decided by `approver`) with
/// its `[merge] test`; trusted when `trusted`.
fn repo(trusted: bool, approver: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join(".muster/agents")).unwrap();
    std::fs::write(root.join(".muster/agents/writer.md"), WRITER).unwrap();
    std::fs::write(root.join("README.md"), "hello\n").unwrap();
    let mut team = format!(
        "name = \"builders\"\nisolation = \"worktree\"\n\n[merge]\ntest = \"{}\"\ntest_timeout = 60\n",
        TEST.replace('\\', "\\\\").replace('"', "\\\"")
    );
    for name in ["one", "two"] {
        team.push_str(&format!(
            "\n[[teammates]]\nname = \"{name}\"\ndefinition = \"writer\"\nplan_mode_required = false\napprover = \"{approver}\"\n"
        ));
    }
    std::fs::write(root.join("muster.team.toml"), team).unwrap();
    git(root, &["init", "-q", "-b", "main"]);
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "start"]);
    if trusted {
        super::common::trust_blocking(root);
    }
    dir
}

fn any_turn(agent: &str, text: &str) -> ScriptEntry {
    let mut entry = ScriptEntry::reply(agent, 0, vec![Block::text(text)]);
    entry.turn = None;
    entry
}

fn write(agent: &str, turn: u64, path: &str, content: &str) -> ScriptEntry {
    ScriptEntry::reply(
        agent,
        turn,
        vec![tool(
            "Write",
            json!({"file_path": path, "content": content}),
        )],
    )
}

fn script() -> Vec<ScriptEntry> {
    let tasks = (0..2)
        .map(|i| {
            tool(
                "TaskCreate",
                json!({"subject": format!("part {i}"), "description": "Write your file."}),
            )
        })
        .collect();
    vec![
        ScriptEntry::reply("lead", 1, tasks),
        any_turn("lead", "Waiting for the team."),
        write("one", 1, "one.txt", "one\n"),
        ScriptEntry::reply("one", 2, vec![Block::text("done")]),
        write("two", 1, "two.txt", "two\n"),
        ScriptEntry::reply("two", 2, vec![Block::text("done")]),
        // The one told the merged result fails the tests makes its file agree.
        write("one", 3, "one.txt", "one, compatible with two\n"),
        write("two", 3, "two.txt", "two, compatible with one\n"),
        any_turn("one", "fixed"),
        any_turn("two", "fixed"),
    ]
}

async fn run(root: &Path, base: &str, args: &[&str]) -> std::process::Output {
    let mut all = args.to_vec();
    all.extend(["--base-url", base, "--output", "stream-json"]);
    muster(root, &all).await
}

/// The ids a run's end waits on, sorted (requests are sent in either order).
fn waiting_on(output: &std::process::Output) -> Vec<String> {
    let end = lines(output).last().cloned().unwrap_or_default();
    let mut ids: Vec<String> = end["waiting_on"]
        .as_array()
        .unwrap_or_else(|| panic!("not waiting: {end:#}"))
        .iter()
        .map(|id| id.as_str().unwrap().to_owned())
        .collect();
    ids.sort_unstable();
    ids
}

#[tokio::test(flavor = "multi_thread")]
async fn a_semantic_conflict_lands_one_merge_and_sends_the_other_back_until_it_is_fixed() {
    let dir = repo(true, "lead");
    let root = dir.path();
    // The lead approves every merge it is asked for; its first answer is held until both
    // teammates asked (both tested on the base, each passing alone).
    let ids = ["merge-one-1", "merge-two-1", "merge-one-2", "merge-two-2"];
    let reviews: Vec<Value> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            json!({"type": "tool_use", "id": format!("toolu_review_{i}"), "name": "ReviewMerge",
                   "input": {"request_id": id, "approve": true}})
        })
        .collect();
    let mut script = script();
    script.insert(
        0,
        serde_json::from_value(
            json!({"agent": "lead", "when": {"mail_type": "merge_request"},
            "fault": {"hold": "lead"},
            "reply": {"content": reviews, "stop_reason": "tool_use"}}),
        )
        .unwrap(),
    );
    let fake = fake(script).await;
    let mut run = Running::spawn(super::common::command(
        root,
        &[
            "run",
            "-p",
            "Build it.",
            "--base-url",
            &fake.base_url(),
            "--output",
            "stream-json",
        ],
    ));
    let asked = std::cell::Cell::new(0);
    run.until("both merge requests", |e| {
        if e["type"] == "mail_sent" && e["kind"] == "merge_request" {
            asked.set(asked.get() + 1);
        }
        asked.get() == 2
    })
    .await;
    fake.open_gate("lead");
    assert_eq!(run.finish().await, Some(0), "{:#?}", run.events);
    let events = &run.events;
    let applied: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "merge_applied")
        .map(|e| e["request_id"].as_str().unwrap())
        .collect();
    // Exactly one first merge landed; the other was tested again on the moved head, failed,
    // went back, and its fixed revision landed.
    assert_eq!(applied.len(), 2, "{applied:?}: {events:#?}");
    let landed = &applied[0][6..9];
    let back = if landed == "one" { "two" } else { "one" };
    assert_eq!(
        applied,
        [format!("merge-{landed}-1"), format!("merge-{back}-2")]
    );
    let mail = mail_bodies(root, back).await;
    let told = mail
        .iter()
        .filter_map(|body| body["text"].as_str())
        .find(|text| text.contains("fails the project's tests"))
        .unwrap_or_else(|| panic!("{back} was not told: {mail:#?}"));
    assert!(
        told.contains("one.txt and two.txt disagree")
            && told.contains(&format!("merge-{back}-1"))
            && told.contains(&format!("{back}.txt")),
        "{told}"
    );
    // Each request carries its pass, on the head it was tested on.
    let inbox = mail_bodies(root, "lead").await;
    let tested: Vec<&Value> = inbox
        .iter()
        .filter(|body| body["type"] == "merge_request")
        .map(|body| &body["tested"])
        .collect();
    assert_eq!(tested.len(), 3, "{inbox:#?}");
    // The text inbox says so too.
    let listed = muster(root, &["inbox", "lead"]).await;
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.contains("/one, tests passed: ") && listed.contains("/two, tests passed: "),
        "{listed}"
    );
    // So does `muster plans`: after the plan files (none: no plan mode), each merge request
    // with its decision and its pass, on the head its request names.
    let plans = muster(root, &["plans"]).await;
    let plans = String::from_utf8_lossy(&plans.stdout);
    for id in [format!("merge-{landed}-1"), format!("merge-{back}-2")] {
        let head = inbox
            .iter()
            .find(|body| body["request_id"] == id.as_str())
            .and_then(|body| body["tested"]["head"].as_str())
            .unwrap_or_else(|| panic!("{id}: {inbox:#?}"));
        let row = plans
            .lines()
            .find(|line| line.starts_with(&id))
            .unwrap_or_else(|| panic!("no {id}: {plans}"));
        assert!(
            row.contains("merged by lead, tests passed: `") && row.ends_with(&format!("on {head}")),
            "{row}"
        );
    }
    // The one approved on the old head, re-tested on the moved one and failing, went back.
    let stale = format!("merge-{back}-1");
    let row = plans
        .lines()
        .find(|line| line.starts_with(&stale))
        .unwrap_or_else(|| panic!("no {stale}: {plans}"));
    assert!(
        row.contains("approved by lead, sent back: the integration branch moved, tests passed: `"),
        "{row}"
    );
    assert!(
        tested
            .iter()
            .all(|t| t["exit"] == 0 && t["head"].is_string()),
        "{tested:#?}"
    );
    let file = |name: &str| std::fs::read_to_string(root.join(name)).unwrap();
    assert_eq!(file(&format!("{landed}.txt")), format!("{landed}\n"));
    assert!(file(&format!("{back}.txt")).contains("compatible"));
    // Every scratch tree is gone.
    let trees = git(root, &["worktree", "list", "--porcelain"]);
    assert!(!trees.contains(".gate-"), "{trees}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_untrusted_projects_merge_test_takes_no_effect_and_says_so() {
    let dir = repo(false, "human");
    let root = dir.path();
    let fake = fake(script()).await;
    let output = run(root, &fake.base_url(), &["run", "-p", "Build it."]).await;
    let err = stderr(&output);
    assert!(
        err.contains("project not trusted") && err.contains("merge.test"),
        "{err}"
    );
    // Untested, both requests are sent as before.
    assert_eq!(waiting_on(&output), ["merge-one-1", "merge-two-1"]);
    let inbox = muster(root, &["inbox", "human", "--json"]).await;
    let inbox = String::from_utf8_lossy(&inbox.stdout);
    assert!(!inbox.contains("\"tested\""), "{inbox}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kill_during_the_gate_resumes_to_one_tested_request() {
    let dir = repo(true, "human");
    let root = dir.path();
    let fake = fake(script()).await;
    let mut command = super::common::command(
        root,
        &[
            "run",
            "-p",
            "Build it.",
            "--base-url",
            &fake.base_url(),
            "--output",
            "stream-json",
        ],
    );
    command.env("MUSTER_FAILPOINT", "merge_gate");
    let killed = super::common::output(command).await;
    assert_eq!(
        killed.status.code(),
        None,
        "killed by the failpoint: {}",
        stderr(&killed)
    );
    let resumed = run(root, &fake.base_url(), &["resume"]).await;
    assert_eq!(resumed.status.code(), Some(5), "{}", stderr(&resumed));
    let inbox = muster(root, &["inbox", "human", "--json"]).await;
    let inbox: Value = serde_json::from_slice(&inbox.stdout).unwrap();
    let mut ids: Vec<&str> = inbox
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|row| row["message"]["body"]["request_id"].as_str())
        .collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        ["merge-one-1", "merge-two-1"],
        "one request each: {inbox:#}"
    );
    assert!(
        inbox
            .as_array()
            .unwrap()
            .iter()
            .all(|row| row["message"]["body"]["tested"]["exit"] == 0),
        "{inbox:#}"
    );
    let trees = git(root, &["worktree", "list", "--porcelain"]);
    assert!(!trees.contains(".gate-"), "{trees}");
}

/// A repository whose team has one teammate (a writer whose merges the lead decides) and a
/// `[merge] test` that fails once the file `flag` exists (something outside the repository the
/// tests depend on, which changes during the run), with `before_apply` as given.
fn final_gate_repo(before_apply: bool, flag: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join(".muster/agents")).unwrap();
    std::fs::write(root.join(".muster/agents/writer.md"), WRITER).unwrap();
    std::fs::write(root.join("README.md"), "hello\n").unwrap();
    let team = format!(
        "name = \"builders\"\nisolation = \"worktree\"\n\n[merge]\n\
         test = \"test ! -f {} || {{ echo 'the flag is up' >&2; exit 3; }}\"\n\
         before_apply = {before_apply}\n\n\
         [[teammates]]\nname = \"one\"\ndefinition = \"writer\"\nplan_mode_required = false\n\
         approver = \"lead\"\n",
        flag.display()
    );
    std::fs::write(root.join("muster.team.toml"), team).unwrap();
    git(root, &["init", "-q", "-b", "main"]);
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "start"]);
    super::common::trust_blocking(root);
    dir
}

/// `[merge] before_apply`: the team's result runs the project's tests once more before the
/// final apply. The teammate's merge passes its gate; then the tests start failing (the flag
/// goes up while the lead's approval is held); a result that fails them is not applied (the
/// run fails, exit 1, naming the branch and the test's output), one that passes is applied,
/// and without the setting a failing result is applied as before. Killed during the final
/// gate, a resume runs it again and ends the same way.
#[tokio::test(flavor = "multi_thread")]
async fn the_gate_before_the_final_apply_keeps_a_failing_result_off_the_users_tree() {
    // (before_apply, the flag goes up, kill during the final gate, exit, applied)
    let rows = [
        (true, false, false, 0, true),
        (true, true, false, 1, false),
        (true, true, true, 1, false),
        (false, true, false, 0, true),
    ];
    for (before_apply, raise_flag, kill, exit, applied) in rows {
        let what = format!("before_apply={before_apply} flag={raise_flag} kill={kill}");
        let outside = tempfile::tempdir().unwrap();
        let flag = outside.path().join("flag");
        let dir = final_gate_repo(before_apply, &flag);
        let root = dir.path();
        let review: ScriptEntry = serde_json::from_value(json!({
            "agent": "lead", "when": {"mail_type": "merge_request"}, "fault": {"hold": "lead"},
            "reply": {"content": [{"type": "tool_use", "id": "toolu_review", "name": "ReviewMerge",
                                   "input": {"request_id": "merge-one-1", "approve": true}}],
                      "stop_reason": "tool_use"}}))
        .unwrap();
        let assign = ScriptEntry::reply(
            "lead",
            1,
            vec![tool(
                "SendMessage",
                json!({"to": "one", "message": "Write one.txt."}),
            )],
        );
        let fake = fake(vec![
            review,
            assign,
            any_turn("lead", "Done."),
            write("one", 1, "one.txt", "one\n"),
            any_turn("one", "done"),
        ])
        .await;
        let base = fake.base_url();
        let args = [
            "run",
            "-p",
            "Build it.",
            "--base-url",
            &base,
            "--output",
            "stream-json",
        ];
        let mut command = super::common::command(root, &args);
        if kill {
            // The first hit is the teammate's merge gate, the second the final one.
            command.env("MUSTER_FAILPOINT", "merge_gate@2");
        }
        let mut run = Running::spawn(command);
        run.until("the merge request", |e| {
            e["type"] == "mail_sent" && e["kind"] == "merge_request"
        })
        .await;
        if raise_flag {
            std::fs::write(&flag, "up\n").unwrap();
        }
        fake.open_gate("lead");
        let first = run.finish().await;
        let output = if kill {
            assert_eq!(first, None, "{what}: not killed: {:#?}", run.events);
            run_resume(root, &base).await
        } else {
            assert_eq!(first, Some(exit), "{what}: {:#?}", run.events);
            None
        };
        let end = match &output {
            Some(output) => {
                assert_eq!(
                    output.status.code(),
                    Some(exit),
                    "{what}: {}",
                    stderr(output)
                );
                lines(output).last().cloned().unwrap()
            }
            None => run.events.last().cloned().unwrap(),
        };
        assert_eq!(root.join("one.txt").exists(), applied, "{what}: {end:#}");
        if !applied {
            assert_eq!(end["status"], "failed", "{what}: {end:#}");
            let result = &end;
            assert_eq!(result["final_gate"]["exit"], 3, "{what}: {end:#}");
            assert!(
                result["final_gate"]["tail"]
                    .as_str()
                    .unwrap()
                    .contains("the flag is up"),
                "{what}: {end:#}"
            );
            let branch = result["result_branch"].as_str().unwrap();
            let files = git(root, &["ls-tree", "--name-only", branch]);
            assert!(files.contains("one.txt"), "{what}: {files}");
        }
        let trees = git(root, &["worktree", "list", "--porcelain"]);
        assert!(!trees.contains("final"), "{what}: {trees}");
    }
}

async fn run_resume(root: &Path, base: &str) -> Option<std::process::Output> {
    Some(run(root, base, &["resume"]).await)
}

/// A gate killed mid-test leaves its scratch tree (no guard runs under kill -9); once the run
/// is finished without a resume (here: its status set as a stop would leave it), `muster
/// prune` removes the scratch tree with the run's worktrees, and git no longer lists it.
#[tokio::test(flavor = "multi_thread")]
async fn prune_removes_the_scratch_tree_a_killed_gate_left() {
    let dir = repo(true, "human");
    let root = dir.path();
    let fake = fake(script()).await;
    let mut command = super::common::command(
        root,
        &[
            "run",
            "-p",
            "Build it.",
            "--base-url",
            &fake.base_url(),
            "--output",
            "stream-json",
        ],
    );
    command.env("MUSTER_FAILPOINT", "merge_gate");
    let killed = super::common::output(command).await;
    assert_eq!(killed.status.code(), None, "{}", stderr(&killed));
    // Not `git worktree list` here: the other teammate's gate may have been killed inside
    // `git worktree add`, which can leave git unable to list (the next worktree operation
    // clears that; see the worktree tests).
    let worktrees = root.join(".muster/worktrees");
    // Both teammates' gates may be under way when the first one is killed.
    let gates = walk_gate_dirs(&worktrees);
    assert!((1..=2).contains(&gates.len()), "gate trees: {gates:?}");

    let store = super::common::open_store(root);
    let runs = store.runs().await.unwrap();
    assert_eq!(runs.len(), 1);
    store
        .set_run_status(&runs[0].id, muster_mailbox::RunStatus::Failed, None)
        .await
        .unwrap();
    drop(store);
    let pruned = muster(root, &["prune", "--older-than", "1"]).await;
    assert_eq!(pruned.status.code(), Some(0), "{}", stderr(&pruned));
    let trees = git(root, &["worktree", "list", "--porcelain"]);
    assert!(!trees.contains(".gate-"), "{trees}");
    let left = walk_gate_dirs(&worktrees);
    assert!(left.is_empty(), "{left:?}");
}

/// The bodies of the messages in `agent`'s inbox (`muster inbox AGENT --json`).
async fn mail_bodies(root: &Path, agent: &str) -> Vec<Value> {
    let listed = muster(root, &["inbox", agent, "--json"]).await;
    let rows: Vec<Value> = serde_json::from_slice(&listed.stdout).unwrap();
    rows.into_iter()
        .map(|mut row| row["message"]["body"].take())
        .collect()
}

/// Every `.gate-*` directory under `dir`, at any depth.
fn walk_gate_dirs(dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if !path.is_dir() {
            continue;
        }
        if entry.file_name().to_string_lossy().starts_with(".gate-") {
            found.push(path);
        } else {
            found.extend(walk_gate_dirs(&path));
        }
    }
    found
}

/// A repository with one commit whose team has one writer, `one`, merges decided by
/// `approver`, `merge` as the team file's merge section and the `files` given; trusted when
/// `trusted`.
fn one_writer(
    merge: &str,
    approver: &str,
    files: &[(&str, &str)],
    trusted: bool,
) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for (path, content) in files {
        std::fs::write(root.join(path), content).unwrap();
    }
    std::fs::create_dir_all(root.join(".muster/agents")).unwrap();
    std::fs::write(root.join(".muster/agents/writer.md"), WRITER).unwrap();
    std::fs::write(root.join("README.md"), "hello\n").unwrap();
    std::fs::write(
        root.join("muster.team.toml"),
        format!(
            "name = \"builders\"\nisolation = \"worktree\"\n\n{merge}\n[[teammates]]\nname = \"one\"\n\
             definition = \"writer\"\nplan_mode_required = false\napprover = \"{approver}\"\n"
        ),
    )
    .unwrap();
    git(root, &["init", "-q", "-b", "main"]);
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "start"]);
    if trusted {
        super::common::trust_blocking(root);
    }
    dir
}

/// The script of a one-writer run: the lead puts one task on the board; `one` writes
/// `first` to one.txt and ends its turn, then, told its merge failed, writes `fixed`.
fn writes_then_fixes(first: &str, fixed: &str) -> Vec<ScriptEntry> {
    vec![
        ScriptEntry::reply(
            "lead",
            1,
            vec![tool(
                "TaskCreate",
                json!({"subject": "write", "description": "Write one.txt."}),
            )],
        ),
        any_turn("lead", "Waiting for the team."),
        write("one", 1, "one.txt", first),
        ScriptEntry::reply("one", 2, vec![Block::text("done")]),
        write("one", 3, "one.txt", fixed),
        any_turn("one", "fixed"),
    ]
}

/// The test command of the timeout test: hangs on the result that still says `slow`.
const HANGS_WHEN_SLOW: &str = "grep -q slow one.txt && sleep 30.5; exit 0";

/// A gate whose test command runs past `test_timeout` is stopped (its process group with
/// it) and counts as a failure: the teammate is told why, no request is sent for that
/// result, and its fixed revision is tested and sent.
#[tokio::test(flavor = "multi_thread")]
async fn a_test_command_past_its_timeout_is_stopped_and_goes_back_to_the_teammate() {
    let dir = one_writer(
        &format!("[merge]\ntest = \"{HANGS_WHEN_SLOW}\"\ntest_timeout = 1\n"),
        "human",
        &[],
        true,
    );
    let root = dir.path();
    let fake = fake(writes_then_fixes("slow\n", "quick\n")).await;
    let output = run(root, &fake.base_url(), &["run", "-p", "Build it."]).await;
    let waiting = waiting_on(&output);
    assert_eq!(waiting.len(), 1, "{waiting:?}: {}", stderr(&output));
    let mail = muster(root, &["inbox", "one", "--json"]).await;
    let mail: Value = serde_json::from_slice(&mail.stdout).unwrap();
    assert!(
        mail.as_array()
            .unwrap()
            .iter()
            .any(|row| row["message"]["body"]["text"]
                .as_str()
                .is_some_and(|text| text.contains("ran past test_timeout (1s)"))),
        "one was not told of the timeout: {mail:#}"
    );
    let inbox = mail_bodies(root, "human").await;
    let requests: Vec<&Value> = inbox
        .iter()
        .filter(|body| body["type"] == "merge_request")
        .collect();
    assert_eq!(requests.len(), 1, "{inbox:#?}");
    assert_eq!(requests[0]["request_id"], waiting[0].as_str());
    assert_eq!(requests[0]["tested"]["exit"], 0, "{inbox:#?}");
    let hung = std::process::Command::new("pgrep")
        .args(["-f", "sleep 30.5"])
        .output()
        .unwrap();
    assert!(
        hung.stdout.is_empty(),
        "the timed-out test command still runs: {}",
        String::from_utf8_lossy(&hung.stdout)
    );
}

/// A policy with `require_tests_pass` refuses a merge nothing tested — here because the
/// team file names no `[merge] test` — even with `approve_all`, and the teammate is told
/// which rule refused it.
#[tokio::test(flavor = "multi_thread")]
async fn a_policy_that_requires_tests_refuses_an_untested_merge_even_with_approve_all() {
    let dir = one_writer(
        "",
        "policy:policy.toml",
        &[(
            "policy.toml",
            "approve_all = true\nrequire_tests_pass = true\n",
        )],
        true,
    );
    let root = dir.path();
    let fake = fake(vec![
        ScriptEntry::reply(
            "lead",
            1,
            vec![tool(
                "TaskCreate",
                json!({"subject": "write", "description": "Write one.txt."}),
            )],
        ),
        any_turn("lead", "Waiting for the team."),
        write("one", 1, "one.txt", "one\n"),
        any_turn("one", "done"),
    ])
    .await;
    let output = run(root, &fake.base_url(), &["run", "-p", "Build it."]).await;
    assert!(
        !root.join("one.txt").exists(),
        "an untested merge reached the tree: {}",
        stderr(&output)
    );
    let mail = muster(root, &["inbox", "one", "--json"]).await;
    let mail: Value = serde_json::from_slice(&mail.stdout).unwrap();
    let response = mail
        .as_array()
        .unwrap()
        .iter()
        .map(|row| &row["message"]["body"])
        .find(|body| body["type"] == "merge_response")
        .unwrap_or_else(|| panic!("one got no merge response: {mail:#}"));
    assert_eq!(response["approved"], false, "{response:#}");
    assert!(
        response["rule"]
            .as_str()
            .is_some_and(|rule| rule.starts_with("require_tests_pass (")),
        "{response:#}"
    );
}

/// The gate's test command runs with the network off: a result that makes the tests open a
/// TCP connection (to a listener of this test's) fails — the listener gets no connection —
/// and goes back to the teammate; its revision without the connection passes and is sent.
#[tokio::test(flavor = "multi_thread")]
async fn the_gates_test_command_reaches_no_network() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let dir = one_writer(
        &format!(
            "[merge]\ntest = \"grep -q net one.txt || exit 0; bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' && echo connected\"\n"
        ),
        "human",
        &[],
        true,
    );
    let root = dir.path();
    let fake = fake(writes_then_fixes("net\n", "quiet\n")).await;
    let output = run(root, &fake.base_url(), &["run", "-p", "Build it."]).await;
    assert_eq!(waiting_on(&output).len(), 1, "{}", stderr(&output));
    assert!(
        listener.accept().is_err(),
        "the gate's test command reached the network"
    );
    let mail = mail_bodies(root, "one").await;
    let told = mail
        .iter()
        .filter_map(|body| body["text"].as_str())
        .find(|text| text.contains("fails the project's tests"))
        .unwrap_or_else(|| panic!("one was not told: {mail:#?}"));
    assert!(
        !told.lines().any(|line| line.trim() == "connected"),
        "{told}"
    );
    let inbox = mail_bodies(root, "human").await;
    let tested: Vec<&Value> = inbox
        .iter()
        .filter(|body| body["type"] == "merge_request")
        .map(|body| &body["tested"])
        .collect();
    assert_eq!(tested.len(), 1, "{inbox:#?}");
    assert_eq!(tested[0]["exit"], 0, "{inbox:#?}");
}
