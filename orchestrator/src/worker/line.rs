//! One batch line on a worker: the worker's side (what the store holds for the line, the
//! child process, the result committed under the lease's token) and the child's side (the
//! line's run, started or resumed, in a fenced process).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use muster_mailbox::{StoreError, WorkFence, WorkItem};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, BufReader};

use super::Shared;
use crate::batch::results::ResultLine;
use crate::batch::{LinePlan, plan_for};
use crate::exit::{Exit, ExitError};
use crate::launch::{OutputFormat, ResumeFlags, RunFlags};
use crate::project::{Globals, Project};
use crate::team::placement::TeammateItem;

/// What a batch line's work item carries: enough for a worker on any machine, which has no
/// copy of the batch file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinePayload {
    /// The `batch_line_id` the line's runs record: the work item's id
    /// (`batch:{project id}:{file key}#{id}`), unique in a store several projects share.
    pub key: String,
    pub id: String,
    pub prompt: String,
    /// The repository the worker clones for the line, and the ref it checks out: how the
    /// line's files travel (the changes come back as a branch pushed there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
}

/// How a line task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LineEnd {
    /// Its result is committed.
    Finished,
    /// The store refused its result: another worker holds the item now.
    Fenced,
    /// The worker is stopping; the item goes back to the queue.
    Stopped,
}

/// Runs (or resumes, or only reports) the item's line and commits its result under the
/// item's token.
pub(crate) async fn run_line(shared: &Arc<Shared>, item: &WorkItem) -> anyhow::Result<LineEnd> {
    if let Some(teammate) = TeammateItem::of(item) {
        return run_teammate(shared, item, &teammate).await;
    }
    let fence = item.fence();
    let store = &shared.store;
    let result = match serde_json::from_value::<LinePayload>(item.payload.clone()) {
        Err(error) => Some(ResultLine::without_event(
            &item.id,
            None,
            Exit::Usage.code(),
            format!("the work item's payload is not a batch line: {error}"),
        )),
        Ok(payload) => {
            let runs = store.runs().await?;
            match plan_for(&payload.key, &runs) {
                LinePlan::Finished(record) => Some(ResultLine::from_record(&payload.id, &record)),
                LinePlan::Start => spawn(shared, &fence, &payload, None).await?,
                LinePlan::Resume(run_id) => {
                    // An earlier holder's process may still hold the run (a worker stopped,
                    // not dead): its writes are fenced; wait for it to go.
                    store.wait_until_not_live(&run_id).await?;
                    match store.run(&run_id).await? {
                        Some(record) if record.status.is_finished() => {
                            Some(ResultLine::from_record(&payload.id, &record))
                        }
                        _ => {
                            eprintln!(
                                "muster worker {}: {}: resuming run {run_id}",
                                shared.info.name, item.id
                            );
                            spawn(shared, &fence, &payload, Some(&run_id)).await?
                        }
                    }
                }
            }
        }
    };
    let Some(mut result) = result else {
        return Ok(LineEnd::Stopped);
    };
    // Only a line that got as far as a run has changes to deliver; one whose repository
    // could not be cloned keeps the clone's error.
    if let Ok(payload) = serde_json::from_value::<LinePayload>(item.payload.clone())
        && let Some(repo) = &payload.repo
        && result.run_id.is_some()
    {
        deliver(shared, repo, &mut result).await;
    }
    // Which worker reported the line, and on which claim.
    result
        .rest
        .insert("worker".into(), Value::String(shared.info.name.clone()));
    result
        .rest
        .insert("attempt".into(), Value::from(item.attempts));
    let how = format!("{}, exit {}", result.status, result.exit_code);
    finish(shared, item, &fence, serde_json::to_value(&result)?, how).await
}

/// A teammate placed on workers: its child runs it (started, or resumed from the store and
/// its pushed checkpoint after another worker lost it) until it ends; the item's result says
/// how it ended, under the lease's token.
async fn run_teammate(
    shared: &Arc<Shared>,
    item: &WorkItem,
    teammate: &TeammateItem,
) -> anyhow::Result<LineEnd> {
    let fence = item.fence();
    let Some(end) = run_process(shared, &fence, None).await? else {
        return Ok(LineEnd::Stopped);
    };
    let mut result = serde_json::json!({
        "kind": "teammate",
        "run_id": teammate.run_id,
        "agent": teammate.agent,
        "exit_code": end.code,
        "worker": shared.info.name,
        "attempt": item.attempts,
    });
    if end.code != Exit::Success.code() {
        result["error"] = Value::String(end.tail);
    }
    finish(shared, item, &fence, result, format!("exit {}", end.code)).await
}

/// Commits the item's `result` under its lease's `fence` and says so (`how` it ended); a
/// fenced result (another worker took the item over) is refused and said.
async fn finish(
    shared: &Arc<Shared>,
    item: &WorkItem,
    fence: &muster_mailbox::WorkFence,
    result: Value,
    how: String,
) -> anyhow::Result<LineEnd> {
    match shared.store.finish_work(fence, result).await {
        Ok(_) => {
            eprintln!(
                "muster worker {}: {} finished ({how})",
                shared.info.name, item.id
            );
            Ok(LineEnd::Finished)
        }
        Err(error @ StoreError::Fenced { .. }) => {
            eprintln!(
                "muster worker {}: {}: result refused as fenced: {error}",
                shared.info.name, item.id
            );
            Ok(LineEnd::Fenced)
        }
        Err(error) => Err(error.into()),
    }
}

/// A repository line's changes, back by git: everything its run left in its workspace is
/// committed on top of the checked-out ref and pushed to `refs/heads/muster/<slug>/result`
/// in the line's repository; the result line names the branch and commit. Idempotent: a
/// line delivered once and reported again (a worker died between) pushes the same commit.
/// A failure makes the line's result an error that says what to do.
async fn deliver(shared: &Arc<Shared>, repo: &str, result: &mut ResultLine) {
    let outcome = async {
        let run_id = result
            .run_id
            .clone()
            .ok_or_else(|| anyhow::anyhow!("the line started no run"))?;
        let record = shared
            .store
            .run(&run_id)
            .await?
            .ok_or_else(|| anyhow::anyhow!("run {run_id} is not in the store"))?;
        let git = crate::worktree::git::Git::new(&record.workspace);
        git.run(&["add", "-A"]).await?;
        if !git.test(&["diff", "--cached", "--quiet"]).await? {
            let message = format!("muster batch line {} (run {run_id})", result.id);
            git.run(&["commit", "--quiet", "-m", &message]).await?;
        }
        let commit = git.run(&["rev-parse", "HEAD"]).await?;
        let branch = format!("muster/{}/result", record.slug);
        git.run(&[
            "push",
            "--quiet",
            repo,
            &format!("HEAD:refs/heads/{branch}"),
        ])
        .await?;
        anyhow::Ok((branch, commit))
    }
    .await;
    match outcome {
        Ok((branch, commit)) => {
            result.rest.insert("branch".into(), Value::String(branch));
            result.rest.insert("commit".into(), Value::String(commit));
        }
        Err(error) => {
            result.status = "error".into();
            result.exit_code = Exit::Failed.code();
            result.rest.insert(
                "error".into(),
                Value::String(format!(
                    "the line's changes could not be pushed to {repo}: {error:#}; check that \
                     this worker may push there, then run the batch again"
                )),
            );
        }
    }
}

/// What a line's process says, first thing in its error, when the worker's repo cache has no
/// room for the line: the worker hands the line back instead of failing it (another worker,
/// or this one once it has room, runs it).
pub(crate) const CACHE_FULL: &str = "the repo cache is full";

/// The error of a line handed back because this worker's repo cache is full.
#[derive(Debug)]
pub(crate) struct CacheFull(pub String);

impl std::fmt::Display for CacheFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CacheFull {}

/// Whether `error` comes from a full disk (ENOSPC, as std or as git reports it).
fn is_disk_full(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::StorageFull)
            || cause.to_string().contains("No space left on device")
    })
}

/// The child's error for a workspace that could not be made in `repo_cache`.
fn workspace_error(repo_cache: &Path, error: anyhow::Error) -> ExitError {
    if is_disk_full(&error) {
        return ExitError::new(
            Exit::Failed,
            format!(
                "{CACHE_FULL} ({}): {error:#}; the line goes back to the queue: free space \
                 there or give this worker another --repo-cache",
                repo_cache.display()
            ),
        );
    }
    ExitError::new(Exit::Failed, format!("{error:#}"))
}

/// Clones `repo` into `workspace` (once: a clone there is reused) and checks out `git_ref`
/// detached, so the line's run starts from exactly the files the ref names.
async fn check_out(repo: &str, git_ref: &str, workspace: &Path) -> anyhow::Result<()> {
    let parent = workspace
        .parent()
        .ok_or_else(|| anyhow::anyhow!("{} has no parent", workspace.display()))?;
    if !workspace.join(".git").exists() {
        let partial = parent.join(format!(
            ".clone-{}",
            workspace.file_name().unwrap_or_default().to_string_lossy()
        ));
        let _ = std::fs::remove_dir_all(&partial);
        let partial_text = partial.display().to_string();
        crate::worktree::git::Git::new(parent)
            .run(&["clone", "--quiet", "--no-checkout", repo, &partial_text])
            .await
            .map_err(|e| anyhow::anyhow!("cannot clone {repo}: {e}"))?;
        // A clone cut off half-way is never mistaken for a finished one.
        std::fs::rename(&partial, workspace)?;
    }
    let git = crate::worktree::git::Git::new(workspace);
    git.run(&["fetch", "--quiet", "origin", git_ref])
        .await
        .map_err(|e| anyhow::anyhow!("cannot fetch {git_ref:?} from {repo}: {e}"))?;
    git.run(&["checkout", "--quiet", "--detach", "FETCH_HEAD"])
        .await?;
    Ok(())
}

/// The directory a line's run works in on this worker.
pub(crate) fn line_workspace(workspaces: &Path, item: &str) -> PathBuf {
    let readable: String = item
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .take(60)
        .collect();
    let hash = item.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    workspaces.join(format!("{readable}-{:08x}", hash as u32))
}

/// How an item's child process ended.
struct ChildEnd {
    code: u8,
    /// Its `run_finished` event, when it printed one.
    finished: Option<Value>,
    /// What it said last on stderr (or why it could not start).
    tail: String,
    started: bool,
}

/// The line's child process; `None` when the worker stopped it to hand the item back.
async fn spawn(
    shared: &Arc<Shared>,
    fence: &WorkFence,
    payload: &LinePayload,
    resume: Option<&str>,
) -> anyhow::Result<Option<ResultLine>> {
    let Some(end) = run_process(shared, fence, resume).await? else {
        return Ok(None);
    };
    if !end.started {
        return Ok(Some(ResultLine::without_event(
            &payload.id,
            None,
            end.code,
            end.tail,
        )));
    }
    if let Some(event) = end.finished {
        return Ok(Some(ResultLine::from_event(&payload.id, &event, end.code)));
    }
    let runs = shared.store.runs().await?;
    let record = runs
        .into_iter()
        .filter(|run| run.batch_line_id.as_deref() == Some(payload.key.as_str()))
        .max_by_key(|run| (run.created_at, run.id.clone()));
    if record.is_none() && end.tail.starts_with(CACHE_FULL) {
        return Err(anyhow::Error::new(CacheFull(end.tail)));
    }
    Ok(Some(match record {
        Some(record) if record.status.is_finished() => {
            ResultLine::from_record(&payload.id, &record)
        }
        record => ResultLine::without_event(&payload.id, record.as_ref(), end.code, end.tail),
    }))
}

/// Runs an item's child process (`muster worker --run-item`) to its end; `None` when the
/// worker stopped it to hand the item back.
async fn run_process(
    shared: &Arc<Shared>,
    fence: &WorkFence,
    resume: Option<&str>,
) -> anyhow::Result<Option<ChildEnd>> {
    let exe = std::env::current_exe()?;
    let mut command = tokio::process::Command::new(exe);
    command.arg("-C").arg(shared.project.root.path());
    if let Some(store) = &shared.global.store {
        command.arg("--store").arg(store);
    }
    command
        .arg("--log-level")
        .arg(&shared.global.log_level)
        .arg("worker")
        .arg("--run-item")
        .arg(fence.to_arg())
        .arg("--repo-cache")
        .arg(&shared.workspaces);
    if let Some(run_id) = resume {
        command.arg("--resume-run").arg(run_id);
    }
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            return Ok(Some(ChildEnd {
                code: Exit::Failed.code(),
                finished: None,
                tail: format!("cannot start the item's process: {error}"),
                started: false,
            }));
        }
    };
    shared.set_child(fence, child.id());
    if let Some(pid) = child.id() {
        eprintln!(
            "muster worker {}: {} runs in process {pid}",
            shared.info.name, fence.item
        );
        // A signal that came while it was starting found no child to stop: stop it now.
        if shared.stopping() {
            super::signal_group(pid, rustix::process::Signal::TERM);
        }
    }
    // Held until the child exits: if this worker dies, the child's stdin closes and it stops.
    let stdin = child.stdin.take();
    let events = read_events(child.stdout.take());
    let tail = forward_stderr(&fence.item, child.stderr.take());
    let (finished, tail) = tokio::join!(events, tail);
    let status = child.wait().await?;
    drop(stdin);
    shared.set_child(fence, None);
    let code = status
        .code()
        .and_then(|code| u8::try_from(code).ok())
        .unwrap_or(Exit::Interrupted.code());
    if shared.stopping() && code == Exit::Interrupted.code() {
        return Ok(None);
    }
    Ok(Some(ChildEnd {
        code,
        finished,
        tail,
        started: true,
    }))
}

/// The child's `run_finished` event, when it printed one.
async fn read_events(stdout: Option<tokio::process::ChildStdout>) -> Option<Value> {
    let mut lines = BufReader::new(stdout?).lines();
    let mut finished = None;
    while let Ok(Some(text)) = lines.next_line().await {
        if let Ok(event) = serde_json::from_str::<Value>(&text)
            && event["type"] == "run_finished"
        {
            finished = Some(event);
        }
    }
    finished
}

/// Forwards the child's stderr as `[item] …`; returns what it said last.
async fn forward_stderr(item: &str, stderr: Option<tokio::process::ChildStderr>) -> String {
    let Some(stderr) = stderr else {
        return String::new();
    };
    let mut lines = BufReader::new(stderr).lines();
    let mut last_error = None;
    let mut last_line = None;
    while let Ok(Some(text)) = lines.next_line().await {
        if text.trim().is_empty() {
            continue;
        }
        eprintln!("[{item}] {text}");
        if let Some(error) = text.strip_prefix("muster: ") {
            last_error = Some(error.to_owned());
        }
        last_line = Some(text);
    }
    last_error
        .or(last_line)
        .unwrap_or_else(|| "the line's process ended without a result".into())
}

/// The child: the item's line as a run, in a process whose every store write is fenced by
/// the item's token.
pub(crate) fn run_child(
    global: &Globals,
    fence: &WorkFence,
    repo_cache: &Path,
    resume: Option<&str>,
) -> anyhow::Result<Exit> {
    let project = Project::locate(global)?;
    let item = {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async {
            let store = project.open_store().await?;
            store.work_item(&fence.item).await
        })?
    };
    let item = item.ok_or_else(|| {
        ExitError::new(
            Exit::Usage,
            format!("no work item {:?} in the store", fence.item),
        )
    })?;
    if let Some(teammate) = TeammateItem::of(&item) {
        crate::batch::exit_when_the_batch_dies(&global.process);
        return crate::team::placement::run_on_worker(global, &item, teammate, repo_cache);
    }
    let payload: LinePayload = serde_json::from_value(item.payload).map_err(|e| {
        ExitError::new(
            Exit::Usage,
            format!("work item {:?} is not a batch line: {e}", fence.item),
        )
    })?;
    crate::batch::exit_when_the_batch_dies(&global.process);
    let output = OutputFormat::StreamJson { partial: false };
    match resume {
        Some(run_id) => crate::lifecycle::resume(
            global,
            ResumeFlags {
                run: Some(run_id.to_owned()),
                output,
                ..ResumeFlags::default()
            },
        ),
        None => {
            let workspace = line_workspace(repo_cache, &fence.item);
            match (&payload.repo, &payload.git_ref) {
                (Some(repo), Some(git_ref)) => {
                    std::fs::create_dir_all(repo_cache)?;
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()?
                        .block_on(check_out(repo, git_ref, &workspace))
                        .map_err(|e| workspace_error(repo_cache, e))?;
                }
                _ => std::fs::create_dir_all(&workspace).map_err(|e| {
                    let error = anyhow::Error::new(e).context(format!(
                        "cannot create the workspace {}",
                        workspace.display()
                    ));
                    workspace_error(repo_cache, error)
                })?,
            }
            crate::lifecycle::run(
                global,
                RunFlags {
                    prompt: payload.prompt,
                    workspace: Some(workspace),
                    output,
                    batch_line_id: Some(payload.key),
                    ..RunFlags::default()
                },
            )
        }
    }
}
