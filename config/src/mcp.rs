//! MCP servers as Claude Code configures them, and which of them may start.
//!
//! Three sources, read as Claude Code reads them, a later one replacing an earlier server of
//! the same name: `~/.claude.json`'s top-level `mcpServers` (user scope), the project's
//! `.mcp.json` (project scope) and `~/.claude.json`'s entry for this project (local scope).
//! `${VAR}` and `${VAR:-default}` in `command`, `args`, `env`, `url` and `headers` are expanded
//! from the environment ([`expand`]); an unset variable without a default keeps that server
//! from starting, with a warning naming the server and the variable.
//!
//! A project's servers (project and local scope) are not trusted by themselves: opening a
//! cloned repository must not run its commands. They start only in a project the user trusted
//! with `muster trust`, which pins each one by its unexpanded template and the variables it
//! reads ([`McpServerConfig::pin`]); a server whose template changed since, or that appeared
//! since, does not start. Claude Code's own approvals (`enabledMcpjsonServers`) are shown, never
//! taken as trust: they name servers, not what the servers run. Every problem is a warning for
//! that server, never a failed command.

mod expand;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::diagnostic::{ConfigError, Diagnostic, Loaded};
use crate::settings::McpSettings;

pub use expand::{Unset, expand, variables_in};

/// The file name Claude Code reads at the project root.
pub const MCP_FILE: &str = ".mcp.json";

/// Claude Code's user file, in the home directory: user- and local-scope servers, and its
/// per-project approvals.
pub const CLAUDE_JSON: &str = ".claude.json";

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

impl McpTransport {
    /// Every `${VAR}` the transport reads, sorted, each once.
    pub fn variables(&self) -> Vec<String> {
        let mut found: Vec<String> = self.texts().flat_map(variables_in).collect();
        found.sort();
        found.dedup();
        found
    }

    /// Every text `${VAR}` may appear in: command, args and env values, or url and header
    /// values.
    fn texts(&self) -> Box<dyn Iterator<Item = &str> + '_> {
        match self {
            McpTransport::Stdio { command, args, env } => Box::new(
                std::iter::once(command.as_str())
                    .chain(args.iter().map(String::as_str))
                    .chain(env.values().map(String::as_str)),
            ),
            McpTransport::Http { url, headers } => {
                Box::new(std::iter::once(url.as_str()).chain(headers.values().map(String::as_str)))
            }
        }
    }

    /// The transport with every reference expanded from `env`.
    pub fn expanded(&self, env: &BTreeMap<String, String>) -> Result<McpTransport, Unset> {
        let one = |text: &str| expand(text, env).map(|expanded| expanded.text);
        let map = |items: &BTreeMap<String, String>| {
            items
                .iter()
                .map(|(name, value)| Ok((name.clone(), one(value)?)))
                .collect::<Result<BTreeMap<_, _>, Unset>>()
        };
        Ok(match self {
            McpTransport::Stdio { command, args, env } => McpTransport::Stdio {
                command: one(command)?,
                args: args.iter().map(|arg| one(arg)).collect::<Result<_, _>>()?,
                env: map(env)?,
            },
            McpTransport::Http { url, headers } => McpTransport::Http {
                url: one(url)?,
                headers: map(headers)?,
            },
        })
    }
}

/// Where a server is declared, in Claude Code's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum McpScope {
    /// `~/.claude.json`'s top-level `mcpServers`: the user's own, in every project.
    User,
    /// The project's `.mcp.json`: the repository's.
    Project,
    /// `~/.claude.json`'s entry for this project (`claude mcp add --scope local`).
    Local,
    /// Given for one session by what drives it (an editor's `session/new`, a program's
    /// `--mcp-config`): the user's own choice, like the user scope.
    Session,
}

impl McpScope {
    /// Whether the server belongs to the project, so starts only in a trusted one.
    pub fn needs_trust(self) -> bool {
        !matches!(self, McpScope::User | McpScope::Session)
    }

    /// Where it is declared, for messages.
    pub fn source(self) -> &'static str {
        match self {
            McpScope::User => "~/.claude.json (user scope)",
            McpScope::Project => MCP_FILE,
            McpScope::Local => "~/.claude.json (this project's entry)",
            McpScope::Session => "this session (the editor's or the program's)",
        }
    }
}

/// One server as declared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct McpServerConfig {
    pub name: String,
    pub scope: McpScope,
    /// As written, `${VAR}` unexpanded: what trust pins and `config show` prints.
    pub template: McpTransport,
    /// As started: the template with its variables expanded (the template itself when a
    /// variable is unset; such a server is never enabled). Not serialized: it may hold secrets.
    #[serde(skip)]
    pub transport: McpTransport,
}

impl McpServerConfig {
    /// A server whose template needs no expansion (tests, and servers muster makes itself).
    pub fn literal(name: &str, scope: McpScope, transport: McpTransport) -> McpServerConfig {
        McpServerConfig {
            name: name.to_owned(),
            scope,
            template: transport.clone(),
            transport,
        }
    }

    /// The server's trust pin: a SHA-256 over its scope and unexpanded template — command,
    /// args, env names, url, header names and values — and the variables it reads. Env
    /// values are left out (a literal secret there may change without changing what runs);
    /// the variables they read are in.
    pub fn pin(&self) -> String {
        let mut text = String::from("muster-mcp-pin-v1\n");
        let mut add = |key: &str, value: &str| {
            text.push_str(&format!("{key}\0{}\0{value}\n", value.len()));
        };
        add("scope", &format!("{:?}", self.scope));
        match &self.template {
            McpTransport::Stdio { command, args, env } => {
                add("type", "stdio");
                add("command", command);
                for arg in args {
                    add("arg", arg);
                }
                for name in env.keys() {
                    add("env", name);
                }
            }
            McpTransport::Http { url, headers } => {
                add("type", "http");
                add("url", url);
                for (name, value) in headers {
                    add("header", &format!("{name}: {value}"));
                }
            }
        }
        for variable in self.template.variables() {
            add("variable", &variable);
        }
        crate::trust::sha256_hex(text.as_bytes())
    }
}

/// A server and whether it may start, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct McpServerStatus {
    pub server: McpServerConfig,
    pub enabled: bool,
    /// Why it is (or is not) enabled.
    pub why: String,
    /// A project's server that trust keeps from starting (the project is not trusted, or
    /// the server changed or appeared since it was).
    pub untrusted: bool,
    /// Where Claude Code approved it by name (`enabledMcpjsonServers`), when it did: shown,
    /// never taken as trust.
    pub claude_approved: Option<String>,
}

/// The user's side of loading servers: the environment `${VAR}` reads and the home directory
/// `~/.claude.json` is in (`None`: no user files).
#[derive(Debug, Clone, Copy)]
pub struct McpEnvironment<'a> {
    pub env: &'a BTreeMap<String, String>,
    pub home: Option<&'a Path>,
}

/// The servers of a project: every one its sources declare, with its status.
#[derive(Debug, Clone, Default, Serialize)]
pub struct McpServers {
    /// The files read.
    pub files: Vec<PathBuf>,
    pub servers: Vec<McpServerStatus>,
}

/// What the sources declare, before any status is decided.
#[derive(Debug, Default)]
pub struct Declared {
    pub files: Vec<PathBuf>,
    /// Each name once: the local scope replaces the project's, which replaces the user's.
    pub servers: Vec<McpServerConfig>,
    /// Server names Claude Code approved, with where (`None` name: every one).
    pub approvals: Vec<(Option<String>, String)>,
}

impl Declared {
    /// Reads `~/.claude.json` (user and local scope, and this project's approvals), the
    /// project's `.mcp.json` and `.claude/settings.local.json`'s approvals. A malformed entry
    /// is a warning naming the server; an unreadable or invalid file is one warning.
    pub fn read(root: &Path, home: Option<&Path>) -> Loaded<Declared> {
        let mut warnings = Vec::new();
        let mut declared = Declared::default();
        let mut by_name: BTreeMap<String, McpServerConfig> = BTreeMap::new();
        let claude = home.map(|home| home.join(CLAUDE_JSON));
        let claude_document = claude
            .as_ref()
            .and_then(|path| read_json(path, &mut warnings).map(|doc| (path.clone(), doc)));
        if let Some((path, document)) = &claude_document {
            declared.files.push(path.clone());
            if let Some(servers) = document.get("mcpServers") {
                add_servers(
                    path,
                    "mcpServers",
                    servers,
                    McpScope::User,
                    &mut by_name,
                    &mut warnings,
                );
            }
        }
        let project_file = root.join(MCP_FILE);
        if let Some(document) = read_json(&project_file, &mut warnings) {
            declared.files.push(project_file.clone());
            match document.get("mcpServers") {
                Some(servers) => add_servers(
                    &project_file,
                    "mcpServers",
                    servers,
                    McpScope::Project,
                    &mut by_name,
                    &mut warnings,
                ),
                None => warnings.push(file_warning(
                    &project_file,
                    "expected an object with `mcpServers`, found none".to_owned(),
                )),
            }
        }
        if let Some((path, document)) = &claude_document
            && let Some((key, entry)) = project_entry(document, root)
        {
            if let Some(servers) = entry.get("mcpServers") {
                add_servers(
                    path,
                    &format!("projects.{key}.mcpServers"),
                    servers,
                    McpScope::Local,
                    &mut by_name,
                    &mut warnings,
                );
            }
            declared.approvals.extend(approvals(
                entry,
                &format!("{} (projects.{key})", path.display()),
            ));
        }
        let local_settings = root.join(".claude/settings.local.json");
        if let Ok(Some(text)) = crate::settings::read_optional(&local_settings)
            && let Ok(document) = serde_json::from_str::<serde_json::Value>(&text)
        {
            declared
                .approvals
                .extend(approvals(&document, &local_settings.display().to_string()));
        }
        declared.servers = by_name.into_values().collect();
        Loaded {
            value: declared,
            warnings,
        }
    }

    /// Where Claude Code approved `name`, when it did.
    fn approved(&self, name: &str) -> Option<String> {
        self.approvals
            .iter()
            .find(|(approved, _)| approved.as_deref().is_none_or(|approved| approved == name))
            .map(|(_, source)| source.clone())
    }

    /// The pins of the project's servers (project and local scope), by name: what `muster
    /// trust` records.
    pub fn pins(&self) -> BTreeMap<String, String> {
        self.servers
            .iter()
            .filter(|server| server.scope.needs_trust())
            .map(|server| (server.name.clone(), server.pin()))
            .collect()
    }
}

/// `~/.claude.json`'s entry for the project at `root`: its key, matched by canonical path.
fn project_entry<'d>(
    document: &'d serde_json::Value,
    root: &Path,
) -> Option<(&'d str, &'d serde_json::Value)> {
    let projects = document.get("projects")?.as_object()?;
    let canonical = crate::trust::canonical_root(root);
    projects
        .iter()
        .find(|(key, _)| crate::trust::canonical_root(Path::new(key.as_str())) == canonical)
        .map(|(key, entry)| (key.as_str(), entry))
}

/// Claude Code's approvals in one object: `enabledMcpjsonServers` names, and
/// `enableAllProjectMcpServers`.
fn approvals(document: &serde_json::Value, source: &str) -> Vec<(Option<String>, String)> {
    let mut found: Vec<(Option<String>, String)> = document
        .get("enabledMcpjsonServers")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(serde_json::Value::as_str)
        .map(|name| (Some(name.to_owned()), source.to_owned()))
        .collect();
    if document.get("enableAllProjectMcpServers") == Some(&serde_json::Value::Bool(true)) {
        found.push((None, source.to_owned()));
    }
    found
}

fn read_json(path: &Path, warnings: &mut Vec<Diagnostic>) -> Option<serde_json::Value> {
    let text = match crate::settings::read_optional(path) {
        Ok(Some(text)) => text,
        Ok(None) => return None,
        Err(error) => {
            warnings.push(file_warning(path, error_text(&error)));
            return None;
        }
    };
    parse_json(path, &text, warnings)
}

/// `text` as JSON; where it is not, a warning that says where.
fn parse_json(
    path: &Path,
    text: &str,
    warnings: &mut Vec<Diagnostic>,
) -> Option<serde_json::Value> {
    match serde_json::from_str(text) {
        Ok(document) => Some(document),
        Err(error) => {
            warnings.push(file_warning(
                path,
                format!(
                    "not valid JSON at line {} column {}: {error}",
                    error.line(),
                    error.column()
                ),
            ));
            None
        }
    }
}

fn add_servers(
    path: &Path,
    key: &str,
    servers: &serde_json::Value,
    scope: McpScope,
    by_name: &mut BTreeMap<String, McpServerConfig>,
    warnings: &mut Vec<Diagnostic>,
) {
    let Some(servers) = servers.as_object() else {
        warnings.push(file_warning(
            path,
            format!("expected `{key}` to be an object of servers by name"),
        ));
        return;
    };
    for server in parse_servers(path, key, servers, scope, warnings) {
        by_name.insert(server.name.clone(), server);
    }
}

impl McpServers {
    /// Reads every source ([`Declared::read`]) and decides each server's status: a user-scope
    /// server is enabled; a project's server is enabled only in a trusted project, with the
    /// pin trust recorded for it; a server one of whose variables is unset is not.
    pub fn load(
        root: &Path,
        settings: &McpSettings,
        user: McpEnvironment<'_>,
    ) -> Loaded<McpServers> {
        let Loaded {
            value: declared,
            mut warnings,
        } = Declared::read(root, user.home);
        warnings.extend(retired_keys_warning(settings));
        let mut servers = Vec::new();
        for mut server in declared.servers.clone() {
            let claude_approved = declared.approved(&server.name);
            let trusted = trusted(&server, settings);
            let expanded = server.template.expanded(user.env);
            let (enabled, why, untrusted) = match (trusted, expanded) {
                (Err(why), _) => (false, why, true),
                (Ok(_), Err(Unset(variable))) => {
                    let why = format!(
                        "`${{{variable}}}` is not set and has no default (write \
                         `${{{variable}:-default}}` for one); set it in the environment muster \
                         runs in"
                    );
                    warnings.push(
                        Diagnostic::new(format!(
                            "MCP server `{}` ({}): {why}; it is not started",
                            server.name,
                            server.scope.source()
                        ))
                        .for_key(format!("mcpServers.{}", server.name)),
                    );
                    (false, why, false)
                }
                (Ok(_), Ok(McpTransport::Http { url, .. })) if !is_http_url(&url) => (
                    false,
                    "its `url` expands to something other than an http:// or https:// URL"
                        .to_owned(),
                    false,
                ),
                (Ok(why), Ok(transport)) => {
                    server.transport = transport;
                    (true, why, false)
                }
            };
            servers.push(McpServerStatus {
                server,
                enabled,
                why,
                untrusted,
                claude_approved,
            });
        }
        Loaded {
            value: McpServers {
                files: declared.files,
                servers,
            },
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

/// Whether trust lets `server` start: `Ok(why)` or `Err(why not)`.
fn trusted(server: &McpServerConfig, settings: &McpSettings) -> Result<String, String> {
    let command = crate::trust::TRUST_COMMAND;
    if !server.scope.needs_trust() {
        return Ok(format!("declared in {}", server.scope.source()));
    }
    if !settings.project_trusted {
        return Err(format!(
            "the project is not trusted: its servers ({}) start only after `{command}`",
            server.scope.source()
        ));
    }
    match (&settings.pinned, server.scope) {
        // Trusted by the covered files' hash alone (CI's variable, a trust recorded before
        // servers were pinned): `.mcp.json` is one of those files, `~/.claude.json` is not.
        (None, McpScope::Project) => Ok(format!(
            "the project is trusted and {MCP_FILE} is among the files its trust covers"
        )),
        (None, _) => Err(format!(
            "not pinned by the project's trust: run `{command}` to pin it"
        )),
        (Some(pins), _) => match pins.get(&server.name) {
            Some(pin) if *pin == server.pin() => {
                Ok(format!("trusted with `{command}`, its template pinned"))
            }
            Some(_) => Err(format!(
                "changed since you trusted the project (its command, args, env names, url, \
                 headers or the variables it reads): review it and run `{command}` again"
            )),
            None => Err(format!(
                "added since you trusted the project: review it and run `{command}` again"
            )),
        },
    }
}

/// The one warning for the retired name-keyed `[mcp]` keys, when any is set.
fn retired_keys_warning(settings: &McpSettings) -> Option<Diagnostic> {
    let mut set: Vec<String> = Vec::new();
    if let Some(listed) = &settings.enabled_project_servers {
        set.push(format!("`mcp.enabled_project_servers` ({})", listed.origin));
    }
    if settings.enable_all_project_servers.value {
        set.push(format!(
            "`mcp.enable_all_project_servers` ({})",
            settings.enable_all_project_servers.origin
        ));
    }
    if let Some(listed) = &settings.trusted_read_only {
        set.push(format!("`mcp.trusted_read_only` ({})", listed.origin));
    }
    (!set.is_empty()).then(|| {
        Diagnostic::new(format!(
            "{} no longer apply: a server name is not trust. A project's MCP servers start once \
             you trust the project with `{}`, which pins each server's template; plan mode \
             allows the tools a server marks `readOnlyHint: true` and `openWorldHint: false`, \
             and more by name in `[mcp] read_only_tools` of ~/.muster/settings.toml. Remove \
             the old keys",
            set.join(", "),
            crate::trust::TRUST_COMMAND
        ))
        .for_key("mcp")
    })
}

fn error_text(error: &ConfigError) -> String {
    error.to_string()
}

fn file_warning(path: &Path, message: String) -> Diagnostic {
    Diagnostic::new(format!("{message}; its MCP servers are not started"))
        .in_source(path.display().to_string())
}

/// The servers of a `.mcp.json` text (project scope); each bad entry is a warning and is
/// left out.
pub fn parse_mcp_file(
    path: &Path,
    text: &str,
    warnings: &mut Vec<Diagnostic>,
) -> Vec<McpServerConfig> {
    let Some(document) = parse_json(path, text, warnings) else {
        return Vec::new();
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
    parse_servers(path, "mcpServers", servers, McpScope::Project, warnings)
}

fn parse_servers(
    path: &Path,
    key: &str,
    servers: &serde_json::Map<String, serde_json::Value>,
    scope: McpScope,
    warnings: &mut Vec<Diagnostic>,
) -> Vec<McpServerConfig> {
    let source = path.display().to_string();
    let mut configs = Vec::new();
    for (name, entry) in servers {
        match parse_server(name, entry) {
            Ok(transport) => configs.push(McpServerConfig::literal(name, scope, transport)),
            Err(message) => warnings.push(
                Diagnostic::new(format!("MCP server `{name}`: {message}; it is not started"))
                    .in_source(source.clone())
                    .for_key(format!("{key}.{name}")),
            ),
        }
    }
    configs
}

/// A server given for one session by what drives it, as a `.mcp.json` entry (`{"command",
/// "args", "env"}` or `{"type": "http", "url", "headers"}`): the user's own choice, started
/// without project trust (in the sandbox, like every server). Its `${VAR}`s are expanded from
/// `env`; a bad entry or an unset variable is an error naming what to fix.
pub fn session_server(
    name: &str,
    entry: &serde_json::Value,
    env: &BTreeMap<String, String>,
) -> Result<McpServerConfig, String> {
    let template =
        parse_server(name, entry).map_err(|why| format!("MCP server `{name}`: {why}"))?;
    let transport = template.expanded(env).map_err(|Unset(variable)| {
        format!("MCP server `{name}`: `${{{variable}}}` is not set and has no default")
    })?;
    Ok(McpServerConfig {
        name: name.to_owned(),
        scope: McpScope::Session,
        template,
        transport,
    })
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

fn parse_server(name: &str, entry: &serde_json::Value) -> Result<McpTransport, String> {
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
                .filter(|url| is_http_url(url) || url.starts_with("${"))
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
    Ok(transport)
}

type Fields = serde_json::Map<String, serde_json::Value>;

fn is_http_url(url: &str) -> bool {
    url.starts_with("http://") || url.starts_with("https://")
}

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

    fn settings(trusted: bool, pinned: Option<&[(&str, String)]>) -> McpSettings {
        let origin = crate::origin::Origin {
            layer: crate::origin::Layer::User,
            source: "~/.muster/settings.toml".to_owned(),
            position: None,
        };
        McpSettings {
            enabled_project_servers: None,
            enable_all_project_servers: crate::origin::Sourced::new(false, origin.clone()),
            trusted_read_only: None,
            read_only_tools: None,
            startup_timeout_ms: crate::origin::Sourced::new(1, origin.clone()),
            call_timeout_ms: crate::origin::Sourced::new(1, origin.clone()),
            project_trusted: trusted,
            pinned: pinned.map(|pins| {
                pins.iter()
                    .map(|(name, pin)| ((*name).to_owned(), pin.clone()))
                    .collect()
            }),
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

    fn stdio(
        scope: McpScope,
        command: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> McpServerConfig {
        McpServerConfig::literal(
            "fs",
            scope,
            McpTransport::Stdio {
                command: command.to_owned(),
                args: args.iter().map(|a| (*a).to_owned()).collect(),
                env: env
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            },
        )
    }

    #[test]
    fn a_pin_changes_with_the_template_and_the_variables_it_reads_not_env_values() {
        let base = stdio(
            McpScope::Project,
            "npx",
            &["server", "${HOME}/proj"],
            &[("TOKEN", "a")],
        );
        let same_but_env_value = stdio(
            McpScope::Project,
            "npx",
            &["server", "${HOME}/proj"],
            &[("TOKEN", "b")],
        );
        assert_eq!(base.pin(), same_but_env_value.pin());
        let changed: &[McpServerConfig] = &[
            stdio(
                McpScope::Project,
                "sh",
                &["server", "${HOME}/proj"],
                &[("TOKEN", "a")],
            ),
            stdio(
                McpScope::Project,
                "npx",
                &["server", "/home/me/proj"],
                &[("TOKEN", "a")],
            ),
            stdio(
                McpScope::Project,
                "npx",
                &["server", "${HOME}/proj"],
                &[("OTHER", "a")],
            ),
            stdio(
                McpScope::Project,
                "npx",
                &["server", "${HOME}/proj"],
                &[("TOKEN", "${SECRET}")],
            ),
            stdio(
                McpScope::Local,
                "npx",
                &["server", "${HOME}/proj"],
                &[("TOKEN", "a")],
            ),
        ];
        for other in changed {
            assert_ne!(base.pin(), other.pin(), "{other:?}");
        }
    }

    #[test]
    fn a_project_server_starts_only_trusted_and_as_pinned() {
        let server = stdio(McpScope::Project, "npx", &["server"], &[]);
        let pin = server.pin();
        let other_pin = stdio(McpScope::Project, "sh", &["-c", "evil"], &[]).pin();
        type Case<'a> = (
            bool,
            Option<&'a [(&'a str, String)]>,
            Result<&'a str, &'a str>,
        );
        let pinned = [("fs", pin)];
        let changed = [("fs", other_pin)];
        let cases: &[Case] = &[
            (false, Some(&pinned), Err("not trusted")),
            (true, Some(&pinned), Ok("pinned")),
            (true, Some(&changed), Err("changed since")),
            (true, Some(&[]), Err("added since")),
            (true, None, Ok("among the files its trust covers")),
        ];
        for (trusted_project, pins, expected) in cases {
            let got = trusted(&server, &settings(*trusted_project, *pins));
            match (got, expected) {
                (Ok(why), Ok(want)) | (Err(why), Err(want)) => {
                    assert!(why.contains(want), "{why} lacks {want}");
                }
                (got, want) => panic!("{got:?}, expected {want:?}"),
            }
        }
        let local = stdio(McpScope::Local, "npx", &["server"], &[]);
        assert!(trusted(&local, &settings(true, None)).is_err());
        let user = stdio(McpScope::User, "npx", &["server"], &[]);
        assert!(trusted(&user, &settings(false, None)).is_ok());
    }
}
