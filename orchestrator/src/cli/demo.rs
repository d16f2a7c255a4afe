//! `muster demo`: the offline demonstration. By default a whole team changes a small project
//! with a scripted model ([`crate::team_demo`]); `--crash` runs the store's crash
//! demonstration instead ([`crate::store_demo`]).

use crate::exit::Exit;
use crate::project::Globals;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to run it: an empty or new directory (default: a new temporary directory, whose
    /// path is printed).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
    /// Run the store's crash demonstration instead: a child process killed with SIGKILL
    /// mid-stream, then a resume that loses and repeats nothing. (`--store` is the global
    /// flag naming a store file.)
    #[arg(long)]
    pub crash: bool,
    /// Internal: the crash demonstration's child process, owning the store at this path.
    #[arg(long = "store-child", hide = true)]
    pub store_child: Option<std::path::PathBuf>,
}

pub fn execute(global: &Globals, args: Args) -> anyhow::Result<Exit> {
    match args.store_child {
        Some(db) => crate::store_demo::child(&db),
        None if args.crash => crate::store_demo::run(args.dir.as_deref()),
        None => {
            let exe = std::env::current_exe()?;
            let path = global.process.var("PATH").map(std::ffi::OsStr::new);
            let muster = crate::team_demo::muster_command(&exe, path);
            crate::team_demo::run(global, args.dir.as_deref(), &muster)
        }
    }
}
