//! What the runtime reports as it goes, each event only after the commit it describes (the
//! CLI prints them as `stream-json`).

use serde_json::{Value, json};

/// One durable fact about an agent.
#[derive(Debug, Clone, PartialEq)]
pub enum RuntimeEvent {
    AgentStarted {
        agent: String,
        definition: String,
        mode: String,
        plan_file: Option<String>,
    },
    ModelTurn {
        agent: String,
        turn: u64,
        model: String,
        mode: String,
        stop_reason: String,
        text: String,
    },
    ToolCall {
        agent: String,
        tool_use_id: String,
        tool: String,
        decision: String,
        reason: String,
        is_error: bool,
    },
    ModeChanged {
        agent: String,
        mode: String,
        reason: String,
    },
    ApprovalRequested {
        agent: String,
        request_id: String,
        responder: String,
        plan_file: String,
    },
    ApprovalDecided {
        agent: String,
        request_id: String,
        responder: String,
        approved: bool,
        mode: Option<String>,
    },
}

impl RuntimeEvent {
    /// The `type` of the `stream-json` line.
    pub fn kind(&self) -> &'static str {
        match self {
            RuntimeEvent::AgentStarted { .. } => "agent_started",
            RuntimeEvent::ModelTurn { .. } => "model_turn",
            RuntimeEvent::ToolCall { .. } => "tool_call",
            RuntimeEvent::ModeChanged { .. } => "mode_changed",
            RuntimeEvent::ApprovalRequested { .. } => "approval_requested",
            RuntimeEvent::ApprovalDecided { .. } => "approval_decided",
        }
    }

    /// The agent the event is about.
    pub fn agent(&self) -> &str {
        match self {
            RuntimeEvent::AgentStarted { agent, .. }
            | RuntimeEvent::ModelTurn { agent, .. }
            | RuntimeEvent::ToolCall { agent, .. }
            | RuntimeEvent::ModeChanged { agent, .. }
            | RuntimeEvent::ApprovalRequested { agent, .. }
            | RuntimeEvent::ApprovalDecided { agent, .. } => agent,
        }
    }

    /// The event's own fields (without `v`, `type`, `ts`, `run_id`, `agent`).
    pub fn fields(&self) -> Value {
        match self {
            RuntimeEvent::AgentStarted {
                definition,
                mode,
                plan_file,
                ..
            } => json!({"definition": definition, "mode": mode, "plan_file": plan_file}),
            RuntimeEvent::ModelTurn {
                turn,
                model,
                mode,
                stop_reason,
                text,
                ..
            } => json!({"turn": turn, "model": model, "mode": mode,
                        "stop_reason": stop_reason, "text": text}),
            RuntimeEvent::ToolCall {
                tool_use_id,
                tool,
                decision,
                reason,
                is_error,
                ..
            } => json!({"tool_use_id": tool_use_id, "tool": tool, "decision": decision,
                        "reason": reason, "is_error": is_error}),
            RuntimeEvent::ModeChanged { mode, reason, .. } => {
                json!({"mode": mode, "reason": reason})
            }
            RuntimeEvent::ApprovalRequested {
                request_id,
                responder,
                plan_file,
                ..
            } => json!({"request_id": request_id, "responder": responder, "plan_file": plan_file}),
            RuntimeEvent::ApprovalDecided {
                request_id,
                responder,
                approved,
                mode,
                ..
            } => json!({"request_id": request_id, "responder": responder,
                        "approved": approved, "mode": mode}),
        }
    }
}

/// Where events go. Called after each commit; must not block for long.
pub trait EventSink: Send + Sync {
    fn emit(&self, event: RuntimeEvent);
}

/// Drops every event.
#[derive(Debug, Default)]
pub struct NoEvents;

impl EventSink for NoEvents {
    fn emit(&self, _event: RuntimeEvent) {}
}
