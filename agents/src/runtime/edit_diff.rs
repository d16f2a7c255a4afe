//! The diff of a file edit, reported with its `tool_call` event (an editor shows it, a live
//! team view sums it): the files a `Write`, `Edit`, `MultiEdit` or `NotebookEdit` call writes
//! are read before the call runs and after it, and compared as a unified diff.
//!
//! Only for display: nothing is committed for it, and a file that cannot be read as text, or
//! is larger than [`MAX_DIFF_BYTES`], gives no diff rather than a wrong one.

use std::path::{Path, PathBuf};

use muster_protocol::ToolName;
use similar::TextDiff;

use crate::tools::{PathUse, Tool, ToolContext};

/// Files larger than this (before or after) are not diffed.
pub const MAX_DIFF_BYTES: u64 = 1024 * 1024;

/// Lines of context around each change.
const CONTEXT_LINES: usize = 3;

/// The files an edit call writes, as they were before it ran.
pub(super) struct EditCapture {
    files: Vec<Before>,
}

struct Before {
    /// As the diff's header names it: relative to the workspace root when inside it.
    shown: String,
    resolved: PathBuf,
    /// `None`: the file did not exist.
    content: Option<String>,
}

impl EditCapture {
    /// Reads what `tool` (one of the file-edit tools) is about to write; `None` for every
    /// other tool, and for a file that cannot be diffed.
    pub(super) async fn before(
        tool_name: &str,
        tool: &dyn Tool,
        context: &ToolContext,
        input: &serde_json::Value,
    ) -> Option<EditCapture> {
        if !ToolName::parse(tool_name).is_some_and(edits_a_file) {
            return None;
        }
        let accessed = tool.accessed_paths(input).ok()?;
        let mut files = Vec::new();
        for access in accessed.iter().filter(|a| a.usage == PathUse::Write) {
            let resolved = context.resolve_write(&access.path).ok()?;
            let content = match tokio::fs::metadata(&resolved).await {
                Ok(_) => Some(read_text(&resolved).await?),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
                Err(_) => return None,
            };
            let shown = shown_path(context.workspace().root(), &resolved);
            files.push(Before {
                shown,
                resolved,
                content,
            });
        }
        (!files.is_empty()).then_some(EditCapture { files })
    }

    /// The unified diff of every captured file against what it holds now; `None` when
    /// nothing changed or a file can no longer be read as text.
    pub(super) async fn diff(self) -> Option<String> {
        let mut diff = String::new();
        for file in self.files {
            let after = match tokio::fs::metadata(&file.resolved).await {
                Ok(_) => Some(read_text(&file.resolved).await?),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
                Err(_) => return None,
            };
            diff.push_str(&unified(
                &file.shown,
                file.content.as_deref(),
                after.as_deref(),
            ));
        }
        (!diff.is_empty()).then_some(diff)
    }
}

/// Whether a tool's purpose is to change one file's text.
fn edits_a_file(tool: ToolName) -> bool {
    matches!(
        tool,
        ToolName::Write | ToolName::Edit | ToolName::MultiEdit | ToolName::NotebookEdit
    )
}

/// The unified diff of `path` from `before` to `after` (`None`: absent, shown as
/// `/dev/null`); empty when they are the same.
pub fn unified(path: &str, before: Option<&str>, after: Option<&str>) -> String {
    if before == after {
        return String::new();
    }
    let old_name = match before {
        Some(_) => format!("a/{path}"),
        None => "/dev/null".to_owned(),
    };
    let new_name = match after {
        Some(_) => format!("b/{path}"),
        None => "/dev/null".to_owned(),
    };
    TextDiff::from_lines(before.unwrap_or_default(), after.unwrap_or_default())
        .unified_diff()
        .context_radius(CONTEXT_LINES)
        .header(&old_name, &new_name)
        .to_string()
}

/// A file's text, unless it is too large or not UTF-8.
async fn read_text(path: &Path) -> Option<String> {
    let metadata = tokio::fs::metadata(path).await.ok()?;
    if metadata.len() > MAX_DIFF_BYTES {
        return None;
    }
    tokio::fs::read_to_string(path).await.ok()
}

fn shown_path(root: &Path, resolved: &Path) -> String {
    resolved
        .strip_prefix(root)
        .unwrap_or(resolved)
        .display()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::unified;

    #[test]
    fn a_unified_diff_names_the_file_and_marks_new_and_deleted_files() {
        let cases = [
            (
                Some("a\nb\nc\n"),
                Some("a\nB\nc\n"),
                "--- a/f.txt\n+++ b/f.txt\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n",
            ),
            (
                None,
                Some("hello\n"),
                "--- /dev/null\n+++ b/f.txt\n@@ -0,0 +1 @@\n+hello\n",
            ),
            (
                Some("bye\n"),
                None,
                "--- a/f.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n",
            ),
            (Some("same\n"), Some("same\n"), ""),
        ];
        for (before, after, expected) in cases {
            assert_eq!(
                unified("f.txt", before, after),
                expected,
                "{before:?} → {after:?}"
            );
        }
    }
}
