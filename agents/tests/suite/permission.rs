//! The permission engine: the mode × agent kind × tool × input matrix, the issue's named rows,
//! rules, the auto gate, the `Read(./.env)` plan-mode Bash rule, and "one engine decides every
//! call" through the runtime's own path (`EngineGate`, `runtime/dispatch.rs`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test setup and assertions fail loudly"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use muster_agents::permission::{
    AgentKind, AutoGateEffect, Decision, DefinitionPermissions, PermissionContext,
    PermissionEngine, Verdict,
};
use muster_agents::tools::{TOOL_NAMES, ToolContext, ToolRegistry, Workspace};
use muster_config::settings::AutoGate;
use muster_config::{AgentCatalog, Origin, PermissionMode, PermissionRules, Sourced};
use serde_json::{Value, json};

/// A workspace with a source file, a `.env`, a notebook and a plans directory.
struct Fixture {
    _directory: tempfile::TempDir,
    workspace: Workspace,
    catalog: AgentCatalog,
    engine: PermissionEngine,
}

impl Fixture {
    fn new() -> Fixture {
        let directory = tempfile::tempdir().unwrap();
        let root = directory.path();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::create_dir_all(root.join(".muster/plans")).unwrap();
        std::fs::write(root.join("src/a.rs"), "fn a() {}\n").unwrap();
        std::fs::write(root.join(".env"), "SECRET=1\n").unwrap();
        std::fs::write(root.join(".env.example"), "SECRET=\n").unwrap();
        std::fs::write(
            root.join("nb.ipynb"),
            r#"{"cells":[{"cell_type":"code","id":"c1","metadata":{},"source":["1"],"outputs":[],"execution_count":null}],"metadata":{},"nbformat":4,"nbformat_minor":5}"#,
        )
        .unwrap();
        let workspace = Workspace::new(root).unwrap();
        Fixture {
            _directory: directory,
            workspace,
            catalog: AgentCatalog::built_in().unwrap(),
            engine: PermissionEngine::standard(),
        }
    }
}

fn rules(allow: &[&str], ask: &[&str], deny: &[&str]) -> PermissionRules {
    let list = |texts: &[&str]| {
        texts
            .iter()
            .map(|text| Sourced::new(text.parse().unwrap(), Origin::built_in()))
            .collect()
    };
    PermissionRules {
        allow: list(allow),
        ask: list(ask),
        deny: list(deny),
    }
}

/// The agents of the matrix: which kind, and which definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Agent {
    /// The lead, no definition restrictions, plan file `.muster/plans/lead.md`.
    Lead,
    /// A teammate, no definition restrictions, plan file `.muster/plans/teammate.md`.
    Teammate,
    /// A subagent with the built-in `general` definition; the column is its parent's mode.
    Subagent,
    /// A subagent with the built-in read-only `Plan` definition; the column is its parent's.
    PlanSubagent,
    /// A teammate whose definition `auditor` is `read_only` and lists no tools.
    ReadOnlyTeammate,
}

impl Agent {
    const ALL: [Agent; 5] = [
        Agent::Lead,
        Agent::Teammate,
        Agent::Subagent,
        Agent::PlanSubagent,
        Agent::ReadOnlyTeammate,
    ];

    fn parse(text: &str) -> Agent {
        match text {
            "lead" => Agent::Lead,
            "teammate" => Agent::Teammate,
            "subagent" => Agent::Subagent,
            "plansub" => Agent::PlanSubagent,
            "roteammate" => Agent::ReadOnlyTeammate,
            other => panic!("unknown agent {other}"),
        }
    }

    fn kind(self) -> AgentKind {
        match self {
            Agent::Lead => AgentKind::Lead,
            Agent::Teammate | Agent::ReadOnlyTeammate => AgentKind::Teammate,
            Agent::Subagent | Agent::PlanSubagent => AgentKind::Subagent,
        }
    }

    fn context<'a>(
        self,
        fixture: &'a Fixture,
        rules: &'a PermissionRules,
        mode: PermissionMode,
    ) -> PermissionContext<'a> {
        let mut context = PermissionContext::new(
            self.kind(),
            mode,
            &fixture.workspace,
            rules,
            &fixture.catalog,
        );
        context.plan_file = Some(PathBuf::from(format!(".muster/plans/{}.md", self.kind())));
        match self {
            Agent::Lead | Agent::Teammate => {}
            Agent::Subagent | Agent::PlanSubagent => {
                let name = if self == Agent::Subagent {
                    "general"
                } else {
                    "Plan"
                };
                context = context.with_definition(fixture.catalog.get(name).unwrap());
                context.mode = PermissionMode::Default;
                context.parent_mode = Some(mode);
            }
            Agent::ReadOnlyTeammate => {
                context.definition = DefinitionPermissions {
                    name: "auditor".to_string(),
                    read_only: true,
                    tools: None,
                    permission_mode: None,
                    agent_types: None,
                    mcp_tools: None,
                    disallowed_mcp_tools: Vec::new(),
                };
            }
        }
        context
    }
}

/// Representative inputs, by key. `own_plan` is the agent's own plan file.
fn input(key: &str, agent: Agent) -> Value {
    match key {
        "read" => json!({"file_path": "src/a.rs"}),
        "read_env" => json!({"file_path": ".env"}),
        "read_out" => json!({"file_path": "/etc/passwd"}),
        "write" => json!({"file_path": "src/new.rs", "content": "fn b() {}\n"}),
        "write_out" => json!({"file_path": "/tmp/muster-out.txt", "content": "x"}),
        "write_git" => json!({"file_path": ".git/config", "content": "x"}),
        "own_plan" => json!({
            "file_path": format!(".muster/plans/{}.md", agent.kind()),
            "content": "## Steps\n1. x\n",
        }),
        "other_plan" => json!({"file_path": ".muster/plans/main-agent-alice.md", "content": "x"}),
        "edit" => json!({"file_path": "src/a.rs", "old_string": "fn a", "new_string": "fn b"}),
        "edit_plan" => json!({
            "file_path": format!(".muster/plans/{}.md", agent.kind()),
            "old_string": "x",
            "new_string": "y",
        }),
        "multiedit" => json!({
            "file_path": "src/a.rs",
            "edits": [{"old_string": "fn a", "new_string": "fn b"}],
        }),
        "notebook" => json!({"notebook_path": "nb.ipynb", "cell_id": "c1", "new_source": "2"}),
        "glob" => json!({"pattern": "**/*.rs"}),
        "grep" => json!({"pattern": "fn", "path": "src"}),
        "grep_root" => json!({"pattern": "SECRET"}),
        "ls" => json!({"path": "src"}),
        "bash_ro" => json!({"command": "ls -la src && git log --oneline -5"}),
        "bash_rw" => json!({"command": "touch src/x.rs"}),
        "bash_danger" => json!({"command": "rm -rf src"}),
        "bash_env" => json!({"command": "cat .env"}),
        "bash_out" => json!({"command": "cat /etc/passwd"}),
        "ask" => json!({"questions": [{
            "question": "Which?", "header": "Pick",
            "options": [{"label": "a", "description": "A"}, {"label": "b", "description": "B"}],
        }]}),
        "empty" => json!({}),
        "exit" => json!({"plan": "## Steps\n1. x\n## Files\nsrc/a.rs\n"}),
        "agent_plan" => json!({"description": "look", "prompt": "find x", "subagent_type": "Plan"}),
        "agent_general" => {
            json!({"description": "do", "prompt": "change x", "subagent_type": "general"})
        }
        "agent_unknown" => json!({"description": "do", "prompt": "x", "subagent_type": "nobody"}),
        "send" => json!({"to": "lead", "message": "hello"}),
        "task_create" => json!({"subject": "s", "description": "d"}),
        "task_update" => json!({"task_id": 1, "status": "in_progress"}),
        "task_get" => json!({"task_id": 1}),
        "skill" => json!({"skill": "release"}),
        "spawn" => json!({"name": "alice", "prompt": "do x"}),
        "review" => json!({"request_id": "plan-alice-1", "approve": true}),
        "merge" => json!({"request_id": "merge-alice-1", "approve": true}),
        "shutdown" => json!({"name": "alice"}),
        "bad_read" => json!({"path": "src/a.rs"}),
        other => panic!("unknown input {other}"),
    }
}

/// Reason fragments, by key.
fn fragment(key: &str) -> &'static str {
    match key {
        "ro" => "is read-only, which",
        "plan" => "plan mode allows only",
        "rodef" => "agent definition `",
        "rule" => "deny rule `Read(./.env)`",
        "envrule" => "Read(./.env)",
        "tree" => "contains `.env`",
        "ask" => "needs approval",
        "dontask" => "dontAsk mode turns every ask into a deny",
        "auto" => "auto mode denies what would ask",
        "danger_auto" => "auto mode denies known-dangerous",
        "danger_ask" => "bypassPermissions asks",
        "edit" => "edits a file inside the workspace",
        "rosh" => "the command is read-only",
        "bypass" => "bypassPermissions allows",
        "own" => "your own plan file",
        "coord" => "coordination state",
        "exit" => "ExitPlanMode",
        "lead" => "is only for the lead",
        "sub" => "a subagent cannot call",
        "tools" => "is not among the tools of agent definition `Plan`",
        "startro" => "definition `Plan` is read_only",
        "notro" => "which is not read_only",
        "team" => "the lead's own team work",
        "merge" => "decides a teammate's merge",
        "limits" => "path limits",
        "outside" => "outside the workspace",
        "git" => "inside `.git/`",
        "invalid" => "invalid input for `Read`",
        "unknown" => "no agent definition named `nobody`",
        other => panic!("unknown fragment {other}"),
    }
}

/// The columns of the matrix, in granting order.
const MODES: [PermissionMode; 6] = PermissionMode::ALL;

/// `agent tool input` then one cell per mode (plan dontAsk default acceptEdits auto
/// bypassPermissions): `A`llow, as`K` or `D`eny, a colon, a reason fragment key. For subagents
/// the column is the parent's mode. Rules: `Read(./.env)` is denied.
const MATRIX: &str = "
# agent     tool             input          plan        dontAsk      default     acceptEdits  auto           bypass
lead        Read             read           A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
lead        Read             read_env       D:rule      D:rule       D:rule      D:rule       D:rule         D:rule
lead        Read             read_out       D:outside   D:outside    D:outside   D:outside    D:outside      D:outside
lead        Read             bad_read       D:invalid   D:invalid    D:invalid   D:invalid    D:invalid      D:invalid
lead        Write            write          D:plan      D:dontask    K:ask       A:edit       A:edit         A:edit
lead        Write            write_out      D:plan      D:outside    D:outside   D:outside    D:outside      D:outside
lead        Write            write_git      D:plan      D:git        D:git       D:git        D:git          D:git
lead        Write            own_plan       A:own       A:own        A:own       A:own        A:own          A:own
lead        Write            other_plan     D:plan      D:limits     D:limits    D:limits     D:limits       D:limits
lead        Edit             edit           D:plan      D:dontask    K:ask       A:edit       A:edit         A:edit
lead        Edit             edit_plan      A:own       A:own        A:own       A:own        A:own          A:own
lead        MultiEdit        multiedit      D:plan      D:dontask    K:ask       A:edit       A:edit         A:edit
lead        NotebookEdit     notebook       D:plan      D:dontask    K:ask       A:edit       A:edit         A:edit
lead        Glob             glob           A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
lead        Grep             grep           A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
lead        Grep             grep_root      D:tree      D:tree       D:tree      D:tree       D:tree         D:tree
lead        LS               ls             A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
lead        Bash             bash_ro        A:rosh      A:rosh       A:rosh      A:rosh       A:rosh         A:rosh
lead        Bash             bash_rw        D:plan      D:dontask    K:ask       K:ask        D:auto         A:bypass
lead        Bash             bash_danger    D:plan      D:dontask    K:ask       K:ask        D:danger_auto  K:danger_ask
lead        Bash             bash_env       D:envrule   D:envrule    K:envrule   K:envrule    D:envrule      A:bypass
lead        Bash             bash_out       D:outside   D:outside    K:outside   K:outside    D:outside      A:bypass
lead        AskUserQuestion  ask            A:coord     A:coord      A:coord     A:coord      A:coord        A:coord
lead        EnterPlanMode    empty          A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
lead        ExitPlanMode     exit           A:exit      A:exit       A:exit      A:exit       A:exit         A:exit
lead        Agent            agent_plan     A:startro   A:startro    A:startro   A:startro    A:startro      A:startro
lead        Agent            agent_general  D:notro     D:dontask    K:ask       K:ask        D:auto         A:bypass
lead        Agent            agent_unknown  D:unknown   D:unknown    D:unknown   D:unknown    D:unknown      D:unknown
lead        SendMessage      send           A:coord     A:coord      A:coord     A:coord      A:coord        A:coord
lead        TaskCreate       task_create    A:coord     A:coord      A:coord     A:coord      A:coord        A:coord
lead        TaskUpdate       task_update    A:coord     A:coord      A:coord     A:coord      A:coord        A:coord
lead        TaskList         empty          A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
lead        TaskGet          task_get       A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
lead        Skill            skill          A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
lead        SpawnTeammate    spawn          D:plan      A:team       A:team      A:team       A:team         A:team
lead        ReviewPlan       review         D:plan      A:team       A:team      A:team       A:team         A:team
lead        ReviewMerge      merge          A:merge     A:team       A:team      A:team       A:team         A:team
lead        ShutdownTeammate shutdown       D:plan      A:team       A:team      A:team       A:team         A:team

teammate    Read             read           A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
teammate    Read             read_env       D:rule      D:rule       D:rule      D:rule       D:rule         D:rule
teammate    Write            write          D:plan      D:dontask    K:ask       A:edit       A:edit         A:edit
teammate    Write            own_plan       A:own       A:own        A:own       A:own        A:own          A:own
teammate    Write            other_plan     D:plan      D:limits     D:limits    D:limits     D:limits       D:limits
teammate    Edit             edit           D:plan      D:dontask    K:ask       A:edit       A:edit         A:edit
teammate    Edit             edit_plan      A:own       A:own        A:own       A:own        A:own          A:own
teammate    MultiEdit        multiedit      D:plan      D:dontask    K:ask       A:edit       A:edit         A:edit
teammate    NotebookEdit     notebook       D:plan      D:dontask    K:ask       A:edit       A:edit         A:edit
teammate    Glob             glob           A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
teammate    Grep             grep           A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
teammate    LS               ls             A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
teammate    Bash             bash_ro        A:rosh      A:rosh       A:rosh      A:rosh       A:rosh         A:rosh
teammate    Bash             bash_rw        D:plan      D:dontask    K:ask       K:ask        D:auto         A:bypass
teammate    Bash             bash_danger    D:plan      D:dontask    K:ask       K:ask        D:danger_auto  K:danger_ask
teammate    Bash             bash_env       D:envrule   D:envrule    K:envrule   K:envrule    D:envrule      A:bypass
teammate    AskUserQuestion  ask            A:coord     A:coord      A:coord     A:coord      A:coord        A:coord
teammate    EnterPlanMode    empty          A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
teammate    ExitPlanMode     exit           A:exit      A:exit       A:exit      A:exit       A:exit         A:exit
teammate    Agent            agent_plan     A:startro   A:startro    A:startro   A:startro    A:startro      A:startro
teammate    Agent            agent_general  D:notro     D:dontask    K:ask       K:ask        D:auto         A:bypass
teammate    SendMessage      send           A:coord     A:coord      A:coord     A:coord      A:coord        A:coord
teammate    TaskCreate       task_create    A:coord     A:coord      A:coord     A:coord      A:coord        A:coord
teammate    TaskUpdate       task_update    A:coord     A:coord      A:coord     A:coord      A:coord        A:coord
teammate    TaskList         empty          A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
teammate    TaskGet          task_get       A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
teammate    Skill            skill          A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
teammate    SpawnTeammate    spawn          D:lead      D:lead       D:lead      D:lead       D:lead         D:lead
teammate    ReviewPlan       review         D:lead      D:lead       D:lead      D:lead       D:lead         D:lead
teammate    ReviewMerge      merge          D:lead      D:lead       D:lead      D:lead       D:lead         D:lead
teammate    ShutdownTeammate shutdown       D:lead      D:lead       D:lead      D:lead       D:lead         D:lead

subagent    Read             read           A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
subagent    Read             read_env       D:rule      D:rule       D:rule      D:rule       D:rule         D:rule
subagent    Write            write          D:plan      D:dontask    K:ask       A:edit       A:edit         A:edit
subagent    Write            own_plan       D:plan      D:limits     D:limits    D:limits     D:limits       D:limits
subagent    Edit             edit           D:plan      D:dontask    K:ask       A:edit       A:edit         A:edit
subagent    MultiEdit        multiedit      D:plan      D:dontask    K:ask       A:edit       A:edit         A:edit
subagent    NotebookEdit     notebook       D:plan      D:dontask    K:ask       A:edit       A:edit         A:edit
subagent    Glob             glob           A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
subagent    Grep             grep           A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
subagent    LS               ls             A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
subagent    Bash             bash_ro        A:rosh      A:rosh       A:rosh      A:rosh       A:rosh         A:rosh
subagent    Bash             bash_rw        D:plan      D:dontask    K:ask       K:ask        D:auto         A:bypass
subagent    Bash             bash_danger    D:plan      D:dontask    K:ask       K:ask        D:danger_auto  K:danger_ask
subagent    AskUserQuestion  ask            D:sub       D:sub        D:sub       D:sub        D:sub          D:sub
subagent    EnterPlanMode    empty          D:sub       D:sub        D:sub       D:sub        D:sub          D:sub
subagent    ExitPlanMode     exit           D:sub       D:sub        D:sub       D:sub        D:sub          D:sub
subagent    Agent            agent_plan     D:sub       D:sub        D:sub       D:sub        D:sub          D:sub
subagent    Agent            agent_general  D:sub       D:sub        D:sub       D:sub        D:sub          D:sub
subagent    SendMessage      send           D:sub       D:sub        D:sub       D:sub        D:sub          D:sub
subagent    TaskCreate       task_create    D:sub       D:sub        D:sub       D:sub        D:sub          D:sub
subagent    TaskUpdate       task_update    D:sub       D:sub        D:sub       D:sub        D:sub          D:sub
subagent    TaskList         empty          D:sub       D:sub        D:sub       D:sub        D:sub          D:sub
subagent    TaskGet          task_get       D:sub       D:sub        D:sub       D:sub        D:sub          D:sub
subagent    Skill            skill          A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
subagent    SpawnTeammate    spawn          D:lead      D:lead       D:lead      D:lead       D:lead         D:lead
subagent    ReviewPlan       review         D:lead      D:lead       D:lead      D:lead       D:lead         D:lead
subagent    ReviewMerge      merge          D:lead      D:lead       D:lead      D:lead       D:lead         D:lead
subagent    ShutdownTeammate shutdown       D:lead      D:lead       D:lead      D:lead       D:lead         D:lead

plansub     Read             read           A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
plansub     Read             read_env       D:rule      D:rule       D:rule      D:rule       D:rule         D:rule
plansub     Write            write          D:tools     D:tools      D:tools     D:tools      D:tools        D:tools
plansub     Write            own_plan       D:tools     D:tools      D:tools     D:tools      D:tools        D:tools
plansub     Edit             edit           D:tools     D:tools      D:tools     D:tools      D:tools        D:tools
plansub     MultiEdit        multiedit      D:tools     D:tools      D:tools     D:tools      D:tools        D:tools
plansub     NotebookEdit     notebook       D:tools     D:tools      D:tools     D:tools      D:tools        D:tools
plansub     Glob             glob           A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
plansub     Grep             grep           A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
plansub     Grep             grep_root      D:tree      D:tree       D:tree      D:tree       D:tree         D:tree
plansub     LS               ls             A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
plansub     Bash             bash_ro        A:rosh      A:rosh       A:rosh      A:rosh       A:rosh         A:rosh
plansub     Bash             bash_rw        D:rodef     D:rodef      D:rodef     D:rodef      D:rodef        D:rodef
plansub     Bash             bash_danger    D:rodef     D:rodef      D:rodef     D:rodef      D:rodef        D:rodef
plansub     Bash             bash_env       D:envrule   D:envrule    D:envrule   D:envrule    D:envrule      D:envrule
plansub     AskUserQuestion  ask            D:sub       D:sub        D:sub       D:sub        D:sub          D:sub
plansub     EnterPlanMode    empty          D:sub       D:sub        D:sub       D:sub        D:sub          D:sub
plansub     ExitPlanMode     exit           D:sub       D:sub        D:sub       D:sub        D:sub          D:sub
plansub     Agent            agent_plan     D:sub       D:sub        D:sub       D:sub        D:sub          D:sub
plansub     SendMessage      send           D:sub       D:sub        D:sub       D:sub        D:sub          D:sub
plansub     TaskCreate       task_create    D:sub       D:sub        D:sub       D:sub        D:sub          D:sub
plansub     TaskUpdate       task_update    D:sub       D:sub        D:sub       D:sub        D:sub          D:sub
plansub     TaskList         empty          D:sub       D:sub        D:sub       D:sub        D:sub          D:sub
plansub     TaskGet          task_get       D:sub       D:sub        D:sub       D:sub        D:sub          D:sub
plansub     Skill            skill          D:tools     D:tools      D:tools     D:tools      D:tools        D:tools
plansub     SpawnTeammate    spawn          D:lead      D:lead       D:lead      D:lead       D:lead         D:lead
plansub     ReviewPlan       review         D:lead      D:lead       D:lead      D:lead       D:lead         D:lead
plansub     ReviewMerge      merge          D:lead      D:lead       D:lead      D:lead       D:lead         D:lead
plansub     ShutdownTeammate shutdown       D:lead      D:lead       D:lead      D:lead       D:lead         D:lead

roteammate  Read             read           A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
roteammate  Read             read_env       D:rule      D:rule       D:rule      D:rule       D:rule         D:rule
roteammate  Write            write          D:rodef     D:rodef      D:rodef     D:rodef      D:rodef        D:rodef
roteammate  Write            own_plan       D:rodef     D:rodef      D:rodef     D:rodef      D:rodef        D:rodef
roteammate  Write            other_plan     D:rodef     D:rodef      D:rodef     D:rodef      D:rodef        D:rodef
roteammate  Edit             edit           D:rodef     D:rodef      D:rodef     D:rodef      D:rodef        D:rodef
roteammate  MultiEdit        multiedit      D:rodef     D:rodef      D:rodef     D:rodef      D:rodef        D:rodef
roteammate  NotebookEdit     notebook       D:rodef     D:rodef      D:rodef     D:rodef      D:rodef        D:rodef
roteammate  Glob             glob           A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
roteammate  Grep             grep           A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
roteammate  LS               ls             A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
roteammate  Bash             bash_ro        A:rosh      A:rosh       A:rosh      A:rosh       A:rosh         A:rosh
roteammate  Bash             bash_rw        D:rodef     D:rodef      D:rodef     D:rodef      D:rodef        D:rodef
roteammate  Bash             bash_danger    D:rodef     D:rodef      D:rodef     D:rodef      D:rodef        D:rodef
roteammate  Bash             bash_env       D:envrule   D:envrule    D:envrule   D:envrule    D:envrule      D:envrule
roteammate  AskUserQuestion  ask            A:coord     A:coord      A:coord     A:coord      A:coord        A:coord
roteammate  EnterPlanMode    empty          A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
roteammate  ExitPlanMode     exit           D:rodef     D:rodef      D:rodef     D:rodef      D:rodef        D:rodef
roteammate  Agent            agent_plan     A:startro   A:startro    A:startro   A:startro    A:startro      A:startro
roteammate  Agent            agent_general  D:notro     D:notro      D:notro     D:notro      D:notro        D:notro
roteammate  SendMessage      send           A:coord     A:coord      A:coord     A:coord      A:coord        A:coord
roteammate  TaskCreate       task_create    A:coord     A:coord      A:coord     A:coord      A:coord        A:coord
roteammate  TaskUpdate       task_update    A:coord     A:coord      A:coord     A:coord      A:coord        A:coord
roteammate  TaskList         empty          A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
roteammate  TaskGet          task_get       A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
roteammate  Skill            skill          A:ro        A:ro         A:ro        A:ro         A:ro           A:ro
roteammate  SpawnTeammate    spawn          D:lead      D:lead       D:lead      D:lead       D:lead         D:lead
roteammate  ReviewPlan       review         D:lead      D:lead       D:lead      D:lead       D:lead         D:lead
roteammate  ReviewMerge      merge          D:lead      D:lead       D:lead      D:lead       D:lead         D:lead
roteammate  ShutdownTeammate shutdown       D:lead      D:lead       D:lead      D:lead       D:lead         D:lead
";

struct Row {
    line: usize,
    agent: Agent,
    tool: String,
    input: String,
    cells: Vec<(Verdict, &'static str)>,
}

fn matrix() -> Vec<Row> {
    MATRIX
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty() && !line.starts_with('#'))
        .map(|(number, line)| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(
                fields.len(),
                3 + MODES.len(),
                "matrix line {number}: {line}"
            );
            let cells = fields[3..]
                .iter()
                .map(|cell| {
                    let (verdict, key) = cell.split_once(':').unwrap();
                    let verdict = match verdict {
                        "A" => Verdict::Allow,
                        "K" => Verdict::Ask,
                        "D" => Verdict::Deny,
                        other => panic!("matrix line {number}: verdict {other}"),
                    };
                    (verdict, fragment(key))
                })
                .collect();
            Row {
                line: number,
                agent: Agent::parse(fields[0]),
                tool: fields[1].to_string(),
                input: fields[2].to_string(),
                cells,
            }
        })
        .collect()
}

#[test]
fn matrix_of_modes_agents_tools_and_inputs() {
    let fixture = Fixture::new();
    let rules = rules(&[], &[], &["Read(./.env)"]);
    let rows = matrix();
    let mut failures = Vec::new();
    let mut covered: BTreeSet<(Agent, String)> = BTreeSet::new();
    let mut cases = 0;
    for row in &rows {
        covered.insert((row.agent, row.tool.clone()));
        for (mode, (verdict, fragment)) in MODES.iter().zip(&row.cells) {
            cases += 1;
            let context = row.agent.context(&fixture, &rules, *mode);
            let decision =
                fixture
                    .engine
                    .decide(&context, &row.tool, &input(&row.input, row.agent));
            if decision.verdict != *verdict || !decision.reason.contains(fragment) {
                failures.push(format!(
                    "line {} {:?} {} {} in {mode}: expected {verdict} with {fragment:?}, got {} {:?}",
                    row.line, row.agent, row.tool, row.input, decision.verdict, decision.reason
                ));
            }
        }
    }
    println!("{} rows, {cases} cases", rows.len());
    assert!(
        failures.is_empty(),
        "{} of {cases} cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // Every agent × every tool appears (and so every mode, through the columns).
    let missing: Vec<String> = Agent::ALL
        .iter()
        .flat_map(|agent| {
            TOOL_NAMES
                .iter()
                .map(move |tool| (*agent, tool.to_string()))
        })
        .filter(|pair| !covered.contains(pair))
        .map(|(agent, tool)| format!("{agent:?} × {tool}"))
        .collect();
    assert!(missing.is_empty(), "not in the matrix: {missing:?}");
}

fn decide(
    fixture: &Fixture,
    context: &PermissionContext<'_>,
    tool: &str,
    input: Value,
) -> Decision {
    fixture.engine.decide(context, tool, &input)
}

/// The rows the issue names, each spelled out.
#[test]
fn named_rows_of_the_issue() {
    let fixture = Fixture::new();
    let no_rules = PermissionRules::default();
    let plan = fixture.catalog.get("Plan").unwrap();
    let general = fixture.catalog.get("general").unwrap();
    let subagent_of = |parent: PermissionMode, definition| {
        let mut context = PermissionContext::new(
            AgentKind::Subagent,
            PermissionMode::Default,
            &fixture.workspace,
            &no_rules,
            &fixture.catalog,
        )
        .with_definition(definition);
        context.parent_mode = Some(parent);
        context
    };
    let lead = |mode| {
        let mut context = PermissionContext::new(
            AgentKind::Lead,
            mode,
            &fixture.workspace,
            &no_rules,
            &fixture.catalog,
        );
        context.plan_file = Some(PathBuf::from(".muster/plans/main.md"));
        context
    };
    let teammate = PermissionContext::new(
        AgentKind::Teammate,
        PermissionMode::BypassPermissions,
        &fixture.workspace,
        &no_rules,
        &fixture.catalog,
    );
    let cases: Vec<(&str, PermissionContext<'_>, &str, Value, Verdict, &str)> = vec![
        (
            "parent in plan × Agent(general)",
            lead(PermissionMode::Plan),
            "Agent",
            input("agent_general", Agent::Lead),
            Verdict::Deny,
            "`Agent` with definition `general`, which is not read_only, is denied",
        ),
        (
            "parent in plan × Agent(Plan)",
            lead(PermissionMode::Plan),
            "Agent",
            input("agent_plan", Agent::Lead),
            Verdict::Allow,
            "definition `Plan` is read_only",
        ),
        (
            "Plan subagent under a bypassPermissions parent × Write",
            subagent_of(PermissionMode::BypassPermissions, plan),
            "Write",
            input("write", Agent::Subagent),
            Verdict::Deny,
            "`Write` is not among the tools of agent definition `Plan`",
        ),
        (
            "Plan subagent under a bypassPermissions parent × Bash that writes",
            subagent_of(PermissionMode::BypassPermissions, plan),
            "Bash",
            input("bash_rw", Agent::Subagent),
            Verdict::Deny,
            "agent definition `Plan` is read_only",
        ),
        (
            "teammate × SpawnTeammate",
            teammate.clone(),
            "SpawnTeammate",
            input("spawn", Agent::Teammate),
            Verdict::Deny,
            "`SpawnTeammate` is only for the lead; a teammate cannot run the team",
        ),
        (
            "subagent × AskUserQuestion",
            subagent_of(PermissionMode::BypassPermissions, general),
            "AskUserQuestion",
            input("ask", Agent::Subagent),
            Verdict::Deny,
            "a subagent cannot call `AskUserQuestion`",
        ),
        (
            "plan × ExitPlanMode",
            lead(PermissionMode::Plan),
            "ExitPlanMode",
            input("exit", Agent::Lead),
            Verdict::Allow,
            "plan mode allows it by name",
        ),
        (
            "plan × Write own plan file",
            lead(PermissionMode::Plan),
            "Write",
            json!({"file_path": ".muster/plans/main.md", "content": "## Steps\n"}),
            Verdict::Allow,
            "writes your own plan file",
        ),
        (
            "plan × Write another agent's plan file",
            lead(PermissionMode::Plan),
            "Write",
            json!({"file_path": ".muster/plans/main-agent-alice.md", "content": "x"}),
            Verdict::Deny,
            "only your own plan file",
        ),
        (
            "plan × Write own plan file by its absolute path",
            lead(PermissionMode::Plan),
            "Write",
            json!({
                "file_path": fixture.workspace.root().join(".muster/plans/main.md"),
                "content": "x",
            }),
            Verdict::Allow,
            "writes your own plan file",
        ),
        (
            "subagent of a plan-mode parent × Write",
            subagent_of(PermissionMode::Plan, general),
            "Write",
            input("write", Agent::Subagent),
            Verdict::Deny,
            "plan mode allows only",
        ),
        (
            "teammate × Task alias of Agent(Plan)",
            teammate.clone(),
            "Task",
            input("agent_plan", Agent::Teammate),
            Verdict::Allow,
            "definition `Plan` is read_only",
        ),
        (
            "unknown tool",
            teammate.clone(),
            "WebFetch",
            json!({"url": "https://example.com"}),
            Verdict::Deny,
            "unknown tool `WebFetch`",
        ),
        (
            "lead with the built-in lead definition × Write",
            lead(PermissionMode::AcceptEdits).with_definition(fixture.catalog.get("lead").unwrap()),
            "Write",
            input("write", Agent::Lead),
            Verdict::Deny,
            "`Write` is not among the tools of agent definition `lead`",
        ),
    ];
    for (name, context, tool, call, verdict, fragment) in cases {
        let decision = decide(&fixture, &context, tool, call);
        assert_eq!(decision.verdict, verdict, "{name}: {}", decision.reason);
        assert!(
            decision.reason.contains(fragment),
            "{name}: {:?} lacks {fragment:?}",
            decision.reason
        );
    }
}

#[test]
fn subagent_mode_is_the_parents_capped_by_its_definition() {
    let fixture = Fixture::new();
    let no_rules = PermissionRules::default();
    let general = fixture.catalog.get("general").unwrap();
    // (parent mode, definition cap, expected effective mode)
    let table = [
        (PermissionMode::Plan, None, PermissionMode::Plan),
        (
            PermissionMode::Plan,
            Some(PermissionMode::BypassPermissions),
            PermissionMode::Plan,
        ),
        (
            PermissionMode::BypassPermissions,
            None,
            PermissionMode::BypassPermissions,
        ),
        (
            PermissionMode::BypassPermissions,
            Some(PermissionMode::AcceptEdits),
            PermissionMode::AcceptEdits,
        ),
        (
            PermissionMode::Auto,
            Some(PermissionMode::DontAsk),
            PermissionMode::DontAsk,
        ),
        (
            PermissionMode::Default,
            Some(PermissionMode::Auto),
            PermissionMode::Default,
        ),
    ];
    for (parent, cap, expected) in table {
        let mut context = PermissionContext::new(
            AgentKind::Subagent,
            PermissionMode::BypassPermissions,
            &fixture.workspace,
            &no_rules,
            &fixture.catalog,
        )
        .with_definition(general);
        context.definition.permission_mode = cap;
        context.parent_mode = Some(parent);
        assert_eq!(
            context.effective_mode().0,
            expected,
            "{parent} capped by {cap:?}"
        );
        let decision = decide(&fixture, &context, "Write", input("write", Agent::Subagent));
        assert_eq!(decision.effective_mode, expected);
        if cap.is_some_and(|cap| cap < parent) {
            assert!(
                decision.reason.contains("is capped at"),
                "{}",
                decision.reason
            );
        }
    }
}

#[test]
fn rules_deny_everywhere_ask_and_allow_never_widen_plan_mode() {
    let fixture = Fixture::new();
    let configured = rules(
        &["Bash(touch:*)", "Edit(src/**)", "Agent(general)", "Write"],
        &["Read(src/**)", "Bash(git log:*)"],
        &["Bash(rm:*)", "Edit(src/secret.rs)"],
    );
    let context = |mode| {
        PermissionContext::new(
            AgentKind::Teammate,
            mode,
            &fixture.workspace,
            &configured,
            &fixture.catalog,
        )
    };
    use PermissionMode::*;
    let table: Vec<(PermissionMode, &str, Value, Verdict, &str)> = vec![
        // Deny rules apply in every mode, bypassPermissions included, and to any part of a
        // compound command.
        (
            BypassPermissions,
            "Bash",
            json!({"command": "rm x"}),
            Verdict::Deny,
            "deny rule `Bash(rm:*)`",
        ),
        (
            BypassPermissions,
            "Bash",
            json!({"command": "ls && rm x"}),
            Verdict::Deny,
            "deny rule `Bash(rm:*)`",
        ),
        (
            Default,
            "Bash",
            json!({"command": "echo $(rm x)"}),
            Verdict::Deny,
            "deny rule `Bash(rm:*)`",
        ),
        (
            AcceptEdits,
            "Write",
            json!({"file_path": "src/secret.rs", "content": "x"}),
            Verdict::Deny,
            "deny rule `Edit(src/secret.rs)`",
        ),
        // Ask rules make an allowed call ask in every mode; dontAsk and auto turn that ask into
        // a deny ...
        (
            Default,
            "Read",
            input("read", Agent::Teammate),
            Verdict::Ask,
            "ask rule `Read(src/**)`",
        ),
        (
            Plan,
            "Read",
            input("read", Agent::Teammate),
            Verdict::Ask,
            "ask rule `Read(src/**)`",
        ),
        (
            DontAsk,
            "Read",
            input("read", Agent::Teammate),
            Verdict::Deny,
            "dontAsk",
        ),
        (
            Auto,
            "Read",
            input("read", Agent::Teammate),
            Verdict::Deny,
            "auto denial",
        ),
        // ... bypassPermissions included, as in Claude Code.
        (
            BypassPermissions,
            "Read",
            input("read", Agent::Teammate),
            Verdict::Ask,
            "ask rule `Read(src/**)`",
        ),
        (
            BypassPermissions,
            "Bash",
            json!({"command": "git log --oneline -3"}),
            Verdict::Ask,
            "ask rule `Bash(git log:*)`",
        ),
        (
            Default,
            "Bash",
            json!({"command": "git log --oneline -3"}),
            Verdict::Ask,
            "ask rule `Bash(git log:*)`",
        ),
        // Allow rules turn an ask into an allow ...
        (
            Default,
            "Bash",
            json!({"command": "touch src/x.rs"}),
            Verdict::Allow,
            "allowed by the rule `Bash(touch:*)`",
        ),
        (
            Auto,
            "Bash",
            json!({"command": "touch src/x.rs"}),
            Verdict::Allow,
            "allowed by the rule",
        ),
        (
            Default,
            "Edit",
            input("edit", Agent::Teammate),
            Verdict::Allow,
            "allowed by the rule `Edit(src/**)`",
        ),
        (
            Default,
            "Agent",
            input("agent_general", Agent::Teammate),
            Verdict::Allow,
            "allowed by the rule `Agent(general)`",
        ),
        // ... but only when every part of a command matches, with nothing hidden in it.
        (
            Default,
            "Bash",
            json!({"command": "touch a && chmod 777 a"}),
            Verdict::Ask,
            "needs approval",
        ),
        (
            Default,
            "Bash",
            json!({"command": "touch $(echo a)"}),
            Verdict::Ask,
            "needs approval",
        ),
        (
            Default,
            "Bash",
            json!({"command": "touch a > b"}),
            Verdict::Ask,
            "needs approval",
        ),
        // ... and never widen plan mode.
        (
            Plan,
            "Bash",
            json!({"command": "touch src/x.rs"}),
            Verdict::Deny,
            "plan mode allows only",
        ),
        (
            Plan,
            "Edit",
            input("edit", Agent::Teammate),
            Verdict::Deny,
            "plan mode allows only",
        ),
        (
            Plan,
            "Write",
            input("write", Agent::Teammate),
            Verdict::Deny,
            "plan mode allows only",
        ),
        (
            Plan,
            "Agent",
            input("agent_general", Agent::Teammate),
            Verdict::Deny,
            "not read_only",
        ),
        // Path limits are not lifted by an allow rule.
        (
            Default,
            "Write",
            input("write_out", Agent::Teammate),
            Verdict::Deny,
            "outside the workspace",
        ),
    ];
    for (mode, tool, call, verdict, fragment) in table {
        let decision = decide(&fixture, &context(mode), tool, call.clone());
        assert_eq!(
            decision.verdict, verdict,
            "{mode} {tool} {call}: {}",
            decision.reason
        );
        assert!(
            decision.reason.contains(fragment),
            "{mode} {tool} {call}: {:?} lacks {fragment:?}",
            decision.reason
        );
    }
    // Allow rules never widen a read_only agent either.
    let mut read_only = context(Default);
    read_only.definition = DefinitionPermissions {
        name: "auditor".to_string(),
        read_only: true,
        tools: None,
        permission_mode: None,
        agent_types: None,
        mcp_tools: None,
        disallowed_mcp_tools: Vec::new(),
    };
    let decision = decide(
        &fixture,
        &read_only,
        "Bash",
        json!({"command": "touch src/x.rs"}),
    );
    assert_eq!(decision.verdict, Verdict::Deny, "{}", decision.reason);
    assert!(decision.reason.contains("`auditor` is read_only"));
}

#[test]
fn a_tool_wide_bash_rule_allows_every_command_but_never_widens_plan_mode_or_beats_deny() {
    let fixture = Fixture::new();
    let configured = rules(&["Bash"], &[], &["Bash(rm:*)"]);
    let context = |mode| {
        PermissionContext::new(
            AgentKind::Teammate,
            mode,
            &fixture.workspace,
            &configured,
            &fixture.catalog,
        )
    };
    use PermissionMode::*;
    let table: Vec<(PermissionMode, &str, Verdict, &str)> = vec![
        // `Bash` is every command, as the user wrote: redirections and expansions too.
        (
            Default,
            "touch a > b",
            Verdict::Allow,
            "allowed by the rule `Bash`",
        ),
        (
            Default,
            "echo $$ > pid; exec sleep 1",
            Verdict::Allow,
            "rule `Bash`",
        ),
        (
            Default,
            "make test 2>&1 | tee log",
            Verdict::Allow,
            "rule `Bash`",
        ),
        // A deny rule still wins, in any part of the command.
        (
            Default,
            "ls && rm x",
            Verdict::Deny,
            "deny rule `Bash(rm:*)`",
        ),
        // Plan mode stays a hard boundary.
        (Plan, "touch a > b", Verdict::Deny, "plan mode allows only"),
    ];
    for (mode, command, verdict, fragment) in table {
        let decision = decide(
            &fixture,
            &context(mode),
            "Bash",
            json!({"command": command}),
        );
        assert_eq!(
            decision.verdict, verdict,
            "{mode} {command}: {}",
            decision.reason
        );
        assert!(
            decision.reason.contains(fragment),
            "{mode} {command}: {:?} lacks {fragment:?}",
            decision.reason
        );
    }
}

#[test]
fn auto_mode_reports_denials_and_resets_and_a_closed_gate_is_default() {
    let fixture = Fixture::new();
    let no_rules = PermissionRules::default();
    let mut context = PermissionContext::new(
        AgentKind::Lead,
        PermissionMode::Auto,
        &fixture.workspace,
        &no_rules,
        &fixture.catalog,
    );
    let cases = [
        (
            "Bash",
            input("bash_rw", Agent::Lead),
            Verdict::Deny,
            AutoGateEffect::CountDenial,
        ),
        (
            "Bash",
            input("bash_danger", Agent::Lead),
            Verdict::Deny,
            AutoGateEffect::CountDenial,
        ),
        (
            "Bash",
            input("bash_ro", Agent::Lead),
            Verdict::Allow,
            AutoGateEffect::ResetCount,
        ),
        (
            "Write",
            input("write", Agent::Lead),
            Verdict::Allow,
            AutoGateEffect::ResetCount,
        ),
        // A deny rule or a path limit is not an auto denial.
        (
            "Write",
            input("write_out", Agent::Lead),
            Verdict::Deny,
            AutoGateEffect::Unaffected,
        ),
    ];
    for (tool, call, verdict, effect) in &cases {
        let decision = decide(&fixture, &context, tool, call.clone());
        assert_eq!(
            (decision.verdict, decision.auto_gate),
            (*verdict, *effect),
            "{tool} {call}"
        );
        assert_eq!(decision.effective_mode, PermissionMode::Auto);
    }
    context.auto_gate = AutoGate::Closed;
    let decision = decide(&fixture, &context, "Bash", input("bash_rw", Agent::Lead));
    assert_eq!(decision.verdict, Verdict::Ask, "{}", decision.reason);
    assert_eq!(decision.effective_mode, PermissionMode::Default);
    assert_eq!(decision.auto_gate, AutoGateEffect::Unaffected);
    assert!(
        decision.reason.contains("auto gate is closed"),
        "{}",
        decision.reason
    );
    let decision = decide(&fixture, &context, "Write", input("write", Agent::Lead));
    assert_eq!(decision.verdict, Verdict::Ask, "{}", decision.reason);
    // Leaving plan mode says what it restores, and `default` once the gate has closed.
    context.mode = PermissionMode::Plan;
    context.pre_plan_mode = Some(PermissionMode::Auto);
    let decision = decide(
        &fixture,
        &context,
        "ExitPlanMode",
        input("exit", Agent::Lead),
    );
    assert!(
        decision.reason.contains("restores `default`"),
        "{}",
        decision.reason
    );
}

#[test]
fn read_deny_rule_keeps_plan_mode_bash_out_of_dot_env() {
    let fixture = Fixture::new();
    std::fs::create_dir_all(fixture.workspace.root().join("docs")).unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(
        fixture.workspace.root().join(".env"),
        fixture.workspace.root().join("docs/link"),
    )
    .unwrap();
    let configured = rules(&["Bash"], &[], &["Read(./.env)"]);
    let context = PermissionContext::new(
        AgentKind::Teammate,
        PermissionMode::Plan,
        &fixture.workspace,
        &configured,
        &fixture.catalog,
    );
    let absolute = format!("cat {}", fixture.workspace.root().join(".env").display());
    let mut denied = vec![
        "cat .env",
        "head .env",
        "grep x .env",
        "cat ./.env",
        "cd src && cat ../.env",
        "rg SECRET",
        "grep -r SECRET .",
        "cat ~/.aws/credentials",
        "cat /etc/shadow",
        "cat ../x",
        absolute.as_str(),
    ];
    if cfg!(unix) {
        denied.push("cat docs/link");
    }
    for command in denied {
        let decision = decide(&fixture, &context, "Bash", json!({ "command": command }));
        assert_eq!(
            decision.verdict,
            Verdict::Deny,
            "{command}: {}",
            decision.reason
        );
        assert!(!decision.read_only_shell);
    }
    for command in [
        "cat .env.example",
        "head src/a.rs",
        "grep -rn fn src",
        "ls -la",
    ] {
        let decision = decide(&fixture, &context, "Bash", json!({ "command": command }));
        assert_eq!(
            decision.verdict,
            Verdict::Allow,
            "{command}: {}",
            decision.reason
        );
        assert!(
            decision.read_only_shell,
            "{command} must run with the read-only git env"
        );
    }
    // The Read tool refuses the same file.
    let decision = decide(
        &fixture,
        &context,
        "Read",
        input("read_env", Agent::Teammate),
    );
    assert_eq!(decision.verdict, Verdict::Deny);
}

/// Unquoted globs in plan-mode Bash: every file a glob could match now is checked like a
/// named path, so a glob reaches neither a denied file nor, through a symlink, the outside.
#[cfg(unix)]
#[test]
fn plan_mode_bash_globs_check_what_they_could_match() {
    let fixture = Fixture::new();
    let root = fixture.workspace.root();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("id_rsa"), "KEY\n").unwrap();
    std::fs::create_dir_all(root.join("docs")).unwrap();
    std::fs::create_dir_all(root.join("lib/inner")).unwrap();
    std::fs::write(root.join("docs/guide.md"), "# guide\n").unwrap();
    std::fs::write(root.join("lib/inner/x.rs"), "\n").unwrap();
    std::fs::write(root.join("src/-rf.rs"), "\n").unwrap();
    std::os::unix::fs::symlink(outside.path().join("id_rsa"), root.join("docs/key.md")).unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join("lib/out")).unwrap();
    let configured = rules(&["Bash"], &[], &["Read(./.env)"]);
    let context = PermissionContext::new(
        AgentKind::Teammate,
        PermissionMode::Plan,
        &fixture.workspace,
        &configured,
        &fixture.catalog,
    );
    for command in [
        "cat .e*",
        "cat ./.e*",
        "head .en?",
        "grep -r SECRET ./.e*",
        "cat docs/*.md",
        "cat docs/k*",
        "cat lib/*/id_rsa",
        "wc -l lib/*/*.rs",
        "ls lib/o*",
        "cd src && cat *",
        "cat -*",
        "cat ../*",
        "cat ~/*",
        "cat /etc/*",
    ] {
        let decision = decide(&fixture, &context, "Bash", json!({ "command": command }));
        assert_eq!(
            decision.verdict,
            Verdict::Deny,
            "{command}: {}",
            decision.reason
        );
    }
    for command in [
        "head src/*.rs",
        "cat src/a*",
        "wc -l src/*.rs lib/inner/*.rs",
        "cat .env.ex*",
        "jq .cells nb*",
        "grep -n fn src/*",
        "cat docs/g*.md",
    ] {
        let decision = decide(&fixture, &context, "Bash", json!({ "command": command }));
        assert_eq!(
            decision.verdict,
            Verdict::Allow,
            "{command}: {}",
            decision.reason
        );
        assert!(decision.read_only_shell);
    }
}

/// A valid call of every registered tool; the file and shell ones change the workspace.
fn every_tool_call(name: &str) -> Value {
    match name {
        "Read" => input("read", Agent::Lead),
        "Write" => input("write", Agent::Lead),
        "Edit" => input("edit", Agent::Lead),
        "MultiEdit" => input("multiedit", Agent::Lead),
        "NotebookEdit" => input("notebook", Agent::Lead),
        "Glob" => input("glob", Agent::Lead),
        "Grep" => input("grep", Agent::Lead),
        "LS" => input("ls", Agent::Lead),
        "Bash" => json!({"command": "touch src/ran-bash.txt"}),
        "AskUserQuestion" => input("ask", Agent::Lead),
        "EnterPlanMode" | "TaskList" => json!({}),
        "ExitPlanMode" => input("exit", Agent::Lead),
        "Agent" => input("agent_general", Agent::Lead),
        "SendMessage" => input("send", Agent::Lead),
        "TaskCreate" => input("task_create", Agent::Lead),
        "TaskUpdate" => input("task_update", Agent::Lead),
        "TaskGet" => input("task_get", Agent::Lead),
        "Skill" => input("skill", Agent::Lead),
        "SpawnTeammate" => input("spawn", Agent::Lead),
        "ReviewPlan" => input("review", Agent::Lead),
        "ReviewMerge" => input("merge", Agent::Lead),
        "ShutdownTeammate" => input("shutdown", Agent::Lead),
        other => panic!("no call for {other}"),
    }
}

/// Runs git in `root` with a test identity; fails the test if git fails.
fn git_in(root: &Path, args: &[&str]) {
    let status = std::process::Command::new("git")
        .args(["-c", "user.email=t@example.com", "-c", "user.name=t"])
        .args(args)
        .current_dir(root)
        .output()
        .unwrap();
    assert!(status.status.success(), "git {args:?}");
}

/// An executable shell script at `path` running `line`.
#[cfg(unix)]
fn executable(path: &Path, line: &str) -> PathBuf {
    std::fs::write(path, format!("#!/bin/sh\n{line}\n")).unwrap();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path.to_path_buf()
}

/// The caller's `PATH` and `HOME`, for Bash the runtime runs.
fn path_and_home() -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    ["PATH", "HOME"]
        .iter()
        .filter_map(|name| Some(((*name).into(), std::env::var_os(name)?)))
        .collect()
}

/// In plan mode the runtime runs `command` (read-only `Bash`) in a repository whose `key`
/// names a program that writes `marker`: the program does not run. The control, the same
/// command through the tool set outside the engine's decision, runs it. `edit` changes a
/// tracked file first (so `git diff` has a patch). Returns the decision's reason and result.
#[cfg(unix)]
async fn repository_program_does_not_run(
    command: &str,
    key: &str,
    marker: &str,
    edit: bool,
) -> (String, String) {
    let call = json!({ "command": command });
    let harness =
        shipping_harness(vec![muster_fake_llm::Block::tool_use("Bash", call.clone())]).await;
    let root = harness.workspace();
    let git = |args: &[&str]| git_in(&root, args);
    git(&["init", "-q"]);
    git(&["add", "src/a.rs"]);
    git(&["commit", "-qm", "a"]);
    if edit {
        std::fs::write(root.join("src/a.rs"), "changed by the test\n").unwrap();
    }
    let program = executable(&root.join("program.sh"), &format!("touch {marker}"));
    git(&["config", key, program.to_str().unwrap()]);
    let environment = path_and_home();
    let calls = ship(
        &harness,
        PermissionMode::Plan,
        PermissionRules::default(),
        environment.clone(),
    )
    .await;
    let (_, decision, reason, content) = calls[0].clone();
    assert_eq!(decision, "allow", "{command}: {reason}");
    assert!(
        !root.join(marker).exists(),
        "{command}: the {key} program ran"
    );
    let tool_context = ToolContext::new(Workspace::new(&root).unwrap(), environment);
    let output = ToolRegistry::standard()
        .call("Bash", &tool_context, call)
        .await;
    assert!(!output.is_error, "{}", output.content);
    assert!(
        root.join(marker).exists(),
        "{command}: the control did not run the {key} program"
    );
    (reason, content)
}

/// Read-only `Bash` gets the read-only git environment: the fsmonitor program `git status`
/// would start does not run.
#[cfg(unix)]
#[tokio::test]
async fn read_only_bash_runs_with_the_read_only_git_environment() {
    let (_, content) = repository_program_does_not_run(
        "git status --short",
        "core.fsmonitor",
        "ran-fsmonitor",
        false,
    )
    .await;
    assert!(content.contains("[exit code 0]"), "{content}");
}

/// Plain `git diff` runs as `git diff --no-ext-diff`: the patch comes from git's own diff and
/// the repository's `diff.external` program does not run.
#[cfg(unix)]
#[tokio::test]
async fn read_only_git_diff_runs_with_no_ext_diff_forced() {
    let (reason, content) =
        repository_program_does_not_run("git diff", "diff.external", "ran-external-diff", true)
            .await;
    assert!(reason.contains("git diff --no-ext-diff"), "{reason}");
    assert!(content.contains("+changed by the test"), "{content}");
}

#[test]
fn decisions_never_panic_on_odd_input() {
    let fixture = Fixture::new();
    let configured = rules(&["Bash"], &["Read(src/**)"], &["Read(./.env)"]);
    let inputs = [
        json!(null),
        json!([]),
        json!("text"),
        json!({"file_path": ""}),
        json!({"file_path": "\u{0}"}),
        json!({"file_path": "../../../../etc/passwd"}),
        json!({"command": ""}),
        json!({"command": "\u{0}\u{1}$((("}),
        json!({"subagent_type": 7}),
    ];
    for mode in PermissionMode::ALL {
        for kind in AgentKind::ALL {
            let context = PermissionContext::new(
                kind,
                mode,
                &fixture.workspace,
                &configured,
                &fixture.catalog,
            );
            for name in TOOL_NAMES.iter().chain(&["Task", "", "bash"]) {
                for call in &inputs {
                    let decision = fixture.engine.decide(&context, name, call);
                    assert!(!decision.reason.is_empty());
                }
            }
        }
    }
}

/// The engine, not the runtime, keeps subagents out of plan files: a write into the run's
/// plans directory is denied in every mode, even where that directory lies inside the
/// workspace (where path limits would let the write through), while the same subagent may
/// write elsewhere and the lead may write its own plan file there.
#[test]
fn a_subagent_never_writes_a_plan_file_wherever_plans_dir_lies() {
    let fixture = Fixture::new();
    let root = fixture.workspace.root().to_path_buf();
    std::fs::create_dir_all(root.join("docs/plans")).unwrap();
    let no_rules = PermissionRules::default();
    let write = |path: &str| json!({"file_path": path, "content": "x"});
    for mode in PermissionMode::ALL {
        let mut context = Agent::Subagent.context(&fixture, &no_rules, mode);
        context.plans_dir = Some(root.join("docs/plans"));
        let decision = fixture
            .engine
            .decide(&context, "Write", &write("docs/plans/main.md"));
        assert_eq!(decision.verdict, Verdict::Deny, "{mode}");
        assert!(
            decision.reason.contains("subagents never write plan files"),
            "{mode}: {}",
            decision.reason
        );
    }
    let mut context =
        Agent::Subagent.context(&fixture, &no_rules, PermissionMode::BypassPermissions);
    context.plans_dir = Some(root.join("docs/plans"));
    let elsewhere = fixture.engine.decide(&context, "Write", &write("src/b.rs"));
    assert_eq!(elsewhere.verdict, Verdict::Allow, "{}", elsewhere.reason);

    let mut lead = Agent::Lead.context(&fixture, &no_rules, PermissionMode::AcceptEdits);
    lead.plans_dir = Some(root.join("docs/plans"));
    lead.plan_file = Some(PathBuf::from("docs/plans/main.md"));
    let own = fixture
        .engine
        .decide(&lead, "Write", &write("docs/plans/main.md"));
    assert_eq!(own.verdict, Verdict::Allow, "{}", own.reason);
}

/// A run whose workspace holds the files [`every_tool_call`]'s inputs name.
async fn shipping_harness(calls: Vec<muster_fake_llm::Block>) -> super::harness::RunHarness {
    use muster_fake_llm::{Block, ScriptEntry};
    let harness = super::harness::RunHarness::setup()
        .file("src/a.rs", "fn a() {}\n")
        .file(".env", "SECRET=1\n")
        .file(
            "nb.ipynb",
            r#"{"cells":[{"cell_type":"code","id":"c1","metadata":{},"source":["1"],"outputs":[],"execution_count":null}],"metadata":{},"nbformat":4,"nbformat_minor":5}"#,
        )
        .start(vec![
            ScriptEntry::reply("main", 1, calls),
            ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
        ])
        .await;
    harness
        .member("main", muster_mailbox::MemberKind::Lead)
        .await;
    harness
}

/// Runs the main agent of `harness` as it ships — the runtime's loop, `EngineGate`,
/// `runtime/dispatch.rs` — in `mode` under `rules`, with `environment` for Bash; gives back
/// each call's `tool_call` record (tool, decision, reason, content).
async fn ship(
    harness: &super::harness::RunHarness,
    mode: PermissionMode,
    rules: PermissionRules,
    environment: Vec<(std::ffi::OsString, std::ffi::OsString)>,
) -> Vec<(String, String, String, String)> {
    use muster_agents::runtime::{AgentKind as RuntimeKind, EngineGate, PlanApprover, RunContext};
    use std::sync::Arc;

    let catalog = Arc::new(AgentCatalog::built_in().unwrap());
    let context = Arc::new(RunContext {
        agent_models: Default::default(),
        gate: Arc::new(EngineGate::new(rules, catalog.clone(), None)),
        environment,
        ..harness.run_context(PlanApprover::Human)
    });
    let spec = super::harness::spec("main", RuntimeKind::Main, mode);
    let mut agent = super::harness::start(context, spec, "Call the tools.").await;
    assert_eq!(
        super::harness::run(&mut agent).await,
        super::harness::finished("Done.")
    );
    harness
        .bodies("main")
        .await
        .into_iter()
        .filter(|body| body["type"] == "tool_call")
        .map(|body| {
            let field = |key: &str| body[key].as_str().unwrap_or_default().to_owned();
            (
                field("tool"),
                field("decision"),
                field("reason"),
                field("content"),
            )
        })
        .collect()
}

/// [`ship`] of one call of each of `tools`, with `PATH` for Bash.
async fn ship_calls(
    tools: &[&str],
    mode: PermissionMode,
    rules: PermissionRules,
) -> (super::harness::RunHarness, Vec<(String, String, String)>) {
    let calls = tools
        .iter()
        .map(|name| muster_fake_llm::Block::tool_use(name, every_tool_call(name)))
        .collect();
    let harness = shipping_harness(calls).await;
    let path = vec![("PATH".into(), std::env::var_os("PATH").unwrap_or_default())];
    let records = ship(&harness, mode, rules, path)
        .await
        .into_iter()
        .map(|(tool, decision, reason, _)| (tool, decision, reason))
        .collect();
    (harness, records)
}

/// Invariant 1 on the path that ships: with every tool denied, an agent whose model calls
/// every tool in every mode gets a deny for each call and changes nothing; the control run,
/// with nothing denied, changes the workspace through the same path.
#[tokio::test]
async fn one_engine_decides_every_call_the_runtime_makes_and_deny_all_runs_nothing() {
    let deny_all: Vec<&str> = TOOL_NAMES.to_vec();
    let registry = ToolRegistry::standard();
    let every_tool = registry.names();
    for mode in PermissionMode::ALL {
        let (harness, calls) = ship_calls(&every_tool, mode, rules(&[], &[], &deny_all)).await;
        let names: BTreeSet<&str> = calls.iter().map(|(tool, _, _)| tool.as_str()).collect();
        let registered: BTreeSet<&str> = every_tool.iter().copied().collect();
        assert_eq!(names, registered, "{mode}: one decided call per tool");
        for (tool, decision, reason) in &calls {
            assert_eq!(decision, "deny", "{mode} {tool}: {reason}");
            assert!(reason.contains("deny rule"), "{mode} {tool}: {reason}");
        }
        // The workspace holds exactly what the harness wrote, unchanged.
        let files = files_in(&harness.workspace());
        let written: Vec<&str> = files.keys().map(String::as_str).collect();
        assert_eq!(written, [".env", "nb.ipynb", "src/a.rs"], "{mode}");
        assert_eq!(files["src/a.rs"], "fn a() {}\n", "{mode}");
        assert_eq!(files[".env"], "SECRET=1\n", "{mode}");
    }
    let (harness, calls) = ship_calls(
        &["Write", "Bash"],
        PermissionMode::BypassPermissions,
        PermissionRules::default(),
    )
    .await;
    for tool in ["Write", "Bash"] {
        let (_, decision, reason) = calls.iter().find(|(name, _, _)| name == tool).unwrap();
        assert_eq!(decision, "allow", "{tool}: {reason}");
    }
    assert!(
        harness.workspace().join("src/new.rs").exists(),
        "the control Write ran"
    );
    assert!(
        harness.workspace().join("src/ran-bash.txt").exists(),
        "the control Bash ran"
    );
}

/// Every file under `root` (relative path → content), directories left out.
fn files_in(root: &Path) -> BTreeMap<String, String> {
    fn walk(directory: &Path, root: &Path, files: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(directory).unwrap().flatten() {
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                walk(&path, root, files);
            } else {
                let relative = path.strip_prefix(root).unwrap().display().to_string();
                files.insert(relative, std::fs::read_to_string(&path).unwrap_or_default());
            }
        }
    }
    let mut files = BTreeMap::new();
    walk(root, root, &mut files);
    files
}

#[test]
fn tools_agent_x_limits_which_definitions_an_agent_may_start() {
    let fixture = Fixture::new();
    let no_rules = PermissionRules::default();
    let mut context = PermissionContext::new(
        AgentKind::Teammate,
        PermissionMode::BypassPermissions,
        &fixture.workspace,
        &no_rules,
        &fixture.catalog,
    );
    context.definition = DefinitionPermissions {
        name: "researcher".to_string(),
        read_only: false,
        tools: None,
        permission_mode: None,
        agent_types: Some(vec!["Plan".to_string()]),
        mcp_tools: None,
        disallowed_mcp_tools: Vec::new(),
    };
    let allowed = decide(
        &fixture,
        &context,
        "Agent",
        input("agent_plan", Agent::Teammate),
    );
    assert_eq!(allowed.verdict, Verdict::Allow, "{}", allowed.reason);
    let denied = decide(
        &fixture,
        &context,
        "Agent",
        input("agent_general", Agent::Teammate),
    );
    assert_eq!(denied.verdict, Verdict::Deny, "{}", denied.reason);
    assert!(
        denied
            .reason
            .contains("agent definition `researcher` may start only Plan"),
        "{}",
        denied.reason
    );
}

/// The file tools' paths are decided as what the tool would touch: a leading `~` or `$HOME`
/// is the home directory for the engine and the tool alike, and an absolute, `~` or climbing
/// Glob pattern or Grep glob names the directory it searches. Outside the workspace, plan mode
/// denies and the tool refuses; a home inside the workspace is allowed and the tool reads it.
#[tokio::test]
async fn file_tool_paths_are_decided_as_what_the_tool_touches() {
    let mut fixture = Fixture::new();
    let outside_home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(outside_home.path().join(".ssh")).unwrap();
    std::fs::write(outside_home.path().join(".ssh/id_rsa"), "KEY\n").unwrap();
    fixture.workspace = fixture
        .workspace
        .clone()
        .with_home(Some(outside_home.path().to_path_buf()));
    let configured = rules(&[], &[], &[]);
    let plan = PermissionContext::new(
        AgentKind::Teammate,
        PermissionMode::Plan,
        &fixture.workspace,
        &configured,
        &fixture.catalog,
    );
    let tools = ToolRegistry::standard();
    let tool_context = ToolContext::new(fixture.workspace.clone(), Vec::new());
    let outside: &[(&str, Value)] = &[
        ("Read", json!({ "file_path": "~/.ssh/id_rsa" })),
        ("Read", json!({ "file_path": "$HOME/.ssh/id_rsa" })),
        ("Read", json!({ "file_path": "${HOME}/.ssh/id_rsa" })),
        ("LS", json!({ "path": "~/.ssh" })),
        ("LS", json!({ "path": "~" })),
        ("Grep", json!({ "pattern": "KEY", "path": "~" })),
        ("Grep", json!({ "pattern": "KEY", "glob": "~/.ssh/*" })),
        ("Grep", json!({ "pattern": "root", "glob": "/etc/*" })),
        ("Glob", json!({ "pattern": "/etc/*" })),
        ("Glob", json!({ "pattern": "~/.ssh/*" })),
        ("Glob", json!({ "pattern": "../../**/*.pem" })),
        ("Glob", json!({ "pattern": "*", "path": "~/.ssh" })),
        ("Glob", json!({ "pattern": "src/../../*" })),
    ];
    for (tool, input) in outside {
        let decision = decide(&fixture, &plan, tool, input.clone());
        assert_eq!(
            decision.verdict,
            Verdict::Deny,
            "{tool} {input}: {}",
            decision.reason
        );
        let output = tools
            .get(tool)
            .unwrap()
            .call(&tool_context, input.clone())
            .await;
        assert!(output.is_error, "{tool} {input} ran: {}", output.content);
        assert!(
            !output.content.contains("KEY"),
            "{tool} {input}: {}",
            output.content
        );
    }
    let accept_edits = PermissionContext::new(
        AgentKind::Teammate,
        PermissionMode::AcceptEdits,
        &fixture.workspace,
        &configured,
        &fixture.catalog,
    );
    for (tool, input) in [
        (
            "NotebookEdit",
            json!({ "notebook_path": "~/nb.ipynb", "new_source": "1" }),
        ),
        (
            "Write",
            json!({ "file_path": "$HOME/x.txt", "content": "x" }),
        ),
    ] {
        let decision = decide(&fixture, &accept_edits, tool, input.clone());
        assert_eq!(
            decision.verdict,
            Verdict::Deny,
            "{tool} {input}: {}",
            decision.reason
        );
        assert!(
            decision.reason.contains("outside the workspace"),
            "{}",
            decision.reason
        );
    }
    assert!(!outside_home.path().join("x.txt").exists());

    // A home inside the workspace: the same spellings are allowed and read what they name.
    let root = fixture.workspace.root().to_path_buf();
    std::fs::create_dir_all(root.join("home/notes")).unwrap();
    std::fs::write(root.join("home/notes/todo.md"), "TODO inside\n").unwrap();
    let inside = fixture.workspace.clone().with_home(Some(root.join("home")));
    let plan = PermissionContext::new(
        AgentKind::Teammate,
        PermissionMode::Plan,
        &inside,
        &configured,
        &fixture.catalog,
    );
    let tool_context = ToolContext::new(inside.clone(), Vec::new());
    let absolute = format!("{}/home/**/*.md", root.display());
    for (tool, input) in [
        ("Read", json!({ "file_path": "~/notes/todo.md" })),
        (
            "Grep",
            json!({ "pattern": "TODO", "path": "$HOME", "output_mode": "content" }),
        ),
        (
            "Grep",
            json!({ "pattern": "TODO", "glob": "~/notes/*.md", "output_mode": "content" }),
        ),
        ("Glob", json!({ "pattern": "~/notes/*.md" })),
        ("Glob", json!({ "pattern": absolute })),
    ] {
        let decision = fixture.engine.decide(&plan, tool, &input);
        assert_eq!(
            decision.verdict,
            Verdict::Allow,
            "{tool} {input}: {}",
            decision.reason
        );
        let output = tools
            .get(tool)
            .unwrap()
            .call(&tool_context, input.clone())
            .await;
        assert!(!output.is_error, "{tool} {input}: {}", output.content);
        assert!(
            output.content.contains("TODO inside") || output.content.contains("todo.md"),
            "{tool} {input}: {}",
            output.content
        );
    }
}

/// DESIGN's mode table for MCP tools: deny rules always; plan mode and read-only agents only
/// tools their server marks `readOnlyHint: true` and `openWorldHint: false` (a missing hint is
/// true), or that the user names in `[mcp] read_only_tools`; `default`/`acceptEdits` allow
/// those and ask for the rest; `dontAsk` denies what would ask; `auto` counts its denials;
/// `bypassPermissions` allows what no ask rule names; rules name servers that need not be
/// configured.
#[test]
fn mcp_tools_follow_the_mode_table() {
    use muster_agents::mcp::McpToolFacts;
    let fixture = Fixture::new();
    let facts =
        |tool: &str, read_only_hint: bool, closed_world_hint: bool, user: bool| McpToolFacts {
            server: "docs".to_owned(),
            tool: tool.to_owned(),
            name: format!("mcp__docs__{tool}"),
            read_only_hint,
            closed_world_hint,
            user_read_only: user,
        };
    let trusted = facts("search", true, true, false);
    let open_world = facts("fetch", true, false, false);
    let no_hints = facts("lookup", false, false, false);
    let declared = facts("lookup", false, false, true);
    let writing = facts("publish", false, true, false);
    use PermissionMode as M;
    use Verdict::{Allow as A, Ask as K, Deny as D};
    // (mode, read-only and closed-world, read-only but open-world, no hints, declared by the
    // user, a writing tool)
    let table = [
        (M::Plan, A, D, D, A, D),
        (M::Default, A, K, K, A, K),
        (M::AcceptEdits, A, K, K, A, K),
        (M::DontAsk, A, D, D, A, D),
        (M::Auto, A, D, D, A, D),
        (M::BypassPermissions, A, A, A, A, A),
    ];
    let none = rules(&[], &[], &[]);
    for (mode, for_trusted, for_open, for_none, for_declared, for_writing) in table {
        for (tool, expected) in [
            (&trusted, for_trusted),
            (&open_world, for_open),
            (&no_hints, for_none),
            (&declared, for_declared),
            (&writing, for_writing),
        ] {
            let mut context = PermissionContext::new(
                AgentKind::Lead,
                mode,
                &fixture.workspace,
                &none,
                &fixture.catalog,
            );
            context.mcp_tool = Some(tool.clone());
            let decision = fixture.engine.decide(&context, &tool.name, &json!({}));
            assert_eq!(
                decision.verdict, expected,
                "{mode} {tool:?}: {}",
                decision.reason
            );
            if mode == M::Auto && expected == D {
                assert_eq!(decision.auto_gate, AutoGateEffect::CountDenial);
            }
            if mode == M::Plan && tool.name == open_world.name {
                assert!(
                    decision.reason.contains("openWorldHint: false"),
                    "{}",
                    decision.reason
                );
            }
        }
    }

    // Deny rules in every mode, bypassPermissions included; server-wide rules too.
    for deny in ["mcp__docs", "mcp__docs__*", "mcp__docs__search"] {
        let denying = rules(&[], &[], &[deny]);
        let mut context = PermissionContext::new(
            AgentKind::Lead,
            M::BypassPermissions,
            &fixture.workspace,
            &denying,
            &fixture.catalog,
        );
        context.mcp_tool = Some(trusted.clone());
        let decision = fixture.engine.decide(&context, &trusted.name, &json!({}));
        assert_eq!(decision.verdict, D, "{deny}: {}", decision.reason);
    }
    // Ask rules in every mode but plan (whose own list decides first), bypassPermissions
    // included.
    let asking = rules(&[], &["mcp__docs__search"], &[]);
    for (mode, expected) in [(M::BypassPermissions, K), (M::Default, K), (M::DontAsk, D)] {
        let mut context = PermissionContext::new(
            AgentKind::Lead,
            mode,
            &fixture.workspace,
            &asking,
            &fixture.catalog,
        );
        context.mcp_tool = Some(trusted.clone());
        let decision = fixture.engine.decide(&context, &trusted.name, &json!({}));
        assert_eq!(decision.verdict, expected, "{mode}: {}", decision.reason);
        assert!(decision.reason.contains("ask rule"), "{}", decision.reason);
    }
    // An allow rule turns the ask into an allow, but never widens plan mode.
    let allowing = rules(&["mcp__docs__publish"], &[], &[]);
    for (mode, expected) in [(M::Default, A), (M::Plan, D)] {
        let mut context = PermissionContext::new(
            AgentKind::Lead,
            mode,
            &fixture.workspace,
            &allowing,
            &fixture.catalog,
        );
        context.mcp_tool = Some(writing.clone());
        let decision = fixture.engine.decide(&context, &writing.name, &json!({}));
        assert_eq!(decision.verdict, expected, "{mode}: {}", decision.reason);
    }
    // A rule for a server nobody configured parses; a call of an unknown MCP tool is denied.
    assert!(
        "mcp__nowhere__x"
            .parse::<muster_config::PermissionRule>()
            .is_ok()
    );
    let context = PermissionContext::new(
        AgentKind::Lead,
        M::BypassPermissions,
        &fixture.workspace,
        &none,
        &fixture.catalog,
    );
    let decision = fixture
        .engine
        .decide(&context, "mcp__nowhere__x", &json!({}));
    assert_eq!(decision.verdict, D);
    assert!(
        decision.reason.contains("not available"),
        "{}",
        decision.reason
    );
    // A read-only agent gets the plan-mode rules for MCP tools in every mode.
    let mut read_only = PermissionContext::new(
        AgentKind::Teammate,
        M::BypassPermissions,
        &fixture.workspace,
        &none,
        &fixture.catalog,
    );
    read_only.definition.read_only = true;
    read_only.mcp_tool = Some(writing.clone());
    let decision = fixture.engine.decide(&read_only, &writing.name, &json!({}));
    assert_eq!(decision.verdict, D, "{}", decision.reason);
}

/// A file tool writing a protected file (`.claude/settings*.json`, `.mcp.json`,
/// `muster.team.toml`) asks in every mode, `bypassPermissions` included, whatever allow rule
/// or grant would allow it; plan mode denies it as every write; reading it needs nothing.
#[test]
fn protected_files_ask_in_every_mode() {
    let fixture = Fixture::new();
    let allow_everything = rules(&["Edit", "Write", "Edit(.claude/**)"], &[], &[]);
    use PermissionMode as M;
    use Verdict::{Allow as A, Ask as K, Deny as D};
    let table = [
        (M::Plan, D),
        (M::DontAsk, D),
        (M::Default, K),
        (M::AcceptEdits, K),
        (M::Auto, D),
        (M::BypassPermissions, K),
    ];
    for path in [
        ".claude/settings.json",
        ".claude/settings.local.json",
        "./.mcp.json",
        "muster.team.toml",
    ] {
        for (mode, expected) in table {
            let context = PermissionContext::new(
                AgentKind::Teammate,
                mode,
                &fixture.workspace,
                &allow_everything,
                &fixture.catalog,
            );
            for (tool, input) in [
                ("Write", json!({"file_path": path, "content": "{}"})),
                (
                    "Edit",
                    json!({"file_path": path, "old_string": "a", "new_string": "b"}),
                ),
            ] {
                let decision = fixture.engine.decide(&context, tool, &input);
                assert_eq!(
                    decision.verdict, expected,
                    "{tool} {path} in {mode}: {}",
                    decision.reason
                );
                if mode != M::Plan {
                    assert!(
                        decision.reason.contains("protected file"),
                        "{tool} {path} in {mode}: {}",
                        decision.reason
                    );
                }
            }
        }
        let context = PermissionContext::new(
            AgentKind::Teammate,
            M::Default,
            &fixture.workspace,
            &allow_everything,
            &fixture.catalog,
        );
        let read = fixture
            .engine
            .decide(&context, "Read", &json!({"file_path": path}));
        assert_eq!(read.verdict, A, "{}", read.reason);
    }
    // Other files under `.claude/` follow the mode as before.
    let context = PermissionContext::new(
        AgentKind::Teammate,
        M::BypassPermissions,
        &fixture.workspace,
        &allow_everything,
        &fixture.catalog,
    );
    let decision = fixture.engine.decide(
        &context,
        "Write",
        &json!({"file_path": ".claude/agents/a.md", "content": "x"}),
    );
    assert_eq!(decision.verdict, A, "{}", decision.reason);
}
