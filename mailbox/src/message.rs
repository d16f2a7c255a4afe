//! The message vocabulary — kinds, typed bodies, correlation — lives in `muster-protocol`
//! (ARCHITECTURE.md "The vocabulary"); the store's callers find it here too.

pub use muster_protocol::body::stored;
pub use muster_protocol::{Correlation, DroppedGrant, MessageBody, MessageKind};

/// Correlation rules by a stored kind's spelling, so raw kinds are classified too.
pub(crate) fn correlation_of(kind: &str) -> Correlation {
    MessageKind::parse(kind).correlation()
}

/// The roster entry that sends as a responder (see [`muster_protocol::Responder::member_for`]).
pub(crate) fn responder_member(responder: &str) -> &str {
    muster_protocol::Responder::member_for(responder)
}
