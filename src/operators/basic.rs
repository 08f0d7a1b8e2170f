//! Stateless one-input operators: map, filter, flat_map.
//!
//! Each keeps the record's timestamp and works on the whole batch in one call,
//! so the per-record cost is the user function and a vector push.

use super::{Operator, Output};
use crate::Result;
use floe_actors::element::{Batch, Record};

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
