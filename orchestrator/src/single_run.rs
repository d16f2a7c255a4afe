//! A run with no team: one agent (`general` by default) as the main agent of its run —
//! `muster run -p` starts one, `muster resume` continues one that stopped awaiting a decision
//! (or was interrupted), rebuilt from the stored launch options and the agent's records.

use muster_agents::runtime::team::TeamSlot;
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use muster_agents::budget::BudgetLedger;
use muster_agents::compaction::CompactionConfig;
use muster_agents::runtime::{
    AgentKind, AgentOutcome, AgentRuntime, AgentSpec, CompactionPolicy, DEFAULT_MAX_SUBAGENTS,
    EngineGate, EventSink, ModelRouter, PlanApprover, PlanFiles, RunContext, RunEvent, Terminal,
    TerminalPlanDecision,
};
use muster_agents::tools::{ToolRegistry, Workspace};
use muster_config::settings::AutoGate as AutoGateSetting;
use muster_config::{AgentCatalog, PermissionMode, Responder};
use muster_mailbox::{
    AutoGate, MailboxStore, MemberKind, NewRun, RosterEntry, RunRecord, RunStatus,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::exit::{Exit, ExitError};
use crate::launch::{OutputFormat, ResumeFlags, RunFlags, RunLaunch, overrides_from};
use crate::lifecycle::{self, Ending, drive_to_end, project_instructions, tokio_runtime};
use crate::loading::{load_settings, print_warnings, process_env, project_root};
use crate::models::{Recording, model_router};
use crate::progress::LiveProgress;
use crate::project::Globals;
use crate::project::Project;
use crate::signals::Interrupts;
use crate::stream_json;
use crate::stream_json::now_ms;

/// The id of the one agent of a single-agent run.
pub const MAIN_AGENT: &str = "main";

/// Everything `muster resume` needs to rebuild a single-agent run (stored with the run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaunchOptions {
    pub v: u32,
    pub kind: String,
    pub prompt: String,
    /// The agent definition.
    pub agent: String,
    #[serde(flatten)]
    pub run: RunLaunch,
}

fn usage(message: impl Into<String>) -> anyhow::Error {
    ExitError::new(Exit::Usage, message).into()
}

/// `muster run -p` with no team (the CLI sends team runs to `crate::team::run`).
pub fn run(global: &Globals, flags: RunFlags) -> anyhow::Result<Exit> {
    let output = flags.output;
    let root = project_root(global)?;
    let loaded = load_settings(global, &root, overrides_from(&flags)?)?;
    print_warnings(&loaded.warnings);
    let project = Project {
        root,
        settings: loaded.value,
    };
    let catalog = load_catalog(&project)?;
    let agent = flags.agent.clone().unwrap_or_else(|| "general".into());
    let definition = catalog.get(&agent).ok_or_else(|| {
        usage(format!(
            "unknown agent {agent:?}{}",
            catalog.suggestion_for(&agent)
        ))
    })?;
    crate::loading::check_definition_prices(&project.settings, &catalog, [agent.as_str()])?;
    let run = RunLaunch::from_flags(&flags, &project, definition.permission_mode)?;
    let launch = LaunchOptions {
        v: 1,
        kind: "single".into(),
        prompt: flags.prompt.clone(),
        agent,
        run,
    };
    let session = Session::prepare(project, catalog, launch, output)?;
    session.execute(None, flags.batch_line_id)
}

/// `muster resume [RUN]` of a single-agent run: `record` is the run `muster resume` picked
/// and checked ([`crate::lifecycle::pick_run`]).
pub fn resume(global: &Globals, flags: ResumeFlags, record: RunRecord) -> anyhow::Result<Exit> {
    let output = flags.output;
    let mut launch: LaunchOptions =
        serde_json::from_value(record.launch_options.clone()).map_err(|e| {
            usage(format!(
                "run {} cannot be resumed by this version: its launch options do not read ({e})",
                record.id
            ))
        })?;
    launch.run.apply_resume_flags(&flags)?;
    let overrides = launch.run.overrides();
    let root = project_root(global)?;
    launch.run.warn_of_changed_policies(root.path());
    let loaded = load_settings(global, &root, overrides)?;
    let project = Project {
        root,
        settings: loaded.value,
    };
    let catalog = load_catalog(&project)?;
    let session = Session::prepare(project, catalog, launch, output)?;
    session.execute(Some(record), None)
}

fn load_catalog(project: &Project) -> anyhow::Result<AgentCatalog> {
    crate::loading::load_catalog(&project.root, &project.settings)
}

/// A run about to start or continue.
struct Session {
    project: Project,
    catalog: Arc<AgentCatalog>,
    launch: LaunchOptions,
    output: OutputFormat,
}

/// What `parts` checked: the approver, the workspace and the models.
struct RunParts {
    approver: PlanApprover,
    workspace: Workspace,
    models: ModelRouter,
    sandbox: Option<Arc<muster_agents::sandbox::Sandbox>>,
}

/// The run the agent works in.
struct RunIdentity {
    id: String,
    epoch: i64,
    store: Arc<dyn MailboxStore>,
    plans: PlanFiles,
    budget: Arc<BudgetLedger>,
}

impl Session {
    fn prepare(
        project: Project,
        catalog: AgentCatalog,
        launch: LaunchOptions,
        output: OutputFormat,
    ) -> anyhow::Result<Session> {
        Ok(Session {
            project,
            catalog: Arc::new(catalog),
            launch,
            output,
        })
    }

    /// Runs a new run (its batch line, when it is one) or continues `existing`.
    fn execute(
        self,
        existing: Option<RunRecord>,
        batch_line_id: Option<String>,
    ) -> anyhow::Result<Exit> {
        drive_to_end(
            tokio_runtime()?,
            self.execute_async(existing, batch_line_id),
        )
    }

    async fn execute_async(
        self,
        existing: Option<RunRecord>,
        batch_line_id: Option<String>,
    ) -> anyhow::Result<Exit> {
        let mut interrupts = Interrupts::install();
        let env = process_env();
        let parts = self.parts(&env, existing.is_some())?;
        let store: Arc<dyn MailboxStore> = self.project.open_store().await?;
        let (run_id, plans, resumed) = match &existing {
            Some(record) => (
                record.id.clone(),
                PlanFiles::new(self.project.plans_dir(), &record.slug),
                true,
            ),
            None => {
                let (id, plans) = self.create_run(store.as_ref(), batch_line_id).await?;
                (id, plans, false)
            }
        };
        let owned = lifecycle::take_over(
            &self.project,
            &store,
            &run_id,
            "single",
            existing.as_ref().map(|record| (record, &self.launch)),
            env.get("XDG_RUNTIME_DIR").map(PathBuf::from),
        )
        .await?;
        let epoch = owned.epoch;
        let printer = Arc::new(Printer {
            run_id: run_id.clone(),
            format: self.output,
            lock: Mutex::new(()),
            progress: (self.output == OutputFormat::Text)
                .then(LiveProgress::for_terminal)
                .flatten()
                .map(Arc::new),
        });
        let restored = if resumed {
            AgentRuntime::restored_spends(store.as_ref(), &run_id, &self.project.settings.models)
                .await?
        } else {
            BTreeMap::new()
        };
        let budget = Arc::new(RunContext::budget_ledger(
            &self.project.settings.budgets,
            None,
            self.launch.run.deadline_ms,
            restored,
        ));
        let identity = RunIdentity {
            id: run_id.clone(),
            epoch,
            store: store.clone(),
            plans,
            budget: budget.clone(),
        };
        let context = Arc::new(self.context(identity, parts, printer.clone(), &env));
        let driven = tokio::select! {
            driven = self.drive(context, &budget, resumed) => driven,
            signal = interrupts.first() => {
                // The agent is dropped with the losing branch: a running Bash call's process
                // group is killed with it; anything else left running is killed here.
                let _ = muster_agents::runtime::team::kill_unfinished_tools(
                    store.as_ref(),
                    &run_id,
                    MAIN_AGENT,
                )
                .await;
                Ok(Ending::interrupted(signal, &run_id))
            }
            // Another process may own the run now: end without writing its ending.
            lost = owned.lost() => return Err(lost),
        };
        let ending = driven.unwrap_or_else(|error| Ending::from_error(&error));
        lifecycle::finish(store.as_ref(), &run_id, &ending).await?;
        printer.finished(&ending);
        Ok(ending.exit)
    }

    async fn create_run(
        &self,
        store: &dyn MailboxStore,
        batch_line_id: Option<String>,
    ) -> anyhow::Result<(String, PlanFiles)> {
        let mut rng = fastrand::Rng::new();
        let plans = PlanFiles::reserve(self.project.plans_dir(), &mut rng)?;
        let settings = &self.project.settings;
        let auto_gate = AutoGate {
            open: settings.auto_gate.value == AutoGateSetting::Open,
            consecutive_denials: 0,
            limit: u32::try_from(settings.auto_gate_denial_limit.value).unwrap_or(u32::MAX),
        };
        let id = crate::ids::new_run_id(&mut rng);
        store
            .create_run(NewRun {
                id: id.clone(),
                slug: plans.slug().to_owned(),
                team: None,
                workspace: self.launch.run.workspace.display().to_string(),
                batch_line_id,
                auto_gate,
                launch_options: serde_json::to_value(&self.launch)?,
                project_id: Some(self.project.project_id()?),
            })
            .await?;
        store
            .add_member(
                &id,
                RosterEntry {
                    agent: MAIN_AGENT.into(),
                    kind: MemberKind::Lead,
                    definition: Some(self.launch.agent.clone()),
                    parent: None,
                },
            )
            .await?;
        Ok((id, plans))
    }

    /// Everything that can fail on configuration, checked before the run is created.
    fn parts(&self, env: &BTreeMap<String, String>, resumed: bool) -> anyhow::Result<RunParts> {
        let settings = &self.project.settings;
        let approver = match &settings.approver.value {
            Responder::Human => PlanApprover::Human,
            Responder::Lead => {
                return Err(usage(
                    "--approver lead needs a team; a single-agent run takes human or policy:FILE",
                ));
            }
            Responder::Policy(path) => {
                let policy = self
                    .launch
                    .run
                    .policies
                    .policy(self.project.root.path(), path)?;
                PlanApprover::Policy {
                    policy: Arc::new(policy),
                    responder: settings.approver.value.to_string(),
                }
            }
        };
        let workspace = Workspace::new(&self.launch.run.workspace)
            .map_err(|e| usage(format!("--workspace: {e}")))?;
        Ok(RunParts {
            approver,
            workspace,
            models: self.models(env, resumed)?,
            sandbox: crate::sandbox::SandboxState::for_run(settings)?.into_run_sandbox(),
        })
    }

    fn context(
        &self,
        run: RunIdentity,
        parts: RunParts,
        printer: Arc<Printer>,
        env: &BTreeMap<String, String>,
    ) -> RunContext {
        let settings = &self.project.settings;
        let terminal: Option<Arc<dyn Terminal>> =
            (std::io::stdin().is_terminal() && self.output == OutputFormat::Text).then(|| {
                Arc::new(StdinTerminal {
                    progress: printer.progress.clone(),
                }) as Arc<dyn Terminal>
            });
        let instructions = project_instructions(&self.project);
        RunContext {
            run_id: run.id,
            epoch: run.epoch,
            store: run.store,
            models: parts.models,
            gate: Arc::new(EngineGate::new(
                settings.permissions.clone(),
                self.catalog.clone(),
                std::env::home_dir(),
            )),
            catalog: self.catalog.clone(),
            tools: ToolRegistry::standard().with_mcp(crate::mcp::run_config(&self.project)),
            workspace: parts.workspace,
            plans: run.plans,
            approver: parts.approver,
            terminal,
            events: printer,
            instructions,
            environment: env
                .iter()
                .map(|(name, value)| (name.into(), value.into()))
                .collect(),
            sandbox: parts.sandbox,
            subagents: Arc::new(Semaphore::new(DEFAULT_MAX_SUBAGENTS)),
            budget: run.budget,
            limits: muster_agents::runtime::AgentLimits::from_settings(&settings.limits),
            compaction: CompactionPolicy {
                config: CompactionConfig::from_settings(&settings.compaction),
                models: settings.models.clone(),
            },
            team: TeamSlot::default(),
        }
    }

    /// The models per mode; `--record` starts a new cassette, and a resumed run appends.
    fn models(&self, env: &BTreeMap<String, String>, resumed: bool) -> anyhow::Result<ModelRouter> {
        let recording = Recording::of(self.launch.run.record.as_deref(), resumed);
        model_router(
            &self.project.settings,
            env,
            self.launch.run.strict,
            recording,
        )
    }

    async fn drive(
        &self,
        context: Arc<RunContext>,
        budget: &BudgetLedger,
        resumed: bool,
    ) -> anyhow::Result<Ending> {
        let run_id = context.run_id.clone();
        let mut agent = if resumed {
            AgentRuntime::resume(context, MAIN_AGENT, None, None).await?
        } else {
            let spec = AgentSpec {
                agent_id: MAIN_AGENT.into(),
                kind: AgentKind::Main,
                definition: self.launch.agent.clone(),
                mode: self.launch.run.permission_mode,
                pre_plan_mode: None,
                approval_ceiling: None,
                inherited_model: None,
            };
            AgentRuntime::start(context, spec, &self.launch.prompt).await?
        };
        let outcome = match self.launch.run.deadline_ms {
            Some(deadline) => {
                let left = Duration::from_millis(u64::try_from(deadline - now_ms()).unwrap_or(0));
                match tokio::time::timeout(left, agent.run()).await {
                    Ok(outcome) => outcome?,
                    Err(_) => {
                        let passed = budget.check_deadline_at(deadline);
                        return Ok(match passed {
                            Err(exceeded) => Ending::budget(&exceeded),
                            Ok(()) => Ending {
                                status: RunStatus::Budget,
                                exit: Exit::Budget,
                                result: json!({"reason": "the run's deadline passed (--max-duration)"}),
                                text: "muster: the run's deadline passed (--max-duration)".into(),
                            },
                        });
                    }
                }
            }
            None => agent.run().await?,
        };
        Ok(match outcome {
            AgentOutcome::Finished { result } => Ending {
                status: RunStatus::Completed,
                exit: Exit::Success,
                result: json!({"result": result}),
                text: result,
            },
            AgentOutcome::AwaitingDecision {
                request_id,
                plan_file,
            } => Ending {
                status: RunStatus::AwaitingDecision,
                exit: Exit::AwaitingDecision,
                result: json!({"request_id": request_id, "plan_file": plan_file}),
                text: format!(
                    "The plan in {} awaits a decision ({request_id}): `muster approve {request_id}` \
                     or `muster reject {request_id} --feedback …`, then `muster resume {}`.",
                    plan_file.display(),
                    run_id
                ),
            },
            // Nothing interrupts a single run's turn yet: it ends as an interrupted run.
            AgentOutcome::TurnInterrupted => {
                Ending::interrupted("the turn was interrupted", &run_id)
            }
        })
    }
}

/// Prints events per `--output`, each line after the commit it reports.
struct Printer {
    run_id: String,
    format: OutputFormat,
    lock: Mutex<()>,
    /// `--output text` on a terminal: the live line per busy agent.
    progress: Option<Arc<LiveProgress>>,
}

impl Printer {
    /// Logs the event and prints it as a line on stdout.
    fn line(&self, event: &RunEvent) {
        let line = stream_json::line(&self.run_id, event);
        let _guard = self.lock.lock();
        stream_json::log(&line);
        stream_json::print(&line);
    }

    /// Logs the event only.
    fn log(&self, event: &RunEvent) {
        stream_json::log(&stream_json::line(&self.run_id, event));
    }

    fn finished(&self, ending: &Ending) {
        let event = RunEvent::RunFinished {
            agent: MAIN_AGENT.to_owned(),
            status: ending.status.as_str().to_owned(),
            exit_code: ending.exit.code(),
            result: ending.result.as_object().cloned().unwrap_or_default(),
        };
        match self.format {
            OutputFormat::Json | OutputFormat::StreamJson { .. } => self.line(&event),
            OutputFormat::Text => {
                if let Some(progress) = &self.progress {
                    progress.clear();
                }
                self.log(&event);
                let resume = if ending.status == RunStatus::AwaitingDecision {
                    format!("\nRun {} stopped awaiting a decision.", self.run_id)
                } else {
                    String::new()
                };
                if Ending::is_failure_text(ending.status) {
                    eprintln!("{}", ending.text);
                    return;
                }
                let mut stdout = std::io::stdout().lock();
                let _ = writeln!(stdout, "{}{resume}", ending.text);
                let _ = stdout.flush();
            }
        }
    }
}

impl EventSink for Printer {
    fn emit(&self, event: RunEvent) {
        if let Some(progress) = &self.progress {
            progress.event(&event);
        }
        if stream_json::partial(&self.run_id, self.format, &event) {
            return;
        }
        if self.format.is_stream_json() && event.is_stream_line() {
            self.line(&event);
        } else {
            self.log(&event);
        }
        if self.format == OutputFormat::Text {
            stream_json::text_progress(&event, self.progress.as_deref());
        }
    }
}

/// A person at the terminal: questions on stderr, answers from stdin (the live progress lines
/// out of the way meanwhile).
struct StdinTerminal {
    progress: Option<Arc<LiveProgress>>,
}

impl StdinTerminal {
    fn aside<T>(&self, f: impl FnOnce() -> T) -> T {
        match &self.progress {
            Some(progress) => progress.suspend(f),
            None => f(),
        }
    }

    fn ask(prompt: &str) -> Option<String> {
        eprint!("{prompt}");
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).ok()?;
        Some(line.trim().to_owned())
    }
}

impl StdinTerminal {
    fn decide_plan_asked(agent: &str, plan_file: &Path, plan: &str) -> TerminalPlanDecision {
        eprintln!(
            "\n--- plan from {agent} ({}) ---\n{plan}\n---",
            plan_file.display()
        );
        let answer = Self::ask("Approve? [y]es / [n]o (or a mode name to approve with it): ")
            .unwrap_or_default();
        match answer.as_str() {
            "y" | "yes" => TerminalPlanDecision::Approve {
                mode: None,
                feedback: None,
                clear_context: false,
            },
            mode if mode.parse::<PermissionMode>().is_ok() => TerminalPlanDecision::Approve {
                mode: mode.parse().ok(),
                feedback: None,
                clear_context: false,
            },
            _ => TerminalPlanDecision::Reject {
                feedback: Self::ask("What should change? ").unwrap_or_default(),
            },
        }
    }

    fn answer_question_asked(agent: &str, question: &str, options: &[String]) -> Option<String> {
        eprintln!("\n{agent} asks: {question}");
        for (i, option) in options.iter().enumerate() {
            eprintln!("  {}. {option}", i + 1);
        }
        let answer = Self::ask("Answer: ")?;
        let chosen = answer
            .parse::<usize>()
            .ok()
            .and_then(|n| options.get(n.wrapping_sub(1)).cloned());
        Some(chosen.unwrap_or(answer)).filter(|a| !a.is_empty())
    }

    fn allow_call_asked(agent: &str, tool: &str, input: &Value, reason: &str) -> bool {
        eprintln!("\n{agent} wants to run {tool} {input} ({reason})");
        matches!(
            Self::ask("Allow? [y/N] ").as_deref(),
            Some("y") | Some("yes")
        )
    }
}

impl Terminal for StdinTerminal {
    fn decide_plan(&self, agent: &str, plan_file: &Path, plan: &str) -> TerminalPlanDecision {
        self.aside(|| Self::decide_plan_asked(agent, plan_file, plan))
    }

    fn answer_question(&self, agent: &str, question: &str, options: &[String]) -> Option<String> {
        self.aside(|| Self::answer_question_asked(agent, question, options))
    }

    fn allow_call(&self, agent: &str, tool: &str, input: &Value, reason: &str) -> bool {
        self.aside(|| Self::allow_call_asked(agent, tool, input, reason))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shared part is flattened: stored launch options keep one flat JSON object, so runs
    /// stored before `RunLaunch` existed still resume.
    #[test]
    fn launch_options_are_one_flat_object() {
        let stored = serde_json::json!({
            "v": 1, "kind": "single", "prompt": "p", "agent": "general",
            "workspace": "/w", "permission_mode": "default", "approver": "human",
            "plan_provider": "anthropic", "plan_model": "m", "act_provider": "anthropic",
            "act_model": "m", "base_url": null, "cassette": null, "strict": false,
            "record": null, "deadline_ms": 5
        });
        let launch: LaunchOptions = serde_json::from_value(stored.clone()).unwrap();
        assert_eq!(launch.run.deadline_ms, Some(5));
        assert_eq!(serde_json::to_value(&launch).unwrap(), stored);
    }
}
