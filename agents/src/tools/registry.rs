//! The registry of every tool muster offers, in a fixed order.

use std::sync::Arc;

use super::Tool;
use super::bash::Bash;
use super::context::ToolContext;
use super::coordination::{
    Agent, AskUserQuestion, EnterPlanMode, ExitPlanMode, ReviewMerge, ReviewPlan, SendMessage,
    ShutdownTeammate, SpawnTeammate, TaskCreate, TaskGet, TaskList, TaskUpdate,
};
use super::edit::{Edit, MultiEdit};
use super::glob::Glob;
use super::grep::Grep;
use super::ls::Ls;
use super::notebook::NotebookEdit;
use super::output::ToolOutput;
use super::read::Read;
use super::skill::Skill;
use super::write::Write;

/// The name of every tool, in registry order ([`muster_protocol::ALL_TOOLS`]).
pub const TOOL_NAMES: [&str; 23] = {
    let mut names = [""; 23];
    let mut index = 0;
    while index < names.len() {
        names[index] = muster_protocol::ALL_TOOLS[index].as_str();
        index += 1;
    }
    names
};

/// A tool as offered to the model: name, description and input schema.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ToolDefinition {
    /// The tool's name.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// The JSON schema of its input.
    pub input_schema: serde_json::Value,
}

/// Every tool, looked up by name, and the MCP servers each agent starts for its own MCP
/// tools (see [`crate::mcp::McpSession`]).
#[derive(Clone)]
pub struct ToolRegistry {
    tools: Vec<Arc<dyn Tool>>,
    mcp: Arc<crate::mcp::McpConfig>,
    /// The skills `Skill` reads (none by default).
    skills: Arc<muster_config::SkillCatalog>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_list()
            .entries(self.tools.iter().map(|tool| tool.name()))
            .finish()
    }
}

impl Default for ToolRegistry {
    fn default() -> Self {
        Self::standard()
    }
}

impl ToolRegistry {
    /// Every tool muster offers, in the order of [`TOOL_NAMES`].
    pub fn standard() -> Self {
        let tools: Vec<Arc<dyn Tool>> = vec![
            Arc::new(Read),
            Arc::new(Write),
            Arc::new(Edit),
            Arc::new(MultiEdit),
            Arc::new(NotebookEdit),
            Arc::new(Glob),
            Arc::new(Grep),
            Arc::new(Ls),
            Arc::new(Bash),
            Arc::new(AskUserQuestion),
            Arc::new(EnterPlanMode),
            Arc::new(ExitPlanMode),
            Arc::new(Agent),
            Arc::new(SendMessage),
            Arc::new(TaskCreate),
            Arc::new(TaskUpdate),
            Arc::new(TaskList),
            Arc::new(TaskGet),
            Arc::new(Skill::default()),
            Arc::new(SpawnTeammate),
            Arc::new(ReviewPlan),
            Arc::new(ReviewMerge),
            Arc::new(ShutdownTeammate),
        ];
        Self {
            tools,
            mcp: Arc::default(),
            skills: Arc::default(),
        }
    }

    /// The same tools, with `Skill` reading `skills`.
    #[must_use]
    pub fn with_skills(mut self, skills: Arc<muster_config::SkillCatalog>) -> Self {
        for tool in &mut self.tools {
            if tool.name() == Skill::NAME_STR {
                *tool = Arc::new(Skill::new(skills.clone()));
            }
        }
        self.skills = skills;
        self
    }

    /// The skills `Skill` reads: an agent is offered `Skill`, and its system prompt lists
    /// them, only when the model may call one of them.
    pub fn skills(&self) -> &muster_config::SkillCatalog {
        &self.skills
    }

    /// The same tools, with `mcp`'s servers started by every agent.
    #[must_use]
    pub fn with_mcp(mut self, mcp: crate::mcp::McpConfig) -> Self {
        self.mcp = Arc::new(mcp);
        self
    }

    /// The MCP servers agents start (none by default).
    pub fn mcp(&self) -> &crate::mcp::McpConfig {
        &self.mcp
    }

    /// The tool called `name`, if there is one.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.iter().find(|tool| tool.name() == name)
    }

    /// Every tool, in registry order.
    pub fn tools(&self) -> impl Iterator<Item = &Arc<dyn Tool>> {
        self.tools.iter()
    }

    /// Every tool's name, in registry order.
    pub fn names(&self) -> Vec<&str> {
        self.tools.iter().map(|tool| tool.name()).collect()
    }

    /// The definitions of the tools `offered` keeps, for a model request.
    pub fn definitions(&self, offered: impl Fn(&str) -> bool) -> Vec<ToolDefinition> {
        self.tools
            .iter()
            .filter(|tool| offered(tool.name()))
            .map(|tool| ToolDefinition {
                name: tool.name().to_owned(),
                description: tool.description().to_owned(),
                input_schema: tool.input_schema(),
            })
            .collect()
    }

    /// Runs a tool by name. The permission engine must have allowed the call. An unknown name
    /// is an error result, and so is a tool the agent runtime handles (the runtime dispatches
    /// those itself; see [`super::Tool::handled_by`]).
    pub async fn call(
        &self,
        name: &str,
        context: &ToolContext,
        input: serde_json::Value,
    ) -> ToolOutput {
        let Some(tool) = self.get(name) else {
            return ToolOutput::error(format!(
                "unknown tool `{name}`; the tools are: {}",
                self.names().join(", ")
            ));
        };
        tool.call(context, input).await
    }
}
