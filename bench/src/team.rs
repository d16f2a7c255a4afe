//! `muster bench team`: synthetic teammates on the `script` provider with a fixed model
//! latency, run as a child `muster run` process in a temporary project.
//!
//! Each run writes a team file (`worker` × N, no plan mode) and a cassette: the lead creates N
//! independent tasks in its first turn and answers every later turn with text; each worker
//! makes `turns − 1` turns of read-only tool calls (`Read`, `Glob`) and ends with text. Every
//! response carries `fault.first_byte_delay_ms = L`, so the script provider answers after L.
//!
//! Figures, per run (from the child's `--output stream-json` events and its `/proc` entry):
//! - **overhead per tool call**: for each agent, the time between a `model_turn` event that
//!   ended with tool calls and that agent's next `model_turn`, minus the next turn's
//!   `latency_ms` (the runtime's own measure of the wait for the model: L and the timer's
//!   rounding of it), summed over every agent and divided by the tool calls in between. It is
//!   what muster spends per call outside the model: permission check, the tool, the mailbox and
//!   event writes, building the next request. Timestamps are in whole milliseconds (averaged
//!   over many calls).
//! - **wall time against the ideal**: the child process from spawn to exit, against
//!   L × (lead turns + the longest teammate's turns), with the turns counted from the events.
//! - **peak memory**: the child's `VmHWM` (peak resident set), read from `/proc/PID/status`
//!   every 2 ms while it runs; the largest reading.

use muster_protocol::ToolName;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use muster_mailbox::SyncMode;
use serde::Serialize;
use serde_json::{Value, json};

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Workers with one independent task each.
    pub teammates: usize,
    /// Model turns per worker (the last one ends with text).
    pub turns: usize,
    /// Tool calls in each of a worker's tool turns.
    pub calls_per_turn: usize,
    /// The fixed model latency L of every response.
    pub latency: Duration,
    /// Sync settings to run the tasks scenario with (the first also gives the wall-time row).
    pub syncs: Vec<SyncMode>,
    /// Runs of the tasks scenario at each sync setting, interleaved; its rows are the median
    /// run's, with the spread.
    pub repeats: usize,
    /// Teammates of the idle scenario (one answer each, then idle).
    pub idle_teammates: usize,
    /// The idle scenario's model latency: long enough for every teammate to claim its task
    /// before the first one answers, so that all of them are started at once.
    pub idle_hold: Duration,
    /// How long each teammate's one Bash command of the parallel-Bash scenario takes.
    pub bash: Duration,
    /// Teammates of the parallel-Bash scenario.
    pub bash_teammates: usize,
    /// The `muster` binary to run.
    pub muster: PathBuf,
    /// Where to create the temporary projects.
    pub dir: PathBuf,
}

/// One figure.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub system: &'static str,
    /// `overhead_per_tool_call`, `wall_vs_ideal`, `idle_teammates_memory`, `parallel_bash`
    /// or `traces`.
    pub scenario: &'static str,
    /// The mailbox's `synchronous` setting of the run, the isolation of a `parallel_bash`
    /// row (`worktree`, `shared`), or a `traces` row's collector (`off`, `local`, `down`,
    /// `slow`).
    pub sync: &'static str,
    pub teammates: usize,
    pub model_latency_ms: f64,
    pub lead_turns: usize,
    pub longest_teammate_turns: usize,
    pub model_requests: usize,
    pub tool_calls: usize,
    pub wall_ms: f64,
    pub ideal_ms: f64,
    pub overhead_ms_per_tool_call: Option<f64>,
    pub peak_mib: Option<f64>,
    /// The target of this row, as text.
    pub target: &'static str,
    /// Whether the target is met; `null` where the row has no target of its own.
    pub target_met: Option<bool>,
    /// How the figure was measured.
    pub note: String,
}

/// What one child run gave.
struct Measured {
    wall: Duration,
    peak_kib: Option<u64>,
    lead_turns: usize,
    longest_teammate_turns: usize,
    model_requests: usize,
    tool_calls: usize,
    overhead_ms_per_call: Option<f64>,
    /// The same time per tool-calling turn.
    overhead_ms_per_turn: Option<f64>,
    /// Tool calls per tool-calling turn.
    calls_per_turn: Option<f64>,
    /// The median over tool-calling turns of each turn's overhead per call.
    overhead_ms_per_call_p50: Option<f64>,
    /// Teammates with an `agent_started` event.
    teammates_started: usize,
}

/// How a run's store makes commits durable: the `[mailbox]` sync and, at full, the WAL sync
/// (`pipelined_sync`; `None`: as shipped).
#[derive(Debug, Clone, Copy)]
struct Durability {
    sync: SyncMode,
    pipelined: Option<bool>,
}

impl Durability {
    /// The runs of the overhead scenario at `sync`: as shipped, and at full the store's other
    /// WAL sync beside it, so the two are compared in one bench run.
    fn variants(sync: SyncMode) -> Vec<Durability> {
        let shipped = Durability {
            sync,
            pipelined: None,
        };
        match sync {
            SyncMode::Full => {
                let other = !muster_mailbox::StoreOptions::default().pipelined_sync;
                vec![
                    shipped,
                    Durability {
                        sync,
                        pipelined: Some(other),
                    },
                ]
            }
            _ => vec![shipped],
        }
    }

    /// The row's `sync` column: `full_pipelined` or `full_inline` for the side variant.
    fn name(self) -> &'static str {
        match (self.sync, self.pipelined) {
            (SyncMode::Full, Some(true)) => "full_pipelined",
            (SyncMode::Full, Some(false)) => "full_inline",
            (sync, _) => sync_name(sync),
        }
    }
}

/// The most teammates one `[[teammates]]` entry may declare.
const GROUP: usize = 64;

fn sync_name(sync: SyncMode) -> &'static str {
    match sync {
        SyncMode::Full => "full",
        _ => "normal",
    }
}

/// Runs every scenario and returns its rows.
pub fn run(options: &Options) -> anyhow::Result<Vec<Row>> {
    let l_ms = options.latency.as_secs_f64() * 1000.0;
    let mut rows = Vec::new();
    let shape = Shape::tasks(options, Vec::new());
    // Interleaved, so a noisy moment of a shared machine hits each setting alike.
    let mut measured: Vec<(Durability, Vec<Measured>)> = options
        .syncs
        .iter()
        .flat_map(|&sync| Durability::variants(sync))
        .map(|durability| (durability, Vec::new()))
        .collect();
    for _ in 0..options.repeats.max(1) {
        for (durability, runs) in &mut measured {
            runs.push(run_team_with(options, *durability, &shape)?);
        }
    }
    for (i, (durability, runs)) in measured.into_iter().enumerate() {
        let sync = durability.sync;
        let (m, spread) = median_run(runs);
        let ideal_ms = l_ms * (m.lead_turns + m.longest_teammate_turns) as f64;
        let wall_ms = m.wall.as_secs_f64() * 1000.0;
        let base = Row {
            system: "muster",
            scenario: "overhead_per_tool_call",
            sync: durability.name(),
            teammates: options.teammates,
            model_latency_ms: l_ms,
            lead_turns: m.lead_turns,
            longest_teammate_turns: m.longest_teammate_turns,
            model_requests: m.model_requests,
            tool_calls: m.tool_calls,
            wall_ms,
            ideal_ms,
            overhead_ms_per_tool_call: m.overhead_ms_per_call,
            peak_mib: m.peak_kib.map(|k| k as f64 / 1024.0),
            target: "",
            target_met: None,
            note: String::new(),
        };
        let (target, target_met) = match (sync, durability.pipelined) {
            (SyncMode::Full, Some(_)) => (
                "none: the store's other WAL sync at full, beside the shipped one",
                None,
            ),
            (SyncMode::Full, None) => (
                "<= 1 ms per tool call (sync full, the default)",
                m.overhead_ms_per_call.map(|o| o <= 1.0),
            ),
            _ => (
                "<= 1 ms per tool call (sync normal)",
                m.overhead_ms_per_call.map(|o| o <= 1.0),
            ),
        };
        rows.push(Row {
            target,
            target_met,
            note: format!(
                "per agent: (next model_turn ts - a tool-calling model_turn ts - the next \
                 turn's latency_ms, the wait for the model as the runtime measured it), summed, \
                 / tool calls in between; ms timestamps; per tool-calling turn {} ms, with {} calls per turn (a \
                 turn's read-only calls run concurrently and are committed together); {spread}",
                fmt_ms(m.overhead_ms_per_turn),
                fmt_ms(m.calls_per_turn)
            ),
            ..base.clone()
        });
        if i == 0 {
            let hooked = run_team(
                options,
                sync,
                &Shape {
                    hooks: true,
                    ..shape.clone()
                },
            )?;
            let added = hooked
                .overhead_ms_per_call
                .zip(m.overhead_ms_per_call)
                .map(|(with, without)| with - without);
            let added_p50 = hooked
                .overhead_ms_per_call_p50
                .zip(m.overhead_ms_per_call_p50)
                .map(|(with, without)| with - without);
            rows.push(Row {
                scenario: "hooks_per_tool_call",
                tool_calls: hooked.tool_calls,
                wall_ms: hooked.wall.as_secs_f64() * 1000.0,
                overhead_ms_per_tool_call: hooked.overhead_ms_per_call,
                peak_mib: hooked.peak_kib.map(|k| k as f64 / 1024.0),
                target: "<= 5 ms added per tool call, p50 (sandbox included)",
                target_met: added_p50.map(|a| a <= 5.0),
                note: format!(
                    "the overhead_per_tool_call run again with a PreToolUse and a PostToolUse \
                     hook (`cat > /dev/null`, matcher *) on every call, each a process in the \
                     agent's sandbox under a supervisor that dies with muster; added per call: \
                     p50 {} ms (the medians over tool-calling turns of each turn's overhead \
                     per call, {} ms with hooks, {} ms without), mean {} ms",
                    fmt_ms(added_p50),
                    fmt_ms(hooked.overhead_ms_per_call_p50),
                    fmt_ms(m.overhead_ms_per_call_p50),
                    fmt_ms(added)
                ),
                ..base.clone()
            });
            rows.push(Row {
                scenario: "wall_vs_ideal",
                target: "wall <= 1.15 x ideal (issue: L = 200 ms, 8 tasks)",
                target_met: Some(wall_ms <= ideal_ms * 1.15),
                note: format!(
                    "child muster run, spawn to exit, against L x (lead turns + longest \
                     teammate's turns) = {l_ms:.0} x ({} + {}); ratio {:.3}",
                    m.lead_turns,
                    m.longest_teammate_turns,
                    if ideal_ms > 0.0 {
                        wall_ms / ideal_ms
                    } else {
                        0.0
                    }
                ),
                ..base
            });
        }
    }
    let sync = options.syncs.first().copied().unwrap_or(SyncMode::Normal);
    let shape = Shape {
        teammates: options.idle_teammates,
        turns: 1,
        latency: options.idle_hold,
        lead_latency: Duration::ZERO,
        bash: None,
        hooks: false,
        env: Vec::new(),
    };
    let m = run_team(options, sync, &shape)?;
    let peak_mib = m.peak_kib.map(|k| k as f64 / 1024.0);
    rows.push(Row {
        system: "muster",
        scenario: "idle_teammates_memory",
        sync: sync_name(sync),
        teammates: options.idle_teammates,
        model_latency_ms: options.idle_hold.as_secs_f64() * 1000.0,
        lead_turns: m.lead_turns,
        longest_teammate_turns: m.longest_teammate_turns,
        model_requests: m.model_requests,
        tool_calls: m.tool_calls,
        wall_ms: m.wall.as_secs_f64() * 1000.0,
        ideal_ms: 0.0,
        overhead_ms_per_tool_call: m.overhead_ms_per_call,
        peak_mib,
        target: "<= 100 MiB (issue: 200 idle teammates)",
        target_met: peak_mib.map(|p| p <= 100.0),
        note: format!(
            "the child's VmHWM from /proc/PID/status, sampled every 2 ms while it ran; the lead \
             creates a task per teammate (the lead's L = 0); {} of {} teammates started, each \
             answered once after L and went idle, and the run ended with every teammate idle",
            m.teammates_started, options.idle_teammates
        ),
    });
    rows.extend(parallel_bash(options, sync)?);
    rows.extend(super::traces::rows(options, sync)?);
    Ok(rows)
}

/// The run with the median overhead per tool call, and the spread over every run.
fn median_run(mut runs: Vec<Measured>) -> (Measured, String) {
    let overhead = |m: &Measured| m.overhead_ms_per_call.unwrap_or(f64::INFINITY);
    runs.sort_by(|a, b| overhead(a).total_cmp(&overhead(b)));
    let all: Vec<String> = runs
        .iter()
        .map(|m| fmt_ms(m.overhead_ms_per_call))
        .collect();
    let spread = format!(
        "median of {} interleaved runs (per call, ms: {})",
        runs.len(),
        all.join(", ")
    );
    let median = runs.swap_remove(runs.len() / 2);
    (median, spread)
}

/// One run of the tasks scenario's shape with `env` added: a `traces` row named `label`
/// (its note left for the caller).
pub(super) fn traces_run(
    options: &Options,
    sync: SyncMode,
    label: &'static str,
    env: Vec<(&'static str, String)>,
) -> anyhow::Result<Row> {
    let m = run_team(options, sync, &Shape::tasks(options, env))?;
    let l_ms = options.latency.as_secs_f64() * 1000.0;
    Ok(Row {
        system: "muster",
        scenario: "traces",
        sync: label,
        teammates: options.teammates,
        model_latency_ms: l_ms,
        lead_turns: m.lead_turns,
        longest_teammate_turns: m.longest_teammate_turns,
        model_requests: m.model_requests,
        tool_calls: m.tool_calls,
        wall_ms: m.wall.as_secs_f64() * 1000.0,
        ideal_ms: l_ms * (m.lead_turns + m.longest_teammate_turns) as f64,
        overhead_ms_per_tool_call: m.overhead_ms_per_call,
        peak_mib: m.peak_kib.map(|k| k as f64 / 1024.0),
        target: "none: wall and overhead reported beside traces off",
        target_met: None,
        note: String::new(),
    })
}

/// Every teammate plans, then runs one Bash command of `options.bash` at once: with worktrees they run
/// side by side, in a shared workspace one at a time (verification's measurement lock). Both
/// systems run in one sitting, worktree first.
fn parallel_bash(options: &Options, sync: SyncMode) -> anyhow::Result<Vec<Row>> {
    let l_ms = options.latency.as_secs_f64() * 1000.0;
    let bash_ms = options.bash.as_secs_f64() * 1000.0;
    let mut rows = Vec::new();
    let mut walls = Vec::new();
    for isolation in ["worktree", "shared"] {
        let shape = Shape {
            teammates: options.bash_teammates,
            turns: 3,
            latency: options.latency,
            lead_latency: options.latency,
            bash: Some((options.bash, isolation)),
            hooks: false,
            env: Vec::new(),
        };
        let m = run_team(options, sync, &shape)?;
        let ideal_ms = l_ms * (m.lead_turns + m.longest_teammate_turns) as f64 + bash_ms;
        let wall_ms = m.wall.as_secs_f64() * 1000.0;
        walls.push(wall_ms);
        let worktree = isolation == "worktree";
        let ratio_to_worktree = walls.first().map_or(1.0, |first| wall_ms / first);
        rows.push(Row {
            system: "muster",
            scenario: "parallel_bash",
            sync: isolation,
            teammates: options.bash_teammates,
            model_latency_ms: l_ms,
            lead_turns: m.lead_turns,
            longest_teammate_turns: m.longest_teammate_turns,
            model_requests: m.model_requests,
            tool_calls: m.tool_calls,
            wall_ms,
            ideal_ms,
            overhead_ms_per_tool_call: None,
            peak_mib: m.peak_kib.map(|k| k as f64 / 1024.0),
            target: if worktree {
                "wall <= 1.2 x ideal (worktree isolation)"
            } else {
                "none: reported beside worktree"
            },
            target_met: worktree.then_some(wall_ms <= ideal_ms * 1.2),
            note: format!(
                "{} teammates each plan (a policy approves at once), then run `sleep {:.3}` once in a \
                 git repository; ideal = L x \
                 (lead turns + longest teammate's turns) + the command = {l_ms:.0} x ({} + {}) \
                 + {bash_ms:.0}; ratio to ideal {:.3}, to the worktree run {:.3}; includes \
                 making the base, the worktrees, each checkpoint and merge, and the final apply",
                options.bash_teammates,
                options.bash.as_secs_f64(),
                m.lead_turns,
                m.longest_teammate_turns,
                if ideal_ms > 0.0 {
                    wall_ms / ideal_ms
                } else {
                    0.0
                },
                ratio_to_worktree
            ),
        });
    }
    Ok(rows)
}

/// The size of one run.
#[derive(Clone)]
struct Shape {
    teammates: usize,
    /// Model turns per worker (the last one ends with text).
    turns: usize,
    /// The teammates' model latency.
    latency: Duration,
    /// The lead's model latency.
    lead_latency: Duration,
    /// The parallel-Bash scenario: each teammate runs one `sleep` of this length in a real
    /// git repository, under this isolation.
    bash: Option<(Duration, &'static str)>,
    /// A trivial `PreToolUse` and `PostToolUse` hook (`cat > /dev/null`) on every call.
    hooks: bool,
    /// Variables added to the child's environment (the traces scenario's).
    env: Vec<(&'static str, String)>,
}

impl Shape {
    /// The tasks scenario: `options`' teammates, turns and latency, with `env` added to the
    /// child's environment.
    fn tasks(options: &Options, env: Vec<(&'static str, String)>) -> Shape {
        Shape {
            teammates: options.teammates,
            turns: options.turns,
            latency: options.latency,
            lead_latency: options.latency,
            bash: None,
            hooks: false,
            env,
        }
    }
}

/// Writes a project of `shape.teammates` workers with a task each, runs it as a child
/// `muster run` and measures it.
fn run_team(options: &Options, sync: SyncMode, shape: &Shape) -> anyhow::Result<Measured> {
    let shipped = Durability {
        sync,
        pipelined: None,
    };
    run_team_with(options, shipped, shape)
}

/// [`run_team`] with the store's WAL sync chosen too.
fn run_team_with(
    options: &Options,
    durability: Durability,
    shape: &Shape,
) -> anyhow::Result<Measured> {
    let teammates = shape.teammates;
    let project = tempfile::Builder::new()
        .prefix("muster-bench-team-")
        .tempdir_in(&options.dir)
        .with_context(|| format!("cannot create a project in {}", options.dir.display()))?;
    let root = project.path();
    write_project(root, options, durability, shape)?;
    // The benchmark wrote the project itself: its run trusts it (its allow rule and policy
    // approvers apply), as a CI job trusts a reviewed checkout.
    let hashes = muster_config::trust::file_hashes(root)
        .map_err(|e| anyhow::anyhow!("the benchmark project's files: {e}"))?;
    let stdout = std::fs::File::create(root.join("events.jsonl"))?;
    let stderr = std::fs::File::create(root.join("stderr.txt"))?;
    let goal = format!("Benchmark: {teammates} independent tasks.");
    let started = Instant::now();
    let mut child = Command::new(&options.muster)
        .current_dir(root)
        .args(["run", "-p", &goal, "--team", "muster.team.toml"])
        .args(["--provider", "script", "--cassette", "cassette.jsonl"])
        .args(["--output", "stream-json"])
        .env("HOME", root)
        .env(
            muster_config::trust::TRUST_HASH_VAR,
            muster_config::trust::project_hash(&hashes),
        )
        .envs(
            shape
                .env
                .iter()
                .map(|(name, value)| (*name, value.as_str())),
        )
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .with_context(|| format!("cannot run {}", options.muster.display()))?;
    let status_path = PathBuf::from(format!("/proc/{}/status", child.id()));
    let mut peak_kib = None;
    let status = loop {
        if let Some(hwm) = vm_hwm_kib(&status_path) {
            peak_kib = Some(peak_kib.map_or(hwm, |p: u64| p.max(hwm)));
        }
        if let Some(status) = child.try_wait()? {
            break status;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let wall = started.elapsed();
    if !status.success() {
        let err = std::fs::read_to_string(root.join("stderr.txt")).unwrap_or_default();
        let tail: Vec<&str> = err.lines().rev().take(10).collect();
        anyhow::bail!(
            "the benchmark's team run failed ({status}):\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    let text = std::fs::read_to_string(root.join("events.jsonl"))?;
    let events: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let mut m = measure(&events, shape.latency, shape.lead_latency);
    m.wall = wall;
    m.peak_kib = peak_kib;
    Ok(m)
}

fn fmt_ms(v: Option<f64>) -> String {
    v.map_or("-".to_owned(), |v| format!("{v:.2}"))
}

fn vm_hwm_kib(path: &Path) -> Option<u64> {
    let status = std::fs::read_to_string(path).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Turns, tool calls and the overhead per call from a run's stream-json events.
fn measure(events: &[Value], latency: Duration, lead_latency: Duration) -> Measured {
    use std::collections::BTreeMap;
    // Per agent: (ts of the last model_turn, tool calls since it).
    let mut open: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
    let mut turns_in_gaps = 0;
    let mut turns: BTreeMap<&str, usize> = BTreeMap::new();
    let mut gap_ms = 0.0;
    let mut per_call: Vec<f64> = Vec::new();
    let mut calls_in_gaps = 0;
    let mut tool_calls = 0;
    let mut teammates_started = 0;
    let l_ms = latency.as_secs_f64() * 1000.0;
    let lead_l_ms = lead_latency.as_secs_f64() * 1000.0;
    for event in events {
        let (Some(agent), Some(ts)) = (
            event["agent"].as_str(),
            event["ts"]
                .as_f64()
                .or_else(|| event["ts"].as_u64().map(|t| t as f64)),
        ) else {
            continue;
        };
        match event["type"].as_str() {
            Some("model_turn") => {
                *turns.entry(agent).or_default() += 1;
                if let Some((last, calls)) = open.get(agent)
                    && *calls > 0
                {
                    turns_in_gaps += 1;
                    // The wait for the model as the runtime measured it (L, plus the timer's
                    // rounding of L, which is not muster's); L itself when not reported.
                    let waited = event["latency_ms"].as_f64().unwrap_or(if agent == "lead" {
                        lead_l_ms
                    } else {
                        l_ms
                    });
                    gap_ms += ts - last - waited;
                    per_call.push((ts - last - waited) / *calls as f64);
                    calls_in_gaps += calls;
                }
                open.insert(agent, (ts, 0));
            }
            Some("agent_started") if agent != "lead" && !agent.contains('.') => {
                teammates_started += 1;
            }
            Some("tool_call") => {
                tool_calls += 1;
                if let Some((_, calls)) = open.get_mut(agent) {
                    *calls += 1;
                }
            }
            _ => {}
        }
    }
    let lead_turns = turns.get("lead").copied().unwrap_or_default();
    let longest_teammate_turns = turns
        .iter()
        .filter(|(agent, _)| **agent != "lead" && !agent.contains('.'))
        .map(|(_, n)| *n)
        .max()
        .unwrap_or_default();
    Measured {
        wall: Duration::ZERO,
        peak_kib: None,
        lead_turns,
        longest_teammate_turns,
        model_requests: turns.values().sum(),
        tool_calls,
        overhead_ms_per_call: (calls_in_gaps > 0).then(|| gap_ms / calls_in_gaps as f64),
        overhead_ms_per_turn: (turns_in_gaps > 0).then(|| gap_ms / turns_in_gaps as f64),
        calls_per_turn: (turns_in_gaps > 0).then(|| calls_in_gaps as f64 / turns_in_gaps as f64),
        overhead_ms_per_call_p50: median(per_call),
        teammates_started,
    }
}

/// The median of `values` (the mean of the middle two for an even count).
fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

/// The team file, settings and cassette of one run.
fn write_project(
    root: &Path,
    options: &Options,
    durability: Durability,
    shape: &Shape,
) -> anyhow::Result<()> {
    let teammates = shape.teammates;
    std::fs::create_dir_all(root.join(".muster"))?;
    std::fs::write(root.join("README.md"), "A benchmark project.\n")?;
    let mut settings = format!("[mailbox]\nsync = \"{}\"\n", sync_name(durability.sync));
    if let Some(pipelined) = durability.pipelined {
        settings.push_str(&format!("pipelined_sync = {pipelined}\n"));
    }
    if shape.bash.is_some() {
        settings.push_str("\n[permissions]\nallow = [\"Bash(sleep:*)\"]\n");
    }
    std::fs::write(root.join(".muster/settings.toml"), settings)?;
    if shape.hooks {
        let hook = serde_json::json!([{"matcher": "*", "hooks": [
            {"type": "command", "command": "cat > /dev/null"}]}]);
        std::fs::create_dir_all(root.join(".claude"))?;
        std::fs::write(
            root.join(".claude/settings.json"),
            serde_json::json!({"hooks": {"PreToolUse": hook, "PostToolUse": hook}}).to_string(),
        )?;
    }
    // A team file's `count` is at most 64: larger teams are several groups, `g1`, `g2`, ….
    // Every declared teammate is live for the whole run: the cap must hold them all.
    let mut team = format!(
        "name = \"bench\"\nmax_concurrent_teammates = {}\n",
        teammates.max(1)
    );
    // The parallel-Bash teammates' merges are approved by a policy at once, and the files
    // the benchmark itself writes into the project stay out of the base.
    let approver = if let Some((_, isolation)) = shape.bash {
        team.push_str(&format!("isolation = \"{isolation}\"\n"));
        std::fs::write(root.join("policy.toml"), "approve_all = true\n")?;
        std::fs::write(root.join(".gitignore"), "events.jsonl\nstderr.txt\n")?;
        "\napprover = \"policy:policy.toml\""
    } else {
        ""
    };
    let mut agents = Vec::new();
    let groups = teammates.div_ceil(GROUP).max(1);
    for g in 1..=groups {
        let count = (teammates - (g - 1) * GROUP).min(GROUP);
        let name = if groups == 1 {
            "worker".to_owned()
        } else {
            format!("g{g}")
        };
        team.push_str(&format!(
            "\n[[teammates]]\nname = \"{name}\"\ncount = {count}\nplan_mode_required = {}{approver}\n",
            shape.bash.is_some()
        ));
        agents.extend((1..=count).map(|n| format!("{name}-{n}")));
    }
    std::fs::write(root.join("muster.team.toml"), team)?;
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let entry = |agent: &str, turn: Option<usize>, content: Vec<Value>| -> String {
        let delay = if agent == "lead" {
            ms(shape.lead_latency)
        } else {
            ms(shape.latency)
        };
        let has_tools = content.iter().any(|b| b["type"] == "tool_use");
        let mut entry = json!({
            "agent": agent,
            "reply": {
                "content": content,
                "stop_reason": if has_tools { "tool_use" } else { "end_turn" },
            },
        });
        if delay > 0 {
            entry["fault"] = json!({"first_byte_delay_ms": delay});
        }
        if let Some(turn) = turn {
            entry["turn"] = json!(turn);
        }
        entry.to_string() + "\n"
    };
    let mut cassette = String::new();
    {
        let creates = (1..=teammates)
            .map(|n| {
                json!({"type": "tool_use", "id": format!("toolu_lead_1_{n}"), "name": ToolName::TaskCreate,
                    "input": {"subject": format!("task {n}"), "description": format!("Independent task {n}: read the README.")}})
            })
            .collect();
        cassette.push_str(&entry("lead", Some(1), creates));
    }
    cassette.push_str(&entry(
        "lead",
        None,
        vec![json!({"type": "text", "text": "Waiting for the team."})],
    ));
    for agent in agents {
        if let Some((bash, _)) = shape.bash {
            let plan = format!(
                "## Goal\nWait.\n## Steps\n1. Run sleep.\n## Files\nnone\n## Tests\nsleep {:.3}\n",
                bash.as_secs_f64()
            );
            let exit = json!({"type": "tool_use", "id": format!("toolu_{agent}_1_1"),
                              "name": ToolName::ExitPlanMode, "input": {"plan": plan}});
            cassette.push_str(&entry(&agent, Some(1), vec![exit]));
            let command = format!("sleep {:.3}", bash.as_secs_f64());
            let call = json!({"type": "tool_use", "id": format!("toolu_{agent}_2_1"),
                              "name": ToolName::Bash, "input": {"command": command}});
            cassette.push_str(&entry(&agent, Some(2), vec![call]));
        } else {
            for turn in 1..shape.turns {
                let calls = (1..=options.calls_per_turn)
                    .map(|c| {
                        let id = format!("toolu_{agent}_{turn}_{c}");
                        if c % 2 == 1 {
                            json!({"type": "tool_use", "id": id, "name": ToolName::Read, "input": {"file_path": "README.md"}})
                        } else {
                            json!({"type": "tool_use", "id": id, "name": ToolName::Glob, "input": {"pattern": "*.md"}})
                        }
                    })
                    .collect();
                cassette.push_str(&entry(&agent, Some(turn), calls));
            }
        }
        cassette.push_str(&entry(
            &agent,
            None,
            vec![json!({"type": "text", "text": "Done."})],
        ));
    }
    std::fs::write(root.join("cassette.jsonl"), cassette)?;
    if shape.bash.is_some() {
        init_repository(root)?;
    } else {
        // The project root is found by `.git`; no repository is needed.
        std::fs::create_dir_all(root.join(".git"))?;
    }
    Ok(())
}

/// A git repository with the project as its one commit (worktree isolation needs one).
fn init_repository(root: &Path) -> anyhow::Result<()> {
    let steps: [&[&str]; 3] = [
        &["init", "-q"],
        &["add", "-A"],
        &["commit", "-q", "-m", "bench project"],
    ];
    for args in steps {
        let status = Command::new("git")
            .current_dir(root)
            .args([
                "-c",
                "user.name=muster bench",
                "-c",
                "user.email=bench@muster.invalid",
            ])
            .args(["-c", "commit.gpgsign=false"])
            .args(args)
            .stdout(Stdio::null())
            .status()
            .context("the parallel_bash scenario needs git")?;
        anyhow::ensure!(
            status.success(),
            "git {args:?} failed in {}",
            root.display()
        );
    }
    Ok(())
}

/// The rows as a table a person reads, with each row's method below it.
pub fn render(rows: &[Row]) -> String {
    let header = format!(
        "{:<24} {:>6} {:>9} {:>6} {:>6} {:>6} {:>9} {:>9} {:>10} {:>8} | {}\n",
        "scenario",
        "sync",
        "teammates",
        "L ms",
        "calls",
        "reqs",
        "wall ms",
        "ideal ms",
        "ms/call",
        "peak MiB",
        "target"
    );
    let mut out = header.clone();
    out.push_str(&"-".repeat(header.len().saturating_sub(1)));
    out.push('\n');
    let opt = |v: Option<f64>, digits: usize| v.map_or("-".to_owned(), |v| format!("{v:.digits$}"));
    for r in rows {
        let met = match r.target_met {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "-",
        };
        out.push_str(&format!(
            "{:<24} {:>6} {:>9} {:>6.0} {:>6} {:>6} {:>9.0} {:>9.0} {:>10} {:>8} | {met}: {}\n",
            r.scenario,
            r.sync,
            r.teammates,
            r.model_latency_ms,
            r.tool_calls,
            r.model_requests,
            r.wall_ms,
            r.ideal_ms,
            opt(r.overhead_ms_per_tool_call, 3),
            opt(r.peak_mib, 1),
            r.target,
        ));
    }
    out.push('\n');
    for r in rows {
        out.push_str(&format!("{} ({}): {}\n", r.scenario, r.sync, r.note));
    }
    out
}
