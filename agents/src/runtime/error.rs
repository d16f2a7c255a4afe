//! Errors that end an agent's turn: what the model cannot fix.

use std::path::PathBuf;

use muster_mailbox::StoreError;

use crate::budget::{BudgetError, BudgetExceeded, UnpricedModel};
use crate::model::ModelError;

/// Why an agent could not go on. Errors a model can fix never appear here: they go back to it
/// as `is_error` tool results.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("model: {0}")]
    Model(Box<ModelError>),
    #[error("plan file {path}: {source}")]
    PlanFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no free plan slug in {dir} after {attempts} attempts: {detail}")]
    NoFreeSlug {
        dir: PathBuf,
        attempts: u32,
        detail: String,
    },
    #[error("agent definition {0:?} is not in the catalog")]
    UnknownDefinition(String),
    #[error("agent {agent}: record {seq} cannot be read: {detail}")]
    CorruptRecord {
        agent: String,
        seq: i64,
        detail: String,
    },
    #[error("agent {agent} has no records in run {run}: nothing to resume")]
    NothingToResume { run: String, agent: String },
    #[error("workspace: {0}")]
    Workspace(String),
    /// A budget stopped the agent (or the run): its `Display` is `run_finished.reason`.
    #[error(transparent)]
    Budget(#[from] BudgetExceeded),
    #[error(transparent)]
    UnpricedModel(#[from] UnpricedModel),
    #[error("the model stopped with {reason}: {detail}")]
    ModelStopped { reason: String, detail: String },
    /// The runtime ended the agent: a cut answer or a stuck loop (see [`super::AgentLimits`]).
    #[error(transparent)]
    Stopped(#[from] super::limits::AgentStop),
    /// The server refused the prompt as longer than the model's context, and compacting the
    /// context did not make it fit (or there was nothing to compact).
    #[error(
        "the prompt is too long for model {model} {after}: {detail}; set the model's \
         `context_window` in the catalogue (`[models.\"{model}\"]`) or lower \
         `[compaction] trigger_ratio` so the context is compacted before it outgrows the window"
    )]
    PromptTooLong {
        model: String,
        /// "even after compacting the context", "and there was nothing to compact", or "and
        /// the compaction request was refused as too long as well".
        after: &'static str,
        detail: String,
    },
    /// The team could not carry out a transition the agent depends on.
    #[error(transparent)]
    Team(#[from] TeamError),
    /// A prompt was given to an agent whose turn is still running.
    #[error(
        "agent {agent} is still in its turn: a new prompt waits until the turn ends \
         (finished, or interrupted with its TurnInterrupt)"
    )]
    TurnNotEnded { agent: String },
    /// A `UserPromptSubmit` hook blocked the prompt (exit 2 or `decision: "block"`): nothing
    /// of it reached the agent.
    #[error("the prompt was blocked by a UserPromptSubmit hook: {reason}")]
    PromptBlocked { reason: String },
    #[error(transparent)]
    CommitCut(#[from] super::interrupt::CommitCut),
}

impl From<ModelError> for RuntimeError {
    fn from(error: ModelError) -> Self {
        RuntimeError::Model(Box::new(error))
    }
}

impl From<BudgetError> for RuntimeError {
    fn from(error: BudgetError) -> Self {
        match error {
            BudgetError::Exceeded(exceeded) => RuntimeError::Budget(exceeded),
            BudgetError::UnpricedModel(unpriced) => RuntimeError::UnpricedModel(unpriced),
        }
    }
}

/// Results of runtime operations.
pub type RuntimeResult<T> = Result<T, RuntimeError>;

/// Why the team did not do what an agent asked. A refusal is an answer for the model; every
/// other error keeps its cause, so a store failure under a team transition is reported as one
/// (exit 4) rather than as text.
#[derive(Debug, thiserror::Error)]
pub enum TeamError {
    /// Refused, in words for the model (a name taken, no such teammate, not the lead).
    #[error("{0}")]
    Refused(String),
    /// The store failed: the agent cannot go on.
    #[error("{context}")]
    Store {
        context: String,
        #[source]
        source: StoreError,
    },
    /// Something else the team needs failed (git, a worktree, the file system).
    #[error("{context}")]
    Failed {
        context: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl TeamError {
    /// A store failure while doing `context`.
    pub fn store(context: impl Into<String>, source: StoreError) -> TeamError {
        TeamError::Store {
            context: context.into(),
            source,
        }
    }

    /// A failure of something else while doing `context`, its cause kept.
    pub fn failed(
        context: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> TeamError {
        TeamError::Failed {
            context: context.into(),
            source: source.into(),
        }
    }
}
