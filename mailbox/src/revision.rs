//! Plan revisions (DESIGN "Wave 2 → The web inbox"): a `plan_approval_request` carries its
//! `revision` — 1 for the first request of an agent's plan since its last approval, one more
//! after each rejection — and the id of the previous revision's request, so a reviewer sees
//! what changed. Both are derived from the requests already stored, so a request sent again
//! after a crash (the same request id) gets the same numbers.

use muster_protocol::{MessageBody, MessageKind, RequestId};

use crate::types::RequestRecord;

/// Where a plan request stands among its agent's plan requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanRevision {
    pub revision: u32,
    pub previous_request_id: Option<String>,
}

/// The revision of `request_id` (a plan request of `agent`, stored or about to be sent),
/// given the run's stored requests.
pub fn plan_revision(requests: &[RequestRecord], agent: &str, request_id: &str) -> PlanRevision {
    let number = request_number(request_id);
    let previous = requests
        .iter()
        .filter(|r| r.kind == MessageKind::PlanApprovalRequest && r.requester == agent)
        .filter(|r| request_number(&r.request_id) < number)
        .max_by_key(|r| request_number(&r.request_id));
    match previous {
        Some(previous) if !approved(previous) => PlanRevision {
            revision: stored_revision(previous).saturating_add(1),
            previous_request_id: Some(previous.request_id.clone()),
        },
        _ => PlanRevision {
            revision: 1,
            previous_request_id: None,
        },
    }
}

/// The revision a stored request carries (1 when it has none: an older version sent it).
/// After this many plans of one teammate in a row rejected because its plan reviewer hook
/// itself failed (not on the plan's merit), its next plan goes to a person.
pub const REVIEWER_FAILURES_BEFORE_A_PERSON: usize = 3;

/// How many of `agent`'s plan requests before `request_id`, newest first and in a row, were
/// rejected because the plan reviewer hook failed (its answer's rule ends with
/// [`muster_protocol::Responder::PLAN_REVIEWER_FAILED`]). Read from the committed answers, so
/// every process (the lead's, a worker's, a resume) counts the same.
pub fn reviewer_failures_before(
    requests: &[RequestRecord],
    agent: &str,
    request_id: &str,
) -> usize {
    let number = request_number(request_id);
    let mut earlier: Vec<&RequestRecord> = requests
        .iter()
        .filter(|r| r.kind == MessageKind::PlanApprovalRequest && r.requester == agent)
        .filter(|r| request_number(&r.request_id) < number)
        .collect();
    earlier.sort_by_key(|r| std::cmp::Reverse(request_number(&r.request_id)));
    earlier
        .into_iter()
        .take_while(|r| {
            r.response.as_ref().is_some_and(|response| {
                response.responder == muster_protocol::Responder::POLICY
                    && response.body.rule().is_some_and(|rule| {
                        rule.starts_with(muster_protocol::Responder::PLAN_REVIEWER_RULE)
                            && rule.ends_with(muster_protocol::Responder::PLAN_REVIEWER_FAILED)
                    })
            })
        })
        .count()
}

pub fn stored_revision(request: &RequestRecord) -> u32 {
    match &request.body {
        MessageBody::PlanApprovalRequest { revision, .. } => *revision,
        _ => 1,
    }
}

/// The previous revision's request id a stored request names.
pub fn stored_previous(request: &RequestRecord) -> Option<&str> {
    match &request.body {
        MessageBody::PlanApprovalRequest {
            previous_request_id,
            ..
        } => previous_request_id.as_deref(),
        _ => None,
    }
}

/// A request that has a response and was not approved (rejected), or none yet, is revised by
/// the next one; an approval starts the count again.
fn approved(request: &RequestRecord) -> bool {
    request
        .response
        .as_ref()
        .and_then(|r| r.body.approved())
        .unwrap_or(false)
}

/// The `n` of `plan-{agent}-{n}`; ids without one sort first.
fn request_number(request_id: &str) -> i64 {
    RequestId::parse(request_id).map_or(0, |id| id.number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ResponseRecord;
    use serde_json::json;

    fn request(
        id: &str,
        agent: &str,
        revision: Option<u32>,
        approved: Option<bool>,
    ) -> RequestRecord {
        let mut body = json!({"type": "plan_approval_request", "request_id": id,
            "plan_file": "p.md", "plan": "x", "responder": "human"});
        if let Some(revision) = revision {
            body["revision"] = json!(revision);
        }
        let body = MessageBody::from_tagged(&body);
        RequestRecord {
            run_id: "r1".into(),
            request_id: id.into(),
            kind: "plan_approval_request".into(),
            requester: agent.into(),
            recipient: "lead".into(),
            responder: "human".into(),
            message_key: id.into(),
            body,
            created_at: 0,
            response: approved.map(|approved| ResponseRecord {
                responder: "human".into(),
                kind: "plan_approval_response".into(),
                message_key: format!("{id}-r"),
                body: MessageBody::from_tagged(&json!({"type": "plan_approval_response",
                    "request_id": id, "approved": approved})),
                decided_at: 0,
            }),
        }
    }

    #[test]
    fn revisions_count_rejections_since_the_last_approval() {
        let stored = vec![
            request("plan-alice-1", "alice", Some(1), Some(false)),
            request("plan-bob-1", "bob", Some(1), Some(false)),
            request("plan-alice-2", "alice", Some(2), Some(false)),
            request("plan-alice-3", "alice", Some(3), Some(true)),
            request("plan-alice-4", "alice", Some(1), Some(false)),
            request("plan-carol-1", "carol", None, Some(false)),
        ];
        let cases = [
            ("alice", "plan-alice-1", 1, None),
            ("alice", "plan-alice-2", 2, Some("plan-alice-1")),
            ("alice", "plan-alice-3", 3, Some("plan-alice-2")),
            ("alice", "plan-alice-4", 1, None),
            ("alice", "plan-alice-5", 2, Some("plan-alice-4")),
            ("bob", "plan-bob-2", 2, Some("plan-bob-1")),
            // A request stored without the field counts as revision 1.
            ("carol", "plan-carol-2", 2, Some("plan-carol-1")),
            ("dave", "plan-dave-1", 1, None),
        ];
        for (agent, id, revision, previous) in cases {
            assert_eq!(
                plan_revision(&stored, agent, id),
                PlanRevision {
                    revision,
                    previous_request_id: previous.map(str::to_owned)
                },
                "{id}"
            );
        }
    }
}
