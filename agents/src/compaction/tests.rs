use muster_config::settings::ModelInfo;
use serde_json::json;

use super::rebuild::{recent_user_messages, strip_reminders, truncate_to_tokens};
use super::*;
use crate::model::{ContentBlock, Message, Role, Usage};

fn assistant_calls(ids: &[&str]) -> Message {
    Message::assistant(
        ids.iter()
            .map(|id| ContentBlock::ToolUse {
                id: (*id).into(),
                name: "Read".into(),
                input: json!({"path": "a"}),
            })
            .collect(),
    )
}

fn results(ids: &[&str]) -> Message {
    Message {
        role: Role::User,
        content: ids
            .iter()
            .map(|id| ContentBlock::tool_result(*id, "ok"))
            .collect(),
    }
}

#[test]
fn estimate_is_chars_over_four_rounded_up() {
    let table = [("", 0), ("a", 1), ("abcd", 1), ("abcde", 2), ("ééééé", 2)];
    for (text, want) in table {
        assert_eq!(estimate_tokens(text), want, "{text:?}");
    }
}

#[test]
fn threshold_is_the_lower_of_fraction_and_reserve() {
    let info = |window, max_output| ModelInfo {
        context_window: window,
        max_output,
        ..ModelInfo::default()
    };
    let config = CompactionConfig::default();
    let table = [
        (info(Some(200_000), Some(64_000)), config, Some(123_000)),
        (info(Some(200_000), None), config, Some(170_000)),
        (info(None, Some(64_000)), config, None),
        (info(Some(10_000), Some(20_000)), config, Some(0)),
        // A small window (a local server's): the reserve shrinks to an eighth of it.
        (info(Some(8_192), Some(2_048)), config, Some(5_120)),
        // Unless the full reserve still leaves a quarter of the window.
        (info(Some(20_000), Some(1_000)), config, Some(6_000)),
        (
            info(Some(200_000), Some(8_000)),
            CompactionConfig {
                max_prompt_tokens: Some(100_000),
                ..config
            },
            Some(100_000),
        ),
        (
            info(Some(200_000), Some(8_000)),
            CompactionConfig {
                max_prompt_tokens: Some(190_000),
                ..config
            },
            Some(170_000),
        ),
        (
            info(Some(200_000), Some(8_000)),
            CompactionConfig {
                trigger_ratio: f64::NAN,
                ..config
            },
            Some(170_000),
        ),
        (
            info(Some(200_000), Some(8_000)),
            CompactionConfig {
                trigger_ratio: 7.0,
                ..config
            },
            Some(179_000),
        ),
        (
            info(Some(200_000), Some(8_000)),
            CompactionConfig {
                enabled: false,
                ..config
            },
            None,
        ),
    ];
    for (info, config, want) in table {
        assert_eq!(
            compaction_threshold(&info, &config),
            want,
            "{info:?} {config:?}"
        );
    }
}

#[test]
fn trigger_counts_input_and_both_cache_kinds() {
    let info = ModelInfo {
        context_window: Some(100_000),
        max_output: Some(10_000),
        ..ModelInfo::default()
    };
    // Threshold: min(85,000, 77,000) = 77,000.
    let config = CompactionConfig::default();
    let usage = Usage {
        input_tokens: 1_000,
        output_tokens: 50_000,
        cache_read_tokens: 60_000,
        cache_write_tokens: 10_000,
    };
    assert!(!needs_compaction(&usage, 5_999, &info, &config));
    assert!(needs_compaction(&usage, 6_000, &info, &config));
    assert!(!needs_compaction(
        &Usage::default(),
        u64::MAX - 1,
        &ModelInfo::default(),
        &config
    ));
    assert!(needs_compaction(
        &Usage {
            input_tokens: u64::MAX,
            cache_read_tokens: u64::MAX,
            ..Usage::default()
        },
        u64::MAX,
        &info,
        &config
    ));
}

#[test]
fn cut_cases() {
    let signed = Message::assistant(vec![
        ContentBlock::Thinking {
            thinking: "hmm".into(),
            signature: "sig".into(),
        },
        ContentBlock::text("done"),
    ]);
    let unsigned = Message::assistant(vec![
        ContentBlock::Thinking {
            thinking: "hmm".into(),
            signature: String::new(),
        },
        ContentBlock::text("done"),
    ]);
    let redacted = Message::assistant(vec![ContentBlock::Other(
        json!({"type": "redacted_thinking", "data": "xyz"}),
    )]);
    let table: Vec<(&str, Vec<Message>, usize, CutLimit)> = vec![
        ("empty", vec![], 0, CutLimit::TurnBoundary),
        (
            "one prompt",
            vec![Message::user("go")],
            1,
            CutLimit::EndOfContext,
        ),
        (
            "answered exchange",
            vec![
                Message::user("go"),
                assistant_calls(&["a"]),
                results(&["a"]),
            ],
            3,
            CutLimit::EndOfContext,
        ),
        (
            "unanswered call kept",
            vec![
                Message::user("go"),
                assistant_calls(&["a"]),
                results(&["a"]),
                assistant_calls(&["b"]),
            ],
            3,
            CutLimit::UnansweredToolCall,
        ),
        (
            "partly answered call kept",
            vec![
                Message::user("go"),
                assistant_calls(&["a", "b"]),
                results(&["a"]),
            ],
            1,
            CutLimit::UnansweredToolCall,
        ),
        (
            "latest signed thinking kept",
            vec![
                Message::user("go"),
                signed.clone(),
                Message::user("more"),
                Message::assistant(vec![ContentBlock::text("ok")]),
            ],
            1,
            CutLimit::LatestThinking,
        ),
        (
            "unsigned thinking is not kept",
            vec![Message::user("go"), unsigned, Message::user("more")],
            3,
            CutLimit::EndOfContext,
        ),
        (
            "redacted thinking kept",
            vec![Message::user("go"), redacted, Message::user("more")],
            1,
            CutLimit::LatestThinking,
        ),
        (
            "orphan result at the front is never the start",
            vec![results(&["zzz"]), Message::user("go")],
            2,
            CutLimit::EndOfContext,
        ),
    ];
    for (name, messages, index, limit) in table {
        let cut = plan_cut(&messages);
        assert_eq!((cut.index, cut.limit), (index, limit), "{name}");
    }
}

#[test]
fn reminders_are_stripped() {
    let table = [
        ("hello", "hello"),
        ("a<system-reminder>\nMode: plan\n</system-reminder>b", "ab"),
        ("a<system-reminder>unclosed", "a"),
        (
            "<system-reminder>x</system-reminder>mid<system-reminder>y</system-reminder>",
            "mid",
        ),
    ];
    for (text, want) in table {
        assert_eq!(strip_reminders(text), want, "{text:?}");
    }
}

#[test]
fn truncation_fits_the_budget_and_keeps_both_ends() {
    let text = format!("HEAD{}TAIL", "x".repeat(10_000));
    for tokens in [0u64, 5, 12, 20, 100, 2_000, 5_000] {
        match truncate_to_tokens(&text, tokens) {
            Some(out) => {
                assert!(estimate_tokens(&out) <= tokens, "{tokens}: {}", out.len());
                assert!(out.starts_with("HEAD") || tokens < 30, "{tokens}");
                assert!(out.ends_with("TAIL") || tokens < 30, "{tokens}");
            }
            None => assert!(tokens < 20, "{tokens}"),
        }
    }
    assert_eq!(truncate_to_tokens("short", 100).as_deref(), Some("short"));
}

#[test]
fn recent_messages_newest_first_within_budget() {
    let messages = vec![
        Message::user("a".repeat(400)),
        Message::user("b".repeat(40)),
        results(&["x"]),
        Message::user("c".repeat(40)),
    ];
    // 100 + 10 + 10 tokens; a budget of 50 keeps c and b whole and a cut to 30 tokens.
    let kept = recent_user_messages(&messages, 50);
    assert_eq!(kept.len(), 3);
    assert!(kept[0].starts_with('a') && kept[0].contains("cut by compaction"));
    assert_eq!(kept[1], "b".repeat(40));
    assert_eq!(kept[2], "c".repeat(40));
    let total: u64 = kept.iter().map(|t| estimate_tokens(t)).sum();
    assert!(total <= 50);
    assert!(recent_user_messages(&messages, 0).is_empty());
}

mod coordination_state {
    use muster_mailbox::TaskStatus;

    use super::super::{
        BoardTask, CoordinationState, MailEntry, OpenRequest, estimate_tokens,
        render_coordination_state,
    };

    fn mail(kind: &str, sender: &str, request_id: Option<&str>, leased: bool) -> MailEntry {
        MailEntry {
            kind: kind.into(),
            sender: sender.into(),
            request_id: request_id.map(Into::into),
            leased,
        }
    }

    fn request(id: &str, kind: &str, requester: &str, responder: &str) -> OpenRequest {
        OpenRequest {
            request_id: id.into(),
            kind: kind.into(),
            requester: requester.into(),
            responder: responder.into(),
        }
    }

    fn task(
        id: i64,
        title: &str,
        status: TaskStatus,
        owner: Option<&str>,
        by: &[i64],
    ) -> BoardTask {
        BoardTask {
            id,
            title: title.into(),
            status,
            owner: owner.map(Into::into),
            blocked_by: by.to_vec(),
        }
    }

    fn state(agent: &str) -> CoordinationState {
        CoordinationState {
            agent: agent.into(),
            ..CoordinationState::default()
        }
    }

    #[test]
    fn rendering_table() {
        let many_tasks: Vec<BoardTask> = (1..=60)
            .map(|id| {
                task(
                    id,
                    &format!("Task number {id}"),
                    TaskStatus::Pending,
                    None,
                    &[],
                )
            })
            .collect();
        let cases: Vec<(&str, CoordinationState, u64, Option<&str>)> = vec![
            ("nothing to say", state("main"), 1_500, None),
            (
                "single run: mail and a pending plan",
                CoordinationState {
                    mail: vec![
                        mail("text", "human", None, false),
                        mail("permission_response", "policy", Some("perm-main-1"), true),
                    ],
                    waiting_for: vec![request(
                        "plan-main-1",
                        "plan_approval_request",
                        "main",
                        "human",
                    )],
                    ..state("main")
                },
                1_500,
                Some(
                    "You are main.\n\
                     Mailbox: 2 unread (1 taken but not yet acknowledged).\n\
                     - text from human\n\
                     - permission_response from policy (request perm-main-1)\n\
                     Your requests waiting for an answer: 1.\n\
                     - plan-main-1 (plan_approval_request) to human",
                ),
            ),
            (
                "lead: requests to answer and the board, own open tasks first, finished last",
                CoordinationState {
                    to_answer: vec![request(
                        "plan-alice-1",
                        "plan_approval_request",
                        "alice",
                        "lead",
                    )],
                    board: Some(vec![
                        task(
                            1,
                            "Write the parser",
                            TaskStatus::Completed,
                            Some("alice"),
                            &[],
                        ),
                        task(2, "Test the parser", TaskStatus::Pending, None, &[3]),
                        task(3, "Review", TaskStatus::InProgress, Some("lead"), &[]),
                        task(4, "Docs", TaskStatus::InProgress, Some("bob"), &[]),
                    ]),
                    ..state("lead")
                },
                1_500,
                Some(
                    "You are lead.\n\
                     Requests waiting for your answer: 1.\n\
                     - plan-alice-1 (plan_approval_request) from alice\n\
                     Task board: 4 tasks, 3 not finished.\n\
                     - #3 [in_progress] Review (owner lead)\n\
                     - #2 [pending] Test the parser (unowned, blocked by #3)\n\
                     - #4 [in_progress] Docs (owner bob)\n\
                     - #1 [completed] Write the parser (owner alice)",
                ),
            ),
            (
                "a team run with no task yet",
                CoordinationState {
                    board: Some(Vec::new()),
                    ..state("alice")
                },
                1_500,
                Some("You are alice.\nTask board: empty."),
            ),
            (
                "a long board is cut within the budget, saying how many were left out",
                CoordinationState {
                    board: Some(many_tasks.clone()),
                    ..state("lead")
                },
                60,
                Some(
                    "You are lead.\n\
                     Task board: 60 tasks, 60 not finished.\n\
                     - #1 [pending] Task number 1 (unowned)\n\
                     - #2 [pending] Task number 2 (unowned)\n\
                     - #3 [pending] Task number 3 (unowned)\n\
                     - … 57 more not shown",
                ),
            ),
            (
                "a budget too small for any entry still gives the counts",
                CoordinationState {
                    mail: vec![mail("text", "lead", None, false); 3],
                    ..state("bob")
                },
                5,
                Some("You are bob.\nMailbox: 3 unread.\n- … 3 more not shown"),
            ),
        ];
        for (name, state, budget, want) in cases {
            assert_eq!(
                render_coordination_state(&state, budget).as_deref(),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn long_titles_are_cut_and_the_budget_holds_for_big_states() {
        let title = "x".repeat(500);
        let state = CoordinationState {
            mail: vec![mail("text", "lead", None, false); 200],
            to_answer: (0..200)
                .map(|n| {
                    request(
                        &format!("perm-bob-{n}"),
                        "permission_request",
                        "bob",
                        "lead",
                    )
                })
                .collect(),
            board: Some(
                (1..=200)
                    .map(|id| task(id, &title, TaskStatus::Blocked, Some("bob"), &[1, 2]))
                    .collect(),
            ),
            ..state("lead")
        };
        for budget in [50, 200, 1_500, 5_000] {
            let text = render_coordination_state(&state, budget).unwrap();
            // Every heading and "left out" line is kept even when the budget cannot hold them.
            let floor = 60;
            assert!(
                estimate_tokens(&text) <= budget.max(floor),
                "{budget}: {} tokens",
                estimate_tokens(&text)
            );
            for heading in [
                "Mailbox: 200 unread.",
                "Requests waiting for your answer: 200.",
                "Task board: 200 tasks, 200 not finished.",
            ] {
                assert!(text.contains(heading), "{budget}: {text}");
            }
            assert!(text.contains("more not shown"), "{budget}");
            assert!(!text.contains(&"x".repeat(81)), "titles are cut");
        }
    }
}
