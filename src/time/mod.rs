//! Event time: timestamp assigners and watermark strategies (applied by
//! [`TimestampsOp`](crate::operators::timestamps::TimestampsOp)), clocks, timers.
//!
//! A [`WatermarkStrategy`] says how each record gets its event timestamp and how
//! watermarks follow: bounded out-of-orderness (`max_seen - bound - 1`, Flink's
//! rule), monotonous (bound 0) or punctuated (a function decides per record).
//! Watermarks are emitted either periodically (every auto-watermark interval of
//! processing time, checked between batches) or after every record, which makes
//! results deterministic.

pub mod clock;
pub mod timers;

pub use clock::{Clock, ManualClock, SystemClock};
pub use timers::{TimeDomain, TimerService};

use floe_actors::element::Timestamp;
use std::sync::Arc;
use std::time::Duration;

/// Extracts an event timestamp from a record (and its previous timestamp).
pub type TimestampFn<T> = Arc<dyn Fn(&T, Option<Timestamp>) -> Timestamp + Send + Sync>;

/// Decides a watermark for a record (punctuated watermarks).
pub type PunctuationFn<T> = Arc<dyn Fn(&T, Timestamp) -> Option<Timestamp> + Send + Sync>;

/// When watermarks are emitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatermarkEmission {
    /// Every interval of processing time (checked between batches).
    Periodic(Duration),
    /// After every record that advances the watermark.
    PerRecord,
}

/// How watermarks are derived from records.
pub enum WatermarkGenerator<T> {
    /// `max timestamp seen - bound - 1`.
    BoundedOutOfOrderness(i64),
    /// A user function emits watermarks on some records.
    Punctuated(PunctuationFn<T>),
}

impl<T> Clone for WatermarkGenerator<T> {
    fn clone(&self) -> Self {
        match self {
            WatermarkGenerator::BoundedOutOfOrderness(b) => {
                WatermarkGenerator::BoundedOutOfOrderness(*b)
            }
            WatermarkGenerator::Punctuated(f) => WatermarkGenerator::Punctuated(f.clone()),
        }
    }
}

/// Timestamps and watermarks for a stream, as Flink's `WatermarkStrategy`.
///
/// # Examples
/// ```
/// use floe::time::WatermarkStrategy;
/// let s = WatermarkStrategy::<(String, i64)>::bounded_out_of_orderness(500)
///     .with_timestamp_assigner(|e, _| e.1)
///     .per_record();
/// # let _ = s;
/// ```
pub struct WatermarkStrategy<T> {
    pub(crate) generator: WatermarkGenerator<T>,
    pub(crate) assigner: Option<TimestampFn<T>>,
    pub(crate) emission: WatermarkEmission,
    pub(crate) idleness: Option<Duration>,
    pub(crate) clock: Arc<dyn Clock>,
}

impl<T> Clone for WatermarkStrategy<T> {
    fn clone(&self) -> Self {
        WatermarkStrategy {
            generator: self.generator.clone(),
            assigner: self.assigner.clone(),
            emission: self.emission,
            idleness: self.idleness,
            clock: self.clock.clone(),
        }
    }
}

/// Flink's default auto-watermark interval.
pub const DEFAULT_AUTO_WATERMARK_INTERVAL: Duration = Duration::from_millis(200);

impl<T> WatermarkStrategy<T> {
    /// Watermarks trail the largest timestamp seen by `bound_ms`.
    pub fn bounded_out_of_orderness(bound_ms: i64) -> Self {
        WatermarkStrategy {
            generator: WatermarkGenerator::BoundedOutOfOrderness(bound_ms.max(0)),
            assigner: None,
            emission: WatermarkEmission::Periodic(DEFAULT_AUTO_WATERMARK_INTERVAL),
            idleness: None,
            clock: Arc::new(SystemClock),
        }
    }

    /// Timestamps never decrease: the watermark is the largest timestamp - 1.
    pub fn monotonous_timestamps() -> Self {
        Self::bounded_out_of_orderness(0)
    }

    /// `f(record, timestamp)` returns a watermark to emit after that record.
    pub fn punctuated(
        f: impl Fn(&T, Timestamp) -> Option<Timestamp> + Send + Sync + 'static,
    ) -> Self {
        WatermarkStrategy {
            generator: WatermarkGenerator::Punctuated(Arc::new(f)),
            assigner: None,
            emission: WatermarkEmission::PerRecord,
            idleness: None,
            clock: Arc::new(SystemClock),
        }
    }

    /// Takes each record's timestamp from `f(record, previous timestamp)`.
    pub fn with_timestamp_assigner(
        mut self,
        f: impl Fn(&T, Option<Timestamp>) -> Timestamp + Send + Sync + 'static,
    ) -> Self {
        self.assigner = Some(Arc::new(f));
        self
    }

    /// Marks the stream idle after `timeout` of processing time without
    /// records, so it does not hold back the watermark downstream; the next
    /// record makes it active again.
    pub fn with_idleness(mut self, timeout: Duration) -> Self {
        self.idleness = Some(timeout);
        self
    }

    /// The processing-time clock used for idleness (tests use a `ManualClock`).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Emits the watermark after every record that advances it.
    pub fn per_record(mut self) -> Self {
        self.emission = WatermarkEmission::PerRecord;
        self
    }

    /// Emits the watermark every `interval` of processing time.
    pub fn periodic(mut self, interval: Duration) -> Self {
        self.emission = WatermarkEmission::Periodic(interval);
        self
    }
}
