//! Compaction: when an agent's context nears its model's window, older turns are summarised by
//! the model into a handoff note and the context is rebuilt around it.
//!
//! The steps, in the order the runtime calls them:
//! 1. [`needs_compaction`] before each model request: the last response's prompt size
//!    (input + cache read + cache write) plus an estimate of what was appended since
//!    ([`estimate_messages_tokens`]) against [`compaction_threshold`], by default the lower of
//!    85 % of the window and window − max output − 13,000 tokens ([`CompactionConfig`]).
//! 2. [`plan_cut`] on the context: `messages[..cut.index]` are summarised, `messages[cut.index..]`
//!    are kept verbatim. The cut falls only at a turn boundary, never separates a `tool_use`
//!    from its `tool_result`, and keeps any unanswered tool call and the latest signed thinking
//!    block. An empty cut ([`Cut::is_empty`]) means there is nothing to summarise.
//! 3. [`SummaryRequest::build`]: the summarised messages plus the handoff prompt
//!    ([`HANDOFF_PROMPT`]), sent with [`RequestContext::compact`] so it carries
//!    `x-muster-purpose: compact`. It is a model request like any other: it takes the agent's
//!    next turn index and goes through the budget ledger. [`summary_text`] reads the note.
//! 4. [`rebuild`] the context from [`CompactionInputs`]: the most recent user and lead
//!    messages (within [`CompactionConfig::recent_messages_tokens`], newest first, the oldest
//!    truncated), the summary, the plan reference with the plan re-read from disk, the mailbox
//!    and task state read fresh from the store ([`read_coordination_state`], rendered within
//!    [`COORDINATION_STATE_TOKENS`] by [`render_coordination_state`]), then the kept messages (any unanswered tool
//!    call and the latest thinking block among them).
//!
//! The system prompt and the tool list are not part of the messages: the caller rebuilds them
//! from their sources (the agent definition, the instructions, the tool registry) for every
//! request, before and after compaction, and never summarises them.
//!
//! What the runtime must record: the compaction request's turn, model, usage and cost (for
//! budgets), and the rebuilt messages (or the summary and the cut, from which they are rebuilt),
//! so that a resume continues from the compacted context; the turn index is never reset.
//!
//! Tokens are estimated as characters / 4 ([`estimate_tokens`]); no tokenizer is used.
//!
//! [`RequestContext::compact`]: crate::model::RequestContext::compact

mod cut;
mod estimate;
mod rebuild;
mod state;
mod summary;
mod trigger;

#[cfg(test)]
mod tests;

pub use cut::{Cut, CutLimit, plan_cut};
pub use estimate::{
    estimate_block_tokens, estimate_message_tokens, estimate_messages_tokens, estimate_tokens,
};
pub use rebuild::{CompactionInputs, PlanReference, SUMMARY_PREFIX, rebuild};
pub use state::{
    BoardTask, COORDINATION_STATE_TOKENS, CoordinationState, MailEntry, OpenRequest,
    read_coordination_state, render_coordination_state,
};
pub use summary::{HANDOFF_PROMPT, SummaryRequest, summary_text};
pub use trigger::{CompactionConfig, compaction_threshold, needs_compaction};

/// Why compaction could not go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompactionError {
    /// The cut leaves nothing to summarise (everything must be kept verbatim).
    #[error("nothing to summarise: the whole context must be kept verbatim")]
    NothingToSummarise,
    /// The model's answer to the summary request had no text.
    #[error("the summary request returned no text (stop reason `{stop_reason}`)")]
    EmptySummary { stop_reason: String },
}
