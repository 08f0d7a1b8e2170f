//! The async bridges as methods of the API: async sources on the
//! environment (the sinks are in `sinks.rs`).
//!
//! The connectors (`crate::connectors::async_*`) define what a source or a
//! sink is and how its futures run on the subtask's arbiter; adding one to
//! a job is the API's business, so the connectors do not depend on the API
//! (`tests/module_layering.rs`).

use super::datastream::DataStream;
use super::environment::StreamExecutionEnvironment;
use crate::Result;
use crate::connectors::SourceContext;
use crate::connectors::async_source::{
    AsyncSource, AsyncSourceFunction, ChannelSource, StreamSource,
};
use futures::Stream;
use std::sync::{Arc, Mutex};

impl StreamExecutionEnvironment {
    /// Adds an [`AsyncSource`]: `create` makes one per subtask (and again
    /// for each restart), on the subtask's arbiter.
    pub fn add_async_source<T, S, F>(&self, name: &str, create: F) -> DataStream<T>
    where
        T: Clone + Send + 'static,
        S: AsyncSource<T>,
        F: Fn(&SourceContext) -> Result<S> + Send + Sync + 'static,
    {
        self.add_source(name, move |ctx| AsyncSourceFunction::new(create(ctx)?))
    }

    /// A stream of `T` read by a source of parallelism 1: `make` is called
    /// for every (re)start of the job and must return the stream to read
    /// (see [`StreamSource`] for what a restart means).
    pub fn from_stream<T, St, F>(&self, name: &str, make: F) -> DataStream<T>
    where
        T: Clone + Send + 'static,
        St: Stream<Item = T> + Send + Unpin + 'static,
        F: Fn() -> St + Send + Sync + 'static,
    {
        self.add_async_source(name, move |_ctx| Ok(StreamSource::new(make())))
            .set_parallelism(1)
    }

    /// The records of a bounded tokio channel, read by one source subtask
    /// (see [`ChannelSource`]); the stream ends when every sender is
    /// dropped.
    pub fn from_channel<T>(
        &self,
        name: &str,
        receiver: tokio::sync::mpsc::Receiver<T>,
    ) -> DataStream<T>
    where
        T: Clone + Send + 'static,
    {
        let slot = Arc::new(Mutex::new(Some(receiver)));
        self.add_async_source(name, move |_ctx| ChannelSource::take(&slot))
            .set_parallelism(1)
    }
}
