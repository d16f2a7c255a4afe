mod acp_cli;
mod acp_clients;
mod batch_cli;
mod bench_cli;
mod check_cli;
mod claude_cli;
mod claude_sdk;
mod common;
mod compat_cli;
mod config_cli;
mod continue_cli;
mod demo_cli;
mod events_cli;
mod grants_cli;
mod hooks_agents_cli;
mod hooks_cli;
mod hooks_http_cli;
mod hooks_session_cli;
mod hooks_stop_cli;
mod mcp_cli;
mod merge_gate_cli;
mod openai_cli;
mod plan_reviewer_cli;
mod resume_cli;
mod run_cli;
mod sandbox_cli;
mod serve_cli;
mod signal_cli;
mod skills_cli;
mod store_cli;
mod store_pg;
mod team_cli;
#[cfg(all(unix, feature = "failpoints"))]
mod team_crash;
mod team_models_cli;
mod team_workers;
mod traces_cli;
mod trust_cli;
mod worker_faults;
mod worker_procs;
mod workers_cli;
mod worktree_cli;

/// Without the failpoints the team crash test cannot run: it fails naming the command that
/// runs it, rather than skipping in silence.
#[cfg(not(feature = "failpoints"))]
#[test]
fn a_team_run_killed_anywhere_resumes_to_the_end_an_uncut_run_reaches() {
    panic!(
        "the team crash test needs the `failpoints` feature: run `scripts/test` (cargo test \
         --workspace --features muster/failpoints)"
    );
}
