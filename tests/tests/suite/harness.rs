//! What the cross-crate suites share: a temporary project whose settings and policy file load
//! through `muster-config`, a SQLite store, and one main agent run by `muster-agents` against
//! `muster-fake-llm`; and a way to compare what two runs recorded.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use muster_agents::compaction::CompactionConfig;
use muster_agents::model::{ProviderOptions, ThinkingSettings, build_provider};
use muster_agents::runtime::{
    AgentKind, AgentOutcome, AgentRuntime, AgentSpec, CompactionPolicy, EngineGate, EventSink,
    ModeModel, ModelRouter, PlanApprover, PlanFiles, Record, RunContext, RunEvent, TRANSCRIPT,
};
use muster_agents::tools::{ToolRegistry, Workspace};
use muster_config::project::ProjectRoot;
use muster_config::settings::ModeSettings;
use muster_config::{AgentCatalog, CliOverrides, Policy, Responder, Settings, SettingsInputs};
use muster_fake_llm::{FakeLlmHandle, RecordedRequest};
use muster_mailbox::{
    AutoGate, MailboxStore, MemberKind, NewRun, RosterEntry, SqliteStore, StoreOptions,
};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

pub(super) const GUARD: Duration = Duration::from_secs(60);
pub(super) const RUN: &str = "r1";
pub(super) const AGENT: &str = "main";
pub(super) const SLUG: &str = "calm-baking-otter";

/// The two wire formats muster's HTTP clients speak.
#[derive(Clone, Copy, Debug)]
pub(super) enum Wire {
    Anthropic,
    OpenAi,
}

impl Wire {
    /// The `provider` setting.
    pub(super) fn provider(self) -> &'static str {
        match self {
            Wire::Anthropic => "anthropic",
            Wire::OpenAi => "openai",
        }
    }

    /// A model of the built-in catalogue that the fake lists.
    pub(super) fn model(self) -> &'static str {
        match self {
            Wire::Anthropic => "claude-sonnet-4-5",
            Wire::OpenAi => "gpt-4.1",
        }
    }

    /// The provider's default key variable (`providers.*.api_key_env`).
    pub(super) fn key_variable(self) -> &'static str {
        match self {
            Wire::Anthropic => "ANTHROPIC_API_KEY",
            Wire::OpenAi => "OPENAI_API_KEY",
        }
    }

    pub(super) fn key(self) -> &'static str {
        match self {
            Wire::Anthropic => "sk-ant-wire-test",
            Wire::OpenAi => "sk-openai-wire-test",
        }
    }

    pub(super) fn base_url(self, fake: &FakeLlmHandle) -> String {
        match self {
            Wire::Anthropic => fake.base_url(),
            Wire::OpenAi => fake.openai_base_url(),
        }
    }

    pub(super) fn path(self) -> &'static str {
        match self {
            Wire::Anthropic => "/v1/messages",
            Wire::OpenAi => "/v1/chat/completions",
        }
    }
}

/// Collects the runtime's events.
#[derive(Default)]
struct Events(Mutex<Vec<RunEvent>>);

impl EventSink for Events {
    fn emit(&self, event: RunEvent) {
        self.0.lock().unwrap().push(event);
    }
}

/// A project with `settings` (after the approver and the starting mode), and a policy file
/// approving plans that touch only hello.txt.
pub(super) fn project(settings: &str) -> (tempfile::TempDir, PathBuf) {
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
pub(super) fn wire_settings(wire: Wire, fake: &FakeLlmHandle) -> String {
    format!(
        "provider = \"{provider}\"\nmodel = \"{model}\"\n\n\
         [providers.{provider}]\nbase_url = \"{url}\"\nmax_retries = 0\n",
        provider = wire.provider(),
        model = wire.model(),
        url = wire.base_url(fake),
    )
}

/// Every file under `root` but `.muster/` and `.git/`, with its content.
pub(super) fn workspace_files(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
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
pub(super) fn mode_model(
    mode: &ModeSettings,
    settings: &Settings,
    env: &BTreeMap<String, String>,
) -> ModeModel {
    // As muster's `main` does before any HTTP client exists.
    let _ = rustls::crypto::ring::default_provider().install_default();
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
pub(super) struct Finished {
    pub(super) root: PathBuf,
    pub(super) outcome: AgentOutcome,
    /// The workspace before the agent started.
    pub(super) before: BTreeMap<PathBuf, Vec<u8>>,
    /// The workspace while the request held on the run's gate waited.
    pub(super) at_gate: Option<BTreeMap<PathBuf, Vec<u8>>>,
    pub(super) workspace: BTreeMap<PathBuf, Vec<u8>>,
    /// The main agent's plan file, if it wrote one.
    pub(super) plan_file: Option<String>,
    pub(super) records: Vec<Record>,
    pub(super) requests: Vec<Value>,
    pub(super) wire_requests: Vec<RecordedRequest>,
    _dir: tempfile::TempDir,
}

/// Runs the main agent on `prompt` against `fake` in a new project with `settings` (see
/// [`project`]); `env` is the environment the settings and the providers read. With `gate`,
/// the workspace is looked at while a request waits on that gate of the fake, then the gate
/// opens. The fake must have used every script entry and matched every request.
pub(super) async fn run_agent(
    fake: &FakeLlmHandle,
    settings: &str,
    env: BTreeMap<String, String>,
    prompt: &str,
    gate: Option<&str>,
) -> Finished {
    let (dir, root) = project(settings);
    let before = workspace_files(&root);
    let project_root = ProjectRoot::at(&root);
    let settings = Settings::load(&SettingsInputs {
        project_root: &project_root,
        home_dir: None,
        env: &env,
        cli: &CliOverrides::new(),
        trust: &muster_config::TrustDecision::trusted_by_caller(),
        snapshot: None,
    })
    .unwrap()
    .value;
    let Responder::Policy(policy_file) = &settings.approver.value else {
        panic!("approver: {:?}", settings.approver.value);
    };
    let approver = PlanApprover::Policy {
        policy: Arc::new(Policy::load(&root.join(policy_file)).unwrap()),
        responder: settings.approver.value.to_string(),
    };
    let muster_config::store_url::StoreLocation::File(store_path) = &settings.store.value else {
        panic!("the harness runs on a store file: {}", settings.store.value);
    };
    let store: Arc<dyn MailboxStore> =
        Arc::new(SqliteStore::open(store_path, StoreOptions::default()).unwrap());
    store
        .create_run(NewRun {
            id: RUN.into(),
            slug: SLUG.into(),
            team: None,
            workspace: root.display().to_string(),
            batch_line_id: None,
            auto_gate: AutoGate::default(),
            launch_options: json!({}),
            project_id: None,
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
        agent_models: Default::default(),
        team: Default::default(),
        hooks: Default::default(),
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
        sandbox: None,
        subagents: Arc::new(Semaphore::new(1)),
        budget: Arc::new(RunContext::budget_ledger(
            &settings.budgets,
            None,
            None,
            BTreeMap::new(),
        )),
        limits: Default::default(),
        trace: None,
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
        endpoint: None,
    };
    let mut agent = AgentRuntime::start(context, spec, prompt).await.unwrap();
    let look_at_gate = async {
        let gate = gate?;
        tokio::time::timeout(GUARD, fake.gate_reached(gate, 1))
            .await
            .unwrap_or_else(|_| panic!("guard timeout: no request reached gate {gate}"));
        let files = workspace_files(&root);
        fake.open_gate(gate);
        Some(files)
    };
    let (outcome, at_gate) = tokio::join!(
        async {
            tokio::time::timeout(GUARD, agent.run())
                .await
                .expect("guard timeout")
                .unwrap()
        },
        look_at_gate,
    );
    fake.verify().unwrap();
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
        before,
        at_gate,
        workspace: workspace_files(&root),
        plan_file: std::fs::read_to_string(plans.main_file()).ok(),
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
pub(super) fn comparable(value: &Value, root: &Path, ids: &mut Vec<String>) -> Value {
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

pub(super) fn transcript(run: &Finished) -> Vec<Value> {
    let mut ids = Vec::new();
    run.records
        .iter()
        .map(|r| comparable(&r.body(), &run.root, &mut ids))
        .collect()
}
