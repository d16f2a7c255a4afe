//! Every `RunEvent` variant against its documented `stream-json` line (the module's table in
//! `src/event.rs`), read back from that line, and with its durability.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use muster_protocol::{
    AgentState, ApprovalSubject, BudgetSpend, DecisionSubject, DeltaKind, MessageKind, RunEvent,
    TokenUsage,
};
use serde_json::{Value, json};

/// A position per variant; a new variant does not compile here until it has a row below.
fn variant(event: &RunEvent) -> usize {
    match event {
        RunEvent::AgentStarted { .. } => 0,
        RunEvent::ModelTurn { .. } => 1,
        RunEvent::ModelDelta { .. } => 2,
        RunEvent::ToolStarted { .. } => 3,
        RunEvent::ToolCall { .. } => 4,
        RunEvent::ModeChanged { .. } => 5,
        RunEvent::ApprovalRequested { .. } => 6,
        RunEvent::ApprovalDecided { .. } => 7,
        RunEvent::MailSent { .. } => 8,
        RunEvent::MailDelivered { .. } => 9,
        RunEvent::TaskClaimed { .. } => 10,
        RunEvent::TaskCompleted { .. } => 11,
        RunEvent::Verification { .. } => 12,
        RunEvent::MergeApplied { .. } => 13,
        RunEvent::TeammatePlaced { .. } => 14,
        RunEvent::TeammateFinished { .. } => 15,
        RunEvent::AgentState { .. } => 16,
        RunEvent::RunFinished { .. } => 17,
        RunEvent::BudgetWait { .. } => 18,
    }
}
const VARIANTS: usize = 19;

/// The line's envelope for `kind` by `agent`, then `fields`.
fn line(kind: &str, agent: &str, fields: Value) -> Value {
    let mut line = json!({"v": 1, "type": kind, "ts": 7, "run_id": "r1", "agent": agent});
    line.as_object_mut()
        .unwrap()
        .extend(fields.as_object().unwrap().clone());
    line
}

/// Each event with the line it prints.
fn table() -> Vec<(RunEvent, Value)> {
    let s = |text: &str| text.to_owned();
    vec![
        (
            RunEvent::AgentStarted {
                agent: s("main"),
                definition: s("general"),
                mode: s("default"),
                plan_file: None,
            },
            line(
                "agent_started",
                "main",
                json!({"definition": "general", "mode": "default", "plan_file": null}),
            ),
        ),
        (
            RunEvent::ModelTurn {
                agent: s("main"),
                turn: 2,
                model: s("claude-sonnet-4-5"),
                provider: Some(s("anthropic")),
                mode: s("acceptEdits"),
                stop_reason: s("tool_use"),
                text: s("Reading."),
                latency_ms: 12.345_678,
                usage: TokenUsage {
                    input_tokens: 100,
                    output_tokens: 20,
                    cache_read_input_tokens: 3,
                    cache_creation_input_tokens: 4,
                },
                cost_usd: Some(0.5),
            },
            line(
                "model_turn",
                "main",
                json!({"turn": 2, "model": "claude-sonnet-4-5", "provider": "anthropic", "mode": "acceptEdits",
                       "stop_reason": "tool_use", "text": "Reading.", "latency_ms": 12.346,
                       "usage": {"input_tokens": 100, "output_tokens": 20,
                                 "cache_read_input_tokens": 3,
                                 "cache_creation_input_tokens": 4},
                       "cost_usd": 0.5}),
            ),
        ),
        (
            RunEvent::ModelDelta {
                agent: s("main"),
                turn: 1,
                attempt: 2,
                delta: DeltaKind::ToolInput,
                text: s("{\"pa"),
            },
            line(
                "model_delta",
                "main",
                json!({"turn": 1, "attempt": 2, "delta": "tool_input", "text": "{\"pa",
                       "durable": false}),
            ),
        ),
        (
            RunEvent::ToolStarted {
                agent: s("alice"),
                tool_use_id: s("toolu_1"),
                tool: s("Bash"),
                input: json!({"command": "ls"}),
            },
            line(
                "tool_started",
                "alice",
                json!({"tool_use_id": "toolu_1", "tool": "Bash", "input": {"command": "ls"},
                       "durable": false}),
            ),
        ),
        (
            RunEvent::ToolCall {
                agent: s("alice"),
                tool_use_id: s("toolu_2"),
                tool: s("Write"),
                decision: s("allow"),
                reason: s("acceptEdits allows file tools in the workspace"),
                is_error: false,
                input: json!({"file_path": "a.txt", "content": "a\n"}),
                content: s("Wrote a.txt"),
                diff: Some(s("--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+a\n")),
                sandbox: None,
            },
            line(
                "tool_call",
                "alice",
                json!({"tool_use_id": "toolu_2", "tool": "Write", "decision": "allow",
                       "reason": "acceptEdits allows file tools in the workspace",
                       "is_error": false,
                       "input": {"file_path": "a.txt", "content": "a\n"},
                       "content": "Wrote a.txt",
                       "diff": "--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+a\n"}),
            ),
        ),
        (
            RunEvent::ModeChanged {
                agent: s("alice"),
                mode: s("plan"),
                reason: s("EnterPlanMode"),
            },
            line(
                "mode_changed",
                "alice",
                json!({"mode": "plan", "reason": "EnterPlanMode"}),
            ),
        ),
        (
            RunEvent::ApprovalRequested {
                agent: s("alice"),
                request_id: s("plan-alice-1"),
                responder: s("lead"),
                subject: ApprovalSubject::PlanApprovalRequest {
                    plan_file: s(".muster/plans/calm-agent-alice.md"),
                },
            },
            line(
                "approval_requested",
                "alice",
                json!({"request_id": "plan-alice-1", "responder": "lead",
                       "kind": "plan_approval_request",
                       "plan_file": ".muster/plans/calm-agent-alice.md"}),
            ),
        ),
        (
            RunEvent::ApprovalDecided {
                agent: s("bob"),
                request_id: s("merge-bob-1"),
                responder: s("policy:merge.toml"),
                approved: true,
                subject: DecisionSubject::Merge {
                    feedback: None,
                    rule: Some(s("max_files")),
                },
            },
            line(
                "approval_decided",
                "bob",
                json!({"request_id": "merge-bob-1", "responder": "policy:merge.toml",
                       "approved": true, "kind": "merge", "feedback": null,
                       "rule": "max_files"}),
            ),
        ),
        (
            RunEvent::MailSent {
                from: s("alice"),
                to: s("lead"),
                kind: MessageKind::PermissionRequest,
                request_id: Some(s("perm-alice-1")),
            },
            line(
                "mail_sent",
                "alice",
                json!({"from": "alice", "to": "lead", "kind": "permission_request",
                       "request_id": "perm-alice-1"}),
            ),
        ),
        (
            RunEvent::MailDelivered {
                agent: s("lead"),
                from: s("alice"),
                kind: MessageKind::Other(s("from_a_newer_muster")),
                request_id: None,
                queued_ms: 40,
            },
            line(
                "mail_delivered",
                "lead",
                json!({"from": "alice", "kind": "from_a_newer_muster", "request_id": null,
                       "queued_ms": 40}),
            ),
        ),
        (
            RunEvent::TaskClaimed {
                agent: s("bob"),
                task_id: 3,
                subject: s("Greet"),
            },
            line(
                "task_claimed",
                "bob",
                json!({"task_id": 3, "subject": "Greet"}),
            ),
        ),
        (
            RunEvent::TaskCompleted {
                agent: s("bob"),
                task_id: 3,
                subject: s("Greet"),
            },
            line(
                "task_completed",
                "bob",
                json!({"task_id": 3, "subject": "Greet"}),
            ),
        ),
        (
            RunEvent::Verification {
                agent: s("alice"),
                request_id: Some(s("plan-alice-1")),
                plan_file: Some(s(".muster/plans/calm-agent-alice.md")),
                summary: json!({"steps_done": 1, "steps_missing": 0}),
            },
            line(
                "verification",
                "alice",
                json!({"request_id": "plan-alice-1",
                       "plan_file": ".muster/plans/calm-agent-alice.md",
                       "summary": {"steps_done": 1, "steps_missing": 0}}),
            ),
        ),
        (
            RunEvent::MergeApplied {
                agent: s("bob"),
                request_id: s("merge-bob-1"),
                commit: s("0123abcd"),
                files: 2,
            },
            line(
                "merge_applied",
                "bob",
                json!({"request_id": "merge-bob-1", "commit": "0123abcd", "files": 2}),
            ),
        ),
        (
            RunEvent::TeammatePlaced {
                agent: s("alice"),
                worker: s("w1"),
                attempt: 1,
                item: s("r1/alice"),
            },
            line(
                "teammate_placed",
                "alice",
                json!({"worker": "w1", "attempt": 1, "item": "r1/alice"}),
            ),
        ),
        (
            RunEvent::TeammateFinished {
                agent: s("alice"),
                worker: Some(s("w1")),
                item: s("r1/alice"),
                result: Some(json!({"status": "done"})),
            },
            line(
                "teammate_finished",
                "alice",
                json!({"worker": "w1", "item": "r1/alice", "result": {"status": "done"}}),
            ),
        ),
        (
            RunEvent::BudgetWait {
                agent: s("bob"),
                in_flight: 1,
                reserved: BudgetSpend {
                    turns: 1,
                    tokens: 32_770,
                    cost_usd: 32.77,
                },
                spent: BudgetSpend {
                    turns: 1,
                    tokens: 601,
                    cost_usd: 0.601,
                },
                estimate: BudgetSpend {
                    turns: 1,
                    tokens: 32_900,
                    cost_usd: 32.9,
                },
            },
            line(
                "budget_wait",
                "bob",
                json!({"in_flight": 1,
                       "reserved": {"turns": 1, "tokens": 32_770, "cost_usd": 32.77},
                       "spent": {"turns": 1, "tokens": 601, "cost_usd": 0.601},
                       "estimate": {"turns": 1, "tokens": 32_900, "cost_usd": 32.9}}),
            ),
        ),
        (
            RunEvent::AgentState {
                agent: s("alice"),
                state: AgentState::WaitingOnDecision {
                    request_id: s("perm-alice-1"),
                },
            },
            line(
                "agent_state",
                "alice",
                json!({"state": "waiting_on_decision", "request_id": "perm-alice-1"}),
            ),
        ),
        (
            RunEvent::RunFinished {
                agent: s("lead"),
                status: s("awaiting_decision"),
                exit_code: 5,
                result: json!({"request_id": "plan-lead-1", "plan_file": "p.md"})
                    .as_object()
                    .unwrap()
                    .clone(),
            },
            line(
                "run_finished",
                "lead",
                json!({"status": "awaiting_decision", "exit_code": 5,
                       "request_id": "plan-lead-1", "plan_file": "p.md"}),
            ),
        ),
    ]
}

#[test]
fn each_run_event_prints_its_documented_stream_json_line_and_reads_back() {
    let table = table();
    let mut covered: Vec<usize> = table.iter().map(|(event, _)| variant(event)).collect();
    covered.sort_unstable();
    covered.dedup();
    assert_eq!(
        covered,
        (0..VARIANTS).collect::<Vec<_>>(),
        "a row per variant"
    );
    for (event, expected) in table {
        let printed = event.to_line("r1", 7);
        assert_eq!(printed, expected, "{}", event.kind());
        assert_eq!(printed["type"], event.kind());
        assert_eq!(printed["agent"], event.agent());
        // Read back, it prints the same line (latency_ms was already rounded when printed).
        assert_eq!(
            RunEvent::from_line(&printed).unwrap().to_line("r1", 7),
            printed,
            "{} reads back",
            event.kind()
        );
    }
}

#[test]
fn only_model_delta_and_tool_started_are_not_durable() {
    let not_durable: Vec<&str> = table()
        .iter()
        .filter(|(event, _)| !event.is_durable())
        .map(|(event, _)| event.kind())
        .collect();
    assert_eq!(not_durable, ["model_delta", "tool_started"]);
}

#[test]
fn every_agent_state_prints_its_state_and_what_it_is_about() {
    let cases = [
        (AgentState::Thinking, json!({"state": "thinking"})),
        (
            AgentState::CallingTool {
                tool_use_id: "toolu_1".into(),
                tool: "Read".into(),
            },
            json!({"state": "calling_tool", "tool_use_id": "toolu_1", "tool": "Read"}),
        ),
        (
            AgentState::WaitingOnDecision {
                request_id: "plan-bob-2".into(),
            },
            json!({"state": "waiting_on_decision", "request_id": "plan-bob-2"}),
        ),
        (AgentState::Idle, json!({"state": "idle"})),
    ];
    for (state, fields) in cases {
        let event = RunEvent::AgentState {
            agent: "bob".into(),
            state,
        };
        assert_eq!(event.to_line("r1", 7), line("agent_state", "bob", fields));
        assert_eq!(RunEvent::from_line(&event.to_line("r1", 7)).unwrap(), event);
    }
}

#[test]
fn a_line_muster_did_not_write_is_refused_with_the_reason() {
    let cases = [
        (json!([1]), "must be a JSON object"),
        (
            json!({"v": 2, "type": "agent_started", "agent": "main"}),
            "version 2",
        ),
        (
            json!({"v": 1, "type": "no_such_event", "agent": "main"}),
            "no_such_event",
        ),
        (
            json!({"v": 1, "type": "task_claimed", "agent": "bob", "subject": "x"}),
            "task_id",
        ),
    ];
    for (line, expected) in cases {
        let error = RunEvent::from_line(&line).unwrap_err().to_string();
        assert!(error.contains(expected), "{line}: {error}");
    }
}

#[test]
fn a_line_from_before_the_added_fields_still_reads() {
    // muster's lines before usage, provider, input, content and diff were added.
    let model_turn = json!({"v": 1, "type": "model_turn", "ts": 1, "run_id": "r1",
        "agent": "main", "turn": 1, "model": "m", "mode": "default", "stop_reason": "end_turn",
        "text": "hi", "latency_ms": 3.5});
    let RunEvent::ModelTurn {
        usage,
        cost_usd,
        provider,
        ..
    } = RunEvent::from_line(&model_turn).unwrap()
    else {
        panic!("not a model_turn");
    };
    assert_eq!((usage, cost_usd), (TokenUsage::default(), None));
    assert_eq!(provider, None);
    let tool_call = json!({"v": 1, "type": "tool_call", "ts": 1, "run_id": "r1",
        "agent": "main", "tool_use_id": "t", "tool": "Read", "decision": "allow",
        "reason": "read-only", "is_error": false});
    let RunEvent::ToolCall {
        input,
        content,
        diff,
        ..
    } = RunEvent::from_line(&tool_call).unwrap()
    else {
        panic!("not a tool_call");
    };
    assert_eq!((input, content, diff), (Value::Null, String::new(), None));
}
