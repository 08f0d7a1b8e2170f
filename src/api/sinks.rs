//! Sinks as methods of the API: [`DataStream::sink`] (at-least-once, a
//! [`SinkFunction`]) and [`DataStream::sink_exactly_once`] (a
//! [`TwoPhaseCommitSink`]), each returning a [`DataStreamSink`], and the
//! conveniences built on them.
//!
//! The connectors define what a sink is and how its calls run; adding one
//! to a job is the API's business, so the connectors do not depend on the
//! API (`tests/module_layering.rs`).

use super::datastream::{DataStream, NodeCtxView};
use crate::connectors::async_sink::{
    AsyncSinkOp, ChannelSink, DEFAULT_CAPACITY, FallibleOp, FuturesSink,
};
use crate::connectors::collect::Collected;
use crate::connectors::file_sink::FileSink;
use crate::connectors::print::PrintSink;
use crate::connectors::two_phase::{
    AsyncTwoPhaseCommitSinkOp, TwoPhaseCommitSink, TwoPhaseCommitSinkOp,
};
use crate::operators::sink::{SinkContext, SinkFunction, SinkOp};
use std::fmt::Display;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The sink operator a stream was written to: name it, give it a stable
/// id, set its parallelism (as Flink's `DataStreamSink`).
pub struct DataStreamSink {
    stream: DataStream<()>,
}

impl DataStreamSink {
    /// Names the sink operator.
    pub fn name(self, name: &str) -> Self {
        DataStreamSink {
            stream: self.stream.name(name),
        }
    }

    /// Sets the sink's stable id: checkpoints and savepoints match its
    /// state (e.g. a two-phase sink's pending transactions) by it.
    pub fn uid(self, uid: &str) -> Self {
        DataStreamSink {
            stream: self.stream.uid(uid),
        }
    }

    /// Sets the sink's parallelism.
    pub fn set_parallelism(self, parallelism: usize) -> Self {
        DataStreamSink {
            stream: self.stream.set_parallelism(parallelism),
        }
    }

    /// Keeps the sink out of any chain.
    pub fn disable_chaining(self) -> Self {
        DataStreamSink {
            stream: self.stream.disable_chaining(),
        }
    }

    /// Limits the sink to `records_per_second` records per second over all
    /// its subtasks (see [`DataStream::set_input_rate`]).
    pub fn set_input_rate(self, records_per_second: f64) -> Self {
        DataStreamSink {
            stream: self.stream.set_input_rate(records_per_second),
        }
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

impl<T: Clone + Send + 'static> DataStream<T> {
    /// Writes the stream to `sink` (at-least-once: a failure replays what
    /// came after the last checkpoint), in an operator named `name`. One
    /// instance is cloned per subtask. A sink with
    /// [`AWAITS`](SinkFunction::AWAITS) runs as a task on the subtask's
    /// arbiter, with a bounded queue; any other on the subtask's thread.
    pub fn sink<S>(&self, name: &str, sink: S) -> DataStreamSink
    where
        S: SinkFunction<T> + Clone,
    {
        let template = Arc::new(Mutex::new(sink));
        let stream = if S::AWAITS {
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
        } else {
            self.transform(name, move |view| {
                let (sink, ctx) = for_subtask(&template, view);
                SinkOp::new(sink, ctx)
            })
        };
        DataStreamSink { stream }
    }

    /// Writes the stream to a two-phase-commit `sink` (exactly-once: records
    /// become visible when the checkpoint after them completes, or at the
    /// end of the input), in an operator named `name`. One instance is
    /// cloned per subtask. A sink with
    /// [`AWAITS`](TwoPhaseCommitSink::AWAITS) runs as a writer and a
    /// committer task on the subtask's arbiter; any other on the subtask's
    /// thread (see [`two_phase`](crate::connectors::two_phase)).
    pub fn sink_exactly_once<S>(&self, name: &str, sink: S) -> DataStreamSink
    where
        S: TwoPhaseCommitSink<T> + Clone,
    {
        let template = Arc::new(Mutex::new(sink));
        let stream = if S::AWAITS {
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
        } else {
            self.transform(name, move |view| {
                let (sink, ctx) = for_subtask(&template, view);
                TwoPhaseCommitSinkOp::new(sink, ctx)
                    .commit_on_final_checkpoint(view.final_checkpoint)
            })
        };
        DataStreamSink {
            stream: stream.transactional(),
        }
    }

    /// Writes the stream into a bounded tokio channel (see [`ChannelSink`]).
    pub fn to_channel(&self, name: &str, sender: tokio::sync::mpsc::Sender<T>) -> DataStreamSink {
        self.sink(name, ChannelSink(sender))
    }

    /// Writes the stream into a `futures::Sink` (see [`FuturesSink`]).
    pub fn to_futures_sink<Si>(&self, name: &str, sink: Si) -> DataStreamSink
    where
        Si: futures::Sink<T> + Send + Unpin + 'static,
        Si::Error: std::error::Error + Send + Sync + 'static,
    {
        self.sink(name, FuturesSink::new(sink))
    }

    /// Collects the stream into memory; read it after the job ends.
    pub fn collect(&self) -> Collected<T> {
        let c = Collected::new();
        let _ = self.sink("Collect Sink", c.sink());
        c
    }

    /// Writes `T: Display` lines to a file (a directory of `part-N` files when
    /// the sink runs in parallel).
    pub fn write_as_text(&self, path: impl Into<PathBuf>) -> DataStreamSink
    where
        T: Display,
    {
        self.sink("Text File Sink", FileSink::new(path))
    }

    /// Prints every record on stdout.
    pub fn print(&self) -> DataStreamSink
    where
        T: Display,
    {
        self.sink("Print Sink", PrintSink::default())
    }
}
