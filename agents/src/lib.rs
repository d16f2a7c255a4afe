//! `muster-agents`: one agent — its loop and context window, model providers, tools, the
//! permission engine, plan mode and plan files, subagents.

pub mod budget;
pub mod compaction;
pub mod hooks;
pub mod machine;
pub mod mcp;
pub mod model;
pub mod permission;
pub mod runtime;
pub mod sandbox;
pub mod shell;
pub mod tools;
pub mod trace_ids;
pub mod verification;
