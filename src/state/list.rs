//! [`ListState`]: a list of values per key.

use super::scope::Bound;
use super::{StateError, StateKey, StateValue};

/// A list of the current key; obtained from `ctx.list_state(&desc)`.
///
/// An empty list and no list are the same: `get` returns an empty vector.
pub struct ListState<'s, K, T> {
    b: Bound<'s, K, Vec<T>>,
}

impl<'s, K: StateKey, T: StateValue> ListState<'s, K, T> {
    pub(crate) fn new(b: Bound<'s, K, Vec<T>>) -> Self {
        ListState { b }
    }

    /// The list's values, in insertion order.
    pub fn get(&mut self) -> Result<Vec<T>, StateError> {
        let b = &mut self.b;
        Ok(b.table
            .get(b.key_group, b.key, b.now)?
            .cloned()
            .unwrap_or_default())
    }

    /// Appends a value.
    pub fn add(&mut self, value: T) -> Result<(), StateError> {
        self.add_all(std::iter::once(value))
    }

    /// Appends values.
    pub fn add_all(&mut self, values: impl IntoIterator<Item = T>) -> Result<(), StateError> {
        let b = &mut self.b;
        match b.table.get_mut(b.key_group, b.key, b.now)? {
            Some(list) => list.extend(values),
            None => {
                let list: Vec<T> = values.into_iter().collect();
                if !list.is_empty() {
                    b.table.put(b.key_group, b.key, list, b.now)?;
                }
            }
        }
        Ok(())
    }

    /// Replaces the list.
    pub fn update(&mut self, values: Vec<T>) -> Result<(), StateError> {
        let b = &mut self.b;
        if values.is_empty() {
            b.table.take(b.key_group, b.key, b.now).map(drop)
        } else {
            b.table.put(b.key_group, b.key, values, b.now)
        }
    }

    /// Removes the list.
    pub fn clear(&mut self) -> Result<(), StateError> {
        let b = &mut self.b;
        b.table.take(b.key_group, b.key, b.now).map(drop)
    }
}
