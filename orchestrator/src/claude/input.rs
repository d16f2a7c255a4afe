//! `--input-format stream-json`: stdin's JSON lines, read on a thread of their own. User
//! messages become prompts (run one after the other by the session); the SDK's control
//! requests are answered here at once — `initialize` (its hook callbacks registered),
//! `interrupt` (the running turn's
//! `interrupt_turn`), `mcp_status`, `set_model` and `set_permission_mode` (queued with the
//! prompts: the prompts after it use the model, the main agent the mode; a running turn takes
//! the mode at its next tool-call boundary) — and any other is answered with an error naming it;
//! `control_response`s go to the request waiting for them. A line that is not a message is
//! reported on stderr and skipped. At EOF the prompts already read still run, then the
//! process ends.

use std::fs::File;
use std::io::BufRead as _;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender};

use serde_json::{Value, json};

use super::Shared;
use super::hook_callbacks::ProgramHooks;

/// What the session reads from stdin.
pub(crate) enum Input {
    Prompt(String),
    /// `set_model`: the prompts after it use this model.
    ModelChange(String),
    /// `set_permission_mode`: the main agent's mode from the next prompt on.
    ModeChange(muster_config::PermissionMode),
}

/// Starts reading `stdin`: the prompts, in order, until EOF.
pub(crate) fn spawn_reader(
    stdin: File,
    shared: Arc<Shared>,
    hooks: Arc<ProgramHooks>,
) -> Receiver<Input> {
    let (sender, receiver) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("claude-stdin".into())
        .spawn(move || read_lines(stdin, &shared, &hooks, &sender));
    if let Err(error) = spawned {
        eprintln!("muster claude: stdin could not be read (no thread: {error})");
    }
    receiver
}

fn read_lines(stdin: File, shared: &Shared, hooks: &ProgramHooks, prompts: &Sender<Input>) {
    for (index, line) in std::io::BufReader::new(stdin).lines().enumerate() {
        let line = match line {
            Ok(line) => line,
            Err(error) => {
                eprintln!("muster claude: stdin could not be read ({error}); no more prompts");
                break;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(&line) {
            Ok(message) => handle(&message, index + 1, shared, hooks, prompts),
            Err(error) => eprintln!(
                "muster claude: stdin line {} is not JSON ({error}); it was skipped (each line \
                 must be one message, e.g. {{\"type\":\"user\",\"message\":{{\"role\":\"user\",\
                 \"content\":\"…\"}}}})",
                index + 1
            ),
        }
    }
    shared.abandon_requests();
}

fn handle(
    message: &Value,
    line: usize,
    shared: &Shared,
    hooks: &ProgramHooks,
    prompts: &Sender<Input>,
) {
    match message["type"].as_str() {
        Some("user") => match prompt_text(&message["message"]["content"]) {
            Some(text) => {
                let _ = prompts.send(Input::Prompt(text));
            }
            None => eprintln!(
                "muster claude: stdin line {line}: a user message without text was skipped"
            ),
        },
        Some("control_request") => control(message, shared, hooks, prompts),
        Some("control_response") => shared.answered(&message["response"]),
        Some("control_cancel_request") => {
            shared.answered(
                &json!({"request_id": message["request_id"], "subtype": "error",
                "error": "cancelled by the program"}),
            );
        }
        Some("keep_alive") => {}
        other => eprintln!(
            "muster claude: stdin line {line}: a message of type {} was skipped (user, \
             control_request and control_response are read)",
            other.map_or("(none)".to_owned(), |t| format!("{t:?}"))
        ),
    }
}

/// A user message's text: a string, or its text blocks joined.
fn prompt_text(content: &Value) -> Option<String> {
    let text = match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter(|block| block["type"] == "text")
            .filter_map(|block| block["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => return None,
    };
    (!text.trim().is_empty()).then_some(text)
}

/// Answers one control request of the program.
fn control(message: &Value, shared: &Shared, hooks: &ProgramHooks, prompts: &Sender<Input>) {
    let id = message["request_id"].clone();
    let request = &message["request"];
    let answer = match request["subtype"].as_str() {
        Some("initialize") => Ok(initialized(request, hooks)),
        Some("interrupt") => {
            shared.interrupt();
            Ok(json!({}))
        }
        Some("mcp_status") => Ok(json!({"mcpServers": []})),
        Some("set_model") => match request["model"].as_str() {
            Some(model) if !model.trim().is_empty() => {
                let _ = prompts.send(Input::ModelChange(model.to_owned()));
                Ok(json!({}))
            }
            _ => Err(
                "set_model without a model: muster keeps the session's model (name one to \
                 change it)"
                    .to_owned(),
            ),
        },
        Some("set_permission_mode") => {
            let given = request["mode"].as_str().unwrap_or_default();
            match given.parse::<muster_config::PermissionMode>() {
                Ok(mode) => {
                    let mode = shared.set_mode(mode);
                    let _ = prompts.send(Input::ModeChange(mode));
                    Ok(json!({}))
                }
                Err(error) => Err(format!("set_permission_mode {given:?}: {error}")),
            }
        }
        Some(other) => Err(format!(
            "muster does not support the control request {other:?} (supported: initialize, \
             interrupt, mcp_status, set_model, set_permission_mode)"
        )),
        None => Err("a control request without a subtype".to_owned()),
    };
    let response = match answer {
        Ok(response) => json!({"subtype": "success", "request_id": id, "response": response}),
        Err(error) => {
            eprintln!("muster claude: {error}");
            json!({"subtype": "error", "request_id": id, "error": error})
        }
    };
    shared.write(&json!({"type": "control_response", "response": response}));
}

/// `initialize`'s answer, its hook callbacks registered: they fire beside the settings'
/// hooks, `onFailure` honoured.
fn initialized(request: &Value, hooks: &ProgramHooks) -> Value {
    for warning in hooks.register(&request["hooks"]) {
        eprintln!("muster claude: warning: {warning}");
    }
    for warning in unused_fields(request) {
        eprintln!("muster claude: warning: {warning}");
    }
    json!({
        "hooks_applied": true,
        "hook_on_failure_supported": true,
        "commands": [],
        "agents": [],
        "output_style": "default",
        "available_output_styles": ["default"],
        "models": [],
        "claude_code_version": super::CLAUDE_CODE_VERSION,
        "muster_version": env!("CARGO_PKG_VERSION"),
    })
}

/// What `initialize` asks that muster does not do, one line each (never a silent change).
fn unused_fields(request: &Value) -> Vec<String> {
    let given = |key: &str| match &request[key] {
        Value::Null | Value::Bool(false) => false,
        Value::Object(fields) => !fields.is_empty(),
        Value::Array(items) => !items.is_empty(),
        _ => true,
    };
    [
        (
            "agents",
            "the program's agent definitions are not used: muster's agents come from \
             .claude/agents and .muster/agents",
        ),
        (
            "skills",
            "the program's skills filter is not applied: every skill of the project is offered",
        ),
        (
            "excludeDynamicSections",
            "excludeDynamicSections is not applied: muster's prompt sections stay",
        ),
        (
            "systemPromptSnapshot",
            "systemPromptSnapshot is not used: the main agent's prompt is built as usual",
        ),
        (
            "forwardSubagentText",
            "forwardSubagentText is not needed: subagents' messages are always sent, with \
             their parent_tool_use_id",
        ),
    ]
    .into_iter()
    .filter(|(key, _)| given(key))
    .map(|(key, what)| format!("initialize's {key}: {what}"))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_initialize_field_muster_does_not_use_is_named() {
        let request = json!({"subtype": "initialize", "hooks": null, "agents": {"x": {}},
            "skills": [], "excludeDynamicSections": true, "forwardSubagentText": false});
        let warnings = unused_fields(&request);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("agents") && warnings[1].contains("excludeDynamicSections"));
    }

    #[test]
    fn a_user_message_gives_its_text() {
        let rows = [
            (json!("hello"), Some("hello")),
            (
                json!([{"type": "text", "text": "a"}, {"type": "image"}]),
                Some("a"),
            ),
            (json!([{"type": "image"}]), None),
            (json!("  "), None),
            (json!(7), None),
        ];
        for (content, text) in rows {
            assert_eq!(prompt_text(&content).as_deref(), text, "{content}");
        }
    }
}
