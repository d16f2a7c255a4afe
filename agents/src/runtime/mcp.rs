//! Starting an agent's MCP servers with the agent (the runtime's side of [`crate::mcp`]).

use muster_config::{AgentDefinition, PermissionMode};

use crate::mcp::{McpPlace, McpSession, McpToolRecord};
use crate::tools::{TOOL_NAMES, Workspace};

use super::context::RunContext;
use super::records::AgentKind;

/// Who an agent is, for its servers: its id, kind, starting mode and definition.
pub(super) struct ServerOwner<'a> {
    pub agent: &'a str,
    pub kind: &'a AgentKind,
    pub mode: PermissionMode,
    pub definition: &'a AgentDefinition,
}

impl ServerOwner<'_> {
    /// Where its servers run: its workspace, its parent's connections for a subagent, and the
    /// sandbox profile a Bash call of it would get (read-only in plan mode and for read-only
    /// agents).
    fn place<'a>(&'a self, run: &'a RunContext, workspace: &'a Workspace) -> McpPlace<'a> {
        let profile = crate::sandbox::profile_for(false, self.mode, self.definition.read_only);
        McpPlace {
            cwd: workspace.root(),
            agent: self.agent,
            parent: match self.kind {
                AgentKind::Subagent { parent, .. } => Some(parent.as_str()),
                AgentKind::Main | AgentKind::Teammate { .. } => None,
            },
            sandbox: run.sandbox.as_deref().map(|sandbox| (sandbox, profile)),
        }
    }
}

/// The run's enabled MCP servers for a new agent (started in its workspace, or its parent's),
/// keeping the tools its definition offers. A server that fails is a warning; the agent goes
/// on without it.
pub(super) async fn start_session(
    run: &RunContext,
    owner: &ServerOwner<'_>,
    workspace: &Workspace,
) -> McpSession {
    let config = run.tools.mcp();
    if config.servers.is_empty() {
        return McpSession::default();
    }
    let agent = owner.agent;
    let definition = owner.definition;
    let (session, warnings) = McpSession::start(
        config,
        &owner.place(run, workspace),
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
    owner: &ServerOwner<'_>,
    stored: &[McpToolRecord],
    workspace: &Workspace,
) -> McpSession {
    if stored.is_empty() {
        return McpSession::default();
    }
    let (session, warnings) =
        McpSession::resume(run.tools.mcp(), &owner.place(run, workspace), stored).await;
    report(owner.agent, &warnings);
    session
}

pub(super) fn report(agent: &str, warnings: &[String]) {
    for warning in warnings {
        tracing::warn!(agent, "{warning}");
    }
}
