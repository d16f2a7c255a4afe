//! `Skill`: a skill's instructions, read when the model asks for them (its name and
//! description are in the system prompt; see `muster_config::skills`). Read-only: it reads the
//! skill's `SKILL.md` as it is at the call, and nothing else.

use std::sync::Arc;

use muster_config::SkillCatalog;
use muster_protocol::ToolName;
use schemars::JsonSchema;
use serde::Deserialize;

use super::TypedTool;
use super::context::ToolContext;
use super::output::ToolOutput;
use super::text::run_blocking;

/// Input of `Skill`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SkillInput {
    /// The skill's name, as the system prompt lists it (`name`, or `plugin:name`).
    pub skill: String,
    /// What the skill is applied to, if anything (passed along in the result).
    #[serde(default)]
    pub args: Option<String>,
}

/// Reads a skill's instructions.
#[derive(Debug, Clone, Default)]
pub struct Skill {
    skills: Arc<SkillCatalog>,
}

impl Skill {
    /// Its name, for the registry.
    pub(crate) const NAME_STR: &'static str = ToolName::Skill.as_str();

    /// The tool over `skills`.
    pub fn new(skills: Arc<SkillCatalog>) -> Skill {
        Skill { skills }
    }
}

impl TypedTool for Skill {
    type Input = SkillInput;
    const NAME: &'static str = ToolName::Skill.as_str();
    const DESCRIPTION: &'static str = "Reads the instructions of a skill listed under \
         \"# Skills\" in your system prompt. Call it with the skill's name when a task matches \
         its description, before you start the task, then follow what it says.";
    const READ_ONLY: bool = ToolName::Skill.is_read_only();
    const IDEMPOTENT: bool = true;

    async fn run(&self, _context: &ToolContext, input: SkillInput) -> ToolOutput {
        let skills = self.skills.clone();
        run_blocking(move || instructions(&skills, &input)).await
    }
}

/// The skill's body with where it lies (and, shown only, its `allowed-tools`).
fn instructions(skills: &SkillCatalog, input: &SkillInput) -> ToolOutput {
    let name = input.skill.trim().trim_start_matches('/');
    let Some(skill) = skills.get(name).filter(|skill| !skill.manual_only) else {
        let offered: Vec<&str> = skills.offered().map(|skill| skill.name.as_str()).collect();
        return ToolOutput::error(format!(
            "there is no skill `{name}`; the skills are: {}",
            if offered.is_empty() {
                "none".to_owned()
            } else {
                offered.join(", ")
            }
        ));
    };
    let body = match skill.body() {
        Ok(body) => body,
        Err(error) => return ToolOutput::error(format!("skill `{name}`: {error}")),
    };
    let mut text = format!(
        "Skill `{}`. Base directory for this skill: {}\n",
        skill.name,
        skill.directory().display()
    );
    if let Some(allowed) = &skill.allowed_tools {
        text.push_str(&format!(
            "(Its allowed-tools, `{allowed}`, are not applied: your own tools and permissions \
             hold.)\n"
        ));
    }
    if let Some(args) = input.args.as_deref().filter(|args| !args.trim().is_empty()) {
        text.push_str(&format!("Arguments: {args}\n"));
    }
    text.push('\n');
    text.push_str(&body);
    ToolOutput::text(text)
}
