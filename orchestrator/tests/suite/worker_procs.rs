//! Real `muster worker` processes for the suites that need them (`workers_cli.rs`,
//! `team_workers.rs`): each with its own directory (HOME, settings, repo cache), its stderr
//! read line by line so a test waits for what it says.

use std::process::Stdio;

use muster_fake_llm::FakeLlmHandle;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::sync::mpsc;

use super::common::{GUARD, command};

/// Leases short enough that a takeover happens within the test, heartbeats well inside them.
pub const LEASE: [&str; 4] = ["--lease-ms", "1500", "--heartbeat-ms", "250"];

/// A worker's directory: settings that send model calls to `fake`, run Bash without asking
/// (a policy approves the mode) and use the test's store.
pub fn worker_dir(fake: &FakeLlmHandle) -> tempfile::TempDir {
    let dir = super::common::project(&[
        (
            ".muster/settings.toml",
            &format!(
                "permission_mode = \"bypassPermissions\"\napprover = \"policy:policy.toml\"\n\
                 [providers.anthropic]\nbase_url = \"{}\"\n",
                fake.base_url()
            ),
        ),
        (
            "policy.toml",
            "approve_all = true\nmax_mode = \"bypassPermissions\"\n",
        ),
    ]);
    // The worker's own directory, which its operator trusted: its mode, policy and endpoint
    // apply.
    super::common::trust_blocking(dir.path());
    dir
}

/// A running `muster worker` and the lines of its stderr.
pub struct Worker {
    pub name: String,
    pub dir: tempfile::TempDir,
    pub child: tokio::process::Child,
    pub lines: mpsc::UnboundedReceiver<String>,
    pub seen: Vec<String>,
}

impl Worker {
    pub fn start(fake: &FakeLlmHandle, url: &str, name: &str) -> Worker {
        Worker::start_in(worker_dir(fake), url, name, &[])
    }

    /// A worker in `dir` (its project, HOME and repo cache), with `extra` flags.
    pub fn start_in(dir: tempfile::TempDir, url: &str, name: &str, extra: &[&str]) -> Worker {
        Worker::start_with_env(dir, url, name, extra, &[])
    }

    /// [`Worker::start_in`] with `env` added to its environment (and its items' processes').
    pub fn start_with_env(
        dir: tempfile::TempDir,
        url: &str,
        name: &str,
        extra: &[&str],
        env: &[(&str, String)],
    ) -> Worker {
        let mut args = vec!["--store", url, "worker", "--name", name];
        args.extend(LEASE);
        args.extend(extra);
        let mut command = command(dir.path(), &args);
        command.envs(env.iter().map(|(name, value)| (*name, value.as_str())));
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let (sender, lines) = mpsc::unbounded_channel();
        let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Worker {
            name: name.into(),
            dir,
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for a stderr line containing `text` (lines seen before count too).
    pub async fn wait_for(&mut self, text: &str) -> String {
        if let Some(line) = self.seen.iter().find(|line| line.contains(text)) {
            return line.clone();
        }
        tokio::time::timeout(GUARD, async {
            loop {
                let line = self.lines.recv().await.unwrap_or_else(|| {
                    panic!(
                        "worker {} ended before {text:?}:\n{}",
                        self.name,
                        self.seen.join("\n")
                    )
                });
                self.seen.push(line.clone());
                if line.contains(text) {
                    return line;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("guard timeout waiting for {text:?} from {}", self.name))
    }

    /// Everything it said so far, without waiting.
    pub fn said(&mut self) -> Vec<String> {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
        self.seen.clone()
    }

    pub fn pid(&self) -> rustix::process::Pid {
        rustix::process::Pid::from_raw(self.child.id().unwrap() as i32).unwrap()
    }

    /// Stops it with SIGTERM and waits for it to exit; gives back its exit code.
    pub async fn stop(&mut self) -> Option<i32> {
        rustix::process::kill_process(self.pid(), rustix::process::Signal::TERM).unwrap();
        let status = tokio::time::timeout(GUARD, self.child.wait())
            .await
            .expect("guard timeout")
            .unwrap();
        status.code()
    }
}
