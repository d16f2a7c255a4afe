//! Where an agent fires hooks (see [`crate::hooks`]) and what their outcome does to it.
//!
//! - `PreToolUse`, after the engine's decision (a call the engine denies fires nothing: no
//!   hook could allow it). Its combined decision is committed as a `hook_decision` record
//!   before the call goes on, so a resume takes it from the store and never runs the hooks
//!   again for that call ([`HookDecision`]). deny and exit 2 refuse the call; ask sends it to
//!   the agent's approver, defer to a person (see `asks.rs`); allow changes nothing (a hook never widens what the
//!   rules, plan mode, protected paths, an approver or the sandbox allow); `updatedInput` is
//!   decided by the engine again as if the model had sent it, and the stricter decision holds.
//! - `PostToolUse` / `PostToolUseFailure`, after a tool of the tool set ran: exit 2,
//!   `decision: "block"` and `additionalContext` reach the model in the call's result (so they
//!   are committed with it). After a kill -9 between the hook and that commit, the call's
//!   hooks run again with the call (at most this one event, the one in flight).
//! - `SessionStart` (source `startup`; `SubagentStart` for a subagent) and, for the main
//!   agent's prompts, `UserPromptSubmit`, before the prompt is committed: the context they add
//!   is committed with it; a blocking `UserPromptSubmit` refuses the prompt. `SessionStart`
//!   again with source `resume` when a lead, teammate or single run's agent is resumed (its
//!   context joins the next user message the agent commits), `clear` when an approval clears
//!   the context (its context joins the new first message) and `compact` after a compaction
//!   (its context joins the compacted context, committed with it).
//! - `Stop` / `SubagentStop`, then for a teammate `TeammateIdle` and `TaskCompleted` for each
//!   task its end of turn would complete, as the turn would end: a block is committed as the
//!   user message that keeps the agent working (the task stays in progress).
//! - `PreCompact` / `PostCompact` around a compaction; they inform only.
//!
//! A hook's `continue: false` (with `stopReason`) stops the agent: Claude Code ends its turn,
//! shows the reason to the person and not to the model. The firing notes it ([`HookStops`]),
//! and the agent ends its turn at the next commit it makes — the call's result, the end of
//! turn, the first message — in that same commit, with a `hook_stopped` record
//! ([`super::records::Record::HookStopped`]). A PreToolUse stop is also kept in the call's
//! committed `hook_decision`, so a resume stops again without running the hooks. Not acted on
//! for `UserPromptSubmit` (it refuses the prompt, as a block does), nor for the events that
//! only inform (`PreCompact`, `PostCompact`, `Notification`, `SessionEnd`).

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use muster_config::hooks::HookEvent;
use muster_config::{AgentDefinition, PermissionMode};
use serde_json::{Map, Value};

use crate::hooks::{FiringAgent, HookDecision, HookOutcome, HookPermission};
use crate::model::ToolCall;
use crate::tools::ToolOutput;
use crate::trace_ids::SpanKey;

use super::context::RunContext;
use super::error::RuntimeError;
use super::gate::{GateDecision, Verdict};
use super::records::AgentKind;

/// A hook's `continue: false`: the event whose hook said it, and its `stopReason` (for the
/// person, never the model).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookStop {
    pub event: HookEvent,
    pub reason: String,
}

/// Where an agent's firings note a hook's `continue: false` until the agent commits the end
/// of its turn (shared by its concurrent read-only calls). The first stop is kept.
#[derive(Debug, Clone, Default)]
pub(super) struct HookStops(Arc<Mutex<Option<HookStop>>>);

impl HookStops {
    pub(super) fn note(&self, event: HookEvent, reason: &str) {
        let mut slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            tracing::warn!(
                event = event.name(),
                "a hook stopped the agent (continue: false): {reason}"
            );
            *slot = Some(HookStop {
                event,
                reason: reason.to_owned(),
            });
        }
    }

    /// The stop noted, if any (it stays noted until [`HookStops::take`]).
    pub(super) fn noted(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    pub(super) fn take(&self) -> Option<HookStop> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// What the model reads of a call that a hook's `continue: false` kept from running (the
/// hook's `stopReason` is for the person only).
pub(super) const STOPPED_CALL: &str = "not run: a hook stopped the agent";

/// The engine's decision with the hooks' applied: never wider than the engine's.
pub(super) fn apply(hook: &HookDecision, decision: GateDecision) -> GateDecision {
    if hook.stop.is_some() {
        // `continue: false` wins over any decision: the call does not run.
        return GateDecision {
            verdict: Verdict::Deny,
            reason: STOPPED_CALL.to_owned(),
            ..decision
        };
    }
    let because = |what: &str| {
        if hook.reason.is_empty() {
            format!("{what} by a PreToolUse hook")
        } else {
            format!("{what} by a PreToolUse hook: {}", hook.reason)
        }
    };
    match (hook.permission, decision.verdict) {
        (_, Verdict::Deny) | (None | Some(HookPermission::Allow), _) => decision,
        (Some(HookPermission::Deny), _) => GateDecision {
            verdict: Verdict::Deny,
            reason: because("blocked"),
            ..decision
        },
        (Some(HookPermission::Ask), _) => GateDecision {
            verdict: Verdict::Ask,
            reason: because("asked"),
            ..decision
        },
        (Some(HookPermission::Defer), _) => GateDecision {
            verdict: Verdict::Ask,
            reason: because("deferred to a person"),
            ..decision
        },
    }
}

/// The stricter of two decisions of one call (deny > ask > allow): an `updatedInput` never
/// gets more than the model's input got, and never more than the engine gives it.
pub(super) fn stricter(first: GateDecision, second: GateDecision) -> GateDecision {
    let rank = |verdict: Verdict| match verdict {
        Verdict::Allow => 0,
        Verdict::Ask => 1,
        Verdict::Deny => 2,
    };
    if rank(second.verdict) > rank(first.verdict) {
        second
    } else {
        first
    }
}

/// The agent firing: who it is, where it works, its mode.
pub(super) struct Firing<'a> {
    pub run: &'a RunContext,
    pub id: &'a str,
    pub kind: &'a AgentKind,
    pub definition: &'a AgentDefinition,
    pub workspace: &'a Path,
    pub mode: PermissionMode,
    /// The agent's transcript file, when one is written.
    pub transcript_path: Option<&'a Path>,
    /// Where a hook's `continue: false` is noted.
    pub stops: &'a HookStops,
}

impl Firing<'_> {
    /// Who fires; its hooks run under `span` (with traces on).
    fn agent(&self, span: SpanKey<'_>) -> FiringAgent<'_> {
        FiringAgent {
            run_id: &self.run.run_id,
            agent_id: self.id,
            is_lead: matches!(self.kind, AgentKind::Main),
            agent_type: &self.definition.name,
            teammate_name: matches!(self.kind, AgentKind::Teammate { .. }).then_some(self.id),
            workspace: self.workspace,
            mode: self.mode,
            // Hooks run read-only wherever the agent's own commands would.
            profile: crate::sandbox::profile_for(false, self.mode, self.definition.read_only),
            transcript_path: self.transcript_path,
            traceparent: self.run.trace.as_ref().map(|trace| trace.traceparent(span)),
        }
    }

    /// Fires `event` for `subject` (nothing runs when no hook matches). Its hooks run under
    /// the span of the tool call the event is about (`tool_use_id` in `fields`), else under
    /// the agent's.
    pub(super) async fn fire(
        &self,
        event: HookEvent,
        subject: Option<&str>,
        fields: Map<String, Value>,
    ) -> HookOutcome {
        let tool_use_id = fields
            .get("tool_use_id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let span = match &tool_use_id {
            Some(id) => SpanKey::Tool(self.id, id),
            None => SpanKey::Agent(self.id),
        };
        self.run
            .hooks
            .fire(event, subject, &self.agent(span), fields)
            .await
    }

    /// Notes the `continue: false` of `event`'s hooks, if one said it.
    fn note_stop(&self, event: HookEvent, outcome: &HookOutcome) {
        if let Some(reason) = &outcome.stop {
            self.stops.note(event, reason);
        }
    }

    /// The PreToolUse hooks' decision of `call`, or `None` when no hook matched it.
    pub(super) async fn pre_tool_use(&self, call: &ToolCall) -> Option<HookDecision> {
        if !self
            .run
            .hooks
            .selects(HookEvent::PreToolUse, Some(&call.name))
        {
            return None;
        }
        let outcome = self
            .fire(
                HookEvent::PreToolUse,
                Some(&call.name),
                tool_fields(call, &call.input),
            )
            .await;
        Some(HookDecision::of(outcome))
    }

    /// Fires `PostToolUse` (or `PostToolUseFailure` for a failed call) and adds what the hooks
    /// tell the model to the call's result.
    pub(super) async fn post_tool_use(
        &self,
        call: &ToolCall,
        input: &Value,
        output: &mut ToolOutput,
    ) {
        let event = if output.is_error {
            HookEvent::PostToolUseFailure
        } else {
            HookEvent::PostToolUse
        };
        if !self.run.hooks.has(event) {
            return;
        }
        let mut fields = tool_fields(call, input);
        if output.is_error {
            fields.insert("error".into(), output.content.clone().into());
        } else {
            fields.insert("tool_response".into(), output.content.clone().into());
        }
        let outcome = self.fire(event, Some(&call.name), fields).await;
        self.note_stop(event, &outcome);
        for said in outcome.block.iter().chain(&outcome.context) {
            output.content.push_str(&format!("\n[{event} hook] {said}"));
        }
    }
}

/// How the user message a blocking Stop hook adds begins (and how a resume knows the turn
/// is already continuing because of one: `stop_hook_active`).
pub(super) const STOP_HOOK_FEEDBACK: &str = "Stop hook feedback:";

/// Whether the newest user message of `messages` is a Stop hook's feedback.
pub(super) fn stop_hook_active(messages: &[crate::model::Message]) -> bool {
    messages
        .iter()
        .rev()
        .find(|message| message.role == crate::model::Role::User)
        .and_then(|message| message.content.first())
        .is_some_and(|block| match block {
            crate::model::ContentBlock::Text { text, .. } => text.starts_with(STOP_HOOK_FEEDBACK),
            _ => false,
        })
}

impl Firing<'_> {
    /// Fires `Stop` (`SubagentStop` for a subagent) as the agent is about to end its turn
    /// with `last` as its answer; the reason of a hook that blocks (the agent keeps working).
    pub(super) async fn stop(&self, active: bool, last: &str) -> Option<String> {
        let event = match self.kind {
            AgentKind::Subagent { .. } => HookEvent::SubagentStop,
            _ => HookEvent::Stop,
        };
        if !self.run.hooks.has(event) {
            return None;
        }
        let mut fields = Map::new();
        fields.insert("stop_hook_active".into(), active.into());
        fields.insert("last_assistant_message".into(), last.into());
        let outcome = self.fire(event, None, fields).await;
        self.note_stop(event, &outcome);
        outcome.block
    }
}

/// Why a session starts, as `SessionStart`'s `source` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SessionSource {
    /// A new lead, teammate or single run's agent.
    Startup,
    /// A stopped agent taken up again: `muster resume`, `muster run --continue`, a team's
    /// resume of its lead and teammates (not a subagent: none is resumed).
    Resume,
    /// Its context restarted with only its plan (an approval with `clear_context`).
    Clear,
    /// Its context was compacted.
    Compact,
}

impl SessionSource {
    pub(super) fn name(self) -> &'static str {
        match self {
            SessionSource::Startup => "startup",
            SessionSource::Resume => "resume",
            SessionSource::Clear => "clear",
            SessionSource::Compact => "compact",
        }
    }
}

/// What the hooks that open an agent's conversation add to its first message.
#[derive(Debug, Default)]
pub(super) struct Opening {
    /// Text blocks for the model, each naming the event that added it.
    pub context: Vec<String>,
}

impl Firing<'_> {
    /// The hooks of a new agent's first prompt: `SessionStart` (source `startup`) for a lead,
    /// a teammate or a single run's agent, `SubagentStart` for a subagent, then
    /// `UserPromptSubmit` when the prompt is a person's (the main agent's). Their context is
    /// committed with the first message, so a resume never runs them again; a crash before
    /// that commit runs them again (the one event in flight).
    pub(super) async fn opening(&self, prompt: &str) -> Result<Opening, RuntimeError> {
        let mut opening = Opening::default();
        match self.kind {
            AgentKind::Subagent { .. } => {
                let event = HookEvent::SubagentStart;
                if self.run.hooks.has(event) {
                    // It cannot block: its context is all it adds. Matched on the agent type,
                    // as in Claude Code.
                    let subject = Some(self.definition.name.as_str());
                    let outcome = self.fire(event, subject, Map::new()).await;
                    log_messages(event, &outcome);
                    self.note_stop(event, &outcome);
                    opening.context.extend(tagged(event, &outcome.context));
                }
            }
            _ => opening
                .context
                .extend(self.session_start(SessionSource::Startup).await),
        }
        if matches!(self.kind, AgentKind::Main) {
            opening.context.extend(self.user_prompt(prompt).await?);
        }
        Ok(opening)
    }

    /// `SessionStart` with `source` (matched on it, as in Claude Code): the context its hooks
    /// add, each marked with the event. It cannot block; its `continue: false` is noted.
    pub(super) async fn session_start(&self, source: SessionSource) -> Vec<String> {
        let event = HookEvent::SessionStart;
        if !self.run.hooks.has(event) {
            return Vec::new();
        }
        let mut fields = Map::new();
        fields.insert("source".into(), source.name().into());
        let outcome = self.fire(event, Some(source.name()), fields).await;
        log_messages(event, &outcome);
        self.note_stop(event, &outcome);
        tagged(event, &outcome.context)
    }

    /// `UserPromptSubmit` for a person's prompt: the context its hooks add, or the error that
    /// refuses the prompt when one blocks.
    pub(super) async fn user_prompt(&self, prompt: &str) -> Result<Vec<String>, RuntimeError> {
        let event = HookEvent::UserPromptSubmit;
        if !self.run.hooks.has(event) {
            return Ok(Vec::new());
        }
        let mut fields = Map::new();
        fields.insert("prompt".into(), prompt.into());
        let outcome = self.fire(event, None, fields).await;
        log_messages(event, &outcome);
        if let Some(reason) = outcome.block.or(outcome.stop) {
            return Err(RuntimeError::PromptBlocked { reason });
        }
        Ok(tagged(event, &outcome.context))
    }

    /// `PreCompact` or `PostCompact` (trigger `auto`: muster compacts on its own). They
    /// inform; what they print goes to the log.
    pub(super) async fn compaction(&self, event: HookEvent, summary: Option<&str>) {
        if !self.run.hooks.has(event) {
            return;
        }
        let mut fields = Map::new();
        fields.insert("trigger".into(), "auto".into());
        match summary {
            Some(summary) => {
                fields.insert("compact_summary".into(), summary.into());
            }
            None => {
                fields.insert("custom_instructions".into(), Value::Null);
            }
        }
        let outcome = self.fire(event, Some("auto"), fields).await;
        log_messages(event, &outcome);
    }

    /// `TeammateIdle` as a teammate is about to go idle with `last` as its answer: the reason
    /// of a hook that blocks (the teammate keeps working).
    pub(super) async fn teammate_idle(&self, last: &str) -> Option<String> {
        let event = HookEvent::TeammateIdle;
        if !matches!(self.kind, AgentKind::Teammate { .. }) || !self.run.hooks.has(event) {
            return None;
        }
        let mut fields = Map::new();
        fields.insert("last_assistant_message".into(), last.into());
        let outcome = self.fire(event, None, fields).await;
        log_messages(event, &outcome);
        self.note_stop(event, &outcome);
        outcome.block
    }
}

impl Firing<'_> {
    /// `TaskCreated` before a task is created, or `TaskCompleted` before one is marked
    /// completed (`task_id` is `None` for a task not created yet): the reason of a hook that
    /// blocks, and then the change is not made (the tool call fails with that reason).
    pub(super) async fn task_change(
        &self,
        event: HookEvent,
        task_id: Option<i64>,
        subject: &str,
        description: &str,
    ) -> Option<String> {
        if !self.run.hooks.has(event) {
            return None;
        }
        let mut fields = Map::new();
        if let Some(id) = task_id {
            fields.insert("task_id".into(), id.to_string().into());
        }
        fields.insert("task_subject".into(), subject.into());
        fields.insert("task_description".into(), description.into());
        let outcome = self.fire(event, None, fields).await;
        log_messages(event, &outcome);
        self.note_stop(event, &outcome);
        // A hook that stops the agent keeps the change from being made too.
        outcome
            .block
            .or_else(|| outcome.stop.as_ref().map(|_| STOPPED_CALL.to_owned()))
    }

    /// `TaskCompleted` for each task a teammate's end of turn is about to complete (its
    /// tasks in progress): the reason of the first hook that blocks — the turn does not end,
    /// so that task stays in progress and the teammate keeps working with the reason.
    pub(super) async fn turn_end_tasks(&self) -> Result<Option<String>, RuntimeError> {
        let event = HookEvent::TaskCompleted;
        if !matches!(self.kind, AgentKind::Teammate { .. }) || !self.run.hooks.has(event) {
            return Ok(None);
        }
        for task in self.run.store.tasks(&self.run.run_id).await? {
            if task.owner.as_deref() != Some(self.id)
                || task.status != muster_mailbox::TaskStatus::InProgress
            {
                continue;
            }
            let refused = self
                .task_change(event, Some(task.task_id), &task.subject, &task.description)
                .await;
            if let Some(reason) = refused {
                return Ok(Some(format!(
                    "task #{} was not marked completed: a TaskCompleted hook refused it: {reason}",
                    task.task_id
                )));
            }
        }
        Ok(None)
    }
}

impl Firing<'_> {
    /// `PermissionRequest` as `call` is about to go to the agent's approver: the reason of a
    /// hook that denies it (exit 2 or `decision.behavior: "deny"`). A hook's `allow` is not
    /// acted on: the approver is asked all the same (a hook only narrows).
    pub(super) async fn permission_request(&self, call: &ToolCall) -> Option<String> {
        let event = HookEvent::PermissionRequest;
        if !self.run.hooks.has(event) {
            return None;
        }
        let mut fields = tool_fields(call, &call.input);
        fields.insert("permission_suggestions".into(), Value::Array(Vec::new()));
        let outcome = self.fire(event, Some(&call.name), fields).await;
        log_messages(event, &outcome);
        self.note_stop(event, &outcome);
        if outcome.stop.is_some() {
            return Some(STOPPED_CALL.to_owned());
        }
        match outcome.tool_permission() {
            Some((HookPermission::Deny, reason)) => Some(if reason.is_empty() {
                "denied by a PermissionRequest hook".to_owned()
            } else {
                format!("denied by a PermissionRequest hook: {reason}")
            }),
            Some((HookPermission::Allow, _)) => {
                tracing::info!(
                    tool = call.name,
                    "a PermissionRequest hook's allow is not acted on: the approver decides"
                );
                None
            }
            _ => None,
        }
    }

    /// `Notification` (`notification_type`, the matcher's subject, and `message`): the agent
    /// waits for a person. It informs; what it prints goes to the log.
    pub(super) async fn notification(&self, kind: &str, message: &str) {
        let event = HookEvent::Notification;
        if !self.run.hooks.has(event) {
            return;
        }
        let mut fields = Map::new();
        fields.insert("message".into(), message.into());
        fields.insert("title".into(), "muster".into());
        fields.insert("notification_type".into(), kind.into());
        let outcome = self.fire(event, Some(kind), fields).await;
        log_messages(event, &outcome);
    }

    /// `SessionEnd` as the agent's session ends (`reason`, Claude Code's `other` unless
    /// said). It informs; what it prints goes to the log.
    pub(super) async fn session_end(&self, reason: &str) {
        let event = HookEvent::SessionEnd;
        if !self.run.hooks.has(event) {
            return;
        }
        let mut fields = Map::new();
        fields.insert("reason".into(), reason.into());
        let outcome = self.fire(event, Some(reason), fields).await;
        log_messages(event, &outcome);
    }
}

/// What the hooks told the person (a `systemMessage`, a non-blocking error), in the log.
fn log_messages(event: HookEvent, outcome: &HookOutcome) {
    for message in &outcome.messages {
        tracing::warn!(event = event.name(), "{message}");
    }
}

/// The context hooks of `event` added, each marked with the event, as the model sees it.
fn tagged(event: HookEvent, context: &[String]) -> Vec<String> {
    context
        .iter()
        .map(|said| format!("[{} hook] {said}", event.name()))
        .collect()
}

/// The tool fields of a tool event's JSON.
fn tool_fields(call: &ToolCall, input: &Value) -> Map<String, Value> {
    let mut fields = Map::new();
    fields.insert("tool_name".into(), call.name.clone().into());
    fields.insert("tool_input".into(), input.clone());
    fields.insert("tool_use_id".into(), call.id.clone().into());
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hook narrows the engine's decision and never widens it.
    #[test]
    fn a_hook_narrows_and_never_widens() {
        let engine = [
            GateDecision::allow("mode default"),
            GateDecision {
                verdict: Verdict::Ask,
                ..GateDecision::allow("ask rule")
            },
            GateDecision::deny("deny rule"),
        ];
        // (hook, engine index, verdict)
        let cases = [
            (None, 0, Verdict::Allow),
            (Some(HookPermission::Allow), 1, Verdict::Ask),
            (Some(HookPermission::Allow), 2, Verdict::Deny),
            (Some(HookPermission::Deny), 0, Verdict::Deny),
            (Some(HookPermission::Ask), 0, Verdict::Ask),
            (Some(HookPermission::Defer), 0, Verdict::Ask),
            (Some(HookPermission::Ask), 2, Verdict::Deny),
        ];
        for (permission, index, verdict) in cases {
            let hook = HookDecision {
                permission,
                reason: "r".into(),
                ..HookDecision::default()
            };
            let decided = apply(&hook, engine[index].clone());
            assert_eq!(decided.verdict, verdict, "{permission:?} over {index}");
        }
        assert_eq!(
            stricter(GateDecision::allow("a"), GateDecision::deny("b")).verdict,
            Verdict::Deny
        );
        assert_eq!(
            stricter(GateDecision::deny("a"), GateDecision::allow("b")).verdict,
            Verdict::Deny
        );
    }
}
