//! Publication of a job's counters to the `metrics` crate facade, with the
//! description of every series.

use super::registry::JobMetrics;
use crate::element::{MAX_WATERMARK, MIN_WATERMARK, Timestamp};

impl JobMetrics {
    /// Copies every counter into the `metrics` crate facade (whatever recorder
    /// the program installed; a no-op without one) and starts a new sampling
    /// round. Called periodically by the supervisor and once when the job
    /// ends; never on the data path.
    pub fn publish(&self) {
        // HELP text goes to whatever recorder is installed now (a program
        // may install one after the first publication); a recorder keeps
        // the first description, so repeating costs a lookup per metric.
        describe_metrics();
        self.start_sampling_round();
        let job = self.job.clone();
        for o in self.operator_subtasks() {
            let labels = [
                ("job", job.clone()),
                ("operator", o.name),
                ("subtask", o.subtask.to_string()),
            ];
            metrics::counter!("floe_records_in_total", &labels).absolute(o.records_in);
            metrics::counter!("floe_records_out_total", &labels).absolute(o.records_out);
            if o.late_records > 0 {
                metrics::counter!("floe_late_records_total", &labels).absolute(o.late_records);
            }
            if o.late_records_dropped > 0 {
                metrics::counter!("floe_late_records_dropped_total", &labels)
                    .absolute(o.late_records_dropped);
            }
            if let Some(st) = o.state {
                metrics::gauge!("floe_state_entries", &labels).set(st.entries as f64);
                metrics::gauge!("floe_state_bytes", &labels).set(st.bytes as f64);
            }
        }
        let now_ms = crate::element::now_ms();
        for s in self.subtask_samples() {
            let labels = [
                ("job", job.clone()),
                ("operator", s.name.clone()),
                ("subtask", s.subtask.to_string()),
            ];
            // Cumulative seconds, published as gauges: the facade's
            // counters hold integers only.
            metrics::gauge!("floe_backpressured_seconds", &labels).set(ns_to_s(s.backpressured_ns));
            metrics::gauge!("floe_idle_seconds", &labels).set(ns_to_s(s.idle_ns));
            metrics::gauge!("floe_lifetime_seconds", &labels).set(ns_to_s(s.lifetime_ns));
            // No sentinel: the watermark series appear with the first
            // watermark, and keep the last one once the input ended.
            if let Some(wm) = live_watermark_s(s.watermark) {
                metrics::gauge!("floe_watermark_timestamp_seconds", &labels).set(wm);
            }
            if let Some(lag) = watermark_lag_ms(s.watermark, now_ms) {
                metrics::gauge!("floe_watermark_lag_seconds", &labels).set(lag as f64 / 1e3);
            }
            for (c, i) in s.inputs.iter().enumerate() {
                let labels = [
                    ("job", job.clone()),
                    ("operator", s.name.clone()),
                    ("subtask", s.subtask.to_string()),
                    ("channel", c.to_string()),
                ];
                metrics::gauge!("floe_input_queued_batches", &labels).set(i.queued as f64);
                metrics::gauge!("floe_input_queued_batches_max", &labels).set(i.max_queued as f64);
                if let Some(wm) = live_watermark_s(i.watermark) {
                    metrics::gauge!("floe_input_watermark_timestamp_seconds", &labels).set(wm);
                }
                metrics::gauge!("floe_input_idle", &labels).set(if i.idle { 1.0 } else { 0.0 });
            }
            for (c, (q, m)) in s.outputs.iter().enumerate() {
                let labels = [
                    ("job", job.clone()),
                    ("operator", s.name.clone()),
                    ("subtask", s.subtask.to_string()),
                    ("channel", c.to_string()),
                ];
                metrics::gauge!("floe_output_queued_batches", &labels).set(*q as f64);
                metrics::gauge!("floe_output_queued_batches_max", &labels).set(*m as f64);
            }
        }
    }
}

/// Nanoseconds as seconds.
fn ns_to_s(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// A watermark (ms) as seconds since the epoch, `None` for the sentinels
/// before the first watermark and after the end of input.
fn live_watermark_s(wm: Timestamp) -> Option<f64> {
    (wm != MIN_WATERMARK && wm != MAX_WATERMARK).then(|| wm as f64 / 1e3)
}

/// Gives every metric floe publishes its unit and HELP text in the
/// installed recorder (see `docs/operations.md`). [`JobMetrics::publish`]
/// calls it; a program that installs a recorder may call it at once.
pub fn describe_metrics() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        "floe_records_in_total",
        Unit::Count,
        "Records that entered the operator subtask."
    );
    describe_counter!(
        "floe_records_out_total",
        Unit::Count,
        "Records the operator subtask emitted on its main output."
    );
    describe_counter!(
        "floe_late_records_total",
        Unit::Count,
        "Records that reached a window operator after every window they belong to had closed."
    );
    describe_counter!(
        "floe_late_records_dropped_total",
        Unit::Count,
        "Late records dropped because no late side output was set."
    );
    describe_gauge!(
        "floe_state_entries",
        Unit::Count,
        "Entries of the operator subtask's state (sampled)."
    );
    describe_gauge!(
        "floe_state_bytes",
        Unit::Bytes,
        "The state backend's estimate of the operator subtask's state size (sampled)."
    );
    describe_gauge!(
        "floe_backpressured_seconds",
        Unit::Seconds,
        "Cumulative seconds the subtask could not take input because an output queue was full."
    );
    describe_gauge!(
        "floe_idle_seconds",
        Unit::Seconds,
        "Cumulative seconds the subtask waited with no input queued."
    );
    describe_gauge!(
        "floe_lifetime_seconds",
        Unit::Seconds,
        "Seconds from the job's start to now or to the subtask's end."
    );
    describe_gauge!(
        "floe_watermark_timestamp_seconds",
        Unit::Seconds,
        "The subtask's event-time watermark, in seconds since the Unix epoch (absent before the first watermark)."
    );
    describe_gauge!(
        "floe_watermark_lag_seconds",
        Unit::Seconds,
        "Processing time minus the subtask's watermark, when published."
    );
    describe_gauge!(
        "floe_input_watermark_timestamp_seconds",
        Unit::Seconds,
        "The input channel's watermark, in seconds since the Unix epoch (absent before the first watermark)."
    );
    describe_gauge!(
        "floe_input_idle",
        "1 while the input channel is marked idle."
    );
    describe_gauge!(
        "floe_input_queued_batches",
        Unit::Count,
        "Record batches received on the input channel, not yet processed."
    );
    describe_gauge!(
        "floe_input_queued_batches_max",
        Unit::Count,
        "Most record batches ever queued on the input channel."
    );
    describe_gauge!(
        "floe_output_queued_batches",
        Unit::Count,
        "Record batches waiting for credit on the output channel."
    );
    describe_gauge!(
        "floe_output_queued_batches_max",
        Unit::Count,
        "Most record batches ever waiting for credit on the output channel."
    );
    describe_counter!(
        "floe_checkpoints_completed_total",
        Unit::Count,
        "Checkpoints completed."
    );
    describe_counter!(
        "floe_checkpoints_failed_total",
        Unit::Count,
        "Checkpoints that failed (declined, expired, not written)."
    );
    describe_counter!(
        "floe_checkpoints_aborted_total",
        Unit::Count,
        "Checkpoints abandoned without counting as failures."
    );
    describe_counter!(
        "floe_savepoints_completed_total",
        Unit::Count,
        "Savepoints completed."
    );
    describe_counter!(
        "floe_savepoints_failed_total",
        Unit::Count,
        "Savepoints that failed."
    );
    describe_counter!(
        "floe_savepoints_aborted_total",
        Unit::Count,
        "Savepoints abandoned."
    );
    describe_histogram!(
        "floe_checkpoint_duration_seconds",
        Unit::Seconds,
        "Checkpoint trigger to completion."
    );
    describe_histogram!(
        "floe_checkpoint_alignment_seconds",
        Unit::Seconds,
        "A checkpoint's longest barrier alignment over subtasks."
    );
    describe_histogram!(
        "floe_checkpoint_sync_seconds",
        Unit::Seconds,
        "A checkpoint's longest synchronous part over subtasks."
    );
    describe_histogram!(
        "floe_checkpoint_async_seconds",
        Unit::Seconds,
        "A checkpoint's longest asynchronous part over subtasks."
    );
    describe_histogram!(
        "floe_checkpoint_state_bytes",
        Unit::Bytes,
        "Operator state bytes a checkpoint wrote."
    );
    describe_gauge!(
        "floe_last_checkpoint_id",
        "Id of the newest completed checkpoint."
    );
    describe_gauge!(
        "floe_last_checkpoint_duration_seconds",
        Unit::Seconds,
        "The newest completed checkpoint's trigger to completion."
    );
    describe_gauge!(
        "floe_last_checkpoint_alignment_seconds",
        Unit::Seconds,
        "The newest completed checkpoint's longest alignment."
    );
    describe_gauge!(
        "floe_last_checkpoint_sync_seconds",
        Unit::Seconds,
        "The newest completed checkpoint's longest synchronous part."
    );
    describe_gauge!(
        "floe_last_checkpoint_async_seconds",
        Unit::Seconds,
        "The newest completed checkpoint's longest asynchronous part."
    );
    describe_gauge!(
        "floe_last_checkpoint_state_bytes",
        Unit::Bytes,
        "Operator state bytes the newest completed checkpoint wrote."
    );
    describe_gauge!(
        "floe_last_checkpoint_channel_state_bytes",
        Unit::Bytes,
        "Channel state (unaligned in-flight data) bytes of the newest completed checkpoint."
    );
    describe_gauge!(
        "floe_last_failed_checkpoint_id",
        "Id of the newest failed checkpoint."
    );
}

/// How far (ms) a watermark lags behind processing time `now_ms`: `None`
/// before the first watermark and once the input ended.
pub fn watermark_lag_ms(watermark: Timestamp, now_ms: Timestamp) -> Option<i64> {
    (watermark != MIN_WATERMARK && watermark != MAX_WATERMARK)
        .then(|| now_ms.saturating_sub(watermark))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watermark_lag_is_none_without_a_live_watermark() {
        assert_eq!(watermark_lag_ms(MIN_WATERMARK, 100), None);
        assert_eq!(watermark_lag_ms(MAX_WATERMARK, 100), None);
        assert_eq!(watermark_lag_ms(40, 100), Some(60));
    }
}
