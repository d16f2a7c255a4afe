//! Interruptions of a run: SIGINT (Ctrl-C) or SIGTERM. [`Interrupts::install`] takes over both
//! signals for the process; a run's future is raced against [`Interrupts::first`]. When the
//! signal wins, the run's agents are dropped (their Bash process groups killed with them), the
//! run is marked `interrupted` for `muster resume`, and muster exits 130. A second signal ends
//! the process at once, whatever it is doing (also while a finished run cleans up).

use tokio::sync::watch;

use crate::exit::Exit;

/// The signals received so far, with the first one's name.
pub struct Interrupts {
    received: watch::Receiver<Option<&'static str>>,
}

impl Interrupts {
    /// Installs the handlers (inside a tokio runtime). Where they cannot be installed, the
    /// default action (the process ends) stays, and [`Interrupts::first`] never resolves.
    pub fn install() -> Interrupts {
        let (sender, received) = watch::channel(None);
        tokio::spawn(async move {
            let Some(mut signals) = Signals::new() else {
                return;
            };
            let first = signals.next().await;
            sender.send_replace(Some(first));
            signals.next().await;
            // Exiting here skips every destructor: stop the MCP servers' process groups.
            muster_agents::mcp::kill_server_groups();
            std::process::exit(i32::from(Exit::Interrupted.code()));
        });
        Interrupts { received }
    }

    /// Resolves with the signal's name once the first one arrived.
    pub async fn first(&mut self) -> &'static str {
        match self.received.wait_for(Option::is_some).await {
            Ok(name) => name.unwrap_or("a signal"),
            // The listener is gone (it could not install its handlers): never interrupted.
            Err(_) => std::future::pending().await,
        }
    }
}

/// Resolves at the first Ctrl-C (for `muster serve`, which is no run: SIGTERM keeps its
/// default action there).
pub async fn ctrl_c() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// What a run stopped by `signal` says: how to continue it.
pub fn interrupted_text(signal: &str, run_id: &str) -> String {
    format!("muster: the run was interrupted ({signal}); `muster resume {run_id}` continues it")
}

#[cfg(unix)]
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl Signals {
    fn new() -> Option<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Some(Signals {
            interrupt: signal(SignalKind::interrupt()).ok()?,
            terminate: signal(SignalKind::terminate()).ok()?,
        })
    }

    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.terminate.recv() => "SIGTERM",
        }
    }
}

#[cfg(not(unix))]
struct Signals;

#[cfg(not(unix))]
impl Signals {
    fn new() -> Option<Signals> {
        Some(Signals)
    }

    async fn next(&mut self) -> &'static str {
        match tokio::signal::ctrl_c().await {
            Ok(()) => "Ctrl-C",
            Err(_) => std::future::pending().await,
        }
    }
}
