//! Mail leased through an agent's [`CommitLane`]: each look runs to its end whatever happens
//! to the turn that asked for it, and what it leased is kept in the lane until the turn ends,
//! so an interrupted or failed turn can hand back what it did not acknowledge.

use std::sync::Arc;

use super::error::RuntimeResult;
use super::interrupt::CommitLane;

impl CommitLane {
    /// Leases the next message of `recipient` that `filter` matches, if there is one, without
    /// waiting, through the lane.
    pub(super) async fn try_receive(
        &self,
        store: &Arc<dyn muster_mailbox::MailboxStore>,
        run_id: &str,
        recipient: &str,
        epoch: i64,
        filter: muster_mailbox::MessageFilter,
    ) -> RuntimeResult<Option<muster_mailbox::Message>> {
        let (store, run_id, recipient) = (store.clone(), run_id.to_owned(), recipient.to_owned());
        let look = async move { store.try_receive(&run_id, &recipient, epoch, filter).await };
        let keys = |taken: &Option<muster_mailbox::Message>| {
            taken.iter().map(|message| message.key.clone()).collect()
        };
        Ok(self.lease(look, keys).await??)
    }

    /// Waits (pushed, not polled) until a message of `recipient` that `filter` matches can be
    /// leased, and leases it through the lane. The wait itself takes nothing from the store,
    /// so an interrupt may drop it anywhere.
    pub(super) async fn receive(
        &self,
        store: &Arc<dyn muster_mailbox::MailboxStore>,
        run_id: &str,
        recipient: &str,
        epoch: i64,
        filter: muster_mailbox::MessageFilter,
    ) -> RuntimeResult<muster_mailbox::Message> {
        muster_mailbox::until_found(&store.woken(run_id, recipient), || {
            self.try_receive(store, run_id, recipient, epoch, filter.clone())
        })
        .await
    }
}
