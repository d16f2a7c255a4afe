//! Text helpers shared by the file tools: binary detection, capped text, run on a blocking
//! thread.

use std::io;
use std::path::{Path, PathBuf};

use super::output::ToolOutput;
use super::workspace::PathError;

/// Bytes inspected to decide whether a file is binary.
const BINARY_PROBE_BYTES: usize = 8192;

/// Whether `bytes` (the start of a file) look binary: a NUL byte within the probe.
pub(crate) fn looks_binary(bytes: &[u8]) -> bool {
    bytes.iter().take(BINARY_PROBE_BYTES).any(|byte| *byte == 0)
}

/// `line` cut to at most `max_chars` characters, with a marker when cut.
pub(crate) fn truncate_line(line: &str, max_chars: usize) -> String {
    match line.char_indices().nth(max_chars) {
        Some((end, _)) => format!("{}… [line cut at {max_chars} characters]", &line[..end]),
        None => line.to_owned(),
    }
}

/// Why a file tool could not load a file as text.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TextFileError {
    #[error("file `{requested}` does not exist (resolved to `{resolved}`)")]
    Missing { requested: String, resolved: String },
    #[error("`{requested}` is a directory, not a file; use LS to list it")]
    Directory { requested: String },
    #[error(
        "`{requested}` is not a regular file (a FIFO, socket or device); file tools only use regular files"
    )]
    Special { requested: String },
    #[error("`{requested}` is a binary file; file tools edit text files only")]
    Binary { requested: String },
    #[error("`{requested}` is not valid UTF-8 text; file tools edit UTF-8 text files only")]
    NotUtf8 { requested: String },
    #[error("cannot read `{requested}`: {source}")]
    Io {
        requested: String,
        source: io::Error,
    },
}

/// Refuses FIFOs, sockets and devices, which would block or never end; a missing path or a
/// directory passes (callers report those themselves).
pub(crate) fn refuse_special_file(requested: &str, resolved: &Path) -> Result<(), TextFileError> {
    match std::fs::metadata(resolved) {
        Ok(metadata) if !metadata.is_file() && !metadata.is_dir() => Err(TextFileError::Special {
            requested: requested.to_owned(),
        }),
        _ => Ok(()),
    }
}

/// Reads a whole UTF-8 text file for editing.
pub(crate) fn read_text_file(requested: &str, resolved: &Path) -> Result<String, TextFileError> {
    refuse_special_file(requested, resolved)?;
    let bytes = std::fs::read(resolved).map_err(|source| match source.kind() {
        io::ErrorKind::NotFound => TextFileError::Missing {
            requested: requested.to_owned(),
            resolved: resolved.display().to_string(),
        },
        io::ErrorKind::IsADirectory => TextFileError::Directory {
            requested: requested.to_owned(),
        },
        _ => TextFileError::Io {
            requested: requested.to_owned(),
            source,
        },
    })?;
    if looks_binary(&bytes) {
        return Err(TextFileError::Binary {
            requested: requested.to_owned(),
        });
    }
    String::from_utf8(bytes).map_err(|_| TextFileError::NotUtf8 {
        requested: requested.to_owned(),
    })
}

/// Writes `content` to `resolved`, creating missing parent directories.
pub(crate) fn write_text_file(resolved: &Path, content: &str) -> io::Result<()> {
    if let Some(parent) = resolved.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(resolved, content)
}

/// Runs blocking file work off the async executor.
pub(crate) async fn run_blocking(work: impl FnOnce() -> ToolOutput + Send + 'static) -> ToolOutput {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|error| ToolOutput::error(format!("the tool failed internally: {error}")))
}

/// [`run_blocking`] with the call's path once resolved; a path the call may not use is its
/// error, and nothing runs.
pub(crate) async fn run_blocking_on(
    resolved: Result<PathBuf, PathError>,
    work: impl FnOnce(PathBuf) -> ToolOutput + Send + 'static,
) -> ToolOutput {
    match resolved {
        Ok(path) => run_blocking(move || work(path)).await,
        Err(error) => ToolOutput::error(error.to_string()),
    }
}
