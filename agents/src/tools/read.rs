//! `Read`: a text file with `cat -n` style line numbers, a window of lines, and caps.

use muster_protocol::ToolName;
use std::io::{BufRead, BufReader};
use std::path::Path;

use schemars::JsonSchema;
use serde::Deserialize;

use super::context::{OutputLimits, ToolContext};
use super::output::ToolOutput;
use super::text::{looks_binary, refuse_special_file, run_blocking_on, truncate_line};
use super::workspace::PathAccess;
use super::{ToolDetails, TypedTool};

/// Input of `Read`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadInput {
    /// The path of the file to read (absolute, or relative to the workspace root).
    pub file_path: String,
    /// The line number to start reading from (1-based). Only give it for files too large to
    /// read at once.
    #[serde(default)]
    pub offset: Option<u64>,
    /// The number of lines to read. Only give it for files too large to read at once.
    #[serde(default)]
    pub limit: Option<u64>,
}

/// Reads a text file.
#[derive(Debug, Clone, Copy, Default)]
pub struct Read;

impl TypedTool for Read {
    type Input = ReadInput;
    const NAME: &'static str = ToolName::Read.as_str();
    const DESCRIPTION: &'static str = "Reads a text file from the workspace. Lines are numbered like `cat -n` (number, tab, line); \
         by default up to 2000 lines from the start are returned, and long lines are cut. For \
         large files give `offset` (1-based line to start at) and `limit` (number of lines). \
         Binary files are refused; use LS to list directories.";
    const READ_ONLY: bool = ToolName::Read.is_read_only();
    const IDEMPOTENT: bool = true;

    fn paths(input: &ReadInput) -> Vec<PathAccess> {
        vec![PathAccess::read(&input.file_path)]
    }

    async fn run(&self, context: &ToolContext, input: ReadInput) -> ToolOutput {
        let limits = context.limits().clone();
        run_blocking_on(context.resolve_read(&input.file_path), move |resolved| {
            read_lines(&input, &resolved, &limits)
        })
        .await
    }
}

/// The window of lines a call asks for, 1-based and inclusive of `first`.
struct LineWindow {
    first: u64,
    count: u64,
}

fn read_lines(input: &ReadInput, resolved: &Path, limits: &OutputLimits) -> ToolOutput {
    let requested = &input.file_path;
    let metadata = match std::fs::metadata(resolved) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return ToolOutput::error(format!(
                "file `{requested}` does not exist (resolved to `{}`)",
                resolved.display()
            ));
        }
        Err(error) => return ToolOutput::error(format!("cannot read `{requested}`: {error}")),
    };
    if metadata.is_dir() {
        return ToolOutput::error(format!(
            "`{requested}` is a directory, not a file; use LS to list it"
        ));
    }
    if let Err(error) = refuse_special_file(requested, resolved) {
        return ToolOutput::error(error.to_string());
    }
    if metadata.len() > limits.max_file_bytes && input.offset.is_none() && input.limit.is_none() {
        return ToolOutput::error(format!(
            "`{requested}` is {} bytes, more than the {}-byte cap for reading at once; read it in parts with `offset` and `limit`",
            metadata.len(),
            limits.max_file_bytes
        ));
    }
    let window = LineWindow {
        first: input.offset.unwrap_or(1).max(1),
        count: input
            .limit
            .unwrap_or(limits.default_read_lines as u64)
            .max(1),
    };
    match std::fs::File::open(resolved) {
        Ok(file) => number_lines(requested, BufReader::new(file), &window, limits),
        Err(error) => ToolOutput::error(format!("cannot read `{requested}`: {error}")),
    }
}

fn number_lines(
    requested: &str,
    mut reader: impl BufRead,
    window: &LineWindow,
    limits: &OutputLimits,
) -> ToolOutput {
    match reader.fill_buf() {
        Ok(start) if looks_binary(start) => {
            return ToolOutput::error(format!(
                "`{requested}` is a binary file; Read shows text files only"
            ));
        }
        Ok(_) => {}
        Err(error) => return ToolOutput::error(format!("cannot read `{requested}`: {error}")),
    }
    let mut shown = String::new();
    let mut total: u64 = 0;
    let mut last_shown: u64 = 0;
    let mut cut_by_size = false;
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(error) => return ToolOutput::error(format!("cannot read `{requested}`: {error}")),
        }
        total += 1;
        let in_window = total >= window.first && total < window.first.saturating_add(window.count);
        if !in_window || cut_by_size {
            continue;
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        let numbered = format!(
            "{total:>6}\t{}\n",
            truncate_line(text, limits.max_line_chars)
        );
        if shown.len() + numbered.len() > limits.max_output_bytes {
            cut_by_size = true;
            continue;
        }
        shown.push_str(&numbered);
        last_shown = total;
    }
    if total == 0 {
        return ToolOutput::text(format!("`{requested}` exists but is empty."));
    }
    if window.first > total {
        return ToolOutput::error(format!(
            "`{requested}` has {total} lines; offset {} is past the end",
            window.first
        ));
    }
    if last_shown < total {
        shown.push_str(&format!(
            "\n(showing lines {}-{last_shown} of {total}{}; continue with offset {})\n",
            window.first,
            if cut_by_size {
                ", cut at the output cap"
            } else {
                ""
            },
            last_shown.saturating_add(1)
        ));
    }
    ToolOutput::text(shown).with_details(ToolDetails::None)
}
