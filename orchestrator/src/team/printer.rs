//! Events of a team run on stdout per `--output`, each line after the commit it reports. The
//! printer only prints and logs: what follows from a commit (a policy's decision, a person's
//! wait announced, the lead's wait watched) is the team's, through the runtime's hooks.

use std::io::Write as _;
use std::sync::Mutex;

use muster_agents::runtime::{EventSink, RunEvent};
use serde_json::Value;

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

    /// The line of `event`, naming the worker on one.
    fn line(&self, event: &RunEvent) -> Value {
        let mut line = stream_json::line(&self.run_id, event);
        if let (Some(worker), Value::Object(object)) = (&self.worker, &mut line) {
            object.insert("worker".into(), Value::String(worker.clone()));
        }
        line
    }

    /// Logs `event` and prints it as a line on stdout.
    fn print(&self, event: &RunEvent) {
        let line = self.line(event);
        let _guard = self.lock.lock();
        stream_json::log(&line);
        stream_json::print(&line);
    }

    /// The `run_finished` event (json, stream-json) or the result text.
    pub(crate) fn finished(&self, status: RunStatus, exit_code: u8, result: &Value, text: &str) {
        let event = RunEvent::RunFinished {
            agent: super::LEAD.to_owned(),
            status: status.as_str().to_owned(),
            exit_code,
            result: result.as_object().cloned().unwrap_or_default(),
        };
        match self.format {
            OutputFormat::Json | OutputFormat::StreamJson { .. } => self.print(&event),
            OutputFormat::Text => {
                if let Some(progress) = &self.progress {
                    progress.clear();
                }
                stream_json::log(&stream_json::line(&self.run_id, &event));
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
    /// Every event of a team run, from its agents and from the team itself: in the run's
    /// log, and a `stream-json` line (only with `--output stream-json`).
    fn emit(&self, event: RunEvent) {
        if let Some(progress) = &self.progress {
            progress.event(&event);
        }
        if stream_json::partial(&self.run_id, self.format, &event) {
            return;
        }
        if self.format.is_stream_json() && event.is_stream_line() {
            self.print(&event);
        } else {
            stream_json::log(&self.line(&event));
        }
        if self.format == OutputFormat::Text {
            stream_json::text_progress(&event, self.progress.as_ref());
        }
    }
}
