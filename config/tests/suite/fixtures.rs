//! A temporary project with a home directory beside it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use muster_config::project::ProjectRoot;
use muster_config::settings::{CliOverrides, Settings, SettingsInputs};
use muster_config::{ConfigError, Loaded};

pub struct Project {
    _tmp: tempfile::TempDir,
    pub root: PathBuf,
    pub home: PathBuf,
    pub env: BTreeMap<String, String>,
    pub cli: CliOverrides,
    /// Trusted unless a test says otherwise: these tests are about what the files say.
    pub trust: muster_config::TrustDecision,
}

impl Project {
    pub fn new() -> Project {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("project");
        let home = tmp.path().join("home");
        std::fs::create_dir_all(root.join(".muster")).unwrap();
        std::fs::create_dir_all(home.join(".muster")).unwrap();
        Project {
            _tmp: tmp,
            root,
            home,
            env: BTreeMap::new(),
            cli: CliOverrides::new(),
            trust: muster_config::TrustDecision::trusted_by_caller(),
        }
    }

    /// Writes `text` to `relative` under the project root.
    pub fn write(&self, relative: &str, text: &str) -> PathBuf {
        let path = self.root.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }

    pub fn write_home(&self, relative: &str, text: &str) -> PathBuf {
        let path = self.home.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }

    pub fn env(mut self, name: &str, value: &str) -> Project {
        self.env.insert(name.to_string(), value.to_string());
        self
    }

    pub fn project_root(&self) -> ProjectRoot {
        ProjectRoot::at(&self.root)
    }

    pub fn load(&self) -> Result<Loaded<Settings>, ConfigError> {
        let root = self.project_root();
        Settings::load(&SettingsInputs {
            project_root: &root,
            home_dir: Some(&self.home),
            env: &self.env,
            cli: &self.cli,
            trust: &self.trust,
            snapshot: None,
        })
    }

    pub fn settings(&self) -> Settings {
        match self.load() {
            Ok(loaded) => loaded.value,
            Err(error) => panic!("settings failed to load:\n{error}"),
        }
    }

    /// The error message of a load that must fail.
    pub fn error(&self) -> String {
        match self.load() {
            Ok(_) => panic!("settings loaded, but an error was expected"),
            Err(error) => error.to_string(),
        }
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.root.join(relative)
    }
}

pub fn display(path: &Path) -> String {
    path.display().to_string()
}
