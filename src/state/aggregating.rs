//! [`AggregatingState`]: an accumulator per key, fed values, read as a result.

use super::AggregateFunction;
use super::scope::Bound;
use super::{StateError, StateKey, StateValue};

/// An aggregate of the current key; obtained from
/// `ctx.aggregating_state(&desc)`. `ACC` is the stored accumulator.
pub struct AggregatingState<'s, K, IN, ACC, OUT> {
    b: Bound<'s, K, ACC>,
    function: &'s dyn AggregateFunction<IN, ACC, OUT>,
}

impl<'s, K: StateKey, IN: 'static, ACC: StateValue, OUT: 'static>
    AggregatingState<'s, K, IN, ACC, OUT>
{
    pub(crate) fn new(
        b: Bound<'s, K, ACC>,
        function: &'s dyn AggregateFunction<IN, ACC, OUT>,
    ) -> Self {
        AggregatingState { b, function }
    }

    /// The aggregate's result, or `None` when nothing was added (or it expired).
    pub fn get(&mut self) -> Result<Option<OUT>, StateError> {
        let b = &mut self.b;
        let f = self.function;
        Ok(b.table
            .get(b.key_group, b.key, b.now)?
            .map(|acc| f.get_result(acc)))
    }

    /// Adds a value to the accumulator (created when empty).
    pub fn add(&mut self, value: IN) -> Result<(), StateError> {
        let b = &mut self.b;
        match b.table.get_mut(b.key_group, b.key, b.now)? {
            Some(acc) => self.function.add(&value, acc),
            None => {
                let mut acc = self.function.create_accumulator();
                self.function.add(&value, &mut acc);
                b.table.put(b.key_group, b.key, acc, b.now)?;
            }
        }
        Ok(())
    }

    /// Removes the accumulator.
    pub fn clear(&mut self) -> Result<(), StateError> {
        let b = &mut self.b;
        b.table.take(b.key_group, b.key, b.now).map(drop)
    }
}
