//! `--permission-prompt-tool stdio`: what the run asks its person goes to the program as the
//! SDK's `can_use_tool` control request, and its answer comes back as the person's — a plan
//! through the one decision path (the runtime commits it, so the first answer wins), a
//! question's answer, a permission ask's verdict. The shapes are Claude Code's: a plan is
//! `ExitPlanMode` with `{plan, planFilePath}`, a question `AskUserQuestion` with its answers
//! in `updatedInput.answers`, a permission ask the tool itself. A teammate's merge for the
//! person has no Claude Code shape: it is muster's own `ReviewMerge`, with the diff it adds.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use muster_agents::runtime::{SessionRules, Terminal, TerminalPlanDecision};
use muster_config::{Layer, Origin, PermissionMode, PermissionRule, RuleBehavior, Sourced};
use muster_mailbox::MessageBody;
use muster_protocol::ToolName;
use serde_json::{Value, json};

use super::Shared;
use crate::human_decision::Decision;

/// The program on the other end of stdin/stdout, as the run's person.
pub(crate) struct ProgramAsks {
    pub shared: Arc<Shared>,
    /// `disableBypassPermissionsMode = "disable"`: a plan is never approved into it.
    pub bypass_disabled: bool,
    /// Where the rules of `updatedPermissions` go: the session's, in memory.
    pub session_rules: Arc<SessionRules>,
}

/// The program's answer to one `can_use_tool`.
#[derive(Debug, PartialEq)]
enum Verdict {
    Allow {
        updated_input: Option<Value>,
        permissions: Vec<Value>,
    },
    Deny {
        message: Option<String>,
    },
}

fn verdict(answer: Option<Value>) -> Verdict {
    let Some(answer) = answer else {
        return Verdict::Deny { message: None };
    };
    match answer["behavior"].as_str() {
        Some("allow") => Verdict::Allow {
            updated_input: answer.get("updatedInput").cloned(),
            permissions: answer["updatedPermissions"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
        },
        _ => Verdict::Deny {
            message: answer["message"]
                .as_str()
                .map(str::to_owned)
                .filter(|text| !text.trim().is_empty()),
        },
    }
}

/// The mode a plan's approval grants: the last `setMode` of `updatedPermissions`, lowered to
/// `acceptEdits` when `bypassPermissions` is disabled; `None` keeps the runtime's default.
fn granted_mode(permissions: &[Value], bypass_disabled: bool) -> Option<PermissionMode> {
    let named = permissions
        .iter()
        .rev()
        .find(|entry| entry["type"] == "setMode")?;
    let text = named["mode"].as_str()?;
    let asked = match text.parse::<PermissionMode>() {
        Ok(mode) => mode,
        Err(error) => {
            eprintln!("muster claude: warning: setMode {text:?} is not a mode ({error}); ignored");
            return None;
        }
    };
    if asked == PermissionMode::BypassPermissions && bypass_disabled {
        eprintln!(
            "muster claude: warning: bypassPermissions is disabled by \
             disableBypassPermissionsMode; the plan is approved into acceptEdits"
        );
        return Some(PermissionMode::AcceptEdits);
    }
    Some(asked)
}

/// An `updatedPermissions` rule (`{toolName, ruleContent}`) in the settings' syntax.
fn rule_text(rule: &Value) -> Option<String> {
    let tool = rule["toolName"].as_str()?;
    Some(match rule["ruleContent"].as_str() {
        Some(content) if !content.is_empty() => format!("{tool}({content})"),
        _ => tool.to_owned(),
    })
}

/// What one answer's `updatedPermissions` change: rule changes go to the session's rules,
/// whatever their `destination` (no settings file is ever written); `setMode` is read by a
/// plan's approval (`plan`); the rest is not applied. One warning on stderr says what was
/// not as asked.
fn apply_permissions(session: &SessionRules, permissions: &[Value], plan: bool) {
    let mut notes = Vec::new();
    let mut files = BTreeSet::new();
    for entry in permissions {
        let kind = entry["type"].as_str().unwrap_or_default();
        if kind == "setMode" && plan {
            continue;
        }
        if !matches!(kind, "addRules" | "replaceRules" | "removeRules") {
            notes.push(match kind {
                "setMode" => "setMode is read only when a plan is approved (a mode for the next \
                              prompt is set_permission_mode)"
                    .to_owned(),
                other => format!("{other:?} is not applied"),
            });
            continue;
        }
        let behavior = match entry["behavior"].as_str() {
            Some("allow") => RuleBehavior::Allow,
            Some("ask") => RuleBehavior::Ask,
            Some("deny") => RuleBehavior::Deny,
            other => {
                notes.push(format!("{kind} with behavior {other:?} is not applied"));
                continue;
            }
        };
        let texts: Vec<String> = entry["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(rule_text)
            .collect();
        let destination = entry["destination"].as_str().unwrap_or("session");
        if !matches!(destination, "session" | "cliArg") {
            files.insert(destination.to_owned());
        }
        if kind == "removeRules" {
            session.remove(behavior, &texts);
            continue;
        }
        let origin = Origin {
            layer: Layer::Cli,
            source: "can_use_tool updatedPermissions (session)".into(),
            position: None,
        };
        let mut rules = Vec::new();
        for text in texts {
            match text.parse::<PermissionRule>() {
                Ok(rule) => rules.push(Sourced::new(rule, origin.clone())),
                Err(error) => notes.push(format!("rule {text:?} is not applied: {error}")),
            }
        }
        match kind {
            "addRules" => session.add(behavior, rules),
            _ => session.replace(behavior, rules),
        }
    }
    if !files.is_empty() {
        let files: Vec<String> = files.into_iter().collect();
        notes.insert(
            0,
            format!(
                "rules aimed at {} write no settings file: they apply to this session only \
                 (put lasting rules in the settings files)",
                files.join(", ")
            ),
        );
    }
    if !notes.is_empty() {
        eprintln!(
            "muster claude: warning: updatedPermissions: {}",
            notes.join("; ")
        );
    }
}

impl ProgramAsks {
    fn can_use_tool(&self, tool: &str, input: Value, agent: &str, reason: Option<&str>) -> Verdict {
        let mut request = json!({
            "subtype": "can_use_tool",
            "tool_name": tool,
            "input": input,
            "agent_id": agent,
            "permission_suggestions": [],
        });
        if let (Some(reason), Some(fields)) = (reason, request.as_object_mut()) {
            fields.insert("decision_reason".into(), json!(reason));
        }
        verdict(self.shared.ask(request))
    }
}

impl ProgramAsks {
    /// A plan as `ExitPlanMode`, with the id of its stored request: the program can match
    /// it with `muster approve` and the web inbox, which may decide it first.
    pub(crate) fn plan(
        &self,
        agent: &str,
        plan_file: &Path,
        plan: &str,
        request_id: &str,
    ) -> TerminalPlanDecision {
        let input = json!({
            "plan": plan,
            "planFilePath": plan_file.display().to_string(),
            "request_id": request_id,
        });
        match self.can_use_tool(ToolName::ExitPlanMode.as_str(), input, agent, None) {
            Verdict::Allow { permissions, .. } => {
                apply_permissions(&self.session_rules, &permissions, true);
                TerminalPlanDecision::Approve {
                    mode: granted_mode(&permissions, self.bypass_disabled),
                    feedback: None,
                    clear_context: false,
                }
            }
            Verdict::Deny { message } => TerminalPlanDecision::Reject {
                feedback: message.unwrap_or_else(|| "rejected by the program".to_owned()),
            },
        }
    }
}

impl ProgramAsks {
    /// A teammate's merge as `ReviewMerge`: `input` is `{request_id, agent, branch, files,
    /// diffstat, diff, verification, tested}` (`diff`, what the merge adds, is null when git
    /// cannot say). `allow` approves it; `deny` rejects it with its `message` as the feedback.
    pub(crate) fn review_merge(
        &self,
        request_id: &str,
        merge: &MessageBody,
        diff: Option<String>,
    ) -> Option<Decision> {
        let MessageBody::MergeRequest {
            agent,
            branch,
            files,
            diffstat,
            verification,
            tested,
            ..
        } = merge
        else {
            return None;
        };
        let input = json!({
            "request_id": request_id,
            "agent": agent,
            "branch": branch,
            "files": files,
            "diffstat": diffstat,
            "diff": diff,
            "verification": verification,
            "tested": tested,
        });
        Some(
            match self.can_use_tool(ToolName::ReviewMerge.as_str(), input, agent, None) {
                Verdict::Allow { permissions, .. } => {
                    apply_permissions(&self.session_rules, &permissions, false);
                    Decision::approve(None)
                }
                Verdict::Deny { message } => Decision::Reject {
                    feedback: message.unwrap_or_else(|| "rejected by the program".to_owned()),
                },
            },
        )
    }
}

impl Terminal for ProgramAsks {
    fn decide_plan(
        &self,
        request_id: &str,
        agent: &str,
        plan_file: &Path,
        plan: &str,
    ) -> TerminalPlanDecision {
        self.plan(agent, plan_file, plan, request_id)
    }

    fn answer_question(&self, agent: &str, question: &str, options: &[String]) -> Option<String> {
        let choices: Vec<Value> = options
            .iter()
            .map(|label| json!({"label": label, "description": ""}))
            .collect();
        let input = json!({"questions": [{
            "question": question,
            "header": agent,
            "options": choices,
            "multiSelect": false,
        }]});
        match self.can_use_tool(ToolName::AskUserQuestion.as_str(), input, agent, None) {
            Verdict::Allow {
                updated_input: Some(updated),
                ..
            } => match &updated["answers"][question] {
                Value::String(answer) => Some(answer.clone()),
                Value::Null => None,
                other => Some(other.to_string()),
            },
            _ => None,
        }
    }

    fn allow_call(&self, agent: &str, tool: &str, input: &Value, reason: &str) -> bool {
        match self.can_use_tool(tool, input.clone(), agent, Some(reason)) {
            Verdict::Allow {
                updated_input,
                permissions,
            } => {
                apply_permissions(&self.session_rules, &permissions, false);
                match updated_input {
                    Some(updated) if &updated != input => {
                        // The engine decided on the input it was asked about; a changed one
                        // would run unchecked, so the call is refused instead.
                        eprintln!(
                            "muster claude: warning: the program allowed {tool} with a changed \
                             input; muster does not run a changed input unchecked, so the call \
                             was denied"
                        );
                        false
                    }
                    _ => true,
                }
            }
            Verdict::Deny { .. } => false,
        }
    }

    fn decided_elsewhere(&self, request_id: &str, decided_by: &str) {
        eprintln!(
            "muster claude: {request_id} was decided first by {decided_by} elsewhere; the \
             program's answer changed nothing"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each `setMode` list, and the mode a plan's approval grants.
    #[test]
    fn a_set_mode_entry_grants_its_mode_within_the_ceiling() {
        let rows = [
            (json!([]), false, None),
            (
                json!([{"type": "setMode", "mode": "acceptEdits", "destination": "session"}]),
                false,
                Some(PermissionMode::AcceptEdits),
            ),
            (
                json!([{"type": "setMode", "mode": "bypassPermissions"}]),
                true,
                Some(PermissionMode::AcceptEdits),
            ),
            (
                json!([{"type": "setMode", "mode": "bypassPermissions"}]),
                false,
                Some(PermissionMode::BypassPermissions),
            ),
            (
                json!([{"type": "setMode", "mode": "sideways"}]),
                false,
                None,
            ),
            (json!([{"type": "addRules", "rules": []}]), false, None),
        ];
        for (entries, disabled, mode) in rows {
            let entries = entries.as_array().cloned().unwrap_or_default();
            assert_eq!(granted_mode(&entries, disabled), mode, "{entries:?}");
        }
    }

    #[test]
    fn an_answer_reads_as_a_verdict() {
        assert_eq!(verdict(None), Verdict::Deny { message: None });
        assert_eq!(
            verdict(Some(json!({"behavior": "deny", "message": "split it"}))),
            Verdict::Deny {
                message: Some("split it".into())
            }
        );
        assert_eq!(
            verdict(Some(json!({"behavior": "allow", "updatedInput": {"a": 1}}))),
            Verdict::Allow {
                updated_input: Some(json!({"a": 1})),
                permissions: Vec::new()
            }
        );
    }
}
