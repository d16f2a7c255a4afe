//! The PostgreSQL schema and its migrations: the SQLite store's relational model, table for
//! table, in the connection's current schema (the first of its `search_path`). The version
//! lives in the one-row table `muster_schema`, which also marks the schema as muster's.

use tokio_postgres::Client;

use crate::error::{StoreError, StoreResult};
use crate::postgres::ops::{Ctx, pg_error};

/// Migrations in order; migration `i` takes the schema from version `i` to `i + 1`. They
/// follow the SQLite store's, so both backends keep one model.
const MIGRATIONS: &[&str] = &[
    // 0 -> 1: the first schema.
    r#"
    CREATE TABLE runs (
        id              TEXT PRIMARY KEY,
        slug            TEXT NOT NULL UNIQUE,
        team            TEXT,
        workspace       TEXT NOT NULL,
        status          TEXT NOT NULL,
        created_at      BIGINT NOT NULL,
        updated_at      BIGINT NOT NULL,
        batch_line_id   TEXT,
        auto_gate_open  BIGINT NOT NULL,
        auto_denials    BIGINT NOT NULL,
        auto_gate_limit BIGINT NOT NULL,
        launch_options  TEXT NOT NULL,
        epoch           BIGINT NOT NULL DEFAULT 0,
        result          TEXT
    );

    -- `position` keeps the order entries joined in (SQLite's rowid).
    CREATE TABLE roster (
        position    BIGINT GENERATED ALWAYS AS IDENTITY,
        run_id      TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        agent_id    TEXT NOT NULL,
        kind        TEXT NOT NULL,
        definition  TEXT,
        parent      TEXT,
        created_at  BIGINT NOT NULL,
        PRIMARY KEY (run_id, agent_id)
    );

    CREATE TABLE messages (
        seq             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        key             TEXT NOT NULL UNIQUE,
        run_id          TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        sender          TEXT NOT NULL,
        recipient       TEXT NOT NULL,
        kind            TEXT NOT NULL,
        priority        BIGINT NOT NULL,
        request_id      TEXT,
        idempotency_key TEXT,
        body            TEXT NOT NULL,
        state           BIGINT NOT NULL,
        lease_epoch     BIGINT,
        created_at      BIGINT NOT NULL,
        leased_at       BIGINT,
        acked_at        BIGINT
    );
    CREATE INDEX messages_delivery ON messages (run_id, recipient, state, priority, seq);
    CREATE UNIQUE INDEX messages_idempotency ON messages (run_id, idempotency_key)
        WHERE idempotency_key IS NOT NULL;
    CREATE INDEX messages_leased ON messages (run_id, lease_epoch) WHERE state = 1;
    CREATE INDEX messages_request ON messages (run_id, request_id) WHERE request_id IS NOT NULL;

    CREATE TABLE requests (
        run_id      TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        request_id  TEXT NOT NULL,
        kind        TEXT NOT NULL,
        requester   TEXT NOT NULL,
        recipient   TEXT NOT NULL,
        responder   TEXT NOT NULL,
        message_key TEXT NOT NULL,
        created_at  BIGINT NOT NULL,
        PRIMARY KEY (run_id, request_id)
    );

    -- First response wins: the primary key, not a check in code.
    CREATE TABLE responses (
        run_id      TEXT NOT NULL,
        request_id  TEXT NOT NULL,
        responder   TEXT NOT NULL,
        kind        TEXT NOT NULL,
        message_key TEXT NOT NULL,
        decided_at  BIGINT NOT NULL,
        PRIMARY KEY (run_id, request_id),
        FOREIGN KEY (run_id, request_id) REFERENCES requests(run_id, request_id) ON DELETE CASCADE
    );

    CREATE TABLE agent_records (
        run_id     TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        agent_id   TEXT NOT NULL,
        stream     TEXT NOT NULL,
        seq        BIGINT NOT NULL,
        body       TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        PRIMARY KEY (run_id, agent_id, stream, seq)
    );

    CREATE TABLE tasks (
        run_id         TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        task_id        BIGINT NOT NULL,
        subject        TEXT NOT NULL,
        description    TEXT NOT NULL,
        owner          TEXT,
        status         TEXT NOT NULL,
        blocked_reason TEXT,
        created_by     TEXT NOT NULL,
        created_at     BIGINT NOT NULL,
        updated_at     BIGINT NOT NULL,
        PRIMARY KEY (run_id, task_id)
    );

    CREATE TABLE task_deps (
        run_id     TEXT NOT NULL,
        task_id    BIGINT NOT NULL,
        blocked_by BIGINT NOT NULL,
        PRIMARY KEY (run_id, task_id, blocked_by),
        FOREIGN KEY (run_id, task_id) REFERENCES tasks(run_id, task_id) ON DELETE CASCADE,
        FOREIGN KEY (run_id, blocked_by) REFERENCES tasks(run_id, task_id) ON DELETE CASCADE
    );

    CREATE TABLE counters (
        run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        name   TEXT NOT NULL,
        value  BIGINT NOT NULL,
        PRIMARY KEY (run_id, name)
    );
    "#,
    // 1 -> 2: operations made idempotent by a key (as in the SQLite store).
    r#"
    CREATE TABLE operations (
        run_id  TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        op_key  TEXT NOT NULL,
        outcome TEXT NOT NULL,
        PRIMARY KEY (run_id, op_key)
    );
    "#,
    // 2 -> 3 (PostgreSQL only): every write stores its outcome under a fresh operation id in
    // its own transaction, so a retry after a lost COMMIT acknowledgement returns the first
    // result instead of writing twice. A row is deleted by the store's next write once its
    // COMMIT was acknowledged.
    r#"
    CREATE TABLE operation_ids (
        op_key     TEXT PRIMARY KEY,
        run_id     TEXT NOT NULL,
        outcome    TEXT NOT NULL,
        created_at BIGINT NOT NULL
    );
    "#,
    // 3 -> 4: runs carry the project they belong to (as SQLite's 2 -> 3).
    r#"
    ALTER TABLE runs ADD COLUMN project_id TEXT;
    "#,
    // 4 -> 5: work items that workers lease, and the workers (as SQLite's 3 -> 4).
    r#"
    CREATE TABLE work_items (
        seq            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id             TEXT NOT NULL UNIQUE,
        queue          TEXT NOT NULL,
        payload        TEXT NOT NULL,
        state          TEXT NOT NULL,
        worker         TEXT,
        token          BIGINT NOT NULL DEFAULT 0,
        lease_deadline BIGINT,
        attempts       BIGINT NOT NULL DEFAULT 0,
        result         TEXT,
        created_at     BIGINT NOT NULL,
        finished_at    BIGINT
    );
    CREATE INDEX work_items_claim ON work_items (state, queue, seq);

    CREATE TABLE workers (
        name           TEXT PRIMARY KEY,
        host           TEXT NOT NULL,
        slots          BIGINT NOT NULL,
        pid            BIGINT NOT NULL,
        started_at     BIGINT NOT NULL,
        last_heartbeat BIGINT NOT NULL,
        stopped_at     BIGINT
    );
    "#,
    // 5 -> 6: the process groups of workers' Bash calls (as SQLite's 4 -> 5).
    r#"
    CREATE TABLE process_groups (
        run_id      TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        agent_id    TEXT NOT NULL,
        tool_use_id TEXT NOT NULL,
        pgid        BIGINT NOT NULL,
        host        TEXT NOT NULL,
        boot_id     TEXT NOT NULL,
        item        TEXT NOT NULL,
        token       BIGINT NOT NULL,
        worker      TEXT NOT NULL,
        recorded_at BIGINT NOT NULL,
        PRIMARY KEY (run_id, agent_id, tool_use_id)
    );
    CREATE INDEX process_groups_worker ON process_groups (worker, host, boot_id);
    "#,
    // 6 -> 7: the run's budget ledger (as SQLite's 5 -> 6).
    r#"
    CREATE TABLE run_ledgers (
        run_id         TEXT PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
        max_turns      BIGINT,
        max_tokens     BIGINT,
        max_cost_nanos BIGINT,
        turns          BIGINT NOT NULL,
        tokens         BIGINT NOT NULL,
        cost_nanos     BIGINT NOT NULL,
        updated_at     BIGINT NOT NULL
    );
    "#,
    // 7 -> 8: the reservations of the run's model requests in flight (as SQLite's 6 -> 7).
    r#"
    CREATE TABLE ledger_reservations (
        run_id     TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        agent_id   TEXT NOT NULL,
        epoch      BIGINT NOT NULL,
        turns      BIGINT NOT NULL,
        tokens     BIGINT NOT NULL,
        cost_nanos BIGINT NOT NULL,
        created_at BIGINT NOT NULL,
        PRIMARY KEY (run_id, agent_id)
    );
    "#,
];

/// The newest schema version this build knows (versions 1 and 2 are SQLite's; 3 adds the
/// operation ids only a server store needs).
pub const PG_SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// What marks a schema as muster's: the version table with this application name in it.
const APPLICATION: &str = "muster";

/// Refuses a schema that holds someone else's tables or a newer muster's, then brings it up
/// to [`PG_SCHEMA_VERSION`]. Each step runs in one transaction under an advisory lock on the
/// schema, so two processes opening a new store at once do not collide; DDL is
/// transactional in PostgreSQL, so a step is applied whole or not at all.
pub(crate) async fn migrate(client: &mut Client, ctx: &Ctx) -> StoreResult<()> {
    let tx = client.transaction().await.map_err(|e| pg_error(ctx, e))?;
    match migrate_in(&tx, ctx).await {
        Ok(()) => tx.commit().await.map_err(|e| pg_error(ctx, e)),
        Err(error) => {
            // Release the schema lock now, not when the connection happens to close.
            let _ = tx.rollback().await;
            Err(error)
        }
    }
}

async fn migrate_in(tx: &tokio_postgres::Transaction<'_>, ctx: &Ctx) -> StoreResult<()> {
    tx.execute(
        "SELECT pg_advisory_xact_lock($1)",
        &[&ctx.schema_lock_key()],
    )
    .await
    .map_err(|e| pg_error(ctx, e))?;
    let found = stored_version(tx, ctx).await?;
    if found > PG_SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            path: ctx.target.to_string().into(),
            found,
            supported: PG_SCHEMA_VERSION,
        });
    }
    if found == 0 {
        tx.batch_execute(
            "CREATE TABLE muster_schema (application TEXT NOT NULL, version BIGINT NOT NULL)",
        )
        .await
        .map_err(|e| pg_error(ctx, e))?;
        tx.execute(
            "INSERT INTO muster_schema (application, version) VALUES ($1, 0)",
            &[&APPLICATION],
        )
        .await
        .map_err(|e| pg_error(ctx, e))?;
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(found.max(0) as usize) {
        let to = index as i64 + 1;
        tx.batch_execute(sql).await.map_err(|e| pg_error(ctx, e))?;
        tx.execute("UPDATE muster_schema SET version = $1", &[&to])
            .await
            .map_err(|e| pg_error(ctx, e))?;
    }
    Ok(())
}

/// The version the current schema declares: 0 for an empty schema; refuses one that holds
/// tables but no muster version table, or a version table of another application.
async fn stored_version(tx: &tokio_postgres::Transaction<'_>, ctx: &Ctx) -> StoreResult<i64> {
    let tables: Vec<String> = tx
        .query(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = current_schema() ORDER BY table_name",
            &[],
        )
        .await
        .map_err(|e| pg_error(ctx, e))?
        .iter()
        .map(|row| row.try_get(0))
        .collect::<Result<_, _>>()
        .map_err(|e| pg_error(ctx, e))?;
    if tables.is_empty() {
        return Ok(0);
    }
    let not_ours = |detail: String| StoreError::NotMusterDatabase {
        target: ctx.target.to_string(),
        schema: ctx.schema.to_string(),
        detail,
    };
    if !tables.iter().any(|t| t == "muster_schema") {
        let shown: Vec<&str> = tables.iter().take(5).map(String::as_str).collect();
        return Err(not_ours(format!(
            "it holds {} table(s) ({}{}) and no muster_schema table",
            tables.len(),
            shown.join(", "),
            if tables.len() > shown.len() {
                ", …"
            } else {
                ""
            }
        )));
    }
    let row = tx
        .query_opt("SELECT application, version FROM muster_schema", &[])
        .await
        .map_err(|e| not_ours(format!("its muster_schema table does not read: {e}")))?
        .ok_or_else(|| not_ours("its muster_schema table is empty".into()))?;
    let application: String = row
        .try_get(0)
        .map_err(|e| not_ours(format!("its muster_schema table does not read: {e}")))?;
    if application != APPLICATION {
        return Err(not_ours(format!(
            "its muster_schema table belongs to {application:?}"
        )));
    }
    row.try_get(1)
        .map_err(|e| not_ours(format!("its muster_schema version does not read: {e}")))
}
