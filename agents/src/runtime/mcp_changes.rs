//! A server's `tools/list_changed`, taken at the agent's next turn boundary (the runtime's side
//! of [`crate::mcp::McpSession::relisted`]).

use crate::tools::TOOL_NAMES;

use super::agent::AgentRuntime;
use super::error::RuntimeResult;
use super::records::Record;

impl AgentRuntime {
    /// At a turn boundary (before a model request): when a server of the agent said its tools
    /// changed, lists them again, commits the new list (a resume offers it) and offers it
    /// from this request on. The tools lead every request, so a change costs the prompt
    /// cache's whole prefix once.
    pub(super) async fn refresh_mcp_tools(&mut self) -> RuntimeResult<()> {
        if !self.calls.mcp.tools_changed() {
            return Ok(());
        }
        let definition = &self.definition;
        let (session, warnings) = self
            .calls
            .mcp
            .relisted(
                self.run.tools.mcp(),
                |server, tool| definition.offers_mcp_tool(server, tool),
                &TOOL_NAMES,
            )
            .await;
        super::mcp::report(&self.id, &warnings);
        let old: std::collections::BTreeSet<String> = self.calls.mcp.names().into_iter().collect();
        let mut tools: Vec<String> = self
            .calls
            .tools
            .iter()
            .filter(|name| !old.contains(*name))
            .cloned()
            .collect();
        tools.extend(session.names());
        let record = Record::McpTools {
            tools: tools.clone(),
            mcp_tools: session.records(),
        };
        self.commit(vec![record], Vec::new(), None).await?;
        let kept = self.requests.tool_definitions.iter();
        let kept = kept
            .filter(|definition| !old.contains(&definition.name))
            .cloned();
        self.requests.tool_definitions = kept.chain(session.definitions()).collect();
        self.calls.tools = tools;
        self.calls.mcp = std::sync::Arc::new(session);
        Ok(())
    }
}
