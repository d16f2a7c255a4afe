//! Skills as Claude Code reads them: `SKILL.md` (Markdown with front matter) in a directory of
//! its own, from the project's `.claude/skills/<name>/`, the user's `~/.claude/skills/<name>/`
//! and each plugin's `skills/<name>/` (named `<plugin>:<name>`). Agents see each skill's name
//! and description in their system prompt; the body is read only when the model calls the
//! `Skill` tool, from the file as it is then. A skill is never an agent definition.
//!
//! `allowed-tools` is shown and not applied: in Claude Code it lets a skill's tools run without
//! asking, which would widen what the engine, the mode and the rules allow. The agent keeps its
//! own tools and rules; loading warns once per command about the skills that set it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::diagnostic::{ConfigError, Diagnostic, Loaded};
use crate::front_matter::{FrontMatter, first_paragraph};
use crate::plugins::{Plugin, PluginScope};
use crate::project::ProjectRoot;

/// A skill's file name.
pub const SKILL_FILE: &str = "SKILL.md";

/// The longest description shown in the system prompt (Claude Code's front-matter limit).
pub const MAX_DESCRIPTION_CHARS: usize = 1024;

/// Whether `path` is a skill's file (never an agent definition).
pub fn is_skill_file(path: &Path) -> bool {
    path.file_name().is_some_and(|name| name == SKILL_FILE)
}

/// One skill, without its body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skill {
    /// Its `name`, else its directory's name; `<plugin>:<name>` for a plugin's.
    pub name: String,
    /// Its `description`, else its body's first paragraph.
    pub description: String,
    /// `allowed-tools` as written: shown, not applied (see the module's documentation).
    #[serde(rename = "allowed-tools", skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<String>,
    /// `disable-model-invocation: true`: not listed for the model, and `Skill` refuses it.
    #[serde(rename = "disable-model-invocation")]
    pub manual_only: bool,
    /// Its `SKILL.md`.
    pub path: PathBuf,
    pub scope: PluginScope,
}

impl crate::plugins::FolderEntry for Skill {
    fn label(&self) -> String {
        format!("skill `{}`", self.name)
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn path(&self) -> &Path {
        &self.path
    }
    fn scope(&self) -> &PluginScope {
        &self.scope
    }
}

impl Skill {
    /// The directory the skill's files lie in.
    pub fn directory(&self) -> &Path {
        self.path.parent().unwrap_or(&self.path)
    }

    /// The body as the file says now (front matter removed).
    pub fn body(&self) -> Result<String, ConfigError> {
        let text = std::fs::read_to_string(&self.path).map_err(|source| ConfigError::Io {
            path: self.path.clone(),
            source,
        })?;
        let (front, _) = FrontMatter::read(&self.path.display().to_string(), &text);
        Ok(front.body.trim().to_owned())
    }
}

/// Every skill by name, after precedence (the user's over the project's, as in Claude Code).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SkillCatalog {
    skills: BTreeMap<String, Skill>,
}

impl SkillCatalog {
    /// The skills of the project at `root` and of the user at `home` (none when `None`), and
    /// of every plugin [`crate::plugins::find`] finds. Never fails on one file: what does not
    /// read is skipped with a warning.
    pub fn load(root: &ProjectRoot, home: Option<&Path>) -> Loaded<SkillCatalog> {
        crate::plugins::with_plugins(root, home, |plugins| Self::load_with(root, home, plugins))
    }

    /// As [`SkillCatalog::load`], with the plugins already found.
    pub fn load_with(
        root: &ProjectRoot,
        home: Option<&Path>,
        plugins: &[Plugin],
    ) -> Loaded<SkillCatalog> {
        let mut warnings = Vec::new();
        // Lowest precedence first: a later one replaces an earlier one of the same name.
        let skills = crate::plugins::by_name(
            crate::plugins::sources(root, home, plugins, "skills"),
            skill_files,
            |_, path, scope, warnings| read_skill(path, scope, warnings),
            &mut warnings,
        );
        let catalog = SkillCatalog { skills };
        let allowed_tools: Vec<String> = catalog
            .iter()
            .filter(|skill| skill.allowed_tools.is_some())
            .map(|skill| skill.name.clone())
            .collect();
        warnings.extend(allowed_tools_warning(&allowed_tools, "skill"));
        Loaded {
            value: catalog,
            warnings,
        }
    }

    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.get(name)
    }

    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    /// Every skill, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Skill> {
        self.skills.values()
    }

    /// The skills the model may call (not `disable-model-invocation`).
    pub fn offered(&self) -> impl Iterator<Item = &Skill> {
        self.skills.values().filter(|skill| !skill.manual_only)
    }

    /// The system prompt's section listing the skills the model may call; empty when none.
    pub fn prompt_section(&self) -> String {
        let mut lines = Vec::new();
        for skill in self.offered() {
            let description: String = skill
                .description
                .chars()
                .take(MAX_DESCRIPTION_CHARS)
                .collect();
            lines.push(format!("- {}: {}", skill.name, description.trim()));
        }
        if lines.is_empty() {
            return String::new();
        }
        format!(
            "# Skills\nSkills are instructions for particular kinds of task. When a task \
             matches a skill's description, call the Skill tool with its name to read its \
             instructions before you start; they name files beside the skill, which you read \
             as usual.\n{}",
            lines.join("\n")
        )
    }
}

/// One warning naming the skills or commands that set `allowed-tools`, which muster shows and
/// does not apply.
pub(crate) fn allowed_tools_warning(names: &[String], what: &str) -> Option<Diagnostic> {
    let first = names.first()?;
    let who = match names.len() {
        1 => format!("{what} `{first}` sets"),
        n => format!("{n} {what}s (`{first}` and {} more) set", n - 1),
    };
    Some(Diagnostic::new(format!(
        "{who} `allowed-tools`, which muster shows and does not apply: the agent keeps its own \
         tools, and calls are decided by the permission engine, the mode and your rules (allow \
         what you want run without asking with a rule in your settings)"
    )))
}

/// The `*/SKILL.md` files of a skills directory, in path order.
fn skill_files(directory: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(directory) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path().join(SKILL_FILE))
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

/// The skill at `path`; `None` (with a warning) when it cannot be read.
fn read_skill(path: &Path, scope: &PluginScope, warnings: &mut Vec<Diagnostic>) -> Option<Skill> {
    let label = path.display().to_string();
    let text = match std::fs::read(path).map(String::from_utf8) {
        Ok(Ok(text)) => text,
        Ok(Err(_)) => {
            warnings.push(
                Diagnostic::new("skipped: expected UTF-8 text, found invalid bytes")
                    .in_source(label),
            );
            return None;
        }
        Err(error) => {
            warnings.push(
                Diagnostic::new(format!("skipped: cannot read it: {error}")).in_source(label),
            );
            return None;
        }
    };
    let (front, found) = FrontMatter::read(&label, &text);
    warnings.extend(found);
    let directory_name = path
        .parent()
        .and_then(Path::file_name)
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = front.get("name").unwrap_or(&directory_name).to_owned();
    if name.is_empty() || name.chars().any(char::is_control) {
        warnings.push(
            Diagnostic::new(format!("skipped: expected a skill name, found {name:?}"))
                .in_source(label)
                .for_key("name"),
        );
        return None;
    }
    let name = match scope {
        PluginScope::Plugin(plugin) => format!("{plugin}:{name}"),
        PluginScope::Project | PluginScope::User => name,
    };
    let description = front
        .get("description")
        .map(str::to_owned)
        .unwrap_or_else(|| first_paragraph(&front.body));
    Some(Skill {
        name,
        description,
        allowed_tools: front.get("allowed-tools").map(str::to_owned),
        manual_only: front.get("disable-model-invocation") == Some("true"),
        path: path.to_path_buf(),
        scope: scope.clone(),
    })
}
