//! Team files and policy files.

use muster_config::{
    AgentCatalog, PermissionMode, Policy, PolicyAnswer, Responder, RuleSubject, TeamFile,
};

use super::fixtures::{Project, display};

fn catalog() -> AgentCatalog {
    AgentCatalog::built_in().unwrap()
}

const TEAM: &str = r#"
name = "shop"
lead = "lead"
max_concurrent_teammates = 3
shutdown_timeout_ms = 2500

[[teammates]]
name = "alice"
definition = "general"
plan_mode_required = true
approver = "human"

[[teammates]]
name = "worker"
definition = "general"
count = 2
plan_mode_required = false

[spawn]
plan_mode_required = true
approver = "lead"
max_mode = "acceptEdits"
definitions = ["general", "Plan"]
"#;

#[test]
fn a_team_file_expands_counts_and_keeps_spawn_rules() {
    let team = TeamFile::parse("t.toml", TEAM, &catalog()).unwrap();
    assert_eq!(team.name, "shop");
    assert_eq!(team.lead, "lead");
    assert_eq!(team.max_concurrent_teammates, 3);
    assert_eq!(team.shutdown_timeout_ms, 2500);
    let ids: Vec<&str> = team.teammates.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, vec!["alice", "worker-1", "worker-2"]);
    assert_eq!(team.teammates[0].approver, Responder::Human);
    assert!(team.teammates[0].plan_mode_required);
    assert!(!team.teammates[2].plan_mode_required);
    assert_eq!(team.teammates[2].approver, Responder::Lead);
    assert_eq!(team.spawn.max_mode, Some(PermissionMode::AcceptEdits));
    assert!(team.spawn.allows_definition("Plan"));
    assert!(!team.spawn.allows_definition("lead"));
}

#[test]
fn spawn_defaults_require_plans_approved_by_the_lead() {
    let team = TeamFile::parse("t.toml", "name = \"t\"\n", &catalog()).unwrap();
    assert!(team.spawn.plan_mode_required);
    assert_eq!(team.spawn.approver, Responder::Lead);
    assert_eq!(team.spawn.max_mode, None);
    assert!(team.spawn.allows_definition("general"));
    assert!(!team.spawn.allows_definition("lead"));
    assert_eq!(team.lead, "lead");
    assert!(team.teammates.is_empty());
    assert_eq!(team.shutdown_timeout_ms, 10_000);
    assert_eq!(team.max_concurrent_teammates, 4);
}

#[test]
fn declared_teammates_may_fill_max_concurrent_teammates_exactly() {
    let text = "name = \"t\"\nmax_concurrent_teammates = 3\n[[teammates]]\nname = \"w\"\ncount = 3";
    let team = TeamFile::parse("t.toml", text, &catalog()).unwrap();
    assert_eq!(team.teammates.len(), 3);
}

#[test]
fn bad_team_files_say_where_and_what() {
    let cases = [
        (
            "name = \"Shop\"",
            "t.toml:1:8: name: expected an id of lowercase letters, digits and `-`, starting with a letter, at most 32 characters ([a-z][a-z0-9-]{0,31}), found \"Shop\"",
        ),
        (
            "lead = \"lead\"",
            "t.toml:1:1: name: missing required key `name`",
        ),
        (
            "name = \"t\"\nteamates = []",
            "t.toml:2:1: teamates: unknown key `teamates` (did you mean `teammates`?)",
        ),
        (
            "name = \"t\"\n[[teammates]]\nname = \"human\"",
            "t.toml:3:8: teammates[0].name: `human` is reserved (lead, human and policy cannot name teammates)",
        ),
        (
            "name = \"t\"\n[[teammates]]\nname = \"lead\"",
            "t.toml:3:8: teammates[0].name: `lead` is reserved",
        ),
        (
            "name = \"t\"\n[[teammates]]\nname = \"bob\"\ndefinition = \"genral\"",
            "t.toml:4:14: teammates[0].definition: unknown agent definition `genral` (did you mean `general`?)",
        ),
        (
            "name = \"t\"\n[[teammates]]\nname = \"bob\"\n[[teammates]]\nname = \"bob\"",
            "t.toml:5:8: teammates[1].name: duplicate teammate id `bob` (also from teammates[0].name)",
        ),
        (
            "name = \"t\"\n[[teammates]]\nname = \"w\"\ncount = 0",
            "t.toml:4:9: teammates[0].count: expected a count from 1 to 64, found 0",
        ),
        (
            "name = \"t\"\n[[teammates]]\nname = \"w\"\napprover = \"boss\"",
            "t.toml:4:12: teammates[0].approver: expected \"lead\", \"human\", \"policy:FILE\" or \"hook:NAME\", found \"boss\"",
        ),
        (
            "name = \"t\"\n[[teammates]]\nname = \"w\"\nplan_mode_required = \"yes\"",
            "t.toml:4:22: teammates[0].plan_mode_required: expected a boolean (true or false), found a string \"yes\"",
        ),
        (
            "name = \"t\"\n[spawn]\nmax_mode = \"bypass\"",
            "t.toml:3:12: spawn.max_mode: unknown permission mode `bypass`",
        ),
        (
            "name = \"t\"\n[spawn]\ndefinitions = [\"Plna\"]",
            "t.toml:3:16: spawn.definitions[0]: unknown agent definition `Plna` (did you mean `Plan`?)",
        ),
        (
            "name = \"t\"\nmax_concurrent_teammates = -1",
            "t.toml:2:28: max_concurrent_teammates: expected a non-negative integer, found an integer -1",
        ),
        (
            "name = \"t\"\n[[teammates]]\nname = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\ncount = 12",
            "teammate id \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-10\"",
        ),
        (
            "name = \"t\"\nshutdown_timeout_ms = 0",
            "t.toml:2:23: shutdown_timeout_ms: expected milliseconds from 1 to 3600000, found 0",
        ),
        (
            "name = \"t\"\nshutdown_timeout_ms = 3600001",
            "t.toml:2:23: shutdown_timeout_ms: expected milliseconds from 1 to 3600000, found 3600001",
        ),
        (
            "name = \"t\"\nshutdown_timeout_ms = \"10s\"",
            "t.toml:2:23: shutdown_timeout_ms: expected a non-negative integer, found a string",
        ),
        (
            "name = \"t\"\nmax_concurrent_teammates = 2\n[[teammates]]\nname = \"w\"\ncount = 3",
            "t.toml:2:28: max_concurrent_teammates: the team declares 3 teammates but max_concurrent_teammates is 2: every declared teammate is live for the whole run, so set max_concurrent_teammates to at least 3 or declare fewer",
        ),
        (
            "name = \"t\"\n[[teammates]]\nname = \"w\"\ncount = 5",
            "t.toml: the team declares 5 teammates but max_concurrent_teammates is 4",
        ),
        ("name = ", "t.toml:1:8: invalid TOML"),
    ];
    for (text, expected) in cases {
        let error = TeamFile::parse("t.toml", text, &catalog())
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(expected),
            "for {text:?}\n got: {error}\nwant: {expected}"
        );
    }
}

#[test]
fn teams_may_name_project_definitions_and_policy_files_are_checked() {
    let project = Project::new();
    project.write(
        ".muster/agents/reviewer.md",
        "---\nname: reviewer\ndescription: r\n---\n",
    );
    let team_path = project.write(
        "muster.team.toml",
        "name = \"t\"\n[[teammates]]\nname = \"rita\"\ndefinition = \"reviewer\"\napprover = \"policy:policies/ci.toml\"\n",
    );
    let root = project.project_root();
    let catalog = AgentCatalog::load(&root, None).unwrap().value;
    assert_eq!(TeamFile::discover(&root), Some(team_path.clone()));
    let error = TeamFile::load(&team_path, &root, &catalog)
        .unwrap_err()
        .to_string();
    assert_eq!(
        error,
        format!(
            "{}: policy file not found",
            display(&project.path("policies/ci.toml"))
        )
    );
    project.write("policies/ci.toml", "max_mode = \"acceptEdits\"\n");
    let team = TeamFile::load(&team_path, &root, &catalog).unwrap();
    assert_eq!(team.teammates[0].definition, "reviewer");
    assert_eq!(
        team.teammates[0].approver,
        Responder::Policy("policies/ci.toml".into())
    );
}

const POLICY: &str = r#"
required_sections = ["Goal", "Steps", "Files", "Tests"]
max_files = 2
allowed_paths = ["src/**", "tests/**"]
denied_paths = ["src/secrets/**"]
max_mode = "acceptEdits"

[permissions]
allow = ["Bash(cargo test:*)", "Read"]
deny = ["Bash(cargo test --release:*)"]
"#;

#[test]
fn a_policy_answers_permissions_by_its_rules_and_denies_the_rest() {
    let policy = Policy::parse("p.toml", POLICY).unwrap();
    assert!(!policy.approve_all);
    let cases = [
        (
            "Bash",
            RuleSubject::Command("cargo test -p x"),
            PolicyAnswer::Allow {
                rule: "Bash(cargo test:*)".into(),
            },
        ),
        (
            "Bash",
            RuleSubject::Command("cargo test --release"),
            PolicyAnswer::Deny {
                reason: "denied by policy rule `Bash(cargo test --release:*)`".into(),
            },
        ),
        (
            "Bash",
            RuleSubject::Command("rm -rf /"),
            PolicyAnswer::Deny {
                reason: "policy has no rule".into(),
            },
        ),
        (
            "Grep",
            RuleSubject::Nothing,
            PolicyAnswer::Allow {
                rule: "Read".into(),
            },
        ),
    ];
    for (tool, subject, expected) in cases {
        assert_eq!(
            policy.answer_permission(tool, subject),
            expected,
            "{tool} {subject:?}"
        );
    }
}

#[test]
fn a_policy_reviews_merges_by_the_files_they_change() {
    let policy = Policy::parse("p.toml", POLICY).unwrap();
    let cases: &[(&[&str], &[&str])] = &[
        (&["src/a.rs", "tests/b.rs"], &[]),
        (
            &["src/secrets/k.rs", "docs/x.md", "src/c.rs"],
            &[
                "the merge changes 3 paths; the policy allows at most 2",
                "`src/secrets/k.rs` matches a denied path",
                "`docs/x.md` matches no allowed path",
            ],
        ),
        // A merge has no sections: `required_sections` is a plan's rule only.
        (&[], &[]),
    ];
    for (files, reasons) in cases {
        let verdict = policy.review_merge(files);
        assert_eq!(verdict.reasons, *reasons, "{files:?}");
        assert_eq!(verdict.approved, reasons.is_empty());
    }
    let yolo = Policy::parse("p.toml", "approve_all = true\n").unwrap();
    assert!(yolo.review_merge(&["anything/at/all"]).approved);
}

#[test]
fn a_policy_reviews_plans() {
    let policy = Policy::parse("p.toml", POLICY).unwrap();
    let good =
        "## Goal\nx\n## Steps\n1. a\n## Files\n- src/a.rs\n- `tests/b.rs`\n## Tests\ncargo test\n";
    let verdict = policy.review_plan(good);
    assert!(verdict.approved, "{:?}", verdict.reasons);
    assert_eq!(verdict.granted_mode, PermissionMode::AcceptEdits);
    let bad = "## Goal\nx\n## Steps\n1. a\n## Files\nsrc/secrets/k.rs\ndocs/x.md\nsrc/c.rs\n";
    let verdict = policy.review_plan(bad);
    assert!(!verdict.approved);
    assert_eq!(
        verdict.reasons,
        vec![
            "missing section `## Tests`",
            "`## Files` lists 3 paths; the policy allows at most 2",
            "`src/secrets/k.rs` matches a denied path",
            "`docs/x.md` matches no allowed path",
        ]
    );
    // Every rule, passed or failed, as the web inbox shows it; agreeing with the verdict.
    let table = |plan: &str| -> Vec<(String, bool, String)> {
        let checks = policy.plan_checks(plan);
        assert_eq!(
            checks.iter().all(|c| c.passed),
            policy.review_plan(plan).approved,
            "{plan}"
        );
        checks
            .into_iter()
            .map(|c| (c.rule, c.passed, c.detail))
            .collect()
    };
    let rules = |rows: &[(&str, bool, &str)]| -> Vec<(String, bool, String)> {
        rows.iter()
            .map(|(rule, passed, detail)| (rule.to_string(), *passed, detail.to_string()))
            .collect()
    };
    let sections =
        ["Goal", "Steps", "Files", "Tests"].map(|s| format!("required section `## {s}`"));
    assert_eq!(
        table(good),
        rules(&[
            (&sections[0], true, "present"),
            (&sections[1], true, "present"),
            (&sections[2], true, "present"),
            (&sections[3], true, "present"),
            ("max_files = 2", true, "`## Files` lists 2 paths"),
            (
                "denied_paths `src/secrets/**`",
                true,
                "no planned path matches"
            ),
            (
                "allowed_paths `src/**`, `tests/**`",
                true,
                "every planned path matches"
            ),
        ])
    );
    assert_eq!(
        table(bad),
        rules(&[
            (&sections[0], true, "present"),
            (&sections[1], true, "present"),
            (&sections[2], true, "present"),
            (&sections[3], false, "missing or empty"),
            ("max_files = 2", false, "`## Files` lists 3 paths"),
            (
                "denied_paths `src/secrets/**`",
                false,
                "`src/secrets/k.rs` match"
            ),
            (
                "allowed_paths `src/**`, `tests/**`",
                false,
                "`docs/x.md` match none"
            ),
        ])
    );
    let yolo = Policy::parse("p.toml", "approve_all = true\n").unwrap();
    assert!(yolo.review_plan("").approved);
    assert_eq!(
        yolo.plan_checks(""),
        vec![muster_config::RuleCheck {
            rule: "approve_all = true".into(),
            passed: true,
            detail: "every plan is approved without checks".into(),
        }]
    );
    assert_eq!(yolo.max_mode, PermissionMode::Default);
    let strict = Policy::parse("p.toml", "").unwrap();
    assert!(!strict.approve_all, "approve_all is never a default");
    assert_eq!(
        strict.answer_permission("Read", RuleSubject::Nothing),
        PolicyAnswer::Deny {
            reason: "policy has no rule".into()
        }
    );
}

#[test]
fn bad_policy_files_say_where_and_what() {
    let cases = [
        (
            "required_sections = [\"Step\"]",
            "p.toml:1:22: required_sections[0]: expected one of Goal, Steps, Files, Tests, Risks, found \"Step\" (did you mean `Steps`?)",
        ),
        (
            "max_file = 3",
            "p.toml:1:1: max_file: unknown key `max_file` (did you mean `max_files`?)",
        ),
        (
            "allowed_paths = [\"src/[\"]",
            "p.toml:1:18: allowed_paths[0]: invalid path glob \"src/[\"",
        ),
        (
            "max_mode = \"everything\"",
            "p.toml:1:12: max_mode: unknown permission mode `everything`",
        ),
        (
            "[permissions]\nallow = [\"Bash(ls\"]",
            "p.toml:2:10: permissions.allow[0]: expected `)` at the end of rule `Bash(ls`",
        ),
        (
            "[permissions]\nask = []",
            "p.toml:2:1: permissions.ask: unknown key `ask`",
        ),
        (
            "approve_all = 1",
            "p.toml:1:15: approve_all: expected a boolean (true or false), found an integer 1",
        ),
    ];
    for (text, expected) in cases {
        let error = Policy::parse("p.toml", text).unwrap_err().to_string();
        assert!(
            error.starts_with(expected),
            "for {text:?}\n got: {error}\nwant: {expected}"
        );
    }
}

#[test]
fn isolation_is_read_team_wide_and_a_per_teammate_value_is_refused() {
    use muster_config::Isolation;
    for (text, expected) in [
        ("name = \"t\"\n", None),
        (
            "name = \"t\"\nisolation = \"worktree\"\n",
            Some(Isolation::Worktree),
        ),
        (
            "name = \"t\"\nisolation = \"shared\"\n",
            Some(Isolation::Shared),
        ),
    ] {
        let team = TeamFile::parse("t.toml", text, &catalog()).unwrap();
        assert_eq!(team.isolation, expected, "{text}");
    }
    let unknown = TeamFile::parse(
        "t.toml",
        "name = \"t\"\nisolation = \"worktrees\"\n",
        &catalog(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        unknown.contains("unknown isolation `worktrees`"),
        "{unknown}"
    );
    assert!(unknown.contains("worktree"), "{unknown}");
    let mixed = "name = \"t\"\nisolation = \"worktree\"\n[[teammates]]\nname = \"a\"\nisolation = \"shared\"\n";
    let error = TeamFile::parse("t.toml", mixed, &catalog())
        .unwrap_err()
        .to_string();
    assert!(error.contains("isolation is team-wide"), "{error}");
    assert!(error.contains("t.toml:5"), "{error}");
}

#[test]
fn placement_is_read_per_teammate_and_in_spawn_and_remote_at_the_top() {
    use muster_config::Placement;
    let text = "name = \"t\"\nremote = \"/srv/git/t.git\"\n[[teammates]]\nname = \"a\"\n\
                placement = \"workers\"\n[[teammates]]\nname = \"b\"\n[spawn]\nplacement = \"workers\"\n";
    let team = TeamFile::parse("t.toml", text, &catalog()).unwrap();
    assert_eq!(team.remote.as_deref(), Some("/srv/git/t.git"));
    let placements: Vec<Placement> = team.teammates.iter().map(|t| t.placement).collect();
    assert_eq!(placements, [Placement::Workers, Placement::Local]);
    assert_eq!(team.spawn.placement, Placement::Workers);
    assert!(team.uses_workers());
    let local = TeamFile::parse(
        "t.toml",
        "name = \"t\"\n[[teammates]]\nname = \"a\"\n",
        &catalog(),
    )
    .unwrap();
    assert!(!local.uses_workers());
    assert_eq!(local.remote, None);
    for (text, expected) in [
        (
            "name = \"t\"\n[[teammates]]\nname = \"a\"\nplacement = \"worker\"\n",
            "t.toml:4:13: teammates[0].placement: unknown placement `worker`: expected \"local\" or \"workers\"",
        ),
        (
            "name = \"t\"\nremote = \"\"\n",
            "t.toml:2:10: remote: expected a git remote URL or path",
        ),
    ] {
        let error = TeamFile::parse("t.toml", text, &catalog())
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(expected),
            "for {text:?}\n got: {error}\nwant: {expected}"
        );
    }
}

#[test]
fn a_team_files_merge_gate_and_teammate_endpoints_are_read_and_checked() {
    let text = "name = \"t\"\n\n[merge]\ntest = \"cargo test\"\ntest_timeout = 90\ncache = [\"target\"]\n\n[[teammates]]\nname = \"local\"\nprovider = \"openai\"\nmodel = \"sonnet\"\nbase_url = \"http://127.0.0.1:8000/v1\"\napi_key_env = \"LOCAL_KEY\"\n";
    let mut team = TeamFile::parse("t.toml", text, &catalog()).unwrap();
    let gate = team.merge.clone().unwrap();
    assert_eq!(
        (
            gate.test.as_str(),
            gate.test_timeout_secs,
            gate.cache,
            gate.before_apply
        ),
        ("cargo test", 90, vec!["target".to_owned()], false)
    );
    let before = TeamFile::parse(
        "t.toml",
        "name = \"t\"\n[merge]\ntest = \"x\"\nbefore_apply = true\n",
        &catalog(),
    )
    .unwrap();
    assert!(before.merge.unwrap().before_apply);
    let endpoint = &team.teammates[0].endpoint;
    assert_eq!(endpoint.model.as_deref(), Some("claude-sonnet-4-5"));
    assert_eq!(endpoint.api_key_env.as_deref(), Some("LOCAL_KEY"));
    assert_eq!(
        team.skip_untrusted_endpoints(),
        [
            "teammate local base_url = \"http://127.0.0.1:8000/v1\"",
            "teammate local api_key_env = \"LOCAL_KEY\""
        ]
    );
    assert_eq!(
        team.skip_merge_gate().as_deref(),
        Some("merge.test = \"cargo test\"")
    );
    assert!(team.merge.is_none());

    let cases = [
        (
            "name = \"t\"\n[merge]\ntest = \" \"",
            "merge.test: `test` is empty: give the project's test command, or remove [merge]",
        ),
        (
            "name = \"t\"\n[merge]\ntest = \"x\"\ntest_timeout = 0",
            "merge.test_timeout: expected seconds (at least 1), found 0",
        ),
        (
            "name = \"t\"\n[merge]\ntest = \"x\"\nbefore_apply = \"yes\"",
            "merge.before_apply",
        ),
        (
            "name = \"t\"\n[merge]\ntest = \"x\"\ncache = [\"../up\"]",
            "merge.cache[0]: expected a path inside the project (relative, no `..`), found \"../up\"",
        ),
        (
            "name = \"t\"\n[[teammates]]\nname = \"a\"\nprovider = \"ollama\"",
            "teammates[0].provider: expected one of anthropic, openai, script, found \"ollama\"",
        ),
        (
            "name = \"t\"\n[[teammates]]\nname = \"a\"\nbase_url = \"localhost:8000\"",
            "teammates[0].base_url: expected a URL starting with http:// or https://, found \"localhost:8000\"",
        ),
    ];
    for (text, expected) in cases {
        let error = TeamFile::parse("t.toml", text, &catalog())
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(expected),
            "for {text:?}\n got: {error}\nwant: {expected}"
        );
    }
}

#[test]
fn a_policy_requiring_tests_refuses_an_untested_merge_even_when_it_approves_all() {
    let policy =
        Policy::parse("p.toml", "approve_all = true\nrequire_tests_pass = true\n").unwrap();
    assert!(policy.untested_merge_reason(true).is_none());
    let reason = policy.untested_merge_reason(false).unwrap();
    assert!(reason.contains("require_tests_pass"), "{reason}");
    let lenient = Policy::parse("p.toml", "approve_all = true\n").unwrap();
    assert!(lenient.untested_merge_reason(false).is_none());
}
