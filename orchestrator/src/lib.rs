//! `muster`: a team — lead and teammates, approvers, verification, batch runs — and the CLI.

pub mod batch;
pub mod bench;
pub mod cli;
pub mod display;
pub mod exit;
pub mod human_decision;
pub mod ids;
pub mod launch;
pub(crate) mod lifecycle;
pub mod loading;
pub mod mcp;
pub(crate) mod models;
pub mod plan_diff;
pub mod progress;
pub mod project;
pub mod run_log;
pub mod sandbox;
pub mod serve;
pub mod single_run;
pub mod store_demo;
pub mod stored_policies;
pub mod stream_json;
pub mod team;
pub mod team_demo;
pub mod worker;
pub mod worktree;
