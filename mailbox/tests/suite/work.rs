//! Work items for workers (`muster_mailbox::work`): claims are exclusive and raise the
//! fencing token, heartbeats keep a lease, an expired lease is claimed again, and every
//! operation of a holder whose token is stale — its own queue operations and, through a fenced
//! store, every write of the run it was running — is refused.

use std::collections::HashSet;
use std::time::Duration;

use muster_mailbox::*;
use serde_json::json;

use super::common::*;

on_both_backends!(
    claims_are_exclusive_in_queue_order_and_each_raises_the_token,
    a_heartbeat_keeps_the_lease_and_an_expired_one_is_claimed_again_under_a_new_token,
    a_stale_token_is_refused_for_finish_release_and_heartbeat,
    a_fenced_store_refuses_every_write_once_the_item_is_taken_over,
    enqueue_is_idempotent_and_watches_wake_on_committed_changes,
    workers_are_listed_with_their_items_and_last_heartbeat,
    a_fenced_tool_start_records_its_process_group_under_the_item_holder,
    a_fence_holder_acks_mail_a_newer_epoch_voided_and_an_epoch_owner_does_not,
    a_worker_that_lost_its_lease_can_neither_read_nor_charge_the_run_ledger,
    a_stopped_item_fences_its_holder_and_reopens_for_the_next_claim,
);

const LONG: Duration = Duration::from_secs(600);
const GUARD: Duration = Duration::from_secs(20);

fn items(queue: &str, ids: &[&str]) -> Vec<NewWorkItem> {
    ids.iter()
        .map(|id| NewWorkItem {
            id: format!("{queue}#{id}"),
            queue: queue.into(),
            payload: json!({"line": id}),
        })
        .collect()
}

fn worker(name: &str) -> WorkerInfo {
    WorkerInfo {
        name: name.into(),
        host: "host-a".into(),
        slots: 2,
        pid: 42,
    }
}

fn is_fenced(error: &StoreError, current: i64) -> bool {
    matches!(error, StoreError::Fenced { current: c, .. } if *c == current)
}

async fn claims_are_exclusive_in_queue_order_and_each_raises_the_token(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    store
        .enqueue_work(items("q", &["a", "b", "c", "d", "e", "f"]))
        .await
        .unwrap();
    store.enqueue_work(items("other", &["x"])).await.unwrap();
    // Two handles (two connections on Postgres) claiming at once.
    let second = place.open().await;
    let mut claims = Vec::new();
    for _ in 0..4 {
        let (a, b) = tokio::join!(
            store.claim_work(Some("q"), "w1", LONG),
            second.claim_work(Some("q"), "w2", LONG)
        );
        claims.extend([a.unwrap(), b.unwrap()]);
    }
    let claimed: Vec<WorkItem> = claims.into_iter().flatten().collect();
    let ids: HashSet<&str> = claimed.iter().map(|item| item.id.as_str()).collect();
    assert_eq!(claimed.len(), 6, "every item once, then none: {claimed:#?}");
    assert_eq!(ids.len(), 6);
    assert!(
        ids.iter().all(|id| id.starts_with("q#")),
        "only queue q: {ids:?}"
    );
    for item in &claimed {
        assert_eq!(
            (item.state, item.token, item.attempts),
            (WorkState::Leased, 1, 1)
        );
        assert!(item.lease_deadline.is_some());
    }
    // One worker alone takes them in queue order.
    let place = Place::new(backend).await;
    let store = place.open().await;
    store.enqueue_work(items("q", &["a", "b"])).await.unwrap();
    let first = store.claim_work(None, "w1", LONG).await.unwrap().unwrap();
    let next = store.claim_work(None, "w1", LONG).await.unwrap().unwrap();
    assert_eq!((first.id.as_str(), next.id.as_str()), ("q#a", "q#b"));
    assert_eq!(first.payload, json!({"line": "a"}));
    assert!(store.claim_work(None, "w1", LONG).await.unwrap().is_none());
}

async fn a_heartbeat_keeps_the_lease_and_an_expired_one_is_claimed_again_under_a_new_token(
    backend: Backend,
) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    store.enqueue_work(items("q", &["a", "b"])).await.unwrap();
    let held = store.claim_work(None, "w1", LONG).await.unwrap().unwrap();
    let beat = store
        .heartbeat(&worker("w1"), &[held.fence()], LONG)
        .await
        .unwrap();
    assert_eq!((beat.kept, beat.lost), (vec![held.fence()], vec![]));
    // A short lease: the store says when it lapses, and the deadline timer fires then.
    let short = store
        .claim_work(None, "w1", Duration::from_millis(300))
        .await
        .unwrap()
        .unwrap();
    let expiry = store.next_lease_expiry(Some("q")).await.unwrap().unwrap();
    assert!(expiry <= Duration::from_millis(300), "{expiry:?}");
    assert!(
        store.claim_work(None, "w2", LONG).await.unwrap().is_none(),
        "nothing is free before the deadline"
    );
    tokio::time::sleep(expiry + Duration::from_millis(5)).await;
    let taken = store.claim_work(None, "w2", LONG).await.unwrap().unwrap();
    assert_eq!(taken.id, short.id);
    assert_eq!((taken.token, taken.attempts), (2, 2));
    assert_eq!(taken.worker.as_deref(), Some("w2"));
    // The long lease was never taken from w1.
    let still = store.work_item(&held.id).await.unwrap().unwrap();
    assert_eq!((still.worker.as_deref(), still.token), (Some("w1"), 1));
}

async fn a_stale_token_is_refused_for_finish_release_and_heartbeat(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    store.enqueue_work(items("q", &["a"])).await.unwrap();
    let old = store
        .claim_work(None, "w1", Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let new = store.claim_work(None, "w2", LONG).await.unwrap().unwrap();
    assert_eq!((old.token, new.token), (1, 2));

    let error = store
        .finish_work(&old.fence(), json!({"late": true}))
        .await
        .unwrap_err();
    assert!(is_fenced(&error, 2), "{error}");
    assert!(error.to_string().contains("stale"), "{error}");
    let error = store.release_work(&old.fence()).await.unwrap_err();
    assert!(is_fenced(&error, 2), "{error}");
    let beat = store
        .heartbeat(&worker("w1"), &[old.fence()], LONG)
        .await
        .unwrap();
    assert_eq!((beat.kept, beat.lost), (vec![], vec![old.fence()]));

    // The holder hands it back; the next claim raises the token again, then finishes it.
    let back = store.release_work(&new.fence()).await.unwrap();
    assert_eq!(back.state, WorkState::Pending);
    let third = store.claim_work(None, "w1", LONG).await.unwrap().unwrap();
    assert_eq!(third.token, 3);
    let done = store
        .finish_work(&third.fence(), json!({"ok": 1}))
        .await
        .unwrap();
    assert_eq!(
        (done.state, done.result),
        (WorkState::Done, Some(json!({"ok": 1})))
    );
    assert!(done.finished_at.is_some());
    let error = store
        .finish_work(&third.fence(), json!({"again": 1}))
        .await
        .unwrap_err();
    assert!(
        matches!(error, StoreError::Fenced { ref state, .. } if state == "done"),
        "{error}"
    );
    assert!(
        store
            .claim_work(None, "w2", Duration::ZERO)
            .await
            .unwrap()
            .is_none()
    );
    let error = store
        .finish_work(
            &WorkFence {
                item: "nope".into(),
                token: 1,
            },
            json!(null),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::UnknownWorkItem(_)), "{error}");
}

async fn a_fenced_store_refuses_every_write_once_the_item_is_taken_over(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    store.enqueue_work(items("q", &["a"])).await.unwrap();
    let lease = store
        .claim_work(None, "w1", Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let fenced = place.location().open_fenced(lease.fence()).await;
    // While the token is current, the run's writes land.
    run_with(&fenced, RUN, &["alice"]).await;
    // Another worker takes the expired lease over.
    let taken = store.claim_work(None, "w2", LONG).await.unwrap().unwrap();
    assert_eq!(taken.token, 2);
    let mut refused = 0;
    let attempts: Vec<StoreResult<()>> = vec![
        fenced
            .send(text(RUN, "lead", "alice", "late"))
            .await
            .map(drop),
        fenced
            .set_run_status(RUN, RunStatus::Failed, None)
            .await
            .map(drop),
        fenced.create_run(new_run("r2")).await.map(drop),
        fenced
            .append_records(
                RUN,
                vec![NewRecord {
                    agent: "lead".into(),
                    stream: "transcript".into(),
                    seq: None,
                    body: json!({"late": true}),
                }],
            )
            .await
            .map(drop),
    ];
    for attempt in attempts {
        let error = attempt.unwrap_err();
        assert!(is_fenced(&error, 2), "{error}");
        refused += 1;
    }
    assert_eq!(refused, 4);
    // Nothing of them landed.
    assert_eq!(store.messages(RUN, None).await.unwrap().len(), 0);
    assert_eq!(
        store.run(RUN).await.unwrap().unwrap().status,
        RunStatus::Running
    );
    assert!(store.run("r2").await.unwrap().is_none());
    // The new holder's fenced store writes.
    let current = place.location().open_fenced(taken.fence()).await;
    current
        .send(text(RUN, "lead", "alice", "on time"))
        .await
        .unwrap();
}

async fn enqueue_is_idempotent_and_watches_wake_on_committed_changes(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let watch = store.watch_work().await.unwrap();
    let stored = store.enqueue_work(items("q", &["a"])).await.unwrap();
    tokio::time::timeout(GUARD, watch.changed())
        .await
        .unwrap()
        .unwrap();
    let lease = store.claim_work(None, "w1", LONG).await.unwrap().unwrap();
    // Enqueued again (a batch re-run): the stored item is returned as it is now.
    let again = store.enqueue_work(items("q", &["a"])).await.unwrap();
    assert_eq!(again[0].state, WorkState::Leased);
    assert_eq!(again[0].created_at, stored[0].created_at);
    tokio::time::timeout(GUARD, watch.changed())
        .await
        .unwrap()
        .unwrap();
    // A finish wakes a waiting batch; it was made while nobody waited, and is kept.
    store.finish_work(&lease.fence(), json!({})).await.unwrap();
    tokio::time::timeout(GUARD, watch.changed())
        .await
        .unwrap()
        .unwrap();
    let all = store.work_items("q").await.unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].state, WorkState::Done);
}

async fn workers_are_listed_with_their_items_and_last_heartbeat(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    store.enqueue_work(items("q", &["a", "b"])).await.unwrap();
    let a = store.claim_work(None, "w1", LONG).await.unwrap().unwrap();
    store
        .heartbeat(&worker("w1"), &[a.fence()], LONG)
        .await
        .unwrap();
    store.heartbeat(&worker("w2"), &[], LONG).await.unwrap();
    let listed = store.workers().await.unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(
        (
            listed[0].name.as_str(),
            listed[0].host.as_str(),
            listed[0].slots
        ),
        ("w1", "host-a", 2)
    );
    assert_eq!(listed[0].items, vec![a.id.clone()]);
    assert!(listed[1].items.is_empty());
    assert!(listed[0].last_heartbeat >= listed[0].started_at);
    assert!(listed[0].stopped_at.is_none());
    store.retire_worker("w1").await.unwrap();
    let listed = store.workers().await.unwrap();
    assert!(listed[0].stopped_at.is_some());
}

fn tool_started(id: &str) -> NewRecord {
    NewRecord {
        agent: "alice".into(),
        stream: "transcript".into(),
        seq: None,
        body: json!({"type": "tool_started", "tool_use_id": id, "tool": "Bash"}),
    }
}

fn group(id: &str, pgid: i64) -> NewProcessGroup {
    NewProcessGroup {
        agent: "alice".into(),
        tool_use_id: id.into(),
        pgid,
        host: "host-a".into(),
        boot_id: "boot-1".into(),
    }
}

async fn a_fenced_tool_start_records_its_process_group_under_the_item_holder(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    run_with(&store, RUN, &["alice"]).await;
    // A run of no worker: the record only.
    store
        .record_tool_start(RUN, vec![tool_started("t0")], group("t0", 10))
        .await
        .unwrap();
    assert!(
        store
            .worker_process_groups("w1", "host-a", "boot-1")
            .await
            .unwrap()
            .is_empty()
    );
    store.enqueue_work(items("q", &["a"])).await.unwrap();
    let lease = store
        .claim_work(None, "w1", Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let fenced = place.location().open_fenced(lease.fence()).await;
    let rows = fenced
        .record_tool_start(RUN, vec![tool_started("t1")], group("t1", 4242))
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    let recorded = store
        .worker_process_groups("w1", "host-a", "boot-1")
        .await
        .unwrap();
    assert_eq!(recorded.len(), 1, "{recorded:#?}");
    let found = &recorded[0];
    assert_eq!(
        (
            found.run_id.as_str(),
            found.agent.as_str(),
            found.tool_use_id.as_str(),
            found.pgid,
            found.item.as_str(),
            found.token,
        ),
        (RUN, "alice", "t1", 4242, lease.id.as_str(), 1)
    );
    // Another boot or another host finds nothing.
    for (host, boot) in [("host-a", "boot-2"), ("host-b", "boot-1")] {
        assert!(
            store
                .worker_process_groups("w1", host, boot)
                .await
                .unwrap()
                .is_empty()
        );
    }
    // Record and group are one transaction: once the item is taken over, neither lands.
    let taken = store.claim_work(None, "w2", LONG).await.unwrap().unwrap();
    let error = fenced
        .record_tool_start(RUN, vec![tool_started("t2")], group("t2", 4343))
        .await
        .unwrap_err();
    assert!(is_fenced(&error, taken.token), "{error}");
    let transcript = store.records(RUN, "alice", "transcript", 0).await.unwrap();
    assert_eq!(transcript.len(), 2, "{transcript:#?}");
    assert_eq!(
        store
            .worker_process_groups("w1", "host-a", "boot-1")
            .await
            .unwrap()
            .len(),
        1
    );
    store
        .forget_process_group(RUN, "alice", "t1")
        .await
        .unwrap();
    assert!(
        store
            .worker_process_groups("w1", "host-a", "boot-1")
            .await
            .unwrap()
            .is_empty()
    );
}

/// A teammate placed on a worker leases its mail under the run's epoch; the lead's resume opens
/// a newer epoch, which voids that lease (pending again) while the teammate is mid-turn. The
/// worker's store, fenced by the teammate's work item, may still ack it in the turn's commit:
/// the fence, not the epoch, says who runs the agent. A store without a fence may not.
async fn a_fence_holder_acks_mail_a_newer_epoch_voided_and_an_epoch_owner_does_not(
    backend: Backend,
) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    store.enqueue_work(items("q", &["alice"])).await.unwrap();
    let lease = store.claim_work(None, "w1", LONG).await.unwrap().unwrap();
    let fenced = place.location().open_fenced(lease.fence()).await;
    let epoch = run_with(&store, RUN, &["alice"]).await;
    for body in ["first", "second"] {
        store.send(text(RUN, "lead", "alice", body)).await.unwrap();
    }
    let leased = fenced.receive_batch(RUN, "alice", epoch, 2).await.unwrap();
    assert_eq!(leased.len(), 2);
    // The lead's resume.
    store.open_epoch(RUN).await.unwrap();
    let states = |messages: Vec<Message>| -> Vec<DeliveryState> {
        messages.into_iter().map(|m| m.state).collect()
    };
    assert_eq!(
        states(store.messages(RUN, Some("alice")).await.unwrap()),
        [DeliveryState::Pending, DeliveryState::Pending]
    );
    let error = store
        .ack(RUN, vec![leased[0].key.clone()])
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("is not leased (it is pending)"),
        "{error}"
    );
    fenced
        .commit_turn(CommitTurn {
            run_id: RUN.into(),
            agent: "alice".into(),
            acks: vec![leased[0].key.clone()],
            ..CommitTurn::default()
        })
        .await
        .unwrap();
    fenced.ack(RUN, vec![leased[1].key.clone()]).await.unwrap();
    assert_eq!(
        states(store.messages(RUN, Some("alice")).await.unwrap()),
        [DeliveryState::Acked, DeliveryState::Acked]
    );
    // Acked twice is still an error, fenced or not.
    let error = fenced
        .ack(RUN, vec![leased[1].key.clone()])
        .await
        .unwrap_err();
    assert!(error.to_string().contains("it is acked"), "{error}");
}

/// The run's budget ledger under fencing: while its token is current a worker's store reads and
/// charges it; once the item is taken over, the read an agent makes before a model request is
/// refused (so it sends none), as are a reservation and a charge, which leave the ledger as it
/// was.
async fn a_worker_that_lost_its_lease_can_neither_read_nor_charge_the_run_ledger(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    store.enqueue_work(items("q", &["a"])).await.unwrap();
    let lease = store
        .claim_work(None, "w1", Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let fenced = place.location().open_fenced(lease.fence()).await;
    run_with(&fenced, RUN, &["alice"]).await;
    let limits = LedgerLimits {
        cost_nanos: Some(1_000),
        ..LedgerLimits::default()
    };
    store
        .open_ledger(RUN, limits, LedgerSpend::default())
        .await
        .unwrap();
    let charge = |text: &str| CommitTurn {
        run_id: RUN.into(),
        agent: "alice".into(),
        records: vec![NewRecord {
            agent: "alice".into(),
            stream: "transcript".into(),
            seq: None,
            body: json!({"turn": text}),
        }],
        charge: Some(LedgerSpend {
            turns: 1,
            tokens: 10,
            cost_nanos: 100,
        }),
        ..CommitTurn::default()
    };
    assert!(fenced.run_ledger(RUN).await.unwrap().is_some());
    let granted = fenced
        .reserve_budget(RUN, "alice", 0, LedgerSpend::of_request(10, None))
        .await
        .unwrap();
    assert_eq!(granted.decision, ledger::LedgerDecision::Grant);
    fenced.commit_turn(charge("current")).await.unwrap();
    let before = store.run_ledger(RUN).await.unwrap().unwrap();
    assert_eq!(before.spent.cost_nanos, 100);

    let taken = store.claim_work(None, "w2", LONG).await.unwrap().unwrap();
    assert_eq!(taken.token, 2);
    let read = fenced.run_ledger(RUN).await.unwrap_err();
    assert!(is_fenced(&read, 2), "{read}");
    let reserved = fenced
        .reserve_budget(RUN, "alice", 0, LedgerSpend::of_request(10, None))
        .await
        .unwrap_err();
    assert!(is_fenced(&reserved, 2), "{reserved}");
    let charged = fenced.commit_turn(charge("late")).await.unwrap_err();
    assert!(is_fenced(&charged, 2), "{charged}");
    assert_eq!(store.run_ledger(RUN).await.unwrap(), Some(before));
}

/// `stop_work`, the item's owner's decision whoever holds it: a leased item becomes done with
/// the owner's result, its holder's writes and heartbeat fail from that commit on (the
/// heartbeat reports the lease lost), watchers wake, and a second stop changes nothing.
/// `reopen_work` puts it back pending for the next claim, under a new token.
async fn a_stopped_item_fences_its_holder_and_reopens_for_the_next_claim(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    store.enqueue_work(items("q", &["a"])).await.unwrap();
    let lease = store.claim_work(None, "w1", LONG).await.unwrap().unwrap();
    let fenced = place.location().open_fenced(lease.fence()).await;
    run_with(&fenced, RUN, &["alice"]).await;
    let watch = store.watch_work().await.unwrap();
    let stopped = store
        .stop_work(&lease.id, json!({"stopped": "interrupted"}))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stopped.state, WorkState::Done);
    assert_eq!(stopped.result, Some(json!({"stopped": "interrupted"})));
    tokio::time::timeout(GUARD, watch.changed())
        .await
        .expect("the stop wakes watchers")
        .unwrap();
    let error = fenced
        .send(text(RUN, "lead", "alice", "late"))
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::Fenced { .. }), "{error}");
    let beat = store
        .heartbeat(&worker("w1"), &[lease.fence()], LONG)
        .await
        .unwrap();
    assert_eq!(beat.lost, vec![lease.fence()]);
    // Done already: a second stop leaves the first result.
    let again = store
        .stop_work(&lease.id, json!({"stopped": "completed"}))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.result, Some(json!({"stopped": "interrupted"})));
    assert!(
        store
            .stop_work("q#none", json!({}))
            .await
            .unwrap()
            .is_none()
    );
    assert!(store.claim_work(None, "w2", LONG).await.unwrap().is_none());
    let reopened = store.reopen_work(&lease.id).await.unwrap().unwrap();
    assert_eq!(
        (reopened.state, reopened.result),
        (WorkState::Pending, None)
    );
    let next = store.claim_work(None, "w2", LONG).await.unwrap().unwrap();
    assert_eq!((next.id, next.token), (lease.id, lease.token + 1));
}
