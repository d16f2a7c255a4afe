//! Tool names as settings and definitions spell them; what each tool is and may do lives in
//! [`muster_protocol::ToolName`].

use muster_protocol::{ALL_TOOLS, ToolName};

/// Every tool name muster knows, in registry order.
pub fn known_tool_names() -> impl Iterator<Item = &'static str> + Clone {
    ALL_TOOLS.into_iter().map(ToolName::as_str)
}

/// The standard tools: every known tool but the team tools. A definition without `tools` gets
/// these.
pub fn standard_tools() -> Vec<&'static str> {
    ToolName::standard().map(ToolName::as_str).collect()
}

/// Whether `name` is exactly one of the known tool names.
pub fn is_known_tool(name: &str) -> bool {
    ToolName::parse(name).is_some()
}

/// The muster name for a tool name, mapping aliases (`Task` is `Agent`); `None` when unknown.
pub fn canonical_tool_name(name: &str) -> Option<&'static str> {
    ToolName::canonical(name).map(ToolName::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_is_an_alias_of_agent_and_unknown_names_are_none() {
        assert_eq!(canonical_tool_name("Task"), Some("Agent"));
        assert_eq!(canonical_tool_name("Bash"), Some("Bash"));
        assert_eq!(canonical_tool_name("WebFetch"), None);
        assert_eq!(known_tool_names().count(), 23);
    }
}
