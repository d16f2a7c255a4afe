//! The run's log file, `.muster/logs/<run_id>.jsonl`: every log event of the process from the
//! moment its run is known, one JSON object per line (tracing-subscriber's JSON format),
//! beside the human-readable log on stderr. Nothing here ever writes to stdout.
//!
//! A process runs one run (`muster run`, `muster resume`, and each line of `muster batch` in a
//! child process of its own), so its [`RunLog`] is one slot, made in `main`, shared by the
//! tracing layer and handed down with what the process was given
//! ([`crate::process::ProcessGiven`]): [`RunLog::start`] opens it once the run id is known
//! (appending, so a resumed run continues its file) and logs `run started`; [`RunLog::finish`]
//! logs `run finished` with the exit code. Events before the start (settings, flags) go to
//! stderr only. Should one process start several runs in turn (the demo, a benchmark), each
//! start moves the slot to the newer run's file.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tracing_subscriber::Layer;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::registry::LookupSpan;

/// The open log: its run and file.
struct OpenLog {
    run_id: String,
    file: File,
    /// `run finished` was logged already.
    finished: bool,
}

/// The process's run log: the slot the tracing layer writes each event to, once a run has
/// opened it. Clones share the slot.
#[derive(Clone, Default)]
pub struct RunLog {
    current: Arc<Mutex<Option<OpenLog>>>,
}

impl std::fmt::Debug for RunLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let run = match self.current.lock() {
            Ok(current) => current.as_ref().map(|log| log.run_id.clone()),
            Err(_) => None,
        };
        f.debug_struct("RunLog").field("run", &run).finish()
    }
}

/// The least a run's file records: its start and finish are `info`.
const FILE_LEVEL: LevelFilter = LevelFilter::INFO;

/// The JSON layer writing to the run's file: `info` and above, or what `--log-level` asks for
/// when that says more (`stderr_level`, the stderr filter's most verbose level).
impl RunLog {
    pub fn layer<S>(&self, stderr_level: Option<LevelFilter>) -> impl Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        let level = stderr_level.map_or(FILE_LEVEL, |level| level.max(FILE_LEVEL));
        tracing_subscriber::fmt::layer()
            .json()
            .with_writer(RunLogWriter(self.clone()))
            .with_filter(level)
    }

    /// Opens (creating `logs_dir`, appending to an existing file) run `run_id`'s log and logs
    /// `run started`. A log that cannot be opened is a warning on stderr, not a failed run.
    pub fn start(&self, logs_dir: &Path, run_id: &str, kind: &str, resumed: bool) {
        let opened = std::fs::create_dir_all(logs_dir).and_then(|()| {
            File::options()
                .create(true)
                .append(true)
                .open(path(logs_dir, run_id))
        });
        match opened {
            Ok(file) => {
                if let Ok(mut current) = self.current.lock() {
                    *current = Some(OpenLog {
                        run_id: run_id.to_owned(),
                        file,
                        finished: false,
                    });
                }
                tracing::info!(run_id, kind, resumed, "run started");
            }
            Err(error) => tracing::warn!(
                "cannot open the run's log file {}: {error}",
                path(logs_dir, run_id).display()
            ),
        }
    }

    /// Logs `run finished` (once) with the exit code, the run's status when known, and the
    /// error that ended the process, if any. The log stays open for what follows.
    pub fn finish(&self, exit_code: u8, status: Option<&str>, error: Option<&str>) {
        let run_id = match self.current.lock() {
            Ok(mut current) => match current.as_mut() {
                Some(log) if !log.finished => {
                    log.finished = true;
                    log.run_id.clone()
                }
                _ => return,
            },
            Err(_) => return,
        };
        // `None` fields are left out of the line.
        tracing::info!(run_id, status, exit_code, error, "run finished");
    }

    /// Closes the run's log (after [`Self::finish`]).
    pub fn close(&self) {
        if let Ok(mut current) = self.current.lock() {
            *current = None;
        }
    }

    /// Writes one formatted event to the open log, if any.
    fn write(&self, line: &[u8]) {
        if let Ok(mut current) = self.current.lock()
            && let Some(log) = current.as_mut()
        {
            // A log line that cannot be written must not fail the run.
            let _ = log.file.write_all(line);
        }
    }
}

/// The file of run `run_id` under `logs_dir`.
pub fn path(logs_dir: &Path, run_id: &str) -> PathBuf {
    logs_dir.join(format!("{run_id}.jsonl"))
}

/// Hands the JSON formatter one buffer per event.
struct RunLogWriter(RunLog);

impl<'a> MakeWriter<'a> for RunLogWriter {
    type Writer = EventBuffer<'a>;

    fn make_writer(&'a self) -> EventBuffer<'a> {
        EventBuffer(Vec::new(), &self.0)
    }
}

/// One formatted event, written to the run's file in one piece when dropped, so events of
/// concurrent tasks never mix within a line; dropped unwritten when no run's log is open.
struct EventBuffer<'a>(Vec<u8>, &'a RunLog);

impl Write for EventBuffer<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for EventBuffer<'_> {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        self.1.write(&self.0);
    }
}
