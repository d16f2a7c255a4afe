use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};

use super::*;

#[derive(Debug, Default)]
struct ManualClock(AtomicI64);

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

fn ledger(agent: SpendLimits, run: SpendLimits) -> BudgetLedger {
    BudgetLedger::new(
        BudgetSettings {
            agent,
            run,
            duration_secs: None,
        },
        None,
        BTreeMap::new(),
    )
}

#[test]
fn threshold_reached_and_exceeded() {
    let table = [
        (Threshold::Reached, 9, 10, false),
        (Threshold::Reached, 10, 10, true),
        (Threshold::Reached, 11, 10, true),
        (Threshold::Exceeded, 10, 10, false),
        (Threshold::Exceeded, 11, 10, true),
        (Threshold::Reached, 0, 0, true),
        (Threshold::Exceeded, u64::MAX, u64::MAX - 1, true),
    ];
    for (threshold, value, limit, over) in table {
        assert_eq!(
            threshold.count_over(value, limit),
            over,
            "{threshold:?} {value} {limit}"
        );
    }
}

#[test]
fn first_over_names_turns_before_tokens_before_cost() {
    let limits = SpendLimits {
        turns: Some(1),
        tokens: Some(1),
        cost_usd: Some(0.1),
    };
    let spend = Spend {
        turns: 5,
        tokens: 5,
        cost_usd: 5.0,
    };
    let err = first_over(&limits, &spend, Threshold::Reached, || BudgetScope::Run).unwrap_err();
    assert_eq!(err.kind(), BudgetKind::Turns);
    let no_turns = SpendLimits {
        turns: None,
        ..limits
    };
    let err = first_over(&no_turns, &spend, Threshold::Reached, || BudgetScope::Run).unwrap_err();
    assert_eq!(err.kind(), BudgetKind::Tokens);
}

#[test]
fn unlimited_never_stops() {
    let ledger = ledger(SpendLimits::default(), SpendLimits::default());
    for _ in 0..1000 {
        ledger.check_before_request("a").unwrap();
        ledger
            .record_usage("a", "m", &usage(1_000_000, 1_000_000), None)
            .unwrap();
    }
    assert_eq!(ledger.agent_spend("a").turns, 1000);
}

#[test]
fn reason_names_scope_kind_key_limit_and_value() {
    let table = [
        (
            BudgetExceeded {
                scope: BudgetScope::Agent("alice".into()),
                overrun: BudgetOverrun::Turns {
                    limit: 3,
                    reached: 3,
                },
            },
            "budget exhausted: agent `alice`'s turn budget (budgets.agent.turns): 3 model requests reached the limit of 3",
        ),
        (
            BudgetExceeded {
                scope: BudgetScope::Run,
                overrun: BudgetOverrun::Tokens {
                    limit: 1000,
                    reached: 1200,
                },
            },
            "budget exhausted: the run's token budget (budgets.run.tokens): 1200 tokens reached the limit of 1000",
        ),
        (
            BudgetExceeded {
                scope: BudgetScope::Run,
                overrun: BudgetOverrun::CostUsd {
                    limit: 5.0,
                    reached: 5.0123,
                },
            },
            "budget exhausted: the run's cost budget (budgets.run.cost_usd): $5.0123 reached the limit of $5.0000",
        ),
        (
            BudgetExceeded {
                scope: BudgetScope::Run,
                overrun: BudgetOverrun::Deadline {
                    deadline_ms: 10_000,
                    now_ms: 12_500,
                    duration_secs: Some(60),
                },
            },
            "budget exhausted: the run's deadline passed (budgets.run.duration_secs or --max-duration: 60 s), 2.5 s ago",
        ),
    ];
    for (err, want) in table {
        assert_eq!(err.to_string(), want);
    }
}

#[test]
fn deadline_from_settings_and_flag() {
    let table = [
        (None, None, 1000, None),
        (Some(60), None, 1000, Some(61_000)),
        (Some(60), Some(5), 1000, Some(6_000)),
        (None, Some(5), 1000, Some(6_000)),
        (Some(u64::MAX), None, 1000, Some(i64::MAX)),
    ];
    for (settings_secs, flag, started, want) in table {
        let settings = BudgetSettings {
            duration_secs: settings_secs,
            ..BudgetSettings::default()
        }
        .with_max_duration(flag);
        assert_eq!(
            settings.deadline_ms(started),
            want,
            "{settings_secs:?} {flag:?}"
        );
    }
}

#[test]
fn deadline_is_checked_before_each_request() {
    let clock = Arc::new(ManualClock(AtomicI64::new(1_000)));
    let ledger = BudgetLedger::new(BudgetSettings::default(), Some(2_000), BTreeMap::new())
        .with_clock(clock.clone());
    ledger.check_before_request("a").unwrap();
    assert_eq!(ledger.time_left(), Some(Duration::from_millis(1_000)));
    clock.0.store(2_000, Ordering::SeqCst);
    let err = ledger.check_before_request("a").unwrap_err();
    assert_eq!(err.kind(), BudgetKind::Duration);
    assert!(err.stops_run());
    assert_eq!(ledger.time_left(), Some(Duration::ZERO));
    // The refused request is not counted.
    assert_eq!(ledger.agent_spend("a").turns, 1);
}

#[test]
fn nan_and_infinite_costs_are_not_added() {
    let mut spend = Spend::default();
    spend.add_usage(&usage(1, 1), Some(f64::NAN));
    spend.add_usage(&usage(1, 1), Some(f64::INFINITY));
    spend.add_usage(&usage(1, 1), Some(0.5));
    assert_eq!(spend.cost_usd, 0.5);
    assert_eq!(spend.tokens, 6);
}

/// The store's ledger checked before a request (reached) and after a charge (exceeded), each
/// run limit in turn, with the setting the stop names.
#[test]
fn the_stored_ledger_stops_at_the_run_limits() {
    let stored = |limits: SpendLimits, spent: Spend| RunLedger {
        run_id: "r1".into(),
        limits: limits.ledger_limits(),
        spent: spent.ledger_spend(),
    };
    let cost = |usd| SpendLimits {
        cost_usd: Some(usd),
        ..SpendLimits::default()
    };
    let tokens = |n| SpendLimits {
        tokens: Some(n),
        ..SpendLimits::default()
    };
    let turns = |n| SpendLimits {
        turns: Some(n),
        ..SpendLimits::default()
    };
    let spent = |turns, tokens, cost_usd| Spend {
        turns,
        tokens,
        cost_usd,
    };
    // (limits, spent, when, the setting that stops, or none)
    let table = [
        (
            cost(1.0),
            spent(3, 10, 0.999_999),
            StoredCheck::BeforeRequest,
            None,
        ),
        (
            cost(1.0),
            spent(3, 10, 1.0),
            StoredCheck::BeforeRequest,
            Some("budgets.run.cost_usd"),
        ),
        (
            cost(1.0),
            spent(3, 10, 1.0),
            StoredCheck::AfterResponse,
            None,
        ),
        (
            cost(1.0),
            spent(3, 10, 1.2),
            StoredCheck::AfterResponse,
            Some("budgets.run.cost_usd"),
        ),
        (
            tokens(100),
            spent(3, 99, 9.0),
            StoredCheck::BeforeRequest,
            None,
        ),
        (
            tokens(100),
            spent(3, 100, 9.0),
            StoredCheck::BeforeRequest,
            Some("budgets.run.tokens"),
        ),
        (
            tokens(100),
            spent(3, 101, 9.0),
            StoredCheck::AfterResponse,
            Some("budgets.run.tokens"),
        ),
        (
            turns(4),
            spent(4, 0, 0.0),
            StoredCheck::BeforeRequest,
            Some("budgets.run.turns"),
        ),
        (turns(4), spent(4, 0, 0.0), StoredCheck::AfterResponse, None),
        (
            SpendLimits::default(),
            spent(1000, 1000, 1000.0),
            StoredCheck::BeforeRequest,
            None,
        ),
    ];
    for (limits, spend, when, stops) in table {
        let result = check_stored(&stored(limits, spend), when);
        match stops {
            None => assert_eq!(result, Ok(()), "{limits:?} {spend:?} {when:?}"),
            Some(key) => {
                let exceeded = result.expect_err("over the limit");
                assert_eq!(exceeded.scope, BudgetScope::Run);
                assert_eq!(exceeded.setting_key(), key, "{limits:?} {spend:?} {when:?}");
            }
        }
    }
    // Cost survives the trip through nano-dollars.
    let back = Spend::from_ledger(&spent(2, 5, 0.123_456_789).ledger_spend());
    assert!((back.cost_usd - 0.123_456_789).abs() < 1e-12, "{back:?}");
}

/// A request's worst case: its prompt and all its output, the prompt at the dearer of the
/// input and cache-write prices; no cost without prices; a spent ledger names its limit.
#[test]
fn a_requests_estimate_is_its_worst_case() {
    let priced = ModelInfo {
        price_in: Some(3.0),
        price_out: Some(15.0),
        price_cache_write: Some(3.75),
        ..ModelInfo::default()
    };
    let estimate = request_estimate(1_000_000, 100_000, Some(&priced));
    assert_eq!((estimate.turns, estimate.tokens), (1, 1_100_000));
    // 1M prompt tokens written to the cache ($3.75) + 100k output ($1.50).
    assert_eq!(estimate.cost_nanos, usd_to_nanos(5.25));
    let cheap_writes = ModelInfo {
        price_cache_write: Some(1.0),
        ..priced.clone()
    };
    let estimate = request_estimate(1_000_000, 0, Some(&cheap_writes));
    assert_eq!(
        estimate.cost_nanos,
        usd_to_nanos(3.0),
        "input dearer than writes"
    );
    assert_eq!(request_estimate(10, 5, None).cost_nanos, 0);
    assert_eq!(
        request_estimate(10, 5, Some(&ModelInfo::default())).cost_nanos,
        0
    );

    let spent = RunLedger {
        run_id: "r".into(),
        limits: LedgerLimits {
            cost_nanos: Some(usd_to_nanos(1.0)),
            ..LedgerLimits::default()
        },
        spent: LedgerSpend {
            turns: 3,
            tokens: 10,
            cost_nanos: usd_to_nanos(1.0),
        },
    };
    let exceeded = spent_on(&spent);
    assert_eq!(exceeded.scope, BudgetScope::Run);
    assert!(
        exceeded.to_string().contains("budgets.run.cost_usd"),
        "{exceeded}"
    );
}
