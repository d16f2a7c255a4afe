//! Plan-scoped grants in the permission engine: a grant allows what it names for the agent
//! holding it, after deny rules, ask rules, known-dangerous commands and path limits.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test setup and assertions fail loudly"
)]

use muster_agents::permission::{
    AgentKind, PermissionContext, PermissionEngine, PlanGrants, Verdict,
};
use muster_agents::tools::Workspace;
use muster_config::{AgentCatalog, Origin, PermissionMode, PermissionRules, Sourced};
use serde_json::json;

fn rules(ask: &[&str], deny: &[&str]) -> PermissionRules {
    let list = |texts: &[&str]| {
        texts
            .iter()
            .map(|text| Sourced::new(text.parse().unwrap(), Origin::built_in()))
            .collect()
    };
    PermissionRules {
        allow: Vec::new(),
        ask: list(ask),
        deny: list(deny),
    }
}

fn grants(texts: &[&str]) -> PlanGrants {
    let texts: Vec<String> = texts.iter().map(|t| (*t).to_owned()).collect();
    let (grants, invalid) = PlanGrants::from_texts("plan-alice-1", "human", &texts);
    assert!(invalid.is_empty(), "{invalid:?}");
    grants
}

/// Each row: the mode, the grants, the ask and deny rules, the call, the verdict and a part of
/// the reason.
#[test]
fn grants_allow_only_what_nothing_stronger_stops() {
    let directory = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(directory.path().join("src")).unwrap();
    let workspace = Workspace::new(directory.path()).unwrap();
    let catalog = AgentCatalog::built_in().unwrap();
    let engine = PermissionEngine::standard();
    let bash = |command: &str| ("Bash", json!({"command": command}));
    let edit = |path: &str| ("Write", json!({"file_path": path, "content": "x"}));
    type Row<'a> = (
        PermissionMode,
        &'a [&'a str],
        &'a [&'a str],
        &'a [&'a str],
        (&'a str, serde_json::Value),
        Verdict,
        &'a str,
    );
    let default = PermissionMode::Default;
    let cargo: &[&str] = &["Bash(cargo test:*)"];
    let rows: Vec<Row<'_>> = vec![
        // A grant allows its command, with arguments, in default mode.
        (
            default,
            cargo,
            &[],
            &[],
            bash("cargo test --lib"),
            Verdict::Allow,
            "the grant `Bash(cargo test:*)` of plan plan-alice-1 (approved by human)",
        ),
        // Without the grant it asks; a command the grant does not name asks.
        (
            default,
            &[],
            &[],
            &[],
            bash("cargo test"),
            Verdict::Ask,
            "needs approval",
        ),
        (
            default,
            cargo,
            &[],
            &[],
            bash("cargo build"),
            Verdict::Ask,
            "needs approval",
        ),
        // Every part of a compound command must be granted.
        (
            default,
            cargo,
            &[],
            &[],
            bash("cargo test && make"),
            Verdict::Ask,
            "needs approval",
        ),
        // dontAsk and auto deny what would ask, but a grant allows it first.
        (
            PermissionMode::DontAsk,
            cargo,
            &[],
            &[],
            bash("cargo test"),
            Verdict::Allow,
            "grant",
        ),
        (
            PermissionMode::DontAsk,
            &[],
            &[],
            &[],
            bash("cargo test"),
            Verdict::Deny,
            "dontAsk",
        ),
        // A deny rule beats a grant; an ask rule beats a grant.
        (
            default,
            cargo,
            &[],
            &["Bash(cargo test:*)"],
            bash("cargo test"),
            Verdict::Deny,
            "deny rule",
        ),
        (
            default,
            cargo,
            &["Bash(cargo test --release:*)"],
            &[],
            bash("cargo test --release"),
            Verdict::Ask,
            "ask rule",
        ),
        // A known-dangerous command is never granted, even when a grant names it.
        (
            default,
            &["Bash(git push:*)"],
            &[],
            &[],
            bash("git push --force origin main"),
            Verdict::Ask,
            "known-dangerous",
        ),
        // File grants: inside the workspace allowed; path limits still deny.
        (
            default,
            &["Edit(src/**)"],
            &[],
            &[],
            edit("src/new.rs"),
            Verdict::Allow,
            "grant `Edit(src/**)`",
        ),
        (
            default,
            &["Edit(src/**)"],
            &[],
            &[],
            edit("docs/new.md"),
            Verdict::Ask,
            "needs approval",
        ),
        (
            default,
            &["Edit(//tmp/**)"],
            &[],
            &[],
            edit("/tmp/outside.rs"),
            Verdict::Deny,
            "path limits",
        ),
        (
            default,
            &["Edit(.git/**)"],
            &[],
            &[],
            edit(".git/config"),
            Verdict::Deny,
            "path limits",
        ),
        // Plan mode is never widened by a grant.
        (
            PermissionMode::Plan,
            cargo,
            &[],
            &[],
            bash("cargo test"),
            Verdict::Deny,
            "plan mode",
        ),
    ];
    for (mode, granted, ask, deny, (tool, input), verdict, reason) in rows {
        let rules = rules(ask, deny);
        let grants = grants(granted);
        let mut context =
            PermissionContext::new(AgentKind::Teammate, mode, &workspace, &rules, &catalog);
        context.grants = (!granted.is_empty()).then_some(&grants);
        let decision = engine.decide(&context, tool, &input);
        assert_eq!(
            decision.verdict, verdict,
            "{mode} {granted:?} {tool} {input}: {}",
            decision.reason
        );
        assert!(
            decision.reason.contains(reason),
            "{mode} {granted:?} {tool} {input}: {}",
            decision.reason
        );
        if verdict == Verdict::Allow && tool == "Bash" {
            assert!(
                !decision.read_only_shell,
                "a granted command runs like a settings allow rule (workspace-write), not read-only"
            );
        }
    }
}
