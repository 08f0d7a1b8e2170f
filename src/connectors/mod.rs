//! Sources and sinks.
//!
//! A [`SourceFunction`] fills a batch per call and says whether more follows, must
//! wait (rate limit) or is exhausted. [`SourceNode`] (in
//! `crate::operators::node`, beside the operators' nodes) drives one inside a
//! source subtask: it counts records, runs the function under `catch_unwind`,
//! and at exhaustion sends the final watermark and end-of-input down the
//! chain.
//!
//! Sinks implement one of two traits:
//! [`SinkFunction`](crate::operators::sink::SinkFunction) (at-least-once)
//! or [`two_phase::TwoPhaseCommitSink`] (exactly-once). Their methods are
//! `async fn`s. A sink whose calls finish before they return (memory, a
//! file, the Kafka connectors, whose flush and transaction steps block
//! the subtask's thread for at most the sink's request timeout) runs on
//! the subtask's thread; one that waits on I/O (the PostgreSQL sink,
//! feature `postgres`, [`async_sink::ChannelSink`],
//! [`async_sink::FuturesSink`]) sets `AWAITS` and runs as a task on the
//! subtask's arbiter with backpressure ([`async_sink`]).
//!
//! Sources: the Kafka source's reader, `kafka::KafkaSourceReader` (feature
//! `kafka`), is a [`SourceFunction`] that polls librdkafka without waiting
//! (librdkafka runs its own network threads);
//! [`async_source::AsyncSource`] has methods that `.await`, run on the
//! subtask's arbiter; [`async_source::StreamSource`] and
//! [`async_source::ChannelSource`] bridge `futures` streams and bounded
//! tokio channels.

pub mod async_sink;
pub mod async_source;
pub mod collect;
pub mod collection;
pub mod file_sink;
pub mod file_source;
pub mod generator;
#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "kafka")]
pub mod kafka_sink;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod print;
pub mod text_file;
pub mod transactional_file;
pub mod two_phase;

pub use crate::operators::node::SourceNode;
pub use crate::operators::source::{SourceContext, SourceFunction, SourcePoll};

use crate::Result;

/// postcard-encodes one source position entry.
pub(crate) fn encode_entry<S: serde::Serialize>(entry: &S) -> Result<Vec<u8>> {
    postcard::to_allocvec(entry).map_err(|e| crate::Error::encoding("encode source position", e))
}

/// Decodes one source position entry.
pub(crate) fn decode_entry<S: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<S> {
    postcard::from_bytes(bytes).map_err(|e| crate::Error::encoding("decode source position", e))
}
