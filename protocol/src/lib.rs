//! muster's shared vocabulary, in one typed home low in the crate graph (ARCHITECTURE.md "The
//! vocabulary"): the words agents, the store, the person's front ends and the printers all
//! speak — message kinds and their bodies, request ids, responders, tool names — and the run
//! events every front end reads.
//!
//! Nothing here does I/O. The serialised forms (the store's `kind` and `body` columns, the
//! request ids in them, `--output stream-json`) are the formats muster has always written;
//! their spelling lives only here.

/// What a word of the vocabulary spelled by its `as_str` is: it prints and serialises as that
/// spelling, and compares equal to text that spells it (either way round).
macro_rules! spelled_by_as_str {
    ($word:ty) => {
        impl std::fmt::Display for $word {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $word {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl PartialEq<str> for $word {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<&str> for $word {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl PartialEq<$word> for str {
            fn eq(&self, other: &$word) -> bool {
                self == other.as_str()
            }
        }

        impl PartialEq<$word> for &str {
            fn eq(&self, other: &$word) -> bool {
                *self == other.as_str()
            }
        }

        impl PartialEq<$word> for String {
            fn eq(&self, other: &$word) -> bool {
                self == other.as_str()
            }
        }
    };
}
pub(crate) use spelled_by_as_str;

pub mod body;
pub mod event;
mod kind;
mod request_id;
mod responder;
mod tool;

pub use body::{DroppedGrant, MessageBody};
pub use event::{
    AgentState, ApprovalSubject, BudgetSpend, DecisionSubject, DeltaKind, EventLineError,
    EventSink, NoEvents, RunEvent, TokenUsage,
};
pub use kind::{Correlation, MessageKind};
pub use request_id::{RequestFamily, RequestId, RequestIdError};
pub use responder::{Responder, ResponderError};
pub use tool::{ALL_TOOLS, ToolName};
