//! What a hook's ending means, as Claude Code reads it, and how the endings of the hooks that
//! ran for one event combine.
//!
//! | ending | meaning |
//! |---|---|
//! | exit 0 | success; stdout is JSON (`hookSpecificOutput`, `decision`, `continue`, `systemMessage`, …) or, for `UserPromptSubmit` and `SessionStart`, text added as context (otherwise ignored) |
//! | exit 2 | blocking: stderr is the reason (PreToolUse: the call is refused; Stop, SubagentStop, TeammateIdle: the agent keeps working; UserPromptSubmit: the prompt is erased; TaskCreated/TaskCompleted: rolled back; PostToolUse: stderr goes to the model) |
//! | any other exit, a signal | a non-blocking error: stderr is shown, the run goes on |
//! | cannot start, timeout, more than 1 MB of output | a non-blocking error |
//! | an `http` hook: 2xx | as exit 0, the body as stdout |
//! | an `http` hook: another status, no connection | a non-blocking error (it cannot exit 2: a 2xx body's decision blocks) |
//! | a named project file changed since trust | the hook does not run; a blocking error |
//!
//! A handler with `"onFailure": "block"` turns its non-blocking errors into blocking ones.

use muster_config::hooks::{HookEvent, OnFailure};
use serde_json::Value;

use super::process::ProcessEnd;

/// A PreToolUse hook's permission decision.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum HookPermission {
    // Ordered by precedence, lowest first: deny > defer > ask > allow.
    Allow,
    Ask,
    Defer,
    Deny,
}

impl HookPermission {
    fn parse(text: &str) -> Option<HookPermission> {
        match text {
            "allow" | "approve" => Some(HookPermission::Allow),
            "ask" => Some(HookPermission::Ask),
            "defer" => Some(HookPermission::Defer),
            "deny" | "block" => Some(HookPermission::Deny),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            HookPermission::Allow => "allow",
            HookPermission::Ask => "ask",
            HookPermission::Defer => "defer",
            HookPermission::Deny => "deny",
        }
    }
}

/// What one hook said.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HookVerdict {
    /// PreToolUse: allow, ask, defer or deny, with the reason.
    pub permission: Option<(HookPermission, String)>,
    /// Blocking (exit 2, `decision: "block"`, a blocking failure), with the reason.
    pub block: Option<String>,
    /// PreToolUse: the input the call runs with instead.
    pub updated_input: Option<Value>,
    /// Text added to the model's context.
    pub context: Vec<String>,
    /// `continue: false`: the agent stops, with `stopReason`.
    pub stop: Option<String>,
    /// For the person (`systemMessage`, a non-blocking error's stderr).
    pub messages: Vec<String>,
}

/// The text of an ending for messages.
fn failure_text(command: &str, end: &ProcessEnd) -> Option<String> {
    let what = match end {
        ProcessEnd::Exited {
            code: Some(0 | 2), ..
        } => return None,
        ProcessEnd::Exited {
            code: Some(code),
            stderr,
            ..
        } => format!("exited with {code}: {}", stderr.trim()),
        ProcessEnd::Exited { code: None, .. } => "was killed by a signal".to_owned(),
        ProcessEnd::CannotStart(why) => format!("could not start: {why}"),
        ProcessEnd::TimedOut(after) => format!(
            "timed out after {} s; its process group was killed",
            after.as_secs_f64()
        ),
        ProcessEnd::TooMuchOutput => "printed more than 1 MB; its output was dropped".to_owned(),
        ProcessEnd::HttpStatus { status, body } => {
            format!(
                "answered HTTP {status}: {}",
                crate::model::truncate(body.trim(), 200)
            )
        }
    };
    Some(format!("hook `{command}` {what}"))
}

/// What `end` of the hook `command` of `event` means (see the module's table).
pub fn interpret(
    event: HookEvent,
    command: &str,
    on_failure: OnFailure,
    end: &ProcessEnd,
) -> HookVerdict {
    if let Some(failure) = failure_text(command, end) {
        return failed(on_failure, failure);
    }
    let mut verdict = HookVerdict::default();
    let ProcessEnd::Exited {
        code,
        stdout,
        stderr,
    } = end
    else {
        return verdict;
    };
    if *code == Some(2) {
        let reason = stderr.trim();
        verdict.block = Some(if reason.is_empty() {
            format!("blocked by hook `{command}`")
        } else {
            reason.to_owned()
        });
        return verdict;
    }
    let text = stdout.trim();
    match serde_json::from_str::<Value>(text) {
        Ok(json @ Value::Object(_)) => read_json(event, &json, &mut verdict),
        _ if text.is_empty() => {}
        // Plain text is context for these two events, and ignored for the others.
        _ if matches!(event, HookEvent::UserPromptSubmit | HookEvent::SessionStart) => {
            verdict.context.push(text.to_owned());
        }
        _ => {}
    }
    verdict
}

/// What a hook callback's answer means (a program's callback, see [`super::callbacks`]): read
/// as a command hook's JSON output on exit 0; anything but an object decides nothing.
pub fn interpret_json(event: HookEvent, json: &Value) -> HookVerdict {
    let mut verdict = HookVerdict::default();
    if json.is_object() {
        read_json(event, json, &mut verdict);
    }
    verdict
}

/// A hook that failed without an answer: `what` blocks under `"onFailure": "block"`, else it
/// is a message and the run goes on.
pub fn failed(on_failure: OnFailure, what: String) -> HookVerdict {
    let mut verdict = HookVerdict::default();
    match on_failure {
        OnFailure::Block => verdict.block = Some(what),
        OnFailure::Continue => verdict.messages.push(what),
    }
    verdict
}

fn read_json(event: HookEvent, json: &Value, verdict: &mut HookVerdict) {
    let text = |value: &Value, key: &str| value.get(key).and_then(Value::as_str).map(str::to_owned);
    if json.get("continue").and_then(Value::as_bool) == Some(false) {
        verdict.stop = Some(text(json, "stopReason").unwrap_or_else(|| "stopped by a hook".into()));
    }
    if let Some(message) = text(json, "systemMessage") {
        verdict.messages.push(message);
    }
    let reason = text(json, "reason").unwrap_or_default();
    match json.get("decision").and_then(Value::as_str) {
        Some("block") if event == HookEvent::PreToolUse => {
            verdict.permission = Some((HookPermission::Deny, reason));
        }
        Some("approve") if event == HookEvent::PreToolUse => {
            verdict.permission = Some((HookPermission::Allow, reason));
        }
        Some("block") => {
            verdict.block = Some(if reason.is_empty() {
                "blocked by a hook".into()
            } else {
                reason
            });
        }
        _ => {}
    }
    let Some(specific) = json.get("hookSpecificOutput") else {
        return;
    };
    if let Some(context) = text(specific, "additionalContext") {
        verdict.context.push(context);
    }
    if event == HookEvent::PermissionRequest {
        // `decision.behavior` allow or deny, with `message` (the deny reason).
        let decision = specific.get("decision");
        if let Some(permission) = decision
            .and_then(|decision| decision.get("behavior"))
            .and_then(Value::as_str)
            .and_then(|behavior| match behavior {
                "allow" => Some(HookPermission::Allow),
                "deny" => Some(HookPermission::Deny),
                _ => None,
            })
        {
            let message = decision
                .and_then(|decision| text(decision, "message"))
                .unwrap_or_default();
            verdict.permission = Some((permission, message));
        }
    }
    if event == HookEvent::PreToolUse {
        if let Some(permission) = specific
            .get("permissionDecision")
            .and_then(Value::as_str)
            .and_then(HookPermission::parse)
        {
            let reason = text(specific, "permissionDecisionReason").unwrap_or_default();
            verdict.permission = Some((permission, reason));
        }
        if let Some(input @ Value::Object(_)) = specific.get("updatedInput") {
            verdict.updated_input = Some(input.clone());
        }
    }
}

/// The hooks of one event, combined: the strongest permission (deny > defer > ask > allow;
/// the first hook's reason among equals), every block reason, context and message, and the
/// `updatedInput` of an allowing hook (the first, when several give one).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HookOutcome {
    /// How many hooks ran.
    pub ran: usize,
    pub permission: Option<(HookPermission, String)>,
    pub block: Option<String>,
    pub updated_input: Option<Value>,
    pub context: Vec<String>,
    pub stop: Option<String>,
    pub messages: Vec<String>,
}

impl HookOutcome {
    pub fn combine(verdicts: Vec<HookVerdict>) -> HookOutcome {
        let mut outcome = HookOutcome {
            ran: verdicts.len(),
            ..HookOutcome::default()
        };
        let mut blocks = Vec::new();
        for verdict in verdicts {
            if let Some((permission, reason)) = verdict.permission {
                let stronger = outcome
                    .permission
                    .as_ref()
                    .is_none_or(|(current, _)| permission > *current);
                if stronger {
                    outcome.permission = Some((permission, reason));
                }
                if permission == HookPermission::Allow && outcome.updated_input.is_none() {
                    outcome.updated_input = verdict.updated_input;
                }
            }
            blocks.extend(verdict.block);
            outcome.context.extend(verdict.context);
            outcome.messages.extend(verdict.messages);
            if outcome.stop.is_none() {
                outcome.stop = verdict.stop;
            }
        }
        if !blocks.is_empty() {
            outcome.block = Some(blocks.join("\n"));
        }
        outcome
    }

    /// PreToolUse: the decision the hooks make of a call, a block being a deny.
    pub fn tool_permission(&self) -> Option<(HookPermission, String)> {
        match (&self.block, &self.permission) {
            (Some(reason), _) => Some((HookPermission::Deny, reason.clone())),
            (None, permission) => permission.clone(),
        }
    }
}

/// The PreToolUse hooks' combined decision of one call, as its `hook_decision` record keeps it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HookDecision {
    /// `None`: the hooks that ran decided nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission: Option<HookPermission>,
    #[serde(default)]
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_input: Option<Value>,
    /// `additionalContext`, and what the hooks said for the person.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context: Vec<String>,
    /// `continue: false`: the `stopReason` of a hook that stops the agent (the call does not
    /// run, the turn ends). Kept with the decision so a resume stops the agent again without
    /// running the hooks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<String>,
}

impl HookDecision {
    /// The combined outcome of a call's PreToolUse hooks.
    pub fn of(outcome: HookOutcome) -> HookDecision {
        let (permission, reason) = outcome
            .tool_permission()
            .map_or((None, String::new()), |(p, r)| (Some(p), r));
        HookDecision {
            permission,
            reason,
            updated_input: outcome.updated_input,
            context: outcome
                .context
                .into_iter()
                .chain(outcome.messages)
                .collect(),
            stop: outcome.stop,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn exited(code: i32, stdout: &str, stderr: &str) -> ProcessEnd {
        ProcessEnd::Exited {
            code: Some(code),
            stdout: stdout.into(),
            stderr: stderr.into(),
        }
    }

    /// The failure table: each ending, under `continue` and under `block`.
    #[test]
    fn each_ending_means_what_claude_code_says() {
        let deny = r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"no rm"}}"#;
        // (ending, blocks with `continue`, a message with `continue`, blocks with `block`)
        let cases: Vec<(ProcessEnd, bool, bool, bool)> = vec![
            (exited(0, "", ""), false, false, false),
            (exited(0, "not json {", ""), false, false, false),
            (exited(2, "{}", "rm is not allowed"), true, false, true),
            (exited(1, "", "oops"), false, true, true),
            (exited(127, "", "sh: guard: not found"), false, true, true),
            (
                ProcessEnd::Exited {
                    code: None,
                    stdout: String::new(),
                    stderr: String::new(),
                },
                false,
                true,
                true,
            ),
            (ProcessEnd::CannotStart("no sh".into()), false, true, true),
            (
                ProcessEnd::TimedOut(Duration::from_secs(1)),
                false,
                true,
                true,
            ),
            (ProcessEnd::TooMuchOutput, false, true, true),
        ];
        for (end, blocks, message, blocks_strict) in cases {
            let lenient = interpret(HookEvent::PreToolUse, "g", OnFailure::Continue, &end);
            assert_eq!(lenient.block.is_some(), blocks, "{end:?}");
            assert_eq!(!lenient.messages.is_empty(), message, "{end:?}");
            let strict = interpret(HookEvent::PreToolUse, "g", OnFailure::Block, &end);
            assert_eq!(strict.block.is_some(), blocks_strict, "{end:?}");
        }
        let said = interpret(
            HookEvent::PreToolUse,
            "g",
            OnFailure::Continue,
            &exited(0, deny, ""),
        );
        assert_eq!(
            said.permission,
            Some((HookPermission::Deny, "no rm".into()))
        );
        let exit_two = interpret(
            HookEvent::PreToolUse,
            "g",
            OnFailure::Continue,
            &exited(2, deny, "why"),
        );
        assert_eq!(exit_two.permission, None, "stdout is ignored on exit 2");
        assert_eq!(exit_two.block.as_deref(), Some("why"));
    }

    #[test]
    fn outputs_are_read_per_event() {
        let text = interpret(
            HookEvent::UserPromptSubmit,
            "c",
            OnFailure::Continue,
            &exited(0, "today is Monday\n", ""),
        );
        assert_eq!(text.context, ["today is Monday"]);
        let ignored = interpret(
            HookEvent::PostToolUse,
            "c",
            OnFailure::Continue,
            &exited(0, "hello", ""),
        );
        assert!(ignored.context.is_empty());
        let stop = interpret(
            HookEvent::Stop,
            "c",
            OnFailure::Continue,
            &exited(
                0,
                r#"{"decision":"block","reason":"run the tests","systemMessage":"m","continue":false,"stopReason":"enough"}"#,
                "",
            ),
        );
        assert_eq!(stop.block.as_deref(), Some("run the tests"));
        assert_eq!(stop.messages, ["m"]);
        assert_eq!(stop.stop.as_deref(), Some("enough"));
        let updated = interpret(
            HookEvent::PreToolUse,
            "c",
            OnFailure::Continue,
            &exited(
                0,
                r#"{"hookSpecificOutput":{"permissionDecision":"allow","updatedInput":{"command":"ls"},"additionalContext":"ctx"}}"#,
                "",
            ),
        );
        assert_eq!(
            updated.updated_input,
            Some(serde_json::json!({"command": "ls"}))
        );
        assert_eq!(updated.context, ["ctx"]);
    }

    /// A PermissionRequest hook answers with `decision.behavior` and `message`.
    #[test]
    fn a_permission_request_hook_says_allow_or_deny() {
        let cases = [
            (
                r#"{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"deny","message":"not on main"}}}"#,
                Some((HookPermission::Deny, "not on main".to_owned())),
            ),
            (
                r#"{"hookSpecificOutput":{"decision":{"behavior":"allow","updatedInput":{"command":"ls"}}}}"#,
                Some((HookPermission::Allow, String::new())),
            ),
            (
                r#"{"hookSpecificOutput":{"decision":{"behavior":"maybe"}}}"#,
                None,
            ),
            (
                r#"{"hookSpecificOutput":{"permissionDecision":"deny"}}"#,
                None,
            ),
        ];
        for (stdout, permission) in cases {
            let said = interpret(
                HookEvent::PermissionRequest,
                "c",
                OnFailure::Continue,
                &exited(0, stdout, ""),
            );
            assert_eq!(said.permission, permission, "{stdout}");
            assert_eq!(said.updated_input, None, "{stdout}");
        }
    }

    #[test]
    fn decisions_combine_deny_over_defer_over_ask_over_allow() {
        let said = |permission: HookPermission, reason: &str| HookVerdict {
            permission: Some((permission, reason.into())),
            ..HookVerdict::default()
        };
        let cases = [
            (
                vec![
                    said(HookPermission::Allow, "a"),
                    said(HookPermission::Ask, "b"),
                ],
                HookPermission::Ask,
                "b",
            ),
            (
                vec![
                    said(HookPermission::Defer, "d"),
                    said(HookPermission::Ask, "b"),
                ],
                HookPermission::Defer,
                "d",
            ),
            (
                vec![
                    said(HookPermission::Allow, "a"),
                    said(HookPermission::Deny, "x"),
                    said(HookPermission::Defer, "d"),
                ],
                HookPermission::Deny,
                "x",
            ),
            (
                vec![
                    said(HookPermission::Allow, "first"),
                    said(HookPermission::Allow, "second"),
                ],
                HookPermission::Allow,
                "first",
            ),
        ];
        for (verdicts, permission, reason) in cases {
            let outcome = HookOutcome::combine(verdicts);
            assert_eq!(
                outcome.tool_permission(),
                Some((permission, reason.to_owned()))
            );
        }
        let blocked = HookOutcome::combine(vec![
            said(HookPermission::Allow, "a"),
            HookVerdict {
                block: Some("exit 2".into()),
                ..HookVerdict::default()
            },
        ]);
        assert_eq!(
            blocked.tool_permission(),
            Some((HookPermission::Deny, "exit 2".into()))
        );
    }
}
