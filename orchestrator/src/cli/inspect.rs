//! What the inspection commands share: choosing a run, aligned tables, times and kinds in words.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

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

/// Which project's runs a command looks at: this one's (its id, or `""` when it has none yet,
/// which matches only runs from before runs carried a project), or every project's with
/// `--all-projects` (`None`).
pub fn project_scope(project: &Project, all_projects: bool) -> Option<String> {
    if all_projects {
        None
    } else {
        Some(project.existing_project_id().unwrap_or_default())
    }
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

/// `2026-11-30 09:12:03` (UTC).
pub fn time(millis: i64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(millis.max(0) as u64);
    humantime::format_rfc3339_seconds(at)
        .to_string()
        .replace('T', " ")
        .trim_end_matches('Z')
        .to_owned()
}

/// `plan_approval_request` → `plan approval request`.
pub fn in_words(kind: &str) -> String {
    kind.replace('_', " ")
}

/// Cuts `text` to `max` characters on one line; says whether it cut.
pub fn cut(text: &str, max: usize) -> (String, bool) {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= max {
        (one_line, false)
    } else {
        let kept: String = one_line.chars().take(max.saturating_sub(1)).collect();
        (format!("{kept}…"), true)
    }
}

/// Left-aligned columns separated by two spaces; the last column is not padded.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            out.push_str(cell);
            if i < last {
                out.push_str(&" ".repeat(widths[i] - cell.chars().count() + 2));
            }
        }
        out.trim_end().to_owned()
    };
    let mut out = line(headers.to_vec());
    for row in rows {
        out.push('\n');
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// Prints `value` as pretty JSON on stdout.
pub fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// A runtime for one command.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_cuts_say_so() {
        let rendered = table(
            &["ID", "NAME"],
            &[
                vec!["1".into(), "alpha".into()],
                vec!["200".into(), "b".into()],
            ],
        );
        assert_eq!(rendered, "ID   NAME\n1    alpha\n200  b");
        assert_eq!(cut("short", 10), ("short".into(), false));
        assert_eq!(cut("a rather\nlong body", 8), ("a rathe…".into(), true));
        assert_eq!(time(0), "1970-01-01 00:00:00");
        assert_eq!(in_words("plan_approval_request"), "plan approval request");
    }
}
