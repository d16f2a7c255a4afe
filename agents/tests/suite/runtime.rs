//! The agent runtime against `muster-fake-llm` over real HTTP: the loop, plan mode as a state
//! machine (policy, human, teammate-kind approvals; the auto-gate fallback), refusals in plan
//! mode, subagents, plan file names and per-mode models. Waits are on events (store wake-ups,
//! task completion) with guard timeouts; no sleeps.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use muster_agents::model::{AnthropicOptions, ClientConfig, HttpClient, ThinkingSettings};
use muster_agents::runtime::{
    AgentKind, AgentOutcome, AgentRuntime, AgentSpec, EventSink, InterimGate, ModeModel,
    ModelRouter, PlanApprover, PlanFiles, Record, RunContext, RuntimeEvent, TRANSCRIPT,
};
use muster_agents::tools::{ToolRegistry, Workspace};
use muster_config::{AgentCatalog, PermissionMode, Policy};
use muster_fake_llm::{Block, FakeLlm, FakeLlmHandle, ScriptEntry};
use muster_mailbox::*;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

const GUARD: Duration = Duration::from_secs(60);
const PLAN: &str = "## Goal\nAdd a greeting.\n## Steps\n1. Write hello.txt\n## Files\nhello.txt\n## Tests\nnone\n## Risks\nnone\n";

#[derive(Default)]
struct Events(Mutex<Vec<RuntimeEvent>>);

impl EventSink for Events {
    fn emit(&self, event: RuntimeEvent) {
        self.0.lock().unwrap().push(event);
    }
}

struct Harness {
    dir: tempfile::TempDir,
    store: Arc<SqliteStore>,
    fake: FakeLlmHandle,
    events: Arc<Events>,
}

impl Harness {
    async fn new(script: Vec<ScriptEntry>) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("ws/.muster/plans")).unwrap();
        std::fs::write(dir.path().join("ws/README.md"), "hello\n").unwrap();
        let store = Arc::new(
            SqliteStore::open(&dir.path().join("muster.db"), StoreOptions::default()).unwrap(),
        );
        store
            .create_run(NewRun {
                id: "r1".into(),
                slug: "calm-baking-otter".into(),
                team: None,
                workspace: dir.path().join("ws").display().to_string(),
                batch_line_id: None,
                auto_gate: AutoGate::default(),
                launch_options: json!({}),
            })
            .await
            .unwrap();
        let fake = FakeLlm::start(script).await.unwrap();
        Harness {
            dir,
            store,
            fake,
            events: Arc::new(Events::default()),
        }
    }

    fn workspace(&self) -> PathBuf {
        std::fs::canonicalize(self.dir.path().join("ws")).unwrap()
    }

    fn plans(&self) -> PlanFiles {
        PlanFiles::new(self.workspace().join(".muster/plans"), "calm-baking-otter")
    }

    fn model(&self, name: &str) -> ModeModel {
        let mut config = ClientConfig::new(self.fake.base_url(), Some("test-key".into()));
        config.retry.max_retries = 0;
        ModeModel {
            provider: Arc::new(HttpClient::anthropic(config, AnthropicOptions::default()).unwrap()),
            model: name.into(),
            max_tokens: 4096,
            thinking: ThinkingSettings::default(),
        }
    }

    fn context(&self, approver: PlanApprover, models: ModelRouter) -> Arc<RunContext> {
        let catalog = Arc::new(AgentCatalog::built_in().unwrap());
        Arc::new(RunContext {
            run_id: "r1".into(),
            epoch: 1,
            store: self.store.clone(),
            models,
            gate: Arc::new(InterimGate::new(catalog.clone())),
            catalog,
            tools: ToolRegistry::standard(),
            workspace: Workspace::new(self.workspace()).unwrap(),
            plans: self.plans(),
            approver,
            terminal: None,
            events: self.events.clone(),
            instructions: String::new(),
            environment: Vec::new(),
            subagents: Arc::new(Semaphore::new(2)),
            max_turns: 20,
        })
    }

    fn single(&self, approver: PlanApprover) -> Arc<RunContext> {
        self.context(
            approver,
            ModelRouter::single(self.model("claude-sonnet-4-5")),
        )
    }

    async fn member(&self, agent: &str, kind: MemberKind) {
        self.store
            .add_member(
                "r1",
                RosterEntry {
                    agent: agent.into(),
                    kind,
                    definition: Some("general".into()),
                    parent: None,
                },
            )
            .await
            .unwrap();
    }

    async fn records(&self, agent: &str) -> Vec<Record> {
        self.store
            .records("r1", agent, TRANSCRIPT, 0)
            .await
            .unwrap()
            .iter()
            .map(|row| Record::from_stored(row).unwrap())
            .collect()
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

fn spec(agent: &str, kind: AgentKind, mode: PermissionMode) -> AgentSpec {
    AgentSpec {
        agent_id: agent.into(),
        kind,
        definition: "general".into(),
        mode,
        pre_plan_mode: None,
        approval_ceiling: None,
        inherited_model: None,
    }
}

fn reply(agent: &str, turn: u64, blocks: Vec<Block>) -> ScriptEntry {
    ScriptEntry::reply(agent, turn, blocks)
}

fn tool(name: &str, input: Value) -> Block {
    Block::tool_use(name, input)
}

async fn run(agent: &mut AgentRuntime) -> AgentOutcome {
    tokio::time::timeout(GUARD, agent.run())
        .await
        .expect("guard timeout")
        .unwrap()
}

fn policy(text: &str) -> PlanApprover {
    PlanApprover::Policy {
        policy: Arc::new(Policy::parse("policy.toml", text).unwrap()),
        responder: "policy:policy.toml".into(),
    }
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
    let mut agent = AgentRuntime::start(
        context,
        spec("main", AgentKind::Main, PermissionMode::AcceptEdits),
        "Add a greeting file.",
    )
    .await
    .unwrap();
    let outcome = run(&mut agent).await;
    assert_eq!(
        outcome,
        AgentOutcome::Finished {
            result: "Done.".into()
        }
    );
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
    assert_eq!(response.body["approved"], true);
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
