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

/// A process that holds a run live and found it without run-wide limits in its epoch grants
/// that epoch's later requests without asking the server (`ledger: None`: it did not look),
/// while a store that does not hold the run looks every time. When the holder's connection
/// is cut and another process takes the run over (its lock, a new epoch, limits written), the
/// old process's requests of its old epoch look again and the limits hold them back: the skip
/// fails closed. Before, the old process went on granting them from what it had learnt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_whose_hold_on_the_run_ended_looks_at_the_ledger_again() {
    use ledger::LedgerDecision::{Grant, Wait};
    let schema = tokio::task::spawn_blocking(super::pg::Schema::new)
        .await
        .unwrap();
    let url = schema.url();
    let open = || async {
        std::sync::Arc::new(
            PostgresStore::open(&url, StoreOptions::default())
                .await
                .unwrap(),
        ) as std::sync::Arc<dyn MailboxStore>
    };
    let (stale, other) = (open().await, open().await);
    let epoch = run_with(&stale, RUN, &["alice"]).await;
    let hold = stale.hold_live(RUN).await.unwrap().unwrap();
    stale
        .open_ledger(RUN, LedgerLimits::default(), LedgerSpend::default())
        .await
        .unwrap();
    let estimate = LedgerSpend {
        turns: 1,
        tokens: 0,
        cost_nanos: 80,
    };
    let first = stale
        .reserve_budget(RUN, "alice", epoch, estimate)
        .await
        .unwrap();
    assert_eq!(first.decision, Grant);
    assert!(first.ledger.is_some(), "the first look reads the ledger");
    let second = stale
        .reserve_budget(RUN, "alice", epoch, estimate)
        .await
        .unwrap();
    assert_eq!(second.decision, Grant);
    assert_eq!(second.ledger, None, "the holder skips the look");
    for _ in 0..2 {
        let looked = other
            .reserve_budget(RUN, "alice", epoch, estimate)
            .await
            .unwrap();
        assert!(looked.ledger.is_some(), "a store not holding the run looks");
    }

    // Another process queues for the run's lock; the holder's connection is cut (a restart,
    // a network cut): the server hands the lock to the queued process.
    let name = postgres::live_application_name(&schema.name, RUN);
    let connect = || async {
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
    };
    let (taker, admin) = (connect().await, connect().await);
    let key: i64 = admin
        .query_one(
            "SELECT (l.classid::bigint << 32) | l.objid::bigint FROM pg_locks l \
             JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE l.locktype = 'advisory' AND a.application_name = $1",
            &[&name],
        )
        .await
        .unwrap()
        .get(0);
    let taken = tokio::spawn(async move {
        taker
            .execute("SELECT pg_advisory_lock($1)", &[&key])
            .await
            .unwrap();
        taker
    });
    let queued = async {
        let waiting = "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
                       AND (classid::bigint << 32) | objid::bigint = $1";
        while admin
            .query_one(waiting, &[&key])
            .await
            .unwrap()
            .get::<_, i64>(0)
            == 0
        {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(GUARD, queued).await.expect("queued");
    let cut = admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            &[&name],
        )
        .await
        .unwrap();
    assert_eq!(cut.len(), 1, "one live connection named {name:?}");
    let _taker = tokio::time::timeout(GUARD, taken)
        .await
        .expect("the lock handed over")
        .unwrap();
    let lost = tokio::time::timeout(GUARD, hold.lost())
        .await
        .expect("the old holder finds its hold lost");
    assert!(lost.to_string().contains("another process"), "{lost}");

    // The new owner opens its epoch and writes limits; one of its agents has a request in
    // flight.
    let resumed = other.open_epoch(RUN).await.unwrap();
    let limits = LedgerLimits {
        cost_nanos: Some(100),
        ..LedgerLimits::default()
    };
    other
        .open_ledger(RUN, limits, LedgerSpend::default())
        .await
        .unwrap();
    let granted = other
        .reserve_budget(RUN, "lead", resumed, estimate)
        .await
        .unwrap();
    assert_eq!(granted.decision, Grant);
    // The old process, still asking under its old epoch, looks and is held back.
    let stale_request = stale
        .reserve_budget(RUN, "alice", epoch, estimate)
        .await
        .unwrap();
    assert_eq!(stale_request.decision, Wait, "{stale_request:?}");
    assert_eq!(stale_request.ledger.map(|l| l.limits), Some(limits));
}
