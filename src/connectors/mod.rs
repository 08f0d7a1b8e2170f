//! Sources and sinks.
//!
//! A [`SourceFunction`] fills a batch per call and says whether more follows, must
//! wait (rate limit) or is exhausted. [`SourceNode`] drives one inside a source
//! subtask: it counts records, runs the function under `catch_unwind`, and at
//! exhaustion sends the final watermark and end-of-input down the chain.
//! Sinks implement [`SinkFunction`](crate::operators::sink::SinkFunction).

pub mod collect;
pub mod collection;
pub mod file_sink;
pub mod generator;
pub mod print;
pub mod text_file;

use crate::Result;
use crate::operators::node::NodeInfo;
use floe_actors::chain::ChainInput;
use floe_actors::element::{MAX_WATERMARK, Record};
use floe_actors::ids::SubtaskIndex;
use floe_actors::source::{SourceDriver, SourceStep};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

/// What a source reports after filling a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourcePoll {
    /// More records are available now.
    Ready,
    /// Call again after this long.
    Wait(Duration),
    /// No more records.
    Finished,
}

/// What a source subtask knows of itself when it is created.
#[derive(Clone, Copy, Debug)]
pub struct SourceContext {
    /// This subtask.
    pub subtask: SubtaskIndex,
    /// Number of source subtasks.
    pub parallelism: usize,
    /// The job's seed.
    pub seed: u64,
}

impl SourceContext {
    /// The half-open slice `[start, end)` of `0..count` this subtask owns.
    pub fn split(&self, count: u64) -> (u64, u64) {
        let (i, p) = (self.subtask.0 as u128, self.parallelism as u128);
        let c = count as u128;
        ((c * i / p) as u64, (c * (i + 1) / p) as u64)
    }
}

/// A source of records of type `T`, one instance per source subtask.
pub trait SourceFunction<T>: Send + 'static {
    /// Appends at most `max` records to `out`.
    fn poll_batch(&mut self, max: usize, out: &mut Vec<Record<T>>) -> Result<SourcePoll>;
}

/// Drives a source function and its chain inside a source subtask.
pub struct SourceNode<T> {
    source: Box<dyn SourceFunction<T>>,
    next: Box<dyn ChainInput<T>>,
    info: NodeInfo,
    batch_size: usize,
}

impl<T: 'static> SourceNode<T> {
    /// A driver for `source`, feeding `next`.
    pub fn new(
        source: Box<dyn SourceFunction<T>>,
        next: Box<dyn ChainInput<T>>,
        info: NodeInfo,
        batch_size: usize,
    ) -> Self {
        SourceNode {
            source,
            next,
            info,
            batch_size,
        }
    }
}

impl<T: 'static> SourceDriver for SourceNode<T> {
    fn step(&mut self) -> floe_actors::Result<SourceStep> {
        let mut batch = Vec::with_capacity(self.batch_size);
        let max = self.batch_size;
        let source = &mut self.source;
        let r = catch_unwind(AssertUnwindSafe(|| source.poll_batch(max, &mut batch)));
        let poll = self.info.check(r)?;
        if !batch.is_empty() {
            self.info.metrics.add_out(batch.len());
            self.next.process(batch)?;
        }
        // Periodic watermarks and idleness advance even when nothing came.
        self.next.processing_time(floe_actors::element::now_ms())?;
        Ok(match poll {
            SourcePoll::Ready => SourceStep::Emitted,
            SourcePoll::Wait(d) => SourceStep::Wait(d),
            SourcePoll::Finished => {
                self.next.watermark(MAX_WATERMARK)?;
                self.next.end_of_input()?;
                SourceStep::Finished
            }
        })
    }
}
