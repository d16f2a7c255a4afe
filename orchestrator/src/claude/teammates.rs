//! How a team run's teammates ended, for the prompt's `result`: a teammate that failed, got
//! stuck, hit its output limit or was stopped never lets a prompt report `success`, even when
//! every task completed (another teammate took its task back off the board, or it had none).
//! Read from the store: each such ending is the idle notice the team commits to the lead with
//! the reason ([`crate::team`]'s `stop_with_notice`).

use muster_mailbox::{MailboxStore, MessageBody};

use crate::team::LEAD;

/// The reasons of a teammate's idle notice that say it ended badly (`available` is a turn's
/// ordinary end).
const BAD_ENDINGS: [&str; 4] = ["failed", "stuck", "output_limit", "stopped"];

/// The store's newest message of the run (its commit order), before a prompt: the teammates'
/// endings of that prompt are the ones committed after it.
pub(crate) async fn newest_message(store: &dyn MailboxStore, run_id: &str) -> anyhow::Result<i64> {
    Ok(store
        .messages(run_id, None)
        .await?
        .iter()
        .map(|message| message.seq)
        .max()
        .unwrap_or(0))
}

/// Each teammate that ended badly after message `after`, in words (`teammate alice ended
/// stuck: …`), in commit order.
pub(crate) async fn ended_badly(
    store: &dyn MailboxStore,
    run_id: &str,
    after: i64,
) -> anyhow::Result<Vec<String>> {
    let mut notices: Vec<_> = store
        .messages(run_id, None)
        .await?
        .into_iter()
        .filter(|message| message.seq > after && message.recipient == LEAD)
        .collect();
    notices.sort_by_key(|message| message.seq);
    Ok(notices
        .into_iter()
        .filter_map(|message| match message.body {
            MessageBody::IdleNotification {
                reason, summary, ..
            } if BAD_ENDINGS.contains(&reason.as_str()) => Some(match summary {
                Some(summary) => format!("teammate {} ended {reason}: {summary}", message.sender),
                None => format!("teammate {} ended {reason}", message.sender),
            }),
            _ => None,
        })
        .collect())
}
