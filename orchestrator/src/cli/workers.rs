//! `muster workers`: the workers a store knows, with their items and last heartbeat.

use serde_json::json;

use crate::cli::inspect::{open, print_json, print_listing, runtime};
use crate::display::time;
use crate::exit::Exit;
use crate::project::Globals;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print the workers as a JSON array.
    #[arg(long)]
    pub json: bool,
}

pub fn execute(global: &Globals, args: Args) -> anyhow::Result<Exit> {
    let (project, store) = open(global)?;
    let workers = runtime()?.block_on(store.workers())?;
    if args.json {
        let rows: Vec<_> = workers
            .iter()
            .map(|w| {
                json!({
                    "name": w.name, "host": w.host, "slots": w.slots, "pid": w.pid,
                    "items": w.items, "started_at": w.started_at,
                    "last_heartbeat": w.last_heartbeat, "stopped_at": w.stopped_at,
                })
            })
            .collect();
        print_json(&rows)?;
        return Ok(Exit::Success);
    }
    let rows: Vec<Vec<String>> = workers
        .iter()
        .map(|w| {
            vec![
                w.name.clone(),
                w.host.clone(),
                w.slots.to_string(),
                if w.items.is_empty() {
                    "-".into()
                } else {
                    w.items.join(", ")
                },
                time(w.last_heartbeat),
                match w.stopped_at {
                    Some(at) => format!("stopped {}", time(at)),
                    None => "running".into(),
                },
            ]
        })
        .collect();
    let headers = ["NAME", "HOST", "SLOTS", "ITEMS", "LAST HEARTBEAT", "STATE"];
    print_listing(&project, "workers", &headers, &rows);
    Ok(Exit::Success)
}
