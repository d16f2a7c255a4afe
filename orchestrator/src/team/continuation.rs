//! `muster run --continue` of a team run: the lead of a run that completed or was
//! interrupted takes a new user turn. The transition is one commit — the lead's new user
//! message with what the continuation changes for the team:
//!
//! - Teammates are kept: on a completed run, every teammate that agreed to shut down (at the
//!   run's end, or earlier at the lead's request) is taken back (its shutdown's request id in a
//!   [`CONTINUE_STREAM`] record) and waits idle with its context, woken by mail or a task.
//! - Worktrees: when the completed run's result was applied to the user's tree (or nothing was
//!   merged), a fresh base is taken from the user's tree as it is now, and every worktree
//!   restarts from it (a checkpoint at it per agent; the lead's moves the integration head).
//!   A result left on the integration branch stays there and the team goes on from it. An
//!   interrupted run keeps its worktrees as a resume does.
//! - Budgets are the run's: the spend so far carries on; the deadline restarts as on a resume.
//!
//! Killed before the commit, the run is as it was (a resume ends it as before); killed after
//! it, `muster resume` carries on from the store exactly as this process would have.

use std::collections::BTreeSet;

use muster_agents::runtime::{AgentRuntime, RuntimeError};
use muster_mailbox::{
    MailboxStore, MemberKind, MessageKind, NewRecord, RequestRecord, RunStatus, StoreError,
};
use serde::{Deserialize, Serialize};

use super::isolation::{PreviousResult, TeamIsolation};
use super::{LEAD, Team};

/// The lead's records stream holding each continuation's taken-back shutdowns.
pub(crate) const CONTINUE_STREAM: &str = "continued";

/// One continuation of the run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct ContinueRecord {
    /// The approved shutdown requests it took back: their teammates work again.
    revived: Vec<String>,
}

/// What the continuation's commit found.
pub(crate) enum Continued {
    /// Committed: the lead goes on with the new turn.
    Yes,
    /// The lead stopped in the middle of a turn: nothing was committed (`muster resume`
    /// finishes that turn first).
    MidTurn,
}

/// The shutdown requests continuations of `run_id` took back: their agreement no longer stops
/// the teammate.
async fn revived_shutdowns(
    store: &dyn MailboxStore,
    run_id: &str,
) -> Result<BTreeSet<String>, StoreError> {
    Ok(store
        .records(run_id, LEAD, CONTINUE_STREAM, 0)
        .await?
        .into_iter()
        .filter_map(|row| serde_json::from_value::<ContinueRecord>(row.body).ok())
        .flat_map(|record| record.revived)
        .collect())
}

/// The shutdown requests of `run_id` still standing — every one no continuation took back —
/// answered or not. The team's services (has a teammate agreed to stop?), a continuation
/// (which agreements to take back) and the web inbox's stop (is the teammate already stopped
/// or asked?) all read this one set, so a teammate a continuation revived works again for
/// each of them alike.
pub(crate) async fn standing_shutdowns(
    store: &dyn MailboxStore,
    run_id: &str,
) -> Result<Vec<RequestRecord>, StoreError> {
    let taken_back = revived_shutdowns(store, run_id).await?;
    Ok(store
        .requests(run_id)
        .await?
        .into_iter()
        .filter(|r| r.kind == MessageKind::ShutdownRequest && !taken_back.contains(&r.request_id))
        .collect())
}

/// Whether the shutdown request was answered with the teammate's agreement.
pub(crate) fn agreed(request: &RequestRecord) -> bool {
    request
        .response
        .as_ref()
        .is_some_and(|response| response.body.approved() == Some(true))
}

impl Team {
    /// Commits the continuation with `lead`'s new turn `prompt` (the run was `status`), the
    /// lead switched to `mode` first when a front end set one; after the commit, this
    /// process's worktrees follow a fresh base.
    pub(crate) async fn continue_lead(
        &self,
        lead: &mut AgentRuntime,
        prompt: &str,
        status: RunStatus,
        mode: Option<muster_config::PermissionMode>,
    ) -> anyhow::Result<Continued> {
        let completed = status == RunStatus::Completed;
        let previous = match (&self.isolation, completed) {
            (Some(isolation), true) => Some(
                isolation
                    .previous_result(self.store.as_ref(), self.run_id())
                    .await?,
            ),
            _ => None,
        };
        let fresh = match &previous {
            Some(PreviousResult::FreshBase(base)) => Some(base.clone()),
            _ => None,
        };
        let teammates: Vec<String> = self
            .store
            .roster(self.run_id())
            .await?
            .into_iter()
            .filter(|entry| entry.kind == MemberKind::Teammate)
            .map(|entry| entry.agent)
            .collect();
        let revived = if completed {
            self.shutdowns_to_take_back().await?
        } else {
            Vec::new()
        };
        let mut records = vec![NewRecord {
            agent: LEAD.into(),
            stream: CONTINUE_STREAM.into(),
            seq: None,
            body: serde_json::to_value(ContinueRecord { revived })?,
        }];
        if self.isolation.is_some() {
            records.extend(TeamIsolation::continuation_records(
                fresh.as_ref(),
                &teammates,
            )?);
        }
        let text = continuation_prompt(prompt, &teammates, previous.as_ref());
        muster_mailbox::failpoint!("team_continue_resumed");
        // The transition's one commit. Killed before it, the run is as it was; after it, a
        // resume answers the new turn with the team as continued.
        match lead.prompt_in_mode(&text, records, mode).await {
            Err(RuntimeError::TurnNotEnded { .. }) => return Ok(Continued::MidTurn),
            other => other?,
        }
        muster_mailbox::failpoint!("team_continued");
        if let (Some(isolation), Some(base)) = (&self.isolation, fresh) {
            isolation.continue_from(base).await?;
        }
        Ok(Continued::Yes)
    }

    /// The agreed shutdowns no continuation took back yet.
    async fn shutdowns_to_take_back(&self) -> Result<Vec<String>, StoreError> {
        Ok(standing_shutdowns(self.store.as_ref(), self.run_id())
            .await?
            .into_iter()
            .filter(agreed)
            .map(|r| r.request_id)
            .collect())
    }
}

/// The lead's new turn: the person's prompt, then what the continuation means for the team.
fn continuation_prompt(
    prompt: &str,
    teammates: &[String],
    previous: Option<&PreviousResult>,
) -> String {
    let mut notes = vec!["The person continues this run with the request above.".to_owned()];
    if !teammates.is_empty() {
        notes.push(format!(
            "Your teammates ({}) are still here, idle, and remember their earlier work: send \
             them new work with SendMessage, or put it on the board with TaskCreate.",
            teammates.join(", ")
        ));
    }
    match previous {
        Some(PreviousResult::FreshBase(_)) => notes.push(
            "The team's earlier result is in the person's working tree; every worktree now \
             starts again from that tree as it is now."
                .to_owned(),
        ),
        Some(PreviousResult::OnBranch { branch }) => notes.push(format!(
            "The team's earlier result was not applied to the person's working tree (it \
             changed meanwhile); it stays on branch {branch}, and the team goes on from it."
        )),
        None => {}
    }
    format!("{prompt}\n\n({})", notes.join(" "))
}
