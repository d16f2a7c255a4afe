//! The one printer of a run's events, single or team: every event goes to the run's log, and
//! per `--output` to stdout (`stream-json` lines, the `run_finished` line for `json`, the live
//! progress and the result text for `text`), each line after the commit it reports. A failure's
//! text goes to stderr for both run kinds. The printer only prints and logs: nothing decides on
//! what it is given.

use std::io::Write as _;
use std::sync::{Arc, Mutex};

use muster_agents::runtime::{EventSink, RunEvent};
use serde_json::Value;

use crate::launch::OutputFormat;
use crate::lifecycle::Ending;
use crate::progress::LiveProgress;
use crate::stream_json;
use crate::traces::RunTraces;

/// Prints one run's events.
pub(crate) struct RunPrinter {
    run_id: String,
    /// The agent `run_finished` names: a single run's main agent, a team's lead.
    agent: &'static str,
    format: OutputFormat,
    lock: Mutex<()>,
    /// On a worker: its name, in every event's `worker` field.
    worker: Option<String>,
    /// `--output text` on a terminal: the live line per busy agent.
    progress: Option<Arc<LiveProgress>>,
    /// The run's traces, when they are on: each event after its line is logged.
    traces: Option<Arc<RunTraces>>,
    /// A front end in this process (`muster acp`) that takes every event: then nothing is
    /// printed, the run is only logged.
    front: Option<Arc<dyn EventSink>>,
    /// Streamed pieces of responses to a `muster serve` of this project on this host.
    deltas: Option<crate::serve::watch::DeltaPublisher>,
}

impl RunPrinter {
    /// `stdout_is_terminal`: text output then draws live progress lines.
    pub(crate) fn new(
        run_id: &str,
        agent: &'static str,
        format: OutputFormat,
        stdout_is_terminal: bool,
    ) -> RunPrinter {
        RunPrinter {
            run_id: run_id.to_owned(),
            agent,
            format,
            lock: Mutex::new(()),
            worker: None,
            progress: (format == OutputFormat::Text)
                .then(|| LiveProgress::for_terminal(stdout_is_terminal))
                .flatten()
                .map(Arc::new),
            traces: None,
            front: None,
            deltas: None,
        }
    }

    /// Streamed pieces of responses go to the project's `muster serve` too.
    pub(crate) fn with_deltas(mut self, muster_dir: &std::path::Path) -> RunPrinter {
        self.deltas = Some(crate::serve::watch::DeltaPublisher::new(muster_dir));
        self
    }

    /// Events go to the run's traces too.
    pub(crate) fn with_traces(mut self, traces: Option<Arc<RunTraces>>) -> RunPrinter {
        self.traces = traces;
        self
    }

    /// A printer whose events go to `front` (and the run's log) instead of stdout.
    pub(crate) fn for_front_end(mut self, front: Arc<dyn EventSink>) -> RunPrinter {
        self.front = Some(front);
        self.progress = None;
        self
    }

    /// A printer in a worker's process: every event names the worker.
    pub(crate) fn on_worker(mut self, worker: &str) -> RunPrinter {
        self.worker = Some(worker.to_owned());
        self
    }

    /// The live progress lines, for a terminal prompt to step around.
    pub(crate) fn progress(&self) -> Option<Arc<LiveProgress>> {
        self.progress.clone()
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
        // Rendered once, for the run's log and for stdout.
        let text = line.to_string();
        let _guard = self.lock.lock();
        stream_json::log_rendered(&line, &text);
        stream_json::print_rendered(&text);
    }

    /// The `run_finished` event (json, stream-json) or the ending's text (text: stdout, or
    /// stderr for a failure).
    pub(crate) fn finished(&self, ending: &Ending) {
        let event = RunEvent::RunFinished {
            agent: self.agent.to_owned(),
            status: ending.status.as_str().to_owned(),
            exit_code: ending.exit.code(),
            result: ending.result.as_object().cloned().unwrap_or_default(),
        };
        if let Some(front) = &self.front {
            stream_json::log(&self.line(&event));
            front.emit(event);
            return;
        }
        match self.format {
            OutputFormat::Json | OutputFormat::StreamJson { .. } => self.print(&event),
            OutputFormat::Text => {
                if let Some(progress) = &self.progress {
                    progress.clear();
                }
                stream_json::log(&self.line(&event));
                if Ending::is_failure_text(ending.status) {
                    eprintln!("{}", ending.text);
                    return;
                }
                let mut stdout = std::io::stdout().lock();
                let _ = writeln!(stdout, "{}", ending.text);
                let _ = stdout.flush();
            }
        }
    }
}

impl EventSink for RunPrinter {
    /// Every event of the run, from its agents and from the team: in the run's log, and a
    /// `stream-json` line (only with `--output stream-json`).
    fn emit(&self, event: RunEvent) {
        if let Some(deltas) = &self.deltas {
            deltas.publish(&self.run_id, &event);
        }
        if let Some(front) = &self.front {
            if event.is_durable() {
                stream_json::log(&self.line(&event));
            }
            if let Some(traces) = &self.traces {
                traces.event(&event);
            }
            front.emit(event);
            return;
        }
        if let Some(progress) = &self.progress {
            progress.event(&event);
        }
        if stream_json::partial(&self.run_id, self.format, &event) {
            // Not durable: for traces, it only starts a clock.
            if let Some(traces) = &self.traces {
                traces.event(&event);
            }
            return;
        }
        if self.format.is_stream_json() && event.is_stream_line() {
            self.print(&event);
        } else {
            stream_json::log(&self.line(&event));
        }
        // After its line is in the run log, so that what a crash leaves queued and unsent is
        // found there by the resume ([`RunTraces::send_unsent`]).
        if let Some(traces) = &self.traces {
            traces.event(&event);
        }
        if self.format == OutputFormat::Text {
            stream_json::text_progress(&event, self.progress.as_deref());
        }
    }
}
