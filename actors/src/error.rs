//! The runtime's error type.
//!
//! One `#[non_exhaustive]` enum for the crate; variants that come from a running
//! job name the operator and the subtask so a failure can be traced to its source.

use crate::ids::{CheckpointId, SubtaskIndex};

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
    /// The job was canceled before it finished.
    #[error("job was canceled")]
    Canceled,
    /// The runtime could not start or lost its actor system.
    #[error("runtime error: {0}")]
    Runtime(String),
    /// A failure injected on purpose (fault-injection tests and demos): a
    /// planned fault at `point`, or a random kill (`point` is `None`). Typed,
    /// so that the job manager and test harnesses tell it from a real
    /// failure without reading the message.
    #[error(
        "operator '{operator}' subtask {subtask} failed: injected failure{}",
        point.map(|p| format!(" {p}")).unwrap_or_default()
    )]
    InjectedFault {
        /// Name of the operator (or chain, for a random kill) that failed.
        operator: String,
        /// The failing subtask.
        subtask: SubtaskIndex,
        /// Where the planned fault fired; `None` for a random kill.
        point: Option<FaultPoint>,
    },
    /// A failure that no restart can mend: it would repeat on every attempt
    /// (input that is bad the same way each time, an output that cannot be
    /// written, a setting that does not fit). The job fails at once, whatever
    /// its restart strategy; the message is the wrapped error's.
    #[error(transparent)]
    NonRetriable(Box<Error>),
}

/// Where an injected fault fires in its subtask (see floe's
/// `failover::Fault`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultPoint {
    /// Once the operator's subtask has taken in this many records.
    Records(u64),
    /// When the subtask snapshots this checkpoint (the synchronous part).
    Checkpoint(CheckpointId),
    /// In the asynchronous part (serialize and write) of this checkpoint:
    /// the checkpoint is declined, and fails the job beyond the tolerable
    /// failed checkpoints.
    AsyncWrite(CheckpointId),
    /// While the subtask restores a checkpoint (the first restore after
    /// the fault was configured).
    Restore,
}

impl std::fmt::Display for FaultPoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FaultPoint::Records(n) => write!(f, "after {n} records"),
            FaultPoint::Checkpoint(id) => write!(f, "during the snapshot of checkpoint {}", id.0),
            FaultPoint::AsyncWrite(id) => write!(f, "while writing checkpoint {}", id.0),
            FaultPoint::Restore => f.write_str("while restoring"),
        }
    }
}

impl Error {
    /// The injected fault behind this error (also through
    /// [`Error::NonRetriable`]), if it is one.
    pub fn injected(&self) -> Option<&Error> {
        match self {
            e @ Error::InjectedFault { .. } => Some(e),
            Error::NonRetriable(inner) => inner.injected(),
            _ => None,
        }
    }

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

    /// Marks this failure as one no restart can mend (see
    /// [`Error::NonRetriable`]); marking twice wraps once.
    pub fn non_retriable(self) -> Self {
        match self {
            e @ Error::NonRetriable(_) => e,
            e => Error::NonRetriable(Box::new(e)),
        }
    }

    /// Whether restarting the job may get past this failure. `false` for
    /// [`Error::NonRetriable`] and [`Error::InvalidJob`]: a restart strategy
    /// must not spend its attempts on them.
    pub fn is_retriable(&self) -> bool {
        !matches!(self, Error::NonRetriable(_) | Error::InvalidJob(_))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_retriable_keeps_the_message_and_wraps_once() {
        let e = Error::operator("Parse", SubtaskIndex(0), "bad record at line 3");
        assert!(e.is_retriable());
        let fatal = e.clone().non_retriable();
        assert!(!fatal.is_retriable());
        assert_eq!(fatal.to_string(), e.to_string());
        assert_eq!(fatal.clone().non_retriable(), fatal);
        assert!(!Error::InvalidJob("no sources".into()).is_retriable());
    }

    #[test]
    fn injected_faults_are_typed_and_keep_their_message() {
        let planned = Error::InjectedFault {
            operator: "Map".into(),
            subtask: SubtaskIndex(1),
            point: Some(FaultPoint::Records(7)),
        };
        assert_eq!(
            planned.to_string(),
            "operator 'Map' subtask #1 failed: injected failure after 7 records"
        );
        let kill = Error::InjectedFault {
            operator: "Source".into(),
            subtask: SubtaskIndex(0),
            point: None,
        };
        assert_eq!(
            kill.to_string(),
            "operator 'Source' subtask #0 failed: injected failure"
        );
        assert_eq!(kill.clone().non_retriable().injected(), Some(&kill));
        assert_eq!(Error::Canceled.injected(), None);
    }
}
