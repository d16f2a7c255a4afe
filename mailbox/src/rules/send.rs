//! Sending: what a message's row holds, its delivery class, and whether it may be sent.

use crate::error::{StoreError, StoreResult};
use crate::message::{Correlation, MessageBody, MessageKind, correlation_of};
use crate::types::{DeliveryState, MemberKind, Message, NewMessage, Priority, UnixMillis};

/// Delivery class: shutdown requests first, then mail from the lead, then the rest.
pub(crate) fn priority_of(kind: &str, sender: MemberKind) -> Priority {
    if kind == MessageKind::ShutdownRequest {
        Priority::Shutdown
    } else if sender == MemberKind::Lead {
        Priority::FromLead
    } else {
        Priority::Normal
    }
}

/// The body as stored (its JSON text), refused when over `limit` bytes.
pub(crate) fn stored_body(body: &MessageBody, limit: usize) -> StoreResult<String> {
    let value = body.to_stored().map_err(|e| StoreError::CorruptRow {
        table: "messages",
        detail: format!("body does not serialise: {e}"),
    })?;
    let text = value.to_string();
    if text.len() > limit {
        return Err(StoreError::BodyTooLarge {
            size: text.len(),
            limit,
        });
    }
    Ok(text)
}

/// A message's row, decided before it is written.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MessageRow {
    pub(crate) key: String,
    pub(crate) kind: String,
    pub(crate) priority: Priority,
    pub(crate) request_id: Option<String>,
    pub(crate) body: String,
    pub(crate) created_at: UnixMillis,
    /// Whether the message opens a request (a row of `requests` beside it).
    pub(crate) opens_request: bool,
}

/// The row `message` is stored as, from a sender of `sender` kind: refused when a request or
/// response carries no request id, or the body is over `limit`.
pub(crate) fn message_row(
    message: &NewMessage,
    sender: MemberKind,
    limit: usize,
    key: String,
    now: UnixMillis,
) -> StoreResult<MessageRow> {
    let kind = message.body.kind().to_string();
    let body = stored_body(&message.body, limit)?;
    let request_id = message.body.request_id().map(str::to_owned);
    let correlation = correlation_of(&kind);
    if correlation != Correlation::None && request_id.is_none() {
        return Err(StoreError::MissingRequestId { kind });
    }
    Ok(MessageRow {
        key,
        priority: priority_of(&kind, sender),
        kind,
        request_id,
        body,
        created_at: now,
        opens_request: correlation == Correlation::Request,
    })
}

/// The message as stored, once its row has its `seq`.
pub(crate) fn sent(message: &NewMessage, row: MessageRow, seq: i64) -> Message {
    Message {
        key: row.key,
        seq,
        run_id: message.run_id.clone(),
        sender: message.sender.clone(),
        recipient: message.recipient.clone(),
        kind: message.body.kind(),
        priority: row.priority,
        request_id: row.request_id,
        idempotency_key: message.idempotency_key.clone(),
        body: message.body.clone(),
        state: DeliveryState::Pending,
        created_at: row.created_at,
        leased_at: None,
        acked_at: None,
    }
}

/// Who answers a request: the agent its body names, else (a shutdown request) the agent it
/// is sent to.
pub(crate) fn responder_of(message: &NewMessage) -> &str {
    message.body.responder().unwrap_or(&message.recipient)
}

/// Whether `message` may go in a bulk send: plain mail only; requests, responses and keyed
/// messages are correlated and deduplicated one by one.
pub(crate) fn check_bulk(message: &NewMessage) -> StoreResult<()> {
    let kind = message.body.kind().to_string();
    if message.idempotency_key.is_some() || correlation_of(&kind) != Correlation::None {
        return Err(StoreError::InvalidId {
            what: "bulk message",
            value: kind,
            rule: "send requests, responses and keyed messages one by one",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(kind: &str, extra: serde_json::Value) -> MessageBody {
        let mut value = json!({ "type": kind });
        if let (Some(object), Some(more)) = (value.as_object_mut(), extra.as_object()) {
            object.extend(more.clone());
        }
        MessageBody::from_stored(kind, &value)
    }

    fn message(body: MessageBody, key: Option<&str>) -> NewMessage {
        NewMessage {
            run_id: "r".into(),
            sender: "a".into(),
            recipient: "b".into(),
            body,
            idempotency_key: key.map(str::to_owned),
        }
    }

    #[test]
    fn priority_ranks_shutdown_then_the_lead_then_the_rest() {
        let table = [
            ("shutdown_request", MemberKind::Teammate, Priority::Shutdown),
            ("shutdown_request", MemberKind::Lead, Priority::Shutdown),
            ("text", MemberKind::Lead, Priority::FromLead),
            (
                "plan_approval_request",
                MemberKind::Lead,
                Priority::FromLead,
            ),
            ("text", MemberKind::Teammate, Priority::Normal),
            ("text", MemberKind::Human, Priority::Normal),
            ("text", MemberKind::Policy, Priority::Normal),
        ];
        for (kind, sender, expected) in table {
            assert_eq!(
                priority_of(kind, sender),
                expected,
                "{kind} from {sender:?}"
            );
        }
    }

    #[test]
    fn message_rows_are_refused_or_built_by_kind() {
        let text = body("text", json!({ "text": "hi" }));
        let request = body(
            "plan_approval_request",
            json!({ "request_id": "q1", "plan": "p", "plan_file": "f", "responder": "lead" }),
        );
        let response = body(
            "plan_approval_response",
            json!({ "request_id": "q1", "approved": true }),
        );
        let unnamed = body("plan_approval_response", json!({ "approved": true }));
        // (body, limit, Ok(opens_request) or Err(what the error names))
        let table: [(MessageBody, usize, Result<bool, &str>); 5] = [
            (unnamed, 1 << 20, Err("MissingRequestId")),
            (text.clone(), 1 << 20, Ok(false)),
            (request, 1 << 20, Ok(true)),
            (response, 1 << 20, Ok(false)),
            (text, 4, Err("BodyTooLarge")),
        ];
        for (body, limit, expected) in table {
            let kind = body.kind().to_string();
            let row = message_row(
                &message(body, None),
                MemberKind::Teammate,
                limit,
                "k".into(),
                7,
            );
            match (row, expected) {
                (Ok(row), Ok(opens)) => {
                    assert_eq!(row.opens_request, opens, "{kind}");
                    assert_eq!((row.key.as_str(), row.created_at), ("k", 7));
                }
                (Err(error), Err(name)) => {
                    assert!(format!("{error:?}").starts_with(name), "{kind}: {error:?}")
                }
                (row, expected) => panic!("{kind}: got {row:?}, expected {expected:?}"),
            }
        }
    }

    #[test]
    fn bulk_sends_take_plain_unkeyed_mail_only() {
        let text = body("text", json!({ "text": "hi" }));
        let question = body(
            "question",
            json!({ "request_id": "q", "question": "?", "responder": "lead" }),
        );
        let table = [
            (message(text.clone(), None), true),
            (message(text, Some("a:1")), false),
            (message(question, None), false),
        ];
        for (message, allowed) in table {
            assert_eq!(check_bulk(&message).is_ok(), allowed, "{message:?}");
        }
    }
}
