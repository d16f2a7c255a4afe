//! Skills: where they are found, how they are named, what the model is shown of them.

use muster_config::SkillCatalog;
use muster_config::plugins::PluginScope;

use super::fixtures::Project;

#[test]
fn skills_of_the_project_the_user_and_plugins_with_the_users_first() {
    let project = Project::new();
    project.write(
        ".claude/skills/release/SKILL.md",
        "---\nname: release\ndescription: Cut a release\nallowed-tools: Bash(git tag:*), Read\n---\n# Release\nTag it.\n",
    );
    project.write(
        ".claude/skills/notes/SKILL.md",
        "# Notes\n\nWrite release notes\nfrom the log.\n\nMore.\n",
    );
    project.write(
        ".claude/skills/manual/SKILL.md",
        "---\ndescription: only by hand\ndisable-model-invocation: true\n---\nM.\n",
    );
    project.write(".claude/skills/empty-dir/readme.txt", "not a skill");
    project.write_home(
        ".claude/skills/release/SKILL.md",
        "---\nname: release\ndescription: My own release steps\n---\nMine.\n",
    );
    project.write(
        ".claude/agents/kit/plugins/docs/.claude-plugin/plugin.json",
        r#"{"name": "docs-kit", "version": "1.0.0"}"#,
    );
    project.write(
        ".claude/agents/kit/plugins/docs/skills/write/SKILL.md",
        "---\nname: write\ndescription: Write docs\nallowed-tools: [Read, Write]\n---\nW.\n",
    );
    project.write_home(
        ".claude/plugins/market/.claude-plugin/marketplace.json",
        r#"{"plugins": [{"name": "kit", "source": "./kit"}, {"name": "out", "source": "../x"}]}"#,
    );
    project.write_home(
        ".claude/plugins/market/kit/skills/lint/SKILL.md",
        "---\ndescription: Lint it\n---\nL.\n",
    );
    let loaded = SkillCatalog::load(&project.project_root(), Some(&project.home));
    let warnings: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    let catalog = loaded.value;
    let names: Vec<&str> = catalog.iter().map(|skill| skill.name.as_str()).collect();
    assert_eq!(
        names,
        ["docs-kit:write", "kit:lint", "manual", "notes", "release"]
    );
    let release = catalog.get("release").unwrap();
    assert_eq!(release.scope, PluginScope::User);
    assert_eq!(release.description, "My own release steps");
    assert_eq!(release.body().unwrap(), "Mine.");
    assert_eq!(
        catalog.get("notes").unwrap().description,
        "Write release notes from the log."
    );
    assert_eq!(
        catalog
            .get("docs-kit:write")
            .unwrap()
            .allowed_tools
            .as_deref(),
        Some("Read, Write")
    );
    assert_eq!(warnings.len(), 2, "{warnings:#?}");
    assert!(
        warnings[0].contains("skill `release` is also defined in")
            && warnings[0].contains("(project); this one (user) is used"),
        "{warnings:#?}"
    );
    assert!(
        warnings[1].contains(
            "skill `docs-kit:write` sets `allowed-tools`, which muster shows and does not apply"
        ),
        "{warnings:#?}"
    );
    let section = catalog.prompt_section();
    assert!(section.starts_with("# Skills\n"), "{section}");
    assert!(
        section.contains("\n- docs-kit:write: Write docs"),
        "{section}"
    );
    assert!(
        section.contains("\n- release: My own release steps"),
        "{section}"
    );
    assert!(!section.contains("manual"), "{section}");
    assert!(!section.contains("Mine."), "the body is not in the prompt");
}

#[test]
fn no_skills_no_section_and_a_body_is_read_when_asked() {
    let project = Project::new();
    let catalog = SkillCatalog::load(&project.project_root(), None).value;
    assert!(catalog.is_empty());
    assert_eq!(catalog.prompt_section(), "");
    let path = project.write(
        ".claude/skills/fmt/SKILL.md",
        "---\ndescription: Format\n---\nOld body.\n",
    );
    let catalog = SkillCatalog::load(&project.project_root(), None).value;
    std::fs::write(&path, "---\ndescription: Format\n---\nNew body.\n").unwrap();
    assert_eq!(catalog.get("fmt").unwrap().body().unwrap(), "New body.");
    assert_eq!(
        catalog.get("fmt").unwrap().directory(),
        project.root.join(".claude/skills/fmt")
    );
}
