//! A person stops a teammate or the run from the page. Each stop is committed first, then the
//! run is woken, as a decision is:
//!
//! - A teammate: a `shutdown_request` from `human`, the request the lead's `ShutdownTeammate`
//!   sends, announced to the live run (an idle teammate agrees at once; a busy one gets it at
//!   its next turn boundary and is stopped after the team's shutdown timeout, as the lead's
//!   request would). On a run no process holds it waits in the teammate's mail and applies at
//!   `muster resume`.
//! - The run: a `stop` record from `human` (who asked, in which epoch), then SIGINT to the
//!   process holding the run's lock: the run takes Ctrl-C's transition (agents stopped, run
//!   `interrupted`, `muster resume` continues it). Only a run live on this machine can be
//!   stopped so; one stop per epoch (a second SIGINT would end the process at once).

use std::path::Path;

use muster_mailbox::{
    MailboxStore, MemberKind, MessageBody, MessageKind, NewMessage, NewRecord, live,
};
use muster_protocol::{RequestFamily, RequestId, Responder};
use serde_json::json;

/// The records stream, under agent `human`, holding the run stops people asked for.
pub const STOP_STREAM: &str = "stop";

/// Why a stop was not made, in words a person can act on.
#[derive(Debug, thiserror::Error)]
pub enum StopRefused {
    #[error("there is no run {0:?} in this store")]
    NoRun(String),
    #[error("run {run:?} has no teammate {agent:?} (only teammates are stopped from here)")]
    NotATeammate { run: String, agent: String },
    #[error(
        "{agent} was already asked to stop ({request_id}); it stops when it agrees or after the team's shutdown timeout"
    )]
    AlreadyAsked { agent: String, request_id: String },
    #[error("{0} has already stopped")]
    AlreadyStopped(String),
    #[error(
        "the run is not live on this machine: nothing runs to stop (a run live on another machine is stopped there)"
    )]
    NotLive,
    #[error("a stop of this run was already sent; it ends as soon as its agents have stopped")]
    AlreadyStopping,
    #[error("the run's process could not be signalled: {0}")]
    Signal(String),
    #[error("the store failed: {0}")]
    Store(#[from] muster_mailbox::StoreError),
}

/// What a stop of a teammate did.
pub enum TeammateStop {
    /// Sent and announced to the live run.
    Woken(String),
    /// Stored; `muster resume` applies it.
    Stored(String),
}

/// Sends `agent` a person's shutdown request and wakes the live run.
pub async fn stop_teammate(
    store: &dyn MailboxStore,
    runs_dir: &Path,
    run_id: &str,
    agent: &str,
) -> Result<TeammateStop, StopRefused> {
    store
        .run(run_id)
        .await?
        .ok_or_else(|| StopRefused::NoRun(run_id.to_owned()))?;
    let roster = store.roster(run_id).await?;
    if !roster
        .iter()
        .any(|m| m.agent == agent && m.kind == MemberKind::Teammate)
    {
        return Err(StopRefused::NotATeammate {
            run: run_id.to_owned(),
            agent: agent.to_owned(),
        });
    }
    for request in store.requests(run_id).await? {
        if request.kind != MessageKind::ShutdownRequest || request.recipient != agent {
            continue;
        }
        match &request.response {
            Some(response) if response.body.approved() == Some(true) => {
                return Err(StopRefused::AlreadyStopped(agent.to_owned()));
            }
            None if request.requester == Responder::HUMAN => {
                return Err(StopRefused::AlreadyAsked {
                    agent: agent.to_owned(),
                    request_id: request.request_id,
                });
            }
            _ => {}
        }
    }
    let counter = RequestFamily::Shutdown.counter_name(agent);
    let number = store.next_counter(run_id, &counter).await?;
    let request_id = RequestId::new(RequestFamily::Shutdown, agent, number).to_string();
    store
        .send(NewMessage {
            run_id: run_id.to_owned(),
            sender: Responder::HUMAN.to_owned(),
            recipient: agent.to_owned(),
            body: MessageBody::ShutdownRequest {
                request_id: request_id.clone(),
                reason: Some("A person stopped you from the web inbox.".into()),
            },
            idempotency_key: None,
        })
        .await?;
    // The request is committed: a wake-up that fails only delays it to the next look.
    match live::announce(store, runs_dir, run_id, agent).await {
        Ok(live::PokeOutcome::Woken) => Ok(TeammateStop::Woken(request_id)),
        _ => Ok(TeammateStop::Stored(request_id)),
    }
}

/// Records a person's stop of the run, then interrupts its live process as Ctrl-C does.
pub async fn stop_run(
    store: &dyn MailboxStore,
    runs_dir: &Path,
    run_id: &str,
) -> Result<(), StopRefused> {
    let run = store
        .run(run_id)
        .await?
        .ok_or_else(|| StopRefused::NoRun(run_id.to_owned()))?;
    if !live::is_live(runs_dir, run_id)? {
        return Err(StopRefused::NotLive);
    }
    let stops = store
        .records(run_id, Responder::HUMAN, STOP_STREAM, 0)
        .await?;
    if stops.iter().any(|row| row.body["epoch"] == run.epoch) {
        return Err(StopRefused::AlreadyStopping);
    }
    let pid = holder_pid(runs_dir, run_id)?;
    store
        .append_records(
            run_id,
            vec![NewRecord {
                agent: Responder::HUMAN.to_owned(),
                stream: STOP_STREAM.to_owned(),
                seq: None,
                body: json!({"requested_by": Responder::HUMAN, "epoch": run.epoch,
                    "reason": "stopped from the web inbox"}),
            }],
        )
        .await?;
    // The lock is still held (checked above): its pid is the live run's.
    if !live::is_live(runs_dir, run_id)? {
        return Ok(());
    }
    rustix::process::kill_process(pid, rustix::process::Signal::INT)
        .map_err(|error| StopRefused::Signal(error.to_string()))
}

/// The pid the run's lock file names (its second line, written by the holder).
fn holder_pid(runs_dir: &Path, run_id: &str) -> Result<rustix::process::Pid, StopRefused> {
    let path = live::lock_path(runs_dir, run_id);
    let text = std::fs::read_to_string(&path)
        .map_err(|error| StopRefused::Signal(format!("{}: {error}", path.display())))?;
    text.lines()
        .nth(1)
        .and_then(|line| line.trim().parse::<i32>().ok())
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| StopRefused::Signal(format!("{} names no process", path.display())))
}
