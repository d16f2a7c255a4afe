//! `muster bench mailbox --smoke`: both systems and the disk, side by side, as JSON.

use std::process::Command;

use serde_json::Value;

#[test]
fn the_mailbox_bench_prints_both_systems_and_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(["bench", "mailbox", "--smoke", "--json", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rows: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
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
