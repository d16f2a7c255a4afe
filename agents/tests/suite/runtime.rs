//! The agent runtime against `muster-fake-llm` over real HTTP: the loop, plan mode as a state
//! machine (policy, human, teammate-kind approvals; the auto-gate fallback), refusals in plan
//! mode, subagents, plan file names and per-mode models. Waits are on events (store wake-ups,
//! task completion) with guard timeouts; no sleeps.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::collections::BTreeMap;
use std::ops::Deref;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use muster_agents::runtime::{
    AgentKind, AgentOutcome, AgentRuntime, EventSink, ModelRouter, PlanApprover, PlanFiles, Record,
    RunContext, RunEvent, TurnInterrupt,
};
use muster_config::PermissionMode;
use muster_fake_llm::{Block, ScriptEntry};
use muster_mailbox::*;
use serde_json::{Value, json};

use super::harness::{GUARD, RunHarness, SONNET, finished, policy, run, spec, start, teammate};

const PLAN: &str = "## Goal\nAdd a greeting.\n## Steps\n1. Write hello.txt\n## Files\nhello.txt\n## Tests\nnone\n## Risks\nnone\n";

#[derive(Default)]
struct Events(Mutex<Vec<RunEvent>>, tokio::sync::Notify);

impl EventSink for Events {
    fn emit(&self, event: RunEvent) {
        self.0.lock().unwrap().push(event);
        self.1.notify_waiters();
    }
}

impl Events {
    /// Waits (woken by each event) until an event matches.
    async fn wait_for(&self, matches: impl Fn(&RunEvent) -> bool) {
        loop {
            let notified = self.1.notified();
            if self.0.lock().unwrap().iter().any(&matches) {
                return;
            }
            tokio::time::timeout(GUARD, notified)
                .await
                .expect("guard timeout");
        }
    }
}

/// The shared run harness (a README in the workspace) with the runtime's events recorded.
struct Harness {
    run: RunHarness,
    events: Arc<Events>,
}

impl Deref for Harness {
    type Target = RunHarness;

    fn deref(&self) -> &RunHarness {
        &self.run
    }
}

impl Harness {
    async fn new(script: Vec<ScriptEntry>) -> Harness {
        Harness {
            run: RunHarness::setup()
                .file("README.md", "hello\n")
                .start(script)
                .await,
            events: Arc::new(Events::default()),
        }
    }

    /// The run's context with these models, its events recorded.
    fn routed(&self, approver: PlanApprover, models: ModelRouter) -> Arc<RunContext> {
        Arc::new(RunContext {
            agent_models: Default::default(),
            team: Default::default(),
            hooks: Default::default(),
            models,
            events: self.events.clone(),
            ..self.run_context(approver)
        })
    }

    fn single(&self, approver: PlanApprover) -> Arc<RunContext> {
        self.routed(approver, ModelRouter::single(self.model(SONNET)))
    }

    async fn tool_calls(&self, agent: &str) -> Vec<(String, String, String, bool)> {
        self.records(agent)
            .await
            .into_iter()
            .filter_map(|record| match record {
                Record::ToolCall {
                    tool,
                    decision,
                    content,
                    is_error,
                    ..
                } => Some((tool, decision, content, is_error)),
                _ => None,
            })
            .collect()
    }

    /// Every file of the workspace but `.muster/` with its content.
    fn workspace_hash(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        let mut files = BTreeMap::new();
        let mut stack = vec![self.workspace()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.ends_with(".muster") {
                    continue;
                }
                if path.is_dir() {
                    files.insert(path.clone(), Vec::new());
                    stack.push(path);
                } else {
                    files.insert(path.clone(), std::fs::read(&path).unwrap());
                }
            }
        }
        files
    }
}

fn reply(agent: &str, turn: u64, blocks: Vec<Block>) -> ScriptEntry {
    ScriptEntry::reply(agent, turn, blocks)
}

fn tool(name: &str, input: Value) -> Block {
    Block::tool_use(name, input)
}

fn modes(records: &[Record]) -> Vec<PermissionMode> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Mode { mode, .. } => Some(*mode),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn main_agent_plan_approved_by_policy_then_acts() {
    let h = Harness::new(vec![
        reply("main", 1, vec![tool("EnterPlanMode", json!({}))]),
        reply(
            "main",
            2,
            vec![
                tool("Read", json!({"file_path": "README.md"})),
                tool("ExitPlanMode", json!({"plan": "## Goal\nonly a goal\n"})),
            ],
        ),
        reply("main", 3, vec![tool("ExitPlanMode", json!({"plan": PLAN}))]),
        reply(
            "main",
            4,
            vec![tool(
                "Write",
                json!({"file_path": "hello.txt", "content": "hi\n"}),
            )],
        ),
        reply("main", 5, vec![Block::text("Done.")]),
    ])
    .await;
    h.member("main", MemberKind::Lead).await;
    let context = h.single(policy("max_mode = \"acceptEdits\"\n"));
    let mut agent = start(
        context,
        spec("main", AgentKind::Main, PermissionMode::AcceptEdits),
        "Add a greeting file.",
    )
    .await;
    let outcome = run(&mut agent).await;
    assert_eq!(outcome, finished("Done."));
    h.fake.verify().unwrap();
    assert_eq!(
        std::fs::read_to_string(h.workspace().join("hello.txt")).unwrap(),
        "hi\n"
    );
    let plan_file = h.plans().main_file();
    assert_eq!(std::fs::read_to_string(&plan_file).unwrap(), PLAN);
    let calls = h.tool_calls("main").await;
    assert!(
        calls[2].3,
        "a plan without Steps/Files is an error the model can fix"
    );
    assert!(calls[2].2.contains("`## Steps`"), "{}", calls[2].2);
    assert!(calls[3].2.contains("approved by policy"), "{}", calls[3].2);
    assert_eq!(
        calls[4],
        ("Write".into(), "allow".into(), calls[4].2.clone(), false)
    );
    let records = h.records("main").await;
    assert_eq!(
        modes(&records),
        [PermissionMode::Plan, PermissionMode::AcceptEdits]
    );
    let request = h.store.request("r1", "plan-main-1").await.unwrap().unwrap();
    assert_eq!(request.responder, "policy:policy.toml");
    let response = request.response.unwrap();
    assert_eq!(response.responder, "policy");
    assert_eq!(response.stored_body()["approved"], true);
    assert!(
        records
            .iter()
            .any(|r| matches!(r, Record::PlanSnapshot { state, .. } if state == "approved"))
    );
    // Every tool_use got its tool_result: the fake validated each request.
    let kinds: Vec<&str> = h
        .events
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|e| e.kind())
        .collect::<Vec<_>>()
        .into_iter()
        .collect();
    assert!(kinds.contains(&"approval_requested") && kinds.contains(&"approval_decided"));
}

/// Waits (pushed wake-up) for the next mail to `agent`.
async fn next_mail(store: &SqliteStore, agent: &str) -> Message {
    tokio::time::timeout(GUARD, store.receive("r1", agent, 1, MessageFilter::Any))
        .await
        .expect("guard timeout")
        .unwrap()
}

#[tokio::test]
async fn every_change_is_refused_in_plan_mode_and_the_workspace_is_unchanged() {
    let h = Harness::new(vec![
        reply(
            "main",
            1,
            vec![
                tool("Write", json!({"file_path": "README.md", "content": "changed"})),
                tool(
                    "Edit",
                    json!({"file_path": "README.md", "old_string": "hello", "new_string": "bye"}),
                ),
                tool(
                    "NotebookEdit",
                    json!({"notebook_path": "nb.ipynb", "new_source": "1", "cell_id": "c1"}),
                ),
                tool("Bash", json!({"command": "touch created.txt"})),
                tool("Bash", json!({"command": "sed -i s/hello/bye/ README.md"})),
                tool(
                    "Agent",
                    json!({"description": "edit", "prompt": "edit README", "subagent_type": "general"}),
                ),
                tool("SpawnTeammate", json!({"name": "bob", "prompt": "edit"})),
            ],
        ),
        reply("main", 2, vec![Block::text("Nothing changed.")]),
    ])
    .await;
    std::fs::write(
        h.workspace().join("nb.ipynb"),
        r#"{"cells":[{"cell_type":"code","id":"c1","metadata":{},"source":["1"],"outputs":[],"execution_count":null}],"metadata":{},"nbformat":4,"nbformat_minor":5}"#,
    )
    .unwrap();
    let before = h.workspace_hash();
    h.member("main", MemberKind::Lead).await;
    let mut agent = start(
        h.single(PlanApprover::Human),
        spec("main", AgentKind::Main, PermissionMode::Plan),
        "Change things.",
    )
    .await;
    assert_eq!(run(&mut agent).await, finished("Nothing changed."));
    let calls = h.tool_calls("main").await;
    assert_eq!(calls.len(), 7);
    for (tool, decision, content, is_error) in &calls {
        assert_eq!(decision, "deny", "{tool}: {content}");
        assert!(is_error, "{tool}");
        if tool != "SpawnTeammate" {
            assert!(content.contains("plan mode"), "{tool}: {content}");
        }
    }
    assert_eq!(h.workspace_hash(), before);
    assert_eq!(
        h.store.roster("r1").await.unwrap().len(),
        3,
        "no subagent started"
    );
    h.fake.verify().unwrap();
}

#[tokio::test]
async fn teammate_plan_goes_to_the_lead_and_a_closed_auto_gate_restores_default() {
    let h = Harness::new(vec![
        reply(
            "alice",
            1,
            vec![tool("ExitPlanMode", json!({"plan": PLAN}))],
        ),
        reply("alice", 2, vec![Block::text("Implementing.")]),
    ])
    .await;
    h.member("lead", MemberKind::Lead).await;
    h.member("alice", MemberKind::Teammate).await;
    let context = h.single(PlanApprover::Human);
    let mut spec = teammate("alice", PermissionMode::Plan);
    spec.pre_plan_mode = Some(PermissionMode::Auto);
    spec.approval_ceiling = Some(PermissionMode::BypassPermissions);
    let mut agent = start(context, spec, "Plan the greeting.").await;
    assert_eq!(
        agent.plan_file().unwrap(),
        h.plans().agent_file("alice").as_path()
    );
    let task = tokio::spawn(async move {
        let outcome = run(&mut agent).await;
        (outcome, agent.mode(), agent.pre_plan_mode())
    });
    let request = next_mail(&h.store, "lead").await;
    assert_eq!(request.kind, "plan_approval_request");
    assert_eq!(request.sender, "alice");
    let MessageBody::PlanApprovalRequest {
        request_id,
        plan_file,
        plan,
        responder,
        revision,
        previous_request_id,
        allowed_prompts,
    } = request.body.clone()
    else {
        panic!("not a plan request");
    };
    assert_eq!(request_id, "plan-alice-1");
    assert_eq!((revision, previous_request_id), (1, None));
    assert!(allowed_prompts.is_empty());
    assert_eq!(responder, "lead");
    assert_eq!(plan, PLAN);
    assert_eq!(PathBuf::from(&plan_file), h.plans().agent_file("alice"));
    // The gate closes while alice waits; then the lead approves without granting a mode.
    h.store
        .update_auto_gate("r1", AutoGateUpdate::Close)
        .await
        .unwrap();
    h.store
        .respond(NewResponse {
            run_id: "r1".into(),
            sender: "lead".into(),
            body: MessageBody::PlanApprovalResponse {
                request_id: request_id.clone(),
                approved: true,
                feedback: Some("Keep it small.".into()),
                mode: None,
                lowered_from: None,
                edited_plan: None,
                clear_context: false,
                rule: None,
                dropped_grants: Vec::new(),
                grants: Vec::new(),
            },
            idempotency_key: None,
        })
        .await
        .unwrap();
    let (outcome, mode, pre_plan) = tokio::time::timeout(GUARD, task).await.unwrap().unwrap();
    assert_eq!(outcome, finished("Implementing."));
    assert_eq!(mode, PermissionMode::Default, "auto falls back to default");
    assert_eq!(pre_plan, None);
    let calls = h.tool_calls("alice").await;
    assert!(calls[0].2.contains("gate closed"), "{}", calls[0].2);
    assert!(calls[0].2.contains("Keep it small."), "{}", calls[0].2);
    assert_eq!(modes(&h.records("alice").await), [PermissionMode::Default]);
    let answered = h.store.request("r1", &request_id).await.unwrap().unwrap();
    assert_eq!(answered.response.unwrap().responder, "lead");
    h.fake.verify().unwrap();
}

#[tokio::test]
async fn a_rejected_teammate_plan_keeps_planning_with_the_feedback() {
    let h = Harness::new(vec![
        reply(
            "alice",
            1,
            vec![tool("ExitPlanMode", json!({"plan": PLAN}))],
        ),
        reply("alice", 2, vec![Block::text("Revising.")]),
    ])
    .await;
    h.member("lead", MemberKind::Lead).await;
    h.member("alice", MemberKind::Teammate).await;
    let mut agent = start(
        h.single(PlanApprover::Human),
        teammate("alice", PermissionMode::Plan),
        "Plan.",
    )
    .await;
    let task = tokio::spawn(async move {
        let outcome = run(&mut agent).await;
        (outcome, agent.mode())
    });
    let request = next_mail(&h.store, "lead").await;
    h.store
        .respond(NewResponse {
            run_id: "r1".into(),
            sender: "lead".into(),
            body: MessageBody::PlanApprovalResponse {
                request_id: request.request_id.unwrap(),
                approved: false,
                feedback: Some("Add tests.".into()),
                mode: None,
                lowered_from: None,
                edited_plan: None,
                clear_context: false,
                rule: None,
                dropped_grants: Vec::new(),
                grants: Vec::new(),
            },
            idempotency_key: None,
        })
        .await
        .unwrap();
    let (_, mode) = tokio::time::timeout(GUARD, task).await.unwrap().unwrap();
    assert_eq!(mode, PermissionMode::Plan);
    let calls = h.tool_calls("alice").await;
    assert!(
        calls[0].3 && calls[0].2.contains("Add tests."),
        "{:?}",
        calls[0]
    );
}

/// An `allowedPrompts` entry that is no valid grant is refused with what to fix, and nothing
/// is sent; the corrected call goes through carrying the rules.
#[tokio::test]
async fn an_invalid_allowed_prompt_is_an_error_the_model_can_fix() {
    let h = Harness::new(vec![
        reply(
            "alice",
            1,
            vec![tool(
                "ExitPlanMode",
                json!({"plan": PLAN, "allowedPrompts": ["Bash"]}),
            )],
        ),
        reply(
            "alice",
            2,
            vec![tool(
                "ExitPlanMode",
                json!({"plan": PLAN, "allowedPrompts": [{"tool": "Bash", "prompt": "cargo test"}]}),
            )],
        ),
    ])
    .await;
    h.member("lead", MemberKind::Lead).await;
    h.member("alice", MemberKind::Teammate).await;
    let mut agent = start(
        h.single(PlanApprover::Human),
        teammate("alice", PermissionMode::Plan),
        "Plan.",
    )
    .await;
    let task = tokio::spawn(async move { run(&mut agent).await });
    let request = next_mail(&h.store, "lead").await;
    assert_eq!(request.request_id.as_deref(), Some("plan-alice-1"));
    let MessageBody::PlanApprovalRequest {
        allowed_prompts, ..
    } = request.body.clone()
    else {
        panic!("not a plan request");
    };
    assert_eq!(allowed_prompts, vec!["Bash(cargo test:*)".to_owned()]);
    let calls = h.tool_calls("alice").await;
    assert!(calls[0].3, "{:?}", calls[0]);
    assert!(
        calls[0].2.contains("`Bash` alone allows every call")
            && calls[0].2.contains("allowedPrompts"),
        "{:?}",
        calls[0]
    );
    assert_eq!(
        h.store.requests("r1").await.unwrap().len(),
        1,
        "one request only"
    );
    task.abort();
}

#[tokio::test]
async fn subagents_cannot_spawn_plan_or_ask_nor_write_plan_files() {
    let h = Harness::new(vec![
        reply(
            "main",
            1,
            vec![tool(
                "Agent",
                json!({"description": "try things", "prompt": "Try.", "subagent_type": "general"}),
            )],
        ),
        reply(
            "main.sub-1",
            1,
            vec![
                tool(
                    "Agent",
                    json!({"description": "x", "prompt": "x", "subagent_type": "Plan"}),
                ),
                tool("EnterPlanMode", json!({})),
                tool("ExitPlanMode", json!({"plan": PLAN})),
                tool(
                    "AskUserQuestion",
                    json!({"questions": [{"question": "Which?", "header": "Pick",
                        "options": [{"label": "a", "description": "A"}, {"label": "b", "description": "B"}]}]}),
                ),
            ],
        ),
        reply("main.sub-1", 2, vec![Block::text("I was refused four times.")]),
        reply("main", 2, vec![Block::text("The subagent reported.")]),
    ])
    .await;
    h.member("main", MemberKind::Lead).await;
    let mut agent = start(
        h.single(PlanApprover::Human),
        spec("main", AgentKind::Main, PermissionMode::BypassPermissions),
        "Delegate.",
    )
    .await;
    run(&mut agent).await;
    let sub_calls = h.tool_calls("main.sub-1").await;
    assert_eq!(sub_calls.len(), 4, "{:?}", h.tool_calls("main").await);
    for (tool, decision, content, _) in &sub_calls {
        assert_eq!(decision, "deny", "{tool}");
        assert!(
            content.contains("a subagent cannot call"),
            "{tool}: {content}"
        );
    }
    let parent = h.tool_calls("main").await;
    assert_eq!(parent[0].0, "Agent");
    assert_eq!(parent[0].2, "I was refused four times.");
    let offered: Vec<String> = h
        .fake
        .requests()
        .iter()
        .find(|r| r.agent.as_deref() == Some("main.sub-1"))
        .unwrap()
        .body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    for forbidden in [
        "Agent",
        "EnterPlanMode",
        "ExitPlanMode",
        "AskUserQuestion",
        "SendMessage",
    ] {
        assert!(
            !offered.iter().any(|t| t == forbidden),
            "{forbidden} offered"
        );
    }
    let roster = h.store.roster("r1").await.unwrap();
    let sub = roster.iter().find(|m| m.agent == "main.sub-1").unwrap();
    assert_eq!(sub.kind, MemberKind::Subagent);
    assert_eq!(sub.parent.as_deref(), Some("main"));
    h.fake.verify().unwrap();
}

#[tokio::test]
async fn a_subagent_write_to_a_plan_file_is_denied() {
    let h = Harness::new(Vec::new()).await;
    let plan_file = h.plans().main_file().display().to_string();
    h.fake
        .append_script(vec![
            reply(
                "main",
                1,
                vec![tool(
                    "Agent",
                    json!({"description": "w", "prompt": "Write the plan.", "subagent_type": "general"}),
                )],
            ),
            reply(
                "main.sub-1",
                1,
                vec![tool("Write", json!({"file_path": plan_file, "content": PLAN}))],
            ),
            reply("main.sub-1", 2, vec![Block::text("Denied.")]),
            reply("main", 2, vec![Block::text("ok")]),
        ])
        .unwrap();
    h.member("main", MemberKind::Lead).await;
    let mut agent = start(
        h.single(PlanApprover::Human),
        spec("main", AgentKind::Main, PermissionMode::BypassPermissions),
        "Delegate.",
    )
    .await;
    run(&mut agent).await;
    let calls = h.tool_calls("main.sub-1").await;
    assert_eq!(calls[0].1, "deny");
    assert!(
        calls[0].2.contains("never write plan files"),
        "{}",
        calls[0].2
    );
    assert!(!h.plans().main_file().exists());
}

#[tokio::test]
async fn plan_file_names_per_agent_and_slugs_reserved_with_create_new() {
    let h = Harness::new(Vec::new()).await;
    for agent in ["main", "alice", "worker-1", "worker-2"] {
        h.member(agent, MemberKind::Teammate).await;
    }
    let context = h.single(PlanApprover::Human);
    let main = start(
        context.clone(),
        spec("main", AgentKind::Main, PermissionMode::Plan),
        "p",
    )
    .await;
    let mut files = vec![main.plan_file().unwrap().to_path_buf()];
    for agent in ["alice", "worker-1", "worker-2"] {
        let mate = start(context.clone(), teammate(agent, PermissionMode::Plan), "p").await;
        files.push(mate.plan_file().unwrap().to_path_buf());
    }
    let dir = h.plans().dir().to_path_buf();
    assert_eq!(
        files,
        [
            dir.join("calm-baking-otter.md"),
            dir.join("calm-baking-otter-agent-alice.md"),
            dir.join("calm-baking-otter-agent-worker-1.md"),
            dir.join("calm-baking-otter-agent-worker-2.md"),
        ]
    );
    // Two reservations with the same random sequence still get distinct slugs.
    let reserved = h.dir().join("reserved");
    let first = PlanFiles::reserve(&reserved, &mut fastrand::Rng::with_seed(3)).unwrap();
    let second = PlanFiles::reserve(&reserved, &mut fastrand::Rng::with_seed(3)).unwrap();
    assert_ne!(first.slug(), second.slug());
    assert!(first.main_file().exists() && second.main_file().exists());
}

#[tokio::test]
async fn per_mode_models_and_the_mode_section_change_between_plan_and_act_turns() {
    let h = Harness::new(vec![
        reply("main", 1, vec![tool("EnterPlanMode", json!({}))]),
        reply(
            "main",
            2,
            vec![tool(
                "Agent",
                json!({"description": "research", "prompt": "Find the files.", "subagent_type": "Plan"}),
            )],
        ),
        reply(
            "main.sub-1",
            1,
            vec![Block::text("### Critical Files for Implementation
- README.md")],
        ),
        reply("main", 3, vec![tool("ExitPlanMode", json!({"plan": PLAN}))]),
        reply("main", 4, vec![Block::text("Acting now.")]),
    ])
    .await;
    h.member("main", MemberKind::Lead).await;
    let models = ModelRouter {
        plan: h.model("claude-opus-4-1"),
        act: h.model("claude-sonnet-4-5"),
    };
    let context = h.routed(
        policy("approve_all = true\nmax_mode = \"acceptEdits\"\n"),
        models,
    );
    let mut agent = start(
        context,
        spec("main", AgentKind::Main, PermissionMode::AcceptEdits),
        "Plan then act.",
    )
    .await;
    run(&mut agent).await;
    h.fake.verify().unwrap();
    let requests = h.fake.requests();
    let main: Vec<_> = requests
        .iter()
        .filter(|r| r.agent.as_deref() == Some("main"))
        .collect();
    let model = |i: usize| main[i].body["model"].as_str().unwrap().to_owned();
    let newest_user_turn = |body: &Value| {
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .unwrap()
            .to_string()
    };
    assert_eq!(
        (0..4).map(model).collect::<Vec<_>>(),
        [
            "claude-sonnet-4-5",
            "claude-opus-4-1",
            "claude-opus-4-1",
            "claude-sonnet-4-5"
        ]
    );
    assert!(newest_user_turn(&main[0].body).contains("Mode: acceptEdits"));
    assert!(newest_user_turn(&main[1].body).contains("Mode: plan"));
    assert!(newest_user_turn(&main[2].body).contains("Mode: plan"));
    assert!(newest_user_turn(&main[3].body).contains("Mode: acceptEdits"));
    // The cached prefix stays the same: system prompt and tools do not depend on the mode.
    for request in &main {
        assert_eq!(request.body["system"], main[0].body["system"]);
        assert_eq!(request.body["tools"], main[0].body["tools"]);
    }
    // The Plan subagent inherits the parent's current (plan-mode) model.
    let sub = requests
        .iter()
        .find(|r| r.agent.as_deref() == Some("main.sub-1"))
        .unwrap();
    assert_eq!(sub.body["model"], "claude-opus-4-1");
    assert!(
        sub.body["system"]
            .to_string()
            .contains("### Critical Files for Implementation")
    );
    let calls = h.tool_calls("main").await;
    assert!(calls[1].2.contains("Critical Files"), "{}", calls[1].2);
}

#[tokio::test]
async fn a_main_agent_with_the_human_approver_stops_and_resumes_after_the_decision() {
    let h = Harness::new(vec![
        reply("main", 1, vec![tool("ExitPlanMode", json!({"plan": PLAN}))]),
        reply("main", 2, vec![Block::text("Approved, going on.")]),
    ])
    .await;
    h.member("main", MemberKind::Lead).await;
    let context = h.single(PlanApprover::Human);
    let mut agent = start(
        context.clone(),
        spec("main", AgentKind::Main, PermissionMode::Plan),
        "Plan.",
    )
    .await;
    let outcome = run(&mut agent).await;
    assert_eq!(
        outcome,
        AgentOutcome::AwaitingDecision {
            request_id: "plan-main-1".into(),
            plan_file: h.plans().main_file(),
        }
    );
    drop(agent);
    h.store
        .respond(NewResponse {
            run_id: "r1".into(),
            sender: "human".into(),
            body: MessageBody::PlanApprovalResponse {
                request_id: "plan-main-1".into(),
                approved: true,
                feedback: None,
                mode: Some("acceptEdits".into()),
                lowered_from: None,
                edited_plan: None,
                clear_context: true,
                rule: None,
                dropped_grants: Vec::new(),
                grants: Vec::new(),
            },
            idempotency_key: None,
        })
        .await
        .unwrap();
    let mut resumed = AgentRuntime::resume(context, "main", None, None)
        .await
        .unwrap();
    assert_eq!(resumed.turn(), 1, "the turn index survives the restart");
    assert_eq!(run(&mut resumed).await, finished("Approved, going on."));
    assert_eq!(resumed.mode(), PermissionMode::AcceptEdits);
    // clear_context: the second request carries only the approved plan.
    let second = h
        .fake
        .requests()
        .into_iter()
        .find(|r| r.turn == Some(2))
        .unwrap();
    let messages = second.body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1);
    assert!(messages[0].to_string().contains("## Steps"));
    h.fake.verify().unwrap();
}

#[tokio::test]
async fn a_teammate_asks_the_lead_by_mail_and_reads_run_concurrently() {
    let h = Harness::new(vec![
        reply(
            "alice",
            1,
            vec![
                tool("Read", json!({"file_path": "README.md"})),
                tool("Grep", json!({"pattern": "hello"})),
                tool("Glob", json!({"pattern": "*.md"})),
                tool("Write", json!({"file_path": "notes.txt", "content": "n\n"})),
                tool(
                    "AskUserQuestion",
                    json!({"questions": [{"question": "Which greeting?", "header": "Greeting",
                        "options": [{"label": "hi", "description": "short"},
                                    {"label": "hello", "description": "long"}]}]}),
                ),
            ],
        ),
        reply("alice", 2, vec![Block::text("Asked and wrote.")]),
    ])
    .await;
    h.member("lead", MemberKind::Lead).await;
    h.member("alice", MemberKind::Teammate).await;
    let mut agent = start(
        h.single(PlanApprover::Human),
        teammate("alice", PermissionMode::Default),
        "Write notes.",
    )
    .await;
    let task = tokio::spawn(async move { run(&mut agent).await });
    let permission = next_mail(&h.store, "lead").await;
    assert_eq!(permission.kind, "permission_request");
    assert_eq!(permission.body.clone().responder(), Some("lead"));
    h.store
        .respond(NewResponse {
            run_id: "r1".into(),
            sender: "lead".into(),
            body: MessageBody::PermissionResponse {
                request_id: permission.request_id.clone().unwrap(),
                approved: true,
                feedback: None,
                rule: None,
            },
            idempotency_key: None,
        })
        .await
        .unwrap();
    let question = next_mail(&h.store, "lead").await;
    assert_eq!(question.kind, "question");
    h.store
        .respond(NewResponse {
            run_id: "r1".into(),
            sender: "lead".into(),
            body: MessageBody::Answer {
                request_id: question.request_id.clone().unwrap(),
                answer: "hi".into(),
            },
            idempotency_key: None,
        })
        .await
        .unwrap();
    let outcome = tokio::time::timeout(GUARD, task).await.unwrap().unwrap();
    assert_eq!(outcome, finished("Asked and wrote."));
    let calls = h.tool_calls("alice").await;
    let decisions: Vec<(&str, &str)> = calls
        .iter()
        .map(|(tool, decision, _, _)| (tool.as_str(), decision.as_str()))
        .collect();
    assert_eq!(
        decisions,
        [
            ("Read", "allow"),
            ("Grep", "allow"),
            ("Glob", "allow"),
            ("Write", "allow"),
            ("AskUserQuestion", "allow"),
        ]
    );
    assert!(calls[3].2.contains("Created"), "{}", calls[3].2);
    assert!(calls[4].2.contains("Which greeting?: hi"), "{}", calls[4].2);
    assert_eq!(
        std::fs::read_to_string(h.workspace().join("notes.txt")).unwrap(),
        "n\n"
    );
    // The answers were acked with the calls that consumed them.
    for message in h.store.messages("r1", Some("alice")).await.unwrap() {
        assert_eq!(message.state, DeliveryState::Acked, "{}", message.kind);
    }
    h.fake.verify().unwrap();
}

#[tokio::test]
async fn an_unfinished_subagent_is_not_resumed_and_its_parent_gets_an_error() {
    let h = Harness::new(vec![
        reply(
            "main",
            1,
            vec![tool(
                "Agent",
                json!({"description": "slow", "prompt": "Take long.", "subagent_type": "Plan"}),
            )],
        ),
        reply("main.sub-1", 1, vec![Block::text("never seen")]).fault(muster_fake_llm::Fault {
            first_byte_delay_ms: 30_000,
            ..Default::default()
        }),
        reply("main", 2, vec![Block::text("Recovered.")]),
    ])
    .await;
    h.member("main", MemberKind::Lead).await;
    let context = h.single(PlanApprover::Human);
    let mut agent = start(
        context.clone(),
        spec("main", AgentKind::Main, PermissionMode::Default),
        "Delegate.",
    )
    .await;
    let task = tokio::spawn(async move { agent.run().await });
    h.events
        .wait_for(|e| matches!(e, RunEvent::AgentStarted { agent, .. } if agent == "main.sub-1"))
        .await;
    task.abort(); // the process "crashes" while the subagent works
    let _ = task.await;
    let mut resumed = AgentRuntime::resume(context, "main", None, None)
        .await
        .unwrap();
    assert_eq!(run(&mut resumed).await, finished("Recovered."));
    let calls = h.tool_calls("main").await;
    assert_eq!(calls.len(), 1);
    assert!(
        calls[0].3 && calls[0].2.contains("interrupted by a crash"),
        "{:?}",
        calls[0]
    );
    let roster = h.store.roster("r1").await.unwrap();
    assert!(
        roster.iter().all(|m| m.agent != "main.sub-2"),
        "the subagent is not started again"
    );
}

#[tokio::test]
async fn a_policy_approver_answers_the_main_agents_asks_through_the_store() {
    let h = Harness::new(vec![
        reply(
            "main",
            1,
            vec![
                tool("Write", json!({"file_path": "notes.txt", "content": "n\n"})),
                tool("Bash", json!({"command": "touch other.txt"})),
            ],
        ),
        reply("main", 2, vec![Block::text("One of two.")]),
    ])
    .await;
    h.member("main", MemberKind::Lead).await;
    let context = h.single(policy("[permissions]\nallow = [\"Write(notes.txt)\"]\n"));
    let mut agent = start(
        context,
        spec("main", AgentKind::Main, PermissionMode::Default),
        "Write notes.",
    )
    .await;
    run(&mut agent).await;
    let calls = h.tool_calls("main").await;
    assert_eq!(calls[0].1, "allow", "{}", calls[0].2);
    assert_eq!(calls[1].1, "deny");
    assert!(calls[1].2.contains("policy has no rule"), "{}", calls[1].2);
    assert!(h.workspace().join("notes.txt").exists());
    assert!(!h.workspace().join("other.txt").exists());
    let requests = h.store.requests("r1").await.unwrap();
    assert_eq!(requests.len(), 2);
    for request in requests {
        assert_eq!(request.kind, "permission_request");
        assert_eq!(request.response.unwrap().responder, "policy");
    }
}

#[tokio::test]
async fn an_idle_agent_wakes_on_mail_and_sees_it_as_a_mail_tag() {
    let mut from_lead = reply("alice", 2, vec![Block::text("Got your note.")]);
    from_lead.turn = None;
    from_lead.when = Some(muster_fake_llm::When {
        mail_type: Some("text".into()),
        from: Some("lead".into()),
    });
    let h = Harness::new(vec![
        reply("alice", 1, vec![Block::text("Idle.")]),
        from_lead,
    ])
    .await;
    h.member("lead", MemberKind::Lead).await;
    h.member("alice", MemberKind::Teammate).await;
    let mut agent = start(
        h.single(PlanApprover::Human),
        teammate("alice", PermissionMode::Default),
        "Wait for the lead.",
    )
    .await;
    assert_eq!(run(&mut agent).await, finished("Idle."));
    let store = h.store.clone();
    let waiter = tokio::spawn(async move {
        agent.wait_for_mail(8).await.unwrap();
        let outcome = run(&mut agent).await;
        (outcome, agent)
    });
    store
        .send(NewMessage {
            run_id: "r1".into(),
            sender: "lead".into(),
            recipient: "alice".into(),
            body: MessageBody::Text {
                text: "Use <b>bold</b>.".into(),
                summary: None,
            },
            idempotency_key: None,
        })
        .await
        .unwrap();
    let (outcome, _agent) = tokio::time::timeout(GUARD, waiter).await.unwrap().unwrap();
    assert_eq!(outcome, finished("Got your note."));
    for message in h.store.messages("r1", Some("alice")).await.unwrap() {
        assert_eq!(message.state, DeliveryState::Acked);
    }
    let recorded = h.records("alice").await.iter().any(|r| {
        matches!(r, Record::Message { message, .. }
            if serde_json::to_string(message).unwrap().contains("from=\\\"lead\\\""))
    });
    assert!(recorded, "the mail turn is recorded with its ack");
    h.fake.verify().unwrap();
}

#[tokio::test]
async fn after_approval_the_snapshot_is_authoritative_on_resume() {
    let h = Harness::new(vec![
        reply("main", 1, vec![tool("ExitPlanMode", json!({"plan": PLAN}))]),
        reply("main", 2, vec![Block::text("never seen")]).fault(muster_fake_llm::Fault {
            first_byte_delay_ms: 30_000,
            ..Default::default()
        }),
    ])
    .await;
    h.member("main", MemberKind::Lead).await;
    let context = h.single(policy("approve_all = true\n"));
    let mut agent = start(
        context.clone(),
        spec("main", AgentKind::Main, PermissionMode::Plan),
        "Plan.",
    )
    .await;
    let task = tokio::spawn(async move { agent.run().await });
    h.events
        .wait_for(|e| matches!(e, RunEvent::ApprovalDecided { approved: true, .. }))
        .await;
    task.abort(); // crash while the next model request is in flight
    let _ = task.await;
    let plan_file = h.plans().main_file();
    std::fs::write(&plan_file, "changed outside muster\n").unwrap();
    let resumed = AgentRuntime::resume(context, "main", None, None)
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(&plan_file).unwrap(), PLAN);
    assert_eq!(
        std::fs::read_to_string(plan_file.with_extension("edited.md")).unwrap(),
        "changed outside muster\n"
    );
    assert_eq!(resumed.mode(), PermissionMode::Default);
    assert_eq!(
        resumed.turn(),
        1,
        "the request in flight is sent again as turn 2"
    );
}

#[tokio::test]
async fn a_subagent_asks_under_its_parents_id_and_the_answer_comes_back() {
    let h = Harness::new(vec![
        reply(
            "alice",
            1,
            vec![tool(
                "Agent",
                json!({"description": "write", "prompt": "Write sub.txt.", "subagent_type": "general"}),
            )],
        ),
        reply(
            "alice.sub-1",
            1,
            vec![tool("Write", json!({"file_path": "sub.txt", "content": "s\n"}))],
        ),
        reply("alice.sub-1", 2, vec![Block::text("Wrote it.")]),
        reply("alice", 2, vec![Block::text("Delegated.")]),
    ])
    .await;
    h.member("lead", MemberKind::Lead).await;
    h.member("alice", MemberKind::Teammate).await;
    let mut agent = start(
        h.single(PlanApprover::Human),
        teammate("alice", PermissionMode::Default),
        "Delegate.",
    )
    .await;
    let task = tokio::spawn(async move { run(&mut agent).await });
    let mut asked = Vec::new();
    for _ in 0..2 {
        let request = next_mail(&h.store, "lead").await;
        let MessageBody::PermissionRequest { tool, .. } = request.body.clone() else {
            panic!("not a permission request: {}", request.kind);
        };
        asked.push((request.sender.clone(), tool));
        h.store
            .respond(NewResponse {
                run_id: "r1".into(),
                sender: "lead".into(),
                body: MessageBody::PermissionResponse {
                    request_id: request.request_id.clone().unwrap(),
                    approved: true,
                    feedback: None,
                    rule: None,
                },
                idempotency_key: None,
            })
            .await
            .unwrap();
    }
    assert_eq!(
        asked,
        [
            ("alice".to_owned(), "Agent".to_owned()),
            ("alice".to_owned(), "Write".to_owned())
        ]
    );
    assert_eq!(
        tokio::time::timeout(GUARD, task).await.unwrap().unwrap(),
        finished("Delegated.")
    );
    assert!(h.workspace().join("sub.txt").exists());
    assert_eq!(h.tool_calls("alice.sub-1").await[0].1, "allow");
    for message in h.store.messages("r1", Some("alice")).await.unwrap() {
        assert_eq!(message.state, DeliveryState::Acked, "{}", message.kind);
    }
}

#[tokio::test]
async fn plan_mode_tools_refuse_out_of_order_calls_with_clear_messages() {
    let h = Harness::new(vec![
        reply("main", 1, vec![tool("ExitPlanMode", json!({"plan": PLAN}))]),
        reply("main", 2, vec![tool("EnterPlanMode", json!({}))]),
        reply(
            "main",
            3,
            vec![
                tool("EnterPlanMode", json!({})),
                tool(
                    "ExitPlanMode",
                    json!({"needs_more_exploration": true, "plan": "## Goal\ndraft\n"}),
                ),
                tool("ExitPlanMode", json!({})),
            ],
        ),
        reply("main", 4, vec![Block::text("ok")]),
    ])
    .await;
    h.member("main", MemberKind::Lead).await;
    let mut agent = start(
        h.single(PlanApprover::Human),
        spec("main", AgentKind::Main, PermissionMode::Default),
        "Go.",
    )
    .await;
    run(&mut agent).await;
    let calls = h.tool_calls("main").await;
    assert!(
        calls[0].3 && calls[0].2.contains("not in plan mode"),
        "{:?}",
        calls[0]
    );
    assert!(
        !calls[1].3 && calls[1].2.contains("Entered plan mode"),
        "{:?}",
        calls[1]
    );
    assert!(
        calls[2].3 && calls[2].2.contains("already in plan mode"),
        "{:?}",
        calls[2]
    );
    assert!(
        !calls[3].3 && calls[3].2.contains("Draft saved"),
        "{:?}",
        calls[3]
    );
    // With no plan in the input, the draft in the file is checked: it lacks Steps and Files.
    assert!(
        calls[4].3 && calls[4].2.contains("`## Steps`"),
        "{:?}",
        calls[4]
    );
    assert_eq!(
        std::fs::read_to_string(h.plans().main_file()).unwrap(),
        "## Goal\ndraft\n"
    );
    assert_eq!(agent.mode(), PermissionMode::Plan);
    assert_eq!(agent.pre_plan_mode(), Some(PermissionMode::Default));
    let records = h.records("main").await;
    assert!(
        records
            .iter()
            .any(|r| matches!(r, Record::PlanSnapshot { state, .. } if state == "draft"))
    );
}

/// Where an interrupted call's recorded group runs decides whether resume kills it: only on
/// this host in this boot (or in a record from before groups carried a machine); a group on
/// another host is named in the result instead.
#[tokio::test]
async fn resume_kills_an_interrupted_group_only_on_the_machine_that_runs_it() {
    let here = muster_agents::machine::this_machine().clone();
    let rows: [(Option<&str>, Option<&str>, bool, &str); 4] = [
        (
            Some(&here.host),
            Some(&here.boot_id),
            true,
            "interrupted by a crash; inspect",
        ),
        (None, None, true, "interrupted by a crash; inspect"),
        (
            Some(&here.host),
            Some("an-earlier-boot"),
            false,
            "interrupted by a crash; inspect",
        ),
        (
            Some("another-host"),
            Some(&here.boot_id),
            false,
            "may still be running on host another-host (process group",
        ),
    ];
    for (host, boot_id, killed, says) in rows {
        let h = Harness::new(vec![
            reply(
                "main",
                1,
                vec![tool(
                    "Bash",
                    json!({"command": "echo $$ > ready.fifo; exec cat hold.fifo"}),
                )],
            ),
            reply("main", 2, vec![Block::text("after")]),
        ])
        .await;
        h.member("main", MemberKind::Lead).await;
        for fifo in ["ready.fifo", "hold.fifo", "victim.fifo"] {
            let made = std::process::Command::new("mkfifo")
                .arg(h.workspace().join(fifo))
                .status()
                .unwrap();
            assert!(made.success());
        }
        let ready = tokio::net::unix::pipe::OpenOptions::new()
            .read_write(true)
            .open_receiver(h.workspace().join("ready.fifo"))
            .unwrap();
        let context = h.single(PlanApprover::Human);
        let mut agent = start(
            context.clone(),
            spec("main", AgentKind::Main, PermissionMode::BypassPermissions),
            "Run it.",
        )
        .await;
        let task = tokio::spawn(async move { agent.run().await });
        // The command runs: its tool_started record is committed.
        let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(ready));
        tokio::time::timeout(GUARD, lines.next_line())
            .await
            .expect("guard timeout: the command never ran")
            .unwrap();
        task.abort(); // the process "crashes" mid-command
        let _ = task.await;
        // The call's group as another machine (or this one) would have recorded it: a real
        // process group of its own, blocked on a FIFO nobody writes.
        let mut victim = tokio::process::Command::new("cat")
            .arg(h.workspace().join("victim.fifo"))
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let group = victim.id().unwrap() as i32;
        let tool_use_id = h
            .records("main")
            .await
            .into_iter()
            .find_map(|r| match r {
                Record::ToolStarted { tool_use_id, .. } => Some(tool_use_id),
                _ => None,
            })
            .unwrap();
        let recorded = Record::ToolStarted {
            tool_use_id,
            tool: "Bash".into(),
            process_group: Some(group),
            host: host.map(str::to_owned),
            boot_id: boot_id.map(str::to_owned),
        };
        h.store
            .append_records("r1", vec![recorded.to_new("main").unwrap()])
            .await
            .unwrap();
        let mut resumed = AgentRuntime::resume(context, "main", None, None)
            .await
            .unwrap();
        assert_eq!(run(&mut resumed).await, finished("after"));
        let calls = h.tool_calls("main").await;
        assert_eq!(calls.len(), 1, "{host:?}");
        assert!(
            calls[0].3 && calls[0].2.contains(says),
            "{host:?}: {:?}",
            calls[0]
        );
        if killed {
            let status = tokio::time::timeout(GUARD, victim.wait())
                .await
                .expect("guard timeout: the group was not killed")
                .unwrap();
            assert_eq!(
                std::os::unix::process::ExitStatusExt::signal(&status),
                Some(9),
                "{host:?}"
            );
        } else {
            // It cannot end by itself (blocked on the FIFO): still there means not killed.
            assert!(victim.try_wait().unwrap().is_none(), "{host:?} {boot_id:?}");
            victim.kill().await.unwrap();
        }
    }
}

#[tokio::test]
async fn bash_records_tool_started_with_its_process_group_before_it_runs() {
    let h = Harness::new(vec![
        reply(
            "main",
            1,
            vec![tool("Bash", json!({"command": "echo started > ran.txt"}))],
        ),
        reply("main", 2, vec![Block::text("ran")]),
    ])
    .await;
    h.member("main", MemberKind::Lead).await;
    let mut agent = start(
        h.single(PlanApprover::Human),
        spec("main", AgentKind::Main, PermissionMode::BypassPermissions),
        "Run it.",
    )
    .await;
    run(&mut agent).await;
    let records = h.records("main").await;
    let started = records
        .iter()
        .position(|r| matches!(r, Record::ToolStarted { process_group: Some(group), tool, .. } if *group > 0 && tool == "Bash"))
        .expect("a tool_started record with the process group");
    let finished = records
        .iter()
        .position(|r| matches!(r, Record::ToolCall { tool, .. } if tool == "Bash"))
        .unwrap();
    assert!(started < finished);
    assert!(h.workspace().join("ran.txt").exists());
}

/// A response held at gate `name` of the fake server until the test opens it.
fn held(entry: ScriptEntry, name: &str) -> ScriptEntry {
    entry.fault(muster_fake_llm::Fault {
        hold: Some(name.into()),
        ..Default::default()
    })
}

/// The user texts of the context, in order.
fn user_texts(agent: &AgentRuntime) -> Vec<String> {
    agent
        .messages()
        .iter()
        .filter(|m| m.role == muster_agents::model::Role::User)
        .flat_map(|m| &m.content)
        .filter_map(|block| match block {
            muster_agents::model::ContentBlock::Text { text } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

/// An interrupt that lands while a teammate takes its plan decision: the lease of the
/// decision's mail has committed, but the turn is not told yet (the store's after-commit hook
/// holds the writer there until the interrupt dropped the turn). The turn ends interrupted and
/// the decision's mail is pending again, for the teammate's next look. Before, the dropped
/// lease kept it leased to no one until a new epoch.
#[tokio::test(flavor = "multi_thread")]
async fn an_interrupt_while_a_teammate_leases_its_plan_decision_hands_the_decision_back() {
    type Probe = (SqliteStore, tokio::runtime::Handle, TurnInterrupt);
    let probe: Arc<std::sync::OnceLock<Probe>> = Arc::default();
    let fired = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hook = {
        let (probe, fired) = (probe.clone(), fired.clone());
        CommitHook::new(move || {
            let Some((store, handle, interrupt)) = probe.get() else {
                return;
            };
            if fired.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            // Read on a store of its own (this writer is busy calling the hook).
            let mail = handle
                .block_on(store.messages("r1", Some("alice")))
                .unwrap();
            let leased = mail
                .iter()
                .any(|m| m.kind == "plan_approval_response" && m.state == DeliveryState::Leased);
            if leased {
                fired.store(true, std::sync::atomic::Ordering::SeqCst);
                // Until the turn is over: only then does the lease's caller learn of it.
                while interrupt.interrupt() {
                    std::thread::yield_now();
                }
            }
        })
    };
    let h = Harness {
        run: RunHarness::setup()
            .file("README.md", "hello\n")
            .after_commit(hook)
            .start(vec![reply(
                "alice",
                1,
                vec![tool("ExitPlanMode", json!({"plan": PLAN}))],
            )])
            .await,
        events: Arc::new(Events::default()),
    };
    h.member("lead", MemberKind::Lead).await;
    h.member("alice", MemberKind::Teammate).await;
    let mut agent = start(
        h.single(PlanApprover::Human),
        teammate("alice", PermissionMode::Plan),
        "Plan.",
    )
    .await;
    let reader = SqliteStore::open(&h.dir().join("muster.db"), StoreOptions::default()).unwrap();
    let _ = probe.set((
        reader,
        tokio::runtime::Handle::current(),
        agent.interrupter(),
    ));
    let task = tokio::spawn(async move { agent.run().await.unwrap() });
    let request = next_mail(&h.store, "lead").await;
    lead_approves(&h.store, request.request_id.unwrap()).await;
    let outcome = tokio::time::timeout(GUARD, task).await.unwrap().unwrap();
    assert!(
        fired.load(std::sync::atomic::Ordering::SeqCst),
        "the interrupt landed on the lease"
    );
    assert_eq!(outcome, AgentOutcome::TurnInterrupted);
    alices_decision_is_pending_again(&h.store).await;
}

/// A teammate's turn that fails after it leased its plan decision: the plan file became a
/// directory meanwhile, so the approved plan cannot be read and the turn ends with that
/// error. The decision's mail is pending again for the teammate's next look in this epoch, as
/// after an interrupt. Before, it stayed leased to no one until a new epoch.
#[tokio::test(flavor = "multi_thread")]
async fn a_turn_that_fails_after_leasing_its_plan_decision_hands_the_decision_back() {
    let h = Harness::new(vec![reply(
        "alice",
        1,
        vec![tool("ExitPlanMode", json!({"plan": PLAN}))],
    )])
    .await;
    h.member("lead", MemberKind::Lead).await;
    h.member("alice", MemberKind::Teammate).await;
    let mut agent = start(
        h.single(PlanApprover::Human),
        teammate("alice", PermissionMode::Plan),
        "Plan.",
    )
    .await;
    let task = tokio::spawn(async move { agent.run().await });
    let request = next_mail(&h.store, "lead").await;
    let plan_file = PathBuf::from(request.body.plan_file().unwrap());
    std::fs::remove_file(&plan_file).unwrap();
    std::fs::create_dir(&plan_file).unwrap();
    lead_approves(&h.store, request.request_id.unwrap()).await;
    let outcome = tokio::time::timeout(GUARD, task).await.unwrap().unwrap();
    assert!(
        matches!(
            outcome,
            Err(muster_agents::runtime::RuntimeError::PlanFile { .. })
        ),
        "{outcome:?}"
    );
    alices_decision_is_pending_again(&h.store).await;
}

/// The lead approves plan request `request_id` as it stands.
async fn lead_approves(store: &SqliteStore, request_id: String) {
    store
        .respond(NewResponse {
            run_id: "r1".into(),
            sender: "lead".into(),
            body: MessageBody::PlanApprovalResponse {
                request_id,
                approved: true,
                feedback: None,
                mode: None,
                lowered_from: None,
                edited_plan: None,
                clear_context: false,
                rule: None,
                dropped_grants: Vec::new(),
                grants: Vec::new(),
            },
            idempotency_key: None,
        })
        .await
        .unwrap();
}

/// alice's one plan decision is pending again (not leased to a turn that ended), and the
/// next look of her epoch takes it.
async fn alices_decision_is_pending_again(store: &SqliteStore) {
    let decision: Vec<Message> = store
        .messages("r1", Some("alice"))
        .await
        .unwrap()
        .into_iter()
        .filter(|m| m.kind == "plan_approval_response")
        .collect();
    assert_eq!(decision.len(), 1, "{decision:#?}");
    assert_eq!(decision[0].state, DeliveryState::Pending, "{decision:#?}");
    let again = store
        .try_receive("r1", "alice", 1, MessageFilter::Any)
        .await
        .unwrap();
    assert_eq!(again.map(|m| m.key), Some(decision[0].key.clone()));
}

/// `interrupt_turn` while the model request is in flight: the request is dropped, the turn
/// ends `TurnInterrupted` in one commit (a resume sees the same end), and a next prompt in
/// the same process completes, the model told of the interrupt.
#[tokio::test]
async fn an_interrupt_during_a_model_request_ends_the_turn_and_the_next_prompt_completes() {
    let h = Harness::new(vec![
        // The interrupted request is attempt 1 of turn 1; the turn's index is only taken by a
        // committed response, so the next prompt's request is turn 1 again, attempt 2.
        ScriptEntry {
            attempt: Some(1),
            ..held(reply("main", 1, vec![Block::text("never seen")]), "first")
        },
        ScriptEntry {
            attempt: Some(2),
            ..reply("main", 1, vec![Block::text("Second done.")])
        },
    ])
    .await;
    h.member("main", MemberKind::Lead).await;
    let context = h.single(PlanApprover::Human);
    let mut agent = start(
        context.clone(),
        spec("main", AgentKind::Main, PermissionMode::Default),
        "First.",
    )
    .await;
    let interrupt = agent.interrupter();
    assert!(!interrupt.interrupt(), "no turn runs yet");
    let task = tokio::spawn(async move {
        let outcome = agent.run().await.unwrap();
        (agent, outcome)
    });
    tokio::time::timeout(GUARD, h.fake.gate_reached("first", 1))
        .await
        .expect("guard timeout: the request never reached the server");
    assert!(interrupt.interrupt(), "the turn was running");
    let (mut agent, outcome) = tokio::time::timeout(GUARD, task)
        .await
        .expect("guard timeout: the turn did not end")
        .unwrap();
    assert_eq!(outcome, AgentOutcome::TurnInterrupted);
    let records = h.records("main").await;
    assert!(
        matches!(records.last(), Some(Record::TurnInterrupted { .. })),
        "{records:?}"
    );
    assert_eq!(agent.turn(), 0, "no response was committed");

    // The interrupt is durable: a resume stops where the interrupted turn did.
    let mut resumed = AgentRuntime::resume(context, "main", None, None)
        .await
        .unwrap();
    assert_eq!(run(&mut resumed).await, AgentOutcome::TurnInterrupted);
    drop(resumed);

    agent.prompt("Second.").await.unwrap();
    assert_eq!(run(&mut agent).await, finished("Second done."));
    let texts = user_texts(&agent);
    let second = texts.iter().position(|t| t == "Second.").unwrap();
    assert!(
        texts[second - 1].contains("interrupted your turn"),
        "{texts:?}"
    );
    assert!(
        agent.prompt("Third.").await.is_ok(),
        "a finished turn takes the next prompt too"
    );
}

/// `interrupt_turn` while a Bash call runs: its process group is killed as Ctrl-C kills it
/// (the command's background writer dies before it writes), the interrupted result is in the
/// store as the call's `tool_call`, and a next prompt completes.
#[cfg(unix)]
#[tokio::test]
async fn an_interrupt_during_a_bash_call_kills_its_group_and_records_the_result() {
    // A background subshell holds the witness FIFO open and would write `marker` later.
    let command = "(exec 3>witness.fifo; echo $BASHPID >&3; sleep 30; echo late > marker) & wait";
    let h = Harness::new(vec![
        reply("main", 1, vec![tool("Bash", json!({"command": command}))]),
        reply("main", 2, vec![Block::text("Second done.")]),
    ])
    .await;
    h.member("main", MemberKind::Lead).await;
    let witness_path = h.workspace().join("witness.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&witness_path)
        .status()
        .unwrap();
    assert!(made.success());
    let (started, first_line) = tokio::sync::oneshot::channel();
    let closed = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut reader = std::io::BufReader::new(std::fs::File::open(witness_path).unwrap());
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let _ = started.send(line);
        // Returns once every writer is gone: the subshell died.
        std::io::copy(&mut reader, &mut std::io::sink()).unwrap();
    });
    let context = h.single(PlanApprover::Human);
    let mut agent = start(
        context,
        spec("main", AgentKind::Main, PermissionMode::BypassPermissions),
        "Run it.",
    )
    .await;
    let interrupt = agent.interrupter();
    let task = tokio::spawn(async move {
        let outcome = agent.run().await.unwrap();
        (agent, outcome)
    });
    tokio::time::timeout(GUARD, first_line)
        .await
        .expect("guard timeout: the command never ran")
        .unwrap();
    assert!(interrupt.interrupt());
    let (mut agent, outcome) = tokio::time::timeout(GUARD, task)
        .await
        .expect("guard timeout: the turn did not end")
        .unwrap();
    assert_eq!(outcome, AgentOutcome::TurnInterrupted);
    tokio::time::timeout(GUARD, closed)
        .await
        .expect("guard timeout: the command's group outlived the interrupt")
        .unwrap();
    assert!(!h.workspace().join("marker").exists());

    let records = h.records("main").await;
    let group = records.iter().find_map(|r| match r {
        Record::ToolStarted { process_group, .. } => *process_group,
        _ => None,
    });
    assert!(
        group.is_some(),
        "the group was recorded before the command ran"
    );
    let calls = h.tool_calls("main").await;
    assert_eq!(calls.len(), 1, "{calls:?}");
    let (tool, decision, content, is_error) = &calls[0];
    assert_eq!((tool.as_str(), decision.as_str()), ("Bash", "invalid"));
    assert!(
        *is_error && content.starts_with("interrupted by the user"),
        "{content}"
    );
    assert!(
        matches!(records.last(), Some(Record::TurnInterrupted { .. })),
        "{records:?}"
    );

    agent.prompt("Go on.").await.unwrap();
    assert_eq!(run(&mut agent).await, finished("Second done."));
}
