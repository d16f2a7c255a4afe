//! A person's requests to a live run from another terminal (or machine): `muster interrupt RUN`
//! ends the main agent's running turn (`interrupt_turn`; the run stays live), and `muster run
//! --continue RUN -p …` hands the waiting run its next prompt.
//!
//! Each request is committed first, as a record of agent `human` on stream [`INTERRUPTS`] or
//! [`PROMPTS`] naming the run's epoch, then announced to the process holding the run (its
//! socket on SQLite, NOTIFY on PostgreSQL — so a run live on another machine sharing the store
//! hears it too) as a wake of recipient `human`. The live process watches that wake through the
//! store ([`MailboxStore::woken`]) and reads the records: control follows the committed request,
//! never the wake-up. A request of an older epoch (the process it was meant for died) is never
//! acted on. A prompt is taken in the commit of the agent's new user turn (a record on
//! [`PROMPTS_TAKEN`] with it), so it is answered once.

use std::sync::Arc;

use muster_agents::runtime::{AgentRuntime, Record, TRANSCRIPT, TurnInterrupt};
use muster_mailbox::{MailboxStore, NewRecord, live};
use serde::{Deserialize, Serialize};

/// The records stream (agent `human`) of interrupt requests.
pub const INTERRUPTS: &str = "interrupt";
/// The records stream (agent `human`) of prompts handed to a live run.
pub const PROMPTS: &str = "prompt";
/// The records stream (agent `human`) of prompts a run has taken, committed with the turn.
pub const PROMPTS_TAKEN: &str = "prompt_taken";
const HUMAN: &str = muster_mailbox::HUMAN;
/// The recipient whose wake carries the requests: `human`, the requests' sender (a name no
/// agent takes, and one the run's socket accepts); a wake for other `human` mail only makes
/// the watch look again.
const INTERRUPT_WAKE: &str = HUMAN;
const PROMPT_WAKE: &str = HUMAN;

/// A person's request, as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Request {
    /// The epoch of the process it is meant for.
    epoch: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    prompt: Option<String>,
}

/// A taken prompt: the `seq` of its request.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Taken {
    seq: i64,
}

/// Why a request was not made, in words a person can act on.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error(
        "run {0} is not live: there is no turn to interrupt (`muster run --continue {0} -p …` gives it a new prompt)"
    )]
    NotLive(String),
    #[error(
        "run {run} is live and its {agent} is working: `muster interrupt {run}` first, then give it the prompt"
    )]
    Busy { run: String, agent: String },
    #[error("the store failed: {0}")]
    Store(#[from] muster_mailbox::StoreError),
    #[error("{0}")]
    Record(String),
}

/// Commits an interrupt request for the live run `run_id` and announces it.
pub async fn request_interrupt(
    store: &dyn MailboxStore,
    runs_dir: &std::path::Path,
    run_id: &str,
) -> Result<(), Refused> {
    let epoch = live_epoch(store, runs_dir, run_id).await?;
    append(
        store,
        run_id,
        INTERRUPTS,
        &Request {
            epoch,
            prompt: None,
        },
    )
    .await?;
    muster_mailbox::failpoint!("interrupt_requested");
    // Committed: a wake-up that fails only delays it to the process's next look.
    let _ = live::announce(store, runs_dir, run_id, INTERRUPT_WAKE).await;
    Ok(())
}

/// Hands `prompt` to the live run `run_id`, whose main agent `agent` waits after an
/// interrupted turn; refused while it works.
pub async fn request_prompt(
    store: &dyn MailboxStore,
    runs_dir: &std::path::Path,
    run_id: &str,
    agent: &str,
    prompt: &str,
) -> Result<(), Refused> {
    let epoch = live_epoch(store, runs_dir, run_id).await?;
    if !waits_for_a_prompt(store, run_id, agent, epoch).await? {
        return Err(Refused::Busy {
            run: run_id.to_owned(),
            agent: agent.to_owned(),
        });
    }
    let request = Request {
        epoch,
        prompt: Some(prompt.to_owned()),
    };
    append(store, run_id, PROMPTS, &request).await?;
    let _ = live::announce(store, runs_dir, run_id, PROMPT_WAKE).await;
    Ok(())
}

/// The epoch of the process holding `run_id` live (here or, on a shared store, anywhere).
async fn live_epoch(
    store: &dyn MailboxStore,
    runs_dir: &std::path::Path,
    run_id: &str,
) -> Result<i64, Refused> {
    let record = store.run(run_id).await?.ok_or_else(|| {
        Refused::Record(format!(
            "no run {run_id:?} in this store (see `muster runs`)"
        ))
    })?;
    if !live::is_live_anywhere(store, runs_dir, run_id).await? {
        return Err(Refused::NotLive(run_id.to_owned()));
    }
    Ok(record.epoch)
}

/// Whether `agent`'s last turn ended interrupted and no prompt of this epoch waits untaken.
async fn waits_for_a_prompt(
    store: &dyn MailboxStore,
    run_id: &str,
    agent: &str,
    epoch: i64,
) -> Result<bool, Refused> {
    let rows = store.records(run_id, agent, TRANSCRIPT, 0).await?;
    let last = rows
        .iter()
        .rev()
        .find_map(|row| match Record::from_stored(row) {
            Ok(Record::Checkpoint { .. }) | Err(_) => None,
            Ok(record) => Some(record),
        });
    if !matches!(last, Some(Record::TurnInterrupted { .. })) {
        return Ok(false);
    }
    Ok(next_prompt(store, run_id, epoch).await?.is_none())
}

/// The oldest prompt of `epoch` not taken yet: its request's seq and text.
async fn next_prompt(
    store: &dyn MailboxStore,
    run_id: &str,
    epoch: i64,
) -> Result<Option<(i64, String)>, muster_mailbox::StoreError> {
    let taken: Vec<i64> = store
        .records(run_id, HUMAN, PROMPTS_TAKEN, 0)
        .await?
        .into_iter()
        .filter_map(|row| serde_json::from_value::<Taken>(row.body).ok())
        .map(|taken| taken.seq)
        .collect();
    Ok(store
        .records(run_id, HUMAN, PROMPTS, 0)
        .await?
        .into_iter()
        .filter(|row| !taken.contains(&row.seq))
        .find_map(|row| {
            let request = serde_json::from_value::<Request>(row.body).ok()?;
            (request.epoch == epoch)
                .then_some(request.prompt)
                .flatten()
                .map(|prompt| (row.seq, prompt))
        }))
}

async fn append(
    store: &dyn MailboxStore,
    run_id: &str,
    stream: &str,
    request: &Request,
) -> Result<(), Refused> {
    let body = serde_json::to_value(request).map_err(|e| Refused::Record(e.to_string()))?;
    store
        .append_records(
            run_id,
            vec![NewRecord {
                agent: HUMAN.to_owned(),
                stream: stream.to_owned(),
                seq: None,
                body,
            }],
        )
        .await?;
    Ok(())
}

/// Watches the run's interrupt requests for the process of `epoch` and interrupts `turn`'s
/// running turn for each; stops when dropped.
pub(crate) struct InterruptWatch(tokio::task::JoinHandle<()>);

impl Drop for InterruptWatch {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl InterruptWatch {
    pub(crate) async fn start(
        store: Arc<dyn MailboxStore>,
        run_id: String,
        epoch: i64,
        turn: TurnInterrupt,
    ) -> anyhow::Result<InterruptWatch> {
        // Requests before this process are never its own (their epoch is older anyway).
        let mut seen = last_seq(store.as_ref(), &run_id, INTERRUPTS).await?;
        let task = tokio::spawn(async move {
            let woken = store.woken(&run_id, INTERRUPT_WAKE);
            loop {
                let notified = woken.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                match store.records(&run_id, HUMAN, INTERRUPTS, seen).await {
                    Ok(rows) => {
                        for row in rows {
                            seen = seen.max(row.seq);
                            let mine = serde_json::from_value::<Request>(row.body)
                                .is_ok_and(|request| request.epoch == epoch);
                            if mine && !turn.interrupt() {
                                tracing::info!(run = %run_id, "an interrupt found no running turn");
                            }
                        }
                    }
                    Err(error) => {
                        tracing::warn!(run = %run_id, %error, "reading interrupt requests")
                    }
                }
                notified.await;
            }
        });
        Ok(InterruptWatch(task))
    }
}

async fn last_seq(store: &dyn MailboxStore, run_id: &str, stream: &str) -> anyhow::Result<i64> {
    Ok(store
        .records(run_id, HUMAN, stream, 0)
        .await?
        .last()
        .map_or(0, |row| row.seq))
}

/// After an interrupted turn: tells the person how to go on, waits for the next prompt handed
/// to this process (epoch `epoch`), and commits it as `agent`'s new user turn with its taking.
pub(crate) async fn take_next_prompt(
    store: &dyn MailboxStore,
    run_id: &str,
    epoch: i64,
    agent: &mut AgentRuntime,
) -> anyhow::Result<()> {
    eprintln!(
        "muster: the turn was interrupted; run {run_id} waits for its next prompt: \
         `muster run --continue {run_id} -p …` (Ctrl-C ends the run)"
    );
    let (seq, prompt) = muster_mailbox::until_found(&store.woken(run_id, PROMPT_WAKE), || {
        next_prompt(store, run_id, epoch)
    })
    .await?;
    let taken = NewRecord {
        agent: HUMAN.to_owned(),
        stream: PROMPTS_TAKEN.to_owned(),
        seq: None,
        body: serde_json::to_value(Taken { seq })?,
    };
    agent.prompt_with(&prompt, vec![taken]).await?;
    Ok(())
}
