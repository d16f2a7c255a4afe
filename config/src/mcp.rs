//! MCP servers: the project's `.mcp.json` in Claude Code's format, and which of its servers may
//! start.
//!
//! A repository's `.mcp.json` is not trusted by itself: opening a cloned repository must not
//! run its commands. A server starts only when the user's settings or the project-local
//! settings enable it (`[mcp] enabled_project_servers = [...]` or
//! `enable_all_project_servers = true`); the committed `.muster/settings.toml` cannot (see
//! [`crate::settings::McpSettings`]). Every problem in `.mcp.json` is a warning for that
//! server, never a failed command.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::diagnostic::{ConfigError, Diagnostic, Loaded};
use crate::settings::McpSettings;

/// The file name Claude Code reads at the project root.
pub const MCP_FILE: &str = ".mcp.json";

/// How muster talks to a server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum McpTransport {
    /// A child process speaking JSON-RPC on stdin and stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
    },
    /// Streamable HTTP at `url`, with extra request headers.
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

/// One server of `.mcp.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct McpServerConfig {
    pub name: String,
    pub transport: McpTransport,
}

/// A server and whether it may start, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct McpServerStatus {
    pub server: McpServerConfig,
    pub enabled: bool,
    /// Why it is (or is not) enabled, naming the setting and its origin.
    pub why: String,
    /// Listed in `[mcp] trusted_read_only`: its `readOnlyHint` tools are allowed in plan mode.
    pub trusted_read_only: bool,
    /// The settings enable it, but the project is not trusted, so it does not start.
    pub untrusted: bool,
}

/// The servers of a project: every one `.mcp.json` declares, with its status.
#[derive(Debug, Clone, Default, Serialize)]
pub struct McpServers {
    /// The file read, when there is one.
    pub file: Option<PathBuf>,
    pub servers: Vec<McpServerStatus>,
}

impl McpServers {
    /// Reads `<root>/.mcp.json` (absent: no servers) and decides each server's status by
    /// `settings`. A malformed entry is a warning naming the server; an unreadable or invalid
    /// file is one warning and no servers.
    pub fn load(root: &Path, settings: &McpSettings) -> Loaded<McpServers> {
        let path = root.join(MCP_FILE);
        let mut warnings = Vec::new();
        let text = match crate::settings::read_optional(&path) {
            Ok(Some(text)) => text,
            Ok(None) => {
                return Loaded {
                    value: McpServers::default(),
                    warnings,
                };
            }
            Err(error) => {
                warnings.push(file_warning(&path, error_text(&error)));
                return Loaded {
                    value: McpServers::default(),
                    warnings,
                };
            }
        };
        let configs = parse_mcp_file(&path, &text, &mut warnings);
        let mut servers = McpServers {
            file: Some(path),
            servers: configs
                .into_iter()
                .map(|server| status(server, settings))
                .collect(),
        };
        for name in unknown_names(&servers, settings) {
            warnings.push(
                Diagnostic::new(format!(
                    "`[mcp] enabled_project_servers` names `{name}`, which {} does not declare",
                    MCP_FILE
                ))
                .for_key("mcp.enabled_project_servers"),
            );
        }
        servers
            .servers
            .sort_by(|a, b| a.server.name.cmp(&b.server.name));
        Loaded {
            value: servers,
            warnings,
        }
    }

    /// The servers that may start.
    pub fn enabled(&self) -> impl Iterator<Item = &McpServerStatus> {
        self.servers.iter().filter(|status| status.enabled)
    }

    /// The server called `name`, enabled or not.
    pub fn get(&self, name: &str) -> Option<&McpServerStatus> {
        self.servers
            .iter()
            .find(|status| status.server.name == name)
    }
}

fn error_text(error: &ConfigError) -> String {
    error.to_string()
}

fn file_warning(path: &Path, message: String) -> Diagnostic {
    Diagnostic::new(format!("{message}; its MCP servers are not started"))
        .in_source(path.display().to_string())
}

fn unknown_names<'s>(servers: &McpServers, settings: &'s McpSettings) -> Vec<&'s str> {
    settings
        .enabled_project_servers
        .as_ref()
        .map(|listed| {
            listed
                .value
                .iter()
                .filter(|name| servers.get(name).is_none())
                .map(String::as_str)
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a server may start, and why.
fn status(server: McpServerConfig, settings: &McpSettings) -> McpServerStatus {
    let trusted_read_only = settings
        .trusted_read_only
        .as_ref()
        .is_some_and(|listed| listed.value.contains(&server.name));
    let listed = settings
        .enabled_project_servers
        .as_ref()
        .filter(|listed| listed.value.contains(&server.name));
    let untrusted = !settings.project_trusted
        && (listed.is_some() || settings.enable_all_project_servers.value);
    let (enabled, why) = if untrusted {
        (
            false,
            format!(
                "the project is not trusted: its {MCP_FILE} servers start only after `{}`",
                crate::trust::TRUST_COMMAND
            ),
        )
    } else if let Some(listed) = listed {
        (
            true,
            format!(
                "listed in `[mcp] enabled_project_servers` ({})",
                listed.origin
            ),
        )
    } else if settings.enable_all_project_servers.value {
        (
            true,
            format!(
                "`[mcp] enable_all_project_servers = true` ({})",
                settings.enable_all_project_servers.origin
            ),
        )
    } else {
        (
            false,
            format!(
                "a project's {MCP_FILE} is not trusted by itself; add \"{}\" to \
                 `[mcp] enabled_project_servers` in ~/.muster/settings.toml or \
                 .muster/settings.local.toml",
                server.name
            ),
        )
    };
    McpServerStatus {
        server,
        enabled,
        why,
        trusted_read_only,
        untrusted,
    }
}

/// The servers of a `.mcp.json` text; each bad entry is a warning and is left out.
pub fn parse_mcp_file(
    path: &Path,
    text: &str,
    warnings: &mut Vec<Diagnostic>,
) -> Vec<McpServerConfig> {
    let source = path.display().to_string();
    let document: serde_json::Value = match serde_json::from_str(text) {
        Ok(document) => document,
        Err(error) => {
            warnings.push(file_warning(
                path,
                format!(
                    "not valid JSON at line {} column {}: {error}",
                    error.line(),
                    error.column()
                ),
            ));
            return Vec::new();
        }
    };
    let Some(servers) = document.get("mcpServers") else {
        warnings.push(file_warning(
            path,
            "expected an object with `mcpServers`, found none".to_owned(),
        ));
        return Vec::new();
    };
    let Some(servers) = servers.as_object() else {
        warnings.push(file_warning(
            path,
            "expected `mcpServers` to be an object of servers by name".to_owned(),
        ));
        return Vec::new();
    };
    let mut configs = Vec::new();
    for (name, entry) in servers {
        match parse_server(name, entry) {
            Ok(server) => configs.push(server),
            Err(message) => warnings.push(
                Diagnostic::new(format!("MCP server `{name}`: {message}; it is not started"))
                    .in_source(source.clone())
                    .for_key(format!("mcpServers.{name}")),
            ),
        }
    }
    configs
}

/// The characters a server name may have: they become part of tool names
/// (`mcp__<server>__<tool>`), and `__` would make those ambiguous.
fn check_server_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
        && !name.contains("__");
    if valid {
        Ok(())
    } else {
        Err("a server name is letters, digits, `-` and `_` (no `__`)".to_owned())
    }
}

fn parse_server(name: &str, entry: &serde_json::Value) -> Result<McpServerConfig, String> {
    check_server_name(name)?;
    let Some(fields) = entry.as_object() else {
        return Err("expected an object".to_owned());
    };
    let kind = match fields.get("type") {
        None => None,
        Some(serde_json::Value::String(kind)) => Some(kind.as_str()),
        Some(_) => return Err("`type` must be a string".to_owned()),
    };
    let transport = match kind {
        None | Some("stdio") if fields.contains_key("command") => McpTransport::Stdio {
            command: text_field(fields, "command")?.ok_or("`command` is empty")?,
            args: string_list(fields, "args")?,
            env: string_map(fields, "env")?,
        },
        None if fields.contains_key("url") => {
            return Err(
                "a server with `url` needs `\"type\": \"http\"` (muster speaks streamable HTTP; \
                 the SSE transport is not supported)"
                    .to_owned(),
            );
        }
        None | Some("stdio") => return Err("a stdio server needs `command`".to_owned()),
        Some("http") => McpTransport::Http {
            url: text_field(fields, "url")?
                .filter(|url| url.starts_with("http://") || url.starts_with("https://"))
                .ok_or("`url` must be an http:// or https:// URL")?,
            headers: string_map(fields, "headers")?,
        },
        Some("sse") => {
            return Err(
                "the SSE transport is not supported; use a server's streamable HTTP endpoint \
                 (`\"type\": \"http\"`) or stdio"
                    .to_owned(),
            );
        }
        Some(other) => {
            return Err(format!(
                "unknown `type` {other:?}; expected \"stdio\" or \"http\""
            ));
        }
    };
    Ok(McpServerConfig {
        name: name.to_owned(),
        transport,
    })
}

type Fields = serde_json::Map<String, serde_json::Value>;

fn text_field(fields: &Fields, key: &str) -> Result<Option<String>, String> {
    match fields.get(key) {
        None => Ok(None),
        Some(serde_json::Value::String(text)) if text.trim().is_empty() => Ok(None),
        Some(serde_json::Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(format!("`{key}` must be a string")),
    }
}

fn string_list(fields: &Fields, key: &str) -> Result<Vec<String>, String> {
    match fields.get(key) {
        None => Ok(Vec::new()),
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| format!("`{key}` must be an array of strings"))
            })
            .collect(),
        Some(_) => Err(format!("`{key}` must be an array of strings")),
    }
}

fn string_map(fields: &Fields, key: &str) -> Result<BTreeMap<String, String>, String> {
    match fields.get(key) {
        None => Ok(BTreeMap::new()),
        Some(serde_json::Value::Object(items)) => items
            .iter()
            .map(|(name, value)| {
                value
                    .as_str()
                    .map(|value| (name.clone(), value.to_owned()))
                    .ok_or_else(|| format!("`{key}.{name}` must be a string"))
            })
            .collect(),
        Some(_) => Err(format!("`{key}` must be an object of strings")),
    }
}

/// An MCP name as rules and definition `tools` write it: `mcp__<server>` or
/// `mcp__<server>__*` (every tool of the server), or `mcp__<server>__<tool>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct McpPattern {
    pub server: String,
    /// `None`: every tool of the server.
    pub tool: Option<String>,
}

/// The prefix of every MCP tool name.
pub const MCP_PREFIX: &str = "mcp__";

impl McpPattern {
    /// Reads `mcp__srv`, `mcp__srv__*` or `mcp__srv__tool`; `None` for any other text.
    pub fn parse(text: &str) -> Option<McpPattern> {
        let rest = text.trim().strip_prefix(MCP_PREFIX)?;
        let (server, tool) = match rest.split_once("__") {
            None => (rest, None),
            Some((server, "*")) => (server, None),
            Some((server, tool)) => (server, Some(tool.to_owned())),
        };
        if server.is_empty() || tool.as_deref().is_some_and(str::is_empty) {
            return None;
        }
        Some(McpPattern {
            server: server.to_owned(),
            tool,
        })
    }

    /// Whether the tool `tool` of server `server` matches.
    pub fn matches(&self, server: &str, tool: &str) -> bool {
        self.server == server && self.tool.as_deref().is_none_or(|wanted| wanted == tool)
    }

    /// Whether the full name `mcp__<server>__<tool>` matches.
    pub fn matches_name(&self, name: &str) -> bool {
        split_tool_name(name).is_some_and(|(server, tool)| self.matches(server, tool))
    }
}

/// `mcp__<server>__<tool>` as `(server, tool)`: a server name has no `__`, so the first
/// `__` after the server ends it.
pub fn split_tool_name(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix(MCP_PREFIX)?;
    let (server, tool) = rest.split_once("__")?;
    (!server.is_empty() && !tool.is_empty()).then_some((server, tool))
}

/// The full name of a server's tool.
pub fn tool_name(server: &str, tool: &str) -> String {
    format!("{MCP_PREFIX}{server}__{tool}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_read_as_claude_code_writes_them() {
        type Expected<'a> = Option<(&'a str, Option<&'a str>)>;
        let cases: &[(&str, Expected)] = &[
            ("mcp__context7", Some(("context7", None))),
            ("mcp__context7__*", Some(("context7", None))),
            (
                "mcp__context7__resolve-library-id",
                Some(("context7", Some("resolve-library-id"))),
            ),
            ("mcp__srv__a__b", Some(("srv", Some("a__b")))),
            ("mcp__", None),
            ("mcp____tool", None),
            ("mcp__srv__", None),
            ("Read", None),
        ];
        for (text, expected) in cases {
            let parsed = McpPattern::parse(text);
            let expected = expected.map(|(server, tool)| McpPattern {
                server: server.to_owned(),
                tool: tool.map(str::to_owned),
            });
            assert_eq!(parsed, expected, "{text}");
        }
        let all = McpPattern::parse("mcp__srv").unwrap();
        assert!(all.matches_name("mcp__srv__echo"));
        assert!(!all.matches_name("mcp__srv2__echo"));
        let one = McpPattern::parse("mcp__srv__echo").unwrap();
        assert!(one.matches("srv", "echo"));
        assert!(!one.matches("srv", "echo2"));
    }

    fn settings(enabled: &[&str], all: bool) -> McpSettings {
        let origin = crate::origin::Origin {
            layer: crate::origin::Layer::User,
            source: "~/.muster/settings.toml".to_owned(),
            position: None,
        };
        McpSettings {
            enabled_project_servers: Some(crate::origin::Sourced::new(
                enabled.iter().map(|s| (*s).to_owned()).collect(),
                origin.clone(),
            )),
            enable_all_project_servers: crate::origin::Sourced::new(all, origin.clone()),
            trusted_read_only: None,
            startup_timeout_ms: crate::origin::Sourced::new(1, origin.clone()),
            call_timeout_ms: crate::origin::Sourced::new(1, origin.clone()),
            project_trusted: true,
            max_output_bytes: crate::origin::Sourced::new(1, origin),
        }
    }

    #[test]
    fn each_bad_entry_is_a_warning_for_that_server_only() {
        let text = r#"{"mcpServers": {
            "good": {"command": "python3", "args": ["server.py"], "env": {"A": "1"}},
            "web": {"type": "http", "url": "http://127.0.0.1:1/mcp", "headers": {"X": "y"}},
            "old": {"type": "sse", "url": "http://127.0.0.1:1/sse"},
            "bare": {"url": "http://127.0.0.1:1/mcp"},
            "nothing": {},
            "bad__name": {"command": "x"},
            "argsbad": {"command": "x", "args": "not a list"}
        }}"#;
        let mut warnings = Vec::new();
        let servers = parse_mcp_file(Path::new(".mcp.json"), text, &mut warnings);
        let names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["good", "web"]);
        let messages: Vec<String> = warnings.iter().map(ToString::to_string).collect();
        assert_eq!(messages.len(), 5, "{messages:#?}");
        assert!(
            messages
                .iter()
                .any(|m| m.contains("`old`") && m.contains("SSE"))
        );
        assert!(
            messages
                .iter()
                .any(|m| m.contains("`bare`") && m.contains("\"http\""))
        );
        assert!(
            messages
                .iter()
                .any(|m| m.contains("`argsbad`") && m.contains("`args`"))
        );
    }

    #[test]
    fn only_listed_servers_are_enabled_unless_all_are() {
        let server = |name: &str| McpServerConfig {
            name: name.to_owned(),
            transport: McpTransport::Http {
                url: "http://127.0.0.1:1/mcp".to_owned(),
                headers: BTreeMap::new(),
            },
        };
        let listed = status(server("a"), &settings(&["a"], false));
        assert!(listed.enabled);
        assert!(
            listed.why.contains("enabled_project_servers"),
            "{}",
            listed.why
        );
        let other = status(server("b"), &settings(&["a"], false));
        assert!(!other.enabled);
        assert!(other.why.contains("not trusted by itself"), "{}", other.why);
        assert!(status(server("b"), &settings(&[], true)).enabled);
    }
}
