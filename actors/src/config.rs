//! Runtime settings every subtask reads: batch size, buffer timeout, credits.
//!
//! Memory of a running job is bounded by these numbers: a channel holds at most
//! `credits` batches at its receiver and `output_queue_capacity` batches (plus
//! what one input batch produces) at its sender, each of at most `batch_size`
//! records. On top of that each subtask has one budget for all its channels,
//! `network_buffers` batches (like Flink's network buffer pool): half of it is
//! its input gate's, half its record writers'. When a subtask has many
//! channels (high parallelism) the credits per input channel and the batch
//! size of its senders shrink so the whole gate and all writers stay within
//! it; every channel keeps at least one credit, so a barrier queued behind
//! data always gets through. With few channels (up to about four inputs and
//! six outputs at the defaults) nothing changes.

use std::time::Duration;

/// Flow-control and batching settings of a job.
///
/// Start from [`RuntimeConfig::default`] and set fields: the struct is
/// `#[non_exhaustive]`, so settings can be added without breaking code
/// written that way.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RuntimeConfig {
    /// Records per batch; a batch is sent when full.
    pub batch_size: usize,
    /// A partly filled batch is sent after this long; zero sends after every step.
    pub buffer_timeout: Duration,
    /// Batches a receiver grants each channel (its input queue bound).
    pub credits: u32,
    /// The budget of one subtask's network channels, in batches of
    /// `batch_size` records: half for the input gate (credits × batch size
    /// over all input channels), half for the record writers (partly filled
    /// plus queued batches over all output channels).
    pub network_buffers: usize,
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
            network_buffers: 64,
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
        if self.network_buffers == 0 {
            return bad("network buffers");
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

    /// The records a subtask's channels may hold in all.
    pub fn buffer_budget(&self) -> usize {
        self.network_buffers.saturating_mul(self.batch_size)
    }

    fn input_share(&self) -> usize {
        (self.buffer_budget() / 2).max(1)
    }

    fn output_share(&self) -> usize {
        (self.buffer_budget() - self.buffer_budget() / 2).max(1)
    }

    /// Credits a receiver with `inputs` input channels grants each of them:
    /// `credits`, fewer when full batches on every channel would exceed the
    /// gate's half of the budget, never fewer than one (a channel without
    /// credit could hold a barrier back forever).
    pub fn input_credits(&self, inputs: usize) -> u32 {
        let batches = self.input_share() / (inputs.max(1) * self.batch_size);
        batches.clamp(1, self.credits.max(1) as usize) as u32
    }

    /// The largest batch a sender may send to a receiver with `inputs` input
    /// channels: `batch_size`, less when even one credit per channel of full
    /// batches exceeds the gate's half of the budget.
    pub fn input_batch_limit(&self, inputs: usize) -> usize {
        let inputs = inputs.max(1);
        let credits = self.input_credits(inputs) as usize;
        (self.input_share() / (inputs * credits)).clamp(1, self.batch_size)
    }

    /// The batch size of the record writers of a subtask with `outputs`
    /// output channels in all: `batch_size`, less when a partly filled batch
    /// plus a full queue on every channel would exceed the writers' half of
    /// the budget.
    pub fn output_batch_size(&self, outputs: usize) -> usize {
        let per_channel = outputs.max(1) * (self.output_queue_capacity + 1);
        (self.output_share() / per_channel).clamp(1, self.batch_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn few_channels_keep_the_configured_credits_and_batch_size() {
        let c = RuntimeConfig::default();
        for n in 1..=4 {
            assert_eq!(c.input_credits(n), c.credits, "{n} inputs");
            assert_eq!(c.input_batch_limit(n), c.batch_size, "{n} inputs");
            assert_eq!(c.output_batch_size(n), c.batch_size, "{n} outputs");
        }
    }

    #[test]
    fn any_channel_count_fits_the_budget_with_at_least_one_credit() {
        for (batch_size, buffers, credits) in [(1024, 64, 8), (64, 32, 8), (16, 4, 2), (1, 1, 1)] {
            let c = RuntimeConfig {
                batch_size,
                network_buffers: buffers,
                credits,
                ..RuntimeConfig::default()
            };
            let half = c.buffer_budget() / 2;
            for n in 1..=2048usize {
                let credits = c.input_credits(n) as usize;
                let limit = c.input_batch_limit(n);
                assert!(credits >= 1 && limit >= 1, "n={n}");
                // One record per channel is the floor; above it the gate's
                // half holds.
                if n <= half {
                    assert!(n * credits * limit <= half, "n={n}: gate over its half");
                    let out = c.output_batch_size(n);
                    let per = n * (c.output_queue_capacity + 1);
                    if per <= c.buffer_budget() - half {
                        assert!(per * out <= c.buffer_budget() - half, "n={n}: writers over");
                    }
                }
            }
        }
    }
}
