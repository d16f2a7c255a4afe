//! The project a command works in: its root, its settings, its store and its runs directory.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use muster_config::project::ProjectRoot;
use muster_config::settings::{CliOverrides, MailboxSync, Settings};
use muster_config::store_url::StoreLocation;
use muster_mailbox::{
    MailboxStore, PostgresStore, SqliteStore, StoreError, StoreOptions, SyncMode,
};

use crate::loading::{load_settings, print_warnings, project_root};
use crate::process::ProcessGiven;

/// The global flags (`-C DIR`, `--store`, `--log-level`) as the commands and the run layer
/// take them: the clap type in `cli/` turns into this, so no clap type leaves `cli/`.
#[derive(Debug, Clone)]
pub struct Globals {
    pub directory: Option<PathBuf>,
    pub store: Option<PathBuf>,
    pub log_level: String,
    /// What the process was given, read once in `main`.
    pub process: ProcessGiven,
}

/// Where a command's project and store live, and the settings that apply.
#[derive(Debug, Clone)]
pub struct Project {
    pub root: ProjectRoot,
    pub settings: Settings,
    /// What the process was given: its environment, its terminals, its worker's fence on
    /// every store opened here, its run log.
    pub process: ProcessGiven,
}

impl Project {
    /// Finds the project from the current directory and the global flags and loads its
    /// settings (warnings go to stderr; a configuration error exits 2). Only the CLI calls
    /// this: it reads the process's current directory and environment.
    pub fn locate(global: &Globals) -> anyhow::Result<Project> {
        Project::load(global, project_root(global)?, CliOverrides::new())
    }

    /// The project at `root` with its settings, `cli` as their command-line layer (warnings
    /// printed).
    pub fn load(global: &Globals, root: ProjectRoot, cli: CliOverrides) -> anyhow::Result<Project> {
        let loaded = load_settings(global, &root, cli)?;
        Ok(Project::from_loaded(global, root, loaded))
    }

    /// The project of a stored run: its settings with the run's launch options as their
    /// command-line layer, gated by the trust decision the run stored at its start (a run
    /// stored before it kept one is decided now, as it was then).
    pub fn load_for_run(
        global: &Globals,
        root: ProjectRoot,
        launch: &crate::launch::RunLaunch,
    ) -> anyhow::Result<Project> {
        let (trust, warning) = match &launch.trust {
            Some(stored) => stored.decision_now(root.path())?,
            None => (crate::loading::decide_trust(global, &root)?, None),
        };
        // The settings files as the run read them at its start, never as an agent may have
        // left them since (a run stored before they were kept reads the files).
        let loaded = crate::loading::load_settings_trusting(
            global,
            &root,
            launch.overrides(),
            &trust,
            launch.settings_files.as_ref(),
        )?;
        refuse_dropping_hooks(launch, &trust, &loaded.value)?;
        if let Some(warning) = warning {
            eprintln!("muster: warning: {warning}");
        }
        let mut project = Project::from_loaded(global, root, loaded);
        project.price_as_stored(launch);
        project.print_trust_notice();
        Ok(project)
    }

    /// Prices models as the run's start did (its stored [`crate::launch::PriceSnapshot`]), so
    /// a resume or a worker never prices the run's spend with other settings.
    pub fn price_as_stored(&mut self, launch: &crate::launch::RunLaunch) {
        if let Some(prices) = &launch.prices {
            prices.apply(&mut self.settings.models);
        }
    }

    /// Prints the one line of a run in an untrusted project: what trust skipped, and the
    /// command that trusts the project (nothing when nothing was skipped).
    pub fn print_trust_notice(&self) {
        self.print_trust_notice_with(&[]);
    }

    /// [`Self::print_trust_notice`], with what trust skipped of a team file (`key = value`).
    pub fn print_trust_notice_with(&self, team_skipped: &[String]) {
        let (servers, _) =
            crate::mcp::load_servers(self.root.path(), &self.settings, &self.process);
        let mcp_skipped = servers.servers.iter().filter(|s| s.untrusted).count();
        if let Some(line) = crate::loading::trust_notice(&self.settings, mcp_skipped, team_skipped)
        {
            eprintln!("{line}");
        }
    }

    fn from_loaded(
        global: &Globals,
        root: ProjectRoot,
        loaded: muster_config::Loaded<Settings>,
    ) -> Project {
        print_warnings(&loaded.warnings);
        Project {
            root,
            settings: loaded.value,
            process: global.process.clone(),
        }
    }

    /// The store (`store`, alias `store_path`; `--store` overrides it): a file or a URL.
    pub fn store_location(&self) -> &StoreLocation {
        &self.settings.store.value
    }

    /// Where plan files live (`plans_directory`, inside the project root).
    pub fn plans_dir(&self) -> &PathBuf {
        &self.settings.plans_directory.value
    }

    /// The project's identity, `.muster/project-id` (a UUID made the first time a run asks):
    /// what tells this project's runs from others' in a store several projects share. It stays
    /// with the project when it moves or is cloned with its `.muster/`, not with a path.
    pub fn project_id(&self) -> anyhow::Result<String> {
        project_id_in(&self.root.muster_dir())
    }

    /// This project's id if it has one already (reading commands never create it).
    pub fn existing_project_id(&self) -> Option<String> {
        std::fs::read_to_string(self.root.muster_dir().join("project-id"))
            .ok()
            .map(|text| text.trim().to_owned())
            .filter(|id| !id.is_empty())
    }

    /// `.muster/runs/`, where live runs keep their lock and socket.
    pub fn runs_dir(&self) -> PathBuf {
        self.root.runs_dir()
    }

    /// The store options the `[mailbox]` settings give; every SQLite commit of this process
    /// pokes an open `muster serve` of the project (see [`crate::serve::watch`]).
    pub fn store_options(&self) -> StoreOptions {
        let mailbox = &self.settings.mailbox;
        StoreOptions {
            after_commit: Some(crate::serve::watch::commit_hook(&self.root.muster_dir())),
            sync: match mailbox.sync.value {
                MailboxSync::Full => SyncMode::Full,
                MailboxSync::Normal => SyncMode::Normal,
            },
            busy_timeout: Duration::from_millis(mailbox.busy_timeout_ms.value),
            max_body_bytes: usize::try_from(mailbox.max_body_bytes.value).unwrap_or(usize::MAX),
            announce_changes: true,
            gather_released: true,
            pipelined_sync: mailbox.pipelined_sync.value,
        }
    }

    /// Opens the store, creating it (and `.muster/.gitignore`) when absent. Every command
    /// holds it as `Arc<dyn MailboxStore>`: the backend is chosen here, at run time.
    pub async fn open_store(&self) -> Result<Arc<dyn MailboxStore>, StoreError> {
        self.open_store_with(false).await
    }

    /// [`Self::open_store`]; `announce_wakes`: on PostgreSQL, each write also wakes the
    /// run's agents in other processes (a team with teammates on workers, and those
    /// teammates' own processes).
    pub async fn open_store_with(
        &self,
        announce_wakes: bool,
    ) -> Result<Arc<dyn MailboxStore>, StoreError> {
        self.ensure_muster_gitignore();
        match self.store_location() {
            StoreLocation::File(path) => {
                let store = SqliteStore::open(path, self.store_options())?;
                Ok(match &self.process.work_fence {
                    Some(fence) => Arc::new(store.fenced(fence.clone())),
                    None => Arc::new(store),
                })
            }
            StoreLocation::Postgres(url) => {
                let mut store = PostgresStore::open(url, self.store_options()).await?;
                if announce_wakes {
                    store = store.announcing();
                }
                Ok(match &self.process.work_fence {
                    Some(fence) => Arc::new(store.fenced(fence.clone())),
                    None => Arc::new(store),
                })
            }
        }
    }

    /// Opens the store if it exists; reading commands never create one (a server's store
    /// always exists: opening it migrates an empty schema, which holds no runs).
    pub async fn open_existing_store(&self) -> Result<Option<Arc<dyn MailboxStore>>, StoreError> {
        match self.store_location() {
            StoreLocation::File(path) if !path.exists() => Ok(None),
            _ => self.open_store().await.map(Some),
        }
    }

    /// `.muster/.gitignore` keeps the store, local settings, run files, logs, plans and
    /// teammates' worktrees out of git, never `settings.toml` or `agents/`. Written once; a
    /// user's own file is left alone except that it gains `worktrees/` (a worktree inside the
    /// user's tree would otherwise show in their `git status` as a nested repository).
    fn ensure_muster_gitignore(&self) {
        let dir = self.root.muster_dir();
        if std::fs::create_dir_all(&dir).is_err() {
            return;
        }
        let path = dir.join(".gitignore");
        let contents = "muster.db*\nsettings.local.toml\nruns/\nlogs/\nplans/\nworktrees/\n";
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            let _ = std::io::Write::write_all(&mut file, contents.as_bytes());
            return;
        }
        let Ok(existing) = std::fs::read_to_string(&path) else {
            return;
        };
        let ignored = existing
            .lines()
            .any(|line| matches!(line.trim(), "worktrees/" | "worktrees" | "/worktrees/"));
        if !ignored && let Ok(mut file) = std::fs::OpenOptions::new().append(true).open(&path) {
            let separator = if existing.is_empty() || existing.ends_with('\n') {
                ""
            } else {
                "\n"
            };
            let _ =
                std::io::Write::write_all(&mut file, format!("{separator}worktrees/\n").as_bytes());
        }
    }
}

/// The project id in `muster_dir` (see [`Project::project_id`]), made when there is none.
fn project_id_in(muster_dir: &std::path::Path) -> anyhow::Result<String> {
    let path = muster_dir.join("project-id");
    let read = |path: &std::path::Path| -> anyhow::Result<Option<String>> {
        match std::fs::read_to_string(path) {
            Ok(text) if !text.trim().is_empty() => Ok(Some(text.trim().to_owned())),
            Ok(_) => Ok(None),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(anyhow::anyhow!("cannot read {}: {error}", path.display())),
        }
    };
    if let Some(id) = read(&path)? {
        return Ok(id);
    }
    std::fs::create_dir_all(muster_dir)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", muster_dir.display()))?;
    let id = uuid::Uuid::now_v7().to_string();
    // Written whole under a private name, then linked into place: a link never replaces
    // an existing file, so two first runs at once agree on whichever landed first, and a
    // reader never sees a file half written.
    let draft = muster_dir.join(format!("project-id.{}.tmp", uuid::Uuid::now_v7()));
    let written = std::fs::File::create(&draft).and_then(|mut file| {
        std::io::Write::write_all(&mut file, format!("{id}\n").as_bytes())?;
        file.sync_all()
    });
    let linked = written.and_then(|()| std::fs::hard_link(&draft, &path));
    let _ = std::fs::remove_file(&draft);
    match linked {
        Ok(()) => Ok(id),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
            read(&path)?.ok_or_else(|| anyhow::anyhow!("{} is empty; delete it", path.display()))
        }
        Err(error) => Err(anyhow::anyhow!("cannot write {}: {error}", path.display())),
    }
}

/// Which project's runs a command looks at: this one's (its id, or `""` when it has none yet,
/// which matches only runs from before runs carried a project), or every project's with
/// `--all-projects` (`None`).
pub fn project_scope(project: &Project, all_projects: bool) -> Option<String> {
    if all_projects {
        None
    } else {
        Some(project.existing_project_id().unwrap_or_default())
    }
}

/// A resume never runs without project hooks that ran when the run started: hooks only
/// narrow, so dropping them (trust no longer holds because a file it covers changed, perhaps
/// a hook script an agent edited) would allow what they refused. It stops with exit 2 instead,
/// naming what changed and what to do.
fn refuse_dropping_hooks(
    launch: &crate::launch::RunLaunch,
    trust_now: &muster_config::trust::TrustDecision,
    settings: &Settings,
) -> anyhow::Result<()> {
    let trusted_then = launch
        .trust
        .as_ref()
        .is_some_and(|stored| stored.decision.trusted);
    if !trusted_then || trust_now.trusted {
        return Ok(());
    }
    let dropped: Vec<String> = settings
        .skipped
        .iter()
        .filter(|skipped| skipped.key.starts_with("hooks."))
        .map(|skipped| format!("{} ({})", skipped.key, skipped.origin))
        .collect();
    if dropped.is_empty() {
        return Ok(());
    }
    Err(crate::exit::ExitError::new(
        crate::exit::Exit::Usage,
        format!(
            // `why` reads "trusted when the run started, but …".
            "cannot resume: the project's hooks ran as {}; \
             resumed, the run would go on without {} and allow what they refuse. Put the files \
             trust covers back as they were (`.claude/hooks/`, the files hook commands name; \
             `git status` shows what changed), then resume again",
            trust_now.why,
            dropped.join(", ")
        ),
    )
    .into())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test assertions fail loudly")]

    /// Eight first runs at once (a batch's lines) agree on one id, and none reads a file half
    /// written.
    #[test]
    fn concurrent_first_runs_agree_on_one_project_id() {
        let dir = tempfile::tempdir().unwrap();
        let muster_dir = dir.path().join(".muster");
        let ids: Vec<String> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|_| scope.spawn(|| super::project_id_in(&muster_dir).unwrap()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(
            ids.iter().all(|id| id == &ids[0] && !id.is_empty()),
            "{ids:?}"
        );
        let leftovers = std::fs::read_dir(&muster_dir).unwrap().count();
        assert_eq!(leftovers, 1, "only project-id remains");
    }
}
