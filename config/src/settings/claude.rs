//! Claude Code's settings files (`~/.claude/settings.json`, `.claude/settings.json`,
//! `.claude/settings.local.json`): their permission rules hold for every muster agent, so a
//! user's deny rule never silently does nothing.
//!
//! What narrows applies from every file: `deny` and `ask` rules. What widens (`allow` rules)
//! applies from files the user owns (`~/.claude/settings.json`, and
//! `.claude/settings.local.json` while git does not track it) and from the project's own files
//! only in a trusted project: the loader gates them (see [`crate::trust`]), as it gates
//! `defaultMode` above `default` and `additionalDirectories`. `disableBypassPermissionsMode`
//! narrows, from any file. Hooks and `disableAllHooks` are read by [`crate::hooks`]. Every
//! other key muster does not honour (`env`, …) is a warning, once per file, never silence.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::layers::LayerValues;
use super::schema::SettingValue;
use crate::diagnostic::{Diagnostic, Position};
use crate::mode::PermissionMode;
use crate::origin::{Layer, Origin, Sourced};
use crate::project::ProjectRoot;
use crate::rule::{PermissionRule, RuleBase, RuleBehavior, RuleParseError};

/// The top-level keys muster applies (`disableBypassPermissionsMode` may also sit under
/// `permissions`); every other key is a warning, once per file. `hooks`, `disableAllHooks`
/// and muster's own `planReviewers` are read by [`crate::hooks`].
const HONOURED_KEYS: &[&str] = &[
    "permissions",
    "$schema",
    "disableBypassPermissionsMode",
    "hooks",
    "disableAllHooks",
    crate::hooks::PLAN_REVIEWERS_KEY,
    crate::hooks::GUARD_FAILURES_KEY,
];

/// The keys of `permissions` muster applies.
const HONOURED_PERMISSION_KEYS: &[&str] = &[
    "allow",
    "ask",
    "deny",
    "defaultMode",
    "additionalDirectories",
    "disableBypassPermissionsMode",
];

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
    base: &RuleBase,
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
    let mut skipped: Vec<String> = json
        .as_object()
        .map(|object| {
            object
                .keys()
                .filter(|key| !HONOURED_KEYS.contains(&key.as_str()))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let permissions = json.get("permissions");
    if let Some(object) = permissions.and_then(Value::as_object) {
        skipped.extend(
            object
                .keys()
                .filter(|key| !HONOURED_PERMISSION_KEYS.contains(&key.as_str()))
                .map(|key| format!("permissions.{key}")),
        );
    }
    if !skipped.is_empty() {
        warnings.push(
            Diagnostic::new(format!(
                "muster does not apply these keys of Claude Code's settings: {}",
                skipped.join(", ")
            ))
            .in_source(&label),
        );
    }
    let origin_of = |key: &str| Origin {
        layer,
        source: label.clone(),
        position: text
            .find(&format!("\"{key}\""))
            .map(|offset| Position::of_offset(text, offset)),
    };
    let mut leaf = |path: &[&str], value: SettingValue, key: &str| {
        let path = path.iter().map(|part| (*part).to_owned()).collect();
        values.leaves.push((path, value, origin_of(key)));
    };
    let setting = |key: &str| {
        permissions
            .and_then(|p| p.get(key))
            .or_else(|| json.get(key))
    };
    if let Some(mode) = setting("defaultMode") {
        let mode = mode
            .as_str()
            .and_then(|text| text.parse::<PermissionMode>().ok())
            .ok_or_else(|| {
                Diagnostic::new(format!(
                    "`permissions.defaultMode` must be one of {}, found {mode}",
                    PermissionMode::ALL.map(PermissionMode::as_str).join(", ")
                ))
                .in_source(&label)
            })?;
        leaf(
            &["permission_mode"],
            SettingValue::Text(mode.as_str().to_owned()),
            "defaultMode",
        );
    }
    if let Some(list) = setting("additionalDirectories") {
        let directories = list
            .as_array()
            .and_then(|items| items.iter().map(Value::as_str).collect::<Option<Vec<_>>>())
            .ok_or_else(|| {
                Diagnostic::new("`permissions.additionalDirectories` must be an array of paths")
                    .in_source(&label)
            })?;
        leaf(
            &["permissions", "additional_directories"],
            SettingValue::List(directories.into_iter().map(str::to_owned).collect()),
            "additionalDirectories",
        );
    }
    if let Some(disable) = setting("disableBypassPermissionsMode") {
        if disable.as_str() != Some("disable") {
            return Err(Diagnostic::new(format!(
                "`disableBypassPermissionsMode` must be \"disable\" (or absent), found {disable}"
            ))
            .in_source(&label));
        }
        leaf(
            &["permissions", "disable_bypass_permissions_mode"],
            SettingValue::Text("disable".to_owned()),
            "disableBypassPermissionsMode",
        );
    }
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
            match PermissionRule::parse_in(rule_text, base) {
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
        read_claude_settings(
            Path::new("/p/.claude/settings.json"),
            text,
            Layer::Project,
            &RuleBase::ProjectRoot,
        )
        .unwrap()
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
            said.iter()
                .any(|w| w.contains("does not apply these keys of Claude Code's settings: env")),
            "{said:?}"
        );
    }

    /// `defaultMode`, `additionalDirectories` and `disableBypassPermissionsMode` become
    /// muster's keys (the loader gates the first two); what muster does not apply is named in
    /// one warning per file; bad values are errors that say what was expected.
    #[test]
    fn modes_directories_and_the_bypass_switch_are_read() {
        let (values, warnings) = read(
            r#"{"permissions": {"defaultMode": "acceptEdits",
                "additionalDirectories": ["../shared", "~/notes"],
                "disableBypassPermissionsMode": "disable", "weird": 1},
                "env": {"A": "1"}, "hooks": {}}"#,
        );
        let leaves: Vec<(String, serde_json::Value)> = values
            .leaves()
            .map(|(key, value, _)| (key, value.to_json()))
            .collect();
        assert_eq!(
            leaves,
            [
                (
                    "permission_mode".to_owned(),
                    serde_json::json!("acceptEdits")
                ),
                (
                    "permissions.additional_directories".to_owned(),
                    serde_json::json!(["../shared", "~/notes"])
                ),
                (
                    "permissions.disable_bypass_permissions_mode".to_owned(),
                    serde_json::json!("disable")
                ),
            ]
        );
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        let said = warnings[0].to_string();
        for key in ["env", "permissions.weird"] {
            assert!(said.contains(key), "{said}");
        }
        assert!(
            !said.contains("defaultMode") && !said.contains("hooks"),
            "{said}"
        );
        for (bad, expected) in [
            (
                r#"{"permissions": {"defaultMode": "yolo"}}"#,
                "must be one of",
            ),
            (
                r#"{"disableBypassPermissionsMode": true}"#,
                "must be \"disable\"",
            ),
            (
                r#"{"permissions": {"additionalDirectories": "x"}}"#,
                "array of paths",
            ),
        ] {
            let error = read_claude_settings(
                Path::new("/p/.claude/settings.json"),
                bad,
                Layer::Project,
                &RuleBase::ProjectRoot,
            )
            .unwrap_err()
            .to_string();
            assert!(error.contains(expected), "{bad}: {error}");
        }
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
        let error = read_claude_settings(
            Path::new("/p/s.json"),
            "{",
            Layer::User,
            &RuleBase::ProjectRoot,
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("not valid JSON"), "{error}");
    }
}
