//! Attribution: what an agent did after its plan was approved, read from its own records.

use muster_protocol::ToolName;
use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::paths::Root;

/// The `type` of the record the runtime writes around a non-read-only Bash call.
pub const BASH_EFFECTS: &str = "bash_effects";

/// What a non-read-only Bash call changed: the runtime hashes the workspace before and after
/// the command ([`super::WorkspaceSnapshot`]) and records this with the call's `tool_call`
/// (same commit, just before it). Stored as `{"type": "bash_effects", …}` in the transcript.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BashEffects {
    /// The Bash call's `tool_use_id`.
    pub tool_use_id: String,
    /// The command as run.
    pub command: String,
    /// Its exit code (`None`: killed, timed out, unknown).
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// Files created, modified or deleted, relative to the workspace root, `/`-separated,
    /// sorted ([`super::SnapshotDiff::changed_paths`]). Empty when `effects_unknown` is set.
    #[serde(default)]
    pub changed: Vec<String>,
    /// Why the files it changed are not known (a snapshot failed or the workspace is too
    /// large to hash); `None` when `changed` is the whole truth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effects_unknown: Option<String>,
}

impl BashEffects {
    /// The record's JSON body, tagged `"type": "bash_effects"`.
    pub fn to_record_body(&self) -> Value {
        let mut body = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Value::Object(fields) = &mut body {
            fields.insert("type".to_owned(), Value::String(BASH_EFFECTS.to_owned()));
        }
        body
    }

    /// Reads a record body; `None` when it is not a well-formed `bash_effects` record.
    pub fn from_record_body(body: &Value) -> Option<BashEffects> {
        if body.get("type").and_then(Value::as_str) != Some(BASH_EFFECTS) {
            return None;
        }
        serde_json::from_value(body.clone()).ok()
    }
}

/// One tool call that ran (decision `allow` or `ask`), as attribution sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LoggedCall {
    /// Write, Edit, MultiEdit, NotebookEdit on `path` (`None`: its input was not found).
    FileEdit {
        tool_use_id: String,
        tool: String,
        path: Option<String>,
        is_error: bool,
    },
    /// A Bash command, with what it changed when the runtime recorded `bash_effects`.
    Command {
        tool_use_id: String,
        command: String,
        exit_code: Option<i32>,
        changed: Vec<String>,
        /// Its `bash_effects` record says the changes are unknown, and why.
        effects_unknown: Option<String>,
    },
}

/// The agent's tool calls after the approval, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolLog {
    pub(crate) calls: Vec<LoggedCall>,
}

/// The approved plan found in the records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApprovedPlan {
    pub path: String,
    pub content: String,
    pub request_id: Option<String>,
    /// Index of the approving record among the records.
    pub index: usize,
}

/// The newest `plan_snapshot` with `state: "approved"`.
pub(crate) fn approved_plan(records: &[&Value]) -> Option<ApprovedPlan> {
    records.iter().enumerate().rev().find_map(|(index, body)| {
        if body.get("type").and_then(Value::as_str) != Some("plan_snapshot")
            || body.get("state").and_then(Value::as_str) != Some("approved")
        {
            return None;
        }
        Some(ApprovedPlan {
            path: text_field(body, "path").unwrap_or_default(),
            content: text_field(body, "content")?,
            request_id: text_field(body, "request_id"),
            index,
        })
    })
}

fn text_field(body: &Value, field: &str) -> Option<String> {
    body.get(field).and_then(Value::as_str).map(str::to_owned)
}

const FILE_TOOLS: &[(ToolName, &str)] = &[
    (ToolName::Write, "file_path"),
    (ToolName::Edit, "file_path"),
    (ToolName::MultiEdit, "file_path"),
    (ToolName::NotebookEdit, "notebook_path"),
];

impl ToolLog {
    /// The calls among `records` (the transcript bodies from the approval on) that ran. Tool
    /// inputs are looked up in `inputs_from` (every `message` record's `tool_use` blocks;
    /// pass the whole transcript, a tool_use may precede the approval). Records of unknown
    /// shape are skipped. Paths are made relative to `root`.
    pub fn from_records(after_approval: &[&Value], inputs_from: &[&Value], root: &Path) -> ToolLog {
        let root = Root::new(root);
        let inputs = tool_inputs(inputs_from);
        let effects: BTreeMap<String, BashEffects> = after_approval
            .iter()
            .filter_map(|body| BashEffects::from_record_body(body))
            .map(|effects| (effects.tool_use_id.clone(), effects))
            .collect();
        let mut calls = Vec::new();
        for body in after_approval {
            if body.get("type").and_then(Value::as_str) != Some("tool_call") {
                continue;
            }
            let (Some(tool_use_id), Some(tool)) =
                (text_field(body, "tool_use_id"), text_field(body, "tool"))
            else {
                continue;
            };
            let decision = text_field(body, "decision").unwrap_or_default();
            if !matches!(decision.as_str(), "allow" | "ask") {
                continue;
            }
            let is_error = body
                .get("is_error")
                .and_then(Value::as_bool)
                .unwrap_or(true);
            let input = inputs.get(&tool_use_id);
            if let Some((_, field)) = FILE_TOOLS.iter().find(|(name, _)| tool == *name) {
                let path = input
                    .and_then(|input| input.get(*field))
                    .and_then(Value::as_str)
                    .and_then(|path| root.relative(path));
                calls.push(LoggedCall::FileEdit {
                    tool_use_id,
                    tool,
                    path,
                    is_error,
                });
            } else if tool == ToolName::Bash {
                let recorded = effects.get(&tool_use_id);
                let command = input
                    .and_then(|input| input.get("command"))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .or_else(|| recorded.map(|effects| effects.command.clone()));
                let Some(command) = command else { continue };
                let exit_code = match recorded {
                    Some(effects) => effects.exit_code,
                    None => exit_code_in(&text_field(body, "content").unwrap_or_default()),
                };
                let changed = recorded
                    .map(|effects| {
                        effects
                            .changed
                            .iter()
                            .filter_map(|path| root.relative(path))
                            .collect()
                    })
                    .unwrap_or_default();
                let effects_unknown = recorded.and_then(|effects| effects.effects_unknown.clone());
                calls.push(LoggedCall::Command {
                    tool_use_id,
                    command,
                    exit_code,
                    changed,
                    effects_unknown,
                });
            }
        }
        ToolLog { calls }
    }
}

/// `tool_use` blocks of assistant messages: id → input.
fn tool_inputs(records: &[&Value]) -> BTreeMap<String, Value> {
    let mut inputs = BTreeMap::new();
    for body in records {
        if body.get("type").and_then(Value::as_str) != Some("message") {
            continue;
        }
        let Some(blocks) = body
            .get("message")
            .and_then(|message| message.get("content"))
            .and_then(Value::as_array)
        else {
            continue;
        };
        for block in blocks {
            if block.get("type").and_then(Value::as_str) != Some("tool_use") {
                continue;
            }
            if let (Some(id), Some(input)) =
                (block.get("id").and_then(Value::as_str), block.get("input"))
            {
                inputs.insert(id.to_owned(), input.clone());
            }
        }
    }
    inputs
}

/// The exit code in Bash's status line (`[exit code N]`), the last one in `content`.
fn exit_code_in(content: &str) -> Option<i32> {
    content
        .rmatch_indices("[exit code ")
        .find_map(|(start, marker)| {
            let rest = content.get(start + marker.len()..)?;
            let end = rest.find(']')?;
            rest.get(..end)?.trim().parse().ok()
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn table_of_exit_codes_in_bash_output() {
        let cases: &[(&str, Option<i32>)] = &[
            ("ok\n[exit code 0]", Some(0)),
            ("[exit code 1] in text\nthen\n[exit code 101]", Some(101)),
            ("[killed by signal 9]", None),
            ("[exit code x]", None),
            ("", None),
        ];
        for (content, expected) in cases {
            assert_eq!(exit_code_in(content), *expected, "{content}");
        }
    }

    #[test]
    fn bash_effects_round_trip_through_a_record_body() {
        let effects = BashEffects {
            tool_use_id: "toolu_1".to_owned(),
            command: "sed -i s/a/b/ src/a.rs".to_owned(),
            exit_code: Some(0),
            changed: vec!["src/a.rs".to_owned()],
            effects_unknown: None,
        };
        let body = effects.to_record_body();
        assert_eq!(body["type"], json!("bash_effects"));
        assert!(body.get("effects_unknown").is_none());
        assert_eq!(BashEffects::from_record_body(&body), Some(effects));
        let unknown = BashEffects {
            changed: Vec::new(),
            effects_unknown: Some("workspace too large".to_owned()),
            ..BashEffects::from_record_body(&body).unwrap()
        };
        assert_eq!(
            BashEffects::from_record_body(&unknown.to_record_body()),
            Some(unknown)
        );
        assert_eq!(
            BashEffects::from_record_body(&json!({"type": "tool_call"})),
            None
        );
    }
}
