//! Project trust, one definition (DESIGN, "Wave 3 → Project trust").
//!
//! What a repository controls that would run code or widen access takes effect only in a
//! project the user trusted. Trust is recorded outside every repository, in the user's config
//! directory (`$XDG_CONFIG_HOME/muster/trust.toml`, else `~/.config/muster/trust.toml`), keyed
//! by the project root's canonical path and a SHA-256 over every repository-controlled file
//! that can widen access or run code ([`covered_files`]). A change to any of them makes the
//! project untrusted until it is trusted again. `.muster/project-id` is never part of the key:
//! it is committed on purpose, so a clone carries it.
//!
//! For CI, one environment variable ([`TRUST_HASH_VAR`], read by `main`, not a settings key)
//! may carry the hash `muster trust --print-hash` printed; a wrong value is untrusted.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::diagnostic::{ConfigError, Diagnostic};
use crate::project::ProjectRoot;

/// The environment variable a CI job sets to the hash `muster trust --print-hash` printed.
pub const TRUST_HASH_VAR: &str = "MUSTER_TRUST_PROJECT_HASH";

/// The trust file's name in muster's config directory.
pub const TRUST_FILE_NAME: &str = "trust.toml";

/// The command that trusts a project, as messages name it.
pub const TRUST_COMMAND: &str = "muster trust";

/// Whether a project's own widening settings apply, the hash it was decided on, and why.
/// A run stores it with its launch options: a resume, a fork and a worker use it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustDecision {
    pub trusted: bool,
    /// The SHA-256 (hex) over the covered files, as they were when this was decided.
    pub hash: String,
    /// Why, in a sentence (`trusted with muster trust`, `changed since trusted: …`).
    pub why: String,
    /// The project's MCP servers as `muster trust` pinned them (name → [`crate::mcp::McpServerConfig::pin`]);
    /// `None` when trust came from the covered files' hash alone (CI's variable, a trust
    /// recorded before servers were pinned), which covers `.mcp.json` but not `~/.claude.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_servers: Option<BTreeMap<String, String>>,
}

impl TrustDecision {
    /// A decision that trusts the project: for tests, and for tools that load settings of a project
    /// they wrote themselves.
    pub fn trusted_by_caller() -> TrustDecision {
        TrustDecision {
            trusted: true,
            hash: String::new(),
            why: "trusted by the caller".to_owned(),
            mcp_servers: None,
        }
    }
}

/// One file trust covers: its path relative to the root (as written in the trust file) and
/// where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoveredFile {
    pub relative: String,
    pub path: PathBuf,
}

/// Every repository-controlled file that can widen access or run code, present or not:
/// `.muster/settings.toml`, `.muster/settings.local.toml` while git tracks it (committed, it is
/// the project's, not the user's), `.mcp.json`, `.claude/settings.json`,
/// `.claude/settings.local.json` while git tracks it, every file under `.claude/hooks/` and
/// every file inside the project a hook or plan reviewer command of those two names,
/// `muster.team.toml` when it names a `policy:FILE` or `hook:NAME` approver, and each policy file inside the
/// project that a project-level `approver` or that team file names.
pub fn covered_files(root: &Path) -> Vec<CoveredFile> {
    let mut files = Vec::new();
    let mut add = |relative: &str| {
        files.push(CoveredFile {
            relative: relative.to_owned(),
            path: root.join(relative),
        });
    };
    add(".muster/settings.toml");
    let local = root.join(".muster/settings.local.toml");
    if local.exists() && crate::settings::git_tracks(&local) {
        add(".muster/settings.local.toml");
    }
    add(crate::mcp::MCP_FILE);
    add(".claude/settings.json");
    let claude_local = root.join(".claude/settings.local.json");
    if claude_local.exists() && crate::settings::git_tracks(&claude_local) {
        add(".claude/settings.local.json");
    }
    let mut hooks = Vec::new();
    walk_files(&root.join(".claude/hooks"), &mut hooks);
    hooks.sort();
    for hook in hooks {
        if let Ok(relative) = hook.strip_prefix(root) {
            files.push(CoveredFile {
                relative: relative.display().to_string(),
                path: hook.clone(),
            });
        }
    }
    // Every file inside the project a project hook's command names (a script outside
    // `.claude/hooks/` included).
    let claude_files: Vec<PathBuf> = files
        .iter()
        .filter(|file| file.relative.starts_with(".claude/settings"))
        .map(|file| file.path.clone())
        .collect();
    for settings in claude_files {
        let Ok(text) = std::fs::read_to_string(&settings) else {
            continue;
        };
        for command in crate::hooks::commands_in(&text) {
            for named in crate::hooks::named_files(&command, root) {
                if !files.iter().any(|file| file.relative == named) {
                    files.push(CoveredFile {
                        path: root.join(&named),
                        relative: named,
                    });
                }
            }
        }
    }
    let settings_files: Vec<PathBuf> = files
        .iter()
        .filter(|file| file.relative.starts_with(".muster/settings"))
        .map(|file| file.path.clone())
        .collect();
    let mut policies: Vec<String> = settings_files
        .iter()
        .filter_map(|settings| named_policy(root, settings))
        .collect();
    // The team file, when it names a policy or hook approver (what it would widen), and those
    // policies (a hook's files are covered with the settings file that defines it).
    let team = root.join(crate::team::TEAM_FILE_NAME);
    if let Ok(text) = std::fs::read_to_string(&team) {
        let named = crate::team::TeamFile::named_policies(&text);
        if !named.is_empty() || !crate::team::TeamFile::named_hooks(&text).is_empty() {
            files.push(CoveredFile {
                relative: crate::team::TEAM_FILE_NAME.to_owned(),
                path: team,
            });
        }
        policies.extend(named.iter().filter_map(|file| inside_root(root, file)));
    }
    for policy in policies {
        if !files.iter().any(|file| file.relative == policy) {
            files.push(CoveredFile {
                path: root.join(&policy),
                relative: policy,
            });
        }
    }
    files
}

/// `file` (relative to `root`, or absolute) relative to `root`, when it is inside it.
fn inside_root(root: &Path, file: &str) -> Option<String> {
    let path = crate::settings::normalize(&root.join(file));
    let relative = path.strip_prefix(crate::settings::normalize(root)).ok()?;
    Some(relative.display().to_string())
}

/// The policy file a settings file's `approver = "policy:FILE"` names, relative to `root`,
/// when it is inside the project.
fn named_policy(root: &Path, settings: &Path) -> Option<String> {
    let text = std::fs::read_to_string(settings).ok()?;
    let table: toml::Table = toml::from_str(&text).ok()?;
    let approver = table.get("approver")?.as_str()?;
    inside_root(root, approver.strip_prefix("policy:")?)
}

/// Every regular file under `dir` (symbolic links to files count; linked directories are not
/// followed).
fn walk_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            walk_files(&path, found);
        } else if kind.is_file() || (kind.is_symlink() && path.is_file()) {
            found.push(path);
        }
    }
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The covered files that exist, each with the SHA-256 of its content.
pub fn file_hashes(root: &Path) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut hashes = BTreeMap::new();
    for file in covered_files(root) {
        match std::fs::read(&file.path) {
            Ok(bytes) => {
                hashes.insert(file.relative, sha256_hex(&bytes));
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(ConfigError::Io {
                    path: file.path,
                    source,
                });
            }
        }
    }
    Ok(hashes)
}

/// The project's trust hash: one SHA-256 over the covered files' names and hashes (a file
/// that appears, goes or changes changes it).
pub fn project_hash(hashes: &BTreeMap<String, String>) -> String {
    let mut text = String::from("muster-trust-v1\n");
    for (relative, hash) in hashes {
        text.push_str(&format!("{relative}\0{hash}\n"));
    }
    sha256_hex(text.as_bytes())
}

/// The root as trust keys it: its canonical path (the path as given when it cannot be
/// resolved).
pub fn canonical_root(root: &Path) -> PathBuf {
    std::fs::canonicalize(root).unwrap_or_else(|_| crate::settings::normalize(root))
}

/// muster's config directory: `$XDG_CONFIG_HOME/muster` when that is an absolute path, else
/// `~/.config/muster`.
pub fn config_dir(env: &BTreeMap<String, String>, home: Option<&Path>) -> Option<PathBuf> {
    match env.get("XDG_CONFIG_HOME").map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => Some(dir.join("muster")),
        _ => home.map(|home| home.join(".config").join("muster")),
    }
}

/// One trusted project in the trust file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustEntry {
    /// The project root's canonical path.
    pub root: PathBuf,
    /// The project hash it was trusted with.
    pub hash: String,
    /// When, in seconds since the Unix epoch.
    pub trusted_at: u64,
    /// Each covered file's SHA-256 then, to say which one changed since.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// Each project MCP server's pin then (absent in entries recorded before servers were
    /// pinned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_servers: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct TrustFileContents {
    #[serde(default)]
    project: Vec<TrustEntry>,
}

/// The user's trust file (see the module's comment).
#[derive(Debug, Clone)]
pub struct TrustStore {
    pub path: PathBuf,
}

impl TrustStore {
    /// The trust file in `config_dir`.
    pub fn in_dir(config_dir: &Path) -> TrustStore {
        TrustStore {
            path: config_dir.join(TRUST_FILE_NAME),
        }
    }

    /// The recorded projects (none when the file does not exist).
    pub fn entries(&self) -> Result<Vec<TrustEntry>, ConfigError> {
        let Some(text) = crate::settings::read_optional(&self.path)? else {
            return Ok(Vec::new());
        };
        let contents: TrustFileContents = toml::from_str(&text).map_err(|error| {
            ConfigError::invalid(
                Diagnostic::new(format!(
                    "the trust file is not valid ({}); fix it, or delete it and run `{TRUST_COMMAND}` again in each project you trust",
                    error.message()
                ))
                .in_source(self.path.display().to_string()),
            )
        })?;
        Ok(contents.project)
    }

    /// Applies `change` to the entries under a lock, then writes the file whole (a new file
    /// of mode 0600 renamed over the old one, so a reader never sees half of it).
    pub fn update(&self, change: impl FnOnce(&mut Vec<TrustEntry>)) -> Result<(), ConfigError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ConfigError::Io { path, source }
        };
        let dir = self.path.parent().unwrap_or(Path::new("."));
        create_private_dir(dir).map_err(io(dir))?;
        let lock_path = dir.join("trust.lock");
        let mut options = std::fs::OpenOptions::new();
        options.create(true).truncate(false).write(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let lock = options.open(&lock_path).map_err(io(&lock_path))?;
        lock.lock().map_err(io(&lock_path))?;
        let mut entries = self.entries()?;
        change(&mut entries);
        let text = format!(
            "# Projects trusted with `{TRUST_COMMAND}` (written by muster; `{TRUST_COMMAND} \
             --revoke` removes one).\n{}",
            toml::to_string(&TrustFileContents { project: entries }).map_err(|error| {
                ConfigError::invalid(Diagnostic::new(format!(
                    "cannot write the trust file: {error}"
                )))
            })?
        );
        let draft = dir.join(format!(".{TRUST_FILE_NAME}.{}.tmp", std::process::id()));
        let written = write_private(&draft, text.as_bytes())
            .and_then(|()| std::fs::rename(&draft, &self.path));
        if written.is_err() {
            let _ = std::fs::remove_file(&draft);
        }
        written.map_err(io(&self.path))?;
        drop(lock);
        Ok(())
    }
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// What decides a project's trust: its root, the user's config directory, and the CI
/// variable's value when it is set (and applies: never on a worker).
#[derive(Debug, Clone, Copy)]
pub struct TrustInputs<'a> {
    pub root: &'a ProjectRoot,
    pub config_dir: Option<&'a Path>,
    pub ci_hash: Option<&'a str>,
}

/// Decides whether the project at `inputs.root` is trusted as it is now.
pub fn decide(inputs: &TrustInputs<'_>) -> Result<TrustDecision, ConfigError> {
    let root = inputs.root.path();
    let hashes = file_hashes(root)?;
    let hash = project_hash(&hashes);
    let untrusted = |why: String| TrustDecision {
        trusted: false,
        hash: hash.clone(),
        why,
        mcp_servers: None,
    };
    if let Some(given) = inputs.ci_hash {
        let given = given.trim();
        return Ok(if given == hash {
            TrustDecision {
                trusted: true,
                hash: hash.clone(),
                why: format!("{TRUST_HASH_VAR} matches this checkout"),
                mcp_servers: None,
            }
        } else {
            untrusted(format!(
                "{TRUST_HASH_VAR} is set but is not this checkout's hash ({hash}): the files \
                 trust covers differ from the ones reviewed, or the value is wrong; review \
                 them and set it to what `{TRUST_COMMAND} --print-hash` prints"
            ))
        });
    }
    let Some(config_dir) = inputs.config_dir else {
        return Ok(untrusted(
            "no home directory or XDG_CONFIG_HOME to keep trust in".to_owned(),
        ));
    };
    let canonical = canonical_root(root);
    let store = TrustStore::in_dir(config_dir);
    if inside(&store.path, &canonical) {
        return Ok(untrusted(format!(
            "the trust file {} is inside the project, where the repository could write it; \
             set XDG_CONFIG_HOME to a directory outside it",
            store.path.display()
        )));
    }
    let entries = store.entries()?;
    let Some(entry) = entries.iter().find(|entry| entry.root == canonical) else {
        return Ok(untrusted(format!("no `{TRUST_COMMAND}` for it")));
    };
    if entry.hash == hash {
        return Ok(TrustDecision {
            trusted: true,
            hash,
            why: format!("trusted with `{TRUST_COMMAND}` ({})", store.path.display()),
            mcp_servers: entry.mcp_servers.clone(),
        });
    }
    let changed = changed_files(&entry.files, &hashes);
    Ok(untrusted(format!(
        "changed since you trusted it ({})",
        if changed.is_empty() {
            "the files trust covers differ".to_owned()
        } else {
            changed.join(", ")
        }
    )))
}

/// The covered files added, removed or changed between `then` and `now`.
pub fn changed_files(
    then: &BTreeMap<String, String>,
    now: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut names: Vec<&String> = then.keys().chain(now.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter(|name| then.get(*name) != now.get(*name))
        .map(|name| match (then.get(name), now.get(name)) {
            (None, _) => format!("{name} added"),
            (_, None) => format!("{name} removed"),
            _ => format!("{name} changed"),
        })
        .collect()
}

/// Whether `path` is `dir` or inside it (both made absolute and canonical where they exist).
fn inside(path: &Path, dir: &Path) -> bool {
    let existing = path
        .ancestors()
        .find_map(|ancestor| {
            std::fs::canonicalize(ancestor)
                .ok()
                .map(|canonical| (ancestor, canonical))
        })
        .map(|(ancestor, canonical)| match path.strip_prefix(ancestor) {
            Ok(rest) => canonical.join(rest),
            Err(_) => path.to_path_buf(),
        })
        .unwrap_or_else(|| path.to_path_buf());
    existing.starts_with(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decide_in(root: &Path, config: &Path, ci: Option<&str>) -> TrustDecision {
        decide(&TrustInputs {
            root: &ProjectRoot::at(root),
            config_dir: Some(config),
            ci_hash: ci,
        })
        .unwrap()
    }

    #[test]
    fn trust_is_keyed_by_path_and_content_and_lives_outside_the_project() {
        let project = tempfile::tempdir().unwrap();
        let config = tempfile::tempdir().unwrap();
        let root = project.path();
        std::fs::create_dir_all(root.join(".muster")).unwrap();
        std::fs::write(
            root.join(".muster/settings.toml"),
            "permission_mode = \"plan\"\n",
        )
        .unwrap();
        std::fs::write(root.join(".muster/project-id"), "abc\n").unwrap();
        let before = decide_in(root, config.path(), None);
        assert!(!before.trusted);
        assert_eq!(before.why, "no `muster trust` for it");
        let hashes = file_hashes(root).unwrap();
        let store = TrustStore::in_dir(config.path());
        store
            .update(|entries| {
                entries.push(TrustEntry {
                    root: canonical_root(root),
                    hash: project_hash(&hashes),
                    trusted_at: 0,
                    files: hashes.clone(),
                    mcp_servers: None,
                });
            })
            .unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&store.path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(decide_in(root, config.path(), None).trusted);
        // The project id is not covered; a settings change is.
        std::fs::write(root.join(".muster/project-id"), "other\n").unwrap();
        assert!(decide_in(root, config.path(), None).trusted);
        std::fs::write(
            root.join(".muster/settings.toml"),
            "permission_mode = \"auto\"\n",
        )
        .unwrap();
        let changed = decide_in(root, config.path(), None);
        assert!(!changed.trusted);
        assert!(
            changed.why.contains(".muster/settings.toml changed"),
            "{}",
            changed.why
        );
        // A hook script appearing changes it too.
        let hash = changed.hash.clone();
        std::fs::create_dir_all(root.join(".claude/hooks/sub")).unwrap();
        std::fs::write(root.join(".claude/hooks/sub/guard.sh"), "exit 0\n").unwrap();
        assert_ne!(decide_in(root, config.path(), None).hash, hash);
        // A trust file inside the project is never read.
        let inside = decide_in(root, &root.join(".config/muster"), None);
        assert!(inside.why.contains("inside the project"), "{}", inside.why);
    }

    #[test]
    fn a_file_a_project_hook_names_is_covered() {
        let project = tempfile::tempdir().unwrap();
        let root = project.path();
        std::fs::create_dir_all(root.join(".claude")).unwrap();
        std::fs::create_dir_all(root.join("scripts")).unwrap();
        std::fs::write(root.join("scripts/guard.sh"), "exit 0\n").unwrap();
        std::fs::write(
            root.join(".claude/settings.json"),
            r#"{"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
                {"type": "command", "command": "bash \"$CLAUDE_PROJECT_DIR\"/scripts/guard.sh"}]}]}}"#,
        )
        .unwrap();
        let names: Vec<String> = covered_files(root)
            .into_iter()
            .map(|file| file.relative)
            .collect();
        assert!(names.contains(&"scripts/guard.sh".to_owned()), "{names:?}");
        let before = project_hash(&file_hashes(root).unwrap());
        std::fs::write(root.join("scripts/guard.sh"), "exit 1\n").unwrap();
        assert_ne!(project_hash(&file_hashes(root).unwrap()), before);
    }

    #[test]
    fn the_ci_variable_must_carry_the_hash() {
        let project = tempfile::tempdir().unwrap();
        let config = tempfile::tempdir().unwrap();
        std::fs::write(project.path().join(".mcp.json"), "{}").unwrap();
        let hash = decide_in(project.path(), config.path(), None).hash;
        assert!(decide_in(project.path(), config.path(), Some(&hash)).trusted);
        let wrong = decide_in(project.path(), config.path(), Some("abc"));
        assert!(!wrong.trusted);
        assert!(wrong.why.contains(TRUST_HASH_VAR), "{}", wrong.why);
    }

    #[test]
    fn a_policy_a_project_approver_names_is_covered() {
        let project = tempfile::tempdir().unwrap();
        let root = project.path();
        std::fs::create_dir_all(root.join(".muster")).unwrap();
        std::fs::write(
            root.join(".muster/settings.toml"),
            "approver = \"policy:policies/p.toml\"\n",
        )
        .unwrap();
        let names: Vec<String> = covered_files(root)
            .into_iter()
            .map(|file| file.relative)
            .collect();
        assert!(names.contains(&"policies/p.toml".to_owned()), "{names:?}");
        assert!(!names.contains(&"muster.team.toml".to_owned()), "{names:?}");
        std::fs::write(
            root.join("muster.team.toml"),
            "name = \"t\"\n[[teammates]]\nname = \"a\"\napprover = \"policy:team.toml\"\n",
        )
        .unwrap();
        let names: Vec<String> = covered_files(root)
            .into_iter()
            .map(|file| file.relative)
            .collect();
        assert!(names.contains(&"muster.team.toml".to_owned()), "{names:?}");
        assert!(names.contains(&"team.toml".to_owned()), "{names:?}");
    }

    #[test]
    fn a_team_file_naming_a_hook_approver_and_the_reviewers_script_are_covered() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join(".claude")).unwrap();
        std::fs::write(root.join("review.sh"), "exit 0").unwrap();
        std::fs::write(
            root.join(".claude/settings.json"),
            r#"{"planReviewers": {"strict": {"type": "command", "command": "sh review.sh"}}}"#,
        )
        .unwrap();
        let team = "name = \"t\"\n[[teammates]]\nname = \"a\"\napprover = \"hook:strict\"\n";
        std::fs::write(root.join("muster.team.toml"), team).unwrap();
        let names: Vec<String> = covered_files(root)
            .into_iter()
            .map(|file| file.relative)
            .collect();
        assert!(names.contains(&"review.sh".to_owned()), "{names:?}");
        assert!(names.contains(&"muster.team.toml".to_owned()), "{names:?}");
    }
}
