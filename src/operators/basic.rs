//! Stateless one-input operators: map, filter, flat_map.
//!
//! Each keeps the record's timestamp and works on the whole batch in one call,
//! so the per-record cost is the user function and a vector push. The
//! flat_map of the builder API ([`SuspendingFlatMap`]) emits at most a batch
//! of records per call and keeps the rest (the record's partly consumed
//! iterator and the batch's unread records) for the runtime to resume when
//! the outputs have room: one record that explodes into millions does not
//! pile up in memory.

use super::{Operator, Output};
use crate::Result;
use floe_actors::element::{Batch, Record, Timestamp};

/// Applies a function to every record.
#[derive(Clone)]
pub struct MapOp<F>(pub F);

impl<IN, OUT, F> Operator<IN, OUT> for MapOp<F>
where
    F: FnMut(IN) -> OUT + Send + 'static,
{
    #[inline]
    fn process_batch(&mut self, batch: Batch<IN>, out: &mut Output<'_, OUT>) -> Result<()> {
        let f = &mut self.0;
        let mapped = batch.into_iter().map(|r| Record {
            value: f(r.value),
            timestamp: r.timestamp,
        });
        out.extend_or_reuse(mapped);
        Ok(())
    }
}

/// Keeps the records a predicate accepts.
#[derive(Clone)]
pub struct FilterOp<F>(pub F);

impl<T, F> Operator<T, T> for FilterOp<F>
where
    F: FnMut(&T) -> bool + Send + 'static,
{
    #[inline]
    fn process_batch(&mut self, batch: Batch<T>, out: &mut Output<'_, T>) -> Result<()> {
        let f = &mut self.0;
        out.records
            .extend(batch.into_iter().filter(|r| f(&r.value)));
        Ok(())
    }
}

/// Turns each record into zero or more records.
#[derive(Clone)]
pub struct FlatMapOp<F>(pub F);

impl<IN, OUT, I, F> Operator<IN, OUT> for FlatMapOp<F>
where
    F: FnMut(IN) -> I + Send + 'static,
    I: IntoIterator<Item = OUT>,
{
    #[inline]
    fn process_batch(&mut self, batch: Batch<IN>, out: &mut Output<'_, OUT>) -> Result<()> {
        let f = &mut self.0;
        for r in batch {
            let ts = r.timestamp;
            out.records
                .extend(f(r.value).into_iter().map(|value| Record {
                    value,
                    timestamp: ts,
                }));
        }
        Ok(())
    }
}

/// Records a flat_map emits per call before it suspends: one default batch.
pub const FLAT_MAP_STEP: usize = 1024;

/// Turns each record into zero or more records, emitting at most
/// [`FLAT_MAP_STEP`] per call and suspending in the middle of a record when
/// it produces more (see [`Operator::resume`]).
pub struct SuspendingFlatMap<F, IN, I: IntoIterator> {
    f: F,
    /// The record being expanded: its iterator and timestamp.
    current: Option<(I::IntoIter, Option<Timestamp>)>,
    /// The unread records of the batch.
    rest: std::vec::IntoIter<Record<IN>>,
}

impl<F, IN, I: IntoIterator> SuspendingFlatMap<F, IN, I> {
    /// A flat_map applying `f`.
    pub fn new(f: F) -> Self {
        SuspendingFlatMap {
            f,
            current: None,
            rest: Vec::new().into_iter(),
        }
    }

    /// Emits until the step is full or the batch is done.
    #[inline]
    fn drain(&mut self, out: &mut Output<'_, I::Item>) -> Result<()>
    where
        F: FnMut(IN) -> I,
    {
        loop {
            if let Some((it, ts)) = &mut self.current {
                let ts = *ts;
                let room = FLAT_MAP_STEP.saturating_sub(out.records.len());
                out.records
                    .extend(it.by_ref().take(room).map(|value| Record {
                        value,
                        timestamp: ts,
                    }));
                if out.records.len() >= FLAT_MAP_STEP {
                    // Full: the iterator may still hold records.
                    return Ok(());
                }
                self.current = None;
            }
            match self.rest.next() {
                Some(r) => self.current = Some(((self.f)(r.value).into_iter(), r.timestamp)),
                None => return Ok(()),
            }
        }
    }
}

impl<IN, OUT, I, F> Operator<IN, OUT> for SuspendingFlatMap<F, IN, I>
where
    IN: Send + 'static,
    F: FnMut(IN) -> I + Send + 'static,
    I: IntoIterator<Item = OUT> + 'static,
    I::IntoIter: Send,
{
    #[inline]
    fn process_batch(&mut self, batch: Batch<IN>, out: &mut Output<'_, OUT>) -> Result<()> {
        debug_assert!(
            self.current.is_none() && self.rest.len() == 0,
            "resumed first"
        );
        self.rest = batch.into_iter();
        self.drain(out)
    }

    fn has_pending(&self) -> bool {
        self.current.is_some() || self.rest.len() > 0
    }

    fn resume(&mut self, out: &mut Output<'_, OUT>) -> Result<()> {
        self.drain(out)
    }
}

/// Like map, but the function may fail; an error fails the job, naming the operator.
#[derive(Clone)]
pub struct TryMapOp<F>(pub F);

impl<IN, OUT, F> Operator<IN, OUT> for TryMapOp<F>
where
    F: FnMut(IN) -> Result<OUT> + Send + 'static,
{
    fn process_batch(&mut self, batch: Batch<IN>, out: &mut Output<'_, OUT>) -> Result<()> {
        for r in batch {
            let value = (self.0)(r.value)?;
            out.records.push(Record {
                value,
                timestamp: r.timestamp,
            });
        }
        Ok(())
    }
}
