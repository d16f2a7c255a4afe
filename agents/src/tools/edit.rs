//! `Edit` and `MultiEdit`: exact string replacement in a text file; `MultiEdit` applies all its
//! edits or none.

use muster_protocol::ToolName;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Deserialize;

use super::TypedTool;
use super::context::ToolContext;
use super::output::{ToolDetails, ToolOutput};
use super::text::{TextFileError, read_text_file, run_blocking_on, write_text_file};
use super::workspace::PathAccess;

/// Input of `Edit`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditInput {
    /// The path of the file to change (absolute, or relative to the workspace root).
    pub file_path: String,
    /// The exact text to replace, including whitespace and indentation. Empty only to create a
    /// new file (or fill an empty one).
    pub old_string: String,
    /// The text to put in its place; must differ from `old_string`.
    pub new_string: String,
    /// Replace every occurrence of `old_string` (default false: it must occur exactly once).
    #[serde(default)]
    pub replace_all: bool,
}

/// One replacement of a `MultiEdit`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StringEdit {
    /// The exact text to replace.
    pub old_string: String,
    /// The text to put in its place; must differ from `old_string`.
    pub new_string: String,
    /// Replace every occurrence (default false: it must occur exactly once).
    #[serde(default)]
    pub replace_all: bool,
}

/// Input of `MultiEdit`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MultiEditInput {
    /// The path of the file to change (absolute, or relative to the workspace root).
    pub file_path: String,
    /// Replacements applied in order, each to the result of the previous one; if any fails,
    /// none is applied.
    pub edits: Vec<StringEdit>,
}

/// Why one replacement cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum EditFailure {
    #[error("old_string and new_string are identical, so there is nothing to change")]
    Identical,
    #[error(
        "old_string is empty, but the file is not empty; give the exact text to replace (an empty old_string only creates or fills an empty file)"
    )]
    EmptyOldString,
    #[error(
        "old_string was not found in the file; it must match exactly, including whitespace and indentation (Read the file first)"
    )]
    NotFound,
    #[error(
        "old_string occurs {count} times in the file; include more surrounding text to make it unique, or set replace_all to true"
    )]
    NotUnique { count: usize },
}

/// Applies one replacement; returns the new text and how many occurrences were replaced.
fn apply_edit(content: &str, edit: &StringEdit) -> Result<(String, usize), EditFailure> {
    if edit.old_string == edit.new_string {
        return Err(EditFailure::Identical);
    }
    if edit.old_string.is_empty() {
        return if content.is_empty() {
            Ok((edit.new_string.clone(), 1))
        } else {
            Err(EditFailure::EmptyOldString)
        };
    }
    let count = content.matches(edit.old_string.as_str()).count();
    match count {
        0 => Err(EditFailure::NotFound),
        1 => Ok((content.replacen(&edit.old_string, &edit.new_string, 1), 1)),
        _ if edit.replace_all => Ok((content.replace(&edit.old_string, &edit.new_string), count)),
        _ => Err(EditFailure::NotUnique { count }),
    }
}

/// The current text of the file, or empty text when the file does not exist and the first
/// edit creates it.
fn load_for_edit(
    requested: &str,
    resolved: &Path,
    creates: bool,
) -> Result<(String, bool), TextFileError> {
    match read_text_file(requested, resolved) {
        Ok(content) => Ok((content, false)),
        Err(TextFileError::Missing { .. }) if creates => Ok((String::new(), true)),
        Err(error) => Err(error),
    }
}

fn missing_hint(error: TextFileError) -> String {
    match error {
        TextFileError::Missing { .. } => {
            format!("{error}; use Write to create it, or an edit with an empty old_string")
        }
        other => other.to_string(),
    }
}

fn save(requested: &str, resolved: PathBuf, content: &str, summary: String) -> ToolOutput {
    match write_text_file(&resolved, content) {
        Ok(()) => {
            ToolOutput::text(summary).with_details(ToolDetails::FileWritten { path: resolved })
        }
        Err(error) => ToolOutput::error(format!(
            "cannot write `{requested}` (resolved to `{}`): {error}",
            resolved.display()
        )),
    }
}

/// Replaces exact text in a file.
#[derive(Debug, Clone, Copy, Default)]
pub struct Edit;

impl TypedTool for Edit {
    type Input = EditInput;
    const NAME: &'static str = ToolName::Edit.as_str();
    const DESCRIPTION: &'static str = "Replaces exact text in a file. `old_string` must occur exactly once unless `replace_all` \
         is true, and must match the file exactly, including whitespace and indentation (Read \
         the file first; do not include the line-number prefix). An empty `old_string` creates \
         a new file with `new_string`.";
    const READ_ONLY: bool = ToolName::Edit.is_read_only();
    const IDEMPOTENT: bool = false;

    fn paths(input: &EditInput) -> Vec<PathAccess> {
        vec![PathAccess::write(&input.file_path)]
    }

    async fn run(&self, context: &ToolContext, input: EditInput) -> ToolOutput {
        run_blocking_on(context.resolve_write(&input.file_path), move |resolved| {
            edit_file(input, resolved)
        })
        .await
    }
}

fn edit_file(input: EditInput, resolved: PathBuf) -> ToolOutput {
    let requested = input.file_path;
    let edit = StringEdit {
        old_string: input.old_string,
        new_string: input.new_string,
        replace_all: input.replace_all,
    };
    let (content, created) = match load_for_edit(&requested, &resolved, edit.old_string.is_empty())
    {
        Ok(loaded) => loaded,
        Err(error) => return ToolOutput::error(missing_hint(error)),
    };
    match apply_edit(&content, &edit) {
        Ok((updated, replaced)) => {
            let summary = if created {
                format!("Created `{requested}`.")
            } else {
                format!("Edited `{requested}`: replaced {replaced} occurrence(s).")
            };
            save(&requested, resolved, &updated, summary)
        }
        Err(failure) => ToolOutput::error(format!("cannot edit `{requested}`: {failure}")),
    }
}

/// Applies several replacements to one file, all or none.
#[derive(Debug, Clone, Copy, Default)]
pub struct MultiEdit;

impl TypedTool for MultiEdit {
    type Input = MultiEditInput;
    const NAME: &'static str = ToolName::MultiEdit.as_str();
    const DESCRIPTION: &'static str = "Applies several exact-text replacements to one file, in order, each to the result of the \
         previous one. Each edit follows Edit's rules. If any edit fails, the file is left \
         unchanged. An empty `old_string` in the first edit creates a new file.";
    const READ_ONLY: bool = ToolName::MultiEdit.is_read_only();
    const IDEMPOTENT: bool = false;

    fn paths(input: &MultiEditInput) -> Vec<PathAccess> {
        vec![PathAccess::write(&input.file_path)]
    }

    async fn run(&self, context: &ToolContext, input: MultiEditInput) -> ToolOutput {
        run_blocking_on(context.resolve_write(&input.file_path), move |resolved| {
            multi_edit_file(&input, resolved)
        })
        .await
    }
}

fn multi_edit_file(input: &MultiEditInput, resolved: PathBuf) -> ToolOutput {
    let requested = &input.file_path;
    let Some(first) = input.edits.first() else {
        return ToolOutput::error(format!(
            "invalid input for MultiEdit: field `edits` is empty; give at least one edit for `{requested}`"
        ));
    };
    let (mut content, created) =
        match load_for_edit(requested, &resolved, first.old_string.is_empty()) {
            Ok(loaded) => loaded,
            Err(error) => return ToolOutput::error(missing_hint(error)),
        };
    let mut replaced_total = 0;
    for (index, edit) in input.edits.iter().enumerate() {
        match apply_edit(&content, edit) {
            Ok((updated, replaced)) => {
                content = updated;
                replaced_total += replaced;
            }
            Err(failure) => {
                return ToolOutput::error(format!(
                    "cannot edit `{requested}`: edits[{index}]: {failure}; no edit was applied"
                ));
            }
        }
    }
    let verb = if created { "Created" } else { "Edited" };
    let summary = format!(
        "{verb} `{requested}`: applied {} edit(s), replacing {replaced_total} occurrence(s).",
        input.edits.len()
    );
    save(requested, resolved, &content, summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edit(old: &str, new: &str, replace_all: bool) -> StringEdit {
        StringEdit {
            old_string: old.to_owned(),
            new_string: new.to_owned(),
            replace_all,
        }
    }

    #[test]
    fn replacement_rules() {
        assert_eq!(
            apply_edit("a b a", &edit("b", "c", false)),
            Ok(("a c a".to_owned(), 1))
        );
        assert_eq!(
            apply_edit("a b a", &edit("a", "c", false)),
            Err(EditFailure::NotUnique { count: 2 })
        );
        assert_eq!(
            apply_edit("a b a", &edit("a", "c", true)),
            Ok(("c b c".to_owned(), 2))
        );
        assert_eq!(
            apply_edit("a", &edit("z", "c", false)),
            Err(EditFailure::NotFound)
        );
        assert_eq!(
            apply_edit("a", &edit("a", "a", false)),
            Err(EditFailure::Identical)
        );
        assert_eq!(
            apply_edit("a", &edit("", "b", false)),
            Err(EditFailure::EmptyOldString)
        );
        assert_eq!(
            apply_edit("", &edit("", "b", false)),
            Ok(("b".to_owned(), 1))
        );
    }
}
