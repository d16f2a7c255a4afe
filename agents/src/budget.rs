//! Budgets: turns, tokens and cost per agent and per run, and the run's deadline.
//!
//! A [`BudgetLedger`] is built once per run from [`BudgetSettings`] (the `budgets.*` settings,
//! with CLI overrides such as `--max-duration` applied as values), the run's absolute deadline
//! and the totals restored from the store, and is shared by every agent of the run (it is
//! `Send + Sync`; clone the `Arc`). Per-run totals are the sums of all agents' totals.
//!
//! # The two rules
//! - **No request once a total has reached its limit.** Call
//!   [`BudgetLedger::check_before_request`] right before every model request (turns and
//!   compaction requests alike). It fails when the agent's or the run's turns, tokens or cost
//!   have reached their limit (`total >= limit`) or the deadline has passed; when it succeeds the
//!   request is counted as a turn at once, so agents racing for the run's last turn cannot both
//!   get it.
//! - **Stop at the first response that crosses a limit.** Call [`BudgetLedger::record`] (or
//!   [`BudgetLedger::record_usage`]) with every model response. It adds the response's tokens
//!   and cost, and fails when a total is now above its limit (`total > limit`): the agent
//!   stops there, before running the response's tool calls. A response that lands exactly on
//!   a limit is acted on; the next [`BudgetLedger::check_before_request`] stops the agent.
//!
//! What is counted: a **turn** is one model request (the durable `x-muster-turn` counter,
//! compaction requests included); **tokens** are everything billed for a request
//! ([`Usage::total_tokens`]: input + cache read + cache write + output); **cost** is
//! [`cost_usd`] at the catalogue's prices, cache reads and writes at their own prices.
//!
//! # Restoring after a resume
//! The ledger keeps nothing on disk. The runtime must be able to rebuild each agent's
//! [`Spend`] from its records, so for every model request (turns and compaction requests) it
//! records the turn index, the model, the [`Usage`] and the cost in dollars (the `message`
//! record of an assistant message carries `turn`, `model` and `usage`; a compaction request
//! needs a record of its own with the same fields). On resume it builds each agent's spend with
//! [`Spend::from_requests`] (the agent's turn index, and each request's usage and cost; a
//! missing cost is recomputed with [`cost_of`] from the catalogue) and passes the map to
//! [`BudgetLedger::new`]. The deadline is absolute (milliseconds since the Unix epoch): the end
//! of the run's current stretch of running, which the orchestrator stores with the run's launch
//! options and starts again on every resume (time a run spends stopped does not count).
//!
//! # One run, several processes: the store's ledger
//! A team whose teammates run on `muster worker` processes has one [`BudgetLedger`] per
//! process, each seeing only its own agents. The run-wide limits are therefore also enforced
//! from the run's ledger in the store ([`muster_mailbox::ledger`]): the process that starts or
//! resumes the run writes the limits there ([`SpendLimits::ledger_limits`]; a run stored
//! before ledgers existed is seeded with [`Spend::ledger_spend`] of its records), every
//! model response is charged in the commit that records it ([`Spend::charge_of`]), each
//! request first reserves its worst case ([`request_estimate`]) from the ledger, granted, told
//! to wait for a settlement, or refused once spent ([`spent_on`]; the decision is
//! [`muster_mailbox::ledger::decide`]), and the ledger after a charge is checked like
//! [`BudgetLedger::record`] checks its own totals ([`StoredCheck::AfterResponse`]). The
//! bound: the run's spend ends below its limit plus the usage of the last request granted
//! alone, whatever the number of processes (when the estimates are upper bounds).
//!
//! # Cost budgets and prices
//! The configuration already refuses a cost budget when the plan or act model has no prices
//! (`muster_config` validation). Models chosen elsewhere (an agent definition's own model) are
//! checked with [`BudgetLedger::check_priced`]; a response without a cost under a cost budget
//! fails [`BudgetLedger::record`] with [`BudgetError::UnpricedModel`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use muster_config::settings::{BudgetLimits, Budgets, ModelInfo};
use muster_mailbox::ledger::{LedgerLimits, LedgerSpend, RunLedger, nanos_to_usd, usd_to_nanos};
use serde::{Deserialize, Serialize};

use crate::model::{ModelResponse, Usage, cost_usd};

#[cfg(test)]
mod tests;

/// The limits of one scope (an agent, or the whole run). `None`: unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SpendLimits {
    /// Model requests.
    pub turns: Option<u64>,
    /// Tokens billed (input + cache read + cache write + output).
    pub tokens: Option<u64>,
    /// US dollars.
    pub cost_usd: Option<f64>,
}

impl SpendLimits {
    /// The limits of one `budgets.<scope>` table.
    pub fn from_settings(limits: &BudgetLimits) -> SpendLimits {
        SpendLimits {
            turns: limits.turns.as_ref().map(|s| s.value),
            tokens: limits.tokens.as_ref().map(|s| s.value),
            cost_usd: limits.cost_usd.as_ref().map(|s| s.value),
        }
    }

    /// Whether no limit is set.
    pub fn is_unlimited(&self) -> bool {
        self.turns.is_none() && self.tokens.is_none() && self.cost_usd.is_none()
    }

    /// These limits as the store's ledger keeps them (cost in nano-dollars).
    pub fn ledger_limits(&self) -> LedgerLimits {
        LedgerLimits {
            turns: self.turns.map(saturating_i64),
            tokens: self.tokens.map(saturating_i64),
            cost_nanos: self.cost_usd.map(usd_to_nanos),
        }
    }

    /// The limits the store's ledger keeps, back in these units.
    pub fn from_ledger(limits: &LedgerLimits) -> SpendLimits {
        SpendLimits {
            turns: limits.turns.map(non_negative),
            tokens: limits.tokens.map(non_negative),
            cost_usd: limits.cost_nanos.map(nanos_to_usd),
        }
    }
}

fn saturating_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn non_negative(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// Every budget of a run: per agent (each agent separately), per run (all agents together),
/// and the run's duration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct BudgetSettings {
    pub agent: SpendLimits,
    pub run: SpendLimits,
    /// The run's maximum duration in seconds (`budgets.run.duration_secs`, `--max-duration`).
    pub duration_secs: Option<u64>,
}

impl BudgetSettings {
    /// The `budgets.*` settings.
    pub fn from_settings(budgets: &Budgets) -> BudgetSettings {
        BudgetSettings {
            agent: SpendLimits::from_settings(&budgets.agent),
            run: SpendLimits::from_settings(&budgets.run),
            duration_secs: budgets.run_duration_secs.as_ref().map(|s| s.value),
        }
    }

    /// Applies `--max-duration SECS` (a flag wins over the settings when given).
    #[must_use]
    pub fn with_max_duration(mut self, max_duration_secs: Option<u64>) -> BudgetSettings {
        if max_duration_secs.is_some() {
            self.duration_secs = max_duration_secs;
        }
        self
    }

    /// The absolute deadline (ms since the Unix epoch) of a run started at `started_ms`, to be
    /// stored with the run's launch options. Saturates instead of overflowing.
    pub fn deadline_ms(&self, started_ms: i64) -> Option<i64> {
        let secs = self.duration_secs?;
        let millis = i64::try_from(secs.saturating_mul(1000)).unwrap_or(i64::MAX);
        Some(started_ms.saturating_add(millis))
    }
}

/// What one agent (or the run) has used so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Spend {
    /// Model requests sent.
    pub turns: u64,
    /// Tokens billed.
    pub tokens: u64,
    /// US dollars, summed over the requests whose cost was known.
    pub cost_usd: f64,
}

impl Spend {
    /// Adds one response's tokens and cost (not a turn: turns are counted when a request is
    /// allowed, or restored from the turn index).
    pub fn add_usage(&mut self, usage: &Usage, cost_usd: Option<f64>) {
        self.tokens = self.tokens.saturating_add(usage.total_tokens());
        if let Some(cost) = cost_usd.filter(|c| c.is_finite()) {
            self.cost_usd += cost;
        }
    }

    /// An agent's spend rebuilt from its records: `turns` is its durable turn index, and each
    /// item is one model request's usage and cost (turns and compaction requests alike).
    pub fn from_requests(
        turns: u64,
        requests: impl IntoIterator<Item = (Usage, Option<f64>)>,
    ) -> Spend {
        let mut spend = Spend {
            turns,
            ..Spend::default()
        };
        for (usage, cost) in requests {
            spend.add_usage(&usage, cost);
        }
        spend
    }

    /// This spend as the store's ledger keeps it (cost in nano-dollars).
    pub fn ledger_spend(&self) -> LedgerSpend {
        LedgerSpend {
            turns: saturating_i64(self.turns),
            tokens: saturating_i64(self.tokens),
            cost_nanos: usd_to_nanos(self.cost_usd),
        }
    }

    /// What one model response charges the store's ledger: one turn, its tokens, its cost.
    pub fn charge_of(usage: &Usage, cost_usd: Option<f64>) -> LedgerSpend {
        LedgerSpend::of_request(usage.total_tokens(), cost_usd.filter(|c| c.is_finite()))
    }

    /// The spend the store's ledger holds, in these units.
    pub fn from_ledger(spent: &LedgerSpend) -> Spend {
        Spend {
            turns: non_negative(spent.turns),
            tokens: non_negative(spent.tokens),
            cost_usd: nanos_to_usd(spent.cost_nanos),
        }
    }

    /// The sum of two spends.
    #[must_use]
    pub fn plus(&self, other: &Spend) -> Spend {
        Spend {
            turns: self.turns.saturating_add(other.turns),
            tokens: self.tokens.saturating_add(other.tokens),
            cost_usd: self.cost_usd + other.cost_usd,
        }
    }
}

/// Whose budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "scope", content = "agent", rename_all = "snake_case")]
pub enum BudgetScope {
    /// One agent's own budget.
    Agent(String),
    /// The run's budget, summed over all agents.
    Run,
}

impl BudgetScope {
    fn key_part(&self) -> &'static str {
        match self {
            BudgetScope::Agent(_) => "agent",
            BudgetScope::Run => "run",
        }
    }
}

impl fmt::Display for BudgetScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BudgetScope::Agent(agent) => write!(f, "agent `{agent}`"),
            BudgetScope::Run => f.write_str("the run"),
        }
    }
}

/// Which budget, with its limit and the value that reached it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BudgetOverrun {
    Turns {
        limit: u64,
        reached: u64,
    },
    Tokens {
        limit: u64,
        reached: u64,
    },
    CostUsd {
        limit: f64,
        reached: f64,
    },
    /// The run's deadline passed.
    Deadline {
        deadline_ms: i64,
        now_ms: i64,
        duration_secs: Option<u64>,
    },
}

/// The kind of a budget, without values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetKind {
    Turns,
    Tokens,
    CostUsd,
    Duration,
}

impl BudgetOverrun {
    pub fn kind(&self) -> BudgetKind {
        match self {
            BudgetOverrun::Turns { .. } => BudgetKind::Turns,
            BudgetOverrun::Tokens { .. } => BudgetKind::Tokens,
            BudgetOverrun::CostUsd { .. } => BudgetKind::CostUsd,
            BudgetOverrun::Deadline { .. } => BudgetKind::Duration,
        }
    }
}

/// A budget stopped an agent or the run. Its `Display` is the `run_finished.reason`, e.g.
/// "budget exhausted: the run's cost budget (budgets.run.cost_usd): $5.0120 reached the limit
/// of $5.0000". The run ends with exit code 3.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
pub struct BudgetExceeded {
    pub scope: BudgetScope,
    pub overrun: BudgetOverrun,
}

impl BudgetExceeded {
    pub fn kind(&self) -> BudgetKind {
        self.overrun.kind()
    }

    /// The setting that sets the limit (`budgets.agent.turns`, `budgets.run.duration_secs`).
    pub fn setting_key(&self) -> String {
        let leaf = match self.kind() {
            BudgetKind::Turns => "turns",
            BudgetKind::Tokens => "tokens",
            BudgetKind::CostUsd => "cost_usd",
            BudgetKind::Duration => "duration_secs",
        };
        format!("budgets.{}.{leaf}", self.scope.key_part())
    }

    /// Whether the whole run must stop (a run budget or the deadline), not just one agent.
    pub fn stops_run(&self) -> bool {
        self.scope == BudgetScope::Run
    }
}

impl fmt::Display for BudgetExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whose = match &self.scope {
            BudgetScope::Agent(agent) => format!("agent `{agent}`'s"),
            BudgetScope::Run => "the run's".to_owned(),
        };
        let key = self.setting_key();
        match self.overrun {
            BudgetOverrun::Turns { limit, reached } => write!(
                f,
                "budget exhausted: {whose} turn budget ({key}): {reached} model requests reached the limit of {limit}"
            ),
            BudgetOverrun::Tokens { limit, reached } => write!(
                f,
                "budget exhausted: {whose} token budget ({key}): {reached} tokens reached the limit of {limit}"
            ),
            BudgetOverrun::CostUsd { limit, reached } => write!(
                f,
                "budget exhausted: {whose} cost budget ({key}): ${reached:.4} reached the limit of ${limit:.4}"
            ),
            BudgetOverrun::Deadline {
                deadline_ms,
                now_ms,
                duration_secs,
            } => {
                let late = now_ms.saturating_sub(deadline_ms).max(0) as f64 / 1000.0;
                match duration_secs {
                    Some(secs) => write!(
                        f,
                        "budget exhausted: the run's deadline passed ({key} or --max-duration: {secs} s), {late:.1} s ago"
                    ),
                    None => write!(
                        f,
                        "budget exhausted: the run's deadline passed (--max-duration), {late:.1} s ago"
                    ),
                }
            }
        }
    }
}

/// A model without prices under a cost budget (a configuration error, exit code 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a cost budget needs model prices, but model `{model}` has no price_in and price_out; add [models.\"{model}\"] prices or remove the cost budget"
)]
pub struct UnpricedModel {
    pub model: String,
}

/// Why [`BudgetLedger::record`] stops an agent.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BudgetError {
    #[error(transparent)]
    Exceeded(#[from] BudgetExceeded),
    #[error(transparent)]
    UnpricedModel(#[from] UnpricedModel),
}

/// The time, for the deadline. Tests use a clock they move by hand.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// The system's wall clock (the deadline is absolute, so it survives a restart).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }
}

#[derive(Debug, Default)]
struct Totals {
    agents: BTreeMap<String, Spend>,
}

impl Totals {
    fn run(&self) -> Spend {
        self.agents
            .values()
            .fold(Spend::default(), |sum, spend| sum.plus(spend))
    }
}

/// The budgets of one run and what its agents have used; shared by all of them.
#[derive(Debug)]
pub struct BudgetLedger {
    settings: BudgetSettings,
    deadline_ms: Option<i64>,
    clock: Arc<dyn Clock>,
    totals: Mutex<Totals>,
}

impl BudgetLedger {
    /// A ledger with `settings`, the run's absolute `deadline_ms` (from the launch options;
    /// see [`BudgetSettings::deadline_ms`]), and the spends restored from the store per agent
    /// (empty for a new run).
    pub fn new(
        settings: BudgetSettings,
        deadline_ms: Option<i64>,
        restored: BTreeMap<String, Spend>,
    ) -> BudgetLedger {
        BudgetLedger {
            settings,
            deadline_ms,
            clock: Arc::new(SystemClock),
            totals: Mutex::new(Totals { agents: restored }),
        }
    }

    /// The same ledger reading time from `clock`.
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> BudgetLedger {
        self.clock = clock;
        self
    }

    pub fn settings(&self) -> &BudgetSettings {
        &self.settings
    }

    pub fn deadline_ms(&self) -> Option<i64> {
        self.deadline_ms
    }

    fn totals(&self) -> MutexGuard<'_, Totals> {
        // A panic elsewhere while holding the lock leaves consistent numbers: keep going.
        self.totals.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What `agent` has used.
    pub fn agent_spend(&self, agent: &str) -> Spend {
        self.totals().agents.get(agent).copied().unwrap_or_default()
    }

    /// What the run has used (all agents).
    pub fn run_spend(&self) -> Spend {
        self.totals().run()
    }

    /// Every agent's spend (what a resume would restore).
    pub fn agent_spends(&self) -> BTreeMap<String, Spend> {
        self.totals().agents.clone()
    }

    /// Fails when the run's deadline has passed.
    pub fn check_deadline(&self) -> Result<(), BudgetExceeded> {
        self.check_deadline_at(self.clock.now_ms())
    }

    /// Fails when the deadline is at or before `now_ms`.
    pub fn check_deadline_at(&self, now_ms: i64) -> Result<(), BudgetExceeded> {
        match self.deadline_ms {
            Some(deadline_ms) if now_ms >= deadline_ms => Err(BudgetExceeded {
                scope: BudgetScope::Run,
                overrun: BudgetOverrun::Deadline {
                    deadline_ms,
                    now_ms,
                    duration_secs: self.settings.duration_secs,
                },
            }),
            _ => Ok(()),
        }
    }

    /// The time left before the deadline (zero once passed; `None` without a deadline), for
    /// a timeout around waits.
    pub fn time_left(&self) -> Option<Duration> {
        let deadline = self.deadline_ms?;
        let left = deadline.saturating_sub(self.clock.now_ms()).max(0);
        Some(Duration::from_millis(u64::try_from(left).unwrap_or(0)))
    }

    /// Fails when no agent of the run may send another request: the deadline has passed or
    /// one of the run's totals has reached its limit. (A team asks this when it would
    /// otherwise stop to wait for a person: a spent run ends with its budget named.)
    pub fn check_run(&self) -> Result<(), BudgetExceeded> {
        self.check_deadline()?;
        let run = self.totals().run();
        first_over(&self.settings.run, &run, Threshold::Reached, || {
            BudgetScope::Run
        })
    }

    /// Fails when one of `agent`'s or the run's totals is above its limit: the check
    /// [`BudgetLedger::record`] made when the newest response was recorded, for a resume
    /// that finds that response's calls not yet run (the uncut run stopped before them).
    pub fn check_exceeded(&self, agent: &str) -> Result<(), BudgetExceeded> {
        self.first_over_agent_or_run(&self.totals(), agent, Threshold::Exceeded)
    }

    /// The first of `agent`'s limits, then the run's, that `totals` are over at `threshold`.
    fn first_over_agent_or_run(
        &self,
        totals: &Totals,
        agent: &str,
        threshold: Threshold,
    ) -> Result<(), BudgetExceeded> {
        let own = totals.agents.get(agent).copied().unwrap_or_default();
        first_over(&self.settings.agent, &own, threshold, || {
            BudgetScope::Agent(agent.to_owned())
        })?;
        first_over(&self.settings.run, &totals.run(), threshold, || {
            BudgetScope::Run
        })
    }

    /// Call right before sending a model request for `agent` (a turn or a compaction request).
    /// Fails, sending nothing, when the deadline has passed or one of the agent's or the run's
    /// totals has reached its limit; otherwise counts the request as a turn.
    pub fn check_before_request(&self, agent: &str) -> Result<(), BudgetExceeded> {
        self.check_deadline()?;
        let mut totals = self.totals();
        self.first_over_agent_or_run(&totals, agent, Threshold::Reached)?;
        let entry = totals.agents.entry(agent.to_owned()).or_default();
        entry.turns = entry.turns.saturating_add(1);
        Ok(())
    }

    /// Adds a response to `agent`'s totals. Fails when a total is now above its limit (the
    /// agent stops at this response), or when it has no cost under a cost budget.
    pub fn record(&self, agent: &str, response: &ModelResponse) -> Result<(), BudgetError> {
        self.record_usage(agent, &response.model, &response.usage, response.cost_usd)
    }

    /// [`BudgetLedger::record`] from the parts of a response: `cost_usd` is `None` when the
    /// model's prices are unknown (see [`cost_of`]).
    pub fn record_usage(
        &self,
        agent: &str,
        model: &str,
        usage: &Usage,
        cost_usd: Option<f64>,
    ) -> Result<(), BudgetError> {
        let priced = cost_usd.is_some_and(f64::is_finite);
        let mut totals = self.totals();
        totals
            .agents
            .entry(agent.to_owned())
            .or_default()
            .add_usage(usage, cost_usd);
        if !priced && self.has_cost_budget() {
            return Err(UnpricedModel {
                model: model.to_owned(),
            }
            .into());
        }
        self.first_over_agent_or_run(&totals, agent, Threshold::Exceeded)
            .map_err(BudgetError::from)
    }

    /// Whether any cost budget is set.
    pub fn has_cost_budget(&self) -> bool {
        self.settings.agent.cost_usd.is_some() || self.settings.run.cost_usd.is_some()
    }

    /// Refuses a model without prices when a cost budget is set; call when an agent is given
    /// a model the configuration did not check (an agent definition's own model).
    pub fn check_priced(&self, model: &str, info: Option<&ModelInfo>) -> Result<(), UnpricedModel> {
        if self.has_cost_budget() && !info.is_some_and(ModelInfo::has_prices) {
            return Err(UnpricedModel {
                model: model.to_owned(),
            });
        }
        Ok(())
    }
}

/// When the store's ledger is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoredCheck {
    /// Before a model request: fails once a total has reached its limit (`total >= limit`).
    BeforeRequest,
    /// After a response was charged: fails when a total is above its limit (`total > limit`),
    /// so the agent stops at the response that crossed it, before its tool calls.
    AfterResponse,
}

/// Checks the run's ledger as the store holds it (every process's spend) against the limits it
/// holds: a run-scope [`BudgetExceeded`] naming `budgets.run.*`, as the in-process ledger's.
pub fn check_stored(ledger: &RunLedger, when: StoredCheck) -> Result<(), BudgetExceeded> {
    let threshold = match when {
        StoredCheck::BeforeRequest => Threshold::Reached,
        StoredCheck::AfterResponse => Threshold::Exceeded,
    };
    first_over(
        &SpendLimits::from_ledger(&ledger.limits),
        &Spend::from_ledger(&ledger.spent),
        threshold,
        || BudgetScope::Run,
    )
}

/// What a run's ledger in the store says when it decided
/// [`muster_mailbox::ledger::LedgerDecision::Spent`]: the
/// run-scope limit it reached, as [`check_stored`] names it before a request.
pub fn spent_on(ledger: &RunLedger) -> BudgetExceeded {
    match check_stored(ledger, StoredCheck::BeforeRequest) {
        Err(exceeded) => exceeded,
        // Not reached: `decide` says spent when a total in whole units is at its limit, and
        // the conversion to dollars keeps that order. Named as the cost limit if it were.
        Ok(()) => BudgetExceeded {
            scope: BudgetScope::Run,
            overrun: BudgetOverrun::CostUsd {
                limit: ledger.limits.cost_nanos.map_or(0.0, nanos_to_usd),
                reached: nanos_to_usd(ledger.spent.cost_nanos),
            },
        },
    }
}

/// The worst case of one model request, reserved from the run's ledger before it is sent: one
/// turn, `prompt_tokens` (an estimate of everything sent) plus `max_tokens` of output, and
/// their cost with every prompt token at the dearer of the input and cache-write prices (a
/// request may write its whole prompt to the cache). Without prices the cost is zero: a cost
/// budget refuses such a model before the run, and its response stops the agent.
pub fn request_estimate(
    prompt_tokens: u64,
    max_tokens: u64,
    info: Option<&ModelInfo>,
) -> LedgerSpend {
    let as_input = Usage {
        input_tokens: prompt_tokens,
        output_tokens: max_tokens,
        ..Usage::default()
    };
    let as_cache_write = Usage {
        cache_write_tokens: prompt_tokens,
        output_tokens: max_tokens,
        ..Usage::default()
    };
    let cost = [as_input, as_cache_write]
        .iter()
        .filter_map(|usage| cost_of(usage, info))
        .filter(|cost| cost.is_finite())
        .fold(None, |worst: Option<f64>, cost| {
            Some(worst.map_or(cost, |w| w.max(cost)))
        });
    LedgerSpend::of_request(prompt_tokens.saturating_add(max_tokens), cost)
}

/// The cost of `usage` on a model of the catalogue (`None`: unknown model or no prices).
pub fn cost_of(usage: &Usage, info: Option<&ModelInfo>) -> Option<f64> {
    info.and_then(|info| cost_usd(usage, info))
}

/// When a total counts as over its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Threshold {
    /// `total >= limit`: no further request.
    Reached,
    /// `total > limit`: the response that got there stops the agent.
    Exceeded,
}

impl Threshold {
    fn count_over(self, value: u64, limit: u64) -> bool {
        match self {
            Threshold::Reached => value >= limit,
            Threshold::Exceeded => value > limit,
        }
    }

    fn cost_over(self, value: f64, limit: f64) -> bool {
        match self {
            Threshold::Reached => value >= limit,
            Threshold::Exceeded => value > limit,
        }
    }
}

/// The first limit of `limits` that `spend` is over, as `threshold` says.
fn first_over(
    limits: &SpendLimits,
    spend: &Spend,
    threshold: Threshold,
    scope: impl FnOnce() -> BudgetScope,
) -> Result<(), BudgetExceeded> {
    let overrun = if let Some(limit) = limits
        .turns
        .filter(|l| threshold.count_over(spend.turns, *l))
    {
        Some(BudgetOverrun::Turns {
            limit,
            reached: spend.turns,
        })
    } else if let Some(limit) = limits
        .tokens
        .filter(|l| threshold.count_over(spend.tokens, *l))
    {
        Some(BudgetOverrun::Tokens {
            limit,
            reached: spend.tokens,
        })
    } else {
        limits
            .cost_usd
            .filter(|l| threshold.cost_over(spend.cost_usd, *l))
            .map(|limit| BudgetOverrun::CostUsd {
                limit,
                reached: spend.cost_usd,
            })
    };
    match overrun {
        Some(overrun) => Err(BudgetExceeded {
            scope: scope(),
            overrun,
        }),
        None => Ok(()),
    }
}
