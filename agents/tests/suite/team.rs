//! The team tools in the runtime against `muster-fake-llm` over real HTTP, with a stub
//! [`TeamServices`]: mail and replies through the store (a teammate's forged answer refused by
//! the store, a lead-only tool denied by the engine, a second decision refused), the task
//! board, a planning lead that cannot approve (the engine refuses ReviewPlan in plan mode;
//! the tool refuses an approval too), grants capped at the lead's mode, and the
//! answer of a run with no team.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::ops::Deref;
use std::sync::{Arc, Mutex};

use muster_agents::model::ContentBlock;
use muster_agents::runtime::team::{
    ShutdownRequest, SpawnRequest, SpawnedTeammate, TeamError, TeamFuture, TeamServices,
};
use muster_agents::runtime::{AgentKind, AgentRuntime, AgentSpec, PlanApprover, RunContext};
use muster_config::PermissionMode;
use muster_fake_llm::{Block, ScriptEntry};
use muster_mailbox::*;
use serde_json::{Value, json};

use super::harness::{RunHarness, finished, spec, start};

const PLAN: &str = "## Goal\nGreet.\n## Steps\n1. Write hello.txt\n## Files\nhello.txt\n## Tests\nnone\n## Risks\nnone\n";

/// Records what the runtime asked of the team.
#[derive(Default)]
struct StubTeam {
    spawned: Mutex<Vec<SpawnRequest>>,
    board_changes: Mutex<u32>,
    /// Mail handed over at the second turn boundary (after the first turn's tool calls).
    boundary: Mutex<Vec<Message>>,
    boundaries: Mutex<u32>,
}

impl TeamServices for StubTeam {
    fn spawn_teammate(
        &self,
        request: SpawnRequest,
    ) -> TeamFuture<'_, Result<SpawnedTeammate, TeamError>> {
        Box::pin(async move {
            self.spawned.lock().unwrap().push(request.clone());
            Ok(SpawnedTeammate {
                id: request.name,
                definition: "general".into(),
                mode: PermissionMode::Plan,
                working_mode: PermissionMode::Default,
                responder: "lead".into(),
                notes: vec![],
            })
        })
    }

    fn shutdown_teammate<'a>(
        &'a self,
        request: ShutdownRequest<'a>,
    ) -> TeamFuture<'a, Result<String, TeamError>> {
        Box::pin(async move { Ok(format!("asked {} to shut down", request.name)) })
    }

    fn responder_for(&self, _agent: &str) -> String {
        "lead".into()
    }

    fn board_changed(&self) {
        *self.board_changes.lock().unwrap() += 1;
    }

    fn mail_at_turn_boundary<'a>(&'a self, _agent: &'a str) -> TeamFuture<'a, Vec<Message>> {
        Box::pin(async move {
            let mut boundaries = self.boundaries.lock().unwrap();
            *boundaries += 1;
            if *boundaries == 2 {
                std::mem::take(&mut *self.boundary.lock().unwrap())
            } else {
                Vec::new()
            }
        })
    }
}

/// Team `t`'s run with the lead, alice and bob on its roster, the human approver and the
/// run's epoch opened.
struct Harness {
    run: RunHarness,
    context: Arc<RunContext>,
}

impl Deref for Harness {
    type Target = RunHarness;

    fn deref(&self) -> &RunHarness {
        &self.run
    }
}

impl Harness {
    async fn new(run_id: &str, script: Vec<ScriptEntry>) -> Harness {
        let run = RunHarness::setup()
            .run_id(run_id)
            .team("t")
            .start(script)
            .await;
        for (agent, kind) in [
            ("lead", MemberKind::Lead),
            ("alice", MemberKind::Teammate),
            ("bob", MemberKind::Teammate),
        ] {
            run.member(agent, kind).await;
        }
        let context = Arc::new(RunContext {
            agent_models: Default::default(),
            epoch: run.store.open_epoch(run_id).await.unwrap(),
            ..run.run_context(PlanApprover::Human)
        });
        Harness { run, context }
    }

    /// Makes `team` the run's team; the returned handle keeps it alive.
    fn attach(&self, team: Arc<StubTeam>) -> Arc<dyn TeamServices> {
        let team: Arc<dyn TeamServices> = team;
        self.context.team.attach(&team);
        team
    }

    async fn agent(&self, id: &str, mode: PermissionMode) -> AgentRuntime {
        let (kind, definition) = if id == "lead" {
            (AgentKind::Main, "lead")
        } else {
            (
                AgentKind::Teammate {
                    lead: "lead".into(),
                },
                "general",
            )
        };
        let spec = AgentSpec {
            definition: definition.into(),
            ..spec(id, kind, mode)
        };
        start(self.context.clone(), spec, "Work.").await
    }

    /// alice's plan request to the lead, as the runtime sends it.
    async fn plan_request(&self) -> String {
        self.store
            .send(NewMessage {
                run_id: self.context.run_id.clone(),
                sender: "alice".into(),
                recipient: "lead".into(),
                body: MessageBody::PlanApprovalRequest {
                    request_id: "plan-alice-1".into(),
                    plan_file: "plan.md".into(),
                    plan: PLAN.into(),
                    responder: "lead".into(),
                    revision: 1,
                    previous_request_id: None,
                    allowed_prompts: Vec::new(),
                },
                idempotency_key: None,
            })
            .await
            .unwrap();
        "plan-alice-1".into()
    }
}

/// The tool results of the agent's newest user message, in order.
fn results(agent: &AgentRuntime) -> Vec<(String, bool)> {
    let last = agent
        .messages()
        .iter()
        .rev()
        .find(|m| {
            m.content
                .iter()
                .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
        })
        .unwrap();
    last.content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolResult {
                content, is_error, ..
            } => Some((content.to_text(), *is_error)),
            _ => None,
        })
        .collect()
}

fn calls(agent: &str, blocks: Vec<(&str, Value)>) -> Vec<ScriptEntry> {
    vec![
        ScriptEntry::reply(
            agent,
            1,
            blocks
                .into_iter()
                .map(|(name, input)| Block::tool_use(name, input))
                .collect(),
        ),
        ScriptEntry::reply(agent, 2, vec![Block::text("Done.")]),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn a_teammates_forged_answer_is_refused_and_only_the_leads_first_decision_counts() {
    let mut script = calls(
        "bob",
        vec![
            (
                "ReviewPlan",
                json!({"request_id": "plan-alice-1", "approve": true}),
            ),
            (
                "SendMessage",
                json!({"to": "alice", "message": "blue", "reply_to": "question-alice-1"}),
            ),
        ],
    );
    script.extend(calls(
        "lead",
        vec![
            (
                "ReviewPlan",
                json!({"request_id": "plan-alice-1", "approve": true, "mode": "bypassPermissions"}),
            ),
            (
                "ReviewPlan",
                json!({"request_id": "plan-alice-1", "approve": false, "feedback": "no"}),
            ),
            (
                "SendMessage",
                json!({"to": "alice", "message": "blue", "reply_to": "question-alice-1"}),
            ),
        ],
    ));
    let harness = Harness::new("forge", script).await;
    let _team = harness.attach(Arc::new(StubTeam::default()));
    let request_id = harness.plan_request().await;
    harness
        .store
        .send(NewMessage {
            run_id: "forge".into(),
            sender: "alice".into(),
            recipient: "lead".into(),
            body: MessageBody::Question {
                request_id: "question-alice-1".into(),
                question: "Which colour?".into(),
                options: vec![],
                responder: "lead".into(),
            },
            idempotency_key: None,
        })
        .await
        .unwrap();

    let mut bob = harness.agent("bob", PermissionMode::Default).await;
    bob.run().await.unwrap();
    let refused = results(&bob);
    assert!(
        refused[0].1 && refused[0].0.contains("Permission denied"),
        "{refused:?}"
    );
    assert!(refused[1].1, "{refused:?}");
    assert!(
        refused[1]
            .0
            .contains("question-alice-1 is answered by lead, not by you"),
        "{refused:?}"
    );
    let request = harness
        .store
        .request("forge", &request_id)
        .await
        .unwrap()
        .unwrap();
    assert!(request.response.is_none(), "bob decided nothing");

    let mut lead = harness.agent("lead", PermissionMode::AcceptEdits).await;
    lead.run().await.unwrap();
    let answered = results(&lead);
    assert!(!answered[0].1, "{answered:?}");
    assert!(
        answered[0]
            .0
            .contains("lowered from bypassPermissions: your own mode acceptEdits is the ceiling"),
        "{answered:?}"
    );
    assert!(answered[1].1);
    assert!(
        answered[1].0.contains("already decided by lead"),
        "{answered:?}"
    );
    assert!(!answered[2].1 && answered[2].0.contains("Answered question-alice-1"));
    let request = harness
        .store
        .request("forge", &request_id)
        .await
        .unwrap()
        .unwrap();
    let response = request.response.unwrap();
    assert_eq!(response.responder, "lead");
    assert_eq!(response.stored_body()["approved"], true);
    assert_eq!(response.stored_body()["mode"], "acceptEdits");
    assert_eq!(response.stored_body()["lowered_from"], "bypassPermissions");
    harness.fake.verify().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lead_in_plan_mode_cannot_approve() {
    let script = calls(
        "lead",
        vec![(
            "ReviewPlan",
            json!({"request_id": "plan-alice-1", "approve": true}),
        )],
    );
    let harness = Harness::new("planning", script).await;
    let _team = harness.attach(Arc::new(StubTeam::default()));
    harness.plan_request().await;
    let mut lead = harness.agent("lead", PermissionMode::Plan).await;
    lead.run().await.unwrap();
    let results = results(&lead);
    assert!(results[0].1);
    assert!(
        results[0].0.contains("ReviewPlan") && results[0].0.contains("plan mode"),
        "{results:?}"
    );
    let request = harness
        .store
        .request("planning", "plan-alice-1")
        .await
        .unwrap()
        .unwrap();
    assert!(request.response.is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_task_tools_and_mail_work_on_the_store() {
    let script = calls(
        "lead",
        vec![
            (
                "TaskCreate",
                json!({"subject": "Greet", "description": "Write hello.txt."}),
            ),
            (
                "TaskCreate",
                json!({"subject": "Check", "description": "Read it.", "blocked_by": [1]}),
            ),
            ("TaskUpdate", json!({"task_id": 1, "owner": "alice"})),
            ("TaskList", json!({})),
            ("TaskGet", json!({"task_id": 2})),
            ("TaskGet", json!({"task_id": 9})),
            ("SendMessage", json!({"to": "*", "message": "Hello, team."})),
            ("SendMessage", json!({"to": "carol", "message": "Hi?"})),
            ("SpawnTeammate", json!({"name": "policy", "prompt": "x"})),
            ("SpawnTeammate", json!({"name": "dave", "prompt": "Help."})),
            ("ShutdownTeammate", json!({"name": "dave"})),
        ],
    );
    let harness = Harness::new("board", script).await;
    let stub = Arc::new(StubTeam::default());
    let _team = harness.attach(stub.clone());
    let mut lead = harness.agent("lead", PermissionMode::AcceptEdits).await;
    lead.run().await.unwrap();
    let r = results(&lead);
    assert!(r[0].0.starts_with("Created task #1: Greet"), "{r:?}");
    assert!(
        r[1].0.contains("Created task #2: Check (blocked by #1)"),
        "{r:?}"
    );
    assert!(r[2].0.contains("owner alice (told by mail)"), "{r:?}");
    assert!(r[3].0.contains("#1 [pending] Greet — owner alice"), "{r:?}");
    assert!(
        r[3].0
            .contains("#2 [pending] Check — owner none (blocked by #1)")
    );
    assert!(r[4].0.contains("Read it."), "{r:?}");
    assert!(r[5].1 && r[5].0.contains("there is no task #9"));
    assert!(
        r[6].0.contains("Sent to alice") && r[6].0.contains("bob"),
        "{r:?}"
    );
    assert!(
        r[7].1 && r[7].0.contains("unknown recipient \"carol\""),
        "{r:?}"
    );
    assert!(r[8].1 && r[8].0.contains("is reserved"), "{r:?}");
    assert!(
        r[9].0.contains("Spawned teammate dave (agent id dave"),
        "{r:?}"
    );
    assert!(
        r[9].0
            .contains("plan approval request will reach your mailbox")
    );
    assert_eq!(r[10].0, "asked dave to shut down");
    let spawned = stub.spawned.lock().unwrap().clone();
    assert_eq!(spawned.len(), 1);
    assert_eq!(spawned[0].lead_mode, PermissionMode::AcceptEdits);
    assert_eq!(spawned[0].lead, "lead");
    assert!(*stub.board_changes.lock().unwrap() >= 3);

    let alice_mail = harness
        .store
        .messages("board", Some("alice"))
        .await
        .unwrap();
    let kinds: Vec<&str> = alice_mail.iter().map(|m| m.kind.as_str()).collect();
    assert_eq!(kinds, ["task_assignment", "text"]);
    let bob_mail = harness.store.messages("board", Some("bob")).await.unwrap();
    assert_eq!(bob_mail.len(), 1);
    assert_eq!(bob_mail[0].stored_body()["text"], "Hello, team.");
    harness.fake.verify().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_without_a_team_says_so() {
    let script = calls("lead", vec![("TaskList", json!({}))]);
    let harness = Harness::new("solo", script).await;
    let mut lead = harness.agent("lead", PermissionMode::AcceptEdits).await;
    lead.run().await.unwrap();
    let r = results(&lead);
    assert!(
        r[0].1 && r[0].0.contains("there is no team in this run"),
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_busy_agent_gets_mail_at_its_next_turn_boundary() {
    let script = vec![
        ScriptEntry::reply("lead", 1, vec![Block::tool_use("TaskList", json!({}))]),
        serde_json::from_value(json!({
            "agent": "lead",
            "when": {"mail_type": "text", "from": "alice"},
            "reply": {"content": [{"type": "text", "text": "Got it."}], "stop_reason": "end_turn"},
        }))
        .unwrap(),
    ];
    let harness = Harness::new("boundary", script).await;
    let stub = Arc::new(StubTeam::default());
    let _team = harness.attach(stub.clone());
    let mut lead = harness.agent("lead", PermissionMode::AcceptEdits).await;
    harness
        .store
        .send(NewMessage {
            run_id: "boundary".into(),
            sender: "alice".into(),
            recipient: "lead".into(),
            body: MessageBody::Text {
                text: "The tests pass.".into(),
                summary: None,
            },
            idempotency_key: None,
        })
        .await
        .unwrap();
    let leased = harness
        .store
        .try_receive(
            "boundary",
            "lead",
            harness.context.epoch,
            MessageFilter::Any,
        )
        .await
        .unwrap()
        .unwrap();
    // Handed over after the first turn's tool call, not when the lead goes idle.
    let key = leased.key.clone();
    *stub.boundary.lock().unwrap() = vec![leased];
    let outcome = lead.run().await.unwrap();
    assert_eq!(outcome, finished("Got it."));
    let turn2 = harness
        .fake
        .requests()
        .into_iter()
        .find(|r| r.agent.as_deref() == Some("lead") && r.turn == Some(2))
        .unwrap();
    let messages = turn2.body["messages"].as_array().unwrap();
    let last = messages.last().unwrap().to_string();
    assert!(last.contains("The tests pass."), "{last}");
    let before_last = messages[messages.len() - 2].to_string();
    assert!(before_last.contains("tool_result"), "{before_last}");
    let acked = harness.store.message(&key).await.unwrap().unwrap();
    assert_eq!(acked.state, DeliveryState::Acked);
    harness.fake.verify().unwrap();
}
