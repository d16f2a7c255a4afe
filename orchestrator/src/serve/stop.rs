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
//!   `interrupted`, `muster resume` continues it); one stop per epoch (a second SIGINT would
//!   end the process at once). On a run no process holds the record is marked `at_resume`:
//!   the next resume honours it ([`apply_pending_run_stop`], one commit naming the stops it
//!   applied) by ending at once as Ctrl-C would, and the resume after that continues. A run
//!   live on another machine (a shared store's lock) is stopped there.

use std::path::Path;

use muster_mailbox::{
    AgentRecord, MailboxStore, MemberKind, MessageBody, NewMessage, NewRecord, live,
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
        "the run is live on another machine: stop it there (Ctrl-C in its terminal, or its machine's `muster serve`)"
    )]
    LiveElsewhere,
    #[error("the run is {0}: there is nothing to stop")]
    Finished(&'static str),
    #[error("a stop of this run was already sent; it ends as soon as its agents have stopped")]
    AlreadyStopping,
    #[error("a stop of this run already waits for its next `muster resume`")]
    AlreadyWaiting,
    #[error("the run's process could not be signalled: {0}")]
    Signal(String),
    #[error("the store failed: {0}")]
    Store(#[from] muster_mailbox::StoreError),
}

/// What a stop of a teammate did.
#[derive(Debug)]
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
    // A shutdown a continuation took back no longer stops the teammate: it works again.
    for request in crate::team::continuation::standing_shutdowns(store, run_id).await? {
        if request.recipient != agent {
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

/// What a stop of the run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStopped {
    /// Recorded, and the live process was sent SIGINT.
    Interrupted,
    /// Recorded for a run no process holds: the next resume honours it.
    AtResume,
}

/// A person's stop of the run, as the `stop` stream holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunStop {
    pub seq: i64,
    pub at: i64,
    pub epoch: i64,
    /// Asked while no process held the run: for the next resume.
    pub at_resume: bool,
    /// When a resume honoured it (an `at_resume` stop only).
    pub applied_at: Option<i64>,
}

/// The run stops people asked for, in order, each with whether a resume applied it.
pub fn run_stops(rows: &[AgentRecord]) -> Vec<RunStop> {
    let applied: Vec<(i64, i64)> = rows
        .iter()
        .filter_map(|row| row.body["applied"].as_array().map(|seqs| (row, seqs)))
        .flat_map(|(row, seqs)| {
            seqs.iter()
                .filter_map(serde_json::Value::as_i64)
                .map(move |seq| (seq, row.created_at))
        })
        .collect();
    rows.iter()
        .filter(|row| row.body["requested_by"].is_string())
        .map(|row| RunStop {
            seq: row.seq,
            at: row.created_at,
            epoch: row.body["epoch"].as_i64().unwrap_or(-1),
            at_resume: row.body["at_resume"] == true,
            applied_at: applied
                .iter()
                .find(|(seq, _)| *seq == row.seq)
                .map(|(_, at)| *at),
        })
        .collect()
}

/// Records a person's stop of the run, then interrupts its live process as Ctrl-C does; on a
/// run no process holds, records it for the next resume.
pub async fn stop_run(
    store: &dyn MailboxStore,
    runs_dir: &Path,
    run_id: &str,
) -> Result<RunStopped, StopRefused> {
    let run = store
        .run(run_id)
        .await?
        .ok_or_else(|| StopRefused::NoRun(run_id.to_owned()))?;
    if run.status.is_finished() {
        return Err(StopRefused::Finished(run.status.as_str()));
    }
    let rows = store
        .records(run_id, Responder::HUMAN, STOP_STREAM, 0)
        .await?;
    let stops = run_stops(&rows);
    if !live::is_live(runs_dir, run_id)? {
        if store.is_held_live(run_id).await? == Some(true) {
            return Err(StopRefused::LiveElsewhere);
        }
        if stops.iter().any(|s| s.at_resume && s.applied_at.is_none()) {
            return Err(StopRefused::AlreadyWaiting);
        }
        append_stop(store, &run, true).await?;
        // A resume that took the run between the check and the commit may have looked for
        // waiting stops already: it is stopped as a live run is.
        if live::is_live(runs_dir, run_id)? {
            signal_holder(runs_dir, run_id)?;
        }
        return Ok(RunStopped::AtResume);
    }
    if stops.iter().any(|s| !s.at_resume && s.epoch == run.epoch) {
        return Err(StopRefused::AlreadyStopping);
    }
    let pid = holder_pid(runs_dir, run_id)?;
    append_stop(store, &run, false).await?;
    // The lock is still held (checked above): its pid is the live run's.
    if !live::is_live(runs_dir, run_id)? {
        return Ok(RunStopped::Interrupted);
    }
    rustix::process::kill_process(pid, rustix::process::Signal::INT)
        .map_err(|error| StopRefused::Signal(error.to_string()))?;
    Ok(RunStopped::Interrupted)
}

async fn append_stop(
    store: &dyn MailboxStore,
    run: &muster_mailbox::RunRecord,
    at_resume: bool,
) -> Result<(), StopRefused> {
    let mut body = json!({"requested_by": Responder::HUMAN, "epoch": run.epoch,
        "reason": "stopped from the web inbox"});
    if at_resume {
        body["at_resume"] = json!(true);
    }
    store
        .append_records(
            &run.id,
            vec![NewRecord {
                agent: Responder::HUMAN.to_owned(),
                stream: STOP_STREAM.to_owned(),
                seq: None,
                body,
            }],
        )
        .await?;
    Ok(())
}

fn signal_holder(runs_dir: &Path, run_id: &str) -> Result<(), StopRefused> {
    let pid = holder_pid(runs_dir, run_id)?;
    rustix::process::kill_process(pid, rustix::process::Signal::INT)
        .map_err(|error| StopRefused::Signal(error.to_string()))
}

/// For a resume that holds the run (epoch `epoch`): the stops people asked for while no process
/// held it and no resume has applied yet, marked applied in one commit (a kill before it leaves
/// them for the next resume; after it, they are spent). The time of the first, if any.
pub async fn apply_pending_run_stop(
    store: &dyn MailboxStore,
    run_id: &str,
    epoch: i64,
) -> Result<Option<i64>, muster_mailbox::StoreError> {
    let rows = store
        .records(run_id, Responder::HUMAN, STOP_STREAM, 0)
        .await?;
    let pending: Vec<RunStop> = run_stops(&rows)
        .into_iter()
        .filter(|s| s.at_resume && s.applied_at.is_none())
        .collect();
    let Some(first) = pending.first() else {
        return Ok(None);
    };
    let seqs: Vec<i64> = pending.iter().map(|s| s.seq).collect();
    store
        .append_records(
            run_id,
            vec![NewRecord {
                agent: Responder::HUMAN.to_owned(),
                stream: STOP_STREAM.to_owned(),
                seq: None,
                body: json!({"applied": seqs, "epoch": epoch}),
            }],
        )
        .await?;
    muster_mailbox::failpoint!("run_stop_applied");
    Ok(Some(first.at))
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

#[cfg(test)]
mod tests {
    use super::*;
    use muster_mailbox::{
        AutoGate, MemberKind, NewRecord, NewResponse, NewRun, RosterEntry, SqliteStore,
        StoreOptions,
    };

    const RUN: &str = "r1";

    /// A run whose teammate `alice` agreed to the end-of-run shutdown `shutdown-alice-1`.
    async fn stopped_teammate(dir: &Path) -> SqliteStore {
        let store = SqliteStore::open(&dir.join("muster.db"), StoreOptions::default()).unwrap();
        store
            .create_run(NewRun {
                id: RUN.into(),
                slug: "slug".into(),
                team: Some("t".into()),
                workspace: "/ws".into(),
                batch_line_id: None,
                auto_gate: AutoGate {
                    open: true,
                    consecutive_denials: 0,
                    limit: 3,
                },
                launch_options: json!({}),
                project_id: None,
            })
            .await
            .unwrap();
        for (agent, kind) in [
            (crate::team::LEAD, MemberKind::Lead),
            ("alice", MemberKind::Teammate),
        ] {
            let entry = RosterEntry {
                agent: agent.into(),
                kind,
                definition: None,
                parent: None,
            };
            store.add_member(RUN, entry).await.unwrap();
        }
        // Numbered as the team numbers it, so a person's later stop takes the next number.
        let counter = RequestFamily::Shutdown.counter_name("alice");
        assert_eq!(store.next_counter(RUN, &counter).await.unwrap(), 1);
        store
            .send(NewMessage {
                run_id: RUN.into(),
                sender: crate::team::LEAD.into(),
                recipient: "alice".into(),
                body: MessageBody::ShutdownRequest {
                    request_id: "shutdown-alice-1".into(),
                    reason: None,
                },
                idempotency_key: None,
            })
            .await
            .unwrap();
        store
            .respond(NewResponse {
                run_id: RUN.into(),
                sender: "alice".into(),
                body: MessageBody::ShutdownResponse {
                    request_id: "shutdown-alice-1".into(),
                    approve: true,
                    reason: None,
                },
                idempotency_key: None,
            })
            .await
            .unwrap();
        store
    }

    #[tokio::test]
    async fn a_teammate_a_continuation_took_back_can_be_stopped_again() {
        let dir = tempfile::tempdir().unwrap();
        let store = stopped_teammate(dir.path()).await;
        let refused = stop_teammate(&store, dir.path(), RUN, "alice").await;
        assert!(
            matches!(refused, Err(StopRefused::AlreadyStopped(_))),
            "{refused:?}"
        );
        store
            .append_records(
                RUN,
                vec![NewRecord {
                    agent: crate::team::LEAD.into(),
                    stream: crate::team::continuation::CONTINUE_STREAM.into(),
                    seq: None,
                    body: json!({"revived": ["shutdown-alice-1"]}),
                }],
            )
            .await
            .unwrap();
        let stopped = stop_teammate(&store, dir.path(), RUN, "alice").await;
        assert!(
            matches!(stopped, Ok(TeammateStop::Stored(_))),
            "{stopped:?}"
        );
    }
}
