//! The Anthropic Messages API: the request body and the SSE event parser.

use std::collections::BTreeMap;

use muster_config::settings::ReasoningEffort;
use serde_json::{Map, Value, json};

use super::error::FailureKind;
use super::types::{
    ContentBlock, ModelRequest, ModelResponse, Role, StopReason, StreamEvent, ThinkingForm,
    ToolCall, Usage,
};
use super::wire::{StreamParser, truncate};

/// The `anthropic-version` header.
pub const VERSION: &str = "2023-06-01";

/// The smallest thinking budget the API takes.
pub const MIN_THINKING_BUDGET: u64 = 1024;

/// Anthropic-specific options.
#[derive(Debug, Clone)]
pub struct AnthropicOptions {
    /// Put `cache_control` breakpoints on the system prompt, the last tool and the newest two
    /// user turns (default true).
    pub prompt_caching: bool,
    /// The thinking form per model name; models not listed use [`ThinkingForm::for_model`].
    pub thinking_forms: BTreeMap<String, ThinkingForm>,
}

impl Default for AnthropicOptions {
    fn default() -> Self {
        AnthropicOptions {
            prompt_caching: true,
            thinking_forms: BTreeMap::new(),
        }
    }
}

impl AnthropicOptions {
    fn form(&self, model: &str) -> ThinkingForm {
        self.thinking_forms
            .get(model)
            .copied()
            .unwrap_or_else(|| ThinkingForm::for_model(model))
    }
}

/// The thinking budget actually sent: clipped to ≥ 1024 and < `max_tokens`, or `None` (thinking
/// off) when no such budget exists.
pub fn clip_thinking_budget(budget: u64, max_tokens: u64) -> Option<u64> {
    let highest = max_tokens.checked_sub(1)?;
    if highest < MIN_THINKING_BUDGET {
        return None;
    }
    Some(budget.clamp(MIN_THINKING_BUDGET, highest))
}

fn effort_name(effort: ReasoningEffort) -> &'static str {
    match effort {
        ReasoningEffort::Minimal | ReasoningEffort::Low => "low",
        ReasoningEffort::Medium => "medium",
        ReasoningEffort::High => "high",
    }
}

/// The most `cache_control` blocks one request may carry (the API's limit).
pub const MAX_BREAKPOINTS: usize = 4;

/// Breakpoints on the conversation: the newest user turn, and the one before it.
const CONVERSATION_BREAKPOINTS: usize = 2;

/// The messages whose last block carries a breakpoint: the newest `count` user turns. The
/// newest one writes the prefix the next request reads; the one before it is where the
/// previous request wrote, so this request reads that prefix even when its own is new. History
/// never changes (the mode `<system-reminder>` is part of the committed user turn), so each
/// prefix stays byte-identical until compaction or a context reset starts a new one.
fn conversation_breakpoints(request: &ModelRequest, count: usize) -> Vec<usize> {
    request
        .messages
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, m)| m.role == Role::User && !m.content.is_empty())
        .map(|(i, _)| i)
        .take(count)
        .collect()
}

/// The `POST /v1/messages` body.
pub fn body(request: &ModelRequest, options: &AnthropicOptions) -> Value {
    let ephemeral = || json!({"type": "ephemeral"});
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("max_tokens".into(), json!(request.max_tokens));
    body.insert("stream".into(), json!(true));
    if !request.system.is_empty() {
        let mut block = json!({"type": "text", "text": request.system});
        if options.prompt_caching
            && let Some(map) = block.as_object_mut()
        {
            map.insert("cache_control".into(), ephemeral());
        }
        body.insert("system".into(), json!([block]));
    }
    let free = MAX_BREAKPOINTS
        - usize::from(!request.system.is_empty())
        - usize::from(!request.tools.is_empty());
    let marked = conversation_breakpoints(request, free.min(CONVERSATION_BREAKPOINTS));
    let messages: Vec<Value> = request
        .messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut content: Vec<Value> = m
                .content
                .iter()
                .filter(|b| {
                    // Reasoning text from another provider has no signature: the API would
                    // refuse it.
                    !matches!(b, ContentBlock::Thinking { signature, .. } if signature.is_empty())
                })
                .map(ContentBlock::to_value)
                .collect();
            if options.prompt_caching
                && marked.contains(&i)
                && let Some(Value::Object(last)) = content.last_mut()
            {
                last.insert("cache_control".into(), ephemeral());
            }
            json!({"role": m.role, "content": content})
        })
        .collect();
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        let last = request.tools.len() - 1;
        let tools: Vec<Value> = request
            .tools
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mut v = json!({
                    "name": t.name, "description": t.description, "input_schema": t.input_schema,
                });
                if options.prompt_caching
                    && i == last
                    && let Some(map) = v.as_object_mut()
                {
                    map.insert("cache_control".into(), ephemeral());
                }
                v
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    let thinking = request.thinking;
    if !thinking.is_off() {
        match options.form(&request.model) {
            ThinkingForm::Budget => {
                let wanted = thinking.budget_tokens.unwrap_or(match thinking.effort {
                    Some(ReasoningEffort::Minimal) | Some(ReasoningEffort::Low) => 2048,
                    Some(ReasoningEffort::Medium) | None => 8192,
                    Some(ReasoningEffort::High) => 32_000,
                });
                if let Some(budget) = clip_thinking_budget(wanted, request.max_tokens) {
                    body.insert(
                        "thinking".into(),
                        json!({"type": "enabled", "budget_tokens": budget}),
                    );
                }
            }
            ThinkingForm::Adaptive => {
                body.insert("thinking".into(), json!({"type": "adaptive"}));
                if let Some(effort) = thinking.effort {
                    body.insert(
                        "output_config".into(),
                        json!({"effort": effort_name(effort)}),
                    );
                }
            }
            ThinkingForm::None => {}
        }
    }
    Value::Object(body)
}

/// A content block being assembled.
#[derive(Debug)]
enum Building {
    Text(String),
    Thinking {
        thinking: String,
        signature: String,
    },
    ToolUse {
        id: String,
        name: String,
        json: String,
        initial: Value,
    },
    /// A block kept verbatim (`redacted_thinking`, unknown types).
    Raw(Value),
}

/// The SSE parser of a Messages stream.
#[derive(Debug, Default)]
pub(crate) struct Parser {
    id: Option<String>,
    model: String,
    /// Open blocks by index.
    open: BTreeMap<usize, Building>,
    /// Finished blocks by index.
    done: BTreeMap<usize, ContentBlock>,
    usage: Usage,
    stop_reason: Option<String>,
    /// Tool calls whose input JSON did not parse, by index: `(id, name, parse error)`.
    unparsed: BTreeMap<usize, (String, String, String)>,
}

fn data_json(name: &str, data: &str) -> Result<Value, FailureKind> {
    serde_json::from_str(data).map_err(|e| FailureKind::MalformedChunk {
        detail: format!("event {name:?}: {e}: {}", truncate(data.trim_end(), 200)),
    })
}

impl Parser {
    fn close(
        &mut self,
        index: usize,
        emit: &mut dyn FnMut(StreamEvent),
    ) -> Result<(), FailureKind> {
        let Some(building) = self.open.remove(&index) else {
            return Ok(());
        };
        let block = match building {
            Building::Text(text) => ContentBlock::Text { text },
            Building::Thinking {
                thinking,
                signature,
            } => ContentBlock::Thinking {
                thinking,
                signature,
            },
            Building::ToolUse {
                id,
                name,
                json,
                initial,
            } => {
                let input = if json.trim().is_empty() {
                    initial
                } else {
                    match serde_json::from_str(&json) {
                        Ok(input) => input,
                        // Invalid JSON: cut by the output limit (known only at `message_delta`,
                        // after this block's stop) or malformed; `finish` decides which.
                        Err(e) => {
                            self.unparsed.insert(
                                index,
                                (id, name, format!("{e}: {}", truncate(&json, 200))),
                            );
                            return Ok(());
                        }
                    }
                };
                emit(StreamEvent::ToolCall {
                    index,
                    call: ToolCall {
                        id: id.clone(),
                        name: name.clone(),
                        input: input.clone(),
                    },
                });
                ContentBlock::ToolUse { id, name, input }
            }
            Building::Raw(v) => ContentBlock::Other(v),
        };
        self.done.insert(index, block);
        Ok(())
    }
}

impl StreamParser for Parser {
    fn event(
        &mut self,
        name: &str,
        data: &str,
        emit: &mut dyn FnMut(StreamEvent),
    ) -> Result<bool, FailureKind> {
        // An event without a name takes its type from the data (some gateways omit `event:`).
        if data.trim().is_empty() {
            return Ok(false);
        }
        let v = data_json(name, data)?;
        let ty = if name.is_empty() || name == "message" {
            v.get("type").and_then(Value::as_str).unwrap_or_default()
        } else {
            name
        };
        let index = v.get("index").and_then(Value::as_u64).map(|i| i as usize);
        match ty {
            "message_start" => {
                let m = v.get("message").unwrap_or(&Value::Null);
                self.id = m.get("id").and_then(Value::as_str).map(str::to_owned);
                if let Some(model) = m.get("model").and_then(Value::as_str) {
                    self.model = model.to_owned();
                }
                if let Some(u) = m.get("usage") {
                    self.usage.merge_anthropic(u);
                    emit(StreamEvent::Usage(self.usage));
                }
            }
            "content_block_start" => {
                let Some(index) = index else {
                    return Ok(false);
                };
                let block = v.get("content_block").cloned().unwrap_or(Value::Null);
                let s = |k: &str| {
                    block
                        .get(k)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                let building = match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        let text = s("text");
                        if !text.is_empty() {
                            emit(StreamEvent::TextDelta {
                                index,
                                text: text.clone(),
                            });
                        }
                        Building::Text(text)
                    }
                    Some("thinking") => Building::Thinking {
                        thinking: s("thinking"),
                        signature: s("signature"),
                    },
                    Some("tool_use") => Building::ToolUse {
                        id: s("id"),
                        name: s("name"),
                        json: String::new(),
                        initial: block
                            .get("input")
                            .cloned()
                            .filter(Value::is_object)
                            .unwrap_or_else(|| Value::Object(Map::new())),
                    },
                    _ => Building::Raw(block),
                };
                self.open.insert(index, building);
            }
            "content_block_delta" => {
                let Some(index) = index else {
                    return Ok(false);
                };
                let delta = v.get("delta").unwrap_or(&Value::Null);
                let text = |k: &str| delta.get(k).and_then(Value::as_str).unwrap_or_default();
                match (
                    self.open.get_mut(&index),
                    delta.get("type").and_then(Value::as_str),
                ) {
                    (Some(Building::Text(buf)), Some("text_delta")) => {
                        buf.push_str(text("text"));
                        emit(StreamEvent::TextDelta {
                            index,
                            text: text("text").to_owned(),
                        });
                    }
                    (Some(Building::ToolUse { json, .. }), Some("input_json_delta")) => {
                        json.push_str(text("partial_json"));
                        emit(StreamEvent::ToolInputDelta {
                            index,
                            partial_json: text("partial_json").to_owned(),
                        });
                    }
                    (Some(Building::Thinking { thinking, .. }), Some("thinking_delta")) => {
                        thinking.push_str(text("thinking"));
                        emit(StreamEvent::ThinkingDelta {
                            index,
                            thinking: text("thinking").to_owned(),
                        });
                    }
                    (Some(Building::Thinking { signature, .. }), Some("signature_delta")) => {
                        signature.push_str(text("signature"));
                    }
                    // Citations, compaction and future deltas, or a delta for a block never
                    // started: skipped.
                    (_, other) => {
                        tracing::debug!(index, delta = ?other, "skipping an unknown delta");
                    }
                }
            }
            "content_block_stop" => {
                if let Some(index) = index {
                    self.close(index, emit)?;
                }
            }
            "message_delta" => {
                if let Some(reason) = v
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str)
                {
                    self.stop_reason = Some(reason.to_owned());
                }
                if let Some(u) = v.get("usage") {
                    self.usage.merge_anthropic(u);
                    emit(StreamEvent::Usage(self.usage));
                }
            }
            "message_stop" => return Ok(true),
            "ping" => {}
            "error" => {
                let err = v.get("error").unwrap_or(&Value::Null);
                let field = |k: &str| {
                    err.get(k)
                        .and_then(Value::as_str)
                        .unwrap_or("unknown")
                        .to_owned()
                };
                return Err(FailureKind::StreamError {
                    error_type: field("type"),
                    message: field("message"),
                });
            }
            other => tracing::debug!(event = other, "skipping an unknown event"),
        }
        Ok(false)
    }

    fn finish(
        mut self: Box<Self>,
        terminal: bool,
        emit: &mut dyn FnMut(StreamEvent),
    ) -> Result<ModelResponse, FailureKind> {
        if !terminal {
            return Err(FailureKind::Truncated {
                expected: "message_stop",
            });
        }
        let stop_reason = StopReason::parse(self.stop_reason.as_deref().unwrap_or("end_turn"));
        // Blocks never stopped: the answer was cut (e.g. `max_tokens` in the middle of a tool
        // call). Text and thinking are kept as they are.
        let open: Vec<usize> = self.open.keys().copied().collect();
        for index in open {
            self.close(index, emit)?;
        }
        // A tool call whose JSON is incomplete because the output limit cut it is kept with
        // its id and an empty input: the runtime answers it with an error the model can act
        // on (see `crate::runtime`). Invalid JSON in an answer that was not cut is malformed.
        for (index, (id, name, detail)) in std::mem::take(&mut self.unparsed) {
            if stop_reason != StopReason::MaxTokens {
                return Err(FailureKind::MalformedToolInput { tool: name, detail });
            }
            tracing::warn!(tool = %name, "a tool call was cut off by max_tokens");
            self.done.insert(
                index,
                ContentBlock::ToolUse {
                    id,
                    name,
                    input: Value::Object(Map::new()),
                },
            );
        }
        Ok(ModelResponse {
            id: self.id,
            model: self.model,
            content: self.done.into_values().collect(),
            stop_reason,
            usage: self.usage,
            cost_usd: None,
            attempts: 1,
        })
    }
}

/// A non-streamed Messages answer, parsed as the equivalent stream.
pub(crate) fn from_message(
    v: &Value,
    emit: &mut dyn FnMut(StreamEvent),
) -> Result<ModelResponse, FailureKind> {
    let mut parser = Box::new(Parser::default());
    if v.get("type").and_then(Value::as_str) == Some("error") {
        parser.event("error", &v.to_string(), emit)?;
    }
    let Some(content) = v.get("content").and_then(Value::as_array) else {
        return Err(FailureKind::MalformedChunk {
            detail: format!(
                "JSON body is not a message: {}",
                truncate(&v.to_string(), 200)
            ),
        });
    };
    let mut start = v.clone();
    if let Some(map) = start.as_object_mut() {
        map.insert("content".into(), json!([]));
    }
    parser.event(
        "message_start",
        &json!({"message": start}).to_string(),
        emit,
    )?;
    for (index, block) in content.iter().enumerate() {
        let start = json!({"index": index, "content_block": block});
        parser.event("content_block_start", &start.to_string(), emit)?;
        parser.event(
            "content_block_stop",
            &json!({"index": index}).to_string(),
            emit,
        )?;
    }
    let delta = json!({"delta": {"stop_reason": v.get("stop_reason")}});
    parser.event("message_delta", &delta.to_string(), emit)?;
    parser.finish(true, emit)
}

#[cfg(test)]
mod tests {
    use super::*;

    use proptest::prelude::*;

    fn event_strategy() -> impl Strategy<Value = (String, String)> {
        let names = prop::sample::select(vec![
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
            "ping",
            "error",
            "",
            "future",
        ]);
        let block = prop::sample::select(vec!["text", "tool_use", "thinking", "redacted", "x"]);
        let delta = prop::sample::select(vec![
            "text_delta",
            "input_json_delta",
            "thinking_delta",
            "signature_delta",
            "citations_delta",
        ]);
        (names, block, delta, 0u64..4, ".{0,12}", any::<u64>()).prop_map(
            |(name, block, delta, index, text, n)| {
                let data = match name {
                    "message_start" => json!({"message": {"id": text, "usage": {"input_tokens": n}}}),
                    "content_block_start" => {
                        json!({"index": index, "content_block": {"type": block, "text": text, "id": text, "name": text}})
                    }
                    "content_block_delta" => json!({"index": index, "delta": {
                        "type": delta, "text": text, "partial_json": text, "thinking": text, "signature": text,
                    }}),
                    "content_block_stop" => json!({"index": index}),
                    "message_delta" => {
                        json!({"delta": {"stop_reason": text}, "usage": {"output_tokens": n, "input_tokens": n}})
                    }
                    _ => json!({"type": text, "error": {"type": text}}),
                };
                let data = if n % 7 == 0 { text } else { data.to_string() };
                (name.to_owned(), data)
            },
        )
    }

    proptest! {
        /// Any sequence of events, well-formed or not, gives a response or a typed error.
        #[test]
        fn parser_never_panics(events in prop::collection::vec(event_strategy(), 0..24), terminal in any::<bool>()) {
            let mut parser = Box::new(Parser::default());
            let mut emit = |_e: StreamEvent| {};
            let mut done = false;
            for (name, data) in &events {
                match parser.event(name, data, &mut emit) {
                    Ok(true) => { done = true; break; }
                    Ok(false) => {}
                    Err(_) => return Ok(()),
                }
            }
            let _ = parser.finish(done || terminal, &mut emit);
        }
    }

    #[test]
    fn thinking_budget_clipping() {
        assert_eq!(clip_thinking_budget(500, 8192), Some(1024));
        assert_eq!(clip_thinking_budget(10_000, 8192), Some(8191));
        assert_eq!(clip_thinking_budget(2048, 8192), Some(2048));
        assert_eq!(clip_thinking_budget(2048, 1025), Some(1024));
        assert_eq!(clip_thinking_budget(2048, 1024), None);
        assert_eq!(clip_thinking_budget(2048, 0), None);
    }

    #[test]
    fn thinking_form_per_model() {
        assert_eq!(
            ThinkingForm::for_model("claude-sonnet-4-5"),
            ThinkingForm::Budget
        );
        assert_eq!(
            ThinkingForm::for_model("claude-sonnet-4-5-20250929"),
            ThinkingForm::Budget
        );
        assert_eq!(
            ThinkingForm::for_model("claude-opus-4-6"),
            ThinkingForm::Adaptive
        );
        assert_eq!(
            ThinkingForm::for_model("claude-opus-4-7"),
            ThinkingForm::Adaptive
        );
        assert_eq!(
            ThinkingForm::for_model("claude-opus-5"),
            ThinkingForm::Adaptive
        );
        assert_eq!(
            ThinkingForm::for_model("claude-3-7-sonnet"),
            ThinkingForm::Budget
        );
    }
}
