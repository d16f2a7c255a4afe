//! Plan-scoped grants through the `muster` binary against `muster-fake-llm`: a teammate's plan
//! asks for rules, a person approves some of them, the granted command runs without asking in
//! default mode while another asks, the grant holds across SIGKILL, `muster fork` and `muster
//! resume`, and it ends in the commit of the plan's verification report; a policy grants only
//! what its `permissions.allow` covers, and a ceiling (a policy's, the lead's) drops the rest,
//! reported in the response.

use std::path::Path;

use muster_fake_llm::{Block, ScriptEntry};
use serde_json::{Value, json};

use super::common::{Running, command, fake, muster, open_store, stderr, tool, transcript};

const PLAN: &str = "## Goal\nTouch.\n## Steps\n1. touch granted.txt\n## Files\ngranted.txt\n\
## Tests\nnone\n## Risks\nnone\n";

fn start_team_run(dir: &Path, base: &str) -> Running {
    Running::spawn(command(
        dir,
        &[
            "run",
            "-p",
            "Touch.",
            "--base-url",
            base,
            "--output",
            "stream-json",
        ],
    ))
}

fn lead_script() -> Vec<ScriptEntry> {
    vec![
        ScriptEntry::reply(
            "lead",
            1,
            vec![tool(
                "TaskCreate",
                json!({"subject": "Touch", "description": "Touch granted.txt."}),
            )],
        ),
        serde_json::from_value(json!({
            "agent": "lead",
            "reply": {"content": [{"type": "text", "text": "Waiting."}], "stop_reason": "end_turn"},
        }))
        .unwrap(),
    ]
}

fn bash(command: &str) -> Block {
    tool("Bash", json!({"command": command}))
}

fn tool_calls<'a>(events: &'a [Value], agent: &str, tool: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["type"] == "tool_call" && e["agent"] == agent && e["tool"] == tool)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_person_grants_a_plans_rule_which_survives_kill_9_and_ends_at_the_verification_report() {
    let dir = super::common::project(&[(
        "muster.team.toml",
        "name = \"touchers\"\n\n[[teammates]]\nname = \"alice\"\napprover = \"human\"\n",
    )]);
    let mut script = lead_script();
    script.extend([
        ScriptEntry::reply(
            "alice",
            1,
            vec![tool(
                "ExitPlanMode",
                json!({"plan": PLAN, "allowedPrompts": [
                    {"tool": "Bash", "prompt": "touch granted.txt"},
                    "Bash(touch extra.txt:*)",
                ]}),
            )],
        ),
        ScriptEntry::reply("alice", 2, vec![bash("touch granted.txt")]),
        ScriptEntry::reply("alice", 3, vec![bash("touch other.txt")]),
        ScriptEntry::reply("alice", 4, vec![bash("touch granted.txt again.txt")]),
        ScriptEntry::reply("alice", 5, vec![Block::text("Touched.")]),
        // After the verification report the lead asks for one more touch: the grant is gone.
        serde_json::from_value(json!({
            "agent": "lead",
            "when": {"mail_type": "verification_report"},
            "reply": {"content": [{"type": "tool_use", "id": "send-late", "name": "SendMessage",
                "input": {"to": "alice", "message": "Touch late.txt too."}}],
                "stop_reason": "tool_use"},
        }))
        .unwrap(),
        ScriptEntry::reply("alice", 6, vec![bash("touch granted.txt late.txt")]),
        ScriptEntry::reply("alice", 7, vec![Block::text("Asked.")]),
    ]);
    let fake = fake(script).await;
    let base = fake.base_url();
    let mut run = start_team_run(dir.path(), &base);
    let asked = run
        .until("the plan request", |e| {
            e["type"] == "approval_requested" && e["responder"] == "human"
        })
        .await;
    let run_id = asked["run_id"].as_str().unwrap().to_owned();

    // The approver sees the rules the plan asks for.
    let plans = muster(dir.path(), &["plans"]).await;
    let plans_text = String::from_utf8_lossy(&plans.stdout);
    assert!(
        plans_text
            .contains("plan-alice-1 asks for: Bash(touch granted.txt:*), Bash(touch extra.txt:*)"),
        "{plans_text}"
    );
    let inbox = muster(dir.path(), &["inbox", "human", "--json"]).await;
    let rows: Value = serde_json::from_slice(&inbox.stdout).unwrap();
    assert_eq!(
        rows[0]["message"]["body"]["allowed_prompts"],
        json!(["Bash(touch granted.txt:*)", "Bash(touch extra.txt:*)"]),
        "{rows}"
    );
    // A rule the plan did not ask for cannot be granted.
    let extra = muster(
        dir.path(),
        &["approve", "plan-alice-1", "--grant", "Bash(rm:*)"],
    )
    .await;
    assert_ne!(extra.status.code(), Some(0));
    assert!(
        stderr(&extra).contains("not among the rules the plan asked for"),
        "{}",
        stderr(&extra)
    );
    let approve = muster(
        dir.path(),
        &[
            "approve",
            "plan-alice-1",
            "--grant",
            "Bash(touch granted.txt:*)",
        ],
    )
    .await;
    assert_eq!(approve.status.code(), Some(0), "{}", stderr(&approve));

    // The granted command runs without asking; the other one asks a person.
    let ask = run
        .until("the permission request", |e| {
            e["type"] == "approval_requested" && e["kind"] == "permission_request"
        })
        .await;
    let perm = ask["request_id"].as_str().unwrap().to_owned();
    let granted = tool_calls(&run.events, "alice", "Bash");
    assert_eq!(granted.len(), 1, "{:#?}", run.events);
    assert_eq!(granted[0]["decision"], "allow");
    assert!(
        granted[0]["reason"]
            .as_str()
            .unwrap()
            .contains("grant `Bash(touch granted.txt:*)`"),
        "{}",
        granted[0]["reason"]
    );
    assert!(dir.path().join("granted.txt").exists());
    // The response row holds what was granted and what was left out.
    let store = open_store(dir.path());
    let request = store
        .request(&run_id, "plan-alice-1")
        .await
        .unwrap()
        .unwrap();
    let response = request.response.unwrap().stored_body();
    assert_eq!(response["grants"], json!(["Bash(touch granted.txt:*)"]));
    assert_eq!(
        response["dropped_grants"][0]["rule"],
        "Bash(touch extra.txt:*)"
    );
    assert_eq!(
        response["dropped_grants"][0]["reason"],
        "left out by the approver"
    );

    // SIGKILL while the ask waits; refuse it; resume: the grant still holds.
    run.child.kill().await.unwrap();
    let _ = run.child.wait().await;
    let reject = muster(dir.path(), &["reject", &perm, "--feedback", "not that one"]).await;
    assert_eq!(reject.status.code(), Some(0), "{}", stderr(&reject));
    // A fork carries the grant: the response row and alice's `grants` record are copied.
    let fork = muster(dir.path(), &["fork", &run_id]).await;
    assert_eq!(fork.status.code(), Some(0), "{}", stderr(&fork));
    let fork_text = String::from_utf8_lossy(&fork.stdout).into_owned();
    let fork_id = fork_text
        .split(" as ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("{fork_text}"))
        .to_owned();
    let forked = store
        .request(&fork_id, "plan-alice-1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        forked.response.unwrap().stored_body()["grants"],
        json!(["Bash(touch granted.txt:*)"])
    );
    let forked_records = transcript(store.as_ref(), &fork_id, "alice").await;
    assert!(
        forked_records
            .iter()
            .any(|r| r["type"] == "grants" && r["rules"] == json!(["Bash(touch granted.txt:*)"])),
        "{forked_records:#?}"
    );
    let mut resumed = Running::spawn(command(
        dir.path(),
        &[
            "resume",
            &run_id,
            "--base-url",
            &base,
            "--output",
            "stream-json",
        ],
    ));
    // After the verification report, the same granted command asks again.
    let late = resumed
        .until("the permission request after the report", |e| {
            e["type"] == "approval_requested"
                && e["kind"] == "permission_request"
                && e["request_id"] != perm.as_str()
        })
        .await;
    let late_id = late["request_id"].as_str().unwrap().to_owned();
    let events = resumed.events.clone();
    let after = tool_calls(&events, "alice", "Bash");
    let again = after
        .iter()
        .find(|e| e["decision"] == "allow")
        .unwrap_or_else(|| panic!("{after:#?}"));
    assert!(
        again["reason"].as_str().unwrap().contains("grant"),
        "{again}"
    );
    assert!(dir.path().join("again.txt").exists());
    assert!(!dir.path().join("other.txt").exists());
    let late_request = store.request(&run_id, &late_id).await.unwrap().unwrap();
    assert_eq!(
        late_request.stored_body()["input"]["command"],
        "touch granted.txt late.txt"
    );
    assert!(
        !late_request.stored_body()["reason"]
            .as_str()
            .unwrap()
            .contains("grant"),
        "{}",
        late_request.stored_body()
    );
    let refuse = muster(dir.path(), &["reject", &late_id, "--feedback", "no more"]).await;
    assert_eq!(refuse.status.code(), Some(0), "{}", stderr(&refuse));
    assert_eq!(resumed.finish().await, Some(0));
    assert!(!dir.path().join("late.txt").exists());

    // The grant ended in the commit that sent the plan's verification report.
    let records = transcript(store.as_ref(), &run_id, "alice").await;
    let kinds: Vec<&str> = records
        .iter()
        .filter_map(|r| r["type"].as_str())
        .filter(|k| k.starts_with("grants"))
        .collect();
    assert_eq!(kinds, ["grants", "grants_ended"]);
    let ended = records
        .iter()
        .find(|r| r["type"] == "grants_ended")
        .unwrap();
    assert_eq!(ended["request_id"], "plan-alice-1");
    let reports = store.messages(&run_id, Some("lead")).await.unwrap();
    assert!(
        reports
            .iter()
            .any(|m| m.kind == "verification_report"
                && m.stored_body()["request_id"] == "plan-alice-1"),
        "no verification report"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_policy_grants_only_what_its_allow_rules_cover_under_its_ceiling() {
    let dir = super::common::project(&[(
        "muster.team.toml",
        "name = \"touchers\"\n\n[[teammates]]\nname = \"alice\"\napprover = \"policy:policy.toml\"\n",
    )]);
    std::fs::write(
        dir.path().join("policy.toml"),
        "max_mode = \"acceptEdits\"\n\n[permissions]\nallow = [\"Bash(touch:*)\", \"Edit(src/**)\"]\n",
    )
    .unwrap();
    // The team file's policy approver applies in a project its user trusted.
    super::common::trust(dir.path()).await;
    let mut script = lead_script();
    script.extend([
        ScriptEntry::reply(
            "alice",
            1,
            vec![tool(
                "ExitPlanMode",
                json!({"plan": PLAN, "allowedPrompts": [
                    "Bash(touch granted.txt:*)", "Edit(src/**)", "Edit(docs/**)",
                ]}),
            )],
        ),
        ScriptEntry::reply("alice", 2, vec![Block::text("Done.")]),
    ]);
    let fake = fake(script).await;
    let output = muster(
        dir.path(),
        &[
            "run",
            "-p",
            "Touch.",
            "--base-url",
            &fake.base_url(),
            "--output",
            "stream-json",
        ],
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let inbox = muster(dir.path(), &["inbox", "alice", "--json"]).await;
    let rows: Value = serde_json::from_slice(&inbox.stdout).unwrap();
    let response = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|row| &row["message"])
        .find(|m| m["kind"] == "plan_approval_response")
        .unwrap();
    let body = &response["body"];
    assert_eq!(body["approved"], true);
    assert_eq!(body["grants"], json!(["Edit(src/**)"]), "{body}");
    let dropped = body["dropped_grants"].as_array().unwrap();
    assert_eq!(dropped.len(), 2, "{body}");
    assert_eq!(dropped[0]["rule"], "Bash(touch granted.txt:*)");
    assert!(
        dropped[0]["reason"]
            .as_str()
            .unwrap()
            .contains("needs bypassPermissions mode, above the approver's ceiling acceptEdits"),
        "{body}"
    );
    assert_eq!(dropped[1]["rule"], "Edit(docs/**)");
    assert!(
        dropped[1]["reason"]
            .as_str()
            .unwrap()
            .contains("permissions.allow"),
        "{body}"
    );
    // The teammate's model was told what it holds and what it did not get.
    let turn2 = fake
        .requests()
        .into_iter()
        .find(|r| r.agent.as_deref() == Some("alice") && r.turn == Some(2))
        .unwrap();
    let told = turn2.body.to_string();
    assert!(told.contains("without asking: Edit(src/**)"), "{told}");
    assert!(
        told.contains("Not granted: Bash(touch granted.txt:*)"),
        "{told}"
    );
}

/// The lead's model sees the rules beside the plan (fenced like it) and approves; its own mode
/// (acceptEdits) is the ceiling, so the Bash rule is dropped and the edit rule granted.
#[tokio::test(flavor = "multi_thread")]
async fn the_lead_grants_up_to_its_own_mode_and_sees_the_rules_with_the_plan() {
    let dir = super::common::project(&[(
        "muster.team.toml",
        "name = \"touchers\"\n\n[[teammates]]\nname = \"alice\"\n",
    )]);
    let mut script = lead_script();
    script.insert(
        1,
        serde_json::from_value(json!({
            "agent": "lead",
            "when": {"mail_type": "plan_approval_request"},
            "reply": {"content": [{"type": "tool_use", "id": "review-1", "name": "ReviewPlan",
                "input": {"request_id": "plan-alice-1", "approve": true}}],
                "stop_reason": "tool_use"},
        }))
        .unwrap(),
    );
    script.extend([
        ScriptEntry::reply(
            "alice",
            1,
            vec![tool(
                "ExitPlanMode",
                json!({"plan": PLAN, "allowedPrompts": ["Bash(touch granted.txt:*)", "Edit(src/**)"]}),
            )],
        ),
        ScriptEntry::reply("alice", 2, vec![Block::text("Done.")]),
    ]);
    let fake = fake(script).await;
    let output = muster(
        dir.path(),
        &[
            "run",
            "-p",
            "Touch.",
            "--base-url",
            &fake.base_url(),
            "--output",
            "stream-json",
        ],
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let requests = fake.requests();
    let review = requests
        .iter()
        .find(|r| r.agent.as_deref() == Some("lead") && r.body.to_string().contains("plan-alice-1"))
        .unwrap();
    let seen = review.body.to_string();
    assert!(
        seen.contains("asks to be granted the permission rules below"),
        "{seen}"
    );
    assert!(
        seen.contains("Bash(touch granted.txt:*)\\nEdit(src/**)"),
        "{seen}"
    );
    let store = open_store(dir.path());
    let runs = store.runs().await.unwrap();
    let run_id = &runs[0].id;
    let request = store
        .request(run_id, "plan-alice-1")
        .await
        .unwrap()
        .unwrap();
    let body = request.response.unwrap().stored_body();
    assert_eq!(body["grants"], json!(["Edit(src/**)"]), "{body}");
    assert_eq!(
        body["dropped_grants"][0]["rule"],
        "Bash(touch granted.txt:*)"
    );
    assert!(
        body["dropped_grants"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("above the approver's ceiling acceptEdits (the lead's own mode)"),
        "{body}"
    );
}
