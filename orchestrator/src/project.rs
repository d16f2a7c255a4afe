//! The project a command works in: its root, its store and its runs directory.

use std::path::PathBuf;
use std::sync::Arc;

use muster_config::project::ProjectRoot;
use muster_mailbox::{SqliteStore, StoreOptions};

use crate::cli::GlobalArgs;

/// Where a command's project and store live.
#[derive(Debug, Clone)]
pub struct Project {
    pub root: ProjectRoot,
    pub store_path: PathBuf,
}

impl Project {
    /// Finds the project from the current directory and the global flags. Only the CLI calls
    /// this: it reads the process's current directory.
    pub fn locate(global: &GlobalArgs) -> anyhow::Result<Project> {
        let cwd = std::env::current_dir()?;
        let root = ProjectRoot::discover(&cwd, global.directory.as_deref());
        let store_path = match &global.store {
            Some(path) if path.is_absolute() => path.clone(),
            Some(path) => cwd.join(path),
            None => root.default_store_path(),
        };
        Ok(Project { root, store_path })
    }

    /// `.muster/runs/`, where live runs keep their lock and socket.
    pub fn runs_dir(&self) -> PathBuf {
        self.root.runs_dir()
    }

    /// Opens the store, creating it when absent.
    pub fn open_store(&self) -> Result<Arc<SqliteStore>, muster_mailbox::StoreError> {
        SqliteStore::open(&self.store_path, StoreOptions::default()).map(Arc::new)
    }
}
