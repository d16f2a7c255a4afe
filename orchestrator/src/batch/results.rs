//! Result lines: one per task, appended to `--out` (or stdout, unless `--output` gives stdout
//! to the runs' own output) as each task ends, each made
//! durable before the next one is written, and the batch's exit code as the worst of them.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::Path;
use std::sync::Mutex;

use muster_mailbox::{RunRecord, RunStatus};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::exit::Exit;

/// `{"id", "run_id", "status", "exit_code", …}`: the rest are the fields of the run's
/// `run_finished` event (`result` for a completed run, `error` for a failed one, `request_id`
/// and `plan_file` for one awaiting a decision).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultLine {
    pub id: String,
    pub run_id: Option<String>,
    /// The run's status, or `error` when the line could not start a run.
    pub status: String,
    pub exit_code: u8,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// The fields of a `run_finished` event that the result line carries beside its own.
const EVENT_FIELDS: [&str; 8] = [
    "v",
    "type",
    "ts",
    "agent",
    "run_id",
    "status",
    "exit_code",
    "id",
];

impl ResultLine {
    /// From a run's `run_finished` event.
    pub fn from_event(id: &str, event: &Value, fallback_code: u8) -> ResultLine {
        let mut rest = event.as_object().cloned().unwrap_or_default();
        for field in EVENT_FIELDS {
            rest.remove(field);
        }
        ResultLine {
            id: id.to_owned(),
            run_id: event["run_id"].as_str().map(str::to_owned),
            status: event["status"].as_str().unwrap_or("failed").to_owned(),
            exit_code: event["exit_code"]
                .as_u64()
                .and_then(|code| u8::try_from(code).ok())
                .unwrap_or(fallback_code),
            rest,
        }
    }

    /// From a finished run's stored record (a task a re-run skips).
    pub fn from_record(id: &str, record: &RunRecord) -> ResultLine {
        let exit = match record.status {
            RunStatus::Completed => Exit::Success,
            RunStatus::Budget => Exit::Budget,
            RunStatus::AwaitingDecision => Exit::AwaitingDecision,
            RunStatus::Interrupted | RunStatus::Running => Exit::Interrupted,
            RunStatus::Failed => Exit::Failed,
        };
        let rest = record
            .result
            .as_ref()
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        ResultLine {
            id: id.to_owned(),
            run_id: Some(record.id.clone()),
            status: record.status.as_str().to_owned(),
            exit_code: exit.code(),
            rest,
        }
    }

    /// A task whose process ended without reporting how its run finished.
    pub fn without_event(
        id: &str,
        record: Option<&RunRecord>,
        exit_code: u8,
        error: String,
    ) -> ResultLine {
        let mut rest = Map::new();
        rest.insert("error".into(), Value::String(error));
        let status = match record.map(|r| r.status) {
            None => "error",
            Some(RunStatus::Running) => RunStatus::Interrupted.as_str(),
            Some(status) => status.as_str(),
        };
        ResultLine {
            id: id.to_owned(),
            run_id: record.map(|r| r.id.clone()),
            status: status.to_owned(),
            exit_code,
            rest,
        }
    }
}

/// How bad an exit code is for the batch as a whole, from nothing to do (0) up: a run waiting
/// for a person (5) is the mildest trouble, then a budget hit (3), a failed run (1), a line
/// that could not even start (2), the store (4), and an interrupted run (130), which leaves the
/// batch unfinished. Unknown codes count as a failure.
pub fn severity(code: u8) -> u8 {
    match code {
        0 => 0,
        5 => 1,
        3 => 2,
        1 => 3,
        2 => 4,
        4 => 5,
        130 => 6,
        _ => 3,
    }
}

enum Sink {
    Stdout,
    File(File),
    /// Counted for the exit code, written nowhere (stdout carries `--output`, and there is
    /// no `--out`).
    Nowhere,
}

/// Where result lines go, and what an earlier batch already wrote there.
pub struct Results {
    sink: Mutex<Sink>,
    /// `(id, run_id, status)` of the lines already in `--out`, with their exit codes.
    written: HashMap<(String, Option<String>, String), u8>,
    worst: Mutex<u8>,
}

impl Results {
    /// `out` opened for appending (created if absent), else stdout when `to_stdout`, else
    /// nowhere. A last line cut short by a killed batch is ended first, so the next line
    /// starts on its own.
    pub fn open(out: Option<&Path>, to_stdout: bool) -> std::io::Result<Results> {
        let Some(path) = out else {
            return Ok(Results {
                sink: Mutex::new(if to_stdout {
                    Sink::Stdout
                } else {
                    Sink::Nowhere
                }),
                written: HashMap::new(),
                worst: Mutex::new(0),
            });
        };
        let mut file = File::options()
            .read(true)
            .append(true)
            .create(true)
            .open(path)?;
        let mut text = String::new();
        file.seek(SeekFrom::Start(0))?;
        file.read_to_string(&mut text)?;
        let written = text
            .lines()
            .filter_map(|line| serde_json::from_str::<ResultLine>(line).ok())
            .map(|line| ((line.id, line.run_id, line.status), line.exit_code))
            .collect();
        if !text.is_empty() && !text.ends_with('\n') {
            file.write_all(b"\n")?;
            file.sync_data()?;
        }
        Ok(Results {
            sink: Mutex::new(Sink::File(file)),
            written,
            worst: Mutex::new(0),
        })
    }

    /// The exit code of the line `--out` already holds for this task, run and status.
    pub fn already_written(&self, line: &ResultLine) -> Option<u8> {
        self.written
            .get(&(line.id.clone(), line.run_id.clone(), line.status.clone()))
            .copied()
    }

    /// Counts the line towards the batch's exit code.
    pub fn count(&self, line: &ResultLine) {
        if let Ok(mut worst) = self.worst.lock()
            && severity(line.exit_code) > severity(*worst)
        {
            *worst = line.exit_code;
        }
    }

    /// Counts the line and appends it, durably (`fsync` for a file) before returning.
    pub fn write(&self, line: &ResultLine) -> anyhow::Result<()> {
        self.count(line);
        let mut text = serde_json::to_string(line)?;
        text.push('\n');
        let mut sink = self
            .sink
            .lock()
            .map_err(|_| anyhow::anyhow!("the result writer panicked"))?;
        match &mut *sink {
            Sink::Stdout => {
                let mut stdout = std::io::stdout().lock();
                stdout.write_all(text.as_bytes())?;
                stdout.flush()?;
            }
            Sink::File(file) => {
                file.write_all(text.as_bytes())?;
                file.sync_data()?;
            }
            Sink::Nowhere => {}
        }
        Ok(())
    }

    /// The worst exit code seen.
    pub fn worst(&self) -> u8 {
        self.worst.lock().map(|worst| *worst).unwrap_or(1)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use serde_json::json;

    #[test]
    fn the_worst_code_is_the_most_severe_not_the_largest() {
        let mut codes = vec![0, 5, 3, 1, 2, 4, 130];
        let sorted = codes.clone();
        codes.reverse();
        codes.sort_by_key(|code| severity(*code));
        assert_eq!(codes, sorted);
        for code in sorted {
            assert_eq!(Exit::from_code(u64::from(code)).code(), code);
        }
    }

    #[test]
    fn a_result_line_carries_the_run_finished_fields() {
        let event = json!({"v": 1, "type": "run_finished", "ts": 5, "run_id": "r1",
            "agent": "main", "status": "completed", "exit_code": 0, "result": "done"});
        let line = ResultLine::from_event("a", &event, 1);
        assert_eq!(
            serde_json::to_string(&line).unwrap(),
            r#"{"id":"a","run_id":"r1","status":"completed","exit_code":0,"result":"done"}"#
        );
    }

    #[test]
    fn an_out_file_cut_short_is_ended_before_the_next_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        std::fs::write(
            &path,
            "{\"id\":\"a\",\"run_id\":\"r\",\"status\":\"completed\",\"exit_code\":0}\n{\"id\":\"b\",\"ru",
        )
        .unwrap();
        let results = Results::open(Some(&path), false).unwrap();
        let a = ResultLine {
            id: "a".into(),
            run_id: Some("r".into()),
            status: "completed".into(),
            exit_code: 0,
            rest: Map::new(),
        };
        assert_eq!(results.already_written(&a), Some(0));
        let b = ResultLine {
            id: "b".into(),
            exit_code: 3,
            ..a.clone()
        };
        results.write(&b).unwrap();
        assert_eq!(results.worst(), 3);
        let text = std::fs::read_to_string(&path).unwrap();
        let last = text.lines().last().unwrap();
        assert_eq!(serde_json::from_str::<ResultLine>(last).unwrap(), b);
    }
}
