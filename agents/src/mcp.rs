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
//! Nothing here is fatal to a run: a server that does not start, times out, lists an invalid
//! schema or crashes is a warning (its tools are left out) or an error result for one call.
//! Server processes are not inside the Bash sandbox: they run with the user's rights.

mod client;
mod names;
mod process;
mod session;
mod tool;

use std::time::Duration;

use muster_config::McpServerConfig;
use serde::{Deserialize, Serialize};

pub use client::{ListedTool, McpConnection, McpError, list_server_tools};
pub use names::model_names;
pub use process::kill_server_groups;
pub use session::McpSession;
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
    /// The server marks the tool `readOnlyHint: true`.
    pub read_only_hint: bool,
    /// The user lists the server in `[mcp] trusted_read_only`.
    pub trusted_read_only: bool,
}

impl McpToolFacts {
    /// Whether plan mode and read-only agents may call it: a read-only tool of a server the
    /// user trusts for read-only use (the server's own claim is not enough).
    pub fn is_trusted_read_only(&self) -> bool {
        self.read_only_hint && self.trusted_read_only
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
        self.annotations
            .get("readOnlyHint")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false)
    }
}

/// One server an agent may start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerSpec {
    pub config: McpServerConfig,
    /// Listed in `[mcp] trusted_read_only`.
    pub trusted_read_only: bool,
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
                    trusted_read_only: status.trusted_read_only,
                })
                .collect(),
            limits: McpLimits {
                startup: millis(settings.startup_timeout_ms.value),
                call: millis(settings.call_timeout_ms.value),
                max_output_bytes: usize::try_from(settings.max_output_bytes.value)
                    .unwrap_or(usize::MAX),
            },
        }
    }

    /// The server called `name`.
    pub fn server(&self, name: &str) -> Option<&McpServerSpec> {
        self.servers.iter().find(|spec| spec.config.name == name)
    }
}
