//! `muster-mailbox`: the durable store behind muster's mailbox — runs, rosters, messages,
//! approvals, the task board and agents' opaque records — in one SQLite file (the default) or
//! on a PostgreSQL server (the same model and contract, for work that outgrows one machine).
//!
//! Callers hold an `Arc<dyn MailboxStore>`; [`SqliteStore`] is the embedded default,
//! [`PostgresStore`] the shared one. Writes
//! are typed operations executed by one writer thread with group commit; a message is durable
//! when `send` returns; leases belong to the process epoch that took them; wake-ups are pushed
//! after COMMIT (in process) or through the live run's socket (across processes, see [`live`]).

pub(crate) mod clock;
pub mod decide;
pub mod error;
pub mod failpoint;
pub mod ledger;
pub mod live;
pub mod message;
pub(crate) mod ops;
pub mod options;
pub mod postgres;
pub mod revision;
pub(crate) mod rows;
pub(crate) mod rules;
pub mod sqlite;
pub mod store;
pub mod types;
pub(crate) mod wake;
pub mod work;

pub use error::{StoreError, StoreResult};
pub use ledger::{LedgerLimits, LedgerSpend, RunLedger};
pub use message::{MessageBody, MessageKind};
pub use options::{CommitHook, StoreOptions, SyncMode};
pub use postgres::{PG_SCHEMA_VERSION, PostgresStore, create_schema, drop_schema};
pub use sqlite::{DataVersion, SCHEMA_VERSION, SqliteStore};
pub use store::MailboxStore;
pub use types::*;
pub use wake::{BOARD_WAKE, until_found};
pub use work::{
    Heartbeat, NewProcessGroup, NewWorkItem, ProcessGroupRecord, WorkFence, WorkItem, WorkState,
    WorkWatch, WorkerInfo, WorkerRecord,
};
