//! Budgets: every kind at agent and run level, no request once a total has reached its limit,
//! the stop at the first crossing response, cache prices in cost, the deadline, restore from
//! stored totals, agents racing for the run's last turn, and the reservation a request takes
//! from the run's ledger in the store (freed when it fails, settled by its charge).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use muster_agents::budget::{
    BudgetError, BudgetExceeded, BudgetKind, BudgetLedger, BudgetOverrun, BudgetScope,
    BudgetSettings, Clock, Spend, SpendLimits, cost_of,
};
use muster_agents::model::{ContentBlock, ModelResponse, StopReason, Usage, cost_usd};
use muster_config::settings::{BudgetLimits, Budgets, ModelInfo};
use muster_config::{Origin, Sourced};

use super::harness::{load_settings, sonnet_info};

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

fn response(usage: Usage, cost: Option<f64>) -> ModelResponse {
    ModelResponse {
        id: None,
        model: "m".into(),
        content: vec![ContentBlock::text("ok")],
        stop_reason: StopReason::ToolUse,
        usage,
        cost_usd: cost,
        attempts: 1,
    }
}

fn settings(agent: SpendLimits, run: SpendLimits) -> BudgetSettings {
    BudgetSettings {
        agent,
        run,
        duration_secs: None,
    }
}

/// What a simulated agent loop came to.
#[derive(Debug)]
struct LoopEnd {
    /// Model requests sent.
    sent: usize,
    /// Responses acted on (recorded without a stop).
    acted: usize,
    stop: Option<BudgetError>,
}

/// The runtime's loop as the module documents it: check before each request, record each
/// response, stop at the first failure. Each response costs `cost` and uses `per_turn`.
fn run_agent(
    ledger: &BudgetLedger,
    agent: &str,
    per_turn: Usage,
    cost: Option<f64>,
    max: usize,
) -> LoopEnd {
    let mut end = LoopEnd {
        sent: 0,
        acted: 0,
        stop: None,
    };
    for _ in 0..max {
        if let Err(e) = ledger.check_before_request(agent) {
            end.stop = Some(e.into());
            return end;
        }
        end.sent += 1;
        if let Err(e) = ledger.record(agent, &response(per_turn, cost)) {
            end.stop = Some(e);
            return end;
        }
        end.acted += 1;
    }
    end
}

fn exceeded(end: &LoopEnd) -> &BudgetExceeded {
    match &end.stop {
        Some(BudgetError::Exceeded(e)) => e,
        other => panic!("expected a budget stop, got {other:?}"),
    }
}

#[test]
fn each_budget_kind_at_agent_and_run_level() {
    struct Case {
        name: &'static str,
        agent: SpendLimits,
        run: SpendLimits,
        per_turn: Usage,
        cost: f64,
        /// Requests sent, responses acted on.
        sent: usize,
        acted: usize,
        scope: BudgetScope,
        overrun: BudgetOverrun,
    }
    let limit_turns = |n| SpendLimits {
        turns: Some(n),
        ..SpendLimits::default()
    };
    let limit_tokens = |n| SpendLimits {
        tokens: Some(n),
        ..SpendLimits::default()
    };
    let limit_cost = |n| SpendLimits {
        cost_usd: Some(n),
        ..SpendLimits::default()
    };
    let cases = [
        // Turns: three requests, all acted on, the fourth is never sent.
        Case {
            name: "agent turns",
            agent: limit_turns(3),
            run: SpendLimits::default(),
            per_turn: usage(10, 10),
            cost: 0.01,
            sent: 3,
            acted: 3,
            scope: BudgetScope::Agent("alice".into()),
            overrun: BudgetOverrun::Turns {
                limit: 3,
                reached: 3,
            },
        },
        Case {
            name: "run turns",
            agent: SpendLimits::default(),
            run: limit_turns(2),
            per_turn: usage(10, 10),
            cost: 0.01,
            sent: 2,
            acted: 2,
            scope: BudgetScope::Run,
            overrun: BudgetOverrun::Turns {
                limit: 2,
                reached: 2,
            },
        },
        // Tokens: 100 per turn, limit 250: the third response crosses it and stops the agent.
        Case {
            name: "agent tokens crossed",
            agent: limit_tokens(250),
            run: SpendLimits::default(),
            per_turn: usage(60, 40),
            cost: 0.01,
            sent: 3,
            acted: 2,
            scope: BudgetScope::Agent("alice".into()),
            overrun: BudgetOverrun::Tokens {
                limit: 250,
                reached: 300,
            },
        },
        // Exactly on the limit: that response is acted on, the next request is not sent.
        Case {
            name: "run tokens reached exactly",
            agent: SpendLimits::default(),
            run: limit_tokens(300),
            per_turn: usage(60, 40),
            cost: 0.01,
            sent: 3,
            acted: 3,
            scope: BudgetScope::Run,
            overrun: BudgetOverrun::Tokens {
                limit: 300,
                reached: 300,
            },
        },
        Case {
            name: "agent cost crossed",
            agent: limit_cost(0.25),
            run: SpendLimits::default(),
            per_turn: usage(1, 1),
            cost: 0.1,
            sent: 3,
            acted: 2,
            scope: BudgetScope::Agent("alice".into()),
            overrun: BudgetOverrun::CostUsd {
                limit: 0.25,
                reached: 0.30000000000000004,
            },
        },
        Case {
            name: "run cost reached",
            agent: SpendLimits::default(),
            run: limit_cost(0.5),
            per_turn: usage(1, 1),
            cost: 0.25,
            sent: 2,
            acted: 2,
            scope: BudgetScope::Run,
            overrun: BudgetOverrun::CostUsd {
                limit: 0.5,
                reached: 0.5,
            },
        },
        // A zero budget allows nothing.
        Case {
            name: "zero turns",
            agent: limit_turns(0),
            run: SpendLimits::default(),
            per_turn: usage(1, 1),
            cost: 0.0,
            sent: 0,
            acted: 0,
            scope: BudgetScope::Agent("alice".into()),
            overrun: BudgetOverrun::Turns {
                limit: 0,
                reached: 0,
            },
        },
    ];
    for case in cases {
        let ledger = BudgetLedger::new(settings(case.agent, case.run), None, BTreeMap::new());
        let end = run_agent(&ledger, "alice", case.per_turn, Some(case.cost), 100);
        assert_eq!(
            (end.sent, end.acted),
            (case.sent, case.acted),
            "{}",
            case.name
        );
        let stop = exceeded(&end);
        assert_eq!(stop.scope, case.scope, "{}", case.name);
        assert_eq!(stop.overrun, case.overrun, "{}", case.name);
        // Once stopped, no further request is allowed.
        assert!(
            ledger.check_before_request("alice").is_err(),
            "{}",
            case.name
        );
        assert_eq!(
            ledger.agent_spend("alice").turns,
            case.sent as u64,
            "{}: refused requests are not counted",
            case.name
        );
    }
}

#[test]
fn agent_budget_is_per_agent_run_budget_sums_all_agents() {
    let ledger = BudgetLedger::new(
        settings(
            SpendLimits {
                turns: Some(2),
                ..SpendLimits::default()
            },
            SpendLimits {
                tokens: Some(550),
                ..SpendLimits::default()
            },
        ),
        None,
        BTreeMap::new(),
    );
    // alice uses her two turns; bob still has his own two.
    let alice = run_agent(&ledger, "alice", usage(50, 50), Some(0.0), 10);
    assert_eq!(alice.sent, 2);
    assert_eq!(exceeded(&alice).kind(), BudgetKind::Turns);
    // alice's own limit does not spend the run.
    assert!(ledger.check_run().is_ok());
    let bob = run_agent(&ledger, "bob", usage(50, 50), Some(0.0), 10);
    assert_eq!(bob.sent, 2);
    assert_eq!(ledger.run_spend().tokens, 400);
    assert_eq!(ledger.run_spend().turns, 4);
    // carol's second response takes the run to 600 > 550: she stops there.
    let carol = run_agent(&ledger, "carol", usage(50, 50), Some(0.0), 10);
    assert_eq!((carol.sent, carol.acted), (2, 1));
    let stop = exceeded(&carol);
    assert_eq!(stop.scope, BudgetScope::Run);
    assert!(stop.stops_run());
    assert_eq!(
        ledger.check_run().unwrap_err().setting_key(),
        "budgets.run.tokens"
    );
    // And every other agent is refused its next request.
    let dave = run_agent(&ledger, "dave", usage(1, 1), Some(0.0), 10);
    assert_eq!(dave.sent, 0);
    assert_eq!(exceeded(&dave).scope, BudgetScope::Run);
    assert_eq!(
        exceeded(&dave).to_string(),
        "budget exhausted: the run's token budget (budgets.run.tokens): 600 tokens reached the limit of 550"
    );
}

#[test]
fn no_request_follows_the_crossing_response() {
    // A scripted sequence of responses; the loop must send exactly up to the crossing one.
    let table: [(&[u64], u64, usize); 5] = [
        (&[10, 10, 10, 10], 25, 3),
        (&[30], 25, 1),
        (&[5, 5, 5], 100, 3),
        (&[25, 1], 25, 1),
        (&[0, 0, 26, 1], 25, 3),
    ];
    for (tokens, limit, want_sent) in table {
        let ledger = BudgetLedger::new(
            settings(
                SpendLimits {
                    tokens: Some(limit),
                    ..SpendLimits::default()
                },
                SpendLimits::default(),
            ),
            None,
            BTreeMap::new(),
        );
        let mut sent = 0;
        for t in tokens {
            if ledger.check_before_request("a").is_err() {
                break;
            }
            sent += 1;
            if ledger
                .record("a", &response(usage(*t, 0), Some(0.0)))
                .is_err()
            {
                break;
            }
        }
        assert_eq!(sent, want_sent, "{tokens:?} limit {limit}");
    }
}

#[test]
fn cost_uses_cache_read_and_write_prices() {
    let info = sonnet_info();
    // 1M of each kind: input $3, output $15, cache read $0.30, cache write $3.75.
    let table = [
        (usage(1_000_000, 0), 3.0),
        (usage(0, 1_000_000), 15.0),
        (
            Usage {
                cache_read_tokens: 1_000_000,
                ..Usage::default()
            },
            0.3,
        ),
        (
            Usage {
                cache_write_tokens: 1_000_000,
                ..Usage::default()
            },
            3.75,
        ),
        (
            Usage {
                input_tokens: 1_000,
                output_tokens: 2_000,
                cache_read_tokens: 100_000,
                cache_write_tokens: 10_000,
            },
            0.003 + 0.03 + 0.03 + 0.0375,
        ),
    ];
    for (u, want) in table {
        let cost = cost_of(&u, Some(&info)).unwrap();
        assert!((cost - want).abs() < 1e-9, "{u:?}: {cost} != {want}");
        assert_eq!(Some(cost), cost_usd(&u, &info));
    }
    // A cost budget of $0.10 is crossed by cache reads alone, which a price-less count would
    // miss: 400k cache-read tokens cost $0.12.
    let ledger = BudgetLedger::new(
        settings(
            SpendLimits {
                cost_usd: Some(0.10),
                ..SpendLimits::default()
            },
            SpendLimits::default(),
        ),
        None,
        BTreeMap::new(),
    );
    let cached = Usage {
        input_tokens: 10,
        output_tokens: 10,
        cache_read_tokens: 400_000,
        cache_write_tokens: 0,
    };
    ledger.check_before_request("a").unwrap();
    let err = ledger
        .record_usage(
            "a",
            "claude-sonnet-4-5",
            &cached,
            cost_of(&cached, Some(&info)),
        )
        .unwrap_err();
    let BudgetError::Exceeded(e) = err else {
        panic!("{err:?}")
    };
    assert_eq!(e.kind(), BudgetKind::CostUsd);
    // Tokens count every billed kind.
    assert_eq!(ledger.agent_spend("a").tokens, 400_020);
}

#[test]
fn unpriced_model_under_a_cost_budget_is_a_configuration_error() {
    let with_cost = BudgetLedger::new(
        settings(
            SpendLimits::default(),
            SpendLimits {
                cost_usd: Some(1.0),
                ..SpendLimits::default()
            },
        ),
        None,
        BTreeMap::new(),
    );
    let unpriced = ModelInfo {
        context_window: Some(32_000),
        ..ModelInfo::default()
    };
    let err = with_cost
        .check_priced("local-llama", Some(&unpriced))
        .unwrap_err();
    assert!(err.to_string().contains("`local-llama`"), "{err}");
    assert!(with_cost.check_priced("unknown", None).is_err());
    assert!(
        with_cost
            .check_priced("sonnet", Some(&sonnet_info()))
            .is_ok()
    );
    let err = with_cost
        .record("a", &response(usage(1, 1), None))
        .unwrap_err();
    assert!(matches!(err, BudgetError::UnpricedModel(_)), "{err:?}");

    // Without a cost budget, prices are not needed.
    let without = BudgetLedger::new(
        settings(
            SpendLimits {
                tokens: Some(10_000),
                ..SpendLimits::default()
            },
            SpendLimits::default(),
        ),
        None,
        BTreeMap::new(),
    );
    assert!(without.check_priced("local-llama", Some(&unpriced)).is_ok());
    assert!(without.record("a", &response(usage(1, 1), None)).is_ok());
}

#[derive(Debug)]
struct ManualClock(AtomicI64);

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

#[test]
fn the_deadline_refuses_requests_once_passed() {
    let started = 1_700_000_000_000;
    let settings = BudgetSettings::default().with_max_duration(Some(30));
    let deadline = settings.deadline_ms(started);
    assert_eq!(deadline, Some(started + 30_000));
    let clock = Arc::new(ManualClock(AtomicI64::new(started)));
    let ledger = BudgetLedger::new(settings, deadline, BTreeMap::new()).with_clock(clock.clone());
    for now in [started, started + 29_999] {
        clock.0.store(now, Ordering::SeqCst);
        ledger.check_before_request("lead").unwrap();
        ledger.check_deadline().unwrap();
    }
    clock.0.store(started + 30_000, Ordering::SeqCst);
    let err = ledger.check_before_request("lead").unwrap_err();
    assert_eq!(err.kind(), BudgetKind::Duration);
    assert_eq!(err.scope, BudgetScope::Run);
    assert_eq!(err.setting_key(), "budgets.run.duration_secs");
    assert!(err.to_string().contains("deadline passed"), "{err}");
    assert!(ledger.check_deadline().is_err());
    // A pure check for a given instant, too.
    assert!(ledger.check_deadline_at(started + 29_999).is_ok());
    assert!(ledger.check_deadline_at(started + 30_000).is_err());
}

#[test]
fn budgets_from_settings_with_a_flag_override() {
    let count = |n: u64| Some(Sourced::new(n, Origin::built_in()));
    let budgets = Budgets {
        agent: BudgetLimits {
            turns: count(20),
            tokens: None,
            cost_usd: Some(Sourced::new(2.5, Origin::built_in())),
        },
        run: BudgetLimits {
            turns: None,
            tokens: count(1_000_000),
            cost_usd: None,
        },
        run_duration_secs: count(600),
    };
    let s = BudgetSettings::from_settings(&budgets);
    assert_eq!(
        s.agent,
        SpendLimits {
            turns: Some(20),
            tokens: None,
            cost_usd: Some(2.5)
        }
    );
    assert_eq!(s.run.tokens, Some(1_000_000));
    assert_eq!(s.duration_secs, Some(600));
    assert_eq!(s.with_max_duration(None).duration_secs, Some(600));
    assert_eq!(s.with_max_duration(Some(60)).duration_secs, Some(60));
    assert!(SpendLimits::default().is_unlimited());
    assert!(!s.agent.is_unlimited());
}

#[test]
fn totals_restored_after_a_resume_continue_where_they_stopped() {
    let limits = settings(
        SpendLimits {
            turns: Some(5),
            ..SpendLimits::default()
        },
        SpendLimits {
            cost_usd: Some(1.0),
            ..SpendLimits::default()
        },
    );
    // Before the crash: alice made 3 requests, bob 1.
    let before = BudgetLedger::new(limits, None, BTreeMap::new());
    run_agent(&before, "alice", usage(100, 10), Some(0.2), 3);
    run_agent(&before, "bob", usage(100, 10), Some(0.1), 1);
    let stored = before.agent_spends();

    // The runtime folds its records the documented way: turns from the turn index, tokens and
    // cost from each request's usage and cost.
    let alice = Spend::from_requests(3, vec![(usage(100, 10), Some(0.2)); 3]);
    let bob = Spend::from_requests(1, [(usage(100, 10), Some(0.1))]);
    let folded = BTreeMap::from([("alice".to_string(), alice), ("bob".to_string(), bob)]);
    assert_eq!(folded, stored);

    let after = BudgetLedger::new(limits, None, folded);
    assert_eq!(after.run_spend(), before.run_spend());
    // alice has two turns left of five; the run has $0.30 left, so her second response
    // (run total $1.10) crosses the cost budget.
    let end = run_agent(&after, "alice", usage(100, 10), Some(0.2), 10);
    assert_eq!((end.sent, end.acted), (2, 1));
    let stop = exceeded(&end);
    assert_eq!(stop.scope, BudgetScope::Run);
    assert_eq!(stop.kind(), BudgetKind::CostUsd);
}

#[test]
fn agents_racing_for_the_last_run_turns_never_overshoot() {
    let ledger = Arc::new(BudgetLedger::new(
        settings(
            SpendLimits::default(),
            SpendLimits {
                turns: Some(25),
                ..SpendLimits::default()
            },
        ),
        None,
        BTreeMap::new(),
    ));
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let ledger = Arc::clone(&ledger);
            std::thread::spawn(move || {
                let agent = format!("worker-{i}");
                run_agent(&ledger, &agent, usage(1, 1), Some(0.0), 100).sent
            })
        })
        .collect();
    let sent: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(sent, 25);
    assert_eq!(ledger.run_spend().turns, 25);
}

#[test]
fn budgets_from_a_settings_file_and_the_configs_price_check() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(".muster")).unwrap();
    let settings_file = dir.path().join(".muster/settings.toml");
    std::fs::write(
        &settings_file,
        "[budgets.agent]\nturns = 3\n\n[budgets.run]\ncost_usd = 1.5\nduration_secs = 60\n",
    )
    .unwrap();
    let settings = load_settings(dir.path(), muster_config::CliOverrides::new()).unwrap();
    let budgets = BudgetSettings::from_settings(&settings.budgets);
    assert_eq!(
        budgets,
        BudgetSettings {
            agent: SpendLimits {
                turns: Some(3),
                tokens: None,
                cost_usd: None
            },
            run: SpendLimits {
                turns: None,
                tokens: None,
                cost_usd: Some(1.5)
            },
            duration_secs: Some(60),
        }
    );
    // The catalogue prices the default model, so the ledger accepts it.
    let ledger = BudgetLedger::new(
        budgets.with_max_duration(Some(5)),
        budgets.with_max_duration(Some(5)).deadline_ms(0),
        BTreeMap::new(),
    );
    let model = settings.act.model.value.clone();
    ledger
        .check_priced(&model, settings.models.get(&model))
        .unwrap();
    assert_eq!(ledger.deadline_ms(), Some(5_000));

    // A cost budget with an unpriced model is refused by the configuration itself.
    std::fs::write(
        &settings_file,
        "model = \"local-llama\"\n\n[budgets.run]\ncost_usd = 1.5\n",
    )
    .unwrap();
    let err = load_settings(dir.path(), muster_config::CliOverrides::new()).unwrap_err();
    assert!(err.contains("a cost budget needs model prices"), "{err}");
    assert!(err.contains("local-llama"), "{err}");
}

/// An agent whose model request fails (a 400: not retried) ends with the error and frees the
/// reservation it took from the run's ledger in the store, so the run's other agents do not
/// wait on a request that will never be charged; one whose request succeeds has it settled
/// by the charge in the response's commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_request_frees_its_reservation_and_a_charged_one_settles_it() {
    use muster_agents::runtime::{AgentKind, AgentOutcome};
    use muster_config::PermissionMode;
    use muster_fake_llm::ScriptEntry;
    use muster_mailbox::ledger::LedgerDecision;
    use muster_mailbox::{LedgerLimits, LedgerSpend, MailboxStore};

    use super::harness::{RunHarness, policy, spec, start};

    let harness = RunHarness::setup()
        .start(vec![
            ScriptEntry::http_error("lead", 1, 400),
            ScriptEntry::reply("helper", 1, vec![muster_fake_llm::Block::text("done")]),
        ])
        .await;
    let store = harness.store.clone();
    let run_id = harness.run_id.clone();
    // One turn in flight at a time: a reservation left behind would make everyone wait.
    let limits = LedgerLimits {
        turns: Some(1),
        ..LedgerLimits::default()
    };
    store
        .open_ledger(&run_id, limits, LedgerSpend::default())
        .await
        .unwrap();
    let one_turn = LedgerSpend::of_request(1, None);
    let context = harness.context(policy(""));

    let mut lead = start(
        context.clone(),
        spec("lead", AgentKind::Main, PermissionMode::Default),
        "Go.",
    )
    .await;
    let failed = tokio::time::timeout(super::harness::GUARD, lead.run())
        .await
        .expect("guard timeout");
    assert!(failed.is_err(), "{failed:?}");
    let after_failure = store
        .reserve_budget(&run_id, "probe", 1, one_turn)
        .await
        .unwrap();
    assert_eq!(
        (after_failure.decision, after_failure.in_flight_count),
        (LedgerDecision::Grant, 0),
        "the failed request's reservation was left in flight"
    );
    store.release_reservation(&run_id, "probe").await.unwrap();

    let mut helper = start(
        context,
        spec("helper", AgentKind::Main, PermissionMode::Default),
        "Go.",
    )
    .await;
    let outcome = tokio::time::timeout(super::harness::GUARD, helper.run())
        .await
        .expect("guard timeout")
        .unwrap();
    assert!(
        matches!(outcome, AgentOutcome::Finished { .. }),
        "{outcome:?}"
    );
    // Charged and settled: the turn is spent, nothing is in flight.
    let after_charge = store
        .reserve_budget(&run_id, "probe", 1, one_turn)
        .await
        .unwrap();
    assert_eq!(
        (after_charge.decision, after_charge.in_flight_count),
        (LedgerDecision::Spent, 0)
    );
    assert_eq!(after_charge.ledger.map(|l| l.spent.turns), Some(1));
}
