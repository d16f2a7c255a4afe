//! A run with no team: one agent (`general` by default) as the main agent of its run —
//! `muster run -p` starts one, `muster resume` continues one that stopped awaiting a decision
//! (or was interrupted), rebuilt from the stored launch options and the agent's records.

use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use muster_agents::budget::BudgetLedger;
use muster_agents::runtime::{
    AgentKind, AgentOutcome, AgentRuntime, AgentSpec, PlanFiles, RunContext, RuntimeError,
    Terminal, TerminalPlanDecision,
};
use muster_config::PermissionMode;
use muster_mailbox::{MailboxStore, MemberKind, RosterEntry, RunRecord, RunStatus};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::exit::{Exit, ExitError};
use crate::launch::{OutputFormat, ResumeFlags, RunFlags, RunLaunch, overrides_from};
use crate::lifecycle::context::{CheckedParts, LeadResponder, run_context};
use crate::lifecycle::setup::{NewRecord, RunSetup};
use crate::lifecycle::{self, Ending, FrontEnd, RunDriver, RunKind, StartedRun};
use crate::loading::project_root;
use crate::progress::LiveProgress;
use crate::project::Globals;
use crate::project::Project;
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
    lifecycle::execute(new_run(global, flags)?, None)
}

/// `muster acp`'s first prompt of a session: a new run with the session's id, its events to
/// `front`.
pub(crate) fn run_for_front(
    global: &Globals,
    mut flags: RunFlags,
    run_id: String,
    front: FrontEnd,
) -> anyhow::Result<Ending> {
    crate::command_prompt::choose(global, &mut flags)?;
    let mut kind = new_run(global, flags)?;
    kind.run_id = Some(run_id);
    kind.setup.front = Some(front);
    lifecycle::execute_to_ending(kind, None)
}

/// `muster acp`'s later prompt of a session (`continuation`), or its stopped run carried on
/// (`None`): `record` was picked and checked by the caller.
pub(crate) fn resume_for_front(
    global: &Globals,
    record: RunRecord,
    continuation: Option<String>,
    front: FrontEnd,
) -> anyhow::Result<Ending> {
    let mut kind = resumed_run(global, &ResumeFlags::default(), &record)?;
    kind.continuation = continuation;
    kind.setup.front = Some(front);
    lifecycle::execute_to_ending(kind, Some(record))
}

fn new_run(global: &Globals, flags: RunFlags) -> anyhow::Result<SingleRun> {
    let output = flags.output;
    let mut project = Project::load(global, project_root(global)?, overrides_from(&flags)?)?;
    project.print_trust_notice();
    let catalog = crate::loading::load_catalog(&mut project)?;
    let agent = flags.agent.clone().unwrap_or_else(|| "general".into());
    let definition = catalog.get(&agent).ok_or_else(|| {
        usage(format!(
            "unknown agent {agent:?}{}",
            catalog.suggestion_for(&agent)
        ))
    })?;
    crate::loading::check_definition_prices(&project.settings, &catalog, [agent.as_str()])?;
    let run = RunLaunch::from_flags(&flags, &project, definition.permission_mode)?;
    let prompt = crate::command_prompt::prompt_for_run(&project, &run, &catalog, &agent, &flags)?;
    let launch = LaunchOptions {
        v: 1,
        kind: "single".into(),
        prompt,
        agent,
        run,
    };
    Ok(SingleRun::new(
        RunSetup::new(project, catalog, launch, output),
        flags.batch_line_id,
    ))
}

/// `muster resume [RUN]` of a single-agent run: `record` is the run `muster resume` picked
/// and checked ([`crate::lifecycle::pick_run`]).
pub fn resume(global: &Globals, flags: ResumeFlags, record: RunRecord) -> anyhow::Result<Exit> {
    resume_with(global, flags, record, None)
}

/// `muster run --continue [RUN] -p PROMPT` of a single-agent run that completed or was
/// interrupted: its agent is rebuilt from its records and takes `prompt` as a new user turn
/// (budgets and spend carry on; the deadline restarts as on a resume).
pub fn continue_run(
    global: &Globals,
    flags: ResumeFlags,
    record: RunRecord,
    prompt: String,
) -> anyhow::Result<Exit> {
    resume_with(global, flags, record, Some(prompt))
}

fn resume_with(
    global: &Globals,
    flags: ResumeFlags,
    record: RunRecord,
    continuation: Option<String>,
) -> anyhow::Result<Exit> {
    let mut kind = resumed_run(global, &flags, &record)?;
    kind.continuation = continuation;
    lifecycle::execute(kind, Some(record))
}

/// The stored run `record`, rebuilt from its launch options with `flags` applied.
fn resumed_run(
    global: &Globals,
    flags: &ResumeFlags,
    record: &RunRecord,
) -> anyhow::Result<SingleRun> {
    Ok(SingleRun::new(
        RunSetup::reopen(global, flags, record)?,
        None,
    ))
}

/// A single-agent run about to start or continue.
struct SingleRun {
    setup: RunSetup<LaunchOptions>,
    /// Its batch line, when a batch line's child starts it.
    batch_line_id: Option<String>,
    /// `muster run --continue`: the new user turn a finished run's agent takes.
    continuation: Option<String>,
    /// The id a new run takes (`muster acp`: the session's), else a fresh one.
    run_id: Option<String>,
}

impl SingleRun {
    fn new(setup: RunSetup<LaunchOptions>, batch_line_id: Option<String>) -> SingleRun {
        SingleRun {
            setup,
            batch_line_id,
            continuation: None,
            run_id: None,
        }
    }
}

impl RunKind for SingleRun {
    type Driver = SingleDriver;
    type Launch = LaunchOptions;
    const KIND: &'static str = "single";
    const AGENT: &'static str = MAIN_AGENT;
    const LEAD: LeadResponder = LeadResponder::Refused;

    fn setup(&self) -> &RunSetup<LaunchOptions> {
        &self.setup
    }

    async fn create(&self, store: &Arc<dyn MailboxStore>) -> anyhow::Result<(String, PlanFiles)> {
        let lead = RosterEntry {
            agent: MAIN_AGENT.into(),
            kind: MemberKind::Lead,
            definition: Some(self.setup.launch.agent.clone()),
            parent: None,
        };
        let new = NewRecord {
            run_id: self.run_id.clone(),
            team: None,
            batch_line_id: self.batch_line_id.clone(),
            lead,
        };
        self.setup.create_record(store, new).await
    }

    async fn start(self, run: &StartedRun, checked: CheckedParts) -> anyhow::Result<SingleDriver> {
        let progress = run.printer.progress();
        let setup = self.setup;
        let terminal: Option<Arc<dyn Terminal>> = match &setup.front {
            Some(front) => front.person.clone(),
            None => (setup.project.process.stdin_is_terminal && setup.output == OutputFormat::Text)
                .then(|| Arc::new(StdinTerminal { progress }) as Arc<dyn Terminal>),
        };
        let context = Arc::new(run_context(setup.context_parts(run, terminal), checked));
        Ok(SingleDriver {
            context,
            launch: setup.launch,
            resumed: run.resumed,
            continuation: self.continuation,
            front: setup.front,
        })
    }
}

/// The one agent of a started single run.
struct SingleDriver {
    context: Arc<RunContext>,
    launch: LaunchOptions,
    resumed: bool,
    continuation: Option<String>,
    front: Option<FrontEnd>,
}

impl RunDriver for SingleDriver {
    async fn drive(&self) -> anyhow::Result<Ending> {
        let run_id = self.context.run_id.clone();
        let mut agent = if self.resumed {
            let mut agent =
                AgentRuntime::resume(self.context.clone(), MAIN_AGENT, None, None).await?;
            if let Some(prompt) = &self.continuation {
                muster_mailbox::failpoint!("continue_resumed");
                // The transition's one commit: the new user turn. Killed before it, the run
                // resumes to its old ending; after it, a resume answers the new turn.
                let mode = self.front.as_ref().and_then(|front| front.mode);
                match agent.prompt_in_mode(prompt, Vec::new(), mode).await {
                    Err(RuntimeError::TurnNotEnded { .. }) => return Ok(mid_turn(&run_id)),
                    other => other?,
                }
                muster_mailbox::failpoint!("continued");
            }
            agent
        } else {
            let spec = AgentSpec {
                agent_id: MAIN_AGENT.into(),
                kind: AgentKind::Main,
                definition: self.launch.agent.clone(),
                mode: self.launch.run.permission_mode,
                pre_plan_mode: None,
                approval_ceiling: None,
                inherited_model: None,
                endpoint: None,
            };
            AgentRuntime::start_with_own_prompt(
                self.context.clone(),
                spec,
                &self.launch.prompt,
                &self.launch.run.own_prompt(),
            )
            .await?
        };
        if let Some(front) = &self.front {
            front.hold_turn(agent.interrupter());
            if let Some(requests) = &front.mode_request {
                agent.take_mode_requests(requests.clone());
            }
        }
        // `muster interrupt` from another terminal ends the running turn (not with a front
        // end, which has its own).
        let _watch = match &self.front {
            Some(_) => None,
            None => Some(
                crate::turn_requests::InterruptWatch::start(
                    self.context.store.clone(),
                    run_id.clone(),
                    self.context.epoch,
                    agent.interrupter(),
                )
                .await?,
            ),
        };
        let turns = self.turns(&mut agent);
        let outcome = match self.launch.run.deadline_ms {
            Some(deadline) => {
                let left = Duration::from_millis(u64::try_from(deadline - now_ms()).unwrap_or(0));
                match tokio::time::timeout(left, turns).await {
                    Ok(outcome) => outcome?,
                    Err(_) => return Ok(deadline_passed(&self.context.budget, deadline)),
                }
            }
            None => turns.await?,
        };
        agent.end_session("other").await;
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
                     or `muster reject {request_id} --feedback …`, then `muster resume {run_id}`.\n\
                     Run {run_id} stopped awaiting a decision.",
                    plan_file.display(),
                ),
            },
            AgentOutcome::CallDeferred { request_id, tool } => Ending {
                status: RunStatus::AwaitingDecision,
                exit: Exit::AwaitingDecision,
                result: json!({"request_id": request_id, "tool": tool}),
                text: format!(
                    "A PreToolUse hook deferred a {tool} call to a person ({request_id}): \
                     `muster approve {request_id}` or `muster reject {request_id} --feedback …`, \
                     then `muster resume {run_id}`.\n\
                     Run {run_id} stopped awaiting a decision.",
                ),
            },
            // Claude Code ends the turn and shows the reason to the person: the run is done
            // (a `--continue` gives it a new prompt), and says who stopped it.
            AgentOutcome::StoppedByHook { event, reason } => Ending {
                status: RunStatus::Completed,
                exit: Exit::Success,
                result: json!({"result": "", "stopped_by_hook": {"event": event, "reason": reason}}),
                text: format!(
                    "A {event} hook stopped the agent: {reason}\n\
                     `muster run --continue {run_id} -p …` gives it a new prompt."
                ),
            },
            // Nothing interrupts a single run's turn yet: it ends as an interrupted run.
            AgentOutcome::TurnInterrupted => {
                Ending::interrupted("the turn was interrupted", &run_id)
            }
        })
    }

    async fn wrap_up(
        &self,
        run: &StartedRun,
        driven: anyhow::Result<Ending>,
        interrupted: bool,
    ) -> anyhow::Result<Ending> {
        if interrupted {
            // The agent was dropped with the drive: a running Bash call's process group was
            // killed with it; anything else left running is killed here.
            let _ = muster_agents::runtime::team::kill_unfinished_tools(
                run.store.as_ref(),
                &run.id,
                MAIN_AGENT,
            )
            .await;
        }
        Ok(driven.unwrap_or_else(|error| Ending::from_error(&error)))
    }
}

impl SingleDriver {
    /// The agent's turns until one ends the run: a turn `muster interrupt` ended waits for
    /// the next prompt `muster run --continue` hands over, the run staying live.
    async fn turns(&self, agent: &mut AgentRuntime) -> anyhow::Result<AgentOutcome> {
        loop {
            match agent.run().await? {
                AgentOutcome::TurnInterrupted if self.front.is_none() => {
                    let context = &self.context;
                    crate::turn_requests::take_next_prompt(
                        context.store.as_ref(),
                        &context.run_id,
                        context.epoch,
                        agent,
                    )
                    .await?;
                }
                outcome => return Ok(outcome),
            }
        }
    }
}

/// A run `--continue` found in the middle of a turn (stopped by Ctrl-C): it stays
/// interrupted, and `muster resume` finishes that turn first.
pub(crate) fn mid_turn(run_id: &str) -> Ending {
    let text = format!(
        "muster: run {run_id} stopped in the middle of a turn: `muster resume {run_id}` \
         finishes it, then `muster run --continue {run_id} -p …` gives it a new prompt"
    );
    Ending {
        status: RunStatus::Interrupted,
        exit: Exit::Usage,
        result: json!({"error": text}),
        text,
    }
}

/// The ending of a run whose deadline's timer fired: the budget the ledger names.
fn deadline_passed(budget: &BudgetLedger, deadline: i64) -> Ending {
    match budget.check_deadline_at(deadline) {
        Err(exceeded) => Ending::budget(&exceeded),
        Ok(()) => Ending {
            status: RunStatus::Budget,
            exit: Exit::Budget,
            result: json!({"reason": "the run's deadline passed (--max-duration)"}),
            text: "muster: the run's deadline passed (--max-duration)".into(),
        },
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
    fn decide_plan(
        &self,
        _request_id: &str,
        agent: &str,
        plan_file: &Path,
        plan: &str,
    ) -> TerminalPlanDecision {
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
