//! [`ReducingState`]: one value per key, reduced with each added value.

use super::scope::Bound;
use super::{StateError, StateKey, StateValue};

/// A reduced value of the current key; obtained from
/// `ctx.reducing_state(&desc)`.
pub struct ReducingState<'s, K, T> {
    b: Bound<'s, K, T>,
    reduce: &'s (dyn Fn(T, T) -> T + Send + Sync),
}

impl<'s, K: StateKey, T: StateValue> ReducingState<'s, K, T> {
    pub(crate) fn new(b: Bound<'s, K, T>, reduce: &'s (dyn Fn(T, T) -> T + Send + Sync)) -> Self {
        ReducingState { b, reduce }
    }

    /// The reduced value, or `None` when nothing was added (or it expired).
    pub fn get(&mut self) -> Result<Option<T>, StateError> {
        let b = &mut self.b;
        Ok(b.table.get(b.key_group, b.key, b.now)?.cloned())
    }

    /// Reduces `value` into the state: `reduce(current, value)`, or `value`
    /// when empty.
    pub fn add(&mut self, value: T) -> Result<(), StateError> {
        let b = &mut self.b;
        let next = match b.table.take(b.key_group, b.key, b.now)? {
            Some(cur) => (self.reduce)(cur, value),
            None => value,
        };
        b.table.put(b.key_group, b.key, next, b.now)
    }

    /// Removes the value.
    pub fn clear(&mut self) -> Result<(), StateError> {
        let b = &mut self.b;
        b.table.take(b.key_group, b.key, b.now).map(drop)
    }
}
