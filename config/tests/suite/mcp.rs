//! MCP servers as Claude Code declares them (`~/.claude.json`, `.mcp.json`) and the trust rule:
//! a project's servers start only in a trusted project, each as `muster trust` pinned it.

use std::collections::BTreeMap;

use muster_config::{McpEnvironment, McpScope, McpServers};

use super::fixtures::Project;

const MCP_JSON: &str = r#"{"mcpServers": {
    "docs": {"command": "python3", "args": ["docs.py"]},
    "tracker": {"type": "http", "url": "http://127.0.0.1:9/mcp"},
    "legacy": {"type": "sse", "url": "http://127.0.0.1:9/sse"}
}}"#;

fn load_with(project: &Project, env: &BTreeMap<String, String>) -> (McpServers, Vec<String>) {
    let loaded = project.load().unwrap();
    let mut warnings: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    let servers = McpServers::load(
        project.root.as_path(),
        &loaded.value.mcp,
        McpEnvironment {
            env,
            home: Some(&project.home),
        },
    );
    warnings.extend(servers.warnings.iter().map(ToString::to_string));
    (servers.value, warnings)
}

fn load_servers(project: &Project) -> (McpServers, Vec<String>) {
    load_with(project, &BTreeMap::new())
}

fn enabled(servers: &McpServers) -> Vec<&str> {
    servers
        .enabled()
        .map(|status| status.server.name.as_str())
        .collect()
}

fn untrusted() -> muster_config::TrustDecision {
    muster_config::TrustDecision {
        trusted: false,
        hash: String::new(),
        why: "no `muster trust` for it".into(),
        mcp_servers: None,
    }
}

#[test]
fn committed_project_settings_cannot_enable_their_own_servers() {
    let mut project = Project::new();
    project.trust = untrusted();
    project.write(".mcp.json", MCP_JSON);
    project.write(
        ".muster/settings.toml",
        "[mcp]\nenable_all_project_servers = true\nenabled_project_servers = [\"docs\"]\ntrusted_read_only = [\"docs\"]\nread_only_tools = [\"mcp__docs__x\"]\n",
    );
    let (servers, warnings) = load_servers(&project);
    assert!(enabled(&servers).is_empty(), "{servers:#?}");
    let docs = servers.get("docs").unwrap();
    assert!(docs.untrusted);
    assert!(docs.why.contains("not trusted"), "{}", docs.why);
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
            .any(|w| w.contains("`mcp.read_only_tools` is ignored")),
        "{warnings:#?}"
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("MCP server `legacy`") && w.contains("SSE")),
        "{warnings:#?}"
    );
}

/// The name-keyed keys of the user's settings start nothing now: one warning names
/// `muster trust`; in an untrusted project the servers stay off.
#[test]
fn retired_name_keyed_settings_are_one_warning_naming_muster_trust() {
    let mut project = Project::new();
    project.trust = untrusted();
    project.write(".mcp.json", MCP_JSON);
    project.write_home(
        ".muster/settings.toml",
        "[mcp]\nenabled_project_servers = [\"docs\"]\ntrusted_read_only = [\"docs\"]\n",
    );
    let (servers, warnings) = load_servers(&project);
    assert!(enabled(&servers).is_empty(), "{servers:#?}");
    let retired: Vec<&String> = warnings
        .iter()
        .filter(|w| w.contains("no longer apply"))
        .collect();
    assert_eq!(retired.len(), 1, "{warnings:#?}");
    assert!(retired[0].contains("muster trust"), "{}", retired[0]);
    assert!(
        retired[0].contains("mcp.enabled_project_servers")
            && retired[0].contains("mcp.trusted_read_only"),
        "{}",
        retired[0]
    );
    // Only the user's own file may declare tools read-only.
    project.write(
        ".muster/settings.local.toml",
        "[mcp]\nread_only_tools = [\"mcp__docs__search\"]\n",
    );
    project.write_home(
        ".muster/settings.toml",
        "[mcp]\nread_only_tools = [\"mcp__docs__read\"]\n",
    );
    let settings = project.settings();
    assert_eq!(
        settings.mcp.read_only_tools.unwrap().value,
        ["mcp__docs__read"]
    );
}

/// `~/.claude.json`: the user-scope servers start in any project; this project's entry (local
/// scope) needs trust and a pin; another project's entry is not read; Claude Code's approvals
/// are shown, never trust; local replaces project replaces user.
#[test]
fn claude_json_servers_are_read_by_scope_and_approvals_are_only_shown() {
    let mut project = Project::new();
    project.trust = untrusted();
    project.write(".mcp.json", MCP_JSON);
    let root = std::fs::canonicalize(&project.root).unwrap();
    let claude = serde_json::json!({
        "mcpServers": {
            "mine": {"command": "node", "args": ["mine.js"]},
            "docs": {"command": "user-docs"}
        },
        "projects": {
            root.display().to_string(): {
                "mcpServers": {"localfs": {"command": "npx", "args": ["fs", "${HOME}"]}},
                "enabledMcpjsonServers": ["docs"]
            },
            "/some/other/project": {
                "mcpServers": {"elsewhere": {"command": "evil"}}
            }
        }
    });
    project.write_home(".claude.json", &claude.to_string());
    let (servers, _) = load_servers(&project);
    let names: Vec<(&str, McpScope)> = servers
        .servers
        .iter()
        .map(|s| (s.server.name.as_str(), s.server.scope))
        .collect();
    assert_eq!(
        names,
        [
            ("docs", McpScope::Project),
            ("localfs", McpScope::Local),
            ("mine", McpScope::User),
            ("tracker", McpScope::Project),
        ]
    );
    assert_eq!(enabled(&servers), ["mine"]);
    let docs = servers.get("docs").unwrap();
    assert!(!docs.enabled);
    assert!(
        docs.claude_approved
            .as_deref()
            .is_some_and(|source| source.contains(".claude.json")),
        "{docs:?}"
    );

    // Trusted by `muster trust`'s pins: the pinned ones start; a changed one does not.
    let declared = muster_config::mcp::Declared::read(&project.root, Some(&project.home)).value;
    let mut pins = declared.pins();
    assert_eq!(
        pins.keys().collect::<Vec<_>>(),
        ["docs", "localfs", "tracker"]
    );
    pins.insert("tracker".into(), "an older pin".into());
    project.trust = muster_config::TrustDecision {
        trusted: true,
        hash: String::new(),
        why: "trusted".into(),
        mcp_servers: Some(pins),
    };
    let env: BTreeMap<String, String> = [("HOME".to_owned(), "/home/me".to_owned())].into();
    let (servers, _) = load_with(&project, &env);
    assert_eq!(enabled(&servers), ["docs", "localfs", "mine"]);
    let tracker = servers.get("tracker").unwrap();
    assert!(
        tracker.untrusted && tracker.why.contains("changed since"),
        "{tracker:?}"
    );
    match &servers.get("localfs").unwrap().server.transport {
        muster_config::McpTransport::Stdio { args, .. } => assert_eq!(args, &["fs", "/home/me"]),
        other => panic!("{other:?}"),
    }
}

/// `${VAR}` and `${VAR:-default}` everywhere Claude Code expands them; an unset variable with
/// no default keeps that one server off, with a warning naming it and the server.
#[test]
fn variables_expand_and_an_unset_one_names_server_and_variable() {
    let project = Project::new();
    project.write(
        ".mcp.json",
        r#"{"mcpServers": {
            "fs": {"command": "${TOOLS:-/usr/bin}/fs", "args": ["${PROJECT}"], "env": {"KEY": "${KEY}"}},
            "web": {"type": "http", "url": "${BASE}/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}},
            "bad": {"command": "x", "args": ["${NOT_SET}"]}
        }}"#,
    );
    let env: BTreeMap<String, String> = [
        ("PROJECT", "/work/p"),
        ("KEY", "k1"),
        ("BASE", "http://127.0.0.1:9"),
        ("TOKEN", "t0"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let (servers, warnings) = load_with(&project, &env);
    assert_eq!(enabled(&servers), ["fs", "web"]);
    let fs = &servers.get("fs").unwrap().server;
    assert_eq!(
        fs.transport,
        muster_config::McpTransport::Stdio {
            command: "/usr/bin/fs".into(),
            args: vec!["/work/p".into()],
            env: [("KEY".to_owned(), "k1".to_owned())].into(),
        }
    );
    assert_eq!(fs.template.variables(), ["KEY", "PROJECT", "TOOLS"]);
    match &servers.get("web").unwrap().server.transport {
        muster_config::McpTransport::Http { url, headers } => {
            assert_eq!(url, "http://127.0.0.1:9/mcp");
            assert_eq!(headers["Authorization"], "Bearer t0");
        }
        other => panic!("{other:?}"),
    }
    let bad = servers.get("bad").unwrap();
    assert!(!bad.enabled && !bad.untrusted);
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("MCP server `bad`") && w.contains("`${NOT_SET}` is not set")),
        "{warnings:#?}"
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
/// settings file: read as the user's layer too, it still cannot set the retired keys.
#[test]
fn a_project_at_home_cannot_trust_itself_through_the_user_layer() {
    let project = Project::new();
    project.write(".mcp.json", MCP_JSON);
    project.write(
        ".muster/settings.toml",
        "[mcp]\nenable_all_project_servers = true\nread_only_tools = [\"mcp__docs__x\"]\n",
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
    assert!(loaded.value.mcp.read_only_tools.is_none());
}

/// A server an editor or a program gives for its session: the user's own, so it needs no
/// trust; `${VAR}` expanded from the environment given; each bad entry an error naming it.
#[test]
fn a_session_server_is_the_users_own_and_each_bad_entry_is_named() {
    let env = std::collections::BTreeMap::from([("TOKEN".to_owned(), "t0k".to_owned())]);
    let server = muster_config::mcp::session_server(
        "tracker",
        &serde_json::json!({"command": "tracker-mcp", "args": ["--token", "${TOKEN}"]}),
        &env,
    )
    .unwrap();
    assert_eq!(server.scope, McpScope::Session);
    assert!(!server.scope.needs_trust());
    assert_eq!(
        server.transport,
        muster_config::McpTransport::Stdio {
            command: "tracker-mcp".into(),
            args: vec!["--token".into(), "t0k".into()],
            env: Default::default(),
        }
    );
    let rows: &[(&str, serde_json::Value, &str)] = &[
        (
            "a__b",
            serde_json::json!({"command": "x"}),
            "letters, digits",
        ),
        (
            "web",
            serde_json::json!({"type": "sse", "url": "http://h/sse"}),
            "SSE",
        ),
        (
            "web",
            serde_json::json!({"type": "http", "url": "ftp://h"}),
            "http://",
        ),
        (
            "tool",
            serde_json::json!({"command": "x", "args": ["${NOPE}"]}),
            "`${NOPE}` is not set",
        ),
        ("tool", serde_json::json!([1]), "expected an object"),
    ];
    for (name, entry, says) in rows {
        let error = muster_config::mcp::session_server(name, entry, &env).unwrap_err();
        assert!(
            error.contains(says) && error.contains(name),
            "{entry}: {error}"
        );
    }
}
