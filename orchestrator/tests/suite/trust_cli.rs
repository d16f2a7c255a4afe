//! Project trust through the binary: what a project's own files set that widens access or
//! redirects keys takes no effect until `muster trust` (a run says so in one line and reaches
//! the user's model server, not the repository's), a change untrusts it, `--revoke`, `--list`,
//! `--print-hash`, the CI variable, a tracked `.muster/settings.local.toml` counting as the
//! project's, and a resume gated by the decision stored at the run's start.
//!
//! Every command runs with a cleared environment: `HOME` and `XDG_CONFIG_HOME` are temporary
//! directories outside the project, so the trust file is the test's own.

use std::path::Path;
use std::process::Output;

use muster_fake_llm::{Block, FakeLlm, FakeLlmHandle, ScriptEntry};
use serde_json::{Value, json};

use super::common::{lines, output, stderr, stdout, tool};

const PLAN: &str = "## Goal\nGreet.\n## Steps\n1. Write hello.txt\n## Files\nhello.txt\n## Tests\nnone\n## Risks\nnone\n";

/// A project, the user's home (whose `~/.muster/settings.toml` names the user's model server)
/// and the user's config directory, each its own temporary directory.
struct Setup {
    project: tempfile::TempDir,
    home: tempfile::TempDir,
    config: tempfile::TempDir,
}

impl Setup {
    fn new(user_base_url: &str) -> Setup {
        let setup = Setup {
            project: tempfile::tempdir().unwrap(),
            home: tempfile::tempdir().unwrap(),
            config: tempfile::tempdir().unwrap(),
        };
        std::fs::create_dir_all(setup.root().join(".muster")).unwrap();
        std::fs::create_dir_all(setup.home.path().join(".muster")).unwrap();
        std::fs::write(
            setup.home.path().join(".muster/settings.toml"),
            format!("[providers.anthropic]\nbase_url = \"{user_base_url}\"\n"),
        )
        .unwrap();
        setup
    }

    fn root(&self) -> &Path {
        self.project.path()
    }

    fn write_settings(&self, text: &str) {
        std::fs::write(self.root().join(".muster/settings.toml"), text).unwrap();
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_muster"));
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("XDG_CONFIG_HOME", self.config.path())
            .env("ANTHROPIC_API_KEY", "test-key")
            .current_dir(self.root())
            .args(args)
            .stdin(std::process::Stdio::null());
        command
    }

    async fn muster(&self, args: &[&str]) -> Output {
        output(self.command(args)).await
    }

    async fn trust(&self, args: &[&str]) -> String {
        let mut all = vec!["trust"];
        all.extend_from_slice(args);
        let done = self.muster(&all).await;
        assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
        stdout(&done)
    }

    /// `muster check Bash {"command": "touch a"}` in `default` mode, and its first word
    /// (`allow`, `ask`, `deny`).
    async fn check_touch(&self, extra_env: Option<(&str, &str)>) -> (String, String) {
        let mut command = self.command(&[
            "check",
            "--mode",
            "default",
            "Bash",
            r#"{"command": "touch a"}"#,
        ]);
        if let Some((name, value)) = extra_env {
            command.env(name, value);
        }
        let done = output(command).await;
        let said = stdout(&done);
        (
            said.split(':').next().unwrap_or_default().to_owned(),
            stderr(&done),
        )
    }

    async fn config_json(&self) -> Value {
        let done = self.muster(&["config", "show", "--json"]).await;
        assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
        serde_json::from_slice(&done.stdout).unwrap()
    }
}

/// Lines of `text` that say the project is not trusted.
fn skip_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|line| line.starts_with("muster: project not trusted"))
        .collect()
}

async fn fake_done() -> FakeLlmHandle {
    FakeLlm::start(vec![ScriptEntry::reply(
        "main",
        1,
        vec![Block::text("Done.")],
    )])
    .await
    .unwrap()
}

fn repository_settings(repo_base_url: &str) -> String {
    format!(
        "permission_mode = \"bypassPermissions\"\n\
         [permissions]\nallow = [\"Bash(touch:*)\"]\ndeny = [\"Read(./.env)\"]\n\
         [providers.anthropic]\nbase_url = \"{repo_base_url}\"\n"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn an_untrusted_projects_widening_settings_take_no_effect_until_it_is_trusted() {
    let user_model = fake_done().await;
    let repo_model = fake_done().await;
    let setup = Setup::new(&user_model.base_url());
    setup.write_settings(&repository_settings(&repo_model.base_url()));

    // Untrusted: the allow rule and the mode do not apply; the deny rule does.
    let (decision, said) = setup.check_touch(None).await;
    assert_eq!(decision, "ask", "{said}");
    assert_eq!(skip_lines(&said).len(), 1, "{said}");
    let deny = setup
        .muster(&["check", "Read", r#"{"file_path": ".env"}"#])
        .await;
    assert!(stdout(&deny).starts_with("deny"), "{}", stdout(&deny));
    let config = setup.config_json().await;
    assert_eq!(config["trust"]["trusted"], false);
    assert_eq!(config["settings"]["permission_mode"]["value"], "default");
    assert_eq!(
        config["settings"]["providers.anthropic.base_url"]["value"],
        user_model.base_url()
    );
    let skipped: Vec<&str> = config["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["key"].as_str().unwrap())
        .collect();
    assert_eq!(
        skipped,
        [
            "permission_mode",
            "providers.anthropic.base_url",
            "permissions.allow"
        ]
    );
    assert!(
        config["skipped"][0]["why"]
            .as_str()
            .unwrap()
            .contains("not trusted"),
        "{}",
        config["skipped"][0]
    );

    // A run reaches the user's model server, never the repository's, and says what it skipped
    // in one line.
    let run = setup
        .muster(&["run", "-p", "Hi.", "--output", "json"])
        .await;
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let said = stderr(&run);
    let skip = skip_lines(&said);
    assert_eq!(skip.len(), 1, "{said}");
    for part in [
        "permission_mode = \"bypassPermissions\"",
        "providers.anthropic.base_url",
        "1 allow rule(s)",
        "run `muster trust`",
    ] {
        assert!(skip[0].contains(part), "{part}: {}", skip[0]);
    }
    assert_eq!(user_model.requests().len(), 1);
    assert_eq!(repo_model.requests().len(), 0, "the repository's base_url");

    // Trusted: all of it takes effect.
    let trusted = setup.trust(&[]).await;
    assert!(trusted.contains("trusted: "), "{trusted}");
    assert!(trusted.contains(".muster/settings.toml"), "{trusted}");
    let (decision, said) = setup.check_touch(None).await;
    assert_eq!(decision, "allow", "{said}");
    assert!(skip_lines(&said).is_empty(), "{said}");
    let config = setup.config_json().await;
    assert_eq!(config["trust"]["trusted"], true);
    assert_eq!(
        config["settings"]["permission_mode"]["value"],
        "bypassPermissions"
    );
    let run = setup
        .muster(&["run", "-p", "Hi.", "--output", "json"])
        .await;
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    assert!(skip_lines(&stderr(&run)).is_empty(), "{}", stderr(&run));
    assert_eq!(repo_model.requests().len(), 1, "now the repository's");
    assert_eq!(user_model.requests().len(), 1);

    // An edit after trust untrusts the project until it is trusted again.
    let mut text = repository_settings(&repo_model.base_url());
    text.push_str("# edited\n");
    setup.write_settings(&text);
    let (decision, said) = setup.check_touch(None).await;
    assert_eq!(decision, "ask", "{said}");
    let line = skip_lines(&said)[0].to_owned();
    assert!(
        line.contains("changed since you trusted it (.muster/settings.toml changed)"),
        "{line}"
    );
    setup.trust(&[]).await;
    assert_eq!(setup.check_touch(None).await.0, "allow");
}

#[tokio::test(flavor = "multi_thread")]
async fn trust_is_listed_revoked_and_hashed_outside_the_repository() {
    let setup = Setup::new("http://127.0.0.1:9");
    setup.write_settings(&repository_settings("http://127.0.0.1:9"));
    let listed = setup.trust(&["--list"]).await;
    assert!(listed.contains("no trusted projects"), "{listed}");

    let hash = setup.trust(&["--print-hash"]).await.trim().to_owned();
    assert_eq!(hash.len(), 64, "{hash}");
    assert_eq!(setup.config_json().await["trust"]["hash"], hash.as_str());
    setup.trust(&[]).await;
    let file = setup.config.path().join("muster/trust.toml");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let recorded = std::fs::read_to_string(&file).unwrap();
    let canonical = std::fs::canonicalize(setup.root()).unwrap();
    assert!(recorded.contains(&hash), "{recorded}");
    assert!(
        recorded.contains(&canonical.display().to_string()),
        "{recorded}"
    );
    // Nothing was written inside the repository.
    assert!(!setup.root().join(".config").exists());
    // `.muster/project-id` is no part of the key.
    std::fs::write(setup.root().join(".muster/project-id"), "someone-elses\n").unwrap();
    let listed = setup.trust(&["--list"]).await;
    assert!(
        listed.contains(&canonical.display().to_string()),
        "{listed}"
    );
    assert!(listed.contains("  trusted"), "{listed}");
    assert_eq!(setup.check_touch(None).await.0, "allow");

    let revoked = setup.trust(&["--revoke"]).await;
    assert!(revoked.contains("no longer trusted"), "{revoked}");
    assert_eq!(setup.check_touch(None).await.0, "ask");
    let listed = setup.trust(&["--list"]).await;
    assert!(listed.contains("no trusted projects"), "{listed}");
    let again = setup.trust(&["--revoke"]).await;
    assert!(again.contains("was not trusted"), "{again}");

    // A trust file inside the project (HOME at the project, no XDG_CONFIG_HOME) is refused.
    let mut inside = setup.command(&["trust"]);
    inside
        .env("HOME", setup.root())
        .env_remove("XDG_CONFIG_HOME");
    let refused = output(inside).await;
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("inside the project"),
        "{}",
        stderr(&refused)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_ci_variable_trusts_only_the_hash_it_carries() {
    let setup = Setup::new("http://127.0.0.1:9");
    setup.write_settings(&repository_settings("http://127.0.0.1:9"));
    let hash = setup.trust(&["--print-hash"]).await.trim().to_owned();
    let (decision, said) = setup
        .check_touch(Some(("MUSTER_TRUST_PROJECT_HASH", &hash)))
        .await;
    assert_eq!(decision, "allow", "{said}");
    assert!(!said.contains("warning"), "not a setting: {said}");
    let (decision, said) = setup
        .check_touch(Some(("MUSTER_TRUST_PROJECT_HASH", "0123abcd")))
        .await;
    assert_eq!(decision, "ask", "{said}");
    let line = skip_lines(&said)[0].to_owned();
    assert!(
        line.contains("MUSTER_TRUST_PROJECT_HASH is set but is not this checkout's hash"),
        "{line}"
    );
    assert!(line.contains(&hash), "{line}");
}

fn git(dir: &Path, args: &[&str]) {
    let done = std::process::Command::new("git")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        done.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&done.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tracked_settings_local_is_the_projects_not_the_users() {
    let setup = Setup::new("http://127.0.0.1:9");
    git(setup.root(), &["init", "-q"]);
    let local = setup.root().join(".muster/settings.local.toml");
    std::fs::write(
        &local,
        "[permissions]\nallow = [\"Bash(touch:*)\"]\n[mcp]\nenable_all_project_servers = true\n",
    )
    .unwrap();
    std::fs::write(
        setup.root().join(".mcp.json"),
        r#"{"mcpServers": {"notes": {"command": "true"}}}"#,
    )
    .unwrap();
    // Untracked, the file is the user's own: its allow rule applies.
    assert_eq!(setup.check_touch(None).await.0, "allow");
    let hash_before = setup.trust(&["--print-hash"]).await;

    git(setup.root(), &["add", "-f", ".muster/settings.local.toml"]);
    let (decision, said) = setup.check_touch(None).await;
    assert_eq!(decision, "ask", "{said}");
    assert!(
        said.contains(
            "mcp.enable_all_project_servers` is ignored in the project's committed settings"
        ),
        "{said}"
    );
    let config = setup.config_json().await;
    let skipped = &config["skipped"][0];
    assert_eq!(skipped["key"], "permissions.allow");
    assert!(
        skipped["source"]
            .as_str()
            .unwrap()
            .ends_with(".muster/settings.local.toml"),
        "{skipped}"
    );
    let notes = &config["mcp_servers"][0];
    assert_eq!(notes["enabled"], false, "{notes}");
    // Tracked, it is covered by the hash.
    assert_ne!(setup.trust(&["--print-hash"]).await, hash_before);
    setup.trust(&[]).await;
    assert_eq!(setup.check_touch(None).await.0, "allow");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resume_is_gated_by_the_decision_stored_at_the_start() {
    let user_model = FakeLlm::start(vec![
        ScriptEntry::reply("main", 1, vec![tool("ExitPlanMode", json!({"plan": PLAN}))]),
        ScriptEntry::reply("main", 2, vec![Block::text("Greeted.")]),
    ])
    .await
    .unwrap();
    let repo_model = fake_done().await;
    let setup = Setup::new(&user_model.base_url());
    setup.write_settings("[permissions]\ndeny = [\"Read(./.env)\"]\n");
    setup.trust(&[]).await;
    let first = setup
        .muster(&[
            "run",
            "-p",
            "Greet.",
            "--permission-mode",
            "plan",
            "--output",
            "json",
        ])
        .await;
    assert_eq!(first.status.code(), Some(5), "{}", stderr(&first));
    let finished = lines(&first).pop().unwrap();
    let run_id = finished["run_id"].as_str().unwrap().to_owned();
    assert!(skip_lines(&stderr(&first)).is_empty());
    let store = super::common::open_store(setup.root());
    let record = store.run(&run_id).await.unwrap().unwrap();
    assert_eq!(record.launch_options["trust"]["trusted"], true);
    let stored_hash = record.launch_options["trust"]["hash"].clone();
    assert_eq!(stored_hash.as_str().unwrap().len(), 64);

    // Meanwhile the settings file is edited to send the key elsewhere (an agent could have),
    // and even trusted again: the run started with other files, and keeps to what it had.
    setup.write_settings(&format!(
        "[permissions]\ndeny = [\"Read(./.env)\"]\n[providers.anthropic]\nbase_url = \"{}\"\n",
        repo_model.base_url()
    ));
    setup.trust(&[]).await;
    let approve = setup.muster(&["approve", "plan-main-1"]).await;
    assert_eq!(approve.status.code(), Some(0), "{}", stderr(&approve));
    let resumed = setup.muster(&["resume", &run_id, "--output", "json"]).await;
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    let said = stderr(&resumed);
    assert!(
        said.contains("trusted when the run started, but the files trust covers changed since"),
        "{said}"
    );
    // The resume reads the settings files as stored at the start, not the edited one: the
    // edited file's endpoint is not even there to skip.
    assert!(skip_lines(&said).is_empty(), "{said}");
    assert_eq!(user_model.requests().len(), 2, "the turn after the plan");
    assert_eq!(repo_model.requests().len(), 0);
    // The stored decision is the one the run keeps.
    let record = store.run(&run_id).await.unwrap().unwrap();
    assert_eq!(record.launch_options["trust"]["hash"], stored_hash);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_started_untrusted_stays_untrusted_on_resume() {
    let user_model = FakeLlm::start(vec![
        ScriptEntry::reply("main", 1, vec![tool("ExitPlanMode", json!({"plan": PLAN}))]),
        ScriptEntry::reply("main", 2, vec![Block::text("Greeted.")]),
    ])
    .await
    .unwrap();
    let repo_model = fake_done().await;
    let setup = Setup::new(&user_model.base_url());
    setup.write_settings(&format!(
        "[providers.anthropic]\nbase_url = \"{}\"\n",
        repo_model.base_url()
    ));
    let first = setup
        .muster(&[
            "run",
            "-p",
            "Greet.",
            "--permission-mode",
            "plan",
            "--output",
            "json",
        ])
        .await;
    assert_eq!(first.status.code(), Some(5), "{}", stderr(&first));
    assert_eq!(skip_lines(&stderr(&first)).len(), 1);
    let run_id = lines(&first).pop().unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Trusting the project now does not change a run that started untrusted.
    setup.trust(&[]).await;
    let approve = setup.muster(&["approve", "plan-main-1"]).await;
    assert_eq!(approve.status.code(), Some(0), "{}", stderr(&approve));
    let resumed = setup.muster(&["resume", &run_id, "--output", "json"]).await;
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    let said = stderr(&resumed);
    let skip = skip_lines(&said);
    assert_eq!(skip.len(), 1, "{said}");
    assert!(skip[0].contains("when the run started"), "{}", skip[0]);
    assert_eq!(user_model.requests().len(), 2);
    assert_eq!(repo_model.requests().len(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_team_files_policy_approver_needs_trust_and_its_policy_is_covered() {
    let lead_done = || {
        FakeLlm::start(vec![ScriptEntry::reply(
            "lead",
            1,
            vec![Block::text("Done.")],
        )])
    };
    let first_model = lead_done().await.unwrap();
    let setup = Setup::new(&first_model.base_url());
    std::fs::write(
        setup.root().join("muster.team.toml"),
        "name = \"solo\"\n[spawn]\napprover = \"policy:policy.toml\"\n",
    )
    .unwrap();
    std::fs::write(setup.root().join("policy.toml"), "approve_all = true\n").unwrap();
    let store = super::common::open_store(setup.root());

    // Untrusted: the lead approves spawned teammates' plans instead of the policy.
    let run = setup
        .muster(&["run", "-p", "Hi.", "--output", "json"])
        .await;
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let said = stderr(&run);
    let skip = skip_lines(&said);
    assert_eq!(skip.len(), 1, "{said}");
    assert!(
        skip[0].contains("spawn.approver = \"policy:policy.toml\""),
        "{}",
        skip[0]
    );
    let run_id = lines(&run).pop().unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let record = store.run(&run_id).await.unwrap().unwrap();
    assert_eq!(
        record.launch_options["skipped_approvers"][0],
        "spawn.approver = \"policy:policy.toml\""
    );
    assert!(
        record.launch_options.get("policies").is_none(),
        "the skipped policy is not stored: {}",
        record.launch_options
    );

    // Trust covers the team file and its policy.
    let trusted = setup.trust(&[]).await;
    assert!(
        trusted.contains("muster.team.toml") && trusted.contains("policy.toml"),
        "{trusted}"
    );
    let second_model = lead_done().await.unwrap();
    let run = setup
        .muster(&[
            "run",
            "-p",
            "Hi.",
            "--base-url",
            &second_model.base_url(),
            "--output",
            "json",
        ])
        .await;
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    assert!(skip_lines(&stderr(&run)).is_empty(), "{}", stderr(&run));
    let run_id = lines(&run).pop().unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let record = store.run(&run_id).await.unwrap().unwrap();
    assert!(record.launch_options.get("skipped_approvers").is_none());
    assert_eq!(
        record.launch_options["policies"]["policy.toml"]["text"],
        "approve_all = true\n"
    );

    // The policy is covered: an edit untrusts the project.
    std::fs::write(setup.root().join("policy.toml"), "approve_all = false\n").unwrap();
    let listed = setup.trust(&["--list"]).await;
    assert!(listed.contains("policy.toml changed"), "{listed}");
}

/// Claude Code's `defaultMode` and `additionalDirectories` from the repository's
/// `.claude/settings.json` take effect only once the project is trusted (untrusted, the check
/// says so and lists them as skipped); the user's `disableBypassPermissionsMode` refuses
/// `bypassPermissions` from the command line with exit 2, before any model is asked.
#[tokio::test(flavor = "multi_thread")]
async fn claude_codes_mode_and_directories_need_trust_and_bypass_can_be_disabled() {
    let model = fake_done().await;
    let setup = Setup::new(&model.base_url());
    let shared = tempfile::tempdir().unwrap();
    let target = shared.path().join("notes.txt");
    std::fs::create_dir_all(setup.root().join(".claude")).unwrap();
    std::fs::write(
        setup.root().join(".claude/settings.json"),
        json!({"permissions": {"defaultMode": "acceptEdits",
                               "additionalDirectories": [shared.path()]}})
        .to_string(),
    )
    .unwrap();
    let input = json!({"file_path": target, "content": "x"}).to_string();
    let check_write = ["check", "Write", input.as_str()];

    let untrusted = setup.muster(&check_write).await;
    let said = stdout(&untrusted);
    assert!(
        said.starts_with("deny:") && said.contains("outside the workspace"),
        "{said}"
    );
    assert_eq!(
        skip_lines(&stderr(&untrusted)).len(),
        1,
        "{}",
        stderr(&untrusted)
    );
    let config = setup.config_json().await;
    let skipped: Vec<&str> = config["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|entry| entry["key"].as_str())
        .collect();
    assert_eq!(
        skipped,
        ["permission_mode", "permissions.additional_directories"],
        "{config:#}"
    );

    setup.trust(&[]).await;
    let trusted = setup.muster(&check_write).await;
    let said = stdout(&trusted);
    assert!(
        said.starts_with("allow:") && said.contains("acceptEdits"),
        "{said}\n{}",
        stderr(&trusted)
    );

    // A run before the switch, so a store exists for `muster approve`.
    let first = setup.muster(&["run", "-p", "hi"]).await;
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    std::fs::create_dir_all(setup.home.path().join(".claude")).unwrap();
    std::fs::write(
        setup.home.path().join(".claude/settings.json"),
        r#"{"permissions": {"disableBypassPermissionsMode": "disable"}}"#,
    )
    .unwrap();
    for args in [
        &["approve", "plan-main-1", "--mode", "bypassPermissions"][..],
        &["run", "-p", "hi", "--permission-mode", "bypassPermissions"][..],
        &[
            "check",
            "--permission-mode",
            "bypassPermissions",
            "Read",
            r#"{"file_path": "a"}"#,
        ][..],
    ] {
        let refused = setup.muster(args).await;
        assert_eq!(
            refused.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&refused)
        );
        assert!(
            stderr(&refused).contains("disableBypassPermissionsMode"),
            "{args:?}: {}",
            stderr(&refused)
        );
    }
}
