//! A restarted worker's orphans: process groups of `Bash` calls that its earlier
//! incarnation's lines left running when it died (a line's process exits when its worker
//! dies, but a command's own process group does not go with it). The store records each
//! group of a worker's line with the host and boot it runs on, under the worker holding the
//! item (`MailboxStore::record_tool_start`); a worker starting under that name finds the
//! ones of this host and boot, and SIGKILLs each group whose call has no result yet and
//! that still exists. It holds no item yet, so none of them is its own.

use std::sync::Arc;

use muster_mailbox::ProcessGroupRecord;

use super::Shared;

/// Kills the orphans of earlier incarnations of this worker on this machine (see the module
/// documentation); a store error is reported and leaves the rest for the next start.
pub(super) async fn kill_orphans(shared: &Arc<Shared>) {
    let name = &shared.info.name;
    if let Some(pid) = live_namesake(shared).await {
        eprintln!(
            "muster worker {name}: another worker named {name} seems to run on this host \
             (process {pid}); leaving the process groups of its lines alone"
        );
        return;
    }
    let machine = muster_agents::machine::this_machine();
    let groups = match shared
        .store
        .worker_process_groups(name, &machine.host, &machine.boot_id)
        .await
    {
        Ok(groups) => groups,
        Err(error) => {
            eprintln!(
                "muster worker {name}: could not read the process groups of earlier lines: \
                 {error}; orphans of an earlier run of this worker stay until it starts again"
            );
            return;
        }
    };
    for group in groups {
        if let Err(error) = settle(shared, &group).await {
            eprintln!(
                "muster worker {name}: could not check process group {} of run {}: {error:#}",
                group.pgid, group.run_id
            );
        }
    }
}

/// Kills one recorded group if it is an orphan, and forgets it either way.
async fn settle(shared: &Arc<Shared>, group: &ProcessGroupRecord) -> anyhow::Result<()> {
    let store = shared.store.as_ref();
    let unfinished =
        muster_agents::runtime::unfinished_calls(store, &group.run_id, &group.agent).await?;
    let pgid = i32::try_from(group.pgid).ok();
    if unfinished.contains_key(&group.tool_use_id)
        && let Some(pgid) = pgid
        && muster_agents::machine::group_exists(pgid)
        && muster_agents::machine::kill_group(pgid)
    {
        eprintln!(
            "muster worker {}: killed orphan process group {pgid} (run {}, agent {}, item {} \
             under token {}), left running by an earlier run of this worker",
            shared.info.name, group.run_id, group.agent, group.item, group.token
        );
    }
    store
        .forget_process_group(&group.run_id, &group.agent, &group.tool_use_id)
        .await?;
    Ok(())
}

/// A worker of this name that the store says is running on this host in another process
/// that is still there: two processes under one name, whose groups are not orphans.
async fn live_namesake(shared: &Arc<Shared>) -> Option<i64> {
    let workers = shared.store.workers().await.ok()?;
    let namesake = workers.into_iter().find(|w| w.name == shared.info.name)?;
    let alive = namesake.stopped_at.is_none()
        && namesake.host == shared.info.host
        && namesake.pid != shared.info.pid
        && is_muster(namesake.pid);
    alive.then_some(namesake.pid)
}

/// Whether process `pid` exists and runs a `muster` executable.
fn is_muster(pid: i64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .is_ok_and(|comm| comm.trim_end().starts_with("muster"))
}
