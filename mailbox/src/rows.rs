//! Stored rows read back, once for both backends: [`Row`] reads a column of either driver's
//! row (a value of the wrong type is a `CorruptRow` naming the table and column, on both),
//! and one decoder per record type turns a row into the record.

use serde_json::Value;

use crate::error::{StoreError, StoreResult};
use crate::types::*;

/// A row as either backend returns it: each backend reads its driver's row through this.
pub(crate) trait StoredRow {
    fn int(&self, index: usize) -> Result<Option<i64>, String>;
    fn text(&self, index: usize) -> Result<Option<String>, String>;
    fn flag(&self, index: usize) -> Result<bool, String>;
}

pub(crate) type Row<'r> = dyn StoredRow + 'r;

/// A column type the operations read.
pub(crate) trait Column: Sized {
    fn read(row: &Row<'_>, index: usize) -> Result<Self, String>;
}

fn present<T>(value: Option<T>) -> Result<T, String> {
    value.ok_or_else(|| "NULL where a value is required".to_owned())
}

impl Column for i64 {
    fn read(row: &Row<'_>, index: usize) -> Result<Self, String> {
        present(row.int(index)?)
    }
}

impl Column for Option<i64> {
    fn read(row: &Row<'_>, index: usize) -> Result<Self, String> {
        row.int(index)
    }
}

impl Column for String {
    fn read(row: &Row<'_>, index: usize) -> Result<Self, String> {
        present(row.text(index)?)
    }
}

impl Column for Option<String> {
    fn read(row: &Row<'_>, index: usize) -> Result<Self, String> {
        row.text(index)
    }
}

impl Column for bool {
    fn read(row: &Row<'_>, index: usize) -> Result<Self, String> {
        row.flag(index)
    }
}

impl Row<'_> {
    /// Column `index`, naming `table` when the stored value does not read as a `T`.
    pub(crate) fn get<T: Column>(&self, table: &'static str, index: usize) -> StoreResult<T> {
        T::read(self, index).map_err(|detail| StoreError::CorruptRow {
            table,
            detail: format!("column {index}: {detail}"),
        })
    }

    /// Column `index` holding JSON text.
    pub(crate) fn json(&self, table: &'static str, index: usize) -> StoreResult<Value> {
        parse_json(table, &self.get::<String>(table, index)?)
    }
}

pub(crate) fn parse_json(table: &'static str, text: &str) -> StoreResult<Value> {
    serde_json::from_str(text).map_err(|e| StoreError::CorruptRow {
        table,
        detail: format!("invalid JSON: {e}"),
    })
}

pub(crate) const RUN_COLUMNS: &str = "id, slug, team, workspace, status, created_at, updated_at, \
    batch_line_id, auto_gate_open, auto_denials, auto_gate_limit, launch_options, epoch, result, project_id";

pub(crate) fn run(row: &Row<'_>) -> StoreResult<RunRecord> {
    const T: &str = "runs";
    let status: String = row.get(T, 4)?;
    let status = RunStatus::parse(&status).ok_or_else(|| StoreError::CorruptRow {
        table: T,
        detail: format!("unknown status {status:?}"),
    })?;
    let result: Option<String> = row.get(T, 13)?;
    Ok(RunRecord {
        id: row.get(T, 0)?,
        slug: row.get(T, 1)?,
        team: row.get(T, 2)?,
        workspace: row.get(T, 3)?,
        status,
        created_at: row.get(T, 5)?,
        updated_at: row.get(T, 6)?,
        batch_line_id: row.get(T, 7)?,
        auto_gate: auto_gate_at(row, 8)?,
        launch_options: row.json(T, 11)?,
        epoch: row.get(T, 12)?,
        result: result.as_deref().map(|r| parse_json(T, r)).transpose()?,
        project_id: row.get(T, 14)?,
    })
}

/// `auto_gate_open, auto_denials, auto_gate_limit` of `runs`, from column `first` on.
pub(crate) fn auto_gate_at(row: &Row<'_>, first: usize) -> StoreResult<AutoGate> {
    const T: &str = "runs";
    Ok(AutoGate {
        open: row.get::<i64>(T, first)? != 0,
        consecutive_denials: row.get::<i64>(T, first + 1)?.max(0) as u32,
        limit: row.get::<i64>(T, first + 2)?.max(0) as u32,
    })
}

pub(crate) fn member_kind(kind: &str) -> StoreResult<MemberKind> {
    MemberKind::parse(kind).ok_or_else(|| StoreError::CorruptRow {
        table: "roster",
        detail: format!("unknown kind {kind:?}"),
    })
}

/// `agent_id, kind, definition, parent`.
pub(crate) fn roster_entry(row: &Row<'_>) -> StoreResult<RosterEntry> {
    const T: &str = "roster";
    Ok(RosterEntry {
        agent: row.get(T, 0)?,
        kind: member_kind(&row.get::<String>(T, 1)?)?,
        definition: row.get(T, 2)?,
        parent: row.get(T, 3)?,
    })
}

pub(crate) const MESSAGE_COLUMNS: &str = "key, seq, run_id, sender, recipient, kind, priority, request_id, \
    idempotency_key, body, state, created_at, leased_at, acked_at";

pub(crate) fn message(row: &Row<'_>) -> StoreResult<Message> {
    const T: &str = "messages";
    let state: i64 = row.get(T, 10)?;
    let state = DeliveryState::from_code(state).ok_or_else(|| StoreError::CorruptRow {
        table: T,
        detail: format!("unknown state {state}"),
    })?;
    let kind: String = row.get(T, 5)?;
    let (kind, body) = read_kind_and_body(&kind, &row.json(T, 9)?);
    Ok(Message {
        key: row.get(T, 0)?,
        seq: row.get(T, 1)?,
        run_id: row.get(T, 2)?,
        sender: row.get(T, 3)?,
        recipient: row.get(T, 4)?,
        kind,
        priority: Priority::from_code(row.get(T, 6)?),
        request_id: row.get(T, 7)?,
        idempotency_key: row.get(T, 8)?,
        body,
        state,
        created_at: row.get(T, 11)?,
        leased_at: row.get(T, 12)?,
        acked_at: row.get(T, 13)?,
    })
}

pub(crate) const TASK_COLUMNS: &str = "task_id, subject, description, owner, status, blocked_reason, \
    created_by, created_at, updated_at";

/// A task's own row; its dependencies are read separately and set by the caller.
pub(crate) fn task(run_id: &str, row: &Row<'_>) -> StoreResult<Task> {
    const T: &str = "tasks";
    let status: String = row.get(T, 4)?;
    let status = TaskStatus::parse(&status).ok_or_else(|| StoreError::CorruptRow {
        table: T,
        detail: format!("unknown status {status:?}"),
    })?;
    Ok(Task {
        run_id: run_id.into(),
        task_id: row.get(T, 0)?,
        subject: row.get(T, 1)?,
        description: row.get(T, 2)?,
        owner: row.get(T, 3)?,
        status,
        blocked_reason: row.get(T, 5)?,
        blocked_by: Vec::new(),
        blocked_by_open: Vec::new(),
        created_by: row.get(T, 6)?,
        created_at: row.get(T, 7)?,
        updated_at: row.get(T, 8)?,
    })
}
