//! What the suites that run agents share: a run in a real SQLite store in a temporary
//! directory, with a workspace beside it and `muster-fake-llm` serving the model over real
//! HTTP; the run's context; roster members; agents' transcripts read back from the store.
//! Also the settings loader and the model prices the configuration and budget suites share.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use muster_agents::model::{AnthropicOptions, ClientConfig, HttpClient, ThinkingSettings};
use muster_agents::runtime::{
    AgentKind, AgentOutcome, AgentRuntime, AgentSpec, EngineGate, ModeModel, ModelRouter, NoEvents,
    PlanApprover, PlanFiles, Record, RunContext, TRANSCRIPT,
};
use muster_agents::tools::{ToolRegistry, Workspace};
use muster_config::settings::ModelInfo;
use muster_config::{AgentCatalog, PermissionMode, PermissionRules, Policy};
use muster_fake_llm::{FakeLlm, FakeLlmConfig, FakeLlmHandle, ScriptEntry};
use muster_mailbox::{
    AgentRecord, AutoGate, MailboxStore, MemberKind, NewRun, RosterEntry, SqliteStore, StoreOptions,
};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

/// How long a test waits for an agent (or a mail) before it fails.
pub const GUARD: Duration = Duration::from_secs(60);

/// The model every run context uses unless a test routes its own.
pub const SONNET: &str = "claude-sonnet-4-5";

/// The slug of every harness run (plan files are named after it).
pub const SLUG: &str = "calm-baking-otter";

/// How a [`RunHarness`] is set up: the run's id and team, and files in its workspace.
pub struct RunSetup {
    run_id: String,
    team: Option<String>,
    files: Vec<(&'static str, &'static str)>,
    fake: FakeLlmConfig,
    after_commit: Option<muster_mailbox::CommitHook>,
}

impl RunSetup {
    pub fn run_id(mut self, run_id: &str) -> RunSetup {
        self.run_id = run_id.into();
        self
    }

    /// A team run (the store's `team` column).
    pub fn team(mut self, team: &str) -> RunSetup {
        self.team = Some(team.into());
        self
    }

    /// The fake server's settings (what its `/v1/models` and `/props` report, …).
    pub fn fake_config(mut self, config: FakeLlmConfig) -> RunSetup {
        self.fake = config;
        self
    }

    /// What the store's writer calls after each COMMIT, before any caller learns of it.
    pub fn after_commit(mut self, hook: muster_mailbox::CommitHook) -> RunSetup {
        self.after_commit = Some(hook);
        self
    }

    /// A file in the workspace (relative path; parent directories are created).
    pub fn file(mut self, path: &'static str, content: &'static str) -> RunSetup {
        self.files.push((path, content));
        self
    }

    /// Creates the workspace, the store with the run, and starts the fake model server.
    pub async fn start(self, script: Vec<ScriptEntry>) -> RunHarness {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join(".muster/plans")).unwrap();
        for (path, content) in self.files {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
        let workspace = std::fs::canonicalize(root).unwrap();
        let options = StoreOptions {
            after_commit: self.after_commit,
            ..StoreOptions::default()
        };
        let store = Arc::new(SqliteStore::open(&dir.path().join("muster.db"), options).unwrap());
        store
            .create_run(NewRun {
                id: self.run_id.clone(),
                slug: SLUG.into(),
                team: self.team,
                workspace: workspace.display().to_string(),
                batch_line_id: None,
                auto_gate: AutoGate::default(),
                launch_options: json!({}),
                project_id: None,
            })
            .await
            .unwrap();
        install_tls_provider();
        let fake = FakeLlm::start_with(self.fake, script).await.unwrap();
        RunHarness {
            dir,
            workspace,
            run_id: self.run_id,
            store,
            fake,
        }
    }
}

/// A run in a real store with a real workspace, its model served by the fake server.
/// The process's rustls crypto provider, as muster's `main` installs it before any HTTP
/// client exists (the library never installs one).
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

pub struct RunHarness {
    dir: tempfile::TempDir,
    workspace: PathBuf,
    pub run_id: String,
    pub store: Arc<SqliteStore>,
    pub fake: FakeLlmHandle,
}

impl RunHarness {
    /// Run `r1`, no team, an empty workspace but for `.muster/plans`; see [`RunSetup::start`].
    pub fn setup() -> RunSetup {
        RunSetup {
            run_id: "r1".into(),
            team: None,
            files: Vec::new(),
            fake: FakeLlmConfig::default(),
            after_commit: None,
        }
    }

    /// The temporary directory: the store file and the workspace `ws` are in it.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The workspace root, canonical.
    pub fn workspace(&self) -> PathBuf {
        self.workspace.clone()
    }

    pub fn plans(&self) -> PlanFiles {
        PlanFiles::new(self.workspace.join(".muster/plans"), SLUG)
    }

    /// `name` through the Anthropic client on the fake server, without retries.
    pub fn model(&self, name: &str) -> ModeModel {
        let mut config = ClientConfig::new(self.fake.base_url(), Some("test-key".into()));
        config.retry.max_retries = 0;
        ModeModel {
            provider: Arc::new(HttpClient::anthropic(config, AnthropicOptions::default()).unwrap()),
            model: name.into(),
            max_tokens: 4096,
            thinking: ThinkingSettings::default(),
        }
    }

    /// The run's context: [`SONNET`] in every mode, the built-in catalogue and no extra rules,
    /// the standard tools, no events, two subagents at a time, no budgets, no compaction.
    /// A test that needs another field sets it with `RunContext { field, ..run_context() }`.
    pub fn run_context(&self, approver: PlanApprover) -> RunContext {
        let catalog = Arc::new(AgentCatalog::built_in().unwrap());
        RunContext {
            agent_models: Default::default(),
            team: Default::default(),
            hooks: Default::default(),
            run_id: self.run_id.clone(),
            epoch: 1,
            store: self.store.clone(),
            models: ModelRouter::single(self.model(SONNET)),
            gate: Arc::new(EngineGate::new(
                PermissionRules::default(),
                catalog.clone(),
                None,
            )),
            catalog,
            tools: ToolRegistry::standard(),
            workspace: Workspace::new(&self.workspace).unwrap(),
            plans: self.plans(),
            approver,
            terminal: None,
            events: Arc::new(NoEvents),
            instructions: String::new(),
            environment: Vec::new(),
            sandbox: None,
            subagents: Arc::new(Semaphore::new(2)),
            budget: Arc::new(RunContext::budget_ledger(
                &Default::default(),
                None,
                None,
                BTreeMap::new(),
            )),
            limits: Default::default(),
            compaction: Default::default(),
            trace: None,
        }
    }

    /// [`RunHarness::run_context`] as it is.
    pub fn context(&self, approver: PlanApprover) -> Arc<RunContext> {
        Arc::new(self.run_context(approver))
    }

    /// Adds `agent` (definition `general`) to the run's roster.
    pub async fn member(&self, agent: &str, kind: MemberKind) {
        self.store
            .add_member(
                &self.run_id,
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

    /// `agent`'s transcript rows as stored, in order.
    async fn transcript(&self, agent: &str) -> Vec<AgentRecord> {
        self.store
            .records(&self.run_id, agent, TRANSCRIPT, 0)
            .await
            .unwrap()
    }

    /// The JSON bodies of `agent`'s transcript records, in order.
    pub async fn bodies(&self, agent: &str) -> Vec<Value> {
        let rows = self.transcript(agent).await;
        rows.into_iter().map(|row| row.body).collect()
    }

    /// `agent`'s transcript records, in order.
    pub async fn records(&self, agent: &str) -> Vec<Record> {
        let rows = self.transcript(agent).await;
        rows.iter()
            .map(|row| Record::from_stored(row).unwrap())
            .collect()
    }
}

/// An agent of definition `general`, with no pre-plan mode, ceiling or inherited model.
pub fn spec(agent: &str, kind: AgentKind, mode: PermissionMode) -> AgentSpec {
    AgentSpec {
        agent_id: agent.into(),
        kind,
        definition: "general".into(),
        mode,
        pre_plan_mode: None,
        approval_ceiling: None,
        inherited_model: None,
        endpoint: None,
    }
}

/// A teammate of `lead` (see [`spec`]).
pub fn teammate(agent: &str, mode: PermissionMode) -> AgentSpec {
    spec(
        agent,
        AgentKind::Teammate {
            lead: "lead".into(),
        },
        mode,
    )
}

/// Starts an agent of the run (the test fails if it cannot start).
pub async fn start(context: Arc<RunContext>, spec: AgentSpec, prompt: &str) -> AgentRuntime {
    AgentRuntime::start(context, spec, prompt).await.unwrap()
}

/// The outcome of an agent that finished with `result`.
pub fn finished(result: &str) -> AgentOutcome {
    AgentOutcome::Finished {
        result: result.into(),
    }
}

/// Runs `agent` to its outcome, within [`GUARD`].
pub async fn run(agent: &mut AgentRuntime) -> AgentOutcome {
    tokio::time::timeout(GUARD, agent.run())
        .await
        .expect("guard timeout")
        .unwrap()
}

/// Plans approved by the policy file `policy.toml` with this text.
pub fn policy(text: &str) -> PlanApprover {
    PlanApprover::Policy {
        policy: Arc::new(Policy::parse("policy.toml", text).unwrap()),
        responder: "policy:policy.toml".into(),
    }
}

/// The layered settings of a project at `root` (no home directory, no environment).
pub fn load_settings(
    root: &Path,
    cli: muster_config::CliOverrides,
) -> Result<muster_config::Settings, String> {
    let project = muster_config::project::ProjectRoot::at(root);
    let env = BTreeMap::new();
    muster_config::Settings::load(&muster_config::SettingsInputs {
        project_root: &project,
        home_dir: None,
        env: &env,
        cli: &cli,
        trust: &muster_config::TrustDecision::trusted_by_caller(),
        snapshot: None,
    })
    .map(|loaded| loaded.value)
    .map_err(|e| e.to_string())
}

/// A model with claude-sonnet-4-5's window, output limit and prices.
pub fn sonnet_info() -> ModelInfo {
    ModelInfo {
        context_window: Some(200_000),
        max_output: Some(64_000),
        price_in: Some(3.0),
        price_out: Some(15.0),
        price_cache_read: Some(0.3),
        price_cache_write: Some(3.75),
    }
}
