//! A rough token count: characters / 4, rounded up. Good enough for thresholds and budgets;
//! the real prompt size comes from the provider's `usage`.

use crate::model::{ContentBlock, Message};

/// Tokens of `text` (characters / 4, rounded up).
pub fn estimate_tokens(text: &str) -> u64 {
    let chars = text.chars().count() as u64;
    chars.div_ceil(4)
}

/// Tokens of one block as it is sent.
pub fn estimate_block_tokens(block: &ContentBlock) -> u64 {
    match block {
        ContentBlock::Text { text } => estimate_tokens(text),
        ContentBlock::ToolUse { name, input, .. } => {
            estimate_tokens(name).saturating_add(estimate_tokens(&input.to_string()))
        }
        ContentBlock::ToolResult { content, .. } => estimate_tokens(&content.to_text()),
        ContentBlock::Thinking {
            thinking,
            signature,
        } => estimate_tokens(thinking).saturating_add(estimate_tokens(signature)),
        ContentBlock::Other(value) => estimate_tokens(&value.to_string()),
    }
}

/// Tokens of one message.
pub fn estimate_message_tokens(message: &Message) -> u64 {
    message
        .content
        .iter()
        .map(estimate_block_tokens)
        .fold(0, u64::saturating_add)
}

/// Tokens of several messages (for the content appended since the last model request).
pub fn estimate_messages_tokens(messages: &[Message]) -> u64 {
    messages
        .iter()
        .map(estimate_message_tokens)
        .fold(0, u64::saturating_add)
}
