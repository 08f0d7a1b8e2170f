//! The heap backend's window stores: the operators' own maps, in memory.
//!
//! [`HeapPanes`] is time-major: panes sorted by start, a hash table from key
//! to accumulator per pane. A record updates one table; a tumbling window's
//! firing walks one table, a sliding window's merges the run of tables
//! inside it.
//! [`HeapWindows`] is a hash map from key to its windows. Both snapshot by
//! key group into the per-key lists the window operators have always
//! written.

use super::{PaneStore, StoreSnapshots, WindowCapture, WindowStore, WindowVisitor};
use crate::state::{KeyGroupBytes, StateError, StateKey, StateValue};
use floe_actors::element::Timestamp;
use floe_actors::ids::CheckpointId;
use hashbrown::{HashTable, hash_table};
use rustc_hash::{FxBuildHasher, FxHashMap};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::VecDeque;
use std::collections::hash_map::Entry;
use std::hash::{BuildHasher, Hash};

/// The operator named in the errors of a heap window store.
const OPERATOR: &str = "Window";

/// One postcard blob per key group of `entries`, the groups in order.
fn encode<'a, K, V, I>(entries: I, max_parallelism: u32) -> Result<Vec<KeyGroupBytes>, StateError>
where
    K: Serialize + Hash + 'a,
    V: Serialize + 'a,
    I: Iterator<Item = (&'a K, V)>,
{
    let mut groups: std::collections::BTreeMap<u32, Vec<(&K, V)>> = Default::default();
    for (k, v) in entries {
        let g = floe_actors::keygroup::key_group(k, max_parallelism);
        groups.entry(g).or_default().push((k, v));
    }
    groups
        .into_iter()
        .map(|(key_group, entries)| {
            let bytes = postcard::to_allocvec(&entries).map_err(|e| StateError::Serde {
                operator: OPERATOR.into(),
                state: String::new(),
                source: e.into(),
            })?;
            Ok(KeyGroupBytes { key_group, bytes })
        })
        .collect()
}

/// Calls `put` with every `(key, value)` of what [`encode`] wrote.
fn decode<K: DeserializeOwned, V: DeserializeOwned>(
    groups: &[KeyGroupBytes],
    mut put: impl FnMut(K, V),
) -> Result<(), StateError> {
    for g in groups {
        if super::redb::is_tagged(&g.bytes) {
            return Err(StateError::SchemaMismatch {
                operator: OPERATOR.into(),
                state: "windows".into(),
                expected: "windows kept in memory (--state heap, or none)".into(),
                found: "the windows of a redb window store (--state redb)".into(),
            });
        }
        let entries: Vec<(K, V)> =
            postcard::from_bytes(&g.bytes).map_err(|e| StateError::Serde {
                operator: OPERATOR.into(),
                state: format!("windows of key group {}", g.key_group),
                source: e.into(),
            })?;
        for (k, v) in entries {
            put(k, v);
        }
    }
    Ok(())
}

/// The hash a pane table files a key under.
#[inline]
fn fx_hash<K: Hash + ?Sized>(key: &K) -> u64 {
    FxBuildHasher.hash_one(key)
}

/// Panes in memory, sorted by start, each a hash table from key to
/// accumulator: a record updates one table (the last record's pane is
/// checked first, others found by binary search), a tumbling window's
/// firing walks one table, and a dropped pane's table is reused, emptied,
/// by the next pane.
pub struct HeapPanes<K, ACC> {
    /// `(pane start, table of (key, accumulator))`, sorted.
    panes: VecDeque<(Timestamp, HashTable<(K, ACC)>)>,
    /// Index in `panes` of the last record's pane: nearly always the next
    /// record's too, found without a search (checked before use, as panes
    /// inserted or dropped shift the indices).
    last: usize,
    /// The last dropped pane's table, emptied with its capacity kept: the
    /// next new pane's, so a pane does not grow its table from nothing.
    spare: Option<HashTable<(K, ACC)>>,
    /// Keys in the last window merged from several panes: the size of the
    /// next one's map.
    merged_len: usize,
}

impl<K, ACC> Default for HeapPanes<K, ACC> {
    fn default() -> Self {
        HeapPanes {
            panes: VecDeque::new(),
            last: 0,
            spare: None,
            merged_len: 0,
        }
    }
}

impl<K: StateKey, ACC: StateValue> StoreSnapshots for HeapPanes<K, ACC> {
    fn capture(
        &mut self,
        max_parallelism: u32,
        _: CheckpointId,
        _: bool,
    ) -> Result<WindowCapture, StateError> {
        // Per key: its accumulator in each pane.
        let mut per_key: FxHashMap<&K, Vec<(Timestamp, &ACC)>> = FxHashMap::default();
        for (start, table) in &self.panes {
            for (k, acc) in table {
                per_key.entry(k).or_default().push((*start, acc));
            }
        }
        let groups = encode(per_key.iter(), max_parallelism)?;
        Ok(WindowCapture::full(groups))
    }

    fn restore(&mut self, groups: &[KeyGroupBytes]) -> Result<(), StateError> {
        self.panes.clear();
        let panes = &mut self.panes;
        decode::<K, Vec<(Timestamp, ACC)>>(groups, |k, list| {
            for (start, acc) in list {
                let at = panes.partition_point(|(s, _)| *s < start);
                if panes.get(at).is_none_or(|(s, _)| *s != start) {
                    panes.insert(at, (start, HashTable::new()));
                }
                let table = &mut panes[at].1;
                let entry = table.entry(fx_hash(&k), |(q, _)| *q == k, |(q, _)| fx_hash(q));
                match entry {
                    hash_table::Entry::Occupied(mut e) => e.get_mut().1 = acc,
                    hash_table::Entry::Vacant(v) => {
                        v.insert((k.clone(), acc));
                    }
                }
            }
        })
    }

    fn entries(&self) -> usize {
        self.panes.iter().map(|(_, t)| t.len()).sum()
    }
}

impl<K: StateKey, ACC: StateValue> PaneStore<K, ACC> for HeapPanes<K, ACC> {
    #[inline]
    fn add(
        &mut self,
        pane: Timestamp,
        key: &K,
        init: impl FnOnce() -> ACC,
        add: impl FnOnce(&mut ACC),
    ) -> Result<bool, StateError> {
        let (idx, new) = if self.panes.get(self.last).is_some_and(|(p, _)| *p == pane) {
            (self.last, false)
        } else {
            // Binary search: the panes open at once can be hundreds (a
            // file read in parallel splits sends records from event times
            // minutes apart, while the watermark, the slowest split's,
            // holds them all).
            match self.panes.binary_search_by_key(&pane, |(p, _)| *p) {
                Ok(i) => (i, false),
                Err(at) => {
                    // Sized like the latest pane: no growth by rehashing
                    // as the pane fills.
                    let table = self.spare.take().unwrap_or_else(|| {
                        HashTable::with_capacity(self.panes.back().map_or(0, |(_, t)| t.len()))
                    });
                    self.panes.insert(at, (pane, table));
                    (at, true)
                }
            }
        };
        self.last = idx;
        let table = &mut self.panes[idx].1;
        let entry = table.entry(fx_hash(key), |(k, _)| k == key, |(k, _)| fx_hash(k));
        match entry {
            hash_table::Entry::Occupied(mut e) => add(&mut e.get_mut().1),
            hash_table::Entry::Vacant(v) => {
                let mut acc = init();
                add(&mut acc);
                v.insert((key.clone(), acc));
            }
        }
        Ok(new)
    }

    fn merged(
        &mut self,
        key: &K,
        from: Timestamp,
        to: Timestamp,
        merge: impl Fn(ACC, ACC) -> ACC,
    ) -> Result<Option<ACC>, StateError> {
        let hash = fx_hash(key);
        let mut merged: Option<ACC> = None;
        for (start, table) in &self.panes {
            if *start < from {
                continue;
            }
            if *start >= to {
                break;
            }
            if let Some((_, acc)) = table.find(hash, |(k, _)| k == key) {
                merged = Some(match merged.take() {
                    None => acc.clone(),
                    Some(m) => merge(m, acc.clone()),
                });
            }
        }
        Ok(merged)
    }

    #[inline]
    fn for_window<E: From<StateError>>(
        &mut self,
        from: Timestamp,
        to: Timestamp,
        merge: impl Fn(ACC, ACC) -> ACC,
        mut emit: impl FnMut(&K, &ACC) -> Result<(), E>,
    ) -> Result<(), E> {
        // Panes are sorted by start: the window's are one run of them.
        let lo = self.panes.partition_point(|(p, _)| *p < from);
        let hi = self.panes.partition_point(|(p, _)| *p < to);
        if hi == lo + 1 {
            // One pane (tumbling windows): its accumulators are the results.
            for (k, acc) in &self.panes[lo].1 {
                emit(k, acc)?;
            }
        } else if hi > lo {
            // Keys borrowed from the panes (no clone per key and window),
            // sized like the last merge so it does not grow by rehashing.
            let mut merged: FxHashMap<&K, ACC> =
                FxHashMap::with_capacity_and_hasher(self.merged_len, Default::default());
            for (_, pane) in self.panes.range(lo..hi) {
                for (k, acc) in pane {
                    match merged.entry(k) {
                        Entry::Occupied(mut m) => {
                            let prev = std::mem::replace(m.get_mut(), acc.clone());
                            *m.get_mut() = merge(prev, acc.clone());
                        }
                        Entry::Vacant(v) => {
                            v.insert(acc.clone());
                        }
                    }
                }
            }
            self.merged_len = merged.len();
            for (k, acc) in &merged {
                emit(k, acc)?;
            }
        }
        Ok(())
    }

    #[inline]
    fn first(&self) -> Option<Timestamp> {
        self.panes.front().map(|(p, _)| *p)
    }

    #[inline]
    fn pop_first(&mut self) -> Result<(), StateError> {
        if let Some((_, mut table)) = self.panes.pop_front() {
            table.clear();
            self.spare = Some(table);
        }
        Ok(())
    }
}

/// Windows in memory: a map from key to its windows.
pub struct HeapWindows<K, W, ACC> {
    map: FxHashMap<K, Vec<(W, ACC)>>,
}

impl<K, W, ACC> Default for HeapWindows<K, W, ACC> {
    fn default() -> Self {
        HeapWindows {
            map: FxHashMap::default(),
        }
    }
}

impl<K: StateKey, W: StateValue, ACC: StateValue> StoreSnapshots for HeapWindows<K, W, ACC> {
    fn capture(
        &mut self,
        max_parallelism: u32,
        _: CheckpointId,
        _: bool,
    ) -> Result<WindowCapture, StateError> {
        let groups = encode(self.map.iter(), max_parallelism)?;
        Ok(WindowCapture::full(groups))
    }

    fn restore(&mut self, groups: &[KeyGroupBytes]) -> Result<(), StateError> {
        self.map.clear();
        let map = &mut self.map;
        decode::<K, Vec<(W, ACC)>>(groups, |k, ws| {
            map.insert(k, ws);
        })
    }

    fn entries(&self) -> usize {
        self.map.values().map(Vec::len).sum()
    }
}

impl<K: StateKey, W: StateValue, ACC: StateValue> WindowStore<K, W, ACC>
    for HeapWindows<K, W, ACC>
{
    #[inline]
    fn get(&mut self, key: &K) -> Result<Option<&Vec<(W, ACC)>>, StateError> {
        Ok(self.map.get(key))
    }

    #[inline]
    fn get_mut(&mut self, key: &K) -> Result<Option<&mut Vec<(W, ACC)>>, StateError> {
        Ok(self.map.get_mut(key))
    }

    #[inline]
    fn get_or_insert(&mut self, key: &K) -> Result<&mut Vec<(W, ACC)>, StateError> {
        Ok(self.map.entry(key.clone()).or_default())
    }

    #[inline]
    fn remove(&mut self, key: &K) -> Result<(), StateError> {
        self.map.remove(key);
        Ok(())
    }

    fn for_each(&mut self, f: &mut WindowVisitor<'_, K, W, ACC>) -> Result<(), StateError> {
        for (k, ws) in &self.map {
            f(k, ws);
        }
        Ok(())
    }
}
