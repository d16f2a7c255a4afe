//! The attempts a killed process started and never committed, as its run log shows them: an
//! agent whose last state was `thinking` with no `model_turn` after it had a model request
//! under way; a call whose `calling_tool` state has no `tool_call` after it (and that was not
//! waiting on a decision) was running. A `run_finished` line means the process ended on its
//! own: nothing before it was cut.

use std::collections::{BTreeMap, HashMap};
use std::time::SystemTime;

use muster_agents::runtime::RunEvent;
use muster_protocol::AgentState;

/// What the killed process left open, read line by line from its run log.
#[derive(Debug, Default)]
pub(super) struct CutAttempts {
    /// Per agent: when its model request began (its `thinking` state).
    pub chats: BTreeMap<String, SystemTime>,
    /// Per (agent, `tool_use_id`): when the call began, and its tool.
    pub tools: BTreeMap<(String, String), (SystemTime, String)>,
    /// Per agent: the model and provider of its last logged response (the cut request most
    /// likely went to the same), and its turn.
    pub models: HashMap<String, (String, Option<String>, u64)>,
    /// Per agent: the call it handles now (a wait for a decision is about that one).
    calling: HashMap<String, String>,
    /// The time of the last line read: the killed process was alive until then.
    pub last_seen: Option<SystemTime>,
}

impl CutAttempts {
    /// Takes one logged event, logged at `at`.
    pub fn see(&mut self, event: &RunEvent, at: SystemTime) {
        self.last_seen = Some(self.last_seen.map_or(at, |last| last.max(at)));
        match event {
            RunEvent::AgentState { agent, state } => self.state(agent, state, at),
            RunEvent::ModelTurn {
                agent,
                model,
                provider,
                turn,
                ..
            } => {
                self.chats.remove(agent);
                self.models
                    .insert(agent.clone(), (model.clone(), provider.clone(), *turn));
            }
            RunEvent::ToolCall {
                agent, tool_use_id, ..
            } => {
                self.tools.remove(&(agent.clone(), tool_use_id.clone()));
            }
            RunEvent::RunFinished { .. } => {
                self.chats.clear();
                self.tools.clear();
                self.calling.clear();
            }
            _ => {}
        }
    }

    fn state(&mut self, agent: &str, state: &AgentState, at: SystemTime) {
        if !matches!(state, AgentState::Thinking) {
            self.chats.remove(agent);
        }
        match state {
            AgentState::Thinking => {
                self.chats.entry(agent.to_owned()).or_insert(at);
            }
            AgentState::CallingTool { tool_use_id, tool } => {
                self.tools
                    .entry((agent.to_owned(), tool_use_id.clone()))
                    .or_insert((at, tool.clone()));
                self.calling.insert(agent.to_owned(), tool_use_id.clone());
            }
            // Waiting for a decision is not running: a resume waits again.
            AgentState::WaitingOnDecision { .. } => {
                if let Some(call) = self.calling.remove(agent) {
                    self.tools.remove(&(agent.to_owned(), call));
                }
            }
            // Its turn's end was committed: none of its calls is open.
            AgentState::Idle => {
                self.calling.remove(agent);
                self.tools.retain(|(owner, _), _| owner != agent);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn state(agent: &str, state: AgentState) -> RunEvent {
        RunEvent::AgentState {
            agent: agent.into(),
            state,
        }
    }

    fn calling(agent: &str, id: &str) -> RunEvent {
        state(
            agent,
            AgentState::CallingTool {
                tool_use_id: id.into(),
                tool: "Bash".into(),
            },
        )
    }

    fn turn(agent: &str) -> RunEvent {
        RunEvent::ModelTurn {
            agent: agent.into(),
            turn: 1,
            model: "m".into(),
            provider: Some("anthropic".into()),
            mode: "default".into(),
            stop_reason: "tool_use".into(),
            text: String::new(),
            latency_ms: 1.0,
            usage: Default::default(),
            cost_usd: None,
        }
    }

    fn call(agent: &str, id: &str) -> RunEvent {
        RunEvent::ToolCall {
            agent: agent.into(),
            tool_use_id: id.into(),
            tool: "Bash".into(),
            decision: "allow".into(),
            reason: String::new(),
            is_error: false,
            input: serde_json::Value::Null,
            content: String::new(),
            diff: None,
            sandbox: None,
        }
    }

    fn finished() -> RunEvent {
        RunEvent::RunFinished {
            agent: "main".into(),
            status: "awaiting_decision".into(),
            exit_code: 5,
            result: Default::default(),
        }
    }

    /// (what, the log's events, the agents with a cut model request, the cut calls)
    #[test]
    fn what_a_killed_process_left_open_is_read_from_its_log() {
        let thinking = || state("a", AgentState::Thinking);
        let waiting = || {
            state(
                "a",
                AgentState::WaitingOnDecision {
                    request_id: "perm-a-1".into(),
                },
            )
        };
        type Row = (
            &'static str,
            Vec<RunEvent>,
            Vec<&'static str>,
            Vec<&'static str>,
        );
        let rows: Vec<Row> = vec![
            ("a request under way", vec![thinking()], vec!["a"], vec![]),
            (
                "a request answered",
                vec![thinking(), turn("a")],
                vec![],
                vec![],
            ),
            (
                "a call running",
                vec![thinking(), turn("a"), calling("a", "t1")],
                vec![],
                vec!["t1"],
            ),
            (
                "a call done, the next request under way",
                vec![
                    thinking(),
                    turn("a"),
                    calling("a", "t1"),
                    call("a", "t1"),
                    thinking(),
                ],
                vec!["a"],
                vec![],
            ),
            (
                "a call waiting on a decision",
                vec![calling("a", "t1"), waiting()],
                vec![],
                vec![],
            ),
            (
                "two calls, one done",
                vec![calling("a", "t1"), calling("a", "t2"), call("a", "t1")],
                vec![],
                vec!["t2"],
            ),
            (
                "the turn ended",
                vec![calling("a", "t1"), state("a", AgentState::Idle)],
                vec![],
                vec![],
            ),
            (
                "the process ended on its own",
                vec![thinking(), calling("b", "t3"), finished()],
                vec![],
                vec![],
            ),
            (
                "another agent's answer closes nothing of a's",
                vec![thinking(), turn("b")],
                vec!["a"],
                vec![],
            ),
        ];
        for (what, events, chats, tools) in rows {
            let mut cut = CutAttempts::default();
            for (n, event) in events.iter().enumerate() {
                cut.see(event, UNIX_EPOCH + Duration::from_secs(n as u64));
            }
            assert_eq!(cut.chats.keys().collect::<Vec<_>>(), chats, "{what}");
            assert_eq!(
                cut.tools.keys().map(|(_, id)| id).collect::<Vec<_>>(),
                tools,
                "{what}"
            );
        }
    }
}
