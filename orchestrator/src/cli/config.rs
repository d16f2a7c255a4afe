//! `muster config`: show the effective settings, each value with the layer it came from.

use std::fmt::Write as _;

use muster_config::settings::{CliOverrides, SettingEntry};
use serde_json::{Value, json};

use crate::exit::Exit;
use crate::loading::{
    describe_instruction, load_settings, loaded_instructions, print_output, print_warnings,
    project_root,
};
use crate::project::Globals;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub action: ConfigAction,
}

#[derive(Debug, clap::Subcommand)]
pub enum ConfigAction {
    /// The effective settings, each value with the layer it came from.
    Show {
        /// Print the settings, their origins and the warnings as JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn execute(global: &Globals, args: Args) -> anyhow::Result<Exit> {
    match args.action {
        ConfigAction::Show { json } => show(global, json),
    }
}

fn show(global: &Globals, as_json: bool) -> anyhow::Result<Exit> {
    let root = project_root(global)?;
    let loaded = load_settings(global, &root, CliOverrides::new())?;
    let settings = &loaded.value;
    let mut output = String::new();
    let (mcp_servers, mcp_warnings) =
        crate::mcp::load_servers(root.path(), settings, &global.process);
    if as_json {
        let document = json!({
            "project_root": root.path(),
            "settings": entries_json(settings.entries()),
            "resolved": {
                "plans_directory": settings.plans_directory.value,
                "store": settings.store.value,
                "sandbox_writable": settings.sandbox.writable,
            },
            "sandbox_support": muster_agents::sandbox::probe(),
            "instructions": loaded_instructions(&root, settings, global.process.user_home().as_deref()).iter().map(|file| json!({
                "path": file.path,
                "scope": file.scope,
                "bytes": file.content.len(),
                "truncated_from": file.truncated_from,
            })).collect::<Vec<_>>(),
            "mcp_servers": mcp_servers.servers.iter().map(|status| json!({
                "name": status.server.name,
                "scope": status.server.scope,
                "transport": status.server.template,
                "variables": status.server.template.variables(),
                "enabled": status.enabled,
                "why": status.why,
                "untrusted": status.untrusted,
                "approved_in_claude_code": status.claude_approved,
            })).collect::<Vec<_>>(),
            "trust": {
                "trusted": settings.trust.trusted,
                "hash": settings.trust.hash,
                "why": settings.trust.why,
            },
            "hooks": settings.hooks.hooks.iter().map(muster_config::hooks::ConfiguredHook::to_json).collect::<Vec<_>>(),
            "plan_reviewers": settings.hooks.plan_reviewers.iter().map(muster_config::hooks::PlanReviewer::to_json).collect::<Vec<_>>(),
            "guard_failures_block_by": settings.hooks.guard_failures_block_by.as_ref().map(|origin| origin.source.clone()),
            "hooks_disabled_by": settings.hooks.disabled_by.as_ref().map(|origin| origin.source.clone()),
            "skipped": settings.skipped.iter().map(|skipped| json!({
                "key": skipped.key,
                "value": skipped.value,
                "layer": skipped.origin.layer,
                "source": skipped.origin.source,
                "why": skipped.why,
            })).collect::<Vec<_>>(),
            "warnings": loaded.warnings.iter().chain(&mcp_warnings).map(ToString::to_string).collect::<Vec<_>>(),
        });
        output = serde_json::to_string_pretty(&document)?;
        output.push('\n');
    } else {
        print_warnings(&loaded.warnings);
        writeln!(output, "# project root: {}", root.path().display())?;
        for entry in settings.entries() {
            writeln!(
                output,
                "{} = {}  # {}",
                entry.key, entry.value, entry.origin
            )?;
        }
        for hook in &settings.hooks.hooks {
            writeln!(output, "# hook: {}", hook.describe())?;
        }
        for reviewer in &settings.hooks.plan_reviewers {
            writeln!(output, "# {}", reviewer.describe())?;
        }
        if let Some(origin) = &settings.hooks.guard_failures_block_by {
            writeln!(
                output,
                "# hooks: a PreToolUse hook's failure blocks (guardFailures in {})",
                origin.source
            )?;
        }
        if let Some(origin) = &settings.hooks.disabled_by {
            writeln!(
                output,
                "# hooks: all off (disableAllHooks in {})",
                origin.source
            )?;
        }
        for skipped in &settings.skipped {
            writeln!(
                output,
                "# skipped: {} = {}  # {}: {}",
                skipped.key, skipped.value, skipped.origin, skipped.why
            )?;
        }
        let trust = &settings.trust;
        let state = if trust.trusted {
            "trusted"
        } else {
            "not trusted"
        };
        writeln!(
            output,
            "# trust: {state}: {} (hash {})",
            trust.why, trust.hash
        )?;
        if !trust.trusted {
            writeln!(
                output,
                "# trust: run `{}` to trust this project as it is now; it covers {}",
                muster_config::trust::TRUST_COMMAND,
                muster_config::trust::covered_files(root.path())
                    .iter()
                    .map(|file| file.relative.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )?;
        }
        writeln!(
            output,
            "# plans_directory resolves to {}",
            settings.plans_directory.value.display()
        )?;
        writeln!(output, "# store resolves to {}", settings.store.value)?;
        writeln!(
            output,
            "# sandbox: {}",
            muster_agents::sandbox::probe().describe()
        )?;
        for file in loaded_instructions(&root, settings, global.process.user_home().as_deref()) {
            writeln!(output, "# instructions: {}", describe_instruction(&file))?;
        }
        print_warnings(&mcp_warnings);
        for status in &mcp_servers.servers {
            let transport = match &status.server.template {
                muster_config::McpTransport::Stdio { command, .. } => format!("stdio `{command}`"),
                muster_config::McpTransport::Http { url, .. } => format!("http {url}"),
            };
            let approved = status
                .claude_approved
                .as_ref()
                .map(|source| {
                    format!("; approved in Claude Code (by name only, not trust): {source}")
                })
                .unwrap_or_default();
            writeln!(
                output,
                "# mcp server {} ({}, {transport}): {}: {}{approved}",
                status.server.name,
                status.server.scope.source(),
                if status.enabled {
                    "enabled"
                } else {
                    "not enabled"
                },
                status.why
            )?;
        }
    }
    print_output(&output)?;
    Ok(Exit::Success)
}

/// `{key: {value, layer, source, line?, column?}}`; rule lists are arrays of such objects.
fn entries_json(entries: &[SettingEntry]) -> Value {
    let mut object = serde_json::Map::new();
    for entry in entries {
        let mut item = json!({
            "value": entry.value,
            "layer": entry.origin.layer,
            "source": entry.origin.source,
        });
        if let (Some(position), Value::Object(fields)) = (entry.origin.position, &mut item) {
            fields.insert("line".to_string(), json!(position.line));
            fields.insert("column".to_string(), json!(position.column));
        }
        if entry.key.starts_with("permissions.") {
            let list = object
                .entry(entry.key.clone())
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(items) = list {
                items.push(item);
            }
        } else {
            object.insert(entry.key.clone(), item);
        }
    }
    Value::Object(object)
}
