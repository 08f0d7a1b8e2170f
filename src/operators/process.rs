//! Process functions: the most general one-input operator.
//!
//! A process function sees one record at a time with its context: the record's
//! timestamp, the current watermark, the main output and side outputs (and, on
//! a keyed stream, the current key). Timers come with event time.

use super::{Operator, Output, OutputTag};
use crate::Result;
use floe_actors::element::{Batch, MIN_WATERMARK, Timestamp};

/// The context a process function gets with each record.
pub struct ProcessContext<'a, 'o, OUT, K = ()> {
    pub(crate) out: &'a mut Output<'o, OUT>,
    pub(crate) timestamp: Option<Timestamp>,
    pub(crate) watermark: Timestamp,
    pub(crate) key: Option<&'a K>,
}

impl<OUT, K> ProcessContext<'_, '_, OUT, K> {
    /// The current record's timestamp.
    pub fn timestamp(&self) -> Option<Timestamp> {
        self.timestamp
    }

    /// The operator's current watermark.
    pub fn current_watermark(&self) -> Timestamp {
        self.watermark
    }

    /// Emits a value with the current record's timestamp.
    pub fn collect(&mut self, value: OUT) {
        self.out.collect_with_timestamp(value, self.timestamp);
    }

    /// Emits a value with an explicit timestamp.
    pub fn collect_with_timestamp(&mut self, value: OUT, timestamp: Option<Timestamp>) {
        self.out.collect_with_timestamp(value, timestamp);
    }

    /// Emits a value to a side output, with the current record's timestamp.
    pub fn output<X: 'static>(&mut self, tag: &OutputTag<X>, value: X) {
        self.out.side(tag, value, self.timestamp);
    }

    /// The key of the current record (keyed streams only).
    pub fn current_key(&self) -> Option<&K> {
        self.key
    }
}

/// A user function over single records with a context.
pub trait ProcessFunction<IN, OUT>: Send + 'static {
    /// Handles one record.
    fn process_element(&mut self, value: IN, ctx: &mut ProcessContext<'_, '_, OUT>) -> Result<()>;

    /// The input is complete.
    fn on_end_of_input(&mut self, _ctx: &mut ProcessContext<'_, '_, OUT>) -> Result<()> {
        Ok(())
    }
}

/// Any `FnMut(value, ctx) -> Result<()>` is a process function.
impl<IN, OUT, F> ProcessFunction<IN, OUT> for F
where
    F: for<'a, 'o> FnMut(IN, &mut ProcessContext<'a, 'o, OUT>) -> Result<()> + Send + 'static,
{
    fn process_element(&mut self, value: IN, ctx: &mut ProcessContext<'_, '_, OUT>) -> Result<()> {
        self(value, ctx)
    }
}

/// Runs a [`ProcessFunction`].
pub struct ProcessOp<P> {
    pub(crate) function: P,
    pub(crate) watermark: Timestamp,
}

impl<P> ProcessOp<P> {
    /// Wraps a process function.
    pub fn new(function: P) -> Self {
        ProcessOp {
            function,
            watermark: MIN_WATERMARK,
        }
    }
}

impl<IN, OUT, P> Operator<IN, OUT> for ProcessOp<P>
where
    P: ProcessFunction<IN, OUT>,
{
    fn process_batch(&mut self, batch: Batch<IN>, out: &mut Output<'_, OUT>) -> Result<()> {
        for r in batch {
            let mut ctx = ProcessContext {
                out,
                timestamp: r.timestamp,
                watermark: self.watermark,
                key: None,
            };
            self.function.process_element(r.value, &mut ctx)?;
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Timestamp, _: &mut Output<'_, OUT>) -> Result<()> {
        self.watermark = watermark;
        Ok(())
    }

    fn on_end_of_input(&mut self, out: &mut Output<'_, OUT>) -> Result<()> {
        let mut ctx = ProcessContext {
            out,
            timestamp: None,
            watermark: self.watermark,
            key: None,
        };
        self.function.on_end_of_input(&mut ctx)
    }
}
