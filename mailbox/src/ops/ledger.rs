//! The run's budget ledger (see [`crate::ledger`]), once for both backends (see [`super`]).

use super::Tx;
use super::runs::require_run;
use crate::clock::now_millis;
use crate::error::StoreResult;
use crate::ledger::{LedgerLimits, LedgerSpend, RunLedger};

const T: &str = "run_ledgers";

fn read_ledger(run_id: &str, row: &crate::rows::Row<'_>) -> StoreResult<RunLedger> {
    Ok(RunLedger {
        run_id: run_id.to_owned(),
        limits: LedgerLimits {
            turns: row.get(T, 0)?,
            tokens: row.get(T, 1)?,
            cost_nanos: row.get(T, 2)?,
        },
        spent: LedgerSpend {
            turns: row.get(T, 3)?,
            tokens: row.get(T, 4)?,
            cost_nanos: row.get(T, 5)?,
        },
    })
}

const COLUMNS: &str = "max_turns, max_tokens, max_cost_nanos, turns, tokens, cost_nanos";

/// The run's ledger, if it has one.
pub(crate) async fn run_ledger(tx: &impl Tx, run_id: &str) -> StoreResult<Option<RunLedger>> {
    let sql = format!("SELECT {COLUMNS} FROM run_ledgers WHERE run_id = ?1");
    tx.query_opt(&sql, &[&run_id], |row| read_ledger(run_id, row))
        .await
}

/// Sets the run's limits; a run without a ledger yet gets one holding `seed` (what its records
/// say it spent before the ledger existed: a run stored by an older muster), while an existing
/// ledger keeps what it counted.
pub(crate) async fn open_ledger(
    tx: &impl Tx,
    run_id: &str,
    limits: &LedgerLimits,
    seed: &LedgerSpend,
) -> StoreResult<RunLedger> {
    require_run(tx, run_id).await?;
    let sql = format!(
        "INSERT INTO run_ledgers (run_id, {COLUMNS}, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) \
         ON CONFLICT (run_id) DO UPDATE SET max_turns = excluded.max_turns, \
         max_tokens = excluded.max_tokens, max_cost_nanos = excluded.max_cost_nanos, \
         updated_at = excluded.updated_at RETURNING {COLUMNS}"
    );
    tx.query_one(
        &sql,
        &[
            &run_id,
            &limits.turns,
            &limits.tokens,
            &limits.cost_nanos,
            &seed.turns,
            &seed.tokens,
            &seed.cost_nanos,
            &now_millis(),
        ],
        |row| read_ledger(run_id, row),
    )
    .await
}

/// Adds `spend` to the run's ledger (a run without one gets one, without limits); the ledger
/// after the charge.
pub(crate) async fn charge(
    tx: &impl Tx,
    run_id: &str,
    spend: &LedgerSpend,
) -> StoreResult<RunLedger> {
    let sql = format!(
        "INSERT INTO run_ledgers (run_id, {COLUMNS}, updated_at) VALUES (?1, NULL, NULL, NULL, ?2, ?3, ?4, ?5) \
         ON CONFLICT (run_id) DO UPDATE SET turns = run_ledgers.turns + excluded.turns, \
         tokens = run_ledgers.tokens + excluded.tokens, \
         cost_nanos = run_ledgers.cost_nanos + excluded.cost_nanos, \
         updated_at = excluded.updated_at RETURNING {COLUMNS}"
    );
    tx.query_one(
        &sql,
        &[
            &run_id,
            &spend.turns,
            &spend.tokens,
            &spend.cost_nanos,
            &now_millis(),
        ],
        |row| read_ledger(run_id, row),
    )
    .await
}
