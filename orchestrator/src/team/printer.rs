//! Events of a team run on stdout per `--output`, each line after the commit it reports. The
//! printer only prints and logs: what follows from a commit (a policy's decision, a person's
//! wait announced, the lead's wait watched) is the team's, through the runtime's hooks.

use std::io::Write as _;
use std::sync::Mutex;

use muster_agents::runtime::{EventSink, RuntimeEvent};
use serde_json::{Value, json};

use muster_mailbox::RunStatus;

use crate::launch::OutputFormat;
use crate::lifecycle::Ending;
use crate::progress::LiveProgress;
use crate::stream_json;

pub(crate) use crate::stream_json::now_ms;

/// Prints a team run's events.
pub(crate) struct TeamPrinter {
    run_id: String,
    format: OutputFormat,
    lock: Mutex<()>,
    /// On a worker: its name, in every event's `worker` field.
    worker: Option<String>,
    /// `--output text` on a terminal: the live line per busy agent.
    progress: Option<LiveProgress>,
}

impl TeamPrinter {
    pub(crate) fn new(run_id: &str, format: OutputFormat) -> TeamPrinter {
        TeamPrinter {
            run_id: run_id.to_owned(),
            format,
            lock: Mutex::new(()),
            worker: None,
            progress: (format == OutputFormat::Text)
                .then(LiveProgress::for_terminal)
                .flatten(),
        }
    }

    /// A printer in a worker's process: every event names the worker.
    pub(crate) fn on_worker(mut self, worker: &str) -> TeamPrinter {
        self.worker = Some(worker.to_owned());
        self
    }

    fn event(&self, kind: &str, agent: &str, fields: Value) -> Value {
        let mut event = stream_json::event(&self.run_id, kind, agent, fields);
        if let (Some(worker), Value::Object(object)) = (&self.worker, &mut event) {
            object.insert("worker".into(), Value::String(worker.clone()));
        }
        event
    }

    /// One event: in the run's log, and a `stream-json` line (only with
    /// `--output stream-json`).
    pub(crate) fn line(&self, kind: &str, agent: &str, fields: Value) {
        if self.format.is_stream_json() {
            self.print(kind, agent, fields);
        } else {
            stream_json::log(&self.event(kind, agent, fields));
        }
    }

    fn print(&self, kind: &str, agent: &str, fields: Value) {
        let event = self.event(kind, agent, fields);
        let _guard = self.lock.lock();
        stream_json::log(&event);
        stream_json::print(&event);
    }

    /// The `run_finished` event (json, stream-json) or the result text.
    pub(crate) fn finished(&self, status: RunStatus, exit_code: u8, result: &Value, text: &str) {
        let mut fields = json!({"status": status.as_str(), "exit_code": exit_code});
        if let (Value::Object(fields), Value::Object(result)) = (&mut fields, result) {
            fields.extend(result.clone());
        }
        match self.format {
            OutputFormat::Json | OutputFormat::StreamJson { .. } => {
                self.print("run_finished", super::LEAD, fields)
            }
            OutputFormat::Text => {
                if let Some(progress) = &self.progress {
                    progress.clear();
                }
                stream_json::log(&stream_json::event(
                    &self.run_id,
                    "run_finished",
                    super::LEAD,
                    fields,
                ));
                // A failure's text goes to stderr, as a single run's does.
                if Ending::is_failure_text(status) {
                    eprintln!("{text}");
                    return;
                }
                let mut stdout = std::io::stdout().lock();
                let _ = writeln!(stdout, "{text}");
                let _ = stdout.flush();
            }
        }
    }
}

impl EventSink for TeamPrinter {
    fn emit(&self, event: RuntimeEvent) {
        if let Some(progress) = &self.progress {
            progress.event(&event);
        }
        if stream_json::partial(&self.run_id, self.format, &event) {
            return;
        }
        if self.format.is_stream_json() && stream_json::on_stream(&event) {
            self.print(event.kind(), event.agent(), event.fields());
        } else {
            stream_json::log(&self.event(event.kind(), event.agent(), event.fields()));
        }
        if self.format == OutputFormat::Text {
            stream_json::text_progress(&event, self.progress.as_ref());
        }
    }
}
