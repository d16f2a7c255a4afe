//! `AGENTS.md`, `CLAUDE.md` and `.claude/CLAUDE.md` at the project root, loaded into every
//! agent's system prompt, each cut to a size cap (with a warning when cut). The same file is
//! read once: a `CLAUDE.md` that is a symlink to `AGENTS.md` (or a copy of it) adds nothing.

use std::path::PathBuf;

use serde::Serialize;

use crate::diagnostic::{ConfigError, Diagnostic, Loaded};
use crate::project::ProjectRoot;

/// The instruction files read, in this order.
pub const INSTRUCTION_FILES: &[&str] = &["AGENTS.md", "CLAUDE.md", ".claude/CLAUDE.md"];

/// One instruction file as loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstructionFile {
    pub path: PathBuf,
    /// The text, cut to the cap.
    pub content: String,
    /// The file's full size in bytes, when it was cut.
    pub truncated_from: Option<usize>,
}

/// The project's instruction files.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProjectInstructions {
    pub files: Vec<InstructionFile>,
}

impl ProjectInstructions {
    /// Reads `AGENTS.md` and `CLAUDE.md` at the root, each cut to `max_bytes`.
    pub fn load(
        root: &ProjectRoot,
        max_bytes: u64,
    ) -> Result<Loaded<ProjectInstructions>, ConfigError> {
        let cap = usize::try_from(max_bytes).unwrap_or(usize::MAX);
        let mut files = Vec::new();
        let mut warnings = Vec::new();
        let mut seen: Vec<(PathBuf, Vec<u8>)> = Vec::new();
        for name in INSTRUCTION_FILES {
            let path = root.path().join(name);
            let bytes = match std::fs::read(&path) {
                Ok(bytes) => bytes,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
                Err(source) => return Err(ConfigError::Io { path, source }),
            };
            // Once per file: by where it really is, and by what it says.
            let canonical = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
            if seen.iter().any(|(p, b)| *p == canonical || *b == bytes) {
                continue;
            }
            seen.push((canonical, bytes.clone()));
            let text = String::from_utf8_lossy(&bytes);
            let content = cut(&text, cap);
            let truncated_from = (content.len() < text.len()).then_some(text.len());
            if let Some(size) = truncated_from {
                warnings.push(
                    Diagnostic::new(format!(
                        "{name} is {size} bytes; only the first {} bytes are loaded (instructions_max_bytes = {max_bytes})",
                        content.len()
                    ))
                    .in_source(path.display().to_string()),
                );
            }
            files.push(InstructionFile {
                path,
                content: content.to_string(),
                truncated_from,
            });
        }
        Ok(Loaded {
            value: ProjectInstructions { files },
            warnings,
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
                format!(
                    "# Project instructions from {name}\n\n{}\n",
                    file.content.trim_end()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
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
    fn cut_prefers_line_ends_and_respects_char_boundaries() {
        assert_eq!(cut("abc", 10), "abc");
        assert_eq!(cut("line one\nline two\n", 12), "line one\n");
        assert_eq!(cut("ééé", 3), "é");
        assert_eq!(cut("abcdef\n", 4), "abcd");
    }
}
