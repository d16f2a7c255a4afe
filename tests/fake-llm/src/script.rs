//! The script: which response answers which request, and how it is delivered.
//!
//! See the crate documentation for the JSON format; every type here (de)serialises to it.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// One scripted response and the requests it answers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptEntry {
    /// Matches header `x-muster-agent-id`; absent = any agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Matches header `x-muster-turn`; absent = any turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u64>,
    /// Matches the attempt number of (agent, turn), starting at 1; absent = every attempt
    /// that no entry scripts separately.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// Matches a `<mail …>` tag in the newest user turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<When>,
    /// Matches header `x-muster-purpose` (e.g. `compact`); absent = any purpose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    /// A successful answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<Reply>,
    /// An HTTP error answer (instead of `reply`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<HttpError>,
    /// How the answer is streamed.
    #[serde(default, skip_serializing_if = "StreamOptions::is_default")]
    pub stream: StreamOptions,
    /// Faults injected while answering.
    #[serde(default, skip_serializing_if = "Fault::is_default")]
    pub fault: Fault,
    /// Quirks of OpenAI-compatible servers (OpenAI format only).
    #[serde(default, skip_serializing_if = "OpenAiQuirks::is_default")]
    pub openai: OpenAiQuirks,
}

impl ScriptEntry {
    /// An entry answering `agent` at `turn` (every attempt) with `content`.
    pub fn reply(agent: &str, turn: u64, content: Vec<Block>) -> Self {
        ScriptEntry {
            agent: Some(agent.to_owned()),
            turn: Some(turn),
            reply: Some(Reply {
                content,
                ..Reply::default()
            }),
            ..ScriptEntry::default()
        }
    }

    /// An entry answering `agent` at `turn` (every attempt) with an HTTP error.
    pub fn http_error(agent: &str, turn: u64, status: u16) -> Self {
        ScriptEntry {
            agent: Some(agent.to_owned()),
            turn: Some(turn),
            error: Some(HttpError {
                status,
                ..HttpError::default()
            }),
            ..ScriptEntry::default()
        }
    }

    /// Restricts the entry to one attempt.
    #[must_use]
    pub fn attempt(mut self, attempt: u32) -> Self {
        self.attempt = Some(attempt);
        self
    }

    /// Sets the stop reason of the reply.
    #[must_use]
    pub fn stop_reason(mut self, stop_reason: &str) -> Self {
        if let Some(reply) = self.reply.as_mut() {
            reply.stop_reason = Some(stop_reason.to_owned());
        }
        self
    }

    /// Replaces the fault settings.
    #[must_use]
    pub fn fault(mut self, fault: Fault) -> Self {
        self.fault = fault;
        self
    }

    /// Replaces the streaming options.
    #[must_use]
    pub fn stream(mut self, stream: StreamOptions) -> Self {
        self.stream = stream;
        self
    }

    pub(crate) fn check(&self) -> Result<(), String> {
        match (&self.reply, &self.error) {
            (Some(_), Some(_)) => Err("an entry has both `reply` and `error`".into()),
            (None, None) => Err("an entry needs `reply` or `error`".into()),
            _ => Ok(()),
        }
    }
}

/// A match on the newest user turn's mail: every field present must equal the attribute of
/// one `<mail …>` tag (`mail_type` ↔ `type`, `from` ↔ `from`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct When {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mail_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

/// A successful answer, rendered into either API's format.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reply {
    /// Content blocks in order.
    #[serde(default)]
    pub content: Vec<Block>,
    /// Anthropic stop reason (`end_turn`, `tool_use`, `max_tokens`, `stop_sequence`,
    /// `refusal`, `pause_turn`, …). Default: `tool_use` when a tool_use block is present,
    /// else `end_turn`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// Usage overrides; missing fields are computed (tokens = ceil(chars / 4)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageSpec>,
    /// Model name to report; default: the request's `model`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// Usage numbers to report instead of the computed ones.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation_input_tokens: Option<u64>,
}

/// A content block of a reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    /// `{"type":"text","text":…}`
    Text(String),
    /// `{"type":"tool_use","name":…,"input":{…},"id"?:…}`; the id defaults to
    /// `toolu_fake_NNNN` (Anthropic) / `call_fake_NNNN` (OpenAI).
    ToolUse {
        name: String,
        input: Value,
        id: Option<String>,
    },
    /// `{"type":"thinking","thinking":…,"signature":…}`
    Thinking { thinking: String, signature: String },
    /// Any other block (e.g. `redacted_thinking`, or a type no client knows yet): sent
    /// verbatim in `content_block_start` (Anthropic) and skipped in the OpenAI format.
    Raw(Value),
}

impl Block {
    pub fn text(text: &str) -> Self {
        Block::Text(text.to_owned())
    }

    pub fn tool_use(name: &str, input: Value) -> Self {
        Block::ToolUse {
            name: name.to_owned(),
            input,
            id: None,
        }
    }

    pub fn thinking(thinking: &str, signature: &str) -> Self {
        Block::Thinking {
            thinking: thinking.to_owned(),
            signature: signature.to_owned(),
        }
    }

    fn to_value(&self) -> Value {
        match self {
            Block::Text(text) => serde_json::json!({"type": "text", "text": text}),
            Block::ToolUse { name, input, id } => {
                let mut v = serde_json::json!({"type": "tool_use", "name": name, "input": input});
                if let (Some(id), Some(map)) = (id, v.as_object_mut()) {
                    map.insert("id".into(), Value::String(id.clone()));
                }
                v
            }
            Block::Thinking {
                thinking,
                signature,
            } => {
                serde_json::json!({"type": "thinking", "thinking": thinking, "signature": signature})
            }
            Block::Raw(v) => v.clone(),
        }
    }

    fn from_value(v: Value) -> Result<Self, String> {
        let Value::Object(map) = v else {
            return Err("a content block must be an object".into());
        };
        let ty = map
            .get("type")
            .and_then(Value::as_str)
            .ok_or("a content block needs a string `type`")?
            .to_owned();
        let text_field = |map: &Map<String, Value>, key: &str| -> Result<String, String> {
            map.get(key)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| format!("a `{ty}` block needs a string `{key}`"))
        };
        match ty.as_str() {
            "text" => Ok(Block::Text(text_field(&map, "text")?)),
            "tool_use" => Ok(Block::ToolUse {
                name: text_field(&map, "name")?,
                input: map
                    .get("input")
                    .cloned()
                    .unwrap_or_else(|| Value::Object(Map::new())),
                id: map.get("id").and_then(Value::as_str).map(str::to_owned),
            }),
            "thinking" => Ok(Block::Thinking {
                thinking: text_field(&map, "thinking")?,
                signature: map
                    .get("signature")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            }),
            _ => Ok(Block::Raw(Value::Object(map))),
        }
    }
}

impl Serialize for Block {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Block {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Block::from_value(v).map_err(serde::de::Error::custom)
    }
}

/// A scripted HTTP error, in the API's own error shape.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpError {
    pub status: u16,
    /// Error type; default from the status (`rate_limit_error`, `overloaded_error`, …).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub error_type: Option<String>,
    /// Error message; default from the status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// OpenAI's `error.code` (e.g. `context_length_exceeded`); default from the status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// `retry-after` header value (seconds or an HTTP date), verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<String>,
    /// `retry-after-ms` header value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// `x-should-retry` header value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x_should_retry: Option<bool>,
    /// Further headers (e.g. rate-limit headers).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

/// How a reply is streamed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamOptions {
    /// Characters per text / thinking / tool-argument delta; 0 (default) = 16.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub chunk_chars: usize,
    /// No `ping` after the first `content_block_start` (Anthropic sends one by default).
    #[serde(default, skip_serializing_if = "is_false")]
    pub no_ping: bool,
    /// Delay between events.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub inter_event_delay_ms: u64,
    /// Write the response body in pieces of this many bytes (splitting events, lines and
    /// UTF-8 characters); 0 = one piece per event.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tcp_chunk_bytes: usize,
    /// Use `\r\n` line endings in the SSE stream.
    #[serde(default, skip_serializing_if = "is_false")]
    pub crlf: bool,
    /// Put trailing spaces after the JSON of each `data:` line.
    #[serde(default, skip_serializing_if = "is_false")]
    pub trailing_whitespace: bool,
}

impl StreamOptions {
    fn is_default(&self) -> bool {
        *self == StreamOptions::default()
    }
}

/// Faults injected while answering. Event counts are over the normal event sequence (SSE
/// events, or OpenAI chunks including `[DONE]`); `after_events: 0` means before the first
/// event. In a non-streaming answer the body counts as one event.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// Wait this long before sending the response headers.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub first_byte_delay_ms: u64,
    /// Drop the connection (no terminating chunk) after this many events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disconnect_after_events: Option<usize>,
    /// End the body cleanly after this many events: no `message_stop` / `[DONE]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncate_after_events: Option<usize>,
    /// Send an error event after a 200 (Anthropic `event: error`, OpenAI `data: {"error":…}`)
    /// and end the stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_event: Option<ErrorEvent>,
    /// Stop sending for a while.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall: Option<Stall>,
    /// Insert a `data:` line that is not valid JSON after this many events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub malformed_after_events: Option<usize>,
    /// Insert an event of an unknown type after this many events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown_event_after_events: Option<usize>,
    /// Streams only: cut the last content block after half of its deltas, with no
    /// `content_block_stop` (so a tool's JSON is incomplete), then `message_delta` and
    /// `message_stop` as usual: with `stop_reason: "max_tokens"` this is the SDK fixture
    /// `incomplete_partial_json_response`. OpenAI: the last block's fragments are cut.
    #[serde(default, skip_serializing_if = "is_false")]
    pub cut_last_block: bool,
    /// Wait before the first byte until the test opens the gate of this name
    /// ([`crate::FakeLlmHandle::open_gate`] or `POST /_fake/gates/NAME/open`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<String>,
}

impl Fault {
    fn is_default(&self) -> bool {
        *self == Fault::default()
    }
}

/// An error event after HTTP 200.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorEvent {
    #[serde(default)]
    pub after_events: usize,
    /// Default `overloaded_error`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub error_type: Option<String>,
    /// Default `Overloaded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A stall in the middle of a stream.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stall {
    #[serde(default)]
    pub after_events: usize,
    /// How long nothing (or only pings) is sent.
    pub ms: u64,
    /// Send a keep-alive (Anthropic `ping` event, OpenAI SSE comment `: ping`) this often
    /// during the stall; 0 = send nothing.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub ping_every_ms: u64,
    /// After the stall, drop the connection instead of resuming.
    #[serde(default, skip_serializing_if = "is_false")]
    pub then_disconnect: bool,
    /// After `ms`, also wait until the test opens the gate of this name (a stream held
    /// mid-way, as `hold` holds it before the first byte).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<String>,
}

/// Quirks of OpenAI-compatible servers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenAiQuirks {
    /// Every tool-call fragment has `index: 0` (Ollama).
    #[serde(default, skip_serializing_if = "is_false")]
    pub tool_index_always_zero: bool,
    /// Tool-call fragments carry no `index` (Ollama before 0.4.7).
    #[serde(default, skip_serializing_if = "is_false")]
    pub omit_tool_index: bool,
    /// `finish_reason: "stop"` although tool calls were sent (vLLM).
    #[serde(default, skip_serializing_if = "is_false")]
    pub finish_reason_stop_with_tools: bool,
    /// The usage chunk has `choices: null` (vLLM).
    #[serde(default, skip_serializing_if = "is_false")]
    pub usage_choices_null: bool,
    /// No `data: [DONE]` at the end.
    #[serde(default, skip_serializing_if = "is_false")]
    pub no_done: bool,
}

impl OpenAiQuirks {
    fn is_default(&self) -> bool {
        *self == OpenAiQuirks::default()
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

/// Parses a script: a JSON array of entries, a single entry object, or JSON lines (one entry
/// per non-blank line).
pub fn parse_script(text: &str) -> Result<Vec<ScriptEntry>, crate::FakeLlmError> {
    let trimmed = text.trim_start();
    let entries: Vec<ScriptEntry> = if trimmed.starts_with('[') {
        serde_json::from_str(text).map_err(|e| crate::FakeLlmError::Script(e.to_string()))?
    } else if let Ok(one) = serde_json::from_str::<ScriptEntry>(text) {
        vec![one]
    } else {
        let mut out = Vec::new();
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let entry = serde_json::from_str(line)
                .map_err(|e| crate::FakeLlmError::Script(format!("line {}: {e}", n + 1)))?;
            out.push(entry);
        }
        out
    };
    for (i, entry) in entries.iter().enumerate() {
        entry
            .check()
            .map_err(|e| crate::FakeLlmError::Script(format!("entry {i}: {e}")))?;
    }
    Ok(entries)
}
