//! One MCP tool as a [`Tool`].

use std::sync::Arc;

use serde_json::Value;

use crate::tools::{HandledBy, InputError, PathAccess, Tool, ToolContext, ToolFuture, ToolOutput};

use super::{McpConnection, McpToolFacts, McpToolRecord};

/// A server's tool. Never read-only nor idempotent for the runtime (a `tool_started` record
/// precedes each call, so a crash mid-call resumes as interrupted); the permission engine
/// decides it by its [`McpToolFacts`].
#[derive(Debug)]
pub struct McpTool {
    facts: McpToolFacts,
    record: McpToolRecord,
    /// `None`: the server is gone (it did not start on resume, or stopped listing the tool).
    connection: Option<Arc<McpConnection>>,
}

impl McpTool {
    pub fn new(
        record: McpToolRecord,
        user_read_only: bool,
        connection: Option<Arc<McpConnection>>,
    ) -> McpTool {
        McpTool {
            facts: McpToolFacts {
                server: record.server.clone(),
                tool: record.tool.clone(),
                name: muster_config::mcp::tool_name(&record.server, &record.tool),
                read_only_hint: record.read_only_hint(),
                closed_world_hint: record.closed_world_hint(),
                user_read_only,
            },
            record,
            connection,
        }
    }

    /// The tool as the agent's record stores it.
    pub fn record(&self) -> &McpToolRecord {
        &self.record
    }
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.record.model_name
    }

    fn description(&self) -> &str {
        &self.record.description
    }

    fn input_schema(&self) -> Value {
        self.record.input_schema.clone()
    }

    fn is_read_only(&self) -> bool {
        false
    }

    fn is_idempotent(&self) -> bool {
        false
    }

    fn handled_by(&self) -> HandledBy {
        HandledBy::ToolSet
    }

    fn accessed_paths(&self, _input: &Value) -> Result<Vec<PathAccess>, InputError> {
        Ok(Vec::new())
    }

    fn call<'a>(&'a self, _context: &'a ToolContext, input: Value) -> ToolFuture<'a> {
        Box::pin(async move {
            match &self.connection {
                Some(connection) => connection.call(&self.record.tool, input).await,
                None => ToolOutput::error(format!(
                    "MCP server `{}` is not running (it did not start, or no longer lists \
                     `{}`); this tool is unavailable",
                    self.record.server, self.record.tool
                )),
            }
        })
    }

    fn mcp(&self) -> Option<&McpToolFacts> {
        Some(&self.facts)
    }
}
