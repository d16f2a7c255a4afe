//! Where a durable commit's time goes (issue 32): the SQLite writer's phases per commit and per
//! operation, read from the store's counters around one throughput scenario.

use muster_mailbox::{CommitTime, StoreStats};
use serde::Serialize;

/// One scenario's writer time, per commit and per operation, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CommitPhases {
    pub commits: u64,
    pub operations_per_commit: f64,
    /// Per operation: from `submit` to its batch's BEGIN.
    pub queued_ms: f64,
    /// Per commit, each phase.
    pub begin_ms: f64,
    pub statements_ms: f64,
    pub commit_ms: f64,
    /// The pipelined sync: from COMMIT to an fsync begun after it ending.
    pub sync_ms: f64,
    pub deliver_ms: f64,
    /// The store's own WAL syncs per commit (pipelined sync: one may cover several).
    pub syncs_per_commit: f64,
    /// Per operation: what the sender waited beyond the queue and its whole batch — the
    /// wake-up of the sending task and the runtime's scheduling.
    pub wake_ms: f64,
}

impl CommitPhases {
    /// The phases between two readings of one store's counters; `mean_latency_ms` is the
    /// senders' mean send latency over the same span.
    pub fn between(before: &StoreStats, after: &StoreStats, mean_latency_ms: f64) -> Option<Self> {
        let commits = after.commits.saturating_sub(before.commits);
        let operations = after.operations.saturating_sub(before.operations);
        if commits == 0 || operations == 0 {
            return None;
        }
        let time: CommitTime = after.time.since(&before.time);
        let per_commit = |us: u64| us as f64 / 1000.0 / commits as f64;
        let queued_ms = time.queued_us as f64 / 1000.0 / operations as f64;
        let batch_ms = per_commit(time.begin_us)
            + per_commit(time.statements_us)
            + per_commit(time.commit_us)
            + per_commit(time.sync_us)
            + per_commit(time.deliver_us);
        Some(CommitPhases {
            commits,
            operations_per_commit: operations as f64 / commits as f64,
            queued_ms,
            begin_ms: per_commit(time.begin_us),
            statements_ms: per_commit(time.statements_us),
            commit_ms: per_commit(time.commit_us),
            sync_ms: per_commit(time.sync_us),
            deliver_ms: per_commit(time.deliver_us),
            syncs_per_commit: after.syncs.saturating_sub(before.syncs) as f64 / commits as f64,
            wake_ms: (mean_latency_ms - queued_ms - batch_ms).max(0.0),
        })
    }
}

/// The table of the rows that carry phases: one line per sync mode and sender count.
pub fn render(rows: &[super::Row]) -> String {
    let timed: Vec<_> = rows
        .iter()
        .filter_map(|row| row.commit_time.map(|phases| (row, phases)))
        .collect();
    if timed.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\nwhere a commit's time goes (SQLite writer; ms per commit, queue and wake per message;\n\
         COMMIT is the WAL write, plus its fsync with SQLite's own sync full (the default); with\n\
         the pipelined sync, `sync` is COMMIT to the end of an fsync begun after it, while the writer\n\
         runs the next batch; fsyncs is the store's own WAL syncs per commit)\n",
    );
    out.push_str(&format!(
        "{:<34} {:>7} | {:>8} {:>8} | {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} | {:>8}\n",
        "scenario",
        "senders",
        "msgs/txn",
        "queued",
        "BEGIN",
        "stmts",
        "COMMIT",
        "sync",
        "fsyncs",
        "deliver",
        "wake"
    ));
    for (row, p) in timed {
        out.push_str(&format!(
            "{:<34} {:>7} | {:>8.1} {:>8.3} | {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.2} {:>8.3} | {:>8.3}\n",
            row.scenario,
            row.senders,
            p.operations_per_commit,
            p.queued_ms,
            p.begin_ms,
            p.statements_ms,
            p.commit_ms,
            p.sync_ms,
            p.syncs_per_commit,
            p.deliver_ms,
            p.wake_ms
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(commits: u64, operations: u64, time: CommitTime) -> StoreStats {
        StoreStats {
            commits,
            operations,
            syncs: 0,
            looks: 0,
            time,
        }
    }

    #[test]
    fn phases_are_divided_per_commit_and_queue_per_operation() {
        let before = stats(10, 10, CommitTime::default());
        let after = stats(
            20,
            50,
            CommitTime {
                queued_us: 40_000,
                begin_us: 1_000,
                statements_us: 2_000,
                commit_us: 30_000,
                sync_us: 0,
                deliver_us: 1_000,
            },
        );
        let phases = CommitPhases::between(&before, &after, 5.0).expect("commits happened");
        assert_eq!(phases.commits, 10);
        assert_eq!(phases.operations_per_commit, 4.0);
        assert_eq!(phases.queued_ms, 1.0);
        assert_eq!(phases.commit_ms, 3.0);
        // 5.0 - 1.0 queued - (0.1 + 0.2 + 3.0 + 0.1) of the batch
        assert!((phases.wake_ms - 0.6).abs() < 1e-9, "{}", phases.wake_ms);
        assert_eq!(CommitPhases::between(&after, &after, 1.0), None);
    }
}
