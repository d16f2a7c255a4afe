//! The names of muster's own tools (Claude Code's names) and what each may do; the permission
//! engine, the registry, rule parsing and every printer ask here instead of keeping lists.

/// Declares the tools once: the enum, [`ALL_TOOLS`] in registry order, and each spelling.
macro_rules! tools {
    ($($tool:ident),+ $(,)?) => {
        /// One of muster's own tools. MCP tools (`mcp__server__tool`) are not `ToolName`s.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ToolName {
            $($tool),+
        }

        /// Every tool, in registry order.
        pub const ALL_TOOLS: [ToolName; 23] = [$(ToolName::$tool),+];

        impl ToolName {
            /// The name the model calls it by.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(ToolName::$tool => stringify!($tool)),+
                }
            }
        }
    };
}

tools!(
    Read,
    Write,
    Edit,
    MultiEdit,
    NotebookEdit,
    Glob,
    Grep,
    LS,
    Bash,
    AskUserQuestion,
    EnterPlanMode,
    ExitPlanMode,
    Agent,
    SendMessage,
    TaskCreate,
    TaskUpdate,
    TaskList,
    TaskGet,
    Skill,
    SpawnTeammate,
    ReviewPlan,
    ReviewMerge,
    ShutdownTeammate,
);

/// Old names Claude Code files use for a muster tool.
const ALIASES: [(&str, ToolName); 1] = [("Task", ToolName::Agent)];

impl ToolName {
    /// Exactly one of the names (no alias); `None` for anything else.
    pub fn parse(name: &str) -> Option<ToolName> {
        ALL_TOOLS.into_iter().find(|tool| tool.as_str() == name)
    }

    /// The tool a name means, mapping Claude Code's old names (`Task` is `Agent`).
    pub fn canonical(name: &str) -> Option<ToolName> {
        ToolName::parse(name).or_else(|| {
            ALIASES
                .into_iter()
                .find_map(|(alias, tool)| (alias == name).then_some(tool))
        })
    }

    /// The call changes neither the workspace nor any shared state.
    pub const fn is_read_only(self) -> bool {
        use ToolName::*;
        matches!(
            self,
            Read | Glob | Grep | LS | EnterPlanMode | TaskList | TaskGet | Skill
        )
    }

    /// Only a lead uses it, to run its team; not among the standard tools.
    pub const fn is_team_only(self) -> bool {
        use ToolName::*;
        matches!(
            self,
            SpawnTeammate | ReviewPlan | ReviewMerge | ShutdownTeammate
        )
    }

    /// A subagent may never call it: plan mode, questions, spawning, and the team tools (mail,
    /// the task board, the team): a subagent reports only to its parent.
    pub const fn is_forbidden_to_subagents(self) -> bool {
        use ToolName::*;
        self.is_team_only()
            || matches!(
                self,
                Agent
                    | EnterPlanMode
                    | ExitPlanMode
                    | AskUserQuestion
                    | SendMessage
                    | TaskCreate
                    | TaskUpdate
                    | TaskList
                    | TaskGet
            )
    }

    /// A coordination tool plan mode allows: mail and the board are coordination state, not
    /// the workspace.
    pub const fn is_coordination(self) -> bool {
        use ToolName::*;
        matches!(
            self,
            AskUserQuestion | SendMessage | TaskCreate | TaskUpdate | TaskList | TaskGet
        )
    }

    /// Its calls run in the shell sandbox.
    pub const fn needs_shell_sandbox(self) -> bool {
        matches!(self, ToolName::Bash)
    }

    /// Its rule pattern is a command (`Bash(cargo test:*)`).
    pub const fn takes_command_rules(self) -> bool {
        matches!(self, ToolName::Bash)
    }

    /// Its rule pattern is a path glob (`Edit(src/**)`).
    pub const fn takes_path_rules(self) -> bool {
        self.edits_files() || self.reads_files()
    }

    /// It changes files; an `Edit(...)` rule applies to it.
    pub const fn edits_files(self) -> bool {
        use ToolName::*;
        matches!(self, Write | Edit | MultiEdit | NotebookEdit)
    }

    /// It reads files; a `Read(...)` rule applies to it.
    pub const fn reads_files(self) -> bool {
        use ToolName::*;
        matches!(self, Read | Glob | Grep | LS)
    }

    /// Plan mode lets an agent use it on its own plan file.
    pub const fn writes_plan_file(self) -> bool {
        use ToolName::*;
        matches!(self, Write | Edit | MultiEdit)
    }

    /// The standard tools: every tool but the team tools. A definition without `tools` gets
    /// these.
    pub fn standard() -> impl Iterator<Item = ToolName> {
        ALL_TOOLS.into_iter().filter(|tool| !tool.is_team_only())
    }
}

crate::spelled_by_as_str!(ToolName);

#[cfg(test)]
mod tests {
    use super::*;

    /// What each tool may do, as one table: read-only, team-only, forbidden to subagents,
    /// coordination, shell sandbox, path rules, edits files, writes the plan file.
    #[test]
    fn each_tools_capabilities() {
        use ToolName::*;
        #[rustfmt::skip]
        let table: [(ToolName, [bool; 8]); 23] = [
            (Read,             [true,  false, false, false, false, true,  false, false]),
            (Write,            [false, false, false, false, false, true,  true,  true ]),
            (Edit,             [false, false, false, false, false, true,  true,  true ]),
            (MultiEdit,        [false, false, false, false, false, true,  true,  true ]),
            (NotebookEdit,     [false, false, false, false, false, true,  true,  false]),
            (Glob,             [true,  false, false, false, false, true,  false, false]),
            (Grep,             [true,  false, false, false, false, true,  false, false]),
            (LS,               [true,  false, false, false, false, true,  false, false]),
            (Bash,             [false, false, false, false, true,  false, false, false]),
            (AskUserQuestion,  [false, false, true,  true,  false, false, false, false]),
            (EnterPlanMode,    [true,  false, true,  false, false, false, false, false]),
            (ExitPlanMode,     [false, false, true,  false, false, false, false, false]),
            (Agent,            [false, false, true,  false, false, false, false, false]),
            (SendMessage,      [false, false, true,  true,  false, false, false, false]),
            (TaskCreate,       [false, false, true,  true,  false, false, false, false]),
            (TaskUpdate,       [false, false, true,  true,  false, false, false, false]),
            (TaskList,         [true,  false, true,  true,  false, false, false, false]),
            (TaskGet,          [true,  false, true,  true,  false, false, false, false]),
            (Skill,            [true,  false, false, false, false, false, false, false]),
            (SpawnTeammate,    [false, true,  true,  false, false, false, false, false]),
            (ReviewPlan,       [false, true,  true,  false, false, false, false, false]),
            (ReviewMerge,      [false, true,  true,  false, false, false, false, false]),
            (ShutdownTeammate, [false, true,  true,  false, false, false, false, false]),
        ];
        for (tool, expected) in table {
            let actual = [
                tool.is_read_only(),
                tool.is_team_only(),
                tool.is_forbidden_to_subagents(),
                tool.is_coordination(),
                tool.needs_shell_sandbox(),
                tool.takes_path_rules(),
                tool.edits_files(),
                tool.writes_plan_file(),
            ];
            assert_eq!(actual, expected, "{tool}");
            assert_eq!(ToolName::parse(tool.as_str()), Some(tool));
            assert_eq!(tool.takes_command_rules(), tool == ToolName::Bash, "{tool}");
        }
        assert_eq!(table.map(|(tool, _)| tool), ALL_TOOLS);
    }

    #[test]
    fn task_is_an_alias_of_agent_and_unknown_names_are_none() {
        assert_eq!(ToolName::canonical("Task"), Some(ToolName::Agent));
        assert_eq!(ToolName::parse("Task"), None);
        assert_eq!(ToolName::canonical("WebFetch"), None);
        assert_eq!(ToolName::standard().count(), 19);
    }
}
