//! The run's budget ledger, held in the store so that every process of a run — the lead's,
//! and each `muster worker` running a placed teammate — counts against one total: a row per
//! run with the run-wide limits (`budgets.run.*`, written by the process that starts or
//! resumes the run) and what the run has spent. Each model response's spend is charged in
//! the same transaction that records the response ([`crate::CommitTurn::charge`]), so after
//! a kill -9 the ledger and the records agree. Cost is kept in whole nano-dollars, so the
//! sums are exact on both backends.

use serde::{Deserialize, Serialize};

/// Nano-dollars in one US dollar.
pub const NANOS_PER_USD: f64 = 1e9;

/// Dollars as whole nano-dollars (rounded; a non-finite or negative cost counts as zero).
pub fn usd_to_nanos(usd: f64) -> i64 {
    if !usd.is_finite() || usd <= 0.0 {
        return 0;
    }
    let nanos = (usd * NANOS_PER_USD).round();
    if nanos >= i64::MAX as f64 {
        i64::MAX
    } else {
        nanos as i64
    }
}

/// Whole nano-dollars as dollars.
pub fn nanos_to_usd(nanos: i64) -> f64 {
    nanos as f64 / NANOS_PER_USD
}

/// A spend: model requests, tokens billed and cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerSpend {
    pub turns: i64,
    pub tokens: i64,
    /// Nano-dollars (see [`usd_to_nanos`]).
    pub cost_nanos: i64,
}

impl LedgerSpend {
    /// One model request's spend: one turn, its tokens and its cost in dollars (`None`:
    /// unpriced, nothing charged for cost).
    pub fn of_request(tokens: u64, cost_usd: Option<f64>) -> LedgerSpend {
        LedgerSpend {
            turns: 1,
            tokens: i64::try_from(tokens).unwrap_or(i64::MAX),
            cost_nanos: cost_usd.map_or(0, usd_to_nanos),
        }
    }

    /// The cost in dollars.
    pub fn cost_usd(&self) -> f64 {
        nanos_to_usd(self.cost_nanos)
    }
}

/// The run-wide limits (`None`: unlimited).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerLimits {
    pub turns: Option<i64>,
    pub tokens: Option<i64>,
    /// Nano-dollars.
    pub cost_nanos: Option<i64>,
}

impl LedgerLimits {
    pub fn is_unlimited(&self) -> bool {
        self.turns.is_none() && self.tokens.is_none() && self.cost_nanos.is_none()
    }
}

/// A run's ledger as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunLedger {
    pub run_id: String,
    pub limits: LedgerLimits,
    pub spent: LedgerSpend,
}

/// The recipient name whose wake-up tells an agent waiting for budget that a reservation was
/// settled or freed (in-process [`crate::store::MailboxStore::woken`], and on PostgreSQL the
/// run's wake channel with this payload).
pub const LEDGER_WAKE: &str = "@ledger";

/// Whether an agent may send a model request, given the run's ledger and the reservations
/// of the requests in flight ([`decide`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LedgerDecision {
    /// Send it: the estimate is now reserved until the response's commit settles it.
    Grant,
    /// Not now: the estimate does not fit beside the reservations in flight; look again
    /// when one is settled or freed (a wake of [`LEDGER_WAKE`]).
    Wait,
    /// No further request: a run-wide limit is reached by what the run has spent.
    Spent,
}

pub use crate::rules::ledger::decide;

/// What [`crate::store::MailboxStore::reserve_budget`] decided, with what it read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reserved {
    pub decision: LedgerDecision,
    /// The run's ledger as the decision read it (`None`: granted, the run having none, or
    /// this store having found it without a limit in this epoch already, so it did not look).
    pub ledger: Option<RunLedger>,
    /// The other agents' reservations in flight, summed, and how many there are.
    pub in_flight: LedgerSpend,
    pub in_flight_count: i64,
}

/// One agent's reservation in flight: the worst case of the model request it was granted,
/// held until the response's commit settles it (see [`crate::store::MailboxStore::reserve_budget`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerReservation {
    pub agent: String,
    /// The epoch of the process that took it (a new epoch frees older ones).
    pub epoch: i64,
    pub estimate: LedgerSpend,
    /// Milliseconds since the Unix epoch.
    pub created_at: i64,
}
