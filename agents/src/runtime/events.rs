//! The runtime reports what it does as [`RunEvent`]s (muster-protocol's `event` module says
//! which are durable), each durable one only after the commit it describes. Here: the events
//! of a committed message, which need the store's [`Mail`].

use std::sync::{Arc, Mutex, PoisonError};

use muster_mailbox::Message as Mail;
use muster_protocol::AgentState;

use crate::model::ToolCall;
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

/// What one agent reports as it goes: its state changes (each once) and the calls it starts.
pub(super) struct Reporter {
    events: Arc<dyn EventSink>,
    agent: String,
    state: StateReport,
}

impl Reporter {
    pub(super) fn new(events: Arc<dyn EventSink>, agent: &str) -> Reporter {
        Reporter {
            events,
            agent: agent.to_owned(),
            state: StateReport::default(),
        }
    }

    /// Reports `state` in an `agent_state` event when it differs from the last one (called
    /// after the commit the state follows from).
    pub(super) fn state(&self, state: AgentState) {
        if self.state.changes_to(&state) {
            self.events.emit(RunEvent::AgentState {
                agent: self.agent.clone(),
                state,
            });
        }
    }

    /// The agent's state while it handles `call` (after the response asking for it was
    /// committed; again after a wait for a decision on it).
    pub(super) fn calling(&self, call: &ToolCall) {
        self.state(AgentState::CallingTool {
            tool_use_id: call.id.clone(),
            tool: call.name.clone(),
        });
    }

    /// Reports that the agent waits for room in the run's ledger (`budget_wait`), after the
    /// reservation that decided so was committed.
    pub(super) fn budget_wait(
        &self,
        reserved: &muster_mailbox::ledger::Reserved,
        estimate: &muster_mailbox::LedgerSpend,
    ) {
        let figures = |spend: &muster_mailbox::LedgerSpend| muster_protocol::BudgetSpend {
            turns: spend.turns,
            tokens: spend.tokens,
            cost_usd: spend.cost_usd(),
        };
        self.events.emit(RunEvent::BudgetWait {
            agent: self.agent.clone(),
            in_flight: reserved.in_flight_count,
            reserved: figures(&reserved.in_flight),
            spent: reserved
                .ledger
                .as_ref()
                .map(|ledger| figures(&ledger.spent))
                .unwrap_or_default(),
            estimate: figures(estimate),
        });
    }

    /// Reports a call about to run (`tool_started`, not durable).
    pub(super) fn tool_started(&self, call: &ToolCall) {
        self.events.emit(RunEvent::ToolStarted {
            agent: self.agent.clone(),
            tool_use_id: call.id.clone(),
            tool: call.name.clone(),
            input: call.input.clone(),
        });
    }
}
