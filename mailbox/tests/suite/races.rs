//! Races between two store instances on one store (a file, a schema), in two real processes.

use muster_mailbox::*;

use super::child::{Action, spawn};
use super::common::*;

on_both_backends!(
    two_processes_claim_one_task_and_exactly_one_wins,
    two_processes_answer_one_request_and_exactly_one_is_accepted,
);

async fn two_processes_claim_one_task_and_exactly_one_wins(backend: Backend) {
    let place = Place::new(backend).await;
    let db = place.location();
    {
        let store = db.open().await;
        run_with(&store, RUN, &["alice", "bob"]).await;
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
    }
    for round in 0..3 {
        let mut a = spawn(&Action::Claim {
            db: db.clone(),
            agent: "alice".into(),
        });
        let mut b = spawn(&Action::Claim {
            db: db.clone(),
            agent: "bob".into(),
        });
        a.go();
        b.go();
        let outcomes = [a.next_event().unwrap(), b.next_event().unwrap()];
        let expected_winners = usize::from(round == 0);
        let winners = outcomes.iter().filter(|o| *o == "won").count();
        assert_eq!(winners, expected_winners, "round {round}: {outcomes:?}");
        assert!(
            outcomes
                .iter()
                .filter(|o| *o != "won")
                .all(|o| o.contains("already claimed by")),
            "{outcomes:?}"
        );
    }
    let store = db.open().await;
    let task = store.task(RUN, 1).await.unwrap().unwrap();
    assert!(task.owner.is_some());
}

async fn two_processes_answer_one_request_and_exactly_one_is_accepted(backend: Backend) {
    let place = Place::new(backend).await;
    let db = place.location();
    {
        let store = db.open().await;
        run_with(&store, RUN, &["alice"]).await;
        store
            .send(NewMessage {
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
    }
    let mut approve = spawn(&Action::Respond {
        db: db.clone(),
        approved: true,
    });
    let mut reject = spawn(&Action::Respond {
        db: db.clone(),
        approved: false,
    });
    approve.go();
    reject.go();
    let outcomes = [approve.next_event().unwrap(), reject.next_event().unwrap()];
    assert_eq!(
        outcomes.iter().filter(|o| *o == "accepted").count(),
        1,
        "{outcomes:?}"
    );
    let refused = outcomes.iter().find(|o| *o != "accepted").unwrap();
    assert!(
        refused.contains("was already decided by human"),
        "{refused}"
    );
    let store = db.open().await;
    let responses = store.messages(RUN, Some("alice")).await.unwrap();
    assert_eq!(responses.len(), 1, "one response message, not two");
    let decided = store
        .request(RUN, "plan-alice-1")
        .await
        .unwrap()
        .unwrap()
        .response
        .unwrap();
    assert_eq!(
        decided.stored_body()["approved"],
        responses[0].stored_body()["approved"]
    );
}
