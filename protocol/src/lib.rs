//! muster's shared vocabulary, in one typed home low in the crate graph (ARCHITECTURE.md "The
//! vocabulary"): the words agents, the store, the person's front ends and the printers all
//! speak — message kinds and their bodies, request ids, responders, tool names — and the run
//! events every front end reads.
//!
//! Nothing here does I/O. The serialised forms (the store's `kind` and `body` columns, the
//! request ids in them, `--output stream-json`) are the formats muster has always written;
//! their spelling lives only here.

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
