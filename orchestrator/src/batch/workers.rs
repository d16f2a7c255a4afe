//! `muster batch FILE --workers`: the lines go to `muster worker` processes through the
//! store instead of this process's children. Each line is one work item (id
//! `{queue}#{line id}`, queue `batch:{project id}:{file key}`, so two projects or two files
//! sharing a server never mix); this process enqueues them (an item already stored is kept,
//! so a re-run after a crash neither repeats nor loses a line), then sleeps until the store
//! announces a change and writes the result line of each item that finished, once.

use std::collections::HashSet;

use muster_mailbox::{NewWorkItem, WorkState};

use super::file::BatchFile;
use super::output::BatchOutput;
use super::results::{ResultLine, Results};
use crate::exit::{Exit, ExitError};
use crate::project::Project;
use crate::worker::line::LinePayload;

/// The queue a batch file's lines go to.
pub(crate) fn queue_of(project_id: &str, batch: &BatchFile) -> String {
    format!("batch:{project_id}:{}", batch.key)
}

/// Lines a worker cannot run yet: a team, or a workspace of this machine (files travel by
/// git: a line names `repo` and `ref`, or runs in an empty directory).
fn check_lines(batch: &BatchFile, project: &Project) -> anyhow::Result<()> {
    let root = std::fs::canonicalize(project.root.path())
        .unwrap_or_else(|_| project.root.path().to_path_buf());
    for line in &batch.lines {
        let problem = if line.team.is_some() {
            Some("a team line")
        } else if line.workspace != root {
            Some("a line with a workspace on this machine")
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(ExitError::new(
                Exit::Usage,
                format!(
                    "{}: line {} ({:?}) is {problem}, which cannot run on workers yet; run \
                     the file without --workers",
                    batch.path.display(),
                    line.number,
                    line.id
                ),
            )
            .into());
        }
    }
    Ok(())
}

/// Enqueues the file's lines and writes their results as workers finish them.
pub(crate) fn run(
    project: &Project,
    batch: &BatchFile,
    results: &Results,
    stdout: &BatchOutput,
) -> anyhow::Result<Exit> {
    crate::worker::require_shared_store(project, "--workers")?;
    check_lines(batch, project)?;
    let queue = queue_of(&project.project_id()?, batch);
    let items: Vec<NewWorkItem> = batch
        .lines
        .iter()
        .map(|line| {
            // The runs record the item's id as their batch line: it names the project too,
            // so another project's batch file of the same name never passes for this one.
            let payload = LinePayload {
                key: format!("{queue}#{}", line.id),
                id: line.id.clone(),
                prompt: line.prompt.clone(),
                repo: line.repo.as_ref().map(|repo| repo.url.clone()),
                git_ref: line.repo.as_ref().map(|repo| repo.git_ref.clone()),
            };
            Ok(NewWorkItem {
                id: format!("{queue}#{}", line.id),
                queue: queue.clone(),
                payload: serde_json::to_value(payload)?,
            })
        })
        .collect::<anyhow::Result<_>>()?;
    let runtime = crate::lifecycle::tokio_runtime()?;
    runtime.block_on(async {
        let store = project.open_store().await?;
        // Watch first: a line that finishes between the enqueue and the wait still wakes it.
        let watch = store.watch_work().await?;
        let ids: HashSet<String> = items.iter().map(|item| item.id.clone()).collect();
        store.enqueue_work(items).await?;
        eprintln!(
            "muster batch: {} line(s) queued on {} for workers",
            ids.len(),
            project.store_location()
        );
        let mut reported: HashSet<String> = HashSet::new();
        loop {
            for item in store.work_items(&queue).await? {
                if !ids.contains(&item.id)
                    || item.state != WorkState::Done
                    || reported.contains(&item.id)
                {
                    continue;
                }
                let Some(value) = item.result.clone() else {
                    continue;
                };
                let line: ResultLine = serde_json::from_value(value)?;
                super::report_line(results, stdout, line)?;
                reported.insert(item.id);
            }
            if reported.len() == ids.len() {
                return Ok(Exit::from_code(u64::from(results.worst())));
            }
            watch.changed().await?;
        }
    })
}
