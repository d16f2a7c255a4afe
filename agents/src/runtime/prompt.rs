//! The system prompt (the same in every mode, so it stays cached) and the per-turn mode
//! reminder (the mode section, in the newest user turn).

use std::path::Path;

use muster_config::PermissionMode;

/// What a program driving the run gave for the main agent's own prompt (Claude Code's
/// `--system-prompt` / `--append-system-prompt`): it stands for the definition's prompt only;
/// the sections muster adds (the environment, the modes, the project's instructions) and a
/// lead's team prompt stay, so the runtime's rules still reach the model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnPrompt {
    /// Replaces the definition's prompt.
    pub replace: Option<String>,
    /// Follows the definition's prompt (or its replacement).
    pub append: Option<String>,
}

impl OwnPrompt {
    /// The definition's prompt as this asks.
    pub fn apply(&self, definition_prompt: &str) -> String {
        let mut prompt = self
            .replace
            .clone()
            .unwrap_or_else(|| definition_prompt.to_owned());
        if let Some(append) = &self.append {
            prompt.push_str("\n\n");
            prompt.push_str(append.trim());
        }
        prompt
    }
}

/// The system prompt: the definition's prompt, the project's instructions, the workspace, and
/// how modes are announced. Nothing in it depends on the mode.
pub fn system_prompt(definition_prompt: &str, instructions: &str, workspace: &Path) -> String {
    let mut prompt = definition_prompt.trim().to_owned();
    prompt.push_str(&format!(
        "\n\n# Environment\nThe workspace root is {}. Relative paths are relative to it.\n\n\
         # Permission modes\nEach user turn ends with a <system-reminder> naming your current \
         permission mode (plan, default, acceptEdits, auto, dontAsk or bypassPermissions) and \
         what it allows. It is authoritative: a call the mode does not allow is refused.",
        workspace.display()
    ));
    if !instructions.trim().is_empty() {
        prompt.push_str("\n\n# Project instructions\n");
        prompt.push_str(instructions.trim());
    }
    prompt
}

/// How a read-only research subagent (the built-in `Plan`) ends its report.
pub const RESEARCH_REPORT: &str = "\n\n# Your report\nYour final answer is all the agent that \
    started you sees. End it with a section `### Critical Files for Implementation` listing the \
    3-5 files most important for implementing the change, one path per line with a few words \
    on why.";

/// The mode section for one turn.
pub fn mode_reminder(mode: PermissionMode, plan_file: Option<&Path>, subagent: bool) -> String {
    let body = match mode {
        PermissionMode::Plan if subagent => {
            "Mode: plan. You work for an agent that is planning: explore with read-only tools \
             and report; you cannot change anything."
                .to_owned()
        }
        PermissionMode::Plan => format!(
            "Mode: plan. Plan mode is active: explore the code and design the change, but do \
             not change anything — every edit and every command that changes state is refused. \
             The one file you may write is your plan file{}. Write the plan with the sections \
             ## Goal, ## Steps (numbered), ## Files (one path per line), ## Tests and ## Risks, \
             then call ExitPlanMode (with `plan`, or with no input to submit the file). For \
             read-only research you may start the Plan subagent with Agent.",
            plan_file
                .map(|p| format!(" {}", p.display()))
                .unwrap_or_default()
        ),
        PermissionMode::Default => "Mode: default. Read-only tools run; anything that changes \
             the workspace needs approval and may be refused."
            .to_owned(),
        PermissionMode::AcceptEdits => "Mode: acceptEdits. File edits inside the workspace \
             are allowed; other changes need approval."
            .to_owned(),
        PermissionMode::Auto => "Mode: auto. File edits inside the workspace are allowed; \
             what would need approval is refused."
            .to_owned(),
        PermissionMode::DontAsk => {
            "Mode: dontAsk. Only read-only work is allowed; nothing is asked.".to_owned()
        }
        PermissionMode::BypassPermissions => "Mode: bypassPermissions. Everything is allowed \
             except deny rules, path limits and known-dangerous commands."
            .to_owned(),
    };
    format!("<system-reminder>\n{body}\n</system-reminder>")
}
