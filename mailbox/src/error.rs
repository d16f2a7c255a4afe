//! The store's typed errors. Each says what was wrong, where, and what to do.

use std::path::PathBuf;

/// Everything a store operation can refuse or fail with.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "{path} is not a muster store: it exists but is not an SQLite database (its header is \
         not \"SQLite format 3\"); it was left unchanged — point --store elsewhere or move the file"
    )]
    NotSqlite { path: PathBuf },

    #[error(
        "{path} was written by a newer muster (store schema version {found}; this muster \
         supports up to {supported}); upgrade muster to open it"
    )]
    NewerSchema {
        path: PathBuf,
        found: i64,
        supported: i64,
    },

    #[error(
        "the store {path} stayed locked by another process for {waited_ms} ms (busy_timeout); \
         another muster may be writing a large batch — retry, or raise mailbox.busy_timeout_ms"
    )]
    Locked { path: PathBuf, waited_ms: u64 },

    #[error("cannot open the store {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("store error on {path}: {source}")]
    Sqlite {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },

    #[error("the store {path} could not commit: {detail}; nothing of this operation was kept")]
    CommitFailed { path: PathBuf, detail: String },

    #[error("store error on {target}: {detail}")]
    Postgres { target: String, detail: String },

    #[error(
        "the connection to the store {target} was lost ({detail}); the operation was retried \
         and did not get through: check the server, then resume the run (nothing committed \
         is lost)"
    )]
    ConnectionLost { target: String, detail: String },

    #[error("cannot connect to the store {target}: {reason}")]
    PostgresConnect { target: String, reason: String },

    #[error(
        "{target} is not a muster store: schema {schema:?} {detail}; it was left unchanged — \
         point --store at an empty database, or at another schema with \
         ?options=-csearch_path%3DNAME in the URL"
    )]
    NotMusterDatabase {
        target: String,
        schema: String,
        detail: String,
    },

    #[error("invalid store URL {target}: {detail}")]
    InvalidStoreUrl { target: String, detail: String },

    #[error("the store's writer thread has stopped; reopen the store")]
    WriterGone,

    #[error("invalid {what} {value:?}: {rule}")]
    InvalidId {
        what: &'static str,
        value: String,
        rule: &'static str,
    },

    #[error("run {0:?} already exists")]
    RunExists(String),

    #[error("slug {0:?} is already used by another run; plan file names must not collide")]
    SlugExists(String),

    #[error("no run {0:?} in this store (see `muster runs`)")]
    UnknownRun(String),

    #[error("{agent:?} is already on the roster of run {run:?}")]
    AlreadyOnRoster { run: String, agent: String },

    #[error(
        "unknown recipient {recipient:?}: not on the roster of run {run:?} (members: {members})"
    )]
    UnknownRecipient {
        run: String,
        recipient: String,
        members: String,
    },

    #[error("unknown sender {sender:?}: not on the roster of run {run:?}")]
    UnknownSender { run: String, sender: String },

    #[error(
        "message body of {size} bytes exceeds the limit of {limit} bytes \
         (mailbox.max_body_bytes); send a file path instead of the content"
    )]
    BodyTooLarge { size: usize, limit: usize },

    #[error("a {kind} must carry a request_id")]
    MissingRequestId { kind: String },

    #[error("request id {request_id:?} is already used in run {run:?}")]
    DuplicateRequest { run: String, request_id: String },

    #[error("unknown request id {request_id:?} in run {run:?} (see `muster inbox human`)")]
    UnknownRequest { run: String, request_id: String },

    #[error(
        "request {request_id:?} was already decided by {decided_by} at {decided_at_ms} \
         (unix ms); only the first response counts"
    )]
    AlreadyDecided {
        request_id: String,
        decided_by: String,
        decided_at_ms: i64,
    },

    #[error("{sender:?} may not answer request {request_id:?}: its responder is {responder:?}")]
    WrongResponder {
        request_id: String,
        sender: String,
        responder: String,
    },

    #[error("a {response_kind} cannot answer request {request_id:?}, which is a {request_kind}")]
    MismatchedResponse {
        request_id: String,
        request_kind: String,
        response_kind: String,
    },

    #[error("message {key} is not leased (it is {state}); it cannot be acknowledged")]
    NotLeased { key: String, state: String },

    #[error("no message {0} in this store")]
    UnknownMessage(String),

    #[error("record ({agent}, {stream}, {seq}) already exists in run {run:?}")]
    DuplicateRecord {
        run: String,
        agent: String,
        stream: String,
        seq: i64,
    },

    #[error("no task {task_id} in run {run:?}")]
    UnknownTask { run: String, task_id: i64 },

    #[error("task {task_id} cannot be claimed by {agent:?}: {reason}")]
    ClaimRefused {
        task_id: i64,
        agent: String,
        reason: String,
    },

    #[error("task {task_id} cannot depend on {blocked_by}: {reason}")]
    InvalidDependency {
        task_id: i64,
        blocked_by: i64,
        reason: String,
    },

    #[error("stored JSON in {table} is corrupt: {detail}")]
    CorruptRow { table: &'static str, detail: String },

    #[error("run {run:?} is live in another process (its lock {lock} is held)")]
    RunLocked { run: String, lock: PathBuf },

    #[error(
        "run {run:?} lost its live lock on the store after its connection ended: {reason}; \
         this process stopped without writing more (what was committed is kept) — see \
         `muster runs`, and resume the run if no other process is running it"
    )]
    LiveLost { run: String, reason: String },

    #[error(
        "work item {item:?}: fencing token {token} is stale (the item's token is now \
         {current}, {state}); another worker took it over, so this process must stop writing"
    )]
    Fenced {
        item: String,
        token: i64,
        current: i64,
        state: String,
    },

    #[error("no work item {0:?} in this store")]
    UnknownWorkItem(String),

    #[error("cannot reach the live run {run:?} through {socket}: {source}")]
    Wake {
        run: String,
        socket: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub type StoreResult<T> = Result<T, StoreError>;
