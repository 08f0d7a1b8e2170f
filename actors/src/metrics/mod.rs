//! Counters a running job exposes: records in and out per operator subtask,
//! batches queued per input and output channel, time backpressured and idle,
//! and the watermarks of every input channel and subtask.
//!
//! Counters are updated once per batch (or per watermark, or per change of
//! state) with relaxed atomics, never per record and never under a lock, so
//! reading them from a job handle or publishing them never slows the data path.
//! [`JobMetrics::publish`] copies them into the `metrics` crate facade, so any
//! exporter a program installs sees them, every series labelled with the job's
//! name; see `docs/operations.md` for names.
//!
//! Operator gauges that cost more than an atomic add (the size of an
//! operator's state) are sampled, not maintained: each publication starts a
//! new sampling round, and an operator subtask samples once when it next
//! sees a new round ([`OperatorMetrics::sample_due`]), on its own thread.

use crate::element::MIN_WATERMARK;
use crate::ids::{OperatorId, SubtaskIndex};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};

mod publish;
mod queue;
mod registry;

pub use publish::{describe_metrics, watermark_lag_ms};
pub use queue::{QueueMetrics, WaitState};
pub use registry::{
    FailureRecord, InputSample, JobMetrics, OperatorSubtaskSample, OperatorSummary, SubtaskSample,
};

/// Counters of one operator subtask.
#[derive(Debug)]
pub struct OperatorMetrics {
    /// The operator.
    pub operator: OperatorId,
    /// Its name.
    pub name: String,
    /// The subtask.
    pub subtask: SubtaskIndex,
    /// Records that entered the operator.
    pub records_in: AtomicU64,
    /// Records the operator emitted (main output).
    pub records_out: AtomicU64,
    /// Records that arrived after every window they belong to had closed
    /// (window operators; sampled).
    pub late_records: AtomicU64,
    /// Late records dropped because no late side output was set (sampled).
    pub late_records_dropped: AtomicU64,
    /// Entries of the operator's state (sampled; see [`StateSize`]).
    pub state_entries: AtomicU64,
    /// Bytes of the operator's state (sampled; see [`StateSize`]).
    pub state_bytes: AtomicU64,
    /// Whether the operator reported a state size at all.
    pub has_state: AtomicBool,
    /// The sampling round last sampled.
    sampled: AtomicU64,
    /// The job's current sampling round.
    round: Arc<AtomicU64>,
}

/// The size of an operator subtask's state, as its backend reports it.
///
/// `entries` counts keys holding a value (per state, summed over states; a
/// window operator counts (key, window) pairs). `bytes` is the backend's
/// cheap estimate: for the heap, the in-memory size of keys and values
/// without what they point to; for redb, the database file's length.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateSize {
    /// Entries.
    pub entries: u64,
    /// Bytes (an estimate; see above).
    pub bytes: u64,
}

impl std::ops::Add for StateSize {
    type Output = StateSize;
    fn add(self, o: StateSize) -> StateSize {
        StateSize {
            entries: self.entries + o.entries,
            bytes: self.bytes + o.bytes,
        }
    }
}

/// What an operator reports when sampled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OperatorSample {
    /// Its state's size, if it keeps state.
    pub state: Option<StateSize>,
    /// Late records so far (window operators).
    pub late_records: u64,
    /// Late records dropped so far.
    pub late_records_dropped: u64,
}

impl OperatorMetrics {
    /// True when a sampling round started since this subtask last sampled:
    /// one relaxed load, cheap enough for every batch.
    #[inline]
    pub fn sample_due(&self) -> bool {
        self.round.load(Ordering::Relaxed) != self.sampled.load(Ordering::Relaxed)
    }

    /// Stores a sample taken by the operator's subtask.
    pub fn record_sample(&self, s: OperatorSample) {
        self.sampled
            .store(self.round.load(Ordering::Relaxed), Ordering::Relaxed);
        if let Some(st) = s.state {
            self.state_entries.store(st.entries, Ordering::Relaxed);
            self.state_bytes.store(st.bytes, Ordering::Relaxed);
            self.has_state.store(true, Ordering::Relaxed);
        }
        self.late_records.store(s.late_records, Ordering::Relaxed);
        self.late_records_dropped
            .store(s.late_records_dropped, Ordering::Relaxed);
    }

    /// Adds `n` records in.
    #[inline]
    pub fn add_in(&self, n: usize) {
        self.records_in.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Adds `n` records out.
    #[inline]
    pub fn add_out(&self, n: usize) {
        self.records_out.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Batches queued on one channel: now and at most.
#[derive(Debug, Default)]
pub struct ChannelQueue {
    /// Record batches queued now.
    pub queued: AtomicUsize,
    /// Most record batches ever queued.
    pub max_queued: AtomicUsize,
}

impl ChannelQueue {
    /// Records the queue's length after a change.
    #[inline]
    pub fn set(&self, n: usize) {
        self.queued.store(n, Ordering::Relaxed);
        if n > self.max_queued.load(Ordering::Relaxed) {
            self.max_queued.fetch_max(n, Ordering::Relaxed);
        }
    }
}

/// One input channel of a subtask: its queue, watermark and idleness.
#[derive(Debug)]
pub struct InputChannelMetrics {
    /// Record batches queued, unprocessed.
    pub queue: ChannelQueue,
    /// The channel's watermark (`i64::MIN` before the first).
    pub watermark: AtomicI64,
    /// True while the channel is marked idle.
    pub idle: AtomicBool,
    /// True once the channel delivered end-of-input.
    pub ended: AtomicBool,
}

impl Default for InputChannelMetrics {
    fn default() -> Self {
        InputChannelMetrics {
            queue: ChannelQueue::default(),
            watermark: AtomicI64::new(MIN_WATERMARK),
            idle: AtomicBool::new(false),
            ended: AtomicBool::new(false),
        }
    }
}

/// One output channel of a subtask (per record writer and receiver).
#[derive(Debug)]
pub struct OutputChannelMetrics {
    /// Index of the channel among the subtask's output channels.
    pub index: usize,
    /// Batches queued without credit.
    pub queue: ChannelQueue,
}

/// A span of time a subtask spends in one state, accumulated in nanoseconds.
///
/// `since` holds the start of the running span (nanoseconds after the job's
/// epoch, plus one; zero when no span runs), so a reader can add the part of a
/// span that has not ended yet.
#[derive(Debug, Default)]
pub struct TimeSpent {
    total_ns: AtomicU64,
    since: AtomicU64,
}

impl TimeSpent {
    /// Total nanoseconds, including a running span, as of `now_ns`.
    pub fn total_ns(&self, now_ns: u64) -> u64 {
        let total = self.total_ns.load(Ordering::Relaxed);
        match self.since.load(Ordering::Relaxed) {
            0 => total,
            s => total + now_ns.saturating_sub(s - 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_queue_keeps_current_and_max() {
        let q = ChannelQueue::default();
        for n in [1, 3, 2, 0] {
            q.set(n);
        }
        assert_eq!(q.queued.load(Ordering::Relaxed), 0);
        assert_eq!(q.max_queued.load(Ordering::Relaxed), 3);
    }
}
