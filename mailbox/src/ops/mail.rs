//! Messages, requests and responses: each operation once for both backends (see [`super`]).

use std::collections::HashMap;

use uuid::Uuid;

use super::Tx;
use super::runs::{require_run_exists, roster, sender_and_recipient};
use crate::clock::now_millis;
use crate::error::{StoreError, StoreResult};
use crate::message::MessageKind;
use crate::rows::{self, MESSAGE_COLUMNS};
use crate::rules;
use crate::types::*;
use crate::wake::Wake;

/// "The next message for X": the query delivery runs (priority class, then commit order
/// within the run), exported so a test can check its plan.
pub const DELIVERY_QUERY: &str = "SELECT seq FROM messages WHERE run_id = ?1 AND recipient = ?2 \
    AND state = 0 ORDER BY priority, seq LIMIT 1";

/// Whether any mail is pending for a recipient: the look a lease makes first, where a backend
/// can look without its write transaction (false lets the lease skip it).
pub(crate) const PENDING_FOR: &str = "SELECT EXISTS (SELECT 1 FROM messages \
    WHERE run_id = ?1 AND recipient = ?2 AND state = 0)";

async fn message_where(
    tx: &impl Tx,
    clause: &str,
    args: &[&dyn super::Arg],
) -> StoreResult<Option<Message>> {
    let sql = format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE {clause}");
    tx.query_opt(&sql, args, rows::message).await
}

pub(crate) async fn message_by_key(tx: &impl Tx, key: &str) -> StoreResult<Option<Message>> {
    message_where(tx, "key = ?1", &[&key]).await
}

/// The message already sent under an idempotency key: a repeat returns it.
async fn by_idempotency_key(
    tx: &impl Tx,
    run_id: &str,
    key: Option<&str>,
) -> StoreResult<Option<Message>> {
    match key {
        Some(key) => {
            message_where(tx, "run_id = ?1 AND idempotency_key = ?2", &[&run_id, &key]).await
        }
        None => Ok(None),
    }
}

async fn refuse_recipient(tx: &impl Tx, run_id: &str, recipient: &str) -> StoreError {
    let members = roster(tx, run_id).await.unwrap_or_default();
    rules::roster::unknown_recipient(run_id, recipient, &members)
}

/// Inserts a message's row (and its request's, when it opens one); the caller has checked
/// sender and recipient.
async fn insert(
    tx: &impl Tx,
    message: &NewMessage,
    row: rules::send::MessageRow,
) -> StoreResult<Message> {
    let seq = tx
        .query_one(
            "INSERT INTO messages (key, run_id, sender, recipient, kind, priority, request_id, \
             idempotency_key, body, state, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 0, ?10) \
             RETURNING seq",
            &[
                &row.key,
                &message.run_id,
                &message.sender,
                &message.recipient,
                &row.kind,
                &(row.priority as i64),
                &row.request_id,
                &message.idempotency_key,
                &row.body,
                &row.created_at,
            ],
            |r| r.get::<i64>("messages", 0),
        )
        .await?;
    if row.opens_request
        && let Some(request_id) = &row.request_id
    {
        open_request(tx, message, &row, request_id).await?;
    }
    Ok(rules::send::sent(message, row, seq))
}

/// Sends a message after every check; the operation's transaction (or SAVEPOINT) undoes it
/// if a later step fails.
pub(crate) async fn send(
    tx: &impl Tx,
    message: &NewMessage,
    wakes: &mut Vec<Wake>,
) -> StoreResult<Message> {
    if let Some(original) =
        by_idempotency_key(tx, &message.run_id, message.idempotency_key.as_deref()).await?
    {
        return Ok(original);
    }
    let agents = [message.sender.as_str(), message.recipient.as_str()];
    let [sender, recipient] = sender_and_recipient(tx, &message.run_id, agents).await?;
    // A member's run exists (the roster's foreign key): the run is looked up only to say
    // which of the two is unknown.
    let Some(sender) = sender else {
        require_run_exists(tx, &message.run_id).await?;
        return Err(StoreError::UnknownSender {
            run: message.run_id.clone(),
            sender: message.sender.clone(),
        });
    };
    if recipient.is_none() {
        return Err(refuse_recipient(tx, &message.run_id, &message.recipient).await);
    }
    let key = Uuid::now_v7().to_string();
    let row = rules::send::message_row(message, sender, tx.max_body_bytes(), key, now_millis())?;
    let sent = insert(tx, message, row).await?;
    wakes.push(Wake {
        run_id: message.run_id.clone(),
        recipient: message.recipient.clone(),
    });
    Ok(sent)
}

/// Sends many plain messages in one operation, checking each distinct sender and recipient
/// once: for broadcasts and for prefilling benchmarks.
pub(crate) async fn send_many(
    tx: &impl Tx,
    messages: &[NewMessage],
    wakes: &mut Vec<Wake>,
) -> StoreResult<usize> {
    let mut kinds: HashMap<(String, [String; 2]), [Option<MemberKind>; 2]> = HashMap::new();
    let now = now_millis();
    for message in messages {
        rules::send::check_bulk(message)?;
        let pair = (
            message.run_id.clone(),
            [message.sender.clone(), message.recipient.clone()],
        );
        let [sender, recipient] = match kinds.get(&pair) {
            Some(found) => *found,
            None => {
                let agents = [message.sender.as_str(), message.recipient.as_str()];
                let found = sender_and_recipient(tx, &message.run_id, agents).await?;
                *kinds.entry(pair).or_insert(found)
            }
        };
        let sender = sender.ok_or_else(|| StoreError::UnknownSender {
            run: message.run_id.clone(),
            sender: message.sender.clone(),
        })?;
        if recipient.is_none() {
            return Err(refuse_recipient(tx, &message.run_id, &message.recipient).await);
        }
        let key = Uuid::now_v7().to_string();
        let row = rules::send::message_row(message, sender, tx.max_body_bytes(), key, now)?;
        insert(tx, message, row).await?;
        let wake = Wake {
            run_id: message.run_id.clone(),
            recipient: message.recipient.clone(),
        };
        if !wakes.contains(&wake) {
            wakes.push(wake);
        }
    }
    Ok(messages.len())
}

async fn open_request(
    tx: &impl Tx,
    message: &NewMessage,
    row: &rules::send::MessageRow,
    request_id: &str,
) -> StoreResult<()> {
    let inserted = tx
        .execute(
            "INSERT INTO requests (run_id, request_id, kind, requester, recipient, responder, message_key, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT DO NOTHING",
            &[
                &message.run_id,
                &request_id,
                &row.kind,
                &message.sender,
                &message.recipient,
                &rules::send::responder_of(message),
                &row.key,
                &row.created_at,
            ],
        )
        .await?;
    if inserted == 0 {
        return Err(StoreError::DuplicateRequest {
            run: message.run_id.clone(),
            request_id: request_id.to_owned(),
        });
    }
    Ok(())
}

/// Leases the next pending message for `recipient` in priority and commit order.
pub(crate) async fn lease_next(
    tx: &impl Tx,
    run_id: &str,
    recipient: &str,
    epoch: i64,
    filter: &MessageFilter,
) -> StoreResult<Option<Message>> {
    let now = now_millis();
    match filter {
        MessageFilter::Any => {
            let sql = format!(
                "UPDATE messages SET state = 1, lease_epoch = ?3, leased_at = ?4 \
                 WHERE seq = ({DELIVERY_QUERY}) RETURNING {MESSAGE_COLUMNS}"
            );
            tx.query_opt(&sql, &[&run_id, &recipient, &epoch, &now], rows::message)
                .await
        }
        MessageFilter::RequestId(request_id) => {
            let sql = format!(
                "UPDATE messages SET state = 1, lease_epoch = ?3, leased_at = ?4 WHERE seq = ( \
                   SELECT seq FROM messages WHERE run_id = ?1 AND request_id = ?5 AND recipient = ?2 \
                   AND state = 0 ORDER BY seq LIMIT 1) RETURNING {MESSAGE_COLUMNS}"
            );
            let args: [&dyn super::Arg; 5] = [&run_id, &recipient, &epoch, &now, request_id];
            tx.query_opt(&sql, &args, rows::message).await
        }
    }
}

/// Leases up to `max` pending messages for `recipient`, in delivery order.
pub(crate) async fn lease_batch(
    tx: &impl Tx,
    run_id: &str,
    recipient: &str,
    epoch: i64,
    max: usize,
) -> StoreResult<Vec<Message>> {
    let mut batch = Vec::new();
    while batch.len() < max {
        match lease_next(tx, run_id, recipient, epoch, &MessageFilter::Any).await? {
            Some(message) => batch.push(message),
            None => break,
        }
    }
    Ok(batch)
}

/// Who acknowledges: the process that owns the run by its epoch, or a process running an
/// agent under a work item's fence (a teammate placed on a worker, a batch line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Acker {
    /// Acks only mail still leased: a newer epoch voided this process's leases, and with
    /// them its right to acknowledge.
    EpochOwner,
    /// Acks mail still leased or whose lease a newer epoch voided (pending again): the held
    /// fence, checked in the same transaction, proves no other process runs the agent, so a
    /// resume of the run's lead (which opens an epoch for its own agents) does not cost a
    /// placed teammate the mail it is working on.
    FenceHolder,
}

impl Acker {
    /// The acker of a store that is, or is not, fenced by a work item.
    pub(crate) fn of_store(fenced: bool) -> Acker {
        if fenced {
            Acker::FenceHolder
        } else {
            Acker::EpochOwner
        }
    }

    fn statement(self) -> &'static str {
        match self {
            Acker::EpochOwner => {
                "UPDATE messages SET state = 2, acked_at = ?3 WHERE key = ?1 AND run_id = ?2 AND state = 1"
            }
            Acker::FenceHolder => {
                "UPDATE messages SET state = 2, acked_at = ?3 \
                 WHERE key = ?1 AND run_id = ?2 AND state IN (0, 1)"
            }
        }
    }
}

pub(crate) async fn ack(
    tx: &impl Tx,
    run_id: &str,
    keys: &[String],
    acker: Acker,
) -> StoreResult<()> {
    let now = now_millis();
    for key in keys {
        let changed = tx.execute(acker.statement(), &[key, &run_id, &now]).await?;
        if changed == 0 {
            let state = message_by_key(tx, key)
                .await?
                .filter(|m| m.run_id == run_id)
                .ok_or_else(|| StoreError::UnknownMessage(key.clone()))?
                .state;
            return Err(StoreError::NotLeased {
                key: key.clone(),
                state: state.as_str().into(),
            });
        }
    }
    Ok(())
}

/// Returns mail leased and not yet acknowledged to pending, waking each recipient: its taker
/// was cut off before it could use it (an interrupt dropped the turn that leased it). Mail
/// acknowledged already, or pending, is left as it is. How many came back.
pub(crate) async fn hand_back(
    tx: &impl Tx,
    run_id: &str,
    keys: &[String],
    wakes: &mut Vec<Wake>,
) -> StoreResult<u64> {
    let mut back = 0;
    for key in keys {
        let recipient = tx
            .query_opt(
                "UPDATE messages SET state = 0, lease_epoch = NULL, leased_at = NULL \
                 WHERE key = ?1 AND run_id = ?2 AND state = 1 RETURNING recipient",
                &[key, &run_id],
                |row| row.get::<String>("messages", 0),
            )
            .await?;
        if let Some(recipient) = recipient {
            back += 1;
            let wake = Wake {
                run_id: run_id.to_owned(),
                recipient,
            };
            if !wakes.contains(&wake) {
                wakes.push(wake);
            }
        }
    }
    Ok(back)
}

pub(crate) async fn list_messages(
    tx: &impl Tx,
    run_id: &str,
    recipient: Option<&str>,
) -> StoreResult<Vec<Message>> {
    match recipient {
        Some(recipient) => {
            let sql = format!(
                "SELECT {MESSAGE_COLUMNS} FROM messages WHERE run_id = ?1 AND recipient = ?2 ORDER BY seq"
            );
            tx.query(&sql, &[&run_id, &recipient], rows::message).await
        }
        None => {
            let sql =
                format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE run_id = ?1 ORDER BY seq");
            tx.query(&sql, &[&run_id], rows::message).await
        }
    }
}

/// The newest `limit` mails of a run in commit order, and how many came before them. The
/// seqs come from the delivery index (it holds `run_id` and, as the row id, `seq`), so only
/// the rows shown are read and decoded: a page of a long run reads what it shows.
pub(crate) async fn newest_messages(
    tx: &impl Tx,
    run_id: &str,
    limit: usize,
) -> StoreResult<NewestMessages> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let sql = format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages WHERE seq IN ({NEWEST_SEQS_QUERY}) ORDER BY seq"
    );
    let messages = tx.query(&sql, &[&run_id, &limit], rows::message).await?;
    let total = tx
        .query_opt(
            "SELECT count(*) FROM messages WHERE run_id = ?1",
            &[&run_id],
            |r| r.get::<i64>("messages", 0),
        )
        .await?
        .unwrap_or(0);
    let shown = i64::try_from(messages.len()).unwrap_or(i64::MAX);
    Ok(NewestMessages {
        earlier: usize::try_from(total.saturating_sub(shown)).unwrap_or(0),
        messages,
    })
}

/// The seqs of a run's newest mails, newest first: what [`newest_messages`] reads (exported so
/// a test can check its plan).
pub const NEWEST_SEQS_QUERY: &str =
    "SELECT seq FROM messages WHERE run_id = ?1 ORDER BY seq DESC LIMIT ?2";

/// A run's mail of one kind, in commit order.
pub(crate) async fn messages_of_kind(
    tx: &impl Tx,
    run_id: &str,
    kind: &MessageKind,
) -> StoreResult<Vec<Message>> {
    let sql = format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages WHERE run_id = ?1 AND kind = ?2 ORDER BY seq"
    );
    tx.query(&sql, &[&run_id, &kind.as_str()], rows::message)
        .await
}

// ---------------------------------------------------------------- requests and responses

/// The body of the message stored under `key`, or (a row never written by muster) none.
async fn body_of(tx: &impl Tx, key: &str, kind: &str) -> StoreResult<crate::message::MessageBody> {
    Ok(message_by_key(tx, key)
        .await?
        .map(|m| m.body)
        .unwrap_or_else(|| missing_body(kind)))
}

pub(crate) async fn request(
    tx: &impl Tx,
    run_id: &str,
    request_id: &str,
) -> StoreResult<Option<RequestRecord>> {
    const T: &str = "requests";
    let row = tx
        .query_opt(
            "SELECT kind, requester, recipient, responder, message_key, created_at FROM requests \
             WHERE run_id = ?1 AND request_id = ?2",
            &[&run_id, &request_id],
            |r| {
                let text = |i| r.get::<String>(T, i);
                Ok((
                    text(0)?,
                    text(1)?,
                    text(2)?,
                    text(3)?,
                    text(4)?,
                    r.get::<i64>(T, 5)?,
                ))
            },
        )
        .await?;
    let Some((kind, requester, recipient, responder, message_key, created_at)) = row else {
        return Ok(None);
    };
    Ok(Some(RequestRecord {
        run_id: run_id.into(),
        request_id: request_id.into(),
        response: response(tx, run_id, request_id).await?,
        body: body_of(tx, &message_key, &kind).await?,
        kind: MessageKind::parse(&kind),
        requester,
        recipient,
        responder,
        message_key,
        created_at,
    }))
}

async fn response(
    tx: &impl Tx,
    run_id: &str,
    request_id: &str,
) -> StoreResult<Option<ResponseRecord>> {
    const T: &str = "responses";
    let row = tx
        .query_opt(
            "SELECT responder, kind, message_key, decided_at FROM responses WHERE run_id = ?1 AND request_id = ?2",
            &[&run_id, &request_id],
            |r| Ok((r.get::<String>(T, 0)?, r.get::<String>(T, 1)?, r.get::<String>(T, 2)?, r.get::<i64>(T, 3)?)),
        )
        .await?;
    let Some((responder, kind, message_key, decided_at)) = row else {
        return Ok(None);
    };
    Ok(Some(ResponseRecord {
        responder,
        body: body_of(tx, &message_key, &kind).await?,
        kind: MessageKind::parse(&kind),
        message_key,
        decided_at,
    }))
}

pub(crate) async fn list_requests(tx: &impl Tx, run_id: &str) -> StoreResult<Vec<RequestRecord>> {
    let ids = tx
        .query(
            "SELECT request_id FROM requests WHERE run_id = ?1 ORDER BY created_at, request_id",
            &[&run_id],
            |r| r.get::<String>("requests", 0),
        )
        .await?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(record) = request(tx, run_id, &id).await? {
            out.push(record);
        }
    }
    Ok(out)
}

/// Answers a request: only its responder may, and only once (the primary key of `responses`
/// decides; `ON CONFLICT DO NOTHING` keeps the transaction usable to read the winner).
pub(crate) async fn respond(
    tx: &impl Tx,
    answer: &NewResponse,
    wakes: &mut Vec<Wake>,
) -> StoreResult<Message> {
    let (answers, request_id) = rules::respond::answered(answer)?;
    if let Some(original) =
        by_idempotency_key(tx, &answer.run_id, answer.idempotency_key.as_deref()).await?
    {
        return Ok(original);
    }
    let request = request(tx, &answer.run_id, request_id)
        .await?
        .ok_or_else(|| StoreError::UnknownRequest {
            run: answer.run_id.clone(),
            request_id: request_id.into(),
        })?;
    rules::respond::check_answer(&request, answer, &answers)?;
    let sent = send(
        tx,
        &rules::respond::response_message(answer, &request),
        wakes,
    )
    .await?;
    let inserted = tx
        .execute(
            "INSERT INTO responses (run_id, request_id, responder, kind, message_key, decided_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
            &[
                &answer.run_id,
                &request_id,
                &answer.sender,
                &sent.kind.as_str(),
                &sent.key,
                &sent.created_at,
            ],
        )
        .await?;
    if inserted == 1 {
        return Ok(sent);
    }
    match response(tx, &answer.run_id, request_id).await? {
        Some(decided) => Err(rules::respond::already_decided(request_id, &decided)),
        None => Err(StoreError::CorruptRow {
            table: "responses",
            detail: format!("the answer to {request_id:?} was refused and none is stored"),
        }),
    }
}
