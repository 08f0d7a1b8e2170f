//! The source side of a chain: what a source function is
//! ([`SourceFunction`]) and what its subtask tells it ([`SourceContext`]),
//! as [`sink`](super::sink) holds the sink traits. The connectors implement
//! it (`crate::connectors`, which re-exports these); the
//! [`SourceNode`](super::node::SourceNode) drives one in a source subtask.

use crate::Result;
use floe_actors::element::Record;
use floe_actors::ids::{CheckpointId, SubtaskIndex};
use std::time::Duration;

/// What a source reports after filling a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourcePoll {
    /// More records are available now.
    Ready,
    /// Call again after this long.
    Wait(Duration),
    /// Nothing now; the source arranged to wake its subtask when there is
    /// (an async source whose future is pending, see [`async_source`](crate::connectors::async_source)).
    Parked,
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
///
/// For exactly-once a source must be replayable: [`snapshot_state`]
/// (Self::snapshot_state) returns its position (one entry per split it
/// reads), and [`restore_state`](Self::restore_state) rewinds to it. On a
/// restore at another parallelism the entries of all subtasks are dealt out
/// evenly, as Flink does with source splits; a subtask may get none and
/// then has nothing to read.
pub trait SourceFunction<T>: Send + 'static {
    /// Appends at most `max` records to `out`.
    fn poll_batch(&mut self, max: usize, out: &mut Vec<Record<T>>) -> Result<SourcePoll>;

    /// The source's position, taken between two batches at a checkpoint.
    /// The default (no entries) marks a source that cannot rewind.
    fn snapshot_state(&mut self) -> Result<Vec<Vec<u8>>> {
        Ok(Vec::new())
    }

    /// Rewinds to positions [`snapshot_state`](Self::snapshot_state) took
    /// (this subtask's share of them); called once before the first poll.
    fn restore_state(&mut self, _entries: Vec<Vec<u8>>) -> Result<()> {
        Ok(())
    }

    /// Records the source read but did not emit since the last call (bad
    /// input it skipped): counted as emitted by the source's metrics and
    /// by `--savepoint-at-records`, so that a source's record count is its
    /// input's. Default: none.
    fn take_skipped(&mut self) -> u64 {
        0
    }

    /// Entries every subtask receives whole on a restore (union list
    /// state), taken at checkpoint `checkpoint` right after
    /// [`snapshot_state`](Self::snapshot_state): e.g. the splits all
    /// subtasks read, so none is assigned twice. Default: none.
    fn snapshot_union_state(&mut self, _checkpoint: CheckpointId) -> Result<Vec<Vec<u8>>> {
        Ok(Vec::new())
    }

    /// Every subtask's [`snapshot_union_state`](Self::snapshot_union_state)
    /// entries; called once before [`restore_state`](Self::restore_state).
    fn restore_union_state(&mut self, _entries: Vec<Vec<u8>>) -> Result<()> {
        Ok(())
    }

    /// A checkpoint completed.
    fn notify_checkpoint_complete(&mut self, _checkpoint: CheckpointId) -> Result<()> {
        Ok(())
    }

    /// The source's own watermark, for a source that generates them (per
    /// Kafka partition, say); asked after each batch, forwarded when it
    /// advanced. Default: none (watermarks come from an assigner after
    /// the source).
    fn watermark(&mut self) -> Option<floe_actors::element::Timestamp> {
        None
    }
}
