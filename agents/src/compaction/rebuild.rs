//! The context after compaction.

use serde::{Deserialize, Serialize};

use crate::model::{ContentBlock, Message, Role};

use super::cut::Cut;
use super::estimate::estimate_tokens;

/// Put before the handoff note in the rebuilt context.
pub const SUMMARY_PREFIX: &str = "\
Your earlier context was compacted. The note below is a handoff written by a previous instance \
of you working on this same task, from the conversation that was removed. Rely on it for what \
was done and decided; for the current plan, mailbox and task board, rely on the sections that \
follow it, which were read just now.";

const SUMMARY_TAG: &str = "<compaction-summary>";
const PLAN_TAG: &str = "<plan-file";
const STATE_TAG: &str = "<team-state>";
const REMINDER_OPEN: &str = "<system-reminder>";
const REMINDER_CLOSE: &str = "</system-reminder>";
const REQUEST_TAG: &str = "<compaction-request>";

/// The agent's plan file: its path and its content re-read from disk after the summary came
/// back (never the content the model last saw).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanReference {
    pub path: String,
    pub content: String,
}

/// What [`rebuild`] needs. The system prompt and the tool list are not here: the caller
/// rebuilds them from their sources for every request.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactionInputs<'a> {
    /// The context that was cut (the same slice given to [`super::plan_cut`]).
    pub messages: &'a [Message],
    pub cut: Cut,
    /// The handoff note ([`super::summary_text`]).
    pub summary: &'a str,
    /// The plan file, re-read from disk; `None` when the agent has none (or it is missing and
    /// could not be recovered).
    pub plan: Option<PlanReference>,
    /// The agent's mailbox and task state, read fresh from the store and rendered as text by
    /// the caller (id, team, current task, open requests, unread mail, the board).
    pub coordination_state: Option<String>,
    /// The budget for the recent user and lead messages kept verbatim
    /// ([`super::CompactionConfig::recent_messages_tokens`]).
    pub recent_messages_tokens: u64,
}

/// The compacted context: one user message holding, in order,
/// 1. the most recent user and lead messages of the summarised part, verbatim, oldest first,
///    chosen newest first within `recent_messages_tokens` (the oldest one that does not fit is
///    cut in the middle to fit; mode reminders and earlier compaction sections are left out);
/// 2. the handoff note, after [`SUMMARY_PREFIX`];
/// 3. the plan reference (`<plan-file path="…">` with the content re-read from disk);
/// 4. the mailbox and task state (`<team-state>`);
///
/// followed by the kept messages verbatim (any unanswered tool call and the latest signed
/// thinking block among them). A kept part starting with a user message is merged into the
/// first message, so roles keep alternating.
pub fn rebuild(inputs: CompactionInputs<'_>) -> Vec<Message> {
    let mut first = Message {
        role: Role::User,
        content: Vec::new(),
    };
    let recent = recent_user_messages(
        inputs.cut.summarised(inputs.messages),
        inputs.recent_messages_tokens,
    );
    first
        .content
        .extend(recent.into_iter().map(ContentBlock::text));
    first.content.push(ContentBlock::text(format!(
        "{SUMMARY_TAG}\n{SUMMARY_PREFIX}\n\n{}\n</compaction-summary>",
        inputs.summary.trim()
    )));
    if let Some(plan) = &inputs.plan {
        first.content.push(ContentBlock::text(format!(
            "{PLAN_TAG} path=\"{}\">\n{}\n</plan-file>\nThis is your plan file as it is on disk now, re-read after the compaction.",
            escape_attribute(&plan.path),
            plan.content.trim_end()
        )));
    }
    if let Some(state) = inputs
        .coordination_state
        .as_deref()
        .filter(|s| !s.trim().is_empty())
    {
        first.content.push(ContentBlock::text(format!(
            "{STATE_TAG}\n{}\n</team-state>\nYour mailbox and the task board, read from the store just now.",
            state.trim()
        )));
    }
    let kept = inputs.cut.kept(inputs.messages);
    let rest = match kept.split_first() {
        Some((head, rest))
            if head.role == Role::User
                && !head
                    .content
                    .iter()
                    .any(|b| matches!(b, ContentBlock::ToolResult { .. })) =>
        {
            first.content.extend(head.content.iter().cloned());
            rest
        }
        _ => kept,
    };
    let mut rebuilt = Vec::with_capacity(rest.len() + 1);
    rebuilt.push(first);
    rebuilt.extend(rest.iter().cloned());
    rebuilt
}

fn escape_attribute(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
}

/// The text a user message carries for the recent-messages section: its text blocks without
/// mode reminders and without sections an earlier compaction added.
fn user_text(message: &Message) -> Option<String> {
    if message.role != Role::User {
        return None;
    }
    let parts: Vec<String> = message
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .filter(|text| {
            let t = text.trim_start();
            !(t.starts_with(SUMMARY_TAG)
                || t.starts_with(PLAN_TAG)
                || t.starts_with(STATE_TAG)
                || t.starts_with(REQUEST_TAG))
        })
        .map(strip_reminders)
        .map(|text| text.trim().to_owned())
        .filter(|text| !text.is_empty())
        .collect();
    (!parts.is_empty()).then(|| parts.join("\n\n"))
}

/// `text` without its `<system-reminder>…</system-reminder>` spans (an unclosed one runs to the
/// end).
pub(super) fn strip_reminders(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(REMINDER_OPEN) {
        out.push_str(&rest[..start]);
        let after = &rest[start..];
        match after.find(REMINDER_CLOSE) {
            Some(end) => rest = &after[end + REMINDER_CLOSE.len()..],
            None => rest = "",
        }
    }
    out.push_str(rest);
    out
}

/// The user messages to keep, oldest first, chosen newest first within `budget` tokens.
pub(super) fn recent_user_messages(messages: &[Message], budget: u64) -> Vec<String> {
    let mut remaining = budget;
    let mut chosen = Vec::new();
    for text in messages.iter().rev().filter_map(user_text) {
        let tokens = estimate_tokens(&text);
        if tokens <= remaining {
            remaining -= tokens;
            chosen.push(text);
            continue;
        }
        if let Some(truncated) = truncate_to_tokens(&text, remaining) {
            chosen.push(truncated);
        }
        break;
    }
    chosen.reverse();
    chosen
}

/// `text` cut in the middle to at most `tokens` estimated tokens, with a marker saying how much
/// was cut; `None` when not even the marker fits.
pub(super) fn truncate_to_tokens(text: &str, tokens: u64) -> Option<String> {
    let total = text.chars().count();
    let max_chars = usize::try_from(tokens.saturating_mul(4)).unwrap_or(usize::MAX);
    if total <= max_chars {
        return Some(text.to_owned());
    }
    // The marker's length depends on the count it names; the count is at most `total`.
    let marker_len = marker(total).chars().count();
    let available = max_chars.checked_sub(marker_len)?;
    if available < 2 {
        return None;
    }
    let head = available / 2;
    let tail = available - head;
    let cut = total - head - tail;
    let mut out: String = text.chars().take(head).collect();
    out.push_str(&marker(cut));
    out.extend(text.chars().skip(total - tail));
    Some(out)
}

fn marker(cut_chars: usize) -> String {
    format!("\n[… {cut_chars} characters cut by compaction …]\n")
}
