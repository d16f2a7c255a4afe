//! The permission engine: one function decides every tool call (allow, ask or deny, with a
//! reason a person and a model can act on). DESIGN.md "Agents and permission modes" is the
//! specification; tools never check the mode themselves.
//!
//! [`PermissionEngine::decide`] takes the agent's [`PermissionContext`], the tool's name and its
//! input, and answers a [`Decision`]. The order:
//!
//! 1. **Deny rules** (`deny` in the settings) — in every mode. `Read(…)` rules also cover the
//!    trees `Grep` searches.
//! 2. **Who may call it** — an unknown tool, a tool the agent's definition does not list, a
//!    lead-only tool (`SpawnTeammate`, `ReviewPlan`, `ShutdownTeammate`) called by anyone else,
//!    and for subagents `Agent`, `EnterPlanMode`, `ExitPlanMode`, `AskUserQuestion` and the
//!    team tools (mail, the task board and the team: a subagent reports only to its parent).
//! 3. **The mode** — the agent's effective mode: a subagent's is its parent's current mode
//!    capped by its definition's `permissionMode`; `auto` with a closed gate is `default`.
//!    Plan mode, and every mode for a `read_only` definition, allows exactly DESIGN.md's list;
//!    everything else in plan mode is denied for good.
//! 4. **The tool's own check** — every path from [`Tool::accessed_paths`] resolved through the
//!    [`Workspace`] (confinement, `.git/` and `.muster/`, the agent's own plan file); for `Bash`
//!    the read-only classifier with [`RulesReadCheck`] (workspace confinement plus `Read` deny
//!    rules) and [`known_dangerous`]. A file tool writing a protected file
//!    ([`ProtectedFiles`]: `.claude/settings*.json`, `.mcp.json`, …) then asks, in every mode.
//! 5. **Ask rules** (in every mode, `bypassPermissions` included, as in Claude Code; this
//!    amends DESIGN's mode table), 6. **allow rules** (an ask becomes an allow; never in plan
//!    mode or for a `read_only` agent), then the agent's **plan grants** ([`grants`], the same way, never for
//!    a known-dangerous command), 7. **the mode's default** for what would ask: `default` and
//!    `acceptEdits` ask, `dontAsk` denies, `auto` denies and reports an auto denial.
//!
//! Interpretations of DESIGN.md, stated once: what plan mode allows (coordination tools, the
//! agent's own plan file, `Agent` with a `read_only` definition) every higher mode allows too,
//! and a lead's team tools are allowed outside plan mode (they change the mailbox and the
//! roster, not the workspace). Path limits deny in every mode, `bypassPermissions` included:
//! the tool would refuse the path anyway, so no approval could help; only known-dangerous
//! commands ask there. In `auto`, a known-dangerous command is denied and counted as an auto
//! denial. The classifier's path check applies to `Bash` in every mode, so outside plan mode
//! `cat ~/.aws/credentials` is not read-only and asks.

pub mod grants;
mod paths;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use muster_config::rule::{PermissionRule, RuleSpecifier, SourcedRule};
use muster_config::settings::AutoGate;
use muster_config::{
    AgentCatalog, AgentDefinition, PermissionMode, PermissionRules, RuleBehavior, RuleSubject,
};
use muster_protocol::ToolName;
use serde::Serialize;
use serde_json::Value;

pub use grants::PlanGrants;
pub use paths::{MAX_TREE_ENTRIES, RulesReadCheck};

use crate::mcp::McpToolFacts;
use crate::shell::{ShellVerdict, classify, known_dangerous};
use crate::tools::{PathAccess, PathUse, Tool, ToolRegistry, Workspace};
use muster_config::mcp::McpPattern;
use muster_config::protected::ProtectedFiles;
use paths::{PathForm, lexical_absolute, rule_matches_path};

/// What kind of agent makes the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentKind {
    /// The main agent of a team run.
    Lead,
    /// A member of the team the lead spawned.
    Teammate,
    /// A short-lived helper started with `Agent`; reports only to its parent.
    Subagent,
}

impl AgentKind {
    /// Every kind.
    pub const ALL: [AgentKind; 3] = [AgentKind::Lead, AgentKind::Teammate, AgentKind::Subagent];

    /// The name users write.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentKind::Lead => "lead",
            AgentKind::Teammate => "teammate",
            AgentKind::Subagent => "subagent",
        }
    }
}

impl fmt::Display for AgentKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that names no agent kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown agent kind `{found}`; expected one of lead, teammate, subagent")]
pub struct UnknownAgentKind {
    /// What was given.
    pub found: String,
}

impl FromStr for AgentKind {
    type Err = UnknownAgentKind;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        AgentKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == text)
            .ok_or_else(|| UnknownAgentKind {
                found: text.to_string(),
            })
    }
}

/// The engine's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Run the call.
    Allow,
    /// Ask whoever approves for the agent; with no one to ask, it is a deny.
    Ask,
    /// Do not run it; the reason goes back to the model as an error result.
    Deny,
}

impl Verdict {
    /// `allow`, `ask` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Ask => "ask",
            Verdict::Deny => "deny",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a decision means for the run's auto gate (DESIGN.md: each auto denial increments a
/// per-run counter in the same `CommitTurn`; an allowed auto decision resets it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AutoGateEffect {
    /// The agent is not in an effective `auto` mode, or the decision does not count.
    Unaffected,
    /// An auto denial: count it against the gate.
    CountDenial,
    /// An allowed auto decision: reset the counter.
    ResetCount,
}

/// The engine's decision on one call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// Allow, ask or deny.
    pub verdict: Verdict,
    /// Why, for a person and for the model.
    pub reason: String,
    /// The mode the call was decided in (after the subagent cap and the auto gate).
    pub effective_mode: PermissionMode,
    /// What the decision does to the run's auto gate counter.
    pub auto_gate: AutoGateEffect,
    /// The call is `Bash` allowed because the classifier proved it read-only: it must run with
    /// [`crate::shell::read_only_git_env`] set and the variables
    /// [`crate::shell::remove_from_read_only_env`] names removed (the runtime's dispatch does this).
    pub read_only_shell: bool,
    /// For read-only `Bash`: the command text to run instead of the model's, when the
    /// classifier added flags that keep it read-only (`git diff --no-ext-diff`).
    pub shell_run_as: Option<String>,
}

impl Decision {
    fn new(verdict: Verdict, reason: impl Into<String>, mode: PermissionMode) -> Decision {
        Decision {
            verdict,
            reason: reason.into(),
            effective_mode: mode,
            auto_gate: AutoGateEffect::Unaffected,
            read_only_shell: false,
            shell_run_as: None,
        }
    }

    /// Is the call allowed?
    pub fn is_allowed(&self) -> bool {
        self.verdict == Verdict::Allow
    }
}

/// What the engine needs from the agent's definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefinitionPermissions {
    /// The definition's name (for reasons).
    pub name: String,
    /// `read_only: true`: plan-mode rules in every mode, without `ExitPlanMode` or a plan file.
    pub read_only: bool,
    /// The tools the agent is offered; `None` allows every tool.
    pub tools: Option<Vec<&'static str>>,
    /// The definition's `permissionMode`: a subagent's mode is capped by it.
    pub permission_mode: Option<PermissionMode>,
    /// `tools: Agent(x, y)`: the only definitions its `Agent` may start (`None`: any).
    pub agent_types: Option<Vec<String>>,
    /// The `mcp__…` entries of a `tools` list; `None` (no list, or `*`) offers every MCP
    /// tool.
    pub mcp_tools: Option<Vec<McpPattern>>,
    /// The `mcp__…` entries of `disallowedTools`.
    pub disallowed_mcp_tools: Vec<McpPattern>,
}

impl DefinitionPermissions {
    /// No restriction from a definition: every tool, not read-only, no mode cap.
    pub fn unrestricted(name: impl Into<String>) -> DefinitionPermissions {
        DefinitionPermissions {
            name: name.into(),
            read_only: false,
            tools: None,
            permission_mode: None,
            agent_types: None,
            mcp_tools: None,
            disallowed_mcp_tools: Vec::new(),
        }
    }

    /// Whether the definition offers tool `tool` of MCP server `server`.
    pub fn offers_mcp_tool(&self, server: &str, tool: &str) -> bool {
        let listed = self
            .mcp_tools
            .as_ref()
            .is_none_or(|patterns| patterns.iter().any(|p| p.matches(server, tool)));
        listed
            && !self
                .disallowed_mcp_tools
                .iter()
                .any(|pattern| pattern.matches(server, tool))
    }
}

impl From<&AgentDefinition> for DefinitionPermissions {
    fn from(definition: &AgentDefinition) -> DefinitionPermissions {
        DefinitionPermissions {
            name: definition.name.clone(),
            read_only: definition.read_only,
            tools: Some(definition.effective_tools()),
            permission_mode: definition.permission_mode,
            agent_types: definition.agent_types.clone(),
            mcp_tools: definition
                .tools
                .is_some()
                .then(|| definition.mcp_tools.clone()),
            disallowed_mcp_tools: definition.disallowed_mcp_tools.clone(),
        }
    }
}

/// The agent context the engine decides a call in.
#[derive(Debug, Clone)]
pub struct PermissionContext<'a> {
    /// Lead, teammate or subagent.
    pub kind: AgentKind,
    /// Whether the agent is the run's main agent (its plan file has no `-agent-{id}` suffix).
    pub is_main: bool,
    /// The agent's current mode (for a subagent, see `parent_mode`).
    pub mode: PermissionMode,
    /// The mode leaving plan mode restores.
    pub pre_plan_mode: Option<PermissionMode>,
    /// The agent's definition: `read_only`, tools, `permissionMode`.
    pub definition: DefinitionPermissions,
    /// A subagent's parent's current mode; `None` uses `mode`.
    pub parent_mode: Option<PermissionMode>,
    /// The agent's own plan file (relative to the workspace root or absolute); subagents and
    /// `read_only` agents have none, whatever is set here.
    pub plan_file: Option<PathBuf>,
    /// The workspace file tools are confined to.
    pub workspace: &'a Workspace,
    /// The allow, ask and deny rules from the settings.
    pub rules: &'a PermissionRules,
    /// Agent definitions, for `Agent` calls (only `read_only` ones in plan mode).
    pub catalog: &'a AgentCatalog,
    /// The run's auto gate; closed makes `auto` behave as `default`.
    pub auto_gate: AutoGate,
    /// The home directory, for `~/` rule patterns; `None` matches none of them.
    pub home_dir: Option<&'a Path>,
    /// The run's plans directory (resolved): a subagent writes nothing there, wherever it
    /// lies; `None` when the caller has none.
    pub plans_dir: Option<PathBuf>,
    /// The MCP tool being decided, when the call is of one (the runtime and `muster check`
    /// set it from the agent's tool list); an `mcp__…` call without it is denied.
    pub mcp_tool: Option<McpToolFacts>,
    /// The agent's plan-scoped grants (its approved plan's rules, until the plan's
    /// verification report): allow rules for this agent only, checked after the settings'
    /// allow rules and never for a known-dangerous command.
    pub grants: Option<&'a PlanGrants>,
    /// The files a file tool may write only with approval, in every mode (matched relative to
    /// the workspace root, so in each teammate's worktree too).
    pub protected: &'a ProtectedFiles,
}

impl<'a> PermissionContext<'a> {
    /// A context with no definition restrictions, no plan file, an open auto gate; the lead is
    /// the main agent.
    pub fn new(
        kind: AgentKind,
        mode: PermissionMode,
        workspace: &'a Workspace,
        rules: &'a PermissionRules,
        catalog: &'a AgentCatalog,
    ) -> PermissionContext<'a> {
        PermissionContext {
            kind,
            is_main: kind == AgentKind::Lead,
            mode,
            pre_plan_mode: None,
            definition: DefinitionPermissions::unrestricted(kind.as_str()),
            parent_mode: None,
            plan_file: None,
            workspace,
            rules,
            catalog,
            auto_gate: AutoGate::Open,
            home_dir: None,
            plans_dir: None,
            mcp_tool: None,
            grants: None,
            protected: ProtectedFiles::standard_ref(),
        }
    }

    /// The same context with `definition`'s restrictions.
    #[must_use]
    pub fn with_definition(mut self, definition: &AgentDefinition) -> PermissionContext<'a> {
        self.definition = DefinitionPermissions::from(definition);
        self
    }

    /// The mode calls are decided in, and a note when it differs from the agent's own.
    pub fn effective_mode(&self) -> (PermissionMode, Option<String>) {
        let mut mode = self.mode;
        let mut notes = Vec::new();
        if self.kind == AgentKind::Subagent {
            mode = self.parent_mode.unwrap_or(self.mode);
            if let Some(cap) = self.definition.permission_mode
                && cap < mode
            {
                notes.push(format!(
                    "the parent's mode `{mode}` is capped at `{cap}` by definition `{}`",
                    self.definition.name
                ));
                mode = cap;
            }
        }
        if mode == PermissionMode::Auto && self.auto_gate == AutoGate::Closed {
            notes.push("the run's auto gate is closed, so `auto` behaves as `default`".to_string());
            mode = PermissionMode::Default;
        }
        let note = (!notes.is_empty()).then(|| notes.join("; "));
        (mode, note)
    }

    /// The plan file this agent may write, resolved; `None` for subagents, `read_only` agents
    /// and an unresolvable path.
    fn own_plan_file(&self) -> Option<PathBuf> {
        if self.kind == AgentKind::Subagent || self.definition.read_only {
            return None;
        }
        let plan_file = self.plan_file.as_deref()?;
        self.workspace.resolve_plan_file(plan_file).ok()
    }

    fn is_own_plan_file(&self, own: Option<&Path>, requested: &str) -> bool {
        own.is_some_and(|own| {
            self.workspace
                .resolve_plan_file(Path::new(requested))
                .is_ok_and(|resolved| resolved == own)
        })
    }
}

/// The one permission engine. Holds the tool registry (read-only flags and the paths each
/// call touches); everything about the agent comes in the [`PermissionContext`].
#[derive(Debug, Clone, Default)]
pub struct PermissionEngine {
    registry: ToolRegistry,
}

/// What the mode step says about a call before rules adjust it.
enum ModeOutcome {
    /// Decided: no rule changes it (plan-mode denials, known-dangerous commands).
    Final(Verdict, String, AutoGateEffect),
    /// Allowed by the mode; an ask rule can still make it ask.
    Allow {
        reason: String,
        read_only_shell: bool,
        shell_run_as: Option<String>,
    },
    /// Would ask; an allow rule can allow it, else the mode's default applies.
    Approval(String),
}

/// What a call is about, for matching rules.
struct CallSubjects {
    /// Every path the call touches, with its forms (empty forms when unresolvable).
    paths: Vec<(PathAccess, Vec<PathForm>)>,
    /// The Bash command.
    command: Option<String>,
    /// Names for `Name(…)` rules.
    names: Vec<String>,
}

impl PermissionEngine {
    /// An engine over `registry`.
    pub fn new(registry: ToolRegistry) -> PermissionEngine {
        PermissionEngine { registry }
    }

    /// An engine over [`ToolRegistry::standard`].
    pub fn standard() -> PermissionEngine {
        PermissionEngine::new(ToolRegistry::standard())
    }

    /// The registry the engine reads tool flags from.
    pub fn registry(&self) -> &ToolRegistry {
        &self.registry
    }

    /// Decides one call of `tool` with `input` for the agent in `context`. Never panics and
    /// never runs anything.
    pub fn decide(&self, context: &PermissionContext<'_>, tool: &str, input: &Value) -> Decision {
        let (mode, note) = context.effective_mode();
        let mut decision = self.decide_in(context, mode, tool, input);
        if let Some(note) = note {
            decision.reason = format!("{} ({note})", decision.reason);
        }
        decision
    }

    fn decide_in(
        &self,
        context: &PermissionContext<'_>,
        mode: PermissionMode,
        tool: &str,
        input: &Value,
    ) -> Decision {
        let deny = |reason: String| Decision::new(Verdict::Deny, reason, mode);
        if let Some(facts) = &context.mcp_tool {
            return self.decide_mcp(context, mode, facts);
        }
        if let Some((server, _)) = muster_config::mcp::split_tool_name(tool) {
            return deny(format!(
                "MCP tool `{tool}` is not available: server `{server}` is not enabled, did not \
                 start or does not list it (see `muster config show`)"
            ));
        }
        let Some(name) = ToolName::canonical(tool) else {
            return deny(format!(
                "unknown tool `{tool}`; the tools are: {}",
                self.registry.names().join(", ")
            ));
        };
        let Some(implementation) = self.registry.get(name.as_str()) else {
            return deny(format!(
                "tool `{name}` is not offered; the tools are: {}",
                self.registry.names().join(", ")
            ));
        };
        let implementation: &dyn Tool = implementation.as_ref();
        let subjects = match self.subjects(context, name, implementation, input) {
            Ok(subjects) => subjects,
            Err(reason) => return deny(reason),
        };

        // 1. Deny rules, in every mode.
        if let Some(reason) = self.denied_by_rule(context, name.as_str(), &subjects) {
            return deny(reason);
        }
        // 2. Who may call the tool at all, and a subagent never writes a plan file.
        if let Some(reason) = who_may_call(context, name) {
            return deny(reason);
        }
        if context.kind == AgentKind::Subagent && writes_into_plans_dir(context, &subjects) {
            return deny("subagents never write plan files".to_owned());
        }
        // 3 and 4. The mode, then the tool's own check.
        let plan_rules = mode == PermissionMode::Plan || context.definition.read_only;
        let own_plan_file = context.own_plan_file();
        let outcome = if plan_rules {
            self.plan_rules(
                context,
                name,
                implementation,
                &subjects,
                own_plan_file.as_deref(),
            )
        } else {
            self.mode_rules(
                context,
                mode,
                name,
                implementation,
                &subjects,
                own_plan_file.as_deref(),
            )
        };
        let outcome = match outcome {
            ModeOutcome::Final(verdict, reason, auto_gate) => {
                let mut decision = Decision::new(verdict, reason, mode);
                decision.auto_gate = auto_gate;
                return decision;
            }
            other => other,
        };
        if let Some(reason) = path_limits(context, own_plan_file.as_deref(), &subjects) {
            return deny(reason);
        }
        // Protected files ask in every mode, before any allow rule or grant could allow them.
        if name.edits_files()
            && let Some(reason) = protected_write(context, &subjects)
        {
            return would_ask(mode, reason);
        }
        // 5. Ask rules, in every mode: `bypassPermissions` included, as in Claude Code.
        if let Some(rule) = self.rule_matching(RuleBehavior::Ask, context, name.as_str(), &subjects)
        {
            let reason = format!(
                "`{name}` matches the ask rule `{}` (from {})",
                rule.value, rule.origin
            );
            return would_ask(mode, reason);
        }
        match outcome {
            ModeOutcome::Allow {
                reason,
                read_only_shell,
                shell_run_as,
            } => {
                let mut decision = Decision::new(Verdict::Allow, reason, mode);
                decision.read_only_shell = read_only_shell;
                decision.shell_run_as = shell_run_as;
                if mode == PermissionMode::Auto {
                    decision.auto_gate = AutoGateEffect::ResetCount;
                }
                decision
            }
            ModeOutcome::Approval(reason) => {
                // 6. Allow rules turn an ask into an allow (never reached in plan rules).
                if let Some(rule) = self.allowed_by_rule(context, name.as_str(), &subjects) {
                    let mut decision = Decision::new(
                        Verdict::Allow,
                        format!(
                            "`{name}` is allowed by the rule `{}` (from {})",
                            rule.value, rule.origin
                        ),
                        mode,
                    );
                    if mode == PermissionMode::Auto {
                        decision.auto_gate = AutoGateEffect::ResetCount;
                    }
                    return decision;
                }
                // 6b. The plan's grants, the same way, for this agent only.
                let reason = match self.granted_by_plan(context, name.as_str(), &subjects) {
                    Ok(Some(granted)) => {
                        let mut decision = Decision::new(Verdict::Allow, granted, mode);
                        if mode == PermissionMode::Auto {
                            decision.auto_gate = AutoGateEffect::ResetCount;
                        }
                        return decision;
                    }
                    Ok(None) => reason,
                    Err(why_not) => format!("{reason}; {why_not}"),
                };
                // 7. The mode's default.
                would_ask(mode, reason)
            }
            ModeOutcome::Final(verdict, reason, auto_gate) => {
                let mut decision = Decision::new(verdict, reason, mode);
                decision.auto_gate = auto_gate;
                decision
            }
        }
    }

    /// An MCP tool, by DESIGN's mode table: deny rules always; plan mode and read-only agents
    /// allow only tools marked `readOnlyHint: true` and `openWorldHint: false` by their server,
    /// or named in the user's `[mcp] read_only_tools`; ask rules in every other
    /// mode; `default`, `acceptEdits` (and `auto`) allow those and ask for the rest (`dontAsk`
    /// and `auto` deny what would ask); `bypassPermissions` allows the rest.
    fn decide_mcp(
        &self,
        context: &PermissionContext<'_>,
        mode: PermissionMode,
        facts: &McpToolFacts,
    ) -> Decision {
        let name = facts.name.as_str();
        let deny = |reason: String| Decision::new(Verdict::Deny, reason, mode);
        let subjects = CallSubjects {
            paths: Vec::new(),
            command: None,
            names: Vec::new(),
        };
        if let Some(reason) = self.denied_by_rule(context, name, &subjects) {
            return deny(reason);
        }
        if !context
            .definition
            .offers_mcp_tool(&facts.server, &facts.tool)
        {
            return deny(format!(
                "`{name}` is not among the tools of agent definition `{}`",
                context.definition.name
            ));
        }
        let trusted = facts.is_trusted_read_only();
        let read_only_why = || {
            if facts.user_read_only {
                "the user declares it read-only (`[mcp] read_only_tools`)".to_owned()
            } else {
                format!(
                    "its server `{}` marks it `readOnlyHint: true` and `openWorldHint: false`",
                    facts.server
                )
            }
        };
        if mode == PermissionMode::Plan || context.definition.read_only {
            let who = if context.definition.read_only {
                format!("read-only agent `{}`", context.definition.name)
            } else {
                "plan mode".to_owned()
            };
            return if trusted {
                Decision::new(
                    Verdict::Allow,
                    format!(
                        "`{name}` is read-only: {}; {who} allows it",
                        read_only_why()
                    ),
                    mode,
                )
            } else {
                deny(format!(
                    "{who} allows only read-only MCP tools: {}",
                    facts.why_not_read_only()
                ))
            };
        }
        if let Some(rule) = self.rule_matching(RuleBehavior::Ask, context, name, &subjects) {
            return would_ask(
                mode,
                format!(
                    "`{name}` matches the ask rule `{}` (from {})",
                    rule.value, rule.origin
                ),
            );
        }
        if mode == PermissionMode::BypassPermissions {
            return Decision::new(
                Verdict::Allow,
                format!("bypassPermissions allows `{name}`"),
                mode,
            );
        }
        let allow = |reason: String| {
            let mut decision = Decision::new(Verdict::Allow, reason, mode);
            if mode == PermissionMode::Auto {
                decision.auto_gate = AutoGateEffect::ResetCount;
            }
            decision
        };
        if trusted {
            return allow(format!("`{name}` is read-only: {}", read_only_why()));
        }
        if let Some(rule) = self.allowed_by_rule(context, name, &subjects) {
            return allow(format!(
                "`{name}` is allowed by the rule `{}` (from {})",
                rule.value, rule.origin
            ));
        }
        if let Ok(Some(granted)) = self.granted_by_plan(context, name, &subjects) {
            return allow(granted);
        }
        would_ask(
            mode,
            format!(
                "`{name}` is an MCP tool that needs approval in {mode} mode: {}",
                facts.why_not_read_only()
            ),
        )
    }

    /// Gathers what rules match against: paths (with their forms), the command, names.
    fn subjects(
        &self,
        context: &PermissionContext<'_>,
        name: ToolName,
        implementation: &dyn Tool,
        input: &Value,
    ) -> Result<CallSubjects, String> {
        let accessed = implementation
            .accessed_paths(input)
            .map_err(|error| format!("invalid input for `{name}`: {error}"))?;
        let root = context.workspace.root();
        let paths = accessed
            .into_iter()
            .map(|access| {
                let requested = context.workspace.expand_home(Path::new(&access.path));
                let mut forms = Vec::new();
                if let Some(lexical) = lexical_absolute(root, &requested) {
                    forms.push(PathForm::new(lexical, root, context.home_dir));
                }
                if let Ok(resolved) = context.workspace.resolve_plan_file(&requested) {
                    forms.push(PathForm::new(resolved, root, context.home_dir));
                }
                (access, forms)
            })
            .collect();
        let text = |field: &str| input.get(field).and_then(Value::as_str).map(str::to_string);
        let command = (name.takes_command_rules())
            .then(|| text("command"))
            .flatten();
        let names = match name {
            ToolName::Agent => text("subagent_type").into_iter().collect(),
            ToolName::SendMessage => text("to").into_iter().collect(),
            ToolName::SpawnTeammate => text("agent").into_iter().chain(text("name")).collect(),
            ToolName::ShutdownTeammate => text("name").into_iter().collect(),
            ToolName::ReviewPlan | ToolName::ReviewMerge => {
                text("request_id").into_iter().collect()
            }
            _ => Vec::new(),
        };
        Ok(CallSubjects {
            paths,
            command,
            names,
        })
    }

    /// The reason a deny rule stops the call, if one does.
    fn denied_by_rule(
        &self,
        context: &PermissionContext<'_>,
        name: &str,
        subjects: &CallSubjects,
    ) -> Option<String> {
        if let Some(rule) = self.rule_matching(RuleBehavior::Deny, context, name, subjects) {
            let about = subjects
                .paths
                .iter()
                .find(|(_, forms)| rule_matches_path(&rule.value, name, forms))
                .map(|(access, _)| format!(" on `{}`", access.path))
                .unwrap_or_default();
            return Some(format!(
                "`{name}`{about} is denied by the deny rule `{}` (from {}); deny rules apply in every mode",
                rule.value, rule.origin
            ));
        }
        if ToolName::parse(name) == Some(ToolName::Grep) {
            let check = RulesReadCheck::new(context.workspace, context.rules, context.home_dir);
            for (access, _) in &subjects.paths {
                if let Ok(resolved) = context
                    .workspace
                    .resolve_read(Path::new(&access.path), None)
                    && let Err(reason) = check.denied_in_tree(&access.path, &resolved)
                {
                    return Some(format!("`Grep` is denied: {reason}"));
                }
            }
        }
        None
    }

    /// The first rule of `behavior` matching the call: any path, the command (or any part of
    /// a compound command), or any name.
    fn rule_matching<'r>(
        &self,
        behavior: RuleBehavior,
        context: &'r PermissionContext<'_>,
        name: &str,
        subjects: &CallSubjects,
    ) -> Option<&'r SourcedRule> {
        let rules = context.rules.list(behavior);
        rules.iter().find(|rule| {
            let rule_value = &rule.value;
            if !subjects.paths.is_empty() {
                return subjects
                    .paths
                    .iter()
                    .any(|(_, forms)| rule_matches_path(rule_value, name, forms));
            }
            if let Some(command) = &subjects.command {
                return rule_value.matches(name, RuleSubject::Command(command))
                    || command_parts(command)
                        .iter()
                        .any(|part| rule_value.matches(name, RuleSubject::Command(part)));
            }
            if !subjects.names.is_empty() {
                return subjects
                    .names
                    .iter()
                    .any(|subject| rule_value.matches(name, RuleSubject::Name(subject)));
            }
            rule_value.matches(name, RuleSubject::Nothing)
        })
    }

    /// An allow rule covering the whole call: every path, every part of a command with no
    /// redirection or substitution, or a name.
    fn allowed_by_rule<'r>(
        &self,
        context: &'r PermissionContext<'_>,
        name: &str,
        subjects: &CallSubjects,
    ) -> Option<&'r SourcedRule> {
        let allow = &context.rules.allow;
        let rules: Vec<&PermissionRule> = allow.iter().map(|rule| &rule.value).collect();
        covering_rule(&rules, name, subjects).map(|index| &allow[index])
    }

    /// The reason the agent's plan grants allow the call (`Ok(None)`: no grant covers it;
    /// `Err`: one would, but a grant never covers a known-dangerous command).
    fn granted_by_plan(
        &self,
        context: &PermissionContext<'_>,
        name: &str,
        subjects: &CallSubjects,
    ) -> Result<Option<String>, String> {
        let Some(grants) = context.grants else {
            return Ok(None);
        };
        let rules: Vec<&PermissionRule> = grants.rules.iter().collect();
        let Some(index) = covering_rule(&rules, name, subjects) else {
            return Ok(None);
        };
        if let Some(danger) = subjects.command.as_deref().and_then(known_dangerous) {
            return Err(format!(
                "the grant `{}` of {grants} does not cover it: known-dangerous command ({danger})",
                rules[index]
            ));
        }
        Ok(Some(format!(
            "`{name}` is allowed by the grant `{}` of {grants}",
            rules[index]
        )))
    }

    /// Plan mode, and every mode for a `read_only` definition: exactly DESIGN.md's list.
    fn plan_rules(
        &self,
        context: &PermissionContext<'_>,
        name: ToolName,
        implementation: &dyn Tool,
        subjects: &CallSubjects,
        own_plan_file: Option<&Path>,
    ) -> ModeOutcome {
        let read_only = context.definition.read_only;
        let restriction = if read_only {
            format!(
                "agent definition `{}` is read_only, which allows only what plan mode allows (without ExitPlanMode or a plan file)",
                context.definition.name
            )
        } else {
            "plan mode allows only read-only tools, read-only Bash, writing your own plan file, ExitPlanMode, AskUserQuestion, SendMessage, the task tools and Agent with a read_only definition".to_string()
        };
        let deny = |what: String| {
            ModeOutcome::Final(
                Verdict::Deny,
                format!("{what}: {restriction}"),
                AutoGateEffect::Unaffected,
            )
        };
        let allow = |reason: String| ModeOutcome::Allow {
            reason,
            read_only_shell: false,
            shell_run_as: None,
        };
        let label = if read_only {
            "read_only agent"
        } else {
            "plan mode"
        };
        if implementation.is_read_only() {
            return allow(format!("`{name}` is read-only, which {label} allows"));
        }
        match name {
            ToolName::Bash => {
                let command = subjects.command.as_deref().unwrap_or_default();
                let check = RulesReadCheck::new(context.workspace, context.rules, context.home_dir);
                match classify(command, &check) {
                    ShellVerdict::ReadOnly { run_as, .. } => ModeOutcome::Allow {
                        reason: format!(
                            "the command is read-only, which {label} allows; {}",
                            read_only_shell_note(run_as.as_deref())
                        ),
                        read_only_shell: true,
                        shell_run_as: run_as,
                    },
                    ShellVerdict::NotReadOnly { reason } => {
                        deny(format!("`Bash` command is not read-only ({reason})"))
                    }
                }
            }
            _ if name.writes_plan_file()
                &&  !subjects.paths.is_empty()
                    && subjects.paths.iter().all(|(access, _)| {
                        context.is_own_plan_file(own_plan_file, &access.path)
                    }) =>
            {
                allow(format!(
                    "`{name}` writes your own plan file, which {label} allows"
                ))
            }
            ToolName::ExitPlanMode if !read_only => {
                let restores = match context.pre_plan_mode {
                    Some(PermissionMode::Auto) if context.auto_gate == AutoGate::Closed => {
                        " (leaving restores `default`: the auto gate has closed)".to_string()
                    }
                    Some(previous) => format!(" (leaving restores `{previous}`)"),
                    None => String::new(),
                };
                allow(format!(
                    "ExitPlanMode submits your plan for approval; plan mode allows it by name{restores}"
                ))
            }
            _ if name.is_coordination() => allow(format!(
                "`{name}` changes coordination state (mail, the task board), not the workspace; {label} allows it"
            )),
            // A merge decision moves the integration branch, not the lead's own work: a
            // planning lead may still decide its teammates' merges.
            ToolName::ReviewMerge if !read_only && context.kind == AgentKind::Lead => allow(
                "`ReviewMerge` decides a teammate's merge into the integration branch, not your own work; plan mode allows it".to_string(),
            ),
            ToolName::Agent => match self.agent_definition(context, subjects) {
                Err(reason) => {
                    ModeOutcome::Final(Verdict::Deny, reason, AutoGateEffect::Unaffected)
                }
                Ok(definition) if definition.read_only => allow(format!(
                    "definition `{}` is read_only, so {label} allows starting it",
                    definition.name
                )),
                Ok(definition) => deny(format!(
                    "`Agent` with definition `{}`, which is not read_only, is denied",
                    definition.name
                )),
            },
            _ if name.edits_files() => {
                let target = subjects
                    .paths
                    .first()
                    .map(|(access, _)| access.path.as_str())
                    .unwrap_or_default();
                let plan = match (read_only, own_plan_file) {
                    (false, Some(plan)) if name.writes_plan_file() => {
                        format!(
                            "; only your own plan file `{}` may be written",
                            plan.display()
                        )
                    }
                    _ => String::new(),
                };
                deny(format!("`{name}` on `{target}` is denied{plan}"))
            }
            _ => deny(format!("`{name}` is denied")),
        }
    }

    /// Every mode but plan, for agents whose definition is not `read_only`.
    fn mode_rules(
        &self,
        context: &PermissionContext<'_>,
        mode: PermissionMode,
        name: ToolName,
        implementation: &dyn Tool,
        subjects: &CallSubjects,
        own_plan_file: Option<&Path>,
    ) -> ModeOutcome {
        let allow = |reason: String| ModeOutcome::Allow {
            reason,
            read_only_shell: false,
            shell_run_as: None,
        };
        let bypass = mode == PermissionMode::BypassPermissions;
        if implementation.is_read_only() {
            return allow(format!("`{name}` is read-only, which `{mode}` allows"));
        }
        match name {
            ToolName::Bash => {
                let command = subjects.command.as_deref().unwrap_or_default();
                let check = RulesReadCheck::new(context.workspace, context.rules, context.home_dir);
                let verdict = classify(command, &check);
                if verdict.is_read_only() {
                    return ModeOutcome::Allow {
                        reason: format!(
                            "the command is read-only, which `{mode}` allows; {}",
                            read_only_shell_note(verdict.run_as())
                        ),
                        read_only_shell: true,
                        shell_run_as: verdict.run_as().map(str::to_owned),
                    };
                }
                let not_read_only = verdict.reason().unwrap_or("not read-only").to_string();
                match (mode, known_dangerous(command)) {
                    (PermissionMode::Auto, Some(danger)) => ModeOutcome::Final(
                        Verdict::Deny,
                        format!(
                            "auto mode denies known-dangerous commands: {danger} (counted against the run's auto gate)"
                        ),
                        AutoGateEffect::CountDenial,
                    ),
                    (PermissionMode::BypassPermissions, Some(danger)) => ModeOutcome::Final(
                        Verdict::Ask,
                        format!(
                            "known-dangerous command: {danger}; bypassPermissions asks before running it"
                        ),
                        AutoGateEffect::Unaffected,
                    ),
                    (PermissionMode::BypassPermissions, None) => allow(
                        "bypassPermissions allows every command that is not known-dangerous"
                            .to_string(),
                    ),
                    _ => ModeOutcome::Approval(format!(
                        "`Bash` command is not read-only ({not_read_only}), so `{mode}` needs approval"
                    )),
                }
            }
            _ if name.edits_files() => {
                if name.writes_plan_file()
                    && !subjects.paths.is_empty()
                    && subjects
                        .paths
                        .iter()
                        .all(|(access, _)| context.is_own_plan_file(own_plan_file, &access.path))
                {
                    return allow(format!("`{name}` writes your own plan file"));
                }
                let target = subjects
                    .paths
                    .first()
                    .map(|(access, _)| access.path.as_str())
                    .unwrap_or_default();
                match mode {
                    PermissionMode::AcceptEdits
                    | PermissionMode::Auto
                    | PermissionMode::BypassPermissions => allow(format!(
                        "`{name}` on `{target}` edits a file inside the workspace, which `{mode}` allows"
                    )),
                    _ => ModeOutcome::Approval(format!(
                        "`{name}` changes `{target}`, so `{mode}` needs approval"
                    )),
                }
            }
            ToolName::ExitPlanMode => allow(
                "ExitPlanMode is allowed by name (outside plan mode there is no plan to submit)"
                    .to_string(),
            ),
            _ if name.is_coordination() => allow(format!(
                "`{name}` changes coordination state (mail, the task board), not the workspace"
            )),
            _ if name.is_team_only() => allow(format!(
                "`{name}` is the lead's own team work (the mailbox and the roster, not the workspace)"
            )),
            ToolName::Agent => match self.agent_definition(context, subjects) {
                Err(reason) => {
                    ModeOutcome::Final(Verdict::Deny, reason, AutoGateEffect::Unaffected)
                }
                Ok(definition) if definition.read_only => allow(format!(
                    "definition `{}` is read_only, so starting it is allowed",
                    definition.name
                )),
                Ok(definition) if bypass => allow(format!(
                    "bypassPermissions allows starting `{}`; its calls are decided in a mode no higher than this one",
                    definition.name
                )),
                Ok(definition) => ModeOutcome::Approval(format!(
                    "`Agent` starts definition `{}`, which is not read_only, so `{mode}` needs approval",
                    definition.name
                )),
            },
            _ if bypass => allow(format!("bypassPermissions allows `{name}`")),
            _ => ModeOutcome::Approval(format!(
                "`{name}` is not read-only, so `{mode}` needs approval"
            )),
        }
    }

    /// The definition an `Agent` call names, from the catalog.
    fn agent_definition<'c>(
        &self,
        context: &'c PermissionContext<'_>,
        subjects: &CallSubjects,
    ) -> Result<&'c AgentDefinition, String> {
        let requested = subjects
            .names
            .first()
            .map(String::as_str)
            .unwrap_or_default();
        let definition = context.catalog.get(requested).ok_or_else(|| {
            format!(
                "there is no agent definition named `{requested}`{}; the definitions are: {}",
                context.catalog.suggestion_for(requested),
                context.catalog.names().collect::<Vec<_>>().join(", ")
            )
        })?;
        // `tools: Agent(x, y)` limits which definitions this agent may start.
        if let Some(allowed) = &context.definition.agent_types
            && !allowed.iter().any(|name| name == requested)
        {
            return Err(format!(
                "agent definition `{}` may start only {} (its `tools: Agent(…)`), not `{requested}`",
                context.definition.name,
                allowed.join(", ")
            ));
        }
        Ok(definition)
    }
}

/// The index of an allow rule covering the whole call: every path, every part of a command
/// with no redirection or substitution, or a name.
fn covering_rule(rules: &[&PermissionRule], name: &str, subjects: &CallSubjects) -> Option<usize> {
    let find = |matches: &dyn Fn(&PermissionRule) -> bool| rules.iter().position(|r| matches(r));
    if !subjects.paths.is_empty() {
        let mut first = None;
        for (_, forms) in &subjects.paths {
            let index = find(&|rule| rule_matches_path(rule, name, forms))?;
            first.get_or_insert(index);
        }
        return first;
    }
    if let Some(command) = &subjects.command {
        // `Bash` or `Bash(*)` allows every command, as the user wrote; a patterned rule
        // covers only plain commands, whose every part it can see.
        if let Some(index) = find(&|rule| {
            rule.applies_to_tool(name) && matches!(rule.specifier(), RuleSpecifier::AnyCall)
        }) {
            return Some(index);
        }
        if command.contains(['`', '$', '>', '<', '(', ')', '{', '}']) {
            return None;
        }
        let mut first = None;
        for part in &command_parts(command) {
            let index = find(&|rule| rule.matches(name, RuleSubject::Command(part)))?;
            first.get_or_insert(index);
        }
        return first;
    }
    if !subjects.names.is_empty() {
        return find(&|rule| {
            subjects
                .names
                .iter()
                .any(|subject| rule.matches(name, RuleSubject::Name(subject)))
        });
    }
    find(&|rule| rule.matches(name, RuleSubject::Nothing))
}

/// Whether a call writes into the run's plans directory (any plan file, anyone's).
fn writes_into_plans_dir(context: &PermissionContext<'_>, subjects: &CallSubjects) -> bool {
    let Some(plans_dir) = &context.plans_dir else {
        return false;
    };
    subjects.paths.iter().any(|(access, _)| {
        access.usage == PathUse::Write
            && context
                .workspace
                .resolve_plan_file(Path::new(&access.path))
                .is_ok_and(|resolved| resolved.starts_with(plans_dir))
    })
}

/// The lead-only, subagent and definition restrictions, whatever the mode.
fn who_may_call(context: &PermissionContext<'_>, name: ToolName) -> Option<String> {
    if name.is_team_only() && context.kind != AgentKind::Lead {
        return Some(format!(
            "`{name}` is only for the lead; a {} cannot run the team",
            context.kind
        ));
    }
    if context.kind == AgentKind::Subagent && name.is_forbidden_to_subagents() {
        return Some(format!(
            "a subagent cannot call `{name}`: subagents never spawn agents, enter or leave plan mode, ask the user or use the team tools; they report only to their parent"
        ));
    }
    if let Some(tools) = &context.definition.tools
        && !tools.contains(&name.as_str())
    {
        return Some(format!(
            "`{name}` is not among the tools of agent definition `{}` ({})",
            context.definition.name,
            tools.join(", ")
        ));
    }
    None
}

/// Path limits: every accessed path must resolve inside the workspace (writes outside `.git/`
/// and `.muster/`), or be the agent's own plan file.
fn path_limits(
    context: &PermissionContext<'_>,
    own_plan_file: Option<&Path>,
    subjects: &CallSubjects,
) -> Option<String> {
    subjects.paths.iter().find_map(|(access, _)| {
        context
            .workspace
            .resolve(Path::new(&access.path), access.usage, own_plan_file)
            .err()
            .map(|error| {
                let usage = match access.usage {
                    PathUse::Read => "read",
                    PathUse::Write => "write",
                };
                format!("path limits ({usage}): {error}")
            })
    })
}

/// Why a write touches a protected file (one that defines rules, servers or the team), if it
/// does: a person or an approver decides it in every mode.
fn protected_write(context: &PermissionContext<'_>, subjects: &CallSubjects) -> Option<String> {
    subjects.paths.iter().find_map(|(access, forms)| {
        if access.usage != PathUse::Write {
            return None;
        }
        let pattern = forms.iter().find_map(|form| {
            context
                .protected
                .matching(form.relative.as_deref()?)
                .map(str::to_owned)
        })?;
        Some(format!(
            "`{}` is a protected file (`{pattern}`: it defines what agents may do), so writing it \
             needs approval in every mode, bypassPermissions included",
            access.path
        ))
    })
}

/// What "would ask" becomes in `mode`.
fn would_ask(mode: PermissionMode, reason: String) -> Decision {
    match mode {
        PermissionMode::DontAsk => Decision::new(
            Verdict::Deny,
            format!("{reason}; dontAsk mode turns every ask into a deny"),
            mode,
        ),
        PermissionMode::Auto => {
            let mut decision = Decision::new(
                Verdict::Deny,
                format!(
                    "{reason}; auto mode denies what would ask (an auto denial, counted against the run's auto gate)"
                ),
                mode,
            );
            decision.auto_gate = AutoGateEffect::CountDenial;
            decision
        }
        _ => Decision::new(Verdict::Ask, reason, mode),
    }
}

/// The parts of a command line, split wherever a shell could start another command (`&&`,
/// `||`, `;`, `|`, `&`, newlines, substitutions, subshells and groups). Over-splitting is safe:
/// deny and ask rules match any part, allow rules must match every part.
fn command_parts(command: &str) -> Vec<String> {
    command
        .split(['&', '|', ';', '\n', '(', ')', '`', '{', '}'])
        .map(|part| part.trim().trim_matches('$').trim())
        .filter(|part| !part.is_empty())
        .map(str::to_string)
        .collect()
}

/// How a read-only `Bash` call runs, for its decision's reason.
fn read_only_shell_note(run_as: Option<&str>) -> String {
    let environment = "it runs with git's optional locks, pagers and repository programs disabled";
    match run_as {
        Some(text) => format!("{environment}, as `{text}`"),
        None => environment.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_parts_split_everywhere_a_command_can_start() {
        assert_eq!(
            command_parts("ls && git push --force; echo $(rm -rf x) | cat"),
            vec!["ls", "git push --force", "echo", "rm -rf x", "cat"]
        );
        assert!(command_parts("").is_empty());
    }
}
