mod batch_cli;
mod bench_cli;
mod check_cli;
mod config_cli;
mod resume_cli;
mod run_cli;
mod store_cli;
mod team_cli;
