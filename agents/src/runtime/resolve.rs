//! The agent's side of its tool calls: each pending call given its result (the dispatcher
//! decides and runs tool-set calls; the agent carries out its own tools and commits), the
//! results committed with their records, and an interrupted turn's calls answered.

use muster_protocol::ToolName;

use crate::model::{Message, ToolCall};
use crate::tools::{HandledBy, ToolOutput};

use super::agent::AgentRuntime;
use super::calls::{
    AgentOutcome, CallResult, Dispatched, LeftBy, NextCall, PendingCalls, interrupted,
};
use super::dispatch::{CallView, Prepared};
use super::error::RuntimeResult;
use super::events::RunEvent;
use super::hook_points::HookStop;
use super::records::Record;

impl AgentRuntime {
    /// What the dispatcher sees of this agent's state.
    fn call_view(&self) -> CallView<'_> {
        CallView {
            plan: &self.plan,
            auto_gate_open: self.auto_gate_open,
        }
    }

    /// Decides one call through the gate and runs it; a tool that is neither read-only nor
    /// idempotent gets its `tool_started` commit first (Bash: with its process group, before
    /// the command runs).
    pub(super) async fn dispatch(&mut self, call: &ToolCall) -> RuntimeResult<Dispatched> {
        self.report.calling(call);
        match self.calls.prepare(call, self.call_view()).await? {
            Prepared::Finished(result) => Ok(Dispatched::Done(result)),
            Prepared::Stop(outcome) => Ok(Dispatched::Stop(outcome)),
            Prepared::Runtime(decision, acks) => {
                if call.name == ToolName::Agent {
                    // A subagent is not resumed after a crash: its parent gets an error.
                    self.commit(vec![started_record(call)], Vec::new(), None)
                        .await?;
                }
                self.report.tool_started(call);
                let mut dispatched = self.coordinate(call, &decision).await?;
                // Its effect is committed, its result not yet.
                muster_mailbox::failpoint!("effect:{}", call.name);
                if let Dispatched::Done(result) = &mut dispatched {
                    result.acks.extend(acks);
                }
                Ok(dispatched)
            }
            Prepared::Run(run) => {
                if run.needs_start_record(call) {
                    self.commit(vec![started_record(call)], Vec::new(), None)
                        .await?;
                }
                Ok(Dispatched::Done(Box::new(
                    self.calls.run_tool(call, *run).await,
                )))
            }
        }
    }

    /// Gives every pending call its result (running what has not run), then appends the
    /// results as one user message.
    pub(super) async fn resolve_calls(
        &mut self,
        mut pending: PendingCalls,
    ) -> RuntimeResult<Option<AgentOutcome>> {
        // The calls' hooks read the conversation up to the message that made them.
        self.sync_transcript_file();
        let calls = pending.calls.clone();
        let mut index = 0;
        while index < calls.len() {
            let next = pending.next(index, |call| self.calls.is_read_only_call(call));
            if let NextCall::ReadOnlyGroup(group) = next {
                let batch = &calls[index..index + group];
                let view = self.call_view();
                let results = futures_util::future::join_all(
                    batch
                        .iter()
                        .map(|call| self.calls.dispatch_read_only(call, view)),
                )
                .await;
                let mut outcomes = Vec::with_capacity(group);
                let mut stop = None;
                for (call, result) in batch.iter().zip(results) {
                    let mut result = match result? {
                        Dispatched::Done(result) => *result,
                        Dispatched::Stop(outcome) => {
                            stop = stop.or(Some(outcome));
                            continue;
                        }
                    };
                    self.note_repeated_failure(call, &mut result);
                    pending.finish(call, &result.output);
                    outcomes.push((call, result));
                }
                if let Some(stop) = self.calls.hook_stops.take() {
                    return self
                        .commit_hook_stop(stop, Some(pending), outcomes)
                        .await
                        .map(Some);
                }
                if let Some(outcome) = stop {
                    // A call deferred to a person: the others' results are kept, and the
                    // resume runs that call again (its hooks' decision is committed).
                    self.commit_calls(outcomes, None, None).await?;
                    self.pending = Some(pending);
                    return Ok(Some(outcome));
                }
                index += group;
                // Read-only calls re-run on resume, so one commit may hold the whole group.
                let results = (index == calls.len()).then(|| self.results_message(&pending));
                let finished = results.is_some();
                self.commit_calls(outcomes, results, None).await?;
                if finished {
                    return Ok(None);
                }
                continue;
            }
            let call = &calls[index];
            index += 1;
            let dispatched = match next {
                NextCall::Done | NextCall::ReadOnlyGroup(_) => continue,
                NextCall::Awaiting {
                    request_id,
                    responder,
                } => {
                    self.await_plan_decision(call, &request_id, &responder)
                        .await?
                }
                NextCall::Interrupted(started) => {
                    Dispatched::Done(Box::new(interrupted(&started, LeftBy::Crash)))
                }
                NextCall::Cut => Dispatched::Done(Box::new(CallResult::invalid(
                    ToolOutput::error(super::limits::cut_call_result(&call.name)),
                ))),
                NextCall::Run => self.dispatch(call).await?,
            };
            let mut result = match dispatched {
                Dispatched::Done(result) => result,
                Dispatched::Stop(outcome) => {
                    self.pending = Some(pending);
                    return Ok(Some(outcome));
                }
            };
            self.note_repeated_failure(call, &mut result);
            let reset = result.reset_context.clone();
            pending.finish(call, &result.output);
            if let Some(stop) = self.calls.hook_stops.take() {
                return self
                    .commit_hook_stop(stop, Some(pending), vec![(call, *result)])
                    .await
                    .map(Some);
            }
            // The turn's last call commits the results message with its own record.
            let results =
                (index == calls.len() && reset.is_none()).then(|| self.results_message(&pending));
            let finished = results.is_some();
            self.commit_calls(vec![(call, *result)], results, None)
                .await?;
            if let Some(first) = reset {
                self.reset_context(first).await?;
                return Ok(None);
            }
            if finished {
                return Ok(None);
            }
        }
        // Every call was done before (a resume): only the results message is missing.
        let message = self.results_message(&pending);
        let record = self.message_record(message.clone(), None);
        self.commit(vec![record], Vec::new(), None).await?;
        self.transcript.push(message, None);
        Ok(None)
    }

    /// Ends an interrupted turn in one commit: the calls of the newest response still
    /// without a result are answered (a started one's process group killed, as resume does
    /// after a crash; the others as not run), their results message appended, and the
    /// `turn_interrupted` record. Called with the store as the truth: the turn's future was
    /// dropped mid-way, and [`AgentRuntime::reload`] read the transcript back.
    pub(super) async fn commit_interrupted_turn(&mut self) -> RuntimeResult<()> {
        let interrupted = Record::TurnInterrupted {
            reason: "the user interrupted the turn".into(),
        };
        match self.pending.take() {
            Some(mut pending) => {
                let (calls, results): (Vec<ToolCall>, Vec<CallResult>) =
                    pending.interrupt().into_iter().unzip();
                for (call, result) in calls.iter().zip(&results) {
                    pending.finish(call, &result.output);
                }
                let message = self.results_message(&pending);
                let outcomes = calls.iter().zip(results).collect();
                self.commit_calls(outcomes, Some(message), Some(interrupted))
                    .await?;
            }
            None => self.commit(vec![interrupted], Vec::new(), None).await?,
        }
        self.transcript.end(None);
        self.stops = Default::default();
        Ok(())
    }

    /// Ends the turn a hook's `continue: false` stopped (see [`super::hook_points`]), in one
    /// commit: `outcomes` (calls that came to their result with the stop, already noted in
    /// `pending`), every other call of the newest response without a result answered as not
    /// run, the results message, and the `hook_stopped` record. The hook's reason goes to the
    /// person (the record, the log, the run's ending), never into the context.
    pub(super) async fn commit_hook_stop(
        &mut self,
        stop: HookStop,
        pending: Option<PendingCalls>,
        outcomes: Vec<(&ToolCall, CallResult)>,
    ) -> RuntimeResult<AgentOutcome> {
        let event = stop.event.name().to_owned();
        let record = Record::HookStopped {
            event: event.clone(),
            reason: stop.reason.clone(),
        };
        match pending.filter(|pending| !pending.calls.is_empty()) {
            Some(mut pending) => {
                let (calls, results): (Vec<ToolCall>, Vec<CallResult>) = pending
                    .answer_unfinished(LeftBy::HookStop)
                    .into_iter()
                    .unzip();
                for (call, result) in calls.iter().zip(&results) {
                    pending.finish(call, &result.output);
                }
                let message = self.results_message(&pending);
                let mut all = outcomes;
                all.extend(calls.iter().zip(results));
                self.commit_calls(all, Some(message), Some(record)).await?;
            }
            None => self.commit(vec![record], Vec::new(), None).await?,
        }
        // The stop is committed: a resume finds the turn ended.
        muster_mailbox::failpoint!("hook_stopped:{}", self.id);
        self.pending = None;
        self.transcript.end_by_hook(&event, &stop.reason);
        self.stops = Default::default();
        self.report.state(muster_protocol::AgentState::Idle);
        Ok(AgentOutcome::StoppedByHook {
            event,
            reason: stop.reason,
        })
    }

    /// A failed result the same as the call's last ones gets the note to change course (see
    /// [`super::limits`]); it is part of what is committed.
    fn note_repeated_failure(&self, call: &ToolCall, result: &mut CallResult) {
        if !result.output.is_error {
            return;
        }
        // The context ends with the assistant message holding `call`.
        let messages = &self.transcript.messages;
        let before = &messages[..messages.len().saturating_sub(1)];
        result.output.content = super::limits::with_stuck_note(
            before,
            &call.name,
            &call.input,
            std::mem::take(&mut result.output.content),
            self.run.limits.stuck_after,
        );
    }

    /// The user message carrying every call's result, in the order of the calls.
    fn results_message(&self, pending: &PendingCalls) -> Message {
        self.user_message(pending.result_blocks())
    }

    /// Commits calls' records (each call's own, then its `tool_call`) and, when the turn's
    /// calls are all done, the results message (and `last`, a record that ends the turn), in
    /// one transaction; then reports them. Calls that each move the auto gate are committed
    /// one by one, as the gate counts in order.
    async fn commit_calls(
        &mut self,
        outcomes: Vec<(&ToolCall, CallResult)>,
        results: Option<Message>,
        last: Option<Record>,
    ) -> RuntimeResult<()> {
        let gate_moves = outcomes
            .iter()
            .filter(|(_, result)| result.auto_gate.is_some())
            .count();
        if gate_moves > 1 {
            let end = outcomes.len() - 1;
            let (mut results, mut last) = (results, last);
            for (n, outcome) in outcomes.into_iter().enumerate() {
                let (results, last) = match n == end {
                    true => (results.take(), last.take()),
                    false => (None, None),
                };
                Box::pin(self.commit_calls(vec![outcome], results, last)).await?;
            }
            return Ok(());
        }
        let mut records = Vec::new();
        let mut acks = Vec::new();
        let mut auto_gate = None;
        let mut events = Vec::new();
        let may_have_changed_files = outcomes.iter().any(|(call, _)| self.may_change_files(call));
        for (call, result) in outcomes {
            records.extend(result.records);
            records.push(Record::ToolCall {
                tool_use_id: call.id.clone(),
                tool: call.name.clone(),
                decision: result.decision.clone(),
                reason: result.reason.clone(),
                content: result.output.content.clone(),
                is_error: result.output.is_error,
            });
            acks.extend(result.acks);
            auto_gate = auto_gate.or(result.auto_gate);
            events.extend(result.events);
            events.push(RunEvent::ToolCall {
                agent: self.id.clone(),
                tool_use_id: call.id.clone(),
                tool: call.name.clone(),
                decision: result.decision,
                reason: result.reason,
                is_error: result.output.is_error,
                input: call.input.clone(),
                content: result.output.content,
                diff: result.diff,
                sandbox: result.sandbox.map(str::to_owned),
            });
        }
        if let Some(message) = &results {
            records.push(self.message_record(message.clone(), None));
        }
        records.extend(last);
        // The worktree's state after these calls commits with their results, so a resume
        // restores what the transcript says they did.
        let hold = match may_have_changed_files {
            true => self.team_checkpoint().await?.map(|checkpoint| {
                records.push(checkpoint.record());
                checkpoint.hold
            }),
            false => None,
        };
        self.commit(records, acks, auto_gate).await?;
        drop(hold);
        if let Some(message) = results {
            self.transcript.push(message, None);
        }
        for event in events {
            self.run.events.emit(event);
        }
        Ok(())
    }

    /// Whether a call may have changed files in the worktree: a tool-set tool that is not
    /// read-only, or a subagent (which works in this agent's worktree).
    fn may_change_files(&self, call: &ToolCall) -> bool {
        call.name == ToolName::Agent
            || self
                .run
                .tools
                .get(&call.name)
                .is_some_and(|tool| tool.handled_by() == HandledBy::ToolSet && !tool.is_read_only())
    }
}

/// The `tool_started` record of a call with no process group of its own.
fn started_record(call: &ToolCall) -> Record {
    Record::ToolStarted {
        tool_use_id: call.id.clone(),
        tool: call.name.clone(),
        process_group: None,
        host: None,
        boot_id: None,
    }
}
