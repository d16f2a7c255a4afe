//! The run's log file, `.muster/logs/<run_id>.jsonl`: every log event of the process from the
//! moment its run is known, one JSON object per line (tracing-subscriber's JSON format),
//! beside the human-readable log on stderr. Nothing here ever writes to stdout.
//!
//! A process runs one run (`muster run`, `muster resume`, and each line of `muster batch` in a
//! child process of its own), so the file is a process-wide slot: [`start`] opens it once the
//! run id is known (appending, so a resumed run continues its file) and logs `run started`;
//! [`finish`] logs `run finished` with the exit code and closes it. Events before [`start`]
//! (settings, flags) go to stderr only. Should one process start several runs in turn (the
//! demo, a benchmark), each [`start`] moves the slot to the newer run's file.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

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

static CURRENT: Mutex<Option<OpenLog>> = Mutex::new(None);

/// The least a run's file records: its start and finish are `info`.
const FILE_LEVEL: LevelFilter = LevelFilter::INFO;

/// The JSON layer writing to the run's file: `info` and above, or what `--log-level` asks for
/// when that says more (`stderr_level`, the stderr filter's most verbose level).
pub fn layer<S>(stderr_level: Option<LevelFilter>) -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    let level = stderr_level.map_or(FILE_LEVEL, |level| level.max(FILE_LEVEL));
    tracing_subscriber::fmt::layer()
        .json()
        .with_writer(RunLogWriter)
        .with_filter(level)
}

/// The file of run `run_id` under `logs_dir`.
pub fn path(logs_dir: &Path, run_id: &str) -> PathBuf {
    logs_dir.join(format!("{run_id}.jsonl"))
}

/// Opens (creating `logs_dir`, appending to an existing file) run `run_id`'s log and logs
/// `run started`. A log that cannot be opened is a warning on stderr, not a failed run.
pub fn start(logs_dir: &Path, run_id: &str, kind: &str, resumed: bool) {
    let opened = std::fs::create_dir_all(logs_dir).and_then(|()| {
        File::options()
            .create(true)
            .append(true)
            .open(path(logs_dir, run_id))
    });
    match opened {
        Ok(file) => {
            if let Ok(mut current) = CURRENT.lock() {
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

/// Logs `run finished` (once) with the exit code, the run's status when known, and the error
/// that ended the process, if any. The log stays open for what follows.
pub fn finish(exit_code: u8, status: Option<&str>, error: Option<&str>) {
    let run_id = match CURRENT.lock() {
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

/// Closes the run's log (after [`finish`]).
pub fn close() {
    if let Ok(mut current) = CURRENT.lock() {
        *current = None;
    }
}

/// Hands the JSON formatter one buffer per event.
struct RunLogWriter;

impl<'a> MakeWriter<'a> for RunLogWriter {
    type Writer = EventBuffer;

    fn make_writer(&'a self) -> EventBuffer {
        EventBuffer(Vec::new())
    }
}

/// One formatted event, written to the run's file in one piece when dropped, so events of
/// concurrent tasks never mix within a line; dropped unwritten when no run's log is open.
struct EventBuffer(Vec<u8>);

impl Write for EventBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for EventBuffer {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        if let Ok(mut current) = CURRENT.lock()
            && let Some(log) = current.as_mut()
        {
            // A log line that cannot be written must not fail the run.
            let _ = log.file.write_all(&self.0);
        }
    }
}
