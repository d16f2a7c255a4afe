//! Live runs on PostgreSQL: the run's lock is a session advisory lock on a dedicated
//! connection, and another store (another process, another machine) wakes the run with
//! NOTIFY after its commit. Two store instances have two pools and share nothing in process,
//! as two processes would.

use muster_mailbox::*;

use super::common::*;

async fn two_stores() -> (
    Place,
    std::sync::Arc<dyn MailboxStore>,
    std::sync::Arc<dyn MailboxStore>,
) {
    let place = Place::new(Backend::Postgres).await;
    let (a, b) = (place.open().await, place.open().await);
    (place, a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_held_live_by_one_store_until_it_lets_go() {
    let (_place, a, b) = two_stores().await;
    run_with(&a, RUN, &["alice"]).await;
    assert_eq!(b.is_held_live(RUN).await.unwrap(), Some(false));
    let held = a
        .hold_live(RUN)
        .await
        .unwrap()
        .expect("Postgres holds runs live");
    assert_eq!(b.is_held_live(RUN).await.unwrap(), Some(true));
    assert_eq!(
        a.is_held_live(RUN).await.unwrap(),
        Some(true),
        "seen from the holder too"
    );
    let refused = b
        .hold_live(RUN)
        .await
        .err()
        .expect("a second hold is refused");
    assert!(
        matches!(refused, StoreError::RunLocked { .. }),
        "{refused:?}"
    );
    assert!(
        refused.to_string().contains("is live in another process"),
        "{refused}"
    );
    drop(held);
    // The server releases the lock when the connection closes; wait for that event.
    let released = async {
        loop {
            if b.is_held_live(RUN).await.unwrap() == Some(false) {
                break;
            }
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(GUARD, released)
        .await
        .expect("released");
    let again = b.hold_live(RUN).await.unwrap();
    assert!(again.is_some(), "another store takes it over");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_store_announces_a_decision_and_the_waiting_run_wakes() {
    let (_place, live, other) = two_stores().await;
    let epoch = run_with(&live, RUN, &["alice"]).await;
    live.send(NewMessage {
        run_id: RUN.into(),
        sender: "alice".into(),
        recipient: "lead".into(),
        body: MessageBody::PlanApprovalRequest {
            request_id: "plan-alice-1".into(),
            plan_file: "p.md".into(),
            plan: "plan".into(),
            responder: "human".into(),
            revision: 1,
            previous_request_id: None,
            allowed_prompts: Vec::new(),
        },
        idempotency_key: None,
    })
    .await
    .unwrap();
    let _held = live.hold_live(RUN).await.unwrap().unwrap();
    let waiting = tokio::spawn({
        let live = live.clone();
        async move {
            live.receive(
                RUN,
                "alice",
                epoch,
                MessageFilter::RequestId("plan-alice-1".into()),
            )
            .await
        }
    });
    let decided = decide::decide(
        other.as_ref(),
        super::child::plan_response(true),
        decide::Waiter::LiveRun {
            runs_dir: std::path::Path::new("/nonexistent/runs"),
        },
    )
    .await
    .unwrap();
    assert_eq!(
        decided.wake.unwrap().unwrap(),
        live::PokeOutcome::Woken,
        "announced through the server, not a socket (there is none)"
    );
    let answer = tokio::time::timeout(GUARD, waiting)
        .await
        .expect("woken by NOTIFY")
        .unwrap()
        .unwrap();
    assert_eq!(answer.kind, "plan_approval_response");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_announcement_to_a_run_nobody_holds_says_so() {
    let (_place, a, b) = two_stores().await;
    run_with(&a, RUN, &["alice"]).await;
    assert_eq!(b.announce(RUN, "alice").await.unwrap(), Some(false));
    let file = Place::new(Backend::Sqlite).await.open().await;
    assert_eq!(
        file.announce(RUN, "alice").await.unwrap(),
        None,
        "SQLite uses the socket"
    );
}

/// An agent waiting for budget on one machine (a worker's store, listening on the run) is
/// woken when another machine's commit settles a reservation: the settlement's wake-up is
/// announced under the ledger's name and the listener accepts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settled_reservation_wakes_the_agents_waiting_for_budget_on_another_store() {
    let place = Place::new(Backend::Postgres).await;
    let Location::Postgres(url) = place.location() else {
        unreachable!("a PostgreSQL place")
    };
    let lead: std::sync::Arc<dyn MailboxStore> = std::sync::Arc::new(
        PostgresStore::open(&url, StoreOptions::default())
            .await
            .unwrap()
            .announcing(),
    );
    let worker = place.open().await;
    let epoch = run_with(&lead, RUN, &["alice"]).await;
    let limits = LedgerLimits {
        cost_nanos: Some(100),
        ..LedgerLimits::default()
    };
    lead.open_ledger(RUN, limits, LedgerSpend::default())
        .await
        .unwrap();
    let estimate = LedgerSpend {
        turns: 1,
        tokens: 0,
        cost_nanos: 80,
    };
    let granted = lead
        .reserve_budget(RUN, "lead", epoch, estimate)
        .await
        .unwrap();
    assert_eq!(granted.decision, ledger::LedgerDecision::Grant);
    let waiting = worker
        .reserve_budget(RUN, "alice", epoch, estimate)
        .await
        .unwrap();
    assert_eq!(waiting.decision, ledger::LedgerDecision::Wait);

    let _listening = worker.listen_run(RUN).await.unwrap();
    let woken = worker.woken(RUN, ledger::LEDGER_WAKE);
    let settled = woken.notified();
    tokio::pin!(settled);
    settled.as_mut().enable();
    lead.commit_turn(CommitTurn {
        run_id: RUN.into(),
        agent: "lead".into(),
        charge: Some(LedgerSpend {
            cost_nanos: 20,
            ..estimate
        }),
        ..CommitTurn::default()
    })
    .await
    .unwrap();
    tokio::time::timeout(GUARD, settled)
        .await
        .expect("woken by the settlement's NOTIFY");
    let again = worker
        .reserve_budget(RUN, "alice", epoch, estimate)
        .await
        .unwrap();
    assert_eq!(again.decision, ledger::LedgerDecision::Grant);
}
