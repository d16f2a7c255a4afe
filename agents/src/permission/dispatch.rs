//! The one dispatch path: the engine decides, and only an allowed call reaches the tool.

use std::ffi::OsString;

use serde_json::Value;

use super::{Decision, PermissionContext, PermissionEngine, Verdict};
use crate::shell::{read_only_git_env, remove_from_read_only_env};
use crate::tools::{HandledBy, ToolContext, ToolOutput, ToolRegistry};

/// A dispatched call: the engine's decision, and the tool's output when it ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dispatched {
    /// What the engine decided.
    pub decision: Decision,
    /// The tool's output: `None` when the call did not run (asked or denied) or when the agent
    /// runtime carries it out (coordination tools).
    pub output: Option<ToolOutput>,
}

impl Dispatched {
    /// What the model sees for a call that did not run: the reason as an error result.
    pub fn refusal(&self) -> Option<ToolOutput> {
        match self.decision.verdict {
            Verdict::Allow => None,
            Verdict::Ask => Some(ToolOutput::error(format!(
                "this call needs approval: {}",
                self.decision.reason
            ))),
            Verdict::Deny => Some(ToolOutput::error(format!(
                "permission denied: {}",
                self.decision.reason
            ))),
        }
    }
}

/// Decides the call with `engine`, and runs it on `registry` only when it is allowed. Read-only
/// `Bash` runs with the read-only git environment. An ask does not run here: the caller routes
/// it to whoever approves for the agent and dispatches again with the answer. Tools the agent
/// runtime handles are not run either (their output is `None`).
pub async fn dispatch(
    engine: &PermissionEngine,
    context: &PermissionContext<'_>,
    registry: &ToolRegistry,
    tool_context: &ToolContext,
    name: &str,
    input: Value,
) -> Dispatched {
    let decision = engine.decide(context, name, &input);
    if decision.verdict != Verdict::Allow {
        return Dispatched {
            decision,
            output: None,
        };
    }
    let runtime_handled = registry
        .get(name)
        .is_some_and(|tool| tool.handled_by() == HandledBy::AgentRuntime);
    if runtime_handled {
        return Dispatched {
            decision,
            output: None,
        };
    }
    let output = if decision.read_only_shell {
        match read_only_context(tool_context) {
            Ok(read_only) => registry.call(name, &read_only, input).await,
            Err(error) => ToolOutput::error(error),
        }
    } else {
        registry.call(name, tool_context, input).await
    };
    Dispatched {
        decision,
        output: Some(output),
    }
}

/// `tool_context` with the read-only shell environment: inherited variables that could run
/// code removed, the git overrides set.
fn read_only_context(tool_context: &ToolContext) -> Result<ToolContext, String> {
    let mut environment: Vec<(OsString, OsString)> = tool_context
        .environment()
        .iter()
        .filter(|(name, _)| !remove_from_read_only_env(&name.to_string_lossy()))
        .cloned()
        .collect();
    let overrides = read_only_git_env();
    environment.retain(|(name, _)| !overrides.iter().any(|(key, _)| name == key.as_str()));
    environment.extend(
        overrides
            .into_iter()
            .map(|(key, value)| (OsString::from(key), OsString::from(value))),
    );
    let mut context = ToolContext::new(tool_context.workspace().clone(), environment)
        .with_shutdown(tool_context.shutdown().clone())
        .with_limits(tool_context.limits().clone());
    if let Some(recorder) = tool_context.process_group_recorder() {
        context = context.with_process_group_recorder(recorder.clone());
    }
    if let Some(plan_file) = tool_context.plan_file() {
        context = context
            .with_plan_file(plan_file)
            .map_err(|error| error.to_string())?;
    }
    Ok(context)
}
