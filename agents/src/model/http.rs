//! The HTTP client both APIs share: headers, the retry loop, streaming with idle and overall
//! deadlines, SSE parsing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use eventsource_stream::{EventStreamError, Eventsource};
use futures_util::{Stream, StreamExt};
use muster_config::settings::ModelInfo;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::anthropic::{self, AnthropicOptions};
use super::cost::cost_usd;
use super::error::{FailureKind, GaveUp, ModelError};
use super::limits::ServerLimits;
use super::openai::{self, OpenAiOptions};
use super::retry::{RetryPolicy, Sleeper, TokioSleeper, retry_after};
use super::stream::ResponseStream;
use super::types::{ModelRequest, ModelResponse, RequestContext, StreamEvent};
use super::wire::{StreamParser, truncate};
use super::{ANTHROPIC_BASE_URL, ModelProvider, OPENAI_BASE_URL, SetupError};

/// Connection and retry settings of an HTTP client. `Debug` masks the key.
#[derive(Clone)]
pub struct ClientConfig {
    /// Anthropic: without `/v1` (`https://api.anthropic.com`); OpenAI: with it
    /// (`https://api.openai.com/v1`).
    pub base_url: String,
    /// The API key; `None` for a local server that needs none (no auth header is sent).
    pub api_key: Option<String>,
    pub connect_timeout: Duration,
    /// The overall deadline of one attempt, from sending to the last byte.
    pub request_timeout: Duration,
    /// An attempt whose stream sends no bytes for this long is abandoned and retried.
    pub stream_idle_timeout: Duration,
    pub retry: RetryPolicy,
    pub sleeper: Arc<dyn Sleeper>,
    /// The model catalogue, for prices (cost per request).
    pub models: BTreeMap<String, ModelInfo>,
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("stream_idle_timeout", &self.stream_idle_timeout)
            .field("retry", &self.retry)
            .field("sleeper", &self.sleeper)
            .field("models", &self.models.len())
            .finish()
    }
}

impl ClientConfig {
    /// Defaults: connect 10 s, request 10 min, idle 60 s, [`RetryPolicy::default`].
    pub fn new(base_url: impl Into<String>, api_key: Option<String>) -> Self {
        ClientConfig {
            base_url: base_url.into(),
            api_key,
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(600),
            stream_idle_timeout: Duration::from_secs(60),
            retry: RetryPolicy::default(),
            sleeper: Arc::new(TokioSleeper),
            models: BTreeMap::new(),
        }
    }
}

/// The wire format.
#[derive(Debug, Clone)]
pub(crate) enum Dialect {
    Anthropic(AnthropicOptions),
    OpenAi(OpenAiOptions),
}

impl Dialect {
    fn name(&self) -> &'static str {
        match self {
            Dialect::Anthropic(_) => "anthropic",
            Dialect::OpenAi(_) => "openai",
        }
    }
}

/// A streaming client of the Anthropic Messages API or an OpenAI-compatible
/// `/chat/completions` server. Build one with [`HttpClient::anthropic`] or
/// [`HttpClient::openai`].
#[derive(Debug, Clone)]
pub struct HttpClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    dialect: Dialect,
    config: ClientConfig,
    http: reqwest::Client,
    url: String,
    /// What the server reported per model (held while asking, so concurrent agents ask once).
    limits: tokio::sync::Mutex<BTreeMap<String, ServerLimits>>,
}

impl HttpClient {
    /// An Anthropic Messages client (`POST {base}/v1/messages`).
    pub fn anthropic(config: ClientConfig, options: AnthropicOptions) -> Result<Self, SetupError> {
        let url = format!("{}/v1/messages", config.base_url.trim_end_matches('/'));
        Self::build(Dialect::Anthropic(options), config, url)
    }

    /// An OpenAI-compatible client (`POST {base}/chat/completions`; the base includes `/v1`).
    pub fn openai(config: ClientConfig, mut options: OpenAiOptions) -> Result<Self, SetupError> {
        let url = format!("{}/chat/completions", config.base_url.trim_end_matches('/'));
        let official = config.base_url.trim_end_matches('/') == super::OPENAI_BASE_URL;
        options.prompt_cache_key = Some(options.prompt_cache_key.unwrap_or(official));
        Self::build(Dialect::OpenAi(options), config, url)
    }

    fn build(dialect: Dialect, config: ClientConfig, url: String) -> Result<Self, SetupError> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(SetupError::BaseUrl {
                provider: dialect.name(),
                url: config.base_url.clone(),
            });
        }
        // reqwest is built without a crypto provider: the process installs one (muster's
        // `main`; in-process tests their harness) before any client is built.
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .user_agent(concat!("muster/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| SetupError::Http {
                provider: dialect.name(),
                detail: error_chain(&e),
            })?;
        Ok(HttpClient {
            inner: Arc::new(Inner {
                dialect,
                config,
                http,
                url,
                limits: tokio::sync::Mutex::new(BTreeMap::new()),
            }),
        })
    }

    /// The request body this client sends for `request` (what the server sees).
    pub fn body(&self, request: &ModelRequest) -> Value {
        match &self.inner.dialect {
            Dialect::Anthropic(o) => anthropic::body(request, o),
            Dialect::OpenAi(o) => openai::body(request, o),
        }
    }
}

impl ModelProvider for HttpClient {
    fn name(&self) -> &str {
        self.inner.dialect.name()
    }

    fn stream(&self, ctx: &RequestContext, request: &ModelRequest) -> ResponseStream {
        let inner = self.inner.clone();
        let ctx = ctx.clone();
        let mut body = self.body(request);
        if let Dialect::OpenAi(OpenAiOptions {
            prompt_cache_key: Some(true),
            ..
        }) = &self.inner.dialect
            && let Some(map) = body.as_object_mut()
        {
            map.insert(
                "prompt_cache_key".into(),
                openai::prompt_cache_key(&ctx.run_id, &ctx.agent_id).into(),
            );
        }
        let model = request.model.clone();
        ResponseStream::new(move |tx| run(inner, ctx, model, body, tx))
    }

    fn server_limits<'a>(
        &'a self,
        model: &'a str,
    ) -> futures_util::future::BoxFuture<'a, ServerLimits> {
        Box::pin(async move {
            let mut cache = self.inner.limits.lock().await;
            if let Some(limits) = cache.get(model) {
                return *limits;
            }
            let limits = ask_limits(&self.inner, model).await;
            cache.insert(model.to_owned(), limits);
            limits
        })
    }
}

/// How long one metadata read may take: it delays an agent's start, and failing is harmless.
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// Asks the server's `/v1/models` and (llama.cpp) `/props` for `model`'s limits. The official
/// endpoints are not asked (their lists carry no limits; the catalogue has them).
async fn ask_limits(inner: &Inner, model: &str) -> ServerLimits {
    let base = inner.config.base_url.trim_end_matches('/');
    if base == ANTHROPIC_BASE_URL || base == OPENAI_BASE_URL {
        return ServerLimits::default();
    }
    let (models_url, root) = match inner.dialect {
        Dialect::Anthropic(_) => (format!("{base}/v1/models"), base),
        Dialect::OpenAi(_) => (
            format!("{base}/models"),
            base.strip_suffix("/v1").unwrap_or(base),
        ),
    };
    let listed = read_json(inner, &models_url)
        .await
        .map(|body| ServerLimits::from_models_list(&body, model))
        .unwrap_or_default();
    let props = read_json(inner, &format!("{root}/props"))
        .await
        .map(|body| ServerLimits::from_props(&body))
        .unwrap_or_default();
    let limits = listed.merge(props);
    tracing::debug!(
        provider = inner.dialect.name(),
        model,
        context_window = limits.context_window,
        max_output = limits.max_output,
        "the server's reported limits"
    );
    limits
}

/// A metadata `GET` answered with JSON; `None` (logged at debug) on any failure.
async fn read_json(inner: &Inner, url: &str) -> Option<Value> {
    let mut request = inner.http.get(url).header("accept", "application/json");
    match &inner.dialect {
        Dialect::Anthropic(_) => {
            request = request.header("anthropic-version", anthropic::VERSION);
            if let Some(key) = &inner.config.api_key {
                request = request.header("x-api-key", key);
            }
        }
        Dialect::OpenAi(_) => {
            if let Some(key) = &inner.config.api_key {
                request = request.bearer_auth(key);
            }
        }
    }
    let timeout = METADATA_TIMEOUT.min(inner.config.request_timeout);
    let read = async {
        let response = request.send().await.map_err(|e| error_chain(&e))?;
        if !response.status().is_success() {
            return Err(format!("HTTP {}", response.status().as_u16()));
        }
        response.json::<Value>().await.map_err(|e| error_chain(&e))
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(body)) => Some(body),
        Ok(Err(detail)) => {
            tracing::debug!(url, "cannot read the server's limits: {detail}");
            None
        }
        Err(_) => {
            tracing::debug!(
                url,
                "cannot read the server's limits: no answer in {timeout:?}"
            );
            None
        }
    }
}

/// Attempts until success, a failure not to retry, or a cap.
async fn run(
    inner: Arc<Inner>,
    ctx: RequestContext,
    model: String,
    body: Value,
    tx: mpsc::UnboundedSender<StreamEvent>,
) -> Result<ModelResponse, ModelError> {
    let provider = inner.dialect.name();
    let fail = |attempts: u32, gave_up: GaveUp, kind: FailureKind| ModelError {
        provider: provider.to_owned(),
        agent: ctx.agent_id.clone(),
        turn: ctx.turn,
        attempts,
        gave_up,
        kind,
    };
    // One body for every attempt: a retry resends identical bytes.
    let body = serde_json::to_vec(&body)
        .map(Bytes::from)
        .map_err(|e| fail(0, GaveUp::NotRetryable, FailureKind::Config(e.to_string())))?;
    let headers = headers(&inner, &ctx).map_err(|kind| fail(0, GaveUp::NotRetryable, kind))?;
    let policy = &inner.config.retry;
    let mut waited = Duration::ZERO;
    let mut attempt: u32 = 0;
    loop {
        attempt = attempt.saturating_add(1);
        let _ = tx.send(StreamEvent::AttemptStarted { attempt });
        match attempt_once(&inner, headers.clone(), body.clone(), &tx).await {
            Ok(mut response) => {
                if response.model.is_empty() {
                    response.model.clone_from(&model);
                }
                response.attempts = attempt;
                response.cost_usd = inner
                    .config
                    .models
                    .get(&response.model)
                    .or_else(|| inner.config.models.get(&model))
                    .and_then(|info| cost_usd(&response.usage, info));
                return Ok(response);
            }
            Err(kind) => {
                if !kind.is_retryable() {
                    return Err(fail(attempt, GaveUp::NotRetryable, kind));
                }
                if attempt > policy.max_retries {
                    return Err(fail(attempt, GaveUp::AttemptCap, kind));
                }
                let asked = match &kind {
                    FailureKind::Http { retry_after, .. } => *retry_after,
                    _ => None,
                };
                let delay = policy.delay(attempt, asked);
                let total = waited.saturating_add(delay);
                if total > policy.max_total_wait {
                    return Err(fail(attempt, GaveUp::WaitCap, kind));
                }
                waited = total;
                tracing::warn!(
                    provider,
                    agent = %ctx.agent_id,
                    turn = ctx.turn,
                    attempt,
                    delay_ms = delay.as_millis() as u64,
                    "model request failed, retrying: {kind}"
                );
                let _ = tx.send(StreamEvent::Retrying {
                    attempt,
                    delay,
                    reason: kind.to_string(),
                });
                inner.config.sleeper.sleep(delay).await;
            }
        }
    }
}

fn headers(inner: &Inner, ctx: &RequestContext) -> Result<HeaderMap, FailureKind> {
    let mut h = HeaderMap::new();
    let mut put = |name: &'static str, value: &str| -> Result<(), FailureKind> {
        let v = HeaderValue::from_str(value)
            .map_err(|_| FailureKind::Config(format!("header {name} cannot carry {value:?}")))?;
        h.insert(HeaderName::from_static(name), v);
        Ok(())
    };
    put("content-type", "application/json")?;
    put("accept", "text/event-stream")?;
    put("x-muster-run-id", &ctx.run_id)?;
    put("x-muster-agent-id", &ctx.agent_id)?;
    put("x-muster-turn", &ctx.turn.to_string())?;
    if let Some(purpose) = ctx.purpose.header() {
        put("x-muster-purpose", purpose)?;
    }
    match &inner.dialect {
        Dialect::Anthropic(_) => {
            put("anthropic-version", anthropic::VERSION)?;
            if let Some(key) = &inner.config.api_key {
                put("x-api-key", key)?;
            }
        }
        Dialect::OpenAi(_) => {
            if let Some(key) = &inner.config.api_key {
                put("authorization", &format!("Bearer {key}"))?;
            }
        }
    }
    Ok(h)
}

/// Why the body stream stopped early.
#[derive(Debug)]
enum BodyError {
    Idle(Duration),
    Deadline(Duration),
    Transport(String),
}

async fn attempt_once(
    inner: &Inner,
    headers: HeaderMap,
    body: Bytes,
    tx: &mpsc::UnboundedSender<StreamEvent>,
) -> Result<ModelResponse, FailureKind> {
    let total = inner.config.request_timeout;
    let deadline = Instant::now() + total;
    let send = inner
        .http
        .post(&inner.url)
        .headers(headers)
        .body(body)
        .send();
    // Waiting for the response head counts against the idle timeout too: a server that
    // sends nothing at all has stalled.
    let idle = inner.config.stream_idle_timeout;
    let head_wait = idle.min(total);
    let response = match tokio::time::timeout(head_wait, send).await {
        Err(_) if idle < total => return Err(FailureKind::IdleTimeout { after: idle }),
        Err(_) => return Err(FailureKind::Deadline { after: total }),
        Ok(Err(e)) => return Err(send_failure(&e)),
        Ok(Ok(r)) => r,
    };
    let status = response.status();
    if !status.is_success() {
        return Err(http_failure(response, deadline).await);
    }
    if is_json(response.headers()) {
        // A server that ignored `"stream": true` and answered with one JSON body.
        return json_response(&inner.dialect, response, deadline, total, tx).await;
    }
    let bytes = guarded(Box::pin(response.bytes_stream()), idle, deadline, total);
    let mut events = Box::pin(bytes.eventsource());
    let mut parser: Box<dyn StreamParser> = match &inner.dialect {
        Dialect::Anthropic(_) => Box::new(anthropic::Parser::default()),
        Dialect::OpenAi(_) => Box::new(openai::Parser::default()),
    };
    let mut emit = |e: StreamEvent| {
        let _ = tx.send(e);
    };
    loop {
        match events.next().await {
            None => return parser.finish(false, &mut emit),
            Some(Ok(event)) => {
                if parser.event(&event.event, &event.data, &mut emit)? {
                    // Stop reading at once: dropping the body closes the connection.
                    return parser.finish(true, &mut emit);
                }
            }
            Some(Err(EventStreamError::Transport(e))) => {
                return Err(match e {
                    BodyError::Idle(after) => FailureKind::IdleTimeout { after },
                    BodyError::Deadline(after) => FailureKind::Deadline { after },
                    BodyError::Transport(detail) => FailureKind::Disconnected { detail },
                });
            }
            Some(Err(EventStreamError::Utf8(e))) => {
                return Err(FailureKind::MalformedChunk {
                    detail: format!("not UTF-8: {e}"),
                });
            }
            Some(Err(EventStreamError::Parser(e))) => {
                return Err(FailureKind::MalformedChunk {
                    detail: format!("bad SSE: {e}"),
                });
            }
        }
    }
}

/// The body's byte stream, failing when no bytes come for `idle` or `deadline` passes.
fn guarded(
    inner: std::pin::Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>,
    idle: Duration,
    deadline: Instant,
    total: Duration,
) -> impl Stream<Item = Result<Bytes, BodyError>> + Send {
    futures_util::stream::unfold(Some(inner), move |state| async move {
        let mut inner = state?;
        let now = Instant::now();
        let left = deadline.saturating_duration_since(now);
        match tokio::time::timeout(idle.min(left), inner.next()).await {
            Err(_) => {
                let err = if idle < left {
                    BodyError::Idle(idle)
                } else {
                    BodyError::Deadline(total)
                };
                Some((Err(err), None))
            }
            Ok(None) => None,
            Ok(Some(Ok(bytes))) => Some((Ok(bytes), Some(inner))),
            Ok(Some(Err(e))) => Some((Err(BodyError::Transport(error_chain(&e))), None)),
        }
    })
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.trim_start().starts_with("application/json"))
}

/// A whole (non-streamed) JSON answer, read within the deadline and parsed like the stream.
async fn json_response(
    dialect: &Dialect,
    response: reqwest::Response,
    deadline: Instant,
    total: Duration,
    tx: &mpsc::UnboundedSender<StreamEvent>,
) -> Result<ModelResponse, FailureKind> {
    let bytes = match tokio::time::timeout_at(deadline, response.bytes()).await {
        Err(_) => return Err(FailureKind::Deadline { after: total }),
        Ok(Err(e)) => {
            return Err(FailureKind::Disconnected {
                detail: error_chain(&e),
            });
        }
        Ok(Ok(b)) => b,
    };
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| FailureKind::MalformedChunk {
        detail: format!(
            "JSON body: {e}: {}",
            truncate(&String::from_utf8_lossy(&bytes), 200)
        ),
    })?;
    let mut emit = |e: StreamEvent| {
        let _ = tx.send(e);
    };
    match dialect {
        Dialect::Anthropic(_) => anthropic::from_message(&value, &mut emit),
        Dialect::OpenAi(_) => openai::from_completion(&value, &mut emit),
    }
}

fn send_failure(e: &reqwest::Error) -> FailureKind {
    let detail = error_chain(e);
    // The client sets no overall timeout of its own, so a timeout here is the connect timeout.
    if e.is_timeout() {
        FailureKind::ConnectTimeout { detail }
    } else {
        FailureKind::Connect { detail }
    }
}

/// An HTTP error answer: the API's error shape, `request-id`, retry headers.
async fn http_failure(response: reqwest::Response, deadline: Instant) -> FailureKind {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let request_id = header("request-id").or_else(|| header("x-request-id"));
    let should_retry = match header("x-should-retry").as_deref() {
        Some("true") => Some(true),
        Some("false") => Some(false),
        _ => None,
    };
    let retry_after = retry_after(&headers, SystemTime::now());
    // The body is small; bound the wait by the attempt's deadline.
    let text = match tokio::time::timeout_at(deadline, response.bytes()).await {
        Ok(Ok(b)) => String::from_utf8_lossy(&b).into_owned(),
        _ => String::new(),
    };
    let (error_type, message) = match serde_json::from_str::<Value>(&text) {
        Ok(v) => {
            let err = v.get("error").unwrap_or(&Value::Null);
            let ty = err
                .get("type")
                .and_then(Value::as_str)
                .or_else(|| err.get("code").and_then(Value::as_str))
                .unwrap_or("error");
            let msg = err
                .get("message")
                .and_then(Value::as_str)
                .or_else(|| err.as_str())
                .map(str::to_owned)
                .unwrap_or_else(|| truncate(&text, 500));
            (ty.to_owned(), msg)
        }
        Err(_) => ("error".to_owned(), truncate(&text, 500)),
    };
    FailureKind::Http {
        status,
        error_type,
        message,
        request_id,
        retry_after,
        should_retry,
    }
}

/// An error and its sources, joined.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
