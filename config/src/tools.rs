//! The names of the tools muster offers (DESIGN.md), in one list used for validation.

/// Every tool name muster knows. The tools issue asserts its registry equals this list.
pub const KNOWN_TOOLS: &[&str] = &[
    "Read",
    "Write",
    "Edit",
    "MultiEdit",
    "NotebookEdit",
    "Glob",
    "Grep",
    "LS",
    "Bash",
    "AskUserQuestion",
    "EnterPlanMode",
    "ExitPlanMode",
    "Agent",
    "SendMessage",
    "TaskCreate",
    "TaskUpdate",
    "TaskList",
    "TaskGet",
    "SpawnTeammate",
    "ReviewPlan",
    "ReviewMerge",
    "ShutdownTeammate",
];

/// Tools only a lead uses to run its team.
pub const TEAM_TOOLS: &[&str] = &[
    "SpawnTeammate",
    "ReviewPlan",
    "ReviewMerge",
    "ShutdownTeammate",
];

/// The standard tools: every known tool but the team tools. A definition without `tools` gets
/// these.
pub fn standard_tools() -> Vec<&'static str> {
    KNOWN_TOOLS
        .iter()
        .copied()
        .filter(|tool| !TEAM_TOOLS.contains(tool))
        .collect()
}

/// Tools whose rule pattern is a path glob (`Edit(src/**)`).
pub const PATH_TOOLS: &[&str] = &[
    "Read",
    "Write",
    "Edit",
    "MultiEdit",
    "NotebookEdit",
    "Glob",
    "Grep",
    "LS",
];

/// Tools that change files; an `Edit(...)` rule applies to each of them.
pub const EDIT_TOOLS: &[&str] = &["Write", "Edit", "MultiEdit", "NotebookEdit"];

/// Tools that read files; a `Read(...)` rule applies to each of them.
pub const READ_TOOLS: &[&str] = &["Read", "Glob", "Grep", "LS"];

/// Old names that Claude Code files use for a muster tool.
const TOOL_ALIASES: &[(&str, &str)] = &[("Task", "Agent")];

/// Whether `name` is exactly one of [`KNOWN_TOOLS`].
pub fn is_known_tool(name: &str) -> bool {
    KNOWN_TOOLS.contains(&name)
}

/// The muster name for a tool name, mapping aliases (`Task` is `Agent`); `None` when unknown.
pub fn canonical_tool_name(name: &str) -> Option<&'static str> {
    if let Some(known) = KNOWN_TOOLS.iter().find(|known| **known == name) {
        return Some(known);
    }
    TOOL_ALIASES
        .iter()
        .find(|(alias, _)| *alias == name)
        .map(|(_, target)| *target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_is_an_alias_of_agent_and_unknown_names_are_none() {
        assert_eq!(canonical_tool_name("Task"), Some("Agent"));
        assert_eq!(canonical_tool_name("Bash"), Some("Bash"));
        assert_eq!(canonical_tool_name("WebFetch"), None);
        assert_eq!(KNOWN_TOOLS.len(), 22);
    }
}
