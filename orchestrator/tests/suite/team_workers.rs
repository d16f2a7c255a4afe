//! Teammates placed on workers (`placement = "workers"`) through the `muster` binary: the
//! lead in the process that started the run, each teammate on a `muster worker` process with
//! its own directory, HOME and repo cache, all on the test PostgreSQL server (a fresh schema
//! per test), files travelling through a local bare repository as the run's remote. The
//! configuration errors of a placement that cannot work exit 2.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Output;
use std::sync::Arc;

use muster_fake_llm::{FakeLlmHandle, ScriptEntry};
use serde_json::{Value, json};

use super::common::{command, fake, lines, stderr, tool};
use super::store_pg::Schema;
use super::worker_procs::Worker;

/// A definition whose teammates write and run Bash without asking.
const WRITER: &str = "---\nname: writer\ndescription: Writes files.\npermissionMode: bypassPermissions\n---\nYou write files.\n";

fn git(dir: &Path, args: &[&str]) -> String {
    let output = std::process::Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn team(names: &[&str], extra: &str) -> String {
    let mut text = format!("name = \"builders\"\n{extra}");
    for name in names {
        text.push_str(&format!(
            "\n[[teammates]]\nname = \"{name}\"\ndefinition = \"writer\"\nplan_mode_required = false\nplacement = \"workers\"\n"
        ));
    }
    text
}

/// The lead's git repository with one commit (README.md, the team file, the definition).
fn lead_repo(team: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join(".muster/agents")).unwrap();
    std::fs::write(root.join(".muster/agents/writer.md"), WRITER).unwrap();
    std::fs::write(root.join("README.md"), "hello\n").unwrap();
    std::fs::write(root.join("muster.team.toml"), team).unwrap();
    git(root, &["init", "-q", "-b", "main"]);
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "start"]);
    dir
}

/// The run's remote: a bare repository of its own, empty.
fn bare_remote() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "-q", "--bare"]);
    dir
}

/// A worker's directory for teammates: the writer definition, the fake model, Bash without
/// the sandbox (a test's side-effect file lies outside every worktree).
fn teammate_worker(fake: &FakeLlmHandle, url: &str, name: &str) -> Worker {
    teammate_worker_with_env(fake, url, name, &[])
}

/// [`teammate_worker`] with `env` added to the worker's environment.
fn teammate_worker_with_env(
    fake: &FakeLlmHandle,
    url: &str,
    name: &str,
    env: &[(&str, String)],
) -> Worker {
    teammate_worker_started(fake, url, name, &[], env)
}

/// [`teammate_worker`] with `extra` flags for `muster worker`.
fn teammate_worker_with_flags(
    fake: &FakeLlmHandle,
    url: &str,
    name: &str,
    extra: &[&str],
) -> Worker {
    teammate_worker_started(fake, url, name, extra, &[])
}

fn teammate_worker_started(
    fake: &FakeLlmHandle,
    url: &str,
    name: &str,
    extra: &[&str],
    env: &[(&str, String)],
) -> Worker {
    let dir = super::common::project(&[(
        ".muster/settings.toml",
        &format!(
            "permission_mode = \"bypassPermissions\"\n[providers.anthropic]\nbase_url = \"{}\"\n\
             [sandbox]\nmode = \"off\"\n",
            fake.base_url()
        ),
    )]);
    std::fs::create_dir_all(dir.path().join(".muster/agents")).unwrap();
    std::fs::write(dir.path().join(".muster/agents/writer.md"), WRITER).unwrap();
    // The worker's own directory, which its operator trusted.
    super::common::trust_blocking(dir.path());
    let mut flags = vec!["--slots", "1"];
    flags.extend(extra);
    Worker::start_with_env(dir, url, name, &flags, env)
}

fn entry(value: Value) -> ScriptEntry {
    serde_json::from_value(value).unwrap()
}

fn any_turn(agent: &str, text: &str) -> ScriptEntry {
    entry(
        json!({"agent": agent, "reply": {"content": [{"type": "text", "text": text}],
                 "stop_reason": "end_turn"}}),
    )
}

/// The lead approves `ids` when a merge request from `from` arrives (both teammates' may
/// arrive in one batch; an id not requested yet only gets a refusal back).
fn lead_merges(from: &str, ids: &[&str]) -> ScriptEntry {
    let calls: Vec<Value> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            json!({"type": "tool_use", "id": format!("toolu_merge_{from}_{i}"),
                   "name": "ReviewMerge",
                   "input": {"request_id": id, "approve": true, "feedback": "good"}})
        })
        .collect();
    entry(
        json!({"agent": "lead", "when": {"mail_type": "merge_request", "from": from},
                 "reply": {"content": calls, "stop_reason": "tool_use"}}),
    )
}

/// The lead's first turn: work for each teammate, by mail.
fn lead_assigns(names: &[&str]) -> ScriptEntry {
    let calls = names
        .iter()
        .map(|name| {
            tool(
                "SendMessage",
                json!({"to": name, "message": format!("Write {name}.txt.")}),
            )
        })
        .collect();
    ScriptEntry::reply("lead", 1, calls)
}

fn run_args<'a>(url: &'a str, base: &'a str, remote: &'a str) -> Vec<&'a str> {
    vec![
        "--store",
        url,
        "run",
        "-p",
        "Build it.",
        "--base-url",
        base,
        "--permission-mode",
        "bypassPermissions",
        "--output",
        "stream-json",
        "--remote",
        remote,
    ]
}

fn finished(output: &Output) -> Value {
    let events = lines(output);
    let last = events.last().cloned().unwrap_or_default();
    assert_eq!(
        last["type"],
        "run_finished",
        "{events:#?}\n{}",
        stderr(output)
    );
    last
}

/// Every ref of the bare remote.
fn remote_refs(remote: &Path) -> Vec<String> {
    git(remote, &["for-each-ref", "--format=%(refname)"])
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The run's slug, from the base ref the lead pushed.
fn slug_of(refs: &[String]) -> String {
    refs.iter()
        .find_map(|r| r.strip_prefix("refs/muster/")?.strip_suffix("/base"))
        .unwrap_or_else(|| panic!("no base ref on the remote: {refs:?}"))
        .to_owned()
}

/// Files named `name` anywhere under `dir` (a worker's repo cache).
fn found_under(dir: &Path, name: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(next) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&next) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.file_name().is_some_and(|n| n == ".git") {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == name) {
                found.push(path);
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn two_teammates_on_two_workers_send_their_files_by_git_and_the_lead_merges_both() {
    let schema = Schema::new().await;
    let url = schema.url();
    let names = ["one", "two"];
    let mut script = vec![
        lead_assigns(&names),
        lead_merges("one", &["merge-one-1", "merge-two-1"]),
        lead_merges("two", &["merge-two-1", "merge-one-1"]),
        any_turn("lead", "Waiting for the team."),
    ];
    for name in names {
        script.push(ScriptEntry::reply(
            name,
            1,
            vec![tool(
                "Write",
                json!({"file_path": format!("{name}.txt"), "content": format!("{name}\n")}),
            )],
        ));
        script.push(any_turn(name, "done"));
    }
    let fake = fake(script).await;
    let mut workers = vec![
        teammate_worker(&fake, &url, "w1"),
        teammate_worker(&fake, &url, "w2"),
    ];
    for worker in &mut workers {
        worker.wait_for("ready on").await;
    }
    let remote = bare_remote();
    let remote_path = remote.path().display().to_string();
    let lead = lead_repo(&team(&names, ""));
    let root = lead.path();
    let base = fake.base_url();
    let output = super::common::output(command(root, &run_args(&url, &base, &remote_path))).await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}\n{:#?}",
        stderr(&output),
        lines(&output)
    );
    let end = finished(&output);
    assert_eq!(end["status"], "completed", "{end:#}");
    assert_eq!(end["files_changed"], 2, "{end:#}");
    // Both results landed in the lead's tree, uncommitted, on its unchanged HEAD.
    for name in names {
        assert_eq!(
            std::fs::read_to_string(root.join(format!("{name}.txt"))).ok(),
            Some(format!("{name}\n"))
        );
    }
    assert_eq!(git(root, &["rev-list", "--count", "HEAD"]).trim(), "1");

    // Each teammate ran on its own worker, as the events and the result say.
    let events = lines(&output);
    let mut ran_on = std::collections::BTreeMap::new();
    for name in names {
        let placed = events
            .iter()
            .find(|e| e["type"] == "teammate_placed" && e["agent"] == name)
            .unwrap_or_else(|| panic!("{name} was not placed: {events:#?}"));
        ran_on.insert(name, placed["worker"].as_str().unwrap().to_owned());
        assert_eq!(end["workers"][name], placed["worker"], "{end:#}");
        assert!(
            events
                .iter()
                .any(|e| e["type"] == "merge_applied" && e["agent"] == name),
            "{events:#?}"
        );
    }
    assert_ne!(ran_on["one"], ran_on["two"], "{ran_on:?}");

    // The files travelled by git: only the run's refs on the remote, each teammate's branch
    // holding its file, the integration branch both; each file was written in the repo
    // cache of the worker that ran its teammate, and in no other worker's.
    let refs = remote_refs(remote.path());
    let slug = slug_of(&refs);
    for r in &refs {
        assert!(
            r.starts_with(&format!("refs/heads/muster/{slug}/"))
                || r.starts_with(&format!("refs/muster/{slug}/")),
            "{r} is not the run's own ref: {refs:?}"
        );
    }
    for name in names {
        let branch = format!("refs/heads/muster/{slug}/{name}");
        assert!(refs.contains(&branch), "{refs:?}");
        assert_eq!(
            git(remote.path(), &["show", &format!("{branch}:{name}.txt")]),
            format!("{name}\n")
        );
        let files = git(remote.path(), &["ls-tree", "--name-only", &branch]);
        let other = if name == "one" { "two.txt" } else { "one.txt" };
        assert!(!files.contains(other), "{files}");
        for worker in &workers {
            let found = found_under(&worker.dir.path().join("work"), &format!("{name}.txt"));
            if worker.name == ran_on[name] {
                assert!(
                    !found.is_empty(),
                    "{name}.txt not in {}'s cache",
                    worker.name
                );
            } else {
                assert!(
                    found.is_empty(),
                    "{name}.txt in {}'s cache: {found:?}",
                    worker.name
                );
            }
        }
    }
    let lead_branch = format!("refs/heads/muster/{slug}/lead");
    let files = git(remote.path(), &["ls-tree", "--name-only", &lead_branch]);
    assert!(
        files.contains("one.txt") && files.contains("two.txt"),
        "{files}"
    );
    for mut worker in workers {
        assert_eq!(worker.stop().await, Some(0));
    }
    schema.drop_now().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_placement_that_cannot_work_is_a_configuration_error() {
    let schema = Schema::new().await;
    let url = schema.url();
    let remote = bare_remote();
    let remote_path = remote.path().display().to_string();
    let base = "http://127.0.0.1:9";
    // (what, the team file's extra lines, the store, a remote flag, whether a git repository,
    // what the error says)
    let rows: &[(&str, &str, bool, bool, bool, &str)] = &[
        (
            "shared isolation",
            "isolation = \"shared\"\n",
            true,
            true,
            true,
            "isolation = \"shared\"",
        ),
        ("an SQLite store", "", false, true, true, "SQLite"),
        ("no remote", "", true, false, true, "--remote URL"),
        (
            "outside a git repository",
            "",
            true,
            true,
            false,
            "git repository",
        ),
    ];
    for (what, extra, postgres, with_remote, in_git, says) in rows {
        let text = team(&["one"], extra);
        let dir = if *in_git {
            lead_repo(&text)
        } else {
            super::common::project(&[("muster.team.toml", &text)])
        };
        if !in_git {
            std::fs::remove_dir_all(dir.path().join(".git")).unwrap();
            std::fs::create_dir_all(dir.path().join(".muster/agents")).unwrap();
            std::fs::write(dir.path().join(".muster/agents/writer.md"), WRITER).unwrap();
        }
        let mut args = vec![];
        if *postgres {
            args.extend(["--store", url.as_str()]);
        }
        args.extend([
            "run",
            "-p",
            "Build it.",
            "--base-url",
            base,
            "--output",
            "stream-json",
        ]);
        if *with_remote {
            args.extend(["--remote", remote_path.as_str()]);
        }
        let output = super::common::output(command(dir.path(), &args)).await;
        assert_eq!(output.status.code(), Some(2), "{what}: {}", stderr(&output));
        assert!(
            stderr(&output).contains(says),
            "{what}: {}",
            stderr(&output)
        );
        assert!(remote_refs(remote.path()).is_empty(), "{what}: pushed");
    }
    schema.drop_now().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_in_a_teammates_bash_call_has_the_teammate_resumed_on_another_worker() {
    let schema = Schema::new().await;
    let url = schema.url();
    let outside = tempfile::tempdir().unwrap();
    let effects = outside.path().join("effects.txt");
    // The Bash call makes its side effect, then kills the worker running it (the parent of
    // the teammate's process, which is bash's parent).
    let command_text = format!(
        "echo once >> {}; kill -9 $(cut -d' ' -f4 /proc/$PPID/stat)",
        effects.display()
    );
    let fake = fake(vec![
        lead_assigns(&["one"]),
        lead_merges("one", &["merge-one-1"]),
        any_turn("lead", "Waiting for the team."),
        ScriptEntry::reply(
            "one",
            1,
            vec![tool("Bash", json!({"command": command_text}))],
        ),
        ScriptEntry::reply(
            "one",
            2,
            vec![tool(
                "Write",
                json!({"file_path": "one.txt", "content": "one\n"}),
            )],
        ),
        any_turn("one", "done"),
    ])
    .await;
    let mut first = teammate_worker(&fake, &url, "w1");
    first.wait_for("ready on").await;
    let remote = bare_remote();
    let remote_path = remote.path().display().to_string();
    let lead = lead_repo(&team(&["one"], ""));
    let root = lead.path();
    let base = fake.base_url();
    let mut run =
        super::common::Running::spawn(command(root, &run_args(&url, &base, &remote_path)));
    first.wait_for("claimed team:").await;
    // The second worker starts once the first holds the teammate: it takes it over only
    // when the first's lease lapses.
    let mut second = teammate_worker(&fake, &url, "w2");
    second.wait_for("ready on").await;
    let status = tokio::time::timeout(super::common::GUARD, first.child.wait())
        .await
        .expect("guard timeout: the first worker was not killed")
        .unwrap();
    assert_eq!(
        status.code(),
        None,
        "killed by a signal: {:?}",
        first.said()
    );
    second.wait_for("claimed team:").await;
    second.wait_for("resumed from the store").await;
    assert_eq!(run.finish().await, Some(0), "{:#?}", run.events);
    let end = run.events.last().unwrap().clone();
    assert_eq!(end["status"], "completed", "{end:#}");
    // The side effect happened once; the teammate went on from the store on w2.
    assert_eq!(std::fs::read_to_string(&effects).unwrap(), "once\n");
    let placed: Vec<&Value> = run
        .events
        .iter()
        .filter(|e| e["type"] == "teammate_placed" && e["agent"] == "one")
        .collect();
    assert_eq!(placed.len(), 2, "{placed:#?}");
    assert_eq!(placed[0]["worker"], "w1");
    assert_eq!(
        (&placed[1]["worker"], &placed[1]["attempt"]),
        (&json!("w2"), &json!(2))
    );
    assert_eq!(end["workers"]["one"], "w2", "{end:#}");
    assert_eq!(
        std::fs::read_to_string(root.join("one.txt"))
            .ok()
            .as_deref(),
        Some("one\n")
    );
    let refs = remote_refs(remote.path());
    let slug = slug_of(&refs);
    assert_eq!(
        git(
            remote.path(),
            &["show", &format!("refs/heads/muster/{slug}/one:one.txt")]
        ),
        "one\n"
    );
    assert_eq!(second.stop().await, Some(0));
    schema.drop_now().await;
}

/// A worker killed (SIGKILL) by its teammate's Bash call, its collector down the while: what
/// the teammate committed there (its first model request) never reached the collector. The
/// worker that resumes the teammate sends it, once, from the store — under the teammate's
/// agent span, with the usage the fake server logged as returned — and the call the kill cut
/// as a span marked interrupted, beside the span of the result the resume committed for it.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_workers_unsent_spans_are_sent_once_by_the_worker_that_resumes_its_teammate() {
    use super::traces_cli::{Receiver, assert_usage, by_id, span_with};
    let schema = Schema::new().await;
    let url = schema.url();
    let mut receiver = Receiver::start(&[]).await;
    let telemetry = |endpoint: String| {
        [
            ("MUSTER_TELEMETRY", "1".to_owned()),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        ]
    };
    let outside = tempfile::tempdir().unwrap();
    let effects = outside.path().join("effects.txt");
    let command_text = format!(
        "echo once >> {}; kill -9 $(cut -d' ' -f4 /proc/$PPID/stat)",
        effects.display()
    );
    let fake = fake(vec![
        lead_assigns(&["one"]),
        lead_merges("one", &["merge-one-1"]),
        any_turn("lead", "Waiting for the team."),
        ScriptEntry::reply(
            "one",
            1,
            vec![tool("Bash", json!({"command": command_text}))],
        ),
        ScriptEntry::reply(
            "one",
            2,
            vec![tool(
                "Write",
                json!({"file_path": "one.txt", "content": "one\n"}),
            )],
        ),
        any_turn("one", "done"),
    ])
    .await;
    // The first worker's collector is down (nothing listens on port 9).
    let mut first =
        teammate_worker_with_env(&fake, &url, "w1", &telemetry("http://127.0.0.1:9".into()));
    first.wait_for("ready on").await;
    let remote = bare_remote();
    let remote_path = remote.path().display().to_string();
    let lead = lead_repo(&team(&["one"], ""));
    let root = lead.path();
    let base = fake.base_url();
    let mut started = command(root, &run_args(&url, &base, &remote_path));
    started.envs(
        telemetry(receiver.endpoint())
            .iter()
            .map(|(k, v)| (*k, v.clone())),
    );
    let mut run = super::common::Running::spawn(started);
    first.wait_for("claimed team:").await;
    let mut second = teammate_worker_with_env(&fake, &url, "w2", &telemetry(receiver.endpoint()));
    second.wait_for("ready on").await;
    let status = tokio::time::timeout(super::common::GUARD, first.child.wait())
        .await
        .expect("guard timeout: the first worker was not killed")
        .unwrap();
    assert_eq!(
        status.code(),
        None,
        "killed by a signal: {:?}",
        first.said()
    );
    second.wait_for("resumed from the store").await;
    assert_eq!(run.finish().await, Some(0), "{:#?}", run.events);
    let requests = fake.requests();
    let turn_one = requests
        .iter()
        .rfind(|r| r.agent.as_deref() == Some("one") && r.turn == Some(1) && r.usage.is_some())
        .unwrap();
    let is_cut = |s: &Value| s["attributes"]["error.type"] == "interrupted";
    receiver
        .until("the teammate's first request and its cut call", |spans| {
            spans.iter().any(|s| {
                s["attributes"]["gen_ai.agent.id"] == "one" && s["attributes"]["muster.turn"] == 1
            }) && spans.iter().any(is_cut)
                && spans
                    .iter()
                    .any(|s| s["name"].as_str().unwrap().starts_with("invoke_workflow"))
        })
        .await;
    assert_eq!(second.stop().await, Some(0));
    let spans = receiver.spans.clone();
    let ids = by_id(&spans);
    let trace = &spans[0]["trace_id"];
    assert!(spans.iter().all(|s| &s["trace_id"] == trace), "{spans:#?}");
    let one = span_with(&spans, "invoke_agent", "gen_ai.agent.id", &json!("one"));
    assert_eq!(one.len(), 1, "{spans:#?}");
    // Sent once, by the second worker, from the store.
    let chat: Vec<&Value> = span_with(&spans, "chat", "gen_ai.agent.id", &json!("one"))
        .into_iter()
        .filter(|s| s["attributes"]["muster.turn"] == 1)
        .collect();
    assert_eq!(chat.len(), 1, "{spans:#?}");
    assert_eq!(chat[0]["parent_span_id"], one[0]["span_id"]);
    assert_eq!(chat[0]["attributes"]["gen_ai.provider.name"], "anthropic");
    assert_usage(chat[0], turn_one);
    // The teammate's span starts at its stored start (its `started` record, committed on the
    // first worker), not at the run's.
    let root = span_with(
        &spans,
        "invoke_workflow",
        "gen_ai.operation.name",
        &json!("invoke_workflow"),
    );
    let (run_start, one_start) = (
        root[0]["start"].as_u64().unwrap(),
        one[0]["start"].as_u64().unwrap(),
    );
    assert!(run_start < one_start, "{:#} {:#}", root[0], one[0]);
    assert!(
        one_start <= chat[0]["start"].as_u64().unwrap(),
        "{:#} {:#}",
        one[0],
        chat[0]
    );
    let cut: Vec<&Value> = spans.iter().filter(|s| is_cut(s)).collect();
    assert_eq!(cut.len(), 1, "{spans:#?}");
    assert_eq!(cut[0]["name"], "execute_tool Bash");
    assert_eq!(cut[0]["status"], 2, "{:#}", cut[0]);
    assert_eq!(cut[0]["parent_span_id"], one[0]["span_id"]);
    let call = &cut[0]["attributes"]["gen_ai.tool.call.id"];
    let result: Vec<&Value> = ids
        .values()
        .filter(|s| {
            s["attributes"]["gen_ai.tool.call.id"] == *call && s["span_id"] != cut[0]["span_id"]
        })
        .collect();
    assert_eq!(
        result.len(),
        1,
        "the result the resume committed: {spans:#?}"
    );
    assert_eq!(std::fs::read_to_string(&effects).unwrap(), "once\n");
    let merge = span_with(&spans, "merge", "muster.request.id", &json!("merge-one-1"));
    assert_eq!(merge.len(), 1, "{spans:#?}");
    assert_eq!(merge[0]["parent_span_id"], one[0]["span_id"]);
    let waited = merge[0]["attributes"]["muster.decision.wait_ms"].as_i64();
    assert!(waited.is_some_and(|ms| ms >= 0), "{:#}", merge[0]);
    receiver.stop().await;
    schema.drop_now().await;
}

/// The tool_use ids each agent's requests sent back results for (every one a committed call).
fn committed_calls(requests: &[muster_fake_llm::RecordedRequest]) -> BTreeSet<(String, String)> {
    let mut calls = BTreeSet::new();
    for request in requests {
        let Some(agent) = &request.agent else {
            continue;
        };
        for message in request.body["messages"].as_array().into_iter().flatten() {
            for block in message["content"].as_array().into_iter().flatten() {
                if block["type"] == "tool_result" {
                    calls.insert((
                        agent.clone(),
                        block["tool_use_id"].as_str().unwrap().to_owned(),
                    ));
                }
            }
        }
    }
    calls
}

/// A team run with its teammate on a `muster worker`, the lead killed with SIGKILL once the
/// teammate's merge request is in its context, its collector down until then, and resumed: one trace throughout (the caller's, from the
/// `TRACEPARENT` stored at the start, though the resume is given another), the root under the
/// caller's span, the teammate's agent span under the lead's; every committed model call and
/// tool call of both processes and the worker under one span id each, under its agent, with
/// the usage the fake server logged as returned; the teammate's Bash command on the worker saw
/// its own span as `TRACEPARENT`; no content attribute.
#[tokio::test(flavor = "multi_thread")]
async fn a_team_run_on_a_worker_killed_and_resumed_is_one_trace_with_every_committed_call_once() {
    use super::traces_cli::{Receiver, assert_no_content, assert_usage, by_id, span_with};
    const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
    const PARENT: &str = "b7ad6b7169203331";
    let schema = Schema::new().await;
    let url = schema.url();
    let mut receiver = Receiver::start(&[]).await;
    let telemetry = [
        ("MUSTER_TELEMETRY", "1".to_owned()),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint()),
    ];
    let outside = tempfile::tempdir().unwrap();
    let seen = outside.path().join("traceparent.txt");
    let command_text = format!("printf %s \"$TRACEPARENT\" > {}", seen.display());
    let fake = fake(vec![
        lead_assigns(&["one"]),
        lead_merges("one", &["merge-one-1"]),
        any_turn("lead", "Waiting for the team."),
        ScriptEntry::reply(
            "one",
            1,
            vec![
                tool("Bash", json!({"command": command_text})),
                tool("Write", json!({"file_path": "one.txt", "content": "one\n"})),
            ],
        ),
        any_turn("one", "done"),
    ])
    .await;
    let mut worker = teammate_worker_with_env(&fake, &url, "w1", &telemetry);
    worker.wait_for("ready on").await;
    let remote = bare_remote();
    let remote_path = remote.path().display().to_string();
    let lead = lead_repo(&team(&["one"], ""));
    let root = lead.path();
    let base = fake.base_url();
    // The collector is down while the first process runs: what it committed reaches the
    // trace through the resume, which sends what its run log holds and was never sent.
    let mut started = command(root, &run_args(&url, &base, &remote_path));
    started
        .env("MUSTER_TELEMETRY", "1")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
        .env("TRACEPARENT", format!("00-{TRACE}-{PARENT}-01"));
    let mut run = super::common::Running::spawn(started);
    // Killed once the teammate's merge request is in the lead's context (committed), before
    // the lead's answer: the teammate waits on the worker for the resumed lead.
    let sent = run
        .until("the merge request", |e| {
            e["type"] == "mail_delivered" && e["kind"] == "merge_request"
        })
        .await;
    let run_id = sent["run_id"].as_str().unwrap().to_owned();
    run.child.start_kill().unwrap();
    let _ = run.child.wait().await;
    let mut resumed = command(
        root,
        &[
            "--store",
            &url,
            "resume",
            &run_id,
            "--output",
            "stream-json",
        ],
    );
    resumed
        .envs(telemetry.iter().map(|(k, v)| (*k, v.as_str())))
        .env("TRACEPARENT", format!("00-{}-{PARENT}-01", "1".repeat(32)));
    let output = super::common::output(resumed).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(finished(&output)["status"], "completed");
    receiver
        .until("the run's span", |spans| {
            spans
                .iter()
                .any(|s| s["name"].as_str().unwrap().starts_with("invoke_workflow"))
        })
        .await;
    // The worker's teammate ended before the run did, and flushed its spans then.
    let requests = fake.requests();
    let calls = committed_calls(&requests);
    receiver
        .until("every call's span", |spans| {
            calls.iter().all(|(_, id)| {
                spans
                    .iter()
                    .any(|s| s["attributes"]["gen_ai.tool.call.id"] == id.as_str())
            })
        })
        .await;
    let spans = receiver.spans.clone();
    let ids = by_id(&spans);
    for span in ids.values() {
        assert_eq!(span["trace_id"], TRACE, "{span:#}");
    }
    let roots = span_with(
        &spans,
        "invoke_workflow",
        "gen_ai.operation.name",
        &json!("invoke_workflow"),
    );
    assert_eq!(roots[0]["parent_span_id"], PARENT);
    let agent_span = |agent: &str| {
        let found = span_with(&spans, "invoke_agent", "gen_ai.agent.id", &json!(agent));
        assert!(!found.is_empty(), "no invoke_agent {agent}: {spans:#?}");
        found[0]["span_id"].as_str().unwrap().to_owned()
    };
    let (lead_span, one_span) = (agent_span("lead"), agent_span("one"));
    assert_eq!(
        ids[&lead_span]["parent_span_id"], roots[0]["span_id"],
        "the lead under the run"
    );
    assert_eq!(
        ids[&one_span]["parent_span_id"],
        lead_span.as_str(),
        "the teammate under the lead"
    );

    // Every answered model request: one chat span id per (agent, turn), the usage of the
    // answer that was committed (the last one the server returned for it).
    let mut answered: BTreeMap<(String, u64), &muster_fake_llm::RecordedRequest> = BTreeMap::new();
    for request in requests
        .iter()
        .filter(|r| r.usage.is_some() && r.purpose.is_none())
    {
        answered.insert(
            (request.agent.clone().unwrap(), request.turn.unwrap()),
            request,
        );
    }
    // The lead's request the kill cut, if one was under way, is a span of its own, marked.
    let cut: Vec<&Value> = ids
        .values()
        .filter(|s| s["attributes"]["error.type"] == "interrupted")
        .collect();
    assert!(cut.len() <= 1, "{cut:#?}");
    for span in &cut {
        assert_eq!(span["attributes"]["gen_ai.agent.id"], "lead", "{span:#}");
        assert_eq!(span["parent_span_id"], agent_span("lead").as_str());
    }
    let chats: Vec<&Value> = ids
        .values()
        .filter(|s| s["attributes"]["gen_ai.operation.name"] == "chat")
        .filter(|s| s["attributes"]["error.type"] != "interrupted")
        .collect();
    assert_eq!(chats.len(), answered.len(), "{chats:#?}\n{answered:#?}");
    for ((agent, turn), request) in &answered {
        let chat: Vec<&&Value> = chats
            .iter()
            .filter(|s| {
                s["attributes"]["gen_ai.agent.id"] == agent.as_str()
                    && s["attributes"]["muster.turn"] == *turn
            })
            .collect();
        assert_eq!(chat.len(), 1, "{agent} turn {turn}: {chats:#?}");
        assert_eq!(chat[0]["parent_span_id"], agent_span(agent).as_str());
        assert_usage(chat[0], request);
    }
    // Every committed tool call: one execute_tool span id, under its agent; no other.
    let tools: Vec<&Value> = ids
        .values()
        .filter(|s| s["attributes"]["gen_ai.operation.name"] == "execute_tool")
        .filter(|s| s["attributes"]["error.type"] != "interrupted")
        .collect();
    for (agent, id) in &calls {
        let found: Vec<&&Value> = tools
            .iter()
            .filter(|s| s["attributes"]["gen_ai.tool.call.id"] == id.as_str())
            .collect();
        assert_eq!(found.len(), 1, "{agent} {id}: {tools:#?}");
        assert_eq!(found[0]["parent_span_id"], agent_span(agent).as_str());
    }
    // The lead's last calls (the shutdown of its teammate) have no later request to show
    // them; every other call is one the requests sent back.
    assert!(tools.len() >= calls.len(), "{tools:#?}");
    let bash = span_with(&spans, "execute_tool", "gen_ai.tool.name", &json!("Bash"));
    // The worker runs Bash without the sandbox (`[sandbox] mode = "off"`).
    assert_eq!(
        bash[0]["attributes"]["muster.sandbox.profile"],
        "unconfined"
    );
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap_or_else(|e| panic!("{e}: {bash:#?}")),
        format!("00-{TRACE}-{}-01", bash[0]["span_id"].as_str().unwrap())
    );
    let merge = span_with(&spans, "merge", "muster.request.id", &json!("merge-one-1"));
    assert_eq!(merge.len(), 1, "{spans:#?}");
    assert_eq!(merge[0]["attributes"]["muster.decision.approved"], true);
    // How long the request waited, though its asker ran on the worker: from its commit, which
    // the lead's delivery of it (logged before the kill) tells.
    let waited = merge[0]["attributes"]["muster.decision.wait_ms"].as_i64();
    assert!(waited.is_some_and(|ms| ms >= 0), "{:#}", merge[0]);
    assert_no_content(&spans, "printf");
    assert_eq!(worker.stop().await, Some(0));
    receiver.stop().await;
    schema.drop_now().await;
}

/// The lead killed after its mail to a teammate on a worker, which has leased it but not yet
/// delivered it (frozen there by a stop point), then resumed: the resume's new epoch voids
/// that lease, and the teammate's delivery must still ack it (the fence of its work item, not
/// the lead's epoch, says who runs it). Its work is merged and the run completes. Before the
/// fix the teammate failed with "message … is not leased (it is pending)" and the run
/// completed without its work.
#[tokio::test(flavor = "multi_thread")]
async fn the_lead_resumed_while_its_teammate_on_a_worker_holds_its_mail_keeps_the_teammates_work() {
    let schema = Schema::new().await;
    let url = schema.url();
    let fake = fake(vec![
        lead_assigns(&["one"]),
        lead_merges("one", &["merge-one-1"]),
        any_turn("lead", "Waiting for the team."),
        ScriptEntry::reply(
            "one",
            1,
            vec![tool(
                "Write",
                json!({"file_path": "one.txt", "content": "one\n"}),
            )],
        ),
        any_turn("one", "done"),
    ])
    .await;
    let stop_point = [("MUSTER_FAILPOINT", "leased:one:stop".to_owned())];
    let mut worker = teammate_worker_with_env(&fake, &url, "w1", &stop_point);
    worker.wait_for("ready on").await;
    let remote = bare_remote();
    let remote_path = remote.path().display().to_string();
    let lead = lead_repo(&team(&["one"], ""));
    let root = lead.path();
    let base = fake.base_url();
    let mut run =
        super::common::Running::spawn(command(root, &run_args(&url, &base, &remote_path)));
    let started = run
        .until("the lead's mail", |e| e["type"] == "mail_sent")
        .await;
    let run_id = started["run_id"].as_str().unwrap().to_owned();
    let process = worker.wait_for("runs in process").await;
    let teammate: i32 = process.rsplit(' ').next().unwrap().parse().unwrap();
    let teammate = rustix::process::Pid::from_raw(teammate).unwrap();
    worker.wait_for("failpoint leased:one@1: SIGSTOP").await;
    run.child.start_kill().unwrap();
    let _ = run.child.wait().await;
    let store = super::store_pg::open(&url).await;
    let killed_epoch = store.run(&run_id).await.unwrap().unwrap().epoch;
    let resumed = command(
        root,
        &[
            "--store",
            &url,
            "resume",
            &run_id,
            "--output",
            "stream-json",
        ],
    );
    let resumed = tokio::spawn(super::common::output(resumed));
    // Once the resume has opened its epoch (voiding older epochs' leases), the teammate goes
    // on.
    let changed = Arc::new(tokio::sync::Notify::new());
    let on_change = changed.clone();
    let _feed = store
        .watch_changes(Arc::new(move |_| on_change.notify_one()))
        .await
        .unwrap();
    while store.run(&run_id).await.unwrap().unwrap().epoch <= killed_epoch {
        tokio::time::timeout(super::common::GUARD, changed.notified())
            .await
            .expect("the resume opened no epoch");
    }
    rustix::process::kill_process(teammate, rustix::process::Signal::CONT).unwrap();
    let output = resumed.await.unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let end = finished(&output);
    assert_eq!(end["status"], "completed", "{end:#}");
    assert_eq!(
        std::fs::read_to_string(root.join("one.txt")).ok(),
        Some("one\n".to_owned()),
        "{end:#}\n{:#?}",
        worker.said()
    );
    assert_eq!(worker.stop().await, Some(0));
    schema.drop_now().await;
}

/// A worker (its whole process group, as a machine dies) killed while its teammate waits on
/// the model with the lead's mail leased: the next worker to take the teammate over delivers
/// that mail again (its lease held by a process that is gone), and the run completes with the
/// teammate's work.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_during_its_teammates_model_call_loses_none_of_the_teammates_mail() {
    let mut held = held_on_a_worker().await;
    held.fake.gate_reached("one-1", 1).await;
    let first = &mut held.first;
    rustix::process::kill_process_group(first.pid(), rustix::process::Signal::KILL).unwrap();
    let _ = tokio::time::timeout(super::common::GUARD, first.child.wait())
        .await
        .expect("guard timeout: the first worker was not killed");
    // The gate opens for the next holder's request: the dead one's answer goes nowhere.
    held.fake.open_gate("one-1");
    let mut second = teammate_worker(&held.fake, &held.url, "w2");
    second.wait_for("teammate one of run").await;
    assert_completed_on_the_second_worker(&mut held.run, held.lead.path(), &mut second).await;
    assert_eq!(second.stop().await, Some(0));
    held.schema.drop_now().await;
}

/// A team run whose teammate `one`, placed on worker `w1`, is held at its model call (gate
/// `one-1`; the reply writes one.txt), the lead waiting for the team: how the tests of a
/// worker lost during that call begin.
struct HeldOnWorker {
    schema: Schema,
    url: String,
    fake: FakeLlmHandle,
    first: Worker,
    _remote: tempfile::TempDir,
    lead: tempfile::TempDir,
    run: super::common::Running,
}

async fn held_on_a_worker() -> HeldOnWorker {
    let schema = Schema::new().await;
    let url = schema.url();
    let mut held = ScriptEntry::reply(
        "one",
        1,
        vec![tool(
            "Write",
            json!({"file_path": "one.txt", "content": "one\n"}),
        )],
    );
    held.fault.hold = Some("one-1".to_owned());
    let fake = fake(vec![
        lead_assigns(&["one"]),
        lead_merges("one", &["merge-one-1"]),
        any_turn("lead", "Waiting for the team."),
        held,
        any_turn("one", "done"),
    ])
    .await;
    let mut first = teammate_worker(&fake, &url, "w1");
    first.wait_for("ready on").await;
    let remote = bare_remote();
    let remote_path = remote.path().display().to_string();
    let lead = lead_repo(&team(&["one"], ""));
    let root = lead.path();
    let base = fake.base_url();
    let run = super::common::Running::spawn(command(root, &run_args(&url, &base, &remote_path)));
    HeldOnWorker {
        schema,
        url,
        fake,
        first,
        _remote: remote,
        lead,
        run,
    }
}

/// The run completed, `one`'s work (one.txt) done on `w2` (`second`).
async fn assert_completed_on_the_second_worker(
    run: &mut super::common::Running,
    root: &Path,
    second: &mut Worker,
) {
    assert_eq!(run.finish().await, Some(0), "{:#?}", run.events);
    let end = run.events.last().unwrap().clone();
    assert_eq!(end["status"], "completed", "{end:#}");
    assert_eq!(end["workers"]["one"], "w2", "{end:#}");
    assert_eq!(
        std::fs::read_to_string(root.join("one.txt"))
            .ok()
            .as_deref(),
        Some("one\n"),
        "{:#?}",
        second.said()
    );
}

/// `m-priced` at $1,000 per million tokens ($0.001 a token), in and out.
const PRICED: &str = "\n[models.\"m-priced\"]\nprice_in = 1000.0\nprice_out = 1000.0\n";

fn with_usage(mut entry: ScriptEntry, input: u64, output: u64) -> ScriptEntry {
    if let Some(reply) = entry.reply.as_mut() {
        reply.usage = Some(muster_fake_llm::UsageSpec {
            input_tokens: Some(input),
            output_tokens: Some(output),
            cache_read_input_tokens: Some(0),
            cache_creation_input_tokens: Some(0),
        });
    }
    entry
}

/// The run's cost budget (`budgets.run.cost_usd = 1.0`, the lead's settings) holds across
/// machines: the lead spends $0.60, a teammate on a worker — whose own settings set no budget
/// and no prices (the run's stored price snapshot prices its response) — spends $0.60. Neither process alone crosses the limit; the run's ledger in the store does,
/// so the teammate stops at the crossing response (its Write never runs), the lead sends no
/// request once the ledger is spent, and the run ends `budget`. The ledger equals what the
/// fake server returned, and passes the limit by less than one request's cost (the crossing
/// one, granted alone).
#[tokio::test(flavor = "multi_thread")]
async fn the_run_cost_budget_stops_the_lead_and_a_teammate_on_a_worker_from_one_ledger() {
    let schema = Schema::new().await;
    let url = schema.url();
    let fake = fake(vec![
        with_usage(lead_assigns(&["one"]), 500, 100),
        with_usage(any_turn("lead", "Waiting for the team."), 0, 1),
        with_usage(
            ScriptEntry::reply(
                "one",
                1,
                vec![tool(
                    "Write",
                    json!({"file_path": "one.txt", "content": "one\n"}),
                )],
            ),
            500,
            100,
        ),
        with_usage(any_turn("one", "done"), 0, 1),
    ])
    .await;
    // The worker's own settings price nothing: the run's stored prices price its spend.
    let mut worker = teammate_worker(&fake, &url, "w1");
    worker.wait_for("ready on").await;
    let remote = bare_remote();
    let remote_path = remote.path().display().to_string();
    let lead = lead_repo(&team(&["one"], ""));
    let root = lead.path();
    std::fs::write(
        root.join(".muster/settings.toml"),
        format!("{PRICED}[budgets.run]\ncost_usd = 1.0\n"),
    )
    .unwrap();
    let base = fake.base_url();
    let mut args = run_args(&url, &base, &remote_path);
    args.extend(["--model", "m-priced"]);
    let output = super::common::output(command(root, &args)).await;
    let end = finished(&output);
    assert_eq!(
        output.status.code(),
        Some(3),
        "{end:#}\n{}",
        stderr(&output)
    );
    assert_eq!(end["status"], "budget", "{end:#}");
    assert_eq!(end["budget"], "budgets.run.cost_usd", "{end:#}");

    // The teammate ran on the worker, made one request and stopped at it: its Write never ran.
    let requests = fake.requests();
    let by = |agent: &str| {
        requests
            .iter()
            .filter(|r| r.agent.as_deref() == Some(agent))
            .count()
    };
    assert_eq!(by("one"), 1, "{requests:#?}");
    assert!(by("lead") <= 2, "{requests:#?}");
    assert!(
        found_under(&worker.dir.path().join("work"), "one.txt").is_empty(),
        "the crossing response's Write ran"
    );
    let run_id = end["run_id"].as_str().unwrap();
    let store = super::store_pg::open(&url).await;
    let to_lead = store.messages(run_id, Some("lead")).await.unwrap();
    assert!(
        to_lead.iter().any(|m| m.sender == "one"
            && serde_json::to_string(&m.body)
                .unwrap()
                .contains("budget exhausted: the run's cost budget (budgets.run.cost_usd)")),
        "{to_lead:#?}"
    );

    // The ledger holds every process's spend: what the fake server returned, priced.
    let returned: f64 = requests
        .iter()
        .filter_map(|r| r.usage)
        .map(|u| (u.input_tokens + u.output_tokens) as f64 * 0.001)
        .sum();
    let ledger = store.run_ledger(run_id).await.unwrap().unwrap();
    assert!(
        (ledger.spent.cost_usd() - returned).abs() < 1e-9,
        "{ledger:?} vs {returned}"
    );
    assert_eq!(ledger.limits.cost_nanos, Some(1_000_000_000));
    // The bound (docs/runs-and-resume.md): over by less than one request's cost ($0.60).
    assert!(ledger.spent.cost_usd() < 1.0 + 0.6, "{ledger:?}");
    assert_eq!(worker.stop().await, Some(0));
    schema.drop_now().await;
}

/// Three teammates on three `muster worker` processes and the lead, all writing as fast as
/// their models answer ($0.30 a response, the lead's first $0.10) under `budgets.run.cost_usd =
/// 1.0`: every teammate is stopped by the run's budget on its own machine (none runs out of
/// scripted turns, each has five), the run ends `budget`, and the ledger — equal to what the
/// fake server returned — stays within the stated bound: below the limit plus the usage of the
/// last request granted alone (each request reserves its worst case from the ledger first).
#[tokio::test(flavor = "multi_thread")]
async fn three_teammates_on_three_workers_are_all_stopped_by_the_run_budget_within_the_bound() {
    const PER_RESPONSE: f64 = 0.3;
    let schema = Schema::new().await;
    let url = schema.url();
    let names = ["one", "two", "three"];
    let mut script = vec![
        with_usage(lead_assigns(&names), 50, 50),
        with_usage(any_turn("lead", "Waiting for the team."), 0, 1),
    ];
    for name in names {
        for turn in 1..=5 {
            script.push(with_usage(
                ScriptEntry::reply(
                    name,
                    turn,
                    vec![tool(
                        "Write",
                        json!({"file_path": format!("{name}-{turn}.txt"), "content": "x\n"}),
                    )],
                ),
                200,
                100,
            ));
        }
    }
    let fake = fake(script).await;
    let mut workers: Vec<Worker> = ["w1", "w2", "w3"]
        .into_iter()
        .map(|name| teammate_worker(&fake, &url, name))
        .collect();
    for worker in &mut workers {
        worker.wait_for("ready on").await;
    }
    let remote = bare_remote();
    let remote_path = remote.path().display().to_string();
    let lead = lead_repo(&team(&names, ""));
    let root = lead.path();
    std::fs::write(
        root.join(".muster/settings.toml"),
        format!("{PRICED}[budgets.run]\ncost_usd = 1.0\n"),
    )
    .unwrap();
    let base = fake.base_url();
    let mut args = run_args(&url, &base, &remote_path);
    args.extend(["--model", "m-priced"]);
    let output = super::common::output(command(root, &args)).await;
    let end = finished(&output);
    assert_eq!(
        output.status.code(),
        Some(3),
        "{end:#}\n{}",
        stderr(&output)
    );
    assert_eq!(end["budget"], "budgets.run.cost_usd", "{end:#}");

    // Every teammate ran and was stopped by the run's budget, wherever it ran.
    let run_id = end["run_id"].as_str().unwrap();
    let store = super::store_pg::open(&url).await;
    let to_lead = store.messages(run_id, Some("lead")).await.unwrap();
    for name in names {
        assert!(
            to_lead.iter().any(|m| m.sender == name
                && serde_json::to_string(&m.body)
                    .unwrap()
                    .contains("budget exhausted: the run's cost budget")),
            "{name}: {to_lead:#?}"
        );
    }
    let placed: BTreeSet<String> = lines(&output)
        .iter()
        .filter(|e| e["type"] == "teammate_placed")
        .map(|e| e["agent"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(placed.len(), 3, "{placed:?}");

    let requests = fake.requests();
    let returned: f64 = requests
        .iter()
        .filter_map(|r| r.usage)
        .map(|u| (u.input_tokens + u.output_tokens) as f64 * 0.001)
        .sum();
    let ledger = store.run_ledger(run_id).await.unwrap().unwrap();
    assert!(
        (ledger.spent.cost_usd() - returned).abs() < 1e-9,
        "{ledger:?} vs {returned}"
    );
    // The bound (docs/runs-and-resume.md): below the limit plus the usage of the last request
    // granted alone — each request's worst case (its whole prompt and output) is more than
    // the dollar left here, so each went alone, whatever the number of machines.
    let bound = 1.0 + PER_RESPONSE;
    assert!(
        ledger.spent.cost_usd() < bound - 1e-9,
        "{ledger:?} passes the bound {bound}"
    );
    for mut worker in workers {
        assert_eq!(worker.stop().await, Some(0));
    }
    schema.drop_now().await;
}

/// Under `budgets.run.cost_usd = 1.0`, where each request's worst case is more than the
/// dollar (so each must go alone), the lead's request held at the model keeps its reservation
/// in the run's ledger: both teammates, each on its own worker, wait for it (each worker says
/// so) and send nothing; once the lead's response is charged its settlement wakes them across
/// machines, each goes on in turn, and the run completes within its budget.
#[tokio::test(flavor = "multi_thread")]
async fn teammates_on_workers_wait_for_a_request_in_flight_and_go_on_once_it_is_settled() {
    let schema = Schema::new().await;
    let url = schema.url();
    let names = ["one", "two"];
    let mut lead_waits = with_usage(any_turn("lead", "Waiting for the team."), 10, 10);
    lead_waits.fault.hold = Some("lead-waits".to_owned());
    let mut script = vec![with_usage(lead_assigns(&names), 10, 10), lead_waits];
    for name in names {
        script.push(with_usage(any_turn(name, "done"), 10, 10));
    }
    let fake = fake(script).await;
    // At info, a worker says when its teammate waits for the ledger and when it has room.
    let mut workers: Vec<Worker> = ["w1", "w2"]
        .into_iter()
        .map(|name| teammate_worker_with_flags(&fake, &url, name, &["--log-level", "info"]))
        .collect();
    for worker in &mut workers {
        worker.wait_for("ready on").await;
    }
    let remote = bare_remote();
    let remote_path = remote.path().display().to_string();
    let lead = lead_repo(&team(&names, ""));
    let root = lead.path();
    std::fs::write(
        root.join(".muster/settings.toml"),
        format!("{PRICED}[budgets.run]\ncost_usd = 1.0\n"),
    )
    .unwrap();
    let base = fake.base_url();
    let mut args = run_args(&url, &base, &remote_path);
    args.extend(["--model", "m-priced"]);
    let mut run = super::common::Running::spawn(command(root, &args));
    tokio::time::timeout(super::common::GUARD, fake.gate_reached("lead-waits", 1))
        .await
        .expect("the lead never sent its second request");
    for worker in &mut workers {
        worker.wait_for("waiting for the requests in flight").await;
    }
    let teammate_requests = || {
        fake.requests()
            .iter()
            .filter(|r| matches!(r.agent.as_deref(), Some("one" | "two")))
            .count()
    };
    assert_eq!(teammate_requests(), 0, "{:#?}", fake.requests());
    fake.open_gate("lead-waits");
    for worker in &mut workers {
        worker.wait_for("the run's ledger has room again").await;
    }
    assert_eq!(run.finish().await, Some(0), "{:#?}", run.events);
    let end = run.events.last().unwrap().clone();
    assert_eq!(end["status"], "completed", "{end:#}");
    assert_eq!(teammate_requests(), 2, "{:#?}", fake.requests());

    let run_id = end["run_id"].as_str().unwrap();
    let store = super::store_pg::open(&url).await;
    let returned: f64 = fake
        .requests()
        .iter()
        .filter_map(|r| r.usage)
        .map(|u| (u.input_tokens + u.output_tokens) as f64 * 0.001)
        .sum();
    let ledger = store.run_ledger(run_id).await.unwrap().unwrap();
    assert!(
        (ledger.spent.cost_usd() - returned).abs() < 1e-9,
        "{ledger:?} vs {returned}"
    );
    assert!(ledger.spent.cost_usd() < 1.0, "{ledger:?}");
    for mut worker in workers {
        assert_eq!(worker.stop().await, Some(0));
    }
    schema.drop_now().await;
}

/// A person stops a teammate placed on a `muster worker` from the web inbox while it waits on
/// the model there: the stop is the person's `shutdown_request`, committed in the shared
/// store and announced; the worker that runs the teammate stops it (idle once its turn ends,
/// it agrees to the person's request), and the run completes without it, its placement on the
/// worker kept.
#[tokio::test(flavor = "multi_thread")]
async fn a_person_stops_a_teammate_on_a_worker_from_the_page_and_the_run_goes_on_without_it() {
    use super::serve_cli::Serve;
    let schema = Schema::new().await;
    let url = schema.url();
    let mut held = any_turn("one", "done");
    held.fault.hold = Some("one-1".to_owned());
    let fake = fake(vec![
        lead_assigns(&["one"]),
        any_turn("lead", "Waiting for the team."),
        held,
    ])
    .await;
    let mut worker = teammate_worker(&fake, &url, "w1");
    worker.wait_for("ready on").await;
    let remote = bare_remote();
    let remote_path = remote.path().display().to_string();
    let lead = lead_repo(&team(&["one"], "shutdown_timeout_ms = 300\n"));
    let root = lead.path();
    let base = fake.base_url();
    let mut run =
        super::common::Running::spawn(command(root, &run_args(&url, &base, &remote_path)));
    let started = run
        .until("the lead's mail", |e| e["type"] == "mail_sent")
        .await;
    let run_id = started["run_id"].as_str().unwrap().to_owned();
    tokio::time::timeout(super::common::GUARD, fake.gate_reached("one-1", 1))
        .await
        .expect("the teammate on the worker never asked the model");
    let serve = Serve::start_with(root, &["--store", &url]).await;
    let cookie = serve.sign_in().await;
    let page = serve
        .get(&cookie, &format!("/runs/{run_id}"))
        .await
        .text()
        .await
        .unwrap();
    assert!(page.contains("/agents/one/stop"), "{page}");
    // On PostgreSQL serve takes no deltas (the run's processes may be on other machines).
    assert!(page.contains("committed events only"), "{page}");
    let stopped = serve
        .post(&cookie, &format!("/runs/{run_id}/agents/one/stop"), &[])
        .await;
    assert_eq!(stopped.status(), reqwest::StatusCode::SEE_OTHER);
    fake.open_gate("one-1");
    assert_eq!(run.finish().await, Some(0), "{:#?}", run.events);
    let end = run.events.last().unwrap().clone();
    assert_eq!(end["status"], "completed", "{end:#}");
    assert_eq!(end["workers"]["one"], "w1", "{end:#}");
    let store = super::store_pg::open(&url).await;
    let request = store
        .request(&run_id, "shutdown-one-1")
        .await
        .unwrap()
        .expect("the person's stop is a stored shutdown request");
    assert_eq!(
        (request.requester.as_str(), request.recipient.as_str()),
        ("human", "one")
    );
    // Idle on its worker once its turn ended, it takes the person's request before the
    // lead's end-of-run one and agrees: the worker's process answers for it.
    let response = request.response.as_ref().expect("the stop was answered");
    assert_eq!(
        (response.responder.as_str(), response.body.approved()),
        ("one", Some(true)),
        "{request:#?}\n{:#?}",
        worker.said()
    );
    assert_eq!(worker.stop().await, Some(0));
    drop(serve);
    schema.drop_now().await;
}

/// Waits until `done` holds of the store, looking again at each commit the schema's change
/// feed announces (no polling).
async fn until_stored<F, Fut>(store: &Arc<dyn muster_mailbox::MailboxStore>, what: &str, done: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let changed = Arc::new(tokio::sync::Notify::new());
    let on_change = changed.clone();
    let _feed = store
        .watch_changes(Arc::new(move |_| on_change.notify_one()))
        .await
        .unwrap();
    while !done().await {
        tokio::time::timeout(super::common::GUARD, changed.notified())
            .await
            .unwrap_or_else(|_| panic!("guard timeout waiting for {what}"));
    }
}

/// The teammate's process id, from its worker's line saying where it runs.
async fn teammate_pid(worker: &mut Worker) -> rustix::process::Pid {
    let process = worker.wait_for("runs in process").await;
    let pid: i32 = process.rsplit(' ').next().unwrap().parse().unwrap();
    rustix::process::Pid::from_raw(pid).unwrap()
}

/// A teammate idle on a `muster worker` — frozen (a stop point) after it looked at its mail
/// and the board and found nothing — is woken by the task the lead then puts on the board in
/// its own process: the board's change is announced through the store (the `@board` wake-up),
/// the teammate claims the task on its worker, does it, and its work is merged.
#[tokio::test(flavor = "multi_thread")]
async fn an_idle_teammate_on_a_worker_claims_the_task_the_lead_puts_on_the_board() {
    let schema = Schema::new().await;
    let url = schema.url();
    let mut create = ScriptEntry::reply(
        "lead",
        1,
        vec![tool(
            "TaskCreate",
            json!({"subject": "one.txt", "description": "Write one.txt."}),
        )],
    );
    create.fault.hold = Some("board".to_owned());
    let fake = fake(vec![
        create,
        lead_merges("one", &["merge-one-1"]),
        any_turn("lead", "Waiting for the team."),
        ScriptEntry::reply(
            "one",
            1,
            vec![tool(
                "Write",
                json!({"file_path": "one.txt", "content": "one\n"}),
            )],
        ),
        any_turn("one", "done"),
    ])
    .await;
    let stop_point = [("MUSTER_FAILPOINT", "idle:one:stop".to_owned())];
    let mut worker = teammate_worker_with_env(&fake, &url, "w1", &stop_point);
    worker.wait_for("ready on").await;
    let remote = bare_remote();
    let remote_path = remote.path().display().to_string();
    let lead = lead_repo(&team(&["one"], ""));
    let root = lead.path();
    let base = fake.base_url();
    let mut run =
        super::common::Running::spawn(command(root, &run_args(&url, &base, &remote_path)));
    let teammate = teammate_pid(&mut worker).await;
    worker.wait_for("failpoint idle:one@1: SIGSTOP").await;
    // Only now is there a task: the teammate found none, and waits for the board's wake-up.
    fake.open_gate("board");
    let store = super::store_pg::open(&url).await;
    let started = run.until("the run's id", |e| e["run_id"].is_string()).await;
    let run_id = started["run_id"].as_str().unwrap().to_owned();
    until_stored(&store, "the lead's task", || async {
        !store.tasks(&run_id).await.unwrap().is_empty()
    })
    .await;
    rustix::process::kill_process(teammate, rustix::process::Signal::CONT).unwrap();
    assert_eq!(run.finish().await, Some(0), "{:#?}", run.events);
    let end = run.events.last().unwrap().clone();
    assert_eq!(end["status"], "completed", "{end:#}");
    assert_eq!(end["workers"]["one"], "w1", "{end:#}");
    let tasks = store.tasks(&run_id).await.unwrap();
    assert_eq!(tasks.len(), 1, "{tasks:#?}");
    assert_eq!(tasks[0].owner.as_deref(), Some("one"), "{tasks:#?}");
    assert_eq!(tasks[0].status, muster_mailbox::TaskStatus::Completed);
    assert_eq!(
        std::fs::read_to_string(root.join("one.txt")).ok(),
        Some("one\n".to_owned()),
        "{end:#}\n{:#?}",
        worker.said()
    );
    assert_eq!(worker.stop().await, Some(0));
    schema.drop_now().await;
}

/// The teammate's process on a worker loses its LISTEN connection (the server terminates it,
/// as a restart or a network cut would): the connection is opened again and the lead's mail,
/// sent only once it listens again, still reaches the teammate, which does the work.
#[tokio::test(flavor = "multi_thread")]
async fn a_teammate_on_a_worker_whose_listen_connection_is_cut_still_gets_the_leads_mail() {
    let schema = Schema::new().await;
    let url = schema.url();
    let mut assign = lead_assigns(&["one"]);
    assign.fault.hold = Some("mail".to_owned());
    let fake = fake(vec![
        assign,
        lead_merges("one", &["merge-one-1"]),
        any_turn("lead", "Waiting for the team."),
        ScriptEntry::reply(
            "one",
            1,
            vec![tool(
                "Write",
                json!({"file_path": "one.txt", "content": "one\n"}),
            )],
        ),
        any_turn("one", "done"),
    ])
    .await;
    let mut worker = teammate_worker_with_flags(&fake, &url, "w1", &["--log-level", "info"]);
    worker.wait_for("ready on").await;
    let remote = bare_remote();
    let remote_path = remote.path().display().to_string();
    let lead = lead_repo(&team(&["one"], ""));
    let root = lead.path();
    let base = fake.base_url();
    let mut run =
        super::common::Running::spawn(command(root, &run_args(&url, &base, &remote_path)));
    // Said once the teammate's process listens on the run.
    let line = worker.wait_for("teammate one of run").await;
    let run_id = line
        .split("of run ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap()
        .to_owned();
    let name = muster_mailbox::postgres::listen_application_name(schema.name(), &run_id);
    let (client, connection) =
        tokio_postgres::connect(&super::store_pg::server_url(), tokio_postgres::NoTls)
            .await
            .unwrap();
    let driver = tokio::spawn(connection);
    let cut = client
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            &[&name],
        )
        .await
        .unwrap();
    assert_eq!(cut.len(), 1, "one listening connection named {name:?}");
    assert!(cut[0].get::<_, bool>(0), "terminated");
    drop(client);
    let _ = driver.await;
    worker
        .wait_for("listening on the run's wake channel again")
        .await;
    // The lead's mail goes out only now: its NOTIFY reaches the new connection.
    fake.open_gate("mail");
    assert_eq!(run.finish().await, Some(0), "{:#?}", run.events);
    let end = run.events.last().unwrap().clone();
    assert_eq!(end["status"], "completed", "{end:#}");
    assert_eq!(
        std::fs::read_to_string(root.join("one.txt")).ok(),
        Some("one\n".to_owned()),
        "{end:#}\n{:#?}",
        worker.said()
    );
    assert_eq!(worker.stop().await, Some(0));
    schema.drop_now().await;
}

/// The lead interrupted (SIGINT) while its teammate on a `muster worker` waits on the model
/// there: the lead stops the teammate's work item in the store as it ends (`stop_placed`), so
/// the worker finds the lease lost, stops the teammate's process and reports nothing for it;
/// nothing of the teammate runs on after its run stopped. `muster resume` places the teammate
/// again: a worker resumes it from the store and the run completes with its work.
#[tokio::test(flavor = "multi_thread")]
async fn an_interrupted_lead_stops_its_teammate_on_a_worker_and_a_resume_places_it_again() {
    let schema = Schema::new().await;
    let url = schema.url();
    let mut held = ScriptEntry::reply(
        "one",
        1,
        vec![tool(
            "Write",
            json!({"file_path": "one.txt", "content": "one\n"}),
        )],
    );
    held.fault.hold = Some("one-1".to_owned());
    let fake = fake(vec![
        lead_assigns(&["one"]),
        lead_merges("one", &["merge-one-1"]),
        any_turn("lead", "Waiting for the team."),
        held,
        any_turn("one", "done"),
    ])
    .await;
    let mut worker = teammate_worker(&fake, &url, "w1");
    worker.wait_for("ready on").await;
    let remote = bare_remote();
    let remote_path = remote.path().display().to_string();
    let lead = lead_repo(&team(&["one"], ""));
    let root = lead.path();
    let base = fake.base_url();
    let mut run =
        super::common::Running::spawn(command(root, &run_args(&url, &base, &remote_path)));
    let started = run
        .until("the lead's mail", |e| e["type"] == "mail_sent")
        .await;
    let run_id = started["run_id"].as_str().unwrap().to_owned();
    let teammate = teammate_pid(&mut worker).await;
    tokio::time::timeout(super::common::GUARD, fake.gate_reached("one-1", 1))
        .await
        .expect("the teammate on the worker never asked the model");
    let lead_pid = run.child.id().unwrap() as i32;
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(lead_pid).unwrap(),
        rustix::process::Signal::INT,
    )
    .unwrap();
    assert_eq!(run.finish().await, Some(130), "{:#?}", run.events);
    let end = run.events.last().unwrap().clone();
    assert_eq!(end["status"], "interrupted", "{end:#}");
    // Stopped in the store by the lead as it ended.
    let store = super::store_pg::open(&url).await;
    let item_id = format!("team:{run_id}:one");
    let item = store.work_item(&item_id).await.unwrap().unwrap();
    assert_eq!(item.state, muster_mailbox::WorkState::Done, "{item:#?}");
    assert_eq!(
        item.result.as_ref().unwrap()["stopped"],
        "interrupted",
        "{item:#?}"
    );
    // Its worker stops the teammate's process and its result is refused: the lead decided.
    worker
        .wait_for(&format!("lost the lease of {item_id}"))
        .await;
    worker
        .wait_for(&format!("{item_id}: result refused as fenced"))
        .await;
    assert!(
        rustix::process::test_kill_process(teammate).is_err(),
        "the teammate's process {teammate:?} still runs:\n{:#?}",
        worker.said()
    );
    assert!(
        !root.join("one.txt").exists() && found_under(worker.dir.path(), "one.txt").is_empty(),
        "nothing of the teammate's turn ran"
    );
    // The resume places it again; a worker resumes it from the store.
    fake.open_gate("one-1");
    let resumed = command(
        root,
        &[
            "--store",
            &url,
            "resume",
            &run_id,
            "--output",
            "stream-json",
        ],
    );
    let output = super::common::output(resumed).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let end = finished(&output);
    assert_eq!(end["status"], "completed", "{end:#}");
    worker.wait_for("resumed from the store").await;
    assert_eq!(
        std::fs::read_to_string(root.join("one.txt")).ok(),
        Some("one\n".to_owned()),
        "{end:#}\n{:#?}",
        worker.said()
    );
    let item = store.work_item(&item_id).await.unwrap().unwrap();
    assert_eq!(item.result.as_ref().unwrap()["exit_code"], 0, "{item:#?}");
    assert_eq!(worker.stop().await, Some(0));
    schema.drop_now().await;
}

/// The run's deadline (`--max-duration`) ends the lead while its teammate on a worker waits
/// on the model there: the teammate cannot answer the end-of-run shutdown request within
/// the shutdown timeout, so the lead stops its work item as it ends, and the worker stops the
/// teammate's process. The teammate's process is frozen (SIGSTOP), so it ignores the
/// worker's SIGTERM too: only the SIGKILL the worker sends after its grace period ends it.
/// Nothing of it runs on after the lead's exit.
#[tokio::test(flavor = "multi_thread")]
async fn a_teammate_on_a_worker_that_ignores_the_shutdown_is_stopped_when_the_lead_ends() {
    let schema = Schema::new().await;
    let url = schema.url();
    let mut held = any_turn("one", "done");
    held.fault.hold = Some("one-1".to_owned());
    let fake = fake(vec![
        lead_assigns(&["one"]),
        any_turn("lead", "Waiting for the team."),
        held,
    ])
    .await;
    let mut worker = teammate_worker(&fake, &url, "w1");
    worker.wait_for("ready on").await;
    let remote = bare_remote();
    let remote_path = remote.path().display().to_string();
    let lead = lead_repo(&team(&["one"], "shutdown_timeout_ms = 300\n"));
    let root = lead.path();
    let base = fake.base_url();
    let mut args = run_args(&url, &base, &remote_path);
    // Long enough for the teammate to reach the model on its worker first.
    args.extend(["--max-duration", "15"]);
    let mut run = super::common::Running::spawn(command(root, &args));
    let started = run
        .until("the lead's mail", |e| e["type"] == "mail_sent")
        .await;
    let run_id = started["run_id"].as_str().unwrap().to_owned();
    let teammate = teammate_pid(&mut worker).await;
    tokio::time::timeout(super::common::GUARD, fake.gate_reached("one-1", 1))
        .await
        .expect("the teammate on the worker never asked the model");
    // Deaf to everything but SIGKILL from here on.
    rustix::process::kill_process_group(teammate, rustix::process::Signal::STOP).unwrap();
    assert_eq!(run.finish().await, Some(3), "{:#?}", run.events);
    let end = run.events.last().unwrap().clone();
    assert_eq!(end["status"], "budget", "{end:#}");
    let item_id = format!("team:{run_id}:one");
    worker
        .wait_for(&format!("lost the lease of {item_id}"))
        .await;
    worker
        .wait_for(&format!("{item_id}: result refused as fenced"))
        .await;
    assert!(
        rustix::process::test_kill_process(teammate).is_err(),
        "the teammate's process {teammate:?} still runs:\n{:#?}",
        worker.said()
    );
    let store = super::store_pg::open(&url).await;
    let item = store.work_item(&item_id).await.unwrap().unwrap();
    assert_eq!(
        item.result.as_ref().unwrap()["stopped"],
        "budget",
        "{item:#?}"
    );
    fake.open_gate("one-1");
    assert_eq!(worker.stop().await, Some(0));
    schema.drop_now().await;
}

/// A worker and its teammate's process frozen (SIGSTOP, as a machine that stalls) while the
/// teammate waits on the model, until the worker's lease lapses: another worker takes the
/// teammate over (token 2) and resumes it from the store, and the run completes with its
/// work from there. Continued, the stale worker learns it lost the lease, stops its teammate's
/// process and its result is refused as fenced: nothing of the stale teammate lands.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_stopped_past_its_lease_has_its_teammate_taken_over_and_is_fenced_when_it_continues()
 {
    let HeldOnWorker {
        schema,
        url,
        fake,
        mut first,
        _remote,
        lead,
        mut run,
    } = held_on_a_worker().await;
    let root = lead.path();
    let started = run
        .until("the lead's mail", |e| e["type"] == "mail_sent")
        .await;
    let run_id = started["run_id"].as_str().unwrap().to_owned();
    let item_id = format!("team:{run_id}:one");
    let teammate = teammate_pid(&mut first).await;
    tokio::time::timeout(super::common::GUARD, fake.gate_reached("one-1", 1))
        .await
        .expect("the teammate on the worker never asked the model");
    rustix::process::kill_process(first.pid(), rustix::process::Signal::STOP).unwrap();
    rustix::process::kill_process_group(teammate, rustix::process::Signal::STOP).unwrap();
    // The lease lapses; the second worker's deadline timer fires and it takes the teammate.
    let mut second = teammate_worker(&fake, &url, "w2");
    second
        .wait_for(&format!("claimed {item_id} (token 2"))
        .await;
    // Both requests get their answer; the frozen one's waits in its socket.
    fake.open_gate("one-1");
    assert_completed_on_the_second_worker(&mut run, root, &mut second).await;
    // Continued: the stale worker finds the lease lost, and nothing of its teammate lands.
    rustix::process::kill_process_group(teammate, rustix::process::Signal::CONT).unwrap();
    rustix::process::kill_process(first.pid(), rustix::process::Signal::CONT).unwrap();
    first
        .wait_for(&format!("lost the lease of {item_id}"))
        .await;
    first
        .wait_for(&format!("{item_id}: result refused as fenced"))
        .await;
    assert!(
        rustix::process::test_kill_process(teammate).is_err(),
        "the stale teammate's process {teammate:?} still runs:\n{:#?}",
        first.said()
    );
    let store = super::store_pg::open(&url).await;
    let item = store.work_item(&item_id).await.unwrap().unwrap();
    assert_eq!(
        (item.state, item.token, item.worker.as_deref()),
        (muster_mailbox::WorkState::Done, 2, Some("w2")),
        "{item:#?}"
    );
    assert_eq!(item.result.as_ref().unwrap()["exit_code"], 0, "{item:#?}");
    assert!(
        found_under(first.dir.path(), "one.txt").is_empty(),
        "the stale teammate wrote nothing on its worker"
    );
    assert_eq!(first.stop().await, Some(0));
    assert_eq!(second.stop().await, Some(0));
    schema.drop_now().await;
}

/// The script of a run whose teammate `one` on a worker is interrupted while held at the model
/// and the lead waits: told of it, the lead mails it to go on, and ends when it is done.
async fn interrupted_on_a_worker_model() -> FakeLlmHandle {
    let mut held = ScriptEntry::reply("one", 1, vec![muster_fake_llm::Block::text("Never.")]);
    held.fault.hold = Some("one-1".to_owned());
    fake(vec![
        lead_assigns(&["one"]),
        ScriptEntry::reply(
            "lead",
            2,
            vec![muster_fake_llm::Block::text("Waiting for one.")],
        ),
        ScriptEntry::reply(
            "lead",
            3,
            vec![tool(
                "SendMessage",
                json!({"to": "one", "message": "Go on."}),
            )],
        ),
        any_turn("lead", "Done."),
        held.attempt(1),
        any_turn("one", "Counted."),
    ])
    .await
}

/// What such a run leaves: one's turn interrupted once on its worker, the lead told once, one
/// started again by the lead's mail and told its last turn was interrupted.
async fn assert_interrupted_on_the_worker(url: &str, run_id: &str, fake: &FakeLlmHandle) {
    let store = super::store_pg::open(url).await;
    let interrupted = super::common::transcript(store.as_ref(), run_id, "one")
        .await
        .iter()
        .filter(|record| record["type"] == "turn_interrupted")
        .count();
    assert_eq!(interrupted, 1);
    let notices = store
        .messages(run_id, Some("lead"))
        .await
        .unwrap()
        .into_iter()
        .filter(|m| {
            m.sender == "one"
                && matches!(&m.body, muster_mailbox::MessageBody::IdleNotification { reason, .. } if reason == "interrupted")
        })
        .count();
    assert_eq!(notices, 1);
    let one: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.agent.as_deref() == Some("one"))
        .collect();
    assert_eq!(
        one.len(),
        2,
        "the held request, then the one after the lead's mail"
    );
    let said = one[1].body["messages"].to_string();
    assert!(
        said.contains("interrupted your turn"),
        "one is told: {said}"
    );
    assert!(said.contains("Go on."), "{said}");
}

/// The PostgreSQL schema, the model, a ready worker `w1` and the run's remote of the two tests
/// below.
struct OnAWorker {
    schema: Schema,
    url: String,
    fake: FakeLlmHandle,
    worker: Worker,
    remote: tempfile::TempDir,
}

impl OnAWorker {
    async fn start() -> OnAWorker {
        let schema = Schema::new().await;
        let url = schema.url();
        let fake = interrupted_on_a_worker_model().await;
        let mut worker = teammate_worker(&fake, &url, "w1");
        worker.wait_for("ready on").await;
        OnAWorker {
            schema,
            url,
            fake,
            worker,
            remote: bare_remote(),
        }
    }

    fn remote(&self) -> String {
        self.remote.path().display().to_string()
    }

    /// The teammate's turn was interrupted on the worker, the run went on; the worker stops.
    async fn finish(mut self, run_id: &str) {
        assert_interrupted_on_the_worker(&self.url, run_id, &self.fake).await;
        assert_eq!(self.worker.stop().await, Some(0));
        self.schema.drop_now().await;
    }
}

/// `muster interrupt` while the lead waits and its teammate's turn on a `muster worker` is held
/// at the model: the worker, watching the run's committed interrupt requests, ends that turn
/// (`turn_interrupted` committed there), the teammate goes idle and tells the lead once, and
/// the lead's mail starts it again on its worker; the run completes.
#[tokio::test(flavor = "multi_thread")]
async fn an_interrupt_ends_the_turn_of_a_teammate_on_a_worker_and_the_run_goes_on() {
    let setup = OnAWorker::start().await;
    let (url, fake) = (setup.url.clone(), &setup.fake);
    let lead = lead_repo(&team(&["one"], ""));
    let root = lead.path();
    let base = fake.base_url();
    let remote = setup.remote();
    let mut run = super::common::Running::spawn(command(root, &run_args(&url, &base, &remote)));
    let waiting = run
        .until("the lead's second turn", |e| {
            e["type"] == "model_turn" && e["agent"] == "lead" && e["turn"] == 2
        })
        .await;
    let run_id = waiting["run_id"].as_str().unwrap().to_owned();
    tokio::time::timeout(super::common::GUARD, fake.gate_reached("one-1", 1))
        .await
        .expect("the teammate on the worker never asked the model");
    let asked =
        super::common::output(command(root, &["--store", &url, "interrupt", &run_id])).await;
    assert_eq!(asked.status.code(), Some(0), "{}", stderr(&asked));
    assert_eq!(run.finish().await, Some(0), "{:#?}", run.events);
    let end = run.events.last().unwrap().clone();
    assert_eq!(end["status"], "completed", "{end:#}");
    assert_eq!(end["result"], "Done.", "{end:#}");
    setup.finish(&run_id).await;
}

/// The same through a program written for the Agent SDK (`muster claude`, stream-json on
/// stdin): its `interrupt` control request, which ends this process's running turns, is
/// committed for the teammate on the worker too, and the prompt's result comes when the lead
/// is done.
#[tokio::test(flavor = "multi_thread")]
async fn an_sdk_programs_interrupt_reaches_the_teammate_on_a_worker() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let setup = OnAWorker::start().await;
    let (url, fake) = (setup.url.clone(), &setup.fake);
    let remote = setup.remote();
    let lead = lead_repo(&team(&["one"], &format!("remote = \"{remote}\"\n")));
    let root = lead.path();
    std::fs::write(
        root.join(".muster/settings.toml"),
        format!("store = \"{url}\"\n"),
    )
    .unwrap();
    super::common::trust_blocking(root);
    let mut program = command(
        root,
        &[
            "claude",
            "--output-format",
            "stream-json",
            "--verbose",
            "--input-format",
            "stream-json",
            "--permission-mode",
            "bypassPermissions",
        ],
    );
    program
        .env("ANTHROPIC_BASE_URL", fake.base_url())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = program.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next_until = async |what: &str, wanted: &dyn Fn(&Value) -> bool| -> Value {
        tokio::time::timeout(super::common::GUARD, async {
            loop {
                let line = stdout.next_line().await.unwrap().expect("stdout ended");
                let message: Value = serde_json::from_str(&line).unwrap();
                if wanted(&message) {
                    return message;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no {what} before the guard"))
    };
    let user = json!({"type": "user", "message": {"role": "user", "content": "Build it."}});
    stdin
        .write_all(format!("{user}\n").as_bytes())
        .await
        .unwrap();
    let init = next_until("init", &|m| m["type"] == "system" && m["subtype"] == "init").await;
    let run_id = init["session_id"].as_str().unwrap().to_owned();
    next_until("the lead's waiting text", &|m| {
        m["type"] == "assistant" && m.to_string().contains("Waiting for one.")
    })
    .await;
    tokio::time::timeout(super::common::GUARD, fake.gate_reached("one-1", 1))
        .await
        .expect("the teammate on the worker never asked the model");
    let interrupt = json!({"type": "control_request", "request_id": "stop-1",
                           "request": {"subtype": "interrupt"}});
    stdin
        .write_all(format!("{interrupt}\n").as_bytes())
        .await
        .unwrap();
    let result = next_until("the prompt's result", &|m| m["type"] == "result").await;
    assert_eq!(result["result"], "Done.", "{result:#}");
    drop(stdin);
    let status = tokio::time::timeout(super::common::GUARD, child.wait())
        .await
        .expect("muster claude did not end after stdin closed")
        .unwrap();
    assert_eq!(status.code(), Some(0));
    setup.finish(&run_id).await;
}

/// A guard hook in the worker's own settings (its directory trusted by its operator) refuses
/// `rm` for the teammate placed on it: the hook runs on the worker, and its reason reaches that
/// teammate's model. An audit hook there writes one line per call that ran, compared with the
/// calls the fake model server answered that teammate.
#[tokio::test(flavor = "multi_thread")]
async fn a_guard_hook_of_the_workers_settings_refuses_rm_for_the_teammate_on_it() {
    let schema = Schema::new().await;
    let url = schema.url();
    let fake = fake(vec![
        lead_assigns(&["one"]),
        any_turn("lead", "Waiting for the team."),
        ScriptEntry::reply(
            "one",
            1,
            vec![
                tool("Bash", json!({"command": "rm README.md"})),
                tool("Bash", json!({"command": "echo kept"})),
                tool("Read", json!({"file_path": "README.md"})),
            ],
        ),
        any_turn("one", "done"),
    ])
    .await;
    let dir = super::common::project(&[(
        ".muster/settings.toml",
        &format!(
            "permission_mode = \"bypassPermissions\"\n[providers.anthropic]\nbase_url = \"{}\"\n\
             [sandbox]\nmode = \"off\"\n",
            fake.base_url()
        ),
    )]);
    let audit = std::fs::canonicalize(dir.path()).unwrap().join("audit");
    std::fs::create_dir_all(&audit).unwrap();
    std::fs::write(audit.join("audit.py"), super::hooks_agents_cli::AUDIT).unwrap();
    std::fs::create_dir_all(dir.path().join(".muster/agents")).unwrap();
    std::fs::write(dir.path().join(".muster/agents/writer.md"), WRITER).unwrap();
    let hooks = std::fs::canonicalize(dir.path())
        .unwrap()
        .join(".claude/hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    let guard = hooks.join("guard.sh");
    std::fs::write(
        &guard,
        "#!/bin/sh\ninput=$(cat)\necho \"$input\" >> \"$(dirname \"$0\")/guard.log\"\n\
         case \"$input\" in\n  *'\"command\":\"rm '*) echo 'rm is not allowed here (guard)' >&2; exit 2 ;;\n\
         esac\nexit 0\n",
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&guard, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::write(
        dir.path().join(".claude/settings.json"),
        json!({"hooks": {
            "PreToolUse": [{"matcher": "Bash", "hooks": [
                {"type": "command", "command": guard.display().to_string()}]}],
            "PostToolUse": [{"matcher": "*", "hooks": [
                {"type": "command",
                 "command": format!("python3 {}", audit.join("audit.py").display())}]}]}})
        .to_string(),
    )
    .unwrap();
    super::common::trust_blocking(dir.path());
    let mut worker = Worker::start_with_env(dir, &url, "w1", &["--slots", "1"], &[]);
    worker.wait_for("ready on").await;
    let remote = bare_remote();
    let remote_path = remote.path().display().to_string();
    let lead = lead_repo(&team(&["one"], ""));
    let root = lead.path();
    let output = super::common::output(command(
        root,
        &run_args(&url, &fake.base_url(), &remote_path),
    ))
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let second = fake
        .requests()
        .into_iter()
        .find(|r| r.agent.as_deref() == Some("one") && r.turn == Some(2))
        .expect("the teammate's second request");
    let said = second.body["messages"].to_string();
    assert!(said.contains("rm is not allowed here (guard)"), "{said}");
    let logged = std::fs::read_to_string(hooks.join("guard.log")).unwrap_or_default();
    assert_eq!(
        logged.lines().count(),
        2,
        "the guard ran once per Bash call, on the worker: {logged}"
    );
    assert!(logged.contains("rm README.md"), "{logged}");
    // The audit saw each of the teammate's calls that ran, once, and no other: the refused
    // `rm` has no PostToolUse.
    let asked: BTreeSet<_> = super::hooks_agents_cli::asked(&fake.requests())
        .into_iter()
        .filter(|(_, agent, _, _)| agent == "one")
        .collect();
    let ran = super::hooks_agents_cli::audited(&audit.join("audit.log"));
    assert_eq!(ran.len(), 2, "{ran:#?}");
    assert!(ran.is_subset(&asked), "{ran:#?}\n{asked:#?}");
    let rm_id = second.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|message| message["content"].as_array().cloned().unwrap_or_default())
        .find(|block| block["type"] == "tool_use" && block["input"]["command"] == "rm README.md")
        .map(|block| block["id"].as_str().unwrap().to_owned())
        .unwrap();
    let refused: Vec<_> = asked.difference(&ran).map(|(.., id)| id.clone()).collect();
    assert_eq!(refused, vec![rm_id], "{ran:#?}");
    let logged_lines = std::fs::read_to_string(audit.join("audit.log")).unwrap();
    assert_eq!(logged_lines.lines().count(), 2, "{logged_lines}");
    assert_eq!(worker.stop().await, Some(0));
    schema.drop_now().await;
}

/// A plan reviewer hook (`approver = "hook:strict"`) decides the plans of a teammate placed
/// on a worker: it runs in the lead's process (the project root's settings, read-only), its
/// rejection's feedback reaches the teammate's model on the worker, the teammate revises, the
/// revision is approved and the teammate's write comes back to the lead by git.
#[tokio::test(flavor = "multi_thread")]
async fn a_plan_reviewer_hook_decides_the_plans_of_a_teammate_on_a_worker() {
    use super::plan_reviewer_cli::{PLAN, REVIEWER, UNTESTED};
    let schema = Schema::new().await;
    let url = schema.url();
    let fake = fake(vec![
        lead_assigns(&["one"]),
        lead_merges("one", &["merge-one-1"]),
        any_turn("lead", "Waiting for the team."),
        ScriptEntry::reply(
            "one",
            1,
            vec![tool("ExitPlanMode", json!({"plan": UNTESTED}))],
        ),
        ScriptEntry::reply("one", 2, vec![tool("ExitPlanMode", json!({"plan": PLAN}))]),
        ScriptEntry::reply(
            "one",
            3,
            vec![tool(
                "Write",
                json!({"file_path": "hello.txt", "content": "hello, world\n"}),
            )],
        ),
        any_turn("one", "done"),
    ])
    .await;
    let mut worker = teammate_worker(&fake, &url, "w1");
    worker.wait_for("ready on").await;
    let remote = bare_remote();
    let remote_path = remote.path().display().to_string();
    let lead = lead_repo(
        "name = \"builders\"\n\n[[teammates]]\nname = \"one\"\ndefinition = \"writer\"\n\
         plan_mode_required = true\nplacement = \"workers\"\napprover = \"hook:strict\"\n",
    );
    let root = lead.path();
    let hooks = root.join(".claude/hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    std::fs::write(hooks.join("review.sh"), REVIEWER).unwrap();
    std::fs::write(
        root.join(".claude/settings.json"),
        json!({"planReviewers": {"strict": {
            "type": "command", "command": "sh \"$CLAUDE_PROJECT_DIR\"/.claude/hooks/review.sh",
            "timeout": 30}}})
        .to_string(),
    )
    .unwrap();
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "reviewer"]);
    super::common::trust_blocking(root);
    let output = super::common::output(command(
        root,
        &run_args(&url, &fake.base_url(), &remote_path),
    ))
    .await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}\n{:#?}",
        stderr(&output),
        lines(&output)
    );
    let events = lines(&output);
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "teammate_placed" && e["agent"] == "one" && e["worker"] == "w1"),
        "{events:#?}"
    );
    // The reviewer answered both plans in the lead's process, as `policy` (the entry every
    // automated answer comes from); the teammate's own events are the worker's.
    let answered: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "mail_sent" && e["kind"] == "plan_approval_response")
        .collect();
    assert_eq!(answered.len(), 2, "{events:#?}");
    for (answer, id) in answered.iter().zip(["plan-one-1", "plan-one-2"]) {
        assert_eq!(answer["from"], "policy", "{answer}");
        assert_eq!(answer["request_id"], id, "{answer}");
    }
    let inbox =
        super::common::output(command(root, &["--store", &url, "inbox", "one", "--json"])).await;
    assert_eq!(inbox.status.code(), Some(0), "{}", stderr(&inbox));
    let rows: Value = serde_json::from_slice(&inbox.stdout).unwrap();
    let responses: Vec<&Value> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|row| &row["message"])
        .filter(|m| m["kind"] == "plan_approval_response")
        .collect();
    assert_eq!(responses.len(), 2, "{rows:#}");
    for (response, approved) in responses.iter().zip([false, true]) {
        assert_eq!(response["body"]["approved"], approved, "{response}");
        assert!(
            response["body"]["rule"]
                .as_str()
                .unwrap_or_default()
                .starts_with("plan reviewer hook strict ("),
            "{response}"
        );
    }
    // The feedback reached the teammate's model, which ran on the worker.
    let second = fake
        .requests()
        .into_iter()
        .find(|r| r.agent.as_deref() == Some("one") && r.turn == Some(2))
        .expect("the teammate's second request");
    let said = second.body.to_string();
    assert!(
        said.contains("Add a ## Tests section that checks hello.txt.")
            && said.contains("Your plan was rejected by plan reviewer hook strict ("),
        "{said}"
    );
    // The reviewer (defined only in the lead's settings) ran read-only: it wrote nothing.
    assert!(!root.join("reviewer-wrote.txt").exists());
    assert_eq!(
        std::fs::read_to_string(root.join("hello.txt"))
            .ok()
            .as_deref(),
        Some("hello, world\n")
    );
    assert_eq!(worker.stop().await, Some(0));
    schema.drop_now().await;
}

/// A teammate whose team entry names a key variable (`api_key_env`) that the lead's machine
/// has and its worker's lacks: the worker cannot build the teammate's provider. The teammate
/// fails there, and the person who started the run reads which worker, which teammate and
/// which variable in the run's events and the worker's log; the lead hears of it by mail, as
/// of any failed teammate, and the run ends instead of waiting for it.
#[tokio::test(flavor = "multi_thread")]
async fn a_teammate_on_a_worker_without_its_key_variable_fails_naming_worker_agent_and_variable() {
    const VARIABLE: &str = "MUSTER_TEST_ONE_KEY";
    let schema = Schema::new().await;
    let url = schema.url();
    let told = entry(json!({"agent": "lead",
        "when": {"mail_type": "idle_notification", "from": "one"},
        "reply": {"content": [{"type": "text", "text": "one failed; doing it myself."}],
                  "stop_reason": "end_turn"}}));
    let fake = fake(vec![
        lead_assigns(&["one"]),
        told,
        any_turn("lead", "Waiting for the team."),
        any_turn("one", "done"),
    ])
    .await;
    // The worker's environment has no such variable (the test's command sets none).
    let mut worker = teammate_worker(&fake, &url, "w1");
    worker.wait_for("ready on").await;
    let remote = bare_remote();
    let remote_path = remote.path().display().to_string();
    let text = format!(
        "name = \"builders\"\n\n[[teammates]]\nname = \"one\"\ndefinition = \"writer\"\n\
         plan_mode_required = false\nplacement = \"workers\"\napi_key_env = \"{VARIABLE}\"\n"
    );
    let lead = lead_repo(&text);
    let root = lead.path();
    // The team file's key variable applies once the user trusts the repository.
    super::common::trust_blocking(root);
    let base = fake.base_url();
    let mut run = command(root, &run_args(&url, &base, &remote_path));
    run.env(VARIABLE, "sk-lead-machine-only");
    let output = tokio::time::timeout(super::common::GUARD, super::common::output(run))
        .await
        .expect("the run waited for a teammate that cannot start");
    let end = finished(&output);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(end["status"], "completed", "{end:#}");
    // What the worker says names it, the teammate and the variable.
    let said = format!(
        "muster worker w1: teammate one: anthropic: no API key: the agent's api_key_env names {VARIABLE}"
    );
    // The run's events say it, where its person reads them.
    let events = lines(&output);
    let failed = events
        .iter()
        .find(|e| e["type"] == "teammate_finished" && e["agent"] == "one")
        .unwrap_or_else(|| panic!("{events:#?}"));
    let error = failed["result"]["error"].as_str().unwrap_or_default();
    assert!(error.contains(&said), "{failed:#}");
    // So does the worker's log.
    let logged = worker.wait_for(VARIABLE).await;
    assert!(logged.contains(&said), "{logged}");
    // The lead was told by mail, as of any failed teammate.
    let told_lead = fake.requests().iter().any(|r| {
        let body = r.body.to_string();
        r.agent.as_deref() == Some("lead")
            && body.contains("idle_notification: one is idle (failed)")
            && body.contains(&format!("one failed on worker w1: {said}"))
    });
    assert!(told_lead, "{:#?}", fake.requests());
    // The teammate never reached a model.
    assert!(
        fake.requests()
            .iter()
            .all(|r| r.agent.as_deref() != Some("one")),
        "{:#?}",
        fake.requests()
    );
    assert_eq!(worker.stop().await, Some(0));
    schema.drop_now().await;
}
