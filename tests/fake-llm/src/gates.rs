//! Named gates: a response scripted with `fault.hold = NAME` waits until the test opens gate
//! NAME. Tests use them to keep an agent busy mid-turn for exactly as long as they need (until
//! some other event happened), instead of guessing a delay.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// One gate: whether it is open, and how many requests have reached it so far.
pub(crate) struct Gate {
    open: watch::Sender<bool>,
    reached: watch::Sender<u32>,
}

impl Gate {
    fn new() -> Gate {
        Gate {
            open: watch::Sender::new(false),
            reached: watch::Sender::new(0),
        }
    }

    /// Counts a request at the gate, then waits until it is open.
    pub async fn pass(&self) {
        self.reached.send_modify(|n| *n += 1);
        let mut open = self.open.subscribe();
        // The sender lives in `self`: the wait cannot fail.
        let _ = open.wait_for(|open| *open).await;
    }
}

/// Every gate of a server, created on first use by either side.
#[derive(Default)]
pub(crate) struct Gates {
    gates: Mutex<HashMap<String, Arc<Gate>>>,
}

impl Gates {
    pub fn gate(&self, name: &str) -> Arc<Gate> {
        let mut gates = self.gates.lock().unwrap_or_else(|e| e.into_inner());
        gates
            .entry(name.to_owned())
            .or_insert_with(|| Arc::new(Gate::new()))
            .clone()
    }

    /// Counts a request at the gate, then waits until it is open.
    pub async fn pass(&self, name: &str) {
        self.gate(name).pass().await;
    }

    /// Opens the gate for every request waiting at it and every later one.
    pub fn open(&self, name: &str) {
        self.gate(name).open.send_replace(true);
    }

    /// Waits until `count` requests have reached the gate (waiting or let through).
    pub async fn reached(&self, name: &str, count: u32) {
        let gate = self.gate(name);
        let mut reached = gate.reached.subscribe();
        let _ = reached.wait_for(|n| *n >= count).await;
    }
}
