//! `muster worker` and `muster batch --workers` as real processes on the test PostgreSQL
//! server (a fresh schema per test): each worker with its own HOME, directory and settings,
//! the batch in another directory, the model scripted by `muster-fake-llm`. A batch spread
//! over three workers; a worker killed with SIGKILL mid-line, whose line another worker
//! resumes; a worker stopped with SIGSTOP until its lease lapsed, whose late writes are
//! refused as fenced.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use muster_fake_llm::{Block, FakeLlm, FakeLlmHandle, Fault, ScriptEntry};
use muster_mailbox::{MailboxStore, PostgresStore, StoreOptions, WorkState};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::sync::mpsc;

use super::common::{GUARD, command, json_lines, stderr};
use super::store_pg::Schema;
use super::worker_procs::{Worker, worker_dir};

/// Every line: a Bash side effect in its workspace, then (turn 2) its answer; turn 2's first
/// request waits on gate `held` when `hold_first` (the line a test cuts off).
pub(super) fn script(hold_first: bool) -> Vec<ScriptEntry> {
    let mut entries = vec![ScriptEntry::reply(
        "main",
        1,
        vec![Block::tool_use(
            "Bash",
            json!({"command": "echo done >> marker.txt"}),
        )],
    )];
    if hold_first {
        entries.push(
            ScriptEntry::reply("main", 2, vec![Block::text("finished late")])
                .attempt(1)
                .fault(Fault {
                    hold: Some("held".into()),
                    ..Fault::default()
                }),
        );
    }
    entries.push(ScriptEntry::reply("main", 2, vec![Block::text("finished")]));
    entries
}

/// The batch project: its own directory, the store given on the command line.
pub(super) fn batch_dir(ids: &[&str]) -> tempfile::TempDir {
    let dir = super::common::project(&[]);
    let lines: Vec<String> = ids
        .iter()
        .map(|id| json!({"id": id, "prompt": format!("Do {id}.")}).to_string())
        .collect();
    std::fs::write(dir.path().join("tasks.jsonl"), lines.join("\n") + "\n").unwrap();
    dir
}

pub(super) fn start_batch(dir: &Path, url: &str) -> tokio::process::Child {
    command(
        dir,
        &[
            "--store",
            url,
            "batch",
            "tasks.jsonl",
            "--workers",
            "--out",
            "results.jsonl",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .kill_on_drop(true)
    .spawn()
    .unwrap()
}

pub(super) async fn finish_batch(batch: tokio::process::Child) -> std::process::Output {
    tokio::time::timeout(GUARD, batch.wait_with_output())
        .await
        .expect("guard timeout: the batch did not finish")
        .unwrap()
}

pub(super) fn results(dir: &Path) -> Vec<Value> {
    json_lines(&std::fs::read_to_string(dir.join("results.jsonl")).unwrap_or_default())
}

/// Every line workspace any worker made, with its marker file's lines.
pub(super) fn markers(workers: &[&Worker]) -> Vec<(PathBuf, Vec<String>)> {
    let mut found = Vec::new();
    for worker in workers {
        let Ok(entries) = std::fs::read_dir(worker.dir.path().join("work")) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let lines = std::fs::read_to_string(path.join("marker.txt"))
                .unwrap_or_default()
                .lines()
                .map(str::to_owned)
                .collect();
            found.push((path, lines));
        }
    }
    found.sort();
    found
}

/// Each id has exactly one result line, completed.
fn assert_each_completed_once(lines: &[Value], ids: &[&str]) {
    assert_each_completed_once_with(lines, ids, 0);
}

/// `late`: how many lines got the held answer (their gate was opened) rather than a
/// re-asked one.
fn assert_each_completed_once_with(lines: &[Value], ids: &[&str], late: usize) {
    assert_eq!(lines.len(), ids.len(), "{lines:#?}");
    let mut by_id: HashMap<&str, &Value> = HashMap::new();
    for line in lines {
        let id = line["id"].as_str().unwrap();
        assert!(
            by_id.insert(id, line).is_none(),
            "{id} written twice: {lines:#?}"
        );
        assert_eq!(line["status"], "completed", "{line}");
        assert_eq!(line["exit_code"], 0, "{line}");
    }
    let answers = |text: &str| lines.iter().filter(|l| l["result"] == text).count();
    assert_eq!(answers("finished late"), late, "{lines:#?}");
    assert_eq!(answers("finished"), ids.len() - late, "{lines:#?}");
    for id in ids {
        assert!(by_id.contains_key(id), "no result for {id}: {lines:#?}");
    }
}

pub(super) async fn open(url: &str) -> std::sync::Arc<dyn MailboxStore> {
    std::sync::Arc::new(
        PostgresStore::open(url, StoreOptions::default())
            .await
            .unwrap(),
    )
}

/// The batch's queue: `batch:{project id}:tasks.jsonl` (the id is written before the lines
/// are queued, so once a worker claimed one it is there).
pub(super) fn queue_of(batch: &Path) -> String {
    let id = std::fs::read_to_string(batch.join(".muster/project-id")).unwrap();
    format!("batch:{}:tasks.jsonl", id.trim())
}

/// Waits (on the store's notifications) until `count` items of `queue` are done.
async fn until_done(
    store: &dyn MailboxStore,
    queue: &str,
    count: usize,
) -> Vec<muster_mailbox::WorkItem> {
    let watch = store.watch_work().await.unwrap();
    tokio::time::timeout(GUARD, async {
        loop {
            let items = store.work_items(queue).await.unwrap();
            if items.iter().filter(|i| i.state == WorkState::Done).count() >= count {
                return items;
            }
            watch.changed().await.unwrap();
        }
    })
    .await
    .expect("guard timeout waiting for items to finish")
}

async fn ready(fake: &FakeLlmHandle, url: &str) -> Vec<Worker> {
    let mut workers: Vec<Worker> = (1..=3)
        .map(|n| Worker::start(fake, url, &format!("w{n}")))
        .collect();
    for worker in &mut workers {
        worker.wait_for("ready on").await;
    }
    workers
}

fn each_marked_once(workers: &[Worker], count: usize) {
    let marks = markers(&workers.iter().collect::<Vec<_>>());
    assert_eq!(marks.len(), count, "one workspace per line: {marks:#?}");
    for (path, lines) in &marks {
        assert_eq!(lines, &["done"], "the side effect of {path:?} ran once");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_of_sixteen_lines_over_three_workers_runs_every_line_once_and_a_rerun_runs_nothing()
{
    let fake = FakeLlm::start(script(false)).await.unwrap();
    let schema = Schema::new().await;
    let url = schema.url();
    let mut workers = ready(&fake, &url).await;
    let ids = [
        "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p",
    ];
    let batch = batch_dir(&ids);

    let out = finish_batch(start_batch(batch.path(), &url)).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_each_completed_once(&results(batch.path()), &ids);
    each_marked_once(&workers, ids.len());
    let store = open(&url).await;
    let items = store.work_items(&queue_of(batch.path())).await.unwrap();
    assert!(
        items
            .iter()
            .all(|i| i.state == WorkState::Done && i.token == 1)
    );
    let ran_on: std::collections::HashSet<String> =
        items.iter().filter_map(|i| i.worker.clone()).collect();
    assert!(
        ran_on.len() >= 2,
        "the lines spread over the workers: {ran_on:?}"
    );

    let listed = super::common::muster(batch.path(), &["--store", &url, "workers"]).await;
    let text = super::common::stdout(&listed);
    for name in ["w1", "w2", "w3"] {
        assert!(text.contains(name), "{text}");
    }

    // Run again: every id is finished, nothing runs, the result file is unchanged.
    let requests = fake.requests().len();
    let again = finish_batch(start_batch(batch.path(), &url)).await;
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert_each_completed_once(&results(batch.path()), &ids);
    assert_eq!(fake.requests().len(), requests, "a re-run calls no model");

    // SIGTERM: each worker stops cleanly and the store says so.
    for worker in &mut workers {
        assert_eq!(worker.stop().await, Some(0), "{}", worker.said().join("\n"));
    }
    let stopped = store.workers().await.unwrap();
    assert_eq!(stopped.len(), 3);
    assert!(
        stopped
            .iter()
            .all(|w| w.stopped_at.is_some() && w.items.is_empty())
    );
    drop(store);
    schema.drop_now().await;
}

/// Starts a batch whose first line to reach its second model call is held there, waits
/// until the other lines are done, and gives back the held item and the index of its worker.
async fn one_line_held(
    fake: &FakeLlmHandle,
    store: &dyn MailboxStore,
    batch: &Path,
    workers: &[Worker],
    ids: &[&str],
) -> (muster_mailbox::WorkItem, usize) {
    tokio::time::timeout(GUARD, fake.gate_reached("held", 1))
        .await
        .expect("guard timeout: no line reached the held call");
    let items = until_done(store, &queue_of(batch), ids.len() - 1).await;
    let held = items
        .into_iter()
        .find(|item| item.state == WorkState::Leased)
        .expect("the held line is still leased");
    let holder = held.worker.clone().unwrap();
    let index = workers.iter().position(|w| w.name == holder).unwrap();
    (held, index)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_mid_line_has_the_line_resumed_elsewhere_with_no_side_effect_twice() {
    let fake = FakeLlm::start(script(true)).await.unwrap();
    let schema = Schema::new().await;
    let url = schema.url();
    let mut workers = ready(&fake, &url).await;
    let ids = ["a", "b", "c"];
    let batch = batch_dir(&ids);
    let running = start_batch(batch.path(), &url);
    let store = open(&url).await;
    let (held, index) = one_line_held(&fake, store.as_ref(), batch.path(), &workers, &ids).await;

    let victim = &mut workers[index];
    rustix::process::kill_process(victim.pid(), rustix::process::Signal::KILL).unwrap();
    victim.child.wait().await.unwrap();

    let out = finish_batch(running).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_each_completed_once(&results(batch.path()), &ids);
    each_marked_once(&workers, ids.len());
    let item = store.work_item(&held.id).await.unwrap().unwrap();
    assert_eq!(
        (item.state, item.token, item.attempts),
        (WorkState::Done, 2, 2)
    );
    let taker = item.worker.clone().unwrap();
    assert_ne!(taker, held.worker.clone().unwrap());
    // The result line names the worker that finished the line, on its second claim.
    let line_id = held.id.rsplit('#').next().unwrap();
    let line = results(batch.path())
        .into_iter()
        .find(|l| l["id"] == line_id)
        .unwrap();
    assert_eq!(line["worker"].as_str(), Some(taker.as_str()), "{line}");
    assert_eq!(line["attempt"], 2, "{line}");
    let taker = workers.iter_mut().find(|w| w.name == taker).unwrap();
    taker.wait_for(&format!("{}: resuming run", held.id)).await;
    drop(store);
    schema.drop_now().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_stopped_past_its_lease_is_fenced_when_it_continues() {
    let fake = FakeLlm::start(script(true)).await.unwrap();
    let schema = Schema::new().await;
    let url = schema.url();
    let mut workers = ready(&fake, &url).await;
    let ids = ["a", "b", "c"];
    let batch = batch_dir(&ids);
    let running = start_batch(batch.path(), &url);
    let store = open(&url).await;
    let (held, index) = one_line_held(&fake, store.as_ref(), batch.path(), &workers, &ids).await;

    // Stop the worker and its line's process (its own process group).
    let line = workers[index]
        .wait_for(&format!("{} runs in process ", held.id))
        .await;
    let line_pid: i32 = line.rsplit(' ').next().unwrap().parse().unwrap();
    let line_pid = rustix::process::Pid::from_raw(line_pid).unwrap();
    let victim_pid = workers[index].pid();
    rustix::process::kill_process(victim_pid, rustix::process::Signal::STOP).unwrap();
    rustix::process::kill_process_group(line_pid, rustix::process::Signal::STOP).unwrap();

    // Its lease lapses; another worker's deadline timer fires and it takes the line over.
    let claimed = format!("claimed {} (token 2", held.id);
    let taker = tokio::time::timeout(GUARD, async {
        loop {
            for (i, worker) in workers.iter_mut().enumerate() {
                if i != index && worker.said().iter().any(|l| l.contains(&claimed)) {
                    return i;
                }
            }
            // Wait for any other worker's next line.
            let others: Vec<usize> = (0..workers.len()).filter(|i| *i != index).collect();
            let (first, second) = workers.split_at_mut(others[1]);
            let (a, b) = (&mut first[others[0]], &mut second[0]);
            tokio::select! {
                Some(line) = a.lines.recv() => a.seen.push(line),
                Some(line) = b.lines.recv() => b.seen.push(line),
            }
        }
    })
    .await
    .expect("guard timeout: nobody took the lapsed line over");

    // Continued: the stale worker learns it lost the lease, and its writes are refused.
    rustix::process::kill_process_group(line_pid, rustix::process::Signal::CONT).unwrap();
    rustix::process::kill_process(victim_pid, rustix::process::Signal::CONT).unwrap();
    let victim = &mut workers[index];
    victim
        .wait_for(&format!("lost the lease of {}", held.id))
        .await;
    victim
        .wait_for(&format!("{}: result refused as fenced", held.id))
        .await;

    let out = finish_batch(running).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_each_completed_once(&results(batch.path()), &ids);
    each_marked_once(&workers, ids.len());
    let item = store.work_item(&held.id).await.unwrap().unwrap();
    assert_eq!((item.state, item.token), (WorkState::Done, 2));
    assert_eq!(item.worker.as_deref(), Some(workers[taker].name.as_str()));
    // Counted: the line's process (SIGTERM on the lost lease: its run's `interrupted` status
    // write) and the worker (the line's result), each refused inside its transaction.
    let said = workers[index].said();
    let refused: Vec<&String> = said.iter().filter(|l| l.contains("is stale")).collect();
    eprintln!("writes refused as fenced after SIGCONT: {refused:#?}");
    let by_line = refused
        .iter()
        .filter(|l| l.starts_with(&format!("[{}]", held.id)));
    assert_eq!(by_line.count(), 1, "{}", said.join("\n"));
    let by_worker = refused
        .iter()
        .filter(|l| l.contains("result refused as fenced"));
    assert_eq!(by_worker.count(), 1, "{}", said.join("\n"));
    assert_eq!(refused.len(), 2, "{}", said.join("\n"));
    // The stale worker serves on and stops cleanly.
    assert_eq!(workers[index].stop().await, Some(0));
    drop(store);
    schema.drop_now().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn workers_need_a_shared_store_and_lines_they_can_run() {
    let dir = batch_dir(&["a"]);
    let out = super::common::muster(dir.path(), &["batch", "tasks.jsonl", "--workers"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--workers needs a store that every worker reaches"),
        "{}",
        stderr(&out)
    );
    let out = super::common::muster(dir.path(), &["worker"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("postgres://"), "{}", stderr(&out));
    let out = super::common::muster(dir.path(), &["worker", "--slots", "0"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));

    // A team line, or one with a workspace of this machine, cannot go to workers yet.
    let schema = Schema::new().await;
    std::fs::create_dir_all(dir.path().join("sub")).unwrap();
    std::fs::write(
        dir.path().join("tasks.jsonl"),
        "{\"id\": \"a\", \"prompt\": \"x\", \"workspace\": \"sub\"}\n",
    )
    .unwrap();
    let out = super::common::muster(
        dir.path(),
        &[
            "--store",
            &schema.url(),
            "batch",
            "tasks.jsonl",
            "--workers",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("a line with a workspace on this machine"),
        "{}",
        stderr(&out)
    );
    let store = open(&schema.url()).await;
    assert!(store.runs().await.unwrap().is_empty());
    drop(store);
    schema.drop_now().await;
}

pub(super) fn git(dir: &Path, args: &[&str]) -> String {
    let output = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .unwrap();
    assert!(output.status.success(), "git {args:?}: {output:?}");
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn repository_lines_are_cloned_by_workers_and_come_back_as_pushed_branches() {
    let fake = FakeLlm::start(script(false)).await.unwrap();
    let schema = Schema::new().await;
    let url = schema.url();
    // A bare repository with one commit on `main`.
    let remote = tempfile::tempdir().unwrap();
    let origin = remote.path().join("origin.git");
    let seed = remote.path().join("seed");
    git(remote.path(), &["init", "--quiet", "--bare", "origin.git"]);
    git(remote.path(), &["init", "--quiet", "-b", "main", "seed"]);
    std::fs::write(seed.join("README.md"), "seeded\n").unwrap();
    git(&seed, &["add", "README.md"]);
    git(&seed, &["commit", "--quiet", "-m", "seed"]);
    git(
        &seed,
        &["push", "--quiet", origin.to_str().unwrap(), "main"],
    );
    let base = git(&origin, &["rev-parse", "main"]);

    let mut workers = ready(&fake, &url).await;
    let batch = super::common::project(&[]);
    let lines: Vec<String> = ["a", "b"]
        .iter()
        .map(|id| {
            json!({"id": id, "prompt": "Mark it.", "repo": origin.to_str().unwrap(), "ref": "main"})
                .to_string()
        })
        .collect();
    std::fs::write(batch.path().join("tasks.jsonl"), lines.join("\n") + "\n").unwrap();

    let out = finish_batch(start_batch(batch.path(), &url)).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let results = results(batch.path());
    assert_eq!(results.len(), 2, "{results:#?}");
    let mut branches = std::collections::HashSet::new();
    for line in &results {
        assert_eq!(line["status"], "completed", "{line}");
        let branch = line["branch"].as_str().unwrap();
        assert!(
            branch.starts_with("muster/") && branch.ends_with("/result"),
            "{line}"
        );
        // The branch in the repository holds the run's change on top of the ref.
        let commit = git(&origin, &["rev-parse", &format!("refs/heads/{branch}")]);
        assert_eq!(line["commit"], commit.as_str(), "{line}");
        assert_eq!(git(&origin, &["rev-parse", &format!("{commit}^")]), base);
        assert_eq!(
            git(&origin, &["show", &format!("{commit}:marker.txt")]),
            "done"
        );
        assert_eq!(
            git(&origin, &["show", &format!("{commit}:README.md")]),
            "seeded"
        );
        branches.insert(branch.to_owned());
    }
    assert_eq!(branches.len(), 2, "one branch per line");
    // The files travelled by git: nothing of the lines is in the batch's directory.
    assert!(!batch.path().join("marker.txt").exists());
    for worker in &mut workers {
        assert_eq!(worker.stop().await, Some(0));
    }

    // A line naming a repository without --workers is refused before anything runs.
    let out = super::common::muster(batch.path(), &["batch", "tasks.jsonl"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("only workers clone"),
        "{}",
        stderr(&out)
    );
    schema.drop_now().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_hands_a_running_line_back_and_another_worker_finishes_it() {
    let fake = FakeLlm::start(script(true)).await.unwrap();
    let schema = Schema::new().await;
    let url = schema.url();
    let mut first = Worker::start(&fake, &url, "w1");
    first.wait_for("ready on").await;
    let ids = ["a"];
    let batch = batch_dir(&ids);
    let running = start_batch(batch.path(), &url);
    tokio::time::timeout(GUARD, fake.gate_reached("held", 1))
        .await
        .expect("guard timeout: the line did not reach its held call");

    assert_eq!(first.stop().await, Some(0), "{}", first.said().join("\n"));
    first.wait_for("handing back 1 item(s)").await;
    let store = open(&url).await;
    let items = store.work_items(&queue_of(batch.path())).await.unwrap();
    assert_eq!(
        items[0].state,
        WorkState::Pending,
        "handed back: {items:#?}"
    );
    let run = store.runs().await.unwrap().pop().unwrap();
    assert_eq!(run.status, muster_mailbox::RunStatus::Interrupted);

    let mut second = Worker::start(&fake, &url, "w2");
    let out = finish_batch(running).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_each_completed_once(&results(batch.path()), &ids);
    second.wait_for(&format!("resuming run {}", run.id)).await;
    each_marked_once(&[first, second], 1);
    let item = store.work_item(&items[0].id).await.unwrap().unwrap();
    assert_eq!(
        (item.state, item.token, item.worker.as_deref()),
        (WorkState::Done, 2, Some("w2"))
    );
    drop(store);
    schema.drop_now().await;
}

/// A TCP proxy to the test server that the test cuts (every connection closed, new ones
/// refused: the server unreachable) and restores on the same port.
struct Proxy {
    port: u16,
    upstream: String,
    accepting: Option<tokio::task::JoinHandle<()>>,
    connections: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Proxy {
    async fn start(upstream: String) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut proxy = Proxy {
            port,
            upstream,
            accepting: None,
            connections: Default::default(),
        };
        proxy.accept(listener);
        proxy
    }

    fn accept(&mut self, listener: tokio::net::TcpListener) {
        let (upstream, connections) = (self.upstream.clone(), self.connections.clone());
        self.accepting = Some(tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let copy = tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                connections.lock().unwrap().push(copy);
            }
        }));
    }

    fn cut(&mut self) {
        if let Some(accepting) = self.accepting.take() {
            accepting.abort();
        }
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }

    async fn restore(&mut self) {
        let listener = tokio::time::timeout(GUARD, async {
            loop {
                match tokio::net::TcpListener::bind(("127.0.0.1", self.port)).await {
                    Ok(listener) => return listener,
                    // The aborted listener's socket closes a moment later.
                    Err(_) => tokio::task::yield_now().await,
                }
            }
        })
        .await
        .expect("guard timeout: the proxy's port stayed taken");
        self.accept(listener);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_rides_out_the_store_being_unreachable_and_its_line_finishes_once() {
    let fake = FakeLlm::start(script(true)).await.unwrap();
    let schema = Schema::new().await;
    let url = schema.url();
    let config: tokio_postgres::Config = url.parse().unwrap();
    let host = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
        other => panic!("the test server must be reached over TCP for this test: {other:?}"),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let mut proxy = Proxy::start(format!("{host}:{port}")).await;
    let proxied = url.replacen(
        &format!("{host}:{port}"),
        &format!("127.0.0.1:{}", proxy.port),
        1,
    );
    assert_ne!(proxied, url, "the URL names {host}:{port}");

    // A lease far longer than the cut: the worker keeps its line through it.
    let dir = worker_dir(&fake);
    let mut worker = {
        let args = [
            "--store",
            &proxied,
            "worker",
            "--name",
            "w1",
            "--lease-ms",
            "30000",
            "--heartbeat-ms",
            "250",
        ];
        let mut child = command(dir.path(), &args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let (sender, lines) = mpsc::unbounded_channel();
        let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Worker {
            name: "w1".into(),
            dir,
            child,
            lines,
            seen: Vec::new(),
        }
    };
    worker.wait_for("ready on").await;
    let ids = ["a", "b"];
    let batch = batch_dir(&ids);
    let running = start_batch(batch.path(), &url);
    tokio::time::timeout(GUARD, fake.gate_reached("held", 1))
        .await
        .expect("guard timeout: no line reached the held call");

    proxy.cut();
    worker.wait_for("the store is unreachable").await;
    proxy.restore().await;
    fake.open_gate("held");

    let out = finish_batch(running).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The held line kept its lease through the cut and got the held answer.
    assert_each_completed_once_with(&results(batch.path()), &ids, 1);
    each_marked_once(std::slice::from_ref(&worker), ids.len());
    assert_eq!(worker.stop().await, Some(0), "{}", worker.said().join("\n"));
    schema.drop_now().await;
}
