//! The operator that assigns timestamps and generates watermarks, by a
//! [`WatermarkStrategy`] of `crate::time` (the strategy is time's; the
//! operator that applies it is an operator, so time does not depend on the
//! operators).

use super::{Operator, Output};
use crate::time::{WatermarkEmission, WatermarkGenerator, WatermarkStrategy};
use crate::{Error, Result};
use floe_actors::element::{Batch, MIN_WATERMARK, Timestamp, WatermarkStatus};
use std::time::Instant;

/// Sets record timestamps and emits watermarks; upstream watermarks are
/// dropped (except the final one), as in Flink.
pub struct TimestampsOp<T> {
    strategy: WatermarkStrategy<T>,
    max_timestamp: Timestamp,
    emitted: Timestamp,
    last_emit: Instant,
    /// Processing time (strategy clock) of the last record, for idleness.
    last_activity: Option<Timestamp>,
    idle: bool,
}

fn strategy_start<T>(strategy: &WatermarkStrategy<T>) -> Option<Timestamp> {
    strategy.idleness.map(|_| strategy.clock.now_ms())
}

impl<T> TimestampsOp<T> {
    /// An operator applying `strategy`.
    pub fn new(strategy: WatermarkStrategy<T>) -> Self {
        TimestampsOp {
            last_activity: strategy_start(&strategy),
            strategy,
            max_timestamp: MIN_WATERMARK,
            emitted: MIN_WATERMARK,
            last_emit: Instant::now(),
            idle: false,
        }
    }

    fn periodic(&mut self, out: &mut Output<'_, T>) {
        if let (WatermarkEmission::Periodic(every), WatermarkGenerator::BoundedOutOfOrderness(b)) =
            (self.strategy.emission, &self.strategy.generator)
            && self.last_emit.elapsed() >= every
        {
            self.last_emit = Instant::now();
            let wm = self.bounded_watermark(*b);
            self.emit(wm, out);
        }
    }

    fn bounded_watermark(&self, bound: i64) -> Timestamp {
        if self.max_timestamp == MIN_WATERMARK {
            MIN_WATERMARK
        } else {
            self.max_timestamp.saturating_sub(bound).saturating_sub(1)
        }
    }

    fn emit(&mut self, wm: Timestamp, out: &mut Output<'_, T>) {
        if wm > self.emitted {
            self.emitted = wm;
            out.emit_watermark(wm);
        }
    }
}

impl<T: Send + 'static> Operator<T, T> for TimestampsOp<T> {
    fn process_batch(&mut self, batch: Batch<T>, out: &mut Output<'_, T>) -> Result<()> {
        let per_record = self.strategy.emission == WatermarkEmission::PerRecord;
        if !batch.is_empty() && self.strategy.idleness.is_some() {
            self.last_activity = Some(self.strategy.clock.now_ms());
            if self.idle {
                self.idle = false;
                out.emit_watermark_status(WatermarkStatus::Active);
            }
        }
        out.records.reserve(batch.len());
        for mut r in batch {
            let ts = match &self.strategy.assigner {
                Some(f) => f(&r.value, r.timestamp),
                None => r.timestamp.ok_or_else(|| {
                    Error::User("record has no timestamp and no timestamp assigner is set".into())
                })?,
            };
            r.timestamp = Some(ts);
            if ts > self.max_timestamp {
                self.max_timestamp = ts;
            }
            let punctuation = match &self.strategy.generator {
                WatermarkGenerator::Punctuated(f) => f(&r.value, ts),
                WatermarkGenerator::BoundedOutOfOrderness(_) => None,
            };
            out.emit(r);
            if let Some(wm) = punctuation {
                self.emit(wm, out);
            } else if per_record
                && let WatermarkGenerator::BoundedOutOfOrderness(b) = self.strategy.generator
            {
                let wm = self.bounded_watermark(b);
                self.emit(wm, out);
            }
        }
        self.periodic(out);
        Ok(())
    }

    fn on_processing_time(&mut self, _now_ms: Timestamp, out: &mut Output<'_, T>) -> Result<()> {
        self.periodic(out);
        if let Some(timeout) = self.strategy.idleness {
            let now = self.strategy.clock.now_ms();
            let since = *self.last_activity.get_or_insert(now);
            if !self.idle && now.saturating_sub(since) >= timeout.as_millis() as i64 {
                self.idle = true;
                out.emit_watermark_status(WatermarkStatus::Idle);
            }
        }
        Ok(())
    }

    fn forwards_watermarks(&self) -> bool {
        false
    }

    fn snapshot_state(&mut self, _: &super::SnapshotContext) -> Result<super::StateCapture> {
        // The generator's progress travels with the source offset.
        let entry = super::keyed_snapshot::to_bytes(&(self.max_timestamp, self.emitted))?;
        Ok(super::StateCapture {
            split_list: vec![entry],
            ..Default::default()
        })
    }

    fn restore_state(&mut self, state: super::RestoredState) -> Result<()> {
        for e in &state.split_list {
            let (max, emitted): (Timestamp, Timestamp) = super::keyed_snapshot::from_bytes(e)?;
            self.max_timestamp = self.max_timestamp.max(max);
            self.emitted = self.emitted.max(emitted);
        }
        Ok(())
    }
}
