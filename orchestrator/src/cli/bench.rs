//! `muster bench ARGS…`: the benchmarks live in their own crate and binary (`muster-bench`,
//! ARCHITECTURE.md "Benchmarks"), so the product crate ships none of them; this command runs
//! the `muster-bench` beside this binary with the same arguments, as `git` runs its external
//! commands.

use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};

use crate::exit::{Exit, ExitError};
use crate::project::Globals;

/// The benchmark binary's file name.
pub const BENCH_BINARY: &str = "muster-bench";

/// Replaces this process with `muster-bench ARGS…` (`--store` handed on); returns only when
/// that binary cannot be started.
pub fn execute(global: &Globals, args: &[OsString]) -> anyhow::Result<Exit> {
    let own = std::env::current_exe()?;
    let bench = bench_binary(&own);
    let mut command = std::process::Command::new(&bench);
    if let Some(store) = &global.store {
        command.arg("--store").arg(store);
    }
    command.args(args);
    let error = command.exec();
    Err(ExitError::new(
        Exit::Usage,
        format!(
            "muster bench runs {} ({error}); the benchmarks are a separate binary: build it \
             beside muster with `cargo build --release -p muster -p muster-bench` (or \
             `cargo install --path bench`)",
            bench.display()
        ),
    )
    .into())
}

/// `muster-bench` in the directory of the running `muster` (a build makes both there).
fn bench_binary(own: &Path) -> PathBuf {
    own.with_file_name(format!("{BENCH_BINARY}{}", std::env::consts::EXE_SUFFIX))
}
