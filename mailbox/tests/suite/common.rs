//! Helpers shared by the suites.

use std::path::Path;
use std::time::Duration;

use muster_mailbox::*;
use serde_json::json;

pub const RUN: &str = "r1";

pub fn open(path: &Path) -> SqliteStore {
    SqliteStore::open(path, StoreOptions::default()).unwrap()
}

pub fn open_with(path: &Path, options: StoreOptions) -> SqliteStore {
    SqliteStore::open(path, options).unwrap()
}

pub fn new_run(id: &str) -> NewRun {
    NewRun {
        id: id.into(),
        slug: format!("slug-of-{id}"),
        team: Some("t".into()),
        workspace: "/ws".into(),
        batch_line_id: None,
        auto_gate: AutoGate {
            open: true,
            consecutive_denials: 0,
            limit: 3,
        },
        launch_options: json!({"provider": "script"}),
    }
}

/// A run with a lead and the given teammates.
pub async fn run_with(store: &SqliteStore, id: &str, teammates: &[&str]) -> i64 {
    store.create_run(new_run(id)).await.unwrap();
    store
        .add_member(
            id,
            RosterEntry {
                agent: "lead".into(),
                kind: MemberKind::Lead,
                definition: Some("lead".into()),
                parent: None,
            },
        )
        .await
        .unwrap();
    for name in teammates {
        store
            .add_member(
                id,
                RosterEntry {
                    agent: (*name).into(),
                    kind: MemberKind::Teammate,
                    definition: Some("general".into()),
                    parent: None,
                },
            )
            .await
            .unwrap();
    }
    store.open_epoch(id).await.unwrap()
}

pub fn text(run: &str, from: &str, to: &str, text: &str) -> NewMessage {
    NewMessage {
        run_id: run.into(),
        sender: from.into(),
        recipient: to.into(),
        body: MessageBody::Text {
            text: text.into(),
            summary: None,
        },
        idempotency_key: None,
    }
}

pub fn text_of(message: &Message) -> String {
    match message.typed_body() {
        MessageBody::Text { text, .. } => text,
        other => panic!("not a text message: {other:?}"),
    }
}

/// A failure guard for waits on events; never a way to wait.
pub const GUARD: Duration = Duration::from_secs(20);
