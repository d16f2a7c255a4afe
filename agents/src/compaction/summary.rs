//! The summary request: the summarised messages and the handoff prompt, sent as a compaction
//! request (`x-muster-purpose: compact`).

use crate::model::{
    ContentBlock, Message, ModelRequest, ModelResponse, RequestContext, Role, ThinkingSettings,
};

use super::CompactionError;
use super::cut::Cut;
use super::trigger::CompactionConfig;

/// The instruction appended to the summarised messages: a context checkpoint for whoever
/// continues the work.
pub const HANDOFF_PROMPT: &str = "\
<compaction-request>
Your context window is almost full. Everything above this message is about to be replaced by a \
handoff note that you write now. The one who continues from it is another instance of you with \
the same system prompt and tools; besides your note they will see the plan file (re-read from \
disk), the current mailbox and task board (read from the store), the most recent messages from \
the user and the lead, and your latest turn. Anything else you do not write down is lost.

Do not call any tool. Reply with the note only, in Markdown, with these sections:
## Goal
What you were asked to achieve, by whom, and what counts as done.
## Progress
What is done so far, the decisions taken and why, and what was tried and failed.
## Constraints
Requirements, preferences and rules from the user or the lead that still apply.
## Working set
Files read and files changed (paths), commands run and their outcome, the last build or test \
result and the names of failing tests.
## Next steps
What remains, in order, starting with the very next action.
## References
Exact identifiers, paths, request and task ids, error messages and numbers that must survive.

Be concrete and brief. Do not copy the plan: it is re-read from disk.
</compaction-request>";

/// A compaction request ready to send: `context` carries `x-muster-purpose: compact`.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryRequest {
    pub context: RequestContext,
    pub request: ModelRequest,
}

impl SummaryRequest {
    /// The summary request for `cut` of `base.messages`: the same model, system prompt and
    /// tools as the agent's next request `base` (so the cached prefix is read, not written
    /// again), the summarised messages followed by [`HANDOFF_PROMPT`], thinking off, and
    /// `max_tokens` the lower of `base.max_tokens` and `config.summary_max_tokens`. `context`
    /// is the agent's request context for its next turn index; it is marked as compaction.
    pub fn build(
        context: RequestContext,
        base: &ModelRequest,
        cut: &Cut,
        config: &CompactionConfig,
    ) -> Result<SummaryRequest, CompactionError> {
        let summarised = cut.summarised(&base.messages);
        if cut.is_empty() || summarised.is_empty() {
            return Err(CompactionError::NothingToSummarise);
        }
        let mut messages = summarised.to_vec();
        let prompt = ContentBlock::text(HANDOFF_PROMPT);
        match messages.last_mut() {
            // After tool results, text may follow in the same user message.
            Some(last) if last.role == Role::User => last.content.push(prompt),
            _ => messages.push(Message {
                role: Role::User,
                content: vec![prompt],
            }),
        }
        Ok(SummaryRequest {
            context: context.compact(),
            request: ModelRequest {
                model: base.model.clone(),
                system: base.system.clone(),
                messages,
                tools: base.tools.clone(),
                max_tokens: base.max_tokens.min(config.summary_max_tokens).max(1),
                thinking: ThinkingSettings::default(),
            },
        })
    }
}

/// The handoff note in the model's answer: its text blocks, trimmed. Tool calls in the answer
/// are ignored; an answer without text is an error.
pub fn summary_text(response: &ModelResponse) -> Result<String, CompactionError> {
    let text = response.text();
    let text = text.trim();
    if text.is_empty() {
        return Err(CompactionError::EmptySummary {
            stop_reason: response.stop_reason.as_str().to_owned(),
        });
    }
    Ok(text.to_owned())
}
