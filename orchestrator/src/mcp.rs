//! The project's MCP servers for a run, `muster config show` and `muster check`.

use muster_agents::mcp::McpConfig;
use muster_config::rule::RuleSpecifier;
use muster_config::settings::Settings;
use muster_config::{Diagnostic, McpEnvironment, McpServers};

use crate::loading::print_warnings;
use crate::process::ProcessGiven;
use crate::project::Project;

/// The servers of the project root (`~/.claude.json`, `.mcp.json`) with their status, and
/// the warnings: bad entries, unset variables, retired settings, and permission rules naming
/// servers that are not configured (valid, but they match nothing).
pub fn load_servers(
    root: &std::path::Path,
    settings: &Settings,
    process: &ProcessGiven,
) -> (McpServers, Vec<Diagnostic>) {
    let home = process.user_home();
    let loaded = McpServers::load(
        root,
        &settings.mcp,
        McpEnvironment {
            env: &process.env,
            home: home.as_deref(),
        },
    );
    let mut warnings = loaded.warnings;
    for list in [
        &settings.permissions.allow,
        &settings.permissions.ask,
        &settings.permissions.deny,
    ] {
        for rule in list {
            if let RuleSpecifier::Mcp(pattern) = rule.value.specifier()
                && loaded.value.get(&pattern.server).is_none()
            {
                warnings.push(Diagnostic::new(format!(
                    "permission rule `{}` (from {}) names MCP server `{}`, which neither {} nor \
                     ~/.claude.json declares; it matches nothing until the server is configured",
                    rule.value,
                    rule.origin,
                    pattern.server,
                    muster_config::mcp::MCP_FILE
                )));
            }
        }
    }
    (loaded.value, warnings)
}

/// The enabled servers a run's agents start (warnings printed to stderr).
pub fn run_config(project: &Project) -> McpConfig {
    let (servers, warnings) =
        load_servers(project.root.path(), &project.settings, &project.process);
    print_warnings(&warnings);
    for status in servers.servers.iter().filter(|status| !status.enabled) {
        // In a trusted project, a server trust keeps out changed or appeared since: say so
        // (an untrusted project's notice already counts them).
        if status.untrusted && project.settings.trust.trusted {
            eprintln!(
                "muster: warning: MCP server `{}` ({}) is not started: {}",
                status.server.name,
                status.server.scope.source(),
                status.why
            );
        }
        tracing::info!(server = %status.server.name, "MCP server not started: {}", status.why);
    }
    McpConfig::from_settings(&servers, &project.settings.mcp)
}

/// The servers a run's agents start in this process: the configured ones ([`run_config`]) and
/// those its front end gave for the session, which replace a configured one of their name (or,
/// `mcp_servers_only`, all of them).
pub(crate) fn session_config(
    project: &Project,
    front: Option<&crate::lifecycle::FrontEnd>,
) -> McpConfig {
    let Some(front) = front else {
        return run_config(project);
    };
    let configured = if front.mcp_servers_only {
        McpConfig::from_settings(&Default::default(), &project.settings.mcp)
    } else {
        run_config(project)
    };
    configured.with_session_servers(front.mcp_servers.clone())
}

/// `muster check`'s view of MCP tools: each server it needs is started once (within
/// `mcp.startup_timeout_ms`) to list its tools, then stopped.
pub struct McpLookup {
    servers: McpServers,
    config: McpConfig,
    cwd: std::path::PathBuf,
    listed: std::collections::BTreeMap<String, Result<Vec<muster_agents::mcp::ListedTool>, String>>,
}

impl McpLookup {
    pub fn new(
        root: &std::path::Path,
        settings: &Settings,
        process: &ProcessGiven,
        cwd: &std::path::Path,
    ) -> McpLookup {
        let (servers, warnings) = load_servers(root, settings, process);
        print_warnings(&warnings);
        let config = McpConfig::from_settings(&servers, &settings.mcp);
        McpLookup {
            servers,
            config,
            cwd: cwd.to_path_buf(),
            listed: std::collections::BTreeMap::new(),
        }
    }

    /// The facts of `tool` when it names an MCP tool of an enabled server that lists it;
    /// `Err` says why not (the engine then denies the call as not available).
    pub fn facts(
        &mut self,
        tool: &str,
    ) -> Option<Result<muster_agents::mcp::McpToolFacts, String>> {
        let (server, name) = muster_config::mcp::split_tool_name(tool)?;
        Some(self.find(server, name))
    }

    fn find(
        &mut self,
        server: &str,
        name: &str,
    ) -> Result<muster_agents::mcp::McpToolFacts, String> {
        let Some(status) = self.servers.get(server) else {
            return Err(format!(
                "MCP server `{server}` is declared in neither {} nor ~/.claude.json",
                muster_config::mcp::MCP_FILE
            ));
        };
        if !status.enabled {
            return Err(format!(
                "MCP server `{server}` is not enabled: {}",
                status.why
            ));
        }
        let user_read_only = self.config.user_read_only(server, name);
        let config = status.server.clone();
        let limits = self.config.limits.clone();
        let cwd = self.cwd.clone();
        let listed = self.listed.entry(server.to_owned()).or_insert_with(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|error| error.to_string())?;
            runtime.block_on(async {
                muster_agents::mcp::list_server_tools(&config, &cwd, &limits, None)
                    .await
                    .map(|(tools, warnings)| {
                        for warning in warnings {
                            eprintln!("muster: warning: {warning}");
                        }
                        tools
                    })
                    .map_err(|error| error.to_string())
            })
        });
        let tools = listed.as_ref().map_err(Clone::clone)?;
        let listed_tool = tools.iter().find(|tool| tool.name == name).ok_or_else(|| {
            format!(
                "MCP server `{server}` lists no tool `{name}`; it lists: {}",
                tools
                    .iter()
                    .map(|tool| tool.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?;
        Ok(muster_agents::mcp::McpToolFacts {
            server: server.to_owned(),
            tool: name.to_owned(),
            name: muster_config::mcp::tool_name(server, name),
            read_only_hint: muster_agents::mcp::hint(&listed_tool.annotations, "readOnlyHint")
                == Some(true),
            closed_world_hint: muster_agents::mcp::hint(&listed_tool.annotations, "openWorldHint")
                == Some(false),
            user_read_only,
        })
    }
}
