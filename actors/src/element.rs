//! Stream elements: what a channel carries, in order.
//!
//! Records travel in batches (one actix envelope per batch, never per record);
//! watermarks, watermark status, barriers and end-of-input travel in-band, so
//! their order relative to records is the channel's order.

use crate::ids::CheckpointId;
use serde::{Deserialize, Serialize};

/// Event time in milliseconds since the epoch.
pub type Timestamp = i64;

/// The watermark that ends a stream: everything is complete.
pub const MAX_WATERMARK: Timestamp = i64::MAX;

/// The watermark before any watermark was seen.
pub const MIN_WATERMARK: Timestamp = i64::MIN;

thread_local! {
    /// The processing-time source of this thread, when one was installed.
    static THREAD_CLOCK: std::cell::RefCell<Option<Box<dyn Fn() -> Timestamp>>> =
        const { std::cell::RefCell::new(None) };
}

/// Makes [`now_ms`] on this thread read `clock` instead of the wall clock
/// (`None` restores the wall clock). Deterministic execution runs a whole
/// job on one thread and installs its harness-driven clock here, so barrier
/// timestamps, source ticks and processing-time timers follow it.
pub fn set_thread_clock(clock: Option<Box<dyn Fn() -> Timestamp>>) {
    THREAD_CLOCK.with(|c| *c.borrow_mut() = clock);
}

/// The time of the clock installed on this thread with
/// [`set_thread_clock`], if there is one.
pub fn thread_clock_ms() -> Option<Timestamp> {
    THREAD_CLOCK.with(|c| c.borrow().as_ref().map(|f| f()))
}

/// The processing time in milliseconds: the wall clock (since the epoch),
/// or the clock installed on this thread with [`set_thread_clock`].
pub fn now_ms() -> Timestamp {
    if let Some(t) = thread_clock_ms() {
        return t;
    }
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as Timestamp)
        .unwrap_or(0)
}

/// One record: a value and its optional event timestamp.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record<T> {
    /// The user value.
    pub value: T,
    /// Event time, when one was assigned.
    pub timestamp: Option<Timestamp>,
}

impl<T> Record<T> {
    /// A record without event timestamp.
    #[inline]
    pub fn new(value: T) -> Self {
        Record {
            value,
            timestamp: None,
        }
    }

    /// A record with an event timestamp.
    #[inline]
    pub fn with_timestamp(value: T, timestamp: Timestamp) -> Self {
        Record {
            value,
            timestamp: Some(timestamp),
        }
    }

    /// A record with the same timestamp and another value.
    #[inline]
    pub fn replace<U>(self, value: U) -> Record<U> {
        Record {
            value,
            timestamp: self.timestamp,
        }
    }
}

/// A batch of records: the unit of transfer between subtasks.
pub type Batch<T> = Vec<Record<T>>;

/// Whether a channel currently carries data (and so holds back watermarks).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WatermarkStatus {
    /// The channel carries data; its watermark counts.
    Active,
    /// The channel is idle; its watermark does not hold back the minimum.
    Idle,
}

/// How a subtask treats a checkpoint barrier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BarrierKind {
    /// Exactly-once with alignment.
    Aligned,
    /// Exactly-once, barrier overtakes in-flight data.
    Unaligned,
    /// No alignment; records after the barrier may be in the snapshot.
    AtLeastOnce,
    /// A user-triggered, self-contained savepoint (aligned).
    Savepoint,
}

/// A checkpoint barrier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Barrier {
    /// The checkpoint this barrier belongs to.
    pub checkpoint_id: CheckpointId,
    /// When the coordinator triggered the checkpoint (ms since the epoch).
    pub timestamp: Timestamp,
    /// Alignment mode.
    pub kind: BarrierKind,
}

/// One element of a channel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum StreamElement<T> {
    /// A batch of records.
    Records(Batch<T>),
    /// Event time has progressed to this timestamp.
    Watermark(Timestamp),
    /// The channel became idle or active.
    WatermarkStatus(WatermarkStatus),
    /// A checkpoint barrier.
    Barrier(Barrier),
    /// The (bounded) stream on this channel is complete.
    EndOfInput,
}

impl<T> StreamElement<T> {
    /// True for record batches, the only elements that take a credit.
    #[inline]
    pub fn is_records(&self) -> bool {
        matches!(self, StreamElement::Records(_))
    }
}
