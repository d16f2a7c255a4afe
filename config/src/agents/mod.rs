//! Agent definitions: Markdown files with YAML front matter in `.muster/agents/*.md` (strict)
//! and `.claude/agents/*.md` (lenient: what muster does not know is ignored with a warning), and
//! the built-in `lead`, `general` and `Plan`, compiled in and written in the same format. A
//! project file with a built-in's name overrides it; `.muster/agents` overrides `.claude/agents`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Serialize, Serializer};

use crate::diagnostic::{ConfigError, Diagnostic, Loaded, Position, invalid, suggestion_suffix};
use crate::mcp::McpPattern;
use crate::mode::PermissionMode;
use crate::project::ProjectRoot;
use crate::tools::{canonical_tool_name, known_tool_names, standard_tools};
use crate::yaml::{YamlNode, YamlValue, parse_yaml};

/// The front-matter keys muster reads.
pub const AGENT_KEYS: &[&str] = &[
    "name",
    "description",
    "tools",
    "disallowedTools",
    "model",
    "permissionMode",
    "read_only",
    "provider",
    "base_url",
    "api_key_env",
];

/// Claude Code's model aliases and the catalogue ids they stand for.
pub const MODEL_ALIASES: &[(&str, &str)] = &[
    ("sonnet", "claude-sonnet-4-5"),
    ("opus", "claude-opus-4-1"),
    ("haiku", "claude-haiku-4-5"),
];

/// What a definition's `model:` value means, read as Claude Code reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelValue {
    /// `inherit`.
    Inherit,
    /// An alias or a model-shaped id, as [`model_id`] maps it: sent to the provider as is.
    Id(String),
    /// Not a model id at all (a template's `opus|sonnet|haiku`, a `<model>` placeholder, words
    /// with spaces, a bare word that is no model family): the definition falls back to the
    /// inherited model, with a warning.
    NotAModel,
}

/// Reads a `model:` value: `inherit`, an alias (`sonnet`, `Opus`, `haiku[1m]`), a
/// model-shaped id (`claude-sonnet-4-20250514`, `gpt-4.1`, `Qwen/Qwen2.5-Coder`,
/// `llama3:8b`), or not a model id.
pub fn read_model_value(text: &str) -> ModelValue {
    let text = text.trim();
    if text == "inherit" {
        return ModelValue::Inherit;
    }
    let id = model_id(text);
    if MODEL_ALIASES.iter().any(|(_, alias_id)| *alias_id == id) || is_model_shaped(&id) {
        ModelValue::Id(id)
    } else {
        ModelValue::NotAModel
    }
}

/// An id a provider could know: letters, digits and `-._:/@`, starting with a letter or a
/// digit, and more than a bare word (a digit or a separator in it: `gpt-5`, `llama3`).
fn is_model_shaped(id: &str) -> bool {
    let allowed =
        |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | ':' | '/' | '@');
    let more_than_a_word = id
        .chars()
        .any(|c| c.is_ascii_digit() || matches!(c, '-' | '.' | '_' | ':' | '/' | '@'));
    id.len() <= 200
        && id.starts_with(|c: char| c.is_ascii_alphanumeric())
        && id.chars().all(allowed)
        && more_than_a_word
}

/// A definition's `model` as Claude Code maps it: an alias in any case (`Sonnet`), and the
/// 1M-context marker `[1m]` dropped (`opus[1m]`); other names are kept as written (a local
/// server's model names are case-sensitive).
pub fn model_id(model: &str) -> String {
    let model = model.trim();
    let model = model.strip_suffix("[1m]").unwrap_or(model);
    let lowered = model.to_ascii_lowercase();
    MODEL_ALIASES
        .iter()
        .find(|(alias, _)| *alias == lowered)
        .map_or_else(|| model.to_owned(), |(_, id)| (*id).to_owned())
}

/// Built-in definitions, in the same format as project files.
const BUILT_IN: &[(&str, &str)] = &[
    ("lead", include_str!("builtin/lead.md")),
    ("general", include_str!("builtin/general.md")),
    ("Plan", include_str!("builtin/Plan.md")),
];

/// Which directory a definition file comes from, and so how strictly it is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentDir {
    /// `.muster/agents`: unknown keys and tools are errors.
    Muster,
    /// `.claude/agents`: unknown keys and tools are ignored with a warning.
    Claude,
    /// `~/.claude/agents`: read like `.claude/agents`, below every project file.
    UserClaude,
    /// Compiled into muster (read strictly).
    BuiltIn,
}

impl AgentDir {
    /// Is every problem in a file of this directory a warning that skips the file (Claude
    /// Code's directories), rather than an error?
    pub fn is_lenient(self) -> bool {
        matches!(self, AgentDir::Claude | AgentDir::UserClaude)
    }
}

/// Where a definition came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DefinitionSource {
    BuiltIn,
    File { path: PathBuf, dir: AgentDir },
}

impl fmt::Display for DefinitionSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DefinitionSource::BuiltIn => f.write_str("built-in"),
            DefinitionSource::File { path, .. } => write!(f, "{}", path.display()),
        }
    }
}

impl Serialize for DefinitionSource {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Which model an agent uses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ModelChoice {
    /// Not given: the settings' model for the agent's mode.
    #[default]
    Settings,
    /// `inherit`: the parent's current model (the plan-mode model while the parent plans).
    Inherit,
    /// A model id from the catalogue (or any name the provider accepts).
    Named(String),
}

impl Serialize for ModelChoice {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ModelChoice::Settings => serializer.serialize_none(),
            ModelChoice::Inherit => serializer.serialize_str("inherit"),
            ModelChoice::Named(name) => serializer.serialize_str(name),
        }
    }
}

/// One agent definition.
#[derive(Debug, Clone, Serialize)]
pub struct AgentDefinition {
    pub name: String,
    pub description: String,
    /// The tools listed, in muster names; `None` when the file lists none (standard tools).
    pub tools: Option<Vec<&'static str>>,
    #[serde(rename = "disallowedTools")]
    pub disallowed_tools: Vec<&'static str>,
    /// The `mcp__…` entries of `tools` (with `tools` absent or `*`: every enabled MCP tool).
    #[serde(rename = "mcpTools", skip_serializing_if = "Vec::is_empty")]
    pub mcp_tools: Vec<McpPattern>,
    /// The `mcp__…` entries of `disallowedTools`.
    #[serde(rename = "disallowedMcpTools", skip_serializing_if = "Vec::is_empty")]
    pub disallowed_mcp_tools: Vec<McpPattern>,
    /// `Agent(x, y)` (or `Task(x)`) in `tools`: the only definitions its `Agent` may start;
    /// `None`: any.
    #[serde(rename = "agentTypes", skip_serializing_if = "Option::is_none")]
    pub agent_types: Option<Vec<String>>,
    pub model: ModelChoice,
    /// Its own provider, base URL and key variable (`model` stays in [`Self::model`]).
    #[serde(skip_serializing_if = "crate::AgentEndpoint::is_empty")]
    pub endpoint: crate::AgentEndpoint,
    #[serde(rename = "permissionMode")]
    pub permission_mode: Option<PermissionMode>,
    pub read_only: bool,
    /// The Markdown body: the agent's system prompt.
    pub system_prompt: String,
    pub source: DefinitionSource,
    /// Definitions of the same name this one overrides (a built-in, a `.claude` file).
    pub overrides: Vec<DefinitionSource>,
    /// The `model:` value written when it was not a model id (the definition inherits
    /// instead); the catalogue warns once per distinct value.
    #[serde(skip)]
    pub model_not_an_id: Option<String>,
}

impl AgentDefinition {
    /// The tools the agent is offered: its `tools` (or the standard tools) less
    /// `disallowedTools`.
    pub fn effective_tools(&self) -> Vec<&'static str> {
        let listed = self.tools.clone().unwrap_or_else(standard_tools);
        listed
            .into_iter()
            .filter(|tool| !self.disallowed_tools.contains(tool))
            .collect()
    }

    /// Whether the agent is offered tool `tool` of MCP server `server`: every enabled MCP
    /// tool when `tools` is absent or `*`, else the `mcp__…` entries it lists; less
    /// `disallowedTools`.
    pub fn offers_mcp_tool(&self, server: &str, tool: &str) -> bool {
        let listed = self.tools.is_none()
            || self
                .mcp_tools
                .iter()
                .any(|pattern| pattern.matches(server, tool));
        listed
            && !self
                .disallowed_mcp_tools
                .iter()
                .any(|pattern| pattern.matches(server, tool))
    }
}

/// Parses one definition file. `label` names it in messages.
pub fn parse_agent_file(
    label: &str,
    text: &str,
    dir: AgentDir,
) -> Result<Loaded<AgentDefinition>, ConfigError> {
    let file = DefinitionFile {
        label,
        dir,
        errors: Vec::new(),
        warnings: Vec::new(),
        agent_types: None,
        mcp_tools: Vec::new(),
        disallowed_mcp_tools: Vec::new(),
    };
    file.parse(text)
}

struct DefinitionFile<'a> {
    label: &'a str,
    dir: AgentDir,
    errors: Vec<Diagnostic>,
    warnings: Vec<Diagnostic>,
    /// The definitions `Agent(x, …)` entries of `tools` named.
    agent_types: Option<Vec<String>>,
    /// The `mcp__…` entries of `tools` and of `disallowedTools`.
    mcp_tools: Vec<McpPattern>,
    disallowed_mcp_tools: Vec<McpPattern>,
}

/// The front matter (its text and first line) and the body of a definition file.
pub(crate) fn split_front_matter(text: &str) -> Result<(&str, usize, &str), (String, Position)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().unwrap_or("");
    if first.trim_end() != "---" {
        return Err((
            "expected YAML front matter starting with a `---` line, found none".to_string(),
            Position { line: 1, column: 1 },
        ));
    }
    let start = first.len();
    let mut offset = start;
    let mut line = 1;
    for current in lines {
        line += 1;
        let trimmed = current.trim_end();
        if trimmed == "---" || trimmed == "..." {
            let body = &text[offset + current.len()..];
            return Ok((&text[start..offset], 2, body));
        }
        offset += current.len();
    }
    Err((
        "front matter opened with `---` on line 1 is never closed with a `---` line".to_string(),
        Position { line, column: 1 },
    ))
}

impl DefinitionFile<'_> {
    fn diagnostic(&self, position: Position, key: &str, message: impl Into<String>) -> Diagnostic {
        Diagnostic::new(message)
            .in_source(self.label)
            .at(Some(position))
            .for_key(key)
    }

    /// An error in `.muster/agents` and built-ins, a warning in `.claude/agents`.
    fn unknown(&mut self, position: Position, key: &str, message: String) {
        match self.dir {
            AgentDir::Claude | AgentDir::UserClaude => {
                let warning = self.diagnostic(position, key, format!("ignored: {message}"));
                self.warnings.push(warning);
            }
            AgentDir::Muster | AgentDir::BuiltIn => {
                let error = self.diagnostic(position, key, message);
                self.errors.push(error);
            }
        }
    }

    fn parse(mut self, text: &str) -> Result<Loaded<AgentDefinition>, ConfigError> {
        let (front, first_line, body) =
            split_front_matter(text).map_err(|(message, position)| {
                ConfigError::invalid(self.diagnostic(position, "", message))
            })?;
        let root = match parse_yaml(front, first_line) {
            Ok(root) => root,
            // Claude Code reads a front matter YAML refuses (an unquoted `: ` in a one-line
            // description, the `/agents` wizard's literal `\n`) line by line: so does muster.
            Err(error) if self.dir.is_lenient() => {
                let warning = self.diagnostic(
                    error.position,
                    "",
                    format!(
                        "the front matter is not valid YAML ({}); read as Claude Code reads it, \
                         each `key: value` line as plain text (quote the value to silence this)",
                        error.message
                    ),
                );
                self.warnings.push(warning);
                Some(plain_front_matter(front, first_line))
            }
            Err(error) => {
                return Err(ConfigError::invalid(self.diagnostic(
                    error.position,
                    "",
                    error.message,
                )));
            }
        };
        let entries = match root {
            Some(YamlNode {
                value: YamlValue::Mapping(entries),
                ..
            }) => entries,
            Some(other) => {
                let message = format!("expected a mapping of keys, found {}", other.describe());
                return Err(ConfigError::invalid(self.diagnostic(
                    other.position,
                    "",
                    message,
                )));
            }
            None => Vec::new(),
        };
        let mut fields: BTreeMap<&str, YamlNode> = BTreeMap::new();
        for (key, value) in entries {
            let optional = matches!(
                key.as_text(),
                Some(
                    "model"
                        | "permissionMode"
                        | "disallowedTools"
                        | "read_only"
                        | "provider"
                        | "base_url"
                        | "api_key_env"
                )
            );
            if optional && value.is_null() {
                let name = key.as_text().unwrap_or_default().to_owned();
                self.unknown(
                    value.position,
                    &name,
                    format!("`{name}` is empty: remove the line, or give it a value"),
                );
                continue;
            }
            let Some(name) = key.as_text().map(str::to_string) else {
                let message = format!("expected a key name, found {}", key.describe());
                self.errors.push(self.diagnostic(key.position, "", message));
                continue;
            };
            match AGENT_KEYS.iter().find(|known| **known == name) {
                Some(known) => {
                    if fields.insert(known, value).is_some() {
                        let message = format!("duplicate key `{name}`");
                        self.errors
                            .push(self.diagnostic(key.position, &name, message));
                    }
                }
                None => {
                    let suggestion = suggestion_suffix(&name, AGENT_KEYS.iter().copied());
                    self.unknown(
                        key.position,
                        &name,
                        format!("unknown key `{name}`{suggestion}"),
                    );
                }
            }
        }
        let name = self.required_text(&fields, "name");
        if let Some(name) = &name {
            self.check_name(name, fields.get("name"));
        }
        let description = self.required_text(&fields, "description");
        let tools = fields.get("tools").and_then(|node| self.tools(node));
        let agent_types = std::mem::take(&mut self.agent_types);
        let disallowed_tools = fields
            .get("disallowedTools")
            .map(|node| self.tool_list("disallowedTools", node))
            .unwrap_or_default();
        let mut model_not_an_id = None;
        let model = match fields.get("model") {
            None => ModelChoice::Settings,
            Some(node) => match self
                .text("model", node)
                .map(|text| (text, read_model_value(text)))
            {
                Some((_, ModelValue::Inherit)) => ModelChoice::Inherit,
                Some((_, ModelValue::Id(id))) => ModelChoice::Named(id),
                Some((text, ModelValue::NotAModel)) => {
                    if !self.dir.is_lenient() {
                        let message = format!(
                            "`{text}` is not a model id: write sonnet, opus, haiku, inherit or \
                             a model id such as claude-sonnet-4-5"
                        );
                        self.errors
                            .push(self.diagnostic(node.position, "model", message));
                    }
                    model_not_an_id = Some(text.trim().to_owned());
                    ModelChoice::Inherit
                }
                None => ModelChoice::Settings,
            },
        };
        let permission_mode = fields.get("permissionMode").and_then(|node| {
            let text = self.text("permissionMode", node)?;
            match text.parse::<PermissionMode>() {
                Ok(mode) => Some(mode),
                Err(_) => {
                    let message = format!(
                        "expected one of {}, found {text:?}{}",
                        PermissionMode::names().join(", "),
                        suggestion_suffix(text, PermissionMode::names())
                    );
                    self.errors
                        .push(self.diagnostic(node.position, "permissionMode", message));
                    None
                }
            }
        });
        let endpoint = self.endpoint(&fields);
        let read_only = fields
            .get("read_only")
            .is_some_and(|node| match node.as_bool() {
                Some(flag) => flag,
                None => {
                    let message = format!("expected true or false, found {}", node.describe());
                    self.errors
                        .push(self.diagnostic(node.position, "read_only", message));
                    false
                }
            });
        if !self.errors.is_empty() {
            return Err(invalid(self.errors));
        }
        let (Some(name), Some(description)) = (name, description) else {
            return Err(invalid(self.errors));
        };
        self.warnings.sort_by_key(|w| (w.line, w.column));
        Ok(Loaded {
            value: AgentDefinition {
                name,
                description,
                tools,
                disallowed_tools,
                mcp_tools: std::mem::take(&mut self.mcp_tools),
                disallowed_mcp_tools: std::mem::take(&mut self.disallowed_mcp_tools),
                agent_types,
                model,
                endpoint,
                permission_mode,
                read_only,
                system_prompt: body.trim().to_string(),
                source: DefinitionSource::BuiltIn,
                overrides: Vec::new(),
                model_not_an_id,
            },
            warnings: self.warnings,
        })
    }

    /// The front matter's `provider`, `base_url` and `api_key_env`.
    fn endpoint(&mut self, fields: &BTreeMap<&str, YamlNode>) -> crate::AgentEndpoint {
        let provider = fields.get("provider").and_then(|node| {
            let text = self.text("provider", node)?;
            match text.parse::<crate::settings::ProviderKind>() {
                Ok(kind) => Some(kind),
                Err(message) => {
                    self.errors
                        .push(self.diagnostic(node.position, "provider", message));
                    None
                }
            }
        });
        let base_url = fields.get("base_url").and_then(|node| {
            let url = self.text("base_url", node)?;
            if url.starts_with("http://") || url.starts_with("https://") {
                return Some(url.to_owned());
            }
            let message =
                format!("expected a URL starting with http:// or https://, found {url:?}");
            self.errors
                .push(self.diagnostic(node.position, "base_url", message));
            None
        });
        let api_key_env = fields
            .get("api_key_env")
            .and_then(|node| self.text("api_key_env", node))
            .map(str::to_owned);
        crate::AgentEndpoint {
            provider,
            model: None,
            base_url,
            api_key_env,
        }
    }

    fn text<'n>(&mut self, key: &str, node: &'n YamlNode) -> Option<&'n str> {
        match node.as_text() {
            Some(text) if matches!(node.value, YamlValue::Scalar { .. }) => Some(text),
            _ => {
                let message = format!("expected a string, found {}", node.describe());
                self.errors
                    .push(self.diagnostic(node.position, key, message));
                None
            }
        }
    }

    fn required_text(&mut self, fields: &BTreeMap<&str, YamlNode>, key: &str) -> Option<String> {
        match fields.get(key) {
            Some(node) => self.text(key, node).map(|text| text.trim().to_string()),
            None => {
                let message = format!("missing required key `{key}`");
                self.errors
                    .push(self.diagnostic(Position { line: 1, column: 1 }, key, message));
                None
            }
        }
    }

    /// Claude Code accepts any non-empty name not starting with `-` (`Code Reviewer`); muster
    /// refuses only what no command line or prompt could carry: control characters and
    /// more than 128 characters.
    fn check_name(&mut self, name: &str, node: Option<&YamlNode>) {
        let valid = !name.is_empty()
            && !name.starts_with('-')
            && name.chars().count() <= 128
            && !name.chars().any(char::is_control);
        if !valid {
            let position = node.map_or(Position { line: 1, column: 1 }, |n| n.position);
            let message = format!(
                "expected a non-empty name not starting with `-`, without control characters (at most 128), found {name:?}"
            );
            self.errors.push(self.diagnostic(position, "name", message));
        }
    }

    /// `tools`: `*` (every standard tool, as in Claude Code) is `None`, else the list.
    fn tools(&mut self, node: &YamlNode) -> Option<Vec<&'static str>> {
        if node.as_text().is_some_and(|text| text.trim() == "*") {
            return None;
        }
        Some(self.tool_list("tools", node))
    }

    /// `tools: Read, Grep` or a YAML list; `Task` is `Agent`.
    fn tool_list(&mut self, key: &str, node: &YamlNode) -> Vec<&'static str> {
        let entries: Vec<(String, Position)> = match &node.value {
            YamlValue::Sequence(items) => items
                .iter()
                .filter_map(|item| self.text(key, item).map(|t| (t.to_string(), item.position)))
                .collect(),
            YamlValue::Scalar { .. } if node.is_null() => Vec::new(),
            YamlValue::Scalar { text, .. } => split_tool_names(text)
                .into_iter()
                .map(|t| (t, node.position))
                .collect(),
            YamlValue::Mapping(_) => {
                let message = format!(
                    "expected a list of tool names or a comma-separated string, found {}",
                    node.describe()
                );
                self.errors
                    .push(self.diagnostic(node.position, key, message));
                Vec::new()
            }
        };
        let mut tools = Vec::new();
        for (name, position) in entries {
            let name = match self.agent_limit(key, &name) {
                Some(agent) => agent.to_owned(),
                None => name,
            };
            if name.starts_with(crate::mcp::MCP_PREFIX) {
                match McpPattern::parse(&name) {
                    Some(pattern) if key == "tools" => self.mcp_tools.push(pattern),
                    Some(pattern) => self.disallowed_mcp_tools.push(pattern),
                    None => {
                        let message = format!(
                            "`{name}` is not an MCP tool name; expected `mcp__server`, \
                             `mcp__server__*` or `mcp__server__tool`"
                        );
                        self.unknown(position, key, message);
                    }
                }
                continue;
            }
            match canonical_tool_name(&name) {
                Some(tool) if !tools.contains(&tool) => tools.push(tool),
                Some(_) => {}
                None => {
                    let message = self.unknown_tool(&name);
                    self.unknown(position, key, message);
                }
            }
        }
        tools
    }
}

impl DefinitionFile<'_> {
    /// `Agent(x, y)` / `Task(x)` in `tools`: records `x, y` as the only definitions `Agent`
    /// may start and gives back `Agent`; `None` for any other entry.
    fn agent_limit(&mut self, key: &str, entry: &str) -> Option<&'static str> {
        let (tool, rest) = entry.split_once('(')?;
        let inside = rest.strip_suffix(')')?;
        if key != "tools"
            || muster_protocol::ToolName::canonical(tool.trim())
                != Some(muster_protocol::ToolName::Agent)
        {
            return None;
        }
        let names = inside
            .split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
            .map(str::to_owned);
        self.agent_types.get_or_insert_with(Vec::new).extend(names);
        Some(muster_protocol::ToolName::Agent.as_str())
    }

    /// Why `name` is not a tool, and in `.muster/agents` what to do about it.
    fn unknown_tool(&self, name: &str) -> String {
        if matches!(name, "TeamCreate" | "TeamDelete") {
            return format!(
                "`{name}` is not a tool in muster: teams are declared in muster.team.toml"
            );
        }
        let suggestion = suggestion_suffix(name, known_tool_names());
        match self.dir {
            AgentDir::Muster => format!(
                "unknown tool `{name}`{suggestion}: muster has no `{name}`; remove it, or keep \
                 the file in .claude/agents (where what muster lacks is ignored)"
            ),
            AgentDir::Claude | AgentDir::UserClaude | AgentDir::BuiltIn => {
                format!("unknown tool `{name}`{suggestion}")
            }
        }
    }
}

/// `Read, Agent(x, y), Grep` as its entries: commas inside parentheses do not split.
fn split_tool_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                names.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    names.push(current);
    names
        .into_iter()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .collect()
}

/// Front matter read as Claude Code reads what YAML refuses: each top-level `key: rest of the
/// line` as plain text, and `- item` lines under a key with no value as its list.
pub(crate) fn plain_front_matter(front: &str, first_line: usize) -> YamlNode {
    let mut entries: Vec<(YamlNode, YamlNode)> = Vec::new();
    let at = |line: usize, column: usize| Position { line, column };
    for (index, line) in front.lines().enumerate() {
        let number = first_line + index;
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if line.starts_with(char::is_whitespace) || trimmed.starts_with("- ") {
            // A list item of the previous key, when it had no value of its own.
            let Some(item) = trimmed.strip_prefix("- ") else {
                continue;
            };
            if let Some((_, value)) = entries.last_mut() {
                let column = line.len() - trimmed.len() + 3;
                let node = scalar(item.trim(), at(number, column));
                match &mut value.value {
                    YamlValue::Sequence(items) => items.push(node),
                    YamlValue::Scalar { text, .. } if text.is_empty() => {
                        value.value = YamlValue::Sequence(vec![node]);
                    }
                    _ => {}
                }
            }
            continue;
        }
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let value_column = key.len() + 2 + (rest.len() - rest.trim_start().len());
        let value = rest.trim();
        let value = unquote(value);
        entries.push((
            scalar(key.trim(), at(number, 1)),
            scalar(value, at(number, value_column)),
        ));
    }
    YamlNode {
        value: YamlValue::Mapping(entries),
        position: at(first_line, 1),
    }
}

/// A value quoted whole loses its quotes.
fn unquote(value: &str) -> &str {
    for quote in ['"', '\''] {
        if value.len() >= 2 && value.starts_with(quote) && value.ends_with(quote) {
            return &value[1..value.len() - 1];
        }
    }
    value
}

fn scalar(text: &str, position: Position) -> YamlNode {
    YamlNode {
        value: YamlValue::Scalar {
            text: text.to_owned(),
            // Plain, so an empty value reads as absent and `true` as a boolean.
            plain: true,
        },
        position,
    }
}

/// Every definition by name, after overrides, with the warnings found while loading.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AgentCatalog {
    definitions: BTreeMap<String, AgentDefinition>,
}

impl AgentCatalog {
    /// Drops the `base_url` and `api_key_env` of every definition a project directory holds
    /// (an untrusted repository's): returns each dropped one as `agent NAME key = value`.
    pub fn skip_untrusted_endpoints(&mut self) -> Vec<String> {
        let mut skipped = Vec::new();
        for definition in self.definitions.values_mut() {
            let from_project = matches!(
                &definition.source,
                DefinitionSource::File {
                    dir: AgentDir::Muster | AgentDir::Claude,
                    ..
                }
            );
            if from_project {
                for entry in definition.endpoint.skip_untrusted() {
                    skipped.push(format!("agent {} {entry}", definition.name));
                }
            }
        }
        skipped
    }

    /// Only the built-in definitions.
    pub fn built_in() -> Result<AgentCatalog, ConfigError> {
        let mut catalog = AgentCatalog::default();
        for (name, text) in BUILT_IN {
            let loaded = parse_agent_file(&format!("built-in {name}"), text, AgentDir::BuiltIn)?;
            catalog
                .definitions
                .insert(loaded.value.name.clone(), loaded.value);
        }
        Ok(catalog)
    }

    /// Built-ins, then the user's `~/.claude/agents/` (when `home` is given), then the
    /// project's `.claude/agents/` (both recursive, lenient per file), then
    /// `.muster/agents/*.md` (strict) under `root`; each later one overrides an earlier
    /// definition of the same name, except that only project files override the built-ins.
    pub fn load(
        root: &ProjectRoot,
        home: Option<&Path>,
    ) -> Result<Loaded<AgentCatalog>, ConfigError> {
        let mut catalog = AgentCatalog::built_in()?;
        let mut warnings = Vec::new();
        let mut errors = Vec::new();
        let project_claude = root.path().join(".claude").join("agents");
        // A home that is the project root (as in a sandboxed checkout) has one directory.
        let same = |dir: &Path| {
            std::fs::canonicalize(dir).ok() == std::fs::canonicalize(&project_claude).ok()
        };
        let user = home
            .map(|home| home.join(".claude").join("agents"))
            .filter(|dir| !same(dir))
            .map(|dir| (dir, AgentDir::UserClaude));
        let dirs = user.into_iter().chain([
            (project_claude.clone(), AgentDir::Claude),
            (root.muster_dir().join("agents"), AgentDir::Muster),
        ]);
        // `model:` values that are not model ids, with the files that wrote them.
        let mut not_models: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (directory, dir) in dirs {
            let files = if dir.is_lenient() {
                let plugin_roots = crate::plugins::roots_under(&directory);
                markdown_files_under(&directory, &plugin_roots)?
            } else {
                markdown_files(&directory)?
            };
            let mut seen: BTreeMap<String, PathBuf> = BTreeMap::new();
            for path in files {
                let label = path.display().to_string();
                // In `.claude/agents` a file that cannot be read is skipped with a warning:
                // one file never keeps the others from loading.
                let mut problem = |diagnostics: Vec<Diagnostic>| {
                    if dir.is_lenient() {
                        warnings.extend(diagnostics.into_iter().map(skipped));
                    } else {
                        errors.extend(diagnostics);
                    }
                };
                let text = match std::fs::read(&path) {
                    Ok(bytes) => String::from_utf8(bytes),
                    Err(source) if dir.is_lenient() => {
                        problem(vec![
                            Diagnostic::new(format!("cannot read it: {source}")).in_source(label),
                        ]);
                        continue;
                    }
                    Err(source) => {
                        return Err(ConfigError::Io {
                            path: path.clone(),
                            source,
                        });
                    }
                };
                let Ok(text) = text else {
                    problem(vec![
                        Diagnostic::new("expected UTF-8 text, found invalid bytes")
                            .in_source(label),
                    ]);
                    continue;
                };
                let loaded = match parse_agent_file(&label, &text, dir) {
                    Ok(loaded) => loaded,
                    Err(error) => {
                        problem(error.diagnostics().to_vec());
                        continue;
                    }
                };
                warnings.extend(loaded.warnings);
                let mut definition = loaded.value;
                if let Some(value) = &definition.model_not_an_id {
                    not_models
                        .entry(value.clone())
                        .or_default()
                        .push(label.clone());
                }
                definition.source = DefinitionSource::File {
                    path: path.clone(),
                    dir,
                };
                if let Some(first) = seen.get(&definition.name) {
                    let message = format!(
                        "duplicate agent name `{}`: also defined in {}",
                        definition.name,
                        first.display()
                    );
                    match dir {
                        AgentDir::Claude | AgentDir::UserClaude => warnings.push(
                            Diagnostic::new(format!("{message}, which wins (the first in path order); this file is skipped"))
                                .in_source(label)
                                .for_key("name"),
                        ),
                        _ => errors.push(Diagnostic::new(message).in_source(label).for_key("name")),
                    }
                    continue;
                }
                if dir == AgentDir::UserClaude
                    && BUILT_IN.iter().any(|(name, _)| *name == definition.name)
                {
                    warnings.push(
                        Diagnostic::new(format!(
                            "skipped: `{}` is a built-in definition, which only project files \
                             override; put this file in the project's .claude/agents or \
                             .muster/agents, or rename it",
                            definition.name
                        ))
                        .in_source(label)
                        .for_key("name"),
                    );
                    continue;
                }
                if definition.effective_tools().is_empty() {
                    let only_mcp = if definition.mcp_tools.is_empty() {
                        String::new()
                    } else {
                        " but MCP tools, which it has only when their servers are enabled \
                         (`[mcp]` in docs/configuration.md)"
                            .to_owned()
                    };
                    warnings.push(
                        Diagnostic::new(format!(
                            "agent `{}` is left with no tool muster has{only_mcp}: without \
                             tools it can only answer in text (list tools, or remove `tools` \
                             for the standard ones)",
                            definition.name
                        ))
                        .in_source(label.clone())
                        .for_key("tools"),
                    );
                }
                seen.insert(definition.name.clone(), path.clone());
                catalog.insert_overriding(definition);
            }
        }
        if !errors.is_empty() {
            return Err(invalid(errors));
        }
        warnings.extend(not_model_warnings(not_models));
        Ok(Loaded {
            value: catalog,
            warnings,
        })
    }

    fn insert_overriding(&mut self, mut definition: AgentDefinition) {
        if let Some(previous) = self.definitions.remove(&definition.name) {
            definition.overrides = previous.overrides;
            definition.overrides.push(previous.source);
        }
        self.definitions.insert(definition.name.clone(), definition);
    }

    pub fn get(&self, name: &str) -> Option<&AgentDefinition> {
        self.definitions.get(name)
    }

    /// Every definition, by name.
    pub fn iter(&self) -> impl Iterator<Item = &AgentDefinition> {
        self.definitions.values()
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.definitions.keys().map(String::as_str)
    }

    /// One warning for each model id `known` does not know (not in the model catalogue) that
    /// file definitions name, however many name it: they load and the id is sent as written,
    /// but no cost can be computed for it.
    pub fn model_warnings(&self, known: impl Fn(&str) -> bool) -> Vec<Diagnostic> {
        let mut unknown: BTreeMap<&str, Vec<(&str, &Path)>> = BTreeMap::new();
        for definition in self.definitions.values() {
            let ModelChoice::Named(model) = &definition.model else {
                continue;
            };
            let DefinitionSource::File { path, .. } = &definition.source else {
                continue;
            };
            if !known(model) {
                unknown
                    .entry(model)
                    .or_default()
                    .push((&definition.name, path));
            }
        }
        unknown
            .into_iter()
            .map(|(model, users)| {
                let (first_name, first_path) = users[0];
                let who = match users.len() {
                    1 => format!("agent `{first_name}` names"),
                    n => format!("{n} agents (`{first_name}` and {} more) name", n - 1),
                };
                Diagnostic::new(format!(
                    "{who} model `{model}`, which is not in the model catalogue (`muster config \
                     show` lists it): it is sent as written, but a run with a cost budget cannot \
                     price it; use an alias (sonnet, opus, haiku) or a catalogue id, or add \
                     `[models.\"{model}\"]` with its prices to your settings"
                ))
                .in_source(first_path.display().to_string())
                .for_key("model")
            })
            .collect()
    }

    /// ` (did you mean `x`?)` for an unknown definition name, or nothing.
    pub fn suggestion_for(&self, name: &str) -> String {
        suggestion_suffix(name, self.names())
    }
}

/// One warning per distinct `model:` value that is not a model id, naming how many files
/// wrote it.
fn not_model_warnings(not_models: BTreeMap<String, Vec<String>>) -> Vec<Diagnostic> {
    not_models
        .into_iter()
        .map(|(value, files)| {
            let count = match files.len() {
                1 => String::new(),
                n => format!(" (and in {} more files)", n - 1),
            };
            Diagnostic::new(format!(
                "`model: {value}` is not a model id{count}: these definitions use the inherited \
                 model; write sonnet, opus, haiku, inherit or a model id such as \
                 claude-sonnet-4-5"
            ))
            .in_source(files[0].clone())
            .for_key("model")
        })
        .collect()
}

/// A problem with a `.claude/agents` file, as the warning that it was skipped.
fn skipped(mut diagnostic: Diagnostic) -> Diagnostic {
    diagnostic.message = format!(
        "skipped: {}; fix it (or move it out of .claude/agents), every other definition loaded",
        diagnostic.message
    );
    diagnostic
}

/// The `*.md` files under `directory` and its subdirectories (as Claude Code reads
/// `.claude/agents`), in path order; none when it does not exist. A skill (`SKILL.md`) is
/// never an agent definition, nor is anything in a plugin's `skills/` or `commands/` (a
/// plugin repository cloned there: `crate::plugins` reads those as skills and commands).
fn markdown_files_under(
    directory: &Path,
    plugin_roots: &[PathBuf],
) -> Result<Vec<PathBuf>, ConfigError> {
    let mut files = markdown_files(directory)?;
    files.retain(|path| !crate::skills::is_skill_file(path));
    let Ok(entries) = std::fs::read_dir(directory) else {
        return Ok(files);
    };
    let mut subdirectories: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
        .map(|entry| entry.path())
        .filter(|path| !crate::plugins::holds_skills_or_commands(path, plugin_roots))
        .collect();
    subdirectories.sort();
    for subdirectory in subdirectories {
        files.extend(markdown_files_under(&subdirectory, plugin_roots)?);
    }
    files.sort();
    Ok(files)
}

/// The `*.md` files directly in `directory`, sorted; none when it does not exist.
fn markdown_files(directory: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let entries = match std::fs::read_dir(directory) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(ConfigError::Io {
                path: directory.to_path_buf(),
                source,
            });
        }
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md") && path.is_file())
        .collect();
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_ins_parse_with_their_documented_tools() {
        let catalog = AgentCatalog::built_in().unwrap();
        let lead = catalog.get("lead").unwrap();
        assert_eq!(lead.permission_mode, Some(PermissionMode::AcceptEdits));
        assert!(lead.effective_tools().contains(&"SpawnTeammate"));
        assert!(!lead.effective_tools().contains(&"Write"));
        let plan = catalog.get("Plan").unwrap();
        assert!(plan.read_only);
        assert_eq!(plan.model, ModelChoice::Inherit);
        assert_eq!(
            plan.effective_tools(),
            vec!["Read", "Grep", "Glob", "LS", "Bash"]
        );
        let general = catalog.get("general").unwrap();
        assert_eq!(general.effective_tools(), standard_tools());
    }
}
