//! `muster agents`: list agent definitions with their source and warnings.

use muster_config::settings::CliOverrides;
use muster_config::{AgentCatalog, AgentDefinition, Diagnostic, ModelChoice, ProjectInstructions};
use serde_json::{Value, json};

use crate::project::Globals;
use std::fmt::Write as _;

use crate::exit::Exit;
use crate::loading::{load_settings, print_output, project_root, usage_error};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub action: AgentsAction,
}

#[derive(Debug, clap::Subcommand)]
pub enum AgentsAction {
    /// Every definition with its source file and any warnings.
    List {
        /// Print the definitions, their sources and the warnings as JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn execute(global: &Globals, args: Args) -> anyhow::Result<Exit> {
    match args.action {
        AgentsAction::List { json } => list(global, json),
    }
}

fn list(global: &Globals, as_json: bool) -> anyhow::Result<Exit> {
    let root = project_root(global)?;
    let settings = load_settings(global, &root, CliOverrides::new())?;
    let home = global.process.user_home();
    let catalog = AgentCatalog::load(&root, home.as_deref()).map_err(usage_error)?;
    let instructions = ProjectInstructions::load(
        &root,
        settings.value.instructions_max_bytes.value,
        home.as_deref(),
    )
    .map_err(usage_error)?;
    let mut warnings: Vec<Diagnostic> = settings.warnings;
    warnings.extend(catalog.warnings);
    warnings.extend(crate::loading::model_warnings(
        &catalog.value,
        &settings.value,
    ));
    warnings.extend(instructions.warnings);
    let (mcp_servers, mcp_warnings) =
        crate::mcp::load_servers(root.path(), &settings.value, &global.process);
    warnings.extend(mcp_warnings);
    let mcp = |definition: &AgentDefinition| mcp_tools(definition, &mcp_servers);
    let mut output = String::new();
    if as_json {
        let document = json!({
            "project_root": root.path(),
            "agents": catalog.value.iter().map(|d| definition_json(d, &mcp(d), &warnings)).collect::<Vec<_>>(),
            "instructions": instructions.value.files.iter().map(|file| json!({
                "path": file.path,
                "scope": file.scope,
                "bytes": file.content.len(),
                "truncated_from": file.truncated_from,
            })).collect::<Vec<_>>(),
            "warnings": warnings.iter().map(ToString::to_string).collect::<Vec<_>>(),
        });
        output = serde_json::to_string_pretty(&document)?;
        output.push('\n');
    } else {
        for definition in catalog.value.iter() {
            write_definition(&mut output, definition)?;
            let tools = mcp(definition);
            if !tools.is_empty() {
                writeln!(output, "    mcp: {}", tools.join(", "))?;
            }
        }
        for file in &instructions.value.files {
            writeln!(
                output,
                "instructions: {}",
                crate::loading::describe_instruction(file)
            )?;
        }
        for warning in &warnings {
            writeln!(output, "warning: {warning}")?;
        }
    }
    print_output(&output)?;
    Ok(Exit::Success)
}

fn model_text(model: &ModelChoice) -> String {
    match model {
        ModelChoice::Settings => "settings".to_string(),
        ModelChoice::Inherit => "inherit".to_string(),
        ModelChoice::Named(name) => name.clone(),
    }
}

fn write_definition(output: &mut String, definition: &AgentDefinition) -> std::fmt::Result {
    let overrides = if definition.overrides.is_empty() {
        String::new()
    } else {
        let names: Vec<String> = definition
            .overrides
            .iter()
            .map(ToString::to_string)
            .collect();
        format!("  (overrides {})", names.join(", "))
    };
    writeln!(
        output,
        "{}  {}{overrides}",
        definition.name, definition.source
    )?;
    writeln!(output, "    {}", definition.description)?;
    let mode = definition
        .permission_mode
        .map_or_else(|| "settings".to_string(), |mode| mode.to_string());
    let read_only = if definition.read_only {
        "  read-only"
    } else {
        ""
    };
    writeln!(
        output,
        "    tools: {}  mode: {mode}  model: {}{read_only}",
        definition.effective_tools().join(", "),
        model_text(&definition.model),
    )
}

/// The MCP tools a definition gets, without starting a server: `mcp__<server>__*` for each
/// enabled server when `tools` is absent or `*`, else the `mcp__…` entries it lists, each
/// marked when its server is not enabled.
fn mcp_tools(definition: &AgentDefinition, servers: &muster_config::McpServers) -> Vec<String> {
    if definition.tools.is_none() {
        return servers
            .enabled()
            .map(|status| format!("mcp__{}__*", status.server.name))
            .collect();
    }
    definition
        .mcp_tools
        .iter()
        .map(|pattern| {
            let name = match &pattern.tool {
                Some(tool) => muster_config::mcp::tool_name(&pattern.server, tool),
                None => format!("mcp__{}__*", pattern.server),
            };
            match servers.get(&pattern.server) {
                Some(status) if status.enabled => name,
                Some(_) => format!("{name} (server not enabled)"),
                None => format!("{name} (server not configured)"),
            }
        })
        .collect()
}

fn definition_json(definition: &AgentDefinition, mcp: &[String], warnings: &[Diagnostic]) -> Value {
    let source = definition.source.to_string();
    let own_warnings: Vec<String> = warnings
        .iter()
        .filter(|warning| warning.source.as_deref() == Some(source.as_str()))
        .map(ToString::to_string)
        .collect();
    json!({
        "name": definition.name,
        "description": definition.description,
        "source": source,
        "overrides": definition.overrides.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "tools": definition.effective_tools(),
        "mcpTools": mcp,
        "disallowedTools": definition.disallowed_tools,
        "model": definition.model,
        "permissionMode": definition.permission_mode,
        "read_only": definition.read_only,
        "warnings": own_warnings,
    })
}
