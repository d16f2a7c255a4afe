//! `muster bench cache`: how much of the input the Anthropic prompt cache would serve, from
//! the exact requests muster sends.
//!
//! Two scripted runs go through a child `muster run` against `muster-fake-llm` (in this
//! process, on loopback, Anthropic wire): a single agent of `turns` turns (each but the last
//! reads a project file of a few kilobytes, so the conversation soon outgrows the stable
//! prefix), and a team whose lead puts a task per teammate on the board and whose teammates
//! each read several files (mail and idle notifications reach the lead between its turns).
//! The fake records every request body; [`muster_agents::model::prompt_cache`] applies the
//! issue's rules to them in arrival order, as one cache for the run (any agent reads what
//! any earlier request cached).
//!
//! Figures per agent and per run: requests, input tokens (JSON length ÷ 4), tokens read from
//! cache and written to it, the share read from cache over every request but each agent's
//! first, and the input cost at the catalogue's prices with caching (uncached at `price_in`,
//! reads at `price_cache_read`, writes at `price_cache_write`) against all input at
//! `price_in`. Output tokens cost the same either way and are left out.

use muster_protocol::ToolName;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context;
use muster_agents::model::prompt_cache::{CacheOutcome, CacheRules, PromptCacheSim};
use muster_agents::model::{Usage, cost_usd};
use muster_config::settings::ModelInfo;
use muster_fake_llm::{FakeLlm, RecordedRequest, ScriptEntry};
use serde::Serialize;
use serde_json::{Value, json};

/// The share of input read from cache the issue asks for, after each agent's first request.
pub const TARGET_SHARE: f64 = 0.9;

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Model turns of the single agent (the last one ends with text).
    pub turns: usize,
    /// Teammates of the team run.
    pub teammates: usize,
    /// Model turns of each teammate (the last one ends with text). Each turn adds a file's
    /// worth of new input that no cache holds, so a short teammate's share is bounded below
    /// the target whatever the request building does (the ceiling column shows by how much).
    pub teammate_turns: usize,
    /// Characters of each project file an agent reads.
    pub file_chars: usize,
    /// The `muster` binary to run.
    pub muster: PathBuf,
    /// Where to create the temporary projects.
    pub dir: PathBuf,
    /// Print each request's figures to stderr (to find where a prefix breaks).
    pub trace: bool,
}

/// One figure: an agent of a run, or the whole run (`agent` = `all`).
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub system: &'static str,
    /// `single_agent` or `team`.
    pub scenario: &'static str,
    pub agent: String,
    pub model: String,
    pub requests: usize,
    pub input_tokens: u64,
    pub read_tokens: u64,
    pub write_tokens: u64,
    /// Tokens read from cache ÷ input tokens, over every request but each agent's first.
    pub share_after_first: Option<f64>,
    /// The same share if every request read the longest prefix it shares with an earlier
    /// one: the most any request building could reach (the rest is new content).
    pub ceiling_after_first: Option<f64>,
    /// The most breakpoints one request carried.
    pub max_breakpoints: usize,
    /// Input cost with the cache, US dollars.
    pub cost_cached_usd: Option<f64>,
    /// Input cost with every token at the input price.
    pub cost_uncached_usd: Option<f64>,
    pub target: &'static str,
    pub target_met: Option<bool>,
}

/// A recorded request and what the rules made of it.
struct Simulated {
    agent: String,
    model: String,
    /// The agent's first request of the run.
    first: bool,
    outcome: CacheOutcome,
}

/// Runs both scenarios and returns their rows (each agent's, then the run's).
pub fn run(options: &Options) -> anyhow::Result<Vec<Row>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut rows = Vec::new();
    for scenario in [Scenario::Single, Scenario::Team] {
        let project = tempfile::Builder::new()
            .prefix("muster-bench-cache-")
            .tempdir_in(&options.dir)
            .with_context(|| format!("cannot create a project in {}", options.dir.display()))?;
        let requests = run_scenario(&runtime, options, scenario, project.path())?;
        let simulated = simulate(&requests)?;
        if options.trace {
            for (r, s) in requests.iter().zip(&simulated) {
                let o = &s.outcome;
                eprintln!(
                    "{} {} turn {:?}: {} blocks, {} breakpoints, input {}, read {}, written {}, \
                     uncached {}",
                    scenario.name(),
                    s.agent,
                    r.turn,
                    o.blocks,
                    o.breakpoints,
                    o.input_tokens,
                    o.read_tokens,
                    o.write_tokens,
                    o.uncached_tokens()
                );
            }
        }
        let models = catalogue(project.path())?;
        rows.extend(scenario_rows(scenario.name(), &simulated, &models));
    }
    Ok(rows)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Single,
    Team,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Single => "single_agent",
            Scenario::Team => "team",
        }
    }
}

/// Writes the project, runs `muster run` in it against the fake and returns the requests the
/// fake recorded, in arrival order.
fn run_scenario(
    runtime: &tokio::runtime::Runtime,
    options: &Options,
    scenario: Scenario,
    root: &Path,
) -> anyhow::Result<Vec<RecordedRequest>> {
    let script = write_project(root, options, scenario)?;
    let fake = runtime
        .block_on(FakeLlm::start(script))
        .context("cannot start the fake model server")?;
    let mut command = Command::new(&options.muster);
    command
        .current_dir(root)
        .args(["run", "-p", &goal(scenario)])
        .args(["--base-url", &fake.base_url(), "--output", "stream-json"])
        .env("HOME", root)
        .env("MUSTER_NO_USER_FILES", "1")
        .env("ANTHROPIC_API_KEY", "bench-key")
        .env_remove("ANTHROPIC_BASE_URL")
        .env_remove("XDG_RUNTIME_DIR")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(root.join("events.jsonl"))?)
        .stderr(std::fs::File::create(root.join("stderr.txt"))?);
    if scenario == Scenario::Team {
        command.args(["--team", "muster.team.toml"]);
    }
    let status = command
        .status()
        .with_context(|| format!("cannot run {}", options.muster.display()))?;
    let requests = fake.requests();
    if !status.success() {
        let err = std::fs::read_to_string(root.join("stderr.txt")).unwrap_or_default();
        let tail: Vec<&str> = err.lines().rev().take(10).collect();
        anyhow::bail!(
            "the cache bench's {} run failed ({status}):\n{}",
            scenario.name(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    if let Some(unmatched) = requests.iter().find(|r| r.unmatched) {
        anyhow::bail!(
            "the cache bench's {} script has no answer for agent {:?} turn {:?}",
            scenario.name(),
            unmatched.agent,
            unmatched.turn
        );
    }
    let mut model_requests: Vec<RecordedRequest> = requests
        .into_iter()
        .filter(|r| r.path == "/v1/messages")
        .collect();
    model_requests.sort_by_key(|r| r.seq);
    Ok(model_requests)
}

/// The rules applied to each request in order, one cache for the whole run.
fn simulate(requests: &[RecordedRequest]) -> anyhow::Result<Vec<Simulated>> {
    let mut sim = PromptCacheSim::new(CacheRules::default());
    let mut seen = BTreeSet::new();
    requests
        .iter()
        .map(|r| {
            let agent = r.agent.clone().unwrap_or_default();
            let outcome = sim.request(&r.body).with_context(|| {
                format!("request {} of agent {agent} (turn {:?})", r.seq, r.turn)
            })?;
            Ok(Simulated {
                first: seen.insert(agent.clone()),
                model: r.body["model"].as_str().unwrap_or_default().to_owned(),
                agent,
                outcome,
            })
        })
        .collect()
}

/// The model catalogue as settings load it in the bench's project (the built-in one).
fn catalogue(root: &Path) -> anyhow::Result<BTreeMap<String, ModelInfo>> {
    let root = muster_config::project::ProjectRoot::at(root);
    let loaded = muster_config::Settings::load(&muster_config::SettingsInputs {
        project_root: &root,
        home_dir: None,
        env: &BTreeMap::new(),
        cli: &Default::default(),
        trust: &muster_config::TrustDecision::trusted_by_caller(),
        snapshot: None,
    })
    .map_err(|e| anyhow::anyhow!("the bench project's settings: {e}"))?;
    Ok(loaded.value.models.clone())
}

/// One row per agent (in order of first request), then the run's.
fn scenario_rows(
    scenario: &'static str,
    simulated: &[Simulated],
    models: &BTreeMap<String, ModelInfo>,
) -> Vec<Row> {
    let mut agents: Vec<&str> = Vec::new();
    for s in simulated {
        if !agents.contains(&s.agent.as_str()) {
            agents.push(&s.agent);
        }
    }
    let mut rows: Vec<Row> = agents
        .iter()
        .map(|agent| {
            let mine: Vec<&Simulated> = simulated.iter().filter(|s| s.agent == *agent).collect();
            row(scenario, agent, &mine, models)
        })
        .collect();
    let all: Vec<&Simulated> = simulated.iter().collect();
    rows.push(row(scenario, "all", &all, models));
    rows
}

fn row(
    scenario: &'static str,
    agent: &str,
    requests: &[&Simulated],
    models: &BTreeMap<String, ModelInfo>,
) -> Row {
    let sum = |f: fn(&CacheOutcome) -> u64, later_only: bool| -> u64 {
        requests
            .iter()
            .filter(|s| !(later_only && s.first))
            .map(|s| f(&s.outcome))
            .sum()
    };
    let later_input = sum(|o| o.input_tokens, true);
    let share_of = |tokens: u64| (later_input > 0).then(|| tokens as f64 / later_input as f64);
    let share = share_of(sum(|o| o.read_tokens, true));
    let ceiling = share_of(sum(|o| o.shared_tokens, true));
    let mut model_names: Vec<&str> = requests.iter().map(|s| s.model.as_str()).collect();
    model_names.dedup();
    let cost = |cached: bool| -> Option<f64> {
        requests
            .iter()
            .map(|s| {
                let info = models.get(&s.model)?;
                let o = &s.outcome;
                let usage = if cached {
                    Usage {
                        input_tokens: o.uncached_tokens(),
                        output_tokens: 0,
                        cache_read_tokens: o.read_tokens,
                        cache_write_tokens: o.write_tokens,
                    }
                } else {
                    Usage {
                        input_tokens: o.input_tokens,
                        ..Usage::default()
                    }
                };
                cost_usd(&usage, info)
            })
            .sum()
    };
    Row {
        system: "muster",
        scenario,
        agent: agent.to_owned(),
        model: model_names.join(","),
        requests: requests.len(),
        input_tokens: sum(|o| o.input_tokens, false),
        read_tokens: sum(|o| o.read_tokens, false),
        write_tokens: sum(|o| o.write_tokens, false),
        share_after_first: share,
        ceiling_after_first: ceiling,
        max_breakpoints: requests
            .iter()
            .map(|s| s.outcome.breakpoints)
            .max()
            .unwrap_or_default(),
        cost_cached_usd: cost(true),
        cost_uncached_usd: cost(false),
        target: ">= 90% of input read from cache after each agent's first request",
        target_met: share.map(|s| s >= TARGET_SHARE),
    }
}

fn goal(scenario: Scenario) -> String {
    let ask = match scenario {
        Scenario::Single => "Read the project's notes one by one and summarise them.",
        Scenario::Team => "Split the project's notes among the team and summarise them.",
    };
    // A goal of a few kilobytes, as a real brief is.
    let brief: String = (1..=24)
        .map(|n| {
            format!(
                "Requirement {n}: every summary names the file it covers, keeps the author's \
                 terms, lists open questions separately and never invents a figure.\n"
            )
        })
        .collect();
    format!("{ask}\n\n{brief}")
}

/// A project file of about `chars` characters whose text differs from every other file's.
fn note(n: usize, chars: usize) -> String {
    let mut text = format!("# Note {n}\n\n");
    let mut line = 0;
    while text.len() < chars {
        line += 1;
        text.push_str(&format!(
            "Line {line} of note {n}: the measurement of case {} gave {} units, checked twice \
             against the log of run {}.\n",
            n * 31 + line,
            (n * 7919 + line * 104_729) % 10_000,
            n * 1000 + line
        ));
    }
    text
}

fn entry(agent: &str, turn: Option<usize>, content: Vec<Value>) -> anyhow::Result<ScriptEntry> {
    let tools = content.iter().any(|b| b["type"] == "tool_use");
    let mut entry = json!({
        "agent": agent,
        "reply": {
            "content": content,
            "stop_reason": if tools { "tool_use" } else { "end_turn" },
        },
    });
    if let Some(turn) = turn {
        entry["turn"] = json!(turn);
    }
    Ok(serde_json::from_value(entry)?)
}

fn read(agent: &str, turn: usize, path: &str) -> Value {
    json!({"type": "tool_use", "id": format!("toolu_{agent}_{turn}"), "name": ToolName::Read,
           "input": {"file_path": path}})
}

fn text(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

/// An agent that reads `files` one a turn, with a sentence of thought each, then answers.
fn reader_script(
    agent: &str,
    files: &[String],
    entries: &mut Vec<ScriptEntry>,
) -> anyhow::Result<()> {
    for (i, file) in files.iter().enumerate() {
        let turn = i + 1;
        let thought = text(&format!(
            "Reading {file} next, to compare it with the last one."
        ));
        entries.push(entry(
            agent,
            Some(turn),
            vec![thought, read(agent, turn, file)],
        )?);
    }
    entries.push(entry(
        agent,
        None,
        vec![text(&format!(
            "Summary: {} notes read; each reports its measurements, checked twice.",
            files.len()
        ))],
    )?);
    Ok(())
}

/// The project's files and team file, and the script of `scenario`.
fn write_project(
    root: &Path,
    options: &Options,
    scenario: Scenario,
) -> anyhow::Result<Vec<ScriptEntry>> {
    std::fs::create_dir_all(root.join(".muster"))?;
    // The project root is found by `.git`; no repository is needed.
    std::fs::create_dir_all(root.join(".git"))?;
    std::fs::write(root.join("README.md"), "A benchmark project of notes.\n")?;
    std::fs::create_dir_all(root.join("notes"))?;
    let file = |n: usize| format!("notes/note-{n:02}.md");
    let mut entries = Vec::new();
    match scenario {
        Scenario::Single => {
            let files: Vec<String> = (1..options.turns.max(1)).map(file).collect();
            for (n, path) in files.iter().enumerate() {
                std::fs::write(root.join(path), note(n + 1, options.file_chars))?;
            }
            reader_script("main", &files, &mut entries)?;
        }
        Scenario::Team => {
            let per = options.teammate_turns.max(1) - 1;
            let mut team = "name = \"bench\"\n\n[[teammates]]\nname = \"worker\"\n".to_owned();
            team.push_str(&format!(
                "count = {}\nplan_mode_required = false\n",
                options.teammates
            ));
            std::fs::write(root.join("muster.team.toml"), team)?;
            let creates = (1..=options.teammates)
                .map(|w| {
                    let first = (w - 1) * per + 1;
                    json!({"type": "tool_use", "id": format!("toolu_lead_1_{w}"),
                           "name": ToolName::TaskCreate, "input": {
                        "subject": format!("Notes {first} to {}", first + per - 1),
                        "description": format!("Read notes {first} to {} and summarise them.",
                                               first + per - 1),
                    }})
                })
                .collect();
            entries.push(entry("lead", Some(1), creates)?);
            entries.push(entry(
                "lead",
                None,
                vec![text("Noted. Waiting for the rest of the team.")],
            )?);
            for w in 1..=options.teammates {
                let files: Vec<String> = (1..=per).map(|i| file((w - 1) * per + i)).collect();
                for (i, path) in files.iter().enumerate() {
                    std::fs::write(
                        root.join(path),
                        note((w - 1) * per + i + 1, options.file_chars),
                    )?;
                }
                reader_script(&format!("worker-{w}"), &files, &mut entries)?;
            }
        }
    }
    Ok(entries)
}

fn pct(v: Option<f64>) -> String {
    v.map_or("-".to_owned(), |v| format!("{:.1}%", v * 100.0))
}

fn usd(v: Option<f64>) -> String {
    v.map_or("-".to_owned(), |v| format!("{v:.4}"))
}

/// The rows as a table a person reads, with the rules below it.
pub fn render(rows: &[Row]) -> String {
    let header = format!(
        "{:<13} {:<10} {:>5} {:>9} {:>9} {:>8} {:>8} {:>8} {:>3} {:>10} {:>10} {:>7} | {}\n",
        "scenario",
        "agent",
        "reqs",
        "input",
        "read",
        "written",
        "share",
        "ceiling",
        "bp",
        "$ cached",
        "$ uncached",
        "saved",
        "target"
    );
    let mut out = header.clone();
    out.push_str(&"-".repeat(header.len().saturating_sub(1)));
    out.push('\n');
    for r in rows {
        let met = match r.target_met {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "-",
        };
        let saved = match (r.cost_cached_usd, r.cost_uncached_usd) {
            (Some(c), Some(u)) if u > 0.0 => Some(1.0 - c / u),
            _ => None,
        };
        out.push_str(&format!(
            "{:<13} {:<10} {:>5} {:>9} {:>9} {:>8} {:>8} {:>8} {:>3} {:>10} {:>10} {:>7} | {met}\n",
            r.scenario,
            r.agent,
            r.requests,
            r.input_tokens,
            r.read_tokens,
            r.write_tokens,
            pct(r.share_after_first),
            pct(r.ceiling_after_first),
            r.max_breakpoints,
            usd(r.cost_cached_usd),
            usd(r.cost_uncached_usd),
            pct(saved),
        ));
    }
    out.push_str(
        "\nshare: tokens read from cache / input tokens over every request but each agent's \
         first; ceiling: the same share if each request read the longest prefix it shares with \
         any earlier request (what no breakpoint placement can beat: the rest is new); tokens = \
         JSON length / 4; bp: most cache_control breakpoints in one request; \
         $: input only, at the catalogue's price_in, price_cache_read and price_cache_write \
         (output costs the same either way). Rules: tools -> system -> messages; a breakpoint \
         caches its prefix when >= 1024 tokens; a request reads the longest prefix cached by an \
         earlier request of the run (any agent) ending at one of its breakpoints or within the \
         20 blocks before one.\n",
    );
    out
}
