//! The process exit codes of DESIGN.md, in one place.

use muster_mailbox::StoreError;

/// What a `muster` command's outcome means to a script that ran it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Success, or `check` answered allow.
    Success,
    /// The run failed, `check` answered ask or deny, or a request was already decided.
    Failed,
    /// Usage or configuration error, including an unknown id.
    Usage,
    /// A budget or the deadline was hit.
    Budget,
    /// Store error: corrupt, newer schema, lock timeout.
    Store,
    /// The run stopped awaiting a decision: answer it, then `muster resume`.
    AwaitingDecision,
    /// Interrupted by a signal.
    Interrupted,
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Failed => 1,
            Exit::Usage => 2,
            Exit::Budget => 3,
            Exit::Store => 4,
            Exit::AwaitingDecision => 5,
            Exit::Interrupted => 130,
        }
    }

    /// The [`Exit`] a child `muster` process ended with (an unknown code is a failed run).
    pub fn from_code(code: u64) -> Exit {
        match code {
            0 => Exit::Success,
            2 => Exit::Usage,
            3 => Exit::Budget,
            4 => Exit::Store,
            5 => Exit::AwaitingDecision,
            130 => Exit::Interrupted,
            _ => Exit::Failed,
        }
    }

    /// The exit code an error ends the process with: a typed [`ExitError`] or
    /// [`StoreError`] anywhere in the chain decides; anything else is a failed run.
    pub fn for_error(error: &anyhow::Error) -> Exit {
        error
            .chain()
            .find_map(|cause| {
                cause
                    .downcast_ref::<ExitError>()
                    .map(|e| e.exit)
                    .or_else(|| {
                        cause
                            .downcast_ref::<StoreError>()
                            .map(Exit::for_store_error)
                    })
            })
            .unwrap_or(Exit::Failed)
    }

    /// Store errors by what the user must do: fix the store (4), fix the id (2), or accept
    /// that the request was already decided (1).
    pub fn for_store_error(error: &StoreError) -> Exit {
        match error {
            StoreError::NotSqlite { .. }
            | StoreError::NewerSchema { .. }
            | StoreError::Locked { .. }
            | StoreError::Open { .. }
            | StoreError::Sqlite { .. }
            | StoreError::CommitFailed { .. }
            | StoreError::WriterGone
            | StoreError::CorruptRow { .. }
            | StoreError::Wake { .. }
            | StoreError::Postgres { .. }
            | StoreError::PostgresConnect { .. }
            | StoreError::ConnectionLost { .. }
            | StoreError::NotMusterDatabase { .. }
            | StoreError::Fenced { .. }
            | StoreError::LiveLost { .. } => Exit::Store,
            StoreError::InvalidId { .. }
            | StoreError::UnknownRun(_)
            | StoreError::UnknownRequest { .. }
            | StoreError::UnknownRecipient { .. }
            | StoreError::UnknownSender { .. }
            | StoreError::UnknownMessage(_)
            | StoreError::UnknownTask { .. }
            | StoreError::UnknownWorkItem(_)
            | StoreError::BodyTooLarge { .. }
            | StoreError::MissingRequestId { .. }
            | StoreError::MismatchedResponse { .. }
            | StoreError::InvalidDependency { .. }
            | StoreError::InvalidStoreUrl { .. } => Exit::Usage,
            StoreError::AlreadyDecided { .. }
            | StoreError::WrongResponder { .. }
            | StoreError::RunExists(_)
            | StoreError::SlugExists(_)
            | StoreError::AlreadyOnRoster { .. }
            | StoreError::DuplicateRequest { .. }
            | StoreError::NotLeased { .. }
            | StoreError::DuplicateRecord { .. }
            | StoreError::ClaimRefused { .. }
            | StoreError::RunLocked { .. } => Exit::Failed,
        }
    }
}

/// An error that carries the exit code it must end the process with.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ExitError {
    pub exit: Exit,
    pub message: String,
}

impl ExitError {
    pub fn new(exit: Exit, message: impl Into<String>) -> Self {
        ExitError {
            exit,
            message: message.into(),
        }
    }
}
