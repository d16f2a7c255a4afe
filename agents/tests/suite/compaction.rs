//! Compaction: the trigger over the built-in catalogue, cuts that never orphan a tool result or
//! drop the latest thinking signature (property test over random well-formed transcripts), the
//! summary request, the rebuilt context's order and budget, the summary request against
//! `muster-fake-llm` carrying `x-muster-purpose: compact`, and a run whose request after
//! compaction carries the task board read from the store.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use muster_agents::compaction::{
    CompactionConfig, CompactionError, CompactionInputs, Cut, CutLimit, HANDOFF_PROMPT,
    PlanReference, SUMMARY_PREFIX, SummaryRequest, compaction_threshold, estimate_tokens,
    needs_compaction, plan_cut, rebuild, summary_text,
};
use muster_agents::model::{
    AnthropicOptions, ClientConfig, ContentBlock, HttpClient, Message, ModelProvider, ModelRequest,
    ModelResponse, RecordingSleeper, RequestContext, RequestPurpose, Role, StopReason,
    ThinkingSettings, ToolDefinition, Usage,
};
use muster_config::settings::ModelInfo;
use muster_fake_llm::{Block, FakeLlm, ScriptEntry};
use proptest::prelude::*;
use serde_json::json;

use super::harness::{RunHarness, SONNET, finished, load_settings, run, spec, start};

// ---------------------------------------------------------------- transcripts

fn calls(turn: usize, n: usize) -> Vec<ContentBlock> {
    (0..n)
        .map(|c| ContentBlock::ToolUse {
            id: format!("call-{turn}-{c}"),
            name: "Read".into(),
            input: json!({"path": format!("src/file{c}.rs")}),
        })
        .collect()
}

fn thinking(signature: &str) -> ContentBlock {
    ContentBlock::Thinking {
        thinking: "Let me think.".into(),
        signature: signature.into(),
    }
}

fn reminder() -> ContentBlock {
    ContentBlock::text("<system-reminder>\nMode: default.\n</system-reminder>")
}

fn mail(from: &str, text: &str) -> String {
    format!("<mail type=\"text\" from=\"{from}\" id=\"m\">{text}</mail>")
}

/// One model turn of a generated transcript.
#[derive(Debug, Clone)]
struct Exchange {
    /// `None`: no thinking; `Some(true)`: signed; `Some(false)`: unsigned (OpenAI reasoning).
    thinking: Option<bool>,
    text: bool,
    calls: usize,
    /// Results in reverse call order.
    reversed: bool,
    /// Mail appended after the results (or as the next user turn).
    mail: Option<usize>,
}

/// A well-formed transcript: a prompt, then each exchange; when `unanswered`, the last
/// exchange's calls get no results.
fn transcript(exchanges: &[Exchange], unanswered: bool) -> Vec<Message> {
    let mut messages = vec![Message {
        role: Role::User,
        content: vec![
            ContentBlock::text("Fix the failing parser test."),
            reminder(),
        ],
    }];
    for (turn, ex) in exchanges.iter().enumerate() {
        let mut content = Vec::new();
        match ex.thinking {
            Some(true) => content.push(thinking(&format!("sig-{turn}"))),
            Some(false) => content.push(thinking("")),
            None => {}
        }
        if ex.text || (ex.calls == 0 && content.is_empty()) {
            content.push(ContentBlock::text(format!("Step {turn}.")));
        }
        content.extend(calls(turn, ex.calls));
        messages.push(Message::assistant(content));
        let last = turn + 1 == exchanges.len();
        if last && ((unanswered && ex.calls > 0) || (ex.calls == 0 && ex.mail.is_none())) {
            break;
        }
        let mut user = Vec::new();
        let mut ids: Vec<usize> = (0..ex.calls).collect();
        if ex.reversed {
            ids.reverse();
        }
        for c in ids {
            user.push(ContentBlock::tool_result(
                format!("call-{turn}-{c}"),
                "x".repeat(40 * (c + 1)),
            ));
        }
        if let Some(n) = ex.mail {
            user.push(ContentBlock::text(mail("lead", &format!("note {n}"))));
        } else if user.is_empty() {
            user.push(ContentBlock::text("Go on."));
        }
        user.push(reminder());
        messages.push(Message {
            role: Role::User,
            content: user,
        });
    }
    messages
}

fn tool_use_ids(message: &Message) -> Vec<&str> {
    message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolUse { id, .. } => Some(id.as_str()),
            _ => None,
        })
        .collect()
}

fn tool_result_ids(message: &Message) -> Vec<&str> {
    message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolResult { tool_use_id, .. } => Some(tool_use_id.as_str()),
            _ => None,
        })
        .collect()
}

/// The API's pairing rules (as `muster-fake-llm` checks them): every result answers a call of
/// the previous message; every call is answered at the start of the next message, except the
/// calls of a final assistant message when `open_tail` allows it. Roles alternate.
fn check_pairing(messages: &[Message], open_tail: bool) -> Result<(), String> {
    for (i, m) in messages.iter().enumerate() {
        if i > 0 && messages[i - 1].role == m.role {
            return Err(format!("messages {} and {i} have the same role", i - 1));
        }
        if m.role == Role::User {
            let prev: Vec<&str> = i
                .checked_sub(1)
                .map(|p| tool_use_ids(&messages[p]))
                .unwrap_or_default();
            for id in tool_result_ids(m) {
                if !prev.contains(&id) {
                    return Err(format!("message {i}: orphan tool_result {id}"));
                }
            }
            continue;
        }
        let ids = tool_use_ids(m);
        if ids.is_empty() {
            continue;
        }
        let Some(next) = messages.get(i + 1) else {
            if open_tail {
                continue;
            }
            return Err(format!("message {i}: unanswered calls at the end"));
        };
        let leading: Vec<&str> = next
            .content
            .iter()
            .take_while(|b| matches!(b, ContentBlock::ToolResult { .. }))
            .filter_map(|b| match b {
                ContentBlock::ToolResult { tool_use_id, .. } => Some(tool_use_id.as_str()),
                _ => None,
            })
            .collect();
        for id in ids {
            if !leading.contains(&id) {
                return Err(format!("message {i}: call {id} not answered next"));
            }
        }
    }
    Ok(())
}

fn latest_signed_thinking(messages: &[Message]) -> Option<(usize, String)> {
    messages.iter().enumerate().rev().find_map(|(i, m)| {
        m.content.iter().rev().find_map(|b| match b {
            ContentBlock::Thinking { signature, .. } if !signature.is_empty() => {
                Some((i, signature.clone()))
            }
            _ => None,
        })
    })
}

fn unanswered_calls(messages: &[Message]) -> BTreeSet<String> {
    let answered: BTreeSet<&str> = messages.iter().flat_map(tool_result_ids).collect();
    messages
        .iter()
        .flat_map(tool_use_ids)
        .filter(|id| !answered.contains(id))
        .map(str::to_owned)
        .collect()
}

fn exchange() -> impl Strategy<Value = Exchange> {
    (
        prop_oneof![Just(None), Just(Some(true)), Just(Some(false))],
        any::<bool>(),
        0usize..4,
        any::<bool>(),
        proptest::option::of(0usize..100),
    )
        .prop_map(|(thinking, text, calls, reversed, mail)| Exchange {
            thinking,
            text,
            calls,
            reversed,
            mail,
        })
}

fn texts(message: &Message) -> Vec<&str> {
    message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn cuts_never_orphan_a_result_nor_drop_the_latest_signature(
        exchanges in proptest::collection::vec(exchange(), 0..12),
        unanswered in any::<bool>(),
        budget in 0u64..400,
    ) {
        let messages = transcript(&exchanges, unanswered);
        check_pairing(&messages, true).map_err(TestCaseError::fail)?;
        let cut = plan_cut(&messages);
        prop_assert!(cut.index <= messages.len());
        let (summarised, kept) = messages.split_at(cut.index);

        // The kept part starts at a turn boundary.
        if let Some(first) = kept.first() {
            prop_assert!(
                first.role == Role::Assistant || tool_result_ids(first).is_empty(),
                "kept part starts with tool results: {first:?}"
            );
        }
        // No pair is split, either way.
        let cut_uses: BTreeSet<&str> = summarised.iter().flat_map(tool_use_ids).collect();
        let kept_uses: BTreeSet<&str> = kept.iter().flat_map(tool_use_ids).collect();
        for id in kept.iter().flat_map(tool_result_ids) {
            prop_assert!(!cut_uses.contains(id), "result {id} kept, its call cut");
        }
        for id in summarised.iter().flat_map(tool_result_ids) {
            prop_assert!(!kept_uses.contains(id), "call {id} kept, its result cut");
        }
        // The latest signature and every unanswered call are kept.
        if let Some((at, signature)) = latest_signed_thinking(&messages) {
            prop_assert!(at >= cut.index, "thinking {signature} at {at} cut at {}", cut.index);
            prop_assert_eq!(latest_signed_thinking(kept).map(|(_, s)| s), Some(signature));
        }
        let open = unanswered_calls(&messages);
        let kept_open = unanswered_calls(kept);
        prop_assert_eq!(&open, &kept_open);
        // With nothing to keep, everything is summarised.
        if open.is_empty() && latest_signed_thinking(&messages).is_none() {
            prop_assert_eq!(cut.index, messages.len());
            prop_assert_eq!(cut.limit, CutLimit::EndOfContext);
        }

        // The summary request is a valid conversation ending with the handoff prompt.
        let base = request(messages.clone());
        match SummaryRequest::build(RequestContext::new("r", "a", 9), &base, &cut, &CompactionConfig::default()) {
            Ok(summary) => {
                check_pairing(&summary.request.messages, false).map_err(TestCaseError::fail)?;
                let last = summary.request.messages.last().unwrap();
                prop_assert_eq!(last.role, Role::User);
                prop_assert_eq!(texts(last).last().copied(), Some(HANDOFF_PROMPT));
                prop_assert_eq!(summary.context.purpose, RequestPurpose::Compact);
            }
            Err(e) => {
                prop_assert!(cut.is_empty());
                prop_assert_eq!(e, CompactionError::NothingToSummarise);
            }
        }

        // The rebuilt context is valid, keeps the tail verbatim, and fits the budget.
        let rebuilt = rebuild(CompactionInputs {
            messages: &messages,
            cut,
            summary: "SUMMARY",
            plan: Some(PlanReference { path: "p.md".into(), content: "## Steps\n1. x".into() }),
            coordination_state: Some("inbox: empty".into()),
            recent_messages_tokens: budget,
        });
        check_pairing(&rebuilt, true).map_err(TestCaseError::fail)?;
        prop_assert_eq!(rebuilt[0].role, Role::User);
        prop_assert_eq!(unanswered_calls(&rebuilt), open);
        let tail_start = rebuilt.len() - kept.len().min(rebuilt.len());
        let merged = kept.first().is_some_and(|m| m.role == Role::User);
        if merged {
            prop_assert_eq!(&rebuilt[1..], &kept[1..]);
        } else {
            prop_assert_eq!(&rebuilt[tail_start..], kept);
        }
        let first_texts = texts(&rebuilt[0]);
        let summary_at = first_texts.iter().position(|t| t.contains(SUMMARY_PREFIX)).unwrap();
        let recent: u64 = first_texts[..summary_at].iter().map(|t| estimate_tokens(t)).sum();
        prop_assert!(recent <= budget, "{recent} > {budget}");
    }
}

// ---------------------------------------------------------------- trigger

fn builtin_catalogue() -> BTreeMap<String, ModelInfo> {
    let dir = tempfile::tempdir().unwrap();
    load_settings(dir.path(), muster_config::CliOverrides::new())
        .unwrap_or_else(|e| panic!("{e}"))
        .models
}

#[test]
fn trigger_thresholds_over_the_builtin_catalogue() {
    let models = builtin_catalogue();
    // model, window, max output, min(85 % of window, window − max output − 13k).
    let table = [
        ("claude-opus-4-1", 200_000, 32_000, 155_000),
        ("claude-sonnet-4-5", 200_000, 64_000, 123_000),
        ("claude-haiku-4-5", 200_000, 64_000, 123_000),
        ("gpt-5", 400_000, 128_000, 259_000),
        ("gpt-5-mini", 400_000, 128_000, 259_000),
        ("gpt-4.1", 1_000_000, 32_768, 850_000),
    ];
    let config = CompactionConfig::default();
    for (model, window, max_output, threshold) in table {
        let info = models
            .get(model)
            .unwrap_or_else(|| panic!("{model} not in the catalogue"));
        assert_eq!(info.context_window, Some(window), "{model}");
        assert_eq!(info.max_output, Some(max_output), "{model}");
        let by_fraction = window * 85 / 100;
        let by_reserve = window - max_output - 13_000;
        assert_eq!(threshold, by_fraction.min(by_reserve), "{model}: the table");
        assert_eq!(
            compaction_threshold(info, &config),
            Some(threshold),
            "{model}"
        );
        // The prompt size is input + cache read + cache write (output is not in the prompt).
        let last = Usage {
            input_tokens: 1_000,
            output_tokens: 1_000_000,
            cache_read_tokens: threshold - 6_000,
            cache_write_tokens: 2_000,
        };
        assert!(!needs_compaction(&last, 2_999, info, &config), "{model}");
        assert!(needs_compaction(&last, 3_000, info, &config), "{model}");
        // A configured limit only lowers the threshold.
        let lowered = CompactionConfig {
            max_prompt_tokens: Some(50_000),
            ..config
        };
        assert_eq!(compaction_threshold(info, &lowered), Some(50_000));
        let higher = CompactionConfig {
            max_prompt_tokens: Some(window),
            ..config
        };
        assert_eq!(compaction_threshold(info, &higher), Some(threshold));
        let off = CompactionConfig {
            enabled: false,
            ..config
        };
        assert!(!needs_compaction(&last, u64::MAX, info, &off));
    }
    // A model the catalogue has no window for is never compacted.
    assert!(!needs_compaction(
        &Usage {
            input_tokens: u64::MAX,
            ..Usage::default()
        },
        u64::MAX,
        &ModelInfo::default(),
        &config
    ));
}

// ---------------------------------------------------------------- rebuild

fn request(messages: Vec<Message>) -> ModelRequest {
    ModelRequest {
        model: "claude-sonnet-4-5".into(),
        system: "You are alice.".into(),
        messages,
        tools: vec![ToolDefinition {
            name: "Read".into(),
            description: "Read a file".into(),
            input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }]
        .into(),
        max_tokens: 32_000,
        thinking: ThinkingSettings {
            budget_tokens: Some(4_000),
            effort: None,
        },
    }
}

/// A long exploration: the task, lead mail, many read calls with big results, a thinking
/// block on the latest turn, whose call waits for its result.
fn long_exploration() -> Vec<Message> {
    let mut messages = vec![Message {
        role: Role::User,
        content: vec![
            ContentBlock::text("Task 4: make the parser accept trailing commas."),
            reminder(),
        ],
    }];
    for turn in 0..30 {
        messages.push(Message::assistant(calls(turn, 1)));
        let mut user = vec![ContentBlock::tool_result(
            format!("call-{turn}-0"),
            "fn parse() {}\n".repeat(300),
        )];
        if turn % 10 == 9 {
            user.push(ContentBlock::text(mail(
                "lead",
                &format!("Reminder {turn}: keep the public API."),
            )));
        }
        user.push(reminder());
        messages.push(Message {
            role: Role::User,
            content: user,
        });
    }
    let mut last = vec![thinking("sig-latest")];
    last.extend(calls(99, 2));
    messages.push(Message::assistant(last));
    messages
}

#[test]
fn rebuilt_context_order_and_contents() {
    let messages = long_exploration();
    let cut = plan_cut(&messages);
    assert_eq!(cut.index, messages.len() - 1);
    assert_eq!(cut.limit, CutLimit::UnansweredToolCall);
    let rebuilt = rebuild(CompactionInputs {
        messages: &messages,
        cut,
        summary: "## Goal\nTrailing commas.\n## Next steps\nRead the results of call-99.",
        plan: Some(PlanReference {
            path: ".muster/plans/brave-red-fox-agent-alice.md".into(),
            content: "## Goal\nx\n## Steps\n1. Edit the parser\n## Files\nsrc/parse.rs\n".into(),
        }),
        coordination_state: Some(
            "You are alice on team core. Task 4 is yours (in_progress). No unread mail.".into(),
        ),
        recent_messages_tokens: 20_000,
    });
    assert_eq!(rebuilt.len(), 2);
    let first = texts(&rebuilt[0]);
    // The recent user and lead messages, oldest first, without reminders.
    assert_eq!(
        first[..4],
        [
            "Task 4: make the parser accept trailing commas.",
            mail("lead", "Reminder 9: keep the public API.").as_str(),
            mail("lead", "Reminder 19: keep the public API.").as_str(),
            mail("lead", "Reminder 29: keep the public API.").as_str(),
        ]
    );
    // Then the summary, the plan re-read from disk, the team state.
    assert!(
        first[4].starts_with("<compaction-summary>\n"),
        "{}",
        first[4]
    );
    assert!(first[4].contains(SUMMARY_PREFIX));
    assert!(first[4].contains("Read the results of call-99."));
    assert!(
        first[5].starts_with(
            "<plan-file path=\".muster/plans/brave-red-fox-agent-alice.md\">\n## Goal"
        ),
        "{}",
        first[5]
    );
    assert!(first[5].contains("1. Edit the parser"));
    assert!(first[6].starts_with("<team-state>\nYou are alice on team core."));
    assert_eq!(first.len(), 7);
    assert!(!first.iter().any(|t| t.contains("system-reminder")));
    // No tool results survive from the summarised part.
    assert!(tool_result_ids(&rebuilt[0]).is_empty());
    // The unanswered calls and the latest thinking signature, verbatim.
    assert_eq!(rebuilt[1], messages[messages.len() - 1]);
    assert_eq!(
        latest_signed_thinking(&rebuilt).map(|(_, s)| s).as_deref(),
        Some("sig-latest")
    );
    check_pairing(&rebuilt, true).unwrap();
    // Much smaller than before.
    let before: usize = serde_json::to_string(&messages).unwrap().len();
    let after: usize = serde_json::to_string(&rebuilt).unwrap().len();
    assert!(after * 10 < before, "{after} vs {before}");
}

#[test]
fn recent_messages_fill_the_budget_newest_first_and_truncate_the_oldest() {
    // Five user turns of 1,000 tokens each (4,000 characters) between exchanges.
    let mut messages = Vec::new();
    for n in 0..5 {
        let body = format!(
            "<{n}>{}</{n}>",
            char::from(b'a' + n as u8).to_string().repeat(3_992)
        );
        messages.push(Message::user(body));
        messages.push(Message::assistant(vec![ContentBlock::text("ok")]));
    }
    let cut = plan_cut(&messages);
    assert_eq!(cut.index, messages.len());
    let table = [
        // budget, messages kept whole (the newest), whether an older one is truncated
        (20_000, 5, false),
        (5_000, 5, false),
        (4_999, 4, true),
        (2_500, 2, true),
        (1_000, 1, false),
        (10, 0, false),
        (0, 0, false),
    ];
    for (budget, whole, truncated) in table {
        let rebuilt = rebuild(CompactionInputs {
            messages: &messages,
            cut,
            summary: "S",
            plan: None,
            coordination_state: None,
            recent_messages_tokens: budget,
        });
        assert_eq!(rebuilt.len(), 1, "budget {budget}");
        let all = texts(&rebuilt[0]);
        let recent = &all[..all.len() - 1];
        assert!(all[all.len() - 1].contains(SUMMARY_PREFIX));
        let used: u64 = recent.iter().map(|t| estimate_tokens(t)).sum();
        assert!(used <= budget, "budget {budget}: used {used}");
        let cut_ones: Vec<&&str> = recent
            .iter()
            .filter(|t| t.contains("cut by compaction"))
            .collect();
        assert_eq!(cut_ones.len(), usize::from(truncated), "budget {budget}");
        assert_eq!(recent.len() - cut_ones.len(), whole, "budget {budget}");
        // Whole ones are the newest, in order; a truncated one is older than all of them and
        // keeps both ends.
        for (k, text) in recent.iter().rev().take(whole).enumerate() {
            let n = 4 - k;
            assert!(text.starts_with(&format!("<{n}>")) && text.ends_with(&format!("</{n}>")));
        }
        if truncated {
            let n = 4 - whole;
            assert!(recent[0].starts_with(&format!("<{n}>")), "{budget}");
            assert!(recent[0].ends_with(&format!("</{n}>")), "{budget}");
        }
    }
}

#[test]
fn a_second_compaction_does_not_carry_the_old_summary_plan_or_state() {
    let messages = long_exploration();
    let cut = plan_cut(&messages);
    let mut context = rebuild(CompactionInputs {
        messages: &messages,
        cut,
        summary: "FIRST SUMMARY",
        plan: Some(PlanReference {
            path: "plan.md".into(),
            content: "OLD PLAN".into(),
        }),
        coordination_state: Some("OLD STATE".into()),
        recent_messages_tokens: 20_000,
    });
    // The call is answered and the work goes on.
    context.push(Message {
        role: Role::User,
        content: vec![
            ContentBlock::tool_result("call-99-0", "a"),
            ContentBlock::tool_result("call-99-1", "b"),
            ContentBlock::text(mail("lead", "Also handle tuples.")),
        ],
    });
    context.push(Message::assistant(vec![ContentBlock::text(
        "Working on it.",
    )]));
    let cut = plan_cut(&context);
    assert_eq!(cut.index, 1, "the latest signed thinking is in message 1");
    let again = rebuild(CompactionInputs {
        messages: &context,
        cut,
        summary: "SECOND SUMMARY",
        plan: Some(PlanReference {
            path: "plan.md".into(),
            content: "NEW PLAN".into(),
        }),
        coordination_state: Some("NEW STATE".into()),
        recent_messages_tokens: 20_000,
    });
    let all: String = again
        .iter()
        .flat_map(|m| texts(m))
        .collect::<Vec<_>>()
        .join("\n");
    for gone in ["FIRST SUMMARY", "OLD PLAN", "OLD STATE"] {
        assert!(!all.contains(gone), "{gone} survived");
    }
    for kept in [
        "SECOND SUMMARY",
        "NEW PLAN",
        "NEW STATE",
        "Task 4: make the parser accept trailing commas.",
        "Also handle tuples.",
    ] {
        assert!(all.contains(kept), "{kept} lost");
    }
    check_pairing(&again, false).unwrap();
}

// ---------------------------------------------------------------- summary request

#[test]
fn summary_request_shape() {
    let messages = long_exploration();
    let cut = plan_cut(&messages);
    let base = request(messages.clone());
    let config = CompactionConfig::default();
    let summary = SummaryRequest::build(
        RequestContext::new("run-1", "alice", 42),
        &base,
        &cut,
        &config,
    )
    .unwrap();
    assert_eq!(summary.context.purpose, RequestPurpose::Compact);
    assert_eq!(summary.context.turn, 42);
    assert_eq!(summary.context.agent_id, "alice");
    let r = &summary.request;
    assert_eq!(
        (r.model.as_str(), r.system.as_str()),
        ("claude-sonnet-4-5", "You are alice.")
    );
    assert_eq!(
        r.tools, base.tools,
        "same prefix, so the prompt cache is read"
    );
    assert!(r.thinking.is_off());
    assert_eq!(r.max_tokens, config.summary_max_tokens);
    // The summarised messages, the handoff prompt appended to the last user turn (after its
    // tool results), and not the unanswered calls.
    assert_eq!(r.messages.len(), cut.index);
    assert_eq!(r.messages[..cut.index - 1], messages[..cut.index - 1]);
    let last = r.messages.last().unwrap();
    assert_eq!(texts(last).last().copied(), Some(HANDOFF_PROMPT));
    assert!(unanswered_calls(&r.messages).is_empty());
    check_pairing(&r.messages, false).unwrap();
    for section in [
        "## Goal",
        "## Progress",
        "## Constraints",
        "## Working set",
        "## Next steps",
        "## References",
    ] {
        assert!(HANDOFF_PROMPT.contains(section), "{section}");
    }

    // A small agent max_tokens caps the summary.
    let small = ModelRequest {
        max_tokens: 1_000,
        ..base.clone()
    };
    let s = SummaryRequest::build(RequestContext::new("r", "a", 1), &small, &cut, &config).unwrap();
    assert_eq!(s.request.messages, r.messages);
    assert_eq!(s.request.max_tokens, 1_000);

    // An empty cut has nothing to summarise.
    let only_open = vec![Message::assistant(calls(0, 1))];
    let cut = plan_cut(&only_open);
    assert_eq!(
        cut,
        Cut {
            index: 0,
            limit: CutLimit::TurnBoundary
        }
    );
    assert_eq!(
        SummaryRequest::build(
            RequestContext::new("r", "a", 1),
            &request(only_open),
            &cut,
            &config
        ),
        Err(CompactionError::NothingToSummarise)
    );
}

#[test]
fn summary_text_from_the_answer() {
    let answer = |content: Vec<ContentBlock>| ModelResponse {
        id: None,
        model: "m".into(),
        content,
        stop_reason: StopReason::EndTurn,
        usage: Usage::default(),
        cost_usd: None,
        attempts: 1,
    };
    let table: [(Vec<ContentBlock>, Result<&str, CompactionError>); 3] = [
        (
            vec![thinking("s"), ContentBlock::text("  ## Goal\nx  \n")],
            Ok("## Goal\nx"),
        ),
        (
            vec![ContentBlock::text("   ")],
            Err(CompactionError::EmptySummary {
                stop_reason: "end_turn".into(),
            }),
        ),
        (
            calls(0, 1),
            Err(CompactionError::EmptySummary {
                stop_reason: "end_turn".into(),
            }),
        ),
    ];
    for (content, want) in table {
        assert_eq!(summary_text(&answer(content)), want.map(str::to_owned));
    }
}

// ---------------------------------------------------------------- against the fake server

#[tokio::test]
async fn the_summary_request_is_sent_as_compact_and_the_rebuilt_context_is_accepted() {
    let fake = FakeLlm::start(vec![
        ScriptEntry {
            purpose: Some("compact".into()),
            ..ScriptEntry::reply(
                "alice",
                32,
                vec![Block::text(
                    "## Goal\nTrailing commas.\n## Next steps\nEdit parse.rs.",
                )],
            )
        },
        ScriptEntry::reply("alice", 33, vec![Block::text("Continuing.")]),
    ])
    .await
    .unwrap();
    super::harness::install_tls_provider();
    let sleeper = RecordingSleeper::new();
    let mut config = ClientConfig::new(fake.base_url(), Some("test-key".into()));
    config.retry.max_retries = 0;
    config.sleeper = Arc::new(sleeper.clone());
    config.request_timeout = Duration::from_secs(20);
    let client = HttpClient::anthropic(config, AnthropicOptions::default()).unwrap();

    // The context after the answered calls of the long exploration.
    let mut messages = long_exploration();
    messages.push(Message {
        role: Role::User,
        content: vec![
            ContentBlock::tool_result("call-99-0", "a"),
            ContentBlock::tool_result("call-99-1", "b"),
        ],
    });
    let cut = plan_cut(&messages);
    assert_eq!(cut.limit, CutLimit::LatestThinking);
    let base = ModelRequest {
        thinking: ThinkingSettings::default(),
        ..request(messages.clone())
    };
    let summary = SummaryRequest::build(
        RequestContext::new("run-abc", "alice", 32),
        &base,
        &cut,
        &CompactionConfig::default(),
    )
    .unwrap();
    let answer = tokio::time::timeout(
        Duration::from_secs(30),
        client.stream(&summary.context, &summary.request).response(),
    )
    .await
    .unwrap()
    .unwrap();
    let note = summary_text(&answer).unwrap();
    let rebuilt = rebuild(CompactionInputs {
        messages: &messages,
        cut,
        summary: &note,
        plan: Some(PlanReference {
            path: "plan.md".into(),
            content: "## Steps\n1. Edit parse.rs".into(),
        }),
        coordination_state: Some("Task 4: in_progress".into()),
        recent_messages_tokens: 20_000,
    });
    let next = ModelRequest {
        messages: rebuilt,
        ..base
    };
    let reply = tokio::time::timeout(
        Duration::from_secs(30),
        client
            .stream(&RequestContext::new("run-abc", "alice", 33), &next)
            .response(),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(reply.text(), "Continuing.");

    let requests: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/messages"))
        .collect();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].header("x-muster-purpose"), Some("compact"));
    assert_eq!(requests[0].purpose.as_deref(), Some("compact"));
    assert_eq!(requests[0].header("x-muster-turn"), Some("32"));
    let sent = serde_json::to_string(&requests[0].body["messages"]).unwrap();
    assert!(sent.contains("<compaction-request>"));
    assert_eq!(requests[1].header("x-muster-purpose"), None);
    // The next turn shows the summary, then the plan content after it, and no orphan result.
    let body = serde_json::to_string(&requests[1].body["messages"]).unwrap();
    let summary_at = body.find("Edit parse.rs.").unwrap();
    let plan_at = body.find("1. Edit parse.rs").unwrap();
    assert!(summary_at < plan_at, "the plan follows the summary");
    assert!(!body.contains("<compaction-request>"));
    fake.verify().unwrap();
}

// ---------------------------------------------------------------- in a run

fn with_usage(mut entry: ScriptEntry, input: u64) -> ScriptEntry {
    if let Some(reply) = entry.reply.as_mut() {
        reply.usage = Some(muster_fake_llm::UsageSpec {
            input_tokens: Some(input),
            output_tokens: Some(20),
            cache_read_input_tokens: Some(0),
            cache_creation_input_tokens: Some(0),
        });
    }
    entry
}

/// A scripted run with tasks on the store's board crosses the threshold (window 20,000, max
/// output 1,000: 6,000 tokens); the request after the compaction carries the board as read
/// from the store at that moment (a task completed after the run started shows completed),
/// after the summary.
#[tokio::test(flavor = "multi_thread")]
async fn the_request_after_compaction_carries_the_task_board_read_from_the_store() {
    use muster_agents::runtime::{
        AgentKind, CompactionPolicy, ModeModel, ModelRouter, PlanApprover, RunContext,
    };
    use muster_config::PermissionMode;
    use muster_mailbox::{MailboxStore, MemberKind, NewTask, TaskStatus, TaskUpdate};

    let note = "HANDOFF: README.md was read twice.";
    let script = vec![
        with_usage(
            ScriptEntry::reply(
                "main",
                1,
                vec![Block::tool_use("Read", json!({"file_path": "README.md"}))],
            ),
            300,
        ),
        with_usage(
            ScriptEntry::reply(
                "main",
                2,
                vec![Block::tool_use("Read", json!({"file_path": "README.md"}))],
            ),
            7000,
        ),
        ScriptEntry {
            purpose: Some("compact".into()),
            ..with_usage(ScriptEntry::reply("main", 3, vec![Block::text(note)]), 2000)
        },
        with_usage(
            ScriptEntry::reply("main", 4, vec![Block::text("Done.")]),
            900,
        ),
    ];
    let h = RunHarness::setup()
        .file("README.md", "hello\n")
        .start(script)
        .await;
    h.member("main", MemberKind::Lead).await;
    let mut ids = Vec::new();
    for (subject, blocked_by) in [
        ("Write the tokenizer", vec![]),
        ("Test the tokenizer", vec![1]),
    ] {
        let task = h
            .store
            .create_task(NewTask {
                run_id: "r1".into(),
                created_by: "main".into(),
                subject: subject.into(),
                description: String::new(),
                blocked_by,
                idempotency_key: None,
            })
            .await
            .unwrap();
        ids.push(task.task_id);
    }
    assert_eq!(ids, vec![1, 2]);

    let models = BTreeMap::from([(
        SONNET.to_owned(),
        ModelInfo {
            context_window: Some(20_000),
            max_output: Some(1_000),
            ..ModelInfo::default()
        },
    )]);
    let context = Arc::new(RunContext {
        agent_models: Default::default(),
        team: Default::default(),
        hooks: Default::default(),
        models: ModelRouter::single(ModeModel {
            max_tokens: 1000,
            ..h.model(SONNET)
        }),
        limits: Default::default(),
        compaction: CompactionPolicy {
            config: CompactionConfig::default(),
            models,
        },
        ..h.run_context(PlanApprover::Human)
    });
    let mut agent = start(
        context,
        spec("main", AgentKind::Main, PermissionMode::Default),
        "Read the README, twice.",
    )
    .await;
    // The board changes after the run started: compaction must read it fresh.
    h.store
        .update_task(TaskUpdate {
            run_id: "r1".into(),
            task_id: 1,
            updated_by: "main".into(),
            status: Some(TaskStatus::Completed),
            ..TaskUpdate::default()
        })
        .await
        .unwrap();
    assert_eq!(run(&mut agent).await, finished("Done."));

    let requests = h.fake.requests();
    let compact = requests.iter().find(|r| r.turn == Some(3)).unwrap();
    assert_eq!(compact.purpose.as_deref(), Some("compact"));
    let before = requests.iter().find(|r| r.turn == Some(2)).unwrap();
    assert!(
        !before.body.to_string().contains("Task board"),
        "no board before compaction"
    );
    let after = requests.iter().find(|r| r.turn == Some(4)).unwrap();
    let body = serde_json::to_string(&after.body["messages"]).unwrap();
    let summary_at = body.find(note).expect("the summary");
    let board_at = body
        .find("Task board: 2 tasks, 1 not finished.")
        .expect("the board");
    assert!(
        summary_at < board_at,
        "the state follows the summary: {body}"
    );
    for line in [
        "- #2 [pending] Test the tokenizer (unowned)",
        "- #1 [completed] Write the tokenizer (unowned)",
        "<team-state>",
    ] {
        assert!(body.contains(line), "{line} in {body}");
    }
    h.fake.verify().unwrap();
}
