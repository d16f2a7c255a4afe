//! OpenAI-compatible `/chat/completions`: the request body and the chunk parser, with the
//! defences against the quirks of compatible servers (Ollama, vLLM, llama.cpp).

use muster_config::settings::ReasoningEffort;
use serde_json::{Map, Value, json};

use super::error::FailureKind;
use super::types::{
    ContentBlock, ModelRequest, ModelResponse, Role, StopReason, StreamEvent, ToolCall, Usage,
};
use super::wire::{StreamParser, truncate};

/// OpenAI-specific options.
#[derive(Debug, Clone)]
pub struct OpenAiOptions {
    /// The name of the output limit field: `max_tokens` (default; every compatible server
    /// takes it) or `max_completion_tokens` (newer OpenAI models require it).
    pub max_tokens_field: String,
    /// Whether to send `prompt_cache_key` (see [`prompt_cache_key`]): `None` sends it to the
    /// official endpoint only (OpenAI takes it; a compatible server may refuse a field it
    /// does not know), `Some` forces it on or off.
    pub prompt_cache_key: Option<bool>,
}

impl Default for OpenAiOptions {
    fn default() -> Self {
        OpenAiOptions {
            max_tokens_field: "max_tokens".into(),
            prompt_cache_key: None,
        }
    }
}

/// The `prompt_cache_key` of an agent's requests: stable for the agent within its run, so
/// OpenAI routes its requests (whose prefix only grows) to the machine holding that prefix,
/// and distinct between agents, whose prefixes differ after the system prompt. A digest,
/// so its length does not depend on the ids.
pub fn prompt_cache_key(run_id: &str, agent_id: &str) -> String {
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!("{run_id}\n{agent_id}").as_bytes(),
    );
    let hex: String = digest.as_ref()[..12]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("muster-{hex}")
}

/// The `POST /chat/completions` body.
pub fn body(request: &ModelRequest, options: &OpenAiOptions) -> Value {
    let mut messages = Vec::new();
    if !request.system.is_empty() {
        messages.push(json!({"role": "system", "content": request.system}));
    }
    for m in &request.messages {
        match m.role {
            Role::User => {
                // Tool results first, as `tool` messages, then the rest as one user message.
                let mut text = Vec::new();
                for block in &m.content {
                    match block {
                        ContentBlock::ToolResult {
                            tool_use_id,
                            content,
                            is_error,
                        } => {
                            let mut body = content.to_text();
                            if *is_error && !body.starts_with("Error") {
                                body = format!("Error: {body}");
                            }
                            messages.push(json!({
                                "role": "tool", "tool_call_id": tool_use_id, "content": body,
                            }));
                        }
                        ContentBlock::Text { text: t } => text.push(t.as_str()),
                        _ => {}
                    }
                }
                if !text.is_empty() {
                    messages.push(json!({"role": "user", "content": text.join("\n\n")}));
                }
            }
            Role::Assistant => {
                let mut text = Vec::new();
                let mut calls = Vec::new();
                for block in &m.content {
                    match block {
                        ContentBlock::Text { text: t } => text.push(t.as_str()),
                        ContentBlock::ToolUse { id, name, input } => calls.push(json!({
                            "id": id, "type": "function",
                            "function": {"name": name, "arguments": input.to_string()},
                        })),
                        // Thinking and unknown blocks have no place in this format.
                        _ => {}
                    }
                }
                let mut msg = Map::new();
                msg.insert("role".into(), json!("assistant"));
                msg.insert(
                    "content".into(),
                    if text.is_empty() {
                        Value::Null
                    } else {
                        json!(text.join(""))
                    },
                );
                if !calls.is_empty() {
                    msg.insert("tool_calls".into(), Value::Array(calls));
                }
                messages.push(Value::Object(msg));
            }
        }
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("messages".into(), Value::Array(messages));
    body.insert(options.max_tokens_field.clone(), json!(request.max_tokens));
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.input_schema,
                }})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(effort) = request.thinking.effort {
        let name = match effort {
            ReasoningEffort::Minimal => "minimal",
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
        };
        body.insert("reasoning_effort".into(), json!(name));
    }
    Value::Object(body)
}

/// A tool call being assembled.
#[derive(Debug, Default)]
struct CallBuilder {
    id: String,
    name: String,
    arguments: String,
    /// Arguments sent as a JSON object rather than a string (Ollama-style).
    object: Option<Value>,
}

/// The chunk parser of a chat-completions stream.
#[derive(Debug, Default)]
pub(crate) struct Parser {
    id: Option<String>,
    model: String,
    text: String,
    reasoning: String,
    calls: Vec<CallBuilder>,
    /// The call each wire `index` currently feeds.
    by_index: Vec<(u64, usize)>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
}

impl Parser {
    fn call_for(&mut self, index: u64, id: Option<&str>) -> usize {
        let current = self
            .by_index
            .iter()
            .rev()
            .find(|(i, _)| *i == index)
            .map(|(_, c)| *c);
        let new_call = match (current, id) {
            (None, _) => true,
            // A different id at an index already in use: a new parallel call (Ollama sends
            // every call at index 0).
            (Some(c), Some(id)) => {
                !id.is_empty() && !self.calls[c].id.is_empty() && self.calls[c].id != id
            }
            (Some(_), None) => false,
        };
        if new_call {
            self.calls.push(CallBuilder::default());
            let c = self.calls.len() - 1;
            self.by_index.push((index, c));
            c
        } else {
            current.unwrap_or_default()
        }
    }

    /// Feeds one tool-call fragment; returns the call's position and the argument text it
    /// added (for display).
    fn tool_call_delta(&mut self, position: usize, tc: &Value) -> (usize, Option<String>) {
        let index = tc
            .get("index")
            .and_then(Value::as_u64)
            .unwrap_or(position as u64);
        let id = tc.get("id").and_then(Value::as_str);
        let c = self.call_for(index, id);
        let call = &mut self.calls[c];
        if let Some(id) = id
            && call.id.is_empty()
        {
            call.id = id.to_owned();
        }
        let function = tc.get("function").unwrap_or(&Value::Null);
        if let Some(name) = function.get("name").and_then(Value::as_str)
            && call.name.is_empty()
        {
            call.name = name.to_owned();
        }
        match function.get("arguments") {
            Some(Value::String(s)) => {
                call.arguments.push_str(s);
                return (c, Some(s.clone()).filter(|s| !s.is_empty()));
            }
            Some(v @ Value::Object(_)) => call.object = Some(v.clone()),
            _ => {}
        }
        (c, None)
    }
}

fn openai_usage(v: &Value) -> Usage {
    let get = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
    let prompt = get("prompt_tokens");
    let cached = v
        .get("prompt_tokens_details")
        .and_then(|d| d.get("cached_tokens"))
        .and_then(Value::as_u64)
        .unwrap_or(0)
        .min(prompt);
    Usage {
        input_tokens: prompt - cached,
        output_tokens: get("completion_tokens"),
        cache_read_tokens: cached,
        cache_write_tokens: 0,
    }
}

impl StreamParser for Parser {
    fn event(
        &mut self,
        _name: &str,
        data: &str,
        emit: &mut dyn FnMut(StreamEvent),
    ) -> Result<bool, FailureKind> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(false);
        }
        if data == "[DONE]" {
            return Ok(true);
        }
        let v: Value = serde_json::from_str(data).map_err(|e| FailureKind::MalformedChunk {
            detail: format!("{e}: {}", truncate(data, 200)),
        })?;
        if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
            let field = |k: &str| {
                err.get(k)
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .unwrap_or_else(|| "unknown".into())
            };
            return Err(FailureKind::StreamError {
                error_type: field("type"),
                message: field("message"),
            });
        }
        if self.id.is_none() {
            self.id = v.get("id").and_then(Value::as_str).map(str::to_owned);
        }
        if let Some(model) = v.get("model").and_then(Value::as_str) {
            self.model = model.to_owned();
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            let usage = openai_usage(u);
            self.usage = Some(usage);
            emit(StreamEvent::Usage(usage));
        }
        // `choices` may be missing, null or empty (the usage chunk).
        let choices = v.get("choices").and_then(Value::as_array);
        for choice in choices.into_iter().flatten() {
            if choice.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                continue;
            }
            let delta = choice
                .get("delta")
                .or_else(|| choice.get("message"))
                .unwrap_or(&Value::Null);
            if let Some(text) = delta.get("content").and_then(Value::as_str)
                && !text.is_empty()
            {
                self.text.push_str(text);
                emit(StreamEvent::TextDelta {
                    index: 0,
                    text: text.to_owned(),
                });
            }
            let reasoning = delta
                .get("reasoning_content")
                .or_else(|| delta.get("reasoning"))
                .and_then(Value::as_str);
            if let Some(r) = reasoning
                && !r.is_empty()
            {
                self.reasoning.push_str(r);
                emit(StreamEvent::ThinkingDelta {
                    index: 0,
                    thinking: r.to_owned(),
                });
            }
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                for (position, tc) in calls.iter().enumerate() {
                    if let (call, Some(partial_json)) = self.tool_call_delta(position, tc) {
                        emit(StreamEvent::ToolInputDelta {
                            index: call,
                            partial_json,
                        });
                    }
                }
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish_reason = Some(reason.to_owned());
            }
        }
        Ok(false)
    }

    fn finish(
        self: Box<Self>,
        terminal: bool,
        emit: &mut dyn FnMut(StreamEvent),
    ) -> Result<ModelResponse, FailureKind> {
        // A missing `[DONE]` is tolerated after a finish reason; without either the stream
        // was cut.
        if !terminal && self.finish_reason.is_none() {
            return Err(FailureKind::Truncated {
                expected: "a finish_reason or [DONE]",
            });
        }
        let mut content = Vec::new();
        if !self.reasoning.is_empty() {
            content.push(ContentBlock::Thinking {
                thinking: self.reasoning,
                signature: String::new(),
            });
        }
        if !self.text.is_empty() {
            content.push(ContentBlock::Text { text: self.text });
        }
        let first_call = content.len();
        let mut n = 0;
        for call in self.calls {
            n += 1;
            let input = match call.object {
                Some(obj) if call.arguments.trim().is_empty() => obj,
                _ if call.arguments.trim().is_empty() => Value::Object(Map::new()),
                _ => match serde_json::from_str(&call.arguments) {
                    Ok(v) => v,
                    // Cut by the output limit: kept with its id and an empty input, for the
                    // runtime to answer with an error the model can act on.
                    Err(_) if self.finish_reason.as_deref() == Some("length") => {
                        tracing::warn!(tool = %call.name, "a tool call was cut off by the output limit");
                        Value::Object(Map::new())
                    }
                    Err(e) => {
                        return Err(FailureKind::MalformedToolInput {
                            tool: call.name.clone(),
                            detail: format!("{e}: {}", truncate(&call.arguments, 200)),
                        });
                    }
                },
            };
            let id = if call.id.is_empty() {
                format!("call_muster_{n}")
            } else {
                call.id
            };
            emit(StreamEvent::ToolCall {
                index: first_call + n - 1,
                call: ToolCall {
                    id: id.clone(),
                    name: call.name.clone(),
                    input: input.clone(),
                },
            });
            content.push(ContentBlock::ToolUse {
                id,
                name: call.name,
                input,
            });
        }
        // A tool turn is decided by the calls, never by `finish_reason` alone (vLLM sends
        // `stop` beside tool calls); a cut answer stays cut, calls or not.
        let stop_reason = match self.finish_reason.as_deref() {
            Some("length") => StopReason::MaxTokens,
            _ if n > 0 => StopReason::ToolUse,
            Some("content_filter") => StopReason::Refusal,
            _ => StopReason::EndTurn,
        };
        Ok(ModelResponse {
            id: self.id,
            model: self.model,
            content,
            stop_reason,
            usage: self.usage.unwrap_or_default(),
            cost_usd: None,
            attempts: 1,
        })
    }
}

/// A non-streamed chat completion, parsed as one chunk.
pub(crate) fn from_completion(
    v: &Value,
    emit: &mut dyn FnMut(StreamEvent),
) -> Result<ModelResponse, FailureKind> {
    let mut parser = Box::new(Parser::default());
    let choice = v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first());
    let chunk = match choice {
        Some(choice) => json!({
            "id": v.get("id"), "model": v.get("model"), "usage": v.get("usage"),
            "choices": [{
                "index": 0,
                "delta": choice.get("message"),
                "finish_reason": choice.get("finish_reason").cloned().unwrap_or(json!("stop")),
            }],
        }),
        None if v.get("error").is_some() => v.clone(),
        None => {
            return Err(FailureKind::MalformedChunk {
                detail: format!(
                    "JSON body is not a chat completion: {}",
                    truncate(&v.to_string(), 200)
                ),
            });
        }
    };
    parser.event("", &chunk.to_string(), emit)?;
    parser.finish(true, emit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn chunk_strategy() -> impl Strategy<Value = String> {
        let args = prop_oneof![
            ".{0,8}".prop_map(Value::String),
            Just(json!({"a": 1})),
            Just(Value::Null),
            Just(json!(3)),
        ];
        (
            prop::option::of(0u64..3),
            prop::option::of("[a-c]{1,2}"),
            args,
            prop::option::of(prop::sample::select(vec!["stop", "tool_calls", "length", "x"])),
            any::<u64>(),
            0u8..6,
        )
            .prop_map(|(index, id, args, finish, n, shape)| {
                let mut tc = json!({"function": {"name": "f", "arguments": args}});
                if let Some(i) = index {
                    tc["index"] = json!(i);
                }
                if let Some(id) = id {
                    tc["id"] = json!(id);
                }
                match shape {
                    0 => "[DONE]".to_owned(),
                    1 => json!({"choices": null, "usage": {"prompt_tokens": n, "completion_tokens": n,
                        "prompt_tokens_details": {"cached_tokens": n.rotate_left(3)}}}).to_string(),
                    2 => "{not json".to_owned(),
                    3 => json!({"error": {"message": "x"}}).to_string(),
                    _ => json!({"choices": [{"index": 0, "delta": {"content": "t", "tool_calls": [tc]},
                        "finish_reason": finish}]}).to_string(),
                }
            })
    }

    proptest! {
        /// Any sequence of chunks gives a response or a typed error.
        #[test]
        fn parser_never_panics(chunks in prop::collection::vec(chunk_strategy(), 0..16), terminal in any::<bool>()) {
            let mut parser = Box::new(Parser::default());
            let mut emit = |_e: StreamEvent| {};
            let mut done = false;
            for data in &chunks {
                match parser.event("", data, &mut emit) {
                    Ok(true) => { done = true; break; }
                    Ok(false) => {}
                    Err(_) => return Ok(()),
                }
            }
            let _ = parser.finish(done || terminal, &mut emit);
        }
    }

    #[test]
    fn ollama_parallel_calls_at_index_zero_are_split_by_id() {
        let mut parser = Box::new(Parser::default());
        let mut emit = |_e: StreamEvent| {};
        for data in [
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"Read","arguments":"{\"path\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"a\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"b","function":{"name":"Read","arguments":"{\"path\":\"b\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
        ] {
            assert!(matches!(parser.event("", data, &mut emit), Ok(false)));
        }
        let r = parser.finish(false, &mut emit);
        let calls = r.map(|r| r.tool_calls()).unwrap_or_default();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].input, json!({"path": "a"}));
        assert_eq!(calls[1].input, json!({"path": "b"}));
        assert_eq!(calls[1].id, "b");
    }
}
