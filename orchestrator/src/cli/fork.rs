//! `muster fork`: copy a run under a new id and slug, with its plan files, so the two runs
//! continue independently and never overwrite each other's plans.

use crate::cli::inspect::{open, runtime};
use crate::exit::Exit;
use crate::project::Globals;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run to copy.
    pub run: String,
}

pub fn execute(global: &Globals, args: Args) -> anyhow::Result<Exit> {
    let (project, store) = open(global)?;
    let forked = crate::fork::fork_run(&project, store.as_ref(), &runtime()?, &args.run)?;
    println!(
        "Forked run {} ({}) as {} ({}), with {} plan file(s) copied.",
        forked.source, forked.source_slug, forked.id, forked.slug, forked.copied
    );
    println!(
        "Continue the copy with `muster resume {}`; the original is untouched.",
        forked.id
    );
    Ok(Exit::Success)
}
