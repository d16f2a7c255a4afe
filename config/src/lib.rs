//! `muster-config`: settings files and their layering, agent and team definitions, policy
//! files, the list of known tool names, and validation with precise errors.

pub mod agents;
pub mod commands;
pub mod diagnostic;
pub mod endpoint;
mod front_matter;
pub mod hooks;
pub mod ids;
pub mod instructions;
pub mod mcp;
pub mod mode;
mod named;
pub mod origin;
pub mod plugins;
pub mod policy;
pub mod project;
pub mod protected;
pub mod rule;
pub mod settings;
pub mod skills;
pub mod store_url;
pub mod team;
mod toml_source;
pub mod tools;
pub mod trust;
mod yaml;

pub use agents::{AgentCatalog, AgentDefinition, AgentDir, DefinitionSource, ModelChoice};
pub use commands::{CommandCatalog, SlashCommand};
pub use diagnostic::{ConfigError, Diagnostic, Loaded, Position};
pub use endpoint::AgentEndpoint;
pub use instructions::{InstructionFile, InstructionScope, ProjectInstructions};
pub use mcp::{
    McpEnvironment, McpScope, McpServerConfig, McpServerStatus, McpServers, McpTransport,
};
pub use mode::PermissionMode;
pub use muster_protocol::Responder;
pub use muster_protocol::{ALL_TOOLS, ToolName};
pub use origin::{Layer, Origin, Sourced};
pub use policy::{PlanVerdict, Policy, PolicyAnswer, RuleCheck};
pub use rule::{PermissionRule, PermissionRules, RuleBehavior, RuleSpecifier, RuleSubject};
pub use settings::{CliOverrides, Settings, SettingsInputs};
pub use skills::{Skill, SkillCatalog};
pub use team::{Isolation, Placement, SpawnRules, TeamFile, TeammateSpec};
pub use toml_source::Located;
pub use trust::TrustDecision;
