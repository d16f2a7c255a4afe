//! `--output text`'s live progress on a terminal: one line per busy agent (its name, what it
//! is doing, for how long, and the tokens its current response has streamed so far), redrawn
//! in place on stderr with `indicatif`. Only when stdout is a terminal; never in `json` or
//! `stream-json` output, and never in the run's log (it is display, not a fact).
//!
//! An agent is busy from an event that precedes a model request (it started, mail reached it,
//! a tool call finished) until a response ends its turn; a response with tool calls turns its
//! line to "running tools" until the next response streams. The token count is an estimate
//! (streamed characters ÷ 4, the same rule as compaction's estimate): the exact count comes
//! with the response's usage.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use muster_agents::runtime::RunEvent;
use muster_protocol::DeltaKind;

/// What a busy agent is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// A model request is out: waiting for its first piece, or streaming.
    Model,
    /// The response asked for tools; they run.
    Tools,
}

/// One agent's line, as rendered.
pub fn render_line(agent: &str, phase: Phase, elapsed: Duration, streamed_chars: u64) -> String {
    let doing = match phase {
        Phase::Model if streamed_chars == 0 => "waiting for the model",
        Phase::Model => "streaming",
        Phase::Tools => "running tools",
    };
    let secs = elapsed.as_secs();
    let time = if secs >= 60 {
        format!("{}m{:02}s", secs / 60, secs % 60)
    } else {
        format!("{secs}s")
    };
    format!(
        "[{agent}] {doing} {time} · ~{} tokens",
        streamed_chars.div_ceil(4)
    )
}

struct Busy {
    bar: ProgressBar,
    phase: Phase,
    since: Instant,
    chars: u64,
}

impl Busy {
    fn redraw(&self, agent: &str) {
        self.bar.set_message(render_line(
            agent,
            self.phase,
            self.since.elapsed(),
            self.chars,
        ));
    }
}

struct Lines {
    multi: MultiProgress,
    busy: Mutex<BTreeMap<String, Busy>>,
    stopped: AtomicBool,
}

/// The live lines of one run; dropping it (or [`LiveProgress::clear`]) removes them.
pub struct LiveProgress {
    lines: Arc<Lines>,
}

/// How often elapsed times are redrawn.
const TICK: Duration = Duration::from_millis(250);

impl LiveProgress {
    /// Live lines on stderr when stdout is a terminal (and stderr too: `indicatif` draws
    /// nothing on a stderr that is not one); `None` otherwise.
    pub fn for_terminal(stdout_is_terminal: bool) -> Option<LiveProgress> {
        if !stdout_is_terminal {
            return None;
        }
        let lines = Arc::new(Lines {
            multi: MultiProgress::with_draw_target(ProgressDrawTarget::stderr()),
            busy: Mutex::new(BTreeMap::new()),
            stopped: AtomicBool::new(false),
        });
        spawn_ticker(Arc::downgrade(&lines));
        Some(LiveProgress { lines })
    }

    /// Takes `event` into account.
    pub fn event(&self, event: &RunEvent) {
        let Ok(mut busy) = self.lines.busy.lock() else {
            return;
        };
        let agent = event.agent().to_owned();
        match event {
            RunEvent::ModelDelta { delta, text, .. } => {
                let line = self.line(&mut busy, &agent);
                if line.phase == Phase::Tools {
                    line.phase = Phase::Model;
                    line.since = Instant::now();
                    line.chars = 0;
                }
                if *delta == DeltaKind::Discard {
                    line.chars = 0;
                } else {
                    line.chars = line.chars.saturating_add(text.chars().count() as u64);
                }
                line.redraw(&agent);
            }
            RunEvent::ModelTurn { stop_reason, .. } => match stop_reason.as_str() {
                "tool_use" | "max_tokens" => {
                    let line = self.line(&mut busy, &agent);
                    line.phase = if stop_reason == "tool_use" {
                        Phase::Tools
                    } else {
                        Phase::Model
                    };
                    line.since = Instant::now();
                    line.chars = 0;
                    line.redraw(&agent);
                }
                _ => Self::remove(&mut busy, &agent),
            },
            RunEvent::AgentStarted { .. } | RunEvent::MailDelivered { .. } => {
                let line = self.line(&mut busy, &agent);
                line.redraw(&agent);
            }
            RunEvent::ApprovalRequested { .. } => Self::remove(&mut busy, &agent),
            // Reported by the team's own lines, or shown by the events above.
            RunEvent::ToolStarted { .. }
            | RunEvent::ToolCall { .. }
            | RunEvent::ModeChanged { .. }
            | RunEvent::ApprovalDecided { .. }
            | RunEvent::MailSent { .. }
            | RunEvent::TaskClaimed { .. }
            | RunEvent::TaskCompleted { .. }
            | RunEvent::Verification { .. }
            | RunEvent::MergeApplied { .. }
            | RunEvent::TeammatePlaced { .. }
            | RunEvent::TeammateFinished { .. }
            | RunEvent::AgentState { .. }
            | RunEvent::BudgetWait { .. }
            | RunEvent::RunFinished { .. } => {}
        }
    }

    /// Prints `text` above the live lines (a plain `eprintln!` would be drawn over).
    pub fn println(&self, text: &str) {
        if self.lines.multi.is_hidden() {
            eprintln!("{text}");
        } else {
            let _ = self.lines.multi.println(text);
        }
    }

    /// Runs `f` (a question at the terminal) with the live lines out of the way.
    pub fn suspend<T>(&self, f: impl FnOnce() -> T) -> T {
        self.lines.multi.suspend(f)
    }

    /// Removes every line (before the result is printed).
    pub fn clear(&self) {
        if let Ok(mut busy) = self.lines.busy.lock() {
            for (_, line) in std::mem::take(&mut *busy) {
                line.bar.finish_and_clear();
            }
        }
        let _ = self.lines.multi.clear();
    }

    fn line<'a>(&self, busy: &'a mut BTreeMap<String, Busy>, agent: &str) -> &'a mut Busy {
        busy.entry(agent.to_owned()).or_insert_with(|| {
            let bar = self.lines.multi.add(ProgressBar::new_spinner());
            if let Ok(style) = ProgressStyle::with_template("{spinner} {msg}") {
                bar.set_style(style);
            }
            Busy {
                bar,
                phase: Phase::Model,
                since: Instant::now(),
                chars: 0,
            }
        })
    }

    fn remove(busy: &mut BTreeMap<String, Busy>, agent: &str) {
        if let Some(line) = busy.remove(agent) {
            line.bar.finish_and_clear();
        }
    }
}

impl Drop for LiveProgress {
    fn drop(&mut self) {
        self.lines.stopped.store(true, Ordering::Relaxed);
        self.clear();
    }
}

/// Redraws the elapsed times until the lines are dropped.
fn spawn_ticker(lines: Weak<Lines>) {
    let spawned = std::thread::Builder::new()
        .name("muster-progress".into())
        .spawn(move || {
            loop {
                std::thread::sleep(TICK);
                let Some(lines) = lines.upgrade() else {
                    return;
                };
                if lines.stopped.load(Ordering::Relaxed) {
                    return;
                }
                if let Ok(busy) = lines.busy.lock() {
                    for (agent, line) in busy.iter() {
                        line.bar.tick();
                        line.redraw(agent);
                    }
                }
            }
        });
    if let Err(error) = spawned {
        tracing::debug!(%error, "no live progress ticker");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_names_the_agent_what_it_does_for_how_long_and_its_tokens() {
        let table = [
            (
                Phase::Model,
                Duration::from_secs(3),
                0,
                "[alice] waiting for the model 3s · ~0 tokens",
            ),
            (
                Phase::Model,
                Duration::from_millis(65_400),
                1_361,
                "[alice] streaming 1m05s · ~341 tokens",
            ),
            (
                Phase::Tools,
                Duration::from_secs(7_200),
                0,
                "[alice] running tools 120m00s · ~0 tokens",
            ),
        ];
        for (phase, elapsed, chars, want) in table {
            assert_eq!(render_line("alice", phase, elapsed, chars), want);
        }
    }

    #[test]
    fn events_move_an_agent_between_phases_and_off_the_screen() {
        // Hidden: the state machine runs the same whether or not anything is drawn.
        let progress = LiveProgress {
            lines: Arc::new(Lines {
                multi: MultiProgress::with_draw_target(ProgressDrawTarget::hidden()),
                busy: Mutex::new(BTreeMap::new()),
                stopped: AtomicBool::new(true),
            }),
        };
        let phase = |progress: &LiveProgress| {
            progress
                .lines
                .busy
                .lock()
                .unwrap()
                .get("alice")
                .map(|line| (line.phase, line.chars))
        };
        let delta = |text: &str, delta: DeltaKind| RunEvent::ModelDelta {
            agent: "alice".into(),
            turn: 1,
            attempt: 1,
            delta,
            text: text.into(),
        };
        let turn = |stop: &str| RunEvent::ModelTurn {
            agent: "alice".into(),
            turn: 1,
            model: "m".into(),
            provider: None,
            mode: "default".into(),
            stop_reason: stop.into(),
            text: String::new(),
            latency_ms: 1.0,
            usage: Default::default(),
            cost_usd: None,
        };
        progress.event(&delta("abcd", DeltaKind::Text));
        progress.event(&delta("efgh", DeltaKind::ToolInput));
        assert_eq!(phase(&progress), Some((Phase::Model, 8)));
        progress.event(&delta("failed", DeltaKind::Discard));
        assert_eq!(phase(&progress), Some((Phase::Model, 0)));
        progress.event(&turn("tool_use"));
        assert_eq!(phase(&progress), Some((Phase::Tools, 0)));
        progress.event(&delta("ab", DeltaKind::Text));
        assert_eq!(phase(&progress), Some((Phase::Model, 2)));
        progress.event(&turn("end_turn"));
        assert_eq!(phase(&progress), None, "idle: off the screen");
    }
}
