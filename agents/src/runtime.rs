//! One agent at work: its loop and context window, plan mode as a state machine, plan files,
//! subagents.
//!
//! An agent ([`AgentRuntime`]) sends its context to the model of its current mode
//! ([`ModelRouter`]), decides every tool call through the [`ToolGate`] (the permission
//! engine), runs it, appends the results and repeats until the model ends its turn. Every step
//! is committed to the store before it is reported to the [`EventSink`].
//!
//! # Records
//! Each agent writes JSON rows to the stream [`TRANSCRIPT`] (see [`Record`]), tagged by `type`:
//!
//! | `type` | when | fields |
//! |---|---|---|
//! | `started` | first | `definition`, `agent_kind` (`{kind: main \| teammate(lead) \| subagent(parent)}`), `mode`, `pre_plan_mode?`, `plan_file?`, `system`, `tools`, `mcp_tools?`, `model_limits?` (what the model servers reported per model: `context_window?`, `max_output?`; a resume uses exactly these) |
//! | `message` | each message of the context | `message` (`{role, content}` in Anthropic block shape), `mode`; assistant messages add `turn` (the durable `x-muster-turn`), `model`, `stop_reason`, `usage`, `cost_usd?` (what resume restores the budget ledger from) |
//! | `tool_started` | before a tool that is neither read-only nor idempotent runs | `tool_use_id`, `tool`, `process_group?`, `host?`, `boot_id?` (Bash: committed by the process-group recorder before the command runs, with the machine it runs on; on a worker's line the store also records the group under the work item, see `MailboxStore::record_tool_start`) |
//! | `bash_effects` | with the `tool_call` of a non-read-only Bash call, just before it | `tool_use_id`, `command`, `exit_code`, `changed` (paths relative to the workspace), `effects_unknown?` (see [`crate::verification`]; skipped by resume) |
//! | `tool_call` | each call decided and finished | `tool_use_id`, `tool`, `decision` (`allow`/`ask`/`deny`/`invalid`), `reason`, `content`, `is_error` |
//! | `mode` | a mode change | `mode`, `pre_plan_mode?`, `reason` |
//! | `plan_snapshot` | the plan at `draft`, `submitted`, `edited`, `approved` | `path`, `content`, `state`, `request_id?` |
//! | `awaiting` | a plan request was sent | `request_id`, `tool_use_id`, `responder` |
//! | `grants` | an approval granted rules of the plan (in the approval's commit) | `request_id`, `approved_by`, `rules` |
//! | `grants_ended` | the plan's verification report was sent (same commit), or a later plan was approved without grants | `request_id`, `reason` |
//! | `compacted` | the context was summarised before a request | `turn`, `model`, `usage`, `cost_usd?`, `summary`, `messages` (the context from here on) |
//! | `context_reset` | approval with `clear_context` | `reason` |
//! | `finished` | the model ended its turn with no tool call | `result` |
//!
//! Rebuilding ([`AgentRuntime::resume`]) replays them: messages (cleared at `context_reset`),
//! the mode and `pre_plan_mode`, the plan grants (`grants` until `grants_ended`), the turn index (the highest `turn`, never reset), and for the
//! newest assistant message's tool calls: a `tool_call` record is the result; an `awaiting`
//! call waits for its decision; a `tool_started` without `tool_call` gets "interrupted by a
//! crash" after its process group is killed (only on the machine and boot that ran it; a group on
//! another host is named in the result instead); anything else runs.
//!
//! A response stopped at the output limit is never a normal end: see [`AgentLimits`] and the
//! `limits` module (continuations of a cut answer, a cut tool call answered with an error, the
//! `output_limit` and `stuck` endings).
//!
//! # Mode switches and the prompt cache
//! The system prompt and the tool list do not depend on the mode; the mode section is a
//! `<system-reminder>` at the end of each new user turn. A switch with the same model keeps the
//! cached prefix (system, tools, earlier turns). With per-mode models, the first request after a
//! switch goes to another model and reads no cache (caches are per model): the whole prefix is
//! written again once.

mod agent;
mod asks;
mod context;
mod coordination;
mod dispatch;
mod edit_diff;
mod error;
mod events;
mod gate;
mod limits;
mod mcp;
mod plan_files;
mod plan_mode;
mod prompt;
mod records;
mod resume;
pub mod team;

pub use agent::{AgentOutcome, AgentRuntime, AgentSpec};
pub use context::{
    CompactionPolicy, DEFAULT_MAX_OUTPUT, DEFAULT_MAX_SUBAGENTS, DEFAULT_MAX_TURNS, ModeModel,
    ModelRouter, PlanApprover, RunContext, Terminal, TerminalPlanDecision,
};
pub use coordination::capped_mode;
pub use error::{RuntimeError, RuntimeResult};
pub use events::{EventSink, NoEvents, RunEvent, mail_delivered_event, mail_sent_event};
pub use gate::{CallContext, EngineGate, GateDecision, ToolGate, Verdict};
pub use limits::{
    AgentLimits, AgentStop, CONTINUE_PROMPT, DEFAULT_CONTINUATIONS, DEFAULT_STUCK_AFTER,
};
pub use plan_files::{PlanFiles, REQUIRED_SECTIONS, missing_sections, random_slug};
pub use prompt::{mode_reminder, system_prompt};
pub use records::{AgentKind, Record, StartedCall, TRANSCRIPT, unfinished_calls};
