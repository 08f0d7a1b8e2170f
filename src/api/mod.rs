//! The DataStream API: an environment, streams, keyed streams, job handles.
//!
//! A program builds a stream graph through [`StreamExecutionEnvironment`] and
//! the methods of [`DataStream`] and [`KeyedStream`], then runs it with
//! `execute` (blocking) or `execute_async` (returns a [`JobHandle`]).
//! [`DataStream::broadcast_state`] and `connect` build Flink's broadcast
//! state pattern ([`KeyedBroadcastConnectedStream`]).

mod connected;
mod datastream;
pub(crate) mod deploy;
mod environment;
mod events;
pub(crate) mod graph;
mod job;
mod keyed;
pub(crate) mod manager;
pub mod status;
mod windowed;

pub use connected::{BroadcastConnectedStream, BroadcastStream, KeyedBroadcastConnectedStream};
pub use datastream::DataStream;
pub use environment::StreamExecutionEnvironment;
pub use events::{FallbackEvent, JobEvent, RestartEvent, SkippedCheckpoint};
pub use job::{JobEnd, JobHandle, JobResult};
pub use keyed::KeyedStream;
pub use manager::FailoverStats;
pub use status::{JobStatusSnapshot, StatusReporter};
pub use windowed::WindowedStream;
