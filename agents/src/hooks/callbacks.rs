//! Hooks a program registered with the front end driving the run: the Agent SDKs' hook
//! callbacks (`hooks=` in the SDK's options, registered by its `initialize`). They fire where
//! the settings files' hooks fire, with the same stdin JSON as their input, and their answer is
//! read as a command hook's JSON output ([`super::outcome::interpret_json`]), combined with the
//! other hooks' — so they narrow exactly as hooks do: an `allow` never widens what the
//! permission rules, plan mode or the sandbox allow, and an `updatedInput` is decided by the
//! engine again.

use std::sync::Arc;
use std::time::Duration;

use muster_config::hooks::{HookEvent, OnFailure};
use serde_json::Value;

use super::outcome::{HookVerdict, failed, interpret_json};

/// One registered callback the program answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookCallback {
    /// The program's id for it (`hook_0`, …).
    pub id: String,
    /// How long an answer may take; past it the call is abandoned (a failure).
    pub timeout: Duration,
    /// What a failed call (an error answer, no answer, the timeout) means.
    pub on_failure: OnFailure,
}

/// The callbacks a program registered, and the way to call them.
pub trait HookCallbacks: Send + Sync + std::fmt::Debug {
    /// Whether any callback is registered for `event`.
    fn has(&self, event: HookEvent) -> bool;
    /// Whether any callback is registered at all.
    fn any(&self) -> bool;
    /// The callbacks of `event` whose matcher selects `subject`, in registration order.
    fn matching(&self, event: HookEvent, subject: Option<&str>) -> Vec<HookCallback>;
    /// Calls `callback` with the event's `input` and waits for its answer, at most its
    /// timeout (blocking: the runner calls it on a blocking thread). `Err` says why there is
    /// no answer.
    fn call(&self, callback: &HookCallback, input: &Value) -> Result<Value, String>;
}

/// Calls one callback and reads its answer as a hook's verdict.
pub(super) async fn run_callback(
    callbacks: Arc<dyn HookCallbacks>,
    event: HookEvent,
    callback: HookCallback,
    input: Arc<Value>,
) -> HookVerdict {
    let id = callback.id.clone();
    let on_failure = callback.on_failure;
    let called = tokio::task::spawn_blocking(move || callbacks.call(&callback, &input)).await;
    match called {
        Ok(Ok(answer)) => {
            tracing::debug!(event = event.name(), callback = id, %answer, "hook callback answered");
            interpret_json(event, &answer)
        }
        Ok(Err(why)) => failed(on_failure, format!("hook callback {id} failed: {why}")),
        Err(error) => failed(on_failure, format!("hook callback {id} failed: {error}")),
    }
}
