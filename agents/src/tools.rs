//! The tool set: file, shell and coordination tools with Claude Code's names and inputs.
//!
//! Every tool is a [`Tool`]: a name, a description for the model, a JSON schema generated from
//! a typed input struct, a read-only and an idempotent flag, and an async call. Tools never
//! check permission modes: the permission engine sits in front of every call, and the tool only
//! enforces what no mode can lift — file tools resolve every path through the [`Workspace`],
//! which keeps them inside the workspace and out of `.git/` and `.muster/`.
//!
//! Input is validated by deserialising into the tool's input struct; a violation comes back as
//! an `is_error` [`ToolOutput`] naming the field, never as a panic.

mod bash;
mod context;
mod coordination;
mod edit;
mod glob;
mod grep;
mod input;
mod ls;
mod notebook;
mod output;
mod read;
mod registry;
mod skill;
mod text;
pub(crate) mod walk;
mod workspace;
mod write;

use std::future::Future;
use std::pin::Pin;

use serde::de::DeserializeOwned;

pub use bash::{Bash, BashInput};
pub use context::{
    OutputLimits, ProcessGroupId, ProcessGroupRecorder, RecordFuture, ShutdownSignal,
    ShutdownTrigger, ToolContext,
};
pub use coordination::{
    Agent, AgentInput, AskUserQuestion, AskUserQuestionInput, EnterPlanMode, EnterPlanModeInput,
    ExitPlanMode, ExitPlanModeInput, GrantedMode, Question, QuestionOption, ReviewMerge,
    ReviewMergeInput, ReviewPlan, ReviewPlanInput, SendMessage, SendMessageInput, ShutdownTeammate,
    ShutdownTeammateInput, SpawnTeammate, SpawnTeammateInput, TaskCreate, TaskCreateInput, TaskGet,
    TaskGetInput, TaskList, TaskListInput, TaskStatus, TaskUpdate, TaskUpdateInput,
};
pub use edit::{Edit, EditInput, MultiEdit, MultiEditInput, StringEdit};
pub use glob::{Glob, GlobInput};
pub use grep::{Grep, GrepInput, GrepOutputMode};
pub use input::{InputError, input_schema};
pub use ls::{Ls, LsInput};
pub use notebook::{CellType, NotebookEdit, NotebookEditInput, NotebookEditMode};
pub use output::{BashOutcome, ToolDetails, ToolOutput};
pub use read::{Read, ReadInput};
pub use registry::{TOOL_NAMES, ToolDefinition, ToolRegistry};
pub use skill::{Skill, SkillInput};
pub use workspace::{PathAccess, PathError, PathUse, Workspace, WorkspaceError};
pub use write::{Write, WriteInput};

/// The future a [`Tool`] call returns.
pub type ToolFuture<'a> = Pin<Box<dyn Future<Output = ToolOutput> + Send + 'a>>;

/// Who carries out a tool's call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandledBy {
    /// The tool set runs it ([`Tool::call`]).
    ToolSet,
    /// The agent runtime dispatches it (coordination tools: mail, the task board, plan mode,
    /// subagents and teammates); [`Tool::call`] only returns an error saying so.
    AgentRuntime,
}

/// One tool as the model and the permission engine see it. Object safe: the registry holds
/// `Arc<dyn Tool>`. Implement [`TypedTool`] instead; every `TypedTool` is a `Tool`.
pub trait Tool: Send + Sync {
    /// The name the model calls it by (Claude Code's name; `mcp__<server>__<tool>` mapped to
    /// the model's name rules for an MCP tool).
    fn name(&self) -> &str;
    /// What the tool does, written for the model.
    fn description(&self) -> &str;
    /// The JSON schema of the input, generated from the typed input struct.
    fn input_schema(&self) -> serde_json::Value;
    /// The call changes neither the workspace nor any shared state.
    fn is_read_only(&self) -> bool;
    /// Running the same call twice has the same effect as running it once.
    fn is_idempotent(&self) -> bool;
    /// Whether the tool set or the agent runtime carries out the call.
    fn handled_by(&self) -> HandledBy;
    /// The paths a call would touch, for the permission engine's path checks; an input that
    /// does not deserialise is an error naming the field.
    fn accessed_paths(&self, input: &serde_json::Value) -> Result<Vec<PathAccess>, InputError>;
    /// Runs the call. Never panics; bad input is an `is_error` output naming the field.
    fn call<'a>(&'a self, context: &'a ToolContext, input: serde_json::Value) -> ToolFuture<'a>;
    /// What the permission engine needs of an MCP tool; `None` for muster's own tools.
    fn mcp(&self) -> Option<&crate::mcp::McpToolFacts> {
        None
    }
}

/// A tool with a typed input struct; the blanket impl makes it a [`Tool`].
pub trait TypedTool: Send + Sync {
    /// The input struct; its `JsonSchema` is the schema the model sees.
    type Input: DeserializeOwned + schemars::JsonSchema + Send;
    /// See [`Tool::name`].
    const NAME: &'static str;
    /// See [`Tool::description`].
    const DESCRIPTION: &'static str;
    /// See [`Tool::is_read_only`].
    const READ_ONLY: bool;
    /// See [`Tool::is_idempotent`].
    const IDEMPOTENT: bool;
    /// See [`Tool::handled_by`].
    const HANDLED_BY: HandledBy = HandledBy::ToolSet;

    /// See [`Tool::accessed_paths`].
    fn paths(input: &Self::Input) -> Vec<PathAccess> {
        let _ = input;
        Vec::new()
    }

    /// Runs the call on validated input.
    fn run(
        &self,
        context: &ToolContext,
        input: Self::Input,
    ) -> impl Future<Output = ToolOutput> + Send;
}

impl<T: TypedTool> Tool for T {
    fn name(&self) -> &str {
        T::NAME
    }

    fn description(&self) -> &str {
        T::DESCRIPTION
    }

    fn input_schema(&self) -> serde_json::Value {
        input_schema::<T::Input>()
    }

    fn is_read_only(&self) -> bool {
        T::READ_ONLY
    }

    fn is_idempotent(&self) -> bool {
        T::IDEMPOTENT
    }

    fn handled_by(&self) -> HandledBy {
        T::HANDLED_BY
    }

    fn accessed_paths(&self, input: &serde_json::Value) -> Result<Vec<PathAccess>, InputError> {
        let typed = input::parse_input::<T::Input>(T::NAME, input)?;
        Ok(T::paths(&typed))
    }

    fn call<'a>(&'a self, context: &'a ToolContext, input: serde_json::Value) -> ToolFuture<'a> {
        Box::pin(async move {
            match input::parse_input::<T::Input>(T::NAME, &input) {
                Ok(typed) => self.run(context, typed).await,
                Err(error) => ToolOutput::error(error.to_string()),
            }
        })
    }
}
