//! Helpers shared by the test modules.

use muster_fake_llm::{FakeLlm, FakeLlmConfig, FakeLlmHandle, ScriptEntry};
use serde_json::{Value, json};
use std::future::Future;
use std::time::Duration;

/// A failure guard: no test waits longer than this for anything.
pub const GUARD: Duration = Duration::from_secs(20);

pub async fn guard<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(GUARD, f)
        .await
        .expect("timed out: the fake server did not answer")
}

pub async fn start(script: Vec<ScriptEntry>) -> FakeLlmHandle {
    FakeLlm::start(script).await.expect("start fake server")
}

pub async fn start_with(config: FakeLlmConfig, script: Vec<ScriptEntry>) -> FakeLlmHandle {
    FakeLlm::start_with(config, script)
        .await
        .expect("start fake server")
}

pub fn entries(v: Value) -> Vec<ScriptEntry> {
    serde_json::from_value(v).expect("script entries")
}

pub fn client() -> reqwest::Client {
    // Only needed when features unify with muster-agents' `rustls-no-provider`; harmless alone.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client")
}

pub fn anthropic_body(stream: bool) -> Value {
    json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 4096,
        "stream": stream,
        "messages": [{"role": "user", "content": "List files"}],
    })
}

pub fn openai_body(stream: bool) -> Value {
    json!({
        "model": "gpt-4.1",
        "stream": stream,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "List files"}],
    })
}

/// A request as muster sends it.
pub struct Req<'a> {
    pub agent: Option<&'a str>,
    pub turn: Option<u64>,
    pub purpose: Option<&'a str>,
    pub body: Value,
}

impl<'a> Req<'a> {
    pub fn new(agent: &'a str, turn: u64, body: Value) -> Self {
        Req {
            agent: Some(agent),
            turn: Some(turn),
            purpose: None,
            body,
        }
    }

    fn muster_headers(&self, mut rb: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        rb = rb.header("x-muster-run-id", "run-1");
        if let Some(a) = self.agent {
            rb = rb.header("x-muster-agent-id", a);
        }
        if let Some(t) = self.turn {
            rb = rb.header("x-muster-turn", t.to_string());
        }
        if let Some(p) = self.purpose {
            rb = rb.header("x-muster-purpose", p);
        }
        rb
    }
}

pub async fn post_anthropic(fake: &FakeLlmHandle, req: &Req<'_>) -> reqwest::Response {
    let rb = client()
        .post(format!("{}/v1/messages", fake.base_url()))
        .header("x-api-key", "test-key")
        .header("anthropic-version", "2023-06-01")
        .json(&req.body);
    guard(req.muster_headers(rb).send()).await.expect("send")
}

pub async fn post_openai(fake: &FakeLlmHandle, req: &Req<'_>) -> reqwest::Response {
    let rb = client()
        .post(format!("{}/chat/completions", fake.openai_base_url()))
        .header("authorization", "Bearer test-key")
        .json(&req.body);
    guard(req.muster_headers(rb).send()).await.expect("send")
}

/// One parsed SSE event.
#[derive(Debug, Clone, PartialEq)]
pub struct Sse {
    pub event: Option<String>,
    pub data: String,
}

impl Sse {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).expect("JSON data line")
    }
}

/// Parses an SSE text (LF or CRLF); comments are skipped.
pub fn parse_sse(text: &str) -> Vec<Sse> {
    let text = text.replace("\r\n", "\n");
    text.split("\n\n")
        .filter(|b| !b.trim().is_empty())
        .filter_map(|block| {
            let mut event = None;
            let mut data = Vec::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    event = Some(v.to_owned());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data.push(v.to_owned());
                }
            }
            (event.is_some() || !data.is_empty()).then(|| Sse {
                event,
                data: data.join("\n"),
            })
        })
        .collect()
}

pub async fn sse(resp: reqwest::Response) -> Vec<Sse> {
    let text = guard(resp.text()).await.expect("body");
    parse_sse(&text)
}

pub async fn json_of(resp: reqwest::Response) -> Value {
    guard(resp.json::<Value>()).await.expect("JSON body")
}

pub fn names(events: &[Sse]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e.event.as_deref().unwrap_or("data"))
        .collect()
}

/// A response read from a raw socket, with the HTTP/1.1 chunk framing kept.
#[derive(Debug)]
pub struct Raw {
    pub status: u16,
    pub head: String,
    /// The chunks of a chunked body, as framed by the server.
    pub chunks: Vec<Vec<u8>>,
    /// True when the terminating zero-size chunk arrived (a clean end).
    pub complete: bool,
}

impl Raw {
    pub fn body(&self) -> Vec<u8> {
        self.chunks.concat()
    }

    pub fn text(&self) -> String {
        String::from_utf8(self.body()).expect("UTF-8 body")
    }
}

/// Sends one request on a fresh connection (`Connection: close`) and reads until EOF or reset.
pub async fn raw_post(
    addr: std::net::SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> Raw {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = body.to_string();
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(&body);
    let mut sock = guard(tokio::net::TcpStream::connect(addr)).await.unwrap();
    sock.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    loop {
        match guard(sock.read(&mut tmp)).await {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    }
    parse_raw(&buf)
}

fn parse_raw(buf: &[u8]) -> Raw {
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("response head");
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let mut rest = &buf[split + 4..];
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    if !chunked {
        return Raw {
            status,
            head,
            chunks: vec![rest.to_vec()],
            complete: true,
        };
    }
    let mut chunks = Vec::new();
    let mut complete = false;
    while let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(std::str::from_utf8(&rest[..line_end]).unwrap().trim(), 16)
                .unwrap();
        rest = &rest[line_end + 2..];
        if size == 0 {
            complete = true;
            break;
        }
        if rest.len() < size + 2 {
            chunks.push(rest.to_vec());
            break;
        }
        chunks.push(rest[..size].to_vec());
        rest = &rest[size + 2..];
    }
    Raw {
        status,
        head,
        chunks,
        complete,
    }
}

pub const ANTHROPIC_HEADERS: [(&str, &str); 4] = [
    ("x-api-key", "k"),
    ("anthropic-version", "2023-06-01"),
    ("x-muster-agent-id", "a"),
    ("x-muster-turn", "1"),
];

pub const OPENAI_HEADERS: [(&str, &str); 3] = [
    ("authorization", "Bearer k"),
    ("x-muster-agent-id", "a"),
    ("x-muster-turn", "1"),
];
