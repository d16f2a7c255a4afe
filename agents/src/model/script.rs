//! Record and replay: the cassette format, the script provider that replays a cassette with no
//! network at all, and the recorder that writes one from the responses of any provider.
//!
//! # Cassette format
//! JSON lines, one entry per response (a JSON array of entries is read too; blank lines are
//! skipped):
//! ```json
//! {"agent":"lead","turn":3,"purpose":"compact","when":{"mail_type":"plan_approval_response","from":"lead"},
//!  "reply":{"content":[{"type":"thinking","thinking":"…","signature":"…"},
//!                      {"type":"text","text":"Running the tests."},
//!                      {"type":"tool_use","id":"toolu_01","name":"Bash","input":{"command":"cargo test"}}],
//!           "stop_reason":"tool_use",
//!           "usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":0,"cache_creation_input_tokens":0},
//!           "model":"claude-sonnet-4-5"},
//!  "request_hash":"fnv1a64:0123456789abcdef"}
//! ```
//! Every field but `request_hash` is a field of a `muster-fake-llm` script entry with the same
//! meaning (content blocks in the Anthropic shape; unknown block types verbatim), so
//! [`Cassette::to_fake_script`] (which drops `request_hash`) gives a script that drives the fake
//! server. Fields the replayer does not use (`attempt`, `stream`, `openai`, and every `fault`
//! but one) are ignored, and entries without `reply` (scripted HTTP errors) are skipped, so a
//! fake-server script of JSON lines can be replayed too.
//!
//! # Model latency
//! `"fault":{"first_byte_delay_ms":N}` on an entry read by [`ScriptProvider::open`] delays
//! that response by N ms, as the fake server delays its first byte: a fixed model latency for
//! `muster bench team`. Entries without it answer at once.
//!
//! # Choosing an entry
//! As the fake server does, never by order: an entry matches when its `agent` equals the
//! request's agent and each of `turn`, `purpose`, `when` it sets matches (`when` against the
//! `<mail type=… from=…>` tags of the newest user turn's text). The most specific wins
//! (`turn` 8, `when` 2, `agent` 1, `purpose` 1), ties go to the earliest. No match is an error
//! naming the agent and turn.
//!
//! # Request hash
//! `fnv1a64:` + 16 hex digits of FNV-1a over the JSON of `{system, messages, tools}` after
//! each [`Redaction`] (run ids, slugs, delimiter nonces → placeholders) is applied to that
//! JSON text. A mismatch is a warning, or an error in strict mode.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use muster_config::settings::ModelInfo;
use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::cost::cost_usd;
use super::error::{FailureKind, GaveUp, ModelError};
use super::stream::ResponseStream;
use super::types::{
    ContentBlock, ModelRequest, ModelResponse, RequestContext, Role, StopReason, StreamEvent,
    ToolCall, Usage,
};
use super::{ModelProvider, SetupError};

/// Replaces what varies between runs (run ids, slugs, delimiter nonces) before hashing.
#[derive(Debug, Clone)]
pub struct Redaction {
    pub pattern: Regex,
    pub placeholder: String,
}

impl Redaction {
    /// A regular expression and its placeholder (e.g. `<mail-[0-9a-f]{8}>` → `<mail-NONCE>`).
    pub fn pattern(pattern: &str, placeholder: &str) -> Result<Self, regex::Error> {
        Ok(Redaction {
            pattern: Regex::new(pattern)?,
            placeholder: placeholder.to_owned(),
        })
    }

    /// A literal text (a run id, a slug) and its placeholder.
    pub fn literal(text: &str, placeholder: &str) -> Result<Self, regex::Error> {
        Self::pattern(&regex::escape(text), placeholder)
    }
}

/// The request hash used for drift detection (see the module documentation).
pub fn request_hash(request: &ModelRequest, redactions: &[Redaction]) -> String {
    let value = serde_json::json!({
        "system": request.system,
        "messages": request.messages,
        "tools": request.tools,
    });
    let mut text = value.to_string();
    for r in redactions {
        text = r
            .pattern
            .replace_all(&text, regex::NoExpand(&r.placeholder))
            .into_owned();
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("fnv1a64:{hash:016x}")
}

/// A `when` selector: a mail tag in the newest user turn.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct When {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mail_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

/// The recorded response of an entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CassetteReply {
    #[serde(default)]
    pub content: Vec<ContentBlock>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// One cassette line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CassetteEntry {
    pub agent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<When>,
    /// Absent in a fake-server entry that scripts an HTTP error: such entries are skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<CassetteReply>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_hash: Option<String>,
}

/// A parsed cassette.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cassette {
    pub entries: Vec<CassetteEntry>,
}

impl Cassette {
    /// Reads JSON lines (or one JSON array).
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.trim_start().starts_with('[') {
            let entries = serde_json::from_str(text).map_err(|e| e.to_string())?;
            return Ok(Cassette { entries });
        }
        let mut entries = Vec::new();
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let entry = serde_json::from_str(line).map_err(|e| format!("line {}: {e}", n + 1))?;
            entries.push(entry);
        }
        Ok(Cassette { entries })
    }

    /// The cassette as JSON lines.
    pub fn to_lines(&self) -> String {
        self.entries
            .iter()
            .filter_map(|e| serde_json::to_string(e).ok())
            .map(|l| l + "\n")
            .collect()
    }

    /// The cassette as a `muster-fake-llm` script (JSON lines without `request_hash`).
    pub fn to_fake_script(&self) -> String {
        self.entries
            .iter()
            .filter(|e| e.reply.is_some())
            .map(|e| CassetteEntry {
                request_hash: None,
                ..e.clone()
            })
            .filter_map(|e| serde_json::to_string(&e).ok())
            .map(|l| l + "\n")
            .collect()
    }

    /// The best entry for a request, by the rules in the module documentation.
    pub fn select(&self, ctx: &RequestContext, request: &ModelRequest) -> Option<&CassetteEntry> {
        let mails = newest_user_mail(request);
        let purpose = ctx.purpose.header();
        let mut best: Option<(u32, &CassetteEntry)> = None;
        for entry in &self.entries {
            if entry.reply.is_none() || entry.agent != ctx.agent_id {
                continue;
            }
            let mut score = 1;
            if let Some(turn) = entry.turn {
                if turn != ctx.turn {
                    continue;
                }
                score += 8;
            }
            if let Some(p) = &entry.purpose {
                if Some(p.as_str()) != purpose {
                    continue;
                }
                score += 1;
            }
            if let Some(when) = &entry.when {
                let hit = mails.iter().any(|(ty, from)| {
                    when.mail_type.as_ref().is_none_or(|t| t == ty)
                        && when.from.as_ref().is_none_or(|f| f == from)
                });
                if !hit {
                    continue;
                }
                score += 2;
            }
            if best.is_none_or(|(s, _)| score > s) {
                best = Some((score, entry));
            }
        }
        best.map(|(_, e)| e)
    }
}

/// `(type, from)` of each `<mail …>` tag in the newest user turn's text (not tool results):
/// every user message after the newest assistant message.
fn newest_user_mail(request: &ModelRequest) -> Vec<(String, String)> {
    static TAG: std::sync::OnceLock<Option<(Regex, Regex)>> = std::sync::OnceLock::new();
    let Some((tag, attr)) = TAG
        .get_or_init(|| {
            let tag = Regex::new(r"<mail\b([^>]*)>").ok()?;
            let attr =
                Regex::new(r#"([A-Za-z_][A-Za-z0-9_-]*)\s*=\s*(?:"([^"]*)"|'([^']*)')"#).ok()?;
            Some((tag, attr))
        })
        .as_ref()
    else {
        return Vec::new();
    };
    // What the user side said since the model last spoke: mail delivered while the agent
    // waited and mail taken at its next turn boundary can be two user messages in a row.
    let since_reply = request
        .messages
        .iter()
        .rev()
        .take_while(|m| m.role == Role::User);
    let mut out = Vec::new();
    for block in since_reply.flat_map(|m| m.content.iter()) {
        let ContentBlock::Text { text } = block else {
            continue;
        };
        for cap in tag.captures_iter(text) {
            let attrs = cap.get(1).map(|m| m.as_str()).unwrap_or_default();
            let mut ty = String::new();
            let mut from = String::new();
            for a in attr.captures_iter(attrs) {
                let value = a
                    .get(2)
                    .or_else(|| a.get(3))
                    .map(|m| unescape(m.as_str()))
                    .unwrap_or_default();
                match a.get(1).map(|m| m.as_str()) {
                    Some("type") => ty = value,
                    Some("from") => from = value,
                    _ => {}
                }
            }
            out.push((ty, from));
        }
    }
    out
}

fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// Options of the script provider and the recorder.
#[derive(Debug, Clone, Default)]
pub struct ScriptOptions {
    /// A request hash mismatch is an error (`--strict`) instead of a warning.
    pub strict: bool,
    /// Placeholders applied before hashing.
    pub redactions: Vec<Redaction>,
}

/// Replays a cassette. No network at all.
#[derive(Debug)]
pub struct ScriptProvider {
    cassette: Cassette,
    options: ScriptOptions,
    models: BTreeMap<String, ModelInfo>,
    warnings: Mutex<Vec<String>>,
    /// Per entry (same index): `fault.first_byte_delay_ms`, when the cassette file sets one.
    latency: Vec<Option<Duration>>,
}

impl ScriptProvider {
    pub fn new(cassette: Cassette, options: ScriptOptions) -> Self {
        ScriptProvider {
            cassette,
            options,
            models: BTreeMap::new(),
            warnings: Mutex::new(Vec::new()),
            latency: Vec::new(),
        }
    }

    /// Reads the cassette at `path`.
    pub fn open(path: &Path, options: ScriptOptions) -> Result<Self, SetupError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| SetupError::Cassette(format!("cannot read {}: {e}", path.display())))?;
        let cassette = Cassette::parse(&text)
            .map_err(|e| SetupError::Cassette(format!("{}: {e}", path.display())))?;
        let mut provider = Self::new(cassette, options);
        provider.latency = entry_latencies(&text);
        Ok(provider)
    }

    /// The model catalogue, for costs.
    pub fn set_models(&mut self, models: BTreeMap<String, ModelInfo>) {
        self.models = models;
    }

    /// Warnings so far (hash mismatches outside strict mode).
    pub fn warnings(&self) -> Vec<String> {
        self.warnings.lock().map(|w| w.clone()).unwrap_or_default()
    }

    /// The latency set on `entry` (found by address among the cassette's entries).
    fn latency_of(&self, entry: &CassetteEntry) -> Option<Duration> {
        let index = self
            .cassette
            .entries
            .iter()
            .position(|e| std::ptr::eq(e, entry))?;
        self.latency.get(index).copied().flatten()
    }

    fn answer(
        &self,
        ctx: &RequestContext,
        request: &ModelRequest,
    ) -> Result<(ModelResponse, Option<Duration>), FailureKind> {
        let entry = self.cassette.select(ctx, request).ok_or_else(|| {
            FailureKind::MissingCassetteEntry {
                agent: ctx.agent_id.clone(),
                turn: ctx.turn,
            }
        })?;
        let latency = self.latency_of(entry);
        if let Some(recorded) = &entry.request_hash {
            let actual = request_hash(request, &self.options.redactions);
            if *recorded != actual {
                if self.options.strict {
                    return Err(FailureKind::HashMismatch {
                        recorded: recorded.clone(),
                        actual,
                    });
                }
                let warning = format!(
                    "script: agent {} turn {}: request hash {actual} differs from the cassette's {recorded}; the run drifted from the recording",
                    ctx.agent_id, ctx.turn
                );
                tracing::warn!("{warning}");
                if let Ok(mut w) = self.warnings.lock() {
                    w.push(warning);
                }
            }
        }
        let reply = entry
            .reply
            .clone()
            .ok_or_else(|| FailureKind::MissingCassetteEntry {
                agent: ctx.agent_id.clone(),
                turn: ctx.turn,
            })?;
        let mut n = 0;
        let content: Vec<ContentBlock> = reply
            .content
            .into_iter()
            .map(|b| match b {
                // A fake-server script may leave tool ids out.
                ContentBlock::Other(v)
                    if v.get("type").and_then(Value::as_str) == Some("tool_use")
                        && v.get("id").is_none() =>
                {
                    n += 1;
                    ContentBlock::ToolUse {
                        id: format!("toolu_script_{}_{}_{n}", ctx.agent_id, ctx.turn),
                        name: v
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                        input: v
                            .get("input")
                            .cloned()
                            .unwrap_or(Value::Object(Default::default())),
                    }
                }
                other => other,
            })
            .collect();
        let has_tools = content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolUse { .. }));
        let stop_reason = reply.stop_reason.unwrap_or(if has_tools {
            StopReason::ToolUse
        } else {
            StopReason::EndTurn
        });
        let usage = reply.usage.unwrap_or_default();
        let model = reply.model.unwrap_or_else(|| request.model.clone());
        let cost = self
            .models
            .get(&model)
            .and_then(|info| cost_usd(&usage, info));
        let response = ModelResponse {
            id: None,
            model,
            content,
            stop_reason,
            usage,
            cost_usd: cost,
            attempts: 1,
        };
        Ok((response, latency))
    }
}

/// `fault.first_byte_delay_ms` of each entry of a cassette's text, in [`Cassette::parse`]'s
/// order (blank lines skipped); empty when the text holds none.
fn entry_latencies(text: &str) -> Vec<Option<Duration>> {
    let values: Vec<Value> = if text.trim_start().starts_with('[') {
        serde_json::from_str(text).unwrap_or_default()
    } else {
        text.lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| serde_json::from_str(line).unwrap_or(Value::Null))
            .collect()
    };
    let latencies: Vec<Option<Duration>> = values
        .iter()
        .map(|v| {
            v.pointer("/fault/first_byte_delay_ms")
                .and_then(Value::as_u64)
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis)
        })
        .collect();
    if latencies.iter().all(Option::is_none) {
        Vec::new()
    } else {
        latencies
    }
}

impl ModelProvider for ScriptProvider {
    fn name(&self) -> &str {
        "script"
    }

    fn stream(&self, ctx: &RequestContext, request: &ModelRequest) -> ResponseStream {
        match self.answer(ctx, request) {
            Ok((response, latency)) => {
                let mut events = vec![StreamEvent::AttemptStarted { attempt: 1 }];
                for (index, block) in response.content.iter().enumerate() {
                    match block {
                        ContentBlock::Text { text } => events.push(StreamEvent::TextDelta {
                            index,
                            text: text.clone(),
                        }),
                        ContentBlock::Thinking { thinking, .. } => {
                            events.push(StreamEvent::ThinkingDelta {
                                index,
                                thinking: thinking.clone(),
                            });
                        }
                        ContentBlock::ToolUse { id, name, input } => {
                            events.push(StreamEvent::ToolCall {
                                index,
                                call: ToolCall {
                                    id: id.clone(),
                                    name: name.clone(),
                                    input: input.clone(),
                                },
                            });
                        }
                        _ => {}
                    }
                }
                events.push(StreamEvent::Usage(response.usage));
                match latency {
                    None => ResponseStream::ready(events, Ok(response)),
                    Some(latency) => ResponseStream::new(move |tx| async move {
                        tokio::time::sleep(latency).await;
                        for event in events {
                            let _ = tx.send(event);
                        }
                        Ok(response)
                    }),
                }
            }
            Err(kind) => ResponseStream::ready(
                vec![StreamEvent::AttemptStarted { attempt: 1 }],
                Err(ModelError {
                    provider: "script".into(),
                    agent: ctx.agent_id.clone(),
                    turn: ctx.turn,
                    attempts: 1,
                    gave_up: GaveUp::NotRetryable,
                    kind,
                }),
            ),
        }
    }
}

/// Wraps any provider and appends a cassette entry for every complete response.
#[derive(Debug, Clone)]
pub struct Recorder {
    inner: Arc<dyn ModelProvider>,
    sink: Arc<Mutex<std::fs::File>>,
    path: PathBuf,
    redactions: Arc<Vec<Redaction>>,
}

impl Recorder {
    /// Records into `path`, replacing what it held.
    pub fn create(
        inner: Arc<dyn ModelProvider>,
        path: &Path,
        redactions: Vec<Redaction>,
    ) -> Result<Self, SetupError> {
        Self::open(inner, path, redactions, false)
    }

    /// Records at the end of `path` (for a resumed run).
    pub fn append(
        inner: Arc<dyn ModelProvider>,
        path: &Path,
        redactions: Vec<Redaction>,
    ) -> Result<Self, SetupError> {
        Self::open(inner, path, redactions, true)
    }

    fn open(
        inner: Arc<dyn ModelProvider>,
        path: &Path,
        redactions: Vec<Redaction>,
        append: bool,
    ) -> Result<Self, SetupError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(path)
            .map_err(|e| SetupError::Cassette(format!("cannot write {}: {e}", path.display())))?;
        Ok(Recorder {
            inner,
            sink: Arc::new(Mutex::new(file)),
            path: path.to_owned(),
            redactions: Arc::new(redactions),
        })
    }
}

fn write_entry(
    sink: &Mutex<std::fs::File>,
    path: &Path,
    entry: &CassetteEntry,
) -> Result<(), FailureKind> {
    let failure = |detail: String| FailureKind::Cassette {
        path: path.display().to_string(),
        detail,
    };
    let mut line = serde_json::to_string(entry).map_err(|e| failure(e.to_string()))?;
    line.push('\n');
    let mut file = sink
        .lock()
        .map_err(|_| failure("the recorder's lock is poisoned".into()))?;
    file.write_all(line.as_bytes())
        .and_then(|()| file.flush())
        .map_err(|e| failure(e.to_string()))
}

impl ModelProvider for Recorder {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn stream(&self, ctx: &RequestContext, request: &ModelRequest) -> ResponseStream {
        let mut inner = self.inner.stream(ctx, request);
        let hash = request_hash(request, &self.redactions);
        let sink = self.sink.clone();
        let path = self.path.clone();
        let ctx = ctx.clone();
        let provider = self.inner.name().to_owned();
        ResponseStream::new(move |tx| async move {
            while let Some(item) = inner.next_event().await {
                match item {
                    Ok(StreamEvent::Completed(response)) => {
                        let entry = CassetteEntry {
                            agent: ctx.agent_id.clone(),
                            turn: Some(ctx.turn),
                            purpose: ctx.purpose.header().map(str::to_owned),
                            when: None,
                            reply: Some(CassetteReply {
                                content: response.content.clone(),
                                stop_reason: Some(response.stop_reason.clone()),
                                usage: Some(response.usage),
                                model: Some(response.model.clone()),
                            }),
                            request_hash: Some(hash),
                        };
                        write_entry(&sink, &path, &entry).map_err(|kind| ModelError {
                            provider,
                            agent: ctx.agent_id.clone(),
                            turn: ctx.turn,
                            attempts: response.attempts,
                            gave_up: GaveUp::NotRetryable,
                            kind,
                        })?;
                        return Ok(response);
                    }
                    Ok(event) => {
                        let _ = tx.send(event);
                    }
                    Err(e) => return Err(e),
                }
            }
            Err(ModelError {
                provider,
                agent: ctx.agent_id.clone(),
                turn: ctx.turn,
                attempts: 0,
                gave_up: GaveUp::NotRetryable,
                kind: FailureKind::Truncated {
                    expected: "a complete response",
                },
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_entries_with_a_first_byte_delay_have_a_latency() {
        let text =
            "{\"agent\":\"a\",\"fault\":{\"first_byte_delay_ms\":200}}\n\n{\"agent\":\"b\"}\n";
        assert_eq!(
            entry_latencies(text),
            [Some(Duration::from_millis(200)), None]
        );
        assert!(entry_latencies("{\"agent\":\"a\"}\n").is_empty());
        assert_eq!(
            entry_latencies(
                "[{\"agent\":\"a\"},{\"agent\":\"b\",\"fault\":{\"first_byte_delay_ms\":5}}]"
            ),
            [None, Some(Duration::from_millis(5))]
        );
    }
}
