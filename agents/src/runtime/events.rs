//! The runtime reports what it does as [`RunEvent`]s (muster-protocol's `event` module says
//! which are durable), each durable one only after the commit it describes. Here: the events
//! of a committed message, which need the store's [`Mail`].

use std::sync::{Mutex, PoisonError};

use muster_mailbox::Message as Mail;
use muster_protocol::AgentState;
pub use muster_protocol::{EventSink, NoEvents, RunEvent};

/// `mail_sent` for a committed message.
pub fn mail_sent_event(message: &Mail) -> RunEvent {
    RunEvent::MailSent {
        from: message.sender.clone(),
        to: message.recipient.clone(),
        kind: message.kind.clone(),
        request_id: message.request_id.clone(),
    }
}

/// `mail_delivered` for a message whose delivery was committed at `now_ms`.
pub fn mail_delivered_event(message: &Mail, now_ms: i64) -> RunEvent {
    RunEvent::MailDelivered {
        agent: message.recipient.clone(),
        from: message.sender.clone(),
        kind: message.kind.clone(),
        request_id: message.request_id.clone(),
        queued_ms: now_ms.saturating_sub(message.created_at),
    }
}

/// An agent's last reported [`AgentState`], so each change is reported once.
#[derive(Debug, Default)]
pub(super) struct StateReport(Mutex<Option<AgentState>>);

impl StateReport {
    /// Whether `state` differs from the last one reported; remembers it.
    pub(super) fn changes_to(&self, state: &AgentState) -> bool {
        let mut last = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if last.as_ref() == Some(state) {
            return false;
        }
        *last = Some(state.clone());
        true
    }
}
