//! The runtime's error type.
//!
//! One `#[non_exhaustive]` enum for the crate; variants that come from a running
//! job name the operator and the subtask so a failure can be traced to its source.

use crate::ids::SubtaskIndex;

/// Errors of the floe runtime.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// User code (a map closure, a process function, a sink) panicked.
    #[error("operator '{operator}' subtask {subtask} panicked: {message}")]
    UserPanic {
        /// Name of the operator whose code panicked.
        operator: String,
        /// The failing subtask.
        subtask: SubtaskIndex,
        /// The panic payload, when it was a string.
        message: String,
    },
    /// An operator returned an error (bad record, I/O failure, ...).
    #[error("operator '{operator}' subtask {subtask} failed: {message}")]
    Operator {
        /// Name of the failing operator.
        operator: String,
        /// The failing subtask.
        subtask: SubtaskIndex,
        /// What went wrong.
        message: String,
    },
    /// A subtask actor stopped without finishing or reporting a failure.
    #[error("subtask {subtask} of '{vertex}' stopped unexpectedly")]
    SubtaskLost {
        /// Name of the chain the subtask ran.
        vertex: String,
        /// The lost subtask.
        subtask: SubtaskIndex,
    },
    /// The job graph or configuration is invalid.
    #[error("invalid job: {0}")]
    InvalidJob(String),
    /// The job was cancelled before it finished.
    #[error("job was cancelled")]
    Cancelled,
    /// The runtime could not start or lost its actor system.
    #[error("runtime error: {0}")]
    Runtime(String),
}

impl Error {
    /// Wraps an operator failure with the names of the operator and subtask.
    pub fn operator(
        operator: impl Into<String>,
        subtask: SubtaskIndex,
        message: impl Into<String>,
    ) -> Self {
        Error::Operator {
            operator: operator.into(),
            subtask,
            message: message.into(),
        }
    }
}

/// The runtime's result type.
pub type Result<T> = std::result::Result<T, Error>;

/// Turns a panic payload into a readable message.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}
