//! Model providers: one trait, the Anthropic and OpenAI-compatible clients, the script provider
//! (cassette replay) and the recorder.
//!
//! - [`ModelProvider::stream`] takes a [`RequestContext`] (run, agent, turn, purpose: sent as
//!   `x-muster-*` headers) and a [`ModelRequest`], and returns a [`ResponseStream`] of
//!   [`StreamEvent`]s ending in the complete [`ModelResponse`] or a [`ModelError`].
//!   [`ResponseStream::response`] waits for the complete response. An agent acts only on a
//!   complete response: text deltas are for display, and [`StreamEvent::Retrying`] says that
//!   the failed attempt's partial output is to be discarded.
//! - [`HttpClient::anthropic`] / [`HttpClient::openai`] build the network clients; retries,
//!   idle timeouts and deadlines are in [`ClientConfig`] and [`RetryPolicy`].
//! - [`build_provider`] builds any provider from `muster_config` settings and a key lookup.
//! - [`ScriptProvider`] replays a cassette; [`Recorder`] writes one. See [`script`] for the
//!   format.
//! - [`ModelProvider::server_limits`]: what a server other than the official endpoints
//!   reports about a model's context window and output limit (`GET /v1/models`, llama.cpp's
//!   `GET /props`; see [`ServerLimits`]), asked once per model and cached by the client.
//!
//! # Failures and what the clients do
//! | Failure | Behaviour |
//! |---|---|
//! | HTTP 408, 409, 429, 500, 502, 503, 504, 529 | retried: `retry-after-ms`, else `retry-after` (seconds or HTTP date) when 0 < delay ≤ 60 s, else exponential backoff ×(1 − 0.25·rand); `x-should-retry: false` never retried, `x-should-retry: true` retries another 5xx |
//! | any other 4xx | never retried (whatever `x-should-retry` says) |
//! | 400/413 saying the prompt does not fit the context ([`FailureKind::is_prompt_too_long`]) | not retried by the client; the runtime compacts the context and sends once more |
//! | `error` event after 200 | retried when its type is transient (`overloaded_error`, `api_error`, `rate_limit_error`, `timeout_error`, …), else reported |
//! | connection dropped mid-stream, or refused | retried |
//! | body ends without `message_stop` (OpenAI: without a finish reason or `[DONE]`) | retried |
//! | `data:` not JSON, bad UTF-8, bad SSE; tool input not JSON at block end | retried |
//! | no bytes (headers included) for `stream_idle_timeout` | abandoned, retried |
//! | attempt past `request_timeout` | abandoned, retried |
//! | unknown SSE event / delta / block | skipped / skipped / kept raw and sent back |
//! | a tool call cut by `max_tokens` | dropped; text kept; stop reason `max_tokens` |
//! | a JSON body answering a streaming request | parsed as the equivalent stream |
//!
//! Attempts are capped by [`RetryPolicy::max_retries`] and the summed waits by
//! [`RetryPolicy::max_total_wait`]; a retry resends the identical body, and on any failure the
//! connection is dropped at once.

mod anthropic;
mod cost;
mod error;
mod http;
mod limits;
mod openai;
pub mod prompt_cache;
mod retry;
pub mod script;
mod stream;
mod types;
mod wire;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use muster_config::settings::{ProviderKind, ProviderSettings};
use muster_config::{Layer, Settings};

pub use anthropic::{
    AnthropicOptions, MAX_BREAKPOINTS, MIN_THINKING_BUDGET, VERSION as ANTHROPIC_VERSION,
    clip_thinking_budget,
};
pub use cost::{UsageTotals, cost_usd};
pub use error::{FailureKind, GaveUp, ModelError, RETRYABLE_STATUSES};
pub use http::{ClientConfig, HttpClient};
pub use limits::ServerLimits;
pub use openai::{OpenAiOptions, prompt_cache_key};
pub use retry::{RecordingSleeper, RetryPolicy, Sleeper, TokioSleeper, retry_after};
pub use script::{Cassette, CassetteEntry, Recorder, Redaction, ScriptOptions, ScriptProvider};
pub use stream::ResponseStream;
pub use types::{
    ContentBlock, Message, ModelRequest, ModelResponse, RequestContext, RequestPurpose, Role,
    StopReason, StreamEvent, ThinkingForm, ThinkingSettings, ToolCall, ToolDefinition,
    ToolResultContent, Usage, tool_calls_in,
};
pub(crate) use wire::truncate;

/// A model provider: a request in, a stream of events out.
pub trait ModelProvider: Send + Sync + std::fmt::Debug {
    /// `anthropic`, `openai`, `script`, …
    fn name(&self) -> &str;

    /// Starts a request. Nothing is sent until the stream is polled; dropping the stream
    /// abandons the request.
    fn stream(&self, ctx: &RequestContext, request: &ModelRequest) -> ResponseStream;

    /// What the server reports about `model`'s limits (see [`ServerLimits`]): asked once per
    /// provider and model, then cached for the provider's life (one run). Never an error: a
    /// server that cannot be asked, or reports nothing, gives empty limits. Providers without
    /// a server report nothing.
    fn server_limits<'a>(
        &'a self,
        _model: &'a str,
    ) -> futures_util::future::BoxFuture<'a, ServerLimits> {
        Box::pin(async { ServerLimits::default() })
    }
}

/// A provider could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(
        "{provider}: no API key: set {variable}, or name another variable with `providers.{provider}.api_key_env`"
    )]
    MissingKey {
        provider: &'static str,
        variable: String,
    },
    #[error("{provider}: base URL {url:?} must start with http:// or https://")]
    BaseUrl { provider: &'static str, url: String },
    #[error("{provider}: cannot build the HTTP client: {detail}")]
    Http {
        provider: &'static str,
        detail: String,
    },
    #[error("script: {0}")]
    Cassette(String),
}

/// The official endpoints (a key is required there; any other base URL may need none).
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

/// Extra options for [`build_provider`].
#[derive(Debug, Clone)]
pub struct ProviderOptions {
    /// Waits between retries ([`TokioSleeper`] by default).
    pub sleeper: Arc<dyn Sleeper>,
    pub anthropic: AnthropicOptions,
    pub openai: OpenAiOptions,
    /// For the script provider: strictness and placeholders.
    pub script: ScriptOptions,
    /// Caps on retries beyond what settings say (the total wait).
    pub max_total_wait: Duration,
}

impl Default for ProviderOptions {
    fn default() -> Self {
        ProviderOptions {
            sleeper: Arc::new(TokioSleeper),
            anthropic: AnthropicOptions::default(),
            openai: OpenAiOptions::default(),
            script: ScriptOptions::default(),
            max_total_wait: RetryPolicy::default().max_total_wait,
        }
    }
}

/// The client settings of one provider. `lookup` reads environment variables (only `main`
/// passes the process environment): the key from `api_key_env` (default `ANTHROPIC_API_KEY` /
/// `OPENAI_API_KEY`), and `ANTHROPIC_BASE_URL` / `OPENAI_BASE_URL` when settings name no base
/// URL. A key written in settings wins. Without a key, the official endpoints are refused and
/// any other server is called without authentication.
pub fn client_config(
    kind: ProviderKind,
    provider: &ProviderSettings,
    models: &BTreeMap<String, muster_config::settings::ModelInfo>,
    lookup: &dyn Fn(&str) -> Option<String>,
    options: &ProviderOptions,
) -> Result<ClientConfig, SetupError> {
    let (name, default_var, url_var, official): (&'static str, _, _, _) = match kind {
        ProviderKind::OpenAi => (
            "openai",
            "OPENAI_API_KEY",
            "OPENAI_BASE_URL",
            OPENAI_BASE_URL,
        ),
        _ => (
            "anthropic",
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_BASE_URL",
            ANTHROPIC_BASE_URL,
        ),
    };
    // Loaded settings always hold a base URL: the built-in default (the official endpoint)
    // at least. That one yields to the environment's variable, else it would never apply.
    let mut base_url = provider
        .base_url
        .as_ref()
        .filter(|s| !(s.origin.layer == Layer::Default && s.value == official))
        .map(|s| s.value.clone())
        .or_else(|| lookup(url_var).filter(|v| !v.trim().is_empty()))
        .unwrap_or_else(|| official.to_owned());
    base_url = base_url.trim_end_matches('/').to_owned();
    if kind == ProviderKind::Anthropic
        && let Some(stripped) = base_url.strip_suffix("/v1")
    {
        base_url = stripped.to_owned();
    }
    let variable = provider
        .api_key_env
        .as_ref()
        .map(|s| s.value.clone())
        .unwrap_or_else(|| default_var.to_owned());
    let api_key = provider
        .api_key
        .as_ref()
        .map(|s| s.value.clone())
        .or_else(|| lookup(&variable))
        .filter(|k| !k.trim().is_empty());
    if api_key.is_none() && base_url == official {
        return Err(SetupError::MissingKey {
            provider: name,
            variable,
        });
    }
    let ms = |v: u64| Duration::from_millis(v);
    let mut config = ClientConfig::new(base_url, api_key);
    config.connect_timeout = ms(provider.connect_timeout_ms.value);
    config.request_timeout = ms(provider.request_timeout_ms.value);
    config.stream_idle_timeout = ms(provider.stream_idle_timeout_ms.value);
    config.retry.max_retries = u32::try_from(provider.max_retries.value).unwrap_or(u32::MAX);
    config.retry.initial_backoff = ms(provider.retry_backoff_ms.value);
    config.retry.max_backoff = config.retry.max_backoff.max(config.retry.initial_backoff);
    config.retry.max_total_wait = options.max_total_wait;
    config.sleeper = options.sleeper.clone();
    config.models = models.clone();
    Ok(config)
}

/// Builds the provider `kind` from settings. `lookup` reads environment variables (see
/// [`client_config`]). The script provider replays `providers.script.cassette`.
pub fn build_provider(
    kind: ProviderKind,
    settings: &Settings,
    lookup: &dyn Fn(&str) -> Option<String>,
    options: &ProviderOptions,
) -> Result<Arc<dyn ModelProvider>, SetupError> {
    build_provider_with(kind, settings.provider(kind), settings, lookup, options)
}

/// [`build_provider`] with the provider's settings given (an agent's own base URL or key
/// variable over the settings' `providers.KIND`).
pub fn build_provider_with(
    kind: ProviderKind,
    provider: &ProviderSettings,
    settings: &Settings,
    lookup: &dyn Fn(&str) -> Option<String>,
    options: &ProviderOptions,
) -> Result<Arc<dyn ModelProvider>, SetupError> {
    match kind {
        ProviderKind::Anthropic => {
            let config = client_config(kind, provider, &settings.models, lookup, options)?;
            Ok(Arc::new(HttpClient::anthropic(
                config,
                options.anthropic.clone(),
            )?))
        }
        ProviderKind::OpenAi => {
            let config = client_config(kind, provider, &settings.models, lookup, options)?;
            Ok(Arc::new(HttpClient::openai(
                config,
                options.openai.clone(),
            )?))
        }
        ProviderKind::Script => {
            let path = provider.cassette.as_ref().ok_or_else(|| {
                SetupError::Cassette(
                    "no cassette: pass --cassette FILE or set providers.script.cassette".into(),
                )
            })?;
            let mut provider = ScriptProvider::open(&path.value, options.script.clone())?;
            provider.set_models(settings.models.clone());
            Ok(Arc::new(provider))
        }
    }
}
