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

use std::future::Future;
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

/// One agent's store commits, each run to its end even when the turn that asked for it is
/// dropped: a store may carry out a commit whose caller is gone (SQLite's writer thread runs
/// every job it was given), so after an interrupt the agent first waits for the commits in
/// flight ([`CommitLane::settled`]) and only then reads its transcript back.
#[derive(Debug, Clone, Default)]
pub(super) struct CommitLane(Arc<tokio::sync::Mutex<()>>);

/// A commit the runtime shut down under: it may or may not have landed.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("a store commit was cut off: the process is shutting down")]
pub struct CommitCut;

impl CommitLane {
    /// Runs `commit` to its end whatever happens to the caller; one at a time.
    pub(super) async fn run<T: Send + 'static>(
        &self,
        commit: impl Future<Output = T> + Send + 'static,
    ) -> Result<T, CommitCut> {
        // Taken before the commit starts: a caller dropped while waiting commits nothing.
        let held = self.0.clone().lock_owned().await;
        let task = tokio::spawn(async move {
            let done = commit.await;
            drop(held);
            done
        });
        match task.await {
            Ok(done) => Ok(done),
            Err(error) => match error.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                Err(_) => Err(CommitCut),
            },
        }
    }

    /// Waits until no commit is in flight.
    pub(super) async fn settled(&self) {
        drop(self.0.lock().await);
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

    /// A commit whose caller is dropped still ends, and `settled` waits for it.
    #[tokio::test]
    async fn a_dropped_callers_commit_ends_before_settled() {
        let lane = CommitLane::default();
        let (started, running) = tokio::sync::oneshot::channel::<()>();
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let landed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = landed.clone();
        let lane_for_caller = lane.clone();
        let caller = tokio::spawn(async move {
            lane_for_caller
                .run(async move {
                    let _ = started.send(());
                    let _ = released.await;
                    flag.store(true, std::sync::atomic::Ordering::SeqCst);
                })
                .await
        });
        running.await.unwrap();
        caller.abort();
        let _ = caller.await;
        let settled = lane.settled();
        tokio::pin!(settled);
        assert!(
            futures_util::FutureExt::now_or_never(&mut settled).is_none(),
            "the commit is still in flight"
        );
        release.send(()).unwrap();
        settled.await;
        assert!(landed.load(std::sync::atomic::Ordering::SeqCst));
    }
}
