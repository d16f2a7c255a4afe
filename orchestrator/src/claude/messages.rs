//! A run's events as Claude Code's headless messages: `assistant` and `user` messages with
//! Anthropic content blocks and usage, `stream_event` partials, and one `result` per prompt
//! whose `subtype` never says `success` when the work was not done. Pure: the session writes
//! what this gives.

use std::collections::HashMap;
use std::time::Instant;

use muster_agents::runtime::RunEvent;
use muster_mailbox::RunStatus;
use muster_protocol::ToolName;
use muster_protocol::event::{DeltaKind, TokenUsage};
use serde_json::{Value, json};

use crate::lifecycle::Ending;

/// The Claude Code version whose headless protocol muster implements (`claude_code_version`
/// in `system`/`init`; docs/claude-compat.md).
pub const CLAUDE_CODE_VERSION: &str = "2.1.326";

/// The agent of a single-agent run whose messages have no parent (a team's is its lead).
#[cfg(test)]
const MAIN: &str = crate::single_run::MAIN_AGENT;

/// Whether a call of `tool` starts a subagent (muster's `Agent`, Claude Code's `Task`): what
/// the subagent does has that call as its parent.
fn spawns_a_subagent(tool: &str) -> bool {
    ToolName::parse(tool) == Some(ToolName::Agent)
}

/// What one prompt did, for its `result`.
#[derive(Debug)]
pub struct PromptStats {
    started: Instant,
    num_turns: u64,
    api_ms: f64,
    usage: TokenUsage,
    cost_usd: f64,
    denials: Vec<Value>,
    stop_reason: Option<String>,
}

impl PromptStats {
    pub fn new() -> PromptStats {
        PromptStats {
            started: Instant::now(),
            num_turns: 0,
            api_ms: 0.0,
            usage: TokenUsage::default(),
            cost_usd: 0.0,
            denials: Vec::new(),
            stop_reason: None,
        }
    }
}

/// Turns one session's events into its messages.
pub struct Translator {
    session_id: String,
    /// The agent whose messages have no parent: the main agent, or a team's lead.
    main: String,
    partial: bool,
    stats: PromptStats,
    /// Each agent's newest message id (the turn a tool call belongs to).
    message_ids: HashMap<String, String>,
    /// Spawning calls under way, oldest first, and the agents already given to one.
    open_spawns: Vec<String>,
    parents: HashMap<String, String>,
}

impl Translator {
    pub fn new(session_id: String, main: &str, partial: bool) -> Translator {
        Translator {
            session_id,
            main: main.to_owned(),
            partial,
            stats: PromptStats::new(),
            message_ids: HashMap::new(),
            open_spawns: Vec::new(),
            parents: HashMap::new(),
        }
    }

    /// `parent_tool_use_id` of `agent`'s messages: `null` for the main agent, else the
    /// spawning call it was started by.
    fn parent(&mut self, agent: &str) -> Value {
        if agent == self.main {
            return Value::Null;
        }
        if let Some(parent) = self.parents.get(agent) {
            return json!(parent);
        }
        let taken: Vec<&String> = self.parents.values().collect();
        let free = self
            .open_spawns
            .iter()
            .find(|id| !taken.contains(id))
            .cloned();
        match free {
            Some(id) => {
                self.parents.insert(agent.to_owned(), id.clone());
                json!(id)
            }
            None => Value::Null,
        }
    }

    fn envelope(&mut self, kind: &str, agent: &str, message: Value) -> Value {
        json!({
            "type": kind,
            "message": message,
            "parent_tool_use_id": self.parent(agent),
            "session_id": self.session_id,
            "uuid": uuid::Uuid::new_v4().to_string(),
        })
    }

    /// The messages `event` becomes (none for what Claude Code does not show).
    pub fn messages_for(&mut self, event: &RunEvent) -> Vec<Value> {
        match event {
            RunEvent::ModelTurn {
                agent,
                turn,
                model,
                stop_reason,
                text,
                latency_ms,
                usage,
                cost_usd,
                ..
            } => {
                self.count_turn(agent, *latency_ms, usage, *cost_usd, stop_reason);
                let id = format!("msg_{}_{agent}_{turn}", self.session_id);
                self.message_ids.insert(agent.clone(), id.clone());
                if text.is_empty() {
                    return Vec::new();
                }
                let message = assistant(
                    &id,
                    model,
                    stop_reason,
                    usage,
                    json!([
                        {"type": "text", "text": text}
                    ]),
                );
                vec![self.envelope("assistant", agent, message)]
            }
            RunEvent::ToolStarted {
                tool, tool_use_id, ..
            } if spawns_a_subagent(tool) => {
                self.open_spawns.push(tool_use_id.clone());
                Vec::new()
            }
            RunEvent::ToolCall {
                agent,
                tool_use_id,
                tool,
                decision,
                is_error,
                input,
                content,
                ..
            } => {
                self.open_spawns.retain(|id| id != tool_use_id);
                // A teammate is a child of the call that spawned it, for its whole life.
                if ToolName::parse(tool) == Some(ToolName::SpawnTeammate)
                    && !is_error
                    && let Some(name) = input["name"].as_str()
                {
                    self.parents.insert(name.to_owned(), tool_use_id.clone());
                }
                if decision == "deny" {
                    self.stats.denials.push(json!({
                        "tool_name": tool,
                        "tool_use_id": tool_use_id,
                        "tool_input": input,
                    }));
                }
                let id = self
                    .message_ids
                    .get(agent)
                    .cloned()
                    .unwrap_or_else(|| format!("msg_{}_{agent}", self.session_id));
                let call = assistant(
                    &id,
                    "",
                    "tool_use",
                    &TokenUsage::default(),
                    json!([
                        {"type": "tool_use", "id": tool_use_id, "name": tool, "input": input}
                    ]),
                );
                let result = json!({"role": "user", "content": [{
                    "type": "tool_result",
                    "tool_use_id": tool_use_id,
                    "content": content,
                    "is_error": is_error,
                }]});
                vec![
                    self.envelope("assistant", agent, call),
                    self.envelope("user", agent, result),
                ]
            }
            RunEvent::ModelDelta {
                agent, delta, text, ..
            } if self.partial => self.stream_event(agent, *delta, text),
            _ => Vec::new(),
        }
    }

    fn count_turn(
        &mut self,
        agent: &str,
        latency_ms: f64,
        usage: &TokenUsage,
        cost_usd: Option<f64>,
        stop_reason: &str,
    ) {
        let stats = &mut self.stats;
        stats.api_ms += latency_ms;
        stats.usage.input_tokens += usage.input_tokens;
        stats.usage.output_tokens += usage.output_tokens;
        stats.usage.cache_read_input_tokens += usage.cache_read_input_tokens;
        stats.usage.cache_creation_input_tokens += usage.cache_creation_input_tokens;
        stats.cost_usd += cost_usd.unwrap_or(0.0);
        if agent == self.main {
            stats.num_turns += 1;
            stats.stop_reason = Some(stop_reason.to_owned());
        }
    }

    /// A piece of a streaming response as Claude Code's `stream_event` (a content block
    /// delta of the Anthropic streaming format).
    fn stream_event(&mut self, agent: &str, delta: DeltaKind, text: &str) -> Vec<Value> {
        let delta = match delta {
            DeltaKind::Text => json!({"type": "text_delta", "text": text}),
            DeltaKind::Thinking => json!({"type": "thinking_delta", "thinking": text}),
            DeltaKind::ToolInput => json!({"type": "input_json_delta", "partial_json": text}),
            DeltaKind::Discard => return Vec::new(),
        };
        vec![json!({
            "type": "stream_event",
            "uuid": uuid::Uuid::new_v4().to_string(),
            "session_id": self.session_id,
            "parent_tool_use_id": self.parent(agent),
            "event": {"type": "content_block_delta", "index": 0, "delta": delta},
        })]
    }

    /// The prompt's `result`, from the run's ending and, in a team run, the teammates that
    /// ended badly meanwhile (each in words).
    pub fn result(&self, ending: &Ending, run_id: &str, ended_badly: &[String]) -> Value {
        let (subtype, errors) = verdict(ending, ended_badly);
        let stats = &self.stats;
        let text = match ending.result["result"].as_str() {
            Some(result) if subtype == "success" => result.to_owned(),
            _ => errors.join("; "),
        };
        json!({
            "type": "result",
            "subtype": subtype,
            "is_error": subtype != "success",
            "duration_ms": u64::try_from(stats.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "duration_api_ms": stats.api_ms.round() as u64,
            "num_turns": stats.num_turns,
            "result": text,
            "stop_reason": stats.stop_reason,
            "session_id": self.session_id,
            "total_cost_usd": stats.cost_usd,
            "usage": {
                "input_tokens": stats.usage.input_tokens,
                "output_tokens": stats.usage.output_tokens,
                "cache_read_input_tokens": stats.usage.cache_read_input_tokens,
                "cache_creation_input_tokens": stats.usage.cache_creation_input_tokens,
            },
            "permission_denials": stats.denials,
            "errors": errors,
            "uuid": uuid::Uuid::new_v4().to_string(),
            "muster": {
                "run_id": run_id,
                "status": ending.status.as_str(),
                "exit_code": ending.exit.code(),
            },
        })
    }
}

/// An Anthropic message of the assistant.
fn assistant(
    id: &str,
    model: &str,
    stop_reason: &str,
    usage: &TokenUsage,
    content: Value,
) -> Value {
    json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": null,
        "usage": usage,
    })
}

/// The `subtype` an ending is reported with, and its `errors`: `success` only for a run
/// that completed with no task undone and no teammate ended badly (`ended_badly`, named in
/// `errors` whatever the ending).
pub fn verdict(ending: &Ending, ended_badly: &[String]) -> (&'static str, Vec<String>) {
    let (subtype, mut errors) = run_verdict(ending);
    errors.extend(ended_badly.iter().cloned());
    match subtype {
        "success" if !errors.is_empty() => ("error_during_execution", errors),
        _ => (subtype, errors),
    }
}

/// The run's ending alone, as [`verdict`] reads it.
fn run_verdict(ending: &Ending) -> (&'static str, Vec<String>) {
    let error = ending.result["error"]
        .as_str()
        .or(ending.result["reason"].as_str())
        .map(str::to_owned)
        .unwrap_or_else(|| ending.text.clone());
    match ending.status {
        RunStatus::Completed => {
            // A team run's task board is part of its result: work left undone is no success,
            // whatever status the run ended in.
            let undone = undone_tasks(&ending.result);
            if undone.is_empty() {
                ("success", Vec::new())
            } else {
                ("error_during_execution", undone)
            }
        }
        RunStatus::AwaitingDecision => ("error_awaiting_decision", vec![ending.text.clone()]),
        RunStatus::Budget => {
            let subtype = match ending.result["budget"].as_str() {
                Some(key) if key.ends_with(".turns") => "error_max_turns",
                Some(key) if key.ends_with(".cost_usd") => "error_max_budget_usd",
                _ => "error_during_execution",
            };
            (subtype, vec![error])
        }
        _ => ("error_during_execution", vec![error]),
    }
}

/// Each task of a team run's result that is not completed, in words.
fn undone_tasks(result: &Value) -> Vec<String> {
    result["tasks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|task| task["status"] != "completed")
        .map(|task| {
            format!(
                "task {} ({}) is {}",
                task["task_id"],
                task["subject"].as_str().unwrap_or_default(),
                task["status"].as_str().unwrap_or("of unknown status")
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test assertions fail loudly")]

    use super::*;
    use crate::exit::Exit;

    fn ending(status: RunStatus, result: Value) -> Ending {
        Ending {
            status,
            exit: Exit::Failed,
            result,
            text: "the ending's text".into(),
        }
    }

    /// Each way a run ends, and the subtype it is reported with.
    #[test]
    fn only_a_completed_run_is_a_success() {
        let rows = [
            (RunStatus::Completed, json!({"result": "done"}), "success"),
            (
                RunStatus::Completed,
                json!({"result": "done", "tasks": [{"task_id": 1, "subject": "a", "status": "completed"}]}),
                "success",
            ),
            (
                RunStatus::Completed,
                json!({"result": "done", "tasks": [{"task_id": 2, "subject": "b", "status": "pending"}]}),
                "error_during_execution",
            ),
            (
                RunStatus::AwaitingDecision,
                json!({"request_id": "plan-1"}),
                "error_awaiting_decision",
            ),
            (
                RunStatus::Budget,
                json!({"budget": "budgets.run.turns", "reason": "r"}),
                "error_max_turns",
            ),
            (
                RunStatus::Budget,
                json!({"budget": "budgets.run.cost_usd", "reason": "r"}),
                "error_max_budget_usd",
            ),
            (
                RunStatus::Budget,
                json!({"budget": "budgets.run.duration_secs", "reason": "r"}),
                "error_during_execution",
            ),
            (
                RunStatus::Failed,
                json!({"error": "boom"}),
                "error_during_execution",
            ),
            (
                RunStatus::Interrupted,
                json!({"error": "interrupted"}),
                "error_during_execution",
            ),
        ];
        for (status, result, subtype) in rows {
            let (got, errors) = verdict(&ending(status, result), &[]);
            assert_eq!(got, subtype, "{status:?}");
            assert_eq!(errors.is_empty(), subtype == "success", "{status:?}");
        }
    }

    /// A teammate that ended badly turns a completed run into an error, and is named in
    /// `errors` beside whatever else went wrong.
    #[test]
    fn a_teammate_that_ended_badly_is_no_success() {
        let stuck = vec!["teammate alice ended stuck".to_owned()];
        let completed = ending(RunStatus::Completed, json!({"result": "ok", "tasks": []}));
        assert_eq!(
            verdict(&completed, &stuck),
            ("error_during_execution", stuck.clone())
        );
        let failed = ending(RunStatus::Failed, json!({"error": "boom"}));
        let (subtype, errors) = verdict(&failed, &stuck);
        assert_eq!(subtype, "error_during_execution");
        assert_eq!(errors, ["boom".to_owned(), stuck[0].clone()]);
    }

    /// A model turn and a tool call as Claude Code's messages; a denied call is counted.
    #[test]
    fn events_become_anthropic_messages_and_count_in_the_result() {
        let mut translator = Translator::new("s1".into(), MAIN, false);
        let usage = TokenUsage {
            input_tokens: 10,
            output_tokens: 5,
            ..TokenUsage::default()
        };
        let turn = translator.messages_for(&RunEvent::ModelTurn {
            agent: MAIN.into(),
            turn: 1,
            model: "m".into(),
            provider: None,
            mode: "default".into(),
            stop_reason: "tool_use".into(),
            text: "Looking.".into(),
            latency_ms: 12.0,
            usage,
            cost_usd: Some(0.25),
        });
        assert_eq!(turn[0]["message"]["content"][0]["text"], "Looking.");
        assert_eq!(turn[0]["message"]["usage"]["input_tokens"], 10);
        assert_eq!(turn[0]["parent_tool_use_id"], Value::Null);
        let call = translator.messages_for(&RunEvent::ToolCall {
            agent: MAIN.into(),
            tool_use_id: "t1".into(),
            tool: "Bash".into(),
            decision: "deny".into(),
            reason: "rule".into(),
            is_error: true,
            input: json!({"command": "rm -rf /"}),
            content: "denied".into(),
            diff: None,
            sandbox: None,
        });
        assert_eq!(call[0]["message"]["content"][0]["type"], "tool_use");
        assert_eq!(call[1]["message"]["content"][0]["tool_use_id"], "t1");
        let result = translator.result(
            &Ending {
                status: RunStatus::Completed,
                exit: Exit::Success,
                result: json!({"result": "done"}),
                text: "done".into(),
            },
            "r1",
            &[],
        );
        assert_eq!(result["num_turns"], 1);
        assert_eq!(result["total_cost_usd"], 0.25);
        assert_eq!(result["usage"]["output_tokens"], 5);
        assert_eq!(result["permission_denials"][0]["tool_name"], "Bash");
        assert_eq!(result["result"], "done");
        assert_eq!(result["is_error"], false);
    }
}
