//! `interrupt_turn`: a handle that ends an agent's current turn without ending the run
//! (DESIGN, "Wave 3 → The lifecycle"). Ctrl-C keeps meaning the run's shutdown.
//!
//! It is the run's shutdown made per turn, and goes the same way: each turn arms a fresh
//! [`ShutdownSignal`] (the one a run's Bash calls watch), and when it fires the turn's future
//! is dropped as Ctrl-C drops a run's — the model request in flight is abandoned, a running
//! Bash call's process group is killed by its guard, a subagent is dropped with its own calls.
//! Then the agent reads its transcript back from the store and answers what the turn left
//! without a result as resume answers a call a crash left (the process group killed if still
//! alive), in one commit with the `turn_interrupted` record. The agent then takes its next
//! prompt ([`super::AgentRuntime::prompt`]) in the same process.

use std::sync::{Arc, Mutex, PoisonError};

use crate::tools::{ShutdownSignal, ShutdownTrigger};

/// Interrupts the turn its agent is running, if any; cheap to clone and to keep beside the
/// agent (the agent is `&mut`-borrowed while its turn runs).
#[derive(Debug, Clone, Default)]
pub struct TurnInterrupt(Arc<Mutex<Option<ShutdownTrigger>>>);

impl TurnInterrupt {
    /// Ends the running turn: its model request and tool calls are stopped, and
    /// [`super::AgentRuntime::run`] returns [`super::AgentOutcome::TurnInterrupted`]. Between
    /// turns it does nothing (there is no turn to end). Returns whether a turn was running.
    pub fn interrupt(&self) -> bool {
        match &*self.0.lock().unwrap_or_else(PoisonError::into_inner) {
            Some(trigger) => {
                trigger.trigger();
                true
            }
            None => false,
        }
    }

    /// A turn starts: the signal that ends it.
    pub(super) fn arm(&self) -> ShutdownSignal {
        let (trigger, signal) = ShutdownSignal::channel();
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(trigger);
        signal
    }

    /// The turn is over: a later interrupt finds no turn.
    pub(super) fn disarm(&self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only an armed turn is interrupted; each turn gets its own signal.
    #[tokio::test]
    async fn an_interrupt_ends_only_the_running_turn() {
        let handle = TurnInterrupt::default();
        assert!(!handle.interrupt(), "no turn is running");
        let first = handle.arm();
        assert!(!first.is_triggered());
        assert!(handle.clone().interrupt());
        first.triggered().await;
        handle.disarm();
        assert!(!handle.interrupt());
        let second = handle.arm();
        assert!(
            !second.is_triggered(),
            "an earlier interrupt does not carry over"
        );
    }
}
