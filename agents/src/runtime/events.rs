//! What the runtime reports as it goes, each event only after the commit it describes (the
//! CLI prints them as `stream-json`) — but for [`RuntimeEvent::ModelDelta`], the one event that
//! is not durable: a piece of a response while it streams, for display only.

use muster_mailbox::Message as Mail;
use muster_protocol::MessageKind;
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
        /// From sending the request to the complete response (retries included), in
        /// milliseconds: the time spent waiting for the model rather than in muster.
        latency_ms: f64,
    },
    /// A piece of the response of request `turn` while it streams (`delta`: `text`,
    /// `thinking`, `tool_input`, or `discard` when attempt `attempt` failed and what it showed
    /// is void). Not durable (`"durable": false`): nothing is committed for it, and what is
    /// committed later is the complete response.
    ModelDelta {
        agent: String,
        turn: u64,
        attempt: u32,
        delta: &'static str,
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
    /// A message was committed; `agent` is its sender.
    MailSent {
        agent: String,
        to: String,
        kind: MessageKind,
        request_id: Option<String>,
    },
    /// Mail was put into an agent's context (committed with its ack); `agent` is the
    /// recipient, `queued_ms` the time from the send's commit to this delivery.
    MailDelivered {
        agent: String,
        from: String,
        kind: MessageKind,
        request_id: Option<String>,
        queued_ms: i64,
    },
}

impl RuntimeEvent {
    /// The `type` of the `stream-json` line.
    pub fn kind(&self) -> &'static str {
        match self {
            RuntimeEvent::AgentStarted { .. } => "agent_started",
            RuntimeEvent::ModelTurn { .. } => "model_turn",
            RuntimeEvent::ModelDelta { .. } => "model_delta",
            RuntimeEvent::ToolCall { .. } => "tool_call",
            RuntimeEvent::ModeChanged { .. } => "mode_changed",
            RuntimeEvent::ApprovalRequested { .. } => "approval_requested",
            RuntimeEvent::ApprovalDecided { .. } => "approval_decided",
            RuntimeEvent::MailSent { .. } => "mail_sent",
            RuntimeEvent::MailDelivered { .. } => "mail_delivered",
        }
    }

    /// The agent the event is about.
    pub fn agent(&self) -> &str {
        match self {
            RuntimeEvent::AgentStarted { agent, .. }
            | RuntimeEvent::ModelTurn { agent, .. }
            | RuntimeEvent::ModelDelta { agent, .. }
            | RuntimeEvent::ToolCall { agent, .. }
            | RuntimeEvent::ModeChanged { agent, .. }
            | RuntimeEvent::ApprovalRequested { agent, .. }
            | RuntimeEvent::ApprovalDecided { agent, .. }
            | RuntimeEvent::MailSent { agent, .. }
            | RuntimeEvent::MailDelivered { agent, .. } => agent,
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
                latency_ms,
                ..
            } => json!({"turn": turn, "model": model, "mode": mode,
                        "stop_reason": stop_reason, "text": text,
                        "latency_ms": (latency_ms * 1000.0).round() / 1000.0}),
            RuntimeEvent::ModelDelta {
                turn,
                attempt,
                delta,
                text,
                ..
            } => json!({"turn": turn, "attempt": attempt, "delta": delta, "text": text,
                        "durable": false}),
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
            RuntimeEvent::MailSent {
                agent,
                to,
                kind,
                request_id,
            } => json!({"from": agent, "to": to, "kind": kind, "request_id": request_id}),
            RuntimeEvent::MailDelivered {
                from,
                kind,
                request_id,
                queued_ms,
                ..
            } => json!({"kind": kind, "from": from, "request_id": request_id,
                        "queued_ms": queued_ms}),
        }
    }

    /// `mail_sent` for a committed message.
    pub fn mail_sent(message: &Mail) -> RuntimeEvent {
        RuntimeEvent::MailSent {
            agent: message.sender.clone(),
            to: message.recipient.clone(),
            kind: message.kind.clone(),
            request_id: message.request_id.clone(),
        }
    }

    /// `mail_delivered` for a message whose delivery was committed at `now_ms`.
    pub fn mail_delivered(message: &Mail, now_ms: i64) -> RuntimeEvent {
        RuntimeEvent::MailDelivered {
            agent: message.recipient.clone(),
            from: message.sender.clone(),
            kind: message.kind.clone(),
            request_id: message.request_id.clone(),
            queued_ms: now_ms.saturating_sub(message.created_at),
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
