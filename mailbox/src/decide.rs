//! The one decision path (DESIGN, "Wave 2 → One decision path and stored inputs"): every
//! answer to a request — a person's `approve` / `reject` / `answer`, the lead's `ReviewPlan`
//! or `SendMessage {reply_to}`, a policy's verdict, a person at the terminal, later the web
//! inbox — goes through [`decide`]. The store checks that the answer comes from the request's
//! responder and keeps only the first (the primary key of `responses`), and a repeat of the
//! same idempotency key returns the first answer; then whoever waits for the answer is woken:
//! in this process by the store itself after the commit, in another one through the live
//! run's socket.

use std::path::Path;

use crate::error::StoreResult;
use crate::live::{self, PokeOutcome};
use crate::store::MailboxStore;
use crate::types::{Message, NewResponse};

/// Where the requester waits.
#[derive(Debug, Clone, Copy)]
pub enum Waiter<'a> {
    /// In this process (an agent's tool, a policy of this run): the store wakes it after the
    /// commit.
    InProcess,
    /// Perhaps in another process (a person's command): poke the run's socket under
    /// `runs_dir` if the run is live.
    LiveRun { runs_dir: &'a Path },
}

/// What came of a decision.
#[derive(Debug)]
pub struct Decided {
    /// The response as stored (the first one, for a repeated idempotency key).
    pub response: Message,
    /// For [`Waiter::LiveRun`]: whether the run was live and woken, or why not.
    pub wake: Option<StoreResult<PokeOutcome>>,
}

/// Answers a request: commits `answer` (refused unless it comes from the request's responder
/// and is the first answer; see [`MailboxStore::respond`]), then wakes the requester.
pub async fn decide(
    store: &dyn MailboxStore,
    answer: NewResponse,
    waiter: Waiter<'_>,
) -> StoreResult<Decided> {
    let response = store.respond(answer).await?;
    let wake = match waiter {
        Waiter::InProcess => None,
        Waiter::LiveRun { runs_dir } => {
            Some(live::announce(store, runs_dir, &response.run_id, &response.recipient).await)
        }
    };
    Ok(Decided { response, wake })
}
