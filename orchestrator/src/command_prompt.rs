//! A prompt that names a slash command (`muster run -p "/review src/lib.rs"`, a batch line's
//! prompt, an editor's first prompt): the command is chosen before the project's settings load
//! (its `model` is the run's model unless `--model` says otherwise), then expanded once the
//! run's mode and workspace are known: arguments put in, each ``!`command` `` run as the main
//! agent's `Bash` call would run — decided by the permission engine in the run's mode with the
//! settings' rules, in the sandbox with the profile the agent would get — and replaced by its
//! output. A snippet the engine does not allow (plan mode refusing a write, a command that
//! would ask) fails the expansion with the engine's reason, and no run starts. The expanded
//! prompt is what the run stores as its prompt, so a resume or a batch's re-run never runs a
//! snippet again.

use std::ffi::OsString;
use std::ops::Range;
use std::sync::Arc;

use muster_agents::permission::{
    AgentKind, Decision, PermissionContext, PermissionEngine, Verdict,
};
use muster_agents::tools::{Bash, Tool as _, ToolContext, Workspace};
use muster_config::agents::{ModelValue, read_model_value};
use muster_config::commands::{CommandLookup, invocation, shell_snippets};
use muster_config::{AgentCatalog, CommandCatalog, SlashCommand};

use crate::exit::{Exit, ExitError};
use crate::launch::{RunFlags, RunLaunch};
use crate::loading::{print_warnings, project_root};
use crate::project::{Globals, Project};

/// The command a run's prompt names, with its arguments.
#[derive(Debug, Clone)]
pub struct ChosenCommand {
    pub command: SlashCommand,
    pub arguments: String,
}

fn usage(message: impl Into<String>) -> anyhow::Error {
    ExitError::new(Exit::Usage, message).into()
}

/// Before the project loads: when `flags.prompt` names a slash command, records it in
/// `flags.command` and takes its `model` as `--model` when none was given. A prompt shaped
/// like a command that names none is sent as written, with a warning.
pub fn choose(global: &Globals, flags: &mut RunFlags) -> anyhow::Result<()> {
    let Some(called) = invocation(&flags.prompt) else {
        return Ok(());
    };
    let root = project_root(global)?;
    let loaded = CommandCatalog::load(&root, global.process.user_home().as_deref());
    let command = match loaded.value.find(called.name) {
        Ok(command) => command.clone(),
        Err(CommandLookup::Unknown) => {
            eprintln!(
                "muster: warning: `/{}` names no slash command (`muster commands` lists them): \
                 the prompt is sent as written",
                called.name
            );
            return Ok(());
        }
        Err(CommandLookup::Ambiguous(names)) => {
            return Err(usage(format!(
                "`/{}` could be any of /{}: write the whole name",
                called.name,
                names.join(", /")
            )));
        }
    };
    print_warnings(&loaded.warnings);
    if let Some(allowed) = &command.allowed_tools {
        eprintln!(
            "muster: warning: /{} sets allowed-tools `{allowed}`, which muster shows and does not \
             apply: calls are decided by the permission engine, the mode and your rules",
            command.name
        );
    }
    if let (Some(model), None) = (&command.model, &flags.model) {
        match read_model_value(model) {
            ModelValue::Id(id) => flags.model = Some(id),
            ModelValue::Inherit | ModelValue::NotAModel => eprintln!(
                "muster: warning: /{}'s `model: {model}` is not a model id: the run uses the \
                 settings' model",
                command.name
            ),
        }
    }
    flags.command = Some(ChosenCommand {
        command,
        arguments: called.arguments.to_owned(),
    });
    Ok(())
}

/// The prompt the run stores and its main agent (or lead) starts on: `flags.prompt`, or the
/// chosen command expanded for a run launched as `run` (its mode, its workspace) whose main
/// agent is `definition`.
pub fn prompt_for_run(
    project: &Project,
    run: &RunLaunch,
    catalog: &AgentCatalog,
    definition: &str,
    flags: &RunFlags,
) -> anyhow::Result<String> {
    let Some(chosen) = &flags.command else {
        return Ok(flags.prompt.clone());
    };
    let text = chosen.command.with_arguments(&chosen.arguments);
    let snippets = shell_snippets(&text);
    if snippets.is_empty() {
        return Ok(text);
    }
    let shell = CommandShell::new(project, run, catalog, definition)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut outputs: Vec<(Range<usize>, String)> = Vec::new();
    for (range, command) in snippets {
        let output = runtime.block_on(shell.run(&command)).map_err(|why| {
            ExitError::new(
                Exit::Failed,
                format!(
                    "/{}: the line `!`{command}`` was not run, so the command was not \
                         expanded and no run started: {why}",
                    chosen.command.name
                ),
            )
        })?;
        outputs.push((range, output));
    }
    let mut expanded = text;
    for (range, output) in outputs.into_iter().rev() {
        expanded.replace_range(range, output.trim_end());
    }
    Ok(expanded)
}

/// Runs a command's snippets as the main agent's `Bash` calls.
struct CommandShell<'a> {
    project: &'a Project,
    run: &'a RunLaunch,
    catalog: &'a AgentCatalog,
    definition: &'a str,
    workspace: Workspace,
    sandbox: Option<Arc<muster_agents::sandbox::Sandbox>>,
}

impl<'a> CommandShell<'a> {
    fn new(
        project: &'a Project,
        run: &'a RunLaunch,
        catalog: &'a AgentCatalog,
        definition: &'a str,
    ) -> anyhow::Result<CommandShell<'a>> {
        let settings = &project.settings;
        let workspace = Workspace::new(&run.workspace)
            .map_err(|e| usage(format!("--workspace: {e}")))?
            .with_additional(&settings.additional_directory_paths());
        let sandbox =
            crate::sandbox::SandboxState::for_run(settings, project.process.home.clone())?
                .into_run_sandbox();
        Ok(CommandShell {
            project,
            run,
            catalog,
            definition,
            workspace,
            sandbox,
        })
    }

    /// The engine's decision on `command` as the main agent's `Bash` call.
    fn decide(&self, command: &str) -> Decision {
        let settings = &self.project.settings;
        let mut context = PermissionContext::new(
            AgentKind::Lead,
            self.run.permission_mode,
            &self.workspace,
            &settings.permissions,
            self.catalog,
        );
        if let Some(definition) = self.catalog.get(self.definition) {
            context = context.with_definition(definition);
        }
        context.auto_gate = settings.auto_gate.value;
        context.home_dir = self.project.process.home.as_deref();
        PermissionEngine::standard().decide(
            &context,
            muster_config::ToolName::Bash.as_str(),
            &serde_json::json!({ "command": command }),
        )
    }

    /// Its output, or why it did not run or failed.
    async fn run(&self, command: &str) -> Result<String, String> {
        let decision = self.decide(command);
        match decision.verdict {
            Verdict::Allow => {}
            Verdict::Ask => {
                return Err(format!(
                    "it needs approval ({}), and a command's lines are never asked about; allow \
                     it with a rule (`Bash({command})` in your settings' allow list) or run it \
                     yourself",
                    decision.reason
                ));
            }
            Verdict::Deny => return Err(format!("denied: {}", decision.reason)),
        }
        let context = self.context(&decision);
        let text = decision.shell_run_as.as_deref().unwrap_or(command);
        let output = Bash
            .call(&context, serde_json::json!({ "command": text }))
            .await;
        if output.is_error {
            return Err(format!("it failed: {}", output.content.trim()));
        }
        Ok(output.content)
    }

    /// The context of an allowed call: the read-only environment and profile for a command
    /// the classifier proved read-only, the mode's profile otherwise.
    fn context(&self, decision: &Decision) -> ToolContext {
        let mut environment: Vec<(OsString, OsString)> = self
            .project
            .process
            .env
            .iter()
            .filter(|(name, _)| {
                !(decision.read_only_shell && muster_agents::shell::remove_from_read_only_env(name))
            })
            .map(|(name, value)| (name.into(), value.into()))
            .collect();
        if decision.read_only_shell {
            let overrides = muster_agents::shell::read_only_git_env();
            environment.retain(|(name, _)| {
                !overrides
                    .iter()
                    .any(|(key, _)| name.to_string_lossy() == key.as_str())
            });
            environment.extend(overrides.into_iter().map(|(k, v)| (k.into(), v.into())));
        }
        let context = ToolContext::new(self.workspace.clone(), environment);
        let read_only_agent = self
            .catalog
            .get(self.definition)
            .is_some_and(|definition| definition.read_only);
        match &self.sandbox {
            Some(sandbox) => context.with_sandbox(
                sandbox.clone(),
                muster_agents::sandbox::profile_for(
                    decision.read_only_shell,
                    decision.effective_mode,
                    read_only_agent,
                ),
            ),
            None => context,
        }
    }
}
