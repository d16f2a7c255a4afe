//! Settings layers, keys, defaults and errors.

use muster_config::settings::{AutoGate, MailboxSync, ProviderKind, ReasoningEffort};
use muster_config::{Layer, PermissionMode, Responder, RuleBehavior, RuleSubject};

use super::fixtures::{Project, display};

#[test]
fn defaults_apply_when_no_file_sets_anything() {
    let project = Project::new();
    let settings = project.settings();
    assert_eq!(*settings.permission_mode, PermissionMode::Default);
    assert_eq!(settings.permission_mode.origin.layer, Layer::Default);
    assert!(settings.plans_directory.ends_with(".muster/plans"));
    assert_eq!(
        settings.store.value,
        muster_config::store_url::StoreLocation::File(project.path(".muster/muster.db"))
    );
    assert_eq!(*settings.approver, Responder::Human);
    assert_eq!(*settings.auto_gate, AutoGate::Open);
    assert_eq!(*settings.auto_gate_denial_limit, 3);
    assert_eq!(*settings.mailbox.max_body_bytes, 1_048_576);
    assert_eq!(*settings.mailbox.sync, MailboxSync::Full);
    assert_eq!(*settings.mailbox.busy_timeout_ms, 5000);
    assert!(!*settings.mailbox.pipelined_sync);
    assert_eq!(*settings.act.provider, ProviderKind::Anthropic);
    assert_eq!(settings.plan.model.value, settings.act.model.value);
    assert!(settings.models["claude-sonnet-4-5"].has_prices());
    assert_eq!(*settings.anthropic.stream_idle_timeout_ms, 60000);
    assert!(settings.permissions.allow.is_empty());
}

#[test]
fn later_layers_override_key_by_key_and_rule_lists_concatenate() {
    let mut project = Project::new()
        .env("MUSTER_PERMISSION_MODE", "plan")
        .env("MUSTER_PERMISSIONS__DENY", "Bash(rm:*), Read(./.env)");
    let user = project.write_home(
        ".muster/settings.toml",
        "permission_mode = \"acceptEdits\"\nauto_gate_denial_limit = 7\n[permissions]\nallow = [\"Bash(git diff:*)\"]\n",
    );
    let shared = project.write(
        ".muster/settings.toml",
        "auto_gate_denial_limit = 5\n[permissions]\nallow = [\"Edit(src/**)\"]\n[mailbox]\nsync = \"normal\"\n",
    );
    let local = project.write(
        ".muster/settings.local.toml",
        "[mailbox]\nbusy_timeout_ms = 250\npipelined_sync = true\n[permissions]\nask = [\"Bash(git push:*)\"]\n",
    );
    project.cli = project
        .cli
        .clone()
        .set("store_path", "state/m.db", "--store");
    let settings = project.settings();

    assert_eq!(*settings.permission_mode, PermissionMode::Plan);
    assert_eq!(settings.permission_mode.origin.layer, Layer::Env);
    assert_eq!(
        settings.permission_mode.origin.source,
        "MUSTER_PERMISSION_MODE"
    );
    assert_eq!(*settings.auto_gate_denial_limit, 5);
    assert_eq!(settings.auto_gate_denial_limit.origin.layer, Layer::Project);
    assert_eq!(
        settings.auto_gate_denial_limit.origin.source,
        display(&shared)
    );
    assert_eq!(
        settings
            .auto_gate_denial_limit
            .origin
            .position
            .unwrap()
            .line,
        1
    );
    assert_eq!(*settings.mailbox.sync, MailboxSync::Normal);
    assert_eq!(*settings.mailbox.busy_timeout_ms, 250);
    assert!(*settings.mailbox.pipelined_sync);
    assert_eq!(
        settings.mailbox.busy_timeout_ms.origin.source,
        display(&local)
    );
    assert_eq!(settings.mailbox.max_body_bytes.origin.layer, Layer::Default);
    assert_eq!(
        settings.store.value,
        muster_config::store_url::StoreLocation::File(project.path("state/m.db"))
    );
    assert_eq!(settings.store.origin.layer, Layer::Cli);

    let allow: Vec<_> = settings
        .permissions
        .allow
        .iter()
        .map(|r| (r.value.as_str().to_string(), r.origin.layer))
        .collect();
    assert_eq!(
        allow,
        vec![
            ("Bash(git diff:*)".to_string(), Layer::User),
            ("Edit(src/**)".to_string(), Layer::Project),
        ]
    );
    assert_eq!(settings.permissions.allow[0].origin.source, display(&user));
    assert_eq!(settings.permissions.ask.len(), 1);
    assert_eq!(settings.permissions.deny.len(), 2);
    let decision = settings
        .permissions
        .decide("Bash", RuleSubject::Command("rm -rf x"))
        .map(|(behavior, rule)| (behavior, rule.origin.layer));
    assert_eq!(decision, Some((RuleBehavior::Deny, Layer::Env)));
}

#[test]
fn per_mode_settings_default_to_the_shared_ones() {
    let project = Project::new();
    project.write(
        ".muster/settings.toml",
        r#"
provider = "openai"
model = "gpt-5"
reasoning_effort = "medium"

[plan]
model = "gpt-5-mini"
reasoning_effort = "high"

[act]
thinking_budget = 2048

[providers.openai]
base_url = "http://127.0.0.1:11434/v1"
api_key_env = "OLLAMA_KEY"
max_retries = 5
stream_idle_timeout_ms = 1500
"#,
    );
    let settings = project.settings();
    assert_eq!(*settings.plan.provider, ProviderKind::OpenAi);
    assert_eq!(settings.plan.model.value, "gpt-5-mini");
    assert_eq!(settings.act.model.value, "gpt-5");
    assert_eq!(
        settings.plan.reasoning_effort.as_ref().map(|e| e.value),
        Some(ReasoningEffort::High)
    );
    assert_eq!(
        settings.act.reasoning_effort.as_ref().map(|e| e.value),
        Some(ReasoningEffort::Medium)
    );
    assert_eq!(
        settings.act.thinking_budget.as_ref().map(|b| b.value),
        Some(2048)
    );
    assert_eq!(settings.plan.thinking_budget, None);
    let openai = settings.provider(ProviderKind::OpenAi);
    assert_eq!(
        openai.base_url.as_ref().unwrap().value,
        "http://127.0.0.1:11434/v1"
    );
    assert_eq!(openai.api_key_env.as_ref().unwrap().value, "OLLAMA_KEY");
    assert_eq!(*openai.max_retries, 5);
    assert_eq!(*openai.stream_idle_timeout_ms, 1500);
    assert_eq!(
        settings.mode(PermissionMode::Plan).model.value,
        "gpt-5-mini"
    );
    assert_eq!(
        settings.mode(PermissionMode::AcceptEdits).model.value,
        "gpt-5"
    );
}

#[test]
fn bad_settings_name_file_line_column_key_expected_and_found() {
    let project = Project::new();
    let file = project.write(
        ".muster/settings.toml",
        "permision_mode = \"plan\"\nauto_gate = \"ajar\"\n[mailbox]\nbusy_timeout_ms = \"fast\"\n[permissions]\nallow = [\"Bash(git diff\", 3]\n[providers.openai]\nbase_url = \"localhost:8080\"\n",
    );
    let file = display(&file);
    let expected = [
        format!(
            "{file}:1:1: permision_mode: unknown key `permision_mode` (did you mean `permission_mode`?)"
        ),
        format!("{file}:2:13: auto_gate: expected one of open, closed, found \"ajar\""),
        format!(
            "{file}:4:19: mailbox.busy_timeout_ms: expected a non-negative integer, found a string \"fast\""
        ),
        format!(
            "{file}:6:10: permissions.allow[0]: expected `)` at the end of rule `Bash(git diff`"
        ),
        format!(
            "{file}:6:27: permissions.allow[1]: expected a rule string like \"Bash(git diff:*)\", found an integer 3"
        ),
        format!(
            "{file}:8:12: providers.openai.base_url: expected a URL string starting with http:// or https://, found \"localhost:8080\""
        ),
    ];
    assert_eq!(project.error(), expected.join("\n"));
}

#[test]
fn table_driven_value_errors() {
    let cases = [
        (
            "permission_mode = \"acceptedits\"",
            "permission_mode: expected one of plan, dontAsk, default, acceptEdits, auto, bypassPermissions, found \"acceptedits\" (did you mean `acceptEdits`?)",
        ),
        (
            "approver = \"lead\"",
            "approver: the main agent's approver is \"human\" or \"policy:FILE\"; \"lead\" is for teammates",
        ),
        (
            "approver = \"bob\"",
            "approver: expected \"human\" or \"policy:FILE\", found \"bob\"",
        ),
        (
            "[permissions]\ndeny = [\"Bsh(ls)\"]",
            "permissions.deny[0]: unknown tool `Bsh` in rule `Bsh(ls)` (did you mean `Bash`?)",
        ),
        (
            "[permissions]\ndeny = \"Bash\"",
            "permissions.deny: expected an array of rule strings, found a string \"Bash\"",
        ),
        (
            "[models.local]\nprice_in = -1",
            "models.local.price_in: expected a non-negative number, found an integer -1",
        ),
        (
            "[budgets.run]\nduration = 60",
            "budgets.run.duration: unknown key `duration` (did you mean `duration_secs`?)",
        ),
        (
            "mailbox = 3",
            "mailbox: expected a table, found an integer 3",
        ),
        (
            "[providers.ollama]\nbase_url = \"http://x\"",
            "providers.ollama: unknown key `ollama`",
        ),
        (
            "[plan]\nreasoning_effort = \"hgh\"",
            "plan.reasoning_effort: expected one of minimal, low, medium, high, found \"hgh\" (did you mean `high`?)",
        ),
        ("model = ", "invalid TOML"),
    ];
    for (text, expected) in cases {
        let project = Project::new();
        project.write(".muster/settings.toml", text);
        let error = project.error();
        assert!(
            error.contains(expected),
            "for {text:?}\n got: {error}\nwant: {expected}"
        );
    }
}

#[test]
fn environment_errors_and_unknown_variables() {
    let project = Project::new().env("MUSTER_MAILBOX__SYNC", "sometimes");
    assert_eq!(
        project.error(),
        "environment variable MUSTER_MAILBOX__SYNC: mailbox.sync: expected one of full, normal, found \"sometimes\""
    );
    // Variables muster and its tests read that are not settings never warn.
    let project = Project::new()
        .env("MUSTER_PERMISION_MODE", "plan")
        .env("MUSTER_TEST_MCP_PYTHON", "/venv/bin/python")
        .env(
            "MUSTER_TEST_DATABASE_URL",
            "postgres://postgres@127.0.0.1/test",
        )
        .env("MUSTER_NO_USER_FILES", "1")
        .env("MUSTER_FAILPOINT", "merge_apply")
        .env("MUSTER_UPDATE_SNAPSHOTS", "1")
        .env("PATH", "/bin");
    let loaded = project.load().unwrap();
    let warnings: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        vec![
            "environment variable MUSTER_PERMISION_MODE: ignored: `MUSTER_PERMISION_MODE` names no setting (did you mean `MUSTER_PERMISSION_MODE`?)"
        ]
    );
}

#[test]
fn cli_flags_beat_the_environment() {
    let mut project = Project::new().env("MUSTER_PERMISSION_MODE", "plan");
    project.cli = project
        .cli
        .clone()
        .set("permission_mode", "auto", "--permission-mode");
    let settings = project.settings();
    assert_eq!(*settings.permission_mode, PermissionMode::Auto);
    assert_eq!(settings.permission_mode.origin.source, "--permission-mode");
    let mut project = Project::new();
    project.cli = project
        .cli
        .clone()
        .set("permission_mode", "yolo", "--permission-mode");
    assert!(
        project
            .error()
            .starts_with("command-line flag --permission-mode: permission_mode: expected one of")
    );
}

#[test]
fn plans_directory_must_resolve_inside_the_project() {
    let project = Project::new();
    let file = project.write(
        ".muster/settings.toml",
        "plans_directory = \"../elsewhere\"\n",
    );
    let root = project.root.canonicalize().unwrap();
    let outside = root.parent().unwrap().join("elsewhere");
    assert_eq!(
        project.error(),
        format!(
            "{}:1:19: plans_directory: \"../elsewhere\" resolves to {}, which is outside the project root {}",
            display(&file),
            display(&outside),
            display(&root)
        )
    );
    project.write(
        ".muster/settings.toml",
        "plans_directory = \"docs/plans/../plans\"\n",
    );
    assert_eq!(
        project.settings().plans_directory.value,
        root.join("docs/plans")
    );
}

#[cfg(unix)]
#[test]
fn plans_directory_symlinked_out_of_the_project_is_refused() {
    let project = Project::new();
    let outside = project.root.parent().unwrap().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, project.path("plans-link")).unwrap();
    project.write(
        ".muster/settings.toml",
        "plans_directory = \"plans-link/sub\"\n",
    );
    let error = project.error();
    assert!(
        error.contains("plans_directory: \"plans-link/sub\" resolves to"),
        "{error}"
    );
    assert!(
        error.contains("outside/sub, which is outside the project root"),
        "{error}"
    );
}

#[test]
fn a_cost_budget_needs_prices_for_the_models_in_use() {
    let project = Project::new();
    let file = project.write(
        ".muster/settings.toml",
        "model = \"local-llama\"\n[budgets.run]\ncost_usd = 2.5\n",
    );
    let error = project.error();
    assert!(error.starts_with(&format!("{}:3:12: budgets.run.cost_usd: a cost budget needs model prices, but model `local-llama` (plan and act modes) has no price_in and price_out; add [models.\"local-llama\"] prices or remove the cost budget", display(&file))), "{error}");
    assert_eq!(error.lines().count(), 1, "{error}");
    project.write(
        ".muster/settings.toml",
        "model = \"local-llama\"\n[models.local-llama]\nprice_in = 0\nprice_out = 0\ncontext_window = 8192\n[budgets.run]\ncost_usd = 2.5\nturns = 40\nduration_secs = 600\n[budgets.agent]\ntokens = 100000\n",
    );
    let settings = project.settings();
    assert_eq!(
        settings.budgets.run.cost_usd.as_ref().map(|c| c.value),
        Some(2.5)
    );
    assert_eq!(
        settings.budgets.run_duration_secs.as_ref().map(|d| d.value),
        Some(600)
    );
    assert_eq!(settings.models["local-llama"].context_window, Some(8192));
}

#[test]
fn built_in_model_prices_can_be_overridden_key_by_key() {
    let project = Project::new();
    project.write(
        ".muster/settings.toml",
        "[models.claude-sonnet-4-5]\nprice_in = 2.0\n",
    );
    let settings = project.settings();
    let sonnet = &settings.models["claude-sonnet-4-5"];
    assert_eq!(sonnet.price_in, Some(2.0));
    assert_eq!(sonnet.price_out, Some(15.0));
    let entry = settings
        .entries()
        .iter()
        .find(|e| e.key == "models.claude-sonnet-4-5.price_in")
        .unwrap();
    assert_eq!(entry.origin.layer, Layer::Project);
}

#[test]
fn api_keys_in_files_git_does_not_ignore_are_warned_about() {
    let project = Project::new();
    let initialised = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(&project.root)
        .status()
        .is_ok_and(|status| status.success());
    if !initialised {
        return;
    }
    let file = project.write(
        ".muster/settings.toml",
        "[providers.anthropic]\napi_key = \"sk-123\"\n",
    );
    let loaded = project.load().unwrap();
    let warnings: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].starts_with(&format!(
        "{}:2:11: providers.anthropic.api_key: an API key sits in a file that git does not ignore",
        display(&file)
    )));
    let shown = loaded
        .value
        .entries()
        .iter()
        .find(|e| e.key == "providers.anthropic.api_key")
        .unwrap();
    assert_eq!(shown.value, serde_json::json!("********"));

    project.write(".muster/.gitignore", "settings.local.toml\n");
    project.write(".muster/settings.toml", "");
    project.write(
        ".muster/settings.local.toml",
        "[providers.anthropic]\napi_key = \"sk-123\"\n",
    );
    assert!(project.load().unwrap().warnings.is_empty());
}

#[test]
fn invalid_utf8_is_an_error_naming_the_file() {
    let project = Project::new();
    let path = project.path(".muster/settings.toml");
    std::fs::write(&path, [0xff, 0xfe, 0x00]).unwrap();
    assert_eq!(
        project.error(),
        format!(
            "{}: expected UTF-8 text, found invalid bytes",
            display(&path)
        )
    );
}

#[test]
fn a_shared_key_from_a_later_layer_beats_a_mode_key_from_an_earlier_one() {
    let mut project = Project::new().env("MUSTER_MODEL", "claude-haiku-4-5");
    project.write(
        ".muster/settings.toml",
        "model = \"gpt-5\"\n[plan]\nmodel = \"claude-opus-4-1\"\n",
    );
    let settings = project.settings();
    assert_eq!(settings.plan.model.value, "claude-haiku-4-5");
    assert_eq!(settings.plan.model.origin.layer, Layer::Env);
    assert_eq!(settings.act.model.value, "claude-haiku-4-5");

    project.env.clear();
    project
        .env
        .insert("MUSTER_PLAN__MODEL".into(), "gpt-5-mini".into());
    project.cli = muster_config::CliOverrides::new()
        .provider("openai")
        .max_duration_secs(90)
        .permission_mode("dontAsk")
        .approver("policy:p.toml")
        .store("s.db");
    project.write("p.toml", "");
    let settings = project.settings();
    assert_eq!(settings.plan.model.value, "gpt-5-mini");
    assert_eq!(settings.act.model.value, "gpt-5");
    assert_eq!(*settings.plan.provider, ProviderKind::OpenAi);
    assert_eq!(settings.plan.provider.origin.source, "--provider");
    assert_eq!(
        settings.budgets.run_duration_secs.as_ref().unwrap().value,
        90
    );
    assert_eq!(*settings.permission_mode, PermissionMode::DontAsk);
    assert_eq!(*settings.approver, Responder::Policy("p.toml".into()));
}

#[test]
fn an_approver_policy_file_must_exist_and_be_valid() {
    let project = Project::new();
    let file = project.write(".muster/settings.toml", "approver = \"policy:ci.toml\"\n");
    assert_eq!(
        project.error(),
        format!(
            "{}:1:12: approver: policy file {} not found",
            display(&file),
            display(&project.path("ci.toml"))
        )
    );
    let policy = project.write("ci.toml", "max_mode = \"sideways\"\n");
    let error = project.error();
    assert!(
        error.starts_with(&format!(
            "{}:1:12: max_mode: unknown permission mode `sideways`",
            display(&policy)
        )),
        "{error}"
    );
}

#[test]
fn provider_wide_variables_set_every_provider_and_specific_ones_win() {
    let project = Project::new()
        .env("MUSTER_STREAM_IDLE_TIMEOUT_MS", "1234")
        .env("MUSTER_PROVIDERS__OPENAI__STREAM_IDLE_TIMEOUT_MS", "99");
    let settings = project.settings();
    assert_eq!(*settings.anthropic.stream_idle_timeout_ms, 1234);
    assert_eq!(
        settings.anthropic.stream_idle_timeout_ms.origin.source,
        "MUSTER_STREAM_IDLE_TIMEOUT_MS"
    );
    assert_eq!(*settings.script.stream_idle_timeout_ms, 1234);
    assert_eq!(*settings.openai.stream_idle_timeout_ms, 99);
    let project = Project::new().env("MUSTER_MAX_RETRIES", "many");
    assert_eq!(
        project.error(),
        "environment variable MUSTER_MAX_RETRIES: providers.anthropic.max_retries: expected a non-negative integer, found \"many\""
    );
}

#[test]
fn compaction_defaults_and_layers() {
    let settings = Project::new().settings();
    let compaction = &settings.compaction;
    assert!(*compaction.enabled);
    assert_eq!(*compaction.trigger_ratio, 0.85);
    assert_eq!(*compaction.reserve_tokens, 13_000);
    assert!(compaction.max_prompt_tokens.is_none());
    assert_eq!(*compaction.recent_messages_tokens, 20_000);
    assert_eq!(*compaction.summary_max_tokens, 8192);
    assert_eq!(compaction.trigger_ratio.origin.layer, Layer::Default);

    let project = Project::new()
        .env("MUSTER_COMPACTION__ENABLED", "false")
        .env("MUSTER_COMPACTION__RESERVE_TOKENS", "4000");
    project.write(
        ".muster/settings.toml",
        "[compaction]\nenabled = true\ntrigger_ratio = 0.5\nmax_prompt_tokens = 90000\n",
    );
    let settings = project.settings();
    let compaction = &settings.compaction;
    assert!(!*compaction.enabled);
    assert_eq!(
        compaction.enabled.origin.source,
        "MUSTER_COMPACTION__ENABLED"
    );
    assert_eq!(*compaction.trigger_ratio, 0.5);
    assert_eq!(compaction.trigger_ratio.origin.layer, Layer::Project);
    assert_eq!(*compaction.reserve_tokens, 4000);
    assert_eq!(
        compaction.max_prompt_tokens.as_ref().map(|v| v.value),
        Some(90_000)
    );
    let shown: Vec<(String, serde_json::Value)> = settings
        .entries()
        .iter()
        .filter(|entry| entry.key.starts_with("compaction."))
        .map(|entry| (entry.key.clone(), entry.value.clone()))
        .collect();
    assert!(shown.contains(&("compaction.enabled".into(), serde_json::json!(false))));
    assert!(shown.contains(&("compaction.trigger_ratio".into(), serde_json::json!(0.5))));
    assert_eq!(shown.len(), 6, "{shown:?}");
}

#[test]
fn compaction_values_out_of_range_are_refused() {
    let file_cases = [
        (
            "[compaction]\ntrigger_ratio = 1.5",
            "settings.toml:2:17: compaction.trigger_ratio: expected a number greater than 0 and at most 1, found a float 1.5",
        ),
        (
            "[compaction]\ntrigger_ratio = 0",
            "compaction.trigger_ratio: expected a number greater than 0 and at most 1, found an integer 0",
        ),
        (
            "[compaction]\ntrigger_ratio = nan",
            "compaction.trigger_ratio: expected a number greater than 0 and at most 1, found a float nan",
        ),
        (
            "[compaction]\nenabled = \"yes\"",
            "compaction.enabled: expected true or false, found a string \"yes\"",
        ),
        (
            "[compaction]\nreserve_tokens = -1",
            "compaction.reserve_tokens: expected a non-negative integer, found an integer -1",
        ),
        (
            "[compaction]\nsummary_max_tokens = 0",
            "settings.toml:2:22: compaction.summary_max_tokens: expected a positive integer, found 0",
        ),
        (
            "[compaction]\nmax_prompt_tokens = 0",
            "compaction.max_prompt_tokens: expected a positive integer, found 0",
        ),
        (
            "[compaction]\ntrigger = 0.5",
            "compaction.trigger: unknown key `trigger` (did you mean `trigger_ratio`?)",
        ),
    ];
    for (text, expected) in file_cases {
        let project = Project::new();
        project.write(".muster/settings.toml", text);
        let error = project.error();
        assert!(
            error.contains(expected),
            "for {text:?}\n got: {error}\nwant: {expected}"
        );
    }
    let env_cases = [
        (
            "MUSTER_COMPACTION__TRIGGER_RATIO",
            "1.01",
            "environment variable MUSTER_COMPACTION__TRIGGER_RATIO: compaction.trigger_ratio: expected a number greater than 0 and at most 1, found \"1.01\"",
        ),
        (
            "MUSTER_COMPACTION__ENABLED",
            "1",
            "environment variable MUSTER_COMPACTION__ENABLED: compaction.enabled: expected true or false, found \"1\"",
        ),
    ];
    for (name, value, expected) in env_cases {
        assert_eq!(Project::new().env(name, value).error(), expected);
    }
}

#[test]
fn an_openai_provider_needs_a_model_of_its_own() {
    // (settings file, Some(mode named in the error) | None: loads)
    let cases: [(&str, Option<&str>); 6] = [
        ("provider = \"openai\"\n", Some("plan and act mode")),
        ("[plan]\nprovider = \"openai\"\n", Some("(plan mode)")),
        ("provider = \"openai\"\nmodel = \"gpt-4.1\"\n", None),
        (
            "[act]\nprovider = \"openai\"\nmodel = \"qwen2.5-coder\"\n",
            None,
        ),
        (
            "[plan]\nprovider = \"openai\"\n[act]\nprovider = \"openai\"\nmodel = \"m\"\n",
            Some("(plan mode)"),
        ),
        ("provider = \"anthropic\"\n", None),
    ];
    for (text, expected) in cases {
        let project = Project::new();
        project.write(".muster/settings.toml", text);
        match expected {
            Some(mode) => {
                let error = project.error();
                assert!(
                    error.contains(mode) && error.contains("--model NAME"),
                    "for {text:?}: {error}"
                );
            }
            None => {
                project.settings();
            }
        }
    }
    // A model from the environment or a flag counts too.
    let project = Project::new().env("MUSTER_MODEL", "llama3.1");
    project.write(".muster/settings.toml", "provider = \"openai\"\n");
    assert_eq!(project.settings().act.model.value, "llama3.1");
}

#[test]
fn store_takes_a_path_or_a_url_and_store_path_is_its_alias() {
    use muster_config::store_url::StoreLocation;
    let project = Project::new();
    project.write(".muster/settings.toml", "store_path = \"old.db\"\n");
    let settings = project.settings();
    assert_eq!(
        settings.store.value,
        StoreLocation::File(project.path("old.db"))
    );
    assert_eq!(settings.store.origin.layer, Layer::Project);

    project.write(
        ".muster/settings.local.toml",
        "store = \"postgres://u:pw@db.example:5432/muster\"\n",
    );
    let settings = project.settings();
    assert_eq!(
        settings.store.value,
        StoreLocation::Postgres("postgres://u:pw@db.example:5432/muster".into()),
        "the higher layer wins whichever name it uses"
    );
    assert_eq!(
        settings.store.value.to_string(),
        "postgres://u:***@db.example:5432/muster"
    );

    project.write(
        ".muster/settings.toml",
        "store = \"new.db\"\nstore_path = \"old.db\"\n",
    );
    std::fs::remove_file(project.path(".muster/settings.local.toml")).unwrap();
    assert_eq!(
        project.settings().store.value,
        StoreLocation::File(project.path("new.db")),
        "at one layer, `store` wins over its alias"
    );
}
