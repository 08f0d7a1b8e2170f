//! The async bridges as methods of the API: async sources on the
//! environment, async sinks (and the exactly-once two-phase variant) on a
//! stream.
//!
//! The connectors (`crate::connectors::async_*`) define what a source or a
//! sink is and how its futures run on the subtask's arbiter; adding one to
//! a job is the API's business, so the connectors do not depend on the API
//! (`tests/module_layering.rs`).

use super::datastream::{DataStream, NodeCtxView};
use super::environment::StreamExecutionEnvironment;
use crate::Result;
use crate::connectors::SourceContext;
use crate::connectors::async_sink::{
    AsyncSink, AsyncSinkOp, ChannelSink, DEFAULT_CAPACITY, FallibleOp, FuturesSink,
};
use crate::connectors::async_source::{
    AsyncSource, AsyncSourceFunction, ChannelSource, StreamSource,
};
use crate::connectors::two_phase::{AsyncTwoPhaseCommitSinkOp, TwoPhaseCommitSink};
use crate::operators::sink::SinkContext;
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

impl<T: Clone + Send + 'static> DataStream<T> {
    /// Writes the stream to an [`AsyncSink`] (at-least-once); one instance
    /// is cloned per subtask.
    pub fn add_async_sink<S>(&self, name: &str, sink: S) -> DataStream<()>
    where
        S: AsyncSink<T> + Clone,
    {
        let template = Arc::new(Mutex::new(sink));
        let op_name = name.to_string();
        self.transform(name, move |view| {
            let (sink, ctx) = for_subtask(&template, view);
            FallibleOp::new(AsyncSinkOp::new(
                sink,
                ctx,
                op_name.clone(),
                DEFAULT_CAPACITY,
            ))
        })
    }

    /// Writes the stream into a bounded tokio channel (see [`ChannelSink`]).
    pub fn to_channel(&self, name: &str, sender: tokio::sync::mpsc::Sender<T>) -> DataStream<()> {
        self.add_async_sink(name, ChannelSink(sender))
    }

    /// Writes the stream into a `futures::Sink` (see [`FuturesSink`]).
    pub fn to_futures_sink<Si>(&self, name: &str, sink: Si) -> DataStream<()>
    where
        Si: futures::Sink<T> + Send + Unpin + 'static,
        Si::Error: std::fmt::Display,
    {
        self.add_async_sink(name, FuturesSink::new(sink))
    }

    /// Writes the stream to a [`TwoPhaseCommitSink`] whose calls `.await`
    /// (exactly-once), run by a writer and a committer task
    /// ([`AsyncTwoPhaseCommitSinkOp`]): records become visible when the
    /// checkpoint after them completes, or at the end of the input. One
    /// sink instance is cloned per subtask.
    pub fn add_async_two_phase_sink<S>(&self, name: &str, sink: S) -> DataStream<()>
    where
        S: TwoPhaseCommitSink<T> + Clone,
    {
        let template = Arc::new(Mutex::new(sink));
        let op_name = name.to_string();
        self.transform(name, move |view| {
            let (sink, ctx) = for_subtask(&template, view);
            FallibleOp::new(AsyncTwoPhaseCommitSinkOp::new(
                sink,
                ctx,
                op_name.clone(),
                DEFAULT_CAPACITY,
                view.final_checkpoint,
            ))
        })
        .transactional()
    }
}

/// A subtask's own copy of a sink template, and its place in the operator.
fn for_subtask<S: Clone>(template: &Mutex<S>, view: &NodeCtxView) -> (S, SinkContext) {
    let sink = template.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let ctx = SinkContext {
        subtask: floe_actors::ids::SubtaskIndex(view.subtask as u32),
        parallelism: view.parallelism,
    };
    (sink, ctx)
}

#[cfg(feature = "postgres")]
impl<R> DataStream<R>
where
    R: crate::connectors::postgres::PostgresRow + Clone + Send + 'static,
{
    /// Writes the stream to PostgreSQL exactly-once (two-phase commit on
    /// checkpoints; at the end of the input without them); the operator is
    /// named `PostgreSQL <table>`.
    pub fn add_postgres_sink(
        &self,
        sink: crate::connectors::postgres::PostgresSink<R>,
    ) -> DataStream<()> {
        let name = sink.operator_name();
        self.add_async_two_phase_sink(&name, sink)
    }
}
