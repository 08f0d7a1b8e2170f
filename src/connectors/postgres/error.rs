//! The errors of the PostgreSQL sink, and the conversion of the client's
//! errors into them (the server's message and SQLSTATE, and what was
//! being done).

use crate::Error;

/// Errors of the PostgreSQL sink.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostgresError {
    /// The URL is not `postgres://USER:PASS@HOST:PORT/DB?table=T`.
    #[error("invalid PostgreSQL URL '{url}': {reason}")]
    BadUrl {
        /// The URL, without its password.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// A table or column name is not a plain SQL identifier.
    #[error("invalid SQL identifier '{0}' (letters, digits and '_', optionally schema.name)")]
    BadIdentifier(String),
    /// The server refused a connection or a statement.
    #[error("PostgreSQL {action}: {detail}")]
    Server {
        /// What was being done.
        action: String,
        /// The server's message (SQLSTATE and text) or the client's error.
        detail: String,
        /// The client's error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// Group mode: a newer generation of the group holds some of the
    /// partitions whose positions this member run commits (it lost them in
    /// a rebalance while it did not answer): nothing of it is committed.
    #[error(
        "group '{group}': fenced: partitions of {topic} belong to a newer generation than {generation} (this member lost them in a rebalance)"
    )]
    Fenced {
        /// The group.
        group: String,
        /// The topic whose positions were claimed or committed.
        topic: String,
        /// This member run's generation.
        generation: i32,
    },
    /// Group mode: the positions of some claimed partitions stayed locked
    /// by another transaction for the lock timeout (a former owner's).
    #[error(
        "group '{group}': the positions of {topic} stayed locked by another transaction for {waited_ms} ms"
    )]
    PositionsLocked {
        /// The group.
        group: String,
        /// The topic whose positions were claimed.
        topic: String,
        /// The lock timeout.
        waited_ms: u64,
    },
    /// Sessions of a former attempt of the sink stayed open through
    /// recovery (terminating them failed).
    #[error(
        "sessions {pids:?} of a former attempt of the PostgreSQL sink are still open after {waited_ms} ms (terminating them failed)"
    )]
    FormerWriters {
        /// Their backends.
        pids: Vec<i32>,
        /// How long recovery waited.
        waited_ms: u64,
    },
}

pub(super) fn server(action: impl Into<String>) -> impl FnOnce(tokio_postgres::Error) -> Error {
    let action = action.into();
    move |source| {
        let detail = match source.as_db_error() {
            Some(db) => format!("{} ({})", db.message(), db.code().code()),
            None => source.to_string(),
        };
        PostgresError::Server {
            action,
            detail,
            source,
        }
        .into()
    }
}
