//! The benchmarks at smoke size, through the `muster-bench` binary (`muster bench ARGS…` runs
//! it; that hand-over is tested in the `muster` suite). The scenarios that run `muster` as a
//! child (team, cache, batch) use the one beside `muster-bench`, which `cargo test
//! --workspace` builds with it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

use serde_json::Value;

// The store suite's server and schemas (some of its helpers are not used here).
#[allow(dead_code)]
#[path = "../../mailbox/tests/suite/pg.rs"]
mod pg;

/// The `muster-bench` binary under test.
fn bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_muster-bench"))
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The JSON rows of `muster-bench <kind> --smoke`, run in a fresh directory.
fn smoke_rows(kind: &str) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let output = bench()
        .args([kind, "--smoke", "--json", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn the_mailbox_bench_prints_both_systems_and_the_disk() {
    let rows = smoke_rows("mailbox");
    let systems = |scenario: &str| -> Vec<&str> {
        rows.iter()
            .filter(|r| r["scenario"] == scenario)
            .filter_map(|r| r["system"].as_str())
            .collect()
    };
    assert_eq!(systems("fsync_4k_append"), ["disk"]);
    for scenario in [
        "throughput_sync_full",
        "throughput_sync_normal",
        "latency_paced_5_per_s",
        "latency_closed_loop",
        "send_into_empty_inbox",
        "reopen_resume_10000",
    ] {
        let found = systems(scenario);
        assert!(
            found.contains(&"muster") && found.contains(&"file-inbox"),
            "{scenario}: {found:?}"
        );
    }
    for row in &rows {
        for field in [
            "system",
            "scenario",
            "senders",
            "msgs_per_s",
            "p50_ms",
            "p99_ms",
            "target_met",
        ] {
            assert!(row.get(field).is_some(), "{field} missing in {row}");
        }
    }
    let paced = rows
        .iter()
        .find(|r| r["system"] == "muster" && r["scenario"] == "latency_paced_5_per_s")
        .unwrap();
    assert!(paced["p50_ms"].as_f64().unwrap() > 0.0);
    assert!(paced["target_met"].is_boolean());
}

#[test]
fn the_team_bench_prints_overhead_hooks_wall_time_memory_and_parallel_bash_rows() {
    let rows = smoke_rows("team");
    let scenarios: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r["scenario"].as_str().unwrap(), r["sync"].as_str().unwrap()))
        .collect();
    assert_eq!(
        scenarios,
        [
            ("overhead_per_tool_call", "normal"),
            ("hooks_per_tool_call", "normal"),
            ("wall_vs_ideal", "normal"),
            ("overhead_per_tool_call", "full"),
            // The pipelined WAL sync beside SQLite's own sync at COMMIT, the default.
            ("overhead_per_tool_call", "full_pipelined"),
            ("idle_teammates_memory", "normal"),
            ("parallel_bash", "worktree"),
            ("parallel_bash", "shared"),
            ("traces", "off"),
            ("traces", "local"),
            ("traces", "down"),
            ("traces", "slow"),
            ("traces", "off"),
        ]
    );
    // The exporter on sent its spans to the local collector.
    let local = rows
        .iter()
        .find(|r| r["scenario"] == "traces" && r["sync"] == "local")
        .unwrap();
    assert!(
        !local["note"].as_str().unwrap().contains(": 0 requests"),
        "{local}"
    );
    // Both isolations ran every teammate's plan and Bash command (beside the lead's
    // TaskCreate each).
    for row in rows.iter().filter(|r| r["scenario"] == "parallel_bash") {
        let teammates = row["teammates"].as_u64().unwrap();
        assert_eq!(row["tool_calls"].as_u64(), Some(3 * teammates), "{row}");
    }
    for row in &rows {
        for field in [
            "system",
            "scenario",
            "sync",
            "teammates",
            "model_latency_ms",
            "lead_turns",
            "longest_teammate_turns",
            "model_requests",
            "tool_calls",
            "wall_ms",
            "ideal_ms",
            "overhead_ms_per_tool_call",
            "peak_mib",
            "target",
            "target_met",
            "note",
        ] {
            assert!(row.get(field).is_some(), "{field} missing in {row}");
        }
        assert!(row["wall_ms"].as_f64().unwrap() > 0.0, "{row}");
        assert!(row["peak_mib"].as_f64().unwrap() > 0.0, "{row}");
    }
    for row in rows.iter().filter(|r| {
        !matches!(
            r["scenario"].as_str(),
            Some("idle_teammates_memory" | "parallel_bash")
        )
    }) {
        // Two workers, each one turn of two tool calls; the lead creates two tasks.
        assert_eq!(row["tool_calls"], 6, "{row}");
        assert_eq!(row["longest_teammate_turns"], 2, "{row}");
        assert!(row["overhead_ms_per_tool_call"].is_number(), "{row}");
        assert!(
            row["ideal_ms"].as_f64().unwrap() >= 5.0 * 3.0,
            "at least the lead's first turn and two worker turns: {row}"
        );
    }
    let normal = &rows[0];
    assert!(normal["target_met"].is_boolean());
    assert!(
        rows[1]["target_met"].is_boolean(),
        "the hooks row is judged"
    );
    assert!(
        rows[3]["target_met"].is_boolean(),
        "full, the default, is judged too"
    );
    assert!(
        rows[4]["target_met"].is_null(),
        "the side variant is reported, not judged"
    );
    let idle = &rows[5];
    assert_eq!(idle["teammates"], 3);
    assert_eq!(
        idle["tool_calls"], 3,
        "the lead creates a task per teammate: {idle}"
    );
    assert!(idle["target_met"].is_boolean());
}

#[test]
fn the_cache_bench_prints_each_agents_share_and_both_costs() {
    let rows = smoke_rows("cache");
    let agents: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| {
            (
                r["scenario"].as_str().unwrap(),
                r["agent"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        &agents[..2],
        [("single_agent", "main"), ("single_agent", "all")]
    );
    let team: Vec<&str> = agents
        .iter()
        .filter(|(s, _)| *s == "team")
        .map(|(_, a)| *a)
        .collect();
    assert_eq!(team.first(), Some(&"lead"), "{team:?}");
    assert_eq!(team.last(), Some(&"all"), "{team:?}");
    for worker in ["worker-1", "worker-2"] {
        assert!(team.contains(&worker), "{team:?}");
    }
    // The smoke single agent makes 6 requests; every request of the run was recorded.
    assert_eq!(rows[0]["requests"], 6);
    for row in &rows {
        for field in [
            "system",
            "scenario",
            "agent",
            "model",
            "requests",
            "input_tokens",
            "read_tokens",
            "write_tokens",
            "share_after_first",
            "ceiling_after_first",
            "max_breakpoints",
            "cost_cached_usd",
            "cost_uncached_usd",
            "target",
            "target_met",
        ] {
            assert!(row.get(field).is_some(), "{field} missing in {row}");
        }
        assert!(row["max_breakpoints"].as_u64().unwrap() <= 4, "{row}");
        let (share, ceiling) = (
            row["share_after_first"].as_f64().unwrap(),
            row["ceiling_after_first"].as_f64().unwrap(),
        );
        assert!(share > 0.0 && share <= ceiling + 1e-9, "{row}");
        let (cached, uncached) = (
            row["cost_cached_usd"].as_f64().unwrap(),
            row["cost_uncached_usd"].as_f64().unwrap(),
        );
        assert!(cached > 0.0 && cached < uncached, "{row}");
        assert!(row["target_met"].is_boolean(), "{row}");
        let read = row["read_tokens"].as_u64().unwrap();
        let written = row["write_tokens"].as_u64().unwrap();
        assert!(
            read + written <= row["input_tokens"].as_u64().unwrap(),
            "{row}"
        );
    }
}

#[test]
fn the_cache_bench_prints_a_table() {
    let dir = tempfile::tempdir().unwrap();
    let output = bench()
        .args(["cache", "--smoke", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = String::from_utf8(output.stdout).unwrap();
    let header = text.lines().next().unwrap();
    for column in [
        "scenario",
        "agent",
        "share",
        "ceiling",
        "$ cached",
        "$ uncached",
    ] {
        assert!(header.contains(column), "{header}");
    }
    assert!(
        text.lines().any(|l| l.starts_with("single_agent  main")),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("team          all")),
        "{text}"
    );
}

/// `cockpit --smoke` prints its row (the figure itself is the bench's, not a test's).
#[test]
fn the_cockpit_bench_prints_the_first_views_time() {
    let rows = smoke_rows("cockpit");
    let row = &rows[0];
    assert_eq!(
        (row["agents"].as_u64(), row["mails"].as_u64()),
        (Some(3), Some(20))
    );
    assert!(row["first_ms"].as_f64().unwrap() > 0.0, "{row}");
    assert!(row["page_bytes"].as_u64().unwrap() > 1000, "{row}");
}

#[test]
fn the_batch_bench_prints_throughput_rows_and_the_store_share_per_item() {
    let schema = pg::Schema::new();
    let dir = tempfile::tempdir().unwrap();
    let output = bench()
        .args([
            "--store",
            &schema.url(),
            "batch",
            "--smoke",
            "--json",
            "--dir",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let rows: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    let throughput: Vec<&Value> = rows
        .iter()
        .filter(|r| r["scenario"] == "throughput")
        .collect();
    assert_eq!(throughput.len(), 2, "{rows:#?}");
    assert_eq!(throughput[0]["of_linear"], 1.0);
    assert!(
        throughput
            .iter()
            .all(|r| r["lines_per_second"].as_f64().unwrap() > 0.0)
    );
    let overhead: Vec<&str> = rows
        .iter()
        .filter(|r| r["scenario"] == "store_overhead")
        .map(|r| r["what"].as_str().unwrap())
        .collect();
    assert!(overhead.contains(&"claim") && overhead.contains(&"heartbeat (one lease)"));
    assert!(
        overhead.iter().any(|w| w.starts_with("fencing per write")),
        "{overhead:?}"
    );
    // Without a PostgreSQL store it says what it needs.
    let output = bench().args(["batch", "--smoke"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("--store postgres://"),
        "{}",
        stderr(&output)
    );
}
