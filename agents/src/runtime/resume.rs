//! Rebuilding an agent from its records (see the table in [`crate::runtime`]).

use muster_protocol::ToolName;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use muster_config::PermissionMode;
use muster_config::settings::ModelInfo;
use muster_mailbox::MailboxStore;

use crate::budget::{Spend, cost_of};
use crate::model::{Role, StopReason};

use super::agent::{AgentRuntime, PendingCalls, offered_tools, tool_definitions};
use super::context::RunContext;
use super::error::{RuntimeError, RuntimeResult};
use super::plan_files::{read_plan, write_plan};
use super::records::{Record, TRANSCRIPT};

impl AgentRuntime {
    /// Rebuilds agent `agent_id` of the run from its records, ready to [`AgentRuntime::run`]
    /// on: the pending tool calls of its newest assistant message are resolved first.
    pub async fn resume(
        run: Arc<RunContext>,
        agent_id: &str,
        approval_ceiling: Option<PermissionMode>,
        inherited_model: Option<String>,
    ) -> RuntimeResult<AgentRuntime> {
        let rows = run
            .store
            .records(&run.run_id, agent_id, TRANSCRIPT, 0)
            .await?;
        let records = rows
            .iter()
            .map(Record::from_stored)
            .collect::<RuntimeResult<Vec<Record>>>()?;
        let Some(Record::Started {
            definition,
            agent_kind,
            mode,
            pre_plan_mode,
            plan_file,
            system,
            tools: _,
            mcp_tools,
            model_limits,
        }) = records.first().cloned()
        else {
            return Err(RuntimeError::NothingToResume {
                run: run.run_id.clone(),
                agent: agent_id.to_owned(),
            });
        };
        let definition = run
            .catalog
            .get(&definition)
            .cloned()
            .ok_or(RuntimeError::UnknownDefinition(definition))?;
        let mut tools = offered_tools(&definition, &agent_kind);
        let asks = super::asks::AskSettings::of(&run, agent_id, &agent_kind).await?;
        let workspace = super::agent::agent_workspace(&run, agent_id, &agent_kind).await?;
        let mcp = super::mcp::resume_session(&run, agent_id, &mcp_tools, &workspace).await;
        let mut tool_definitions = tool_definitions(&run, &tools);
        tools.extend(mcp.names());
        tool_definitions.extend(mcp.definitions());
        let mut agent = AgentRuntime {
            tool_definitions,
            mcp: Arc::new(mcp),
            run,
            id: agent_id.to_owned(),
            kind: agent_kind,
            definition,
            mode,
            pre_plan_mode,
            approval_ceiling,
            plan_grants: None,
            plan_file: plan_file.map(PathBuf::from),
            system,
            tools,
            messages: Vec::new(),
            turn: 0,
            inherited_model,
            pending: None,
            finished: None,
            unfinished_answer: None,
            stopped: None,
            cut_chain: Default::default(),
            auto_gate_open: true,
            plan_approved: false,
            asks,
            last_prompt: None,
            workspace,
            model_limits,
            state: Default::default(),
        };
        agent.auto_gate_open = agent
            .run
            .store
            .run(&agent.run.run_id)
            .await?
            .is_none_or(|record| record.auto_gate.open);
        let mut pending = PendingCalls::default();
        let mut last_plan: Option<String> = None;
        let mut history_plan: Option<String> = None;
        for record in records.into_iter().skip(1) {
            if let Some(plan) = plan_in_history(&record) {
                history_plan = Some(plan);
            }
            agent.replay(record, &mut pending, &mut last_plan);
        }
        agent.restore_plan_file(last_plan.or(history_plan))?;
        if let Some(last) = agent.messages.last()
            && last.role == Role::Assistant
            && agent.finished.is_none()
        {
            pending.calls = tool_calls_of(last);
            if pending.calls.is_empty() && pending.cut_answer {
                // A cut answer not followed by a request to continue: the continuations were
                // used up, and the agent ended with `output_limit`.
                agent.stopped = Some(super::limits::AgentStop::OutputLimit {
                    max_tokens: agent.model_for_mode().max_tokens,
                    continuations: agent.cut_chain.cuts.saturating_sub(1),
                });
            } else if pending.calls.is_empty() {
                // The final answer arrived and was committed, but not its end of turn: the
                // loop finishes it (with a teammate's end-of-turn transition) when it runs,
                // without asking the model again.
                agent.unfinished_answer = Some(agent.cut_chain.answer(&last.content));
            } else {
                agent.pending = Some(pending);
            }
        }
        Ok(agent)
    }

    /// Every agent's spend in run `run_id`, rebuilt from its records (its turn index, and
    /// each model request's usage and cost; a missing cost from the catalogue's prices in
    /// `models`), for [`RunContext::budget_ledger`] on resume.
    pub async fn restored_spends(
        store: &dyn MailboxStore,
        run_id: &str,
        models: &BTreeMap<String, ModelInfo>,
    ) -> RuntimeResult<BTreeMap<String, Spend>> {
        let mut spends = BTreeMap::new();
        for member in store.roster(run_id).await? {
            let rows = store.records(run_id, &member.agent, TRANSCRIPT, 0).await?;
            if rows.is_empty() {
                continue;
            }
            let mut turns = 0;
            let mut requests = Vec::new();
            for row in &rows {
                let (turn, model, usage, cost_usd) = match Record::from_stored(row)? {
                    Record::Message {
                        turn,
                        model,
                        usage,
                        cost_usd,
                        ..
                    } => (turn, model, usage, cost_usd),
                    Record::Compacted {
                        turn,
                        model,
                        usage,
                        cost_usd,
                        ..
                    } => (Some(turn), Some(model), Some(usage), cost_usd),
                    _ => continue,
                };
                turns = turns.max(turn.unwrap_or(0));
                if let Some(usage) = usage {
                    let info = model.as_deref().and_then(|name| models.get(name));
                    requests.push((usage, cost_usd.or_else(|| cost_of(&usage, info))));
                }
            }
            spends.insert(member.agent, Spend::from_requests(turns, requests));
        }
        Ok(spends)
    }

    fn replay(
        &mut self,
        record: Record,
        pending: &mut PendingCalls,
        last_plan: &mut Option<String>,
    ) {
        match record {
            Record::Message {
                message,
                turn,
                usage,
                stop_reason,
                ..
            } => {
                if let Some(turn) = turn {
                    self.turn = self.turn.max(turn);
                }
                if message.role == Role::Assistant {
                    let stop_reason = stop_reason.unwrap_or(StopReason::EndTurn);
                    self.cut_chain.push(&message.content, &stop_reason);
                    *pending = PendingCalls {
                        cut: super::limits::cut_call_id(&message.content, &stop_reason),
                        cut_answer: stop_reason == StopReason::MaxTokens,
                        ..PendingCalls::default()
                    };
                }
                self.messages.push(message);
                if let Some(usage) = usage {
                    self.last_prompt = Some((usage, self.messages.len()));
                }
                self.finished = None;
            }
            Record::Compacted { turn, messages, .. } => {
                self.turn = self.turn.max(turn);
                self.messages = messages;
                self.last_prompt = None;
            }
            Record::ContextReset { .. } => {
                self.cut_chain = Default::default();
                self.messages.clear();
                self.last_prompt = None;
                *pending = PendingCalls::default();
            }
            Record::Mode {
                mode,
                pre_plan_mode,
                ..
            } => {
                self.mode = mode;
                self.pre_plan_mode = pre_plan_mode;
            }
            Record::Grants {
                request_id,
                approved_by,
                rules,
            } => {
                let (grants, _) =
                    crate::permission::PlanGrants::from_texts(&request_id, &approved_by, &rules);
                self.plan_grants = Some(grants);
            }
            Record::GrantsEnded { .. } => self.plan_grants = None,
            Record::ToolStarted {
                tool_use_id,
                process_group,
                host,
                boot_id,
                ..
            } => {
                let started = super::dispatch::StartedCall {
                    process_group,
                    host,
                    boot_id,
                };
                pending.started.insert(tool_use_id, started);
            }
            Record::ToolCall {
                tool_use_id,
                content,
                is_error,
                ..
            } => {
                pending.done.insert(tool_use_id, (content, is_error));
            }
            Record::Awaiting {
                request_id,
                tool_use_id,
                responder,
            } => pending.awaiting = Some((tool_use_id, request_id, responder)),
            Record::PlanSnapshot { content, state, .. } => {
                *last_plan = Some(content);
                self.plan_approved = matches!(state.as_str(), "approved" | "edited");
            }
            Record::Finished { result } => {
                self.cut_chain = Default::default();
                self.finished = Some(result);
            }
            // Evidence for verification, and worktree state the team restores.
            Record::Started { .. } | Record::BashEffects(_) | Record::Checkpoint { .. } => {}
        }
    }

    /// A plan file lost meanwhile is rewritten from the newest snapshot or, with no snapshot
    /// left, from the newest plan in the message history (see [`plan_in_history`]). For an
    /// approved plan the snapshot is authoritative: a file changed outside muster is kept as
    /// `<name>.edited.md` and rewritten.
    fn restore_plan_file(&self, last_plan: Option<String>) -> RuntimeResult<()> {
        let (Some(path), Some(plan)) = (&self.plan_file, last_plan) else {
            return Ok(());
        };
        let on_disk = read_plan(path)?;
        if on_disk == plan {
            return Ok(());
        }
        if on_disk.trim().is_empty() {
            return write_plan(path, &plan);
        }
        if self.plan_approved {
            let kept = path.with_extension("edited.md");
            write_plan(&kept, &on_disk)?;
            write_plan(path, &plan)?;
        }
        Ok(())
    }
}

/// The first words of the user message that restarts a context with an approved plan.
const APPROVED_PLAN_PREFIX: &str = "Implement this approved plan (from ";

/// The start of the plan reference a compacted context keeps (see [`crate::compaction::rebuild`]).
const PLAN_REFERENCE_OPEN: &str = "<plan-file path=\"";
const PLAN_REFERENCE_CLOSE: &str = "\n</plan-file>";

/// A plan a record carries in the message history: the `plan` input of an `ExitPlanMode`
/// call, the plan of the user message that restarts the context after an approval with
/// `clear_context` (after its first blank line), or the plan reference kept by compaction.
fn plan_in_history(record: &Record) -> Option<String> {
    let message = match record {
        Record::Message { message, .. } => message,
        Record::Compacted { messages, .. } => {
            return messages.iter().flat_map(|m| &m.content).find_map(|block| {
                let crate::model::ContentBlock::Text { text } = block else {
                    return None;
                };
                let (_, rest) = text.strip_prefix(PLAN_REFERENCE_OPEN)?.split_once('\n')?;
                let (plan, _) = rest.split_once(PLAN_REFERENCE_CLOSE)?;
                Some(format!("{plan}\n")).filter(|plan| !plan.trim().is_empty())
            });
        }
        _ => return None,
    };
    message
        .content
        .iter()
        .find_map(|block| match (message.role, block) {
            (Role::Assistant, crate::model::ContentBlock::ToolUse { name, input, .. })
                if *name == ToolName::ExitPlanMode =>
            {
                input
                    .get("plan")
                    .and_then(serde_json::Value::as_str)
                    .filter(|plan| !plan.trim().is_empty())
                    .map(str::to_owned)
            }
            (Role::User, crate::model::ContentBlock::Text { text })
                if text.starts_with(APPROVED_PLAN_PREFIX) =>
            {
                text.split_once("\n\n")
                    .map(|(_, plan)| plan.to_owned())
                    .filter(|plan| !plan.trim().is_empty())
            }
            _ => None,
        })
}

fn tool_calls_of(message: &crate::model::Message) -> Vec<crate::model::ToolCall> {
    message
        .content
        .iter()
        .filter_map(|block| match block {
            crate::model::ContentBlock::ToolUse { id, name, input } => {
                Some(crate::model::ToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    input: input.clone(),
                })
            }
            _ => None,
        })
        .collect()
}
