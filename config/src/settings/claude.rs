//! Claude Code's settings files (`~/.claude/settings.json`, `.claude/settings.json`,
//! `.claude/settings.local.json`): their permission rules hold for every muster agent, so a
//! user's deny rule never silently does nothing.
//!
//! What narrows applies from every file: `deny` and `ask` rules. What widens (`allow` rules)
//! applies from files the user owns (`~/.claude/settings.json`, and
//! `.claude/settings.local.json` while git does not track it) and from the project's own files
//! only in a trusted project: the loader gates them (see [`crate::trust`]). Every other key
//! muster does not honour yet (`defaultMode`, …) is a warning, once per file, never silence.
//! Hooks and `disableAllHooks` are read by [`crate::hooks`].

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
pub fn read_claude_settings(
    path: &Path,
    text: &str,
    layer: Layer,
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
                .filter(|key| {
                    !matches!(
                        *key,
                        "permissions" | "$schema" | "hooks" | "disableAllHooks"
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    if !skipped.is_empty() {
        warnings.push(
            Diagnostic::new(format!(
                "muster reads only `permissions` (allow, ask, deny) and `hooks` from Claude Code's \
                 settings for now; not applied: {}",
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

    fn read(text: &str) -> (LayerValues, Vec<Diagnostic>) {
        read_claude_settings(Path::new("/p/.claude/settings.json"), text, Layer::Project).unwrap()
    }

    /// Allow rules are read; whether a repository's apply is the loader's trust gate.
    #[test]
    fn every_rule_is_read_and_unknown_keys_are_warnings() {
        let text = r#"{"permissions": {"deny": ["Read(./.env)", "Bash(curl:*)"],
            "ask": ["Bash(git push:*)"], "allow": ["Bash(rm:*)"]},
            "hooks": {"PreToolUse": []}, "env": {}}"#;
        let (values, warnings) = read(text);
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
                (RuleBehavior::Allow, "Bash(rm:*)"),
            ]
        );
        let said: Vec<String> = warnings.iter().map(ToString::to_string).collect();
        assert!(
            said.iter().any(|w| w.contains("not applied: env")),
            "{said:?}"
        );
    }

    #[test]
    fn a_tool_muster_lacks_is_a_warning_and_bad_json_an_error() {
        let (values, warnings) =
            read(r#"{"permissions": {"deny": ["WebFetch(domain:example.com)", "Edit(src/**)"]}}"#);
        assert_eq!(values.rules.len(), 1);
        assert!(
            warnings[0].to_string().contains("WebFetch"),
            "{}",
            warnings[0]
        );
        let error = read_claude_settings(Path::new("/p/s.json"), "{", Layer::User)
            .unwrap_err()
            .to_string();
        assert!(error.contains("not valid JSON"), "{error}");
    }
}
