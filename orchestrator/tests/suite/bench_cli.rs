//! `muster bench mailbox --smoke`: both systems and the disk, side by side, as JSON.

use std::process::Command;

use serde_json::Value;

use super::common::stderr;

/// The JSON rows of `muster bench <kind> --smoke`, run in a fresh directory.
fn smoke_rows(kind: &str) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(["bench", kind, "--smoke", "--json", "--dir"])
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
fn the_team_bench_prints_overhead_wall_time_memory_and_parallel_bash_rows() {
    let rows = smoke_rows("team");
    let scenarios: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r["scenario"].as_str().unwrap(), r["sync"].as_str().unwrap()))
        .collect();
    assert_eq!(
        scenarios,
        [
            ("overhead_per_tool_call", "normal"),
            ("wall_vs_ideal", "normal"),
            ("overhead_per_tool_call", "full"),
            ("idle_teammates_memory", "normal"),
            ("parallel_bash", "worktree"),
            ("parallel_bash", "shared"),
        ]
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
        rows[2]["target_met"].is_null(),
        "full is reported, not judged"
    );
    let idle = &rows[3];
    assert_eq!(idle["teammates"], 3);
    assert_eq!(
        idle["tool_calls"], 3,
        "the lead creates a task per teammate: {idle}"
    );
    assert!(idle["target_met"].is_boolean());
}
