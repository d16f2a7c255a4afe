//! `muster serve [--port P] [--open]`: the web inbox over this project's store.

use std::io::Write as _;

use crate::cli::inspect::open;
use crate::exit::Exit;
use crate::project::Globals;
use crate::serve::{ServeProject, Server};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The port on 127.0.0.1 (default: any free port; the printed URL names it).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Open the URL in the default browser (xdg-open).
    #[arg(long)]
    pub open: bool,
}

pub fn execute(global: &Globals, args: Args) -> anyhow::Result<Exit> {
    let (project, store) = open(global)?;
    let served = ServeProject {
        store,
        // The once-a-second fallback reads an SQLite file's data_version; a PostgreSQL
        // store announces every commit on its change channel instead.
        store_path: match project.store_location() {
            muster_config::store_url::StoreLocation::File(path) => Some(path.clone()),
            muster_config::store_url::StoreLocation::Postgres(_) => None,
        },
        muster_dir: project.root.muster_dir(),
        runs_dir: project.runs_dir(),
        models: project.settings.models.clone(),
        plan_provider: project.settings.plan.provider.value,
        act_provider: project.settings.act.provider.value,
        project_id: project.existing_project_id().unwrap_or_default(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let server = Server::bind(served, args.port).await?;
        let url = server.url()?;
        // The URL is stdout's only line (tests and scripts read it, and may close the pipe
        // then: nothing more is written there); the token in it works once, for one browser.
        // The hint is for a person, on stderr, and a closed stderr does not stop the server.
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{url}")?;
        stdout.flush()?;
        drop(stdout);
        let _ = writeln!(
            std::io::stderr(),
            "muster serve: open the URL above (it signs one browser in, once); Ctrl-C stops."
        );
        if args.open {
            open_browser(&url);
        }
        server.run(crate::lifecycle::signals::ctrl_c()).await
    })?;
    Ok(Exit::Success)
}

fn open_browser(url: &str) {
    match std::process::Command::new("xdg-open")
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        Ok(_) => {}
        Err(error) => {
            let _ = writeln!(
                std::io::stderr(),
                "muster serve: could not open a browser ({error}); open the URL yourself"
            );
        }
    }
}
