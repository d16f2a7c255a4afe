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
    Team(#[from] super::team::TeamError),
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
