//! Claude Code plugins found on disk: a directory holding `.claude-plugin/plugin.json`, whose
//! `skills/*/SKILL.md` are skills and whose `commands/**/*.md` are slash commands (its
//! `agents/` are read as agent definitions where they lie). muster finds them where users
//! clone plugin repositories: under `.claude/agents/` and `.claude/plugins/`, the project's and
//! the user's. Plugins do not nest.

use std::path::{Path, PathBuf};

use std::collections::BTreeMap;

use crate::diagnostic::{Diagnostic, Loaded};
use crate::project::ProjectRoot;

/// How deep below a search directory a plugin is looked for (`agents/<repo>/plugins/<p>`).
const MAX_DEPTH: usize = 4;

/// Directories never searched: they hold no plugin of the user's.
const SKIPPED_DIRS: &[&str] = &[".git", "node_modules", "target", ".venv"];

/// Where a skill or a command comes from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "name")]
pub enum PluginScope {
    /// The project's `.claude/`.
    Project,
    /// The user's `~/.claude/`.
    User,
    /// The plugin named.
    Plugin(String),
}

impl std::fmt::Display for PluginScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PluginScope::Project => f.write_str("project"),
            PluginScope::User => f.write_str("user"),
            PluginScope::Plugin(name) => write!(f, "plugin {name}"),
        }
    }
}

/// One plugin: its name (plugin.json's `name`, else its directory's) and its directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plugin {
    pub name: String,
    pub root: PathBuf,
}

/// Whether `dir` is a plugin's root.
pub fn is_plugin_root(dir: &Path) -> bool {
    dir.join(".claude-plugin").join("plugin.json").is_file()
}

/// Whether `dir` holds skills or commands, never agent files: the `skills/` or `commands/` of
/// a plugin (one of `plugin_roots`), or of a `.claude/` directory (a cloned repository's own).
pub fn holds_skills_or_commands(dir: &Path, plugin_roots: &[PathBuf]) -> bool {
    let named = dir
        .file_name()
        .is_some_and(|name| name == "skills" || name == "commands");
    let Some(parent) = dir.parent() else {
        return false;
    };
    named
        && (parent.file_name().is_some_and(|name| name == ".claude")
            || plugin_roots.iter().any(|root| root == parent))
}

/// The roots of the plugins under `dir` (for the agent loader, which skips their skills and
/// commands).
pub fn roots_under(dir: &Path) -> Vec<PathBuf> {
    let mut plugins = Vec::new();
    search(dir, 0, &mut plugins, &mut Vec::new());
    plugins.into_iter().map(|plugin| plugin.root).collect()
}

/// The folders named `subdir` that skills or commands come from, lowest precedence first
/// (every plugin's, the project's `.claude/`, the user's `~/.claude/`): a later folder's entry
/// replaces an earlier one's of the same name.
pub fn sources(
    root: &ProjectRoot,
    home: Option<&Path>,
    plugins: &[Plugin],
    subdir: &str,
) -> Vec<(PathBuf, PluginScope)> {
    let mut sources: Vec<(PathBuf, PluginScope)> = plugins
        .iter()
        .map(|plugin| {
            (
                plugin.root.join(subdir),
                PluginScope::Plugin(plugin.name.clone()),
            )
        })
        .collect();
    for (claude, user) in claude_dirs(root, home) {
        let scope = if user {
            PluginScope::User
        } else {
            PluginScope::Project
        };
        sources.push((claude.join(subdir), scope));
    }
    sources
}

/// A skill or a command: what [`by_name`] needs to say which definition replaced which.
pub(crate) trait FolderEntry {
    /// How a warning names it (`skill `x``, `command `/x``).
    fn label(&self) -> String;
    fn name(&self) -> &str;
    fn path(&self) -> &Path;
    fn scope(&self) -> &PluginScope;
}

/// Every skill or command of `sources` ([`sources`], lowest precedence first) by name: `files`
/// lists a folder's files and `read` reads one (`None`: skipped, with its warning); a later
/// one replaces an earlier one of the same name, with a warning naming both.
pub(crate) fn by_name<T: FolderEntry>(
    sources: Vec<(PathBuf, PluginScope)>,
    files: impl Fn(&Path) -> Vec<PathBuf>,
    mut read: impl FnMut(&Path, &Path, &PluginScope, &mut Vec<Diagnostic>) -> Option<T>,
    warnings: &mut Vec<Diagnostic>,
) -> BTreeMap<String, T> {
    let mut entries: BTreeMap<String, T> = BTreeMap::new();
    for (directory, scope) in sources {
        for path in files(&directory) {
            let Some(entry) = read(&directory, &path, &scope, warnings) else {
                continue;
            };
            if let Some(shadowed) = entries.get(entry.name()) {
                warnings.push(
                    Diagnostic::new(format!(
                        "{} is also defined in {} ({}); this one ({}) is used",
                        entry.label(),
                        shadowed.path().display(),
                        shadowed.scope(),
                        entry.scope()
                    ))
                    .in_source(path.display().to_string()),
                );
            }
            entries.insert(entry.name().to_owned(), entry);
        }
    }
    entries
}

/// A catalogue loaded with the plugins found for it: their warnings first, then its own.
pub(crate) fn with_plugins<T>(
    root: &ProjectRoot,
    home: Option<&Path>,
    load_with: impl FnOnce(&[Plugin]) -> Loaded<T>,
) -> Loaded<T> {
    let (plugins, mut warnings) = find(root, home);
    let mut loaded = load_with(&plugins);
    warnings.append(&mut loaded.warnings);
    loaded.warnings = warnings;
    loaded
}

/// The `.claude` directories searched, the project's first: `(directory, is the user's)`.
/// A home that is the project root (a sandboxed checkout) is searched once.
pub fn claude_dirs(root: &ProjectRoot, home: Option<&Path>) -> Vec<(PathBuf, bool)> {
    let project = root.path().join(".claude");
    let mut dirs = vec![(project.clone(), false)];
    if let Some(home) = home {
        let user = home.join(".claude");
        let same = match (
            std::fs::canonicalize(&user),
            std::fs::canonicalize(&project),
        ) {
            (Ok(user), Ok(project)) => user == project,
            _ => user == project,
        };
        if !same {
            dirs.push((user, true));
        }
    }
    dirs
}

/// Every plugin under the project's and the user's `.claude/agents` and `.claude/plugins`, in
/// path order, with warnings for a `plugin.json` that does not read.
pub fn find(root: &ProjectRoot, home: Option<&Path>) -> (Vec<Plugin>, Vec<Diagnostic>) {
    let mut plugins = Vec::new();
    let mut warnings = Vec::new();
    for (claude, _) in claude_dirs(root, home) {
        for sub in ["agents", "plugins"] {
            search(&claude.join(sub), 0, &mut plugins, &mut warnings);
        }
    }
    (plugins, warnings)
}

fn search(dir: &Path, depth: usize, plugins: &mut Vec<Plugin>, warnings: &mut Vec<Diagnostic>) {
    if plugins.iter().any(|plugin| plugin.root == dir) {
        return;
    }
    if is_plugin_root(dir) {
        let (plugin, warning) = read_plugin(dir);
        plugins.push(plugin);
        warnings.extend(warning);
        return;
    }
    plugins.extend(marketplace_plugins(dir, warnings));
    if depth >= MAX_DEPTH {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut subdirectories: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .is_none_or(|name| !SKIPPED_DIRS.iter().any(|skipped| name == *skipped))
        })
        .collect();
    subdirectories.sort();
    for subdirectory in subdirectories {
        search(&subdirectory, depth + 1, plugins, warnings);
    }
}

/// The plugins a marketplace at `dir` (`.claude-plugin/marketplace.json`) lists by a relative
/// `source` and that have no `plugin.json` of their own (Claude Code's `strict: false`
/// entries); those with one are found as any plugin is.
fn marketplace_plugins(dir: &Path, warnings: &mut Vec<Diagnostic>) -> Vec<Plugin> {
    let manifest = dir.join(".claude-plugin").join("marketplace.json");
    let Ok(text) = std::fs::read_to_string(&manifest) else {
        return Vec::new();
    };
    let value: serde_json::Value = match serde_json::from_str(&text) {
        Ok(value) => value,
        Err(error) => {
            warnings.push(
                Diagnostic::new(format!("cannot read the marketplace manifest: {error}"))
                    .in_source(manifest.display().to_string()),
            );
            return Vec::new();
        }
    };
    let entries = value["plugins"].as_array().cloned().unwrap_or_default();
    entries
        .iter()
        .filter_map(|entry| {
            let source = entry["source"].as_str()?;
            let relative = Path::new(source);
            if relative.is_absolute()
                || relative
                    .components()
                    .any(|part| matches!(part, std::path::Component::ParentDir))
            {
                return None;
            }
            let root = crate::settings::normalize(&dir.join(relative));
            if !root.is_dir() || is_plugin_root(&root) {
                return None;
            }
            let name = entry["name"]
                .as_str()
                .map(str::to_owned)
                .or_else(|| root.file_name().map(|n| n.to_string_lossy().into_owned()))?;
            Some(Plugin { name, root })
        })
        .collect()
}

/// The plugin at `root`: plugin.json's `name`, else the directory's name (with a warning when
/// plugin.json does not read).
fn read_plugin(root: &Path) -> (Plugin, Option<Diagnostic>) {
    let manifest = root.join(".claude-plugin").join("plugin.json");
    let fallback = root
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let read = std::fs::read_to_string(&manifest)
        .map_err(|e| e.to_string())
        .and_then(|text| {
            serde_json::from_str::<serde_json::Value>(&text).map_err(|e| e.to_string())
        });
    let (name, warning) = match read {
        Ok(value) => match value.get("name").and_then(serde_json::Value::as_str) {
            Some(name) if !name.trim().is_empty() => (name.trim().to_owned(), None),
            _ => (fallback, None),
        },
        Err(error) => (
            fallback.clone(),
            Some(
                Diagnostic::new(format!(
                    "cannot read the plugin manifest ({error}); the plugin is named `{fallback}` \
                     after its directory"
                ))
                .in_source(manifest.display().to_string()),
            ),
        ),
    };
    (
        Plugin {
            name,
            root: root.to_path_buf(),
        },
        warning,
    )
}
