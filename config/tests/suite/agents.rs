//! Agent definition files, built-ins, overrides, and instruction files.

use muster_config::agents::{AgentDir, ModelChoice, parse_agent_file};
use muster_config::{
    AgentCatalog, DefinitionSource, InstructionScope, PermissionMode, ProjectInstructions,
};
use std::path::PathBuf;

use super::fixtures::{Project, display};

const REVIEWER: &str = "---\nname: reviewer\ndescription: Reviews diffs\ntools:\n  - Read\n  - Grep\n  - Task\npermissionMode: plan\nmodel: claude-haiku-4-5\n---\nYou review code.\n";

#[test]
fn a_muster_definition_parses_every_key() {
    let loaded = parse_agent_file("r.md", REVIEWER, AgentDir::Muster).unwrap();
    let definition = loaded.value;
    assert!(loaded.warnings.is_empty());
    assert_eq!(definition.name, "reviewer");
    assert_eq!(definition.description, "Reviews diffs");
    assert_eq!(definition.tools, Some(vec!["Read", "Grep", "Agent"]));
    assert_eq!(definition.permission_mode, Some(PermissionMode::Plan));
    assert_eq!(
        definition.model,
        ModelChoice::Named("claude-haiku-4-5".to_string())
    );
    assert_eq!(definition.system_prompt, "You review code.");
    let text = "---\nname: scout\ndescription: d\ntools: Read, Bash\ndisallowedTools: Bash\nread_only: true\nmodel: inherit\n---\nbody";
    let definition = parse_agent_file("s.md", text, AgentDir::Muster)
        .unwrap()
        .value;
    assert_eq!(definition.effective_tools(), vec!["Read"]);
    assert!(definition.read_only);
    assert_eq!(definition.model, ModelChoice::Inherit);
}

#[test]
fn bad_definitions_report_file_line_column_and_key() {
    let cases = [
        (
            "no front matter",
            "s.md:1:1: expected YAML front matter starting with a `---` line, found none",
        ),
        (
            "---\nname: a\n",
            "s.md:2:1: front matter opened with `---` on line 1 is never closed with a `---` line",
        ),
        (
            "---\nname: [a\n---\n",
            "s.md:3:1: invalid YAML: while parsing a flow sequence, expected ',' or ']'",
        ),
        (
            "---\nname: a\ndescription: d\ncolour: red\n---\n",
            "s.md:4:1: colour: unknown key `colour`",
        ),
        (
            "---\nname: a\ndescription: d\ntols: Read\n---\n",
            "s.md:4:1: tols: unknown key `tols` (did you mean `tools`?)",
        ),
        (
            "---\nname: a\ndescription: d\ntools: Read, Grp\n---\n",
            "s.md:4:8: tools: unknown tool `Grp` (did you mean `Grep`?)",
        ),
        (
            "---\nname: a\ndescription: d\ntools: [Read, WebFetch]\n---\n",
            "s.md:4:15: tools: unknown tool `WebFetch`",
        ),
        (
            "---\nname: a\ndescription: d\npermissionMode: acceptedits\n---\n",
            "s.md:4:17: permissionMode: expected one of plan, dontAsk, default, acceptEdits, auto, bypassPermissions, found \"acceptedits\" (did you mean `acceptEdits`?)",
        ),
        (
            "---\nname: a\ndescription: d\nread_only: yes\n---\n",
            "s.md:4:12: read_only: expected true or false, found a string \"yes\"",
        ),
        (
            "---\ndescription: d\n---\n",
            "s.md:1:1: name: missing required key `name`",
        ),
        (
            "---\nname: -lives\ndescription: d\n---\n",
            "s.md:2:7: name: expected a non-empty name not starting with `-`, without control characters (at most 128), found \"-lives\"",
        ),
        (
            "---\nname: a\ndescription: d\nmodel: opus|sonnet|haiku\n---\n",
            "s.md:4:8: model: `opus|sonnet|haiku` is not a model id: write sonnet, opus, haiku, inherit or a model id such as claude-sonnet-4-5",
        ),
        (
            "---\nname: a\ndescription: [x]\n---\n",
            "s.md:3:14: description: expected a string, found a list",
        ),
        (
            "---\n- a\n---\n",
            "s.md:2:1: expected a mapping of keys, found a list",
        ),
    ];
    for (text, expected) in cases {
        let error = parse_agent_file("s.md", text, AgentDir::Muster)
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with(expected),
            "for {text:?}\n got: {error}\nwant: {expected}"
        );
    }
}

#[test]
fn claude_files_load_with_warnings_for_what_muster_ignores() {
    let text = "---\nname: code-reviewer\ndescription: Expert reviewer\ntools: Read, Grep, WebFetch, mcp__github__get_pr, Task\ncolor: purple\nmodel: sonnet\n---\nReview.\n";
    let loaded = parse_agent_file("c.md", text, AgentDir::Claude).unwrap();
    assert_eq!(loaded.value.tools, Some(vec!["Read", "Grep", "Agent"]));
    assert!(loaded.value.offers_mcp_tool("github", "get_pr"));
    assert!(!loaded.value.offers_mcp_tool("github", "merge_pr"));
    assert_eq!(
        loaded.value.model,
        ModelChoice::Named("claude-sonnet-4-5".to_string())
    );
    let warnings: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        vec![
            "c.md:4:8: tools: ignored: unknown tool `WebFetch`",
            "c.md:5:1: color: ignored: unknown key `color`",
        ]
    );
}

#[test]
fn project_files_override_built_ins_and_claude_files() {
    let project = Project::new();
    let claude_general = project.write(
        ".claude/agents/general.md",
        "---\nname: general\ndescription: from claude\ncolor: blue\n---\nclaude body\n",
    );
    let claude_helper = project.write(
        ".claude/agents/helper.md",
        "---\nname: helper\ndescription: helps\ntools: Read, WebSearch\n---\nhelp\n",
    );
    let muster_general = project.write(
        ".muster/agents/general.md",
        "---\nname: general\ndescription: ours\ntools: Read, Edit\n---\nour body\n",
    );
    project.write(".muster/agents/notes.txt", "not a definition");
    let loaded = AgentCatalog::load(&project.project_root(), None).unwrap();
    let catalog = loaded.value;
    let names: Vec<&str> = catalog.names().collect();
    assert_eq!(names, vec!["Plan", "general", "helper", "lead"]);
    let general = catalog.get("general").unwrap();
    assert_eq!(general.description, "ours");
    assert_eq!(
        general.source,
        DefinitionSource::File {
            path: muster_general,
            dir: AgentDir::Muster
        }
    );
    assert_eq!(
        general.overrides,
        vec![
            DefinitionSource::BuiltIn,
            DefinitionSource::File {
                path: claude_general.clone(),
                dir: AgentDir::Claude
            }
        ]
    );
    assert_eq!(
        catalog.get("lead").unwrap().source,
        DefinitionSource::BuiltIn
    );
    let warnings: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        vec![
            format!(
                "{}:4:1: color: ignored: unknown key `color`",
                display(&claude_general)
            ),
            format!(
                "{}:4:8: tools: ignored: unknown tool `WebSearch`",
                display(&claude_helper)
            ),
        ]
    );
}

#[test]
fn duplicate_names_in_one_directory_are_errors() {
    let project = Project::new();
    let first = project.write(
        ".muster/agents/a.md",
        "---\nname: twin\ndescription: one\n---\n",
    );
    let second = project.write(
        ".muster/agents/b.md",
        "---\nname: twin\ndescription: two\n---\n",
    );
    let error = AgentCatalog::load(&project.project_root(), None)
        .unwrap_err()
        .to_string();
    assert_eq!(
        error,
        format!(
            "{}: name: duplicate agent name `twin`: also defined in {}",
            display(&second),
            display(&first)
        )
    );
}

#[test]
fn errors_in_several_files_are_all_reported() {
    let project = Project::new();
    project.write(
        ".muster/agents/a.md",
        "---\nname: a\ndescription: d\nbogus: 1\n---\n",
    );
    project.write(
        ".muster/agents/b.md",
        "---\nname: b\ndescription: d\ntools: Nope\n---\n",
    );
    // A `.claude/agents` file is never an error: it is skipped with a warning.
    project.write(".claude/agents/c.md", "no front matter");
    let error = AgentCatalog::load(&project.project_root(), None).unwrap_err();
    assert_eq!(error.diagnostics().len(), 2, "{error}");
}

#[test]
fn instruction_files_are_loaded_and_cut_with_a_warning() {
    let project = Project::new();
    project.write("AGENTS.md", "Use cargo.\n");
    let claude = project.write("CLAUDE.md", &"x".repeat(100));
    let loaded = ProjectInstructions::load(&project.project_root(), 40, None).unwrap();
    assert_eq!(loaded.value.files.len(), 2);
    assert_eq!(loaded.value.files[0].content, "Use cargo.\n");
    assert_eq!(loaded.value.files[1].content.len(), 40);
    assert_eq!(loaded.value.files[1].truncated_from, Some(100));
    let warnings: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        vec![format!(
            "{}: CLAUDE.md is 100 bytes; only the first 40 bytes are loaded (instructions_max_bytes = 40)",
            display(&claude)
        )]
    );
    let prompt = loaded.value.prompt_section();
    assert!(
        prompt.starts_with("# Project instructions from AGENTS.md\n\nUse cargo.\n"),
        "{prompt}"
    );
    assert!(prompt.contains("# Project instructions from CLAUDE.md"));
}

/// `.claude/agents` in the shapes real collections have, each of which used to stop every
/// definition from loading: each file is read leniently or skipped, with a warning.
#[test]
fn every_claude_file_is_read_or_skipped_on_its_own() {
    let project = Project::new();
    let files: &[(&str, &str)] = &[
        // An unquoted `: ` inside a one-line description.
        (
            "groomer.md",
            "---\nname: groomer\ndescription: Use when grooming. Triggers on: 'groom backlog'\ntools: Read, Grep\n---\nGroom.\n",
        ),
        // The `/agents` wizard's shape: one line with literal `\n`, `Context:` and `user:`.
        (
            "wizard.md",
            "---\nname: wizard\ndescription: Use this agent for reviews.\\n\\nExamples:\\n<example>\\nContext: a PR\\nuser: 'review it'\\n</example>\nmodel: sonnet\ncolor: blue\n---\nReview.\n",
        ),
        // A name with dots.
        (
            "powershell.md",
            "---\nname: powershell-5.1-expert\ndescription: PowerShell 5.1\ntools: \"*\"\n---\nScripts.\n",
        ),
        // Not a definition at all.
        ("README.md", "# My agents\n\nA collection.\n"),
        // Two files with one name: the first in path order wins.
        (
            "a-twin.md",
            "---\nname: twin\ndescription: first\n---\nOne.\n",
        ),
        (
            "b-twin.md",
            "---\nname: twin\ndescription: second\n---\nTwo.\n",
        ),
        // Empty values.
        (
            "empty.md",
            "---\nname: empty\ndescription: empty values\nmodel:\npermissionMode:\n---\nE.\n",
        ),
        // No usable tool, and a tool that is a Claude Code team tool.
        (
            "mcp-only.md",
            "---\nname: mcp-only\ndescription: only MCP\ntools: mcp__context7__resolve, TeamCreate\n---\nM.\n",
        ),
        // In a subdirectory.
        (
            "development/builder.md",
            "---\nname: builder\ndescription: builds\ntools: [Read, Bash]\n---\nBuild.\n",
        ),
    ];
    for (path, text) in files {
        project.write(&format!(".claude/agents/{path}"), text);
    }
    let loaded = AgentCatalog::load(&project.project_root(), None).unwrap();
    let catalog = loaded.value;
    for name in [
        "groomer",
        "wizard",
        "powershell-5.1-expert",
        "twin",
        "empty",
        "mcp-only",
        "builder",
    ] {
        assert!(catalog.get(name).is_some(), "{name} did not load");
    }
    let groomer = catalog.get("groomer").unwrap();
    assert_eq!(
        groomer.description,
        "Use when grooming. Triggers on: 'groom backlog'"
    );
    assert_eq!(groomer.tools, Some(vec!["Read", "Grep"]));
    assert!(
        catalog
            .get("wizard")
            .unwrap()
            .description
            .starts_with("Use this agent")
    );
    assert_eq!(
        catalog.get("wizard").unwrap().model,
        ModelChoice::Named("claude-sonnet-4-5".into())
    );
    assert_eq!(
        catalog.get("powershell-5.1-expert").unwrap().tools,
        None,
        "`*` is every tool"
    );
    assert_eq!(catalog.get("twin").unwrap().description, "first");
    let empty = catalog.get("empty").unwrap();
    assert_eq!(empty.model, ModelChoice::Settings);
    assert_eq!(empty.permission_mode, None);
    assert_eq!(
        catalog.get("builder").unwrap().tools,
        Some(vec!["Read", "Bash"])
    );
    let warnings: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    for expected in [
        "groomer.md:3:",
        "is not valid YAML",
        "README.md:1:1: skipped: expected YAML front matter",
        "b-twin.md: name: duplicate agent name `twin`",
        "which wins (the first in path order)",
        "model: ignored: `model` is empty",
        "permissionMode: ignored: `permissionMode` is empty",
        "`TeamCreate` is not a tool in muster: teams are declared in muster.team.toml",
        "agent `mcp-only` is left with no tool muster has",
    ] {
        assert!(
            warnings.iter().any(|w| w.contains(expected)),
            "no warning with {expected:?} in {warnings:#?}"
        );
    }
}

#[test]
fn muster_files_stay_strict_and_say_what_to_do() {
    let project = Project::new();
    project.write(
        ".muster/agents/fetcher.md",
        "---\nname: fetcher\ndescription: fetches\ntools: Read, WebFetch\n---\nF.\n",
    );
    let error = AgentCatalog::load(&project.project_root(), None)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("muster has no `WebFetch`; remove it, or keep the file in .claude/agents"),
        "{error}"
    );
}

#[test]
fn model_names_map_as_claude_code_maps_them_and_unknown_ones_are_warned_about() {
    let cases = [
        ("sonnet", "claude-sonnet-4-5"),
        ("Sonnet", "claude-sonnet-4-5"),
        ("opus[1m]", "claude-opus-4-1"),
        ("claude-sonnet-4-5[1m]", "claude-sonnet-4-5"),
        ("claude-sonnet-4-20250514", "claude-sonnet-4-20250514"),
        ("Qwen/Qwen2.5-Coder", "Qwen/Qwen2.5-Coder"),
    ];
    for (written, id) in cases {
        assert_eq!(muster_config::agents::model_id(written), id, "{written}");
    }
    let project = Project::new();
    project.write(
        ".claude/agents/old.md",
        "---\nname: old\ndescription: an old id\nmodel: claude-sonnet-4-20250514\n---\nO.\n",
    );
    project.write(
        ".claude/agents/big.md",
        "---\nname: big\ndescription: big context\nmodel: opus[1m]\n---\nB.\n",
    );
    let catalog = AgentCatalog::load(&project.project_root(), None)
        .unwrap()
        .value;
    let known = ["claude-sonnet-4-5", "claude-opus-4-1", "claude-haiku-4-5"];
    let warnings: Vec<String> = catalog
        .model_warnings(|model| known.contains(&model))
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].contains("agent `old` names model `claude-sonnet-4-20250514`, which is not in the model catalogue"),
        "{warnings:#?}"
    );
}

/// What a `model:` value is: `inherit`, an alias, a model-shaped id (sent as written), or not
/// a model id at all (the definition inherits).
#[test]
fn model_values_are_ids_aliases_or_not_models() {
    use muster_config::agents::{ModelValue, read_model_value};
    let id = |text: &str| ModelValue::Id(text.to_owned());
    let cases = [
        ("inherit", ModelValue::Inherit),
        ("sonnet", id("claude-sonnet-4-5")),
        ("Haiku", id("claude-haiku-4-5")),
        ("opus[1m]", id("claude-opus-4-1")),
        ("claude-sonnet-4-20250514", id("claude-sonnet-4-20250514")),
        ("gpt-4.1", id("gpt-4.1")),
        ("Qwen/Qwen2.5-Coder", id("Qwen/Qwen2.5-Coder")),
        ("llama3:8b", id("llama3:8b")),
        ("opus|sonnet|haiku", ModelValue::NotAModel),
        ("<model>", ModelValue::NotAModel),
        ("claude sonnet", ModelValue::NotAModel),
        ("fast", ModelValue::NotAModel),
        ("${MODEL}", ModelValue::NotAModel),
        ("-x1", ModelValue::NotAModel),
    ];
    for (written, expected) in cases {
        assert_eq!(read_model_value(written), expected, "{written}");
    }
}

/// Claude Code's collections as users clone them: names with spaces load; a template's
/// `model: opus|sonnet|haiku` in many files inherits with one warning for the value; an id the
/// catalogue lacks, named by many files, is one warning; a plugin repository's skills and
/// commands are not agent definitions.
#[test]
fn a_cloned_collection_loads_with_one_warning_per_distinct_value() {
    let project = Project::new();
    project.write(
        ".claude/agents/Code Reviewer.md",
        "---\nname: Code Reviewer\ndescription: reviews\n---\nR.\n",
    );
    for index in 0..5 {
        project.write(
            &format!(".claude/agents/template-{index}.md"),
            &format!(
                "---\nname: template-{index}\ndescription: t\nmodel: opus|sonnet|haiku\n---\nT.\n"
            ),
        );
        project.write(
            &format!(".claude/agents/dated-{index}.md"),
            &format!(
                "---\nname: dated-{index}\ndescription: d\nmodel: claude-sonnet-4-20250514\n---\nD.\n"
            ),
        );
    }
    project.write(
        ".claude/agents/kit/plugins/review/.claude-plugin/plugin.json",
        r#"{"name": "review"}"#,
    );
    project.write(
        ".claude/agents/kit/plugins/review/agents/auditor.md",
        "---\nname: auditor\ndescription: audits\n---\nA.\n",
    );
    project.write(
        ".claude/agents/kit/plugins/review/skills/lint/SKILL.md",
        "---\nname: lint\ndescription: lints\n---\nL.\n",
    );
    project.write(
        ".claude/agents/kit/plugins/review/commands/review.md",
        "---\ndescription: review a file\n---\nReview $ARGUMENTS\n",
    );
    // A marketplace listing a plugin that has no plugin.json, and a clone's own commands.
    project.write(
        ".claude/agents/market/.claude-plugin/marketplace.json",
        r#"{"name": "m", "plugins": [{"name": "dev", "source": "./plugins/dev"}]}"#,
    );
    project.write(
        ".claude/agents/market/plugins/dev/commands/create.md",
        "---\ndescription: create a plugin\n---\nCreate.\n",
    );
    project.write(
        ".claude/agents/market/plugins/dev/agents/builder.md",
        "---\nname: builder\ndescription: builds\n---\nB.\n",
    );
    project.write(
        ".claude/agents/market/.claude/commands/triage.md",
        "---\ndescription: triage\n---\nTriage.\n",
    );
    project.write(
        ".claude/agents/loose/SKILL.md",
        "---\nname: loose\ndescription: a skill outside a plugin\n---\nL.\n",
    );
    let loaded = AgentCatalog::load(&project.project_root(), None).unwrap();
    let warnings: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    let catalog = loaded.value;
    assert!(catalog.get("Code Reviewer").is_some(), "{warnings:#?}");
    assert!(catalog.get("auditor").is_some());
    assert!(catalog.get("builder").is_some());
    for not_agent in ["lint", "loose"] {
        assert!(catalog.get(not_agent).is_none(), "{not_agent}");
    }
    assert_eq!(
        catalog.get("template-3").unwrap().model,
        ModelChoice::Inherit
    );
    assert_eq!(
        catalog.get("dated-3").unwrap().model,
        ModelChoice::Named("claude-sonnet-4-20250514".into())
    );
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].contains("`model: opus|sonnet|haiku` is not a model id (and in 4 more files): these definitions use the inherited model"),
        "{warnings:#?}"
    );
    let known = ["claude-sonnet-4-5"];
    let unknown: Vec<String> = catalog
        .model_warnings(|model| known.contains(&model))
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(unknown.len(), 1, "{unknown:#?}");
    assert!(
        unknown[0]
            .contains("5 agents (`dated-0` and 4 more) name model `claude-sonnet-4-20250514`"),
        "{unknown:#?}"
    );
}

#[test]
fn an_instruction_file_is_read_once_however_it_is_linked_or_copied() {
    let project = Project::new();
    let agents = project.write("AGENTS.md", "Use cargo.\n");
    std::os::unix::fs::symlink(&agents, project.root.join("CLAUDE.md")).unwrap();
    let loaded = ProjectInstructions::load(&project.project_root(), 1000, None).unwrap();
    assert_eq!(
        loaded.value.files.len(),
        1,
        "a symlink to AGENTS.md adds nothing"
    );
    assert_eq!(
        loaded.value.prompt_section().matches("Use cargo.").count(),
        1
    );
    // A copy under .claude adds nothing either; a different text there is read.
    project.write(".claude/CLAUDE.md", "Use cargo.\n");
    let loaded = ProjectInstructions::load(&project.project_root(), 1000, None).unwrap();
    assert_eq!(loaded.value.files.len(), 1);
    let own = project.write(".claude/CLAUDE.md", "Run clippy.\n");
    let loaded = ProjectInstructions::load(&project.project_root(), 1000, None).unwrap();
    let paths: Vec<_> = loaded.value.files.iter().map(|f| f.path.clone()).collect();
    assert_eq!(paths, vec![agents, own]);
}

#[test]
fn agent_x_in_tools_is_agent_limited_to_those_definitions() {
    let text = "---\nname: lead-ish\ndescription: d\ntools: Read, Agent(Plan, reviewer), Task(helper)\n---\nL.\n";
    let loaded = parse_agent_file("a.md", text, AgentDir::Claude).unwrap();
    assert_eq!(loaded.value.tools, Some(vec!["Read", "Agent"]));
    assert_eq!(
        loaded.value.agent_types,
        Some(vec![
            "Plan".to_string(),
            "reviewer".to_string(),
            "helper".to_string()
        ])
    );
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let plain = parse_agent_file("b.md", REVIEWER, AgentDir::Muster).unwrap();
    assert_eq!(
        plain.value.agent_types, None,
        "a bare Agent/Task starts any definition"
    );
}

/// `~/.claude/agents/` (recursive) loads below the project: a project file of the same name
/// overrides a user one, a user file cannot override a built-in, and without a home (as
/// `muster demo` runs) nothing of the user's is read.
#[test]
fn user_level_definitions_load_below_the_projects() {
    let project = Project::new();
    let definition =
        |name: &str, body: &str| format!("---\nname: {name}\ndescription: {body}\n---\n{body}\n");
    project.write_home(
        ".claude/agents/review/reviewer.md",
        &definition("reviewer", "user reviewer"),
    );
    project.write_home(
        ".claude/agents/notes.md",
        &definition("note-taker", "user notes"),
    );
    project.write_home(
        ".claude/agents/general.md",
        &definition("general", "user general"),
    );
    project.write(
        ".claude/agents/reviewer.md",
        &definition("reviewer", "project reviewer"),
    );
    let loaded = AgentCatalog::load(&project.project_root(), Some(&project.home)).unwrap();
    let catalog = loaded.value;
    assert_eq!(
        catalog.get("note-taker").unwrap().description,
        "user notes",
        "a user definition in a subdirectory loads"
    );
    let reviewer = catalog.get("reviewer").unwrap();
    assert_eq!(reviewer.description, "project reviewer");
    assert!(
        reviewer
            .overrides
            .iter()
            .any(|source| source.to_string().contains("home")),
        "the project reviewer records the user one it overrides: {:?}",
        reviewer.overrides
    );
    assert_eq!(
        catalog.get("general").unwrap().source,
        DefinitionSource::BuiltIn
    );
    let warnings: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("general.md") && w.contains("only project files")),
        "{warnings:#?}"
    );
    let without_home = AgentCatalog::load(&project.project_root(), None)
        .unwrap()
        .value;
    assert!(without_home.get("note-taker").is_none());
}

/// The user's `~/.claude/CLAUDE.md` comes first, then the project's files; `@path` imports
/// are read after the file that names them (relative and `~/`), once each, at most five hops
/// deep, never from outside the project and the home directory, and a cycle, a missing file
/// and an import in a code block are not followed.
#[test]
fn instruction_files_follow_claude_codes_order_and_imports() {
    let project = Project::new();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.md"), "OUTSIDE\n").unwrap();
    project.write_home(".claude/CLAUDE.md", "User rules. See @~/notes/tone.md\n");
    project.write_home("notes/tone.md", "Be brief.\n");
    project.write(
        "AGENTS.md",
        &format!(
            "Project rules.\n@docs/style.md and @docs/missing.md, not `@docs/code.md`.\n@{}/secret.md\n```\n@docs/fenced.md\n```\n",
            outside.path().display()
        ),
    );
    project.write("docs/style.md", "Style: @cycle/a.md\n");
    project.write("docs/cycle/a.md", "A imports @b.md\n");
    project.write("docs/cycle/b.md", "B imports @a.md and @../../chain/1.md\n");
    for hop in 1..=7 {
        project.write(
            &format!("chain/{hop}.md"),
            &format!("hop {hop} @{}.md\n", hop + 1),
        );
    }
    project.write("docs/code.md", "CODE\n");
    project.write("docs/fenced.md", "FENCED\n");
    let loaded =
        ProjectInstructions::load(&project.project_root(), 10_000, Some(&project.home)).unwrap();
    let names: Vec<String> = loaded
        .value
        .files
        .iter()
        .map(|f| {
            let path = f.path.to_string_lossy();
            path.rsplit(['/'])
                .take(2)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("/")
        })
        .collect();
    assert_eq!(
        names[..7],
        [
            ".claude/CLAUDE.md",
            "notes/tone.md",
            "project/AGENTS.md",
            "docs/style.md",
            "cycle/a.md",
            "cycle/b.md",
            "chain/1.md"
        ],
        "{names:#?}"
    );
    let prompt = loaded.value.prompt_section();
    assert!(
        prompt.starts_with("# The user's instructions from ~/.claude/CLAUDE.md"),
        "{prompt}"
    );
    for absent in ["OUTSIDE", "CODE", "FENCED", "hop 7"] {
        assert!(!prompt.contains(absent), "{absent} was read:\n{prompt}");
    }
    assert_eq!(prompt.matches("A imports").count(), 1);
    let warnings: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    for expected in [
        "docs/missing.md",
        "outside the project",
        "a cycle",
        "hops deep",
    ] {
        assert!(
            warnings.iter().any(|w| w.contains(expected)),
            "no warning with {expected:?}: {warnings:#?}"
        );
    }
}

/// `CLAUDE.local.md` at the project root is read as Claude Code reads it: after `CLAUDE.md`
/// and `.claude/CLAUDE.md` (the most specific last), labelled as the user's own, with its
/// imports.
#[test]
fn claude_local_md_is_read_last_beside_claude_md() {
    let project = Project::new();
    project.write("CLAUDE.md", "Team rules.\n");
    project.write(".claude/CLAUDE.md", "More team rules.\n");
    project.write(
        "CLAUDE.local.md",
        "My sandbox URL is http://localhost:3000. @notes/me.md\n",
    );
    project.write("notes/me.md", "I prefer tabs.\n");
    let loaded = ProjectInstructions::load(&project.project_root(), 10_000, None).unwrap();
    let scopes: Vec<(String, InstructionScope)> = loaded
        .value
        .files
        .iter()
        .map(|f| {
            let name = f.path.file_name().unwrap().to_string_lossy().into_owned();
            let scope = match &f.scope {
                InstructionScope::ImportedBy(_) => InstructionScope::ImportedBy(PathBuf::new()),
                other => other.clone(),
            };
            (name, scope)
        })
        .collect();
    assert_eq!(
        scopes,
        [
            ("CLAUDE.md".to_owned(), InstructionScope::Project),
            ("CLAUDE.md".to_owned(), InstructionScope::Project),
            ("CLAUDE.local.md".to_owned(), InstructionScope::ProjectLocal),
            (
                "me.md".to_owned(),
                InstructionScope::ImportedBy(PathBuf::new())
            ),
        ]
    );
    let prompt = loaded.value.prompt_section();
    assert!(
        prompt.contains("# The user's private project instructions from CLAUDE.local.md"),
        "{prompt}"
    );
    assert!(
        prompt.find("More team rules").unwrap() < prompt.find("localhost:3000").unwrap(),
        "{prompt}"
    );
}
