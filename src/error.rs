//! floe's error type.
//!
//! Runtime failures (a panic in user code, a lost subtask) arrive as
//! [`floe_actors::Error`] and name the operator and subtask; the variants here add
//! what the API and connectors can get wrong: configuration, I/O, bad records.

use std::path::PathBuf;

/// Errors of floe jobs and of the builder API.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The job failed while running (names the operator and subtask).
    #[error(transparent)]
    Runtime(#[from] floe_actors::Error),
    /// The configuration or the job graph is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A file could not be opened, read or written.
    #[error("{action} '{path}': {source}")]
    Io {
        /// What was being done ("cannot open", "cannot write", ...).
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Another job, in another process, writes this output file (it holds
    /// the output's lock file): two jobs on one output would destroy each
    /// other's commits.
    #[error(
        "output file '{path}' is in use by another job (another process holds its lock '{lock}')"
    )]
    OutputInUse {
        /// The output file.
        path: PathBuf,
        /// Its lock file.
        lock: PathBuf,
    },
    /// A record could not be parsed or is otherwise unusable.
    #[error("bad record at line {line}: {message}")]
    BadRecord {
        /// 1-based line number in the input.
        line: u64,
        /// What is wrong with it.
        message: String,
    },
    /// Keyed state was misused, or does not match its snapshot.
    #[error(transparent)]
    State(#[from] crate::state::StateError),
    /// A checkpoint or savepoint could not be written, read or restored.
    #[error(transparent)]
    Checkpoint(#[from] crate::checkpoint::CheckpointError),
    /// User code returned an error.
    #[error("{0}")]
    User(String),
}

impl Error {
    /// An I/O error with the file it concerns.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            action,
            path: path.into(),
            source,
        }
    }
}

/// floe's result type.
pub type Result<T> = std::result::Result<T, Error>;
