//! `muster check`: show the permission decision for a call without running it.
//!
//! `muster check [--permission-mode MODE] [--agent-kind lead|teammate|subagent] [--agent NAME]
//! [--parent-mode MODE] [--plan-file PATH] [--workspace DIR] [--json] [--stdin] TOOL INPUT_JSON`
//! asks the permission engine about one call (or, with `--stdin`, one call per JSON line
//! `{"tool": …, "input": …}`) and prints its decision and reason. Exit code: 0 allow, 1 ask or
//! deny (with `--stdin`: any line), 2 bad arguments (with `--stdin`: any bad line).
//!
//! The mode is `--permission-mode`, else the `--agent` definition's `permissionMode`, else the
//! settings' `permission_mode`. Rules and the auto gate come from the settings; `--agent` takes
//! the definition's `read_only`, tools and mode cap from the project's agent catalog.

use muster_protocol::ToolName;
use std::io::{BufRead, Write as _};
use std::path::PathBuf;

use muster_agents::permission::{
    AgentKind, Decision, PermissionContext, PermissionEngine, Verdict,
};
use muster_agents::sandbox::profile_for;
use muster_agents::tools::Workspace;
use muster_config::settings::CliOverrides;
use muster_config::{AgentCatalog, PermissionMode};
use serde_json::{Value, json};

use crate::exit::{Exit, ExitError};
use crate::loading::{load_settings, print_warnings, project_root, usage_error};
use crate::project::Globals;
use crate::sandbox::SandboxState;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The agent's permission mode (for a subagent without --parent-mode, its parent's).
    #[arg(long = "permission-mode", alias = "mode", value_name = "MODE")]
    pub permission_mode: Option<String>,
    /// lead (default), teammate or subagent.
    #[arg(long = "agent-kind", value_name = "KIND")]
    pub agent_kind: Option<String>,
    /// Take read_only, tools and permissionMode from this agent definition.
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
    /// A subagent's parent's current mode.
    #[arg(long = "parent-mode", value_name = "MODE")]
    pub parent_mode: Option<String>,
    /// The agent's own plan file (relative to the current directory).
    #[arg(long = "plan-file", value_name = "PATH")]
    pub plan_file: Option<std::path::PathBuf>,
    /// The workspace (default: the project root).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<std::path::PathBuf>,
    /// Print {"tool", "decision", "reason"} JSON.
    #[arg(long)]
    pub json: bool,
    /// Read {"tool", "input"} JSON lines from stdin, one verdict per line.
    #[arg(long)]
    pub stdin: bool,
    /// Run the PreToolUse hooks that match the call (in the sandbox profile the agent's
    /// commands would get) and apply their decision; without it they are only listed.
    #[arg(long = "run-hooks")]
    pub run_hooks: bool,
    /// The tool's name (`Bash`, `Write`, …).
    pub tool: Option<String>,
    /// The call's input as JSON (`{"command": "ls"}`).
    pub input_json: Option<String>,
}

fn usage(message: impl Into<String>) -> anyhow::Error {
    ExitError::new(Exit::Usage, message).into()
}

fn parse_mode(flag: &str, text: &str) -> anyhow::Result<PermissionMode> {
    text.parse::<PermissionMode>()
        .map_err(|error| usage(format!("{flag}: {error}")))
}

pub fn execute(global: &Globals, args: Args) -> anyhow::Result<Exit> {
    let single = match (&args.tool, &args.input_json, args.stdin) {
        (None, None, true) => None,
        (Some(_), _, true) | (None, Some(_), true) => {
            return Err(usage(
                "--stdin reads every call from stdin; give no TOOL or INPUT_JSON with it",
            ));
        }
        (Some(tool), Some(input), false) => {
            let input: Value = serde_json::from_str(input)
                .map_err(|error| usage(format!("INPUT_JSON is not valid JSON: {error}")))?;
            Some((tool.clone(), input))
        }
        (Some(_), None, false) => {
            return Err(usage(
                "expected INPUT_JSON after TOOL, e.g. muster check Bash '{\"command\":\"ls\"}'",
            ));
        }
        (None, _, false) => {
            return Err(usage(
                "expected TOOL and INPUT_JSON (or --stdin), e.g. muster check Bash '{\"command\":\"ls\"}'",
            ));
        }
    };

    let kind: AgentKind = match &args.agent_kind {
        Some(text) => text
            .parse()
            .map_err(|error| usage(format!("--agent-kind: {error}")))?,
        None => AgentKind::Lead,
    };
    let flag_mode = args
        .permission_mode
        .as_deref()
        .map(|text| parse_mode("--permission-mode", text))
        .transpose()?;
    let parent_mode = args
        .parent_mode
        .as_deref()
        .map(|text| parse_mode("--parent-mode", text))
        .transpose()?;
    if parent_mode.is_some() && kind != AgentKind::Subagent {
        return Err(usage("--parent-mode applies only to --agent-kind subagent"));
    }

    let root = project_root(global)?;
    let settings = load_settings(global, &root, CliOverrides::new())?;
    let catalog =
        AgentCatalog::load(&root, global.process.user_home().as_deref()).map_err(usage_error)?;
    print_warnings(&settings.warnings);
    let settings = settings.value;
    let catalog = catalog.value;
    let definition = match &args.agent {
        Some(name) => Some(catalog.get(name).ok_or_else(|| {
            usage(format!(
                "--agent: there is no agent definition named `{name}`{}; the definitions are: {}",
                catalog.suggestion_for(name),
                catalog.names().collect::<Vec<_>>().join(", ")
            ))
        })?),
        None => None,
    };
    let workspace_dir = match &args.workspace {
        Some(dir) => dir.clone(),
        None => root.path().to_path_buf(),
    };
    let workspace = Workspace::new(&workspace_dir)
        .map_err(|error| usage(format!("--workspace: {error}")))?
        .with_additional(&settings.additional_directory_paths());
    let plan_file: Option<PathBuf> = args
        .plan_file
        .as_deref()
        .map(std::path::absolute)
        .transpose()
        .map_err(|error| usage(format!("--plan-file: {error}")))?;
    let home = global.process.home.clone();

    let mode = flag_mode
        .or(definition.and_then(|definition| {
            (kind != AgentKind::Subagent)
                .then_some(definition.permission_mode)
                .flatten()
        }))
        .unwrap_or(settings.permission_mode.value);
    if let Some(refused) = settings.refuse_disabled_mode(mode, "the mode checked") {
        return Err(usage(refused));
    }
    let mut context =
        PermissionContext::new(kind, mode, &workspace, &settings.permissions, &catalog);
    if let Some(definition) = definition {
        context = context.with_definition(definition);
    }
    context.parent_mode = parent_mode;
    context.plan_file = plan_file;
    context.auto_gate = settings.auto_gate.value;
    context.home_dir = home.as_deref();

    let engine = PermissionEngine::standard();
    let sandbox = Sandboxing {
        state: SandboxState::for_run(&settings, home.clone())?,
        read_only_agent: context.definition.read_only,
    };
    let mut mcp =
        crate::mcp::McpLookup::new(root.path(), &settings, &global.process, &workspace_dir);
    let (servers, _) = crate::mcp::load_servers(root.path(), &settings, &global.process);
    let mcp_skipped = servers.servers.iter().filter(|s| s.untrusted).count();
    if let Some(line) = crate::loading::trust_notice(&settings, mcp_skipped, &[]) {
        eprintln!("{line}");
    }
    match single {
        Some((tool, input)) => {
            let mut decision = decide(&engine, &context, &mut mcp, &tool, &input);
            let hooks = settings
                .hooks
                .matching(muster_config::hooks::HookEvent::PreToolUse, Some(&tool));
            if args.run_hooks && !hooks.is_empty() && decision.verdict != Verdict::Deny {
                let run = HookCheck {
                    settings: &settings,
                    sandbox: &sandbox,
                    workspace: &workspace_dir,
                    mode: decision.effective_mode,
                    env: &global.process.env,
                };
                decision = run.apply(&tool, &input, decision)?;
            }
            let mut line = render(&tool, &decision, &sandbox, args.json);
            if args.json {
                let mut value: Value = serde_json::from_str(&line)?;
                value["hooks"] = hooks.iter().map(|hook| hook.to_json()).collect();
                line = value.to_string();
            } else {
                let ran = if args.run_hooks {
                    "ran"
                } else {
                    "would run (run them with --run-hooks)"
                };
                for hook in &hooks {
                    line.push_str(&format!("\nhook {ran}: {}", hook.describe()));
                }
            }
            crate::loading::print_output(&format!("{line}\n"))?;
            Ok(if decision.is_allowed() {
                Exit::Success
            } else {
                Exit::Failed
            })
        }
        None => check_lines(&engine, &context, &mut mcp, &sandbox, args.json),
    }
}

/// The engine's decision, with the facts of an MCP tool looked up (its server started to
/// list its tools); an MCP tool that cannot be found is denied, saying why.
fn decide(
    engine: &PermissionEngine,
    context: &PermissionContext<'_>,
    mcp: &mut crate::mcp::McpLookup,
    tool: &str,
    input: &Value,
) -> Decision {
    match mcp.facts(tool) {
        None => engine.decide(context, tool, input),
        Some(Ok(facts)) => {
            let mut context = context.clone();
            context.mcp_tool = Some(facts);
            engine.decide(&context, tool, input)
        }
        Some(Err(why)) => {
            let mut decision = engine.decide(context, tool, input);
            decision.reason = format!("MCP tool `{tool}` is not available: {why}");
            decision
        }
    }
}

/// `muster check --run-hooks`: the call's PreToolUse hooks run as an agent's would (no run:
/// the session id is `check`), and their decision applied to the engine's (never wider).
struct HookCheck<'a> {
    settings: &'a muster_config::Settings,
    sandbox: &'a Sandboxing,
    workspace: &'a std::path::Path,
    mode: PermissionMode,
    env: &'a std::collections::BTreeMap<String, String>,
}

impl HookCheck<'_> {
    fn apply(&self, tool: &str, input: &Value, decision: Decision) -> anyhow::Result<Decision> {
        let runner = muster_agents::hooks::HookRunner::new(
            std::sync::Arc::new(self.settings.hooks.clone()),
            self.sandbox.state.clone().into_run_sandbox(),
            self.env
                .iter()
                .map(|(name, value)| (name.into(), value.into()))
                .collect(),
        )
        .with_launcher(crate::sandbox::hook_launcher());
        let agent = muster_agents::hooks::FiringAgent {
            run_id: "check",
            agent_id: "check",
            is_lead: true,
            agent_type: "check",
            teammate_name: None,
            workspace: self.workspace,
            mode: self.mode,
            profile: profile_for(false, self.mode, self.sandbox.read_only_agent),
            transcript_path: None,
            traceparent: None,
        };
        let mut fields = serde_json::Map::new();
        fields.insert("tool_name".into(), tool.into());
        fields.insert("tool_input".into(), input.clone());
        fields.insert("tool_use_id".into(), "check".into());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let outcome = runtime.block_on(runner.fire(
            muster_config::hooks::HookEvent::PreToolUse,
            Some(tool),
            &agent,
            fields,
        ));
        for message in &outcome.messages {
            eprintln!("muster: {message}");
        }
        let hook = muster_agents::hooks::HookDecision::of(outcome);
        use muster_agents::hooks::HookPermission;
        let because = |what: &str| format!("{what} by a PreToolUse hook: {}", hook.reason);
        Ok(match hook.permission {
            Some(HookPermission::Deny) => Decision {
                verdict: Verdict::Deny,
                reason: because("blocked"),
                ..decision
            },
            Some(HookPermission::Ask | HookPermission::Defer)
                if decision.verdict == Verdict::Allow =>
            {
                Decision {
                    verdict: Verdict::Ask,
                    reason: because("asked"),
                    ..decision
                }
            }
            _ => decision,
        })
    }
}

/// What the Bash sandbox would do with an allowed call.
struct Sandboxing {
    state: SandboxState,
    read_only_agent: bool,
}

impl Sandboxing {
    /// The sandbox a `Bash` call would run in if it runs (allowed, or asked and approved);
    /// `None` for other tools and denials.
    fn label(&self, tool: &str, decision: &Decision) -> Option<String> {
        (tool == ToolName::Bash && decision.verdict != Verdict::Deny).then(|| {
            self.state.label(profile_for(
                decision.read_only_shell,
                decision.effective_mode,
                self.read_only_agent,
            ))
        })
    }
}

/// One decision as a line of output.
fn render(tool: &str, decision: &Decision, sandbox: &Sandboxing, as_json: bool) -> String {
    let sandbox = sandbox.label(tool, decision);
    if as_json {
        json!({
            "tool": tool,
            "decision": decision.verdict.as_str(),
            "reason": decision.reason,
            "effective_mode": decision.effective_mode.as_str(),
            "read_only_shell": decision.read_only_shell,
            "runs_as": decision.shell_run_as,
            "sandbox": sandbox,
        })
        .to_string()
    } else {
        let sandbox = sandbox
            .map(|s| format!(" [sandbox: {s}]"))
            .unwrap_or_default();
        format!(
            "{}: {} ({tool}){sandbox}",
            decision.verdict, decision.reason
        )
    }
}

/// A line of `--stdin` that is not a call: reported in place, in the same format.
fn render_error(line_number: usize, message: &str, as_json: bool) -> String {
    let reason = format!("line {line_number}: {message}");
    if as_json {
        json!({"tool": Value::Null, "decision": "error", "reason": reason}).to_string()
    } else {
        format!("error: {reason}")
    }
}

/// `--stdin`: one verdict line per input line, in order.
fn check_lines(
    engine: &PermissionEngine,
    context: &PermissionContext<'_>,
    mcp: &mut crate::mcp::McpLookup,
    sandbox: &Sandboxing,
    as_json: bool,
) -> anyhow::Result<Exit> {
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut any_refused = false;
    let mut any_bad = false;
    for (index, line) in stdin.lock().lines().enumerate() {
        let line = line.map_err(|error| usage(format!("reading stdin: {error}")))?;
        let rendered = match parse_call(&line) {
            Ok((tool, input)) => {
                let decision = decide(engine, context, mcp, &tool, &input);
                any_refused |= !decision.is_allowed();
                render(&tool, &decision, sandbox, as_json)
            }
            Err(message) => {
                any_bad = true;
                render_error(index + 1, &message, as_json)
            }
        };
        match writeln!(out, "{rendered}") {
            Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {
                return Ok(Exit::Failed);
            }
            other => other?,
        }
    }
    match out.flush() {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => return Err(error.into()),
        _ => {}
    }
    Ok(if any_bad {
        Exit::Usage
    } else if any_refused {
        Exit::Failed
    } else {
        Exit::Success
    })
}

/// `{"tool": "Bash", "input": {...}}` from one line.
fn parse_call(line: &str) -> Result<(String, Value), String> {
    let value: Value =
        serde_json::from_str(line).map_err(|error| format!("not valid JSON: {error}"))?;
    let tool = value
        .get("tool")
        .and_then(Value::as_str)
        .ok_or("expected {\"tool\": NAME, \"input\": {...}}, found no string `tool`")?
        .to_string();
    let input = value
        .get("input")
        .cloned()
        .ok_or("expected {\"tool\": NAME, \"input\": {...}}, found no `input`")?;
    Ok((tool, input))
}
