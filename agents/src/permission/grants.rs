//! Plan-scoped grants (DESIGN.md "Wave 2 → The web inbox"): the permission rules a plan says
//! it needs (`ExitPlanMode`'s `allowedPrompts`), what an approver grants of them, and the
//! grants the engine applies as allow rules for that agent until its plan's verification
//! report.
//!
//! The shape: Claude Code's `allowedPrompts` is a list of `{tool, prompt}`; muster reads
//! `prompt` as what the rule is about, so `{"tool": "Bash", "prompt": "cargo test"}` is the
//! rule `Bash(cargo test:*)` (the command and its arguments) and `{"tool": "Edit", "prompt":
//! "src/**"}` is `Edit(src/**)`. A plain string is taken as a rule as written
//! (`"Bash(cargo test:*)"`). Either way the request carries rule text, and everything after
//! is permission rules.
//!
//! A grant must say what it allows: a bare tool (`Bash`, `Edit(*)`) is refused, a Bash grant
//! names one plain command (no `;`, `&&`, pipes, redirections or substitutions) that is not
//! known-dangerous, and an MCP grant names one tool (`mcp__server__tool`).

use std::fmt;

use muster_config::PermissionMode;
use muster_config::rule::{PermissionRule, RuleSpecifier};
use muster_mailbox::message::DroppedGrant;
use muster_protocol::ToolName;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::shell::known_dangerous;
use crate::tools::ToolRegistry;

/// One entry of `allowedPrompts`: Claude Code's `{tool, prompt}` or a rule as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum AllowedPrompt {
    /// A permission rule as written: `Bash(cargo test:*)`, `Edit(src/**)`.
    Rule(String),
    /// Claude Code's shape: the tool and what it is used on (for `Bash`, the command prefix).
    ToolPrompt { tool: String, prompt: String },
}

impl AllowedPrompt {
    /// The rule text this entry stands for.
    pub fn rule_text(&self) -> String {
        match self {
            AllowedPrompt::Rule(rule) => rule.trim().to_owned(),
            AllowedPrompt::ToolPrompt { tool, prompt } => {
                let (tool, prompt) = (tool.trim(), prompt.trim());
                if tool == ToolName::Bash && !prompt.ends_with(":*") && !prompt.contains('*') {
                    format!("Bash({prompt}:*)")
                } else {
                    format!("{tool}({prompt})")
                }
            }
        }
    }
}

/// Why an `allowedPrompts` entry cannot be a grant; the text tells the model how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("allowedPrompts entry `{rule}`: {reason}")]
pub struct InvalidGrant {
    pub rule: String,
    pub reason: String,
}

/// Parses and checks one grant rule (see the module documentation for what is refused).
pub fn parse_grant(text: &str) -> Result<PermissionRule, InvalidGrant> {
    let invalid = |reason: String| InvalidGrant {
        rule: text.to_owned(),
        reason,
    };
    let rule: PermissionRule = text.parse().map_err(|e| invalid(format!("{e}")))?;
    match rule.specifier() {
        RuleSpecifier::AnyCall => {
            return Err(invalid(format!(
                "a grant must say what it allows, and `{}` alone allows every call; name it, \
                 as in `Bash(cargo test:*)` or `Edit(src/**)`",
                rule.tool()
            )));
        }
        RuleSpecifier::CommandPrefix(command) | RuleSpecifier::Command(command) => {
            if command.contains(['`', '$', '>', '<', '(', ')', '{', '}', ';', '&', '|', '\n']) {
                return Err(invalid(
                    "a Bash grant names one plain command (no `;`, `&&`, pipes, redirections \
                     or substitutions); list each command as its own entry"
                        .into(),
                ));
            }
            if let Some(danger) = known_dangerous(command) {
                return Err(invalid(format!(
                    "known-dangerous commands are never granted ({danger})"
                )));
            }
        }
        RuleSpecifier::Mcp(_) if text.contains('*') || text.matches("__").count() < 2 => {
            return Err(invalid(
                "an MCP grant names one tool, as in `mcp__server__tool`".into(),
            ));
        }
        _ => {}
    }
    Ok(rule)
}

/// Turns `allowedPrompts` into the rule texts the request carries (checked, without
/// duplicates, in order).
pub fn requested_rules(prompts: &[AllowedPrompt]) -> Result<Vec<String>, InvalidGrant> {
    let mut rules: Vec<String> = Vec::new();
    for prompt in prompts {
        let rule = parse_grant(&prompt.rule_text())?;
        let text = rule.as_str().to_owned();
        if !rules.contains(&text) {
            rules.push(text);
        }
    }
    Ok(rules)
}

/// The lowest mode that allows the rule's calls without any rule: read-only tools `default`,
/// file edits `acceptEdits`, everything else (commands, agents, MCP tools) only
/// `bypassPermissions`. An approver may grant a rule only up to its ceiling.
pub fn mode_needed(rule: &PermissionRule) -> PermissionMode {
    let tool = rule.tool();
    if ToolName::parse(tool).is_some_and(ToolName::edits_files) {
        return PermissionMode::AcceptEdits;
    }
    let read_only = ToolRegistry::standard()
        .get(tool)
        .is_some_and(|t| t.is_read_only());
    if read_only {
        PermissionMode::Default
    } else {
        PermissionMode::BypassPermissions
    }
}

/// What an approval grants of the requested rules, and what it leaves out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GrantSelection {
    pub granted: Vec<String>,
    pub dropped: Vec<DroppedGrant>,
}

/// Who answers a plan, for choosing its grants.
#[derive(Debug, Clone, Copy)]
pub enum Granter<'a> {
    /// A person: no ceiling; `chosen` (when given) is the subset to grant.
    Person { chosen: Option<&'a [String]> },
    /// The lead's model: its current mode is the ceiling; `chosen` as for a person.
    Lead {
        ceiling: PermissionMode,
        chosen: Option<&'a [String]>,
    },
    /// A policy: only what its `permissions.allow` covers (and no deny or ask rule names),
    /// up to its `max_mode`.
    Policy { policy: &'a muster_config::Policy },
}

/// A rule an approver chose that the plan did not ask for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{rule}` is not among the rules the plan asked for ({asked}); an approval can only drop \
     requested rules"
)]
pub struct NotRequested {
    pub rule: String,
    pub asked: String,
}

/// Chooses the grants of an approval from the `requested` rules.
pub fn select_grants(
    requested: &[String],
    granter: Granter<'_>,
) -> Result<GrantSelection, NotRequested> {
    let chosen = match granter {
        Granter::Person { chosen } | Granter::Lead { chosen, .. } => chosen,
        Granter::Policy { .. } => None,
    };
    if let Some(chosen) = chosen
        && let Some(rule) = chosen
            .iter()
            .find(|c| !requested.contains(&c.trim().to_owned()))
    {
        return Err(NotRequested {
            rule: rule.clone(),
            asked: if requested.is_empty() {
                "none".into()
            } else {
                requested.join(", ")
            },
        });
    }
    let mut selection = GrantSelection::default();
    for text in requested {
        match grant_or_drop(text, granter, chosen) {
            None => selection.granted.push(text.clone()),
            Some(reason) => selection.dropped.push(DroppedGrant {
                rule: text.clone(),
                reason,
            }),
        }
    }
    Ok(selection)
}

/// `None` to grant `text`, else why it is dropped.
fn grant_or_drop(text: &str, granter: Granter<'_>, chosen: Option<&[String]>) -> Option<String> {
    let rule = match parse_grant(text) {
        Ok(rule) => rule,
        Err(error) => return Some(error.reason),
    };
    if chosen.is_some_and(|chosen| !chosen.iter().any(|c| c.trim() == text)) {
        return Some("left out by the approver".into());
    }
    let needed = mode_needed(&rule);
    let ceiling = match granter {
        Granter::Person { .. } => None,
        Granter::Lead { ceiling, .. } => Some((ceiling, "the lead's own mode")),
        Granter::Policy { policy } => {
            let rules = &policy.permissions;
            if let Some(stop) = rules
                .deny
                .iter()
                .chain(&rules.ask)
                .find(|r| r.covers(&rule))
            {
                return Some(format!("the policy's rule `{}` stops it", stop.value));
            }
            if !rules.allow.iter().any(|r| r.covers(&rule)) {
                return Some("no rule of the policy's `permissions.allow` covers it".into());
            }
            Some((policy.max_mode, "the policy's max_mode"))
        }
    };
    match ceiling {
        Some((ceiling, what)) if needed > ceiling => Some(format!(
            "it needs {needed} mode, above the approver's ceiling {ceiling} ({what})"
        )),
        _ => None,
    }
}

/// The grants an agent holds: the rules of its approved plan, until that plan's verification
/// report.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanGrants {
    /// The approved plan request.
    pub request_id: String,
    /// Who approved it.
    pub approved_by: String,
    pub rules: Vec<PermissionRule>,
}

impl PlanGrants {
    /// The grants of `request_id` from the response's rule texts; a text that is not a valid
    /// grant is left out and named in the second list (never applied half-read).
    pub fn from_texts(
        request_id: &str,
        approved_by: &str,
        texts: &[String],
    ) -> (PlanGrants, Vec<InvalidGrant>) {
        let mut rules = Vec::new();
        let mut invalid = Vec::new();
        for text in texts {
            match parse_grant(text) {
                Ok(rule) => rules.push(rule),
                Err(error) => invalid.push(error),
            }
        }
        let grants = PlanGrants {
            request_id: request_id.to_owned(),
            approved_by: approved_by.to_owned(),
            rules,
        };
        (grants, invalid)
    }

    /// The rule texts.
    pub fn texts(&self) -> Vec<String> {
        self.rules.iter().map(|r| r.as_str().to_owned()).collect()
    }
}

impl fmt::Display for PlanGrants {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "plan {} (approved by {})",
            self.request_id, self.approved_by
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_prompts_become_rules_or_a_reason() {
        let rows: [(AllowedPrompt, Result<&str, &str>); 9] = [
            (
                AllowedPrompt::ToolPrompt {
                    tool: "Bash".into(),
                    prompt: "cargo test".into(),
                },
                Ok("Bash(cargo test:*)"),
            ),
            (
                AllowedPrompt::Rule("Bash(cargo build:*)".into()),
                Ok("Bash(cargo build:*)"),
            ),
            (
                AllowedPrompt::ToolPrompt {
                    tool: "Edit".into(),
                    prompt: "src/**".into(),
                },
                Ok("Edit(src/**)"),
            ),
            (
                AllowedPrompt::Rule("Bash".into()),
                Err("alone allows every call"),
            ),
            (
                AllowedPrompt::Rule("Edit(*)".into()),
                Err("alone allows every call"),
            ),
            (
                AllowedPrompt::Rule("Bash(cargo test && rm x:*)".into()),
                Err("one plain command"),
            ),
            (
                AllowedPrompt::ToolPrompt {
                    tool: "Bash".into(),
                    prompt: "rm -rf /".into(),
                },
                Err("known-dangerous"),
            ),
            (
                AllowedPrompt::Rule("Frobnicate(x)".into()),
                Err("unknown tool"),
            ),
            (
                AllowedPrompt::Rule("mcp__srv".into()),
                Err("names one tool"),
            ),
        ];
        for (prompt, expected) in rows {
            let got = requested_rules(std::slice::from_ref(&prompt));
            match (got, expected) {
                (Ok(rules), Ok(rule)) => assert_eq!(rules, vec![rule.to_owned()], "{prompt:?}"),
                (Err(error), Err(part)) => {
                    assert!(error.to_string().contains(part), "{prompt:?}: {error}")
                }
                (got, expected) => panic!("{prompt:?}: {got:?}, expected {expected:?}"),
            }
        }
    }

    #[test]
    fn the_mode_a_rule_needs() {
        for (rule, mode) in [
            ("Edit(src/**)", PermissionMode::AcceptEdits),
            ("Write(docs/*.md)", PermissionMode::AcceptEdits),
            ("Read(/etc/hosts)", PermissionMode::Default),
            ("Bash(cargo test:*)", PermissionMode::BypassPermissions),
        ] {
            let parsed = parse_grant(rule).unwrap();
            assert_eq!(mode_needed(&parsed), mode, "{rule}");
        }
    }

    #[test]
    fn approvers_drop_what_they_may_not_grant() {
        let requested = vec!["Bash(cargo test:*)".to_owned(), "Edit(src/**)".to_owned()];
        let person = select_grants(&requested, Granter::Person { chosen: None }).unwrap();
        assert_eq!(person.granted, requested);
        let only_edit = ["Edit(src/**)".to_owned()];
        let picked = select_grants(
            &requested,
            Granter::Person {
                chosen: Some(&only_edit),
            },
        )
        .unwrap();
        assert_eq!(picked.granted, vec!["Edit(src/**)"]);
        assert_eq!(picked.dropped[0].reason, "left out by the approver");
        let lead = select_grants(
            &requested,
            Granter::Lead {
                ceiling: PermissionMode::AcceptEdits,
                chosen: None,
            },
        )
        .unwrap();
        assert_eq!(lead.granted, vec!["Edit(src/**)"]);
        assert!(
            lead.dropped[0]
                .reason
                .contains("above the approver's ceiling acceptEdits")
        );
        let extra = ["Bash(make:*)".to_owned()];
        assert!(
            select_grants(
                &requested,
                Granter::Person {
                    chosen: Some(&extra)
                }
            )
            .is_err()
        );
    }
}
