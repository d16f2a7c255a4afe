//! Renders one scripted reply into the Anthropic or OpenAI format, streaming or not.

use crate::script::{Block, OpenAiQuirks, Reply};
use crate::state::tokens_for_chars;
use serde_json::{Value, json};

/// A fixed `created` timestamp, for deterministic OpenAI chunks.
pub(crate) const CREATED: u64 = 1_700_000_000;

/// One SSE event: an optional `event:` name and the `data:` payload.
#[derive(Debug, Clone)]
pub(crate) struct Event {
    pub name: Option<String>,
    pub data: String,
}

impl Event {
    fn named(name: &str, data: Value) -> Self {
        Event {
            name: Some(name.to_owned()),
            data: data.to_string(),
        }
    }

    fn data(data: Value) -> Self {
        Event {
            name: None,
            data: data.to_string(),
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Usage {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_creation: u64,
}

/// What is decided before rendering: ids, model, usage, stop reason.
pub(crate) struct Prepared<'a> {
    pub reply: &'a Reply,
    pub msg_id: String,
    /// One id per `tool_use` block, in order.
    pub tool_ids: Vec<String>,
    pub model: String,
    pub usage: Usage,
    pub stop_reason: String,
    pub chunk_chars: usize,
    /// Cut the last block after half of its deltas, without `content_block_stop`.
    pub cut_last_block: bool,
}

impl Prepared<'_> {
    pub fn new<'a>(
        reply: &'a Reply,
        msg_id: String,
        tool_ids: Vec<String>,
        request_model: &str,
        input_chars: usize,
        chunk_chars: usize,
    ) -> Prepared<'a> {
        let has_tool = reply
            .content
            .iter()
            .any(|b| matches!(b, Block::ToolUse { .. }));
        let stop_reason = reply
            .stop_reason
            .clone()
            .unwrap_or_else(|| if has_tool { "tool_use" } else { "end_turn" }.to_owned());
        let output_chars: usize = reply
            .content
            .iter()
            .map(|b| match b {
                Block::Text(t) => t.chars().count(),
                Block::ToolUse { input, .. } => input.to_string().chars().count(),
                Block::Thinking { thinking, .. } => thinking.chars().count(),
                Block::Raw(_) => 0,
            })
            .sum();
        let spec = reply.usage.clone().unwrap_or_default();
        let usage = Usage {
            input: spec
                .input_tokens
                .unwrap_or_else(|| tokens_for_chars(input_chars)),
            output: spec
                .output_tokens
                .unwrap_or_else(|| tokens_for_chars(output_chars).max(1)),
            cache_read: spec.cache_read_input_tokens.unwrap_or(0),
            cache_creation: spec.cache_creation_input_tokens.unwrap_or(0),
        };
        Prepared {
            reply,
            msg_id,
            tool_ids,
            model: reply
                .model
                .clone()
                .unwrap_or_else(|| request_model.to_owned()),
            usage,
            stop_reason,
            chunk_chars: if chunk_chars == 0 { 16 } else { chunk_chars },
            cut_last_block: false,
        }
    }

    /// The delta pieces of block `index`: all of them, or the first half when it is cut.
    fn pieces(&self, index: usize, s: &str) -> Vec<String> {
        let mut all = split_chars(s, self.chunk_chars);
        if self.is_cut(index) {
            all.truncate(
                all.len()
                    .div_ceil(2)
                    .min(all.len().saturating_sub(1))
                    .max(1),
            );
        }
        all
    }

    fn is_cut(&self, index: usize) -> bool {
        self.cut_last_block && index + 1 == self.reply.content.len()
    }

    fn tool_id(&self, n: usize, explicit: &Option<String>) -> String {
        explicit
            .clone()
            .or_else(|| self.tool_ids.get(n).cloned())
            .unwrap_or_default()
    }
}

/// Splits `s` into pieces of at most `n` characters (never inside a character).
pub(crate) fn split_chars(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    chars
        .chunks(n.max(1))
        .map(|c| c.iter().collect::<String>())
        .collect()
}

// ---------------------------------------------------------------- Anthropic

fn anthropic_block_value(p: &Prepared<'_>, block: &Block, tool_n: usize) -> Value {
    match block {
        Block::Text(text) => json!({"type": "text", "text": text}),
        Block::ToolUse { name, input, id } => {
            json!({"type": "tool_use", "id": p.tool_id(tool_n, id), "name": name, "input": input})
        }
        Block::Thinking {
            thinking,
            signature,
        } => json!({"type": "thinking", "thinking": thinking, "signature": signature}),
        Block::Raw(v) => v.clone(),
    }
}

fn anthropic_usage(u: &Usage) -> Value {
    json!({
        "input_tokens": u.input,
        "cache_creation_input_tokens": u.cache_creation,
        "cache_read_input_tokens": u.cache_read,
        "cache_creation": {"ephemeral_5m_input_tokens": u.cache_creation, "ephemeral_1h_input_tokens": 0},
        "output_tokens": u.output,
        "service_tier": "standard",
    })
}

/// The non-streaming Anthropic Message.
pub(crate) fn anthropic_message(p: &Prepared<'_>) -> Value {
    let mut tool_n = 0;
    let content: Vec<Value> = p
        .reply
        .content
        .iter()
        .map(|b| {
            let v = anthropic_block_value(p, b, tool_n);
            if matches!(b, Block::ToolUse { .. }) {
                tool_n += 1;
            }
            v
        })
        .collect();
    json!({
        "id": p.msg_id,
        "type": "message",
        "role": "assistant",
        "model": p.model,
        "content": content,
        "stop_reason": p.stop_reason,
        "stop_sequence": null,
        "usage": anthropic_usage(&p.usage),
    })
}

/// The Anthropic SSE event sequence (docs "messages-streaming").
pub(crate) fn anthropic_events(p: &Prepared<'_>, ping: bool) -> Vec<Event> {
    let mut ev = Vec::new();
    let mut start_usage = p.usage;
    start_usage.output = 1;
    let mut start_usage = anthropic_usage(&start_usage);
    if let Some(map) = start_usage.as_object_mut() {
        map.remove("cache_creation");
    }
    ev.push(Event::named(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": p.msg_id, "type": "message", "role": "assistant", "model": p.model,
            "content": [], "stop_reason": null, "stop_sequence": null, "usage": start_usage,
        }}),
    ));
    let mut tool_n = 0;
    for (index, block) in p.reply.content.iter().enumerate() {
        let delta = |d: Value| {
            Event::named(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": d}),
            )
        };
        let start = |b: Value| {
            Event::named(
                "content_block_start",
                json!({"type": "content_block_start", "index": index, "content_block": b}),
            )
        };
        let start_pos = ev.len();
        match block {
            Block::Text(text) => {
                ev.push(start(json!({"type": "text", "text": ""})));
                for piece in p.pieces(index, text) {
                    ev.push(delta(json!({"type": "text_delta", "text": piece})));
                }
            }
            Block::ToolUse { name, input, id } => {
                let id = p.tool_id(tool_n, id);
                tool_n += 1;
                ev.push(start(
                    json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
                ));
                ev.push(delta(
                    json!({"type": "input_json_delta", "partial_json": ""}),
                ));
                for piece in p.pieces(index, &input.to_string()) {
                    ev.push(delta(
                        json!({"type": "input_json_delta", "partial_json": piece}),
                    ));
                }
            }
            Block::Thinking {
                thinking,
                signature,
            } => {
                ev.push(start(
                    json!({"type": "thinking", "thinking": "", "signature": ""}),
                ));
                for piece in p.pieces(index, thinking) {
                    ev.push(delta(json!({"type": "thinking_delta", "thinking": piece})));
                }
                if !p.is_cut(index) {
                    ev.push(delta(
                        json!({"type": "signature_delta", "signature": signature}),
                    ));
                }
            }
            Block::Raw(v) => ev.push(start(v.clone())),
        }
        // As in the reference stream: a ping right after the first content_block_start.
        if index == 0 && ping {
            ev.insert(start_pos + 1, anthropic_ping());
        }
        if !p.is_cut(index) {
            ev.push(Event::named(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            ));
        }
    }
    let mut usage = anthropic_usage(&p.usage);
    if let Some(map) = usage.as_object_mut() {
        map.remove("cache_creation");
        map.remove("service_tier");
    }
    ev.push(Event::named(
        "message_delta",
        json!({"type": "message_delta",
               "delta": {"stop_reason": p.stop_reason, "stop_sequence": null},
               "usage": usage}),
    ));
    ev.push(Event::named(
        "message_stop",
        json!({"type": "message_stop"}),
    ));
    ev
}

pub(crate) fn anthropic_error_event(error_type: &str, message: &str) -> Event {
    Event::named(
        "error",
        json!({"type": "error", "error": {"type": error_type, "message": message}}),
    )
}

pub(crate) fn anthropic_ping() -> Event {
    Event::named("ping", json!({"type": "ping"}))
}

pub(crate) fn anthropic_unknown_event() -> Event {
    Event::named(
        "fake_future_event",
        json!({"type": "fake_future_event", "detail": {"note": "an event type no client knows"}}),
    )
}

pub(crate) fn anthropic_malformed() -> Event {
    Event {
        name: Some("content_block_delta".into()),
        data: r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"#
            .into(),
    }
}

// ---------------------------------------------------------------- OpenAI

/// Maps an Anthropic stop reason to an OpenAI finish reason.
pub(crate) fn finish_reason(stop_reason: &str) -> &'static str {
    match stop_reason {
        "tool_use" => "tool_calls",
        "max_tokens" | "model_context_window_exceeded" => "length",
        "refusal" => "content_filter",
        _ => "stop",
    }
}

fn openai_usage(u: &Usage) -> Value {
    let prompt = u.input + u.cache_read + u.cache_creation;
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": u.output,
        "total_tokens": prompt + u.output,
        "prompt_tokens_details": {"cached_tokens": u.cache_read},
        "completion_tokens_details": {"reasoning_tokens": 0},
    })
}

/// The text of all text blocks, and the tool calls, of a reply.
fn openai_parts(p: &Prepared<'_>) -> (String, Vec<(String, String, String)>) {
    let mut text = String::new();
    let mut calls = Vec::new();
    let mut tool_n = 0;
    for b in &p.reply.content {
        match b {
            Block::Text(t) => text.push_str(t),
            Block::ToolUse { name, input, id } => {
                calls.push((p.tool_id(tool_n, id), name.clone(), input.to_string()));
                tool_n += 1;
            }
            Block::Thinking { .. } | Block::Raw(_) => {}
        }
    }
    (text, calls)
}

/// The non-streaming chat completion.
pub(crate) fn openai_completion(p: &Prepared<'_>, q: &OpenAiQuirks) -> Value {
    let (text, calls) = openai_parts(p);
    let mut message = json!({
        "role": "assistant",
        "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { Value::String(text) },
        "refusal": null,
    });
    if !calls.is_empty()
        && let Some(map) = message.as_object_mut()
    {
        let calls: Vec<Value> = calls
            .iter()
            .map(|(id, name, args)| {
                json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}})
            })
            .collect();
        map.insert("tool_calls".into(), Value::Array(calls));
    }
    let finish = if q.finish_reason_stop_with_tools {
        "stop"
    } else {
        finish_reason(&p.stop_reason)
    };
    json!({
        "id": p.msg_id,
        "object": "chat.completion",
        "created": CREATED,
        "model": p.model,
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
        "usage": openai_usage(&p.usage),
    })
}

/// The OpenAI chunk sequence, ending in `[DONE]` (unless a quirk says otherwise).
pub(crate) fn openai_events(p: &Prepared<'_>, q: &OpenAiQuirks, include_usage: bool) -> Vec<Event> {
    let chunk = |delta: Value, finish: Value| {
        let mut c = json!({
            "id": p.msg_id, "object": "chat.completion.chunk", "created": CREATED,
            "model": p.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        if include_usage && let Some(map) = c.as_object_mut() {
            map.insert("usage".into(), Value::Null);
        }
        Event::data(c)
    };
    let mut ev = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    let mut tool_n = 0;
    for (index, b) in p.reply.content.iter().enumerate() {
        match b {
            Block::Text(t) => {
                for piece in p.pieces(index, t) {
                    ev.push(chunk(json!({"content": piece}), Value::Null));
                }
            }
            Block::Thinking { thinking, .. } => {
                for piece in p.pieces(index, thinking) {
                    ev.push(chunk(json!({"reasoning_content": piece}), Value::Null));
                }
            }
            Block::ToolUse { name, input, id } => {
                let index = if q.tool_index_always_zero { 0 } else { tool_n };
                let with_index = |mut v: Value| {
                    if !q.omit_tool_index
                        && let Some(map) = v.as_object_mut()
                    {
                        map.insert("index".into(), json!(index));
                    }
                    v
                };
                let first = with_index(json!({
                    "id": p.tool_id(tool_n, id), "type": "function",
                    "function": {"name": name, "arguments": ""},
                }));
                ev.push(chunk(json!({"tool_calls": [first]}), Value::Null));
                for piece in p.pieces(index, &input.to_string()) {
                    let frag = with_index(json!({"function": {"arguments": piece}}));
                    ev.push(chunk(json!({"tool_calls": [frag]}), Value::Null));
                }
                tool_n += 1;
            }
            Block::Raw(_) => {}
        }
    }
    let finish = if q.finish_reason_stop_with_tools {
        "stop"
    } else {
        finish_reason(&p.stop_reason)
    };
    ev.push(chunk(json!({}), json!(finish)));
    if include_usage {
        let choices = if q.usage_choices_null {
            Value::Null
        } else {
            json!([])
        };
        ev.push(Event::data(json!({
            "id": p.msg_id, "object": "chat.completion.chunk", "created": CREATED,
            "model": p.model, "choices": choices, "usage": openai_usage(&p.usage),
        })));
    }
    if !q.no_done {
        ev.push(Event {
            name: None,
            data: "[DONE]".into(),
        });
    }
    ev
}

pub(crate) fn openai_error_event(error_type: &str, message: &str) -> Event {
    Event::data(
        json!({"error": {"message": message, "type": error_type, "param": null, "code": null}}),
    )
}

pub(crate) fn openai_unknown_event() -> Event {
    Event {
        name: Some("fake_future_event".into()),
        data: json!({"object": "fake.future.event", "note": "an event type no client knows"})
            .to_string(),
    }
}

pub(crate) fn openai_malformed() -> Event {
    Event {
        name: None,
        data: r#"{"id":"chatcmpl-fake","object":"chat.completion.chunk","choices":[{"#.into(),
    }
}

/// Formats an event as SSE text.
pub(crate) fn format_event(e: &Event, crlf: bool, trailing_ws: bool) -> String {
    let nl = if crlf { "\r\n" } else { "\n" };
    let ws = if trailing_ws { "  " } else { "" };
    match &e.name {
        Some(name) => format!("event: {name}{nl}data: {}{ws}{nl}{nl}", e.data),
        None => format!("data: {}{ws}{nl}{nl}", e.data),
    }
}
