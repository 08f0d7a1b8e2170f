//! The accumulator table of a rolling aggregation (`RollingOp`): a map from
//! key to accumulator, or, when the key is a field of the record, a table of
//! the accumulators alone (see [`Accumulators`]).

use super::{KeyFn, Rolling};
use rustc_hash::FxHashMap;
use std::hash::Hash;

/// The accumulators of a rolling aggregation, one per key.
///
/// A computed key is stored beside its accumulator. A key that is a field of
/// the record ([`KeyFn::Borrowed`], a word count's word) is already inside the
/// accumulator, so the table holds the accumulators alone: each entry is
/// smaller by a key (a word count's 56 bytes become 32), the table fits the
/// cache better, and one probe finds the key and the sum in the same place.
pub(super) enum Accumulators<T, K> {
    Keyed(FxHashMap<K, T>),
    Fields {
        table: hashbrown::HashTable<T>,
        key: for<'a> fn(&'a T) -> &'a K,
    },
}

impl<T, K: Hash + Eq + Clone> Accumulators<T, K> {
    /// A table of accumulators alone where the key is a field and `kind`
    /// never rewrites a whole accumulator into another key's record (a
    /// reduce may: its result's key field is the function's choice).
    pub(super) fn new<N>(key: &KeyFn<T, K>, kind: &Rolling<T, N>) -> Self {
        match (key, kind) {
            (KeyFn::Borrowed(g), Rolling::Sum(_) | Rolling::Min(_) | Rolling::Max(_))
            | (KeyFn::Borrowed(g), Rolling::MinBy(_) | Rolling::MaxBy(_)) => Accumulators::Fields {
                table: hashbrown::HashTable::new(),
                key: *g,
            },
            _ => Accumulators::Keyed(FxHashMap::default()),
        }
    }

    /// Whether the accumulators are a table keyed by a field of themselves.
    pub(super) fn keyed_by_field(&self) -> bool {
        matches!(self, Accumulators::Fields { .. })
    }

    /// The same accumulators with each key stored beside its own: for an
    /// aggregation whose field turns out to be (part of) the key, which
    /// would move an accumulator in a table keyed by its own field.
    pub(super) fn into_keyed(self) -> Self {
        match self {
            Accumulators::Fields { table, key } => Accumulators::Keyed(
                table
                    .into_iter()
                    .map(|acc| (key(&acc).clone(), acc))
                    .collect(),
            ),
            keyed => keyed,
        }
    }

    pub(super) fn len(&self) -> usize {
        match self {
            Accumulators::Keyed(map) => map.len(),
            Accumulators::Fields { table, .. } => table.len(),
        }
    }

    /// The accumulator of `value`'s key (computed by `key`), if the key
    /// has one: looked up through the record itself, no key copied.
    #[inline]
    pub(super) fn find_mut(&mut self, key: &KeyFn<T, K>, value: &T) -> Option<&mut T> {
        match (self, key) {
            (Accumulators::Fields { table, key: g }, _) => {
                let g = *g;
                let k = g(value);
                table.find_mut(fx_hash(k), |acc| g(acc) == k)
            }
            (Accumulators::Keyed(map), KeyFn::Owned(g)) => map.get_mut(&g(value)),
            (Accumulators::Keyed(map), KeyFn::Borrowed(g)) => map.get_mut(g(value)),
        }
    }

    /// Stores `value` as the first accumulator of its key, which has none
    /// ([`find_mut`](Self::find_mut) found nothing).
    pub(super) fn insert_new(&mut self, key: &KeyFn<T, K>, value: T) {
        match (self, key) {
            (Accumulators::Fields { table, key: g }, _) => {
                let g = *g;
                table.insert_unique(fx_hash(g(&value)), value, |acc| fx_hash(g(acc)));
            }
            (Accumulators::Keyed(map), KeyFn::Owned(g)) => {
                map.insert(g(&value), value);
            }
            (Accumulators::Keyed(map), KeyFn::Borrowed(g)) => {
                map.insert(g(&value).clone(), value);
            }
        }
    }

    /// Every (key, accumulator).
    pub(super) fn iter(&self) -> Box<dyn Iterator<Item = (&K, &T)> + '_> {
        match self {
            Accumulators::Keyed(map) => Box::new(map.iter()),
            Accumulators::Fields { table, key } => {
                Box::new(table.iter().map(|acc| (key(acc), acc)))
            }
        }
    }

    /// Moves every accumulator out, leaving the store empty.
    pub(super) fn take_values(&mut self) -> Vec<T> {
        match self {
            Accumulators::Keyed(map) => std::mem::take(map).into_values().collect(),
            Accumulators::Fields { table, .. } => std::mem::take(table).into_iter().collect(),
        }
    }

    pub(super) fn clear(&mut self) {
        match self {
            Accumulators::Keyed(map) => map.clear(),
            Accumulators::Fields { table, .. } => table.clear(),
        }
    }

    /// Puts back a restored accumulator: into a map if its key is not its
    /// key field (written by an aggregation whose field is the key).
    pub(super) fn restore(&mut self, k: K, v: T) {
        if let Accumulators::Fields { key, .. } = self
            && key(&v) != &k
        {
            let state = std::mem::replace(self, Accumulators::Keyed(FxHashMap::default()));
            *self = state.into_keyed();
        }
        match self {
            Accumulators::Keyed(map) => {
                map.insert(k, v);
            }
            Accumulators::Fields { table, key } => {
                let g = *key;
                let hash = fx_hash(g(&v));
                match table.find_mut(hash, |acc| g(acc) == g(&v)) {
                    Some(acc) => *acc = v,
                    None => {
                        table.insert_unique(hash, v, |acc| fx_hash(g(acc)));
                    }
                }
            }
        }
    }
}

/// The hash an accumulator table files a key under.
#[inline]
fn fx_hash<K: Hash + ?Sized>(key: &K) -> u64 {
    use std::hash::BuildHasher;
    rustc_hash::FxBuildHasher.hash_one(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn first(t: &(u64, u64)) -> &u64 {
        &t.0
    }

    /// A restored accumulator whose key field is not its key (written by a
    /// sum of the key field) moves the table back to a map, where it is
    /// found by its key, as a `HashMap` from the keys finds it.
    #[test]
    fn restoring_an_accumulator_under_another_key_keeps_the_key() {
        let key: KeyFn<(u64, u64), u64> = KeyFn::Borrowed(first);
        let kind: Rolling<(u64, u64), u64> = Rolling::Sum(Arc::new(|t: &mut (u64, u64)| &mut t.0));
        let mut acc = Accumulators::new(&key, &kind);
        assert!(acc.keyed_by_field());
        let restored = [(1u64, (1u64, 10u64)), (2, (6, 20)), (3, (3, 30))];
        let oracle: std::collections::HashMap<u64, (u64, u64)> = restored.into_iter().collect();
        for (k, v) in restored {
            acc.restore(k, v);
        }
        assert!(!acc.keyed_by_field());
        for (k, v) in &oracle {
            // Looked up as a record of key `k` is.
            assert_eq!(acc.find_mut(&key, &(*k, 0)).copied(), Some(*v), "key {k}");
        }
        let mut got: Vec<(&u64, &(u64, u64))> = acc.iter().collect();
        got.sort_unstable();
        let mut expected: Vec<(&u64, &(u64, u64))> = oracle.iter().collect();
        expected.sort_unstable();
        assert_eq!(got, expected);
    }

    /// Accumulators whose keys are their key fields stay in the table and
    /// are found by their keys.
    #[test]
    fn restoring_accumulators_under_their_own_keys_keeps_the_table() {
        let key: KeyFn<(u64, u64), u64> = KeyFn::Borrowed(first);
        let kind: Rolling<(u64, u64), u64> = Rolling::Sum(Arc::new(|t: &mut (u64, u64)| &mut t.1));
        let mut acc = Accumulators::new(&key, &kind);
        for k in 0..100u64 {
            acc.restore(k, (k, k * 7));
        }
        assert!(acc.keyed_by_field());
        assert_eq!(acc.len(), 100);
        for k in 0..100u64 {
            assert_eq!(acc.find_mut(&key, &(k, 0)).copied(), Some((k, k * 7)));
        }
        let mut values = acc.take_values();
        values.sort_unstable();
        assert_eq!(values, (0..100).map(|k| (k, k * 7)).collect::<Vec<_>>());
        assert_eq!(acc.len(), 0);
    }
}
