//! The runtime's run events against the store: each `agent_state` follows the commit it
//! reports (checked by reading the store from inside the event sink, at the moment the event
//! is emitted), through a teammate's wait on its lead; a file edit's `tool_call` carries its
//! input, its result and its diff.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::sync::{Arc, Mutex};

use muster_agents::runtime::{EventSink, PlanApprover, RunContext, RunEvent, TRANSCRIPT};
use muster_config::PermissionMode;
use muster_fake_llm::{Block, ScriptEntry};
use muster_mailbox::*;
use muster_protocol::AgentState;
use serde_json::{Value, json};

use super::harness::{GUARD, RunHarness, finished, run, start, teammate};

/// What the store held when an `agent_state` event was emitted.
#[derive(Debug)]
struct Seen {
    state: AgentState,
    /// The `type` of alice's newest transcript record, and the role of her newest message.
    last_record: String,
    last_role: Option<String>,
    /// The permission request, as committed so far.
    request: Option<RequestRecord>,
}

/// Keeps every event; at each `agent_state`, reads the store (blocking the emitting task, so
/// the store is seen exactly as it was when the event was emitted).
struct StoreWitness {
    store: Arc<SqliteStore>,
    events: Mutex<Vec<RunEvent>>,
    seen: Mutex<Vec<Seen>>,
    changed: tokio::sync::Notify,
}

impl StoreWitness {
    fn look(&self, state: AgentState) -> Seen {
        let store = self.store.clone();
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(async move {
                let records = store.records("r1", "alice", TRANSCRIPT, 0).await.unwrap();
                let last = records.last().map(|r| r.body.clone()).unwrap_or_default();
                let last_message = records
                    .iter()
                    .rev()
                    .find(|r| r.body["type"] == "message")
                    .map(|r| r.body["message"]["role"].as_str().unwrap().to_owned());
                Seen {
                    state,
                    last_record: last["type"].as_str().unwrap_or_default().to_owned(),
                    last_role: last_message,
                    request: store.request("r1", "perm-alice-1").await.unwrap(),
                }
            })
        })
    }

    async fn wait_for(&self, matches: impl Fn(&RunEvent) -> bool) {
        loop {
            let notified = self.changed.notified();
            if self.events.lock().unwrap().iter().any(&matches) {
                return;
            }
            tokio::time::timeout(GUARD, notified)
                .await
                .expect("guard timeout");
        }
    }
}

impl EventSink for StoreWitness {
    fn emit(&self, event: RunEvent) {
        if let RunEvent::AgentState { agent, state } = &event
            && agent == "alice"
        {
            let seen = self.look(state.clone());
            self.seen.lock().unwrap().push(seen);
        }
        self.events.lock().unwrap().push(event);
        self.changed.notify_waiters();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn agent_states_follow_commits_through_a_wait_on_the_lead() {
    let h = RunHarness::setup()
        .team("t")
        .start(vec![
            ScriptEntry::reply(
                "alice",
                1,
                vec![Block::tool_use(
                    "Write",
                    json!({"file_path": "hello.txt", "content": "hello\n"}),
                )],
            ),
            ScriptEntry::reply("alice", 2, vec![Block::text("Greeted.")]),
        ])
        .await;
    h.member("lead", MemberKind::Lead).await;
    h.member("alice", MemberKind::Teammate).await;
    let witness = Arc::new(StoreWitness {
        store: h.store.clone(),
        events: Mutex::default(),
        seen: Mutex::default(),
        changed: tokio::sync::Notify::new(),
    });
    let context = Arc::new(RunContext {
        agent_models: Default::default(),
        epoch: h.store.open_epoch("r1").await.unwrap(),
        events: witness.clone(),
        ..h.run_context(PlanApprover::Human)
    });
    let mut alice = start(
        context,
        teammate("alice", PermissionMode::Default),
        "Greet.",
    )
    .await;
    let task = tokio::spawn(async move { run(&mut alice).await });

    // alice waits on the lead: the request is committed, and nothing answers it yet.
    witness
        .wait_for(|e| {
            matches!(
                e,
                RunEvent::AgentState {
                    state: AgentState::WaitingOnDecision { .. },
                    ..
                }
            )
        })
        .await;
    let pending = h
        .store
        .request("r1", "perm-alice-1")
        .await
        .unwrap()
        .unwrap();
    assert!(pending.response.is_none());
    assert!(!h.workspace().join("hello.txt").exists());
    h.store
        .respond(NewResponse {
            run_id: "r1".into(),
            sender: "lead".into(),
            body: MessageBody::PermissionResponse {
                request_id: "perm-alice-1".into(),
                approved: true,
                feedback: None,
                rule: None,
            },
            idempotency_key: None,
        })
        .await
        .unwrap();
    assert_eq!(
        tokio::time::timeout(GUARD, task).await.unwrap().unwrap(),
        finished("Greeted.")
    );

    let write_call = {
        let events = witness.events.lock().unwrap();
        events
            .iter()
            .find_map(|e| match e {
                RunEvent::ToolCall { tool_use_id, .. } => Some(tool_use_id.clone()),
                _ => None,
            })
            .unwrap()
    };
    let calling = AgentState::CallingTool {
        tool_use_id: write_call.clone(),
        tool: "Write".into(),
    };
    let seen = witness.seen.lock().unwrap();
    let states: Vec<&AgentState> = seen.iter().map(|s| &s.state).collect();
    assert_eq!(
        states,
        [
            &AgentState::Thinking,
            &calling,
            &AgentState::WaitingOnDecision {
                request_id: "perm-alice-1".into()
            },
            &calling,
            &AgentState::Thinking,
            &AgentState::Idle,
        ],
        "{seen:#?}"
    );
    // Each state was reported after the commit it follows from.
    let expect = [
        // The prompt is committed: a user turn ends the context.
        ("message", Some("user"), None),
        // The response asking for the call is committed.
        ("message", Some("assistant"), None),
        // The request is committed, unanswered.
        ("message", Some("assistant"), Some(false)),
        // The lead's answer is committed.
        ("message", Some("assistant"), Some(true)),
        // The call's result and the results message are committed.
        ("message", Some("user"), Some(true)),
        // The end of the turn is committed.
        ("finished", Some("assistant"), Some(true)),
    ];
    for (seen, (record, role, answered)) in seen.iter().zip(expect) {
        assert_eq!(seen.last_record, record, "{seen:#?}");
        assert_eq!(seen.last_role.as_deref(), role, "{seen:#?}");
        assert_eq!(
            seen.request.as_ref().map(|r| r.response.is_some()),
            answered,
            "{seen:#?}"
        );
    }
    drop(seen);

    // The edit's tool_call carries the input, the result the model saw and the diff.
    let events = witness.events.lock().unwrap();
    let Some(RunEvent::ToolCall {
        input,
        content,
        diff,
        is_error,
        ..
    }) = events
        .iter()
        .find(|e| matches!(e, RunEvent::ToolCall { .. }))
    else {
        unreachable!("found above")
    };
    assert!(!is_error, "{content}");
    assert_eq!(
        *input,
        json!({"file_path": "hello.txt", "content": "hello\n"})
    );
    let stored: Vec<Value> = tokio::task::block_in_place(|| {
        tokio::runtime::Handle::current().block_on(async {
            h.store
                .records("r1", "alice", TRANSCRIPT, 0)
                .await
                .unwrap()
                .into_iter()
                .map(|r| r.body)
                .collect()
        })
    });
    let recorded = stored.iter().find(|r| r["type"] == "tool_call").unwrap();
    assert_eq!(recorded["content"], content.as_str());
    assert_eq!(
        diff.as_deref(),
        Some("--- /dev/null\n+++ b/hello.txt\n@@ -0,0 +1 @@\n+hello\n")
    );
    // Its start came before it, and is the only event besides model_delta not durable.
    let started = events
        .iter()
        .position(|e| matches!(e, RunEvent::ToolStarted { tool_use_id, .. } if *tool_use_id == write_call))
        .unwrap();
    let called = events
        .iter()
        .position(|e| matches!(e, RunEvent::ToolCall { .. }))
        .unwrap();
    assert!(started < called);
    assert!(!events[started].is_durable());
}
