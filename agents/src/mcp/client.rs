//! One connection to one MCP server over rmcp: a child process on stdio, or streamable HTTP.

use std::collections::HashMap;
use std::path::Path;

use muster_config::{McpServerConfig, McpTransport};
use rmcp::model::CallToolRequestParams;
use rmcp::service::{
    ClientInitializeError, NotificationContext, RoleClient, RunningService, ServiceError,
    ServiceExt,
};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::tools::ToolOutput;

use super::McpLimits;
use super::process::{ServerGroup, StderrTail};

/// Why a server could not be used. Each names the server and says what to check.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("MCP server `{server}` did not start: {detail}")]
    Start { server: String, detail: String },
    #[error(
        "MCP server `{server}` did not {step} within {millis} ms (mcp.startup_timeout_ms){said}"
    )]
    Timeout {
        server: String,
        step: &'static str,
        millis: u128,
        /// The end of the server's stderr ([`StderrTail::said`]), or nothing.
        said: String,
    },
    #[error("MCP server `{server}` could not list its tools: {detail}")]
    ListTools { server: String, detail: String },
}

/// A tool as a server lists it, read from the wire form.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedTool {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
    pub annotations: Value,
}

/// A live connection; dropping it stops the server (a child process is killed with its
/// whole process group).
pub struct McpConnection {
    server: String,
    service: RunningService<RoleClient, Notices>,
    limits: McpLimits,
    /// A stdio server's stderr.
    stderr: Option<StderrTail>,
    /// A stdio server's process group, killed when the connection is dropped.
    _group: Option<ServerGroup>,
    /// A confined server's private temporary directory, removed after the server.
    _tmp: Option<tempfile::TempDir>,
}

/// A session made, with what a stdio server brings along.
struct Connected {
    service: RunningService<RoleClient, Notices>,
    stderr: Option<StderrTail>,
    group: Option<ServerGroup>,
    tmp: Option<tempfile::TempDir>,
}

/// How a stdio server is confined: the run's sandbox and the profile it runs under (see
/// [`super::server_policy`]); `None` runs it unconfined.
pub type Confinement<'a> = Option<(&'a crate::sandbox::Sandbox, crate::sandbox::SandboxProfile)>;

/// How long an error waits for a dead server's stderr to end (a failure guard: killing its
/// group closes the pipe at once).
const STDERR_GUARD: std::time::Duration = std::time::Duration::from_secs(2);

/// What muster does with a server's notifications: `tools/list_changed` counts a generation
/// the agents using the server compare at their next turn boundary (they list the tools
/// again then); the rest are ignored.
#[derive(Debug, Clone)]
pub struct Notices {
    server: String,
    generation: Arc<AtomicU64>,
}

impl Notices {
    fn new(server: &str) -> Notices {
        Notices {
            server: server.to_owned(),
            generation: Arc::default(),
        }
    }
}

impl rmcp::ClientHandler for Notices {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        tracing::info!(
            server = %self.server,
            "MCP server `{}` says its tools changed; its agents list them again at their next \
             turn boundary",
            self.server
        );
    }
}

impl std::fmt::Debug for McpConnection {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("McpConnection")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl McpConnection {
    /// Starts (or connects to) `server` with `cwd` as a child's working directory and
    /// initializes the session, within `limits.startup`.
    pub async fn connect(
        server: &McpServerConfig,
        cwd: &Path,
        limits: &McpLimits,
        confinement: Confinement<'_>,
    ) -> Result<McpConnection, McpError> {
        let connected = match &server.transport {
            McpTransport::Stdio { command, args, env } => {
                let stdio = StdioStart {
                    command,
                    args,
                    env,
                    cwd,
                    confinement,
                };
                connect_stdio(server, &stdio, limits).await?
            }
            McpTransport::Http { url, headers } => {
                connect_http(server, url, headers, limits).await?
            }
        };
        Ok(McpConnection {
            server: server.name.clone(),
            service: connected.service,
            limits: limits.clone(),
            stderr: connected.stderr,
            _group: connected.group,
            _tmp: connected.tmp,
        })
    }

    /// The server's name.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// How many times the server said its tools changed (`tools/list_changed`).
    pub fn tools_generation(&self) -> u64 {
        self.service.service().generation.load(Ordering::SeqCst)
    }

    /// `tools/list` (every page), within the startup timeout. A tool whose input schema is
    /// not a JSON object schema is left out with a warning.
    pub async fn list_tools(&self) -> Result<(Vec<ListedTool>, Vec<String>), McpError> {
        let listed = tokio::time::timeout(self.limits.startup, self.service.list_all_tools())
            .await
            .map_err(|_| McpError::Timeout {
                server: self.server.clone(),
                step: "list its tools",
                millis: self.limits.startup.as_millis(),
                said: String::new(),
            })?;
        let listed = match listed {
            Ok(listed) => listed,
            Err(error) => {
                return Err(McpError::ListTools {
                    server: self.server.clone(),
                    detail: format!("{}{}", service_error(&error), self.said().await),
                });
            }
        };
        let mut tools = Vec::new();
        let mut warnings = Vec::new();
        for tool in listed {
            match listed_tool(serde_json::to_value(&tool).unwrap_or(Value::Null)) {
                Ok(tool) => tools.push(tool),
                Err(message) => warnings.push(format!(
                    "MCP server `{}`: tool `{}` is left out: {message}",
                    self.server, tool.name
                )),
            }
        }
        Ok((tools, warnings))
    }

    /// `tools/call` within the call timeout; the result's text capped. Every failure is an
    /// error result naming the server, never a failed run.
    pub async fn call(&self, tool: &str, input: Value) -> ToolOutput {
        let arguments = match input {
            Value::Object(arguments) => arguments,
            Value::Null => serde_json::Map::new(),
            other => {
                return ToolOutput::error(format!(
                    "the input of an MCP tool is a JSON object, found {other}"
                ));
            }
        };
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        let called = tokio::time::timeout(self.limits.call, self.service.call_tool(params)).await;
        match called {
            Err(_) => ToolOutput::error(format!(
                "MCP server `{}` did not answer `{tool}` within {} ms (mcp.call_timeout_ms); \
                 the call may still have had an effect",
                self.server,
                self.limits.call.as_millis()
            )),
            Ok(Err(error)) => {
                let stopped = if self.service.is_closed() {
                    format!(
                        " (the server has stopped; its tools answer with this error from now \
                         on){}",
                        self.said().await
                    )
                } else {
                    String::new()
                };
                ToolOutput::error(format!(
                    "MCP server `{}` failed on `{tool}`: {}{stopped}",
                    self.server,
                    service_error(&error)
                ))
            }
            Ok(Ok(result)) => {
                let wire = serde_json::to_value(&result).unwrap_or(Value::Null);
                render_result(&wire, self.limits.max_output_bytes)
            }
        }
    }
}

impl McpConnection {
    /// The end of a stdio server's stderr once it has ended (the server is gone), else
    /// nothing.
    async fn said(&self) -> String {
        match &self.stderr {
            Some(stderr) => {
                stderr.until_ended(STDERR_GUARD).await;
                stderr.said()
            }
            None => String::new(),
        }
    }
}

/// What starts a stdio server.
struct StdioStart<'a> {
    command: &'a str,
    args: &'a [String],
    env: &'a std::collections::BTreeMap<String, String>,
    cwd: &'a Path,
    confinement: Confinement<'a>,
}

/// The program and arguments that start the server: its own command line, or the sandbox
/// trampoline's around it (with the private temporary directory it gets).
fn server_command_line(
    stdio: &StdioStart<'_>,
) -> std::io::Result<(Vec<std::ffi::OsString>, Option<tempfile::TempDir>)> {
    let own: Vec<std::ffi::OsString> = std::iter::once(stdio.command)
        .chain(stdio.args.iter().map(String::as_str))
        .map(Into::into)
        .collect();
    match stdio.confinement {
        Some((sandbox, profile)) if sandbox.mode != crate::sandbox::SandboxMode::Off => {
            let tmp = tempfile::Builder::new().prefix("muster-mcp-").tempdir()?;
            let policy = super::server_policy(sandbox, profile, stdio.cwd);
            let line = sandbox
                .trampoline
                .iter()
                .cloned()
                .chain(policy.to_args(tmp.path(), &own))
                .collect();
            Ok((line, Some(tmp)))
        }
        _ => Ok((own, None)),
    }
}

/// Starts a stdio server (through the sandbox trampoline when confined) as the leader of its
/// own process group, its stderr read, and makes the session. On a failure the group is
/// killed and the error quotes the server's stderr.
async fn connect_stdio(
    server: &McpServerConfig,
    stdio: &StdioStart<'_>,
    limits: &McpLimits,
) -> Result<Connected, McpError> {
    let command = stdio.command;
    let (line, tmp) = server_command_line(stdio).map_err(|error| McpError::Start {
        server: server.name.clone(),
        detail: format!("its private temporary directory: {error}"),
    })?;
    let Some((program, args)) = line.split_first() else {
        return Err(McpError::Start {
            server: server.name.clone(),
            detail: "no command".into(),
        });
    };
    let mut child = tokio::process::Command::new(program);
    // Its own group, so that everything it starts goes with it; killed when the connection is
    // dropped, even while the runtime shuts down.
    child
        .args(args)
        .envs(stdio.env)
        .current_dir(stdio.cwd)
        .process_group(0)
        .kill_on_drop(true);
    if let Some(tmp) = &tmp {
        for name in ["TMPDIR", "TMP", "TEMP"] {
            child.env(name, tmp.path());
        }
    }
    let (transport, stderr) = TokioChildProcess::builder(child)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|error| McpError::Start {
            server: server.name.clone(),
            detail: format!("cannot run `{command}`: {error}"),
        })?;
    let group = transport.id().and_then(ServerGroup::led_by);
    let stderr = StderrTail::read(&server.name, stderr);
    let notices = Notices::new(&server.name);
    let handshake = tokio::time::timeout(limits.startup, notices.serve(transport)).await;
    let failure = match handshake {
        Ok(Ok(service)) => {
            return Ok(Connected {
                service,
                stderr: Some(stderr),
                group,
                tmp,
            });
        }
        Ok(Err(error)) => Ok(init_error(&error)),
        Err(_) => Err(()),
    };
    // The server is of no use: stop it, then read what it said.
    drop(group);
    stderr.until_ended(STDERR_GUARD).await;
    let said = stderr.said();
    Err(match failure {
        Ok(detail) => McpError::Start {
            server: server.name.clone(),
            detail: format!("{detail}{said}"),
        },
        Err(()) => McpError::Timeout {
            server: server.name.clone(),
            step: "start and initialize",
            millis: limits.startup.as_millis(),
            said,
        },
    })
}

/// Connects to a streamable-HTTP server and makes the session.
async fn connect_http(
    server: &McpServerConfig,
    url: &str,
    headers: &std::collections::BTreeMap<String, String>,
    limits: &McpLimits,
) -> Result<Connected, McpError> {
    let start = |detail: String| McpError::Start {
        server: server.name.clone(),
        detail,
    };
    let config = StreamableHttpClientTransportConfig::with_uri(url)
        .custom_headers(header_map(headers).map_err(start)?);
    let transport = StreamableHttpClientTransport::from_config(config);
    let notices = Notices::new(&server.name);
    match tokio::time::timeout(limits.startup, notices.serve(transport)).await {
        Ok(Ok(service)) => Ok(Connected {
            service,
            stderr: None,
            group: None,
            tmp: None,
        }),
        Ok(Err(error)) => Err(start(format!("at {url}: {}", init_error(&error)))),
        Err(_) => Err(McpError::Timeout {
            server: server.name.clone(),
            step: "answer the MCP handshake",
            millis: limits.startup.as_millis(),
            said: String::new(),
        }),
    }
}

/// A failed MCP handshake in words, without rmcp's type names.
fn init_error(error: &ClientInitializeError) -> String {
    match error {
        ClientInitializeError::ConnectionClosed(_) => {
            "it closed the connection during the MCP handshake (it exited, or is not an MCP \
             server)"
                .into()
        }
        ClientInitializeError::TransportError { error, .. } if is_broken_pipe(&*error.error) => {
            "it exited (or closed its input) before answering the MCP handshake".into()
        }
        ClientInitializeError::TransportError { error, .. } => {
            format!(
                "the MCP handshake failed: {}",
                error_chain(error.error.as_ref())
            )
        }
        ClientInitializeError::JsonRpcError(data) => {
            format!("it refused the MCP handshake: {}", data.message)
        }
        other => format!("the MCP handshake failed: {other}"),
    }
}

/// A failed request in words, without rmcp's type names.
fn service_error(error: &ServiceError) -> String {
    match error {
        ServiceError::McpError(data) => format!("it answered with an error: {}", data.message),
        ServiceError::TransportSend(error) => format!(
            "the request could not be sent: {}",
            error_chain(error.error.as_ref())
        ),
        ServiceError::TransportClosed => "the connection to it is closed".into(),
        other => other.to_string(),
    }
}

/// Whether writing to a stdio server failed because it is gone.
fn is_broken_pipe(error: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
    error
        .downcast_ref::<std::io::Error>()
        .is_some_and(|error| error.kind() == std::io::ErrorKind::BrokenPipe)
}

/// An error and its sources, joined with `: `.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Lists the tools of one server: starts it in `cwd`, lists, stops it (for `muster check`).
pub async fn list_server_tools(
    server: &McpServerConfig,
    cwd: &Path,
    limits: &McpLimits,
    confinement: Confinement<'_>,
) -> Result<(Vec<ListedTool>, Vec<String>), McpError> {
    let connection = McpConnection::connect(server, cwd, limits, confinement).await?;
    connection.list_tools().await
}

fn header_map(
    headers: &std::collections::BTreeMap<String, String>,
) -> Result<HashMap<reqwest::header::HeaderName, reqwest::header::HeaderValue>, String> {
    headers
        .iter()
        .map(|(name, value)| {
            let header = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("`headers.{name}` is not a valid header name"))?;
            let value = reqwest::header::HeaderValue::from_str(value)
                .map_err(|_| format!("`headers.{name}` is not a valid header value"))?;
            Ok((header, value))
        })
        .collect()
}

/// A listed tool from its wire form (`name`, `description`, `inputSchema`, `annotations`).
fn listed_tool(wire: Value) -> Result<ListedTool, String> {
    let name = wire
        .get("name")
        .and_then(Value::as_str)
        .filter(|name| !name.is_empty())
        .ok_or("it has no name")?
        .to_owned();
    let input_schema = wire.get("inputSchema").cloned().unwrap_or(Value::Null);
    let is_object_schema = input_schema.as_object().is_some_and(|schema| {
        schema
            .get("type")
            .is_none_or(|kind| kind == &Value::from("object"))
    });
    if !is_object_schema {
        return Err(format!(
            "its inputSchema must be a JSON Schema of type \"object\", found {input_schema}"
        ));
    }
    Ok(ListedTool {
        name,
        description: wire
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        input_schema,
        annotations: wire.get("annotations").cloned().unwrap_or(Value::Null),
    })
}

/// A `tools/call` result as the model's tool result: text content joined, other content
/// named, structured content when there is no text; `isError` makes it an error; at most
/// `max_bytes` of text, with a note saying how much was cut.
pub(super) fn render_result(wire: &Value, max_bytes: usize) -> ToolOutput {
    let mut parts = Vec::new();
    for block in wire
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let kind = block
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("unknown");
        let text = match kind {
            "text" => block
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            "resource" => block
                .pointer("/resource/text")
                .and_then(Value::as_str)
                .map_or_else(|| "[resource content]".to_owned(), str::to_owned),
            "image" | "audio" => format!(
                "[{kind} content ({}) left out: muster passes text only]",
                block
                    .get("mimeType")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown type")
            ),
            other => format!("[{other} content left out]"),
        };
        parts.push(text);
    }
    if parts.is_empty()
        && let Some(structured) = wire.get("structuredContent")
    {
        parts.push(structured.to_string());
    }
    let text = cap(parts.join("\n"), max_bytes);
    let is_error = wire
        .get("isError")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if is_error {
        ToolOutput::error(text)
    } else {
        ToolOutput::text(text)
    }
}

fn cap(text: String, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n[output cut: {end} of {} bytes shown (mcp.max_output_bytes)]",
        &text[..end],
        text.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn results_become_text_errors_stay_errors_and_long_output_is_cut() {
        let ok = render_result(
            &json!({"content": [{"type": "text", "text": "a"}, {"type": "image", "mimeType": "image/png", "data": ""}]}),
            100,
        );
        assert!(!ok.is_error);
        assert_eq!(
            ok.content,
            "a\n[image content (image/png) left out: muster passes text only]"
        );
        let failed = render_result(
            &json!({"content": [{"type": "text", "text": "no such issue"}], "isError": true}),
            100,
        );
        assert!(failed.is_error);
        let structured = render_result(&json!({"content": [], "structuredContent": {"n": 1}}), 100);
        assert_eq!(structured.content, "{\"n\":1}");
        let long = render_result(
            &json!({"content": [{"type": "text", "text": "é".repeat(10)}]}),
            5,
        );
        assert!(
            long.content.starts_with("éé\n[output cut: 4 of 20 bytes"),
            "{}",
            long.content
        );
    }

    #[test]
    fn a_tool_without_an_object_schema_is_refused() {
        assert!(listed_tool(json!({"name": "t", "inputSchema": {"type": "object"}})).is_ok());
        let error =
            listed_tool(json!({"name": "t", "inputSchema": {"type": "string"}})).unwrap_err();
        assert!(error.contains("type \"object\""), "{error}");
        assert!(listed_tool(json!({"inputSchema": {}})).is_err());
    }
}
