//! `muster claude ARGS…` (and the binary started as `claude`): Claude Code's command line, as
//! `claude -p` and the Agent SDKs give it. Each flag is either honoured or accepted with one
//! warning on stderr saying what muster does instead — never a silent change of behaviour.
//! The lists are in docs/claude-compat.md.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Parser;
use muster_config::PermissionMode;

use crate::claude::args::{Output, Request};
use crate::exit::{Exit, ExitError};
use crate::project::Globals;

/// The one argument that prints the command making a `claude` link to this binary (no Claude
/// Code flag has this name).
const LINK_COMMAND: &str = "--muster-link-command";

/// Runs Claude Code's headless mode with `args` (without the program name).
pub fn execute(global: &Globals, args: &[OsString]) -> anyhow::Result<Exit> {
    if args.len() == 1 && args[0] == LINK_COMMAND {
        let binary = std::env::current_exe()?;
        println!(
            "mkdir -p ~/.local/bin && ln -sf '{}' ~/.local/bin/claude",
            binary.display()
        );
        return Ok(Exit::Success);
    }
    let request =
        parse(args).map_err(|refused| ExitError::new(Exit::Usage, refused.to_string()))?;
    crate::claude::main(global, request)
}

/// `claude [-p] [PROMPT]` with Claude Code's flags.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "claude",
    about = "muster behaving as Claude Code's headless mode (`claude -p`, the Agent SDKs)",
    disable_version_flag = true
)]
pub struct ClaudeArgs {
    /// Print the answer and exit (headless mode; always on here).
    #[arg(short = 'p', long = "print")]
    pub print: bool,
    /// The prompt (else read from stdin).
    pub prompt: Option<String>,
    /// text, json or stream-json.
    #[arg(long = "output-format", value_name = "FORMAT", default_value = "text",
          value_parser = ["text", "json", "stream-json"])]
    pub output_format: String,
    /// text or stream-json (user messages as JSON lines on stdin).
    #[arg(long = "input-format", value_name = "FORMAT", default_value = "text",
          value_parser = ["text", "stream-json"])]
    pub input_format: String,
    /// Accepted (stream-json output is always complete).
    #[arg(long)]
    pub verbose: bool,
    /// Partial message events (`stream_event`) while responses stream.
    #[arg(long = "include-partial-messages")]
    pub include_partial_messages: bool,
    /// Hook events in the output.
    #[arg(long = "include-hook-events")]
    pub include_hook_events: bool,
    /// The run's model-turn budget (`budgets.run.turns`).
    #[arg(long = "max-turns", value_name = "N")]
    pub max_turns: Option<u64>,
    /// The run's cost budget in USD (`budgets.run.cost_usd`).
    #[arg(long = "max-budget-usd", value_name = "USD")]
    pub max_budget_usd: Option<f64>,
    /// The model of both modes.
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,
    /// The permission mode (`default`, `acceptEdits`, `plan`, `bypassPermissions`, …).
    #[arg(long = "permission-mode", value_name = "MODE")]
    pub permission_mode: Option<String>,
    /// Allow rules, comma- or space-separated.
    #[arg(long = "allowedTools", alias = "allowed-tools", value_name = "RULES", num_args = 1..)]
    pub allowed_tools: Vec<String>,
    /// Deny rules, comma- or space-separated.
    #[arg(long = "disallowedTools", alias = "disallowed-tools", value_name = "RULES", num_args = 1..)]
    pub disallowed_tools: Vec<String>,
    /// The tool set (only `default` is honoured).
    #[arg(long, value_name = "TOOLS")]
    pub tools: Option<String>,
    /// Replaces the user-supplied part of the system prompt (empty: no change).
    #[arg(
        long = "system-prompt",
        value_name = "TEXT",
        allow_hyphen_values = true
    )]
    pub system_prompt: Option<String>,
    /// `--system-prompt`, read from a file.
    #[arg(long = "system-prompt-file", value_name = "FILE", hide = true)]
    pub system_prompt_file: Option<PathBuf>,
    /// Text appended to the system prompt.
    #[arg(
        long = "append-system-prompt",
        value_name = "TEXT",
        allow_hyphen_values = true
    )]
    pub append_system_prompt: Option<String>,
    /// MCP servers (muster reads `.mcp.json` and its settings instead).
    #[arg(long = "mcp-config", value_name = "CONFIG", num_args = 1..)]
    pub mcp_config: Vec<String>,
    #[arg(long = "strict-mcp-config", hide = true)]
    pub strict_mcp_config: bool,
    /// Settings file or JSON (muster reads its own settings).
    #[arg(long, value_name = "FILE_OR_JSON")]
    pub settings: Option<String>,
    #[arg(long = "setting-sources", value_name = "SOURCES", hide = true)]
    pub setting_sources: Option<String>,
    /// A directory readable and writable beside the workspace.
    #[arg(long = "add-dir", value_name = "DIR", num_args = 1..)]
    pub add_dir: Vec<PathBuf>,
    /// Continue this session (a run id, or a `--session-id` given before).
    #[arg(short = 'r', long, value_name = "ID")]
    pub resume: Option<String>,
    /// Continue the newest completed or interrupted run.
    #[arg(short = 'c', long = "continue")]
    pub continue_: bool,
    /// With --resume/--continue: continue a copy of the run.
    #[arg(long = "fork-session")]
    pub fork_session: bool,
    /// The session's id (a UUID), stored as an alias of the new run.
    #[arg(long = "session-id", value_name = "UUID")]
    pub session_id: Option<String>,
    /// `stdio`: permission asks, plan approvals and questions go to the program on stdin.
    #[arg(long = "permission-prompt-tool", value_name = "TOOL")]
    pub permission_prompt_tool: Option<String>,
    // Flags the SDK's command builder emits that muster accepts with a warning.
    #[arg(long = "fallback-model", hide = true)]
    pub fallback_model: Option<String>,
    #[arg(long, hide = true)]
    pub betas: Option<String>,
    #[arg(long = "task-budget", hide = true)]
    pub task_budget: Option<String>,
    #[arg(long = "resume-session-at", hide = true)]
    pub resume_session_at: Option<String>,
    #[arg(long = "resume-drops-turn", hide = true)]
    pub resume_drops_turn: Option<String>,
    #[arg(long = "session-mirror", hide = true)]
    pub session_mirror: bool,
    #[arg(long = "plugin-dir", hide = true)]
    pub plugin_dir: Vec<String>,
    #[arg(long, hide = true)]
    pub thinking: Option<String>,
    #[arg(long = "max-thinking-tokens", hide = true)]
    pub max_thinking_tokens: Option<String>,
    #[arg(long = "thinking-display", hide = true)]
    pub thinking_display: Option<String>,
    #[arg(long, hide = true)]
    pub effort: Option<String>,
    #[arg(long = "json-schema", hide = true)]
    pub json_schema: Option<String>,
    #[arg(long = "replay-user-messages", hide = true)]
    pub replay_user_messages: bool,
    #[arg(long, hide = true)]
    pub bare: bool,
    #[arg(long = "dangerously-skip-permissions", hide = true)]
    pub dangerously_skip_permissions: bool,
}

/// Why the command line was refused (a usage error, exit 2).
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("{0}")]
    Flags(String),
}

/// Parses `args` (without the program name).
pub fn parse(args: &[OsString]) -> Result<Request, Refused> {
    let parsed = ClaudeArgs::try_parse_from(
        std::iter::once(OsString::from("claude")).chain(args.iter().cloned()),
    )
    .map_err(|error| Refused::Flags(error.render().to_string()))?;
    check(parsed)
}

fn refused(message: impl Into<String>) -> Refused {
    Refused::Flags(message.into())
}

/// Rules given as `--allowedTools "Read,Bash(git:*)" Edit`: one comma-separated list.
fn rules(values: &[String]) -> Option<String> {
    let joined: Vec<&str> = values
        .iter()
        .map(|value| value.trim())
        .filter(|value| !value.is_empty())
        .collect();
    (!joined.is_empty()).then(|| joined.join(","))
}

fn check(args: ClaudeArgs) -> Result<Request, Refused> {
    let output = match args.output_format.as_str() {
        "json" => Output::Json,
        "stream-json" => Output::StreamJson,
        _ => Output::Text,
    };
    let stream_input = args.input_format == "stream-json";
    if stream_input && output != Output::StreamJson {
        return Err(refused(
            "--input-format stream-json needs --output-format stream-json",
        ));
    }
    if args.include_partial_messages && output != Output::StreamJson {
        return Err(refused(
            "--include-partial-messages needs --output-format stream-json",
        ));
    }
    if stream_input && args.prompt.is_some() {
        return Err(refused(
            "--input-format stream-json reads its prompts from stdin: drop the prompt argument",
        ));
    }
    let permission_mode = match &args.permission_mode {
        Some(text) => Some(
            text.parse::<PermissionMode>()
                .map_err(|error| refused(format!("--permission-mode {text:?}: {error}")))?,
        ),
        None if args.dangerously_skip_permissions => Some(PermissionMode::BypassPermissions),
        None => None,
    };
    let mut settings = Vec::new();
    if let Some(turns) = args.max_turns {
        if turns == 0 {
            return Err(refused(
                "--max-turns 0 allows no model turn: give at least 1",
            ));
        }
        settings.push(setting("budgets.run.turns", turns, "--max-turns"));
    }
    if let Some(usd) = args.max_budget_usd {
        if !(usd.is_finite() && usd > 0.0) {
            return Err(refused(format!(
                "--max-budget-usd {usd}: give a positive amount of US dollars"
            )));
        }
        settings.push(setting("budgets.run.cost_usd", usd, "--max-budget-usd"));
    }
    if let Some(allow) = rules(&args.allowed_tools) {
        settings.push(setting("permissions.allow", allow, "--allowedTools"));
    }
    if let Some(deny) = rules(&args.disallowed_tools) {
        settings.push(setting("permissions.deny", deny, "--disallowedTools"));
    }
    if !args.add_dir.is_empty() {
        let dirs: Vec<String> = args
            .add_dir
            .iter()
            .map(|dir| std::path::absolute(dir).unwrap_or_else(|_| dir.clone()))
            .map(|dir| dir.display().to_string())
            .collect();
        settings.push(setting(
            "permissions.additional_directories",
            dirs.join(","),
            "--add-dir",
        ));
    }
    let ask_program = match args.permission_prompt_tool.as_deref() {
        None => false,
        Some("stdio") if stream_input => true,
        Some("stdio") => {
            return Err(refused(
                "--permission-prompt-tool stdio needs --input-format stream-json (the answers \
                 come on stdin)",
            ));
        }
        Some(other) => {
            return Err(refused(format!(
                "--permission-prompt-tool {other:?}: only `stdio` is supported (an MCP tool as \
                 the permission prompt is not)"
            )));
        }
    };
    if args.resume.is_some() && args.continue_ {
        return Err(refused("give --resume ID or --continue, not both"));
    }
    if args.fork_session && args.resume.is_none() && !args.continue_ {
        return Err(refused("--fork-session needs --resume ID or --continue"));
    }
    if let Some(alias) = &args.session_id {
        uuid::Uuid::parse_str(alias)
            .map_err(|error| refused(format!("--session-id {alias:?} is not a UUID ({error})")))?;
        if (args.resume.is_some() || args.continue_) && !args.fork_session {
            return Err(refused(
                "--session-id names a new session: with --resume/--continue it needs \
                 --fork-session",
            ));
        }
    }
    let system_prompt = own_system_prompt(&args)?;
    let append_system_prompt = args
        .append_system_prompt
        .clone()
        .filter(|text| !text.trim().is_empty());
    let warnings = warnings_for(&args);
    Ok(Request {
        system_prompt,
        append_system_prompt,
        output,
        stream_input,
        partial: args.include_partial_messages,
        prompt: args.prompt,
        model: args.model,
        permission_mode,
        settings,
        resume: args.resume,
        continue_last: args.continue_,
        fork: args.fork_session,
        session_alias: args.session_id,
        ask_program,
        mcp_configs: args.mcp_config,
        strict_mcp: args.strict_mcp_config,
        warnings,
    })
}

/// `--system-prompt TEXT` or `--system-prompt-file FILE`: the main agent's prompt in place of
/// its definition's. The SDK's default empty value asks for no change.
fn own_system_prompt(args: &ClaudeArgs) -> Result<Option<String>, Refused> {
    let given = args
        .system_prompt
        .clone()
        .filter(|text| !text.trim().is_empty());
    match (given, &args.system_prompt_file) {
        (Some(_), Some(_)) => Err(refused(
            "give --system-prompt or --system-prompt-file, not both",
        )),
        (Some(text), None) => Ok(Some(text)),
        (None, Some(file)) => std::fs::read_to_string(file)
            .map(|text| Some(text).filter(|text| !text.trim().is_empty()))
            .map_err(|error| refused(format!("--system-prompt-file {}: {error}", file.display()))),
        (None, None) => Ok(None),
    }
}

fn setting(key: &str, value: impl ToString, flag: &str) -> (String, String, String) {
    (key.to_owned(), value.to_string(), flag.to_owned())
}

/// One line for each flag given that muster accepts without doing what Claude Code does.
fn warnings_for(args: &ClaudeArgs) -> Vec<String> {
    let mut warnings = Vec::new();
    let mut warn = |given: bool, flag: &str, instead: &str| {
        if given {
            warnings.push(format!("{flag} is accepted and ignored: {instead}"));
        }
    };
    warn(
        args.tools.as_deref().is_some_and(|t| t != "default"),
        "--tools",
        "every agent keeps its definition's tools; narrow them with --disallowedTools",
    );
    warn(
        args.settings.is_some()
            || args
                .setting_sources
                .as_deref()
                .is_some_and(|s| !s.is_empty()),
        "--settings",
        "muster reads its own settings layers (`muster config show`)",
    );
    warn(
        args.include_hook_events,
        "--include-hook-events",
        "hooks run, but their events are not printed",
    );
    warn(
        args.fallback_model.is_some(),
        "--fallback-model",
        "muster retries the same model",
    );
    warn(args.betas.is_some(), "--betas", "no beta headers are sent");
    warn(
        args.task_budget.is_some(),
        "--task-budget",
        "use --max-budget-usd or muster's budgets",
    );
    warn(
        args.resume_session_at.is_some() || args.resume_drops_turn.is_some(),
        "--resume-session-at",
        "a resumed run continues from its last committed turn",
    );
    warn(
        args.session_mirror,
        "--session-mirror",
        "the run is in muster's store",
    );
    warn(
        !args.plugin_dir.is_empty(),
        "--plugin-dir",
        "muster loads no Claude Code plugins",
    );
    warn(
        args.thinking.is_some() || args.max_thinking_tokens.is_some() || args.effort.is_some(),
        "--thinking/--max-thinking-tokens/--effort",
        "the model's settings decide",
    );
    warn(
        args.thinking_display.is_some(),
        "--thinking-display",
        "thinking is shown as the model sends it",
    );
    warn(
        args.json_schema.is_some(),
        "--json-schema",
        "no structured output is produced",
    );
    warn(
        args.replay_user_messages,
        "--replay-user-messages",
        "user messages are not echoed",
    );
    warn(args.bare, "--bare", "muster's own loading rules apply");
    warnings
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test assertions fail loudly")]

    use super::*;

    fn parsed(args: &[&str]) -> Result<Request, Refused> {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        parse(&args)
    }

    /// The command line the Python SDK builds for `query("…")` parses, and its empty
    /// `--system-prompt` changes nothing.
    #[test]
    fn the_sdk_command_line_parses_without_warnings() {
        let request = parsed(&[
            "--output-format",
            "stream-json",
            "--verbose",
            "--system-prompt",
            "",
            "--setting-sources=",
            "--permission-prompt-tool",
            "stdio",
            "--input-format",
            "stream-json",
        ])
        .unwrap();
        assert_eq!(request.output, Output::StreamJson);
        assert!(request.stream_input && request.ask_program);
        // `--setting-sources=` (empty: no Claude Code settings files) asks for nothing muster
        // would read.
        assert!(request.warnings.is_empty(), "{:?}", request.warnings);
    }

    /// Each refused command line, and the words of its refusal.
    #[test]
    fn bad_command_lines_are_refused_with_what_to_do() {
        let rows: &[(&[&str], &str)] = &[
            (&["-p", "hi", "--max-turns", "0"], "at least 1"),
            (&["-p", "hi", "--max-turns"], "a value is required"),
            (&["-p", "hi", "--output-format", "yaml"], "invalid value"),
            (&["--input-format", "stream-json"], "needs --output-format"),
            (&["-p", "hi", "--permission-mode", "sideways"], "sideways"),
            (&["-p", "hi", "--session-id", "nope"], "not a UUID"),
            (&["-p", "hi", "--fork-session"], "needs --resume"),
            (&["-p", "hi", "--max-budget-usd", "0"], "positive"),
            (
                &["-p", "hi", "--permission-prompt-tool", "mcp__x__y"],
                "only `stdio`",
            ),
        ];
        for (args, words) in rows {
            let error = parsed(args)
                .err()
                .unwrap_or_else(|| panic!("{args:?} parsed"));
            assert!(error.to_string().contains(words), "{args:?}: {error}");
        }
    }

    #[test]
    fn budgets_and_rules_become_settings() {
        let request = parsed(&[
            "-p",
            "hi",
            "--max-turns",
            "3",
            "--max-budget-usd",
            "0.5",
            "--allowedTools",
            "Read,Bash(git status)",
            "--disallowedTools",
            "WebFetch",
        ])
        .unwrap();
        let keys: Vec<&str> = request.settings.iter().map(|s| s.0.as_str()).collect();
        assert_eq!(
            keys,
            [
                "budgets.run.turns",
                "budgets.run.cost_usd",
                "permissions.allow",
                "permissions.deny"
            ]
        );
        assert_eq!(request.prompt.as_deref(), Some("hi"));
    }
}
