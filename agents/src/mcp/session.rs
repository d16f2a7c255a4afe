//! An agent's MCP servers: started with the agent (or its parent's, for a subagent), stopped
//! when the last agent using them is dropped.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use futures_util::future::join_all;

use crate::model::ToolDefinition;
use crate::sandbox::{Sandbox, SandboxProfile};
use crate::tools::Tool;

use super::client::ListedTool;
use super::{McpConfig, McpConnection, McpServerSpec, McpTool, McpToolRecord, model_names};

/// Where and for whom an agent's servers run.
#[derive(Debug, Clone, Copy)]
pub struct McpPlace<'a> {
    /// The agent's workspace: a stdio server's working directory and writable tree.
    pub cwd: &'a Path,
    /// The agent's id.
    pub agent: &'a str,
    /// A subagent's parent: its connections are used when it still has them.
    pub parent: Option<&'a str>,
    /// The run's sandbox and the agent's profile; `None` runs servers unconfined.
    pub sandbox: Option<(&'a Sandbox, SandboxProfile)>,
}

/// One server as started for an owner: its connection and the tools it listed.
#[derive(Debug)]
struct StartedServer {
    name: String,
    connection: Arc<McpConnection>,
    tools: Vec<ListedTool>,
    /// The server's `tools/list_changed` generation `tools` reflects.
    listed_at: u64,
}

/// The servers one owner (a main agent, a teammate) started; its subagents use them.
#[derive(Debug, Default)]
pub struct StartedServers {
    servers: Vec<StartedServer>,
}

/// What a run's agents share: the servers each owner started (held weakly: they stop with the
/// last agent using them) and the servers that failed to start, which are not tried again.
#[derive(Debug, Default)]
pub struct McpHub {
    owners: Mutex<BTreeMap<String, Weak<StartedServers>>>,
    failed: Mutex<BTreeMap<String, String>>,
}

/// Runtime state, not configuration: two configurations are equal whatever their agents did.
impl PartialEq for McpHub {
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

impl Eq for McpHub {}

impl McpHub {
    /// The servers of `config` for the agent at `place`: its parent's when the parent still
    /// has them, else started now (only `wanted` ones, when given) in parallel. A server that
    /// failed earlier in the run is a warning and is not started again.
    async fn servers_for(
        &self,
        config: &McpConfig,
        place: &McpPlace<'_>,
        wanted: Option<&std::collections::BTreeSet<&str>>,
    ) -> (Arc<StartedServers>, Vec<String>) {
        if let Some(parent) = place.parent
            && let Some(live) = self.live(parent)
        {
            self.register(place.agent, &live);
            return (live, Vec::new());
        }
        let mut warnings = Vec::new();
        let mut to_start: Vec<&McpServerSpec> = Vec::new();
        for spec in &config.servers {
            if wanted.is_some_and(|wanted| !wanted.contains(spec.config.name.as_str())) {
                continue;
            }
            match self.failure(&spec.config.name) {
                Some(error) => warnings.push(format!(
                    "{error} (earlier in this run; it is not started again)"
                )),
                None => to_start.push(spec),
            }
        }
        let started = join_all(to_start.iter().map(|spec| start_one(spec, place, config))).await;
        let mut servers = Vec::new();
        for (spec, outcome) in to_start.iter().zip(started) {
            match outcome {
                Ok((connection, tools, listed_at, mut found)) => {
                    warnings.append(&mut found);
                    servers.push(StartedServer {
                        name: spec.config.name.clone(),
                        connection,
                        tools,
                        listed_at,
                    });
                }
                Err(error) => {
                    let error = error.to_string();
                    self.failed
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(spec.config.name.clone(), error.clone());
                    warnings.push(error);
                }
            }
        }
        let started = Arc::new(StartedServers { servers });
        self.register(place.agent, &started);
        (started, warnings)
    }

    fn live(&self, owner: &str) -> Option<Arc<StartedServers>> {
        self.owners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(owner)
            .and_then(Weak::upgrade)
    }

    fn register(&self, agent: &str, servers: &Arc<StartedServers>) {
        let mut owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
        owners.retain(|_, servers| servers.strong_count() > 0);
        owners.insert(agent.to_owned(), Arc::downgrade(servers));
    }

    fn failure(&self, server: &str) -> Option<String> {
        self.failed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(server)
            .cloned()
    }
}

/// The MCP tools of one agent and the connections behind them.
#[derive(Debug, Default)]
pub struct McpSession {
    tools: Vec<Arc<McpTool>>,
    /// Keeps the servers running while the agent lives (shared with its subagents).
    servers: Option<Arc<StartedServers>>,
    /// Each server's `tools/list_changed` generation the tools reflect.
    seen: BTreeMap<String, u64>,
}

impl McpSession {
    /// The servers of `config` for the agent at `place` (its parent's, for a subagent whose
    /// parent has them) and their tools; keeps those `offered` allows (`offered(server,
    /// tool)`), named so they fit the model's rules and never take one of `taken`. A server
    /// that fails is a warning, and the agent goes on without it.
    pub async fn start(
        config: &McpConfig,
        place: &McpPlace<'_>,
        offered: impl Fn(&str, &str) -> bool,
        taken: &[&str],
    ) -> (McpSession, Vec<String>) {
        let (servers, warnings) = config.hub.servers_for(config, place, None).await;
        let lists: Vec<(String, Vec<ListedTool>, u64)> = servers
            .servers
            .iter()
            .map(|server| (server.name.clone(), server.tools.clone(), server.listed_at))
            .collect();
        let session = McpSession::assemble(config, servers, lists, &offered, taken);
        (session, warnings.into_iter().map(goes_on_without).collect())
    }

    /// The session with the tools `lists` names (server, its tools, the generation they
    /// reflect), kept as [`McpSession::start`] says.
    fn assemble(
        config: &McpConfig,
        servers: Arc<StartedServers>,
        lists: Vec<(String, Vec<ListedTool>, u64)>,
        offered: &dyn Fn(&str, &str) -> bool,
        taken: &[&str],
    ) -> McpSession {
        let connection_of = |name: &str| {
            servers
                .servers
                .iter()
                .find(|server| server.name == name)
                .map(|server| server.connection.clone())
        };
        let listed: Vec<(&str, &ListedTool)> = lists
            .iter()
            .flat_map(|(server, tools, _)| tools.iter().map(move |tool| (server.as_str(), tool)))
            .filter(|(server, tool)| offered(server, &tool.name))
            .collect();
        let full: Vec<String> = listed
            .iter()
            .map(|(server, tool)| muster_config::mcp::tool_name(server, &tool.name))
            .collect();
        let names = model_names(&full, taken);
        let tools = listed
            .into_iter()
            .zip(names)
            .map(|((server, tool), model_name)| {
                let record = McpToolRecord {
                    server: server.to_owned(),
                    tool: tool.name.clone(),
                    model_name,
                    description: tool.description.clone(),
                    input_schema: tool.input_schema.clone(),
                    annotations: tool.annotations.clone(),
                };
                let user_read_only = config.user_read_only(&record.server, &record.tool);
                Arc::new(McpTool::new(record, user_read_only, connection_of(server)))
            })
            .collect();
        let seen = lists
            .iter()
            .map(|(server, _, generation)| (server.clone(), *generation))
            .collect();
        McpSession {
            tools,
            servers: Some(servers),
            seen,
        }
    }

    /// Whether a server of this session said its tools changed since they were listed.
    pub fn tools_changed(&self) -> bool {
        self.servers
            .iter()
            .flat_map(|servers| &servers.servers)
            .any(|server| {
                server.connection.tools_generation()
                    > self.seen.get(&server.name).copied().unwrap_or(0)
            })
    }

    /// A session on the same connections with every changed server's tools listed again (the
    /// others as they were), kept as [`McpSession::start`] says. A server that cannot list
    /// them now keeps none, with a warning.
    pub async fn relisted(
        &self,
        config: &McpConfig,
        offered: impl Fn(&str, &str) -> bool,
        taken: &[&str],
    ) -> (McpSession, Vec<String>) {
        let Some(servers) = self.servers.clone() else {
            return (McpSession::default(), Vec::new());
        };
        let mut warnings = Vec::new();
        let mut lists = Vec::new();
        for server in &servers.servers {
            let seen = self.seen.get(&server.name).copied().unwrap_or(0);
            let now = server.connection.tools_generation();
            if now <= seen {
                let kept: Vec<ListedTool> = self
                    .tools
                    .iter()
                    .filter(|tool| tool.record().server == server.name)
                    .map(|tool| ListedTool {
                        name: tool.record().tool.clone(),
                        description: tool.record().description.clone(),
                        input_schema: tool.record().input_schema.clone(),
                        annotations: tool.record().annotations.clone(),
                    })
                    .collect();
                lists.push((server.name.clone(), kept, seen));
                continue;
            }
            match server.connection.list_tools().await {
                Ok((tools, mut found)) => {
                    warnings.append(&mut found);
                    lists.push((server.name.clone(), tools, now));
                }
                Err(error) => {
                    warnings.push(format!("{error}; its tools are left out"));
                    lists.push((server.name.clone(), Vec::new(), now));
                }
            }
        }
        let session = McpSession::assemble(config, servers, lists, &offered, taken);
        (session, warnings)
    }

    /// A resumed agent's session: exactly the `stored` tools, on the servers of `config`
    /// started again (or its parent's); a tool whose server did not start, is no longer
    /// enabled or no longer lists it answers every call with an error.
    pub async fn resume(
        config: &McpConfig,
        place: &McpPlace<'_>,
        stored: &[McpToolRecord],
    ) -> (McpSession, Vec<String>) {
        let wanted: std::collections::BTreeSet<&str> =
            stored.iter().map(|tool| tool.server.as_str()).collect();
        let (servers, warnings) = config.hub.servers_for(config, place, Some(&wanted)).await;
        let tools = stored
            .iter()
            .map(|record| {
                let connection = servers
                    .servers
                    .iter()
                    .find(|server| {
                        server.name == record.server
                            && server.tools.iter().any(|t| t.name == record.tool)
                    })
                    .map(|server| server.connection.clone());
                let user_read_only = config.user_read_only(&record.server, &record.tool);
                Arc::new(McpTool::new(record.clone(), user_read_only, connection))
            })
            .collect();
        let warnings = warnings
            .into_iter()
            .map(|warning| {
                format!("{warning}; its tools answer with an error in the resumed agent")
            })
            .collect();
        let seen = servers
            .servers
            .iter()
            .map(|server| (server.name.clone(), server.listed_at))
            .collect();
        (
            McpSession {
                tools,
                servers: Some(servers),
                seen,
            },
            warnings,
        )
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

fn goes_on_without(warning: String) -> String {
    format!("{warning}; the agent goes on without it")
}

type Started = (Arc<McpConnection>, Vec<ListedTool>, u64, Vec<String>);

async fn start_one(
    spec: &McpServerSpec,
    place: &McpPlace<'_>,
    config: &McpConfig,
) -> Result<Started, super::McpError> {
    let connection =
        McpConnection::connect(&spec.config, place.cwd, &config.limits, place.sandbox).await?;
    let listed_at = connection.tools_generation();
    let (tools, warnings) = connection.list_tools().await?;
    Ok((Arc::new(connection), tools, listed_at, warnings))
}
