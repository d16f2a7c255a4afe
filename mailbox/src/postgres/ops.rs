//! The store's operations as SQL in one PostgreSQL transaction: the SQLite store's operations
//! (`sqlite/ops.rs`) statement for statement, so both backends keep one contract. Every write
//! runs under its runs' transaction-level advisory locks (see `mod.rs`), so writes to one run
//! are serialised as on SQLite's single writer; an `Err` rolls the whole operation back.

use std::sync::Arc;

use serde_json::Value;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use crate::error::{StoreError, StoreResult};
use crate::message::{Correlation, MessageKind, correlation_of, responder_member};
use crate::types::*;
use crate::wake::Wake;

pub(crate) type Tx<'a> = deadpool_postgres::Transaction<'a>;
type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// Settings every operation needs.
#[derive(Debug, Clone)]
pub(crate) struct Ctx {
    /// The store's URL with its password masked: what errors name.
    pub(crate) target: Arc<str>,
    /// The schema the store's tables live in (the connection's `current_schema()`).
    pub(crate) schema: Arc<str>,
    pub(crate) max_body_bytes: usize,
}

impl Ctx {
    /// The advisory lock key that serialises writes to `run_id` in this schema: two schemas
    /// (two tests, two installations in one database) never wait for each other.
    pub(crate) fn run_lock_key(&self, run_id: &str) -> i64 {
        fnv1a(&[self.schema.as_bytes(), b"\0run\0", run_id.as_bytes()]) as i64
    }

    /// The session-level advisory lock key a live run holds (another namespace than the
    /// write locks, which are transaction-level and short).
    pub(crate) fn live_lock_key(&self, run_id: &str) -> i64 {
        fnv1a(&[self.schema.as_bytes(), b"\0live\0", run_id.as_bytes()]) as i64
    }

    /// The channel a live run listens on: one per run and schema (an identifier of at most
    /// 63 bytes, whatever the run id).
    pub(crate) fn wake_channel(&self, run_id: &str) -> String {
        format!(
            "muster_wake_{:016x}",
            fnv1a(&[self.schema.as_bytes(), b"\0wake\0", run_id.as_bytes()])
        )
    }

    /// The advisory lock key migrations take.
    pub(crate) fn schema_lock_key(&self) -> i64 {
        fnv1a(&[self.schema.as_bytes(), b"\0migrate"]) as i64
    }
}

pub(crate) fn fnv1a(parts: &[&[u8]]) -> u64 {
    parts
        .iter()
        .flat_map(|part| part.iter())
        .fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
            (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
        })
}

/// A server error as the store reports it: the server's message, detail and hint when it
/// sent them, else the client's (a lost connection, a protocol error).
pub(crate) fn pg_error(ctx: &Ctx, source: tokio_postgres::Error) -> StoreError {
    let lost = is_connection_lost(&source);
    let detail = match source.as_db_error() {
        Some(db) => {
            let mut text = format!("{}: {}", db.code().code(), db.message());
            if let Some(detail) = db.detail() {
                text.push_str(&format!(" ({detail})"));
            }
            if let Some(hint) = db.hint() {
                text.push_str(&format!("; hint: {hint}"));
            }
            text
        }
        None => {
            let mut text = source.to_string();
            let mut cause = std::error::Error::source(&source);
            while let Some(inner) = cause {
                text.push_str(&format!(": {inner}"));
                cause = inner.source();
            }
            text
        }
    };
    if lost {
        return StoreError::ConnectionLost {
            target: ctx.target.to_string(),
            detail,
        };
    }
    StoreError::Postgres {
        target: ctx.target.to_string(),
        detail,
    }
}

/// Whether the connection broke (closed, reset, a server restart's 57P01 termination):
/// the transaction did not commit, or its COMMIT's outcome is unknown.
fn is_connection_lost(source: &tokio_postgres::Error) -> bool {
    if source.is_closed() {
        return true;
    }
    if let Some(db) = source.as_db_error() {
        // admin_shutdown, crash_shutdown, cannot_connect_now
        return matches!(db.code().code(), "57P01" | "57P02" | "57P03");
    }
    let mut cause = std::error::Error::source(source);
    while let Some(inner) = cause {
        if inner.downcast_ref::<std::io::Error>().is_some() {
            return true;
        }
        cause = inner.source();
    }
    false
}

/// A fresh operation id for one write and its retries.
pub(crate) fn new_operation_key() -> String {
    Uuid::now_v7().to_string()
}

/// What a write stored under its operation id: its result and whom it woke.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredOperation<T> {
    value: T,
    wakes: Vec<Wake>,
}

/// The first attempt's result, when a retried write's first attempt did commit.
pub(crate) async fn stored_operation<T: serde::de::DeserializeOwned>(
    tx: &Tx<'_>,
    ctx: &Ctx,
    op_key: &str,
) -> StoreResult<Option<(T, Vec<Wake>)>> {
    let Some(row) = query_opt(
        tx,
        ctx,
        "SELECT outcome FROM operation_ids WHERE op_key = $1",
        &[&op_key],
    )
    .await?
    else {
        return Ok(None);
    };
    let text: String = col(&row, "operation_ids", 0)?;
    let stored: StoredOperation<T> =
        serde_json::from_str(&text).map_err(|e| StoreError::CorruptRow {
            table: "operation_ids",
            detail: format!("the outcome of operation {op_key} does not read: {e}"),
        })?;
    Ok(Some((stored.value, stored.wakes)))
}

/// Stores a write's result under its operation id, in its transaction, and deletes the rows
/// of writes whose COMMIT was acknowledged since (`confirmed`), in the same statement.
pub(crate) async fn store_operation<T: serde::Serialize>(
    tx: &Tx<'_>,
    ctx: &Ctx,
    run_id: &str,
    op_key: &str,
    value: &T,
    wakes: &[Wake],
    confirmed: &[String],
) -> StoreResult<()> {
    let text = serde_json::to_string(&StoredOperation {
        value,
        wakes: wakes.to_vec(),
    })
    .map_err(|e| StoreError::CorruptRow {
        table: "operation_ids",
        detail: format!("the outcome of operation {op_key} cannot be stored: {e}"),
    })?;
    execute(
        tx,
        ctx,
        "WITH settled AS (DELETE FROM operation_ids WHERE op_key = ANY($5)) \
         INSERT INTO operation_ids (op_key, run_id, outcome, created_at) VALUES ($1, $2, $3, $4)",
        &[&op_key, &run_id, &text, &now_millis(), &confirmed],
    )
    .await?;
    Ok(())
}

async fn query(tx: &Tx<'_>, ctx: &Ctx, sql: &str, params: Params<'_>) -> StoreResult<Vec<Row>> {
    let statement = tx.prepare_cached(sql).await.map_err(|e| pg_error(ctx, e))?;
    tx.query(&statement, params)
        .await
        .map_err(|e| pg_error(ctx, e))
}

async fn query_opt(
    tx: &Tx<'_>,
    ctx: &Ctx,
    sql: &str,
    params: Params<'_>,
) -> StoreResult<Option<Row>> {
    let statement = tx.prepare_cached(sql).await.map_err(|e| pg_error(ctx, e))?;
    tx.query_opt(&statement, params)
        .await
        .map_err(|e| pg_error(ctx, e))
}

async fn query_one(tx: &Tx<'_>, ctx: &Ctx, sql: &str, params: Params<'_>) -> StoreResult<Row> {
    let statement = tx.prepare_cached(sql).await.map_err(|e| pg_error(ctx, e))?;
    tx.query_one(&statement, params)
        .await
        .map_err(|e| pg_error(ctx, e))
}

pub(crate) async fn execute(
    tx: &Tx<'_>,
    ctx: &Ctx,
    sql: &str,
    params: Params<'_>,
) -> StoreResult<u64> {
    let statement = tx.prepare_cached(sql).await.map_err(|e| pg_error(ctx, e))?;
    tx.execute(&statement, params)
        .await
        .map_err(|e| pg_error(ctx, e))
}

/// Reads one column, naming the table when the stored value has an unexpected type.
pub(crate) fn col<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    table: &'static str,
    index: usize,
) -> StoreResult<T> {
    row.try_get(index).map_err(|e| StoreError::CorruptRow {
        table,
        detail: format!("column {index}: {e}"),
    })
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

fn run_of(row: &Row) -> StoreResult<RunRecord> {
    const T: &str = "runs";
    let status: String = col(row, T, 4)?;
    let status = RunStatus::parse(&status).ok_or_else(|| StoreError::CorruptRow {
        table: T,
        detail: format!("unknown status {status:?}"),
    })?;
    let launch_options: String = col(row, T, 11)?;
    let result: Option<String> = col(row, T, 13)?;
    Ok(RunRecord {
        id: col(row, T, 0)?,
        slug: col(row, T, 1)?,
        team: col(row, T, 2)?,
        workspace: col(row, T, 3)?,
        status,
        created_at: col(row, T, 5)?,
        updated_at: col(row, T, 6)?,
        batch_line_id: col(row, T, 7)?,
        auto_gate: AutoGate {
            open: col::<i64>(row, T, 8)? != 0,
            consecutive_denials: col::<i64>(row, T, 9)?.max(0) as u32,
            limit: col::<i64>(row, T, 10)?.max(0) as u32,
        },
        launch_options: parse_json(T, &launch_options)?,
        epoch: col(row, T, 12)?,
        result: result.as_deref().map(|r| parse_json(T, r)).transpose()?,
        project_id: col(row, T, 14)?,
    })
}

pub(crate) async fn create_run(tx: &Tx<'_>, ctx: &Ctx, run: &NewRun) -> StoreResult<RunRecord> {
    validate_run_id(&run.id)?;
    if get_run(tx, ctx, &run.id).await?.is_some() {
        return Err(StoreError::RunExists(run.id.clone()));
    }
    require_free_slug(tx, ctx, &run.slug).await?;
    let now = now_millis();
    // Another run may take the slug between the check and the insert (it holds another
    // run's lock): the unique constraint decides, and the loser is told as above.
    let inserted = execute(
        tx,
        ctx,
        "INSERT INTO runs (id, slug, team, workspace, status, created_at, updated_at, \
         batch_line_id, auto_gate_open, auto_denials, auto_gate_limit, launch_options, epoch, project_id) \
         VALUES ($1, $2, $3, $4, 'running', $5, $5, $6, $7, $8, $9, $10, 0, $11) ON CONFLICT DO NOTHING",
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
            &to_json_text(&run.launch_options),
            &run.project_id,
        ],
    )
    .await?;
    if inserted == 0 {
        return Err(StoreError::SlugExists(run.slug.clone()));
    }
    for (agent, kind) in [(HUMAN, MemberKind::Human), (POLICY, MemberKind::Policy)] {
        insert_member(
            tx,
            ctx,
            &run.id,
            &RosterEntry {
                agent: agent.into(),
                kind,
                definition: None,
                parent: None,
            },
        )
        .await?;
    }
    require_run(tx, ctx, &run.id).await
}

pub(crate) async fn get_run(tx: &Tx<'_>, ctx: &Ctx, id: &str) -> StoreResult<Option<RunRecord>> {
    let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = $1");
    query_opt(tx, ctx, &sql, &[&id])
        .await?
        .as_ref()
        .map(run_of)
        .transpose()
}

pub(crate) async fn require_run(tx: &Tx<'_>, ctx: &Ctx, id: &str) -> StoreResult<RunRecord> {
    get_run(tx, ctx, id)
        .await?
        .ok_or_else(|| StoreError::UnknownRun(id.to_owned()))
}

pub(crate) async fn list_runs(tx: &Tx<'_>, ctx: &Ctx) -> StoreResult<Vec<RunRecord>> {
    let sql = format!("SELECT {RUN_COLUMNS} FROM runs ORDER BY created_at, id");
    query(tx, ctx, &sql, &[])
        .await?
        .iter()
        .map(run_of)
        .collect()
}

pub(crate) async fn set_run_status(
    tx: &Tx<'_>,
    ctx: &Ctx,
    id: &str,
    status: RunStatus,
    result: Option<&Value>,
) -> StoreResult<RunRecord> {
    let changed = execute(
        tx,
        ctx,
        "UPDATE runs SET status = $2, updated_at = $3, result = COALESCE($4, result) WHERE id = $1",
        &[
            &id,
            &status.as_str(),
            &now_millis(),
            &result.map(to_json_text),
        ],
    )
    .await?;
    if changed == 0 {
        return Err(StoreError::UnknownRun(id.to_owned()));
    }
    require_run(tx, ctx, id).await
}

pub(crate) async fn set_launch_options(
    tx: &Tx<'_>,
    ctx: &Ctx,
    id: &str,
    launch_options: &Value,
) -> StoreResult<RunRecord> {
    let changed = execute(
        tx,
        ctx,
        "UPDATE runs SET launch_options = $2, updated_at = $3 WHERE id = $1",
        &[&id, &to_json_text(launch_options), &now_millis()],
    )
    .await?;
    if changed == 0 {
        return Err(StoreError::UnknownRun(id.to_owned()));
    }
    require_run(tx, ctx, id).await
}

/// Takes ownership of a run for a new process epoch and voids the leases of older epochs.
pub(crate) async fn open_epoch(tx: &Tx<'_>, ctx: &Ctx, id: &str) -> StoreResult<i64> {
    let row = query_opt(
        tx,
        ctx,
        "UPDATE runs SET epoch = epoch + 1, updated_at = $2 WHERE id = $1 RETURNING epoch",
        &[&id, &now_millis()],
    )
    .await?
    .ok_or_else(|| StoreError::UnknownRun(id.to_owned()))?;
    let epoch: i64 = col(&row, "runs", 0)?;
    execute(
        tx,
        ctx,
        "UPDATE messages SET state = 0, lease_epoch = NULL, leased_at = NULL \
         WHERE run_id = $1 AND state = 1 AND lease_epoch < $2",
        &[&id, &epoch],
    )
    .await?;
    Ok(epoch)
}

pub(crate) async fn update_auto_gate(
    tx: &Tx<'_>,
    ctx: &Ctx,
    run_id: &str,
    update: AutoGateUpdate,
) -> StoreResult<AutoGate> {
    let changed = match update {
        AutoGateUpdate::Denied(n) => {
            execute(
                tx,
                ctx,
                "UPDATE runs SET auto_denials = auto_denials + $2, \
                 auto_gate_open = CASE WHEN auto_denials + $2 >= auto_gate_limit THEN 0 ELSE auto_gate_open END \
                 WHERE id = $1",
                &[&run_id, &(n as i64)],
            )
            .await?
        }
        AutoGateUpdate::Allowed => {
            execute(
                tx,
                ctx,
                "UPDATE runs SET auto_denials = 0 WHERE id = $1",
                &[&run_id],
            )
            .await?
        }
        AutoGateUpdate::Close => {
            execute(
                tx,
                ctx,
                "UPDATE runs SET auto_gate_open = 0 WHERE id = $1",
                &[&run_id],
            )
            .await?
        }
    };
    if changed == 0 {
        return Err(StoreError::UnknownRun(run_id.to_owned()));
    }
    Ok(require_run(tx, ctx, run_id).await?.auto_gate)
}

// ---------------------------------------------------------------- roster

async fn insert_member(
    tx: &Tx<'_>,
    ctx: &Ctx,
    run_id: &str,
    entry: &RosterEntry,
) -> StoreResult<()> {
    execute(
        tx,
        ctx,
        "INSERT INTO roster (run_id, agent_id, kind, definition, parent, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6)",
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

pub(crate) async fn add_member(
    tx: &Tx<'_>,
    ctx: &Ctx,
    run_id: &str,
    entry: &RosterEntry,
) -> StoreResult<()> {
    require_run(tx, ctx, run_id).await?;
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
    if member_kind(tx, ctx, run_id, &entry.agent).await?.is_some() {
        return Err(StoreError::AlreadyOnRoster {
            run: run_id.into(),
            agent: entry.agent.clone(),
        });
    }
    insert_member(tx, ctx, run_id, entry).await
}

fn parse_kind(kind: &str) -> StoreResult<MemberKind> {
    MemberKind::parse(kind).ok_or_else(|| StoreError::CorruptRow {
        table: "roster",
        detail: format!("unknown kind {kind:?}"),
    })
}

async fn member_kind(
    tx: &Tx<'_>,
    ctx: &Ctx,
    run_id: &str,
    agent: &str,
) -> StoreResult<Option<MemberKind>> {
    let row = query_opt(
        tx,
        ctx,
        "SELECT kind FROM roster WHERE run_id = $1 AND agent_id = $2",
        &[&run_id, &agent],
    )
    .await?;
    row.map(|row| parse_kind(&col::<String>(&row, "roster", 0)?))
        .transpose()
}

pub(crate) async fn roster(tx: &Tx<'_>, ctx: &Ctx, run_id: &str) -> StoreResult<Vec<RosterEntry>> {
    query(
        tx,
        ctx,
        "SELECT agent_id, kind, definition, parent FROM roster WHERE run_id = $1 ORDER BY position",
        &[&run_id],
    )
    .await?
    .iter()
    .map(|row| {
        Ok(RosterEntry {
            agent: col(row, "roster", 0)?,
            kind: parse_kind(&col::<String>(row, "roster", 1)?)?,
            definition: col(row, "roster", 2)?,
            parent: col(row, "roster", 3)?,
        })
    })
    .collect()
}

// ---------------------------------------------------------------- messages

const MESSAGE_COLUMNS: &str = "key, seq, run_id, sender, recipient, kind, priority, request_id, \
    idempotency_key, body, state, created_at, leased_at, acked_at";

fn message_of(row: &Row) -> StoreResult<Message> {
    const T: &str = "messages";
    let state: i64 = col(row, T, 10)?;
    let state = DeliveryState::from_code(state).ok_or_else(|| StoreError::CorruptRow {
        table: T,
        detail: format!("unknown state {state}"),
    })?;
    let body: String = col(row, T, 9)?;
    let kind: String = col(row, T, 5)?;
    let (kind, body) = read_kind_and_body(&kind, &parse_json(T, &body)?);
    Ok(Message {
        key: col(row, T, 0)?,
        seq: col(row, T, 1)?,
        run_id: col(row, T, 2)?,
        sender: col(row, T, 3)?,
        recipient: col(row, T, 4)?,
        kind,
        priority: Priority::from_code(col(row, T, 6)?),
        request_id: col(row, T, 7)?,
        idempotency_key: col(row, T, 8)?,
        body,
        state,
        created_at: col(row, T, 11)?,
        leased_at: col(row, T, 12)?,
        acked_at: col(row, T, 13)?,
    })
}

pub(crate) async fn message_by_key(
    tx: &Tx<'_>,
    ctx: &Ctx,
    key: &str,
) -> StoreResult<Option<Message>> {
    let sql = format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE key = $1");
    query_opt(tx, ctx, &sql, &[&key])
        .await?
        .as_ref()
        .map(message_of)
        .transpose()
}

/// The message already sent under an idempotency key: a repeat returns it.
async fn by_idempotency_key(
    tx: &Tx<'_>,
    ctx: &Ctx,
    run_id: &str,
    key: Option<&str>,
) -> StoreResult<Option<Message>> {
    let Some(key) = key else {
        return Ok(None);
    };
    let sql = format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages WHERE run_id = $1 AND idempotency_key = $2"
    );
    query_opt(tx, ctx, &sql, &[&run_id, &key])
        .await?
        .as_ref()
        .map(message_of)
        .transpose()
}

async fn unknown_recipient(tx: &Tx<'_>, ctx: &Ctx, run_id: &str, recipient: &str) -> StoreError {
    let members = roster(tx, ctx, run_id)
        .await
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

/// Inserts a message after every check; the operation's transaction undoes it if a later
/// step fails.
pub(crate) async fn send(
    tx: &Tx<'_>,
    ctx: &Ctx,
    message: &NewMessage,
    wakes: &mut Vec<Wake>,
) -> StoreResult<Message> {
    if let Some(original) =
        by_idempotency_key(tx, ctx, &message.run_id, message.idempotency_key.as_deref()).await?
    {
        return Ok(original);
    }
    require_run_exists(tx, ctx, &message.run_id).await?;
    let sender_kind = member_kind(tx, ctx, &message.run_id, &message.sender)
        .await?
        .ok_or_else(|| StoreError::UnknownSender {
            run: message.run_id.clone(),
            sender: message.sender.clone(),
        })?;
    if member_kind(tx, ctx, &message.run_id, &message.recipient)
        .await?
        .is_none()
    {
        return Err(unknown_recipient(tx, ctx, &message.run_id, &message.recipient).await);
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
    let row = query_one(
        tx,
        ctx,
        "INSERT INTO messages (key, run_id, sender, recipient, kind, priority, request_id, \
         idempotency_key, body, state, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 0, $10) \
         RETURNING seq",
        &[
            &key,
            &message.run_id,
            &message.sender,
            &message.recipient,
            &kind,
            &(priority as i64),
            &request_id,
            &message.idempotency_key,
            &body_text,
            &now,
        ],
    )
    .await?;
    let seq: i64 = col(&row, "messages", 0)?;
    if correlation == Correlation::Request
        && let Some(request_id) = &request_id
    {
        open_request(tx, ctx, message, &kind, request_id, &key, now).await?;
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
fn stored_body(ctx: &Ctx, body: &crate::message::MessageBody) -> StoreResult<(Value, String)> {
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
pub(crate) async fn require_free_slug(tx: &Tx<'_>, ctx: &Ctx, slug: &str) -> StoreResult<()> {
    let row = query_one(
        tx,
        ctx,
        "SELECT EXISTS (SELECT 1 FROM runs WHERE slug = $1)",
        &[&slug],
    )
    .await?;
    if col::<bool>(&row, "runs", 0)? {
        Err(StoreError::SlugExists(slug.to_owned()))
    } else {
        Ok(())
    }
}

/// Whether a run exists, without reading its row: the hot path of every send.
async fn require_run_exists(tx: &Tx<'_>, ctx: &Ctx, id: &str) -> StoreResult<()> {
    let row = query_one(
        tx,
        ctx,
        "SELECT EXISTS (SELECT 1 FROM runs WHERE id = $1)",
        &[&id],
    )
    .await?;
    if col::<bool>(&row, "runs", 0)? {
        Ok(())
    } else {
        Err(StoreError::UnknownRun(id.to_owned()))
    }
}

async fn open_request(
    tx: &Tx<'_>,
    ctx: &Ctx,
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
    let inserted = execute(
        tx,
        ctx,
        "INSERT INTO requests (run_id, request_id, kind, requester, recipient, responder, message_key, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING",
        &[
            &message.run_id,
            &request_id,
            &kind,
            &message.sender,
            &message.recipient,
            &responder,
            &key,
            &now,
        ],
    )
    .await?;
    if inserted == 0 {
        return Err(StoreError::DuplicateRequest {
            run: message.run_id.clone(),
            request_id: request_id.to_owned(),
        });
    }
    Ok(())
}

/// "The next message for X", as on SQLite: priority class, then commit order within the run.
const DELIVERY_QUERY: &str = "SELECT seq FROM messages WHERE run_id = $1 AND recipient = $2 \
    AND state = 0 ORDER BY priority, seq LIMIT 1";

/// Leases the next pending message for `recipient` in priority and commit order.
pub(crate) async fn lease_next(
    tx: &Tx<'_>,
    ctx: &Ctx,
    run_id: &str,
    recipient: &str,
    epoch: i64,
    filter: &MessageFilter,
) -> StoreResult<Option<Message>> {
    let now = now_millis();
    let row = match filter {
        MessageFilter::Any => {
            let sql = format!(
                "UPDATE messages SET state = 1, lease_epoch = $3, leased_at = $4 \
                 WHERE seq = ({DELIVERY_QUERY}) RETURNING {MESSAGE_COLUMNS}"
            );
            query_opt(tx, ctx, &sql, &[&run_id, &recipient, &epoch, &now]).await?
        }
        MessageFilter::RequestId(request_id) => {
            let sql = format!(
                "UPDATE messages SET state = 1, lease_epoch = $3, leased_at = $4 WHERE seq = ( \
                   SELECT seq FROM messages WHERE run_id = $1 AND request_id = $5 AND recipient = $2 \
                   AND state = 0 ORDER BY seq LIMIT 1) RETURNING {MESSAGE_COLUMNS}"
            );
            query_opt(
                tx,
                ctx,
                &sql,
                &[&run_id, &recipient, &epoch, &now, request_id],
            )
            .await?
        }
    };
    row.as_ref().map(message_of).transpose()
}

/// Leases up to `max` pending messages for `recipient`, in delivery order.
pub(crate) async fn lease_batch(
    tx: &Tx<'_>,
    ctx: &Ctx,
    run_id: &str,
    recipient: &str,
    epoch: i64,
    max: usize,
) -> StoreResult<Vec<Message>> {
    let mut batch = Vec::new();
    while batch.len() < max {
        match lease_next(tx, ctx, run_id, recipient, epoch, &MessageFilter::Any).await? {
            Some(message) => batch.push(message),
            None => break,
        }
    }
    Ok(batch)
}

pub(crate) async fn ack(tx: &Tx<'_>, ctx: &Ctx, run_id: &str, keys: &[String]) -> StoreResult<()> {
    let now = now_millis();
    for key in keys {
        let changed = execute(
            tx,
            ctx,
            "UPDATE messages SET state = 2, acked_at = $3 WHERE key = $1 AND run_id = $2 AND state = 1",
            &[key, &run_id, &now],
        )
        .await?;
        if changed == 0 {
            let state = message_by_key(tx, ctx, key)
                .await?
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

pub(crate) async fn list_messages(
    tx: &Tx<'_>,
    ctx: &Ctx,
    run_id: &str,
    recipient: Option<&str>,
) -> StoreResult<Vec<Message>> {
    let rows = match recipient {
        Some(recipient) => {
            let sql = format!(
                "SELECT {MESSAGE_COLUMNS} FROM messages WHERE run_id = $1 AND recipient = $2 ORDER BY seq"
            );
            query(tx, ctx, &sql, &[&run_id, &recipient]).await?
        }
        None => {
            let sql =
                format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE run_id = $1 ORDER BY seq");
            query(tx, ctx, &sql, &[&run_id]).await?
        }
    };
    rows.iter().map(message_of).collect()
}

// ---------------------------------------------------------------- requests and responses

pub(crate) async fn request(
    tx: &Tx<'_>,
    ctx: &Ctx,
    run_id: &str,
    request_id: &str,
) -> StoreResult<Option<RequestRecord>> {
    const T: &str = "requests";
    let Some(row) = query_opt(
        tx,
        ctx,
        "SELECT kind, requester, recipient, responder, message_key, created_at FROM requests \
         WHERE run_id = $1 AND request_id = $2",
        &[&run_id, &request_id],
    )
    .await?
    else {
        return Ok(None);
    };
    let message_key: String = col(&row, T, 4)?;
    let kind: String = col(&row, T, 0)?;
    let response = response(tx, ctx, run_id, request_id).await?;
    let body = message_by_key(tx, ctx, &message_key)
        .await?
        .map(|m| m.body)
        .unwrap_or_else(|| missing_body(&kind));
    Ok(Some(RequestRecord {
        run_id: run_id.into(),
        request_id: request_id.into(),
        kind: MessageKind::parse(&kind),
        requester: col(&row, T, 1)?,
        recipient: col(&row, T, 2)?,
        responder: col(&row, T, 3)?,
        message_key,
        body,
        created_at: col(&row, T, 5)?,
        response,
    }))
}

async fn response(
    tx: &Tx<'_>,
    ctx: &Ctx,
    run_id: &str,
    request_id: &str,
) -> StoreResult<Option<ResponseRecord>> {
    const T: &str = "responses";
    let Some(row) = query_opt(
        tx,
        ctx,
        "SELECT responder, kind, message_key, decided_at FROM responses WHERE run_id = $1 AND request_id = $2",
        &[&run_id, &request_id],
    )
    .await?
    else {
        return Ok(None);
    };
    let message_key: String = col(&row, T, 2)?;
    let kind: String = col(&row, T, 1)?;
    let body = message_by_key(tx, ctx, &message_key)
        .await?
        .map(|m| m.body)
        .unwrap_or_else(|| missing_body(&kind));
    Ok(Some(ResponseRecord {
        responder: col(&row, T, 0)?,
        kind: MessageKind::parse(&kind),
        message_key,
        body,
        decided_at: col(&row, T, 3)?,
    }))
}

pub(crate) async fn list_requests(
    tx: &Tx<'_>,
    ctx: &Ctx,
    run_id: &str,
) -> StoreResult<Vec<RequestRecord>> {
    let rows = query(
        tx,
        ctx,
        "SELECT request_id FROM requests WHERE run_id = $1 ORDER BY created_at, request_id",
        &[&run_id],
    )
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let id: String = col(&row, "requests", 0)?;
        if let Some(record) = request(tx, ctx, run_id, &id).await? {
            out.push(record);
        }
    }
    Ok(out)
}

/// Answers a request: only its responder may, and only once (the primary key of `responses`).
pub(crate) async fn respond(
    tx: &Tx<'_>,
    ctx: &Ctx,
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
        by_idempotency_key(tx, ctx, &answer.run_id, answer.idempotency_key.as_deref()).await?
    {
        return Ok(original);
    }
    let request = request(tx, ctx, &answer.run_id, request_id)
        .await?
        .ok_or_else(|| StoreError::UnknownRequest {
            run: answer.run_id.clone(),
            request_id: request_id.into(),
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
        tx,
        ctx,
        &NewMessage {
            run_id: answer.run_id.clone(),
            sender: answer.sender.clone(),
            recipient: request.requester.clone(),
            body: answer.body.clone(),
            idempotency_key: answer.idempotency_key.clone(),
        },
        wakes,
    )
    .await?;
    // The primary key decides; ON CONFLICT keeps the transaction usable to read the winner
    // (a failed statement would abort it).
    let inserted = execute(
        tx,
        ctx,
        "INSERT INTO responses (run_id, request_id, responder, kind, message_key, decided_at) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        &[
            &answer.run_id,
            &request_id,
            &answer.sender,
            &kind,
            &sent.key,
            &sent.created_at,
        ],
    )
    .await?;
    if inserted == 1 {
        return Ok(sent);
    }
    match response(tx, ctx, &answer.run_id, request_id).await? {
        Some(decided) => Err(already_decided(request_id, &decided)),
        None => Err(StoreError::CorruptRow {
            table: "responses",
            detail: format!("the answer to {request_id:?} was refused and none is stored"),
        }),
    }
}

fn already_decided(request_id: &str, decided: &ResponseRecord) -> StoreError {
    StoreError::AlreadyDecided {
        request_id: request_id.into(),
        decided_by: decided.responder.clone(),
        decided_at_ms: decided.decided_at,
    }
}

// ---------------------------------------------------------------- agent records

pub(crate) async fn append_records(
    tx: &Tx<'_>,
    ctx: &Ctx,
    run_id: &str,
    records: &[NewRecord],
) -> StoreResult<Vec<AgentRecord>> {
    let now = now_millis();
    let mut out = Vec::with_capacity(records.len());
    for record in records {
        let seq = match record.seq {
            Some(seq) => seq,
            None => {
                let row = query_one(
                    tx,
                    ctx,
                    "SELECT COALESCE(MAX(seq), 0) + 1 FROM agent_records WHERE run_id = $1 AND agent_id = $2 AND stream = $3",
                    &[&run_id, &record.agent, &record.stream],
                )
                .await?;
                col(&row, "agent_records", 0)?
            }
        };
        let inserted = execute(
            tx,
            ctx,
            "INSERT INTO agent_records (run_id, agent_id, stream, seq, body, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
            &[
                &run_id,
                &record.agent,
                &record.stream,
                &seq,
                &to_json_text(&record.body),
                &now,
            ],
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

pub(crate) async fn records(
    tx: &Tx<'_>,
    ctx: &Ctx,
    run_id: &str,
    agent: &str,
    stream: &str,
    after_seq: i64,
) -> StoreResult<Vec<AgentRecord>> {
    const T: &str = "agent_records";
    query(
        tx,
        ctx,
        "SELECT seq, body, created_at FROM agent_records WHERE run_id = $1 AND agent_id = $2 AND stream = $3 \
         AND seq > $4 ORDER BY seq",
        &[&run_id, &agent, &stream, &after_seq],
    )
    .await?
    .iter()
    .map(|row| {
        Ok(AgentRecord {
            run_id: run_id.into(),
            agent: agent.into(),
            stream: stream.into(),
            seq: col(row, T, 0)?,
            body: parse_json(T, &col::<String>(row, T, 1)?)?,
            created_at: col(row, T, 2)?,
        })
    })
    .collect()
}

pub(crate) async fn commit_turn(
    tx: &Tx<'_>,
    ctx: &Ctx,
    turn: &CommitTurn,
    wakes: &mut Vec<Wake>,
) -> StoreResult<CommitTurnOutcome> {
    for entry in &turn.members {
        add_member(tx, ctx, &turn.run_id, entry).await?;
    }
    ack(tx, ctx, &turn.run_id, &turn.acks).await?;
    let records = append_records(tx, ctx, &turn.run_id, &turn.records).await?;
    let mut tasks = Vec::with_capacity(turn.task_updates.len());
    for update in &turn.task_updates {
        tasks.push(crate::postgres::tasks::update_task(tx, ctx, update, wakes).await?);
    }
    let mut sent = Vec::with_capacity(turn.sends.len());
    for message in &turn.sends {
        sent.push(send(tx, ctx, message, wakes).await?);
    }
    let mut responses = Vec::with_capacity(turn.responses.len());
    for answer in &turn.responses {
        responses.push(respond(tx, ctx, answer, wakes).await?);
    }
    let auto_gate = match turn.auto_gate {
        Some(update) => update_auto_gate(tx, ctx, &turn.run_id, update).await?,
        None => require_run(tx, ctx, &turn.run_id).await?.auto_gate,
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

/// The outcome stored under `(run, key)`, if the keyed operation already ran.
pub(crate) async fn stored_outcome<T: serde::de::DeserializeOwned>(
    tx: &Tx<'_>,
    ctx: &Ctx,
    run_id: &str,
    key: &str,
) -> StoreResult<Option<T>> {
    let Some(row) = query_opt(
        tx,
        ctx,
        "SELECT outcome FROM operations WHERE run_id = $1 AND op_key = $2",
        &[&run_id, &key],
    )
    .await?
    else {
        return Ok(None);
    };
    let stored: String = col(&row, "operations", 0)?;
    serde_json::from_str(&stored)
        .map(Some)
        .map_err(|e| StoreError::CorruptRow {
            table: "operations",
            detail: format!("the outcome of {key:?} does not read: {e}"),
        })
}

/// Stores a keyed operation's outcome in its own transaction, so a repeat returns it.
pub(crate) async fn store_outcome<T: serde::Serialize>(
    tx: &Tx<'_>,
    ctx: &Ctx,
    run_id: &str,
    key: &str,
    outcome: &T,
) -> StoreResult<()> {
    let text = serde_json::to_string(outcome).map_err(|e| StoreError::CorruptRow {
        table: "operations",
        detail: format!("the outcome of {key:?} cannot be stored: {e}"),
    })?;
    execute(
        tx,
        ctx,
        "INSERT INTO operations (run_id, op_key, outcome) VALUES ($1, $2, $3)",
        &[&run_id, &key, &text],
    )
    .await?;
    Ok(())
}

// ---------------------------------------------------------------- counters

pub(crate) async fn next_counter(
    tx: &Tx<'_>,
    ctx: &Ctx,
    run_id: &str,
    name: &str,
) -> StoreResult<i64> {
    require_run(tx, ctx, run_id).await?;
    let row = query_one(
        tx,
        ctx,
        "INSERT INTO counters (run_id, name, value) VALUES ($1, $2, 1) \
         ON CONFLICT (run_id, name) DO UPDATE SET value = counters.value + 1 RETURNING value",
        &[&run_id, &name],
    )
    .await?;
    col(&row, "counters", 0)
}

/// The counter's next value once per key (see `MailboxStore::counter_for`).
pub(crate) async fn counter_for(
    tx: &Tx<'_>,
    ctx: &Ctx,
    run_id: &str,
    name: &str,
    key: &str,
) -> StoreResult<i64> {
    if let Some(value) = stored_outcome(tx, ctx, run_id, key).await? {
        return Ok(value);
    }
    let value = next_counter(tx, ctx, run_id, name).await?;
    store_outcome(tx, ctx, run_id, key, &value).await?;
    Ok(value)
}

// ---------------------------------------------------------------- retention

/// Prunes the given runs (the caller holds their locks).
pub(crate) async fn prune(
    tx: &Tx<'_>,
    ctx: &Ctx,
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
        let deleted = execute(
            tx,
            ctx,
            "DELETE FROM messages WHERE run_id = $1 AND state = 2 AND created_at < $2 AND request_id IS NULL",
            &[&run.id, &cutoff],
        )
        .await?;
        let row = query_one(
            tx,
            ctx,
            "SELECT COUNT(*) FROM messages WHERE run_id = $1 AND request_id IS NOT NULL",
            &[&run.id],
        )
        .await?;
        let kept: i64 = col(&row, "messages", 0)?;
        report.messages_deleted += deleted;
        report.decisions_kept += kept.max(0) as u64;
        report.runs_pruned.push(run.id);
    }
    Ok(report)
}
