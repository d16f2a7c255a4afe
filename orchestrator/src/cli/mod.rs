//! The command line: global flags and one module per subcommand (DESIGN.md "The CLI").

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::exit::Exit;
use crate::process::ProcessGiven;
use crate::project::Globals;

pub mod agents;
pub mod answer;
pub mod approve;
pub mod batch;
pub mod bench;
pub mod check;
pub mod claude;
pub mod commands;
pub mod config;
pub mod decide;
pub mod demo;
pub mod fork;
pub mod inbox;
pub mod inspect;
pub mod interrupt;
pub mod plans;
pub mod prune;
pub mod reject;
pub mod resume;
pub mod run;
pub mod runs;
pub mod serve;
pub mod tasks;
pub mod trust;
pub mod worker;
pub mod workers;

/// muster: a multi-agent team orchestrator with a durable mailbox.
#[derive(Debug, Parser)]
#[command(name = "muster", version, about, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every subcommand accepts.
#[derive(Debug, Clone, clap::Args)]
pub struct GlobalArgs {
    /// Run as if muster was started in DIR (it becomes the project root).
    #[arg(short = 'C', global = true, value_name = "DIR")]
    pub directory: Option<PathBuf>,
    /// The store: an SQLite file (default: .muster/muster.db under the project root) or a
    /// postgres:// / postgresql:// URL.
    #[arg(long = "store", global = true, value_name = "PATH|URL")]
    pub store: Option<PathBuf>,
    /// Log level for stderr: error, warn, info, debug or trace.
    #[arg(
        long = "log-level",
        global = true,
        value_name = "LEVEL",
        default_value = "warn"
    )]
    pub log_level: String,
}

impl GlobalArgs {
    fn into_globals(self, process: ProcessGiven) -> Globals {
        Globals {
            directory: self.directory,
            store: self.store,
            log_level: self.log_level,
            process,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one agent, or a team, on a prompt.
    Run(run::Args),
    /// Continue a stopped, crashed or decided run.
    Resume(resume::Args),
    /// Interrupt the running turn of a live run (from another terminal or machine): its
    /// model request and tool calls stop, the run stays live and waits for its next prompt
    /// (`muster run --continue RUN -p …`). Ctrl-C still ends the whole run.
    Interrupt(interrupt::Args),
    /// Copy a run under a new id and slug.
    Fork(fork::Args),
    /// Run one task per line of a JSONL file.
    Batch(batch::Args),
    /// Show an agent's (or the human's) mailbox.
    Inbox(inbox::Args),
    /// Show the task board.
    Tasks(tasks::Args),
    /// List plan files with their agent, request and state.
    Plans(plans::Args),
    /// List runs with their status.
    Runs(runs::Args),
    /// Delete settled history of finished runs.
    Prune(prune::Args),
    /// Approve a plan or permission request as `human`.
    Approve(approve::Args),
    /// Reject a plan or permission request as `human`.
    Reject(reject::Args),
    /// Answer a question as `human`.
    Answer(answer::Args),
    /// Show the permission decision for a tool call without running it.
    Check(check::Args),
    /// Show the effective settings.
    Config(config::Args),
    /// List agent definitions.
    Agents(agents::Args),
    /// List the slash commands a prompt may name (`/name args`) and the skills agents see.
    Commands(commands::Args),
    /// Run the offline demonstration.
    Demo(demo::Args),
    /// Run a benchmark (the `muster-bench` binary beside this one; `muster bench --help`).
    #[command(disable_help_flag = true)]
    Bench {
        /// The benchmark and its flags (`mailbox --smoke`, `team --teammates 8`, …).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Serve the web inbox on 127.0.0.1.
    Serve(serve::Args),
    /// Claim batch lines from a PostgreSQL store and run them, until stopped.
    Worker(worker::Args),
    /// List the workers the store knows.
    Workers(workers::Args),
    /// Trust this project as it is now: its own settings that widen access take effect.
    Trust(trust::Args),
    /// Serve an editor over the Agent Client Protocol on stdin/stdout (Zed, JetBrains,
    /// Neovim): each session is a run.
    Acp,
    /// Behave as Claude Code's headless mode (`claude -p`, the Agent SDKs): Claude Code's
    /// flags and messages (as when the binary is started under the name `claude`).
    #[command(disable_help_flag = true)]
    Claude {
        /// Claude Code's command line (`-p PROMPT --output-format json`, …).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
}

/// Runs the parsed command; the returned `Exit` becomes the process's exit code.
pub fn dispatch(cli: Cli, process: ProcessGiven) -> anyhow::Result<Exit> {
    // Past this point no clap type: the commands and the run layer take the plain flags.
    let global = cli.global.into_globals(process);
    match cli.command {
        Command::Run(args) => run::execute(&global, args),
        Command::Resume(args) => resume::execute(&global, args),
        Command::Interrupt(args) => interrupt::execute(&global, args),
        Command::Fork(args) => fork::execute(&global, args),
        Command::Batch(args) => batch::execute(&global, args),
        Command::Inbox(args) => inbox::execute(&global, args),
        Command::Tasks(args) => tasks::execute(&global, args),
        Command::Plans(args) => plans::execute(&global, args),
        Command::Runs(args) => runs::execute(&global, args),
        Command::Prune(args) => prune::execute(&global, args),
        Command::Approve(args) => approve::execute(&global, args),
        Command::Reject(args) => reject::execute(&global, args),
        Command::Answer(args) => answer::execute(&global, args),
        Command::Check(args) => check::execute(&global, args),
        Command::Trust(args) => trust::execute(&global, args),
        Command::Config(args) => config::execute(&global, args),
        Command::Agents(args) => agents::execute(&global, args),
        Command::Commands(args) => commands::execute(&global, args),
        Command::Demo(args) => demo::execute(&global, args),
        Command::Bench { args } => bench::execute(&global, &args),
        Command::Serve(args) => serve::execute(&global, args),
        Command::Worker(args) => worker::execute(&global, args),
        Command::Workers(args) => workers::execute(&global, args),
        Command::Acp => crate::acp::serve(&global),
        Command::Claude { args } => claude::execute(&global, &args),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    /// Every option and argument of every command, as `--help` shows them, whose help says
    /// nothing (`muster resume --help` showed three such).
    fn undescribed(command: &clap::Command, path: &str, found: &mut Vec<String>) {
        for arg in command.get_arguments() {
            let id = arg.get_id().as_str();
            if arg.is_hide_set() || id == "help" || id == "version" {
                continue;
            }
            if arg.get_help().is_none() && arg.get_long_help().is_none() {
                found.push(format!("{path} {id}"));
            }
        }
        for sub in command.get_subcommands() {
            if !sub.is_hide_set() {
                undescribed(sub, &format!("{path} {}", sub.get_name()), found);
            }
        }
    }

    #[test]
    fn every_option_in_help_has_a_description() {
        let mut found = Vec::new();
        undescribed(&super::Cli::command(), "muster", &mut found);
        assert!(
            found.is_empty(),
            "options without a description: {found:#?}"
        );
    }
}
