//! Typed message bodies (DESIGN.md "The store and the mailbox contract"): the write side and
//! the read side of the mailbox. The `type` tag is stored as the message's kind; a kind this
//! version does not know is kept as raw JSON.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::kind::{Correlation, MessageKind};

/// The body of every message kind muster speaks, plus `Unknown` for kinds from a newer version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum MessageBody {
    Text {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        summary: Option<String>,
    },
    PlanApprovalRequest {
        request_id: String,
        plan_file: String,
        plan: String,
        /// Who may answer: `lead`, `human` or `policy:<path>`.
        responder: String,
        /// 1 for the first request of the agent's plan since its last approval, one more for
        /// each request after a rejection (DESIGN "Wave 2 → The web inbox"); a request stored
        /// without the field is revision 1.
        #[serde(default = "first_revision")]
        revision: u32,
        /// The request of the previous revision, whose plan this one revises.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        previous_request_id: Option<String>,
        /// The permission rules the plan needs (`ExitPlanMode`'s `allowedPrompts`, as rule
        /// text like `Bash(cargo test:*)`); an approval may grant them until the plan's
        /// verification report. A request stored without the field asks for none.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        allowed_prompts: Vec<String>,
    },
    PlanApprovalResponse {
        request_id: String,
        approved: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        feedback: Option<String>,
        /// The mode granted, after capping at the approver's ceiling.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<String>,
        /// Set when the grant was lowered: the mode that was asked for.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lowered_from: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        edited_plan: Option<String>,
        #[serde(default)]
        clear_context: bool,
        /// The policy rule that decided, for a policy's answer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rule: Option<String>,
        /// The requested rules this approval grants the agent until its plan's verification
        /// report (plan-scoped grants); a response stored without the field grants none.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        grants: Vec<String>,
        /// Requested rules the approval did not grant, each with why (above the approver's
        /// ceiling, not matched by a policy's `permissions.allow`, left out by the approver).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        dropped_grants: Vec<DroppedGrant>,
    },
    PermissionRequest {
        request_id: String,
        tool: String,
        input: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_use_id: Option<String>,
        reason: String,
        responder: String,
    },
    PermissionResponse {
        request_id: String,
        approved: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        feedback: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rule: Option<String>,
    },
    Question {
        request_id: String,
        question: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        options: Vec<String>,
        responder: String,
    },
    Answer {
        request_id: String,
        answer: String,
    },
    ShutdownRequest {
        request_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    ShutdownResponse {
        request_id: String,
        approve: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A teammate's branch, checked clean against the integration head, asking to be merged
    /// (worktree isolation).
    MergeRequest {
        request_id: String,
        /// The teammate whose branch it is.
        agent: String,
        branch: String,
        /// The teammate's checkpoint commit to merge.
        commit: String,
        /// The integration head it was checked against.
        onto: String,
        files: Vec<String>,
        diffstat: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        verification: Option<String>,
        responder: String,
        /// The merge gate's pass on the merged result (`command`, `head`, `exit`, `seconds`,
        /// `tail`), when the team file has `[merge] test`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tested: Option<Value>,
    },
    MergeResponse {
        request_id: String,
        approved: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        feedback: Option<String>,
        /// The policy rule that decided, for a policy's answer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rule: Option<String>,
    },
    TaskAssignment {
        task_id: i64,
        subject: String,
        description: String,
        assigned_by: String,
    },
    IdleNotification {
        reason: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        summary: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        completed_task: Option<i64>,
    },
    VerificationReport {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
        report: Value,
    },
    /// A kind this version does not know: kept whole and reported, never dropped.
    #[serde(skip)]
    Unknown {
        kind: String,
        raw: Value,
    },
}

/// A requested plan grant an approval left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DroppedGrant {
    pub rule: String,
    pub reason: String,
}

fn first_revision() -> u32 {
    1
}

impl MessageBody {
    /// A plan sent back for revision, with the reason: no mode, no grants.
    pub fn plan_rejected(request_id: String, feedback: String) -> MessageBody {
        MessageBody::PlanApprovalResponse {
            request_id,
            approved: false,
            feedback: Some(feedback),
            mode: None,
            lowered_from: None,
            edited_plan: None,
            clear_context: false,
            rule: None,
            grants: Vec::new(),
            dropped_grants: Vec::new(),
        }
    }

    /// The kind, the `type` tag.
    pub fn kind(&self) -> MessageKind {
        use MessageKind as K;
        match self {
            MessageBody::Text { .. } => K::Text,
            MessageBody::PlanApprovalRequest { .. } => K::PlanApprovalRequest,
            MessageBody::PlanApprovalResponse { .. } => K::PlanApprovalResponse,
            MessageBody::PermissionRequest { .. } => K::PermissionRequest,
            MessageBody::PermissionResponse { .. } => K::PermissionResponse,
            MessageBody::Question { .. } => K::Question,
            MessageBody::Answer { .. } => K::Answer,
            MessageBody::ShutdownRequest { .. } => K::ShutdownRequest,
            MessageBody::ShutdownResponse { .. } => K::ShutdownResponse,
            MessageBody::MergeRequest { .. } => K::MergeRequest,
            MessageBody::MergeResponse { .. } => K::MergeResponse,
            MessageBody::TaskAssignment { .. } => K::TaskAssignment,
            MessageBody::IdleNotification { .. } => K::IdleNotification,
            MessageBody::VerificationReport { .. } => K::VerificationReport,
            MessageBody::Unknown { kind, .. } => MessageKind::parse(kind),
        }
    }

    /// The request id this message opens or answers, if any.
    pub fn request_id(&self) -> Option<&str> {
        match self {
            MessageBody::PlanApprovalRequest { request_id, .. }
            | MessageBody::PlanApprovalResponse { request_id, .. }
            | MessageBody::PermissionRequest { request_id, .. }
            | MessageBody::PermissionResponse { request_id, .. }
            | MessageBody::Question { request_id, .. }
            | MessageBody::Answer { request_id, .. }
            | MessageBody::ShutdownRequest { request_id, .. }
            | MessageBody::ShutdownResponse { request_id, .. }
            | MessageBody::MergeRequest { request_id, .. }
            | MessageBody::MergeResponse { request_id, .. } => Some(request_id),
            MessageBody::VerificationReport { request_id, .. } => request_id.as_deref(),
            MessageBody::Unknown { raw, .. } => raw.get("request_id").and_then(Value::as_str),
            MessageBody::Text { .. }
            | MessageBody::TaskAssignment { .. }
            | MessageBody::IdleNotification { .. } => None,
        }
    }

    /// Who may answer a request; `None` for a shutdown request, which its recipient answers.
    pub fn responder(&self) -> Option<&str> {
        match self {
            MessageBody::PlanApprovalRequest { responder, .. }
            | MessageBody::PermissionRequest { responder, .. }
            | MessageBody::Question { responder, .. }
            | MessageBody::MergeRequest { responder, .. } => Some(responder),
            _ => None,
        }
    }

    /// The plan text of a plan approval request.
    pub fn plan(&self) -> Option<&str> {
        match self {
            MessageBody::PlanApprovalRequest { plan, .. } => Some(plan),
            _ => None,
        }
    }

    /// The plan file of a plan approval request.
    pub fn plan_file(&self) -> Option<&str> {
        match self {
            MessageBody::PlanApprovalRequest { plan_file, .. } => Some(plan_file),
            _ => None,
        }
    }

    /// Whether a response approves (`approve` for a shutdown response); `None` for a message
    /// that is no yes-or-no answer.
    pub fn approved(&self) -> Option<bool> {
        match self {
            MessageBody::PlanApprovalResponse { approved, .. }
            | MessageBody::PermissionResponse { approved, .. }
            | MessageBody::MergeResponse { approved, .. } => Some(*approved),
            MessageBody::ShutdownResponse { approve, .. } => Some(*approve),
            _ => None,
        }
    }

    /// The feedback a decision carries, if any.
    pub fn feedback(&self) -> Option<&str> {
        match self {
            MessageBody::PlanApprovalResponse { feedback, .. }
            | MessageBody::PermissionResponse { feedback, .. }
            | MessageBody::MergeResponse { feedback, .. } => feedback.as_deref(),
            _ => None,
        }
    }

    /// Who decided this answer, as a person reads it: its `sender`, except an answer of a
    /// plan reviewer hook (sent as `policy`, the roster entry every automated answer comes
    /// from), which is named by its rule: `plan reviewer hook NAME (FILE)`.
    pub fn decided_by(&self, sender: &str) -> String {
        match self.rule() {
            Some(rule)
                if sender == crate::Responder::POLICY
                    && rule.starts_with(crate::Responder::PLAN_REVIEWER_RULE) =>
            {
                rule.to_owned()
            }
            _ => sender.to_owned(),
        }
    }

    /// The policy rule that decided, for a policy's answer.
    pub fn rule(&self) -> Option<&str> {
        match self {
            MessageBody::PlanApprovalResponse { rule, .. }
            | MessageBody::PermissionResponse { rule, .. }
            | MessageBody::MergeResponse { rule, .. } => rule.as_deref(),
            _ => None,
        }
    }

    /// The text of a plain message.
    pub fn text(&self) -> Option<&str> {
        match self {
            MessageBody::Text { text, .. } => Some(text),
            _ => None,
        }
    }

    /// How this message takes part in request/response correlation.
    pub fn correlation(&self) -> Correlation {
        self.kind().correlation()
    }

    /// JSON stored in the `body` column: the whole tagged object.
    pub fn to_stored(&self) -> Result<Value, serde_json::Error> {
        match self {
            MessageBody::Unknown { raw, .. } => Ok(raw.clone()),
            known => serde_json::to_value(known),
        }
    }

    /// Reads a stored body; anything that does not parse as a known kind stays raw.
    pub fn from_stored(kind: &str, body: &Value) -> MessageBody {
        match serde_json::from_value::<MessageBody>(body.clone()) {
            Ok(typed) if typed.kind() == *kind => typed,
            _ => MessageBody::Unknown {
                kind: kind.to_owned(),
                raw: body.clone(),
            },
        }
    }

    /// Reads a stored body by its own `type` tag (a body kept without its kind beside it).
    pub fn from_tagged(body: &Value) -> MessageBody {
        let kind = body.get("type").and_then(Value::as_str).unwrap_or_default();
        MessageBody::from_stored(kind, body)
    }
}

/// Serde for a body kept as its stored JSON (`#[serde(with = "muster_protocol::body::stored")]`):
/// what a message's `body` has always looked like in JSON output.
pub mod stored {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use serde_json::Value;

    use super::MessageBody;

    pub fn serialize<S: Serializer>(body: &MessageBody, serializer: S) -> Result<S::Ok, S::Error> {
        body.to_stored()
            .map_err(serde::ser::Error::custom)?
            .serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<MessageBody, D::Error> {
        Ok(MessageBody::from_tagged(&Value::deserialize(deserializer)?))
    }
}

#[cfg(test)]
mod tests {

    /// Plan requests and responses stored before plan-scoped grants parse, asking for and
    /// granting nothing; new ones keep their rules through a round trip.
    #[test]
    fn plan_messages_without_grant_fields_still_parse() {
        let old_request = serde_json::json!({"type": "plan_approval_request",
            "request_id": "plan-a-1", "plan_file": "p.md", "plan": "x", "responder": "human"});
        let MessageBody::PlanApprovalRequest {
            allowed_prompts, ..
        } = MessageBody::from_stored("plan_approval_request", &old_request)
        else {
            panic!("an old request must parse");
        };
        assert!(allowed_prompts.is_empty());
        let old_response = serde_json::json!({"type": "plan_approval_response",
            "request_id": "plan-a-1", "approved": true});
        let MessageBody::PlanApprovalResponse {
            grants,
            dropped_grants,
            ..
        } = MessageBody::from_stored("plan_approval_response", &old_response)
        else {
            panic!("an old response must parse");
        };
        assert!(grants.is_empty() && dropped_grants.is_empty());
        let new = MessageBody::PlanApprovalResponse {
            request_id: "plan-a-1".into(),
            approved: true,
            feedback: None,
            mode: None,
            lowered_from: None,
            edited_plan: None,
            clear_context: false,
            rule: None,
            grants: vec!["Bash(cargo test:*)".into()],
            dropped_grants: vec![DroppedGrant {
                rule: "Edit(src/**)".into(),
                reason: "left out by the approver".into(),
            }],
        };
        let stored = serde_json::to_value(&new).unwrap();
        assert_eq!(
            MessageBody::from_stored("plan_approval_response", &stored),
            new
        );
        // Without grants, the fields are not written: old readers see what they knew.
        let plain = serde_json::to_value(MessageBody::from_stored(
            "plan_approval_response",
            &old_response,
        ))
        .unwrap();
        assert!(plain.get("grants").is_none() && plain.get("dropped_grants").is_none());
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn known_kinds_round_trip_and_unknown_stays_raw() {
        let body = MessageBody::Question {
            request_id: "question-alice-1".into(),
            question: "Which port?".into(),
            options: vec![],
            responder: "lead".into(),
        };
        let stored = body.to_stored().unwrap();
        assert_eq!(stored["type"], "question");
        assert_eq!(MessageBody::from_stored("question", &stored), body);

        let raw = json!({"type": "mode_set_request", "mode": "plan", "request_id": "x-1"});
        let read = MessageBody::from_stored("mode_set_request", &raw);
        assert_eq!(
            read,
            MessageBody::Unknown {
                kind: "mode_set_request".into(),
                raw: raw.clone()
            }
        );
        assert_eq!(read.request_id(), Some("x-1"));
        assert_eq!(read.to_stored().unwrap(), raw);
    }
}
