//! `muster interrupt RUN`: `interrupt_turn` on a live run from another terminal.

use crate::exit::Exit;
use crate::project::Globals;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The live run whose running turn to end.
    pub run: String,
}

pub fn execute(global: &Globals, args: Args) -> anyhow::Result<Exit> {
    crate::lifecycle::interrupt(global, &args.run)
}
