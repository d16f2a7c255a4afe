//! The Bash sandbox on the running kernel: real commands through the real trampoline (this
//! crate's `muster-sandbox` binary, the same entry as `muster sandbox-exec`), in the
//! read-only and workspace-write profiles.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test setup and assertions fail loudly"
)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use muster_agents::sandbox::{Sandbox, SandboxMode, SandboxProfile, probe};
use muster_agents::tools::{Bash, Tool, ToolContext, ToolOutput, Workspace};
use serde_json::json;

struct Fixture {
    _workspace: tempfile::TempDir,
    home: tempfile::TempDir,
    root: PathBuf,
    sandbox: Arc<Sandbox>,
}

impl Fixture {
    fn new() -> Fixture {
        let workspace = tempfile::tempdir().unwrap();
        let root = workspace.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::create_dir_all(root.join(".muster/plans")).unwrap();
        std::fs::write(root.join("README.md"), "hello\n").unwrap();
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(home.path().join(".cache")).unwrap();
        let sandbox = Arc::new(Sandbox {
            trampoline: vec![env!("CARGO_BIN_EXE_muster-sandbox").into()],
            mode: SandboxMode::Auto,
            network: true,
            writable: Vec::new(),
            home: Some(home.path().to_path_buf()),
            protected_files: muster_config::protected::ProtectedFiles::standard(),
        });
        Fixture {
            _workspace: workspace,
            home,
            root,
            sandbox,
        }
    }

    async fn bash(&self, profile: SandboxProfile, command: &str) -> ToolOutput {
        let workspace = Workspace::new(&self.root).unwrap();
        let environment = vec![
            ("PATH".into(), std::env::var_os("PATH").unwrap()),
            ("HOME".into(), self.home.path().into()),
        ];
        let context =
            ToolContext::new(workspace, environment).with_sandbox(self.sandbox.clone(), profile);
        Bash.call(&context, json!({ "command": command })).await
    }

    fn home(&self) -> &Path {
        self.home.path()
    }
}

/// Does this kernel offer Landlock? Every machine muster's CI runs on does; a test that finds
/// none fails rather than passing without confining anything.
fn require_landlock() {
    let support = probe();
    assert!(
        support.enforced(),
        "these tests need a kernel with Landlock: {}",
        support.describe()
    );
}

#[tokio::test]
async fn the_read_only_profile_writes_nothing_but_its_private_temporary_directory() {
    require_landlock();
    let fixture = Fixture::new();
    let outside_tmp = std::env::temp_dir().join(format!("muster-sandbox-{}", std::process::id()));
    let attempts = [
        "touch new-file".to_owned(),
        "echo x >> README.md".to_owned(),
        "rm README.md".to_owned(),
        "mkdir src".to_owned(),
        format!("touch {}/x", fixture.home().display()),
        format!("touch {}", outside_tmp.display()),
        // A grandchild is confined too.
        "bash -c 'sh -c \"touch grandchild-file\"'".to_owned(),
    ];
    for command in &attempts {
        let output = fixture.bash(SandboxProfile::ReadOnly, command).await;
        assert!(output.is_error, "{command} succeeded: {}", output.content);
        assert!(
            output.content.contains("read-only sandbox"),
            "{command}: no sandbox hint in {}",
            output.content
        );
    }
    for name in ["new-file", "src", "grandchild-file"] {
        assert!(!fixture.root.join(name).exists(), "{name} was created");
    }
    assert_eq!(
        std::fs::read_to_string(fixture.root.join("README.md")).unwrap(),
        "hello\n"
    );
    assert!(!fixture.home().join("x").exists());
    assert!(!outside_tmp.exists());

    let allowed = fixture
        .bash(
            SandboxProfile::ReadOnly,
            "cat README.md && ls -a && echo scratch > \"$TMPDIR/s\" && cat \"$TMPDIR/s\" && ls 2>/dev/null >/dev/null",
        )
        .await;
    assert!(!allowed.is_error, "{}", allowed.content);
    assert!(allowed.content.contains("hello") && allowed.content.contains("scratch"));
}

#[tokio::test]
async fn the_read_only_profile_reaches_no_network() {
    require_landlock();
    let fixture = Fixture::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    let refused = fixture.bash(SandboxProfile::ReadOnly, &connect).await;
    assert!(refused.is_error, "{}", refused.content);
    assert!(
        !refused.content.contains("connected"),
        "{}",
        refused.content
    );
    assert!(
        listener.accept().is_err(),
        "the listener got a connection from the read-only sandbox"
    );
    // The same command outside the read-only profile connects: the refusal is the sandbox's.
    let allowed = fixture.bash(SandboxProfile::WorkspaceWrite, &connect).await;
    assert!(!allowed.is_error, "{}", allowed.content);
    assert!(allowed.content.contains("connected"));
}

#[tokio::test]
async fn the_workspace_write_profile_writes_the_workspace_but_not_home_git_or_muster() {
    require_landlock();
    let fixture = Fixture::new();
    let wrote = fixture
        .bash(
            SandboxProfile::WorkspaceWrite,
            "mkdir -p src && echo 'fn main() {}' > src/main.rs && touch \"$HOME/.cache/tool-cache-entry\"",
        )
        .await;
    assert!(!wrote.is_error, "{}", wrote.content);
    assert!(fixture.root.join("src/main.rs").exists());
    assert!(fixture.home().join(".cache/tool-cache-entry").exists());

    let mut refused = vec![
        format!("touch {}/outside", fixture.home().display()),
        "touch .muster/plans/forged.md".to_owned(),
    ];
    if probe().mount_namespace {
        refused.push("touch .git/HEAD".to_owned());
        refused.push("bash -c 'rm -rf .git'".to_owned());
    }
    for command in &refused {
        let output = fixture.bash(SandboxProfile::WorkspaceWrite, command).await;
        assert!(output.is_error, "{command} succeeded: {}", output.content);
        assert!(
            output.content.contains("workspace-write sandbox"),
            "{command}: {}",
            output.content
        );
    }
    assert!(!fixture.home().join("outside").exists());
    assert!(!fixture.root.join(".muster/plans/forged.md").exists());
    assert!(fixture.root.join(".git").exists());
}

/// The files that define rules, servers and the team stay read-only in the workspace-write
/// profile: neither rewritten, replaced nor removed; the rest of `.claude/` stays writable.
#[tokio::test]
async fn the_workspace_write_profile_keeps_protected_files_read_only() {
    require_landlock();
    assert!(
        probe().mount_namespace,
        "this test needs a mount namespace for read-only binds: {}",
        probe().describe()
    );
    let fixture = Fixture::new();
    std::fs::create_dir_all(fixture.root.join(".claude")).unwrap();
    let settings = r#"{"permissions": {"deny": ["Read(./.env)"]}}"#;
    std::fs::write(fixture.root.join(".claude/settings.json"), settings).unwrap();
    std::fs::write(fixture.root.join(".mcp.json"), "{}").unwrap();
    std::fs::write(fixture.root.join("muster.team.toml"), "").unwrap();
    for command in [
        r#"echo '{"permissions": {"allow": ["Bash"]}}' > .claude/settings.json"#,
        "rm -f .claude/settings.json",
        "mv .claude/settings.json .claude/old.json",
        "echo '{}' > .mcp.json",
        "echo 'x' >> muster.team.toml",
    ] {
        let output = fixture.bash(SandboxProfile::WorkspaceWrite, command).await;
        assert!(output.is_error, "{command} succeeded: {}", output.content);
    }
    assert_eq!(
        std::fs::read_to_string(fixture.root.join(".claude/settings.json")).unwrap(),
        settings
    );
    assert_eq!(
        std::fs::read_to_string(fixture.root.join(".mcp.json")).unwrap(),
        "{}"
    );
    let other = fixture
        .bash(
            SandboxProfile::WorkspaceWrite,
            "mkdir -p .claude/agents && touch .claude/agents/a.md",
        )
        .await;
    assert!(!other.is_error, "{}", other.content);
}

/// A teammate's build works under the default profile: `cargo test` of a fresh crate in the
/// workspace, with the real home's cargo and rustup.
#[tokio::test]
async fn cargo_test_passes_in_the_workspace_write_profile() {
    require_landlock();
    let fixture = Fixture::new();
    let real_home = std::env::home_dir().expect("a home directory");
    let sandbox = Arc::new(Sandbox {
        home: Some(real_home.clone()),
        ..(*fixture.sandbox).clone()
    });
    std::fs::write(
        fixture.root.join("Cargo.toml"),
        "[package]\nname = \"sandboxed\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::create_dir_all(fixture.root.join("src")).unwrap();
    std::fs::write(
        fixture.root.join("src/lib.rs"),
        "#[test]\nfn adds() { assert_eq!(1 + 1, 2); }\n",
    )
    .unwrap();
    let workspace = Workspace::new(&fixture.root).unwrap();
    let mut environment: Vec<(std::ffi::OsString, std::ffi::OsString)> = vec![
        ("PATH".into(), std::env::var_os("PATH").unwrap()),
        ("HOME".into(), real_home.into()),
    ];
    for name in ["CARGO_HOME", "RUSTUP_HOME", "RUSTUP_TOOLCHAIN"] {
        if let Some(value) = std::env::var_os(name) {
            environment.push((name.into(), value));
        }
    }
    let context = ToolContext::new(workspace, environment)
        .with_sandbox(sandbox, SandboxProfile::WorkspaceWrite);
    let output = Bash
        .call(
            &context,
            json!({ "command": "cargo test --offline --quiet 2>&1", "timeout": 300000 }),
        )
        .await;
    assert!(!output.is_error, "{}", output.content);
    assert!(
        output.content.contains("test result: ok"),
        "{}",
        output.content
    );
}

/// A gate that makes the worst mistake: it allows every call, in every mode, without even
/// claiming the command is read-only (so only the mode can choose the profile).
struct AllowEverything;

impl muster_agents::runtime::ToolGate for AllowEverything {
    fn decide(
        &self,
        _call: &muster_agents::runtime::CallContext<'_>,
        _tool: &dyn Tool,
        _input: &serde_json::Value,
    ) -> muster_agents::runtime::GateDecision {
        muster_agents::runtime::GateDecision::allow("allowed (wrongly)")
    }
}

/// A command the classifier wrongly allowed in plan mode runs through the runtime in the
/// read-only profile: it cannot write the workspace nor reach a listener on 127.0.0.1.
#[tokio::test]
async fn a_command_wrongly_allowed_in_plan_mode_still_cannot_write_or_connect() {
    use muster_agents::runtime::{AgentKind, PlanApprover, RunContext};
    use muster_config::PermissionMode;
    require_landlock();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let harness = super::harness::RunHarness::setup().start(vec![
        muster_fake_llm::ScriptEntry::reply(
            "main",
            1,
            vec![muster_fake_llm::Block::tool_use(
                "Bash",
                json!({ "command": format!("echo pwned > pwned.txt; exec 3<>/dev/tcp/127.0.0.1/{port}") }),
            )],
        ),
        muster_fake_llm::ScriptEntry::reply("main", 2, vec![muster_fake_llm::Block::text("Done.")]),
    ])
    .await;
    let fixture = Fixture::new();
    let context = Arc::new(RunContext {
        agent_models: Default::default(),
        gate: Arc::new(AllowEverything),
        environment: vec![("PATH".into(), std::env::var_os("PATH").unwrap())],
        sandbox: Some(fixture.sandbox.clone()),
        ..harness.run_context(PlanApprover::Human)
    });
    let spec = super::harness::spec("main", AgentKind::Main, PermissionMode::Plan);
    let mut agent = super::harness::start(context, spec, "Plan.").await;
    assert_eq!(
        super::harness::run(&mut agent).await,
        super::harness::finished("Done.")
    );
    let results: Vec<serde_json::Value> = harness
        .bodies("main")
        .await
        .into_iter()
        .filter(|body| body["type"] == "tool_call")
        .collect();
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0]["is_error"], true, "{:?}", results[0]);
    assert!(
        !harness.workspace().join("pwned.txt").exists(),
        "the command wrote a file"
    );
    assert!(listener.accept().is_err(), "the command connected");
}
