//! Errors of checkpoints, savepoints and their store.

use std::path::PathBuf;

/// What can go wrong writing, reading or restoring a checkpoint.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// A file or directory of the store could not be read or written.
    #[error("checkpoint store: cannot {action} '{path}': {message}")]
    Io {
        /// What was being done ("create", "read", "write", "remove", ...).
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        message: String,
    },
    /// The store's metadata database failed.
    #[error("checkpoint store '{path}': {message}")]
    Database {
        /// The database file.
        path: PathBuf,
        /// The cause.
        message: String,
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
    /// A checkpoint was declined, expired or could not be completed.
    #[error("checkpoint {checkpoint} failed: {message}")]
    Failed {
        /// The checkpoint id.
        checkpoint: u64,
        /// Why.
        message: String,
    },
}
