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

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use crate::tools::{ShutdownSignal, ShutdownTrigger};

/// Interrupts the turns its agents are running, if any; cheap to clone and to keep beside
/// the agents (an agent is `&mut`-borrowed while its turn runs). Each agent has its own by
/// default; a team shares one among its lead and teammates
/// ([`super::AgentRuntime::share_turn_interrupt`]), so one interrupt ends the running turn of
/// each of them. Keyed by agent id: each agent arms and disarms only its own turn.
#[derive(Clone, Default)]
pub struct TurnInterrupt {
    running: Arc<Mutex<BTreeMap<String, ShutdownTrigger>>>,
    /// Told of every interrupt: how it reaches turns in other processes (a team's teammates
    /// on workers), which this handle cannot end itself.
    beyond: Arc<Mutex<Option<Beyond>>>,
}

type Beyond = Arc<dyn Fn() + Send + Sync>;

impl std::fmt::Debug for TurnInterrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("TurnInterrupt")
            .field("running", &running.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl TurnInterrupt {
    /// Ends the running turns: their model requests and tool calls are stopped, and each
    /// agent's [`super::AgentRuntime::run`] returns [`super::AgentOutcome::TurnInterrupted`].
    /// An agent between turns is left alone (there is no turn to end). Returns whether a turn
    /// of this process was running.
    pub fn interrupt(&self) -> bool {
        let running = {
            let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
            for trigger in running.values() {
                trigger.trigger();
            }
            !running.is_empty()
        };
        let beyond = self
            .beyond
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(tell) = beyond {
            tell();
        }
        running
    }

    /// Has every later interrupt also call `tell`, which passes it to turns this process does
    /// not run (it must not block: it may be called from any thread).
    pub fn reach_beyond(&self, tell: impl Fn() + Send + Sync + 'static) {
        *self.beyond.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(tell));
    }

    /// `agent`'s turn starts: the signal that ends it.
    pub(super) fn arm(&self, agent: &str) -> ShutdownSignal {
        let (trigger, signal) = ShutdownSignal::channel();
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(agent.to_owned(), trigger);
        signal
    }

    /// `agent`'s turn is over: a later interrupt finds no turn of it.
    pub(super) fn disarm(&self, agent: &str) {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(agent);
    }
}

/// One agent's store commits, each run to its end even when the turn that asked for it is
/// dropped: a store may carry out a commit whose caller is gone (SQLite's writer thread runs
/// every job it was given), so after an interrupt the agent first waits for the commits in
/// flight ([`CommitLane::settled`]) and only then reads its transcript back.
///
/// Mail is leased through it too ([`CommitLane::lease`]): a lease an interrupt cut off after
/// its COMMIT would otherwise leave the message leased to no one (the mail a turn was about
/// to take, the decision it was waiting for), so the keys of what the turn leased are kept
/// until it ends, and an interrupted or failed turn hands back what it did not acknowledge.
#[derive(Debug, Clone, Default)]
pub(super) struct CommitLane {
    turn: Arc<tokio::sync::Mutex<()>>,
    /// The keys of the mail leased through the lane since the turn began.
    leased: Arc<std::sync::Mutex<Vec<String>>>,
}

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
        let held = self.turn.clone().lock_owned().await;
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
        drop(self.turn.lock().await);
    }

    /// Runs `lease` (a store operation that leases mail without waiting) to its end whatever
    /// happens to the caller, noting the keys of what it leased (see [`CommitLane::leased`]).
    pub(super) async fn lease<T: Send + 'static>(
        &self,
        lease: impl Future<Output = muster_mailbox::StoreResult<T>> + Send + 'static,
        keys: fn(&T) -> Vec<String>,
    ) -> Result<muster_mailbox::StoreResult<T>, CommitCut> {
        let leased = self.leased.clone();
        self.run(async move {
            let taken = lease.await;
            if let Ok(taken) = &taken {
                leased
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .extend(keys(taken));
            }
            taken
        })
        .await
    }

    /// The keys of the mail leased through the lane since the last call: at a turn's end,
    /// once [`CommitLane::settled`], what an interrupted turn may have left unacknowledged.
    pub(super) fn leased(&self) -> Vec<String> {
        std::mem::take(&mut *self.leased.lock().unwrap_or_else(PoisonError::into_inner))
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
        let first = handle.arm("main");
        assert!(!first.is_triggered());
        assert!(handle.clone().interrupt());
        first.triggered().await;
        handle.disarm("main");
        assert!(!handle.interrupt());
        let second = handle.arm("main");
        assert!(
            !second.is_triggered(),
            "an earlier interrupt does not carry over"
        );
        handle.disarm("main");
        let told = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = told.clone();
        handle.reach_beyond(move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        });
        assert!(
            !handle.interrupt(),
            "no turn of this process is running, yet the others are told"
        );
        assert_eq!(told.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    /// A shared handle ends the running turn of every agent holding it, and an agent's turn
    /// ending takes only its own out.
    #[tokio::test]
    async fn a_shared_interrupt_ends_every_running_agents_turn() {
        let shared = TurnInterrupt::default();
        let lead = shared.arm("lead");
        let alice = shared.clone().arm("alice");
        shared.disarm("lead");
        let lead_again = shared.arm("lead");
        assert!(shared.interrupt());
        lead_again.triggered().await;
        alice.triggered().await;
        assert!(!lead.is_triggered(), "an ended turn's signal is not reused");
        shared.disarm("alice");
        shared.disarm("lead");
        assert!(!shared.interrupt(), "no turn is running");
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

/// A mode the front end's person set while a turn may be running (the Agent SDK's
/// `set_permission_mode`): the agent holding it switches at its next tool-call boundary —
/// before the calls of its next model response are decided — in one commit (a `mode` record,
/// reason `set_permission_mode`). The front end checks the mode against the run's ceilings
/// before it is requested. Cheap to clone; the newest request wins.
#[derive(Debug, Clone, Default)]
pub struct ModeRequest(Arc<Mutex<Option<muster_config::PermissionMode>>>);

impl ModeRequest {
    /// Asks for `mode` at the next boundary.
    pub fn request(&self, mode: muster_config::PermissionMode) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(mode);
    }

    /// Forgets a request not taken yet (a new prompt takes the mode itself).
    pub fn clear(&self) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take();
    }

    pub(super) fn take(&self) -> Option<muster_config::PermissionMode> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}
