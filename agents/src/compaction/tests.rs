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
                window_fraction: f64::NAN,
                ..config
            },
            Some(170_000),
        ),
        (
            info(Some(200_000), Some(8_000)),
            CompactionConfig {
                window_fraction: 7.0,
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
