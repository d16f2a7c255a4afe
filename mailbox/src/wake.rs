//! In-process wake-ups, whichever the backend: one `Notify` per (run, recipient), signalled
//! after COMMIT returns. Receivers never poll: they register interest, look once, and sleep
//! until signalled.

use std::sync::Arc;

use dashmap::DashMap;
use tokio::sync::Notify;

/// A recipient to wake once the transaction that wrote its mail has committed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Wake {
    pub run_id: String,
    pub recipient: String,
}

/// The recipient a change to a run's task board wakes: not an agent id (no agent id holds an
/// `@`), so no mail is ever addressed to it. An idle teammate waits on it beside its own mail,
/// and on PostgreSQL it travels as a NOTIFY payload like a recipient's, so a teammate idle on
/// a `muster worker` learns of a task the lead put on the board in another process.
pub const BOARD_WAKE: &str = "@board";

/// Adds the board's wake-up to a write that changed the board (once per write).
pub(crate) fn board_changed(run_id: &str, wakes: &mut Vec<Wake>) {
    let wake = Wake {
        run_id: run_id.to_owned(),
        recipient: BOARD_WAKE.to_owned(),
    };
    if !wakes.contains(&wake) {
        wakes.push(wake);
    }
}

#[derive(Default)]
pub(crate) struct Waiters {
    by_recipient: DashMap<(String, String), Arc<Notify>>,
}

impl Waiters {
    pub(crate) fn notify_for(&self, run_id: &str, recipient: &str) -> Arc<Notify> {
        self.by_recipient
            .entry((run_id.to_owned(), recipient.to_owned()))
            .or_default()
            .clone()
    }

    pub(crate) fn wake(&self, run_id: &str, recipient: &str) {
        if let Some(notify) = self
            .by_recipient
            .get(&(run_id.to_owned(), recipient.to_owned()))
        {
            notify.notify_waiters();
        }
    }

    /// Wakes every receiver of `run_id`: each looks at its mail again.
    pub(crate) fn wake_run(&self, run_id: &str) {
        for entry in self.by_recipient.iter() {
            if entry.key().0 == run_id {
                entry.value().notify_waiters();
            }
        }
    }

    pub(crate) fn wake_all(&self, wakes: &[Wake]) {
        for wake in wakes {
            self.wake(&wake.run_id, &wake.recipient);
        }
    }
}

/// The one receive loop (both backends', an agent's through its commit lane): looks with
/// `look` until it finds something, sleeping between looks until `notify` (a recipient's
/// signal) is woken. It registers before each look, so a commit between the look and the
/// sleep still wakes it; it never polls.
pub async fn until_found<T, E, Look>(
    notify: &Notify,
    mut look: impl FnMut() -> Look,
) -> Result<T, E>
where
    Look: std::future::Future<Output = Result<Option<T>, E>>,
{
    loop {
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if let Some(found) = look().await? {
            return Ok(found);
        }
        notified.await;
    }
}
