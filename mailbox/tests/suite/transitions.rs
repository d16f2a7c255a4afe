//! The team's transitions at the store level: each one is one transaction, seen whole or not
//! at all by a second store instance on the same file, and a keyed one runs once whoever
//! repeats it.

use muster_mailbox::*;
use serde_json::json;

use super::common::*;

on_both_backends!(
    claims_from_two_instances_each_come_with_their_assignment,
    an_end_of_turn_is_all_or_nothing_for_a_second_instance,
    a_spawn_adds_the_member_with_its_records_and_mail_or_nothing,
    keyed_task_operations_run_once_whoever_repeats_them,
    a_request_number_is_given_once_per_call,
);

fn task(subject: &str, key: Option<&str>) -> NewTask {
    NewTask {
        run_id: RUN.into(),
        created_by: "lead".into(),
        subject: subject.into(),
        description: format!("do {subject}"),
        blocked_by: vec![],
        idempotency_key: key.map(str::to_owned),
    }
}

fn assignments_of(messages: &[Message], agent: &str) -> Vec<i64> {
    messages
        .iter()
        .filter(|m| m.recipient == agent && m.kind == "task_assignment")
        .map(|m| m.stored_body()["task_id"].as_i64().unwrap())
        .collect()
}

async fn claims_from_two_instances_each_come_with_their_assignment(backend: Backend) {
    let place = Place::new(backend).await;
    let db = place.location();
    let (a, b) = (db.open().await, db.open().await);
    run_with(&a, RUN, &["alice", "bob"]).await;
    for subject in ["one", "two", "three"] {
        a.create_task(task(subject, None)).await.unwrap();
    }
    let mut claimed = Vec::new();
    for _ in 0..2 {
        let (x, y) = tokio::join!(
            a.claim_next_task(RUN, "alice"),
            b.claim_next_task(RUN, "bob")
        );
        claimed.extend([x.unwrap(), y.unwrap()]);
    }
    let claimed: Vec<Claimed> = claimed.into_iter().flatten().collect();
    assert_eq!(claimed.len(), 3, "three tasks, three claims: {claimed:#?}");
    let messages = b.messages(RUN, None).await.unwrap();
    for agent in ["alice", "bob"] {
        let mut owned: Vec<i64> = b
            .tasks(RUN)
            .await
            .unwrap()
            .into_iter()
            .filter(|t| t.owner.as_deref() == Some(agent))
            .map(|t| t.task_id)
            .collect();
        owned.sort();
        let mut told = assignments_of(&messages, agent);
        told.sort();
        assert_eq!(
            owned, told,
            "{agent}: every task it owns, and only those, told by mail"
        );
    }
    for claim in &claimed {
        assert_eq!(
            claim.assignment.recipient,
            claim.task.owner.clone().unwrap()
        );
        assert_eq!(
            claim.assignment.stored_body()["task_id"],
            json!(claim.task.task_id)
        );
    }
}

async fn an_end_of_turn_is_all_or_nothing_for_a_second_instance(backend: Backend) {
    let place = Place::new(backend).await;
    let db = place.location();
    let (a, b) = (db.open().await, db.open().await);
    run_with(&a, RUN, &["alice"]).await;
    a.create_task(task("one", None)).await.unwrap();
    a.claim_next_task(RUN, "alice").await.unwrap().unwrap();
    let end = |recipient: &str| CommitTurn {
        run_id: RUN.into(),
        agent: "alice".into(),
        records: vec![NewRecord {
            agent: "alice".into(),
            stream: "transcript".into(),
            seq: None,
            body: json!({"type": "finished", "result": "done"}),
        }],
        task_updates: vec![TaskUpdate {
            run_id: RUN.into(),
            task_id: 1,
            updated_by: "alice".into(),
            status: Some(TaskStatus::Completed),
            ..TaskUpdate::default()
        }],
        sends: vec![NewMessage {
            run_id: RUN.into(),
            sender: "alice".into(),
            recipient: recipient.into(),
            body: MessageBody::IdleNotification {
                reason: "available".into(),
                summary: Some("done".into()),
                completed_task: Some(1),
            },
            idempotency_key: Some("alice:idle:5".into()),
        }],
        ..CommitTurn::default()
    };
    // Its report to someone not on the roster refuses the whole transition.
    let refused = a.commit_turn(end("nobody")).await.unwrap_err();
    assert!(
        matches!(refused, StoreError::UnknownRecipient { .. }),
        "{refused}"
    );
    assert!(
        b.records(RUN, "alice", "transcript", 0)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        b.task(RUN, 1).await.unwrap().unwrap().status,
        TaskStatus::InProgress
    );
    assert!(b.messages(RUN, Some("lead")).await.unwrap().is_empty());

    let done = a.commit_turn(end("lead")).await.unwrap();
    assert_eq!(done.tasks.len(), 1);
    assert_eq!(
        (done.tasks[0].before.status, done.tasks[0].after.status),
        (TaskStatus::InProgress, TaskStatus::Completed)
    );
    assert_eq!(
        b.records(RUN, "alice", "transcript", 0)
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        b.task(RUN, 1).await.unwrap().unwrap().status,
        TaskStatus::Completed
    );
    assert_eq!(b.messages(RUN, Some("lead")).await.unwrap().len(), 1);
    // Redone after a crash (the same keys), it sends nothing twice.
    let again = b.commit_turn(end("lead")).await.unwrap();
    assert_eq!(again.sent[0].key, done.sent[0].key);
    assert_eq!(a.messages(RUN, Some("lead")).await.unwrap().len(), 1);
}

async fn a_spawn_adds_the_member_with_its_records_and_mail_or_nothing(backend: Backend) {
    let place = Place::new(backend).await;
    let db = place.location();
    let (a, b) = (db.open().await, db.open().await);
    run_with(&a, RUN, &[]).await;
    let spawn = |to: &str| CommitTurn {
        run_id: RUN.into(),
        agent: "lead".into(),
        members: vec![RosterEntry {
            agent: "carol".into(),
            kind: MemberKind::Teammate,
            definition: Some("general".into()),
            parent: None,
        }],
        records: vec![NewRecord {
            agent: "carol".into(),
            stream: "team".into(),
            seq: None,
            body: json!({"id": "carol", "prompt": "Greet."}),
        }],
        sends: vec![NewMessage {
            run_id: RUN.into(),
            sender: "lead".into(),
            recipient: to.into(),
            body: MessageBody::Text {
                text: "welcome".into(),
                summary: None,
            },
            idempotency_key: None,
        }],
        ..CommitTurn::default()
    };
    assert!(a.commit_turn(spawn("nobody")).await.is_err());
    assert_eq!(b.roster(RUN).await.unwrap().len(), 3, "lead, human, policy");
    assert!(b.records(RUN, "carol", "team", 0).await.unwrap().is_empty());
    // The new member can be written to in the commit that adds it.
    a.commit_turn(spawn("carol")).await.unwrap();
    assert!(
        b.roster(RUN)
            .await
            .unwrap()
            .iter()
            .any(|m| m.agent == "carol")
    );
    assert_eq!(b.records(RUN, "carol", "team", 0).await.unwrap().len(), 1);
    assert_eq!(b.messages(RUN, Some("carol")).await.unwrap().len(), 1);
    let twice = b.commit_turn(spawn("carol")).await.unwrap_err();
    assert!(
        matches!(twice, StoreError::AlreadyOnRoster { .. }),
        "{twice}"
    );
}

async fn keyed_task_operations_run_once_whoever_repeats_them(backend: Backend) {
    let place = Place::new(backend).await;
    let db = place.location();
    let (a, b) = (db.open().await, db.open().await);
    run_with(&a, RUN, &["alice"]).await;
    let first = a
        .create_task(task("one", Some("lead:toolu_1")))
        .await
        .unwrap();
    let repeat = b
        .create_task(task("one", Some("lead:toolu_1")))
        .await
        .unwrap();
    assert_eq!(repeat, first, "the repeat returns the original task");
    let other = b
        .create_task(task("two", Some("lead:toolu_2")))
        .await
        .unwrap();
    assert_eq!((first.task_id, other.task_id), (1, 2));
    assert_eq!(a.tasks(RUN).await.unwrap().len(), 2);

    let assign = TaskUpdate {
        run_id: RUN.into(),
        task_id: 1,
        updated_by: "lead".into(),
        owner: Some(Some("alice".into())),
        idempotency_key: Some("lead:toolu_3".into()),
        ..TaskUpdate::default()
    };
    let change = a.update_task(assign.clone()).await.unwrap();
    assert_eq!(change.before.owner, None);
    assert_eq!(change.after.owner.as_deref(), Some("alice"));
    assert!(change.assignment.is_some());
    // Someone else changes the task; the repeated call changes nothing and answers as first.
    b.update_task(TaskUpdate {
        run_id: RUN.into(),
        task_id: 1,
        updated_by: "alice".into(),
        status: Some(TaskStatus::Completed),
        ..TaskUpdate::default()
    })
    .await
    .unwrap();
    let repeated = b.update_task(assign).await.unwrap();
    assert_eq!(repeated, change);
    let now = a.task(RUN, 1).await.unwrap().unwrap();
    assert_eq!(
        now.status,
        TaskStatus::Completed,
        "the repeat did not undo a later change"
    );
    let told = assignments_of(&a.messages(RUN, None).await.unwrap(), "alice");
    assert_eq!(told, [1], "one assignment");

    // A refused keyed operation stores nothing: its repeat is refused again.
    let cycle = TaskUpdate {
        run_id: RUN.into(),
        task_id: 1,
        updated_by: "lead".into(),
        add_blocked_by: vec![1],
        idempotency_key: Some("lead:toolu_4".into()),
        ..TaskUpdate::default()
    };
    assert!(a.update_task(cycle.clone()).await.is_err());
    assert!(b.update_task(cycle).await.is_err());
}

async fn a_request_number_is_given_once_per_call(backend: Backend) {
    let place = Place::new(backend).await;
    let db = place.location();
    let (a, b) = (db.open().await, db.open().await);
    run_with(&a, RUN, &["alice"]).await;
    let first = a
        .counter_for(RUN, "plan-alice", "alice:toolu_1")
        .await
        .unwrap();
    let repeat = b
        .counter_for(RUN, "plan-alice", "alice:toolu_1")
        .await
        .unwrap();
    let next = b
        .counter_for(RUN, "plan-alice", "alice:toolu_2")
        .await
        .unwrap();
    assert_eq!((first, repeat, next), (1, 1, 2));
    // The fork keeps what its source's calls were given.
    a.fork_run(RUN, "r2", "slug-of-r2").await.unwrap();
    let in_fork = b
        .counter_for("r2", "plan-alice", "alice:toolu_1")
        .await
        .unwrap();
    assert_eq!(in_fork, 1);
}
