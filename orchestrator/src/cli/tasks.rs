//! `muster tasks`: the task board with owners and computed blocking.

use crate::cli::inspect::{open, print_json, runtime, select_run};
use crate::display::{cut, table};
use crate::exit::Exit;
use crate::project::Globals;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run (default: the newest).
    #[arg(long)]
    pub run: Option<String>,
    /// Print the tasks as a JSON array.
    #[arg(long)]
    pub json: bool,
}

pub fn execute(global: &Globals, args: Args) -> anyhow::Result<Exit> {
    let (_, store) = open(global)?;
    let (run, tasks) = runtime()?.block_on(async {
        let run = select_run(store.as_ref(), args.run.as_deref(), None).await?;
        let tasks = store.tasks(&run.id).await?;
        anyhow::Ok((run, tasks))
    })?;
    if args.json {
        print_json(&tasks)?;
        return Ok(Exit::Success);
    }
    if tasks.is_empty() {
        println!("Run {} has no tasks.", run.id);
        return Ok(Exit::Success);
    }
    let rows: Vec<Vec<String>> = tasks
        .iter()
        .map(|task| {
            let status = match (&task.blocked_reason, task.blocked_by_open.is_empty()) {
                (Some(reason), _) => format!("{} ({})", task.status.as_str(), cut(reason, 30).0),
                (None, false) if task.status == muster_mailbox::TaskStatus::Pending => {
                    "blocked".into()
                }
                _ => task.status.as_str().to_owned(),
            };
            let blocked_by = if task.blocked_by.is_empty() {
                "-".to_owned()
            } else {
                task.blocked_by
                    .iter()
                    .map(|id| {
                        if task.blocked_by_open.contains(id) {
                            format!("#{id}")
                        } else {
                            format!("#{id}✓")
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            vec![
                format!("#{}", task.task_id),
                status,
                task.owner.clone().unwrap_or_else(|| "-".into()),
                blocked_by,
                cut(&task.subject, 60).0,
            ]
        })
        .collect();
    println!(
        "Tasks of run {}:\n{}",
        run.id,
        table(&["TASK", "STATUS", "OWNER", "WAITS FOR", "SUBJECT"], &rows)
    );
    Ok(Exit::Success)
}
