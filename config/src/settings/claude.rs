//! Claude Code's settings files (`~/.claude/settings.json`, `.claude/settings.json`,
//! `.claude/settings.local.json`): their permission rules hold for every muster agent, so a
//! user's deny rule never silently does nothing.
//!
//! What narrows applies from every file: `deny` and `ask` rules. What widens applies only from
//! files the user owns: `allow` rules from `~/.claude/settings.json`, and from
//! `.claude/settings.local.json` while git does not track it; a repository's own allow rules
//! are skipped with a warning that says where to put them instead. Every other key muster does
//! not honour yet (hooks, `defaultMode`, …) is a warning, once per file, never silence.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::layers::LayerValues;
use crate::diagnostic::{Diagnostic, Position};
use crate::origin::{Layer, Origin, Sourced};
use crate::project::ProjectRoot;
use crate::rule::{PermissionRule, RuleBehavior, RuleParseError};

/// Claude Code's settings files, in its precedence from lowest: user, project, local.
pub fn claude_settings_files(root: &ProjectRoot, home: Option<&Path>) -> Vec<(Layer, PathBuf)> {
    let mut files = Vec::new();
    if let Some(home) = home {
        files.push((Layer::User, home.join(".claude").join("settings.json")));
    }
    let claude = root.path().join(".claude");
    files.push((Layer::Project, claude.join("settings.json")));
    files.push((Layer::ProjectLocal, claude.join("settings.local.json")));
    files
}

/// The permission rules of one Claude Code settings file, with what was skipped as warnings.
/// `user_owned`: the file's allow rules are the user's (not a repository's).
pub fn read_claude_settings(
    path: &Path,
    text: &str,
    layer: Layer,
    user_owned: bool,
) -> Result<(LayerValues, Vec<Diagnostic>), Diagnostic> {
    let label = path.display().to_string();
    let json: Value = serde_json::from_str(text).map_err(|error| {
        Diagnostic::new(format!(
            "not valid JSON ({error}); muster reads its permission rules, so a deny rule here \
             would be lost: fix the file or move it away"
        ))
        .in_source(&label)
    })?;
    let mut values = LayerValues::default();
    let mut warnings = Vec::new();
    let skipped: Vec<&str> = json
        .as_object()
        .map(|object| {
            object
                .keys()
                .map(String::as_str)
                .filter(|key| !matches!(*key, "permissions" | "$schema"))
                .collect()
        })
        .unwrap_or_default();
    if !skipped.is_empty() {
        warnings.push(
            Diagnostic::new(format!(
                "muster reads only `permissions` (allow, ask, deny) from Claude Code's settings \
                 for now; not applied: {}",
                skipped.join(", ")
            ))
            .in_source(&label),
        );
    }
    let permissions = json.get("permissions");
    for (key, behavior) in [
        ("deny", RuleBehavior::Deny),
        ("ask", RuleBehavior::Ask),
        ("allow", RuleBehavior::Allow),
    ] {
        let Some(list) = permissions.and_then(|p| p.get(key)) else {
            continue;
        };
        let Some(list) = list.as_array() else {
            return Err(Diagnostic::new(format!(
                "`permissions.{key}` must be an array of rule strings"
            ))
            .in_source(&label));
        };
        let texts: Vec<&str> = list.iter().filter_map(Value::as_str).collect();
        if behavior == RuleBehavior::Allow && !user_owned {
            if !texts.is_empty() {
                warnings.push(
                    Diagnostic::new(format!(
                        "{} allow rule(s) not applied: a repository's own allow rules would \
                         widen what agents may do; put the ones you want in \
                         ~/.claude/settings.json or an untracked .claude/settings.local.json",
                        texts.len()
                    ))
                    .in_source(&label),
                );
            }
            continue;
        }
        for rule_text in texts {
            let origin = Origin {
                layer,
                source: label.clone(),
                position: text
                    .find(&format!("\"{rule_text}\""))
                    .map(|offset| Position::of_offset(text, offset)),
            };
            match rule_text.parse::<PermissionRule>() {
                Ok(rule) => values.rules.push((behavior, Sourced::new(rule, origin))),
                // A tool muster lacks (`WebFetch(domain:…)`): nothing of muster's to match.
                Err(error @ RuleParseError::UnknownTool { .. }) => warnings.push(
                    Diagnostic::new(format!("`{rule_text}` is not applied: {error}"))
                        .in_source(&label)
                        .at(origin.position),
                ),
                Err(error) => {
                    return Err(Diagnostic::new(format!("`{rule_text}`: {error}"))
                        .in_source(&label)
                        .at(origin.position));
                }
            }
        }
    }
    Ok((values, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str, user_owned: bool) -> (LayerValues, Vec<Diagnostic>) {
        read_claude_settings(
            Path::new("/p/.claude/settings.json"),
            text,
            Layer::Project,
            user_owned,
        )
        .unwrap()
    }

    #[test]
    fn deny_and_ask_apply_and_a_repositorys_allow_rules_do_not() {
        let text = r#"{"permissions": {"deny": ["Read(./.env)", "Bash(curl:*)"],
            "ask": ["Bash(git push:*)"], "allow": ["Bash(rm:*)"]},
            "hooks": {"PreToolUse": []}}"#;
        let (values, warnings) = read(text, false);
        let rules: Vec<(RuleBehavior, &str)> = values
            .rules
            .iter()
            .map(|(behavior, rule)| (*behavior, rule.value.as_str()))
            .collect();
        assert_eq!(
            rules,
            [
                (RuleBehavior::Deny, "Read(./.env)"),
                (RuleBehavior::Deny, "Bash(curl:*)"),
                (RuleBehavior::Ask, "Bash(git push:*)"),
            ]
        );
        let said: Vec<String> = warnings.iter().map(ToString::to_string).collect();
        assert!(
            said.iter().any(|w| w.contains("not applied: hooks")),
            "{said:?}"
        );
        assert!(
            said.iter()
                .any(|w| w.contains("1 allow rule(s) not applied")),
            "{said:?}"
        );
        let (values, _) = read(text, true);
        assert_eq!(values.rules.len(), 4, "the user's own allow rules apply");
    }

    #[test]
    fn a_tool_muster_lacks_is_a_warning_and_bad_json_an_error() {
        let (values, warnings) = read(
            r#"{"permissions": {"deny": ["WebFetch(domain:example.com)", "Edit(src/**)"]}}"#,
            false,
        );
        assert_eq!(values.rules.len(), 1);
        assert!(
            warnings[0].to_string().contains("WebFetch"),
            "{}",
            warnings[0]
        );
        let error = read_claude_settings(Path::new("/p/s.json"), "{", Layer::User, true)
            .unwrap_err()
            .to_string();
        assert!(error.contains("not valid JSON"), "{error}");
    }
}
