//! What a tool call returns to the model.

use std::path::PathBuf;

use super::context::ProcessGroupId;

/// Structured facts about a call beside its text, for the runtime and its records.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ToolDetails {
    /// Nothing beyond the text.
    None,
    /// A file tool wrote this file (resolved path).
    FileWritten {
        /// The resolved path.
        path: PathBuf,
    },
    /// How a `Bash` command ended.
    Bash(BashOutcome),
}

/// The result of one tool call: text for the model, whether it is an error, and details.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ToolOutput {
    /// The text the model sees.
    pub content: String,
    /// The call failed; the model should read `content` and adjust.
    pub is_error: bool,
    /// Structured facts about the call.
    pub details: ToolDetails,
}

impl ToolOutput {
    /// A successful result.
    pub fn text(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: false,
            details: ToolDetails::None,
        }
    }

    /// An error result the model can act on.
    pub fn error(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: true,
            details: ToolDetails::None,
        }
    }

    /// The same output with `details`.
    pub fn with_details(mut self, details: ToolDetails) -> Self {
        self.details = details;
        self
    }
}

/// How a `Bash` command ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BashOutcome {
    /// The process group the command ran in.
    pub process_group: ProcessGroupId,
    /// The exit code, when the command exited on its own.
    pub exit_code: Option<i32>,
    /// The signal that ended the command, if one did.
    pub signal: Option<i32>,
    /// The timeout fired and the group was killed.
    pub timed_out: bool,
    /// Shutdown was signalled and the group was killed.
    pub interrupted: bool,
}
