//! The agent's conversation as a JSONL file in Claude Code's transcript shape, for hooks
//! (`transcript_path`): `.muster/runs/RUN/AGENT.jsonl`, mode 0600, one line per message
//! (`type`, `message{role,content}`, `uuid`, `parentUuid`, `sessionId`, `timestamp`, `cwd`).
//!
//! It is derived from the transcript, which the store's records rebuild on resume: the file is
//! written anew when the agent starts or resumes (from the context as the records leave it)
//! and appended to before its hooks fire. Only written when the run has hooks; nothing reads
//! it back, so a write that fails costs the hooks their transcript, never the run.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{Value, json};

use crate::model::{Message, Role};

/// Where the transcript file of `agent` in `run` lives under the project's `.muster/`.
pub(super) fn transcript_file_path(project_root: &Path, run_id: &str, agent_id: &str) -> PathBuf {
    let name: String = agent_id
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' => c,
            _ => '_',
        })
        .collect();
    project_root
        .join(".muster/runs")
        .join(run_id)
        .join(format!("{name}.jsonl"))
}

/// What has been written of the transcript so far.
#[derive(Debug, Default)]
struct Written {
    /// Messages of the current context written (the context restarts at a compaction).
    count: usize,
    /// The context's restarts seen.
    restarts: u64,
    /// Lines written in all.
    lines: u64,
    last_uuid: Option<String>,
}

/// The transcript file of one agent.
#[derive(Debug)]
pub(super) struct TranscriptFile {
    pub path: PathBuf,
    session: String,
    agent: String,
    cwd: String,
    written: Mutex<Option<Written>>,
}

impl TranscriptFile {
    pub(super) fn new(path: PathBuf, session: &str, agent: &str, cwd: &Path) -> TranscriptFile {
        TranscriptFile {
            path,
            session: session.to_owned(),
            agent: agent.to_owned(),
            cwd: cwd.display().to_string(),
            written: Mutex::new(None),
        }
    }

    /// Brings the file up to `messages` (the context, after `restarts` restarts): written
    /// anew the first time, then the messages not written yet appended (all of a restarted
    /// context).
    pub(super) fn sync(&self, messages: &[Message], restarts: u64) {
        let Ok(mut written) = self.written.lock() else {
            return;
        };
        let fresh = written.is_none();
        let state = written.get_or_insert_with(Written::default);
        if state.restarts != restarts || messages.len() < state.count {
            state.count = 0;
            state.restarts = restarts;
        }
        let new = &messages[state.count.min(messages.len())..];
        if new.is_empty() && !fresh {
            return;
        }
        if let Err(error) = self.write(state, new, fresh) {
            tracing::warn!(path = %self.path.display(), "the transcript file for hooks: {error}");
            return;
        }
        state.count = messages.len();
    }

    fn write(&self, state: &mut Written, new: &[Message], fresh: bool) -> std::io::Result<()> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut options = std::fs::OpenOptions::new();
        options.create(true);
        if fresh {
            options.write(true).truncate(true);
        } else {
            options.append(true);
        }
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut file = options.mode(0o600).open(&self.path)?;
        let mut text = String::new();
        for message in new {
            state.lines += 1;
            let uuid = line_uuid(&self.session, &self.agent, state.lines);
            text.push_str(
                &self
                    .line(message, &uuid, state.last_uuid.as_deref())
                    .to_string(),
            );
            text.push('\n');
            state.last_uuid = Some(uuid);
        }
        file.write_all(text.as_bytes())
    }

    fn line(&self, message: &Message, uuid: &str, parent: Option<&str>) -> Value {
        let role = match message.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        json!({
            "type": role,
            "message": {"role": role, "content": message.content},
            "uuid": uuid,
            "parentUuid": parent,
            "sessionId": self.session,
            "timestamp": timestamp(),
            "cwd": self.cwd,
        })
    }
}

/// A UUID-shaped id of line `n` of `agent`'s transcript in `session`: the same for the same
/// line when the file is written anew.
fn line_uuid(session: &str, agent: &str, n: u64) -> String {
    use std::hash::{Hash as _, Hasher as _};
    let mut high = std::collections::hash_map::DefaultHasher::new();
    (session, agent, n, 1u8).hash(&mut high);
    let mut low = std::collections::hash_map::DefaultHasher::new();
    (session, agent, n, 2u8).hash(&mut low);
    let bits = (u128::from(high.finish()) << 64) | u128::from(low.finish());
    let hex = format!("{bits:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// Now, as RFC 3339 UTC with milliseconds (Claude Code's `timestamp`).
fn timestamp() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        now.subsec_millis()
    )
}

/// The civil date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ContentBlock;

    fn text(role: Role, text: &str) -> Message {
        Message {
            role,
            content: vec![ContentBlock::Text { text: text.into() }],
        }
    }

    /// Written anew, then appended; a restarted context is appended whole; lines chain by
    /// `parentUuid`; mode 0600.
    #[test]
    fn the_file_follows_the_context_in_claude_codes_shape() {
        let dir = tempfile::tempdir().unwrap();
        let path = transcript_file_path(dir.path(), "run-1", "main/sub");
        assert!(path.ends_with(".muster/runs/run-1/main_sub.jsonl"));
        let file = TranscriptFile::new(path.clone(), "run-1", "main", dir.path());
        let mut messages = vec![text(Role::User, "hi")];
        file.sync(&messages, 0);
        messages.push(text(Role::Assistant, "hello"));
        file.sync(&messages, 0);
        file.sync(&messages, 0);
        file.sync(&[text(Role::User, "summary")], 1);
        let lines: Vec<Value> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(lines.len(), 3, "{lines:#?}");
        assert_eq!(lines[0]["type"], "user");
        assert_eq!(lines[0]["message"]["content"][0]["text"], "hi");
        assert_eq!(lines[0]["parentUuid"], Value::Null);
        assert_eq!(lines[1]["message"]["role"], "assistant");
        assert_eq!(lines[1]["parentUuid"], lines[0]["uuid"]);
        assert_eq!(lines[2]["parentUuid"], lines[1]["uuid"]);
        assert_eq!(lines[2]["sessionId"], "run-1");
        assert_eq!(lines[2]["cwd"], dir.path().display().to_string());
        assert_eq!(lines[0]["uuid"].as_str().unwrap().len(), 36);
        assert!(lines[0]["timestamp"].as_str().unwrap().ends_with('Z'));
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // Written anew (a resume): the same lines' ids again.
        let again = TranscriptFile::new(path.clone(), "run-1", "main", dir.path());
        again.sync(&messages, 0);
        let first: Value = serde_json::from_str(
            std::fs::read_to_string(&path)
                .unwrap()
                .lines()
                .next()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(first["uuid"], lines[0]["uuid"]);
        assert_eq!(civil_from_days(20_000), (2024, 10, 4));
    }
}
