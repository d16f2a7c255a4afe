//! One agent's plan-mode cycle, scripted once and driven over real HTTP against
//! `muster-fake-llm`: through the Anthropic client, through the OpenAI-compatible client (with
//! vLLM's and Ollama's quirks on), and with the plan-mode turns on OpenAI and the others on
//! Anthropic. Everything else is real: the settings and the policy file load through
//! `muster-config` from a temporary project, the store is a SQLite file, the agent is
//! `muster-agents`' runtime with the permission engine. Every run must end in the same
//! workspace, with the same transcript in the store and the same decisions. The one wait is on
//! the fake's gate (the agent's next request is held while the workspace is checked).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use muster_agents::compaction::CompactionConfig;
use muster_agents::model::{ProviderOptions, ThinkingSettings, build_provider};
use muster_agents::runtime::{
    AgentKind, AgentOutcome, AgentRuntime, AgentSpec, CompactionPolicy, EngineGate, EventSink,
    ModeModel, ModelRouter, PlanApprover, PlanFiles, Record, RunContext, RuntimeEvent, TRANSCRIPT,
};
use muster_agents::tools::{ToolRegistry, Workspace};
use muster_config::project::ProjectRoot;
use muster_config::settings::ModeSettings;
use muster_config::{AgentCatalog, Approver, CliOverrides, Policy, Settings, SettingsInputs};
use muster_fake_llm::{
    Block, FakeLlm, FakeLlmConfig, FakeLlmHandle, KeyCheck, OpenAiQuirks, RecordedRequest,
    ScriptEntry, StreamOptions, UsageSpec,
};
use muster_mailbox::{
    AutoGate, MailboxStore, MemberKind, NewRun, RosterEntry, SqliteStore, StoreOptions,
};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

const GUARD: Duration = Duration::from_secs(60);
const RUN: &str = "r1";
const AGENT: &str = "main";
const SLUG: &str = "calm-baking-otter";
const PLAN: &str = "## Goal\nGreet.\n## Steps\n1. Write hello.txt\n## Files\nhello.txt\n## Tests\nnone\n## Risks\nnone\n";
/// The gate holding the request that follows the refused write.
const AFTER_REFUSAL: &str = "after-refusal";

/// The two wire formats muster's HTTP clients speak.
#[derive(Clone, Copy, Debug)]
enum Wire {
    Anthropic,
    OpenAi,
}

impl Wire {
    /// The `provider` setting.
    fn provider(self) -> &'static str {
        match self {
            Wire::Anthropic => "anthropic",
            Wire::OpenAi => "openai",
        }
    }

    /// A model of the built-in catalogue that the fake lists.
    fn model(self) -> &'static str {
        match self {
            Wire::Anthropic => "claude-sonnet-4-5",
            Wire::OpenAi => "gpt-4.1",
        }
    }

    /// The provider's default key variable (`providers.*.api_key_env`).
    fn key_variable(self) -> &'static str {
        match self {
            Wire::Anthropic => "ANTHROPIC_API_KEY",
            Wire::OpenAi => "OPENAI_API_KEY",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Wire::Anthropic => "sk-ant-wire-test",
            Wire::OpenAi => "sk-openai-wire-test",
        }
    }

    fn base_url(self, fake: &FakeLlmHandle) -> String {
        match self {
            Wire::Anthropic => fake.base_url(),
            Wire::OpenAi => fake.openai_base_url(),
        }
    }

    fn path(self) -> &'static str {
        match self {
            Wire::Anthropic => "/v1/messages",
            Wire::OpenAi => "/v1/chat/completions",
        }
    }
}

/// Collects the runtime's events.
#[derive(Default)]
struct Events(Mutex<Vec<RuntimeEvent>>);

impl EventSink for Events {
    fn emit(&self, event: RuntimeEvent) {
        self.0.lock().unwrap().push(event);
    }
}

/// One scripted model turn of `main`. Usage is explicit so that both wires must report the
/// same figures (OpenAI's `prompt_tokens` includes the cached tokens). Small stream chunks
/// split every tool's arguments across many fragments.
fn turn(n: u64, content: Vec<Block>) -> ScriptEntry {
    let mut entry = ScriptEntry::reply(AGENT, n, content);
    if let Some(reply) = entry.reply.as_mut() {
        reply.usage = Some(UsageSpec {
            input_tokens: Some(1000 + 100 * n),
            output_tokens: Some(20 + n),
            cache_read_input_tokens: Some(300),
            cache_creation_input_tokens: Some(0),
        });
    }
    entry.stream = StreamOptions {
        chunk_chars: 7,
        ..StreamOptions::default()
    };
    // vLLM: `finish_reason: "stop"` beside tool calls, and `choices: null` in the usage chunk.
    entry.openai = OpenAiQuirks {
        finish_reason_stop_with_tools: true,
        usage_choices_null: true,
        ..OpenAiQuirks::default()
    };
    entry
}

/// The cycle: enter plan mode; read and try to write (refused); write the plan file; submit
/// it; once the policy approved, write; finish. One script answers both formats.
fn script() -> Vec<ScriptEntry> {
    let tool = Block::tool_use;
    let mut refused = turn(
        2,
        vec![
            tool("Read", json!({"file_path": "README.md"})),
            tool(
                "Write",
                json!({"file_path": "hello.txt", "content": "written while planning\n"}),
            ),
        ],
    );
    // Ollama: every parallel call at index 0.
    refused.openai.tool_index_always_zero = true;
    let mut plan = turn(
        3,
        vec![tool(
            "Write",
            json!({"file_path": format!(".muster/plans/{SLUG}.md"), "content": PLAN}),
        )],
    );
    plan.fault.hold = Some(AFTER_REFUSAL.into());
    vec![
        turn(
            1,
            vec![
                Block::text("I will plan first."),
                tool("EnterPlanMode", json!({})),
            ],
        ),
        refused,
        plan,
        turn(
            4,
            vec![
                Block::text("Submitting the plan."),
                tool("ExitPlanMode", json!({})),
            ],
        ),
        turn(
            5,
            vec![tool(
                "Write",
                json!({"file_path": "hello.txt", "content": "hello, world\n"}),
            )],
        ),
        turn(6, vec![Block::text("Wrote hello.txt.")]),
    ]
}

/// A project with `settings` (after the approver and the starting mode), and a policy file
/// approving plans that touch only hello.txt.
fn project(settings: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir_all(root.join(".muster/plans")).unwrap();
    std::fs::create_dir_all(root.join(".git")).unwrap();
    std::fs::write(root.join("README.md"), "hello\n").unwrap();
    std::fs::write(
        root.join("approve.toml"),
        "max_files = 1\nallowed_paths = [\"hello.txt\"]\nmax_mode = \"acceptEdits\"\n",
    )
    .unwrap();
    std::fs::write(
        root.join(".muster/settings.toml"),
        format!(
            "permission_mode = \"acceptEdits\"\napprover = \"policy:approve.toml\"\n{settings}"
        ),
    )
    .unwrap();
    (dir, root)
}

/// Settings that pick `wire` for both modes at the fake's URL.
fn wire_settings(wire: Wire, fake: &FakeLlmHandle) -> String {
    format!(
        "provider = \"{provider}\"\nmodel = \"{model}\"\n\n\
         [providers.{provider}]\nbase_url = \"{url}\"\nmax_retries = 0\n",
        provider = wire.provider(),
        model = wire.model(),
        url = wire.base_url(fake),
    )
}

/// A fake server answering the cycle's script, accepting only `key`.
async fn fake_for(key: &str) -> FakeLlmHandle {
    FakeLlm::start_with(
        FakeLlmConfig {
            keys: KeyCheck::Exact(key.into()),
            ..FakeLlmConfig::default()
        },
        script(),
    )
    .await
    .unwrap()
}

/// Every file under `root` but `.muster/` and `.git/`, with its content.
fn workspace_files(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.ends_with(".muster") || path.ends_with(".git") {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else {
                files.insert(
                    path.strip_prefix(root).unwrap().into(),
                    std::fs::read(&path).unwrap(),
                );
            }
        }
    }
    files
}

/// The model of one mode as the settings name it, its provider built from the settings.
fn mode_model(
    mode: &ModeSettings,
    settings: &Settings,
    env: &BTreeMap<String, String>,
) -> ModeModel {
    let lookup = |name: &str| env.get(name).cloned();
    let provider = build_provider(
        mode.provider.value,
        settings,
        &lookup,
        &ProviderOptions::default(),
    )
    .unwrap();
    let model = mode.model.value.clone();
    ModeModel {
        provider,
        max_tokens: settings
            .models
            .get(&model)
            .and_then(|info| info.max_output)
            .unwrap_or(8192),
        model,
        thinking: ThinkingSettings::default(),
    }
}

/// What one run left behind.
struct Finished {
    root: PathBuf,
    outcome: AgentOutcome,
    /// The workspace while the request after the refused write was held.
    at_refusal: BTreeMap<PathBuf, Vec<u8>>,
    workspace: BTreeMap<PathBuf, Vec<u8>>,
    plan_file: String,
    records: Vec<Record>,
    requests: Vec<Value>,
    wire_requests: Vec<RecordedRequest>,
    _dir: tempfile::TempDir,
}

/// Runs the cycle over `wire`.
async fn run_over(wire: Wire) -> Finished {
    let fake = fake_for(wire.key()).await;
    let env = BTreeMap::from([(wire.key_variable().to_owned(), wire.key().to_owned())]);
    run_cycle(&fake, &wire_settings(wire, &fake), env).await
}

/// Runs the cycle against `fake` in a new project with `settings`; `env` is the environment
/// the settings and the providers read.
async fn run_cycle(
    fake: &FakeLlmHandle,
    settings: &str,
    env: BTreeMap<String, String>,
) -> Finished {
    let (dir, root) = project(settings);
    let before = workspace_files(&root);
    let project_root = ProjectRoot::at(&root);
    let settings = Settings::load(&SettingsInputs {
        project_root: &project_root,
        home_dir: None,
        env: &env,
        cli: &CliOverrides::new(),
    })
    .unwrap()
    .value;
    let Approver::Policy(policy_file) = &settings.approver.value else {
        panic!("approver: {:?}", settings.approver.value);
    };
    let approver = PlanApprover::Policy {
        policy: Arc::new(Policy::load(&root.join(policy_file)).unwrap()),
        responder: settings.approver.value.to_string(),
    };
    let store: Arc<dyn MailboxStore> =
        Arc::new(SqliteStore::open(&settings.store_path.value, StoreOptions::default()).unwrap());
    store
        .create_run(NewRun {
            id: RUN.into(),
            slug: SLUG.into(),
            team: None,
            workspace: root.display().to_string(),
            batch_line_id: None,
            auto_gate: AutoGate::default(),
            launch_options: json!({}),
        })
        .await
        .unwrap();
    store
        .add_member(
            RUN,
            RosterEntry {
                agent: AGENT.into(),
                kind: MemberKind::Lead,
                definition: Some("general".into()),
                parent: None,
            },
        )
        .await
        .unwrap();
    let epoch = store.open_epoch(RUN).await.unwrap();
    let catalog = Arc::new(AgentCatalog::built_in().unwrap());
    let plans = PlanFiles::new(settings.plans_directory.value.clone(), SLUG);
    let context = Arc::new(RunContext {
        run_id: RUN.into(),
        epoch,
        store: store.clone(),
        models: ModelRouter {
            plan: mode_model(&settings.plan, &settings, &env),
            act: mode_model(&settings.act, &settings, &env),
        },
        gate: Arc::new(EngineGate::new(
            settings.permissions.clone(),
            catalog.clone(),
            None,
        )),
        catalog,
        tools: ToolRegistry::standard(),
        workspace: Workspace::new(&root).unwrap(),
        plans: plans.clone(),
        approver,
        terminal: None,
        events: Arc::new(Events::default()),
        instructions: String::new(),
        environment: Vec::new(),
        subagents: Arc::new(Semaphore::new(1)),
        budget: Arc::new(RunContext::budget_ledger(
            &settings.budgets,
            None,
            None,
            BTreeMap::new(),
        )),
        compaction: CompactionPolicy {
            config: CompactionConfig::from_settings(&settings.compaction),
            models: settings.models.clone(),
        },
    });
    let spec = AgentSpec {
        agent_id: AGENT.into(),
        kind: AgentKind::Main,
        definition: "general".into(),
        mode: settings.permission_mode.value,
        pre_plan_mode: None,
        approval_ceiling: None,
        inherited_model: None,
    };
    let mut agent = AgentRuntime::start(context, spec, "Add a greeting file.")
        .await
        .unwrap();
    // The request after the refused write is held: the refusal is committed and the
    // workspace can be looked at before the agent goes on.
    let look_at_refusal = async {
        tokio::time::timeout(GUARD, fake.gate_reached(AFTER_REFUSAL, 1))
            .await
            .expect("guard timeout: the agent never reached the turn after the refusal");
        let files = workspace_files(&root);
        fake.open_gate(AFTER_REFUSAL);
        files
    };
    let (outcome, at_refusal) = tokio::join!(
        async {
            tokio::time::timeout(GUARD, agent.run())
                .await
                .expect("guard timeout")
                .unwrap()
        },
        look_at_refusal,
    );
    fake.verify().unwrap();
    assert_eq!(at_refusal, before, "the refused write changed nothing");
    let records = store
        .records(RUN, AGENT, TRANSCRIPT, 0)
        .await
        .unwrap()
        .iter()
        .map(|row| Record::from_stored(row).unwrap())
        .collect();
    let requests = store
        .requests(RUN)
        .await
        .unwrap()
        .into_iter()
        .map(|r| serde_json::to_value(r).unwrap())
        .collect();
    Finished {
        outcome,
        at_refusal,
        workspace: workspace_files(&root),
        plan_file: std::fs::read_to_string(plans.main_file()).unwrap(),
        records,
        requests,
        wire_requests: fake.requests(),
        root,
        _dir: dir,
    }
}

/// A record, comparable across runs: the project root becomes `<root>`; tool-use ids become
/// their order of appearance (they pair calls and results, and differ per wire); the fields
/// that name the wire's model or its price are left out (checked separately).
fn comparable(value: &Value, root: &Path, ids: &mut Vec<String>) -> Value {
    match value {
        Value::String(s) => Value::String(s.replace(&root.display().to_string(), "<root>")),
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| comparable(v, root, ids)).collect())
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| {
                    !matches!(
                        k.as_str(),
                        "model" | "cost_usd" | "created_at" | "decided_at" | "message_key"
                    )
                })
                .map(|(k, v)| {
                    let v = match (k.as_str(), v) {
                        ("id" | "tool_use_id", Value::String(id)) => {
                            let n = ids.iter().position(|seen| seen == id).unwrap_or_else(|| {
                                ids.push(id.clone());
                                ids.len() - 1
                            });
                            json!(format!("tool-use-{n}"))
                        }
                        _ => comparable(v, root, ids),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

fn transcript(run: &Finished) -> Vec<Value> {
    let mut ids = Vec::new();
    run.records
        .iter()
        .map(|r| comparable(&r.body(), &run.root, &mut ids))
        .collect()
}

/// `(tool, decision, is_error)` of every tool call, in order.
fn decisions(records: &[Record]) -> Vec<(String, String, bool)> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::ToolCall {
                tool,
                decision,
                is_error,
                ..
            } => Some((tool.clone(), decision.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

/// Every request went to the wire's path, authenticated the wire's way with the key the
/// settings' default variable held, and had the wire's body shape.
fn assert_wire(wire: Wire, requests: &[RecordedRequest]) {
    assert_eq!(requests.len(), 6, "{wire:?}: one request per turn");
    for r in requests {
        assert_eq!(
            (r.method.as_str(), r.path.as_str()),
            ("POST", wire.path()),
            "{wire:?}"
        );
        assert_eq!(r.status, 200, "{wire:?}: {:?}", r.error);
        assert_eq!(r.body["model"], wire.model());
        assert_eq!(r.body["stream"], true);
        match wire {
            Wire::Anthropic => {
                assert_eq!(r.header("x-api-key"), Some(wire.key()));
                assert!(r.header("anthropic-version").is_some());
                assert!(r.header("authorization").is_none());
                assert!(r.body["tools"][0]["input_schema"].is_object());
            }
            Wire::OpenAi => {
                let bearer = format!("Bearer {}", wire.key());
                assert_eq!(r.header("authorization"), Some(bearer.as_str()));
                assert!(r.header("x-api-key").is_none());
                assert!(r.header("anthropic-version").is_none());
                assert_eq!(r.body["stream_options"]["include_usage"], true);
                assert_eq!(r.body["tools"][0]["type"], "function");
                assert!(r.body["tools"][0]["function"]["parameters"].is_object());
                assert_eq!(r.body["messages"][0]["role"], "system");
            }
        }
    }
    if let Wire::OpenAi = wire {
        // Turn 3 answers turn 2's two parallel calls (sent at index 0): one `tool` message
        // per call, each answering its own call's id.
        let messages = requests[2].body["messages"].as_array().unwrap();
        let last = messages
            .iter()
            .rposition(|m| m["role"] == "assistant")
            .unwrap();
        let assistant = &messages[last];
        let call_ids: Vec<&Value> = assistant["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| &c["id"])
            .collect();
        let answered: Vec<&Value> = messages[last + 1..]
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| &m["tool_call_id"])
            .collect();
        assert_eq!(call_ids.len(), 2, "{assistant:#}");
        assert_eq!(answered, call_ids);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plan_cycle_ends_the_same_over_the_anthropic_and_the_openai_wire() {
    let anthropic = run_over(Wire::Anthropic).await;
    let openai = run_over(Wire::OpenAi).await;
    for (wire, run) in [(Wire::Anthropic, &anthropic), (Wire::OpenAi, &openai)] {
        assert_eq!(
            run.outcome,
            AgentOutcome::Finished {
                result: "Wrote hello.txt.".into()
            },
            "{wire:?}"
        );
        assert!(!run.at_refusal.contains_key(Path::new("hello.txt")));
        assert_eq!(
            run.workspace.get(Path::new("hello.txt")).map(Vec::as_slice),
            Some(&b"hello, world\n"[..]),
            "{wire:?}: the approved write landed, not the refused one"
        );
        assert_eq!(run.plan_file, PLAN, "{wire:?}");
        assert_eq!(
            decisions(&run.records),
            [
                ("EnterPlanMode", "allow", false),
                ("Read", "allow", false),
                ("Write", "deny", true),
                ("Write", "allow", false),
                ("ExitPlanMode", "allow", false),
                ("Write", "allow", false),
            ]
            .map(|(t, d, e)| (t.to_owned(), d.to_owned(), e)),
            "{wire:?}"
        );
        // Every model turn is recorded with the wire's model, a price, and the usage the
        // fake reported.
        let turns: Vec<(u64, u64, u64, bool)> = run
            .records
            .iter()
            .filter_map(|r| match r {
                Record::Message {
                    turn: Some(turn),
                    model,
                    usage: Some(usage),
                    cost_usd,
                    ..
                } => {
                    assert_eq!(model.as_deref(), Some(wire.model()), "{wire:?}");
                    Some((
                        *turn,
                        usage.input_tokens,
                        usage.cache_read_tokens,
                        cost_usd.is_some_and(|c| c > 0.0),
                    ))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            turns,
            (1..=6)
                .map(|n| (n, 1000 + 100 * n, 300, true))
                .collect::<Vec<_>>(),
            "{wire:?}"
        );
        assert_wire(wire, &run.wire_requests);
    }
    assert_eq!(anthropic.workspace, openai.workspace);
    assert_eq!(transcript(&anthropic), transcript(&openai));
    // The same decisions: one plan request, answered once by the policy with the same body.
    assert_eq!(anthropic.requests.len(), 1, "{:#?}", anthropic.requests);
    let request = &anthropic.requests[0];
    assert_eq!(request["request_id"], "plan-main-1");
    assert_eq!(request["responder"], "policy:approve.toml");
    assert_eq!(request["response"]["responder"], "policy");
    assert_eq!(request["response"]["body"]["approved"], true);
    assert_eq!(request["response"]["body"]["mode"], "acceptEdits");
    let decided = |run: &Finished| -> Vec<Value> {
        let mut ids = Vec::new();
        run.requests
            .iter()
            .map(|r| comparable(r, &run.root, &mut ids))
            .collect()
    };
    assert_eq!(decided(&anthropic), decided(&openai));
}

/// Cline's plan/act split across wires: the plan-mode turns go to the OpenAI-compatible
/// server and the others to Anthropic, one context carried from one to the other. The run
/// must be the one the Anthropic-only run was.
#[tokio::test(flavor = "multi_thread")]
async fn plan_turns_over_openai_and_act_turns_over_anthropic_share_one_context() {
    const KEY: &str = "sk-both-wires";
    let fake = fake_for(KEY).await;
    let settings = format!(
        "[plan]\nprovider = \"openai\"\nmodel = \"gpt-4.1\"\n\n\
         [act]\nprovider = \"anthropic\"\nmodel = \"claude-sonnet-4-5\"\n\n\
         [providers.openai]\nbase_url = \"{}\"\nmax_retries = 0\n\n\
         [providers.anthropic]\nbase_url = \"{}\"\nmax_retries = 0\n",
        fake.openai_base_url(),
        fake.base_url()
    );
    let env = BTreeMap::from([
        ("OPENAI_API_KEY".to_owned(), KEY.to_owned()),
        ("ANTHROPIC_API_KEY".to_owned(), KEY.to_owned()),
    ]);
    let split = run_cycle(&fake, &settings, env).await;
    let anthropic = run_over(Wire::Anthropic).await;
    assert_eq!(split.outcome, anthropic.outcome);
    assert_eq!(split.workspace, anthropic.workspace);
    assert_eq!(split.plan_file, PLAN);
    assert_eq!(transcript(&split), transcript(&anthropic));
    // Turn 1 asks to plan and turns 5 and 6 act after the approval; 2 to 4 plan.
    let (act, plan) = (
        ("/v1/messages", "claude-sonnet-4-5"),
        ("/v1/chat/completions", "gpt-4.1"),
    );
    let wires: Vec<(Option<u64>, (&str, &str))> = split
        .wire_requests
        .iter()
        .map(|r| {
            assert_eq!(r.status, 200, "{:?}", r.error);
            (
                r.turn,
                (r.path.as_str(), r.body["model"].as_str().unwrap_or("")),
            )
        })
        .collect();
    assert_eq!(
        wires,
        [
            (Some(1), act),
            (Some(2), plan),
            (Some(3), plan),
            (Some(4), plan),
            (Some(5), act),
            (Some(6), act),
        ]
    );
}
