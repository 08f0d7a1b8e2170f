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
    /// A window's aggregate has no result for one key and window (a checked
    /// sum left the `i64` range). The same input fails the same way again,
    /// so restarting the job cannot help.
    #[error("key {key}, window [{}, {}): {reason}", window.start, window.end)]
    Aggregate {
        /// The key, rendered as JSON (`"k1"`, `42`, `["a",1]`).
        key: String,
        /// The window whose result failed.
        window: crate::window::TimeWindow,
        /// Why the aggregate failed.
        reason: crate::window::AggregateError,
    },
    /// A record's timestamp has a window that does not fit in the timestamp
    /// range: it would start at or before `i64::MIN` (Flink's "no timestamp"
    /// marker) or end after `i64::MAX` (the final watermark). Flink fails the
    /// job for `i64::MIN`; floe does so for every such timestamp instead of
    /// assigning a window that does not contain the record.
    #[error(
        "timestamp {timestamp} cannot be windowed: its window would start at or before \
         i64::MIN or end after i64::MAX"
    )]
    TimestampOutOfRange {
        /// The record's timestamp.
        timestamp: i64,
    },
    /// A window assigner puts a record in more windows than allowed (sliding
    /// windows put it in up to `ceil(size / slide)`); refused when the job is
    /// built. The limit is `WindowedStream::max_windows_per_record`.
    #[error(
        "invalid configuration: sliding windows of {size} ms every {slide} ms put each record \
         in up to {windows} windows, more than the limit of {limit} windows per record"
    )]
    TooManyWindows {
        /// Window length (ms).
        size: i64,
        /// Distance between window starts (ms).
        slide: i64,
        /// Windows per record: `ceil(size / slide)`.
        windows: u64,
        /// The limit in force.
        limit: u64,
    },
}

impl Error {
    /// The failure of `key`'s aggregate in `window`.
    pub fn aggregate<K: serde::Serialize>(
        key: &K,
        window: crate::window::TimeWindow,
        reason: crate::window::AggregateError,
    ) -> Self {
        Error::Aggregate {
            key: describe_key(key),
            window,
            reason,
        }
    }

    /// An I/O error with the file it concerns.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            action,
            path: path.into(),
            source,
        }
    }
}

/// A key as it appears in error messages: its JSON form, which every
/// serializable key has and which keeps strings quoted. Only used on the
/// failure path.
pub fn describe_key<K: serde::Serialize>(key: &K) -> String {
    serde_json::to_string(key).unwrap_or_else(|_| "<a key without a JSON form>".to_string())
}

/// floe's result type.
pub type Result<T> = std::result::Result<T, Error>;
