//! Where the context is cut: what is summarised and what is kept verbatim.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::{ContentBlock, Message, Role};

/// What set the cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CutLimit {
    /// Everything can be summarised.
    EndOfContext,
    /// The message with a tool call that has no result yet is kept, with what follows it.
    UnansweredToolCall,
    /// The message with the latest signed thinking block is kept, with what follows it.
    LatestThinking,
    /// The nearest turn boundary at or before the limit above (a `tool_use` and its result
    /// stay on one side).
    TurnBoundary,
}

/// A cut of the context: `messages[..index]` are summarised, `messages[index..]` are kept
/// verbatim. `index == 0`: nothing can be summarised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cut {
    pub index: usize,
    pub limit: CutLimit,
}

impl Cut {
    /// Whether nothing is summarised.
    pub fn is_empty(&self) -> bool {
        self.index == 0
    }

    /// The messages to summarise.
    pub fn summarised<'a>(&self, messages: &'a [Message]) -> &'a [Message] {
        messages.get(..self.index).unwrap_or(messages)
    }

    /// The messages kept verbatim.
    pub fn kept<'a>(&self, messages: &'a [Message]) -> &'a [Message] {
        messages.get(self.index..).unwrap_or(&[])
    }
}

/// Whether a block is a signed thinking block (`thinking` with a signature, or
/// `redacted_thinking`), which the API wants back unchanged.
fn is_signed_thinking(block: &ContentBlock) -> bool {
    match block {
        ContentBlock::Thinking { signature, .. } => !signature.is_empty(),
        ContentBlock::Other(value) => {
            value.get("type").and_then(serde_json::Value::as_str) == Some("redacted_thinking")
        }
        _ => false,
    }
}

fn has_tool_result(message: &Message) -> bool {
    message
        .content
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
}

/// The latest cut that summarises as much as possible while keeping:
/// - a turn boundary: the kept part starts with an assistant message or with a user message
///   that carries no `tool_result`;
/// - every `tool_use` on the same side as its `tool_result` (checked by id, so a malformed
///   transcript never yields an orphan result either);
/// - the first message holding a tool call with no result yet, and everything after it;
/// - the latest assistant message holding a signed thinking block, and everything after it.
///
/// Never panics; for any input the worst case is `index == 0` (keep everything).
pub fn plan_cut(messages: &[Message]) -> Cut {
    let len = messages.len();
    // Where each tool_use id first appears, and where its last result appears.
    let mut uses: BTreeMap<&str, usize> = BTreeMap::new();
    let mut results: BTreeMap<&str, usize> = BTreeMap::new();
    let mut latest_thinking: Option<usize> = None;
    for (index, message) in messages.iter().enumerate() {
        for block in &message.content {
            match block {
                ContentBlock::ToolUse { id, .. } => {
                    uses.entry(id.as_str()).or_insert(index);
                }
                ContentBlock::ToolResult { tool_use_id, .. } => {
                    results.insert(tool_use_id.as_str(), index);
                }
                _ => {}
            }
            if message.role == Role::Assistant && is_signed_thinking(block) {
                latest_thinking = Some(index);
            }
        }
    }
    // A boundary at `i` separates a pair when its use is before `i` and its result at or
    // after: mark those boundaries. Results before their use (malformed) block the same way.
    let mut separates = vec![0i64; len + 2];
    let mut first_unanswered: Option<usize> = None;
    for (id, &use_at) in &uses {
        match results.get(id) {
            Some(&result_at) if result_at > use_at => {
                separates[use_at + 1] += 1;
                separates[result_at + 1] -= 1;
            }
            Some(&result_at) if result_at < use_at => {
                separates[result_at + 1] += 1;
                separates[use_at + 1] -= 1;
            }
            Some(_) => {}
            None => {
                first_unanswered = Some(first_unanswered.map_or(use_at, |f| f.min(use_at)));
            }
        }
    }
    // A result whose use never appears cannot start the kept part either: the turn-boundary
    // rule below refuses a user message with results.
    let mut blocked = vec![false; len + 1];
    let mut running = 0i64;
    for (i, slot) in blocked.iter_mut().enumerate() {
        running += separates.get(i).copied().unwrap_or(0);
        *slot = running > 0;
    }

    let (mut upper, mut limit) = (len, CutLimit::EndOfContext);
    if let Some(at) = first_unanswered.filter(|at| *at < upper) {
        (upper, limit) = (at, CutLimit::UnansweredToolCall);
    }
    if let Some(at) = latest_thinking.filter(|at| *at < upper) {
        (upper, limit) = (at, CutLimit::LatestThinking);
    }
    let is_boundary = |i: usize| -> bool {
        if blocked.get(i).copied().unwrap_or(true) {
            return false;
        }
        match messages.get(i) {
            None => true,
            Some(message) => message.role == Role::Assistant || !has_tool_result(message),
        }
    };
    for index in (1..=upper).rev() {
        if is_boundary(index) {
            let limit = if index == upper {
                limit
            } else {
                CutLimit::TurnBoundary
            };
            return Cut { index, limit };
        }
    }
    Cut {
        index: 0,
        limit: CutLimit::TurnBoundary,
    }
}
