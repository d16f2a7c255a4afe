//! What a `muster claude` session was asked for: Claude Code's command line, checked
//! (`cli/claude.rs` parses it; the lists are in docs/claude-compat.md).

use muster_config::PermissionMode;

/// How the answer is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Text,
    Json,
    StreamJson,
}

/// The checked command line: what a session does.
#[derive(Debug, Clone)]
pub struct Request {
    pub output: Output,
    pub stream_input: bool,
    pub partial: bool,
    pub prompt: Option<String>,
    pub model: Option<String>,
    pub permission_mode: Option<PermissionMode>,
    /// Settings given as flags: (key, value, flag).
    pub settings: Vec<(String, String, String)>,
    pub resume: Option<String>,
    pub continue_last: bool,
    pub fork: bool,
    pub session_alias: Option<String>,
    /// `--system-prompt` (or its file): the main agent's prompt in place of its definition's
    /// (`None` for the SDK's default empty value).
    pub system_prompt: Option<String>,
    /// `--append-system-prompt`: text after the main agent's own prompt.
    pub append_system_prompt: Option<String>,
    /// `--permission-prompt-tool stdio`.
    pub ask_program: bool,
    /// `--mcp-config`: files or JSON texts of `{"mcpServers": {…}}`, the session's servers.
    pub mcp_configs: Vec<String>,
    /// `--strict-mcp-config`: only those servers, none of the configured ones.
    pub strict_mcp: bool,
    /// One line each, said once on stderr.
    pub warnings: Vec<String>,
}
