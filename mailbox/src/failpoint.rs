//! Named kill points for crash tests (DESIGN, "Wave 2 → Tests, CI and failpoints"): with the
//! cargo feature `failpoints`, [`hit`] stops the process with SIGKILL when the environment
//! variable `MUSTER_FAILPOINT` names the point (`name`, or `name@N` for its N-th hit in this
//! process), with `:stop` after it (`name@N:stop`) to stop the process with SIGSTOP there
//! instead, so a test can act while it is frozen at that point and then let it go on with
//! SIGCONT. Code marks a point with [`failpoint!`](crate::failpoint!), which expands to
//! nothing without the feature: a default build has no kill point, and no setting or flag can
//! add one.
//!
//! The points sit right after a commit the test wants to cut behind (a claim, a teammate's
//! end of turn, a coordination tool's effect before its result is recorded); a crash test
//! kills there, resumes, and checks that the run reaches the end an uncut run reaches.

/// The environment variable naming the point to kill at.
pub const VARIABLE: &str = "MUSTER_FAILPOINT";

#[cfg(feature = "failpoints")]
mod armed {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// The point and which of its hits kills, read once from the environment (test builds
    /// only: the one read of the process environment outside `main`).
    struct Target {
        name: String,
        nth: u64,
        hits: AtomicU64,
        stop: bool,
    }

    fn target() -> Option<&'static Target> {
        static TARGET: OnceLock<Option<Target>> = OnceLock::new();
        TARGET
            .get_or_init(|| {
                let spec = std::env::var(super::VARIABLE).ok()?;
                let (spec, stop) = match spec.strip_suffix(":stop") {
                    Some(spec) => (spec.to_owned(), true),
                    None => (spec, false),
                };
                let (name, nth) = match spec.split_once('@') {
                    Some((name, nth)) => (name.to_owned(), nth.parse().ok()?),
                    None => (spec, 1),
                };
                Some(Target {
                    name,
                    nth,
                    hits: AtomicU64::new(0),
                    stop,
                })
            })
            .as_ref()
    }

    pub fn hit(name: &str) {
        let Some(target) = target() else {
            return;
        };
        if target.name != name || target.hits.fetch_add(1, Ordering::SeqCst) + 1 != target.nth {
            return;
        }
        if target.stop {
            eprintln!("muster: failpoint {name}@{}: SIGSTOP", target.nth);
            // Returns once a SIGCONT lets the process go on.
            let _ = rustix::process::kill_process(
                rustix::process::getpid(),
                rustix::process::Signal::STOP,
            );
            return;
        }
        eprintln!("muster: failpoint {name}@{}: SIGKILL", target.nth);
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
        // SIGKILL cannot be caught; this only waits for it to land.
        loop {
            std::thread::park();
        }
    }
}

/// Kills the process here when `MUSTER_FAILPOINT` names this point.
#[cfg(feature = "failpoints")]
pub fn hit(name: &str) {
    armed::hit(name);
}

/// A kill point named by a `format!` string: `failpoint!("effect:{}", tool)`. It expands to
/// nothing unless the calling crate's `failpoints` feature is on (muster-agents' and muster's
/// turn on this crate's).
#[macro_export]
macro_rules! failpoint {
    ($($name:tt)+) => {{
        #[cfg(feature = "failpoints")]
        $crate::failpoint::hit(&format!($($name)+));
    }};
}
