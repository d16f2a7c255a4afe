//! Instruction files loaded into every agent's system prompt, as Claude Code reads them: the
//! user's `~/.claude/CLAUDE.md` first (the most general), then the project's `AGENTS.md`,
//! `CLAUDE.md` and `.claude/CLAUDE.md`, then the user's private `CLAUDE.local.md` at the project
//! root (later ones are more specific, so they come later in the prompt), each followed by the
//! files it imports with `@path`. Each is cut to a size cap
//! (with a warning when cut). The same file is read once: a `CLAUDE.md` that is a symlink to
//! `AGENTS.md` (or a copy of it) adds nothing.
//!
//! Imports: a word `@path` outside code spans and fenced code blocks, naming a file (it has a
//! `/` or a `.`, or starts with `~/`), relative to the importing file's directory or to the home
//! directory with `~/`; at most [`MAX_IMPORT_DEPTH`] hops; only files inside the project or the
//! home directory (after symlinks); a cycle is refused with a warning, like a missing file.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::diagnostic::{ConfigError, Diagnostic, Loaded};
use crate::project::ProjectRoot;

/// The project's instruction files, in this order (after the user's `~/.claude/CLAUDE.md`).
pub const INSTRUCTION_FILES: &[&str] = &["AGENTS.md", "CLAUDE.md", ".claude/CLAUDE.md"];

/// The user's private instructions for one project, beside `CLAUDE.md` (Claude Code reads it
/// last; it is normally not committed). Instructions need no trust, so whether git tracks it
/// changes only how it is labelled.
pub const LOCAL_INSTRUCTION_FILE: &str = "CLAUDE.local.md";

/// How many hops of `@path` imports are followed (Claude Code's limit).
pub const MAX_IMPORT_DEPTH: usize = 5;

/// Where an instruction file comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InstructionScope {
    /// `~/.claude/CLAUDE.md`.
    User,
    /// A file at the project root or in its `.claude/`.
    Project,
    /// `CLAUDE.local.md` at the project root: the user's own notes for this project.
    ProjectLocal,
    /// Imported with `@path` by the file named.
    ImportedBy(PathBuf),
}

/// One instruction file as loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstructionFile {
    pub path: PathBuf,
    pub scope: InstructionScope,
    /// The text, cut to the cap.
    pub content: String,
    /// The file's full size in bytes, when it was cut.
    pub truncated_from: Option<usize>,
}

/// The instruction files of a project (and its user).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProjectInstructions {
    pub files: Vec<InstructionFile>,
}

/// Reads files once each, following imports.
struct Reader<'a> {
    root: PathBuf,
    home: Option<&'a Path>,
    cap: usize,
    max_bytes: u64,
    files: Vec<InstructionFile>,
    warnings: Vec<Diagnostic>,
    seen: Vec<(PathBuf, Vec<u8>)>,
}

impl ProjectInstructions {
    /// Reads the user's `~/.claude/CLAUDE.md` (when `home` is given) and the project's
    /// instruction files, with their imports, each cut to `max_bytes`.
    pub fn load(
        root: &ProjectRoot,
        max_bytes: u64,
        home: Option<&Path>,
    ) -> Result<Loaded<ProjectInstructions>, ConfigError> {
        let mut reader = Reader {
            root: std::fs::canonicalize(root.path()).unwrap_or_else(|_| root.path().to_owned()),
            home,
            cap: usize::try_from(max_bytes).unwrap_or(usize::MAX),
            max_bytes,
            files: Vec::new(),
            warnings: Vec::new(),
            seen: Vec::new(),
        };
        // A home inside the project (as in a sandboxed checkout) has no user file of its own.
        let user_file = home
            .map(|home| home.join(".claude").join("CLAUDE.md"))
            .filter(|file| {
                std::fs::canonicalize(file).is_ok_and(|real| !real.starts_with(&reader.root))
            });
        if let Some(file) = user_file {
            reader.read(&file, InstructionScope::User, &[])?;
        }
        for name in INSTRUCTION_FILES {
            reader.read(&root.path().join(name), InstructionScope::Project, &[])?;
        }
        let local = root.path().join(LOCAL_INSTRUCTION_FILE);
        reader.read(&local, InstructionScope::ProjectLocal, &[])?;
        Ok(Loaded {
            value: ProjectInstructions {
                files: reader.files,
            },
            warnings: reader.warnings,
        })
    }

    /// The text added to every agent's system prompt (empty when there are no files).
    pub fn prompt_section(&self) -> String {
        self.files
            .iter()
            .map(|file| {
                let name = file
                    .path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let heading = match &file.scope {
                    InstructionScope::User => {
                        "# The user's instructions from ~/.claude/CLAUDE.md".to_owned()
                    }
                    InstructionScope::Project => format!("# Project instructions from {name}"),
                    InstructionScope::ProjectLocal => {
                        format!("# The user's private project instructions from {name}")
                    }
                    InstructionScope::ImportedBy(by) => format!(
                        "# Instructions from {} (imported by {})",
                        file.path.display(),
                        by.file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default()
                    ),
                };
                format!("{heading}\n\n{}\n", file.content.trim_end())
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Reader<'_> {
    /// Reads `path` (skipped when it does not exist; a missing import is warned about), then
    /// its imports; `chain` holds the canonical paths of the files importing it.
    fn read(
        &mut self,
        path: &Path,
        scope: InstructionScope,
        chain: &[PathBuf],
    ) -> Result<(), ConfigError> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                if let InstructionScope::ImportedBy(by) = &scope {
                    self.warn(
                        by,
                        format!(
                            "imports `{}`, which does not exist: not read",
                            path.display()
                        ),
                    );
                }
                return Ok(());
            }
            Err(source) if matches!(scope, InstructionScope::ImportedBy(_)) => {
                let by = chain.last().cloned().unwrap_or_default();
                self.warn(
                    &by,
                    format!("cannot read the import `{}`: {source}", path.display()),
                );
                return Ok(());
            }
            Err(source) => {
                return Err(ConfigError::Io {
                    path: path.to_owned(),
                    source,
                });
            }
        };
        // Once per file: by where it really is, and by what it says.
        let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
        if self
            .seen
            .iter()
            .any(|(p, b)| *p == canonical || *b == bytes)
        {
            return Ok(());
        }
        self.seen.push((canonical.clone(), bytes.clone()));
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let content = cut(&text, self.cap);
        let truncated_from = (content.len() < text.len()).then_some(text.len());
        if let Some(size) = truncated_from {
            self.warn(
                path,
                format!(
                    "{} is {size} bytes; only the first {} bytes are loaded (instructions_max_bytes = {})",
                    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
                    content.len(),
                    self.max_bytes
                ),
            );
        }
        let content = content.to_owned();
        self.files.push(InstructionFile {
            path: path.to_owned(),
            scope,
            content: content.clone(),
            truncated_from,
        });
        let imports = imports(&content);
        if imports.is_empty() {
            return Ok(());
        }
        let mut chain = chain.to_vec();
        chain.push(canonical);
        if chain.len() > MAX_IMPORT_DEPTH {
            self.warn(
                path,
                format!("its imports are more than {MAX_IMPORT_DEPTH} hops deep: not read"),
            );
            return Ok(());
        }
        for import in imports {
            self.import(path, &import, &chain)?;
        }
        Ok(())
    }

    /// Follows one `@path` of `importer`.
    fn import(
        &mut self,
        importer: &Path,
        import: &str,
        chain: &[PathBuf],
    ) -> Result<(), ConfigError> {
        let target = match (import.strip_prefix("~/"), self.home) {
            (Some(rest), Some(home)) => home.join(rest),
            (Some(_), None) => {
                self.warn(
                    importer,
                    format!("imports `@{import}`, but no home directory is known: not read"),
                );
                return Ok(());
            }
            (None, _) => importer.parent().unwrap_or(Path::new(".")).join(import),
        };
        if let Ok(canonical) = std::fs::canonicalize(&target) {
            if chain.contains(&canonical) {
                self.warn(
                    importer,
                    format!("imports `@{import}`, which imports it back (a cycle): not read again"),
                );
                return Ok(());
            }
            let home = self.home.and_then(|home| std::fs::canonicalize(home).ok());
            let inside = canonical.starts_with(&self.root)
                || home.is_some_and(|home| canonical.starts_with(home));
            if !inside {
                self.warn(
                    importer,
                    format!(
                        "imports `@{import}`, which is `{}`, outside the project and the home directory: not read",
                        canonical.display()
                    ),
                );
                return Ok(());
            }
        }
        self.read(
            &target,
            InstructionScope::ImportedBy(importer.to_owned()),
            chain,
        )
    }

    fn warn(&mut self, file: &Path, message: String) {
        self.warnings
            .push(Diagnostic::new(message).in_source(file.display().to_string()));
    }
}

/// The `@path` imports of a text, in order: words starting with `@` that name a file (with a
/// `/` or a `.`, or `~/…`), outside fenced code blocks and inline code spans; trailing
/// punctuation is not part of the path.
fn imports(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut fence: Option<&str> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(marker)) => {
                fence = Some(marker);
                continue;
            }
            (Some(open), Some(marker)) if open == marker => {
                fence = None;
                continue;
            }
            (Some(_), _) => continue,
            (None, None) => {}
        }
        for (index, segment) in line.split('`').enumerate() {
            // Odd segments are inside a code span.
            if index % 2 == 1 {
                continue;
            }
            for word in segment.split_whitespace() {
                let Some(path) = word.strip_prefix('@') else {
                    continue;
                };
                let path = path.trim_end_matches(['.', ',', ';', ':', ')', '!', '?']);
                let file_like = path.contains('/') || path.contains('.');
                if !path.is_empty() && file_like && !found.iter().any(|f| f == path) {
                    found.push(path.to_owned());
                }
            }
        }
    }
    found
}

/// At most `cap` bytes of `text`, ending at a line end when one is in the last quarter.
fn cut(text: &str, cap: usize) -> &str {
    if text.len() <= cap {
        return text;
    }
    let mut end = cap;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let head = &text[..end];
    match head.rfind('\n') {
        Some(newline) if newline + 1 >= cap - cap / 4 => &head[..=newline],
        _ => head,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imports_are_file_words_outside_code() {
        let text = "See @docs/style.md and @README.md.\nMail me@example.com, ask @alice.\n\
                    `@not/this.md` but @~/notes.md\n```\n@in/fence.md\n```\n@after/fence.md";
        assert_eq!(
            imports(text),
            vec!["docs/style.md", "README.md", "~/notes.md", "after/fence.md"]
        );
    }

    #[test]
    fn cut_prefers_line_ends_and_respects_char_boundaries() {
        assert_eq!(cut("abc", 10), "abc");
        assert_eq!(cut("line one\nline two\n", 12), "line one\n");
        assert_eq!(cut("ééé", 3), "é");
        assert_eq!(cut("abcdef\n", 4), "abcd");
    }
}
