//! Operators: the per-record logic of a job, run inside a subtask's chain.
//!
//! An [`Operator`] handles a whole batch per call and writes its results into an
//! [`Output`]; its hooks for watermarks and end of input default to no-ops, so a
//! stateless operator implements one method. [`node::OperatorNode`] adapts an
//! operator to the runtime's chain interface: it counts records, runs the
//! operator under `catch_unwind`, and names the operator in every error.

pub mod basic;
pub mod keyed;
pub mod node;
pub mod process;
pub mod sink;

use crate::Result;
use floe_actors::element::{Batch, Record, Timestamp};
use std::any::Any;
use std::marker::PhantomData;

/// A stream transformation from `IN` records to `OUT` records.
pub trait Operator<IN, OUT>: Send + 'static {
    /// Processes one batch, writing results to `out`.
    fn process_batch(&mut self, batch: Batch<IN>, out: &mut Output<'_, OUT>) -> Result<()>;

    /// Event time advanced; the watermark itself is forwarded after this returns.
    fn on_watermark(&mut self, _watermark: Timestamp, _out: &mut Output<'_, OUT>) -> Result<()> {
        Ok(())
    }

    /// The input is complete; emit what is still held.
    fn on_end_of_input(&mut self, _out: &mut Output<'_, OUT>) -> Result<()> {
        Ok(())
    }

    /// A processing-time tick (ms since the epoch); arrives between batches
    /// and periodically while no records come.
    fn on_processing_time(&mut self, _now_ms: Timestamp, _out: &mut Output<'_, OUT>) -> Result<()> {
        Ok(())
    }

    /// Whether input watermarks pass through this operator (the final one
    /// always does). Watermark generators return false.
    fn forwards_watermarks(&self) -> bool {
        true
    }
}

/// A named side output of type `T`.
///
/// # Examples
/// ```
/// let late: floe::OutputTag<String> = floe::OutputTag::new("late");
/// assert_eq!(late.name(), "late");
/// ```
pub struct OutputTag<T> {
    id: u64,
    name: String,
    _type: PhantomData<fn() -> T>,
}

impl<T> Clone for OutputTag<T> {
    fn clone(&self) -> Self {
        OutputTag {
            id: self.id,
            name: self.name.clone(),
            _type: PhantomData,
        }
    }
}

impl<T> OutputTag<T> {
    /// A tag; tags with equal names denote the same side output.
    pub fn new(name: impl Into<String>) -> Self {
        let name = name.into();
        OutputTag {
            id: floe_actors::keygroup::stable_hash(name.as_str()),
            name,
            _type: PhantomData,
        }
    }

    /// The tag's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }
}

/// Where an operator writes its results: the main output and side outputs.
pub struct Output<'a, T> {
    pub(crate) records: &'a mut Vec<Record<T>>,
    pub(crate) sides: &'a mut [Box<dyn node::SidePort>],
    /// Watermarks and status changes emitted between records:
    /// (number of records before it, marker).
    pub(crate) watermarks: &'a mut Vec<(usize, Marker)>,
}

/// A watermark or watermark-status change emitted between records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Marker {
    Watermark(Timestamp),
    Status(floe_actors::element::WatermarkStatus),
}

impl<T> Output<'_, T> {
    /// Emits a record with the given timestamp.
    #[inline]
    pub fn emit(&mut self, record: Record<T>) {
        self.records.push(record);
    }

    /// Emits all records of `records`. When nothing was emitted yet, the output
    /// vector is collected from the iterator, which reuses the input batch's
    /// allocation in place when the record types have the same layout.
    #[inline]
    pub fn extend_or_reuse(&mut self, records: impl Iterator<Item = Record<T>>) {
        if self.records.is_empty() {
            *self.records = records.collect();
        } else {
            self.records.extend(records);
        }
    }

    /// Emits a watermark after the records emitted so far.
    #[inline]
    pub fn emit_watermark(&mut self, watermark: Timestamp) {
        self.watermarks
            .push((self.records.len(), Marker::Watermark(watermark)));
    }

    /// Marks the stream idle or active again, after the records emitted so far.
    #[inline]
    pub fn emit_watermark_status(&mut self, status: floe_actors::element::WatermarkStatus) {
        self.watermarks
            .push((self.records.len(), Marker::Status(status)));
    }

    /// Emits a value without timestamp.
    #[inline]
    pub fn collect(&mut self, value: T) {
        self.records.push(Record::new(value));
    }

    /// Emits a value with a timestamp (or none).
    #[inline]
    pub fn collect_with_timestamp(&mut self, value: T, timestamp: Option<Timestamp>) {
        self.records.push(Record { value, timestamp });
    }

    /// Emits a value to the side output `tag`. Dropped when nothing consumes it.
    pub fn side<X: 'static>(&mut self, tag: &OutputTag<X>, value: X, timestamp: Option<Timestamp>) {
        for port in self.sides.iter_mut() {
            if port.tag() == tag.id() {
                if let Some(buf) = port.buffer().downcast_mut::<Vec<Record<X>>>() {
                    buf.push(Record { value, timestamp });
                }
                return;
            }
        }
    }
}

/// Type-erased access used by [`Output::side`].
pub(crate) fn as_any<T: 'static>(v: &mut Vec<Record<T>>) -> &mut dyn Any {
    v
}
