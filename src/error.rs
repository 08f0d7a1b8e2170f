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
    /// The configuration or the job graph is invalid, as an error of its
    /// own says (the plan's `PlanError`, the
    /// runtime settings', a server's), kept as the source; the message is
    /// [`Error::Config`]'s.
    #[error("invalid configuration: {source}")]
    InvalidConfig {
        /// The error that makes the configuration invalid.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The job was canceled ([`JobHandle::cancel`](crate::JobHandle::cancel),
    /// a dropped handle with `cancel_on_drop`) before it finished.
    #[error("job was canceled")]
    Canceled,
    /// A bounded wait ran out.
    #[error("timed out after {after:?} waiting for {waiting_for}")]
    TimedOut {
        /// What was waited for.
        waiting_for: &'static str,
        /// The bound.
        after: std::time::Duration,
    },
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
    /// User code returned an error: a message (`Error::User("closed".into())`)
    /// or the user's own error, kept as it is (`Error::User(Box::new(e))`,
    /// found again with `downcast_ref`).
    #[error(transparent)]
    User(Box<dyn std::error::Error + Send + Sync + 'static>),
    /// State, a source position or a pending transaction could not be
    /// encoded or decoded (the codec's error is the source). The same
    /// bytes fail the same way again, so restarting the job cannot help.
    #[error("cannot {what}: {source}")]
    Encoding {
        /// What was being encoded or decoded ("decode keyed state of key
        /// group 3").
        what: String,
        /// The codec's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// An exactly-once sink could not commit a pre-committed transaction
    /// (the sink's error is the source). Retriable as that error is: a
    /// restart commits the transaction again.
    #[error("cannot commit transaction {txn} of checkpoint {checkpoint}: {source}")]
    Commit {
        /// The transaction, as the sink shows it (`Debug`).
        txn: String,
        /// The checkpoint it belongs to.
        checkpoint: u64,
        /// The sink's error.
        #[source]
        source: Box<Error>,
    },
    /// Code that floe runs outside an operator's guard (a sink's recovery
    /// of its transactions) panicked; the panic message is kept.
    #[error("panic while {during}: {message}")]
    Panicked {
        /// What was being done ("recovering transactions").
        during: &'static str,
        /// The panic payload, when it was a string.
        message: String,
    },
    /// An output file no longer matches the commit log of the job that
    /// writes it: something else changed it. The job does not repair what
    /// it cannot explain.
    #[error(
        "output file '{path}' holds {actual} bytes, its commit log records {logged}: \
         it was changed by something else"
    )]
    OutputChanged {
        /// The output file.
        path: PathBuf,
        /// Its length now.
        actual: u64,
        /// The length its commit log records.
        logged: u64,
    },
    /// A dynamic session gap extractor returned a gap that is not positive
    /// (as Flink, the job fails).
    #[error("dynamic session gap must be positive (got {gap} ms)")]
    SessionGap {
        /// The gap returned (ms).
        gap: i64,
    },
    /// The PostgreSQL sink failed (its message is the connector error's).
    #[cfg(feature = "postgres")]
    #[error("{0}")]
    Postgres(#[from] crate::connectors::postgres::PostgresError),
    /// A Kafka connector failed.
    #[cfg(feature = "kafka")]
    #[error(transparent)]
    Kafka(#[from] crate::connectors::kafka::KafkaError),
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
    /// A keyed `sum` left the range of its field's type for one key (as a
    /// window sum does, [`Error::Aggregate`]). The same input fails the
    /// same way again, so restarting the job cannot help.
    #[error("key {key}: the sum {sum} + {add} overflows {field_type}")]
    SumOverflow {
        /// The key, rendered as JSON (`"k1"`, `42`, `["a",1]`).
        key: String,
        /// The summed field's type.
        field_type: &'static str,
        /// The key's sum so far.
        sum: String,
        /// The value that does not fit on top of it.
        add: String,
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
    /// A SQL script does not parse or plan (names the line and column;
    /// nothing of the script ran), or one of its expressions failed on a
    /// row while the job ran (kind `Evaluation`).
    #[cfg(feature = "sql")]
    #[error(transparent)]
    Sql(#[from] crate::sql::SqlError),
    /// An invariant of floe itself broke (a bug in floe, not in the job):
    /// say, an edge of the stream graph joined operators whose record types
    /// differ. Reported rather than panicking.
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// Whether restarting the job may get past this error, as the job
    /// manager sees it: `false` for what would fail the same way on every
    /// attempt, so that the job fails at once instead of spending its
    /// restart strategy on it:
    ///
    /// - a bad record (the fail policy met malformed input) and an invalid
    ///   configuration;
    /// - I/O refused for good: permission denied, read-only file system,
    ///   not found, not a directory / is a directory, invalid input or data
    ///   (invalid UTF-8, an input file shorter than the restored offset);
    /// - a checkpoint that cannot be restored (corrupt, another format
    ///   version, incompatible with the job, not found);
    /// - an output another job holds ([`Error::OutputInUse`]);
    /// - a window sum that overflows, a timestamp no window can hold, too
    ///   many windows per record (the same input fails the same way);
    /// - a runtime error marked [`floe_actors::Error::NonRetriable`].
    ///
    /// A full disk (or quota, or file size limit) stays retriable: space may
    /// be freed meanwhile, and the restart strategy bounds the attempts.
    pub fn is_retriable(&self) -> bool {
        use crate::checkpoint::CheckpointError as C;
        use std::io::ErrorKind as K;
        match self {
            Error::Runtime(e) => e.is_retriable(),
            Error::Config(_)
            | Error::InvalidConfig { .. }
            | Error::Canceled
            | Error::BadRecord { .. }
            | Error::OutputInUse { .. }
            | Error::Aggregate { .. }
            | Error::TimestampOutOfRange { .. }
            | Error::TooManyWindows { .. }
            | Error::SumOverflow { .. }
            | Error::Encoding { .. }
            | Error::OutputChanged { .. }
            | Error::SessionGap { .. }
            | Error::Internal(_) => false,
            Error::Commit { source, .. } => source.is_retriable(),
            Error::Io { source, .. } => !matches!(
                source.kind(),
                K::PermissionDenied
                    | K::ReadOnlyFilesystem
                    | K::NotFound
                    | K::NotADirectory
                    | K::IsADirectory
                    | K::InvalidInput
                    | K::InvalidData
            ),
            Error::Checkpoint(
                C::Corrupt { .. }
                | C::Version { .. }
                | C::Incompatible { .. }
                | C::UnknownOperator { .. }
                | C::NotFound { .. },
            ) => false,
            Error::State(_)
            | Error::Checkpoint(_)
            | Error::User(_)
            | Error::Panicked { .. }
            | Error::TimedOut { .. } => true,
            // As when it came as an `Error::User`: the restart strategy
            // bounds the attempts.
            #[cfg(feature = "postgres")]
            Error::Postgres(_) => true,
            #[cfg(feature = "kafka")]
            Error::Kafka(e) => e.is_retriable(),
            #[cfg(feature = "sql")]
            Error::Sql(_) => false,
        }
    }

    /// The runtime error that fails operator `operator`'s subtask with this
    /// error (its message after `context`), marked non-retriable when
    /// [`is_retriable`](Self::is_retriable) says so.
    pub(crate) fn into_operator_failure(
        self,
        operator: &str,
        subtask: floe_actors::ids::SubtaskIndex,
        context: &str,
    ) -> floe_actors::Error {
        let retriable = self.is_retriable();
        let e =
            floe_actors::Error::operator(operator.to_string(), subtask, format!("{context}{self}"));
        if retriable { e } else { e.non_retriable() }
    }

    /// This error as a runtime error, keeping whether it is retriable.
    pub(crate) fn into_runtime(self) -> floe_actors::Error {
        match self {
            Error::Runtime(r) => r,
            other if other.is_retriable() => floe_actors::Error::Runtime(other.to_string()),
            other => floe_actors::Error::Runtime(other.to_string()).non_retriable(),
        }
    }

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

    /// The overflow of `key`'s keyed sum: `sum + add` leaves `field_type`.
    pub fn sum_overflow<K: serde::Serialize>(
        key: &K,
        field_type: &'static str,
        sum: String,
        add: String,
    ) -> Self {
        Error::SumOverflow {
            key: describe_key(key),
            field_type,
            sum,
            add,
        }
    }

    /// The failure to encode or decode `what`, keeping the codec's error.
    pub(crate) fn encoding(
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error::Encoding {
            what: what.into(),
            source: Box::new(source),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::ErrorKind;

    fn io(kind: ErrorKind) -> Error {
        Error::io("cannot write", "out.txt", std::io::Error::from(kind))
    }

    #[test]
    fn what_repeats_on_every_attempt_is_not_retriable() {
        for kind in [
            ErrorKind::PermissionDenied,
            ErrorKind::InvalidData,
            ErrorKind::NotFound,
        ] {
            assert!(!io(kind).is_retriable(), "{kind:?}");
        }
        let bad = Error::BadRecord {
            line: 3,
            message: "expected 3 fields".into(),
        };
        assert!(!bad.is_retriable());
        assert!(!Error::Config("x".into()).is_retriable());
        // Marked once it becomes a runtime failure, message unchanged.
        let e = bad.into_operator_failure("Parse", floe_actors::ids::SubtaskIndex(1), "");
        assert!(!e.is_retriable());
        assert!(
            e.to_string()
                .ends_with("bad record at line 3: expected 3 fields")
        );
    }

    #[test]
    fn a_full_disk_and_passing_failures_are_retriable() {
        // ENOSPC: space may be freed; the restart strategy bounds the tries.
        let full = Error::io(
            "cannot write",
            "out.txt",
            std::io::Error::from_raw_os_error(28),
        );
        assert!(full.is_retriable(), "{full}");
        assert!(io(ErrorKind::Interrupted).is_retriable());
        assert!(Error::User("flaky".into()).is_retriable());
        let e = Error::User("flaky".into()).into_operator_failure(
            "Map",
            floe_actors::ids::SubtaskIndex(0),
            "",
        );
        assert!(e.is_retriable());
    }

    /// The first error of type `T` on `e`'s chain of sources.
    fn cause<'a, T: std::error::Error + 'static>(
        e: &'a (dyn std::error::Error + 'static),
    ) -> Option<&'a T> {
        std::iter::successors(Some(e), |e| e.source()).find_map(|e| e.downcast_ref::<T>())
    }

    #[test]
    fn errors_keep_their_sources() {
        // A user's own error comes back out of `Error::User` as it was.
        #[derive(Debug, thiserror::Error)]
        #[error("quota exceeded")]
        struct Quota;
        let e = Error::User(Box::new(Quota));
        assert_eq!(e.to_string(), "quota exceeded");
        let Error::User(inner) = &e else {
            unreachable!()
        };
        assert!(inner.downcast_ref::<Quota>().is_some());
        assert!(e.is_retriable());

        // A codec's error is the source of `Encoding`, which no restart mends.
        let bad = postcard::from_bytes::<String>(&[0xff]).unwrap_err();
        let e = Error::encoding("decode state", bad);
        assert!(cause::<postcard::Error>(&e).is_some(), "{e}");
        assert!(e.to_string().starts_with("cannot decode state: "), "{e}");
        assert!(!e.is_retriable());

        // A failed commit keeps the sink's error and is retriable as it is.
        let commit = |source: Error| Error::Commit {
            txn: "t1".into(),
            checkpoint: 3,
            source: Box::new(source),
        };
        let e = commit(io(ErrorKind::Interrupted));
        assert!(cause::<std::io::Error>(&e).is_some());
        assert!(e.is_retriable());
        assert!(
            e.to_string().starts_with(
                "cannot commit transaction t1 of checkpoint 3: cannot write 'out.txt'"
            ),
            "{e}"
        );
        assert!(!commit(io(ErrorKind::PermissionDenied)).is_retriable());
    }

    #[test]
    fn a_graph_the_plan_refuses_keeps_the_plan_error() {
        let e = crate::StreamExecutionEnvironment::new()
            .execute()
            .expect_err("a job without operators is refused");
        let plan = cause::<crate::plan::PlanError>(&e).unwrap_or_else(|| panic!("{e:?}"));
        assert!(matches!(plan, crate::plan::PlanError::Empty), "{plan:?}");
        assert_eq!(e.to_string(), format!("invalid configuration: {plan}"));
        assert!(!e.is_retriable());
    }

    #[test]
    fn invalid_runtime_settings_keep_the_runtime_error() {
        let env = crate::StreamExecutionEnvironment::new();
        let mut config = env.config();
        config.runtime.batch_size = 0;
        env.set_config(config);
        env.from_generator(10, |i| i).collect();
        let e = env.execute().expect_err("batch size 0 is refused");
        let runtime = cause::<floe_actors::Error>(&e).unwrap_or_else(|| panic!("{e:?}"));
        assert!(
            matches!(runtime, floe_actors::Error::InvalidJob(_)),
            "{runtime:?}"
        );
        assert_eq!(e.to_string(), format!("invalid configuration: {runtime}"));
    }

    #[test]
    fn a_sink_that_could_not_be_created_keeps_its_error() {
        use crate::operators::Operator;
        let mut op = crate::connectors::async_sink::FallibleOp::<
            crate::connectors::async_sink::AsyncSinkOp<u64>,
        >::new(Err(io(ErrorKind::PermissionDenied)));
        let first = op
            .notify_checkpoint_complete(floe_actors::ids::CheckpointId(1))
            .expect_err("the creation error");
        let source = cause::<std::io::Error>(&first).unwrap_or_else(|| panic!("{first:?}"));
        assert_eq!(source.kind(), ErrorKind::PermissionDenied);
        let want = format!("invalid configuration: {}", io(ErrorKind::PermissionDenied));
        assert_eq!(first.to_string(), want);
        // Later calls repeat the message.
        let again = op
            .notify_checkpoint_complete(floe_actors::ids::CheckpointId(2))
            .expect_err("the creation error again");
        assert_eq!(again.to_string(), want);
    }

    #[test]
    fn a_state_file_that_cannot_be_created_keeps_the_io_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("missing").join("s.redb");
        let Err(e) = crate::state::RedbStateBackend::<u64>::open("Sum", 128, 0..128, &path) else {
            panic!("a state file in a missing directory");
        };
        let io = cause::<std::io::Error>(&e).unwrap_or_else(|| panic!("{e:?}"));
        assert_eq!(io.kind(), ErrorKind::NotFound);
        let e = Error::from(e);
        assert!(cause::<std::io::Error>(&e).is_some(), "{e:?}");
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_sink_errors_keep_the_connector_error() {
        use crate::connectors::postgres::{
            PostgresError, PostgresSink, PostgresSinkConfig, WriteMode,
        };
        let config = PostgresSinkConfig::new(
            "postgres://localhost/db",
            "bad table",
            &["k", "v"],
            WriteMode::Append,
        );
        let Err(e) = PostgresSink::<(String, i64)>::new(config) else {
            panic!("'bad table' is not an identifier");
        };
        let pg = cause::<PostgresError>(&e).unwrap_or_else(|| panic!("{e:?}"));
        assert!(
            matches!(pg, PostgresError::BadIdentifier(t) if t == "bad table"),
            "{pg:?}"
        );
        assert_eq!(e.to_string(), pg.to_string());
        assert!(e.is_retriable());
    }
}
