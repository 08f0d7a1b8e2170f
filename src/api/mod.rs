//! The DataStream API: an environment, streams, keyed streams, job handles.
//!
//! A program builds a stream graph through [`StreamExecutionEnvironment`] and
//! the methods of [`DataStream`] and [`KeyedStream`], then runs it with
//! `execute` (blocking) or `execute_async` (returns a [`JobHandle`]).
//! [`DataStream::broadcast_state`] and `connect` build Flink's broadcast
//! state pattern ([`KeyedBroadcastConnectedStream`]).

mod async_io;
mod connected;
mod datastream;
mod environment;
mod keyed;
mod sinks;
mod windowed;

pub use crate::runtime::FailoverStats;
pub use connected::{BroadcastConnectedStream, BroadcastStream, KeyedBroadcastConnectedStream};
pub use datastream::DataStream;
pub use environment::StreamExecutionEnvironment;
pub use keyed::KeyedStream;
pub use sinks::DataStreamSink;
// The job handle, its events and the status types live in the runtime (which
// makes them); these are the paths programs name.
pub use crate::runtime::status;
pub use crate::runtime::{
    FallbackEvent, JobEnd, JobEvent, JobHandle, JobResult, JobStatusSnapshot, RestartEvent,
    SkippedCheckpoint, StatusReporter,
};
pub use windowed::WindowedStream;
