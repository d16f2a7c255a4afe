//! Rebuilding an agent from its records (see the table in [`crate::runtime`]).

use muster_protocol::ToolName;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use muster_config::PermissionMode;
use muster_config::settings::ModelInfo;
use muster_mailbox::MailboxStore;

use crate::budget::{Spend, cost_of};
use crate::model::Role;

use super::agent::{AgentRuntime, Assembly, Equipment};
use super::calls::PendingCalls;
use super::context::RunContext;
use super::error::{RuntimeError, RuntimeResult};
use super::plan_files::{read_plan, write_plan};
use super::plan_state::PlanState;
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
        let records = transcript_of(&run, agent_id).await?;
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
            endpoint,
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
        // The newest list: a server's `tools/list_changed` may have replaced the first.
        let mcp_tools = records
            .iter()
            .rev()
            .find_map(|record| match record {
                Record::McpTools { mcp_tools, .. } => Some(mcp_tools.clone()),
                _ => None,
            })
            .unwrap_or(mcp_tools);
        let equipment = Equipment::gather(
            &run,
            agent_id,
            &agent_kind,
            mode,
            &definition,
            Some(&mcp_tools),
        )
        .await?;
        let router = super::agent::agent_router(&run, agent_id, endpoint.as_ref())?;
        let plan = PlanState {
            mode,
            pre_plan_mode,
            approval_ceiling,
            grants: None,
            file: plan_file.map(PathBuf::from),
            approved: false,
        };
        let mut agent = AgentRuntime::assemble(Assembly {
            run,
            id: agent_id.to_owned(),
            kind: agent_kind,
            definition,
            system,
            equipment,
            inherited_model,
            model_limits,
            plan,
            router,
            endpoint,
        });
        agent.replay_all(&records).await?;
        // A resumed session, as Claude Code's `--resume`: its context joins the next user
        // message the agent commits. A subagent is never resumed.
        if !matches!(agent.kind, super::records::AgentKind::Subagent { .. }) {
            agent
                .session_started(super::hook_points::SessionSource::Resume)
                .await;
        }
        Ok(agent)
    }

    /// Reads this agent's transcript back from the store and rebuilds its state from it (an
    /// interrupted turn's future was dropped mid-way: what it committed is the truth).
    pub(super) async fn reload(&mut self) -> RuntimeResult<()> {
        let records = transcript_of(&self.run, &self.id).await?;
        let Some(Record::Started {
            mode,
            pre_plan_mode,
            ..
        }) = records.first()
        else {
            return Err(RuntimeError::NothingToResume {
                run: self.run.run_id.clone(),
                agent: self.id.clone(),
            });
        };
        self.plan = PlanState {
            mode: *mode,
            pre_plan_mode: *pre_plan_mode,
            grants: None,
            approved: false,
            ..self.plan.clone()
        };
        self.transcript = Default::default();
        self.stops = Default::default();
        self.pending = None;
        self.replay_all(&records).await
    }

    /// Replays the records after `started` into the transcript, the plan state, the stop
    /// conditions and the pending calls; then works out where the turn stands.
    async fn replay_all(&mut self, records: &[Record]) -> RuntimeResult<()> {
        self.auto_gate_open = self
            .run
            .store
            .run(&self.run.run_id)
            .await?
            .is_none_or(|record| record.auto_gate.open);
        let mut pending = PendingCalls::default();
        let mut last_plan: Option<String> = None;
        let mut history_plan: Option<String> = None;
        for record in records.iter().skip(1) {
            if let Some(plan) = plan_in_history(record) {
                history_plan = Some(plan);
            }
            if let Record::HookDecision {
                tool_use_id,
                decision,
            } = record
                && let Ok(mut decisions) = self.calls.hook_decisions.lock()
            {
                decisions.insert(tool_use_id.clone(), decision.clone());
            }
            self.transcript.replay(record);
            self.stops.replay(record);
            pending.replay(record);
            if let Some(plan) = self.plan.replay(record) {
                last_plan = Some(plan);
            }
        }
        self.restore_plan_file(last_plan.or(history_plan))?;
        if let Some(last) = self.transcript.last_response()
            && !self.transcript.turn_ended()
        {
            pending.calls = crate::model::tool_calls_in(&last.content);
            if pending.calls.is_empty() && pending.cut_answer {
                // A cut answer not followed by a request to continue: the continuations were
                // used up, and the agent ended with `output_limit`.
                self.stops.stopped = Some(super::limits::AgentStop::OutputLimit {
                    max_tokens: self.model_for_mode().max_tokens,
                    continuations: self.stops.cut_chain.cuts.saturating_sub(1),
                });
            } else if pending.calls.is_empty() {
                // The final answer arrived and was committed, but not its end of turn: the
                // loop finishes it (with a teammate's end-of-turn transition) when it runs,
                // without asking the model again.
                self.transcript.unfinished_answer =
                    Some(self.stops.cut_chain.answer(&last.content));
            } else {
                // Killed between the commit of a response that crossed a budget and the
                // check that stops the agent there: its calls never run, as in an uncut run.
                self.check_budget_before_pending_calls().await?;
                self.pending = Some(pending);
            }
        }
        Ok(())
    }

    /// Fails when the newest response took this agent's or the run's spend (this process's
    /// ledger, or the run's ledger in the store) over a limit.
    async fn check_budget_before_pending_calls(&self) -> RuntimeResult<()> {
        self.run.budget.check_exceeded(&self.id)?;
        if let Some(ledger) = self.run.store.run_ledger(&self.run.run_id).await? {
            crate::budget::check_stored(&ledger, crate::budget::StoredCheck::AfterResponse)?;
        }
        Ok(())
    }

    /// One agent's spend from its transcript rows (none when it has no rows): its turn index,
    /// and each model request's usage and cost, a missing cost from `models`' prices.
    pub fn spend_of(
        rows: &[muster_mailbox::AgentRecord],
        models: &BTreeMap<String, ModelInfo>,
    ) -> RuntimeResult<Option<Spend>> {
        if rows.is_empty() {
            return Ok(None);
        }
        let mut turns = 0;
        let mut requests = Vec::new();
        for row in rows {
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
        Ok(Some(Spend::from_requests(turns, requests)))
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
            if let Some(spend) = Self::spend_of(&rows, models)? {
                spends.insert(member.agent, spend);
            }
        }
        Ok(spends)
    }

    /// A plan file lost meanwhile is rewritten from the newest snapshot or, with no snapshot
    /// left, from the newest plan in the message history (see [`plan_in_history`]). For an
    /// approved plan the snapshot is authoritative: a file changed outside muster is kept as
    /// `<name>.edited.md` and rewritten.
    fn restore_plan_file(&self, last_plan: Option<String>) -> RuntimeResult<()> {
        let (Some(path), Some(plan)) = (&self.plan.file, last_plan) else {
            return Ok(());
        };
        let on_disk = read_plan(path)?;
        if on_disk == plan {
            return Ok(());
        }
        if on_disk.trim().is_empty() {
            return write_plan(path, &plan);
        }
        if self.plan.approved {
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

/// The records of `agent`'s transcript.
async fn transcript_of(run: &RunContext, agent: &str) -> RuntimeResult<Vec<Record>> {
    let rows = run.store.records(&run.run_id, agent, TRANSCRIPT, 0).await?;
    rows.iter().map(Record::from_stored).collect()
}
