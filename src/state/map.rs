//! [`MapState`]: a map per key.

use super::scope::Bound;
use super::{StateError, StateKey, StateValue};
use std::collections::HashMap;
use std::hash::Hash;

/// A map of the current key; obtained from `ctx.map_state(&desc)`.
///
/// TTL applies to the key's whole map (refreshed by any write to it), not to
/// its entries one by one.
pub struct MapState<'s, K, UK, UV> {
    b: Bound<'s, K, HashMap<UK, UV>>,
}

impl<'s, K, UK, UV> MapState<'s, K, UK, UV>
where
    K: StateKey,
    UK: StateValue + Hash + Eq,
    UV: StateValue,
{
    pub(crate) fn new(b: Bound<'s, K, HashMap<UK, UV>>) -> Self {
        MapState { b }
    }

    fn map(&mut self) -> Result<Option<&HashMap<UK, UV>>, StateError> {
        let b = &mut self.b;
        b.table.get(b.key_group, b.key, b.now)
    }

    /// The value of `key`.
    pub fn get(&mut self, key: &UK) -> Result<Option<UV>, StateError> {
        Ok(self.map()?.and_then(|m| m.get(key)).cloned())
    }

    /// Sets the value of `key`.
    pub fn put(&mut self, key: UK, value: UV) -> Result<(), StateError> {
        let b = &mut self.b;
        match b.table.get_mut(b.key_group, b.key, b.now)? {
            Some(m) => {
                m.insert(key, value);
                Ok(())
            }
            None => b
                .table
                .put(b.key_group, b.key, HashMap::from([(key, value)]), b.now),
        }
    }

    /// Removes `key`; returns its value.
    pub fn remove(&mut self, key: &UK) -> Result<Option<UV>, StateError> {
        let b = &mut self.b;
        let (removed, now_empty) = match b.table.get_mut(b.key_group, b.key, b.now)? {
            Some(m) => (m.remove(key), m.is_empty()),
            None => (None, false),
        };
        if now_empty {
            b.table.take(b.key_group, b.key, b.now)?;
        }
        Ok(removed)
    }

    /// Whether `key` has a value.
    pub fn contains(&mut self, key: &UK) -> Result<bool, StateError> {
        Ok(self.map()?.is_some_and(|m| m.contains_key(key)))
    }

    /// The entries, in no particular order.
    pub fn iter(&mut self) -> Result<impl Iterator<Item = (&UK, &UV)>, StateError> {
        Ok(self.map()?.into_iter().flat_map(|m| m.iter()))
    }

    /// The keys, in no particular order.
    pub fn keys(&mut self) -> Result<impl Iterator<Item = &UK>, StateError> {
        Ok(self.map()?.into_iter().flat_map(|m| m.keys()))
    }

    /// The values, in no particular order.
    pub fn values(&mut self) -> Result<impl Iterator<Item = &UV>, StateError> {
        Ok(self.map()?.into_iter().flat_map(|m| m.values()))
    }

    /// Whether the map has no entry.
    pub fn is_empty(&mut self) -> Result<bool, StateError> {
        Ok(self.map()?.is_none_or(|m| m.is_empty()))
    }

    /// Removes every entry.
    pub fn clear(&mut self) -> Result<(), StateError> {
        let b = &mut self.b;
        b.table.take(b.key_group, b.key, b.now).map(drop)
    }
}
