//! Starting an agent's MCP servers with the agent (the runtime's side of [`crate::mcp`]).

use muster_config::AgentDefinition;

use crate::mcp::{McpSession, McpToolRecord};
use crate::tools::{TOOL_NAMES, Workspace};

use super::context::RunContext;

/// Starts the run's enabled MCP servers for a new agent in its workspace, keeping the tools
/// its definition offers. A server that fails is a warning; the agent goes on without it.
pub(super) async fn start_session(
    run: &RunContext,
    agent: &str,
    definition: &AgentDefinition,
    workspace: &Workspace,
) -> McpSession {
    let config = run.tools.mcp();
    if config.servers.is_empty() {
        return McpSession::default();
    }
    let (session, warnings) = McpSession::start(
        config,
        workspace.root(),
        |server, tool| definition.offers_mcp_tool(server, tool),
        &TOOL_NAMES,
    )
    .await;
    report(agent, &warnings);
    session
}

/// The MCP session of a resumed agent: the tools its `started` record lists, on servers
/// started again.
pub(super) async fn resume_session(
    run: &RunContext,
    agent: &str,
    stored: &[McpToolRecord],
    workspace: &Workspace,
) -> McpSession {
    if stored.is_empty() {
        return McpSession::default();
    }
    let (session, warnings) = McpSession::resume(run.tools.mcp(), workspace.root(), stored).await;
    report(agent, &warnings);
    session
}

fn report(agent: &str, warnings: &[String]) {
    for warning in warnings {
        tracing::warn!(agent, "{warning}");
    }
}
