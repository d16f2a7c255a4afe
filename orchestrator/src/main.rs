//! The `muster` binary: parse, run, map the outcome to an exit code.

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::Parser;
use muster::cli::{Cli, Command, GlobalArgs, dispatch};
use muster::exit::Exit;
use muster::process::ProcessGiven;
use muster::run_log::RunLog;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

fn main() -> ExitCode {
    // The Bash sandbox's trampoline must confine a process that has started no thread.
    if let Some(code) = muster::sandbox::run_trampoline_if_asked() {
        return ExitCode::from(code);
    }
    install_tls_provider();
    let cli = claude_command_line().unwrap_or_else(Cli::parse);
    let run_log = RunLog::default();
    init_logging(&cli.global.log_level, &run_log);
    let code = match dispatch(cli, ProcessGiven::capture(run_log.clone())) {
        Ok(exit) => {
            run_log.finish(exit.code(), None, None);
            exit.code()
        }
        Err(error) => {
            eprintln!("muster: {error:#}");
            let code = Exit::for_error(&error).code();
            run_log.finish(code, None, Some(&format!("{error:#}")));
            code
        }
    };
    // Every connection has been dropped (its server's group killed with it) by now; this
    // catches one a detached task still held.
    muster_agents::mcp::kill_server_groups();
    run_log.close();
    ExitCode::from(code)
}

/// Started under the name `claude` (a link to this binary): Claude Code's command line, as
/// `muster claude ARGS…` takes it.
fn claude_command_line() -> Option<Cli> {
    let mut argv = std::env::args_os();
    if !muster::claude::invoked_as_claude(&argv.next()?) {
        return None;
    }
    Some(Cli {
        global: GlobalArgs {
            directory: None,
            store: None,
            log_level: "warn".into(),
        },
        command: Command::Claude {
            args: argv.collect(),
        },
    })
}

/// The process's rustls crypto provider (ring), once, before any client exists: reqwest is
/// built without one, and every HTTP client of the process — the model's, MCP servers'
/// (rmcp builds its own), any later one — takes the process default.
fn install_tls_provider() {
    // An error only means a provider is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Logs go to stderr and, once a run is known, to its `.muster/logs/<run>.jsonl`
/// ([`RunLog`]), never to stdout; `--log-level` sets stderr's level (a bad value is reported
/// and the default `warn` kept).
fn init_logging(level: &str, run_log: &RunLog) {
    let filter = tracing_subscriber::EnvFilter::try_new(level).unwrap_or_else(|error| {
        eprintln!("muster: --log-level {level:?} is not a level ({error}); using warn");
        tracing_subscriber::EnvFilter::new("warn")
    });
    let stderr_level = filter.max_level_hint();
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal, never in a file or a pipe.
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .with_filter(filter);
    let _ = tracing_subscriber::registry()
        .with(stderr)
        .with(run_log.layer(stderr_level))
        .try_init();
}
