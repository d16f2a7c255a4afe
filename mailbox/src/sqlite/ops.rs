//! The store's operations as SQL on one connection. Each runs inside the writer's SAVEPOINT;
//! an `Err` rolls back only that operation.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde_json::Value;
use uuid::Uuid;

use crate::error::{StoreError, StoreResult};
use crate::message::{Correlation, MessageKind, correlation_of, responder_member};
use crate::types::*;
use crate::wake::Wake;

/// Settings every operation needs.
#[derive(Debug, Clone)]
pub(crate) struct OpContext {
    pub(crate) path: std::sync::Arc<std::path::PathBuf>,
    pub(crate) max_body_bytes: usize,
}

impl OpContext {
    pub(crate) fn sql(&self) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        move |source| sql_error(&self.path, source)
    }
}

pub(crate) fn sql_error(path: &Path, source: rusqlite::Error) -> StoreError {
    let busy = matches!(
        source.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    );
    if busy {
        StoreError::Locked {
            path: path.to_path_buf(),
            waited_ms: 0,
        }
    } else {
        StoreError::Sqlite {
            path: path.to_path_buf(),
            source,
        }
    }
}

pub(crate) use crate::clock::now_millis;

fn parse_json(table: &'static str, text: &str) -> StoreResult<Value> {
    serde_json::from_str(text).map_err(|e| StoreError::CorruptRow {
        table,
        detail: format!("invalid JSON: {e}"),
    })
}

fn to_json_text(value: &Value) -> String {
    value.to_string()
}

// ---------------------------------------------------------------- runs

const RUN_COLUMNS: &str = "id, slug, team, workspace, status, created_at, updated_at, \
    batch_line_id, auto_gate_open, auto_denials, auto_gate_limit, launch_options, epoch, result, project_id";

struct RawRun {
    id: String,
    slug: String,
    team: Option<String>,
    workspace: String,
    status: String,
    created_at: i64,
    updated_at: i64,
    batch_line_id: Option<String>,
    auto_gate_open: i64,
    auto_denials: i64,
    auto_gate_limit: i64,
    launch_options: String,
    epoch: i64,
    result: Option<String>,
    project_id: Option<String>,
}

fn raw_run(row: &Row<'_>) -> rusqlite::Result<RawRun> {
    Ok(RawRun {
        id: row.get(0)?,
        slug: row.get(1)?,
        team: row.get(2)?,
        workspace: row.get(3)?,
        status: row.get(4)?,
        created_at: row.get(5)?,
        updated_at: row.get(6)?,
        batch_line_id: row.get(7)?,
        auto_gate_open: row.get(8)?,
        auto_denials: row.get(9)?,
        auto_gate_limit: row.get(10)?,
        launch_options: row.get(11)?,
        epoch: row.get(12)?,
        result: row.get(13)?,
        project_id: row.get(14)?,
    })
}

impl RawRun {
    fn into_record(self) -> StoreResult<RunRecord> {
        let status = RunStatus::parse(&self.status).ok_or_else(|| StoreError::CorruptRow {
            table: "runs",
            detail: format!("unknown status {:?}", self.status),
        })?;
        Ok(RunRecord {
            id: self.id,
            slug: self.slug,
            team: self.team,
            workspace: self.workspace,
            status,
            created_at: self.created_at,
            updated_at: self.updated_at,
            batch_line_id: self.batch_line_id,
            auto_gate: AutoGate {
                open: self.auto_gate_open != 0,
                consecutive_denials: self.auto_denials.max(0) as u32,
                limit: self.auto_gate_limit.max(0) as u32,
            },
            launch_options: parse_json("runs", &self.launch_options)?,
            epoch: self.epoch,
            result: self
                .result
                .as_deref()
                .map(|r| parse_json("runs", r))
                .transpose()?,
            project_id: self.project_id,
        })
    }
}

pub(crate) fn create_run(
    conn: &Connection,
    ctx: &OpContext,
    run: &NewRun,
) -> StoreResult<RunRecord> {
    validate_run_id(&run.id)?;
    if get_run(conn, ctx, &run.id)?.is_some() {
        return Err(StoreError::RunExists(run.id.clone()));
    }
    require_free_slug(conn, ctx, &run.slug)?;
    let now = now_millis();
    conn.execute(
        "INSERT INTO runs (id, slug, team, workspace, status, created_at, updated_at, \
         batch_line_id, auto_gate_open, auto_denials, auto_gate_limit, launch_options, epoch, project_id) \
         VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?5, ?6, ?7, ?8, ?9, ?10, 0, ?11)",
        params![
            run.id,
            run.slug,
            run.team,
            run.workspace,
            now,
            run.batch_line_id,
            run.auto_gate.open as i64,
            run.auto_gate.consecutive_denials as i64,
            run.auto_gate.limit as i64,
            to_json_text(&run.launch_options),
            run.project_id,
        ],
    )
    .map_err(ctx.sql())?;
    for (agent, kind) in [(HUMAN, MemberKind::Human), (POLICY, MemberKind::Policy)] {
        insert_member(
            conn,
            ctx,
            &run.id,
            &RosterEntry {
                agent: agent.into(),
                kind,
                definition: None,
                parent: None,
            },
        )?;
    }
    require_run(conn, ctx, &run.id)
}

pub(crate) fn get_run(
    conn: &Connection,
    ctx: &OpContext,
    id: &str,
) -> StoreResult<Option<RunRecord>> {
    let raw = conn
        .prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"))
        .and_then(|mut stmt| stmt.query_row([id], raw_run).optional())
        .map_err(ctx.sql())?;
    raw.map(RawRun::into_record).transpose()
}

pub(crate) fn require_run(conn: &Connection, ctx: &OpContext, id: &str) -> StoreResult<RunRecord> {
    get_run(conn, ctx, id)?.ok_or_else(|| StoreError::UnknownRun(id.to_owned()))
}

pub(crate) fn list_runs(conn: &Connection, ctx: &OpContext) -> StoreResult<Vec<RunRecord>> {
    let raws = conn
        .prepare_cached(&format!(
            "SELECT {RUN_COLUMNS} FROM runs ORDER BY created_at, id"
        ))
        .and_then(|mut stmt| {
            stmt.query_map([], raw_run)?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(ctx.sql())?;
    raws.into_iter().map(RawRun::into_record).collect()
}

pub(crate) fn set_run_status(
    conn: &Connection,
    ctx: &OpContext,
    id: &str,
    status: RunStatus,
    result: Option<&Value>,
) -> StoreResult<RunRecord> {
    let changed = conn
        .execute(
            "UPDATE runs SET status = ?2, updated_at = ?3, result = COALESCE(?4, result) WHERE id = ?1",
            params![id, status.as_str(), now_millis(), result.map(to_json_text)],
        )
        .map_err(ctx.sql())?;
    if changed == 0 {
        return Err(StoreError::UnknownRun(id.to_owned()));
    }
    require_run(conn, ctx, id)
}

pub(crate) fn set_launch_options(
    conn: &Connection,
    ctx: &OpContext,
    id: &str,
    launch_options: &Value,
) -> StoreResult<RunRecord> {
    let changed = conn
        .execute(
            "UPDATE runs SET launch_options = ?2, updated_at = ?3 WHERE id = ?1",
            params![id, to_json_text(launch_options), now_millis()],
        )
        .map_err(ctx.sql())?;
    if changed == 0 {
        return Err(StoreError::UnknownRun(id.to_owned()));
    }
    require_run(conn, ctx, id)
}

/// Takes ownership of a run for a new process epoch and voids the leases of older epochs.
pub(crate) fn open_epoch(conn: &Connection, ctx: &OpContext, id: &str) -> StoreResult<i64> {
    let epoch: Option<i64> = conn
        .query_row(
            "UPDATE runs SET epoch = epoch + 1, updated_at = ?2 WHERE id = ?1 RETURNING epoch",
            params![id, now_millis()],
            |row| row.get(0),
        )
        .optional()
        .map_err(ctx.sql())?;
    let epoch = epoch.ok_or_else(|| StoreError::UnknownRun(id.to_owned()))?;
    conn.execute(
        "UPDATE messages SET state = 0, lease_epoch = NULL, leased_at = NULL \
         WHERE run_id = ?1 AND state = 1 AND lease_epoch < ?2",
        params![id, epoch],
    )
    .map_err(ctx.sql())?;
    Ok(epoch)
}

fn apply_auto_gate(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    update: AutoGateUpdate,
) -> StoreResult<AutoGate> {
    let sql = match update {
        AutoGateUpdate::Denied(_) => {
            "UPDATE runs SET auto_denials = auto_denials + ?2, \
             auto_gate_open = CASE WHEN auto_denials + ?2 >= auto_gate_limit THEN 0 ELSE auto_gate_open END \
             WHERE id = ?1"
        }
        AutoGateUpdate::Allowed => "UPDATE runs SET auto_denials = 0 WHERE id = ?1 AND ?2 = ?2",
        AutoGateUpdate::Close => "UPDATE runs SET auto_gate_open = 0 WHERE id = ?1 AND ?2 = ?2",
    };
    let count = match update {
        AutoGateUpdate::Denied(n) => n as i64,
        _ => 0,
    };
    let changed = conn
        .execute(sql, params![run_id, count])
        .map_err(ctx.sql())?;
    if changed == 0 {
        return Err(StoreError::UnknownRun(run_id.to_owned()));
    }
    Ok(require_run(conn, ctx, run_id)?.auto_gate)
}

pub(crate) fn update_auto_gate(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    update: AutoGateUpdate,
) -> StoreResult<AutoGate> {
    apply_auto_gate(conn, ctx, run_id, update)
}

// ---------------------------------------------------------------- roster

fn insert_member(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    entry: &RosterEntry,
) -> StoreResult<()> {
    conn.execute(
        "INSERT INTO roster (run_id, agent_id, kind, definition, parent, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            run_id,
            entry.agent,
            entry.kind.as_str(),
            entry.definition,
            entry.parent,
            now_millis()
        ],
    )
    .map_err(ctx.sql())?;
    Ok(())
}

pub(crate) fn add_member(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    entry: &RosterEntry,
) -> StoreResult<()> {
    require_run(conn, ctx, run_id)?;
    validate_agent_id(&entry.agent)?;
    if matches!(entry.kind, MemberKind::Human | MemberKind::Policy)
        || [HUMAN, POLICY].contains(&entry.agent.as_str())
    {
        return Err(StoreError::InvalidId {
            what: "roster entry",
            value: entry.agent.clone(),
            rule: "`human` and `policy` are reserved entries every run already has",
        });
    }
    if member_kind(conn, ctx, run_id, &entry.agent)?.is_some() {
        return Err(StoreError::AlreadyOnRoster {
            run: run_id.into(),
            agent: entry.agent.clone(),
        });
    }
    insert_member(conn, ctx, run_id, entry)
}

fn member_kind(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    agent: &str,
) -> StoreResult<Option<MemberKind>> {
    let kind: Option<String> = conn
        .prepare_cached("SELECT kind FROM roster WHERE run_id = ?1 AND agent_id = ?2")
        .and_then(|mut stmt| stmt.query_row([run_id, agent], |row| row.get(0)).optional())
        .map_err(ctx.sql())?;
    kind.map(|k| {
        MemberKind::parse(&k).ok_or_else(|| StoreError::CorruptRow {
            table: "roster",
            detail: format!("unknown kind {k:?}"),
        })
    })
    .transpose()
}

pub(crate) fn roster(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
) -> StoreResult<Vec<RosterEntry>> {
    let rows: Vec<(String, String, Option<String>, Option<String>)> = conn
        .prepare_cached(
            "SELECT agent_id, kind, definition, parent FROM roster WHERE run_id = ?1 ORDER BY rowid",
        )
        .and_then(|mut stmt| {
            stmt.query_map([run_id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))?
                .collect()
        })
        .map_err(ctx.sql())?;
    rows.into_iter()
        .map(|(agent, kind, definition, parent)| {
            let kind = MemberKind::parse(&kind).ok_or_else(|| StoreError::CorruptRow {
                table: "roster",
                detail: format!("unknown kind {kind:?}"),
            })?;
            Ok(RosterEntry {
                agent,
                kind,
                definition,
                parent,
            })
        })
        .collect()
}

// ---------------------------------------------------------------- messages

const MESSAGE_COLUMNS: &str = "key, seq, run_id, sender, recipient, kind, priority, request_id, \
    idempotency_key, body, state, created_at, leased_at, acked_at";

struct RawMessage {
    key: String,
    seq: i64,
    run_id: String,
    sender: String,
    recipient: String,
    kind: String,
    priority: i64,
    request_id: Option<String>,
    idempotency_key: Option<String>,
    body: String,
    state: i64,
    created_at: i64,
    leased_at: Option<i64>,
    acked_at: Option<i64>,
}

fn raw_message(row: &Row<'_>) -> rusqlite::Result<RawMessage> {
    Ok(RawMessage {
        key: row.get(0)?,
        seq: row.get(1)?,
        run_id: row.get(2)?,
        sender: row.get(3)?,
        recipient: row.get(4)?,
        kind: row.get(5)?,
        priority: row.get(6)?,
        request_id: row.get(7)?,
        idempotency_key: row.get(8)?,
        body: row.get(9)?,
        state: row.get(10)?,
        created_at: row.get(11)?,
        leased_at: row.get(12)?,
        acked_at: row.get(13)?,
    })
}

impl RawMessage {
    fn into_message(self) -> StoreResult<Message> {
        let state = DeliveryState::from_code(self.state).ok_or_else(|| StoreError::CorruptRow {
            table: "messages",
            detail: format!("unknown state {}", self.state),
        })?;
        let (kind, body) = read_kind_and_body(&self.kind, &parse_json("messages", &self.body)?);
        Ok(Message {
            key: self.key,
            seq: self.seq,
            run_id: self.run_id,
            sender: self.sender,
            recipient: self.recipient,
            kind,
            priority: Priority::from_code(self.priority),
            request_id: self.request_id,
            idempotency_key: self.idempotency_key,
            body,
            state,
            created_at: self.created_at,
            leased_at: self.leased_at,
            acked_at: self.acked_at,
        })
    }
}

fn message_where(
    conn: &Connection,
    ctx: &OpContext,
    clause: &str,
    args: &[&dyn rusqlite::ToSql],
) -> StoreResult<Option<Message>> {
    let raw = conn
        .prepare_cached(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages WHERE {clause}"
        ))
        .and_then(|mut stmt| stmt.query_row(args, raw_message).optional())
        .map_err(ctx.sql())?;
    raw.map(RawMessage::into_message).transpose()
}

pub(crate) fn message_by_key(
    conn: &Connection,
    ctx: &OpContext,
    key: &str,
) -> StoreResult<Option<Message>> {
    message_where(conn, ctx, "key = ?1", &[&key])
}

/// The message already sent under an idempotency key: a repeat returns it.
fn by_idempotency_key(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    key: Option<&str>,
) -> StoreResult<Option<Message>> {
    match key {
        Some(key) => message_where(
            conn,
            ctx,
            "run_id = ?1 AND idempotency_key = ?2",
            &[&run_id, &key],
        ),
        None => Ok(None),
    }
}

fn check_member(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    agent: &str,
) -> StoreResult<Option<MemberKind>> {
    member_kind(conn, ctx, run_id, agent)
}

fn unknown_recipient(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    recipient: &str,
) -> StoreError {
    let members = roster(conn, ctx, run_id)
        .map(|entries| {
            entries
                .into_iter()
                .map(|e| e.agent)
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    StoreError::UnknownRecipient {
        run: run_id.into(),
        recipient: recipient.into(),
        members,
    }
}

/// Inserts a message after every check; the caller's savepoint undoes it if a later step fails.
pub(crate) fn send(
    conn: &Connection,
    ctx: &OpContext,
    message: &NewMessage,
    wakes: &mut Vec<Wake>,
) -> StoreResult<Message> {
    if let Some(original) = by_idempotency_key(
        conn,
        ctx,
        &message.run_id,
        message.idempotency_key.as_deref(),
    )? {
        return Ok(original);
    }
    require_run_exists(conn, ctx, &message.run_id)?;
    let sender_kind =
        check_member(conn, ctx, &message.run_id, &message.sender)?.ok_or_else(|| {
            StoreError::UnknownSender {
                run: message.run_id.clone(),
                sender: message.sender.clone(),
            }
        })?;
    if check_member(conn, ctx, &message.run_id, &message.recipient)?.is_none() {
        return Err(unknown_recipient(
            conn,
            ctx,
            &message.run_id,
            &message.recipient,
        ));
    }
    let kind = message.body.kind().to_string();
    let (_, body_text) = stored_body(ctx, &message.body)?;
    let request_id = message.body.request_id().map(str::to_owned);
    let correlation = correlation_of(&kind);
    if correlation != Correlation::None && request_id.is_none() {
        return Err(StoreError::MissingRequestId { kind });
    }
    let priority = priority_of(&kind, sender_kind);
    let key = Uuid::now_v7().to_string();
    let now = now_millis();
    conn.prepare_cached(
        "INSERT INTO messages (key, run_id, sender, recipient, kind, priority, request_id, \
         idempotency_key, body, state, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 0, ?10)",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            key,
            message.run_id,
            message.sender,
            message.recipient,
            kind,
            priority as i64,
            request_id,
            message.idempotency_key,
            body_text,
            now,
        ])
    })
    .map_err(ctx.sql())?;
    let seq = conn.last_insert_rowid();
    if correlation == Correlation::Request
        && let Some(request_id) = &request_id
    {
        open_request(conn, ctx, message, &kind, request_id, &key, now)?;
    }
    wakes.push(Wake {
        run_id: message.run_id.clone(),
        recipient: message.recipient.clone(),
    });
    Ok(Message {
        key,
        seq,
        run_id: message.run_id.clone(),
        sender: message.sender.clone(),
        recipient: message.recipient.clone(),
        kind: message.body.kind(),
        priority,
        request_id,
        idempotency_key: message.idempotency_key.clone(),
        body: message.body.clone(),
        state: DeliveryState::Pending,
        created_at: now,
        leased_at: None,
        acked_at: None,
    })
}

/// Delivery class: shutdown requests first, then mail from the lead, then the rest.
fn priority_of(kind: &str, sender: MemberKind) -> Priority {
    if kind == MessageKind::ShutdownRequest {
        Priority::Shutdown
    } else if sender == MemberKind::Lead {
        Priority::FromLead
    } else {
        Priority::Normal
    }
}

/// The body as stored (JSON and its text), refused when over the configured limit.
fn stored_body(
    ctx: &OpContext,
    body: &crate::message::MessageBody,
) -> StoreResult<(Value, String)> {
    let value = body.to_stored().map_err(|e| StoreError::CorruptRow {
        table: "messages",
        detail: format!("body does not serialise: {e}"),
    })?;
    let text = to_json_text(&value);
    if text.len() > ctx.max_body_bytes {
        return Err(StoreError::BodyTooLarge {
            size: text.len(),
            limit: ctx.max_body_bytes,
        });
    }
    Ok((value, text))
}

/// Refuses a slug another run holds: plan files are named after it.
pub(crate) fn require_free_slug(conn: &Connection, ctx: &OpContext, slug: &str) -> StoreResult<()> {
    let taken: bool = conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM runs WHERE slug = ?1)")
        .and_then(|mut stmt| stmt.query_row([slug], |row| row.get(0)))
        .map_err(ctx.sql())?;
    if taken {
        Err(StoreError::SlugExists(slug.to_owned()))
    } else {
        Ok(())
    }
}

/// Whether a run exists, without reading its row: the hot path of every send.
fn require_run_exists(conn: &Connection, ctx: &OpContext, id: &str) -> StoreResult<()> {
    let exists: bool = conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1)")
        .and_then(|mut stmt| stmt.query_row([id], |row| row.get(0)))
        .map_err(ctx.sql())?;
    if exists {
        Ok(())
    } else {
        Err(StoreError::UnknownRun(id.to_owned()))
    }
}

/// Inserts many plain messages in one operation, checking each distinct sender and recipient
/// once: for broadcasts and for prefilling benchmarks. Requests and keyed messages go through
/// [`send`], which correlates and deduplicates them.
pub(crate) fn send_many(
    conn: &Connection,
    ctx: &OpContext,
    messages: &[NewMessage],
    wakes: &mut Vec<Wake>,
) -> StoreResult<usize> {
    let mut kinds: std::collections::HashMap<(String, String), MemberKind> =
        std::collections::HashMap::new();
    let mut insert = conn
        .prepare_cached(
            "INSERT INTO messages (key, run_id, sender, recipient, kind, priority, request_id, \
             idempotency_key, body, state, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, NULL, NULL, ?7, 0, ?8)",
        )
        .map_err(ctx.sql())?;
    let now = now_millis();
    for message in messages {
        let kind = message.body.kind().to_string();
        if message.idempotency_key.is_some() || correlation_of(&kind) != Correlation::None {
            return Err(StoreError::InvalidId {
                what: "bulk message",
                value: kind,
                rule: "send requests, responses and keyed messages one by one",
            });
        }
        let mut member = |agent: &str| -> StoreResult<Option<MemberKind>> {
            let key = (message.run_id.clone(), agent.to_owned());
            if let Some(kind) = kinds.get(&key) {
                return Ok(Some(*kind));
            }
            let found = member_kind(conn, ctx, &message.run_id, agent)?;
            if let Some(kind) = found {
                kinds.insert(key, kind);
            }
            Ok(found)
        };
        let sender_kind = member(&message.sender)?.ok_or_else(|| StoreError::UnknownSender {
            run: message.run_id.clone(),
            sender: message.sender.clone(),
        })?;
        if member(&message.recipient)?.is_none() {
            return Err(unknown_recipient(
                conn,
                ctx,
                &message.run_id,
                &message.recipient,
            ));
        }
        let (_, body_text) = stored_body(ctx, &message.body)?;
        let priority = priority_of(&kind, sender_kind);
        insert
            .execute(params![
                Uuid::now_v7().to_string(),
                message.run_id,
                message.sender,
                message.recipient,
                kind,
                priority as i64,
                body_text,
                now
            ])
            .map_err(ctx.sql())?;
        let wake = Wake {
            run_id: message.run_id.clone(),
            recipient: message.recipient.clone(),
        };
        if !wakes.contains(&wake) {
            wakes.push(wake);
        }
    }
    Ok(messages.len())
}

fn open_request(
    conn: &Connection,
    ctx: &OpContext,
    message: &NewMessage,
    kind: &str,
    request_id: &str,
    key: &str,
    now: i64,
) -> StoreResult<()> {
    // A shutdown request is answered by the agent it is sent to.
    let responder = message
        .body
        .responder()
        .unwrap_or(&message.recipient)
        .to_owned();
    let inserted = conn
        .prepare_cached(
            "INSERT INTO requests (run_id, request_id, kind, requester, recipient, responder, message_key, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT DO NOTHING",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![message.run_id, request_id, kind, message.sender, message.recipient, responder, key, now])
        })
        .map_err(ctx.sql())?;
    if inserted == 0 {
        return Err(StoreError::DuplicateRequest {
            run: message.run_id.clone(),
            request_id: request_id.to_owned(),
        });
    }
    Ok(())
}

/// "The next message for X": the query delivery runs, exported so a test can check its plan.
pub const DELIVERY_QUERY: &str = "SELECT seq FROM messages WHERE run_id = ?1 AND recipient = ?2 \
    AND state = 0 ORDER BY priority, seq LIMIT 1";

/// Leases the next pending message for `recipient` in priority and commit order.
pub(crate) fn lease_next(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    recipient: &str,
    epoch: i64,
    filter: &MessageFilter,
) -> StoreResult<Option<Message>> {
    let now = now_millis();
    let raw = match filter {
        MessageFilter::Any => conn
            .prepare_cached(&format!(
                "UPDATE messages SET state = 1, lease_epoch = ?3, leased_at = ?4 \
                 WHERE seq = ({DELIVERY_QUERY}) RETURNING {MESSAGE_COLUMNS}"
            ))
            .and_then(|mut stmt| stmt.query_row(params![run_id, recipient, epoch, now], raw_message).optional()),
        MessageFilter::RequestId(request_id) => conn
            .prepare_cached(&format!(
                "UPDATE messages SET state = 1, lease_epoch = ?3, leased_at = ?4 WHERE seq = ( \
                   SELECT seq FROM messages WHERE run_id = ?1 AND request_id = ?5 AND recipient = ?2 \
                   AND state = 0 ORDER BY seq LIMIT 1) RETURNING {MESSAGE_COLUMNS}"
            ))
            .and_then(|mut stmt| {
                stmt.query_row(params![run_id, recipient, epoch, now, request_id], raw_message).optional()
            }),
    }
    .map_err(ctx.sql())?;
    raw.map(RawMessage::into_message).transpose()
}

/// Leases up to `max` pending messages for `recipient`, in delivery order.
pub(crate) fn lease_batch(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    recipient: &str,
    epoch: i64,
    max: usize,
) -> StoreResult<Vec<Message>> {
    let mut batch = Vec::new();
    while batch.len() < max {
        match lease_next(conn, ctx, run_id, recipient, epoch, &MessageFilter::Any)? {
            Some(message) => batch.push(message),
            None => break,
        }
    }
    Ok(batch)
}

pub(crate) fn ack(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    keys: &[String],
) -> StoreResult<()> {
    let now = now_millis();
    for key in keys {
        let changed = conn
            .prepare_cached("UPDATE messages SET state = 2, acked_at = ?3 WHERE key = ?1 AND run_id = ?2 AND state = 1")
            .and_then(|mut stmt| stmt.execute(params![key, run_id, now]))
            .map_err(ctx.sql())?;
        if changed == 0 {
            let state = message_by_key(conn, ctx, key)?
                .filter(|m| m.run_id == run_id)
                .ok_or_else(|| StoreError::UnknownMessage(key.clone()))?
                .state;
            return Err(StoreError::NotLeased {
                key: key.clone(),
                state: state.as_str().into(),
            });
        }
    }
    Ok(())
}

pub(crate) fn list_messages(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    recipient: Option<&str>,
) -> StoreResult<Vec<Message>> {
    let raws = match recipient {
        Some(recipient) => conn
            .prepare_cached(&format!(
                "SELECT {MESSAGE_COLUMNS} FROM messages WHERE run_id = ?1 AND recipient = ?2 ORDER BY seq"
            ))
            .and_then(|mut stmt| stmt.query_map([run_id, recipient], raw_message)?.collect::<rusqlite::Result<Vec<_>>>()),
        None => conn
            .prepare_cached(&format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE run_id = ?1 ORDER BY seq"))
            .and_then(|mut stmt| stmt.query_map([run_id], raw_message)?.collect::<rusqlite::Result<Vec<_>>>()),
    }
    .map_err(ctx.sql())?;
    raws.into_iter().map(RawMessage::into_message).collect()
}

// ---------------------------------------------------------------- requests and responses

pub(crate) fn request(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    request_id: &str,
) -> StoreResult<Option<RequestRecord>> {
    type RawRequest = (String, String, String, String, String, i64);
    let raw: Option<RawRequest> = conn
        .prepare_cached(
            "SELECT kind, requester, recipient, responder, message_key, created_at FROM requests \
             WHERE run_id = ?1 AND request_id = ?2",
        )
        .and_then(|mut stmt| {
            stmt.query_row([run_id, request_id], |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                    row.get(5)?,
                ))
            })
            .optional()
        })
        .map_err(ctx.sql())?;
    let Some((kind, requester, recipient, responder, message_key, created_at)) = raw else {
        return Ok(None);
    };
    let response = response(conn, ctx, run_id, request_id)?;
    let body = message_by_key(conn, ctx, &message_key)?
        .map(|m| m.body)
        .unwrap_or_else(|| missing_body(&kind));
    Ok(Some(RequestRecord {
        run_id: run_id.into(),
        request_id: request_id.into(),
        kind: MessageKind::parse(&kind),
        requester,
        recipient,
        responder,
        message_key,
        body,
        created_at,
        response,
    }))
}

fn response(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    request_id: &str,
) -> StoreResult<Option<ResponseRecord>> {
    let raw: Option<(String, String, String, i64)> = conn
        .prepare_cached(
            "SELECT responder, kind, message_key, decided_at FROM responses WHERE run_id = ?1 AND request_id = ?2",
        )
        .and_then(|mut stmt| {
            stmt.query_row([run_id, request_id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))
                .optional()
        })
        .map_err(ctx.sql())?;
    let Some((responder, kind, message_key, decided_at)) = raw else {
        return Ok(None);
    };
    let body = message_by_key(conn, ctx, &message_key)?
        .map(|m| m.body)
        .unwrap_or_else(|| missing_body(&kind));
    Ok(Some(ResponseRecord {
        responder,
        kind: MessageKind::parse(&kind),
        message_key,
        body,
        decided_at,
    }))
}

pub(crate) fn list_requests(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
) -> StoreResult<Vec<RequestRecord>> {
    let ids: Vec<String> = conn
        .prepare_cached(
            "SELECT request_id FROM requests WHERE run_id = ?1 ORDER BY created_at, request_id",
        )
        .and_then(|mut stmt| stmt.query_map([run_id], |row| row.get(0))?.collect())
        .map_err(ctx.sql())?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(record) = request(conn, ctx, run_id, &id)? {
            out.push(record);
        }
    }
    Ok(out)
}

/// Answers a request: only its responder may, and only once (the primary key of `responses`).
pub(crate) fn respond(
    conn: &Connection,
    ctx: &OpContext,
    answer: &NewResponse,
    wakes: &mut Vec<Wake>,
) -> StoreResult<Message> {
    let kind = answer.body.kind().to_string();
    let Correlation::Response { answers } = correlation_of(&kind) else {
        return Err(StoreError::MismatchedResponse {
            request_id: answer.body.request_id().unwrap_or_default().into(),
            request_kind: "request".into(),
            response_kind: kind,
        });
    };
    let request_id = answer
        .body
        .request_id()
        .ok_or_else(|| StoreError::MissingRequestId { kind: kind.clone() })?;
    if let Some(original) =
        by_idempotency_key(conn, ctx, &answer.run_id, answer.idempotency_key.as_deref())?
    {
        return Ok(original);
    }
    let request = request(conn, ctx, &answer.run_id, request_id)?.ok_or_else(|| {
        StoreError::UnknownRequest {
            run: answer.run_id.clone(),
            request_id: request_id.into(),
        }
    })?;
    if request.kind != answers {
        return Err(StoreError::MismatchedResponse {
            request_id: request_id.into(),
            request_kind: request.kind.to_string(),
            response_kind: kind,
        });
    }
    if answer.sender != responder_member(&request.responder) {
        return Err(StoreError::WrongResponder {
            request_id: request_id.into(),
            sender: answer.sender.clone(),
            responder: request.responder,
        });
    }
    if let Some(decided) = request.response {
        return Err(already_decided(request_id, &decided));
    }
    let sent = send(
        conn,
        ctx,
        &NewMessage {
            run_id: answer.run_id.clone(),
            sender: answer.sender.clone(),
            recipient: request.requester.clone(),
            body: answer.body.clone(),
            idempotency_key: answer.idempotency_key.clone(),
        },
        wakes,
    )?;
    let inserted = conn
        .prepare_cached(
            "INSERT INTO responses (run_id, request_id, responder, kind, message_key, decided_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                answer.run_id,
                request_id,
                answer.sender,
                kind,
                sent.key,
                sent.created_at
            ])
        });
    match inserted {
        Ok(_) => Ok(sent),
        Err(error) if is_constraint(&error) => {
            let decided = response(conn, ctx, &answer.run_id, request_id)?;
            Err(match decided {
                Some(decided) => already_decided(request_id, &decided),
                None => sql_error(&ctx.path, error),
            })
        }
        Err(error) => Err(sql_error(&ctx.path, error)),
    }
}

fn already_decided(request_id: &str, decided: &ResponseRecord) -> StoreError {
    StoreError::AlreadyDecided {
        request_id: request_id.into(),
        decided_by: decided.responder.clone(),
        decided_at_ms: decided.decided_at,
    }
}

fn is_constraint(error: &rusqlite::Error) -> bool {
    error.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation)
}

// ---------------------------------------------------------------- agent records

pub(crate) fn append_records(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    records: &[NewRecord],
) -> StoreResult<Vec<AgentRecord>> {
    let now = now_millis();
    let mut out = Vec::with_capacity(records.len());
    for record in records {
        let seq = match record.seq {
            Some(seq) => seq,
            None => conn
                .prepare_cached(
                    "SELECT COALESCE(MAX(seq), 0) + 1 FROM agent_records WHERE run_id = ?1 AND agent_id = ?2 AND stream = ?3",
                )
                .and_then(|mut stmt| stmt.query_row([run_id, &record.agent, &record.stream], |row| row.get(0)))
                .map_err(ctx.sql())?,
        };
        let inserted = conn
            .prepare_cached(
                "INSERT INTO agent_records (run_id, agent_id, stream, seq, body, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .and_then(|mut stmt| stmt.execute(params![run_id, record.agent, record.stream, seq, to_json_text(&record.body), now]));
        match inserted {
            Ok(_) => {}
            Err(error) if is_constraint(&error) => {
                return Err(StoreError::DuplicateRecord {
                    run: run_id.into(),
                    agent: record.agent.clone(),
                    stream: record.stream.clone(),
                    seq,
                });
            }
            Err(error) => return Err(sql_error(&ctx.path, error)),
        }
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

pub(crate) fn records(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    agent: &str,
    stream: &str,
    after_seq: i64,
) -> StoreResult<Vec<AgentRecord>> {
    let rows: Vec<(i64, String, i64)> = conn
        .prepare_cached(
            "SELECT seq, body, created_at FROM agent_records WHERE run_id = ?1 AND agent_id = ?2 AND stream = ?3 \
             AND seq > ?4 ORDER BY seq",
        )
        .and_then(|mut stmt| {
            stmt.query_map(params![run_id, agent, stream, after_seq], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
                .collect()
        })
        .map_err(ctx.sql())?;
    rows.into_iter()
        .map(|(seq, body, created_at)| {
            Ok(AgentRecord {
                run_id: run_id.into(),
                agent: agent.into(),
                stream: stream.into(),
                seq,
                body: parse_json("agent_records", &body)?,
                created_at,
            })
        })
        .collect()
}

pub(crate) fn commit_turn(
    conn: &Connection,
    ctx: &OpContext,
    turn: &CommitTurn,
    wakes: &mut Vec<Wake>,
) -> StoreResult<CommitTurnOutcome> {
    for entry in &turn.members {
        add_member(conn, ctx, &turn.run_id, entry)?;
    }
    ack(conn, ctx, &turn.run_id, &turn.acks)?;
    let records = append_records(conn, ctx, &turn.run_id, &turn.records)?;
    let mut tasks = Vec::with_capacity(turn.task_updates.len());
    for update in &turn.task_updates {
        tasks.push(crate::sqlite::tasks::update_task(conn, ctx, update, wakes)?);
    }
    let mut sent = Vec::with_capacity(turn.sends.len());
    for message in &turn.sends {
        sent.push(send(conn, ctx, message, wakes)?);
    }
    let mut responses = Vec::with_capacity(turn.responses.len());
    for answer in &turn.responses {
        responses.push(respond(conn, ctx, answer, wakes)?);
    }
    let auto_gate = match turn.auto_gate {
        Some(update) => apply_auto_gate(conn, ctx, &turn.run_id, update)?,
        None => require_run(conn, ctx, &turn.run_id)?.auto_gate,
    };
    Ok(CommitTurnOutcome {
        records,
        sent,
        responses,
        auto_gate,
        tasks,
    })
}

// ---------------------------------------------------------------- keyed operations

/// Runs `operation` once per `(run, key)`: its outcome is stored in the same transaction, and
/// a repeat of the key returns that first outcome without running anything. No key: it
/// simply runs.
pub(crate) fn once<T: serde::Serialize + serde::de::DeserializeOwned>(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    key: Option<&str>,
    operation: impl FnOnce() -> StoreResult<T>,
) -> StoreResult<T> {
    let Some(key) = key else {
        return operation();
    };
    let stored: Option<String> = conn
        .prepare_cached("SELECT outcome FROM operations WHERE run_id = ?1 AND op_key = ?2")
        .and_then(|mut stmt| stmt.query_row([run_id, key], |row| row.get(0)).optional())
        .map_err(ctx.sql())?;
    if let Some(stored) = stored {
        return serde_json::from_str(&stored).map_err(|e| StoreError::CorruptRow {
            table: "operations",
            detail: format!("the outcome of {key:?} does not read: {e}"),
        });
    }
    let outcome = operation()?;
    let text = serde_json::to_string(&outcome).map_err(|e| StoreError::CorruptRow {
        table: "operations",
        detail: format!("the outcome of {key:?} cannot be stored: {e}"),
    })?;
    conn.prepare_cached("INSERT INTO operations (run_id, op_key, outcome) VALUES (?1, ?2, ?3)")
        .and_then(|mut stmt| stmt.execute(params![run_id, key, text]))
        .map_err(ctx.sql())?;
    Ok(outcome)
}

// ---------------------------------------------------------------- counters

pub(crate) fn next_counter(
    conn: &Connection,
    ctx: &OpContext,
    run_id: &str,
    name: &str,
) -> StoreResult<i64> {
    require_run(conn, ctx, run_id)?;
    conn.prepare_cached(
        "INSERT INTO counters (run_id, name, value) VALUES (?1, ?2, 1) \
         ON CONFLICT (run_id, name) DO UPDATE SET value = value + 1 RETURNING value",
    )
    .and_then(|mut stmt| stmt.query_row([run_id, name], |row| row.get(0)))
    .map_err(ctx.sql())
}

// ---------------------------------------------------------------- retention

pub(crate) fn prune(
    conn: &Connection,
    ctx: &OpContext,
    cutoff: UnixMillis,
    project: Option<&str>,
) -> StoreResult<PruneReport> {
    let mut report = PruneReport::default();
    let runs = list_runs(conn, ctx)?
        .into_iter()
        .filter(|run| project.is_none_or(|p| run.in_project(p)));
    for run in runs {
        if !run.status.is_finished() {
            report.runs_skipped.push((run.id, run.status));
            continue;
        }
        // Requests and responses are decisions: kept for as long as their run exists.
        let deleted = conn
            .prepare_cached(
                "DELETE FROM messages WHERE run_id = ?1 AND state = 2 AND created_at < ?2 AND request_id IS NULL",
            )
            .and_then(|mut stmt| stmt.execute(params![run.id, cutoff]))
            .map_err(ctx.sql())?;
        let kept: i64 = conn
            .prepare_cached(
                "SELECT COUNT(*) FROM messages WHERE run_id = ?1 AND request_id IS NOT NULL",
            )
            .and_then(|mut stmt| stmt.query_row([&run.id], |row| row.get(0)))
            .map_err(ctx.sql())?;
        report.messages_deleted += deleted as u64;
        report.decisions_kept += kept.max(0) as u64;
        report.runs_pruned.push(run.id);
    }
    Ok(report)
}
