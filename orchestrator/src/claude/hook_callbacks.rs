//! The SDK's hook callbacks: the `hooks` of the program's `initialize` (`{EVENT: [{matcher,
//! hookCallbackIds, timeout, onFailure}]}`) are registered here, and each time an agent of this
//! process fires a matching event the runner calls them as Claude Code does — a
//! `hook_callback` control request `{callback_id, input, tool_use_id}` — and reads the answer
//! as a command hook's JSON output (`muster_agents::hooks::callbacks`): they narrow as hooks do.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use muster_agents::hooks::{HookCallback, HookCallbacks};
use muster_config::hooks::{HookEvent, HookMatcher, OnFailure};
use serde_json::{Value, json};

use super::Shared;

/// A callback's timeout when its matcher names none (the SDK's documented default).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// One registered callback and what selects it.
#[derive(Debug)]
struct Registration {
    event: HookEvent,
    matcher: HookMatcher,
    callback: HookCallback,
}

/// The callbacks the program registered, called through its stdin/stdout.
pub(crate) struct ProgramHooks {
    shared: Arc<Shared>,
    registered: Mutex<Vec<Registration>>,
}

impl std::fmt::Debug for ProgramHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgramHooks")
            .field("registered", &self.registered)
            .finish_non_exhaustive()
    }
}

impl ProgramHooks {
    pub(crate) fn new(shared: Arc<Shared>) -> ProgramHooks {
        ProgramHooks {
            shared,
            registered: Mutex::new(Vec::new()),
        }
    }

    /// Registers `initialize`'s `hooks` (replacing an earlier registration); what cannot be
    /// registered is said in the returned warnings, one each.
    pub(crate) fn register(&self, hooks: &Value) -> Vec<String> {
        let (registrations, warnings) = registrations(hooks);
        *self
            .registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = registrations;
        warnings
    }
}

/// Reads `initialize`'s `hooks` object.
fn registrations(hooks: &Value) -> (Vec<Registration>, Vec<String>) {
    let mut registered = Vec::new();
    let mut warnings = Vec::new();
    let Some(events) = hooks.as_object() else {
        return (registered, warnings);
    };
    for (name, matchers) in events {
        let Some(event) = HookEvent::parse(name) else {
            warnings.push(format!(
                "hook callbacks for {name:?} are never called: muster has no such moment"
            ));
            continue;
        };
        for entry in matchers.as_array().map(Vec::as_slice).unwrap_or_default() {
            let matcher = match entry["matcher"].as_str() {
                None => HookMatcher::All,
                Some(text) => match HookMatcher::parse(text) {
                    Ok(matcher) => matcher,
                    Err(error) => {
                        warnings.push(format!(
                            "{name} hook callbacks with matcher {text:?} are never called: \
                             it is not a valid pattern ({error})"
                        ));
                        continue;
                    }
                },
            };
            let timeout = entry["timeout"]
                .as_f64()
                .filter(|seconds| seconds.is_finite() && *seconds > 0.0)
                .map_or(DEFAULT_TIMEOUT, Duration::from_secs_f64);
            // As Claude Code reads it: unset or "continue" is no decision on a failure, any
            // other value blocks; the events that keep an agent working ignore it.
            let blocks = !matches!(entry["onFailure"].as_str(), None | Some("continue"));
            let keeps_working = matches!(
                event,
                HookEvent::Stop
                    | HookEvent::SubagentStop
                    | HookEvent::TaskCompleted
                    | HookEvent::TeammateIdle
            );
            let on_failure = if blocks && !keeps_working {
                OnFailure::Block
            } else {
                OnFailure::Continue
            };
            let ids = entry["hookCallbackIds"].as_array();
            for id in ids.into_iter().flatten().filter_map(Value::as_str) {
                registered.push(Registration {
                    event,
                    matcher: matcher.clone(),
                    callback: HookCallback {
                        id: id.to_owned(),
                        timeout,
                        on_failure,
                    },
                });
            }
        }
    }
    (registered, warnings)
}

impl HookCallbacks for ProgramHooks {
    fn has(&self, event: HookEvent) -> bool {
        self.registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|registration| registration.event == event)
    }

    fn any(&self) -> bool {
        !self
            .registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }

    fn matching(&self, event: HookEvent, subject: Option<&str>) -> Vec<HookCallback> {
        self.registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|registration| {
                registration.event == event && registration.matcher.matches(subject)
            })
            .map(|registration| registration.callback.clone())
            .collect()
    }

    fn call(&self, callback: &HookCallback, input: &Value) -> Result<Value, String> {
        let mut input = input.clone();
        // The program knows its session by the id the output names (its alias when given).
        if let Some(fields) = input.as_object_mut() {
            fields.insert("session_id".into(), json!(self.shared.session_id()));
        }
        let tool_use_id = input.get("tool_use_id").cloned().unwrap_or(Value::Null);
        let answer = self.shared.request_within(
            json!({
                "subtype": "hook_callback",
                "callback_id": callback.id,
                "input": input,
                "tool_use_id": tool_use_id,
            }),
            callback.timeout,
        )?;
        checked(answer)
    }
}

/// An answer Claude Code would reject is a failure (so an `onFailure: "block"` callback that
/// answers `permissionDecision: "Deny"` blocks rather than deciding nothing).
fn checked(answer: Value) -> Result<Value, String> {
    if !answer.is_object() {
        return Err(format!("answered {answer}, which is not a JSON object"));
    }
    let decision = &answer["hookSpecificOutput"]["permissionDecision"];
    if !decision.is_null() && !matches!(decision.as_str(), Some("allow" | "deny" | "ask" | "defer"))
    {
        return Err(format!(
            "answered permissionDecision {decision}, which is not allow, deny, ask or defer"
        ));
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initializes_hooks_register_each_callback_with_its_matcher_timeout_and_failure() {
        let (registered, warnings) = registrations(&json!({
            "PreToolUse": [
                {"matcher": "Bash", "hookCallbackIds": ["hook_0", "hook_1"], "timeout": 5,
                 "onFailure": "block"},
                {"matcher": null, "hookCallbackIds": ["hook_2"]},
                {"matcher": "(", "hookCallbackIds": ["hook_3"]},
            ],
            "Stop": [{"hookCallbackIds": ["hook_4"], "onFailure": "block"}],
            "Setup": [{"hookCallbackIds": ["hook_5"]}],
        }));
        let rows: Vec<_> = registered
            .iter()
            .map(|r| {
                (
                    r.event,
                    r.callback.id.as_str(),
                    r.callback.timeout,
                    r.callback.on_failure,
                    r.matcher.matches(Some("Bash")),
                    r.matcher.matches(Some("Write")),
                )
            })
            .collect();
        let five = Duration::from_secs(5);
        assert_eq!(
            rows,
            vec![
                (
                    HookEvent::PreToolUse,
                    "hook_0",
                    five,
                    OnFailure::Block,
                    true,
                    false
                ),
                (
                    HookEvent::PreToolUse,
                    "hook_1",
                    five,
                    OnFailure::Block,
                    true,
                    false
                ),
                (
                    HookEvent::PreToolUse,
                    "hook_2",
                    DEFAULT_TIMEOUT,
                    OnFailure::Continue,
                    true,
                    true
                ),
                // A failing Stop callback never keeps the agent working.
                (
                    HookEvent::Stop,
                    "hook_4",
                    DEFAULT_TIMEOUT,
                    OnFailure::Continue,
                    true,
                    true
                ),
            ]
        );
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings.iter().any(|w| w.contains("\"(\"")), "{warnings:?}");
        assert!(warnings.iter().any(|w| w.contains("Setup")), "{warnings:?}");
    }

    #[test]
    fn an_answer_claude_code_would_reject_is_a_failure() {
        assert!(checked(json!({})).is_ok());
        assert!(checked(json!({"hookSpecificOutput": {"permissionDecision": "deny"}})).is_ok());
        assert!(checked(json!({"hookSpecificOutput": {"permissionDecision": "Deny"}})).is_err());
        assert!(checked(json!(null)).is_err());
        assert!(checked(json!("allow")).is_err());
    }
}
