//! `muster bench ARGS…` hands its arguments to the `muster-bench` binary beside `muster` (the
//! benchmarks are their own crate; their scenarios are tested in bench/tests). Here a stand-in
//! `muster-bench` beside a copy of `muster` records what it was given.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;

use super::common::stderr;

/// A directory holding a copy of the `muster` binary, and `muster-bench` when `stand_in` is
/// given: a script that prints its arguments one a line and exits 7.
fn binaries(stand_in: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_muster"), dir.path().join("muster")).unwrap();
    if stand_in {
        let script = dir.path().join("muster-bench");
        std::fs::write(
            &script,
            "#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done\nexit 7\n",
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

fn muster_in(dir: &Path) -> Command {
    let mut command = Command::new(dir.join("muster"));
    command.current_dir(dir);
    command
}

#[test]
fn muster_bench_hands_its_arguments_and_the_store_to_muster_bench_and_keeps_its_exit_code() {
    let dir = binaries(true);
    let output = muster_in(dir.path())
        .args([
            "--store",
            "postgres://h/db",
            "bench",
            "team",
            "--smoke",
            "--help",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(7), "{}", stderr(&output));
    let given = String::from_utf8(output.stdout).unwrap();
    assert_eq!(
        given.lines().collect::<Vec<_>>(),
        ["--store", "postgres://h/db", "team", "--smoke", "--help"]
    );
}

#[test]
fn muster_bench_without_muster_bench_beside_it_says_how_to_build_it() {
    let dir = binaries(false);
    let output = muster_in(dir.path())
        .args(["bench", "mailbox", "--smoke"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("cargo build --release -p muster -p muster-bench"),
        "{}",
        stderr(&output)
    );
}
