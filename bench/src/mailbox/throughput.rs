//! Durable throughput (issue 32): N closed-loop senders into one run, every send durable when
//! it returns. muster's store runs as it ships (at sync full: SQLite's own
//! `synchronous=FULL`, the COMMIT waiting for the disk) and, at sync full, with the other WAL
//! sync beside it (`_pipelined`: the WAL synced by the store's syncer, pipelined with the
//! writer's next batch; `_inline` if the pipeline is ever shipped), beside sync normal and
//! the per-inbox file design — all interleaved over `--repeats`, so a noisy moment hits each
//! alike; each row is the median of its runs.

use std::path::Path;

use muster_mailbox::{StoreOptions, SyncMode};

use super::{
    Options, Row, file_throughput, fresh, muster_throughput, progress, store_options, sync_name,
};
use crate::samples::median;

/// The scenario suffix of the store's rows at sync full with SQLite's own sync at COMMIT,
/// when that is not the shipped way.
const INLINE: &str = "_inline";
/// The same for the store's pipelined WAL sync.
const PIPELINED: &str = "_pipelined";

/// The scenario suffixes of the two WAL syncs at sync full, (pipelined, inline): the
/// shipped one's is empty.
fn full_suffixes() -> (&'static str, &'static str) {
    if StoreOptions::default().pipelined_sync {
        ("", INLINE)
    } else {
        (PIPELINED, "")
    }
}

/// The ways the store runs at `sync`: (scenario suffix, options) — at full, as shipped and
/// with the other WAL sync beside it.
fn variants(sync: SyncMode) -> Vec<(&'static str, StoreOptions)> {
    let shipped = store_options(sync);
    match sync {
        SyncMode::Full => {
            let (pipelined, inline) = full_suffixes();
            let other = !shipped.pipelined_sync;
            vec![
                ("", shipped.clone()),
                (
                    if other { pipelined } else { inline },
                    StoreOptions {
                        pipelined_sync: other,
                        ..shipped
                    },
                ),
            ]
        }
        SyncMode::Normal => vec![("", shipped)],
    }
}

/// Every throughput row, targets marked against the fsync p50 `probe_disk` returns after
/// sampling the disk again before each repeat (the p50 over every sample so far).
pub(super) fn rows(
    runtime: &tokio::runtime::Runtime,
    scratch: &Path,
    options: &Options,
    mut probe_disk: impl FnMut() -> anyhow::Result<f64>,
) -> anyhow::Result<Vec<Row>> {
    let mut fsync_p50_ms = 1.0;
    let mut rows = Vec::new();
    for &senders in &options.senders {
        progress(&format!(
            "durable throughput, {senders} sender(s), {} interleaved run(s) of each of: {}",
            options.repeats,
            options
                .syncs
                .iter()
                .flat_map(|&sync| {
                    variants(sync)
                        .into_iter()
                        .map(move |(suffix, _)| format!("sync {}{suffix}", sync_name(sync)))
                })
                .collect::<Vec<_>>()
                .join(", ")
        ));
        // (scenario, store's runs) in the order the rows are printed, then the file inbox's.
        let mut runs: Vec<(String, Vec<Row>)> = Vec::new();
        let mut files: Vec<(String, Vec<Row>)> = Vec::new();
        for repeat in 0..options.repeats.max(1) {
            fsync_p50_ms = probe_disk()?;
            for &sync in &options.syncs {
                let scenario = format!("throughput_sync_{}", sync_name(sync));
                for (suffix, store) in variants(sync) {
                    let name = format!("{scenario}{suffix}");
                    let dir = fresh(scratch, &format!("{name}-{senders}-{repeat}"))?;
                    let row = runtime.block_on(muster_throughput(&dir, store, senders, options))?;
                    push(&mut runs, name, row);
                }
                let dir = fresh(scratch, &format!("{scenario}-{senders}-{repeat}-file"))?;
                push(
                    &mut files,
                    scenario,
                    file_throughput(&dir, sync, senders, options)?,
                );
            }
        }
        for (scenario, runs) in runs.into_iter().chain(files) {
            rows.push(median_row(runs).named(&scenario));
        }
    }
    mark_targets(&mut rows, fsync_p50_ms);
    Ok(rows)
}

fn push(runs: &mut Vec<(String, Vec<Row>)>, scenario: String, row: Row) {
    match runs.iter_mut().find(|(name, _)| *name == scenario) {
        Some((_, rows)) => rows.push(row),
        None => runs.push((scenario, vec![row])),
    }
}

/// The run with the median rate stands for the scenario (its latencies and commit phases
/// belong together); the note gives the spread.
fn median_row(mut runs: Vec<Row>) -> Row {
    runs.sort_by(|a, b| {
        a.msgs_per_s
            .unwrap_or(0.0)
            .total_cmp(&b.msgs_per_s.unwrap_or(0.0))
    });
    let count = runs.len();
    let spread = match (runs.first(), runs.last()) {
        (Some(low), Some(high)) if count > 1 => Some(format!(
            "median of {count} interleaved runs (msg/s {:.0}–{:.0}, p99 median {:.2} ms)",
            low.msgs_per_s.unwrap_or(0.0),
            high.msgs_per_s.unwrap_or(0.0),
            median(runs.iter().filter_map(|r| r.p99_ms).collect()).unwrap_or(0.0)
        )),
        _ => None,
    };
    let mut row = runs.swap_remove(count / 2);
    row.note = match (row.note.take(), spread) {
        (Some(own), Some(spread)) => Some(format!("{spread}; {own}")),
        (own, spread) => spread.or(own),
    };
    row
}

/// What a durable row is held to, from figures of the same run.
#[derive(Debug, Clone, PartialEq)]
struct Target {
    /// 0.5 × N ÷ fsync p50.
    disk_bound: f64,
    /// 0.8 × the same senders at sync normal (in WAL mode: no fsync at COMMIT, as `off`).
    unsynced_bound: Option<f64>,
    /// One sender, the pipelined sync: p99 at most 1.1 × the store's with SQLite's own sync
    /// at COMMIT.
    p99_bound: Option<f64>,
}

impl Target {
    fn rate(&self) -> f64 {
        self.unsynced_bound
            .map_or(self.disk_bound, |bound| bound.min(self.disk_bound))
    }

    /// Whether `row` meets it, and the note that says from what (and why not).
    fn judge(&self, row: &Row, fsync_p50_ms: f64) -> (bool, String) {
        let got = row.msgs_per_s.unwrap_or(0.0);
        let mut note = format!(
            "target ≥ {:.0} msgs/s = min(0.5 × {} ÷ fsync p50 {fsync_p50_ms:.2} ms = {:.0}",
            self.rate(),
            row.senders,
            self.disk_bound
        );
        if let Some(bound) = self.unsynced_bound {
            note.push_str(&format!(", 0.8 × sync normal = {bound:.0}"));
        }
        note.push_str(&format!("); got {got:.0}"));
        let mut met = got >= self.rate();
        if !met {
            note.push_str(&format!(" ({:.2} of the target)", got / self.rate()));
        }
        if let (Some(bound), Some(p99)) = (self.p99_bound, row.p99_ms) {
            let within = p99 <= bound;
            met &= within;
            note.push_str(&format!(
                "; p99 {p99:.2} ms {} 1.1 × SQLite's own sync's = {bound:.2} ms",
                if within { "≤" } else { "MISSED >" }
            ));
        }
        (met, note)
    }
}

/// Marks muster's sync-full rows: min(0.5 × N ÷ fsync p50, 0.8 × sync normal at N), and at one
/// sender the pipelined sync's p99 within +10% of the store with SQLite's own sync at COMMIT.
fn mark_targets(rows: &mut [Row], fsync_p50_ms: f64) {
    let find = |rows: &[Row], scenario: &str, senders: usize| {
        rows.iter()
            .find(|r| r.system == "muster" && r.scenario == scenario && r.senders == senders)
            .cloned()
    };
    let full = format!("throughput_sync_{}", sync_name(SyncMode::Full));
    let normal = format!("throughput_sync_{}", sync_name(SyncMode::Normal));
    for index in 0..rows.len() {
        let row = &rows[index];
        if row.system != "muster" || !row.scenario.starts_with(&full) {
            continue;
        }
        let (pipelined, inline) = full_suffixes();
        let is_pipelined = row.scenario == format!("{full}{pipelined}");
        let inline = find(rows, &format!("{full}{inline}"), row.senders);
        let target = Target {
            disk_bound: 0.5 * row.senders as f64 * 1000.0 / fsync_p50_ms,
            unsynced_bound: find(rows, &normal, row.senders)
                .and_then(|n| n.msgs_per_s)
                .map(|rate| 0.8 * rate),
            p99_bound: (is_pipelined && row.senders == 1)
                .then(|| inline.and_then(|u| u.p99_ms))
                .flatten()
                .map(|p99| 1.1 * p99),
        };
        let (met, note) = target.judge(row, fsync_p50_ms);
        let row = &mut rows[index];
        row.target_met = Some(met);
        row.note = Some(match row.note.take() {
            Some(own) => format!("{note}; {own}"),
            None => note,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::samples::Samples;
    use std::time::Duration;

    fn row(scenario: &str, senders: usize, rate: f64, p99: f64) -> Row {
        let mut row = Row::new(
            "muster",
            scenario,
            senders,
            &Samples::default(),
            Duration::ZERO,
        );
        row.msgs_per_s = Some(rate);
        row.p99_ms = Some(p99);
        row
    }

    /// (senders, full rate, normal rate, full p99, inline p99, met)
    #[test]
    fn a_durable_row_meets_the_smaller_bound_and_one_sender_keeps_its_p99() {
        // fsync 0.2 ms: the disk bound is 0.5 × 1000 ÷ 0.2 = 2,500 msgs/s a sender.
        let fsync_ms = 0.2;
        let table = [
            (8, 20_500.0, 30_000.0, 1.0, 1.0, true), // min(20,000, 24,000)
            (8, 19_000.0, 30_000.0, 1.0, 1.0, false),
            (8, 16_500.0, 20_000.0, 1.0, 1.0, true), // min(20,000, 16,000)
            (8, 15_000.0, 20_000.0, 1.0, 1.0, false),
            (1, 1_700.0, 2_000.0, 1.05, 1.0, true), // min(2,500, 1,600); p99 +5%
            (1, 1_700.0, 2_000.0, 1.2, 1.0, false), // p99 +20%
        ];
        for (senders, full, normal, p99, plain_p99, met) in table {
            let mut rows = vec![
                row("throughput_sync_full_pipelined", senders, full, p99),
                row("throughput_sync_full", senders, full, plain_p99),
                row("throughput_sync_normal", senders, normal, 0.1),
            ];
            mark_targets(&mut rows, fsync_ms);
            assert_eq!(rows[0].target_met, Some(met), "{:?}", rows[0].note);
            assert!(rows[0].note.as_deref().unwrap_or("").contains("got"));
            assert_eq!(rows[2].target_met, None, "sync normal has no target");
        }
    }

    #[test]
    fn the_median_run_stands_for_the_scenario() {
        let runs = vec![
            row("t", 8, 300.0, 3.0),
            row("t", 8, 100.0, 1.0),
            row("t", 8, 200.0, 2.0),
        ];
        let median = median_row(runs);
        assert_eq!(median.msgs_per_s, Some(200.0));
        assert_eq!(median.p99_ms, Some(2.0));
        let note = median.note.unwrap_or_default();
        assert!(
            note.contains("median of 3") && note.contains("100–300"),
            "{note}"
        );
    }
}
