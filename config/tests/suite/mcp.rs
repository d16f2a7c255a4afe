//! `.mcp.json` and the `[mcp]` trust rule: a repository's servers start only when the user's
//! or the project-local settings enable them.

use muster_config::McpServers;

use super::fixtures::Project;

const MCP_JSON: &str = r#"{"mcpServers": {
    "docs": {"command": "python3", "args": ["docs.py"]},
    "tracker": {"type": "http", "url": "http://127.0.0.1:9/mcp"},
    "legacy": {"type": "sse", "url": "http://127.0.0.1:9/sse"}
}}"#;

fn load_servers(project: &Project) -> (McpServers, Vec<String>) {
    let loaded = project.load().unwrap();
    let mut warnings: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    let servers = McpServers::load(project.root.as_path(), &loaded.value.mcp);
    warnings.extend(servers.warnings.iter().map(ToString::to_string));
    (servers.value, warnings)
}

fn enabled(servers: &McpServers) -> Vec<&str> {
    servers
        .enabled()
        .map(|status| status.server.name.as_str())
        .collect()
}

#[test]
fn committed_project_settings_cannot_enable_their_own_servers() {
    let project = Project::new();
    project.write(".mcp.json", MCP_JSON);
    project.write(
        ".muster/settings.toml",
        "[mcp]\nenable_all_project_servers = true\nenabled_project_servers = [\"docs\"]\ntrusted_read_only = [\"docs\"]\n",
    );
    let (servers, warnings) = load_servers(&project);
    assert!(enabled(&servers).is_empty(), "{servers:#?}");
    let docs = servers.get("docs").unwrap();
    assert!(!docs.trusted_read_only);
    assert!(docs.why.contains("not trusted by itself"), "{}", docs.why);
    for key in [
        "enable_all_project_servers",
        "enabled_project_servers",
        "trusted_read_only",
    ] {
        assert!(
            warnings.iter().any(|w| w.contains(&format!(
                "`mcp.{key}` is ignored in the project's committed settings"
            ))),
            "{key}: {warnings:#?}"
        );
    }
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("MCP server `legacy`") && w.contains("SSE")),
        "{warnings:#?}"
    );
}

#[test]
fn user_and_project_local_settings_enable_servers_with_their_origin() {
    let project = Project::new();
    project.write(".mcp.json", MCP_JSON);
    project.write_home(
        ".muster/settings.toml",
        "[mcp]\nenabled_project_servers = [\"docs\", \"missing\"]\ntrusted_read_only = [\"docs\"]\n",
    );
    let (servers, warnings) = load_servers(&project);
    assert_eq!(enabled(&servers), ["docs"]);
    let docs = servers.get("docs").unwrap();
    assert!(docs.trusted_read_only);
    assert!(docs.why.contains("settings.toml"), "{}", docs.why);
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("names `missing`, which .mcp.json does not declare")),
        "{warnings:#?}"
    );

    project.write(
        ".muster/settings.local.toml",
        "[mcp]\nenable_all_project_servers = true\n",
    );
    let (servers, _) = load_servers(&project);
    assert_eq!(enabled(&servers), ["docs", "tracker"]);
    assert!(
        servers
            .get("tracker")
            .unwrap()
            .why
            .contains("settings.local.toml"),
        "{:?}",
        servers.get("tracker")
    );
}

#[test]
fn a_broken_mcp_json_is_one_warning_and_no_servers() {
    let project = Project::new();
    project.write(".mcp.json", "{\"mcpServers\": {");
    let (servers, warnings) = load_servers(&project);
    assert!(servers.servers.is_empty());
    assert!(
        warnings
            .iter()
            .any(|w| w.contains(".mcp.json") && w.contains("not valid JSON at line 1")),
        "{warnings:#?}"
    );
}

/// With the project at the home directory, `~/.muster/settings.toml` is the committed project
/// settings file: read as the user's layer too, it still cannot enable the project's servers.
#[test]
fn a_project_at_home_cannot_trust_itself_through_the_user_layer() {
    let project = Project::new();
    project.write(".mcp.json", MCP_JSON);
    project.write(
        ".muster/settings.toml",
        "[mcp]\nenable_all_project_servers = true\n",
    );
    let root = project.project_root();
    let loaded = muster_config::Settings::load(&muster_config::SettingsInputs {
        project_root: &root,
        home_dir: Some(project.root.as_path()),
        env: &std::collections::BTreeMap::new(),
        cli: &muster_config::CliOverrides::new(),
        trust: &muster_config::TrustDecision::trusted_by_caller(),
        snapshot: None,
    })
    .unwrap();
    assert!(!loaded.value.mcp.enable_all_project_servers.value);
    let servers = McpServers::load(project.root.as_path(), &loaded.value.mcp);
    assert!(enabled(&servers.value).is_empty());
}
