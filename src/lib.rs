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
pub mod operators;
pub(crate) mod plan;
pub mod runtime;
pub mod state;
#[cfg(feature = "testing")]
pub mod testing;
pub mod text;
pub mod time;
pub mod window;

pub use api::{
    DataStream, FallbackEvent, JobEnd, JobEvent, JobHandle, JobResult, JobStatusSnapshot,
    KeyedStream, RestartEvent, SkippedCheckpoint, StatusReporter, StreamExecutionEnvironment,
    WindowedStream,
};
pub use config::{Config, RestoreMode};
pub use error::{Error, Result};
pub use floe_actors::element::{Record, Timestamp};
pub use floe_actors::supervisor::JobStatus;
pub use operators::OutputTag;
pub use text::tokenize;
