//! Workers' robustness, as real processes on the test PostgreSQL server: a worker restarted
//! after SIGKILL kills the orphan process group its earlier run left behind; a worker that
//! claims its own lapsed item again never runs the line twice at once; a repository that
//! cannot be cloned fails its line with the clone's error; a full repo cache hands the line
//! back to another worker; a store without muster's schema stops the worker with exit 4.

use std::path::Path;

use muster_fake_llm::{Block, FakeLlm, ScriptEntry};
use muster_mailbox::WorkState;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, BufReader};

use super::common::{GUARD, stderr};
use super::store_pg::Schema;
use super::worker_procs::{Worker, worker_dir};
use super::workers_cli::{
    batch_dir, finish_batch, git, open, queue_of, results, script, start_batch,
};

/// This machine as process groups are recorded with: host name and boot id.
fn machine() -> (String, String) {
    let read = |path: &str| std::fs::read_to_string(path).unwrap().trim().to_owned();
    (
        read("/proc/sys/kernel/hostname"),
        read("/proc/sys/kernel/random/boot_id"),
    )
}

/// Whether process `pid` has ended (gone, or a zombie nobody reaped yet).
fn ended(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

/// Waits (on a pidfd, poll's own timeout as the guard) until process `pid` ends.
async fn wait_ended(pid: i32) {
    let Ok(fd) = rustix::process::pidfd_open(
        rustix::process::Pid::from_raw(pid).unwrap(),
        rustix::process::PidfdFlags::empty(),
    ) else {
        return; // already gone
    };
    let polled = tokio::task::spawn_blocking(move || {
        let mut fds = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::IN,
        )];
        let guard = rustix::event::Timespec {
            tv_sec: GUARD.as_secs() as i64,
            tv_nsec: 0,
        };
        rustix::event::poll(&mut fds, Some(&guard)).unwrap()
    })
    .await
    .unwrap();
    assert_eq!(polled, 1, "guard timeout: process {pid} did not end");
}

/// Kills a process group when dropped: a failing test leaves no blocked command behind.
struct GroupGuard(i32);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.0) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

/// A worker's directory whose Bash runs outside the sandbox (the test's FIFOs lie outside
/// the workspace).
fn unsandboxed_worker_dir(fake: &muster_fake_llm::FakeLlmHandle) -> tempfile::TempDir {
    let dir = worker_dir(fake);
    let settings = dir.path().join(".muster/settings.toml");
    let mut text = std::fs::read_to_string(&settings).unwrap();
    text.push_str("[sandbox]\nmode = \"off\"\n");
    std::fs::write(settings, text).unwrap();
    super::common::trust_blocking(dir.path());
    dir
}

/// The content of the tool result the model was sent for `tool_use_id`, if any.
fn tool_result_sent(fake: &muster_fake_llm::FakeLlmHandle, tool_use_id: &str) -> Option<String> {
    fake.requests().iter().find_map(|request| {
        request.body["messages"]
            .as_array()?
            .iter()
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .find(|block| block["type"] == "tool_result" && block["tool_use_id"] == tool_use_id)
            .map(|block| match &block["content"] {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            })
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_worker_kills_the_orphan_its_earlier_run_left_and_the_line_completes_once() {
    let fifos = tempfile::tempdir().unwrap();
    let (ready, hold) = (
        fifos.path().join("ready.fifo"),
        fifos.path().join("hold.fifo"),
    );
    for fifo in [&ready, &hold] {
        let made = std::process::Command::new("mkfifo")
            .arg(fifo)
            .status()
            .unwrap();
        assert!(made.success());
    }
    // The command says its process group, then blocks on a FIFO nobody writes: it runs
    // until killed (the guard below kills it if the test fails).
    let command = format!("echo $$ > {}; exec cat {}", ready.display(), hold.display());
    let fake = FakeLlm::start(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![Block::tool_use("Bash", json!({"command": command}))],
        ),
        ScriptEntry::reply("main", 2, vec![Block::text("finished")]),
    ])
    .await
    .unwrap();
    let schema = Schema::new().await;
    let url = schema.url();
    let mut first = Worker::start_in(unsandboxed_worker_dir(&fake), &url, "w1", &[]);
    first.wait_for("ready on").await;
    let batch = batch_dir(&["a"]);
    let running = start_batch(batch.path(), &url);

    let reader = tokio::net::unix::pipe::OpenOptions::new()
        .read_write(true)
        .open_receiver(&ready)
        .unwrap();
    let group = tokio::time::timeout(GUARD, BufReader::new(reader).lines().next_line())
        .await
        .expect("guard timeout: the Bash command never ran")
        .unwrap()
        .unwrap();
    let group: i32 = group.trim().parse().unwrap();
    let _guard = GroupGuard(group);

    // The store holds the group with this machine and the line's item, token and worker.
    let store = open(&url).await;
    let (host, boot_id) = machine();
    let recorded = store
        .worker_process_groups("w1", &host, &boot_id)
        .await
        .unwrap();
    assert_eq!(recorded.len(), 1, "{recorded:#?}");
    assert_eq!(
        (
            recorded[0].pgid,
            recorded[0].token,
            recorded[0].worker.as_str()
        ),
        (i64::from(group), 1, "w1")
    );
    let item_id = recorded[0].item.clone();
    let tool_use_id = recorded[0].tool_use_id.clone();

    // SIGKILL the worker: its line's process follows it (its stdin closes), the command's
    // own process group stays behind.
    let line = first.wait_for(&format!("{item_id} runs in process ")).await;
    let line_pid: i32 = line.rsplit(' ').next().unwrap().parse().unwrap();
    rustix::process::kill_process(first.pid(), rustix::process::Signal::KILL).unwrap();
    first.child.wait().await.unwrap();
    wait_ended(line_pid).await;
    assert!(
        !ended(group),
        "the orphan runs on after its worker and line died"
    );

    // The same name again: it kills the orphan at start, then takes the line over.
    let mut second = Worker::start_in(unsandboxed_worker_dir(&fake), &url, "w1", &[]);
    second
        .wait_for(&format!("killed orphan process group {group} "))
        .await;
    wait_ended(group).await;
    assert!(ended(group));
    let out = finish_batch(running).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lines = results(batch.path());
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert_eq!(
        (
            &lines[0]["status"],
            &lines[0]["result"],
            &lines[0]["worker"]
        ),
        (&json!("completed"), &json!("finished"), &json!("w1")),
        "{lines:#?}"
    );
    assert_eq!(lines[0]["attempt"], 2);
    // The command ran once; its call got the crash's "interrupted" result.
    let first_turns = fake
        .requests()
        .iter()
        .filter(|r| r.agent.as_deref() == Some("main") && r.turn == Some(1))
        .count();
    assert_eq!(first_turns, 1, "the Bash call was not asked for again");
    let sent = tool_result_sent(&fake, &tool_use_id).expect("the call got a result");
    assert!(sent.contains("interrupted by a crash"), "{sent}");
    // Settled: the group is forgotten.
    assert!(
        store
            .worker_process_groups("w1", &host, &boot_id)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(second.stop().await, Some(0), "{}", second.said().join("\n"));
    drop(store);
    schema.drop_now().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_that_claims_its_own_lapsed_line_again_stops_the_earlier_run_first() {
    let fake = FakeLlm::start(script(true)).await.unwrap();
    let schema = Schema::new().await;
    let url = schema.url();
    let flags = vec!["--slots", "2"];
    let mut worker = Worker::start_in(worker_dir(&fake), &url, "w1", &flags);
    worker.wait_for("ready on").await;
    let ids = ["a"];
    let batch = batch_dir(&ids);
    let running = start_batch(batch.path(), &url);
    tokio::time::timeout(GUARD, fake.gate_reached("held", 1))
        .await
        .expect("guard timeout: the line did not reach its held call");
    let store = open(&url).await;
    let item = store.work_items(&queue_of(batch.path())).await.unwrap()[0].clone();
    let line = worker
        .wait_for(&format!("{} runs in process ", item.id))
        .await;
    let earlier: i32 = line.rsplit(' ').next().unwrap().parse().unwrap();

    // Hold the worker's row: its heartbeats wait on the lock, its lease lapses, and its own
    // deadline timer has it claim the line again (a claim does not touch that row).
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let driver = tokio::spawn(connection);
    client
        .batch_execute("BEGIN; SELECT 1 FROM workers WHERE name = 'w1' FOR UPDATE")
        .await
        .unwrap();
    worker
        .wait_for(&format!("claimed {} again (token 2)", item.id))
        .await;
    client.batch_execute("COMMIT").await.unwrap();
    drop(client);
    let _ = driver.await;

    // The new claim's run starts only once the earlier one has ended.
    worker.wait_for(&format!("{}: resuming run", item.id)).await;
    assert!(
        ended(earlier),
        "the earlier line's process {earlier} still ran when the line was resumed"
    );
    let out = finish_batch(running).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lines = results(batch.path());
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert_eq!(
        (
            &lines[0]["status"],
            &lines[0]["result"],
            &lines[0]["attempt"]
        ),
        (&json!("completed"), &json!("finished"), &json!(2)),
        "{lines:#?}"
    );
    let marks = super::workers_cli::markers(&[&worker]);
    assert_eq!(marks.len(), 1, "{marks:#?}");
    assert_eq!(marks[0].1, ["done"], "the side effect ran once");
    let done = store.work_item(&item.id).await.unwrap().unwrap();
    assert_eq!((done.state, done.token), (WorkState::Done, 2));
    assert_eq!(worker.stop().await, Some(0), "{}", worker.said().join("\n"));
    drop(store);
    schema.drop_now().await;
}

/// A bare repository with one commit on `main`, holding `files`.
fn bare_repository(root: &Path, files: &[(&str, &[u8])]) -> std::path::PathBuf {
    let origin = root.join("origin.git");
    let seed = root.join("seed");
    git(root, &["init", "--quiet", "--bare", "origin.git"]);
    git(root, &["init", "--quiet", "-b", "main", "seed"]);
    for (path, content) in files {
        std::fs::write(seed.join(path), content).unwrap();
        git(&seed, &["add", path]);
    }
    git(&seed, &["commit", "--quiet", "-m", "seed"]);
    git(
        &seed,
        &["push", "--quiet", origin.to_str().unwrap(), "main"],
    );
    origin
}

fn repository_batch(repo: &str) -> tempfile::TempDir {
    let batch = super::common::project(&[]);
    let line = json!({"id": "a", "prompt": "Mark it.", "repo": repo, "ref": "main"});
    std::fs::write(batch.path().join("tasks.jsonl"), format!("{line}\n")).unwrap();
    batch
}

#[tokio::test(flavor = "multi_thread")]
async fn a_repository_that_cannot_be_cloned_fails_its_line_with_the_clone_error() {
    let fake = FakeLlm::start(script(false)).await.unwrap();
    let schema = Schema::new().await;
    let url = schema.url();
    let mut worker = Worker::start(&fake, &url, "w1");
    worker.wait_for("ready on").await;
    let missing = tempfile::tempdir().unwrap();
    let repo = missing.path().join("no-such-repo.git");
    let batch = repository_batch(repo.to_str().unwrap());

    let out = finish_batch(start_batch(batch.path(), &url)).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let lines = results(batch.path());
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert_eq!(lines[0]["status"], "error", "{lines:#?}");
    let error = lines[0]["error"].as_str().unwrap();
    assert!(
        error.contains(&format!("cannot clone {}", repo.display())) && error.contains("git"),
        "{error}"
    );
    assert!(!error.contains("could not be pushed"), "{error}");
    assert!(fake.requests().is_empty(), "no run started");
    // Nothing lost: the item is done with that result, after one claim.
    let store = open(&url).await;
    let item = store.work_items(&queue_of(batch.path())).await.unwrap()[0].clone();
    assert_eq!((item.state, item.attempts), (WorkState::Done, 1));
    assert_eq!(worker.stop().await, Some(0), "{}", worker.said().join("\n"));
    drop(store);
    schema.drop_now().await;
}

/// A tmpfs of `size` mounted on a fresh directory, unmounted when dropped.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(
            mounted.status.success(),
            "this test mounts a small tmpfs as the full repo cache and needs root: {}",
            String::from_utf8_lossy(&mounted.stderr)
        );
        Tmpfs(dir)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.0.path())
            .status();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_repo_cache_hands_the_line_back_to_a_worker_with_room() {
    let fake = FakeLlm::start(script(false)).await.unwrap();
    let schema = Schema::new().await;
    let url = schema.url();
    // A repository larger than the cache: 2 MiB that do not compress.
    let mut noise = vec![0_u8; 2 << 20];
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    for byte in &mut noise {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        *byte = state as u8;
    }
    let remote = tempfile::tempdir().unwrap();
    let origin = bare_repository(remote.path(), &[("noise.bin", &noise)]);
    let cache = Tmpfs::mount("256k");
    let cache_dir = cache.0.path().to_str().unwrap().to_owned();
    let flags = vec!["--repo-cache", cache_dir.as_str()];
    let mut full = Worker::start_in(worker_dir(&fake), &url, "full", &flags);
    full.wait_for("ready on").await;
    let batch = repository_batch(origin.to_str().unwrap());
    let running = start_batch(batch.path(), &url);

    let said = full.wait_for("the repo cache is full").await;
    assert!(said.contains("No space left on device"), "{said}");
    full.wait_for("handing it back").await;
    let mut roomy = Worker::start(&fake, &url, "roomy");
    let out = finish_batch(running).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lines = results(batch.path());
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert_eq!(
        (&lines[0]["status"], &lines[0]["worker"]),
        (&json!("completed"), &json!("roomy")),
        "{lines:#?}"
    );
    assert!(lines[0]["attempt"].as_i64().unwrap() >= 2, "{lines:#?}");
    assert_eq!(full.stop().await, Some(0), "{}", full.said().join("\n"));
    assert_eq!(roomy.stop().await, Some(0), "{}", roomy.said().join("\n"));
    drop(cache);
    schema.drop_now().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_on_a_store_without_muster_schema_exits_4_saying_so() {
    let schema = Schema::new().await;
    let url = schema.url();
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let driver = tokio::spawn(connection);
    client
        .batch_execute("CREATE TABLE invoices (id BIGINT PRIMARY KEY)")
        .await
        .unwrap();
    drop(client);
    let _ = driver.await;
    let dir = super::common::project(&[]);
    let out = super::common::muster(dir.path(), &["--store", &url, "worker"]).await;
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let text = stderr(&out);
    assert!(
        text.contains("invoices") && text.contains("muster_schema"),
        "{text}"
    );
    schema.drop_now().await;
}
