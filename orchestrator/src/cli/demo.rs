//! `muster demo`: the offline demonstration (for now, of the durable store).

use crate::cli::GlobalArgs;
use crate::exit::Exit;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to run it (default: a new temporary directory, whose path is printed).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
    /// Internal: the demo's child process, owning the store at this path.
    #[arg(long = "store-child", hide = true)]
    pub store_child: Option<std::path::PathBuf>,
}

pub fn execute(_global: &GlobalArgs, args: Args) -> anyhow::Result<Exit> {
    match args.store_child {
        Some(db) => crate::store_demo::child(&db),
        None => crate::store_demo::run(args.dir.as_deref()),
    }
}
