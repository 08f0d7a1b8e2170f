//! Errors of checkpoints, savepoints and their storage.
//!
//! I/O and database failures keep their cause as the error's `source()`, so
//! a caller can walk the chain (and match on an `io::ErrorKind`) instead of
//! parsing text; the `Display` of each variant is unchanged.

use crate::ids::CheckpointId;
use std::path::PathBuf;
use std::sync::Arc;

/// What can go wrong writing, reading or restoring a checkpoint.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// A file or directory of the store could not be read or written.
    #[error("checkpoint store: cannot {action} '{path}': {source}")]
    Io {
        /// What was being done ("create", "read", "write", "remove", ...).
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The cause (shared: the error is `Clone`).
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The store's metadata database failed.
    #[error("checkpoint store '{path}': {message}")]
    Database {
        /// The database file.
        path: PathBuf,
        /// What failed, in words.
        message: String,
        /// The database's own error, when there is one (a panic inside the
        /// database, caught, has none).
        #[source]
        source: Option<Arc<redb::Error>>,
    },
    /// A checkpoint (or savepoint) file is truncated or corrupted.
    #[error("checkpoint {checkpoint} is corrupt: '{file}': {reason}")]
    Corrupt {
        /// The checkpoint: its id or its path.
        checkpoint: String,
        /// The damaged file.
        file: PathBuf,
        /// What is wrong (length or checksum mismatch, undecodable, ...).
        reason: String,
    },
    /// Nothing to restore from at the given path.
    #[error("no checkpoint or savepoint at '{path}'")]
    NotFound {
        /// The path given.
        path: PathBuf,
    },
    /// Written by another format version.
    #[error(
        "checkpoint {checkpoint} has format version {found}; this floe reads version {expected}"
    )]
    Version {
        /// The checkpoint: its id or its path.
        checkpoint: String,
        /// Version found.
        found: u32,
        /// Version supported.
        expected: u32,
    },
    /// The snapshot does not fit the job (unknown operator uid, changed
    /// parallelism with channel state, ...).
    #[error("cannot restore from checkpoint {checkpoint}: {message}")]
    Incompatible {
        /// The checkpoint: its id or its path.
        checkpoint: String,
        /// Why.
        message: String,
    },
    /// The snapshot holds the state of an operator the job does not have:
    /// it was taken by another job, or the job's operators changed their
    /// ids.
    #[error(
        "cannot restore from checkpoint {checkpoint}: its operator '{uid}' ({name}) is not in the job; give operators stable ids with .uid(..)"
    )]
    UnknownOperator {
        /// The checkpoint: its id or its path.
        checkpoint: String,
        /// The operator's uid in the checkpoint.
        uid: String,
        /// The operator's name in the checkpoint.
        name: String,
    },
    /// A checkpoint was declined, expired or could not be completed.
    #[error("checkpoint {} failed: {message}", .checkpoint.0)]
    Failed {
        /// The checkpoint.
        checkpoint: CheckpointId,
        /// Why.
        message: String,
    },
    /// Object storage (`s3://BUCKET/PREFIX`) failed or refused a request:
    /// unreachable, wrong credentials, a missing bucket, a prefix another
    /// job holds.
    #[error("checkpoint storage '{location}': {message}")]
    Storage {
        /// The URL of the object, or of the prefix.
        location: String,
        /// What failed, in words (the server's own code when it gave one).
        message: String,
    },
    /// The coordinator refused a request (a savepoint with every source
    /// finished, a second stop, a stop without checkpointing): nothing was
    /// triggered. The embedding layer reports it as a configuration error,
    /// worded the same.
    #[error("invalid configuration: {message}")]
    Refused {
        /// Why.
        message: String,
    },
}

impl From<CheckpointError> for crate::Error {
    /// A failed blob write in a subtask's asynchronous snapshot part: the
    /// subtask declines the checkpoint with this message.
    fn from(e: CheckpointError) -> Self {
        crate::Error::Runtime(e.to_string())
    }
}
