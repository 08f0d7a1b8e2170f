//! The queue, watermark and time counters of one subtask, and the wait
//! states its time is split into.

use super::registry::{InputSample, SubtaskSample};
use super::{ChannelQueue, InputChannelMetrics, OutputChannelMetrics, TimeSpent};
use crate::element::{MIN_WATERMARK, Timestamp};
use crate::ids::{SubtaskIndex, VertexId};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Queue, watermark and time counters of one subtask.
#[derive(Debug)]
pub struct QueueMetrics {
    /// The vertex (chain) the subtask runs.
    pub vertex: VertexId,
    /// The chain's name.
    pub name: String,
    /// The subtask.
    pub subtask: SubtaskIndex,
    /// Most record batches ever queued on one input channel.
    pub max_input_batches: AtomicUsize,
    /// Most record batches ever queued on one output channel without credit.
    pub max_output_batches: AtomicUsize,
    /// Records the subtask's channels hold now: queued at its input gate,
    /// partly filled or queued in its record writers (signed: a writer
    /// settles what it took in after what it sent on).
    pub buffered_records: AtomicI64,
    /// Most records the subtask's channels held at once (see
    /// [`RuntimeConfig::buffer_budget`](crate::RuntimeConfig::buffer_budget)).
    pub max_buffered_records: AtomicUsize,
    /// Per input channel, by channel id.
    pub inputs: Vec<InputChannelMetrics>,
    /// Per output channel, registered as record writers are built.
    outputs: Mutex<Vec<Arc<OutputChannelMetrics>>>,
    /// The subtask's watermark (minimum over its active inputs).
    pub watermark: AtomicI64,
    /// Time spent unable to take input because an output queue was full.
    pub backpressured: TimeSpent,
    /// Time spent waiting with no input.
    pub idle: TimeSpent,
    /// When the subtask ended (nanoseconds after the epoch plus one; 0 = running).
    ended_ns: AtomicU64,
    epoch: Instant,
}

/// What a subtask is doing, for the time counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitState {
    /// Processing, or ready to.
    Busy,
    /// Stopped because an output queue is full.
    Backpressured,
    /// Waiting for input.
    Idle,
}

impl QueueMetrics {
    /// Counters of a subtask with `inputs` input channels, timed from `epoch`.
    pub fn new(
        vertex: VertexId,
        name: &str,
        subtask: SubtaskIndex,
        inputs: usize,
        epoch: Instant,
    ) -> Self {
        QueueMetrics {
            vertex,
            name: name.to_string(),
            subtask,
            max_input_batches: AtomicUsize::new(0),
            max_output_batches: AtomicUsize::new(0),
            buffered_records: AtomicI64::new(0),
            max_buffered_records: AtomicUsize::new(0),
            inputs: (0..inputs)
                .map(|_| InputChannelMetrics::default())
                .collect(),
            outputs: Mutex::new(Vec::new()),
            watermark: AtomicI64::new(MIN_WATERMARK),
            backpressured: TimeSpent::default(),
            idle: TimeSpent::default(),
            ended_ns: AtomicU64::new(0),
            epoch,
        }
    }

    /// Nanoseconds since the job's epoch.
    pub fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Registers one output channel (when a record writer is built).
    pub fn output_channel(&self) -> Arc<OutputChannelMetrics> {
        let mut outs = self.outputs.lock().expect("metrics lock poisoned");
        let m = Arc::new(OutputChannelMetrics {
            index: outs.len(),
            queue: ChannelQueue::default(),
        });
        outs.push(m.clone());
        m
    }

    /// The registered output channels.
    pub fn output_channels(&self) -> Vec<Arc<OutputChannelMetrics>> {
        self.outputs.lock().expect("metrics lock poisoned").clone()
    }

    /// Moves the subtask from state `from` to `to` (called on changes only).
    pub fn transition(&self, from: WaitState, to: WaitState) {
        if from == to {
            return;
        }
        let now = self.now_ns();
        let span = |t: &TimeSpent| match t.since.swap(0, Ordering::Relaxed) {
            0 => {}
            s => {
                t.total_ns
                    .fetch_add(now.saturating_sub(s - 1), Ordering::Relaxed);
            }
        };
        match from {
            WaitState::Backpressured => span(&self.backpressured),
            WaitState::Idle => span(&self.idle),
            WaitState::Busy => {}
        }
        match to {
            WaitState::Backpressured => self.backpressured.since.store(now + 1, Ordering::Relaxed),
            WaitState::Idle => self.idle.since.store(now + 1, Ordering::Relaxed),
            WaitState::Busy => {}
        }
    }

    /// Marks the subtask ended (finished, failed or canceled).
    pub fn end(&self, state: WaitState) {
        self.transition(state, WaitState::Busy);
        let _ = self.ended_ns.compare_exchange(
            0,
            self.now_ns() + 1,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// Nanoseconds the subtask has lived (up to its end, if it ended).
    pub fn lifetime_ns(&self) -> u64 {
        match self.ended_ns.load(Ordering::Relaxed) {
            0 => self.now_ns(),
            e => e - 1,
        }
    }

    /// Records a new watermark of input channel `c`.
    #[inline]
    pub fn input_watermark(&self, c: usize, wm: Timestamp) {
        if let Some(ch) = self.inputs.get(c) {
            ch.watermark.store(wm, Ordering::Relaxed);
        }
    }

    /// Records the length of input channel `c`'s queue.
    #[inline]
    pub fn input_queued(&self, c: usize, n: usize) {
        if let Some(ch) = self.inputs.get(c) {
            ch.queue.set(n);
        }
        self.observe_input(n);
    }

    /// A snapshot of this subtask's counters.
    pub fn sample(&self) -> SubtaskSample {
        let now = self.lifetime_ns();
        SubtaskSample {
            vertex: self.vertex,
            name: self.name.clone(),
            subtask: self.subtask,
            lifetime_ns: now,
            backpressured_ns: self.backpressured.total_ns(now),
            idle_ns: self.idle.total_ns(now),
            watermark: self.watermark.load(Ordering::Relaxed),
            inputs: self
                .inputs
                .iter()
                .map(|c| InputSample {
                    queued: c.queue.queued.load(Ordering::Relaxed),
                    max_queued: c.queue.max_queued.load(Ordering::Relaxed),
                    watermark: c.watermark.load(Ordering::Relaxed),
                    idle: c.idle.load(Ordering::Relaxed),
                    ended: c.ended.load(Ordering::Relaxed),
                })
                .collect(),
            outputs: self
                .output_channels()
                .iter()
                .map(|c| {
                    (
                        c.queue.queued.load(Ordering::Relaxed),
                        c.queue.max_queued.load(Ordering::Relaxed),
                    )
                })
                .collect(),
        }
    }
    /// Records an input queue length.
    #[inline]
    pub fn observe_input(&self, n: usize) {
        if n > self.max_input_batches.load(Ordering::Relaxed) {
            self.max_input_batches.fetch_max(n, Ordering::Relaxed);
        }
    }

    /// `n` records entered the subtask's network buffers (once per batch).
    #[inline]
    pub fn hold_records(&self, n: usize) {
        let now = self.buffered_records.fetch_add(n as i64, Ordering::Relaxed) + n as i64;
        let now = now.max(0) as usize;
        if now > self.max_buffered_records.load(Ordering::Relaxed) {
            self.max_buffered_records.fetch_max(now, Ordering::Relaxed);
        }
    }

    /// `n` records left the subtask's network buffers (once per batch).
    #[inline]
    pub fn release_records(&self, n: usize) {
        self.buffered_records.fetch_sub(n as i64, Ordering::Relaxed);
    }

    /// Records an output queue length.
    #[inline]
    pub fn observe_output(&self, n: usize) {
        if n > self.max_output_batches.load(Ordering::Relaxed) {
            self.max_output_batches.fetch_max(n, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subtask() -> QueueMetrics {
        QueueMetrics::new(VertexId(0), "v", SubtaskIndex(0), 2, Instant::now())
    }

    #[test]
    fn spans_accumulate_per_state_and_stop_at_the_end() {
        let q = subtask();
        q.transition(WaitState::Busy, WaitState::Backpressured);
        assert_ne!(q.backpressured.since.load(Ordering::Relaxed), 0);
        q.transition(WaitState::Backpressured, WaitState::Idle);
        // The backpressured span closed: its total no longer grows.
        let bp = q.backpressured.total_ns(u64::MAX);
        assert_eq!(bp, q.backpressured.total_ns(u64::MAX));
        assert_eq!(q.backpressured.since.load(Ordering::Relaxed), 0);
        // The idle span runs: a reader sees it grow with the reference time.
        let now = q.now_ns();
        assert!(q.idle.total_ns(now + 1_000) >= 1_000);
        q.end(WaitState::Idle);
        let life = q.lifetime_ns();
        assert_eq!(life, q.lifetime_ns(), "an ended subtask's life is fixed");
        let s = q.sample();
        assert!(s.backpressured_ns + s.idle_ns <= life);
        assert_eq!(s.idle_ns, q.idle.total_ns(u64::MAX));
        assert_eq!(s.inputs.len(), 2);
    }

    #[test]
    fn same_state_transition_is_free() {
        let q = subtask();
        q.transition(WaitState::Busy, WaitState::Busy);
        assert_eq!(q.backpressured.total_ns(u64::MAX), 0);
        assert_eq!(q.idle.total_ns(u64::MAX), 0);
    }
}
