//! `muster-fake-llm`: a fake Anthropic / OpenAI model server on loopback, scripted per agent,
//! with request validation and fault injection. It depends on no muster crate.
//!
//! # Use
//! ```no_run
//! # async fn demo() -> Result<(), muster_fake_llm::FakeLlmError> {
//! use muster_fake_llm::{Block, FakeLlm, ScriptEntry};
//! let fake = FakeLlm::start(vec![
//!     ScriptEntry::reply("lead", 1, vec![Block::text("Hello.")]),
//! ])
//! .await?;
//! let anthropic_base = fake.base_url();        // http://127.0.0.1:PORT (no /v1)
//! let openai_base = fake.openai_base_url();    // http://127.0.0.1:PORT/v1
//! // … run the client against it …
//! fake.verify()?;                              // every entry used, no unmatched request
//! # Ok(()) }
//! ```
//! The binary: `fake-llm serve --addr 127.0.0.1:0 --script FILE` prints its base URL
//! (`http://127.0.0.1:PORT`) as the first line on stdout and serves until killed.
//!
//! # Endpoints
//! `POST /v1/messages` (Anthropic, JSON or SSE with `"stream": true`),
//! `POST /v1/messages/count_tokens`, `POST /v1/chat/completions` (OpenAI, JSON or SSE ending
//! in `data: [DONE]`, honouring `stream_options.include_usage`), `GET /v1/models` (one list
//! with both APIs' fields). Control plane: `POST /_fake/script` (append entries; same formats
//! as a script file), `GET /_fake/requests` (the [`RecordedRequest`]s), `POST /_fake/reset`
//! (forget script, requests, attempt and id counters), `GET /_fake/health`,
//! `GET /_fake/verify` (200, or 409 listing unmatched requests and unused entries),
//! `POST /_fake/gates/NAME/open` (let every response held on gate NAME go on).
//!
//! # Choosing a response
//! Never by pop order. Each model request is keyed by
//! - agent: header `x-muster-agent-id`;
//! - turn: header `x-muster-turn` (an integer);
//! - attempt: how many times this (agent, turn) has been requested so far, this request
//!   included, starting at 1 (requests rejected by validation count too);
//! - purpose: header `x-muster-purpose` (e.g. `compact`);
//! - mail: the `<mail …>` tags in the newest user turn (below).
//!
//! An entry matches when every selector it sets matches; a selector it leaves out matches
//! anything. Among matching entries the most specific wins — weights `turn` 8, `attempt` 4,
//! `when` 2, `agent` 1, `purpose` 1 — and ties go to the earliest entry. So an entry without
//! `attempt` answers every attempt that no entry scripts separately. Entries are not consumed:
//! [`FakeLlmHandle::verify`] checks that each was used at least once. A request that matches
//! nothing gets a 500 (`api_error`, or OpenAI `server_error`) with message
//! `fake-llm: no script entry for agent A turn N attempt K` and `x-should-retry: false`, and is
//! recorded as unmatched so that `verify` fails.
//!
//! **Mail in a user turn.** muster delivers mail as text containing a tag
//! `<mail type="plan_approval_response" from="lead" id="…">…</mail>`. The newest user turn is
//! the last message with `role: "user"`; its string content or its `text` blocks are searched
//! (not `tool_result` contents). Attribute values are in double or single quotes and may use
//! `&quot; &apos; &lt; &gt; &amp;`. `when: {"mail_type": T, "from": F}` matches when one tag
//! has `type="T"` and `from="F"` (a field left out matches anything).
//!
//! # Script format
//! A JSON array of entries, a single entry object, or JSON lines (one entry per line). Unknown
//! fields are errors. Exactly one of `reply` / `error` per entry.
//! ```json
//! {
//!   "agent": "lead", "turn": 3, "attempt": 1, "purpose": "compact",
//!   "when": {"mail_type": "plan_approval_response", "from": "lead"},
//!   "reply": {
//!     "content": [
//!       {"type": "thinking", "thinking": "…", "signature": "sig"},
//!       {"type": "text", "text": "Running the tests."},
//!       {"type": "tool_use", "name": "bash", "input": {"cmd": "cargo test"}},
//!       {"type": "some_future_block", "any": "field"}
//!     ],
//!     "stop_reason": "tool_use",
//!     "usage": {"input_tokens": 10, "output_tokens": 5,
//!               "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0},
//!     "model": "claude-sonnet-4-5"
//!   },
//!   "error": {"status": 529, "type": "overloaded_error", "message": "Overloaded",
//!             "retry_after": "1", "retry_after_ms": 20, "x_should_retry": true,
//!             "headers": {"anthropic-ratelimit-requests-remaining": "0"}},
//!   "stream": {"chunk_chars": 16, "no_ping": false, "inter_event_delay_ms": 0,
//!              "tcp_chunk_bytes": 7, "crlf": false, "trailing_whitespace": false},
//!   "fault": {"first_byte_delay_ms": 0, "disconnect_after_events": 3,
//!             "truncate_after_events": 3,
//!             "error_event": {"after_events": 2, "type": "overloaded_error", "message": "Overloaded"},
//!             "stall": {"after_events": 2, "ms": 300, "ping_every_ms": 50, "then_disconnect": false},
//!             "malformed_after_events": 2, "unknown_event_after_events": 1,
//!             "cut_last_block": false, "hold": "gate-name"},
//!   "openai": {"tool_index_always_zero": false, "omit_tool_index": false,
//!              "finish_reason_stop_with_tools": false, "usage_choices_null": false,
//!              "no_done": false}
//! }
//! ```
//! One reply renders into either format: `tool_use` blocks ↔ `tool_calls` (arguments as a JSON
//! string), `thinking` ↔ `delta.reasoning_content` (streaming only), other block types are
//! sent verbatim by Anthropic and skipped by OpenAI; stop reasons `end_turn`/`stop_sequence`
//! → `stop`, `tool_use` → `tool_calls`, `max_tokens` → `length`, `refusal` → `content_filter`.
//! The default stop reason is `tool_use` when a tool_use block is present, else `end_turn`.
//! Ids come from counters: `msg_fake_0001`, `chatcmpl-fake-0001`, `toolu_fake_0001`,
//! `call_fake_0001`, `req_fake_0001` (the `request-id` / `x-request-id` header of every API
//! answer). Tokens = ceil(chars / 4); input chars are all string values in `system`,
//! `messages` and `tools` except those of the keys `role`, `type`, `id`, `tool_use_id`,
//! `tool_call_id` and `signature`; output chars are the text, thinking and tool-input JSON.
//!
//! Fault event counts index the normal event sequence (Anthropic SSE events including the
//! default `ping`; OpenAI chunks including `[DONE]`); `after_events: 0` acts before the first
//! event, a count past the end acts at the end. A non-streaming body is plain JSON with a
//! `content-length`; with a body fault or `tcp_chunk_bytes` it is sent chunked as two halves
//! that count as two events (so `disconnect_after_events: 1` cuts the JSON in the middle).
//! `error_event`, `malformed_after_events`, `unknown_event_after_events` and
//! `cut_last_block` apply to streams only. `hold: NAME` keeps the response (before its first
//! byte, and before `first_byte_delay_ms`) until gate NAME is opened
//! ([`FakeLlmHandle::open_gate`]); [`FakeLlmHandle::gate_reached`] tells a test that a request
//! is waiting there, so it can hold an agent mid-turn exactly until something else happened.
//!
//! # Validation (as the real APIs)
//! Body over [`FakeLlmConfig::max_body_bytes`] → 413 `request_too_large`; missing key
//! (`x-api-key`; OpenAI `Authorization: Bearer`) → 401 (see [`KeyCheck`]); missing
//! `anthropic-version` → 400; body not a JSON object, missing `model` / `max_tokens` /
//! `messages`, empty `messages` → 400; the Anthropic tool pairing rules (`Did not find N
//! tool_result block(s) at the beginning…`, `` `tool_use` ids were found without
//! `tool_result` blocks immediately after…``, `unexpected `tool_use_id`…`) and the OpenAI
//! missing tool reply (`An assistant message with 'tool_calls' must be followed by tool
//! messages…`) → 400; thinking `budget_tokens` < 1024 or ≥ `max_tokens` → 400. Errors come
//! in the real shapes: Anthropic `{"type":"error","error":{"type","message"},"request_id"}`,
//! OpenAI `{"error":{"message","type","param","code"}}`.

mod gates;
mod render;
mod script;
mod server;
mod state;
mod validate;

pub use script::{
    Block, ErrorEvent, Fault, HttpError, OpenAiQuirks, Reply, ScriptEntry, Stall, StreamOptions,
    UsageSpec, When, parse_script,
};
pub use state::{RecordedRequest, ReturnedUsage};

use server::Shared;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// Errors of the library.
#[derive(Debug, thiserror::Error)]
pub enum FakeLlmError {
    #[error("fake-llm: cannot bind {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("fake-llm: bad script: {0}")]
    Script(String),
    #[error("fake-llm: {}", describe_unverified(.unmatched, .unused))]
    Unverified {
        /// Messages of requests that matched no entry.
        unmatched: Vec<String>,
        /// Indices of entries never used.
        unused: Vec<usize>,
    },
}

fn describe_unverified(unmatched: &[String], unused: &[usize]) -> String {
    let mut parts = Vec::new();
    if !unmatched.is_empty() {
        parts.push(format!(
            "{} unmatched request(s): {}",
            unmatched.len(),
            unmatched.join("; ")
        ));
    }
    if !unused.is_empty() {
        parts.push(format!("unused script entries {unused:?}"));
    }
    parts.join("; ")
}

/// How API keys are checked.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum KeyCheck {
    /// No key needed (a local server such as Ollama).
    None,
    /// Any non-empty key (default).
    #[default]
    Any,
    /// Exactly this key; another gets a 401.
    Exact(String),
}

/// Server settings.
#[derive(Debug, Clone)]
pub struct FakeLlmConfig {
    pub keys: KeyCheck,
    /// Larger bodies get a 413 (default 32 MB, as the real API).
    pub max_body_bytes: usize,
    /// Served by `GET /v1/models`.
    pub models: Vec<String>,
    /// Fields added to every entry of `GET /v1/models`, as servers that report limits do
    /// (vLLM's `max_model_len`, OpenRouter's `context_length` and `top_provider`, …).
    pub model_fields: serde_json::Map<String, serde_json::Value>,
    /// The body of llama.cpp's `GET /props` (e.g. `{"default_generation_settings":
    /// {"n_ctx": 4096}}`); `None` answers 404, as servers other than llama.cpp do.
    pub props: Option<serde_json::Value>,
}

impl Default for FakeLlmConfig {
    fn default() -> Self {
        FakeLlmConfig {
            keys: KeyCheck::Any,
            max_body_bytes: 32 * 1024 * 1024,
            models: vec!["claude-sonnet-4-5".into(), "gpt-4.1".into()],
            model_fields: serde_json::Map::new(),
            props: None,
        }
    }
}

/// Starts fake servers.
pub struct FakeLlm;

impl FakeLlm {
    /// Starts a server on `127.0.0.1:0` with the default config.
    pub async fn start(script: Vec<ScriptEntry>) -> Result<FakeLlmHandle, FakeLlmError> {
        Self::start_with(FakeLlmConfig::default(), script).await
    }

    /// Starts a server on `127.0.0.1:0`.
    pub async fn start_with(
        config: FakeLlmConfig,
        script: Vec<ScriptEntry>,
    ) -> Result<FakeLlmHandle, FakeLlmError> {
        Self::bind("127.0.0.1:0", config, script).await
    }

    /// Starts a server on `addr` in the current tokio runtime.
    pub async fn bind(
        addr: &str,
        config: FakeLlmConfig,
        script: Vec<ScriptEntry>,
    ) -> Result<FakeLlmHandle, FakeLlmError> {
        for (i, entry) in script.iter().enumerate() {
            entry
                .check()
                .map_err(|e| FakeLlmError::Script(format!("entry {i}: {e}")))?;
        }
        let bind_err = |source| FakeLlmError::Bind {
            addr: addr.to_owned(),
            source,
        };
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(bind_err)?;
        let local = listener.local_addr().map_err(bind_err)?;
        let mut state = state::State::default();
        state.append(script);
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            config,
            gates: gates::Gates::default(),
        });
        let app = server::router(shared.clone());
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stop_rx.await;
                })
                .await;
        });
        Ok(FakeLlmHandle {
            addr: local,
            shared,
            stop: Some(stop_tx),
            task,
        })
    }
}

/// A running fake server; dropping it stops the server.
pub struct FakeLlmHandle {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeLlmHandle {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`: the Anthropic base URL (without `/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://127.0.0.1:PORT/v1`: the OpenAI base URL.
    pub fn openai_base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Every API request received so far, in order (model requests and `count_tokens`; the
    /// metadata reads are in [`FakeLlmHandle::metadata_requests`]).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// The metadata reads received so far (`GET /v1/models`, `GET /props`), in order: kept
    /// apart so that a client reading its limits at start does not shift `requests()`.
    pub fn metadata_requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().metadata_requests.clone()
    }

    /// The requests that matched no script entry.
    pub fn failures(&self) -> Vec<RecordedRequest> {
        self.shared
            .lock()
            .requests
            .iter()
            .filter(|r| r.unmatched)
            .cloned()
            .collect()
    }

    /// Indices of the entries no request has used yet.
    pub fn unused_entries(&self) -> Vec<usize> {
        let st = self.shared.lock();
        st.used
            .iter()
            .enumerate()
            .filter(|(_, n)| **n == 0)
            .map(|(i, _)| i)
            .collect()
    }

    /// Appends entries to the script.
    pub fn append_script(&self, entries: Vec<ScriptEntry>) -> Result<(), FakeLlmError> {
        for (i, entry) in entries.iter().enumerate() {
            entry
                .check()
                .map_err(|e| FakeLlmError::Script(format!("entry {i}: {e}")))?;
        }
        self.shared.lock().append(entries);
        Ok(())
    }

    /// Opens gate `name`: every response held on it (`fault.hold`), now and later, goes on.
    pub fn open_gate(&self, name: &str) {
        self.shared.gates.open(name);
    }

    /// Waits until `count` requests have reached gate `name` (the agent is mid-turn, its
    /// response held). Guard it with a timeout.
    pub async fn gate_reached(&self, name: &str, count: u32) {
        self.shared.gates.reached(name, count).await;
    }

    /// Forgets the script, the recorded requests, the attempt and id counters.
    pub fn reset(&self) {
        self.shared.lock().reset();
    }

    /// Ok when every entry was used at least once and no request went unmatched.
    pub fn verify(&self) -> Result<(), FakeLlmError> {
        match verify_report(&self.shared.lock()) {
            None => Ok(()),
            Some((unmatched, unused)) => Err(FakeLlmError::Unverified { unmatched, unused }),
        }
    }

    /// Stops the server and waits for it to finish.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.abort();
        let _ = (&mut self.task).await;
    }
}

impl Drop for FakeLlmHandle {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.abort();
    }
}

pub(crate) fn verify_report(st: &state::State) -> Option<(Vec<String>, Vec<usize>)> {
    let unmatched: Vec<String> = st
        .requests
        .iter()
        .filter(|r| r.unmatched)
        .map(|r| r.error.clone().unwrap_or_default())
        .collect();
    let unused: Vec<usize> = st
        .used
        .iter()
        .enumerate()
        .filter(|(_, n)| **n == 0)
        .map(|(i, _)| i)
        .collect();
    if unmatched.is_empty() && unused.is_empty() {
        None
    } else {
        Some((unmatched, unused))
    }
}
