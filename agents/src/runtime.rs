//! One agent at work: its loop and context window, plan mode as a state machine, plan files,
//! subagents.
//!
//! # Parts
//! The agent's loop (`agent`, with the calls' side in `resolve` and the runtime's own tools in
//! `plan_mode`, `coordination` and `team_tools`) owns state machines that know no store and
//! are tested alone: the transcript (`transcript`: the context, the turn index, where the
//! turn stands), the mode and plan (`plan_state`), the stop conditions (`stops`, over the
//! rules of `limits`), the pending calls (`calls`: which call next, how one left without a
//! result is answered), and the call dispatcher (`dispatch`: the gate's decision, an ask
//! settled by `asks`, a tool-set call run). Each replays the records for a resume. No two
//! files of this folder import each other (`tests/tests/suite/tidy.rs` keeps it so).
//!
//! # Turns
//! [`AgentRuntime::run`] runs a turn to its end: the model's answer, a plan awaiting a
//! decision, or an interrupt ([`TurnInterrupt`], `interrupt_turn`; see the `interrupt`
//! module). [`AgentRuntime::prompt`] then starts the next user turn in the same process; mail
//! delivered to an idle agent does too.
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
//! | `started` | first | `definition`, `agent_kind` (`{kind: main \| teammate(lead) \| subagent(parent, call?)}`, `call` the `tool_use_id` of the parent's `Agent` call), `mode`, `pre_plan_mode?`, `plan_file?`, `system`, `tools`, `mcp_tools?`, `endpoint?` (the agent's own provider, model, base URL and key variable, as resolved at its start; a resume and a worker use exactly these), `model_limits?` (what the model servers reported per model: `context_window?`, `max_output?`; a resume uses exactly these) |
//! | `message` | each message of the context | `message` (`{role, content}` in Anthropic block shape), `mode`; assistant messages add `turn` (the durable `x-muster-turn`), `model`, `stop_reason`, `usage`, `cost_usd?` (what resume restores the budget ledger from) |
//! | `tool_started` | before a tool that is neither read-only nor idempotent runs | `tool_use_id`, `tool`, `process_group?`, `host?`, `boot_id?` (Bash: committed by the process-group recorder before the command runs, with the machine it runs on; on a worker's line the store also records the group under the work item, see `MailboxStore::record_tool_start`) |
//! | `bash_effects` | with the `tool_call` of a non-read-only Bash call, just before it | `tool_use_id`, `command`, `exit_code`, `changed` (paths relative to the workspace), `effects_unknown?` (see [`crate::verification`]; skipped by resume) |
//! | `hook_decision` | a call's PreToolUse hooks ran, before the call goes on | `tool_use_id`, `permission?` (`allow`/`ask`/`defer`/`deny`), `reason`, `updated_input?`, `context?` (a resume uses it instead of running the hooks again) |
//! | `tool_call` | each call decided and finished | `tool_use_id`, `tool`, `decision` (`allow`/`ask`/`deny`/`invalid`), `reason`, `content`, `is_error` |
//! | `mode` | a mode change | `mode`, `pre_plan_mode?`, `reason` |
//! | `plan_snapshot` | the plan at `draft`, `submitted`, `edited`, `approved` | `path`, `content`, `state`, `request_id?` |
//! | `awaiting` | a plan request was sent | `request_id`, `tool_use_id`, `responder` |
//! | `grants` | an approval granted rules of the plan (in the approval's commit) | `request_id`, `approved_by`, `rules` |
//! | `grants_ended` | the plan's verification report was sent (same commit), or a later plan was approved without grants | `request_id`, `reason` |
//! | `compacted` | the context was summarised before a request | `turn`, `model`, `usage`, `cost_usd?`, `summary`, `messages` (the context from here on) |
//! | `context_reset` | approval with `clear_context` | `reason` |
//! | `finished` | the model ended its turn with no tool call | `result` |
//! | `turn_interrupted` | the turn was interrupted ([`TurnInterrupt`]), in the commit that answers the newest response's calls still without a result (`interrupted by the user`, the process group killed; calls not started: `not run`) | `reason` |
//!
//! Rebuilding ([`AgentRuntime::resume`]) replays them: messages (cleared at `context_reset`;
//! the turn's end at `finished` or `turn_interrupted`, which a new user message reopens),
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
mod calls;
mod context;
mod coordination;
mod costs;
mod dispatch;
mod edit_diff;
mod error;
mod events;
mod gate;
mod hook_points;
mod interrupt;
mod lease;
mod limits;
mod mcp;
mod mcp_changes;
mod plan_files;
mod plan_mode;
mod plan_state;
mod prompt;
mod records;
mod requests;
mod resolve;
mod resume;
mod stops;
pub mod team;
mod team_tools;
mod transcript;
mod transcript_file;

pub use agent::{AgentRuntime, AgentSpec};
pub use calls::AgentOutcome;
pub use context::{
    AgentModels, CompactionPolicy, DEFAULT_MAX_OUTPUT, DEFAULT_MAX_SUBAGENTS, DEFAULT_MAX_TURNS,
    ModeModel, ModelRouter, PlanApprover, RouterBuilder, RunContext, Terminal,
    TerminalPlanDecision,
};
pub use coordination::capped_mode;
pub use costs::{CostReport, CostRow};
pub use error::{RuntimeError, RuntimeResult};
pub use events::{EventSink, NoEvents, RunEvent, mail_delivered_event, mail_sent_event};
pub use gate::{CallContext, EngineGate, GateDecision, SessionRules, ToolGate, Verdict};
pub use interrupt::{ModeRequest, TurnInterrupt};
pub use limits::{
    AgentLimits, AgentStop, CONTINUE_PROMPT, DEFAULT_CONTINUATIONS, DEFAULT_STUCK_AFTER,
};
pub use plan_files::{PlanFiles, REQUIRED_SECTIONS, missing_sections, random_slug};
pub use prompt::OwnPrompt;
pub use prompt::{mode_reminder, system_prompt};
pub use records::{AgentKind, Record, StartedCall, TRANSCRIPT, unfinished_calls};
