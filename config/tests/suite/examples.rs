//! The example files in `examples/config/` load, and `docs/configuration.md` documents every
//! settings key.

use muster_config::settings::known_keys;
use muster_config::{AgentCatalog, Layer, PermissionMode, Policy, Responder, TeamFile};

use super::fixtures::Project;

fn example(name: &str) -> String {
    let path = format!("{}/../examples/config/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{path}: {error}"))
}

#[test]
fn the_examples_load_as_a_project() {
    let project = Project::new();
    project.write(".muster/settings.toml", &example("settings.toml"));
    project.write(".muster/agents/reviewer.md", &example("agents/reviewer.md"));
    let team_path = project.write("muster.team.toml", &example("muster.team.toml"));
    project.write("policies/ci.toml", &example("policy.toml"));

    let loaded = project.load().unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let settings = loaded.value;
    assert_eq!(settings.plan.model.value, "claude-opus-4-1");
    assert_eq!(settings.permissions.deny.len(), 3);
    assert_eq!(
        settings.budgets.run.cost_usd.as_ref().unwrap().origin.layer,
        Layer::Project
    );
    let every_key_set = settings
        .entries()
        .iter()
        .filter(|entry| entry.origin.layer == Layer::Project)
        .count();
    assert!(every_key_set > 50, "{every_key_set}");

    let root = project.project_root();
    let catalog = AgentCatalog::load(&root, None).unwrap();
    assert!(catalog.warnings.is_empty());
    let reviewer = catalog.value.get("reviewer").unwrap();
    assert_eq!(reviewer.permission_mode, Some(PermissionMode::Plan));
    assert!(!reviewer.effective_tools().contains(&"Bash"));

    let team = TeamFile::load(&team_path, &root, &catalog.value).unwrap();
    let ids: Vec<&str> = team.teammates.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, vec!["alice", "worker-1", "worker-2", "rita"]);
    assert_eq!(
        team.teammates[3].approver,
        Responder::Policy("policies/ci.toml".into())
    );

    let policy = Policy::parse("policy.toml", &example("policy.toml")).unwrap();
    assert_eq!(policy.max_mode, PermissionMode::AcceptEdits);
    assert!(!policy.approve_all);
}

#[test]
fn every_settings_key_is_in_the_example_and_documented_with_an_example() {
    let docs_path = format!("{}/../docs/configuration.md", env!("CARGO_MANIFEST_DIR"));
    let docs = std::fs::read_to_string(&docs_path).unwrap();
    let settings = example("settings.toml");
    let missing_docs: Vec<String> = known_keys()
        .into_iter()
        .filter(|key| !docs.contains(&format!("`{key}`")))
        .collect();
    assert!(
        missing_docs.is_empty(),
        "undocumented keys: {missing_docs:?}"
    );
    let missing_example: Vec<String> = known_keys()
        .into_iter()
        .filter(|key| key != "providers.anthropic.api_key" && key != "providers.openai.api_key")
        .filter(|key| {
            let leaf = key.rsplit('.').next().unwrap_or(key);
            !settings.contains(&format!("{leaf} ="))
        })
        .collect();
    assert!(
        missing_example.is_empty(),
        "keys without example: {missing_example:?}"
    );
    for word in [
        "muster.team.toml",
        "approve_all",
        "disallowedTools",
        "MUSTER_",
        "did you mean",
    ] {
        assert!(docs.contains(word), "docs do not mention {word}");
    }
}
