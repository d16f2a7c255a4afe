//! `muster commands`: the slash commands a prompt may name (`/name args`) and the skills
//! agents are offered, each with where it comes from; `--json` for scripts.

use std::fmt::Write as _;

use muster_config::{CommandCatalog, Diagnostic, SkillCatalog};
use serde_json::json;

use crate::exit::Exit;
use crate::loading::{print_output, project_root};
use crate::project::Globals;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print the commands, the skills and the warnings as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn execute(global: &Globals, args: Args) -> anyhow::Result<Exit> {
    let root = project_root(global)?;
    let home = global.process.user_home();
    let (plugins, mut warnings): (_, Vec<Diagnostic>) =
        muster_config::plugins::find(&root, home.as_deref());
    let commands = CommandCatalog::load_with(&root, home.as_deref(), &plugins);
    let skills = SkillCatalog::load_with(&root, home.as_deref(), &plugins);
    warnings.extend(commands.warnings);
    warnings.extend(commands.value.allowed_tools_warning());
    warnings.extend(skills.warnings);
    let output = if args.json {
        let document = json!({
            "project_root": root.path(),
            "commands": commands.value.iter().collect::<Vec<_>>(),
            "skills": skills.value.iter().collect::<Vec<_>>(),
            "warnings": warnings.iter().map(ToString::to_string).collect::<Vec<_>>(),
        });
        format!("{}\n", serde_json::to_string_pretty(&document)?)
    } else {
        text(&commands.value, &skills.value, &warnings)?
    };
    print_output(&output)?;
    Ok(Exit::Success)
}

fn text(
    commands: &CommandCatalog,
    skills: &SkillCatalog,
    warnings: &[Diagnostic],
) -> Result<String, std::fmt::Error> {
    let mut output = String::new();
    if commands.is_empty() {
        writeln!(
            output,
            "no slash commands (.claude/commands/, ~/.claude/commands/, plugins' commands/)"
        )?;
    }
    for command in commands.iter() {
        let hint = command
            .argument_hint
            .as_deref()
            .map(|hint| format!(" {hint}"))
            .unwrap_or_default();
        let head = format!(
            "/{}{hint}  ({}: {})",
            command.name,
            command.scope,
            command.path.display()
        );
        let model = command.model.as_deref();
        let allowed = command.allowed_tools.as_deref();
        listed(&mut output, &head, &command.description, model, allowed)?;
    }
    for skill in skills.iter() {
        let manual = if skill.manual_only {
            "  not offered to the model (disable-model-invocation)"
        } else {
            ""
        };
        let head = format!(
            "skill {}  ({}: {}){manual}",
            skill.name,
            skill.scope,
            skill.path.display()
        );
        let allowed = skill.allowed_tools.as_deref();
        listed(&mut output, &head, &skill.description, None, allowed)?;
    }
    for warning in warnings {
        writeln!(output, "warning: {warning}")?;
    }
    Ok(output)
}

/// A command's or a skill's lines: `head` (what it is, where it comes from), then what it
/// says of itself.
fn listed(
    output: &mut String,
    head: &str,
    description: &str,
    model: Option<&str>,
    allowed_tools: Option<&str>,
) -> std::fmt::Result {
    writeln!(output, "{head}")?;
    writeln!(output, "    {description}")?;
    if let Some(model) = model {
        writeln!(output, "    model: {model}")?;
    }
    if let Some(allowed) = allowed_tools {
        writeln!(output, "    allowed-tools (shown, not applied): {allowed}")?;
    }
    Ok(())
}
