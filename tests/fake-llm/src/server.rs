//! The axum router: API endpoints, control plane, and the response emitter with faults.

use crate::gates::Gates;
use crate::render::{self, Event, Prepared};
use crate::script::{Block, Fault, HttpError, ScriptEntry, StreamOptions};
use crate::state::{self, MatchKey, RecordedRequest, State};
use crate::validate::{self, ApiError};
use crate::{FakeLlmConfig, KeyCheck};
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State as AxState};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use axum::routing::{get, post};
use bytes::Bytes;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::mpsc;

pub(crate) struct Shared {
    pub state: Mutex<State>,
    pub config: FakeLlmConfig,
    pub gates: Gates,
}

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

type Ctx = AxState<Arc<Shared>>;

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/messages", post(anthropic_messages))
        .route("/v1/messages/count_tokens", post(count_tokens))
        .route("/v1/chat/completions", post(openai_chat))
        .route("/v1/models", get(models))
        .route("/props", get(props))
        .route("/_fake/script", post(control_script))
        .route("/_fake/requests", get(control_requests))
        .route("/_fake/reset", post(control_reset))
        .route("/_fake/health", get(control_health))
        .route("/_fake/verify", get(control_verify))
        .route("/_fake/gates/{name}/open", post(control_open_gate))
        .fallback(not_found)
        .with_state(shared)
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Api {
    Anthropic,
    OpenAi,
}

// ---------------------------------------------------------------- responses

fn json_response(status: u16, body: &Value, headers: &[(&str, String)]) -> Response {
    let mut resp = Response::new(Body::from(body.to_string()));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    add_headers(h, headers);
    resp
}

fn add_headers(h: &mut HeaderMap, headers: &[(&str, String)]) {
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            axum::http::HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            h.insert(name, value);
        }
    }
}

fn error_body(api: Api, e: &ApiError, request_id: &str) -> Value {
    match api {
        Api::Anthropic => json!({
            "type": "error",
            "error": {"type": e.error_type, "message": e.message},
            "request_id": request_id,
        }),
        Api::OpenAi => json!({
            "error": {"message": e.message, "type": e.error_type, "param": e.param, "code": e.code},
        }),
    }
}

fn id_headers(request_id: &str) -> Vec<(&'static str, String)> {
    vec![
        ("request-id", request_id.to_owned()),
        ("x-request-id", request_id.to_owned()),
    ]
}

fn error_response(api: Api, e: &ApiError, request_id: &str) -> Response {
    json_response(
        e.status,
        &error_body(api, e, request_id),
        &id_headers(request_id),
    )
}

/// The default error type and message of a scripted status.
fn default_error(api: Api, status: u16) -> (&'static str, &'static str, Option<&'static str>) {
    match api {
        Api::Anthropic => match status {
            401 => ("authentication_error", "invalid x-api-key", None),
            402 => ("billing_error", "Your credit balance is too low.", None),
            403 => (
                "permission_error",
                "Your API key does not have permission to use the specified resource.",
                None,
            ),
            404 => (
                "not_found_error",
                "The requested resource could not be found.",
                None,
            ),
            408 | 504 => ("timeout_error", "Request timed out", None),
            413 => (
                "request_too_large",
                "Request exceeds the maximum allowed number of bytes.",
                None,
            ),
            429 => (
                "rate_limit_error",
                "Number of request tokens has exceeded your per-minute rate limit",
                None,
            ),
            529 => ("overloaded_error", "Overloaded", None),
            s if s >= 500 => ("api_error", "Internal server error", None),
            _ => ("invalid_request_error", "Invalid request", None),
        },
        Api::OpenAi => match status {
            401 => (
                "invalid_request_error",
                "Incorrect API key provided.",
                Some("invalid_api_key"),
            ),
            404 => (
                "invalid_request_error",
                "The model does not exist or you do not have access to it.",
                Some("model_not_found"),
            ),
            429 => (
                "requests",
                "Rate limit reached for requests",
                Some("rate_limit_exceeded"),
            ),
            s if s >= 500 => (
                "server_error",
                "The server had an error while processing your request. Sorry about that!",
                None,
            ),
            _ => ("invalid_request_error", "Invalid request", None),
        },
    }
}

fn scripted_error(api: Api, spec: &HttpError, request_id: &str) -> (Response, String) {
    let (ty, msg, code) = default_error(api, spec.status);
    let e = ApiError {
        status: spec.status,
        error_type: spec.error_type.clone().unwrap_or_else(|| ty.to_owned()),
        message: spec.message.clone().unwrap_or_else(|| msg.to_owned()),
        code: spec.code.clone().or_else(|| code.map(str::to_owned)),
        param: None,
    };
    let mut headers = id_headers(request_id);
    if let Some(v) = &spec.retry_after {
        headers.push(("retry-after", v.clone()));
    }
    if let Some(v) = spec.retry_after_ms {
        headers.push(("retry-after-ms", v.to_string()));
    }
    if let Some(v) = spec.x_should_retry {
        headers.push(("x-should-retry", v.to_string()));
    }
    let mut resp = json_response(e.status, &error_body(api, &e, request_id), &headers);
    let h = resp.headers_mut();
    for (name, value) in &spec.headers {
        add_headers(h, &[(name.as_str(), value.clone())]);
    }
    (resp, e.message)
}

// ---------------------------------------------------------------- request intake

struct Intake {
    method: String,
    path: String,
    headers: HeaderMap,
    raw: Bytes,
    recorded_headers: BTreeMap<String, String>,
    body_value: Value,
    agent: Option<String>,
    turn: Option<u64>,
    run_id: Option<String>,
    purpose: Option<String>,
}

fn header_string(h: &HeaderMap, name: &str) -> Option<String> {
    h.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

async fn intake(req: Request) -> Intake {
    let (parts, body) = req.into_parts();
    // The size limit is checked after reading, so that the answer is a real 413.
    let raw = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let mut recorded_headers = BTreeMap::new();
    for (name, value) in &parts.headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        recorded_headers
            .entry(name.as_str().to_owned())
            .and_modify(|v: &mut String| {
                v.push_str(", ");
                v.push_str(&value);
            })
            .or_insert(value);
    }
    let body_value = if raw.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&raw)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&raw).into_owned()))
    };
    let h = &parts.headers;
    Intake {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        agent: header_string(h, "x-muster-agent-id"),
        turn: header_string(h, "x-muster-turn").and_then(|t| t.trim().parse().ok()),
        run_id: header_string(h, "x-muster-run-id"),
        purpose: header_string(h, "x-muster-purpose"),
        headers: parts.headers,
        raw,
        recorded_headers,
        body_value,
    }
}

impl Intake {
    fn record(&self, attempt: u32) -> RecordedRequest {
        RecordedRequest {
            seq: 0,
            method: self.method.clone(),
            path: self.path.clone(),
            headers: self.recorded_headers.clone(),
            body: self.body_value.clone(),
            agent: self.agent.clone(),
            turn: self.turn,
            attempt,
            run_id: self.run_id.clone(),
            purpose: self.purpose.clone(),
            entry: None,
            status: 200,
            error: None,
            unmatched: false,
            usage: None,
        }
    }

    fn check_size(&self, config: &FakeLlmConfig) -> Result<(), ApiError> {
        if self.raw.len() > config.max_body_bytes {
            return Err(ApiError::new(
                413,
                "request_too_large",
                "Request exceeds the maximum allowed number of bytes.",
            ));
        }
        Ok(())
    }
}

fn push_record(st: &mut State, mut rec: RecordedRequest) {
    rec.seq = st.requests.len() as u64 + 1;
    st.requests.push(rec);
}

fn push_metadata_record(st: &mut State, mut rec: RecordedRequest) {
    rec.seq = st.metadata_requests.len() as u64 + 1;
    st.metadata_requests.push(rec);
}

// ---------------------------------------------------------------- model endpoints

async fn anthropic_messages(AxState(s): Ctx, req: Request) -> Response {
    model_request(s, Api::Anthropic, req).await
}

async fn openai_chat(AxState(s): Ctx, req: Request) -> Response {
    model_request(s, Api::OpenAi, req).await
}

fn validate_model(api: Api, input: &Intake, config: &FakeLlmConfig) -> Result<Value, ApiError> {
    input.check_size(config)?;
    match api {
        Api::Anthropic => {
            validate::anthropic_auth(&input.headers, &config.keys)?;
            validate::anthropic_version(&input.headers)?;
            let body = validate::json_body(&input.raw)?;
            validate::anthropic_body(&body, false)?;
            Ok(body)
        }
        Api::OpenAi => {
            validate::openai_auth(&input.headers, &config.keys)?;
            let body = validate::json_body(&input.raw)?;
            validate::openai_body(&body)?;
            Ok(body)
        }
    }
}

async fn model_request(s: Arc<Shared>, api: Api, req: Request) -> Response {
    let input = intake(req).await;
    let validated = validate_model(api, &input, &s.config);
    let mails: Vec<state::Mail> = match &validated {
        Ok(body) => state::newest_user_texts(body)
            .iter()
            .flat_map(|t| state::parse_mail_tags(t))
            .collect(),
        Err(_) => Vec::new(),
    };

    // Everything that needs the lock happens here; the answer is sent after.
    let (plan, request_id) = {
        let mut st = s.lock();
        let attempt = st.next_attempt(&input.agent, input.turn);
        let request_id = st.next_request_id();
        let mut rec = input.record(attempt);
        let body = match validated {
            Ok(body) => body,
            Err(e) => {
                rec.status = e.status;
                rec.error = Some(e.message.clone());
                push_record(&mut st, rec);
                return error_response(api, &e, &request_id);
            }
        };
        let key = MatchKey {
            agent: input.agent.as_deref(),
            turn: input.turn,
            attempt,
            purpose: input.purpose.as_deref(),
            mails: &mails,
        };
        let Some(idx) = st.select(&key) else {
            let fmt_opt = |o: Option<String>| o.unwrap_or_else(|| "<none>".into());
            let message = format!(
                "fake-llm: no script entry for agent {} turn {} attempt {attempt}",
                fmt_opt(input.agent.clone()),
                fmt_opt(input.turn.map(|t| t.to_string())),
            );
            let e = ApiError::new(
                500,
                if api == Api::Anthropic {
                    "api_error"
                } else {
                    "server_error"
                },
                message.clone(),
            );
            rec.status = 500;
            rec.error = Some(message);
            rec.unmatched = true;
            push_record(&mut st, rec);
            let mut headers = id_headers(&request_id);
            headers.push(("x-should-retry", "false".into()));
            return json_response(500, &error_body(api, &e, &request_id), &headers);
        };
        if let Some(used) = st.used.get_mut(idx) {
            *used += 1;
        }
        rec.entry = Some(idx);
        let entry = st.entries.get(idx).cloned().unwrap_or_default();
        let plan = build_plan(&mut st, api, &entry, &body, &request_id);
        rec.status = plan.status;
        rec.error = plan.error.clone();
        rec.usage = plan.usage;
        push_record(&mut st, rec);
        (plan, request_id)
    };
    let _ = request_id;
    deliver(api, plan, &s.gates).await
}

/// What to send: either a finished response or a body of pieces with faults.
struct Plan {
    status: u16,
    error: Option<String>,
    /// The usage the reply reports.
    usage: Option<crate::state::ReturnedUsage>,
    first_byte_delay_ms: u64,
    /// The gate to pass before the first byte.
    hold: Option<String>,
    kind: PlanKind,
}

enum PlanKind {
    Ready(Response),
    Body {
        headers: Vec<(&'static str, String)>,
        content_type: &'static str,
        streaming: bool,
        items: Vec<Bytes>,
        fault: Fault,
        opts: StreamOptions,
    },
}

fn build_plan(
    st: &mut State,
    api: Api,
    entry: &ScriptEntry,
    body: &Value,
    request_id: &str,
) -> Plan {
    let first_byte_delay_ms = entry.fault.first_byte_delay_ms;
    if let Some(spec) = &entry.error {
        let (resp, message) = scripted_error(api, spec, request_id);
        return Plan {
            status: spec.status,
            error: Some(message),
            usage: None,
            first_byte_delay_ms,
            hold: entry.fault.hold.clone(),
            kind: PlanKind::Ready(resp),
        };
    }
    let reply = entry.reply.clone().unwrap_or_default();
    let n = st.next_msg_id();
    let msg_id = match api {
        Api::Anthropic => format!("msg_fake_{n:04}"),
        Api::OpenAi => format!("chatcmpl-fake-{n:04}"),
    };
    let tool_ids: Vec<String> = reply
        .content
        .iter()
        .filter_map(|b| match b {
            Block::ToolUse { id, .. } => Some(id.clone().unwrap_or_else(|| match api {
                Api::Anthropic => st.next_tool_id(),
                Api::OpenAi => st.next_call_id(),
            })),
            _ => None,
        })
        .collect();
    let model = body.get("model").and_then(Value::as_str).unwrap_or("");
    let mut p = Prepared::new(
        &reply,
        msg_id,
        tool_ids,
        model,
        state::input_chars(body),
        entry.stream.chunk_chars,
    );
    p.cut_last_block = entry.fault.cut_last_block;
    let streaming = body.get("stream").and_then(Value::as_bool) == Some(true);
    let opts = &entry.stream;
    let items: Vec<Bytes> = if streaming {
        let events = match api {
            Api::Anthropic => render::anthropic_events(&p, !opts.no_ping),
            Api::OpenAi => {
                let include_usage = body
                    .pointer("/stream_options/include_usage")
                    .and_then(Value::as_bool)
                    == Some(true);
                render::openai_events(&p, &entry.openai, include_usage)
            }
        };
        events.iter().map(|e| format_event(e, opts)).collect()
    } else {
        let v = match api {
            Api::Anthropic => render::anthropic_message(&p),
            Api::OpenAi => render::openai_completion(&p, &entry.openai),
        };
        let text = v.to_string().into_bytes();
        let half = text.len() / 2;
        vec![
            Bytes::copy_from_slice(&text[..half]),
            Bytes::copy_from_slice(&text[half..]),
        ]
    };
    Plan {
        status: 200,
        error: None,
        usage: Some(crate::state::ReturnedUsage {
            input_tokens: p.usage.input,
            output_tokens: p.usage.output,
            cache_read_input_tokens: p.usage.cache_read,
            cache_creation_input_tokens: p.usage.cache_creation,
        }),
        first_byte_delay_ms,
        hold: entry.fault.hold.clone(),
        kind: PlanKind::Body {
            headers: id_headers(request_id),
            content_type: if streaming {
                "text/event-stream; charset=utf-8"
            } else {
                "application/json"
            },
            streaming,
            items,
            fault: entry.fault.clone(),
            opts: entry.stream.clone(),
        },
    }
}

fn format_event(e: &Event, opts: &StreamOptions) -> Bytes {
    Bytes::from(render::format_event(e, opts.crlf, opts.trailing_whitespace))
}

async fn deliver(api: Api, plan: Plan, gates: &Gates) -> Response {
    if let Some(gate) = &plan.hold {
        gates.pass(gate).await;
    }
    if plan.first_byte_delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(plan.first_byte_delay_ms)).await;
    }
    let (headers, content_type, streaming, items, fault, opts) = match plan.kind {
        PlanKind::Ready(resp) => return resp,
        PlanKind::Body {
            headers,
            content_type,
            streaming,
            items,
            fault,
            opts,
        } => (headers, content_type, streaming, items, fault, opts),
    };
    let plain = Fault {
        first_byte_delay_ms: fault.first_byte_delay_ms,
        hold: fault.hold.clone(),
        ..Fault::default()
    };
    if !streaming && fault == plain && opts.tcp_chunk_bytes == 0 {
        // A plain JSON answer, with a content-length as real servers send it.
        let body: Vec<u8> = items.concat();
        let mut resp = json_response(200, &Value::Null, &headers);
        *resp.body_mut() = Body::from(body);
        resp.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        return resp;
    }
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    let stall_gate = fault
        .stall
        .as_ref()
        .and_then(|stall| stall.gate.as_deref())
        .map(|name| gates.gate(name));
    tokio::spawn(emit(api, streaming, items, fault, opts, tx, stall_gate));
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let mut resp = Response::new(Body::from_stream(stream));
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if streaming {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    }
    add_headers(h, &headers);
    resp
}

/// Writes bytes in pieces of `n` bytes across item boundaries (0 = one write per item).
struct Chunker {
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    n: usize,
    carry: Vec<u8>,
}

impl Chunker {
    /// Returns false when the client has gone.
    async fn write(&mut self, bytes: &[u8]) -> bool {
        if self.n == 0 {
            return self.send(Bytes::copy_from_slice(bytes)).await;
        }
        self.carry.extend_from_slice(bytes);
        while self.carry.len() >= self.n {
            let piece: Vec<u8> = self.carry.drain(..self.n).collect();
            if !self.send(Bytes::from(piece)).await {
                return false;
            }
        }
        true
    }

    async fn flush(&mut self) -> bool {
        if self.carry.is_empty() {
            return true;
        }
        let piece = std::mem::take(&mut self.carry);
        self.send(Bytes::from(piece)).await
    }

    async fn send(&mut self, b: Bytes) -> bool {
        let ok = self.tx.send(Ok(b)).await.is_ok();
        // Let the connection write this piece before the next one is produced.
        tokio::task::yield_now().await;
        ok
    }

    async fn abort(&mut self) {
        let _ = self.flush().await;
        let _ = self
            .tx
            .send(Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "fake-llm: injected disconnect",
            )))
            .await;
    }
}

async fn emit(
    api: Api,
    streaming: bool,
    items: Vec<Bytes>,
    fault: Fault,
    opts: StreamOptions,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    stall_gate: Option<std::sync::Arc<crate::gates::Gate>>,
) {
    let mut out = Chunker {
        tx,
        n: opts.tcp_chunk_bytes,
        carry: Vec::new(),
    };
    let len = items.len();
    let at = |o: Option<usize>, i: usize| o.is_some_and(|n| n.min(len) == i);
    let fmt = |e: Event| format_event(&e, &opts);
    for i in 0..=len {
        if at(fault.disconnect_after_events, i) {
            out.abort().await;
            return;
        }
        if at(fault.truncate_after_events, i) {
            out.flush().await;
            return;
        }
        if streaming {
            if let Some(ev) = &fault.error_event
                && ev.after_events.min(len) == i
            {
                let ty = ev.error_type.as_deref().unwrap_or("overloaded_error");
                let msg = ev.message.as_deref().unwrap_or("Overloaded");
                let e = match api {
                    Api::Anthropic => render::anthropic_error_event(ty, msg),
                    Api::OpenAi => render::openai_error_event(ty, msg),
                };
                out.write(&fmt(e)).await;
                out.flush().await;
                return;
            }
            if at(fault.malformed_after_events, i) {
                let e = match api {
                    Api::Anthropic => render::anthropic_malformed(),
                    Api::OpenAi => render::openai_malformed(),
                };
                if !out.write(&fmt(e)).await {
                    return;
                }
            }
            if at(fault.unknown_event_after_events, i) {
                let e = match api {
                    Api::Anthropic => render::anthropic_unknown_event(),
                    Api::OpenAi => render::openai_unknown_event(),
                };
                if !out.write(&fmt(e)).await {
                    return;
                }
            }
        }
        if let Some(stall) = &fault.stall
            && stall.after_events.min(len) == i
        {
            if !out.flush().await {
                return;
            }
            if !stall_for(&mut out, api, stall, &opts).await {
                return;
            }
            if let Some(gate) = &stall_gate {
                gate.pass().await;
            }
            if stall.then_disconnect {
                out.abort().await;
                return;
            }
        }
        let Some(item) = items.get(i) else {
            break;
        };
        if !out.write(item).await {
            return;
        }
        if opts.inter_event_delay_ms > 0 {
            out.flush().await;
            tokio::time::sleep(Duration::from_millis(opts.inter_event_delay_ms)).await;
        }
    }
    out.flush().await;
}

async fn stall_for(
    out: &mut Chunker,
    api: Api,
    stall: &crate::script::Stall,
    opts: &StreamOptions,
) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(stall.ms);
    if stall.ping_every_ms == 0 {
        tokio::time::sleep_until(deadline).await;
        return true;
    }
    let every = Duration::from_millis(stall.ping_every_ms);
    loop {
        let next = tokio::time::Instant::now() + every;
        if next >= deadline {
            tokio::time::sleep_until(deadline).await;
            return true;
        }
        tokio::time::sleep_until(next).await;
        let ping = match api {
            Api::Anthropic => format_event(&render::anthropic_ping(), opts),
            Api::OpenAi => Bytes::from_static(b": ping\n\n"),
        };
        if !(out.write(&ping).await && out.flush().await) {
            return false;
        }
    }
}

// ---------------------------------------------------------------- other endpoints

async fn count_tokens(AxState(s): Ctx, req: Request) -> Response {
    let input = intake(req).await;
    let result = (|| {
        input.check_size(&s.config)?;
        validate::anthropic_auth(&input.headers, &s.config.keys)?;
        validate::anthropic_version(&input.headers)?;
        let body = validate::json_body(&input.raw)?;
        validate::anthropic_body(&body, true)?;
        Ok::<_, ApiError>(body)
    })();
    let mut st = s.lock();
    let request_id = st.next_request_id();
    let mut rec = input.record(0);
    match result {
        Ok(body) => {
            push_record(&mut st, rec);
            let n = state::tokens_for_chars(state::input_chars(&body));
            json_response(200, &json!({"input_tokens": n}), &id_headers(&request_id))
        }
        Err(e) => {
            rec.status = e.status;
            rec.error = Some(e.message.clone());
            push_record(&mut st, rec);
            error_response(Api::Anthropic, &e, &request_id)
        }
    }
}

async fn models(AxState(s): Ctx, req: Request) -> Response {
    let input = intake(req).await;
    let anthropic =
        input.headers.contains_key("x-api-key") || input.headers.contains_key("anthropic-version");
    let (api, auth) = if anthropic {
        (
            Api::Anthropic,
            validate::anthropic_auth(&input.headers, &s.config.keys),
        )
    } else {
        (
            Api::OpenAi,
            validate::openai_auth(&input.headers, &s.config.keys),
        )
    };
    let mut st = s.lock();
    let request_id = st.next_request_id();
    let mut rec = input.record(0);
    if let Err(e) = auth {
        rec.status = e.status;
        rec.error = Some(e.message.clone());
        push_metadata_record(&mut st, rec);
        return error_response(api, &e, &request_id);
    }
    push_metadata_record(&mut st, rec);
    // One list both clients can read: Anthropic's fields and OpenAI's side by side, plus the
    // configured limit fields.
    let data: Vec<Value> = s
        .config
        .models
        .iter()
        .map(|m| {
            let mut entry = json!({"id": m, "object": "model", "type": "model", "display_name": m,
                   "created": render::CREATED, "created_at": "2025-01-01T00:00:00Z",
                   "owned_by": "fake-llm"});
            if let Some(map) = entry.as_object_mut() {
                map.extend(s.config.model_fields.clone());
            }
            entry
        })
        .collect();
    let body = json!({
        "object": "list",
        "data": data,
        "has_more": false,
        "first_id": s.config.models.first(),
        "last_id": s.config.models.last(),
    });
    json_response(200, &body, &id_headers(&request_id))
}

/// llama.cpp's `GET /props` (no authentication, as llama.cpp's own), when configured.
async fn props(AxState(s): Ctx, req: Request) -> Response {
    let input = intake(req).await;
    let mut st = s.lock();
    let request_id = st.next_request_id();
    let mut rec = input.record(0);
    let response = match &s.config.props {
        Some(body) => json_response(200, body, &id_headers(&request_id)),
        None => {
            rec.status = 404;
            let e = ApiError::new(404, "not_found_error", "Not found: GET /props".to_owned());
            error_response(Api::OpenAi, &e, &request_id)
        }
    };
    push_metadata_record(&mut st, rec);
    response
}

async fn not_found(req: Request) -> Response {
    let e = ApiError::new(
        404,
        "not_found_error",
        format!("Not found: {} {}", req.method(), req.uri().path()),
    );
    error_response(Api::Anthropic, &e, "req_fake_none")
}

async fn control_script(AxState(s): Ctx, req: Request) -> Response {
    let raw = axum::body::to_bytes(req.into_body(), usize::MAX)
        .await
        .unwrap_or_default();
    match crate::script::parse_script(&String::from_utf8_lossy(&raw)) {
        Ok(entries) => {
            let n = entries.len();
            let mut st = s.lock();
            st.append(entries);
            json_response(
                200,
                &json!({"appended": n, "entries": st.entries.len()}),
                &[],
            )
        }
        Err(e) => json_response(400, &json!({"error": e.to_string()}), &[]),
    }
}

async fn control_requests(AxState(s): Ctx) -> Response {
    let st = s.lock();
    let v = serde_json::to_value(&st.requests).unwrap_or(Value::Null);
    json_response(200, &v, &[])
}

async fn control_reset(AxState(s): Ctx) -> Response {
    s.lock().reset();
    json_response(200, &json!({"status": "ok"}), &[])
}

async fn control_open_gate(
    AxState(s): Ctx,
    axum::extract::Path(name): axum::extract::Path<String>,
) -> Response {
    s.gates.open(&name);
    json_response(200, &json!({"status": "ok", "gate": name}), &[])
}

async fn control_health() -> Response {
    json_response(200, &json!({"status": "ok"}), &[])
}

async fn control_verify(AxState(s): Ctx) -> Response {
    let st = s.lock();
    let report = crate::verify_report(&st);
    let ok = report.is_none();
    let (unmatched, unused) = report.unwrap_or_default();
    json_response(
        if ok { 200 } else { 409 },
        &json!({"ok": ok, "unmatched": unmatched, "unused": unused}),
        &[],
    )
}

impl KeyCheck {
    /// Whether any key is required.
    pub fn required(&self) -> bool {
        !matches!(self, KeyCheck::None)
    }
}
