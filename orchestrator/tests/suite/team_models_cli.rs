//! A model and provider per agent, through the binary: a lead on the fake Anthropic server
//! and two teammates on a second fake server's OpenAI-compatible endpoint, named by their team
//! entry (`provider`, `model`, `base_url`, `api_key_env`). Each request must reach the right
//! server with the right model and key; an untrusted project's endpoints take no effect and
//! say so. Tests wait for the child process to exit, never on sleeps.

use std::path::Path;
use std::process::Output;

use muster_fake_llm::{
    Block, FakeLlm, FakeLlmConfig, FakeLlmHandle, KeyCheck, RecordedRequest, ReturnedUsage,
    ScriptEntry, UsageSpec,
};
use serde_json::{Value, json};

use super::common::{command, lines, output, project, stderr, tool};

const LEAD_MODEL: &str = "claude-opus-4-1";
const LOCAL_MODEL: &str = "qwen-local";
const LOCAL_KEY: &str = "sk-local-teammates";

/// An entry answering `agent` at any turn no other entry scripts, reporting `usage`.
fn any_turn(agent: &str, content: Vec<Block>, usage: (u64, u64, u64, u64)) -> ScriptEntry {
    let mut entry = ScriptEntry::reply(agent, 0, content);
    entry.turn = None;
    entry.reply.as_mut().unwrap().usage = Some(UsageSpec {
        input_tokens: Some(usage.0),
        output_tokens: Some(usage.1),
        cache_read_input_tokens: Some(usage.2),
        cache_creation_input_tokens: Some(usage.3),
    });
    entry
}

async fn fake(key: &str, script: Vec<ScriptEntry>) -> FakeLlmHandle {
    FakeLlm::start_with(
        FakeLlmConfig {
            keys: KeyCheck::Exact(key.into()),
            ..FakeLlmConfig::default()
        },
        script,
    )
    .await
    .unwrap()
}

/// The team file: two teammates (`local-1`, `local-2`) on the OpenAI-compatible `base_url`.
fn team_file(base_url: &str) -> String {
    format!(
        "name = \"mixed\"\n\n[[teammates]]\nname = \"local\"\ncount = 2\n\
         plan_mode_required = false\nprovider = \"openai\"\nmodel = \"{LOCAL_MODEL}\"\n\
         base_url = \"{base_url}\"\napi_key_env = \"LOCAL_LLM_KEY\"\n"
    )
}

/// The lead's script: a task per teammate, then waiting. The teammates' (on the other server):
/// a reply per turn.
fn scripts() -> (Vec<ScriptEntry>, Vec<ScriptEntry>) {
    let lead = vec![
        {
            let mut first = any_turn(
                "lead",
                vec![
                    tool(
                        "TaskCreate",
                        json!({"subject": "One", "description": "Say one."}),
                    ),
                    tool(
                        "TaskCreate",
                        json!({"subject": "Two", "description": "Say two."}),
                    ),
                ],
                (120, 30, 0, 400),
            );
            first.turn = Some(1);
            first
        },
        any_turn(
            "lead",
            vec![Block::text("Waiting for the team.")],
            (50, 10, 400, 0),
        ),
    ];
    let teammates = ["local-1", "local-2"]
        .into_iter()
        .map(|agent| any_turn(agent, vec![Block::text("Done.")], (70, 7, 20, 0)))
        .collect();
    (lead, teammates)
}

async fn run_team(dir: &Path, lead_server: &FakeLlmHandle, extra_env: &[(&str, &str)]) -> Output {
    let mut command = command(
        dir,
        &[
            "run",
            "-p",
            "Split the greeting.",
            "--model",
            LEAD_MODEL,
            "--output",
            "stream-json",
        ],
    );
    command
        .env("ANTHROPIC_BASE_URL", lead_server.base_url())
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL");
    for (name, value) in extra_env {
        command.env(name, value);
    }
    output(command).await
}

fn agents_of(requests: &[RecordedRequest]) -> Vec<String> {
    let mut agents: Vec<String> = requests.iter().filter_map(|r| r.agent.clone()).collect();
    agents.sort();
    agents.dedup();
    agents
}

/// The lead's server, the teammates' OpenAI-compatible server and a trusted project whose
/// team puts both teammates on the latter, with the local model's prices (a repository's
/// `base_url` and `api_key_env` apply only once the user trusts it).
async fn trusted_mixed_team(
    lead_script: Vec<ScriptEntry>,
    teammate_script: Vec<ScriptEntry>,
) -> (FakeLlmHandle, FakeLlmHandle, tempfile::TempDir) {
    let anthropic = fake("test-key", lead_script).await;
    let local = fake(LOCAL_KEY, teammate_script).await;
    let dir = project(&[
        ("muster.team.toml", &team_file(&local.openai_base_url())),
        (".muster/settings.toml", LOCAL_PRICES),
    ]);
    super::common::trust_blocking(dir.path());
    (anthropic, local, dir)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lead_on_anthropic_and_teammates_on_an_openai_server_each_reach_their_own() {
    let (lead_script, teammate_script) = scripts();
    let (anthropic, local, dir) = trusted_mixed_team(lead_script, teammate_script).await;
    let output = run_team(dir.path(), &anthropic, &[("LOCAL_LLM_KEY", LOCAL_KEY)]).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let events = lines(&output);
    let finished = events.last().unwrap();
    assert_eq!(finished["type"], "run_finished", "{finished}");

    let lead_requests = anthropic.requests();
    assert_eq!(agents_of(&lead_requests), ["lead"]);
    for r in &lead_requests {
        assert_eq!(r.path, "/v1/messages");
        assert_eq!(r.body["model"], LEAD_MODEL);
        assert_eq!(r.header("x-api-key"), Some("test-key"));
    }
    let local_requests = local.requests();
    assert_eq!(agents_of(&local_requests), ["local-1", "local-2"]);
    let bearer = format!("Bearer {LOCAL_KEY}");
    for r in &local_requests {
        assert_eq!(r.path, "/v1/chat/completions");
        assert_eq!(r.body["model"], LOCAL_MODEL);
        assert_eq!(r.header("authorization"), Some(bearer.as_str()));
    }
    anthropic.verify().unwrap();
    local.verify().unwrap();

    // The cost report equals the usage the servers logged as returned, priced from the
    // catalogue: per agent, model and provider, in run_finished, in `muster runs --json` and
    // (below) in the web inbox.
    let logged = [
        ("lead", LEAD_MODEL, "anthropic", &lead_requests, OPUS),
        ("local-1", LOCAL_MODEL, "openai", &local_requests, LOCAL),
        ("local-2", LOCAL_MODEL, "openai", &local_requests, LOCAL),
    ];
    let mut expected_rows = Vec::new();
    let mut total_cost = 0.0;
    for (agent, model, provider, requests, prices) in logged {
        let mine: Vec<&RecordedRequest> = requests
            .iter()
            .filter(|r| r.agent.as_deref() == Some(agent))
            .collect();
        let sum = |f: fn(&ReturnedUsage) -> u64| -> u64 {
            mine.iter().map(|r| f(r.usage.as_ref().unwrap())).sum()
        };
        let (input, output, read, write) = (
            sum(|u| u.input_tokens),
            sum(|u| u.output_tokens),
            sum(|u| u.cache_read_input_tokens),
            sum(|u| u.cache_creation_input_tokens),
        );
        let cost = (input as f64 * prices.0
            + output as f64 * prices.1
            + read as f64 * prices.2
            + write as f64 * prices.3)
            / 1_000_000.0;
        total_cost += cost;
        expected_rows.push((
            agent.to_owned(),
            model.to_owned(),
            provider.to_owned(),
            mine.len() as u64,
            [input, read, write, output],
            cost,
        ));
    }
    let runs = super::common::output(command(dir.path(), &["runs", "--json"])).await;
    let runs: Value = serde_json::from_slice(&runs.stdout).unwrap();
    for costs in [&finished["costs"], &runs[0]["run"]["result"]["costs"]] {
        let rows: Vec<_> = costs["agents"]
            .as_array()
            .unwrap_or_else(|| panic!("no costs: {finished}"))
            .iter()
            .map(|row| {
                (
                    row["agent"].as_str().unwrap().to_owned(),
                    row["model"].as_str().unwrap().to_owned(),
                    row["provider"].as_str().unwrap().to_owned(),
                    row["requests"].as_u64().unwrap(),
                    [
                        "input_tokens",
                        "cache_read_tokens",
                        "cache_write_tokens",
                        "output_tokens",
                    ]
                    .map(|key| row[key].as_u64().unwrap()),
                    row["cost_usd"].as_f64().unwrap(),
                )
            })
            .collect();
        assert_eq!(rows.len(), expected_rows.len(), "{costs:#}");
        for (row, expected) in rows.iter().zip(&expected_rows) {
            assert_eq!(
                (&row.0, &row.1, &row.2, row.3, row.4),
                (
                    &expected.0,
                    &expected.1,
                    &expected.2,
                    expected.3,
                    expected.4
                ),
                "{costs:#}"
            );
            assert!((row.5 - expected.5).abs() < 1e-9, "{row:?} {expected:?}");
        }
        let total = costs["total"]["cost_usd"].as_f64().unwrap();
        assert!((total - total_cost).abs() < 1e-9, "{total} {total_cost}");
        // Opus's reads save 13.5 $/M over its input price; its writes cost 3.75 $/M more.
        let lead = &expected_rows[0].4;
        let saved = (lead[1] as f64 * 13.5 - lead[2] as f64 * 3.75
            + (expected_rows[1].4[1] + expected_rows[2].4[1]) as f64 * (0.4 - 0.1))
            / 1_000_000.0;
        let reported = costs["cache_saved_usd"].as_f64().unwrap();
        assert!((reported - saved).abs() < 1e-9, "{reported} {saved}");
    }

    // The web inbox's run page shows the same rows, the total and what caching saved.
    let serve = super::serve_cli::Serve::start(dir.path()).await;
    let cookie = serve.sign_in().await;
    let run_id = finished["run_id"].as_str().unwrap();
    let page = serve
        .get(&cookie, &format!("/runs/{run_id}"))
        .await
        .text()
        .await
        .unwrap();
    let cells = |cells: &[String]| {
        cells
            .iter()
            .map(|cell| format!("<td>{cell}</td>"))
            .collect::<String>()
    };
    let mut tokens = [0; 4];
    for (agent, model, provider, requests, used, cost) in &expected_rows {
        let mut row = vec![agent.clone(), model.clone(), provider.clone()];
        row.push(requests.to_string());
        row.extend(used.iter().map(u64::to_string));
        row.push(format!("${cost:.4}"));
        let row = format!("<tr class=\"cost\">{}</tr>", cells(&row));
        assert!(page.contains(&row), "{row}\n{page}");
        for (sum, used) in tokens.iter_mut().zip(used) {
            *sum += used;
        }
    }
    let requests: u64 = expected_rows.iter().map(|row| row.3).sum();
    let mut total = vec![requests.to_string()];
    total.extend(tokens.iter().map(u64::to_string));
    total.push(format!("${total_cost:.4}"));
    let total = format!(
        "<tr class=\"cost-total\"><td colspan=\"3\">total</td>{}</tr>",
        cells(&total)
    );
    assert!(page.contains(&total), "{total}\n{page}");
    let saved = finished["costs"]["cache_saved_usd"].as_f64().unwrap();
    assert!(
        page.contains(&format!("Caching saved ${saved:.4}")),
        "{page}"
    );
}

/// Prices (in, out, cache read, cache write) per million tokens: the catalogue's for Opus,
/// and the local model's from the project's settings.
const OPUS: (f64, f64, f64, f64) = (15.0, 75.0, 1.5, 18.75);
const LOCAL: (f64, f64, f64, f64) = (0.4, 0.8, 0.1, 0.4);
const LOCAL_PRICES: &str =
    "[models.\"qwen-local\"]\nprice_in = 0.4\nprice_out = 0.8\nprice_cache_read = 0.1\n";

#[tokio::test(flavor = "multi_thread")]
async fn an_untrusted_team_files_base_url_and_key_variable_take_no_effect_and_say_so() {
    let (lead_script, teammate_script) = scripts();
    let anthropic = fake("test-key", lead_script).await;
    let local = fake(LOCAL_KEY, teammate_script).await;
    let dir = project(&[("muster.team.toml", &team_file(&local.openai_base_url()))]);
    let output = run_team(dir.path(), &anthropic, &[("LOCAL_LLM_KEY", LOCAL_KEY)]).await;
    let stderr = stderr(&output);
    // Without them the teammates would call api.openai.com with no key: refused before the
    // run exists, naming the teammate.
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("project not trusted")
            && stderr.contains("teammate local-1 base_url")
            && stderr.contains("teammate local-1 api_key_env = \"LOCAL_LLM_KEY\""),
        "{stderr}"
    );
    assert!(
        stderr.contains("teammate `local-1`") && stderr.contains("OPENAI_API_KEY"),
        "{stderr}"
    );
    assert!(anthropic.requests().is_empty() && local.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_teammates_missing_key_variable_is_refused_before_the_run_naming_it() {
    let (lead_script, teammate_script) = scripts();
    let anthropic = fake("test-key", lead_script).await;
    let local = fake(LOCAL_KEY, teammate_script).await;
    let dir = project(&[("muster.team.toml", &team_file(&local.openai_base_url()))]);
    super::common::trust_blocking(dir.path());
    let output = run_team(dir.path(), &anthropic, &[]).await;
    let stderr = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("teammate `local-1`") && stderr.contains("LOCAL_LLM_KEY"),
        "{stderr}"
    );
    let runs: Value = serde_json::from_slice(
        &super::common::output(command(dir.path(), &["runs", "--json"]))
            .await
            .stdout,
    )
    .unwrap_or(Value::Null);
    assert!(
        runs.as_array().is_none_or(Vec::is_empty),
        "no run was created: {runs}"
    );
}

/// A subagent inherits its parent's provider and endpoint: a teammate on the OpenAI-compatible
/// server starts a `Plan` subagent (`model: inherit`), whose requests go to that server with
/// the teammate's model and key, never to the lead's.
#[tokio::test(flavor = "multi_thread")]
async fn a_teammates_plan_subagent_asks_the_teammates_server_with_its_model() {
    let (lead_script, mut teammate_script) = scripts();
    teammate_script.insert(
        0,
        ScriptEntry::reply(
            "local-1",
            1,
            vec![tool(
                "Agent",
                json!({"description": "look", "prompt": "What does the README say?",
                       "subagent_type": "Plan"}),
            )],
        ),
    );
    teammate_script.insert(
        1,
        ScriptEntry::reply("local-1.sub-1", 1, vec![Block::text("It says hello.")]),
    );
    let (anthropic, local, dir) = trusted_mixed_team(lead_script, teammate_script).await;
    let output = run_team(dir.path(), &anthropic, &[("LOCAL_LLM_KEY", LOCAL_KEY)]).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(agents_of(&anthropic.requests()), ["lead"]);
    let local_requests = local.requests();
    assert_eq!(
        agents_of(&local_requests),
        ["local-1", "local-1.sub-1", "local-2"]
    );
    let bearer = format!("Bearer {LOCAL_KEY}");
    for r in local_requests
        .iter()
        .filter(|r| r.agent.as_deref() == Some("local-1.sub-1"))
    {
        assert_eq!(r.path, "/v1/chat/completions");
        assert_eq!(r.body["model"], LOCAL_MODEL);
        assert_eq!(r.header("authorization"), Some(bearer.as_str()));
    }
    local.verify().unwrap();
}

/// Each agent's provider survives a kill -9, a fork and a resume: killed while a teammate's
/// request to the OpenAI-compatible server is held, the resumed run and a resumed fork of it
/// each ask that server again for the teammate with its model and key (the launch options
/// stored with the run), the lead still on the Anthropic server with its `--model`.
#[tokio::test(flavor = "multi_thread")]
async fn a_resume_and_a_fork_after_kill_9_keep_each_agents_provider_and_model() {
    let (lead_script, mut teammate_script) = scripts();
    let first = teammate_script.remove(0).fault(muster_fake_llm::Fault {
        hold: Some("local-1".into()),
        ..muster_fake_llm::Fault::default()
    });
    teammate_script.insert(0, first);
    let (anthropic, local, dir) = trusted_mixed_team(lead_script, teammate_script).await;
    let with_servers = |args: &[&str]| {
        let mut command = command(dir.path(), args);
        command
            .env("ANTHROPIC_BASE_URL", anthropic.base_url())
            .env("LOCAL_LLM_KEY", LOCAL_KEY)
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL");
        command
    };
    let mut run = super::common::Running::spawn(with_servers(&[
        "run",
        "-p",
        "Split the greeting.",
        "--model",
        LEAD_MODEL,
        "--output",
        "stream-json",
    ]));
    let started = run
        .until("the run's start", |event| event["run_id"].is_string())
        .await;
    let run_id = started["run_id"].as_str().unwrap().to_owned();
    tokio::time::timeout(super::common::GUARD, local.gate_reached("local-1", 1))
        .await
        .expect("local-1 never asked its server");
    run.child.start_kill().unwrap();
    run.child.wait().await.unwrap();
    local.open_gate("local-1");
    // A fork of the killed run, resumed first, then the original: each asks the teammate's
    // server again for local-1.
    let forked = output(with_servers(&["fork", &run_id])).await;
    assert_eq!(forked.status.code(), Some(0), "{}", stderr(&forked));
    let fork_text = String::from_utf8_lossy(&forked.stdout).into_owned();
    let fork = fork_text
        .split(" as ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no fork id: {fork_text}"))
        .to_owned();
    let bearer = format!("Bearer {LOCAL_KEY}");
    for resumed_id in [&fork, &run_id] {
        let asked_before = local.requests().len();
        let resumed = output(with_servers(&[
            "resume",
            resumed_id,
            "--output",
            "stream-json",
        ]))
        .await;
        assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
        let after: Vec<RecordedRequest> = local.requests().into_iter().skip(asked_before).collect();
        assert!(
            after.iter().any(|r| r.agent.as_deref() == Some("local-1")
                && r.run_id.as_deref() == Some(resumed_id.as_str())),
            "local-1 of {resumed_id} did not ask its server again after the resume"
        );
        for r in &after {
            assert_eq!(r.path, "/v1/chat/completions");
            assert_eq!(r.body["model"], LOCAL_MODEL);
            assert_eq!(r.header("authorization"), Some(bearer.as_str()));
        }
    }
    let lead_requests = anthropic.requests();
    assert_eq!(agents_of(&lead_requests), ["lead"]);
    assert!(lead_requests.iter().all(|r| r.body["model"] == LEAD_MODEL));
}
