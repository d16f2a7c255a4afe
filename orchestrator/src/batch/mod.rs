//! `muster batch FILE.jsonl`: one run per line, in the invoking project's store with its
//! settings, agent definitions and `plans_dir`.
//!
//! - The whole file is checked first ([`file`]): a bad line refuses the file, naming it.
//! - Each line runs as a child process, `muster batch FILE --line ID`, which starts the line's
//!   run as `muster run` would (a team run with `team`, or with `muster.team.toml` at the root)
//!   or continues it as `muster resume` would, and records the line in the run's
//!   `batch_line_id` (`{file key}#{id}`, see [`line_id`]). A child per line keeps runs apart
//!   (one process, one run, one lock) and lets the batch stop any of them; a child whose batch
//!   dies sees its stdin close and exits at once, leaving its run interrupted, not orphaned.
//! - Lines that resolve to the same workspace run one at a time, in file order; up to
//!   `--concurrency` lines (so distinct workspaces) run at once ([`Schedule`]).
//! - A re-run of the file skips lines whose run finished (completed, failed, budget) and
//!   resumes the others (interrupted, or stopped awaiting a decision).
//! - One result line per task ([`results`]), durable as each task ends; the exit code is the
//!   worst of the runs' ([`results::severity`]).
//! - With `--output text|json|stream-json`, stdout carries each run in that format
//!   ([`output`]); the result lines then go to `--out` only. Without it, stdout carries the
//!   result lines unless `--out` takes them.

pub mod file;
pub mod output;
pub mod results;
pub mod workers;

use std::collections::{HashSet, VecDeque};
use std::ffi::OsString;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use muster_mailbox::{MailboxStore, RunRecord};
use serde_json::Value;

use crate::exit::{Exit, ExitError};
use crate::launch::{ResumeFlags, RunFlags};
use crate::loading::project_root;
use crate::project::Globals;
use crate::project::Project;
use file::{BatchFile, BatchLine};
use output::BatchOutput;
use results::{ResultLine, Results};

/// What `muster batch` was asked to do.
#[derive(Debug, Clone)]
pub struct BatchOptions {
    pub file: PathBuf,
    pub concurrency: usize,
    pub out: Option<PathBuf>,
    /// `--output`: what stdout carries for each run (`None`: the result lines).
    pub output: Option<crate::launch::OutputFormat>,
    /// `--workers`: the lines go to `muster worker` processes through the store.
    pub workers: bool,
}

pub(crate) fn usage(message: impl Into<String>) -> anyhow::Error {
    ExitError::new(Exit::Usage, message).into()
}

/// What a line needs, from what the store holds for it.
#[derive(Debug, Clone)]
pub(crate) enum LinePlan {
    /// A run of the line finished: report it, run nothing.
    Finished(Box<RunRecord>),
    /// No run yet.
    Start,
    /// Continue this run (interrupted, or stopped awaiting a decision).
    Resume(String),
}

/// The runs of `project` (and runs from before project ids): a store several projects share
/// may hold another project's batch file of the same name, whose lines must not pass for these.
fn this_projects_runs(project: &Project, runs: Vec<RunRecord>) -> Vec<RunRecord> {
    let id = project.existing_project_id();
    runs.into_iter()
        .filter(|run| match &id {
            Some(id) => run.in_project(id),
            None => run.project_id.is_none(),
        })
        .collect()
}

pub(crate) fn plan_for(key: &str, runs: &[RunRecord]) -> LinePlan {
    let mut mine: Vec<&RunRecord> = runs
        .iter()
        .filter(|run| run.batch_line_id.as_deref() == Some(key))
        .collect();
    mine.sort_by_key(|run| (run.created_at, run.id.clone()));
    if let Some(done) = mine.iter().rev().find(|run| run.status.is_finished()) {
        return LinePlan::Finished(Box::new((*done).clone()));
    }
    match mine.last() {
        Some(run) => LinePlan::Resume(run.id.clone()),
        None => LinePlan::Start,
    }
}

/// `muster batch FILE [--concurrency N] [--out FILE]`.
pub fn run(global: &Globals, options: BatchOptions) -> anyhow::Result<Exit> {
    if options.concurrency == 0 {
        return Err(usage("--concurrency must be at least 1"));
    }
    let project = Project::locate(global)?;
    let batch = file::load(&options.file, project.root.path())
        .map_err(|e| ExitError::new(Exit::Usage, e.to_string()))?;
    let stdout = BatchOutput::new(options.output);
    let results = Results::open(options.out.as_deref(), options.output.is_none()).map_err(|e| {
        let out = options.out.as_deref().unwrap_or(Path::new("-"));
        ExitError::new(
            Exit::Usage,
            format!("--out {}: cannot open it for appending: {e}", out.display()),
        )
    })?;
    if options.workers {
        return workers::run(&project, &batch, &results, &stdout);
    }
    if let Some(line) = batch.lines.iter().find(|line| line.repo.is_some()) {
        return Err(usage(format!(
            "{}: line {} ({:?}) names a \"repo\", which only workers clone; run the file \
             with --workers",
            batch.path.display(),
            line.number,
            line.id
        )));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let store = runtime.block_on(project.open_store())?;
    let runs = this_projects_runs(&project, runtime.block_on(store.runs())?);
    let progress = Progress::new(batch.lines.len(), project.process.stderr_is_terminal);

    // Finished lines first, in file order; the rest wait for their workspace.
    let mut pending: VecDeque<(BatchLine, LinePlan)> = VecDeque::new();
    for line in &batch.lines {
        match plan_for(&batch.line_key(&line.id), &runs) {
            LinePlan::Finished(record) => {
                report_finished(&results, &stdout, &line.id, &record)?;
                progress.finished(&line.id);
            }
            plan => pending.push_back((line.clone(), plan)),
        }
    }

    let context = LineContext {
        project: &project,
        exe: std::env::current_exe()?,
        global_args: child_global_args(global, &project)?,
        batch: &batch,
        runs_dir: project.runs_dir(),
        store,
        runtime: runtime.handle().clone(),
        results: &results,
        stdout: &stdout,
        progress: &progress,
    };
    let workspaces: HashSet<&PathBuf> = pending.iter().map(|(line, _)| &line.workspace).collect();
    let workers = options.concurrency.min(workspaces.len());
    let schedule = Schedule {
        state: Mutex::new(ScheduleState {
            pending,
            busy: HashSet::new(),
            stopped: false,
        }),
        changed: Condvar::new(),
    };
    let failure: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                while let Some((line, plan)) = schedule.next() {
                    let outcome = context.execute(&line, plan);
                    let failed = outcome.is_err();
                    if let Err(error) = outcome
                        && let Ok(mut failure) = failure.lock()
                    {
                        failure.get_or_insert(error);
                    }
                    schedule.done(&line.workspace, failed);
                }
            });
        }
    });
    progress.done();
    if let Some(error) = failure.into_inner().ok().flatten() {
        return Err(error);
    }
    Ok(Exit::from_code(u64::from(results.worst())))
}

/// Which line starts next: the first pending line, in file order, whose workspace no running
/// line holds. Lines of one workspace so start in file order, one at a time, and with
/// `--concurrency 1` the whole file runs in file order.
struct Schedule {
    state: Mutex<ScheduleState>,
    changed: Condvar,
}

struct ScheduleState {
    pending: VecDeque<(BatchLine, LinePlan)>,
    busy: HashSet<PathBuf>,
    /// A line could not be reported: start nothing more.
    stopped: bool,
}

impl Schedule {
    /// The next line to run (its workspace now busy), waiting while every pending line's
    /// workspace is busy; `None` when nothing is left to start.
    fn next(&self) -> Option<(BatchLine, LinePlan)> {
        let mut state = self.state.lock().ok()?;
        loop {
            if state.stopped || state.pending.is_empty() {
                return None;
            }
            let free = state
                .pending
                .iter()
                .position(|(line, _)| !state.busy.contains(&line.workspace));
            if let Some(index) = free {
                let (line, plan) = state.pending.remove(index)?;
                state.busy.insert(line.workspace.clone());
                return Some((line, plan));
            }
            state = self.changed.wait(state).ok()?;
        }
    }

    /// The line on `workspace` ended; `failed` stops the batch.
    fn done(&self, workspace: &Path, failed: bool) {
        if let Ok(mut state) = self.state.lock() {
            state.busy.remove(workspace);
            state.stopped |= failed;
        }
        self.changed.notify_all();
    }
}

/// A finished run's line: counted always (with the exit code written then, when `--out`
/// already has it: the store keeps a failed run's status, not its exact code), written
/// unless `--out` already has it.
fn report_finished(
    results: &Results,
    stdout: &BatchOutput,
    id: &str,
    record: &RunRecord,
) -> anyhow::Result<()> {
    report_line(results, stdout, ResultLine::from_record(id, record))
}

/// A finished line, as [`report_finished`] reports it (a line a worker ran, too).
fn report_line(
    results: &Results,
    stdout: &BatchOutput,
    mut line: ResultLine,
) -> anyhow::Result<()> {
    match results.already_written(&line) {
        Some(code) => {
            line.exit_code = code;
            results.count(&line);
        }
        None => results.write(&line)?,
    }
    stdout.finished(&line, None);
    Ok(())
}

/// The global flags a line's child process gets: the same project, store and log level.
fn child_global_args(global: &Globals, project: &Project) -> anyhow::Result<Vec<OsString>> {
    let mut args: Vec<OsString> = vec!["-C".into(), project.root.path().into()];
    if let Some(store) = &global.store {
        args.push("--store".into());
        args.push(std::path::absolute(store)?.into());
    }
    args.push("--log-level".into());
    args.push(global.log_level.clone().into());
    Ok(args)
}

/// What running one line needs.
struct LineContext<'a> {
    project: &'a Project,
    exe: PathBuf,
    global_args: Vec<OsString>,
    batch: &'a BatchFile,
    runs_dir: PathBuf,
    store: Arc<dyn MailboxStore>,
    runtime: tokio::runtime::Handle,
    results: &'a Results,
    stdout: &'a BatchOutput,
    progress: &'a Progress,
}

impl LineContext<'_> {
    /// Runs or resumes one line and writes its result line. An error here (the result
    /// cannot be written, the store cannot be read) stops the batch.
    fn execute(&self, line: &BatchLine, plan: LinePlan) -> anyhow::Result<()> {
        self.progress.started(&line.id);
        let (result, event) = match plan {
            LinePlan::Finished(record) => {
                report_finished(self.results, self.stdout, &line.id, &record)?;
                self.progress.finished(&line.id);
                return Ok(());
            }
            LinePlan::Start => self.spawn(line, None)?,
            LinePlan::Resume(run_id) => {
                self.wait_until_not_live(line, &run_id)?;
                let record = self.runtime.block_on(self.store.run(&run_id))?;
                match record {
                    Some(record) if record.status.is_finished() => {
                        report_finished(self.results, self.stdout, &line.id, &record)?;
                        self.progress.finished(&line.id);
                        return Ok(());
                    }
                    _ => {
                        tracing::info!("batch line {}: resuming run {run_id}", line.id);
                        self.spawn(line, Some(&run_id))?
                    }
                }
            }
        };
        self.results.write(&result).map_err(|e| {
            ExitError::new(
                Exit::Failed,
                format!("cannot write the result of line {:?}: {e:#}", line.id),
            )
        })?;
        self.stdout.finished(&result, event.as_ref());
        self.progress.finished(&line.id);
        Ok(())
    }

    /// A run still held by another process (a batch killed a moment ago whose child is
    /// exiting, or another batch) is waited for rather than refused.
    fn wait_until_not_live(&self, line: &BatchLine, run_id: &str) -> anyhow::Result<()> {
        if !muster_mailbox::live::is_live(&self.runs_dir, run_id)? {
            return Ok(());
        }
        self.progress.note(&format!(
            "[{}] run {run_id} is live in another process; waiting for it to stop",
            line.id
        ));
        let path = muster_mailbox::live::lock_path(&self.runs_dir, run_id);
        let lock = std::fs::File::options()
            .read(true)
            .write(true)
            .open(&path)?;
        lock.lock()?;
        lock.unlock()?;
        Ok(())
    }

    /// The line's child process: its stream-json events on stdout (the last one,
    /// `run_finished`, is the result), its stderr forwarded with the line's id. Gives back the
    /// result line and the child's `run_finished` event, when it printed one.
    fn spawn(
        &self,
        line: &BatchLine,
        resume: Option<&str>,
    ) -> anyhow::Result<(ResultLine, Option<Value>)> {
        let mut command = Command::new(&self.exe);
        command
            .args(&self.global_args)
            .arg("batch")
            .arg(&self.batch.path)
            .arg("--line")
            .arg(&line.id);
        if let Some(run_id) = resume {
            command.arg("--resume-run").arg(run_id);
        }
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => {
                let result = ResultLine::without_event(
                    &line.id,
                    None,
                    Exit::Failed.code(),
                    format!("cannot start {}: {e}", self.exe.display()),
                );
                return Ok((result, None));
            }
        };
        // Held until the child has exited: if this process dies, the child's stdin closes.
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let (finished, tail) = std::thread::scope(|scope| {
            let forward = scope.spawn(|| self.forward_stderr(&line.id, stderr));
            let finished = self.read_events(&line.id, resume.is_some(), stdout);
            (finished, forward.join().unwrap_or_default())
        });
        let status = child.wait()?;
        drop(stdin);
        let code = status
            .code()
            .and_then(|code| u8::try_from(code).ok())
            .unwrap_or(Exit::Interrupted.code());
        let key = self.batch.line_key(&line.id);
        if let Some(event) = finished {
            let result = ResultLine::from_event(&line.id, &event, code);
            self.check_recorded(&line.id, &key, result.run_id.as_deref());
            return Ok((result, Some(event)));
        }
        let runs = this_projects_runs(self.project, self.runtime.block_on(self.store.runs())?);
        let record = runs
            .into_iter()
            .filter(|run| run.batch_line_id.as_deref() == Some(key.as_str()))
            .max_by_key(|run| (run.created_at, run.id.clone()));
        let result = match record {
            Some(record) if record.status.is_finished() => {
                ResultLine::from_record(&line.id, &record)
            }
            record => ResultLine::without_event(&line.id, record.as_ref(), code, tail),
        };
        Ok((result, None))
    }

    /// Says so when the line's run did not record its batch line (a kind of run that does
    /// not read [`line_id`] yet): a re-run of the file cannot skip or resume it.
    fn check_recorded(&self, id: &str, key: &str, run_id: Option<&str>) {
        let Some(run_id) = run_id else { return };
        if let Ok(Some(record)) = self.runtime.block_on(self.store.run(run_id))
            && record.batch_line_id.as_deref() != Some(key)
        {
            tracing::warn!(
                "batch line {id}: run {run_id} does not record its batch line; \
                 a re-run of this file will start the line again"
            );
        }
    }

    /// Reads the child's events until its stdout closes; returns `run_finished`.
    fn read_events(
        &self,
        id: &str,
        resumed: bool,
        stdout: Option<std::process::ChildStdout>,
    ) -> Option<Value> {
        let stdout = stdout?;
        let mut finished = None;
        let mut announced = resumed;
        for text in BufReader::new(stdout).lines() {
            let Ok(text) = text else { break };
            let Ok(event) = serde_json::from_str::<Value>(&text) else {
                continue;
            };
            self.stdout.event(id, &event);
            match event["type"].as_str() {
                Some("agent_started") if !announced => {
                    if let Some(run_id) = event["run_id"].as_str() {
                        tracing::info!("batch line {id}: run {run_id} started");
                        self.progress.running(id, run_id);
                        announced = true;
                    }
                }
                Some("run_finished") => finished = Some(event),
                _ => {}
            }
        }
        finished
    }

    /// Forwards the child's stderr line by line as `[id] …`; returns what the child said
    /// last (its error, when it ended without a result).
    fn forward_stderr(&self, id: &str, stderr: Option<std::process::ChildStderr>) -> String {
        let Some(stderr) = stderr else {
            return String::new();
        };
        let mut last_error = None;
        let mut last_line = None;
        for text in BufReader::new(stderr).lines() {
            let Ok(text) = text else { break };
            if text.trim().is_empty() {
                continue;
            }
            self.progress.note(&format!("[{id}] {text}"));
            if let Some(error) = text.strip_prefix("muster: ") {
                last_error = Some(error.to_owned());
            }
            last_line = Some(text);
        }
        last_error
            .or(last_line)
            .unwrap_or_else(|| "the line's process ended without a result".into())
    }
}

/// The child process of one batch line: `muster batch FILE --line ID [--resume-run RUN]`.
pub fn run_line(
    global: &Globals,
    path: &Path,
    id: &str,
    resume: Option<&str>,
) -> anyhow::Result<Exit> {
    let root = project_root(global)?;
    let batch =
        file::load(path, root.path()).map_err(|e| ExitError::new(Exit::Usage, e.to_string()))?;
    let line = batch
        .line(id)
        .ok_or_else(|| usage(format!("the batch file has no line with id {id:?}")))?;
    exit_when_the_batch_dies(&global.process);
    // The line's run, as a typed request (no argv round trip through clap): its stream-json
    // events on stdout are what the batch reads.
    let output = crate::launch::OutputFormat::StreamJson { partial: false };
    match resume {
        Some(run_id) => crate::lifecycle::resume(
            global,
            ResumeFlags {
                run: Some(run_id.to_owned()),
                output,
                ..ResumeFlags::default()
            },
        ),
        None => crate::lifecycle::run(
            global,
            RunFlags {
                prompt: line.prompt.clone(),
                team: line.team.clone(),
                workspace: Some(line.workspace.clone()),
                output,
                batch_line_id: Some(batch.line_key(id)),
                ..RunFlags::default()
            },
        ),
    }
}

/// The batch holds the write end of this process's stdin: when it closes (the batch exited
/// or was killed), the line's run stops as if killed, to be resumed by the next batch.
pub(crate) fn exit_when_the_batch_dies(process: &crate::process::ProcessGiven) {
    if process.stdin_is_terminal {
        return;
    }
    std::thread::spawn(|| {
        let mut stdin = std::io::stdin();
        let mut buffer = [0u8; 64];
        loop {
            match stdin.read(&mut buffer) {
                Ok(0) | Err(_) => {
                    // Exiting here skips every destructor: stop the MCP servers' groups.
                    muster_agents::mcp::kill_server_groups();
                    std::process::exit(i32::from(Exit::Interrupted.code()))
                }
                Ok(_) => {}
            }
        }
    });
}

/// The progress bar on stderr when it is a terminal; nothing otherwise.
struct Progress {
    bar: ProgressBar,
    visible: bool,
    running: Mutex<Vec<(String, Option<String>)>>,
}

impl Progress {
    /// `visible`: stderr is a terminal.
    fn new(len: usize, visible: bool) -> Progress {
        let bar = if visible {
            let bar = ProgressBar::with_draw_target(Some(len as u64), ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template("{bar:30} {pos}/{len} {wide_msg}") {
                bar.set_style(style);
            }
            bar
        } else {
            ProgressBar::hidden()
        };
        Progress {
            bar,
            visible,
            running: Mutex::new(Vec::new()),
        }
    }

    /// A line for stderr, above the bar when there is one.
    fn note(&self, text: &str) {
        if self.visible {
            self.bar.println(text);
        } else {
            let _ = writeln!(std::io::stderr().lock(), "{text}");
        }
    }

    fn started(&self, id: &str) {
        if let Ok(mut running) = self.running.lock() {
            running.push((id.to_owned(), None));
        }
        self.refresh();
    }

    fn running(&self, id: &str, run_id: &str) {
        if let Ok(mut running) = self.running.lock()
            && let Some(entry) = running.iter_mut().find(|(line, _)| line == id)
        {
            entry.1 = Some(run_id.to_owned());
        }
        self.refresh();
    }

    fn finished(&self, id: &str) {
        if let Ok(mut running) = self.running.lock() {
            running.retain(|(line, _)| line != id);
        }
        self.refresh();
        self.bar.inc(1);
    }

    fn refresh(&self) {
        if !self.visible {
            return;
        }
        let Ok(running) = self.running.lock() else {
            return;
        };
        let names: Vec<String> = running
            .iter()
            .map(|(id, run)| match run {
                Some(run) => format!("{id} ({run})"),
                None => id.clone(),
            })
            .collect();
        self.bar.set_message(if names.is_empty() {
            String::new()
        } else {
            format!("running: {}", names.join(", "))
        });
    }

    fn done(&self) {
        self.bar.finish_and_clear();
    }
}
