//! A stdio MCP server's process: its own process group, killed whole when the connection is
//! dropped (a server started as `sh -c "…"` or one that forks keeps no child behind), and the
//! last lines it wrote to stderr, for the error it causes.

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::ChildStderr;
use tokio::sync::watch;

/// How many of a server's last stderr lines an error quotes, and how long each may be.
const TAIL_LINES: usize = 12;
const LINE_CHARS: usize = 400;

/// The process groups of the live stdio servers of this process, so that an exit that skips
/// destructors (a second Ctrl-C, a batch line whose batch died) can still kill them.
static LIVE_GROUPS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

/// Kills every live stdio MCP server's process group (SIGKILL). For exits that skip
/// destructors; a dropped connection kills its own group.
pub fn kill_server_groups() {
    let groups = std::mem::take(&mut *LIVE_GROUPS.lock().unwrap_or_else(PoisonError::into_inner));
    for group in groups {
        kill_group(group);
    }
}

/// A server's process group (the server leads it): killed with SIGKILL when dropped.
#[derive(Debug)]
pub(super) struct ServerGroup(i32);

impl ServerGroup {
    /// The group led by the process `pid` (spawned with `process_group(0)`).
    pub(super) fn led_by(pid: u32) -> Option<ServerGroup> {
        let group = i32::try_from(pid).ok().filter(|pid| *pid > 0)?;
        LIVE_GROUPS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(group);
        Some(ServerGroup(group))
    }
}

impl Drop for ServerGroup {
    fn drop(&mut self) {
        LIVE_GROUPS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.0);
        kill_group(self.0);
    }
}

fn kill_group(group: i32) {
    if let Some(pid) = rustix::process::Pid::from_raw(group) {
        // ESRCH (every process of the group has ended) is the expected case.
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// The last lines a server wrote to stderr, read as they come (so a chatty server never
/// blocks on a full pipe); each line is also logged at debug level.
#[derive(Debug, Clone)]
pub(super) struct StderrTail {
    lines: Arc<Mutex<VecDeque<String>>>,
    ended: watch::Receiver<bool>,
}

impl StderrTail {
    /// Starts reading `stderr` of server `server`; with none, the tail is empty and ended.
    pub(super) fn read(server: &str, stderr: Option<ChildStderr>) -> StderrTail {
        let lines = Arc::new(Mutex::new(VecDeque::new()));
        let (sender, ended) = watch::channel(stderr.is_none());
        if let Some(stderr) = stderr {
            let server = server.to_owned();
            let kept = lines.clone();
            tokio::spawn(async move {
                let mut reader = BufReader::new(stderr);
                let mut line = Vec::new();
                while matches!(reader.read_until(b'\n', &mut line).await, Ok(n) if n > 0) {
                    let text = String::from_utf8_lossy(&line).trim_end().to_owned();
                    line.clear();
                    if text.is_empty() {
                        continue;
                    }
                    tracing::debug!(server = %server, "MCP server stderr: {text}");
                    let mut kept = kept.lock().unwrap_or_else(PoisonError::into_inner);
                    if kept.len() == TAIL_LINES {
                        kept.pop_front();
                    }
                    kept.push_back(cut(text));
                }
                sender.send_replace(true);
            });
        }
        StderrTail { lines, ended }
    }

    /// Waits until stderr has ended (every process holding it is gone), at most `guard`.
    pub(super) async fn until_ended(&self, guard: Duration) {
        let mut ended = self.ended.clone();
        let _ = tokio::time::timeout(guard, ended.wait_for(|ended| *ended)).await;
    }

    /// `; its stderr ended with: …` (the last lines, indented), or nothing when it wrote none.
    pub(super) fn said(&self) -> String {
        let lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        if lines.is_empty() {
            return String::new();
        }
        let quoted: Vec<String> = lines.iter().map(|line| format!("  {line}")).collect();
        format!("; its stderr ended with:\n{}", quoted.join("\n"))
    }
}

fn cut(text: String) -> String {
    match text.char_indices().nth(LINE_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_are_cut_on_a_character_boundary() {
        assert_eq!(cut("short".into()), "short");
        let long = "é".repeat(LINE_CHARS + 5);
        let cut = cut(long);
        assert_eq!(cut.chars().count(), LINE_CHARS + 1);
        assert!(cut.ends_with('…'));
    }
}
