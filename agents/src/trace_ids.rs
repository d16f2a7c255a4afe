//! A run's trace identity: its trace id and the span id of everything in it, derived from the
//! store's keys (run id, agent id, turn index, `tool_use_id`, request id) so that a resume, a
//! teammate on a worker and a re-sent request continue the same trace with the same ids (see
//! `docs/traces.md`). Pure: no exporter lives here; the `Bash` tool reads
//! [`RunTrace::traceparent`] for its commands' `TRACEPARENT`, the binary's exporter the rest.

use std::fmt;

/// The name of the W3C trace-context variable, read at a run's start and given to commands.
pub const TRACEPARENT: &str = "TRACEPARENT";

/// A W3C `traceparent` (version `00`): the span a run hangs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub sampled: bool,
}

/// A `traceparent` that does not read.
#[derive(Debug, thiserror::Error)]
#[error(
    "{TRACEPARENT} `{value}` is not a W3C traceparent (`00-<32 hex>-<16 hex>-<2 hex>`, ids not all zeros): {why}"
)]
pub struct TraceParentError {
    value: String,
    why: &'static str,
}

impl TraceParent {
    /// Reads `00-<trace id>-<span id>-<flags>`.
    pub fn parse(value: &str) -> Result<TraceParent, TraceParentError> {
        let fail = |why| TraceParentError {
            value: value.chars().take(80).collect(),
            why,
        };
        let parts: Vec<&str> = value.trim().split('-').collect();
        let [version, trace, span, flags] = parts.as_slice() else {
            return Err(fail("expected four fields separated by `-`"));
        };
        if *version != "00" {
            return Err(fail("only version 00 is read"));
        }
        let trace_id: [u8; 16] = hex_bytes(trace).ok_or_else(|| fail("bad trace id"))?;
        let span_id: [u8; 8] = hex_bytes(span).ok_or_else(|| fail("bad parent id"))?;
        let [flags]: [u8; 1] = hex_bytes(flags).ok_or_else(|| fail("bad flags"))?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return Err(fail("an all-zero id is invalid"));
        }
        Ok(TraceParent {
            trace_id,
            span_id,
            sampled: flags & 1 == 1,
        })
    }
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{}-{}-{:02x}",
            hex(&self.trace_id),
            hex(&self.span_id),
            u8::from(self.sampled)
        )
    }
}

/// A run's trace: its id and the parent of its root span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunTrace {
    run_id: String,
    trace_id: [u8; 16],
    /// The `TRACEPARENT` the run was started under, stored with it.
    parent: Option<TraceParent>,
}

/// What a span is, with the store keys that name it.
#[derive(Debug, Clone, Copy)]
pub enum SpanKey<'a> {
    /// The run (`invoke_workflow`).
    Run,
    /// An agent (`invoke_agent`).
    Agent(&'a str),
    /// An agent's model request `turn` (`chat`).
    Chat(&'a str, u64),
    /// An agent's tool call (`execute_tool`).
    Tool(&'a str, &'a str),
    /// A plan, permission, question or merge request (by its request id).
    Decision(&'a str),
    /// The attempt at an agent's model request `turn` that a kill cut before its response
    /// was committed (`chat`, marked interrupted; the request sent again has `Chat`).
    CutChat(&'a str, u64),
    /// The attempt at an agent's tool call that a kill cut before its result was committed
    /// (`execute_tool`, marked interrupted; the call's committed result has `Tool`).
    CutTool(&'a str, &'a str),
}

impl RunTrace {
    /// The trace of run `run_id`: the parent's trace when it was started under one, else a
    /// trace id of its own derived from the run id.
    pub fn new(run_id: &str, parent: Option<TraceParent>) -> RunTrace {
        let trace_id = match parent {
            Some(parent) => parent.trace_id,
            None => {
                let digest = digest(&["muster-trace", run_id]);
                let mut id = [0; 16];
                id.copy_from_slice(&digest.as_ref()[..16]);
                non_zero(&mut id);
                id
            }
        };
        RunTrace {
            run_id: run_id.to_owned(),
            trace_id,
            parent,
        }
    }

    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    pub fn trace_id(&self) -> [u8; 16] {
        self.trace_id
    }

    /// The span the run's root hangs under (from `TRACEPARENT` at its start).
    pub fn parent(&self) -> Option<TraceParent> {
        self.parent
    }

    /// The span id of `key`: the same in every process and on every resume.
    pub fn span_id(&self, key: SpanKey<'_>) -> [u8; 8] {
        let run = self.run_id.as_str();
        let turn;
        let parts: Vec<&str> = match key {
            SpanKey::Run => vec!["run", run],
            SpanKey::Agent(agent) => vec!["agent", run, agent],
            SpanKey::Chat(agent, n) => {
                turn = n.to_string();
                vec!["chat", run, agent, &turn]
            }
            SpanKey::Tool(agent, tool_use_id) => vec!["tool", run, agent, tool_use_id],
            SpanKey::Decision(request_id) => vec!["decision", run, request_id],
            SpanKey::CutChat(agent, n) => {
                turn = n.to_string();
                vec!["cut-chat", run, agent, &turn]
            }
            SpanKey::CutTool(agent, tool_use_id) => vec!["cut-tool", run, agent, tool_use_id],
        };
        let digest = digest(&parts);
        let mut id = [0; 8];
        id.copy_from_slice(&digest.as_ref()[..8]);
        non_zero(&mut id);
        id
    }

    /// The `traceparent` of span `key` (sampled), as a command's `TRACEPARENT`.
    pub fn traceparent(&self, key: SpanKey<'_>) -> String {
        TraceParent {
            trace_id: self.trace_id,
            span_id: self.span_id(key),
            sampled: true,
        }
        .to_string()
    }
}

/// SHA-256 of the parts, each followed by a NUL (no part contains one: ids are names).
fn digest(parts: &[&str]) -> ring::digest::Digest {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    for part in parts {
        context.update(part.as_bytes());
        context.update(&[0]);
    }
    context.finish()
}

/// An all-zero id is invalid in W3C trace context; a digest that gives one is nudged.
fn non_zero(id: &mut [u8]) {
    if id.iter().all(|byte| *byte == 0)
        && let Some(last) = id.last_mut()
    {
        *last = 1;
    }
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn hex_bytes<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != 2 * N || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut bytes = [0; N];
    for (n, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * n..2 * n + 2)?, 16).ok()?;
    }
    Some(bytes)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test assertions fail loudly")]

    use super::*;

    #[test]
    fn traceparents_read_and_refuse_as_the_w3c_format_says() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let parent = TraceParent::parse(good).unwrap();
        assert!(parent.sampled);
        assert_eq!(parent.to_string(), good);
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        ] {
            assert!(TraceParent::parse(bad).is_err(), "{bad}");
        }
    }

    /// Ids are a function of the keys alone: equal keys give equal ids (another process, a
    /// resume), different keys different ids; a parent's trace id is kept.
    #[test]
    fn span_ids_follow_the_store_keys_and_nothing_else() {
        let a = RunTrace::new("r1", None);
        let again = RunTrace::new("r1", None);
        assert_eq!(a, again);
        assert_ne!(a.trace_id(), RunTrace::new("r2", None).trace_id());
        let keys = [
            SpanKey::Run,
            SpanKey::Agent("lead"),
            SpanKey::Agent("alice"),
            SpanKey::Chat("lead", 1),
            SpanKey::Chat("lead", 2),
            SpanKey::Chat("alice", 1),
            SpanKey::Tool("lead", "toolu_1"),
            SpanKey::Tool("alice", "toolu_1"),
            SpanKey::Decision("plan-alice-1"),
            SpanKey::CutChat("lead", 2),
            SpanKey::CutTool("lead", "toolu_1"),
        ];
        let ids: std::collections::BTreeSet<[u8; 8]> =
            keys.iter().map(|key| a.span_id(*key)).collect();
        assert_eq!(ids.len(), keys.len());
        for key in keys {
            assert_eq!(a.span_id(key), again.span_id(key));
        }
        let parent =
            TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        let under = RunTrace::new("r1", Some(parent));
        assert_eq!(under.trace_id(), parent.trace_id);
        assert_eq!(under.span_id(SpanKey::Run), a.span_id(SpanKey::Run));
        assert!(
            under
                .traceparent(SpanKey::Tool("lead", "t"))
                .starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-")
        );
    }
}
