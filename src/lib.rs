//! floe: an embeddable, actor-model stream processor with the semantics of
//! Apache Flink's DataStream API.
//!
//! A job is a graph of operators built with [`StreamExecutionEnvironment`],
//! [`DataStream`] and [`KeyedStream`]. At execution, operators connected by
//! forward edges of equal parallelism are fused into chains; each parallel
//! instance of a chain (a *subtask*) runs as one actix actor. Subtasks exchange
//! *batches* of records over channels with credit-based flow control, so a slow
//! operator slows its sources and memory stays bounded. The runtime lives in the
//! `floe-actors` crate; this crate holds the API, operators and connectors.
//! Keyed process functions keep per-key [`state`] (value, list, map, reducing,
//! aggregating), partitioned into key groups and held by a state backend.
//!
//! # Features
//! - `cli` (default): the `floe` binary and what only it needs (argument
//!   parsing, progress bars, the allocator, log output). A library user
//!   writes `floe = { version = "0.1", default-features = false }` and
//!   compiles the engine alone.
//! - `http` (implied by `cli`): [`http`], an axum router serving `/metrics`,
//!   `/status`, the jobs, cancel and savepoint, for a service to mount in its
//!   own app. See `docs/embedding.md`.
//! - `sql` (implied by `cli`): [`sql`], Flink SQL statements planned onto
//!   floe's operators. See `docs/sql.md`.
//!
//! # Examples
//! ```
//! use floe::StreamExecutionEnvironment;
//!
//! let env = StreamExecutionEnvironment::new();
//! let counts = env
//!     .from_collection(vec!["to be or not to be".to_string()])
//!     .flat_map(|line: String| floe::tokenize(line))
//!     .map(|w| (w, 1u64))
//!     .key_by_field(|t| &t.0)
//!     .sum(|t| &mut t.1)
//!     .collect();
//! env.execute().unwrap();
//! let mut finals = std::collections::HashMap::new();
//! for (w, c) in counts.take() {
//!     finals.insert(w, c); // the last update per key is its final count
//! }
//! assert_eq!(finals["to"], 2);
//! assert_eq!(finals["or"], 1);
//! ```
#![warn(missing_docs)]

pub mod api;
pub mod checkpoint;
pub mod config;
pub mod connectors;
pub mod error;
pub mod failover;
#[cfg(feature = "http")]
pub mod http;
pub mod operators;
pub(crate) mod plan;
pub mod runtime;
#[cfg(feature = "sql")]
pub mod sql;
pub mod state;
#[cfg(feature = "testing")]
pub mod testing;
pub mod text;
pub mod time;
pub mod window;

pub use api::{
    DataStream, DataStreamSink, FallbackEvent, JobEnd, JobEvent, JobHandle, JobResult,
    JobStatusSnapshot, KeyedStream, RestartEvent, SkippedCheckpoint, StatusReporter,
    StreamExecutionEnvironment, WindowedStream,
};
pub use checkpoint::{CheckpointConfig, CheckpointError, CheckpointStats, CheckpointingMode};
pub use config::{Config, RestoreMode};
pub use error::{Error, Result};
// The runtime's types a program names (in results, errors, sources and
// metrics), so that it needs no direct dependency on `floe-actors`.
pub use floe_actors::Error as RuntimeError;
pub use floe_actors::element::{Batch, Record, Timestamp};
pub use floe_actors::ids::{CheckpointId, OperatorId, SubtaskIndex, VertexId};
pub use floe_actors::metrics::{OperatorSummary, StateSize};
pub use floe_actors::supervisor::{JobOutcome, JobStatus};
pub use operators::OutputTag;
pub use state::StateError;
pub use text::tokenize;

/// The `tracing` target of the lines a retry or a recovery decision writes
/// (a commit retried, a former attempt's session ended, a restored
/// transaction found already ended). The `floe` binary shows them by
/// default (`error,floe::recovery=warn`), so that nothing is retried in
/// silence; a service that installs its own subscriber can match the target.
pub const RECOVERY_LOG_TARGET: &str = "floe::recovery";

// The Rust examples of the README and the guides in docs/, compiled (and
// run, unless marked `no_run`) by `cargo test --doc` so that they follow
// the API. Each Markdown file is the documentation of an item that exists
// only when doc tests are collected.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/checkpointing.md")]
pub struct CheckpointingDoctests;

#[cfg(all(doctest, feature = "http"))]
#[doc = include_str!("../docs/embedding.md")]
pub struct EmbeddingDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/fault-tolerance.md")]
pub struct FaultToleranceDoctests;

#[cfg(all(doctest, feature = "kafka"))]
#[doc = include_str!("../docs/kafka.md")]
pub struct KafkaDoctests;

#[cfg(all(doctest, feature = "sql"))]
#[doc = include_str!("../docs/sql.md")]
pub struct SqlDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/state.md")]
pub struct StateDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/time-and-windows.md")]
pub struct TimeAndWindowsDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/user-guide.md")]
pub struct UserGuideDoctests;
