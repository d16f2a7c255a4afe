//! MCP servers as tools (DESIGN, "Wave 2 → Claude Code setups and MCP").
//!
//! An agent starts every enabled server when it starts ([`McpSession::start`]), in its own
//! workspace, lists each server's tools within a timeout and offers them as
//! `mcp__<server>__<tool>` ([`McpTool`], a [`crate::tools::Tool`] the runtime dispatches like
//! the others, through the one permission engine). The list and the annotations are fixed
//! then and stored in the agent's `started` record ([`McpToolRecord`]); a resumed agent offers
//! the stored list ([`McpSession::resume`]) and a tool whose server is gone answers with an
//! error. The servers stop when the session is dropped, with the agent: a stdio server leads
//! its own process group and the whole group is killed ([`kill_server_groups`] kills every
//! live one for exits that skip destructors); its stderr is read, and its last lines are
//! quoted in the errors it causes.
//!
//! A stdio server runs through the Bash sandbox's trampoline ([`server_policy`]): the
//! workspace-write profile on the agent's own workspace (read-only in plan mode and for
//! read-only agents), the network as `[sandbox] network` says. A subagent uses its parent's
//! connections ([`McpHub`]); a main agent and each teammate start their own, in their own
//! workspace, every server in parallel; a server that failed to start is not tried again in
//! the run.
//!
//! Nothing here is fatal to a run: a server that does not start, times out, lists an invalid
//! schema or crashes is a warning (its tools are left out) or an error result for one call.

mod client;
mod names;
mod process;
mod session;
mod tool;

use std::time::Duration;

use muster_config::McpServerConfig;
use muster_config::mcp::McpPattern;
use serde::{Deserialize, Serialize};

pub use client::{Confinement, ListedTool, McpConnection, McpError, list_server_tools};
pub use names::model_names;
pub use process::kill_server_groups;
pub use session::{McpHub, McpPlace, McpSession};
pub use tool::McpTool;

/// What the permission engine needs of an MCP tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct McpToolFacts {
    /// The server's name in `.mcp.json`.
    pub server: String,
    /// The tool's name on the server.
    pub tool: String,
    /// `mcp__<server>__<tool>`: the name rules match.
    pub name: String,
    /// The server marks the tool `readOnlyHint: true` (a missing hint is false).
    pub read_only_hint: bool,
    /// The server marks the tool `openWorldHint: false` (a missing hint is true: the tool may
    /// reach outside, such as the network).
    pub closed_world_hint: bool,
    /// The user names the tool in `[mcp] read_only_tools` of their own settings.
    pub user_read_only: bool,
}

impl McpToolFacts {
    /// Whether plan mode and read-only agents may call it: a tool its (trusted: it started)
    /// server marks read-only and closed-world, or one the user declares read-only.
    pub fn is_trusted_read_only(&self) -> bool {
        self.user_read_only || (self.read_only_hint && self.closed_world_hint)
    }

    /// Why [`Self::is_trusted_read_only`] is false, for a denial.
    pub fn why_not_read_only(&self) -> String {
        let missing = match (self.read_only_hint, self.closed_world_hint) {
            (false, false) => "neither `readOnlyHint: true` nor `openWorldHint: false`",
            (false, true) => "not `readOnlyHint: true`",
            _ => {
                "not `openWorldHint: false` (a missing hint means it may reach outside, such as \
                 the network)"
            }
        };
        format!(
            "its server marks `{}` {missing}; a user who knows it only reads local state may \
             name it in `[mcp] read_only_tools` of ~/.muster/settings.toml",
            self.name
        )
    }
}

/// One MCP tool as an agent's `started` record stores it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpToolRecord {
    pub server: String,
    pub tool: String,
    /// The name sent to the model (`mcp__<server>__<tool>` made to fit its name rules).
    pub model_name: String,
    pub description: String,
    pub input_schema: serde_json::Value,
    /// The server's annotations as listed (`readOnlyHint`, `destructiveHint`, …).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub annotations: serde_json::Value,
}

impl McpToolRecord {
    /// `readOnlyHint: true` in the stored annotations.
    pub fn read_only_hint(&self) -> bool {
        hint(&self.annotations, "readOnlyHint") == Some(true)
    }

    /// `openWorldHint: false` in the stored annotations (MCP's default is true).
    pub fn closed_world_hint(&self) -> bool {
        hint(&self.annotations, "openWorldHint") == Some(false)
    }
}

/// A boolean hint of a tool's annotations, when given.
pub fn hint(annotations: &serde_json::Value, name: &str) -> Option<bool> {
    annotations.get(name).and_then(serde_json::Value::as_bool)
}

/// One server an agent may start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerSpec {
    pub config: McpServerConfig,
}

/// Timeouts and the output cap (`[mcp]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpLimits {
    /// Start, initialize and list tools.
    pub startup: Duration,
    /// One tool call.
    pub call: Duration,
    /// The most of a result's text the model gets.
    pub max_output_bytes: usize,
}

impl Default for McpLimits {
    fn default() -> Self {
        McpLimits {
            startup: Duration::from_secs(10),
            call: Duration::from_secs(60),
            max_output_bytes: 100_000,
        }
    }
}

/// The servers a run's agents start, and their limits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct McpConfig {
    pub servers: Vec<McpServerSpec>,
    pub limits: McpLimits,
    /// `[mcp] read_only_tools`: tools the user declares read-only.
    pub read_only_tools: Vec<McpPattern>,
    /// What the run's agents share: the started servers by owner, the failed ones.
    pub hub: std::sync::Arc<McpHub>,
}

/// The sandbox policy a stdio server runs under: the agent's profile on its workspace (the
/// Bash call's), except that the network follows `[sandbox] network` in both profiles (a
/// server is a long-lived helper a read-only tool may still need it for; plan mode denies
/// every tool its server does not mark closed-world).
pub fn server_policy(
    sandbox: &crate::sandbox::Sandbox,
    profile: crate::sandbox::SandboxProfile,
    workspace: &std::path::Path,
) -> crate::sandbox::SandboxPolicy {
    let mut policy = sandbox.policy(profile, workspace);
    policy.network = sandbox.network;
    policy
}

impl McpConfig {
    /// The enabled servers of `servers`, with the limits of `settings`.
    pub fn from_settings(
        servers: &muster_config::McpServers,
        settings: &muster_config::settings::McpSettings,
    ) -> McpConfig {
        let millis = |value: u64| Duration::from_millis(value.max(1));
        McpConfig {
            servers: servers
                .enabled()
                .map(|status| McpServerSpec {
                    config: status.server.clone(),
                })
                .collect(),
            hub: std::sync::Arc::default(),
            read_only_tools: settings
                .read_only_tools
                .iter()
                .flat_map(|listed| listed.value.iter())
                .filter_map(|name| McpPattern::parse(name))
                .collect(),
            limits: McpLimits {
                startup: millis(settings.startup_timeout_ms.value),
                call: millis(settings.call_timeout_ms.value),
                max_output_bytes: usize::try_from(settings.max_output_bytes.value)
                    .unwrap_or(usize::MAX),
            },
        }
    }

    /// Adds the servers a session's front end gave (an editor's, a program's): each replaces a
    /// configured server of the same name, the front end's being the explicit choice.
    pub fn with_session_servers(
        mut self,
        servers: impl IntoIterator<Item = muster_config::McpServerConfig>,
    ) -> McpConfig {
        for config in servers {
            self.servers.retain(|spec| spec.config.name != config.name);
            self.servers.push(McpServerSpec { config });
        }
        self
    }

    /// The server called `name`.
    pub fn server(&self, name: &str) -> Option<&McpServerSpec> {
        self.servers.iter().find(|spec| spec.config.name == name)
    }

    /// Whether the user declares `server`'s `tool` read-only.
    pub fn user_read_only(&self, server: &str, tool: &str) -> bool {
        self.read_only_tools
            .iter()
            .any(|pattern| pattern.matches(server, tool))
    }
}
