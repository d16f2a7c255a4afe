//! `muster runs`: the runs with their status.

use serde_json::json;

use crate::cli::inspect::{effective_status, open, print_json, print_listing, runtime};
use crate::display::time;
use crate::exit::Exit;
use crate::project::Globals;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only this run.
    #[arg(long)]
    pub run: Option<String>,
    /// Every project's runs in the store, not only this one's.
    #[arg(long = "all-projects")]
    pub all_projects: bool,
    /// Print the runs as a JSON array.
    #[arg(long)]
    pub json: bool,
}

/// `budget` of a run's row: the run-wide limits and what every process of the run spent.
fn budget_json(
    ledger: &muster_mailbox::RunLedger,
    in_flight: &[muster_mailbox::ledger::LedgerReservation],
) -> serde_json::Value {
    use muster_agents::budget::{Spend, SpendLimits};
    let in_flight: Vec<_> = in_flight
        .iter()
        .map(|r| {
            json!({"agent": r.agent, "epoch": r.epoch, "since": r.created_at,
                   "reserved": Spend::from_ledger(&r.estimate)})
        })
        .collect();
    let mut budget = json!({"limits": SpendLimits::from_ledger(&ledger.limits),
                            "spent": Spend::from_ledger(&ledger.spent)});
    // Only when something is in flight: a run's row reads as it always did otherwise.
    if !in_flight.is_empty() {
        budget["in_flight"] = json!(in_flight);
    }
    budget
}

pub fn execute(global: &Globals, args: Args) -> anyhow::Result<Exit> {
    let (project, store) = open(global)?;
    let rt = runtime()?;
    let mut runs = rt.block_on(store.runs())?;
    if let Some(scope) = crate::project::project_scope(&project, args.all_projects) {
        runs.retain(|run| run.in_project(&scope));
    }
    if let Some(only) = &args.run {
        runs.retain(|run| &run.id == only);
    }
    if args.json {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let mut rows = Vec::with_capacity(runs.len());
        for run in &runs {
            let status = effective_status(&project, run);
            let live = status == muster_mailbox::RunStatus::Running;
            let (total, agents) = rt.block_on(crate::agent_activity::run_waits(
                store.as_ref(),
                &run.id,
                live,
                now,
            ))?;
            let mut row = json!({"run": run, "effective_status": status.as_str(),
                "waits": {"total": total, "agents": agents}});
            // The run's ledger in the store (every process's spend), when it has one.
            if let Some(ledger) = rt.block_on(store.run_ledger(&run.id))? {
                let in_flight = rt.block_on(store.ledger_reservations(&run.id))?;
                row["budget"] = budget_json(&ledger, &in_flight);
            }
            rows.push(row);
        }
        print_json(&rows)?;
        return Ok(Exit::Success);
    }
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|run| {
            vec![
                run.id.clone(),
                run.slug.clone(),
                effective_status(&project, run).as_str().to_owned(),
                run.team.clone().unwrap_or_else(|| "-".into()),
                time(run.created_at),
                time(run.updated_at),
                run.workspace.clone(),
            ]
        })
        .collect();
    let headers = [
        "RUN",
        "SLUG",
        "STATUS",
        "TEAM",
        "CREATED",
        "UPDATED",
        "WORKSPACE",
    ];
    print_listing(&project, "runs", &headers, &rows);
    Ok(Exit::Success)
}
