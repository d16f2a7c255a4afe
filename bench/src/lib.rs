//! Benchmarks (`muster bench …`): figures, not tests. Each compares systems side by side in
//! one run and on one disk, and prints ratios beside absolute figures.

pub mod batch;
pub mod cache;
pub mod cli;
pub mod cockpit;
pub mod file_inbox;
pub mod mailbox;
mod samples;
pub mod sandbox;
pub mod team;
pub mod traces;

use std::path::PathBuf;

use anyhow::Context as _;

/// The `muster` binary the scenarios run as children: the one beside this binary, as
/// `muster bench` finds this one beside itself (one build makes both).
pub fn muster_binary() -> anyhow::Result<PathBuf> {
    let own = std::env::current_exe().context("cannot find the muster-bench binary's path")?;
    let muster = own.with_file_name(format!("muster{}", std::env::consts::EXE_SUFFIX));
    if !muster.is_file() {
        anyhow::bail!(
            "{} not found: the benchmarks run the `muster` binary beside muster-bench; build \
             both (`cargo build --release -p muster -p muster-bench`)",
            muster.display()
        );
    }
    Ok(muster)
}

/// The runtime a scenario's async part runs on.
pub fn tokio_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}
