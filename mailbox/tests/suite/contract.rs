//! The store's contract, one behaviour per test: ordering, leases, acks, idempotency, the
//! roster, requests and responses, records, CommitTurn, tasks, the auto gate.

use muster_mailbox::*;
use serde_json::json;

use super::common::*;

on_both_backends!(
    delivery_keeps_sender_order_within_priority_classes,
    a_leased_message_is_not_delivered_again_until_a_new_epoch,
    a_lease_handed_back_is_pending_again_and_wakes_its_recipient,
    a_filtered_receive_takes_only_the_awaited_answer,
    idempotency_key_returns_the_original_message,
    refusals_name_what_was_wrong,
    responses_are_checked_and_the_first_one_wins,
    a_policy_responder_answers_as_the_policy_entry,
    unknown_kinds_are_kept_raw,
    commit_turn_is_all_or_nothing,
    the_auto_gate_closes_after_consecutive_denials_and_an_allow_resets_the_count,
    records_keep_their_positions,
    roster_reserves_human_and_policy_and_validates_ids,
    tasks_claim_block_assign_and_release,
    counters_count_per_run_and_name,
    a_store_reopens_with_everything_in_it,
    prune_deletes_only_settled_chat_of_finished_runs,
    a_fork_copies_everything_and_then_goes_its_own_way,
    runs_carry_their_project_through_a_fork_and_prune_keeps_to_it,
    the_budget_ledger_is_charged_with_the_turn_and_seeded_once,
    budget_reservations_are_granted_while_they_fit_and_settled_by_the_charge,
    the_newest_mails_and_one_kind_come_from_their_run_only,
    every_agents_records_of_a_stream_come_in_one_read,
);

fn plan_request(run: &str, id: &str, responder: &str) -> NewMessage {
    NewMessage {
        run_id: run.into(),
        sender: "alice".into(),
        recipient: "lead".into(),
        body: MessageBody::PlanApprovalRequest {
            request_id: id.into(),
            plan_file: ".muster/plans/x-agent-alice.md".into(),
            plan: "## Steps\n1. x\n## Files\na.rs".into(),
            responder: responder.into(),
            revision: 1,
            previous_request_id: None,
            allowed_prompts: Vec::new(),
        },
        idempotency_key: None,
    }
}

fn plan_response(run: &str, id: &str, from: &str, approved: bool) -> NewResponse {
    NewResponse {
        run_id: run.into(),
        sender: from.into(),
        body: MessageBody::PlanApprovalResponse {
            request_id: id.into(),
            approved,
            feedback: None,
            mode: None,
            lowered_from: None,
            edited_plan: None,
            clear_context: false,
            rule: None,
            dropped_grants: Vec::new(),
            grants: Vec::new(),
        },
        idempotency_key: None,
    }
}

async fn delivery_keeps_sender_order_within_priority_classes(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let epoch = run_with(&store, RUN, &["alice", "bob", "carol"]).await;
    store.send(text(RUN, "alice", "carol", "a1")).await.unwrap();
    store.send(text(RUN, "bob", "carol", "b1")).await.unwrap();
    store.send(text(RUN, "lead", "carol", "l1")).await.unwrap();
    store.send(text(RUN, "alice", "carol", "a2")).await.unwrap();
    store
        .send(NewMessage {
            body: MessageBody::ShutdownRequest {
                request_id: "shutdown-carol-1".into(),
                reason: None,
            },
            ..text(RUN, "lead", "carol", "")
        })
        .await
        .unwrap();
    store.send(text(RUN, "lead", "carol", "l2")).await.unwrap();
    let mut order = Vec::new();
    while let Some(m) = store
        .try_receive(RUN, "carol", epoch, MessageFilter::Any)
        .await
        .unwrap()
    {
        order.push(if m.kind == "text" {
            text_of(&m)
        } else {
            m.kind.to_string()
        });
    }
    assert_eq!(order, ["shutdown_request", "l1", "l2", "a1", "b1", "a2"]);
}

async fn a_leased_message_is_not_delivered_again_until_a_new_epoch(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let epoch = run_with(&store, RUN, &["alice"]).await;
    let sent = store.send(text(RUN, "lead", "alice", "hi")).await.unwrap();
    let leased = store
        .try_receive(RUN, "alice", epoch, MessageFilter::Any)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (leased.key.as_str(), leased.state),
        (sent.key.as_str(), DeliveryState::Leased)
    );
    assert!(
        store
            .try_receive(RUN, "alice", epoch, MessageFilter::Any)
            .await
            .unwrap()
            .is_none()
    );
    let next_epoch = store.open_epoch(RUN).await.unwrap();
    assert!(next_epoch > epoch);
    let again = store
        .try_receive(RUN, "alice", next_epoch, MessageFilter::Any)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        again.key, sent.key,
        "a new owner gets the unacked message back"
    );
    store.ack(RUN, vec![again.key.clone()]).await.unwrap();
    let third = store.open_epoch(RUN).await.unwrap();
    assert!(
        store
            .try_receive(RUN, "alice", third, MessageFilter::Any)
            .await
            .unwrap()
            .is_none(),
        "acked is settled"
    );
    let twice = store.ack(RUN, vec![again.key.clone()]).await.unwrap_err();
    assert!(
        twice.to_string().contains("is not leased (it is acked)"),
        "{twice}"
    );
}

/// `hand_back`: a lease its taker could not use (an interrupt dropped the turn after the
/// lease's COMMIT) is pending again in the same epoch and wakes its recipient; acked and
/// pending mail is left as it is.
async fn a_lease_handed_back_is_pending_again_and_wakes_its_recipient(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let epoch = run_with(&store, RUN, &["alice"]).await;
    let first = store.send(text(RUN, "lead", "alice", "one")).await.unwrap();
    let second = store.send(text(RUN, "lead", "alice", "two")).await.unwrap();
    let pending = store
        .send(text(RUN, "lead", "alice", "three"))
        .await
        .unwrap();
    for _ in 0..2 {
        store
            .try_receive(RUN, "alice", epoch, MessageFilter::Any)
            .await
            .unwrap()
            .unwrap();
    }
    store.ack(RUN, vec![second.key.clone()]).await.unwrap();
    let woken = store.woken(RUN, "alice");
    let notified = woken.notified();
    tokio::pin!(notified);
    notified.as_mut().enable();
    let keys = vec![first.key.clone(), second.key.clone(), pending.key.clone()];
    assert_eq!(
        store.hand_back(RUN, keys).await.unwrap(),
        1,
        "only the lease"
    );
    tokio::time::timeout(GUARD, notified)
        .await
        .expect("the recipient is woken");
    let states: Vec<(String, DeliveryState)> = store
        .messages(RUN, Some("alice"))
        .await
        .unwrap()
        .into_iter()
        .map(|m| (m.key, m.state))
        .collect();
    assert_eq!(
        states,
        [
            (first.key.clone(), DeliveryState::Pending),
            (second.key.clone(), DeliveryState::Acked),
            (pending.key.clone(), DeliveryState::Pending),
        ]
    );
    let again = store
        .try_receive(RUN, "alice", epoch, MessageFilter::Any)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        again.key, first.key,
        "taken again in the same epoch, in order"
    );
}

async fn a_filtered_receive_takes_only_the_awaited_answer(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let epoch = run_with(&store, RUN, &["alice"]).await;
    store
        .send(plan_request(RUN, "plan-alice-1", "lead"))
        .await
        .unwrap();
    store
        .send(text(RUN, "lead", "alice", "chatter"))
        .await
        .unwrap();
    store
        .respond(plan_response(RUN, "plan-alice-1", "lead", true))
        .await
        .unwrap();
    let answer = store
        .try_receive(
            RUN,
            "alice",
            epoch,
            MessageFilter::RequestId("plan-alice-1".into()),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answer.kind, "plan_approval_response");
    let rest = store
        .try_receive(RUN, "alice", epoch, MessageFilter::Any)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(text_of(&rest), "chatter");
}

async fn idempotency_key_returns_the_original_message(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    run_with(&store, RUN, &["alice"]).await;
    let keyed = NewMessage {
        idempotency_key: Some("lead:toolu_1".into()),
        ..text(RUN, "lead", "alice", "once")
    };
    let first = store.send(keyed.clone()).await.unwrap();
    let second = store.send(keyed).await.unwrap();
    assert_eq!(first, second);
    assert_eq!(store.messages(RUN, Some("alice")).await.unwrap().len(), 1);
}

async fn refusals_name_what_was_wrong(backend: Backend) {
    let place = Place::new(backend).await;
    let options = StoreOptions {
        max_body_bytes: 64,
        ..StoreOptions::default()
    };
    let store = place.open_with(options).await;
    run_with(&store, RUN, &["alice"]).await;
    let cases: Vec<(NewMessage, &str)> = vec![
        (
            text(RUN, "lead", "mallory", "x"),
            "unknown recipient \"mallory\": not on the roster of run \"r1\" (members: human, policy, lead, alice)",
        ),
        (text(RUN, "eve", "alice", "x"), "unknown sender \"eve\""),
        (
            text(RUN, "lead", "alice", &"x".repeat(100)),
            "exceeds the limit of 64 bytes (mailbox.max_body_bytes)",
        ),
        (
            text("nope", "lead", "alice", "x"),
            "no run \"nope\" in this store",
        ),
    ];
    for (message, expected) in cases {
        let error = store.send(message).await.unwrap_err();
        assert!(
            error.to_string().contains(expected),
            "expected {expected:?} in {error}"
        );
    }
    assert!(
        store.messages(RUN, None).await.unwrap().is_empty(),
        "refused sends leave nothing"
    );
}

async fn responses_are_checked_and_the_first_one_wins(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    run_with(&store, RUN, &["alice", "bob"]).await;
    store
        .send(plan_request(RUN, "plan-alice-1", "human"))
        .await
        .unwrap();

    let unknown = store
        .respond(plan_response(RUN, "plan-alice-9", "human", true))
        .await
        .unwrap_err();
    assert!(
        unknown
            .to_string()
            .contains("unknown request id \"plan-alice-9\""),
        "{unknown}"
    );
    let forged = store
        .respond(plan_response(RUN, "plan-alice-1", "bob", true))
        .await
        .unwrap_err();
    assert!(
        forged.to_string().contains(
            "\"bob\" may not answer request \"plan-alice-1\": its responder is \"human\""
        ),
        "{forged}"
    );
    let by_lead = store
        .respond(plan_response(RUN, "plan-alice-1", "lead", true))
        .await
        .unwrap_err();
    assert!(
        matches!(by_lead, StoreError::WrongResponder { .. }),
        "{by_lead}"
    );
    let wrong_kind = store
        .respond(NewResponse {
            body: MessageBody::Answer {
                request_id: "plan-alice-1".into(),
                answer: "yes".into(),
            },
            ..plan_response(RUN, "plan-alice-1", "human", true)
        })
        .await
        .unwrap_err();
    assert!(
        wrong_kind.to_string().contains(
            "a answer cannot answer request \"plan-alice-1\", which is a plan_approval_request"
        ),
        "{wrong_kind}"
    );

    let accepted = store
        .respond(plan_response(RUN, "plan-alice-1", "human", false))
        .await
        .unwrap();
    assert_eq!(
        (accepted.recipient.as_str(), accepted.sender.as_str()),
        ("alice", "human")
    );
    let second = store
        .respond(plan_response(RUN, "plan-alice-1", "human", true))
        .await
        .unwrap_err();
    assert!(
        second
            .to_string()
            .contains("request \"plan-alice-1\" was already decided by human"),
        "{second}"
    );

    let record = store.request(RUN, "plan-alice-1").await.unwrap().unwrap();
    assert_eq!(record.responder, "human");
    let response = record.response.unwrap();
    assert_eq!(
        response.stored_body()["approved"],
        json!(false),
        "the first answer stands"
    );
    let duplicate = store
        .send(plan_request(RUN, "plan-alice-1", "human"))
        .await
        .unwrap_err();
    assert!(
        matches!(duplicate, StoreError::DuplicateRequest { .. }),
        "{duplicate}"
    );
}

async fn a_policy_responder_answers_as_the_policy_entry(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    run_with(&store, RUN, &["alice"]).await;
    store
        .send(plan_request(RUN, "plan-alice-1", "policy:/p/policy.toml"))
        .await
        .unwrap();
    let answer = store
        .respond(plan_response(RUN, "plan-alice-1", "policy", true))
        .await
        .unwrap();
    assert_eq!(answer.sender, "policy");
}

async fn unknown_kinds_are_kept_raw(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let epoch = run_with(&store, RUN, &["alice"]).await;
    let raw = json!({"type": "mode_set_request", "mode": "plan"});
    store
        .send(NewMessage {
            body: MessageBody::Unknown {
                kind: "mode_set_request".into(),
                raw: raw.clone(),
            },
            ..text(RUN, "lead", "alice", "")
        })
        .await
        .unwrap();
    let got = store
        .try_receive(RUN, "alice", epoch, MessageFilter::Any)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.kind, "mode_set_request");
    assert_eq!(
        got.body.clone(),
        MessageBody::Unknown {
            kind: "mode_set_request".into(),
            raw
        }
    );
}

async fn commit_turn_is_all_or_nothing(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let epoch = run_with(&store, RUN, &["alice"]).await;
    store
        .send(text(RUN, "lead", "alice", "do it"))
        .await
        .unwrap();
    let mail = store
        .try_receive(RUN, "alice", epoch, MessageFilter::Any)
        .await
        .unwrap()
        .unwrap();
    let record = NewRecord {
        agent: "alice".into(),
        stream: "transcript".into(),
        seq: None,
        body: json!({"saw": mail.key}),
    };
    let failing = CommitTurn {
        run_id: RUN.into(),
        agent: "alice".into(),
        acks: vec![mail.key.clone()],
        records: vec![record.clone()],
        sends: vec![text(RUN, "alice", "nobody", "reply")],
        ..CommitTurn::default()
    };
    let error = store.commit_turn(failing).await.unwrap_err();
    assert!(
        matches!(error, StoreError::UnknownRecipient { .. }),
        "{error}"
    );
    assert!(
        store
            .records(RUN, "alice", "transcript", 0)
            .await
            .unwrap()
            .is_empty(),
        "record rolled back"
    );
    assert_eq!(
        store.message(&mail.key).await.unwrap().unwrap().state,
        DeliveryState::Leased,
        "ack rolled back"
    );

    let outcome = store
        .commit_turn(CommitTurn {
            run_id: RUN.into(),
            agent: "alice".into(),
            acks: vec![mail.key.clone()],
            records: vec![record],
            sends: vec![text(RUN, "alice", "lead", "done")],
            auto_gate: Some(AutoGateUpdate::Denied(1)),
            ..CommitTurn::default()
        })
        .await
        .unwrap();
    assert_eq!(outcome.records[0].seq, 1);
    assert_eq!(outcome.sent.len(), 1);
    assert_eq!(outcome.auto_gate.consecutive_denials, 1);
    assert_eq!(
        store.message(&mail.key).await.unwrap().unwrap().state,
        DeliveryState::Acked
    );
}

async fn the_auto_gate_closes_after_consecutive_denials_and_an_allow_resets_the_count(
    backend: Backend,
) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    run_with(&store, RUN, &[]).await;
    let gate = store
        .update_auto_gate(RUN, AutoGateUpdate::Denied(2))
        .await
        .unwrap();
    assert_eq!((gate.open, gate.consecutive_denials), (true, 2));
    let gate = store
        .update_auto_gate(RUN, AutoGateUpdate::Allowed)
        .await
        .unwrap();
    assert_eq!((gate.open, gate.consecutive_denials), (true, 0));
    let gate = store
        .update_auto_gate(RUN, AutoGateUpdate::Denied(3))
        .await
        .unwrap();
    assert_eq!((gate.open, gate.consecutive_denials), (false, 3));
    let gate = store
        .update_auto_gate(RUN, AutoGateUpdate::Allowed)
        .await
        .unwrap();
    assert!(!gate.open, "a closed gate stays closed");
}

async fn records_keep_their_positions(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    run_with(&store, RUN, &["alice"]).await;
    let rec = |seq: Option<i64>, n: i64| NewRecord {
        agent: "alice".into(),
        stream: "state".into(),
        seq,
        body: json!({"n": n}),
    };
    store
        .append_records(RUN, vec![rec(None, 1), rec(None, 2)])
        .await
        .unwrap();
    let taken = store
        .append_records(RUN, vec![rec(Some(2), 3)])
        .await
        .unwrap_err();
    assert!(
        taken
            .to_string()
            .contains("record (alice, state, 2) already exists"),
        "{taken}"
    );
    let read = store.records(RUN, "alice", "state", 1).await.unwrap();
    assert_eq!(
        read.iter()
            .map(|r| (r.seq, r.body["n"].as_i64().unwrap()))
            .collect::<Vec<_>>(),
        [(2, 2)]
    );
}

async fn roster_reserves_human_and_policy_and_validates_ids(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    run_with(&store, RUN, &["alice"]).await;
    let entry = |agent: &str| RosterEntry {
        agent: agent.into(),
        kind: MemberKind::Teammate,
        definition: None,
        parent: None,
    };
    for (agent, expected) in [
        ("human", "reserved"),
        ("policy", "reserved"),
        ("alice", "already on the roster"),
        ("Bad_Name", "invalid agent id"),
    ] {
        let error = store.add_member(RUN, entry(agent)).await.unwrap_err();
        assert!(error.to_string().contains(expected), "{agent}: {error}");
    }
    let names: Vec<String> = store
        .roster(RUN)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.agent)
        .collect();
    assert_eq!(names, ["human", "policy", "lead", "alice"]);
    let bad_run = store
        .create_run(new_run("a-run-id-much-too-long"))
        .await
        .unwrap_err();
    assert!(
        bad_run.to_string().contains("1 to 16 characters"),
        "{bad_run}"
    );
}

async fn tasks_claim_block_assign_and_release(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let epoch = run_with(&store, RUN, &["alice", "bob"]).await;
    let new = |subject: &str, blocked_by: Vec<i64>| NewTask {
        run_id: RUN.into(),
        created_by: "lead".into(),
        subject: subject.into(),
        description: format!("do {subject}"),
        blocked_by,
        idempotency_key: None,
    };
    let first = store.create_task(new("schema", vec![])).await.unwrap();
    let second = store
        .create_task(new("api", vec![first.task_id]))
        .await
        .unwrap();
    assert_eq!((first.task_id, second.task_id), (1, 2));
    assert_eq!(second.blocked_by_open, [1]);

    let blocked = store.claim_task(RUN, 2, "bob").await.unwrap_err();
    assert!(
        blocked.to_string().contains("blocked by open task(s) [1]"),
        "{blocked}"
    );
    let claimed = store.claim_next_task(RUN, "alice").await.unwrap().unwrap();
    assert_eq!(
        (claimed.task.task_id, claimed.task.owner.as_deref()),
        (1, Some("alice"))
    );
    // The claim sent its task_assignment (mail to the claimer) in its own transaction.
    assert_eq!(
        (
            claimed.assignment.kind.as_str(),
            claimed.assignment.recipient.as_str()
        ),
        ("task_assignment", "alice")
    );
    let mail = store
        .try_receive(RUN, "alice", epoch, MessageFilter::Any)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(mail.key, claimed.assignment.key);
    let taken = store.claim_task(RUN, 1, "bob").await.unwrap_err();
    assert!(
        taken.to_string().contains("already claimed by \"alice\""),
        "{taken}"
    );
    assert!(
        store.claim_next_task(RUN, "bob").await.unwrap().is_none(),
        "2 is still blocked"
    );

    store
        .update_task(TaskUpdate {
            run_id: RUN.into(),
            task_id: 1,
            updated_by: "alice".into(),
            status: Some(TaskStatus::Completed),
            ..TaskUpdate::default()
        })
        .await
        .unwrap();
    assert!(
        store.task(RUN, 2).await.unwrap().unwrap().is_claimable(),
        "blocking is computed when read"
    );

    store
        .update_task(TaskUpdate {
            run_id: RUN.into(),
            task_id: 2,
            updated_by: "lead".into(),
            owner: Some(Some("bob".into())),
            ..TaskUpdate::default()
        })
        .await
        .unwrap();
    let assignment = store
        .try_receive(RUN, "bob", epoch, MessageFilter::Any)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(assignment.kind, "task_assignment");
    assert_eq!(assignment.stored_body()["task_id"], json!(2));

    let cycle = store
        .update_task(TaskUpdate {
            run_id: RUN.into(),
            task_id: 1,
            updated_by: "lead".into(),
            add_blocked_by: vec![2],
            ..TaskUpdate::default()
        })
        .await
        .unwrap_err();
    assert!(cycle.to_string().contains("cycle"), "{cycle}");

    assert_eq!(store.release_tasks_of(RUN, "bob").await.unwrap(), [2]);
    let released = store.task(RUN, 2).await.unwrap().unwrap();
    assert_eq!(
        (released.owner, released.status),
        (None, TaskStatus::Pending)
    );

    // The board lists each task with its own dependencies, open or done.
    store
        .create_task(new("docs", vec![second.task_id, first.task_id]))
        .await
        .unwrap();
    let board: Vec<_> = store
        .tasks(RUN)
        .await
        .unwrap()
        .into_iter()
        .map(|t| (t.task_id, t.blocked_by, t.blocked_by_open))
        .collect();
    assert_eq!(
        board,
        [
            (1, vec![], vec![]),
            (2, vec![1], vec![]),
            (3, vec![1, 2], vec![2])
        ]
    );
}

async fn counters_count_per_run_and_name(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    run_with(&store, RUN, &[]).await;
    run_with(&store, "r2", &[]).await;
    let mut got = Vec::new();
    for (run, name) in [
        (RUN, "plan-alice"),
        (RUN, "plan-alice"),
        (RUN, "perm-alice"),
        ("r2", "plan-alice"),
    ] {
        got.push(store.next_counter(run, name).await.unwrap());
    }
    assert_eq!(got, [1, 2, 1, 1]);
}

async fn a_store_reopens_with_everything_in_it(backend: Backend) {
    let place = Place::new(backend).await;
    let key = {
        let store = place.open().await;
        run_with(&store, RUN, &["alice"]).await;
        store
            .send(text(RUN, "lead", "alice", "kept"))
            .await
            .unwrap()
            .key
    };
    let store = place.open().await;
    let run = store.run(RUN).await.unwrap().unwrap();
    assert_eq!(run.launch_options, json!({"provider": "script"}));
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(
        store.message(&key).await.unwrap().unwrap().recipient,
        "alice"
    );
}

async fn prune_deletes_only_settled_chat_of_finished_runs(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let epoch = run_with(&store, RUN, &["alice"]).await;
    run_with(&store, "live", &["alice"]).await;
    let acked = store
        .send(text(RUN, "lead", "alice", "done with"))
        .await
        .unwrap();
    let pending = store
        .send(text(RUN, "lead", "alice", "still to read"))
        .await
        .unwrap();
    store
        .send(plan_request(RUN, "plan-alice-1", "human"))
        .await
        .unwrap();
    let answer = store
        .respond(plan_response(RUN, "plan-alice-1", "human", true))
        .await
        .unwrap();
    let first = store
        .try_receive(RUN, "alice", epoch, MessageFilter::Any)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.key, acked.key);
    store.ack(RUN, vec![acked.key.clone()]).await.unwrap();
    let answer_leased = store
        .try_receive(
            RUN,
            "alice",
            epoch,
            MessageFilter::RequestId("plan-alice-1".into()),
        )
        .await
        .unwrap()
        .unwrap();
    store
        .ack(RUN, vec![answer_leased.key.clone()])
        .await
        .unwrap();
    store
        .send(text("live", "lead", "alice", "running run"))
        .await
        .unwrap();

    let refused = store.prune(i64::MAX, None).await.unwrap();
    assert_eq!(refused.runs_pruned.len(), 0, "nothing is finished yet");
    assert_eq!(refused.runs_skipped.len(), 2);

    store
        .set_run_status(RUN, RunStatus::Completed, None)
        .await
        .unwrap();
    let too_recent = store.prune(0, None).await.unwrap();
    assert_eq!(
        too_recent.messages_deleted, 0,
        "nothing is older than the cutoff"
    );
    let report = store.prune(i64::MAX, None).await.unwrap();
    assert_eq!(report.runs_pruned, [RUN]);
    assert_eq!(
        report.runs_skipped,
        [("live".to_owned(), RunStatus::Running)]
    );
    assert_eq!(report.messages_deleted, 1, "only the acked chat message");
    assert_eq!(report.decisions_kept, 2, "the request and its response");
    assert!(store.message(&acked.key).await.unwrap().is_none());
    assert!(
        store.message(&pending.key).await.unwrap().is_some(),
        "unread mail is not history"
    );
    assert!(store.message(&answer.key).await.unwrap().is_some());
    assert!(
        store
            .request(RUN, "plan-alice-1")
            .await
            .unwrap()
            .unwrap()
            .response
            .is_some()
    );
    assert_eq!(store.messages("live", None).await.unwrap().len(), 1);
}

async fn a_fork_copies_everything_and_then_goes_its_own_way(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let epoch = run_with(&store, RUN, &["alice"]).await;
    store
        .send(plan_request(RUN, "plan-alice-1", "human"))
        .await
        .unwrap();
    store
        .respond(plan_response(RUN, "plan-alice-1", "human", true))
        .await
        .unwrap();
    store
        .send(text(RUN, "lead", "alice", "in flight"))
        .await
        .unwrap();
    let leased = store
        .try_receive(RUN, "alice", epoch, MessageFilter::Any)
        .await
        .unwrap()
        .unwrap();
    store
        .append_records(
            RUN,
            vec![NewRecord {
                agent: "alice".into(),
                stream: "transcript".into(),
                seq: None,
                body: json!({"turn": 1}),
            }],
        )
        .await
        .unwrap();
    store
        .create_task(NewTask {
            run_id: RUN.into(),
            created_by: "lead".into(),
            subject: "s".into(),
            description: "d".into(),
            blocked_by: vec![],
            idempotency_key: None,
        })
        .await
        .unwrap();
    store.next_counter(RUN, "plan-alice").await.unwrap();

    let fork = store
        .fork_run(RUN, "r1-fork", "other-slug-here")
        .await
        .unwrap();
    assert_eq!(
        (fork.slug.as_str(), fork.status, fork.epoch),
        ("other-slug-here", RunStatus::Interrupted, 0)
    );
    assert_eq!(
        store.roster("r1-fork").await.unwrap(),
        store.roster(RUN).await.unwrap()
    );
    let copied = store.messages("r1-fork", None).await.unwrap();
    let original = store.messages(RUN, None).await.unwrap();
    assert_eq!(copied.len(), original.len());
    assert!(
        copied
            .iter()
            .zip(&original)
            .all(|(c, o)| c.key != o.key && c.body == o.body && c.kind == o.kind)
    );
    let in_flight = copied
        .iter()
        .find(|m| m.stored_body()["text"] == "in flight")
        .unwrap();
    assert_eq!(
        in_flight.state,
        DeliveryState::Pending,
        "the source's lease does not follow the fork"
    );
    assert_ne!(in_flight.key, leased.key);
    let decided = store
        .request("r1-fork", "plan-alice-1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        decided.response.unwrap().stored_body()["approved"],
        json!(true)
    );
    assert_eq!(
        store
            .records("r1-fork", "alice", "transcript", 0)
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(store.tasks("r1-fork").await.unwrap().len(), 1);
    assert_eq!(
        store.next_counter("r1-fork", "plan-alice").await.unwrap(),
        2
    );

    // Independent from now on.
    store
        .send(text("r1-fork", "lead", "alice", "only in the fork"))
        .await
        .unwrap();
    assert_eq!(
        store.messages(RUN, None).await.unwrap().len(),
        original.len()
    );
    let taken = store.fork_run(RUN, "r1-fork", "x").await.unwrap_err();
    assert!(matches!(taken, StoreError::RunExists(_)), "{taken}");
    let slug_taken = store
        .fork_run(RUN, "r1-fork2", "other-slug-here")
        .await
        .unwrap_err();
    assert!(
        slug_taken
            .to_string()
            .contains("slug \"other-slug-here\" is already used"),
        "{slug_taken}"
    );
}

async fn runs_carry_their_project_through_a_fork_and_prune_keeps_to_it(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    for (id, project) in [
        ("a1", Some("proj-a")),
        ("b1", Some("proj-b")),
        ("old", None),
    ] {
        store
            .create_run(NewRun {
                project_id: project.map(str::to_owned),
                ..new_run(id)
            })
            .await
            .unwrap();
        store
            .set_run_status(id, RunStatus::Completed, None)
            .await
            .unwrap();
    }
    let a1 = store.run("a1").await.unwrap().unwrap();
    assert_eq!(a1.project_id.as_deref(), Some("proj-a"));
    assert!(a1.in_project("proj-a") && !a1.in_project("proj-b"));
    let old = store.run("old").await.unwrap().unwrap();
    assert!(
        old.in_project("proj-a"),
        "a run from before project ids is everyone's"
    );
    let fork = store.fork_run("a1", "a2", "slug-of-a2").await.unwrap();
    assert_eq!(
        fork.project_id.as_deref(),
        Some("proj-a"),
        "a fork stays in its project"
    );

    let report = store.prune(i64::MAX, Some("proj-b")).await.unwrap();
    let mut pruned = report.runs_pruned.clone();
    pruned.sort();
    assert_eq!(
        pruned,
        ["b1", "old"],
        "only project b's runs and the project-less one"
    );
    let everything = store.prune(i64::MAX, None).await.unwrap();
    assert_eq!(everything.runs_pruned.len(), 4);
}

/// The run's ledger: opened with limits and a seed (the spend its records held before there was
/// a ledger); a turn's charge lands with the turn, or not at all; a second open changes the
/// limits but keeps the totals; a fork copies it.
async fn the_budget_ledger_is_charged_with_the_turn_and_seeded_once(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    run_with(&store, RUN, &["alice"]).await;
    assert_eq!(store.run_ledger(RUN).await.unwrap(), None);
    let limits = LedgerLimits {
        turns: None,
        tokens: Some(10_000),
        cost_nanos: Some(ledger::usd_to_nanos(1.0)),
    };
    let seed = LedgerSpend {
        turns: 2,
        tokens: 300,
        cost_nanos: ledger::usd_to_nanos(0.25),
    };
    let opened = store.open_ledger(RUN, limits, seed).await.unwrap();
    assert_eq!((opened.limits, opened.spent), (limits, seed));

    let record = |text: &str| NewRecord {
        agent: "alice".into(),
        stream: "transcript".into(),
        seq: None,
        body: json!({"type": "message", "text": text}),
    };
    let charge = LedgerSpend::of_request(120, Some(0.125));
    let outcome = store
        .commit_turn(CommitTurn {
            run_id: RUN.into(),
            agent: "alice".into(),
            records: vec![record("one")],
            charge: Some(charge),
            ..CommitTurn::default()
        })
        .await
        .unwrap();
    let after = outcome.ledger.expect("a charged turn returns the ledger");
    assert_eq!(after.spent.turns, 3);
    assert_eq!(after.spent.tokens, 420);
    assert_eq!(after.spent.cost_nanos, 375_000_000);
    assert_eq!(store.run_ledger(RUN).await.unwrap(), Some(after.clone()));

    // A turn that fails after its charge (mail to nobody) charges nothing.
    let failed = store
        .commit_turn(CommitTurn {
            run_id: RUN.into(),
            agent: "alice".into(),
            sends: vec![text(RUN, "alice", "nobody", "reply")],
            records: vec![record("two")],
            charge: Some(charge),
            ..CommitTurn::default()
        })
        .await;
    assert!(failed.is_err(), "{failed:?}");
    assert_eq!(store.run_ledger(RUN).await.unwrap(), Some(after.clone()));

    // Opened again (a resume): new limits, the totals kept, the seed ignored.
    let wider = LedgerLimits {
        turns: Some(50),
        ..LedgerLimits::default()
    };
    let reopened = store
        .open_ledger(RUN, wider, LedgerSpend::default())
        .await
        .unwrap();
    assert_eq!((reopened.limits, reopened.spent), (wider, after.spent));

    // Uncharged turns leave it as it is, and say nothing of it.
    let plain = store
        .commit_turn(CommitTurn {
            run_id: RUN.into(),
            agent: "alice".into(),
            records: vec![record("three")],
            ..CommitTurn::default()
        })
        .await
        .unwrap();
    assert_eq!(plain.ledger, None);

    store.fork_run(RUN, "r2", "fork-two").await.unwrap();
    let copied = store.run_ledger("r2").await.unwrap().unwrap();
    assert_eq!((copied.limits, copied.spent), (wider, after.spent));
    let unknown = store
        .open_ledger("nope", wider, LedgerSpend::default())
        .await;
    assert!(
        matches!(unknown, Err(StoreError::UnknownRun(_))),
        "{unknown:?}"
    );
}

/// Reservations of the run's ledger: granted while spent plus in flight plus the estimate fit,
/// a wait beside reservations that would not leave room, a grant alone whatever the estimate;
/// the turn's charge settles the agent's reservation (and wakes the waiting agents), as a
/// release and a new epoch free them; spent once the charges reach the limit.
async fn budget_reservations_are_granted_while_they_fit_and_settled_by_the_charge(
    backend: Backend,
) {
    use ledger::LedgerDecision::{Grant, Spent, Wait};
    let place = Place::new(backend).await;
    let store = place.open().await;
    run_with(&store, RUN, &["alice", "bob", "carol"]).await;
    let cost = |nanos: i64| LedgerSpend {
        turns: 1,
        tokens: 0,
        cost_nanos: nanos,
    };
    // No ledger: granted, nothing held.
    let free = store
        .reserve_budget(RUN, "alice", 0, cost(500))
        .await
        .unwrap();
    assert_eq!((free.decision, free.ledger), (Grant, None));

    let epoch = store.open_epoch(RUN).await.unwrap();
    let limits = LedgerLimits {
        cost_nanos: Some(100),
        ..LedgerLimits::default()
    };
    store
        .open_ledger(RUN, limits, LedgerSpend::default())
        .await
        .unwrap();
    let reserve = |agent: &'static str, nanos: i64| {
        let store = store.clone();
        async move {
            let reserved = store
                .reserve_budget(RUN, agent, epoch, cost(nanos))
                .await
                .unwrap();
            (
                reserved.decision,
                reserved.in_flight.cost_nanos,
                reserved.in_flight_count,
            )
        }
    };
    assert_eq!(reserve("alice", 60).await, (Grant, 0, 0));
    assert_eq!(reserve("bob", 41).await, (Wait, 60, 1));
    assert_eq!(reserve("bob", 40).await, (Grant, 60, 1));
    // An agent's new reservation replaces its own.
    assert_eq!(reserve("alice", 60).await, (Grant, 40, 1));
    assert_eq!(reserve("carol", 1).await, (Wait, 100, 2));
    // What is in flight, as `muster runs --json` shows it: one reservation per granted
    // agent, none for the one told to wait.
    let in_flight: Vec<(String, i64, i64)> = store
        .ledger_reservations(RUN)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.agent, r.epoch, r.estimate.cost_nanos))
        .collect();
    assert_eq!(
        in_flight,
        [("alice".into(), epoch, 60), ("bob".into(), epoch, 40)]
    );

    // Alice's response is charged: her reservation is settled in that commit, and an agent
    // waiting for budget is woken.
    let woken = store.woken(RUN, ledger::LEDGER_WAKE);
    let settled = woken.notified();
    tokio::pin!(settled);
    settled.as_mut().enable();
    store
        .commit_turn(CommitTurn {
            run_id: RUN.into(),
            agent: "alice".into(),
            charge: Some(cost(30)),
            ..CommitTurn::default()
        })
        .await
        .unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(30), settled)
        .await
        .expect("the charge wakes the agents waiting for budget");
    assert_eq!(reserve("carol", 31).await, (Wait, 40, 1));
    assert_eq!(reserve("carol", 30).await, (Grant, 40, 1));

    // A release frees bob's; a new epoch frees carol's, taken under the old one.
    store.release_reservation(RUN, "bob").await.unwrap();
    assert_eq!(reserve("alice", 71).await, (Wait, 30, 1));
    let next = store.open_epoch(RUN).await.unwrap();
    assert!(next > epoch);
    // Alone, an estimate larger than what is left is granted.
    assert_eq!(reserve("alice", 500).await, (Grant, 0, 0));
    assert_eq!(reserve("bob", 1).await, (Wait, 500, 1));

    // Charged up to the limit: spent for everyone, and a spent agent holds nothing.
    store
        .commit_turn(CommitTurn {
            run_id: RUN.into(),
            agent: "alice".into(),
            charge: Some(cost(70)),
            ..CommitTurn::default()
        })
        .await
        .unwrap();
    let spent = store
        .reserve_budget(RUN, "bob", next, cost(1))
        .await
        .unwrap();
    assert_eq!((spent.decision, spent.in_flight_count), (Spent, 0));
    assert_eq!(spent.ledger.map(|l| l.spent.cost_nanos), Some(100));
    assert_eq!(reserve("carol", 0).await, (Spent, 0, 0));
}

/// A page of a long run reads its newest mails and its reports without the rest: the newest
/// `limit` in commit order with the count before them, and one kind's mails, each of this run
/// only (another run's mails interleave with them).
async fn the_newest_mails_and_one_kind_come_from_their_run_only(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    run_with(&store, RUN, &["alice"]).await;
    run_with(&store, "other", &["alice"]).await;
    for n in 0..7 {
        store
            .send(text(RUN, "lead", "alice", &format!("m{n}")))
            .await
            .unwrap();
        store
            .send(text("other", "lead", "alice", &format!("o{n}")))
            .await
            .unwrap();
    }
    let shutdown = store
        .send(NewMessage {
            body: MessageBody::ShutdownRequest {
                request_id: "shutdown-alice-1".into(),
                reason: None,
            },
            ..text(RUN, "lead", "alice", "")
        })
        .await
        .unwrap();
    store
        .send(text("other", "lead", "alice", "o-last"))
        .await
        .unwrap();
    let newest = store.newest_messages(RUN, 3).await.unwrap();
    let shown: Vec<String> = newest
        .messages
        .iter()
        .map(|m| {
            if m.kind == "text" {
                text_of(m)
            } else {
                m.kind.to_string()
            }
        })
        .collect();
    assert_eq!(shown, ["m5", "m6", "shutdown_request"]);
    assert_eq!(newest.earlier, 5);
    let all = store.newest_messages(RUN, 100).await.unwrap();
    assert_eq!((all.messages.len(), all.earlier), (8, 0));
    assert_eq!(
        all.messages,
        store.messages(RUN, None).await.unwrap(),
        "the same rows as the whole list, decoded alike"
    );
    let none = store.newest_messages(RUN, 0).await.unwrap();
    assert_eq!((none.messages.len(), none.earlier), (0, 8));
    let empty = store.newest_messages("no-such-run", 5).await.unwrap();
    assert_eq!((empty.messages.len(), empty.earlier), (0, 0));
    let shutdowns = store
        .messages_of_kind(RUN, &MessageKind::ShutdownRequest)
        .await
        .unwrap();
    assert_eq!(shutdowns, vec![shutdown]);
    let texts = store
        .messages_of_kind("other", &MessageKind::Text)
        .await
        .unwrap();
    assert_eq!(texts.len(), 8);
    assert!(texts.iter().all(|m| m.run_id == "other"));
    assert!(texts.windows(2).all(|w| w[0].seq < w[1].seq));
}

/// One read gives every agent's records of a stream, each agent's in order, as reading them
/// agent by agent does; other streams and runs stay out.
async fn every_agents_records_of_a_stream_come_in_one_read(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    run_with(&store, RUN, &["alice", "bob"]).await;
    run_with(&store, "other", &["alice"]).await;
    let record = |agent: &str, stream: &str, n: i64| NewRecord {
        agent: agent.into(),
        stream: stream.into(),
        seq: None,
        body: json!({"n": n}),
    };
    for n in 0..3 {
        for (run, agent, stream) in [
            (RUN, "bob", "transcript"),
            (RUN, "alice", "transcript"),
            (RUN, "alice", "notes"),
            ("other", "alice", "transcript"),
        ] {
            store
                .append_records(run, vec![record(agent, stream, n)])
                .await
                .unwrap();
        }
    }
    let all = store.stream_records(RUN, "transcript").await.unwrap();
    let mut expected = store.records(RUN, "alice", "transcript", 0).await.unwrap();
    expected.extend(store.records(RUN, "bob", "transcript", 0).await.unwrap());
    assert_eq!(all, expected);
    assert_eq!(all.len(), 6);
    assert!(
        store
            .stream_records("no-such-run", "transcript")
            .await
            .unwrap()
            .is_empty()
    );
}
