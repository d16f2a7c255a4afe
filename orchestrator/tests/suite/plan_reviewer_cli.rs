//! A plan reviewer hook as a teammate's approver (`approver = "hook:NAME"`, the reviewer under
//! `planReviewers` in `.claude/settings.json`) through the binary, with a real script and the
//! fake model server: it rejects a plan with feedback the teammate reads and revises, then
//! approves the revision, running read-only; in an untrusted project it is skipped, the run
//! says so naming `muster trust`, and the plan waits for a person; kill -9 on either side of
//! the decision's commit, and the resume neither asks it twice nor loses its answer.

use std::path::Path;

use muster_fake_llm::{Block, ScriptEntry};
use serde_json::{Value, json};

use super::common::{command, fake, lines, muster, output, stderr, tool, trust};

pub(super) const PLAN: &str =
    "## Goal\nGreet.\n## Steps\n1. Write hello.txt\n## Files\nhello.txt\n## Tests\ncat hello.txt\n";
pub(super) const UNTESTED: &str =
    "## Goal\nGreet.\n## Steps\n1. Write hello.txt\n## Files\nhello.txt\n";

/// The reviewer: it logs what it was given to `review.log` (only possible with the sandbox
/// off), tries to write the workspace (the read-only sandbox refuses), and answers in Claude
/// Code's `PermissionRequest` shape: a plan without a `## Tests` section is denied with
/// feedback, one with it allowed.
pub(super) const REVIEWER: &str = "#!/bin/sh\n\
    input=$(cat)\n\
    printf '%s\\n' \"$input\" >> \"$CLAUDE_PROJECT_DIR/review.log\" 2>/dev/null\n\
    echo wrote > \"$CLAUDE_PROJECT_DIR/reviewer-wrote.txt\" 2>/dev/null\n\
    case \"$input\" in\n\
      *'## Tests'*) echo '{\"hookSpecificOutput\":{\"hookEventName\":\"PermissionRequest\",\"decision\":{\"behavior\":\"allow\",\"message\":\"Tests included: go ahead.\"}}}' ;;\n\
      *) echo '{\"hookSpecificOutput\":{\"hookEventName\":\"PermissionRequest\",\"decision\":{\"behavior\":\"deny\",\"message\":\"Add a ## Tests section that checks hello.txt.\"}}}' ;;\n\
    esac\n";

/// A project whose team's `alice` has the reviewer `strict` as approver, with `sandbox` as
/// its `[sandbox] mode`.
fn reviewed_project(sandbox: &str) -> tempfile::TempDir {
    let dir = super::common::project(&[(
        "muster.team.toml",
        "name = \"greeters\"\nisolation = \"shared\"\n\n[[teammates]]\nname = \"alice\"\n\
         definition = \"writer\"\napprover = \"hook:strict\"\n",
    )]);
    // alice works in acceptEdits once approved, so her write needs nobody.
    std::fs::create_dir_all(dir.path().join(".muster/agents")).unwrap();
    std::fs::write(
        dir.path().join(".muster/agents/writer.md"),
        "---\nname: writer\ndescription: Writes files.\npermissionMode: acceptEdits\n---\nYou write files.\n",
    )
    .unwrap();
    let hooks = dir.path().join(".claude/hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    std::fs::write(hooks.join("review.sh"), REVIEWER).unwrap();
    let settings = json!({"planReviewers": {"strict": {
        "type": "command", "command": "sh \"$CLAUDE_PROJECT_DIR\"/.claude/hooks/review.sh",
        "timeout": 30}}});
    std::fs::write(
        dir.path().join(".claude/settings.json"),
        serde_json::to_string_pretty(&settings).unwrap(),
    )
    .unwrap();
    std::fs::write(
        dir.path().join(".muster/settings.toml"),
        format!("[sandbox]\nmode = \"{sandbox}\"\n"),
    )
    .unwrap();
    dir
}

fn any_turn(agent: &str, text: &str) -> ScriptEntry {
    serde_json::from_value(json!({"agent": agent,
        "reply": {"content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}}))
    .unwrap()
}

/// The lead hands out the task and waits; alice plans (`plans`, one per turn), writes
/// hello.txt and ends.
fn script(plans: &[&str]) -> Vec<ScriptEntry> {
    let mut script = vec![
        ScriptEntry::reply(
            "lead",
            1,
            vec![tool(
                "TaskCreate",
                json!({"subject": "Greet", "description": "Write hello.txt saying hello."}),
            )],
        ),
        any_turn("lead", "Waiting for the team."),
    ];
    let mut turn = 1;
    for plan in plans {
        script.push(ScriptEntry::reply(
            "alice",
            turn,
            vec![tool("ExitPlanMode", json!({"plan": plan}))],
        ));
        turn += 1;
    }
    script.push(ScriptEntry::reply(
        "alice",
        turn,
        vec![tool(
            "Write",
            json!({"file_path": "hello.txt", "content": "hello, world\n"}),
        )],
    ));
    script.push(ScriptEntry::reply(
        "alice",
        turn + 1,
        vec![Block::text("Wrote hello.txt.")],
    ));
    script
}

fn run_args(base: &str) -> Vec<String> {
    [
        "run",
        "-p",
        "Greet the world.",
        "--base-url",
        base,
        "--output",
        "stream-json",
    ]
    .map(str::to_owned)
    .to_vec()
}

fn resume_args(base: &str) -> Vec<String> {
    ["resume", "--base-url", base, "--output", "stream-json"]
        .map(str::to_owned)
        .to_vec()
}

async fn run(dir: &Path, args: &[String]) -> std::process::Output {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    muster(dir, &args).await
}

/// The plan responses alice's inbox holds, oldest first.
async fn plan_responses(dir: &Path) -> Vec<Value> {
    let inbox = muster(dir, &["inbox", "alice", "--json"]).await;
    assert_eq!(inbox.status.code(), Some(0), "{}", stderr(&inbox));
    let rows: Value = serde_json::from_slice(&inbox.stdout).unwrap();
    rows.as_array()
        .unwrap()
        .iter()
        .map(|row| row["message"].clone())
        .filter(|m| m["kind"] == "plan_approval_response")
        .collect()
}

fn review_log(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("review.log"))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// Rejected with feedback, the teammate revises; the revision is approved; the reviewer ran
/// in the read-only sandbox (it could not write the workspace) and got Claude Code's
/// `PermissionRequest` input for `ExitPlanMode`.
#[tokio::test(flavor = "multi_thread")]
async fn a_plan_reviewer_hook_rejects_with_feedback_then_approves_the_revision() {
    let dir = reviewed_project("required");
    trust(dir.path()).await;
    let fake = fake(script(&[UNTESTED, PLAN])).await;
    let done = run(dir.path(), &run_args(&fake.base_url())).await;
    assert_eq!(
        done.status.code(),
        Some(0),
        "{}\n{}",
        stderr(&done),
        super::common::stdout(&done)
    );
    let events = lines(&done);
    let decisions: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "approval_decided" && e["agent"] == "alice")
        .collect();
    assert_eq!(decisions.len(), 2, "{events:#?}");
    assert_eq!(decisions[0]["approved"], false);
    assert_eq!(decisions[1]["approved"], true);
    assert_eq!(decisions[1]["mode"], "acceptEdits");
    // What the person sees names the reviewer, not `policy`, the entry it answers as.
    for decision in &decisions {
        assert!(
            decision["responder"]
                .as_str()
                .unwrap()
                .starts_with("plan reviewer hook strict ("),
            "{decision}"
        );
    }
    let plans = super::common::stdout(&muster(dir.path(), &["plans"]).await);
    assert!(
        plans.contains("approved by plan reviewer hook strict ("),
        "{plans}"
    );
    let inbox = super::common::stdout(&muster(dir.path(), &["inbox", "lead"]).await);
    assert!(
        inbox.contains("rejected by plan reviewer hook strict (")
            && inbox.contains("approved by plan reviewer hook strict ("),
        "{inbox}"
    );
    // The feedback reached alice's model with the refusal of her first plan.
    let turn2 = fake
        .requests()
        .into_iter()
        .find(|r| r.agent.as_deref() == Some("alice") && r.turn == Some(2))
        .unwrap();
    assert!(
        turn2
            .body
            .to_string()
            .contains("Add a ## Tests section that checks hello.txt."),
        "{}",
        turn2.body
    );
    assert!(
        turn2
            .body
            .to_string()
            .contains("Your plan was rejected by plan reviewer hook strict ("),
        "{}",
        turn2.body
    );
    let responses = plan_responses(dir.path()).await;
    assert_eq!(responses.len(), 2, "{responses:#?}");
    for response in &responses {
        assert_eq!(response["sender"], "policy");
        assert!(
            response["body"]["rule"]
                .as_str()
                .unwrap()
                .starts_with("plan reviewer hook strict ("),
            "{response}"
        );
    }
    assert_eq!(
        responses[1]["body"]["feedback"],
        "Tests included: go ahead."
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(),
        "hello, world\n"
    );
    assert!(
        !dir.path().join("reviewer-wrote.txt").exists(),
        "the reviewer wrote the workspace"
    );
    let shown = muster(dir.path(), &["config", "show"]).await;
    assert!(
        super::common::stdout(&shown).contains("# plan reviewer strict `sh "),
        "{}",
        super::common::stdout(&shown)
    );
}

/// In a project nobody trusted, the reviewer does not run: the run says so in one line
/// naming `muster trust`, and alice's plan waits for a person, who approves it from a second
/// process while the run waits.
#[tokio::test(flavor = "multi_thread")]
async fn an_untrusted_projects_plan_reviewer_is_skipped_and_the_plan_waits_for_a_person() {
    let dir = reviewed_project("off");
    let fake = fake(script(&[PLAN])).await;
    let args = run_args(&fake.base_url());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut started = command(dir.path(), &args);
    let stderr_file = dir.path().join("run.stderr");
    started.stderr(std::fs::File::create(&stderr_file).unwrap());
    started.stdout(std::process::Stdio::piped());
    let mut child = started.spawn().unwrap();
    let mut events =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(child.stdout.take().unwrap()));
    let mut seen = Vec::new();
    let waiting = loop {
        let line = tokio::time::timeout(super::common::GUARD, events.next_line())
            .await
            .expect("guard timeout")
            .unwrap()
            .unwrap_or_else(|| panic!("the run ended first: {seen:#?}"));
        let event: Value = serde_json::from_str(&line).unwrap();
        seen.push(event.clone());
        if event["type"] == "approval_requested" && event["request_id"] == "plan-alice-1" {
            break event;
        }
    };
    assert_eq!(waiting["responder"], "human", "{waiting}");
    let said = std::fs::read_to_string(&stderr_file).unwrap();
    let lines: Vec<&str> = said
        .lines()
        .filter(|line| line.contains("approver = \"hook:strict\""))
        .collect();
    assert_eq!(lines.len(), 1, "{said}");
    assert!(lines[0].contains("`muster trust`"), "{}", lines[0]);
    let approved = muster(dir.path(), &["approve", "plan-alice-1"]).await;
    assert_eq!(approved.status.code(), Some(0), "{}", stderr(&approved));
    while let Some(line) = tokio::time::timeout(super::common::GUARD, events.next_line())
        .await
        .expect("guard timeout")
        .unwrap()
    {
        seen.push(serde_json::from_str(&line).unwrap());
    }
    let status = tokio::time::timeout(super::common::GUARD, child.wait())
        .await
        .expect("guard timeout")
        .unwrap();
    assert_eq!(status.code(), Some(0), "{seen:#?}");
    assert!(review_log(dir.path()).is_empty(), "the reviewer ran");
    let responses = plan_responses(dir.path()).await;
    assert_eq!(responses.len(), 1);
    assert_eq!(responses[0]["sender"], "human");
    assert!(dir.path().join("hello.txt").exists());
}

/// kill -9 after the reviewer answered: before the decision's commit, the resume asks it
/// once more (the one review in flight) and the request is decided once; after the commit,
/// the resume does not ask it again and alice works on the committed approval.
#[tokio::test(flavor = "multi_thread")]
async fn a_kill_around_a_plan_reviewers_decision_neither_asks_twice_nor_loses_the_answer() {
    for (point, reviews_after_resume) in [("hook_reviewed_plan@1", 2), ("hook_reviewed_plan@2", 1)]
    {
        // The sandbox is off so the reviewer can log each time it is asked.
        let dir = reviewed_project("off");
        trust(dir.path()).await;
        let fake = fake(script(&[PLAN])).await;
        let args = run_args(&fake.base_url());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut killed = command(dir.path(), &args);
        killed.env("MUSTER_FAILPOINT", point);
        let first = output(killed).await;
        assert_eq!(first.status.code(), None, "{point}: {}", stderr(&first));
        assert_eq!(review_log(dir.path()).len(), 1, "{point}");
        let committed = plan_responses(dir.path()).await.len();
        assert_eq!(committed, usize::from(reviews_after_resume == 1), "{point}");
        let resumed = run(dir.path(), &resume_args(&fake.base_url())).await;
        assert_eq!(
            resumed.status.code(),
            Some(0),
            "{point}: {}\n{}",
            stderr(&resumed),
            super::common::stdout(&resumed)
        );
        let reviews = review_log(dir.path());
        assert_eq!(reviews.len(), reviews_after_resume, "{point}");
        assert!(
            reviews
                .iter()
                .all(|input| input["request_id"] == "plan-alice-1"
                    && input["tool_name"] == "ExitPlanMode"
                    && input["teammate_name"] == "alice"),
            "{point}: {reviews:#?}"
        );
        let responses = plan_responses(dir.path()).await;
        assert_eq!(responses.len(), 1, "{point}: {responses:#?}");
        assert_eq!(responses[0]["body"]["approved"], true, "{point}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(),
            "hello, world\n",
            "{point}"
        );
    }
}

/// A reviewer that always fails (here it exits 1) rejects each plan without approving it,
/// marked as its own failure; after three in a row the teammate's next plan goes to a person
/// (the run says why and waits for them), who approves it from a second process.
#[tokio::test(flavor = "multi_thread")]
async fn a_reviewer_that_keeps_failing_hands_the_next_plan_to_a_person() {
    let dir = reviewed_project("required");
    std::fs::write(
        dir.path().join(".claude/hooks/review.sh"),
        "#!/bin/sh\ncat > /dev/null\necho 'reviewer crashed' >&2\nexit 1\n",
    )
    .unwrap();
    trust(dir.path()).await;
    let fake = fake(script(&[PLAN, PLAN, PLAN, PLAN])).await;
    let args = run_args(&fake.base_url());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut started = command(dir.path(), &args);
    let stderr_file = dir.path().join("run.stderr");
    started.stderr(std::fs::File::create(&stderr_file).unwrap());
    started.stdout(std::process::Stdio::piped());
    started.kill_on_drop(true);
    let mut child = started.spawn().unwrap();
    let mut events =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(child.stdout.take().unwrap()));
    let mut seen = Vec::new();
    let asked = loop {
        let line = tokio::time::timeout(super::common::GUARD, events.next_line())
            .await
            .expect("guard timeout")
            .unwrap()
            .unwrap_or_else(|| panic!("the run ended first: {seen:#?}"));
        let event: Value = serde_json::from_str(&line).unwrap();
        seen.push(event.clone());
        if event["type"] == "approval_requested" && event["request_id"] == "plan-alice-4" {
            break event;
        }
    };
    assert_eq!(asked["responder"], "human", "{asked}");
    let responses = plan_responses(dir.path()).await;
    assert_eq!(responses.len(), 3, "{responses:#?}");
    for response in &responses {
        assert_eq!(response["body"]["approved"], false, "{response}");
        assert!(
            response["body"]["rule"]
                .as_str()
                .unwrap()
                .ends_with(": it gave no decision"),
            "{response}"
        );
    }
    assert!(
        responses[2]["body"]["feedback"]
            .as_str()
            .unwrap()
            .contains("a person decides it"),
        "{}",
        responses[2]
    );
    let said = std::fs::read_to_string(&stderr_file).unwrap();
    assert!(said.contains("failed 3 times in a row"), "{said}");
    let approved = muster(dir.path(), &["approve", "plan-alice-4"]).await;
    assert_eq!(approved.status.code(), Some(0), "{}", stderr(&approved));
    while let Some(line) = tokio::time::timeout(super::common::GUARD, events.next_line())
        .await
        .expect("guard timeout")
        .unwrap()
    {
        seen.push(serde_json::from_str(&line).unwrap());
    }
    let status = tokio::time::timeout(super::common::GUARD, child.wait())
        .await
        .expect("guard timeout")
        .unwrap();
    assert_eq!(status.code(), Some(0), "{seen:#?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(),
        "hello, world\n"
    );
}

/// A team file naming a reviewer no settings file defines is refused before any run exists
/// (exit 2, naming `planReviewers`); a single run cannot take a hook as its approver.
#[tokio::test]
async fn a_hook_approver_without_its_reviewer_or_outside_a_team_is_refused() {
    let dir = reviewed_project("required");
    std::fs::write(
        dir.path().join("muster.team.toml"),
        "name = \"greeters\"\nisolation = \"shared\"\n\n[[teammates]]\nname = \"alice\"\n\
         definition = \"writer\"\napprover = \"hook:lenient\"\n",
    )
    .unwrap();
    trust(dir.path()).await;
    let refused = muster(dir.path(), &["run", "-p", "Greet."]).await;
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let said = stderr(&refused);
    assert!(
        said.contains("approver \"hook:lenient\" names no plan reviewer")
            && said.contains("\"planReviewers\""),
        "{said}"
    );
    assert!(
        !dir.path().join(".muster/muster.db").exists(),
        "a run was stored before the check"
    );
    std::fs::remove_file(dir.path().join("muster.team.toml")).unwrap();
    let single = muster(
        dir.path(),
        &["run", "-p", "Greet.", "--approver", "hook:strict"],
    )
    .await;
    assert_eq!(single.status.code(), Some(2), "{}", stderr(&single));
    assert!(stderr(&single).contains("hook:NAME"), "{}", stderr(&single));
}
