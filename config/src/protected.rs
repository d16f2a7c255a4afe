//! Protected files: the files that define what agents may do (permission rules, modes, MCP
//! servers, the team). An agent that could rewrite them could widen its own access, so in
//! every workspace (the project root and each teammate's worktree):
//! - a file tool that writes one asks, in every mode, `bypassPermissions` included (the
//!   permission engine);
//! - the Bash sandbox binds the ones that exist read-only (`muster_agents::sandbox`);
//! - a run reads them only from the project root, once, never from a teammate's worktree.
//!
//! [`PROTECTED_FILES`] is the list; [`ProtectedFiles::with`] adds more (the files hook commands
//! name, for the hooks).

use std::path::{Path, PathBuf};

use globset::{GlobSet, GlobSetBuilder};

/// Workspace-relative globs of the files that define rules, servers and the team. Each
/// pattern's directory part is literal (the sandbox lists it to find what exists).
pub const PROTECTED_FILES: &[&str] = &[
    ".claude/settings*.json",
    ".mcp.json",
    "muster.team.toml",
    ".muster/settings*.toml",
];

/// The protected files of a workspace, matched by their path relative to its root.
#[derive(Debug, Clone)]
pub struct ProtectedFiles {
    patterns: Vec<String>,
    set: GlobSet,
}

/// A protected-file pattern that is not a valid glob.
#[derive(Debug, Clone, thiserror::Error)]
#[error("invalid protected-file pattern `{pattern}`: {reason}")]
pub struct ProtectedPatternError {
    pub pattern: String,
    pub reason: String,
}

/// Equal when the patterns are (the set is built from them).
impl PartialEq for ProtectedFiles {
    fn eq(&self, other: &Self) -> bool {
        self.patterns == other.patterns
    }
}

impl Eq for ProtectedFiles {}

impl Default for ProtectedFiles {
    fn default() -> ProtectedFiles {
        ProtectedFiles::standard()
    }
}

impl ProtectedFiles {
    /// [`PROTECTED_FILES`].
    pub fn standard() -> ProtectedFiles {
        // The built-in patterns are valid globs (tested), so the fallback is never taken.
        ProtectedFiles::build(PROTECTED_FILES.iter().map(|p| (*p).to_owned()).collect())
            .unwrap_or_else(|_| ProtectedFiles {
                patterns: Vec::new(),
                set: GlobSet::empty(),
            })
    }

    /// [`ProtectedFiles::standard`], built once.
    pub fn standard_ref() -> &'static ProtectedFiles {
        static STANDARD: std::sync::LazyLock<ProtectedFiles> =
            std::sync::LazyLock::new(ProtectedFiles::standard);
        &STANDARD
    }

    /// These patterns and `extra` (workspace-relative globs, `/`-separated).
    pub fn with(&self, extra: &[String]) -> Result<ProtectedFiles, ProtectedPatternError> {
        let mut patterns = self.patterns.clone();
        patterns.extend(extra.iter().cloned());
        ProtectedFiles::build(patterns)
    }

    fn build(patterns: Vec<String>) -> Result<ProtectedFiles, ProtectedPatternError> {
        let mut builder = GlobSetBuilder::new();
        for pattern in &patterns {
            let glob = globset::GlobBuilder::new(pattern)
                .literal_separator(true)
                .build()
                .map_err(|error| ProtectedPatternError {
                    pattern: pattern.clone(),
                    reason: error.kind().to_string(),
                })?;
            builder.add(glob);
        }
        let set = builder.build().map_err(|error| ProtectedPatternError {
            pattern: patterns.join(", "),
            reason: error.to_string(),
        })?;
        Ok(ProtectedFiles { patterns, set })
    }

    /// The patterns, for messages and `muster config show`.
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// The pattern `relative` (a path relative to a workspace root) matches, if any.
    pub fn matching(&self, relative: &Path) -> Option<&str> {
        self.set
            .matches(relative)
            .first()
            .map(|index| self.patterns[*index].as_str())
    }

    /// The protected files that exist in `workspace`, absolute (for read-only binds). Each
    /// pattern's directory is listed once and its entries matched with the compiled set: this
    /// runs before every sandboxed command and hook.
    pub fn existing_in(&self, workspace: &Path) -> Vec<PathBuf> {
        let mut directories: Vec<PathBuf> = self
            .patterns
            .iter()
            .map(|pattern| match pattern.rfind('/') {
                Some(slash) => workspace.join(&pattern[..slash]),
                None => workspace.to_path_buf(),
            })
            .collect();
        directories.sort();
        directories.dedup();
        let mut found = Vec::new();
        for directory in directories {
            let Ok(entries) = std::fs::read_dir(&directory) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let is_file = entry.file_type().is_ok_and(|kind| kind.is_file());
                let relative = path.strip_prefix(workspace).unwrap_or(&path);
                if is_file && self.set.is_match(relative) {
                    found.push(path);
                }
            }
        }
        found.sort();
        found.dedup();
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_protected_files_and_nothing_else() {
        let files = ProtectedFiles::standard();
        assert_eq!(files.patterns().len(), PROTECTED_FILES.len());
        for (path, protected) in [
            (".claude/settings.json", true),
            (".claude/settings.local.json", true),
            (".mcp.json", true),
            ("muster.team.toml", true),
            (".muster/settings.toml", true),
            (".muster/settings.local.toml", true),
            (".claude/agents/a.md", false),
            ("sub/.mcp.json", false),
            ("src/settings.json", false),
        ] {
            assert_eq!(
                files.matching(Path::new(path)).is_some(),
                protected,
                "{path}"
            );
        }
        let more = files.with(&[".claude/hooks/**".to_owned()]).unwrap();
        assert!(more.matching(Path::new(".claude/hooks/guard.sh")).is_some());
        assert!(files.with(&["[".to_owned()]).is_err());
    }

    #[test]
    fn existing_files_are_found_in_a_workspace() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".claude/agents")).unwrap();
        std::fs::write(dir.path().join(".claude/settings.json"), "{}").unwrap();
        std::fs::write(dir.path().join(".claude/agents/a.md"), "").unwrap();
        std::fs::write(dir.path().join(".mcp.json"), "{}").unwrap();
        let found = ProtectedFiles::standard().existing_in(dir.path());
        assert_eq!(
            found,
            [
                dir.path().join(".claude/settings.json"),
                dir.path().join(".mcp.json")
            ]
        );
    }
}
