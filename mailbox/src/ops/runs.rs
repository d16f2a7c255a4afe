//! Runs, the roster, agents' records, counters, keyed operations, a turn's commit and
//! retention: each once for both backends (see [`super`]).

use serde_json::Value;

use super::{Tx, mail, tasks};
use crate::clock::now_millis;
use crate::error::{StoreError, StoreResult};
use crate::rows::{self, RUN_COLUMNS};
use crate::rules;
use crate::types::*;
use crate::wake::Wake;

pub(crate) async fn create_run(tx: &impl Tx, run: &NewRun) -> StoreResult<RunRecord> {
    validate_run_id(&run.id)?;
    if get_run(tx, &run.id).await?.is_some() {
        return Err(StoreError::RunExists(run.id.clone()));
    }
    require_free_slug(tx, &run.slug).await?;
    let now = now_millis();
    // On PostgreSQL another run may take the slug between the check and the insert (it holds
    // another run's lock): the unique constraint decides, and the loser is told as above.
    let inserted = tx
        .execute(
            "INSERT INTO runs (id, slug, team, workspace, status, created_at, updated_at, \
             batch_line_id, auto_gate_open, auto_denials, auto_gate_limit, launch_options, epoch, project_id) \
             VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?5, ?6, ?7, ?8, ?9, ?10, 0, ?11) ON CONFLICT DO NOTHING",
            &[
                &run.id,
                &run.slug,
                &run.team,
                &run.workspace,
                &now,
                &run.batch_line_id,
                &(run.auto_gate.open as i64),
                &(run.auto_gate.consecutive_denials as i64),
                &(run.auto_gate.limit as i64),
                &run.launch_options.to_string(),
                &run.project_id,
            ],
        )
        .await?;
    if inserted == 0 {
        return Err(StoreError::SlugExists(run.slug.clone()));
    }
    for entry in rules::roster::founding_members() {
        insert_member(tx, &run.id, &entry).await?;
    }
    require_run(tx, &run.id).await
}

pub(crate) async fn get_run(tx: &impl Tx, id: &str) -> StoreResult<Option<RunRecord>> {
    let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1");
    tx.query_opt(&sql, &[&id], rows::run).await
}

pub(crate) async fn require_run(tx: &impl Tx, id: &str) -> StoreResult<RunRecord> {
    get_run(tx, id)
        .await?
        .ok_or_else(|| StoreError::UnknownRun(id.to_owned()))
}

pub(crate) async fn list_runs(tx: &impl Tx) -> StoreResult<Vec<RunRecord>> {
    let sql = format!("SELECT {RUN_COLUMNS} FROM runs ORDER BY created_at, id");
    tx.query(&sql, &[], rows::run).await
}

/// Refuses a slug another run holds: plan files are named after it.
pub(crate) async fn require_free_slug(tx: &impl Tx, slug: &str) -> StoreResult<()> {
    let sql = "SELECT EXISTS (SELECT 1 FROM runs WHERE slug = ?1)";
    if tx
        .query_one(sql, &[&slug], |r| r.get::<bool>("runs", 0))
        .await?
    {
        return Err(StoreError::SlugExists(slug.to_owned()));
    }
    Ok(())
}

/// Whether a run exists, without reading its row: the hot path of every send.
pub(crate) async fn require_run_exists(tx: &impl Tx, id: &str) -> StoreResult<()> {
    let sql = "SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1)";
    if tx
        .query_one(sql, &[&id], |r| r.get::<bool>("runs", 0))
        .await?
    {
        return Ok(());
    }
    Err(StoreError::UnknownRun(id.to_owned()))
}

/// The run's auto-mode gate alone: a turn's commit reads it, not the whole run (its launch
/// options are JSON to parse).
async fn auto_gate(tx: &impl Tx, id: &str) -> StoreResult<AutoGate> {
    let sql = "SELECT auto_gate_open, auto_denials, auto_gate_limit FROM runs WHERE id = ?1";
    tx.query_opt(sql, &[&id], |row| rows::auto_gate_at(row, 0))
        .await?
        .ok_or_else(|| StoreError::UnknownRun(id.to_owned()))
}

/// Runs an UPDATE of one run, then reads the run back; no such run: `UnknownRun`.
async fn update_run(
    tx: &impl Tx,
    id: &str,
    sql: &str,
    args: &[&dyn super::Arg],
) -> StoreResult<RunRecord> {
    if tx.execute(sql, args).await? == 0 {
        return Err(StoreError::UnknownRun(id.to_owned()));
    }
    require_run(tx, id).await
}

pub(crate) async fn set_run_status(
    tx: &impl Tx,
    id: &str,
    status: RunStatus,
    result: Option<&Value>,
) -> StoreResult<RunRecord> {
    let sql =
        "UPDATE runs SET status = ?2, updated_at = ?3, result = COALESCE(?4, result) WHERE id = ?1";
    let result = result.map(Value::to_string);
    update_run(
        tx,
        id,
        sql,
        &[&id, &status.as_str(), &now_millis(), &result],
    )
    .await
}

pub(crate) async fn set_launch_options(
    tx: &impl Tx,
    id: &str,
    launch_options: &Value,
) -> StoreResult<RunRecord> {
    let sql = "UPDATE runs SET launch_options = ?2, updated_at = ?3 WHERE id = ?1";
    update_run(
        tx,
        id,
        sql,
        &[&id, &launch_options.to_string(), &now_millis()],
    )
    .await
}

/// Takes ownership of a run for a new process epoch and voids the leases of older epochs.
pub(crate) async fn open_epoch(tx: &impl Tx, id: &str, wakes: &mut Vec<Wake>) -> StoreResult<i64> {
    let epoch = tx
        .query_opt(
            "UPDATE runs SET epoch = epoch + 1, updated_at = ?2 WHERE id = ?1 RETURNING epoch",
            &[&id, &now_millis()],
            |r| r.get::<i64>("runs", 0),
        )
        .await?
        .ok_or_else(|| StoreError::UnknownRun(id.to_owned()))?;
    tx.execute(
        "UPDATE messages SET state = 0, lease_epoch = NULL, leased_at = NULL \
         WHERE run_id = ?1 AND state = 1 AND lease_epoch < ?2",
        &[&id, &epoch],
    )
    .await?;
    super::ledger::release_before_epoch(tx, id, epoch, wakes).await?;
    Ok(epoch)
}

pub(crate) async fn update_auto_gate(
    tx: &impl Tx,
    run_id: &str,
    update: AutoGateUpdate,
) -> StoreResult<AutoGate> {
    let sql = match update {
        AutoGateUpdate::Denied(_) => {
            "UPDATE runs SET auto_denials = auto_denials + ?2, \
             auto_gate_open = CASE WHEN auto_denials + ?2 >= auto_gate_limit THEN 0 ELSE auto_gate_open END \
             WHERE id = ?1"
        }
        AutoGateUpdate::Allowed => "UPDATE runs SET auto_denials = ?2 WHERE id = ?1",
        AutoGateUpdate::Close => "UPDATE runs SET auto_gate_open = ?2 WHERE id = ?1",
    };
    let value = match update {
        AutoGateUpdate::Denied(n) => n as i64,
        AutoGateUpdate::Allowed | AutoGateUpdate::Close => 0,
    };
    Ok(update_run(tx, run_id, sql, &[&run_id, &value])
        .await?
        .auto_gate)
}

// ---------------------------------------------------------------- roster

async fn insert_member(tx: &impl Tx, run_id: &str, entry: &RosterEntry) -> StoreResult<()> {
    tx.execute(
        "INSERT INTO roster (run_id, agent_id, kind, definition, parent, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        &[
            &run_id,
            &entry.agent,
            &entry.kind.as_str(),
            &entry.definition,
            &entry.parent,
            &now_millis(),
        ],
    )
    .await?;
    Ok(())
}

pub(crate) async fn add_member(tx: &impl Tx, run_id: &str, entry: &RosterEntry) -> StoreResult<()> {
    require_run_exists(tx, run_id).await?;
    rules::roster::check_new_member(entry)?;
    if member_kind(tx, run_id, &entry.agent).await?.is_some() {
        return Err(StoreError::AlreadyOnRoster {
            run: run_id.into(),
            agent: entry.agent.clone(),
        });
    }
    insert_member(tx, run_id, entry).await
}

pub(crate) async fn member_kind(
    tx: &impl Tx,
    run_id: &str,
    agent: &str,
) -> StoreResult<Option<MemberKind>> {
    let sql = "SELECT kind FROM roster WHERE run_id = ?1 AND agent_id = ?2";
    let kind = tx
        .query_opt(sql, &[&run_id, &agent], |r| r.get::<String>("roster", 0))
        .await?;
    kind.map(|k| rows::member_kind(&k)).transpose()
}

/// The kinds of a message's sender and recipient, in one statement (a send's two checks).
pub(crate) async fn sender_and_recipient(
    tx: &impl Tx,
    run_id: &str,
    [sender, recipient]: [&str; 2],
) -> StoreResult<[Option<MemberKind>; 2]> {
    let sql = "SELECT agent_id, kind FROM roster WHERE run_id = ?1 AND agent_id IN (?2, ?3)";
    let read =
        |r: &rows::Row<'_>| Ok((r.get::<String>("roster", 0)?, r.get::<String>("roster", 1)?));
    let mut kinds = [None, None];
    for (agent, kind) in tx.query(sql, &[&run_id, &sender, &recipient], read).await? {
        let kind = rows::member_kind(&kind)?;
        for (slot, name) in [sender, recipient].into_iter().enumerate() {
            if agent == name {
                kinds[slot] = Some(kind);
            }
        }
    }
    Ok(kinds)
}

pub(crate) async fn roster(tx: &impl Tx, run_id: &str) -> StoreResult<Vec<RosterEntry>> {
    let sql = format!(
        "SELECT agent_id, kind, definition, parent FROM roster WHERE run_id = ?1 ORDER BY {}",
        tx.dialect().roster_order()
    );
    tx.query(&sql, &[&run_id], rows::roster_entry).await
}

// ---------------------------------------------------------------- agent records

pub(crate) async fn append_records(
    tx: &impl Tx,
    run_id: &str,
    records: &[NewRecord],
) -> StoreResult<Vec<AgentRecord>> {
    let now = now_millis();
    let mut out = Vec::with_capacity(records.len());
    for record in records {
        let body = record.body.to_string();
        let seq = match record.seq {
            Some(seq) => insert_record_at(tx, run_id, record, seq, &body, now).await?,
            None => append_record(tx, run_id, record, &body, now).await?,
        };
        out.push(AgentRecord {
            run_id: run_id.into(),
            agent: record.agent.clone(),
            stream: record.stream.clone(),
            seq,
            body: record.body.clone(),
            created_at: now,
        });
    }
    Ok(out)
}

/// Appends a record after its stream's last, in one statement: the next `seq` is read where
/// the row is written (no other writer of the run runs meanwhile: SQLite's one writer,
/// PostgreSQL's run lock).
async fn append_record(
    tx: &impl Tx,
    run_id: &str,
    record: &NewRecord,
    body: &str,
    now: i64,
) -> StoreResult<i64> {
    tx.query_one(
        "INSERT INTO agent_records (run_id, agent_id, stream, seq, body, created_at) \
         SELECT ?1, ?2, ?3, COALESCE(MAX(seq), 0) + 1, CAST(?4 AS TEXT), CAST(?5 AS BIGINT) \
         FROM agent_records WHERE run_id = ?1 AND agent_id = ?2 AND stream = ?3 RETURNING seq",
        &[&run_id, &record.agent, &record.stream, &body, &now],
        |r| r.get::<i64>("agent_records", 0),
    )
    .await
}

/// Writes a record at the `seq` its caller chose; one already there is refused.
async fn insert_record_at(
    tx: &impl Tx,
    run_id: &str,
    record: &NewRecord,
    seq: i64,
    body: &str,
    now: i64,
) -> StoreResult<i64> {
    let inserted = tx
        .execute(
            "INSERT INTO agent_records (run_id, agent_id, stream, seq, body, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
            &[&run_id, &record.agent, &record.stream, &seq, &body, &now],
        )
        .await?;
    if inserted == 0 {
        return Err(StoreError::DuplicateRecord {
            run: run_id.into(),
            agent: record.agent.clone(),
            stream: record.stream.clone(),
            seq,
        });
    }
    Ok(seq)
}

/// Every agent's records of one stream of a run, by agent, then in order: one read where a
/// page needs all its agents' transcripts.
pub(crate) async fn stream_records(
    tx: &impl Tx,
    run_id: &str,
    stream: &str,
) -> StoreResult<Vec<AgentRecord>> {
    const T: &str = "agent_records";
    tx.query(
        "SELECT agent_id, seq, body, created_at FROM agent_records \
         WHERE run_id = ?1 AND stream = ?2 ORDER BY agent_id, seq",
        &[&run_id, &stream],
        |row| {
            Ok(AgentRecord {
                run_id: run_id.into(),
                agent: row.get(T, 0)?,
                stream: stream.into(),
                seq: row.get(T, 1)?,
                body: row.json(T, 2)?,
                created_at: row.get(T, 3)?,
            })
        },
    )
    .await
}

pub(crate) async fn records(
    tx: &impl Tx,
    run_id: &str,
    agent: &str,
    stream: &str,
    after_seq: i64,
) -> StoreResult<Vec<AgentRecord>> {
    const T: &str = "agent_records";
    tx.query(
        "SELECT seq, body, created_at FROM agent_records \
         WHERE run_id = ?1 AND agent_id = ?2 AND stream = ?3 AND seq > ?4 ORDER BY seq",
        &[&run_id, &agent, &stream, &after_seq],
        |row| {
            Ok(AgentRecord {
                run_id: run_id.into(),
                agent: agent.into(),
                stream: stream.into(),
                seq: row.get(T, 0)?,
                body: row.json(T, 1)?,
                created_at: row.get(T, 2)?,
            })
        },
    )
    .await
}

/// What an agent saw, the mail it consumed, its task changes, sends and answers, in one
/// transaction.
pub(crate) async fn commit_turn(
    tx: &impl Tx,
    turn: &CommitTurn,
    acker: mail::Acker,
    wakes: &mut Vec<Wake>,
) -> StoreResult<CommitTurnOutcome> {
    for entry in &turn.members {
        add_member(tx, &turn.run_id, entry).await?;
    }
    mail::ack(tx, &turn.run_id, &turn.acks, acker).await?;
    let records = append_records(tx, &turn.run_id, &turn.records).await?;
    // Charged with the records that carry the response, before the rest of the turn: a step
    // that fails after it takes the charge back with everything else.
    // The charge settles the agent's reservation for the request (see `crate::ledger`).
    let ledger = match &turn.charge {
        Some(spend) => {
            let charged = super::ledger::charge(tx, &turn.run_id, spend).await?;
            super::ledger::release(tx, &turn.run_id, &turn.agent, wakes).await?;
            Some(charged)
        }
        None => None,
    };
    let mut tasks = Vec::with_capacity(turn.task_updates.len());
    for update in &turn.task_updates {
        tasks.push(tasks::update_task(tx, update, wakes).await?);
    }
    let mut sent = Vec::with_capacity(turn.sends.len());
    for message in &turn.sends {
        sent.push(mail::send(tx, message, wakes).await?);
    }
    let mut responses = Vec::with_capacity(turn.responses.len());
    for answer in &turn.responses {
        responses.push(mail::respond(tx, answer, wakes).await?);
    }
    let auto_gate = match turn.auto_gate {
        Some(update) => update_auto_gate(tx, &turn.run_id, update).await?,
        None => auto_gate(tx, &turn.run_id).await?,
    };
    Ok(CommitTurnOutcome {
        records,
        sent,
        responses,
        auto_gate,
        tasks,
        ledger,
    })
}

// ---------------------------------------------------------------- keyed operations

/// The outcome stored under `(run, key)`, if the keyed operation already ran.
pub(crate) async fn stored_outcome<T: serde::de::DeserializeOwned>(
    tx: &impl Tx,
    run_id: &str,
    key: &str,
) -> StoreResult<Option<T>> {
    let sql = "SELECT outcome FROM operations WHERE run_id = ?1 AND op_key = ?2";
    let stored = tx
        .query_opt(sql, &[&run_id, &key], |r| r.get::<String>("operations", 0))
        .await?;
    stored
        .map(|text| rules::outcome::decode_outcome(key, &text))
        .transpose()
}

/// Stores a keyed operation's outcome in its transaction, so a repeat returns it.
pub(crate) async fn store_outcome<T: serde::Serialize>(
    tx: &impl Tx,
    run_id: &str,
    key: &str,
    outcome: &T,
) -> StoreResult<()> {
    let text = rules::outcome::encode_outcome(key, outcome)?;
    let sql = "INSERT INTO operations (run_id, op_key, outcome) VALUES (?1, ?2, ?3)";
    tx.execute(sql, &[&run_id, &key, &text]).await?;
    Ok(())
}

// ---------------------------------------------------------------- counters

pub(crate) async fn next_counter(tx: &impl Tx, run_id: &str, name: &str) -> StoreResult<i64> {
    require_run_exists(tx, run_id).await?;
    tx.query_one(
        "INSERT INTO counters (run_id, name, value) VALUES (?1, ?2, 1) \
         ON CONFLICT (run_id, name) DO UPDATE SET value = counters.value + 1 RETURNING value",
        &[&run_id, &name],
        |r| r.get::<i64>("counters", 0),
    )
    .await
}

/// The counter's next value once per key (see `MailboxStore::counter_for`).
pub(crate) async fn counter_for(
    tx: &impl Tx,
    run_id: &str,
    name: &str,
    key: &str,
) -> StoreResult<i64> {
    let key = rules::outcome::counter_key(name, key);
    if let Some(value) = stored_outcome(tx, run_id, &key).await? {
        return Ok(value);
    }
    let value = next_counter(tx, run_id, name).await?;
    store_outcome(tx, run_id, &key, &value).await?;
    Ok(value)
}

// ---------------------------------------------------------------- retention

/// Prunes the given runs (on PostgreSQL the caller holds their locks).
pub(crate) async fn prune(
    tx: &impl Tx,
    runs: Vec<RunRecord>,
    cutoff: UnixMillis,
) -> StoreResult<PruneReport> {
    let mut report = PruneReport::default();
    for run in runs {
        if !run.status.is_finished() {
            report.runs_skipped.push((run.id, run.status));
            continue;
        }
        // Requests and responses are decisions: kept for as long as their run exists.
        let deleted = tx
            .execute(
                "DELETE FROM messages WHERE run_id = ?1 AND state = 2 AND created_at < ?2 AND request_id IS NULL",
                &[&run.id, &cutoff],
            )
            .await?;
        let kept = tx
            .query_one(
                "SELECT COUNT(*) FROM messages WHERE run_id = ?1 AND request_id IS NOT NULL",
                &[&run.id],
                |r| r.get::<i64>("messages", 0),
            )
            .await?;
        report.messages_deleted += deleted;
        report.decisions_kept += kept.max(0) as u64;
        report.runs_pruned.push(run.id);
    }
    Ok(report)
}
