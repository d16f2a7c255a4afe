//! The `stream-json` line of a [`RunEvent`] (DESIGN.md: `{"v":1,"type","ts","run_id","agent",
//! …}`), built the same way for single runs, team runs and batches. Every event of a run is also recorded in
//! its log file (`.muster/logs/<run_id>.jsonl`), whatever `--output` prints.

use std::io::Write as _;

use muster_agents::runtime::RunEvent;
use serde_json::Value;

/// Milliseconds since the Unix epoch: the events' `ts`.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The `stream-json` line of `event` in run `run_id`, stamped now.
pub fn line(run_id: &str, event: &RunEvent) -> Value {
    event.to_line(run_id, now_ms())
}

/// Records `event` in the run's log file (an `info` line of target `muster::event`).
pub fn log(event: &Value) {
    log_rendered(event, event);
}

/// [`log`], with `event` rendered by `text` (the line already rendered, or the event itself:
/// rendered only if the log takes the line).
pub fn log_rendered(event: &Value, text: &dyn std::fmt::Display) {
    tracing::info!(
        target: "muster::event",
        kind = event["type"].as_str().unwrap_or_default(),
        agent = event["agent"].as_str().unwrap_or_default(),
        event = %text,
        "event"
    );
}

/// Prints `event` as one line on stdout, flushed (callers hold their printer's lock, so
/// lines of concurrent agents never mix).
pub fn print(event: &Value) {
    print_rendered(&event.to_string());
}

/// [`print`], with the event already rendered.
pub fn print_rendered(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{text}");
    let _ = stdout.flush();
}

/// A non-durable event (`model_delta`, `tool_started`) is printed only with
/// `--include-partial` and never logged: the log holds what was committed. Returns whether
/// `event` was one (and is handled).
pub fn partial(run_id: &str, format: crate::launch::OutputFormat, event: &RunEvent) -> bool {
    if event.is_durable() {
        return false;
    }
    if format.includes_partial() {
        print(&line(run_id, event));
    }
    true
}

/// `--output text`'s progress on stderr: a line per tool call, with its decision (above the
/// live lines, when there are some).
pub fn text_progress(event: &RunEvent, live: Option<&crate::progress::LiveProgress>) {
    if let RunEvent::ToolCall {
        agent,
        tool,
        decision,
        reason,
        ..
    } = event
    {
        let line = format!("[{agent}] {tool}: {decision} ({reason})");
        match live {
            Some(live) => live.println(&line),
            None => eprintln!("{line}"),
        }
    }
}
