//! Paths against permission rules: the forms a path is matched in (relative to the workspace,
//! absolute, relative to the home directory), and [`RulesReadCheck`], the classifier's
//! [`ReadPathCheck`] built from workspace confinement and the settings' `Read` deny rules.

use muster_protocol::ToolName;
use std::path::{Component, Path, PathBuf};

use muster_config::rule::{PathAnchor, SourcedRule};
use muster_config::{PermissionRule, PermissionRules, RuleSpecifier};

use crate::shell::ReadPathCheck;
use crate::tools::Workspace;

/// Entries a recursive check visits at most before it refuses the tree as too large to check.
pub const MAX_TREE_ENTRIES: usize = 20_000;

/// One spelling of a path, as rule patterns of each anchor need it.
#[derive(Debug, Clone)]
pub(crate) struct PathForm {
    /// Relative to the workspace root, when the path lies inside it.
    pub relative: Option<PathBuf>,
    /// Absolute.
    pub absolute: PathBuf,
    /// Relative to the home directory, when the path lies inside it.
    pub home_relative: Option<PathBuf>,
}

impl PathForm {
    pub(crate) fn new(absolute: PathBuf, root: &Path, home: Option<&Path>) -> PathForm {
        PathForm {
            relative: absolute.strip_prefix(root).ok().map(Path::to_path_buf),
            home_relative: home
                .and_then(|home| absolute.strip_prefix(home).ok())
                .map(Path::to_path_buf),
            absolute,
        }
    }
}

/// Whether `rule` matches a call of `tool` on a path given in any of `forms`.
pub(crate) fn rule_matches_path(rule: &PermissionRule, tool: &str, forms: &[PathForm]) -> bool {
    if !rule.applies_to_tool(tool) {
        return false;
    }
    match rule.specifier() {
        RuleSpecifier::AnyCall => true,
        RuleSpecifier::Path(pattern) => forms.iter().any(|form| match pattern.anchor() {
            PathAnchor::Workspace => form
                .relative
                .as_deref()
                .is_some_and(|relative| pattern.is_match(relative)),
            PathAnchor::Absolute => pattern.is_match(&form.absolute),
            PathAnchor::Home => form
                .home_relative
                .as_deref()
                .is_some_and(|relative| pattern.is_match(relative)),
        }),
        _ => false,
    }
}

/// The first deny rule matching a call of `tool` on the path in `forms`.
pub(crate) fn deny_rule_for_path<'r>(
    rules: &'r PermissionRules,
    tool: &str,
    forms: &[PathForm],
) -> Option<&'r SourcedRule> {
    rules
        .deny
        .iter()
        .find(|rule| rule_matches_path(&rule.value, tool, forms))
}

/// `path` joined to `base` (when relative) with `.` dropped and `..` applied; `None` when `..`
/// climbs above the file-system root.
pub(crate) fn lexical_absolute(base: &Path, path: &Path) -> Option<PathBuf> {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    };
    let mut out = PathBuf::from("/");
    for component in joined.components() {
        match component {
            Component::Prefix(_) | Component::RootDir | Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(part) => out.push(part),
        }
    }
    Some(out)
}

/// The classifier's path check for the permission engine: a path a `Bash` command reads must
/// lie inside the workspace (symlinks followed) and match no `Read` deny rule; a directory a
/// recursive search reads must contain nothing a `Read` deny rule matches.
#[derive(Debug, Clone, Copy)]
pub struct RulesReadCheck<'a> {
    workspace: &'a Workspace,
    rules: &'a PermissionRules,
    home: Option<&'a Path>,
}

impl<'a> RulesReadCheck<'a> {
    /// A check on `workspace` with the settings' `rules`; `home` anchors `~/` patterns.
    pub fn new(
        workspace: &'a Workspace,
        rules: &'a PermissionRules,
        home: Option<&'a Path>,
    ) -> RulesReadCheck<'a> {
        RulesReadCheck {
            workspace,
            rules,
            home,
        }
    }

    /// The path's forms (lexical and resolved), or why it may not be read at all.
    fn forms(&self, path: &str) -> Result<(Vec<PathForm>, PathBuf), String> {
        let root = self.workspace.root();
        if path.starts_with('~') {
            return Err(format!(
                "`{path}` is in a home directory, outside the workspace `{}`",
                root.display()
            ));
        }
        let lexical = lexical_absolute(root, Path::new(path)).ok_or_else(|| {
            format!(
                "`{path}` climbs out of the workspace `{}` with `..`",
                root.display()
            )
        })?;
        let Ok(relative) = lexical.strip_prefix(root) else {
            return Err(format!(
                "`{path}` is outside the workspace `{}`",
                root.display()
            ));
        };
        let relative = if relative.as_os_str().is_empty() {
            Path::new(".")
        } else {
            relative
        };
        let resolved = self
            .workspace
            .resolve_read(relative, None)
            .map_err(|error| error.to_string())?;
        let forms = vec![
            PathForm::new(lexical, root, self.home),
            PathForm::new(resolved.clone(), root, self.home),
        ];
        Ok((forms, resolved))
    }

    /// Why reading `path` is denied by a rule or confinement, if it is.
    fn check_one(&self, path: &str) -> Result<PathBuf, String> {
        let (forms, resolved) = self.forms(path)?;
        if let Some(rule) = deny_rule_for_path(self.rules, ToolName::Read.as_str(), &forms) {
            return Err(format!(
                "`{path}` is denied by the rule `{}` (from {})",
                rule.value, rule.origin
            ));
        }
        Ok(resolved)
    }

    /// Whether any `Read` deny rule could match a path (so trees need walking).
    fn has_read_deny_rules(&self) -> bool {
        self.rules
            .deny
            .iter()
            .any(|rule| rule.value.applies_to_tool(ToolName::Read.as_str()))
    }

    /// Walks `directory` (not following symbolic links) for an entry a `Read` deny rule
    /// matches; reports it, or that the tree is too large to check.
    pub(crate) fn denied_in_tree(&self, shown: &str, directory: &Path) -> Result<(), String> {
        if !self.has_read_deny_rules() || !directory.is_dir() {
            return Ok(());
        }
        let root = self.workspace.root();
        let mut pending = vec![directory.to_path_buf()];
        let mut visited = 0usize;
        while let Some(current) = pending.pop() {
            let Ok(entries) = std::fs::read_dir(&current) else {
                continue;
            };
            for entry in entries.flatten() {
                visited += 1;
                if visited > MAX_TREE_ENTRIES {
                    return Err(format!(
                        "`{shown}` holds more than {MAX_TREE_ENTRIES} entries to check against the Read deny rules; search a narrower path"
                    ));
                }
                let path = entry.path();
                let forms = [PathForm::new(path.clone(), root, self.home)];
                if let Some(rule) = deny_rule_for_path(self.rules, ToolName::Read.as_str(), &forms)
                {
                    let shown_entry = path.strip_prefix(root).unwrap_or(&path).display();
                    return Err(format!(
                        "`{shown}` contains `{shown_entry}`, which the rule `{}` (from {}) denies reading; search a narrower path",
                        rule.value, rule.origin
                    ));
                }
                if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                    pending.push(path);
                }
            }
        }
        Ok(())
    }
}

impl ReadPathCheck for RulesReadCheck<'_> {
    fn check_read(&self, path: &str) -> Result<(), String> {
        self.check_one(path).map(|_| ())
    }

    fn check_read_tree(&self, path: &str) -> Result<(), String> {
        let resolved = self.check_one(path)?;
        self.denied_in_tree(path, &resolved)
    }

    fn list_dir(&self, path: &str) -> Option<Vec<String>> {
        // The classifier lists only directories that passed `check_read`.
        let dir = lexical_absolute(self.workspace.root(), Path::new(path))?;
        crate::shell::list_dir_names(&dir)
    }

    fn entry_kind(&self, path: &str) -> Option<crate::shell::EntryKind> {
        let at = lexical_absolute(self.workspace.root(), Path::new(path))?;
        Some(crate::shell::entry_kind_at(&at))
    }
}
