//! What ends an agent that its model does not end itself: a final answer cut by the output
//! limit (continued a few times, then `output_limit`), a tool call cut by it (answered with an
//! error), and the same call failing the same way again and again (`stuck`).
//!
//! Everything here is derived from the context's messages, which are the agent's committed
//! records: a resume counts the same continuations and the same failures as the run it
//! continues.
//!
//! # Continuing a cut answer
//! Both wires continue the same way: a user turn ([`CONTINUE_PROMPT`]) asks the model to go on
//! exactly where its answer stopped. An assistant prefill is not used: Anthropic refuses one
//! with extended thinking, and chat completions has none. The cut response and the request to
//! continue are committed together, so the records never hold a cut answer that is neither
//! continued nor the end of the agent. Each continuation is a model request of its own (its
//! own turn index); the agent's result is the chain's texts joined. The chain is counted from
//! the `message` records ([`CutChain`]), not from the context, which compaction may have
//! summarised in the meantime.

use serde_json::Value;

use crate::model::{ContentBlock, Message, Role, StopReason, ToolResultContent};

fn truncate(text: &str, max: usize) -> String {
    crate::model::truncate(text, max)
}

/// The runtime's limits on what a model may do before the agent is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentLimits {
    /// How many times a final answer cut by the output limit is continued before the agent
    /// ends with `output_limit`.
    pub continuations: usize,
    /// After this many identical failures of one call in a row the model is told to change
    /// course; one more and the agent ends with `stuck`.
    pub stuck_after: usize,
}

impl Default for AgentLimits {
    fn default() -> Self {
        AgentLimits {
            continuations: DEFAULT_CONTINUATIONS,
            stuck_after: DEFAULT_STUCK_AFTER,
        }
    }
}

impl AgentLimits {
    /// From the `[limits]` settings table (the config crate has checked `stuck_after ≥ 1`).
    pub fn from_settings(settings: &muster_config::settings::LimitSettings) -> AgentLimits {
        let count = |value: u64| usize::try_from(value).unwrap_or(usize::MAX);
        AgentLimits {
            continuations: count(settings.continuations.value),
            stuck_after: count(settings.stuck_after.value).max(1),
        }
    }
}

/// Default of [`AgentLimits::continuations`].
pub const DEFAULT_CONTINUATIONS: usize = 3;
/// Default of [`AgentLimits::stuck_after`].
pub const DEFAULT_STUCK_AFTER: usize = 3;

/// Why the runtime ended an agent (DESIGN "Wave 2 → Real models"): run status `failed`,
/// exit 1, [`AgentStop::reason`] as `run_finished.reason`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentStop {
    #[error(
        "output_limit: the final answer was cut by the output limit ({max_tokens} tokens) \
         and still cut after {continuations} continuation(s); raise the model's `max_output` \
         or ask for a shorter answer"
    )]
    OutputLimit {
        max_tokens: u64,
        continuations: usize,
    },
    #[error(
        "stuck: the call {tool} {input} failed the same way {times} times in a row \
         (the last result: {result})"
    )]
    Stuck {
        tool: String,
        input: String,
        times: usize,
        result: String,
    },
}

impl AgentStop {
    /// The outcome's name (`run_finished.reason`).
    pub fn reason(&self) -> &'static str {
        match self {
            AgentStop::OutputLimit { .. } => "output_limit",
            AgentStop::Stuck { .. } => "stuck",
        }
    }
}

/// The user turn that asks the model to continue a cut answer.
pub const CONTINUE_PROMPT: &str = "Your previous answer was cut off by the output limit. \
Continue it exactly where it stopped, without repeating what you already wrote and without \
any preamble.";

/// The error result of a tool call the output limit cut (it did not run).
pub fn cut_call_result(tool: &str) -> String {
    format!(
        "Error: this {tool} call was cut off by the output limit before its input was \
         complete, so it did not run. Make the call again with a smaller input (for example, \
         write a long file in several smaller Edit calls, or split the work into several \
         calls)."
    )
}

/// Whether `response` is a cut answer and the index of its cut tool call: with stop reason
/// `max_tokens`, the last tool call is the one being written when the limit hit (a call
/// whose JSON was complete is still treated as cut: it is answered, never run half-read).
pub fn cut_call_id(content: &[ContentBlock], stop_reason: &StopReason) -> Option<String> {
    if *stop_reason != StopReason::MaxTokens {
        return None;
    }
    content.iter().rev().find_map(|block| match block {
        ContentBlock::ToolUse { id, .. } => Some(id.clone()),
        _ => None,
    })
}

/// The cut answers since the agent's last complete response: counted from the `message`
/// records (compaction summarises messages, but leaves the records, so the count survives it
/// and a resume replays it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CutChain {
    /// Responses cut by the output limit in a row, with no tool call.
    pub cuts: usize,
    /// Their texts, joined: the start of the final answer.
    pub text: String,
}

impl CutChain {
    /// Takes the newest assistant response into account; returns whether it was a cut answer.
    pub fn push(&mut self, content: &[ContentBlock], stop_reason: &StopReason) -> bool {
        let has_calls = content
            .iter()
            .any(|block| matches!(block, ContentBlock::ToolUse { .. }));
        if has_calls {
            *self = CutChain::default();
            return false;
        }
        if *stop_reason != StopReason::MaxTokens {
            return false;
        }
        self.cuts += 1;
        self.text.push_str(&text_of(content));
        true
    }

    /// The final answer whose last piece is `last`.
    pub fn answer(&self, last: &[ContentBlock]) -> String {
        format!("{}{}", self.text, text_of(last))
    }
}

fn text_of(content: &[ContentBlock]) -> String {
    content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// The start of what is appended to a result that failed the same way
/// [`AgentLimits::stuck_after`] times in a row (not part of the failure compared).
const STUCK_NOTE: &str = "\n\n[muster] This exact call has now failed the same way";

fn stuck_note(times: usize) -> String {
    format!(
        "{STUCK_NOTE} {times} times in a row. Do not repeat it: change course (read the error, \
         fix the input, try another approach or another tool). Repeating it once more ends \
         this agent as stuck."
    )
}

/// A failed call as compared between turns: the tool, its input and its result.
#[derive(Debug, Clone, PartialEq)]
struct Failure<'a> {
    tool: &'a str,
    input: &'a Value,
    result: String,
}

fn failure_text(content: &ToolResultContent) -> String {
    let text = content.to_text();
    match text.find(STUCK_NOTE) {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

/// The failed calls of one exchange: an assistant message and the user message answering it.
fn failures<'a>(assistant: &'a Message, results: &'a Message) -> Vec<Failure<'a>> {
    if assistant.role != Role::Assistant || results.role != Role::User {
        return Vec::new();
    }
    results
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error: true,
            } => assistant.content.iter().find_map(|call| match call {
                ContentBlock::ToolUse { id, name, input } if id == tool_use_id => Some(Failure {
                    tool: name,
                    input,
                    result: failure_text(content),
                }),
                _ => None,
            }),
            _ => None,
        })
        .collect()
}

/// How many exchanges in a row, back from the end of `messages` (which ends with a results
/// message), hold `failure`.
fn streak(messages: &[Message], failure: &Failure<'_>) -> usize {
    let mut count = 0;
    let mut end = messages.len();
    while end >= 2 && failures(&messages[end - 2], &messages[end - 1]).contains(failure) {
        count += 1;
        end -= 2;
    }
    count
}

/// The result of a call that just failed, with the note to change course when this failure
/// is the `stuck_after`-th in a row or later. `before` is the context up to (not including)
/// the assistant message of the call.
pub fn with_stuck_note(
    before: &[Message],
    tool: &str,
    input: &Value,
    content: String,
    stuck_after: usize,
) -> String {
    let failure = Failure {
        tool,
        input,
        result: content.clone(),
    };
    let times = streak(before, &failure) + 1;
    if times >= stuck_after {
        format!("{content}{}", stuck_note(times))
    } else {
        content
    }
}

/// The agent is stuck when, in the newest exchange, a call failed the same way more than
/// `stuck_after` times in a row.
pub fn stuck(messages: &[Message], stuck_after: usize) -> Option<AgentStop> {
    let n = messages.len();
    if n < 2 {
        return None;
    }
    failures(&messages[n - 2], &messages[n - 1])
        .into_iter()
        .find_map(|failure| {
            let times = streak(messages, &failure);
            (times > stuck_after).then(|| AgentStop::Stuck {
                tool: failure.tool.to_owned(),
                input: truncate(&failure.input.to_string(), 200),
                times,
                result: truncate(&failure.result, 300),
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str, input: Value) -> Message {
        Message::assistant(vec![ContentBlock::ToolUse {
            id: id.into(),
            name: "Bash".into(),
            input,
        }])
    }

    fn failed(id: &str, text: &str) -> Message {
        Message {
            role: Role::User,
            content: vec![
                ContentBlock::ToolResult {
                    tool_use_id: id.into(),
                    content: ToolResultContent::Text(text.into()),
                    is_error: true,
                },
                ContentBlock::text("<system-reminder>mode</system-reminder>"),
            ],
        }
    }

    fn exchanges(n: usize, input: Value, text: &str) -> Vec<Message> {
        let mut messages = vec![Message::user("start")];
        for i in 0..n {
            let id = format!("t{i}");
            messages.push(call(&id, input.clone()));
            let content = with_stuck_note(
                &messages[..messages.len() - 1],
                "Bash",
                &input,
                text.into(),
                3,
            );
            messages.push(failed(&id, &content));
        }
        messages
    }

    #[test]
    fn identical_failures_are_noted_at_k_and_stuck_after_k() {
        let input = json!({"command": "cargo bild"});
        let table = [
            (1, false, false),
            (2, false, false),
            (3, true, false),
            (4, true, true),
        ];
        for (n, noted, is_stuck) in table {
            let messages = exchanges(n, input.clone(), "no such command");
            let last = messages.last().unwrap();
            let ContentBlock::ToolResult { content, .. } = &last.content[0] else {
                panic!("a result");
            };
            assert_eq!(content.to_text().contains(STUCK_NOTE), noted, "{n}");
            assert_eq!(stuck(&messages, 3).is_some(), is_stuck, "{n}");
        }
    }

    #[test]
    fn a_different_input_or_result_or_a_success_breaks_the_streak() {
        let input = json!({"command": "cargo bild"});
        let mut messages = exchanges(3, input.clone(), "no such command");
        // A success in between.
        messages.push(call("ok", input.clone()));
        messages.push(Message {
            role: Role::User,
            content: vec![ContentBlock::tool_result("ok", "fine")],
        });
        messages.extend(
            exchanges(3, input.clone(), "no such command")
                .into_iter()
                .skip(1),
        );
        assert!(stuck(&messages, 3).is_none());
        let mut other = exchanges(3, input.clone(), "no such command");
        other.extend(
            exchanges(1, json!({"command": "cargo build"}), "no such command")
                .into_iter()
                .skip(1),
        );
        assert!(stuck(&other, 3).is_none());
    }

    #[test]
    fn a_chain_of_cut_answers_counts_them_and_joins_their_texts() {
        let text = |t: &str| vec![ContentBlock::text(t)];
        let mut chain = CutChain::default();
        assert!(chain.push(&text("one "), &StopReason::MaxTokens));
        assert!(chain.push(&text("two "), &StopReason::MaxTokens));
        assert!(!chain.push(&text("three"), &StopReason::EndTurn));
        assert_eq!(chain.cuts, 2);
        assert_eq!(chain.answer(&text("three")), "one two three");
        let call = vec![ContentBlock::ToolUse {
            id: "t".into(),
            name: "LS".into(),
            input: json!({}),
        }];
        assert!(
            !chain.push(&call, &StopReason::MaxTokens),
            "a cut call is no cut answer"
        );
        assert_eq!(chain, CutChain::default());
    }
}
