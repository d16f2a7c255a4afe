//! What the inspection commands share: opening the store, choosing a run, printing JSON.

use std::sync::Arc;

use muster_mailbox::{MailboxStore, RunRecord, RunStatus, live};

use crate::exit::{Exit, ExitError};
use crate::project::Globals;
use crate::project::Project;

/// The store of the project the command runs in. Reading commands never create a store: with
/// none yet, they say so (exit 2).
pub fn open(global: &Globals) -> anyhow::Result<(Project, Arc<dyn MailboxStore>)> {
    let project = Project::locate(global)?;
    // A server store's pool connects on the runtime that asks; this one ends here, and the
    // pool replaces its closed connections on the command's own runtime.
    let opened = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(project.open_existing_store())?;
    let store = opened.ok_or_else(|| {
        ExitError::new(
            Exit::Usage,
            format!(
                "no store at {} yet: start a run with `muster run -p …` (or point --store at one)",
                project.store_location()
            ),
        )
    })?;
    Ok((project, store))
}

/// The run named by `--run`, else the newest run (of `scope`'s project when given).
pub async fn select_run(
    store: &dyn MailboxStore,
    run: Option<&str>,
    scope: Option<&str>,
) -> anyhow::Result<RunRecord> {
    match run {
        Some(id) => store.run(id).await?.ok_or_else(|| {
            ExitError::new(
                Exit::Usage,
                format!("no run {id:?} in this store (see `muster runs`)"),
            )
            .into()
        }),
        None => {
            let runs = store.runs().await?;
            runs.into_iter()
                .filter(|r| scope.is_none_or(|p| r.in_project(p)))
                .max_by_key(|r| (r.created_at, r.id.clone()))
                .ok_or_else(|| {
                    ExitError::new(
                        Exit::Usage,
                        "no runs in this store yet (start one with `muster run -p …`)",
                    )
                    .into()
                })
        }
    }
}

/// A run marked running whose lock is free is not live: it was interrupted.
pub fn effective_status(project: &Project, run: &RunRecord) -> RunStatus {
    let live = live::is_live(&project.runs_dir(), &run.id).unwrap_or(false);
    if run.status == RunStatus::Running && !live {
        RunStatus::Interrupted
    } else {
        run.status
    }
}

/// Prints `value` as pretty JSON on stdout.
pub fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// Prints `rows` as a table under `headers`, or that the project's store has no `things` yet.
pub fn print_listing(project: &Project, things: &str, headers: &[&str], rows: &[Vec<String>]) {
    if rows.is_empty() {
        println!("No {things} in {} yet.", project.store_location());
    } else {
        println!("{}", crate::display::table(headers, rows));
    }
}

/// A runtime for one command.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}
