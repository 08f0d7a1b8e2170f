//! Runtime settings every subtask reads: batch size, buffer timeout, credits.
//!
//! Memory of a running job is bounded by these numbers: a channel holds at most
//! `credits` batches at its receiver and `output_queue_capacity` batches (plus
//! what one input batch produces) at its sender, each of at most `batch_size`
//! records.

use std::time::Duration;

/// Flow-control and batching settings of a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// Records per batch; a batch is sent when full.
    pub batch_size: usize,
    /// A partly filled batch is sent after this long; zero sends after every step.
    pub buffer_timeout: Duration,
    /// Batches a receiver grants each channel (its input queue bound).
    pub credits: u32,
    /// Batches a sender keeps per channel while it has no credit before it
    /// stops processing its own input.
    pub output_queue_capacity: usize,
    /// Input batches (or source batches) a subtask handles per actix message
    /// before it re-schedules itself, so that control messages interleave.
    pub batches_per_step: usize,
    /// Number of arbiters (threads) the job's subtasks are spread over.
    pub arbiters: usize,
    /// How often a subtask without a source ticks its chain with the
    /// processing time (periodic watermarks, idleness, processing-time timers).
    pub tick_interval: Duration,
    /// Place subtask `i` of vertex `v` on arbiter `(v + i) mod arbiters` instead
    /// of `i mod arbiters`: connected subtasks then sit on different threads.
    pub spread_vertices: bool,
    /// How often the supervisor copies the job's counters into the `metrics`
    /// crate facade (they are also copied once when the job ends); zero
    /// publishes only at the end.
    pub metrics_interval: Duration,
    /// Deterministic execution (set by the deployment, see floe's
    /// `testing::chaos`): the job's actors share one thread, no wall-clock
    /// timer runs (no buffer-timeout flush, no periodic tick: a subtask
    /// ticks its chain after each step instead), and the asynchronous part
    /// of a snapshot runs inline.
    pub deterministic: bool,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            batch_size: 1024,
            buffer_timeout: Duration::from_millis(100),
            credits: 8,
            output_queue_capacity: 4,
            batches_per_step: 8,
            arbiters: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            tick_interval: Duration::from_millis(50),
            spread_vertices: false,
            metrics_interval: Duration::from_secs(1),
            deterministic: false,
        }
    }
}

impl RuntimeConfig {
    /// Checks that every setting is usable.
    pub fn validate(&self) -> crate::Result<()> {
        let bad = |what: &str| {
            Err(crate::Error::InvalidJob(format!(
                "{what} must be at least 1"
            )))
        };
        if self.batch_size == 0 {
            return bad("batch size");
        }
        if self.credits == 0 {
            return bad("credits per channel");
        }
        if self.output_queue_capacity == 0 {
            return bad("output queue capacity");
        }
        if self.batches_per_step == 0 {
            return bad("batches per step");
        }
        if self.arbiters == 0 {
            return bad("arbiters");
        }
        Ok(())
    }
}
