//! The tables both backends keep, each migration step written once, in SQLite's dialect:
//! the SQLite store runs a step's text as it is, the PostgreSQL store runs [`postgres`]'s
//! rendering of it. Each backend's `schema.rs` lists the steps in its own version order
//! (PostgreSQL has a step of its own), and the schema parity test
//! (`both_backends_migrate_to_one_schema`) compares the tables the two end with. A step, once
//! released, is never edited: stores that ran it must still open.

/// The first schema.
pub(crate) const FIRST: &str = r#"
    CREATE TABLE runs (
        id              TEXT PRIMARY KEY,
        slug            TEXT NOT NULL UNIQUE,
        team            TEXT,
        workspace       TEXT NOT NULL,
        status          TEXT NOT NULL,
        created_at      INTEGER NOT NULL,
        updated_at      INTEGER NOT NULL,
        batch_line_id   TEXT,
        auto_gate_open  INTEGER NOT NULL,
        auto_denials    INTEGER NOT NULL,
        auto_gate_limit INTEGER NOT NULL,
        launch_options  TEXT NOT NULL,
        epoch           INTEGER NOT NULL DEFAULT 0,
        result          TEXT
    ) STRICT;

    CREATE TABLE roster (
        run_id      TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        agent_id    TEXT NOT NULL,
        kind        TEXT NOT NULL,
        definition  TEXT,
        parent      TEXT,
        created_at  INTEGER NOT NULL,
        PRIMARY KEY (run_id, agent_id)
    ) STRICT;

    CREATE TABLE messages (
        seq             INTEGER PRIMARY KEY AUTOINCREMENT,
        key             TEXT NOT NULL UNIQUE,
        run_id          TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        sender          TEXT NOT NULL,
        recipient       TEXT NOT NULL,
        kind            TEXT NOT NULL,
        priority        INTEGER NOT NULL,
        request_id      TEXT,
        idempotency_key TEXT,
        body            TEXT NOT NULL,
        state           INTEGER NOT NULL,
        lease_epoch     INTEGER,
        created_at      INTEGER NOT NULL,
        leased_at       INTEGER,
        acked_at        INTEGER
    ) STRICT;
    -- "Next message for X": one index seek, no scan, no temporary B-tree, whatever the
    -- history size (settled rows sit in another range of the index).
    CREATE INDEX messages_delivery ON messages (run_id, recipient, state, priority, seq);
    CREATE UNIQUE INDEX messages_idempotency ON messages (run_id, idempotency_key)
        WHERE idempotency_key IS NOT NULL;
    -- Releasing an old epoch's leases touches only leased rows.
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
        created_at  INTEGER NOT NULL,
        PRIMARY KEY (run_id, request_id)
    ) STRICT, WITHOUT ROWID;

    -- First response wins: the primary key, not a check in code.
    CREATE TABLE responses (
        run_id      TEXT NOT NULL,
        request_id  TEXT NOT NULL,
        responder   TEXT NOT NULL,
        kind        TEXT NOT NULL,
        message_key TEXT NOT NULL,
        decided_at  INTEGER NOT NULL,
        PRIMARY KEY (run_id, request_id),
        FOREIGN KEY (run_id, request_id) REFERENCES requests(run_id, request_id) ON DELETE CASCADE
    ) STRICT, WITHOUT ROWID;

    CREATE TABLE agent_records (
        run_id     TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        agent_id   TEXT NOT NULL,
        stream     TEXT NOT NULL,
        seq        INTEGER NOT NULL,
        body       TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (run_id, agent_id, stream, seq)
    ) STRICT, WITHOUT ROWID;

    CREATE TABLE tasks (
        run_id         TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        task_id        INTEGER NOT NULL,
        subject        TEXT NOT NULL,
        description    TEXT NOT NULL,
        owner          TEXT,
        status         TEXT NOT NULL,
        blocked_reason TEXT,
        created_by     TEXT NOT NULL,
        created_at     INTEGER NOT NULL,
        updated_at     INTEGER NOT NULL,
        PRIMARY KEY (run_id, task_id)
    ) STRICT, WITHOUT ROWID;

    CREATE TABLE task_deps (
        run_id     TEXT NOT NULL,
        task_id    INTEGER NOT NULL,
        blocked_by INTEGER NOT NULL,
        PRIMARY KEY (run_id, task_id, blocked_by),
        FOREIGN KEY (run_id, task_id) REFERENCES tasks(run_id, task_id) ON DELETE CASCADE,
        FOREIGN KEY (run_id, blocked_by) REFERENCES tasks(run_id, task_id) ON DELETE CASCADE
    ) STRICT, WITHOUT ROWID;

    CREATE TABLE counters (
        run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        name   TEXT NOT NULL,
        value  INTEGER NOT NULL,
        PRIMARY KEY (run_id, name)
    ) STRICT, WITHOUT ROWID;
    "#;

/// Operations made idempotent by a key (a tool call's task changes): the first outcome, stored in
/// the transaction of the change, is what a repeat returns.
pub(crate) const OPERATIONS: &str = r#"
    CREATE TABLE operations (
        run_id  TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        op_key  TEXT NOT NULL,
        outcome TEXT NOT NULL,
        PRIMARY KEY (run_id, op_key)
    ) STRICT, WITHOUT ROWID;
    "#;

/// Runs carry the project they belong to (several projects can share a store).
pub(crate) const PROJECTS: &str = r#"
    ALTER TABLE runs ADD COLUMN project_id TEXT;
    "#;

/// Work items that workers lease (a batch's lines), with their fencing token, and the workers
/// themselves (see `crate::work`).
pub(crate) const WORK: &str = r#"
    CREATE TABLE work_items (
        seq            INTEGER PRIMARY KEY,
        id             TEXT NOT NULL UNIQUE,
        queue          TEXT NOT NULL,
        payload        TEXT NOT NULL,
        state          TEXT NOT NULL,
        worker         TEXT,
        token          INTEGER NOT NULL DEFAULT 0,
        lease_deadline INTEGER,
        attempts       INTEGER NOT NULL DEFAULT 0,
        result         TEXT,
        created_at     INTEGER NOT NULL,
        finished_at    INTEGER
    ) STRICT;
    CREATE INDEX work_items_claim ON work_items (state, queue, seq);

    CREATE TABLE workers (
        name           TEXT PRIMARY KEY,
        host           TEXT NOT NULL,
        slots          INTEGER NOT NULL,
        pid            INTEGER NOT NULL,
        started_at     INTEGER NOT NULL,
        last_heartbeat INTEGER NOT NULL,
        stopped_at     INTEGER
    ) STRICT;
    "#;

/// The process groups of workers' Bash calls, with the machine (host, boot id) they run on and the
/// item, token and worker whose line started them: a restarted worker finds the orphans of its
/// earlier incarnation here (see `crate::work`).
pub(crate) const PROCESS_GROUPS: &str = r#"
    CREATE TABLE process_groups (
        run_id      TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        agent_id    TEXT NOT NULL,
        tool_use_id TEXT NOT NULL,
        pgid        INTEGER NOT NULL,
        host        TEXT NOT NULL,
        boot_id     TEXT NOT NULL,
        item        TEXT NOT NULL,
        token       INTEGER NOT NULL,
        worker      TEXT NOT NULL,
        recorded_at INTEGER NOT NULL,
        PRIMARY KEY (run_id, agent_id, tool_use_id)
    ) STRICT, WITHOUT ROWID;
    CREATE INDEX process_groups_worker ON process_groups (worker, host, boot_id);
    "#;

/// The run's budget ledger, shared by every process of the run (see `crate::ledger`): the run-wide
/// limits and what the run spent, cost in nano-dollars.
pub(crate) const LEDGERS: &str = r#"
    CREATE TABLE run_ledgers (
        run_id         TEXT PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
        max_turns      INTEGER,
        max_tokens     INTEGER,
        max_cost_nanos INTEGER,
        turns          INTEGER NOT NULL,
        tokens         INTEGER NOT NULL,
        cost_nanos     INTEGER NOT NULL,
        updated_at     INTEGER NOT NULL
    ) STRICT;
    "#;

/// The reservations of the run's model requests in flight (see `crate::ledger`): one per agent,
/// settled by the commit that charges its response.
pub(crate) const RESERVATIONS: &str = r#"
    CREATE TABLE ledger_reservations (
        run_id     TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        agent_id   TEXT NOT NULL,
        epoch      INTEGER NOT NULL,
        turns      INTEGER NOT NULL,
        tokens     INTEGER NOT NULL,
        cost_nanos INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (run_id, agent_id)
    ) STRICT, WITHOUT ROWID;
    "#;

/// A step's text in PostgreSQL's dialect: an integer column is `BIGINT` (SQLite's INTEGER
/// holds 64 bits); a key the store assigns (SQLite's `INTEGER PRIMARY KEY`, the rowid) is an
/// identity column; a table is neither `STRICT` (a PostgreSQL column holds its type only) nor
/// `WITHOUT ROWID`; and the roster keeps the order its entries joined in an identity column,
/// `position` (SQLite's rowid).
pub(crate) fn postgres(step: &str) -> String {
    const STORE_ASSIGNED: &str = "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY";
    step.replace("INTEGER PRIMARY KEY AUTOINCREMENT", STORE_ASSIGNED)
        .replace("INTEGER PRIMARY KEY", STORE_ASSIGNED)
        .replace("INTEGER", "BIGINT")
        .replace(") STRICT, WITHOUT ROWID;", ");")
        .replace(") STRICT;", ");")
        .replace(
            "CREATE TABLE roster (\n",
            "CREATE TABLE roster (\n        position    BIGINT GENERATED ALWAYS AS IDENTITY,\n",
        )
}
