//! What goes to a model and what comes back, independent of the provider's wire format.

use std::time::Duration;

use muster_config::settings::ReasoningEffort;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Who sent a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

/// The content of a `tool_result`: a string or an array of blocks (text, image), verbatim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ToolResultContent {
    Text(String),
    Blocks(Vec<Value>),
}

impl ToolResultContent {
    /// The text of the result (text blocks joined with newlines).
    pub fn to_text(&self) -> String {
        match self {
            ToolResultContent::Text(text) => text.clone(),
            ToolResultContent::Blocks(blocks) => blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// One content block. Serialises to the Anthropic block shape; a block of a type this version
/// does not know is kept as raw JSON ([`ContentBlock::Other`]) and sent back unchanged.
#[derive(Debug, Clone, PartialEq)]
pub enum ContentBlock {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    ToolResult {
        tool_use_id: String,
        content: ToolResultContent,
        is_error: bool,
    },
    /// Extended thinking; `signature` goes back unchanged. A thinking block with an empty
    /// signature (reasoning text from an OpenAI-compatible server) is not sent to Anthropic.
    Thinking {
        thinking: String,
        signature: String,
    },
    /// Any other block (`redacted_thinking`, server tool blocks, future types), verbatim.
    Other(Value),
}

impl ContentBlock {
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text { text: text.into() }
    }

    pub fn tool_result(tool_use_id: impl Into<String>, content: impl Into<String>) -> Self {
        ContentBlock::ToolResult {
            tool_use_id: tool_use_id.into(),
            content: ToolResultContent::Text(content.into()),
            is_error: false,
        }
    }

    /// The block in the Anthropic wire shape.
    pub fn to_value(&self) -> Value {
        match self {
            ContentBlock::Text { text } => serde_json::json!({"type": "text", "text": text}),
            ContentBlock::ToolUse { id, name, input } => {
                serde_json::json!({"type": "tool_use", "id": id, "name": name, "input": input})
            }
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => {
                let mut v = serde_json::json!({
                    "type": "tool_result", "tool_use_id": tool_use_id, "content": content,
                });
                if *is_error && let Some(map) = v.as_object_mut() {
                    map.insert("is_error".into(), Value::Bool(true));
                }
                v
            }
            ContentBlock::Thinking {
                thinking,
                signature,
            } => {
                serde_json::json!({"type": "thinking", "thinking": thinking, "signature": signature})
            }
            ContentBlock::Other(v) => v.clone(),
        }
    }

    /// Reads a block in the Anthropic wire shape; unknown or incomplete blocks become
    /// [`ContentBlock::Other`].
    pub fn from_value(v: Value) -> Self {
        let Value::Object(map) = v else {
            return ContentBlock::Other(v);
        };
        let s = |map: &Map<String, Value>, key: &str| {
            map.get(key).and_then(Value::as_str).map(str::to_owned)
        };
        let ty = map.get("type").and_then(Value::as_str).unwrap_or_default();
        let typed = match ty {
            "text" => s(&map, "text").map(|text| ContentBlock::Text { text }),
            "tool_use" => match (s(&map, "id"), s(&map, "name")) {
                (Some(id), Some(name)) => Some(ContentBlock::ToolUse {
                    id,
                    name,
                    input: map
                        .get("input")
                        .cloned()
                        .unwrap_or_else(|| Value::Object(Map::new())),
                }),
                _ => None,
            },
            "tool_result" => s(&map, "tool_use_id").map(|tool_use_id| ContentBlock::ToolResult {
                tool_use_id,
                content: map
                    .get("content")
                    .cloned()
                    .and_then(|c| serde_json::from_value(c).ok())
                    .unwrap_or(ToolResultContent::Text(String::new())),
                is_error: map
                    .get("is_error")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            }),
            "thinking" => s(&map, "thinking").map(|thinking| ContentBlock::Thinking {
                thinking,
                signature: s(&map, "signature").unwrap_or_default(),
            }),
            _ => None,
        };
        typed.unwrap_or(ContentBlock::Other(Value::Object(map)))
    }
}

impl Serialize for ContentBlock {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(s)
    }
}

impl<'de> Deserialize<'de> for ContentBlock {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(ContentBlock::from_value(Value::deserialize(d)?))
    }
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<ContentBlock>,
}

impl Message {
    pub fn user(text: impl Into<String>) -> Self {
        Message {
            role: Role::User,
            content: vec![ContentBlock::text(text)],
        }
    }

    pub fn assistant(content: Vec<ContentBlock>) -> Self {
        Message {
            role: Role::Assistant,
            content,
        }
    }
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    pub name: String,
    pub description: String,
    /// JSON Schema of the input object.
    pub input_schema: Value,
}

/// What the caller wants from thinking; each client renders it in the form its model takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ThinkingSettings {
    /// Anthropic budget-form thinking budget (clipped to ≥ 1024 and < `max_tokens`).
    pub budget_tokens: Option<u64>,
    /// Effort (Anthropic adaptive form `output_config.effort`; OpenAI `reasoning_effort`).
    #[serde(default, with = "effort_serde")]
    pub effort: Option<ReasoningEffort>,
}

/// `ReasoningEffort` by its name (independent of the config crate's serde support).
mod effort_serde {
    use muster_config::settings::ReasoningEffort;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<ReasoningEffort>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(e) => s.serialize_some(e.as_str()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<ReasoningEffort>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|t| t.parse().map_err(serde::de::Error::custom))
            .transpose()
    }
}

impl ThinkingSettings {
    pub fn is_off(&self) -> bool {
        self.budget_tokens.is_none() && self.effort.is_none()
    }
}

/// The thinking form a model accepts (a per-model setting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThinkingForm {
    /// `{"type":"enabled","budget_tokens":N}` (models before the 4.6 generation).
    Budget,
    /// `{"type":"adaptive"}` plus `output_config.effort` (4.6 generation and later).
    Adaptive,
    /// The model takes no thinking parameter.
    None,
}

impl ThinkingForm {
    /// The default form for an Anthropic model name: adaptive for the 4.6 generation and
    /// later (`claude-opus-4-6`, `claude-sonnet-4-7`, `claude-opus-5`, …), budget before.
    pub fn for_model(model: &str) -> ThinkingForm {
        let Some(rest) = model.strip_prefix("claude-") else {
            return ThinkingForm::Budget;
        };
        // The version follows the family name: `opus-4-6`, `sonnet-4-5-20250929`.
        let mut numbers = rest
            .split('-')
            .skip_while(|part| part.parse::<u32>().is_err())
            .map_while(|part| part.parse::<u32>().ok().filter(|n| *n < 100));
        let major = numbers.next().unwrap_or(0);
        let minor = numbers.next().unwrap_or(0);
        if major > 4 || (major == 4 && minor >= 6) {
            ThinkingForm::Adaptive
        } else {
            ThinkingForm::Budget
        }
    }
}

/// A model request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRequest {
    pub model: String,
    /// The system prompt (a prompt-caching breakpoint is put on it).
    pub system: String,
    pub messages: Vec<Message>,
    /// Tool definitions (a prompt-caching breakpoint is put on the last one). Shared: every
    /// request of an agent offers the same list, which is not copied for each.
    #[serde(with = "shared_tools")]
    pub tools: std::sync::Arc<[ToolDefinition]>,
    pub max_tokens: u64,
    #[serde(default)]
    pub thinking: ThinkingSettings,
}

/// A request's shared tool list, in JSON as a plain array.
mod shared_tools {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::ToolDefinition;

    pub fn serialize<S: Serializer>(
        tools: &Arc<[ToolDefinition]>,
        out: S,
    ) -> Result<S::Ok, S::Error> {
        tools.as_ref().serialize(out)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        input: D,
    ) -> Result<Arc<[ToolDefinition]>, D::Error> {
        Vec::<ToolDefinition>::deserialize(input).map(Arc::from)
    }
}

/// Why a request is made; sent as `x-muster-purpose`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestPurpose {
    #[default]
    Turn,
    /// A compaction request: `x-muster-purpose: compact`.
    Compact,
}

impl RequestPurpose {
    /// The header value, if any.
    pub fn header(self) -> Option<&'static str> {
        match self {
            RequestPurpose::Turn => None,
            RequestPurpose::Compact => Some("compact"),
        }
    }
}

/// Who asks: sent as `x-muster-run-id`, `x-muster-agent-id`, `x-muster-turn`,
/// `x-muster-purpose`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestContext {
    pub run_id: String,
    pub agent_id: String,
    /// The agent's durable model-request counter.
    pub turn: u64,
    #[serde(default)]
    pub purpose: RequestPurpose,
}

impl RequestContext {
    pub fn new(run_id: impl Into<String>, agent_id: impl Into<String>, turn: u64) -> Self {
        RequestContext {
            run_id: run_id.into(),
            agent_id: agent_id.into(),
            turn,
            purpose: RequestPurpose::Turn,
        }
    }

    #[must_use]
    pub fn compact(mut self) -> Self {
        self.purpose = RequestPurpose::Compact;
        self
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    EndTurn,
    MaxTokens,
    StopSequence,
    ToolUse,
    PauseTurn,
    Refusal,
    ModelContextWindowExceeded,
    /// A reason this version does not know, verbatim.
    Other(String),
}

impl StopReason {
    pub fn parse(s: &str) -> StopReason {
        match s {
            "end_turn" => StopReason::EndTurn,
            "max_tokens" => StopReason::MaxTokens,
            "stop_sequence" => StopReason::StopSequence,
            "tool_use" => StopReason::ToolUse,
            "pause_turn" => StopReason::PauseTurn,
            "refusal" => StopReason::Refusal,
            "model_context_window_exceeded" => StopReason::ModelContextWindowExceeded,
            other => StopReason::Other(other.to_owned()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            StopReason::EndTurn => "end_turn",
            StopReason::MaxTokens => "max_tokens",
            StopReason::StopSequence => "stop_sequence",
            StopReason::ToolUse => "tool_use",
            StopReason::PauseTurn => "pause_turn",
            StopReason::Refusal => "refusal",
            StopReason::ModelContextWindowExceeded => "model_context_window_exceeded",
            StopReason::Other(s) => s,
        }
    }
}

impl Serialize for StopReason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for StopReason {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(StopReason::parse(&String::deserialize(d)?))
    }
}

/// Token counts of one request. `input_tokens` excludes cached tokens (Anthropic's meaning;
/// OpenAI's `prompt_tokens` is split into input and cache read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default, rename = "cache_read_input_tokens")]
    pub cache_read_tokens: u64,
    #[serde(default, rename = "cache_creation_input_tokens")]
    pub cache_write_tokens: u64,
}

impl From<Usage> for muster_protocol::TokenUsage {
    fn from(usage: Usage) -> Self {
        muster_protocol::TokenUsage {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cache_read_input_tokens: usage.cache_read_tokens,
            cache_creation_input_tokens: usage.cache_write_tokens,
        }
    }
}

impl Usage {
    /// The prompt size: input + cache read + cache write.
    pub fn prompt_tokens(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.cache_read_tokens)
            .saturating_add(self.cache_write_tokens)
    }

    /// Everything billed: prompt + output.
    pub fn total_tokens(&self) -> u64 {
        self.prompt_tokens().saturating_add(self.output_tokens)
    }

    /// Applies the fields present in an Anthropic `usage` object (present fields override).
    pub(crate) fn merge_anthropic(&mut self, v: &Value) {
        let get = |k: &str| v.get(k).and_then(Value::as_u64);
        if let Some(n) = get("input_tokens") {
            self.input_tokens = n;
        }
        if let Some(n) = get("output_tokens") {
            self.output_tokens = n;
        }
        if let Some(n) = get("cache_read_input_tokens") {
            self.cache_read_tokens = n;
        }
        if let Some(n) = get("cache_creation_input_tokens") {
            self.cache_write_tokens = n;
        }
    }
}

/// A complete model response: the only thing an agent acts on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelResponse {
    /// The provider's message id, if it sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub model: String,
    pub content: Vec<ContentBlock>,
    pub stop_reason: StopReason,
    pub usage: Usage,
    /// Cost in US dollars from the configured prices; `None` when prices are unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// How many attempts it took (1 = no retry).
    #[serde(default = "one")]
    pub attempts: u32,
}

fn one() -> u32 {
    1
}

impl ModelResponse {
    /// The text blocks joined.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The tool calls, in order.
    pub fn tool_calls(&self) -> Vec<ToolCall> {
        tool_calls_in(&self.content)
    }
}

/// The tool calls among `content`, in order.
pub fn tool_calls_in(content: &[ContentBlock]) -> Vec<ToolCall> {
    content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolUse { id, name, input } => Some(ToolCall {
                id: id.clone(),
                name: name.clone(),
                input: input.clone(),
            }),
            _ => None,
        })
        .collect()
}

/// A complete tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub input: Value,
}

/// Progress while a response streams. Text and thinking deltas are for display only: when an
/// attempt fails, [`StreamEvent::Retrying`] says to discard what was shown since the last
/// [`StreamEvent::AttemptStarted`]; only [`StreamEvent::Completed`] is acted on.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// An attempt begins (1 = the first).
    AttemptStarted { attempt: u32 },
    /// Text for display.
    TextDelta { index: usize, text: String },
    /// Thinking for display.
    ThinkingDelta { index: usize, thinking: String },
    /// A piece of a tool call's input JSON, for display (the call is acted on only once
    /// complete).
    ToolInputDelta { index: usize, partial_json: String },
    /// A tool call whose input JSON is complete.
    ToolCall { index: usize, call: ToolCall },
    /// Usage as reported so far (cumulative).
    Usage(Usage),
    /// The attempt failed and will be retried after `delay`: discard its partial output.
    Retrying {
        attempt: u32,
        delay: Duration,
        reason: String,
    },
    /// The complete response; the last event of a successful stream.
    Completed(ModelResponse),
}
