//! The test gate of merges (`[merge] test` in the team file): the project's test command run
//! on the merged result (the integration head merged with a teammate's branch) in a scratch
//! worktree, inside the sandbox's workspace-write profile for that tree with the network off,
//! with the `cache` paths shared across scratch trees. Repository code: a team run builds a
//! gate only in a trusted project. The scratch tree is removed on every path (a guard), and
//! with the run's worktrees by `muster prune`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use muster_agents::hooks::process::{ProcessEnd, ProcessSpec, run_hook_process};
use muster_agents::sandbox::{Sandbox, SandboxProfile};
use muster_config::hooks::HookSandbox;
use muster_config::team::MergeGate;
use serde::{Deserialize, Serialize};

use crate::worktree::Worktrees;

/// How much of the command's output a result keeps (its end: where test failures are).
const TAIL_BYTES: usize = 4000;

/// One run of the gate, as recorded in a merge request (`tested`) or sent back to the
/// teammate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct GateResult {
    pub command: String,
    /// The integration head the merged result was made on.
    pub head: String,
    /// The exit code (`None`: it timed out, was killed or could not start).
    pub exit: Option<i32>,
    pub passed: bool,
    pub seconds: f64,
    /// The end of its output (stdout, then stderr).
    pub tail: String,
}

/// The gate of a run: the command and where its scratch trees and caches live.
pub(crate) struct MergeTestGate {
    gate: MergeGate,
    /// Where the shared `cache` paths live (`.muster/merge-cache/`).
    cache_root: PathBuf,
    sandbox: Option<Arc<Sandbox>>,
    environment: Vec<(OsString, OsString)>,
}

/// Removes a scratch worktree when dropped, whatever path left the gate.
struct Scratch {
    repo: PathBuf,
    path: PathBuf,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let path = self.path.to_string_lossy().into_owned();
        let _ = std::process::Command::new("git")
            .current_dir(&self.repo)
            .args(["worktree", "remove", "--force", "--force", &path])
            .output();
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

impl MergeTestGate {
    pub(crate) fn new(
        gate: MergeGate,
        muster_dir: &Path,
        sandbox: Option<Arc<Sandbox>>,
        environment: Vec<(OsString, OsString)>,
    ) -> MergeTestGate {
        MergeTestGate {
            gate,
            cache_root: muster_dir.join("merge-cache"),
            sandbox,
            environment,
        }
    }

    /// Whether the team's result must pass before the final apply (`[merge] before_apply`).
    pub(crate) fn before_apply(&self) -> bool {
        self.gate.before_apply
    }

    /// Runs the gate on `merged` (a commit: `head` merged with a teammate's branch) in a
    /// scratch worktree named `name` under the run's worktrees.
    pub(crate) async fn run(
        &self,
        worktrees: &Worktrees,
        head: &str,
        merged: &str,
        name: &str,
    ) -> anyhow::Result<GateResult> {
        let path = worktrees.add_scratch(name, merged).await?;
        let _scratch = Scratch {
            repo: worktrees.toplevel().to_path_buf(),
            path: path.clone(),
        };
        let workspace = path.join(worktrees.subdir());
        let caches = self.link_caches(&path)?;
        let sandbox = self.sandbox.as_ref().map(|sandbox| {
            let mut sandbox = Sandbox::clone(sandbox);
            sandbox.network = false;
            sandbox.writable.extend(caches);
            sandbox
        });
        let started = Instant::now();
        let end = run_hook_process(&ProcessSpec {
            command: &self.gate.test,
            stdin: &[],
            workspace: &workspace,
            environment: &self.environment,
            timeout: Duration::from_secs(self.gate.test_timeout_secs),
            sandbox: sandbox
                .as_ref()
                .map(|sandbox| (sandbox, SandboxProfile::WorkspaceWrite)),
            hook_sandbox: HookSandbox::Agent,
            launcher: None,
        })
        .await;
        let seconds = started.elapsed().as_secs_f64();
        muster_mailbox::failpoint!("merge_gate");
        let (exit, output) = match end {
            ProcessEnd::Exited {
                code,
                stdout,
                stderr,
            } => (code, format!("{stdout}{stderr}")),
            ProcessEnd::CannotStart(why) => (None, format!("the test command cannot start: {why}")),
            ProcessEnd::TimedOut(after) => (
                None,
                format!(
                    "the test command ran past test_timeout ({}s) and was stopped",
                    after.as_secs()
                ),
            ),
            ProcessEnd::TooMuchOutput => (None, "the test command printed too much".to_owned()),
            // Only hooks post over HTTP; a test command is a process.
            ProcessEnd::HttpStatus { status, body } => (
                None,
                format!("the test command answered HTTP {status}: {body}"),
            ),
        };
        Ok(GateResult {
            command: self.gate.test.clone(),
            head: head.to_owned(),
            exit,
            passed: exit == Some(0),
            seconds,
            tail: tail(&output),
        })
    }

    /// Links each `cache` path of the scratch tree at `tree` to its shared directory (made
    /// when missing); gives back the shared directories (writable in the sandbox).
    fn link_caches(&self, tree: &Path) -> anyhow::Result<Vec<PathBuf>> {
        let mut shared = Vec::new();
        for cache in &self.gate.cache {
            let target = self.cache_root.join(cache);
            std::fs::create_dir_all(&target)?;
            let link = tree.join(cache);
            if let Some(parent) = link.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let _ = std::fs::remove_dir_all(&link);
            std::os::unix::fs::symlink(&target, &link)?;
            shared.push(target);
        }
        Ok(shared)
    }
}

/// The last [`TAIL_BYTES`] of `output`, cut at a character boundary.
fn tail(output: &str) -> String {
    if output.len() <= TAIL_BYTES {
        return output.to_owned();
    }
    let mut start = output.len() - TAIL_BYTES;
    while !output.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &output[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_end_of_long_output() {
        assert_eq!(tail("short"), "short");
        let long = format!("{}END", "é".repeat(TAIL_BYTES));
        let cut = tail(&long);
        assert!(cut.ends_with("END") && cut.starts_with('…'));
        assert!(cut.len() <= TAIL_BYTES + '…'.len_utf8());
    }
}
