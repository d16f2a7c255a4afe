//! `muster prune`: deletes settled history of finished runs, never a decision.

use muster_mailbox::MailboxStore;

use crate::cli::inspect::{open, print_json, runtime};
use crate::exit::{Exit, ExitError};
use crate::project::Globals;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only history older than this many days (at least 1).
    #[arg(long = "older-than")]
    pub older_than: u32,
    /// Every project's finished runs in the store, not only this one's.
    #[arg(long = "all-projects")]
    pub all_projects: bool,
    /// Print what was deleted as JSON.
    #[arg(long)]
    pub json: bool,
}

const DAY_MS: i64 = 24 * 60 * 60 * 1000;

pub fn execute(global: &Globals, args: Args) -> anyhow::Result<Exit> {
    if args.older_than == 0 {
        return Err(ExitError::new(
            Exit::Usage,
            "--older-than 0 would prune history written a moment ago; give at least 1 day",
        )
        .into());
    }
    let (project, store) = open(global)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let cutoff = now - i64::from(args.older_than) * DAY_MS;
    let runtime = runtime()?;
    let scope = crate::project::project_scope(&project, args.all_projects);
    let report = runtime.block_on(store.prune(cutoff, scope.as_deref()))?;
    let branches = runtime.block_on(delete_branches(
        store.as_ref(),
        &report.runs_pruned,
        &project.root.muster_dir(),
    ))?;
    if args.json {
        let mut value = serde_json::to_value(&report)?;
        value["git_refs_deleted"] = serde_json::json!(branches);
        print_json(&value)?;
        return Ok(Exit::Success);
    }
    if branches > 0 {
        println!("Deleted {branches} git ref(s) and the worktrees of the pruned runs.");
    }
    println!(
        "Deleted {} settled message(s) older than {} day(s) from {} finished run(s); kept {} request(s) and response(s).",
        report.messages_deleted,
        args.older_than,
        report.runs_pruned.len(),
        report.decisions_kept
    );
    for (run, status) in &report.runs_skipped {
        println!(
            "Left run {run} alone: it is {} (only finished runs are pruned).",
            status.as_str()
        );
    }
    Ok(Exit::Success)
}

/// The branches, base refs and worktrees of pruned runs whose repository is here; a run whose
/// workspace is gone or not a repository has none to delete.
async fn delete_branches(
    store: &dyn MailboxStore,
    runs: &[String],
    muster_dir: &std::path::Path,
) -> anyhow::Result<usize> {
    let mut deleted = 0;
    for run_id in runs {
        let Some(run) = store.run(run_id).await? else {
            continue;
        };
        let workspace = std::path::PathBuf::from(&run.workspace);
        if !workspace.is_dir() {
            continue;
        }
        let chosen = crate::worktree::choose(
            Some(muster_config::Isolation::Worktree),
            &workspace,
            muster_dir,
            &run.slug,
        )
        .await;
        if let Ok(crate::worktree::Chosen::Worktrees(worktrees)) = chosen {
            match worktrees.delete_run().await {
                Ok(count) => deleted += count,
                Err(error) => println!("Left the branches of run {run_id}: {error}"),
            }
        }
    }
    Ok(deleted)
}
