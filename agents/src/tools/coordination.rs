//! Coordination tools: plan mode, questions, subagents, mail, the task board and the team. They
//! are declared here with their inputs, schemas and flags; the agent runtime carries them out
//! ([`HandledBy::AgentRuntime`]), so their [`TypedTool::run`] only says so.

use muster_config::PermissionMode;
use muster_protocol::ToolName;
use schemars::JsonSchema;
use serde::Deserialize;

use super::context::ToolContext;
use super::output::ToolOutput;
use super::{HandledBy, TypedTool};

/// The error a runtime-handled tool returns if the tool set is asked to run it.
fn handled_by_runtime(name: &str) -> ToolOutput {
    ToolOutput::error(format!(
        "{name} is handled by the agent runtime, not by the tool set; this call reached the tool set by mistake"
    ))
}

macro_rules! runtime_tool {
    (
        $(#[$meta:meta])*
        $tool:ident($input:ty) {
            name: $name:ident,
            idempotent: $idempotent:expr,
            description: $description:expr $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, Default)]
        pub struct $tool;

        impl TypedTool for $tool {
            type Input = $input;
            const NAME: &'static str = ToolName::$name.as_str();
            const DESCRIPTION: &'static str = $description;
            const READ_ONLY: bool = ToolName::$name.is_read_only();
            const IDEMPOTENT: bool = $idempotent;
            const HANDLED_BY: HandledBy = HandledBy::AgentRuntime;

            async fn run(&self, _context: &ToolContext, _input: $input) -> ToolOutput {
                handled_by_runtime(ToolName::$name.as_str())
            }
        }
    };
}

/// One option of a question.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QuestionOption {
    /// The option as shown (1-5 words).
    pub label: String,
    /// What choosing it means.
    pub description: String,
}

/// One question for the user.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Question {
    /// The complete question.
    pub question: String,
    /// A very short label for it (at most 12 characters).
    pub header: String,
    /// The choices (2-4); the user may also answer in their own words.
    pub options: Vec<QuestionOption>,
    /// Whether several options may be chosen.
    #[serde(rename = "multiSelect", default)]
    pub multi_select: bool,
}

/// Input of `AskUserQuestion`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AskUserQuestionInput {
    /// The questions to ask (1-4).
    pub questions: Vec<Question>,
}

runtime_tool! {
    /// Asks the user (or, without a person at the terminal, the lead) questions.
    AskUserQuestion(AskUserQuestionInput) {
        name: AskUserQuestion,
        idempotent: false,
        description: "Asks the user one to four multiple-choice questions and waits for the answers. Use it \
             when a decision is theirs to make. Without a person at the terminal, the question \
             goes to the lead's mailbox.",
    }
}

/// Input of `EnterPlanMode` (none).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EnterPlanModeInput {}

runtime_tool! {
    /// Switches the agent into plan mode.
    EnterPlanMode(EnterPlanModeInput) {
        name: EnterPlanMode,
        idempotent: true,
        description: "Switches you into plan mode: you may read and explore, but not change the workspace, \
             until your plan is approved through ExitPlanMode.",
    }
}

/// Input of `ExitPlanMode`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExitPlanModeInput {
    /// The plan in Markdown, with the sections `## Goal`, `## Steps` (numbered), `## Files`
    /// (one path per line), `## Tests` and `## Risks`. Omit it to submit your plan file as it
    /// is.
    #[serde(default)]
    pub plan: Option<String>,
    /// Set when you need to explore more before you can plan; nothing is submitted.
    #[serde(default)]
    pub needs_more_exploration: Option<bool>,
    /// The permission rules carrying out the plan needs, granted (if the approver agrees)
    /// until the plan's verification report: `{"tool": "Bash", "prompt": "cargo test"}`
    /// (the command and its arguments) or a rule as written, like `"Bash(cargo test:*)"` or
    /// `"Edit(src/**)"`. Each names one plain command or path pattern; known-dangerous
    /// commands are never granted.
    #[serde(default, rename = "allowedPrompts")]
    pub allowed_prompts: Vec<crate::permission::grants::AllowedPrompt>,
}

runtime_tool! {
    /// Writes the plan and asks for its approval.
    ExitPlanMode(ExitPlanModeInput) {
        name: ExitPlanMode,
        idempotent: false,
        description: "Submits your plan for approval and leaves plan mode once it is approved. The plan needs \
             at least `## Steps` and `## Files` sections. You keep planning while it waits, and \
             after a rejection, with the reviewer's feedback.",
    }
}

/// Input of `Agent`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentInput {
    /// A short (3-5 word) description of the task.
    pub description: String,
    /// The task for the subagent, complete: it sees nothing else of your context.
    pub prompt: String,
    /// The agent definition to use (for example `Plan` or `general`).
    pub subagent_type: String,
}

runtime_tool! {
    /// Runs a subagent and returns its final report.
    Agent(AgentInput) {
        name: Agent,
        idempotent: false,
        description: "Starts a subagent with its own context window on a self-contained task and returns its \
             final report. The subagent reports only to you and ends when done.",
    }
}

/// Input of `SendMessage`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendMessageInput {
    /// The recipient: a teammate's name, `lead`, or `human`.
    pub to: String,
    /// The message text.
    pub message: String,
    /// A one-line summary shown in inbox listings.
    #[serde(default)]
    pub summary: Option<String>,
    /// The request id this answers (a `question` or a `shutdown_request`).
    #[serde(default)]
    pub reply_to: Option<String>,
    /// For a reply to a `shutdown_request`: whether you agree to shut down.
    #[serde(default)]
    pub approve: Option<bool>,
}

runtime_tool! {
    /// Sends mail to another agent of the run.
    SendMessage(SendMessageInput) {
        name: SendMessage,
        idempotent: true,
        description: "Sends a message to another member of the team through the durable mailbox. With \
             `reply_to`, it answers a question or a shutdown request (`approve` says whether you \
             agree to shut down).",
    }
}

/// A task's status on the board.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Not started.
    Pending,
    /// Being worked on.
    InProgress,
    /// Done.
    Completed,
    /// Given up.
    Failed,
    /// Waiting on something; give `blocked_reason`.
    Blocked,
}

/// Input of `TaskCreate`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskCreateInput {
    /// A short title.
    pub subject: String,
    /// What to do and how to know it is done.
    pub description: String,
    /// Ids of tasks that must be completed first.
    #[serde(default)]
    pub blocked_by: Option<Vec<u64>>,
}

runtime_tool! {
    /// Adds a task to the board.
    TaskCreate(TaskCreateInput) {
        name: TaskCreate,
        idempotent: false,
        description: "Adds a task to the team's task board and returns its id.",
    }
}

/// Input of `TaskUpdate`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskUpdateInput {
    /// The task's id.
    pub task_id: u64,
    /// The new status.
    #[serde(default)]
    pub status: Option<TaskStatus>,
    /// The new owner (an agent's name); they are told by mail.
    #[serde(default)]
    pub owner: Option<String>,
    /// A new title.
    #[serde(default)]
    pub subject: Option<String>,
    /// A new description.
    #[serde(default)]
    pub description: Option<String>,
    /// Why the task is blocked (with status `blocked`).
    #[serde(default)]
    pub blocked_reason: Option<String>,
    /// Ids of further tasks that must be completed first.
    #[serde(default)]
    pub add_blocked_by: Option<Vec<u64>>,
}

runtime_tool! {
    /// Changes a task on the board.
    TaskUpdate(TaskUpdateInput) {
        name: TaskUpdate,
        idempotent: false,
        description: "Changes a task on the board: status, owner, subject, description, or what blocks it.",
    }
}

/// Input of `TaskList` (none).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskListInput {}

runtime_tool! {
    /// Lists the board.
    TaskList(TaskListInput) {
        name: TaskList,
        idempotent: true,
        description: "Lists every task on the board with its id, subject, owner, status and blockers.",
    }
}

/// Input of `TaskGet`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskGetInput {
    /// The task's id.
    pub task_id: u64,
}

runtime_tool! {
    /// Shows one task.
    TaskGet(TaskGetInput) {
        name: TaskGet,
        idempotent: true,
        description: "Shows one task of the board in full.",
    }
}

/// Input of `SpawnTeammate`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpawnTeammateInput {
    /// The teammate's name (`[a-z][a-z0-9-]{0,31}`, not `lead`, `human` or `policy`).
    pub name: String,
    /// The agent definition to use (default: the team's default).
    #[serde(default)]
    pub agent: Option<String>,
    /// The teammate's first instructions.
    pub prompt: String,
    /// Require a plan approved by you before it may change anything (can only tighten the
    /// team's setting).
    #[serde(default)]
    pub plan_mode_required: Option<bool>,
}

runtime_tool! {
    /// Starts a teammate (lead only).
    SpawnTeammate(SpawnTeammateInput) {
        name: SpawnTeammate,
        idempotent: false,
        description: "Starts a teammate that works in parallel with its own context, reachable by mail. Lead \
             only.",
    }
}

/// A permission mode a reviewer grants with an approval: every [`PermissionMode`] but `plan`
/// (approval leaves plan mode), spelled the same, with a schema for the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, JsonSchema)]
pub enum GrantedMode {
    /// Asks before anything that is not read-only.
    #[serde(rename = "default")]
    Default,
    /// File edits inside the workspace are allowed too.
    #[serde(rename = "acceptEdits")]
    AcceptEdits,
    /// As `default`, but every ask is a deny.
    #[serde(rename = "dontAsk")]
    DontAsk,
    /// As `acceptEdits`; what would ask is denied and counted against the run's auto gate.
    #[serde(rename = "auto")]
    Auto,
    /// Everything is allowed except what deny rules and path limits stop.
    #[serde(rename = "bypassPermissions")]
    BypassPermissions,
}

impl From<GrantedMode> for PermissionMode {
    fn from(mode: GrantedMode) -> Self {
        match mode {
            GrantedMode::Default => PermissionMode::Default,
            GrantedMode::AcceptEdits => PermissionMode::AcceptEdits,
            GrantedMode::DontAsk => PermissionMode::DontAsk,
            GrantedMode::Auto => PermissionMode::Auto,
            GrantedMode::BypassPermissions => PermissionMode::BypassPermissions,
        }
    }
}

/// Input of `ReviewPlan`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewPlanInput {
    /// The plan or permission request's id (`plan-alice-2`, `perm-bob-1`).
    pub request_id: String,
    /// Approve (true) or reject (false).
    pub approve: bool,
    /// What to change (with a rejection) or keep in mind (with an approval).
    #[serde(default)]
    pub feedback: Option<String>,
    /// The mode the teammate works in after approval (plan requests only).
    #[serde(default)]
    pub mode: Option<GrantedMode>,
    /// A corrected plan to approve instead of the submitted one (plan requests only).
    #[serde(default)]
    pub edited_plan: Option<String>,
    /// Start the teammate's execution with a fresh context holding only the approved plan
    /// (plan requests only).
    #[serde(default)]
    pub clear_context: Option<bool>,
    /// Which of the rules the plan asks for (its `allowedPrompts`) to grant until its
    /// verification report; omit it to grant them all, `[]` to grant none. Rules needing a
    /// mode above your own are dropped (plan requests only).
    #[serde(default)]
    pub grants: Option<Vec<String>>,
}

runtime_tool! {
    /// Decides a teammate's plan or permission request (lead only).
    ReviewPlan(ReviewPlanInput) {
        name: ReviewPlan,
        idempotent: true,
        description: "Approves or rejects a teammate's plan approval request or permission request. For plans \
             you may grant a mode and the permission rules the plan asks for, supply an edited \
             plan, or clear the teammate's context. Lead only.",
    }
}

/// Input of `ReviewMerge`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewMergeInput {
    /// The merge request's id (`merge-alice-1`).
    pub request_id: String,
    /// Merge the branch into the integration branch (true), or send the teammate back to
    /// work with your feedback (false).
    pub approve: bool,
    /// What to change (with a rejection) or keep in mind (with an approval).
    #[serde(default)]
    pub feedback: Option<String>,
}

runtime_tool! {
    /// Decides a teammate's merge request (lead only).
    ReviewMerge(ReviewMergeInput) {
        name: ReviewMerge,
        idempotent: true,
        description: "Approves or rejects a teammate's merge request: muster checked that its branch merges \
             cleanly into the integration branch and shows the files and diffstat. Approve to \
             merge it; reject with feedback to send the teammate back to work. Lead only.",
    }
}

/// Input of `ShutdownTeammate`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShutdownTeammateInput {
    /// The teammate's name.
    pub name: String,
    /// Why, for the teammate.
    #[serde(default)]
    pub reason: Option<String>,
}

runtime_tool! {
    /// Asks a teammate to shut down (lead only).
    ShutdownTeammate(ShutdownTeammateInput) {
        name: ShutdownTeammate,
        idempotent: true,
        description: "Asks a teammate to finish and shut down; it answers with a shutdown response. Lead only.",
    }
}
