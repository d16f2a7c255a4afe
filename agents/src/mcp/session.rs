//! An agent's MCP servers: started with the agent, stopped when it is dropped.

use std::path::Path;
use std::sync::Arc;

use futures_util::future::join_all;

use crate::model::ToolDefinition;
use crate::tools::Tool;

use super::client::ListedTool;
use super::{McpConfig, McpConnection, McpServerSpec, McpTool, McpToolRecord, model_names};

/// The MCP tools of one agent and the connections behind them.
#[derive(Debug, Default)]
pub struct McpSession {
    tools: Vec<Arc<McpTool>>,
}

impl McpSession {
    /// Starts every server of `config` in `cwd` and lists its tools; keeps those `offered`
    /// allows (`offered(server, tool)`), named so they fit the model's rules and never take
    /// one of `taken`. A server that fails is a warning, and the agent goes on without it.
    pub async fn start(
        config: &McpConfig,
        cwd: &Path,
        offered: impl Fn(&str, &str) -> bool,
        taken: &[&str],
    ) -> (McpSession, Vec<String>) {
        let mut warnings = Vec::new();
        let started = join_all(
            config
                .servers
                .iter()
                .map(|spec| start_one(spec, cwd, config)),
        )
        .await;
        let mut listed: Vec<(&McpServerSpec, Arc<McpConnection>, ListedTool)> = Vec::new();
        for (spec, outcome) in config.servers.iter().zip(started) {
            match outcome {
                Ok((connection, tools, mut found)) => {
                    warnings.append(&mut found);
                    for tool in tools {
                        if offered(&spec.config.name, &tool.name) {
                            listed.push((spec, connection.clone(), tool));
                        }
                    }
                }
                Err(error) => warnings.push(format!("{error}; the agent goes on without it")),
            }
        }
        let full: Vec<String> = listed
            .iter()
            .map(|(spec, _, tool)| muster_config::mcp::tool_name(&spec.config.name, &tool.name))
            .collect();
        let names = model_names(&full, taken);
        let tools = listed
            .into_iter()
            .zip(names)
            .map(|((spec, connection, tool), model_name)| {
                let record = McpToolRecord {
                    server: spec.config.name.clone(),
                    tool: tool.name,
                    model_name,
                    description: tool.description,
                    input_schema: tool.input_schema,
                    annotations: tool.annotations,
                };
                Arc::new(McpTool::new(
                    record,
                    spec.trusted_read_only,
                    Some(connection),
                ))
            })
            .collect();
        (McpSession { tools }, warnings)
    }

    /// A resumed agent's session: exactly the `stored` tools, with the servers of `config`
    /// started again; a tool whose server did not start, is no longer enabled or no longer
    /// lists it answers every call with an error.
    pub async fn resume(
        config: &McpConfig,
        cwd: &Path,
        stored: &[McpToolRecord],
    ) -> (McpSession, Vec<String>) {
        let mut warnings = Vec::new();
        let wanted: Vec<&McpServerSpec> = config
            .servers
            .iter()
            .filter(|spec| stored.iter().any(|tool| tool.server == spec.config.name))
            .collect();
        let started = join_all(wanted.iter().map(|spec| start_one(spec, cwd, config))).await;
        let mut live: Vec<(&str, Arc<McpConnection>, Vec<ListedTool>)> = Vec::new();
        for (spec, outcome) in wanted.iter().zip(started) {
            match outcome {
                Ok((connection, tools, mut found)) => {
                    warnings.append(&mut found);
                    live.push((spec.config.name.as_str(), connection, tools));
                }
                Err(error) => warnings.push(format!(
                    "{error}; its tools answer with an error in the resumed agent"
                )),
            }
        }
        let tools = stored
            .iter()
            .map(|record| {
                let connection = live
                    .iter()
                    .find(|(server, _, tools)| {
                        *server == record.server && tools.iter().any(|t| t.name == record.tool)
                    })
                    .map(|(_, connection, _)| connection.clone());
                let trusted = config
                    .server(&record.server)
                    .is_some_and(|spec| spec.trusted_read_only);
                Arc::new(McpTool::new(record.clone(), trusted, connection))
            })
            .collect();
        (McpSession { tools }, warnings)
    }

    /// The tool the model calls `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools
            .iter()
            .find(|tool| tool.name() == name)
            .map(|tool| tool.clone() as Arc<dyn Tool>)
    }

    /// The tools as the `started` record stores them.
    pub fn records(&self) -> Vec<McpToolRecord> {
        self.tools
            .iter()
            .map(|tool| tool.record().clone())
            .collect()
    }

    /// The names the model calls them by, in order.
    pub fn names(&self) -> Vec<String> {
        self.tools
            .iter()
            .map(|tool| tool.name().to_owned())
            .collect()
    }

    /// Their definitions for model requests.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.tools
            .iter()
            .map(|tool| ToolDefinition {
                name: tool.name().to_owned(),
                description: tool.description().to_owned(),
                input_schema: tool.input_schema(),
            })
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

type Started = (Arc<McpConnection>, Vec<ListedTool>, Vec<String>);

async fn start_one(
    spec: &McpServerSpec,
    cwd: &Path,
    config: &McpConfig,
) -> Result<Started, super::McpError> {
    let connection = McpConnection::connect(&spec.config, cwd, &config.limits).await?;
    let (tools, warnings) = connection.list_tools().await?;
    Ok((Arc::new(connection), tools, warnings))
}
