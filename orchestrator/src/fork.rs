//! Copying a run under a new id and slug, with its plan files, so the two runs continue
//! independently and never overwrite each other's plans (`muster fork`, and `muster claude
//! --fork-session`).

use std::path::{Path, PathBuf};

use muster_agents::runtime::PlanFiles;
use muster_mailbox::{MailboxStore, live};

use crate::exit::{Exit, ExitError};
use crate::project::Project;

/// A run copied by [`fork_run`].
pub(crate) struct Forked {
    pub source: String,
    pub source_slug: String,
    pub id: String,
    pub slug: String,
    /// How many plan files were copied.
    pub copied: usize,
}

/// Copies run `run` under a new id and slug, with its plan files (`muster fork`, and
/// `--fork-session` of `muster claude`).
pub(crate) fn fork_run(
    project: &Project,
    store: &dyn MailboxStore,
    runtime: &tokio::runtime::Runtime,
    run: &str,
) -> anyhow::Result<Forked> {
    let source = runtime.block_on(store.run(run))?.ok_or_else(|| {
        ExitError::new(
            Exit::Usage,
            format!("no run {run:?} in this store (see `muster runs`)"),
        )
    })?;
    if runtime.block_on(live::is_live_anywhere(
        store,
        &project.runs_dir(),
        &source.id,
    ))? {
        eprintln!(
            "muster: run {} is live: the fork copies it as it stands now",
            source.id
        );
    }
    let mut rng = fastrand::Rng::new();
    let plans_dir = project.plans_dir();
    let fork = PlanFiles::reserve(plans_dir, &mut rng)?;
    let new_id = crate::ids::new_run_id(&mut rng);
    let copied = match copy_plan_files(plans_dir, &source.slug, fork.slug()) {
        Ok(copied) => copied,
        Err(error) => {
            let _ = std::fs::remove_file(fork.main_file());
            return Err(error.into());
        }
    };
    if let Err(error) = runtime.block_on(store.fork_run(&source.id, &new_id, fork.slug())) {
        for file in copied.iter().chain([&fork.main_file()]) {
            let _ = std::fs::remove_file(file);
        }
        return Err(error.into());
    }
    Ok(Forked {
        source: source.id,
        source_slug: source.slug,
        id: new_id,
        slug: fork.slug().to_owned(),
        copied: copied.len(),
    })
}

/// Copies `{old}.md` and `{old}-agent-{id}.md` to the same names under the new slug; gives back
/// the files written.
fn copy_plan_files(dir: &Path, old: &str, new: &str) -> std::io::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(written),
        Err(error) => return Err(error),
    };
    for entry in entries {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let renamed = if name == format!("{old}.md") {
            format!("{new}.md")
        } else if let Some(rest) = name.strip_prefix(&format!("{old}-agent-")) {
            format!("{new}-agent-{rest}")
        } else {
            continue;
        };
        let target = dir.join(renamed);
        std::fs::copy(&path, &target)?;
        written.push(target);
    }
    Ok(written)
}
