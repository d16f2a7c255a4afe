//! Errors of the model clients: which provider, which agent, what happened, what to check.

use std::time::Duration;

/// What went wrong in one attempt (or before any attempt).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FailureKind {
    /// The server answered with an HTTP error status.
    #[error("HTTP {status} {error_type}: {message}{}", request_id_suffix(.request_id))]
    Http {
        status: u16,
        error_type: String,
        message: String,
        request_id: Option<String>,
        /// The delay the server asked for (`retry-after-ms` / `retry-after`).
        retry_after: Option<Duration>,
        /// `x-should-retry`, when sent.
        should_retry: Option<bool>,
    },
    /// An `error` event (or OpenAI `{"error":…}` chunk) after HTTP 200.
    #[error("error event in the stream: {error_type}: {message}")]
    StreamError { error_type: String, message: String },
    /// The connection dropped while the response streamed.
    #[error("connection dropped mid-stream: {detail}")]
    Disconnected { detail: String },
    /// The stream ended cleanly but without its terminal event.
    #[error("stream ended without {expected}")]
    Truncated { expected: &'static str },
    /// No bytes arrived for the idle timeout.
    #[error("stream stalled: no bytes for {} ms", .after.as_millis())]
    IdleTimeout { after: Duration },
    /// The attempt ran past the overall request deadline.
    #[error("request deadline of {} ms passed", .after.as_millis())]
    Deadline { after: Duration },
    /// The TCP/TLS connection could not be made in time.
    #[error("connect timed out: {detail}")]
    ConnectTimeout { detail: String },
    /// The connection could not be made, or the request could not be sent.
    #[error("cannot connect: {detail}")]
    Connect { detail: String },
    /// A chunk whose `data:` is not valid JSON, or not valid UTF-8, or bad SSE.
    #[error("malformed chunk: {detail}")]
    MalformedChunk { detail: String },
    /// A tool call's input was not valid JSON when the block ended.
    #[error("tool call {tool} has invalid input JSON: {detail}")]
    MalformedToolInput { tool: String, detail: String },
    /// No API key found.
    #[error("no API key: {variable} is not set")]
    MissingKey { variable: String },
    /// The client could not be built.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The cassette has no entry for this request.
    #[error("the cassette has no entry for agent {agent} turn {turn}")]
    MissingCassetteEntry { agent: String, turn: u64 },
    /// The cassette entry answered a different request (strict mode).
    #[error("request hash {actual} differs from the cassette's {recorded}")]
    HashMismatch { recorded: String, actual: String },
    /// The cassette could not be read or written.
    #[error("cassette {path}: {detail}")]
    Cassette { path: String, detail: String },
}

fn request_id_suffix(id: &Option<String>) -> String {
    id.as_ref()
        .map(|id| format!(" (request-id {id})"))
        .unwrap_or_default()
}

/// What the servers say when a prompt does not fit the model's context: Anthropic (400
/// `invalid_request_error`, "prompt is too long: N tokens > M maximum"), OpenAI (400, code
/// `context_length_exceeded`, "This model's maximum context length is …" or "… exceeds the
/// context window …"), vLLM (400, "maximum context length"), llama.cpp (400
/// `exceed_context_size_error`, "the request exceeds the available context size"). Matched
/// against the error's type and message, in lower case.
pub const PROMPT_TOO_LONG_MARKERS: [&str; 7] = [
    "prompt is too long",
    "context_length_exceeded",
    "maximum context length",
    "exceed_context_size",
    "exceeds the available context size",
    "context window",
    "input is too long",
];

/// HTTP statuses retried: 408, 409, 429, 500, 502, 503, 504, 529.
pub const RETRYABLE_STATUSES: [u16; 8] = [408, 409, 429, 500, 502, 503, 504, 529];

impl FailureKind {
    /// Whether the server refused the request because the prompt does not fit the model's
    /// context (see [`PROMPT_TOO_LONG_MARKERS`]): compacting the context may cure it.
    pub fn is_prompt_too_long(&self) -> bool {
        let FailureKind::Http {
            status,
            error_type,
            message,
            ..
        } = self
        else {
            return false;
        };
        if !matches!(status, 400 | 413) {
            return false;
        }
        let text = format!("{error_type} {message}").to_lowercase();
        PROMPT_TOO_LONG_MARKERS
            .iter()
            .any(|marker| text.contains(marker))
    }

    /// Whether another attempt may succeed. Never for other 4xx; `x-should-retry: false`
    /// always wins.
    pub fn is_retryable(&self) -> bool {
        match self {
            FailureKind::Http {
                status,
                should_retry,
                ..
            } => {
                if *should_retry == Some(false) {
                    return false;
                }
                RETRYABLE_STATUSES.contains(status)
                    || (*status >= 500 && *should_retry == Some(true))
            }
            FailureKind::StreamError { error_type, .. } => matches!(
                error_type.as_str(),
                "overloaded_error"
                    | "api_error"
                    | "rate_limit_error"
                    | "timeout_error"
                    | "server_error"
                    | "internal_error"
                    | "service_unavailable"
            ),
            FailureKind::Disconnected { .. }
            | FailureKind::Truncated { .. }
            | FailureKind::IdleTimeout { .. }
            | FailureKind::Deadline { .. }
            | FailureKind::ConnectTimeout { .. }
            | FailureKind::Connect { .. }
            | FailureKind::MalformedChunk { .. }
            | FailureKind::MalformedToolInput { .. } => true,
            FailureKind::MissingKey { .. }
            | FailureKind::Config(_)
            | FailureKind::MissingCassetteEntry { .. }
            | FailureKind::HashMismatch { .. }
            | FailureKind::Cassette { .. } => false,
        }
    }

    /// What to check, for a person reading the error.
    pub fn hint(&self, provider: &str) -> String {
        match self {
            FailureKind::Http { status, .. } => match status {
                401 => format!("check the {provider} API key (its environment variable or `api_key_env`)"),
                403 => "check that the key may use this model".into(),
                404 => format!(
                    "check the model name and the {provider} base URL ({})",
                    if provider == "anthropic" { "without /v1" } else { "including /v1" }
                ),
                400 | 413 | 422 => "the request was rejected; the message says which part".into(),
                402 => "check the account's billing".into(),
                429 => "rate limited: lower the concurrency or raise the account's limits".into(),
                _ => "the service is failing or overloaded; try again later".into(),
            },
            FailureKind::StreamError { .. } => "the service failed mid-answer; try again later".into(),
            FailureKind::Disconnected { .. } | FailureKind::Truncated { .. } => {
                "the connection was cut; check the network, proxies and the server's logs".into()
            }
            FailureKind::IdleTimeout { .. } => "the stream stalled; raise stream_idle_timeout_ms (MUSTER_STREAM_IDLE_TIMEOUT_MS) for a slow model".into(),
            FailureKind::Deadline { .. } => "raise request_timeout_ms for long answers".into(),
            FailureKind::ConnectTimeout { .. } | FailureKind::Connect { .. } => {
                format!("check the {provider} base URL and that the server is reachable")
            }
            FailureKind::MalformedChunk { .. } | FailureKind::MalformedToolInput { .. } => {
                "the server sent data that is not in the API's format; check the base URL points at a compatible server".into()
            }
            FailureKind::MissingKey { variable } => {
                format!("set {variable}, or name another variable with `api_key_env`")
            }
            FailureKind::Config(_) => "check the provider settings".into(),
            FailureKind::MissingCassetteEntry { .. } => {
                "record the cassette again (`--record`) or add an entry for this agent and turn".into()
            }
            FailureKind::HashMismatch { .. } => {
                "the run drifted from the recording; record again or replay without --strict".into()
            }
            FailureKind::Cassette { .. } => "check the cassette file".into(),
        }
    }
}

/// Why the client stopped trying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GaveUp {
    /// The failure is not one to retry.
    NotRetryable,
    /// The cap on attempts was reached.
    AttemptCap,
    /// Waiting again would pass the cap on total backoff.
    WaitCap,
}

/// A model request that failed for good.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{provider}: agent {agent} turn {turn}: {kind} (after {attempts} attempt{}{}); {hint}",
    if *.attempts == 1 { "" } else { "s" },
    match .gave_up { GaveUp::AttemptCap => ", attempt cap reached", GaveUp::WaitCap => ", retry wait cap reached", GaveUp::NotRetryable => "" },
    hint = .kind.hint(.provider))]
pub struct ModelError {
    pub provider: String,
    pub agent: String,
    pub turn: u64,
    pub attempts: u32,
    pub gave_up: GaveUp,
    /// The last failure.
    pub kind: FailureKind,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(status: u16, error_type: &str, message: &str) -> FailureKind {
        FailureKind::Http {
            status,
            error_type: error_type.into(),
            message: message.into(),
            request_id: None,
            retry_after: None,
            should_retry: None,
        }
    }

    #[test]
    fn the_servers_prompt_too_long_errors_are_recognised() {
        let table = [
            (
                http(
                    400,
                    "invalid_request_error",
                    "prompt is too long: 208310 tokens > 200000 maximum",
                ),
                true,
            ),
            (
                http(
                    400,
                    "invalid_request_error",
                    "This model's maximum context length is 128000 tokens. However, your messages resulted in 130512 tokens.",
                ),
                true,
            ),
            (http(400, "context_length_exceeded", "Input too long"), true),
            (
                http(
                    400,
                    "exceed_context_size_error",
                    "the request exceeds the available context size, try increasing it",
                ),
                true,
            ),
            (
                http(
                    400,
                    "BadRequestError",
                    "This model's maximum context length is 4096 tokens.",
                ),
                true,
            ),
            (
                http(400, "invalid_request_error", "max_tokens: must be positive"),
                false,
            ),
            (
                http(429, "rate_limit_error", "maximum context length"),
                false,
            ),
            (
                FailureKind::StreamError {
                    error_type: "invalid_request_error".into(),
                    message: "prompt is too long".into(),
                },
                false,
            ),
        ];
        for (kind, want) in table {
            assert_eq!(kind.is_prompt_too_long(), want, "{kind}");
        }
    }
}
