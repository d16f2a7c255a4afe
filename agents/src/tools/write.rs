//! `Write`: creates or overwrites a file with the given content.

use muster_protocol::ToolName;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Deserialize;

use super::TypedTool;
use super::context::ToolContext;
use super::output::{ToolDetails, ToolOutput};
use super::text::{refuse_special_file, run_blocking_on, write_text_file};
use super::workspace::PathAccess;

/// Input of `Write`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteInput {
    /// The path of the file to write (absolute, or relative to the workspace root).
    pub file_path: String,
    /// The complete new content of the file.
    pub content: String,
}

/// Creates or overwrites a file.
#[derive(Debug, Clone, Copy, Default)]
pub struct Write;

impl TypedTool for Write {
    type Input = WriteInput;
    const NAME: &'static str = ToolName::Write.as_str();
    const DESCRIPTION: &'static str = "Writes a file in the workspace, replacing it if it exists and creating missing parent \
         directories. Prefer Edit for changing part of an existing file. Files in `.git/` and \
         `.muster/` cannot be written, except your own plan file.";
    const READ_ONLY: bool = ToolName::Write.is_read_only();
    const IDEMPOTENT: bool = true;

    fn paths(input: &WriteInput) -> Vec<PathAccess> {
        vec![PathAccess::write(&input.file_path)]
    }

    async fn run(&self, context: &ToolContext, input: WriteInput) -> ToolOutput {
        run_blocking_on(context.resolve_write(&input.file_path), move |resolved| {
            write_file(&input, resolved)
        })
        .await
    }
}

fn write_file(input: &WriteInput, resolved: PathBuf) -> ToolOutput {
    let requested = &input.file_path;
    if resolved.is_dir() {
        return ToolOutput::error(format!(
            "`{requested}` is a directory; give the path of a file"
        ));
    }
    if let Err(error) = refuse_special_file(requested, &resolved) {
        return ToolOutput::error(error.to_string());
    }
    let existed = resolved.exists();
    if let Err(error) = write_text_file(&resolved, &input.content) {
        return ToolOutput::error(format!(
            "cannot write `{requested}` (resolved to `{}`): {error}",
            resolved.display()
        ));
    }
    let verb = if existed { "Overwrote" } else { "Created" };
    ToolOutput::text(format!(
        "{verb} `{requested}` ({} bytes).",
        input.content.len()
    ))
    .with_details(ToolDetails::FileWritten { path: resolved })
}
