//! `muster batch --output text|json|stream-json`: what stdout carries for each run.
//!
//! - `stream-json`: every event of every run as its child process prints it (so only after
//!   the commit it reports), each tagged with the task's `id` beside its `run_id`; runs of
//!   distinct workspaces interleave line by line. A task that printed no `run_finished` (it
//!   finished in an earlier batch, could not start, or was killed) gets one built from its
//!   result line.
//! - `json`: one `run_finished` event per task, tagged with its `id`, as each task ends.
//! - `text`: one line per task for a person: id, run, status, exit code, and the result, the
//!   error or the request awaiting a decision.
//!
//! Each line is written whole under stdout's lock, so concurrent runs never mix within a line.

use std::io::Write as _;

use serde_json::{Map, Value, json};

use super::results::ResultLine;
use crate::launch::OutputFormat;
use crate::stream_json::now_ms;

/// Stdout of a batch.
pub struct BatchOutput {
    format: Option<OutputFormat>,
}

impl BatchOutput {
    /// `None`: stdout carries nothing of the runs (the result lines, when they go there, are
    /// written by [`super::results::Results`]).
    pub fn new(format: Option<OutputFormat>) -> BatchOutput {
        BatchOutput { format }
    }

    /// One event of task `id`'s run, as its child printed it.
    pub fn event(&self, id: &str, event: &Value) {
        if self.format.is_some_and(OutputFormat::is_stream_json) {
            print_line(&tagged(id, event).to_string());
        }
    }

    /// Task `line.id` ended; `event` is the `run_finished` its child printed, if any.
    pub fn finished(&self, line: &ResultLine, event: Option<&Value>) {
        match self.format {
            None => {}
            // The child's own run_finished went out with its other events.
            Some(OutputFormat::StreamJson { .. }) if event.is_some() => {}
            Some(OutputFormat::StreamJson { .. }) => print_line(&finished_event(line).to_string()),
            Some(OutputFormat::Json) => {
                let event = match event {
                    Some(event) => tagged(&line.id, event),
                    None => finished_event(line),
                };
                print_line(&event.to_string());
            }
            Some(OutputFormat::Text) => print_line(&text_line(line)),
        }
    }
}

fn print_line(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{text}");
    let _ = stdout.flush();
}

/// `event` with the task's `id` (never replacing a field of the event's own).
fn tagged(id: &str, event: &Value) -> Value {
    let mut event = event.clone();
    if let Value::Object(fields) = &mut event {
        fields
            .entry("id")
            .or_insert_with(|| Value::String(id.to_owned()));
    }
    event
}

/// A `run_finished` event from a result line, for a task whose run printed none here.
pub fn finished_event(line: &ResultLine) -> Value {
    let mut event = json!({
        "v": 1,
        "type": "run_finished",
        "ts": now_ms(),
        "run_id": line.run_id,
        "id": line.id,
        "status": line.status,
        "exit_code": line.exit_code,
    });
    if let Value::Object(fields) = &mut event {
        for (key, value) in &line.rest {
            fields.entry(key.clone()).or_insert_with(|| value.clone());
        }
    }
    event
}

/// `a (run r-1): completed, exit 0: the result` — the detail's further lines indented.
pub fn text_line(line: &ResultLine) -> String {
    let worker = line.rest.get("worker").and_then(Value::as_str);
    let run = match (&line.run_id, worker) {
        (Some(run_id), Some(worker)) => format!(" (run {run_id} on worker {worker})"),
        (Some(run_id), None) => format!(" (run {run_id})"),
        (None, Some(worker)) => format!(" (on worker {worker})"),
        (None, None) => String::new(),
    };
    let mut text = format!("{}{run}: {}, exit {}", line.id, line.status, line.exit_code);
    if let Some(detail) = detail(&line.rest) {
        text.push_str(": ");
        text.push_str(&detail.trim().replace('\n', "\n    "));
    }
    text
}

fn detail(rest: &Map<String, Value>) -> Option<String> {
    let text = |key: &str| rest.get(key).and_then(Value::as_str).map(str::to_owned);
    if let Some(request_id) = text("request_id") {
        return Some(match text("plan_file") {
            Some(plan_file) => format!("awaits a decision on {request_id} (plan {plan_file})"),
            None => format!("awaits a decision on {request_id}"),
        });
    }
    text("result")
        .or_else(|| text("error"))
        .or_else(|| text("reason"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn line(id: &str, run_id: Option<&str>, status: &str, code: u8, rest: Value) -> ResultLine {
        ResultLine {
            id: id.into(),
            run_id: run_id.map(Into::into),
            status: status.into(),
            exit_code: code,
            rest: rest.as_object().cloned().unwrap_or_default(),
        }
    }

    #[test]
    fn text_lines_table() {
        let cases = [
            (
                line(
                    "a",
                    Some("r-1"),
                    "completed",
                    0,
                    json!({"result": "All done."}),
                ),
                "a (run r-1): completed, exit 0: All done.",
            ),
            (
                line(
                    "b",
                    Some("r-2"),
                    "completed",
                    0,
                    json!({"result": "Two\nlines\n"}),
                ),
                "b (run r-2): completed, exit 0: Two\n    lines",
            ),
            (
                line("c", None, "error", 2, json!({"error": "bad team file"})),
                "c: error, exit 2: bad team file",
            ),
            (
                line(
                    "d",
                    Some("r-4"),
                    "awaiting_decision",
                    5,
                    json!({"request_id": "plan-main-1", "plan_file": "/p/x.md"}),
                ),
                "d (run r-4): awaiting_decision, exit 5: awaits a decision on plan-main-1 (plan /p/x.md)",
            ),
            (
                line(
                    "e",
                    Some("r-5"),
                    "budget",
                    3,
                    json!({"reason": "turns", "budget": "b"}),
                ),
                "e (run r-5): budget, exit 3: turns",
            ),
            (
                line("f", Some("r-6"), "interrupted", 130, json!({})),
                "f (run r-6): interrupted, exit 130",
            ),
            (
                line(
                    "g",
                    Some("r-7"),
                    "completed",
                    0,
                    json!({"result": "ok", "worker": "w2", "attempt": 2}),
                ),
                "g (run r-7 on worker w2): completed, exit 0: ok",
            ),
            (
                line(
                    "h",
                    None,
                    "error",
                    1,
                    json!({"error": "cannot clone x", "worker": "w1"}),
                ),
                "h (on worker w1): error, exit 1: cannot clone x",
            ),
        ];
        for (line, want) in cases {
            assert_eq!(text_line(&line), want);
        }
    }

    #[test]
    fn a_built_run_finished_event_carries_the_result_line() {
        let event = finished_event(&line(
            "a",
            Some("r-1"),
            "completed",
            0,
            json!({"result": "ok", "status": "not this"}),
        ));
        assert_eq!(event["type"], "run_finished");
        assert_eq!(event["run_id"], "r-1");
        assert_eq!(event["id"], "a");
        assert_eq!(event["status"], "completed", "the line's own fields win");
        assert_eq!(event["exit_code"], 0);
        assert_eq!(event["result"], "ok");
        assert_eq!(
            tagged("x", &json!({"id": "own", "run_id": "r"}))["id"],
            "own"
        );
        assert_eq!(tagged("x", &json!({"run_id": "r"}))["id"], "x");
    }
}
