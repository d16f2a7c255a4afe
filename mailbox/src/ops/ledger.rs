//! The run's budget ledger (see [`crate::ledger`]), once for both backends (see [`super`]).

use super::Tx;
use super::runs::require_run_exists;
use crate::clock::now_millis;
use crate::error::StoreResult;
use crate::ledger::{
    LEDGER_WAKE, LedgerDecision, LedgerLimits, LedgerSpend, Reserved, RunLedger, decide,
};
use crate::wake::Wake;

const T: &str = "run_ledgers";

fn read_ledger(run_id: &str, row: &crate::rows::Row<'_>) -> StoreResult<RunLedger> {
    Ok(RunLedger {
        run_id: run_id.to_owned(),
        limits: LedgerLimits {
            turns: row.get(T, 0)?,
            tokens: row.get(T, 1)?,
            cost_nanos: row.get(T, 2)?,
        },
        spent: spend_at(row, T, 3)?,
    })
}

/// The amounts of a [`LedgerSpend`] in columns `first` to `first + 2` of `row`.
fn spend_at(
    row: &crate::rows::Row<'_>,
    table: &'static str,
    first: usize,
) -> StoreResult<LedgerSpend> {
    Ok(LedgerSpend {
        turns: row.get(table, first)?,
        tokens: row.get(table, first + 1)?,
        cost_nanos: row.get(table, first + 2)?,
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
    require_run_exists(tx, run_id).await?;
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

/// Decides whether `agent` (of epoch `epoch`) may send a request estimated at `estimate`
/// (see [`crate::ledger::decide`]); a grant replaces the agent's reservation with this one, a
/// wait or a spent ledger leaves the agent none (so waiting agents hold nothing back). A run
/// without a ledger, or with no limits, is granted without a reservation.
pub(crate) async fn reserve(
    tx: &impl Tx,
    run_id: &str,
    agent: &str,
    epoch: i64,
    estimate: &LedgerSpend,
    wakes: &mut Vec<Wake>,
) -> StoreResult<Reserved> {
    let ledger = run_ledger(tx, run_id).await?;
    let Some(limits) = ledger
        .as_ref()
        .map(|l| l.limits)
        .filter(|l| !l.is_unlimited())
    else {
        return Ok(granted_without_limits(ledger));
    };
    let spent = ledger.as_ref().map(|l| l.spent).unwrap_or_default();
    const R: &str = "ledger_reservations";
    let (in_flight, in_flight_count) = tx
        .query_one(
            // PostgreSQL sums BIGINTs as NUMERIC: cast back.
            "SELECT CAST(COALESCE(SUM(turns), 0) AS BIGINT), \
             CAST(COALESCE(SUM(tokens), 0) AS BIGINT), \
             CAST(COALESCE(SUM(cost_nanos), 0) AS BIGINT), COUNT(*) FROM ledger_reservations \
             WHERE run_id = ?1 AND agent_id <> ?2",
            &[&run_id, &agent],
            |row| Ok((spend_at(row, R, 0)?, row.get::<i64>(R, 3)?)),
        )
        .await?;
    let decision = decide(&limits, &spent, &in_flight, in_flight_count, estimate);
    if decision == LedgerDecision::Grant {
        tx.execute(
            "INSERT INTO ledger_reservations (run_id, agent_id, epoch, turns, tokens, cost_nanos, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (run_id, agent_id) DO UPDATE SET \
             epoch = excluded.epoch, turns = excluded.turns, tokens = excluded.tokens, \
             cost_nanos = excluded.cost_nanos, created_at = excluded.created_at",
            &[
                &run_id,
                &agent,
                &epoch,
                &estimate.turns,
                &estimate.tokens,
                &estimate.cost_nanos,
                &now_millis(),
            ],
        )
        .await?;
    } else {
        release(tx, run_id, agent, wakes).await?;
    }
    Ok(Reserved {
        decision,
        ledger,
        in_flight,
        in_flight_count,
    })
}

/// The runs whose ledger this store read to have no run-wide limit, each with the epoch it was
/// read under: a later request of that epoch is granted without a look (no writer trip on
/// SQLite, no round trip on PostgreSQL). Sound because a run's limits are written once per
/// epoch, by the process that opens the epoch under the run's live lock, before any of its
/// agents asks ([`crate::store::MailboxStore::open_ledger`] after `open_epoch`); a request of
/// another epoch looks again, and this store's own `open_ledger` forgets the run.
///
/// A process whose epoch is no longer the run's must not go on skipping: another process may
/// have taken the run over and written limits. On SQLite the run's lock is a file lock that
/// cannot be lost while the process lives, so no other process opens an epoch meanwhile. On
/// PostgreSQL the lock is held by a connection that can end (a restart, a cut), after which
/// another process may take the run over; so there a run is skipped only while this store
/// holds its live lock without a break since the look (`held_only`): the hold's keeper lets
/// go of the run the moment its connection ends, and every request looks again from then on
/// (fail closed). A fenced store (a worker's) never skips: its look also checks the lease.
#[derive(Debug, Default)]
pub(crate) struct UnlimitedRuns {
    state: std::sync::Mutex<Known>,
    /// PostgreSQL: skip only runs this store holds live (see above).
    held_only: bool,
}

#[derive(Debug, Default)]
struct Known {
    /// The epoch each run was read to have no limit in.
    unlimited: std::collections::HashMap<String, i64>,
    /// The runs this store holds live, unbroken (PostgreSQL).
    held: std::collections::HashSet<String>,
    /// Moves at every change of what is known, so a look begun before one learns nothing.
    generation: u64,
}

/// What a look saw of [`UnlimitedRuns`] as it began.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Look(u64);

impl UnlimitedRuns {
    /// Skips only runs held live by this store, unbroken since the look (PostgreSQL).
    pub(crate) fn held_only() -> UnlimitedRuns {
        UnlimitedRuns {
            held_only: true,
            ..UnlimitedRuns::default()
        }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The grant of a request of `epoch` when the run was read to have no limit in that epoch
    /// (and, when `held_only`, is still held live by this store).
    pub(crate) fn grant(&self, run_id: &str, epoch: i64) -> Option<Reserved> {
        let known = self.known();
        let held = !self.held_only || known.held.contains(run_id);
        (held && known.unlimited.get(run_id) == Some(&epoch)).then(|| granted_without_limits(None))
    }

    /// Taken before a look at the run's ledger, for [`UnlimitedRuns::learn`].
    pub(crate) fn look(&self) -> Look {
        Look(self.known().generation)
    }

    /// Remembers what a look at the run's ledger under `epoch` found, when it found no limit,
    /// nothing changed since the look began, and (when `held_only`) the run is held live.
    pub(crate) fn learn(&self, run_id: &str, epoch: i64, look: Look, reserved: &Reserved) {
        let unlimited = reserved.decision == LedgerDecision::Grant
            && reserved
                .ledger
                .as_ref()
                .is_none_or(|l| l.limits.is_unlimited());
        let mut known = self.known();
        let held = !self.held_only || known.held.contains(run_id);
        if unlimited && held && known.generation == look.0 {
            known.unlimited.insert(run_id.to_owned(), epoch);
        }
    }

    /// The run's limits are being written: look again from now on.
    pub(crate) fn forget(&self, run_id: &str) {
        let mut known = self.known();
        known.generation += 1;
        known.unlimited.remove(run_id);
    }

    /// This store holds the run live (its lock taken, and the epoch, if it owns one, checked).
    pub(crate) fn hold(&self, run_id: &str) {
        let mut known = self.known();
        known.generation += 1;
        known.held.insert(run_id.to_owned());
    }

    /// This store's hold on the run ended (its connection ended, or it let go): another
    /// process may take the run over, so nothing learnt under the hold counts any more.
    pub(crate) fn let_go(&self, run_id: &str) {
        let mut known = self.known();
        known.generation += 1;
        known.held.remove(run_id);
        known.unlimited.remove(run_id);
    }
}

/// The grant of a run whose ledger, as read, has no run-wide limit (or that has none): no
/// reservation is held. `None` when it has limits, which only [`reserve`] decides.
pub(crate) fn grant_if_unlimited(ledger: Option<RunLedger>) -> Option<Reserved> {
    if ledger.as_ref().is_some_and(|l| !l.limits.is_unlimited()) {
        return None;
    }
    Some(granted_without_limits(ledger))
}

fn granted_without_limits(ledger: Option<RunLedger>) -> Reserved {
    Reserved {
        decision: LedgerDecision::Grant,
        ledger,
        in_flight: LedgerSpend::default(),
        in_flight_count: 0,
    }
}

/// The run's reservations in flight, by agent.
pub(crate) async fn reservations(
    tx: &impl Tx,
    run_id: &str,
) -> StoreResult<Vec<crate::ledger::LedgerReservation>> {
    const R: &str = "ledger_reservations";
    tx.query(
        "SELECT agent_id, epoch, turns, tokens, cost_nanos, created_at FROM ledger_reservations \
         WHERE run_id = ?1 ORDER BY agent_id",
        &[&run_id],
        |row| {
            Ok(crate::ledger::LedgerReservation {
                agent: row.get(R, 0)?,
                epoch: row.get(R, 1)?,
                estimate: spend_at(row, R, 2)?,
                created_at: row.get(R, 5)?,
            })
        },
    )
    .await
}

/// Frees `agent`'s reservation, if it holds one (its request failed, or its response was
/// charged), waking the run's agents waiting for budget.
pub(crate) async fn release(
    tx: &impl Tx,
    run_id: &str,
    agent: &str,
    wakes: &mut Vec<Wake>,
) -> StoreResult<()> {
    let sql = "DELETE FROM ledger_reservations WHERE run_id = ?1 AND agent_id = ?2";
    free(tx, run_id, sql, &[&run_id, &agent], wakes).await
}

/// Frees the reservations taken under epochs before `epoch` (a new epoch: the run's earlier
/// processes no longer settle them), waking the run's agents waiting for budget.
pub(crate) async fn release_before_epoch(
    tx: &impl Tx,
    run_id: &str,
    epoch: i64,
    wakes: &mut Vec<Wake>,
) -> StoreResult<()> {
    let sql = "DELETE FROM ledger_reservations WHERE run_id = ?1 AND epoch < ?2";
    free(tx, run_id, sql, &[&run_id, &epoch], wakes).await
}

/// Runs `sql`, a DELETE of reservations of `run_id`; when it freed any, wakes the run's agents
/// waiting for budget.
async fn free(
    tx: &impl Tx,
    run_id: &str,
    sql: &str,
    args: &[&dyn super::Arg],
    wakes: &mut Vec<Wake>,
) -> StoreResult<()> {
    if tx.execute(sql, args).await? > 0 {
        wakes.push(Wake {
            run_id: run_id.to_owned(),
            recipient: LEDGER_WAKE.to_owned(),
        });
    }
    Ok(())
}
