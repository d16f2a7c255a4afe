//! What the process was given — its working directory, environment, home directory, which of
//! its standard streams are terminals — read once in `main` and passed down in
//! [`crate::project::Globals`], with what the process is for: the worker's fence on every store
//! it opens and the run's log. Nothing below `main` reads these from the process itself (a
//! tidy check holds it), so a command's inputs are what it was handed, and a test can hand it
//! others.

use std::collections::BTreeMap;
use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::sync::Arc;

use muster_mailbox::WorkFence;

use crate::run_log::RunLog;

/// The process's inputs and duties (see the module's comment).
#[derive(Debug, Clone)]
pub struct ProcessGiven {
    /// The working directory, or why it cannot be read (it was removed, say).
    pub current_dir: Result<PathBuf, Arc<std::io::Error>>,
    /// The environment, without variables that are not UTF-8.
    pub env: Arc<BTreeMap<String, String>>,
    /// The user's home directory, when the process has one.
    pub home: Option<PathBuf>,
    pub stdin_is_terminal: bool,
    pub stdout_is_terminal: bool,
    pub stderr_is_terminal: bool,
    /// The work item this process runs for a worker (`muster worker`'s child): every store it
    /// opens is fenced by it, so once another worker takes the item over, each write of this
    /// process is refused inside its transaction.
    pub work_fence: Option<WorkFence>,
    /// The run's `.muster/logs/<run>.jsonl`, once a run is known.
    pub run_log: RunLog,
}

impl ProcessGiven {
    /// Reads what this process was given; `run_log` is the log its tracing layer writes to.
    pub fn capture(run_log: RunLog) -> ProcessGiven {
        ProcessGiven {
            current_dir: std::env::current_dir().map_err(Arc::new),
            env: Arc::new(
                std::env::vars_os()
                    .filter_map(|(name, value)| {
                        Some((name.into_string().ok()?, value.into_string().ok()?))
                    })
                    .collect(),
            ),
            home: std::env::home_dir(),
            stdin_is_terminal: std::io::stdin().is_terminal(),
            stdout_is_terminal: std::io::stdout().is_terminal(),
            stderr_is_terminal: std::io::stderr().is_terminal(),
            work_fence: None,
            run_log,
        }
    }

    /// The home directory whose files muster reads (user settings, `~/.claude/agents`,
    /// `~/.claude/CLAUDE.md`), or `None` when [`crate::loading::NO_USER_FILES`] is set.
    pub fn user_home(&self) -> Option<PathBuf> {
        match self.var(crate::loading::NO_USER_FILES) {
            Some(value) if !value.is_empty() => None,
            _ => self.home.clone(),
        }
    }

    /// muster's config directory (`$XDG_CONFIG_HOME/muster`, else `~/.config/muster`), where
    /// the user's trust file lives.
    pub fn config_dir(&self) -> Option<PathBuf> {
        muster_config::trust::config_dir(&self.env, self.home.as_deref())
    }

    /// The CI trust variable ([`muster_config::trust::TRUST_HASH_VAR`]) when it applies: never
    /// in a worker's process, whose repository the worker cloned.
    pub fn trust_hash_var(&self) -> Option<&str> {
        if self.work_fence.is_some() {
            return None;
        }
        self.var(muster_config::trust::TRUST_HASH_VAR)
    }

    /// A variable of the environment.
    pub fn var(&self, name: &str) -> Option<&str> {
        self.env.get(name).map(String::as_str)
    }
}
