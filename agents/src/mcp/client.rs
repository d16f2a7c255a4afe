//! One connection to one MCP server over rmcp: a child process on stdio, or streamable HTTP.

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;

use muster_config::{McpServerConfig, McpTransport};
use rmcp::model::CallToolRequestParams;
use rmcp::service::{NotificationContext, RoleClient, RunningService, ServiceExt};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::Value;

use crate::tools::ToolOutput;

use super::McpLimits;

/// Why a server could not be used. Each names the server and says what to check.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("MCP server `{server}` did not start: {detail}")]
    Start { server: String, detail: String },
    #[error("MCP server `{server}` did not {step} within {millis} ms (mcp.startup_timeout_ms)")]
    Timeout {
        server: String,
        step: &'static str,
        millis: u128,
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

/// A live connection; dropping it stops the server (a child process is killed).
pub struct McpConnection {
    server: String,
    service: RunningService<RoleClient, Notices>,
    limits: McpLimits,
}

/// What muster does with a server's notifications: `tools/list_changed` is a warning, since
/// an agent's tool list is fixed when it starts (DESIGN); the rest are ignored.
#[derive(Debug, Clone)]
pub struct Notices {
    server: String,
}

impl rmcp::ClientHandler for Notices {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        tracing::warn!(
            server = %self.server,
            "MCP server `{}` says its tools changed; an agent's MCP tools are fixed when it \
             starts, so running agents keep the list they have (new agents list them again)",
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
    ) -> Result<McpConnection, McpError> {
        let start = |detail: String| McpError::Start {
            server: server.name.clone(),
            detail,
        };
        let notices = Notices {
            server: server.name.clone(),
        };
        let connecting = async {
            match &server.transport {
                McpTransport::Stdio { command, args, env } => {
                    let mut child = tokio::process::Command::new(command);
                    // Killed when the connection is dropped, even while the runtime shuts down.
                    child
                        .args(args)
                        .envs(env)
                        .current_dir(cwd)
                        .kill_on_drop(true);
                    let (transport, _) = TokioChildProcess::builder(child)
                        .stderr(Stdio::null())
                        .spawn()
                        .map_err(|error| start(format!("cannot run `{command}`: {error}")))?;
                    notices
                        .clone()
                        .serve(transport)
                        .await
                        .map_err(|error| start(format!("initialize failed: {error}")))
                }
                McpTransport::Http { url, headers } => {
                    let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                        .custom_headers(header_map(headers).map_err(start)?);
                    let transport = StreamableHttpClientTransport::from_config(config);
                    notices
                        .clone()
                        .serve(transport)
                        .await
                        .map_err(|error| start(format!("initialize at {url} failed: {error}")))
                }
            }
        };
        let service = tokio::time::timeout(limits.startup, connecting)
            .await
            .map_err(|_| McpError::Timeout {
                server: server.name.clone(),
                step: "start and initialize",
                millis: limits.startup.as_millis(),
            })??;
        Ok(McpConnection {
            server: server.name.clone(),
            service,
            limits: limits.clone(),
        })
    }

    /// The server's name.
    pub fn server(&self) -> &str {
        &self.server
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
            })?
            .map_err(|error| McpError::ListTools {
                server: self.server.clone(),
                detail: error.to_string(),
            })?;
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
            Ok(Err(error)) => ToolOutput::error(format!(
                "MCP server `{}` failed on `{tool}`: {error}{}",
                self.server,
                if self.service.is_closed() {
                    " (the server has stopped; its tools answer with this error from now on)"
                } else {
                    ""
                }
            )),
            Ok(Ok(result)) => {
                let wire = serde_json::to_value(&result).unwrap_or(Value::Null);
                render_result(&wire, self.limits.max_output_bytes)
            }
        }
    }
}

/// Lists the tools of one server: starts it in `cwd`, lists, stops it (for `muster check`).
pub async fn list_server_tools(
    server: &McpServerConfig,
    cwd: &Path,
    limits: &McpLimits,
) -> Result<(Vec<ListedTool>, Vec<String>), McpError> {
    let connection = McpConnection::connect(server, cwd, limits).await?;
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
