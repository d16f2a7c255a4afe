//! What each API's wire format implements for the HTTP client: a parser of its SSE events
//! (the dialect modules implement it; the client drives it), and the text helper both use.

use super::error::FailureKind;
use super::types::{ModelResponse, StreamEvent};

/// Parses one API's SSE events into a response.
pub(crate) trait StreamParser: Send {
    /// Handles one SSE event; `Ok(true)` once the terminal event has arrived.
    fn event(
        &mut self,
        name: &str,
        data: &str,
        emit: &mut dyn FnMut(StreamEvent),
    ) -> Result<bool, FailureKind>;

    /// The response after the terminal event (`terminal`) or a clean end of the body.
    fn finish(
        self: Box<Self>,
        terminal: bool,
        emit: &mut dyn FnMut(StreamEvent),
    ) -> Result<ModelResponse, FailureKind>;
}

/// `s` cut to at most `max` bytes (on a character boundary), with `…` when cut.
pub(crate) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}
