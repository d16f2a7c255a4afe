//! Answering a request: which request a response answers, and the decision rules — only the
//! request's responder answers, only the first answer counts.

use crate::error::{StoreError, StoreResult};
use crate::message::{Correlation, MessageKind, correlation_of, responder_member};
use crate::types::{NewMessage, NewResponse, RequestRecord, ResponseRecord};

/// What a response answers: the request kind it may answer and the request's id. Refused
/// when the body is not a response, or names no request.
pub(crate) fn answered(answer: &NewResponse) -> StoreResult<(MessageKind, &str)> {
    let kind = answer.body.kind().to_string();
    let Correlation::Response { answers } = correlation_of(&kind) else {
        return Err(StoreError::MismatchedResponse {
            request_id: answer.body.request_id().unwrap_or_default().into(),
            request_kind: "request".into(),
            response_kind: kind,
        });
    };
    let request_id = answer
        .body
        .request_id()
        .ok_or(StoreError::MissingRequestId { kind })?;
    Ok((answers, request_id))
}

/// Whether `answer` may decide `request`: the kinds match, it comes from the request's
/// responder, and no answer came first.
pub(crate) fn check_answer(
    request: &RequestRecord,
    answer: &NewResponse,
    answers: &MessageKind,
) -> StoreResult<()> {
    if &request.kind != answers {
        return Err(StoreError::MismatchedResponse {
            request_id: request.request_id.clone(),
            request_kind: request.kind.to_string(),
            response_kind: answer.body.kind().to_string(),
        });
    }
    if answer.sender != responder_member(&request.responder) {
        return Err(StoreError::WrongResponder {
            request_id: request.request_id.clone(),
            sender: answer.sender.clone(),
            responder: request.responder.clone(),
        });
    }
    match &request.response {
        Some(decided) => Err(already_decided(&request.request_id, decided)),
        None => Ok(()),
    }
}

/// The refusal of an answer that came after `decided`.
pub(crate) fn already_decided(request_id: &str, decided: &ResponseRecord) -> StoreError {
    StoreError::AlreadyDecided {
        request_id: request_id.into(),
        decided_by: decided.responder.clone(),
        decided_at_ms: decided.decided_at,
    }
}

/// The response as a message to the requester.
pub(crate) fn response_message(answer: &NewResponse, request: &RequestRecord) -> NewMessage {
    NewMessage {
        run_id: answer.run_id.clone(),
        sender: answer.sender.clone(),
        recipient: request.requester.clone(),
        body: answer.body.clone(),
        idempotency_key: answer.idempotency_key.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::MessageBody;
    use serde_json::json;

    fn answer(sender: &str, kind: &str, fields: serde_json::Value) -> NewResponse {
        let mut value = json!({ "type": kind });
        if let (Some(object), Some(more)) = (value.as_object_mut(), fields.as_object()) {
            object.extend(more.clone());
        }
        NewResponse {
            run_id: "r".into(),
            sender: sender.into(),
            body: MessageBody::from_stored(kind, &value),
            idempotency_key: None,
        }
    }

    fn request(responder: &str, decided_by: Option<&str>) -> RequestRecord {
        RequestRecord {
            run_id: "r".into(),
            request_id: "q1".into(),
            kind: MessageKind::PlanApprovalRequest,
            requester: "dev".into(),
            recipient: "lead".into(),
            responder: responder.into(),
            message_key: "m".into(),
            body: MessageBody::Unknown {
                kind: "plan_approval_request".into(),
                raw: serde_json::Value::Null,
            },
            created_at: 1,
            response: decided_by.map(|who| ResponseRecord {
                responder: who.into(),
                kind: MessageKind::PlanApprovalResponse,
                message_key: "m2".into(),
                body: MessageBody::Unknown {
                    kind: "plan_approval_response".into(),
                    raw: serde_json::Value::Null,
                },
                decided_at: 5,
            }),
        }
    }

    #[test]
    fn a_response_names_the_request_it_answers() {
        let plan = json!({ "request_id": "q1", "approved": true });
        let table: [(NewResponse, Result<&str, &str>); 3] = [
            (answer("lead", "plan_approval_response", plan), Ok("q1")),
            (
                answer("lead", "text", json!({ "text": "hi" })),
                Err("MismatchedResponse"),
            ),
            (
                answer(
                    "lead",
                    "plan_approval_response",
                    json!({ "approved": true }),
                ),
                Err("MissingRequestId"),
            ),
        ];
        for (answer, expected) in table {
            match (answered(&answer), expected) {
                (Ok((kind, id)), Ok(want)) => {
                    assert_eq!((kind, id), (MessageKind::PlanApprovalRequest, want))
                }
                (Err(error), Err(name)) => assert!(format!("{error:?}").starts_with(name)),
                (got, want) => panic!("{answer:?}: got {got:?}, expected {want:?}"),
            }
        }
    }

    #[test]
    fn only_the_responder_answers_and_only_the_first_answer_counts() {
        let plan = json!({ "request_id": "q1", "approved": true });
        let yes = |who: &str| answer(who, "plan_approval_response", plan.clone());
        let table: [(RequestRecord, NewResponse, MessageKind, Option<&str>); 6] = [
            (
                request("lead", None),
                yes("lead"),
                MessageKind::PlanApprovalRequest,
                None,
            ),
            (
                request("human", None),
                yes("human"),
                MessageKind::PlanApprovalRequest,
                None,
            ),
            (
                request("policy:p.toml", None),
                yes("policy"),
                MessageKind::PlanApprovalRequest,
                None,
            ),
            (
                request("lead", None),
                yes("dev"),
                MessageKind::PlanApprovalRequest,
                Some("WrongResponder"),
            ),
            (
                request("lead", Some("lead")),
                yes("lead"),
                MessageKind::PlanApprovalRequest,
                Some("AlreadyDecided"),
            ),
            (
                request("lead", None),
                yes("lead"),
                MessageKind::Question,
                Some("MismatchedResponse"),
            ),
        ];
        for (request, answer, answers, refusal) in table {
            let outcome = check_answer(&request, &answer, &answers);
            match refusal {
                None => assert!(outcome.is_ok(), "{:?}: {outcome:?}", request.responder),
                Some(name) => assert!(
                    format!("{outcome:?}").starts_with(&format!("Err({name}")),
                    "{:?} from {}: {outcome:?}",
                    request.responder,
                    answer.sender
                ),
            }
        }
    }
}
