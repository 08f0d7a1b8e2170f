//! The heap backend's window stores: the operators' own maps, in memory.
//!
//! [`HeapPanes`] lays its panes out for the windows: by pane for tumbling
//! windows (a hash table from key to accumulator per pane; a record updates
//! one table, a firing walks one), by key for sliding ones (a table from key
//! to its panes' accumulators; a firing visits each key once and merges its
//! few accumulators inside the window). [`HeapWindows`] is a hash map from
//! key to its windows. All snapshot by key group into the per-key lists the
//! window operators have always written.

use super::key_panes::KeyPanes;
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

/// Panes in memory, in one of two layouts chosen before the first record
/// by [`PaneStore::panes_per_window`]:
///
/// - **by pane** (the default, and for windows of one pane: tumbling):
///   panes sorted by start, each a hash table from key to accumulator. A
///   record updates one table; a window's firing walks its one table, and a
///   dropped pane's table is reused, emptied, by the next pane.
/// - **by key** (for windows of several panes: sliding; see
///   `key_panes.rs`): per key its panes' accumulators in time order, per
///   pane the list of its keys. A record updates its key's accumulators; a
///   window's firing visits each of its keys once and merges the few
///   accumulators inside the window, where the by-pane layout merged every
///   pane's table into a new map per window, hashing each key of each pane.
///
/// Both snapshot the same per-key lists, so either restores the other's.
pub struct HeapPanes<K, ACC> {
    layout: Layout<K, ACC>,
}

enum Layout<K, ACC> {
    ByPane(ByPane<K, ACC>),
    ByKey(KeyPanes<K, ACC>),
}

impl<K, ACC> Default for HeapPanes<K, ACC> {
    fn default() -> Self {
        HeapPanes {
            layout: Layout::ByPane(ByPane {
                panes: VecDeque::new(),
                last: 0,
                spare: None,
                merged_len: 0,
            }),
        }
    }
}

/// Panes sorted by start, each a table of `(key, accumulator)`.
struct ByPane<K, ACC> {
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

impl<K: StateKey, ACC: StateValue> HeapPanes<K, ACC> {
    /// The per-key lists of the snapshots: `(key, [(pane start, acc)])`.
    fn per_key(&self) -> Vec<(&K, Vec<(Timestamp, &ACC)>)> {
        match &self.layout {
            Layout::ByPane(s) => {
                let mut per_key: FxHashMap<&K, Vec<(Timestamp, &ACC)>> = FxHashMap::default();
                for (start, table) in &s.panes {
                    for (k, acc) in table {
                        per_key.entry(k).or_default().push((*start, acc));
                    }
                }
                per_key.into_iter().collect()
            }
            Layout::ByKey(s) => s.per_key().collect(),
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
        let per_key = self.per_key();
        let groups = encode(per_key.iter().map(|(k, v)| (*k, v)), max_parallelism)?;
        Ok(WindowCapture::full(groups))
    }

    fn restore(&mut self, groups: &[KeyGroupBytes]) -> Result<(), StateError> {
        match &mut self.layout {
            Layout::ByPane(s) => {
                s.panes.clear();
                let panes = &mut s.panes;
                decode::<K, Vec<(Timestamp, ACC)>>(groups, |k, list| {
                    for (start, acc) in list {
                        let at = panes.partition_point(|(s, _)| *s < start);
                        if panes.get(at).is_none_or(|(s, _)| *s != start) {
                            panes.insert(at, (start, HashTable::new()));
                        }
                        let table = &mut panes[at].1;
                        let hash = fx_hash(&k);
                        match table.entry(hash, |(q, _)| *q == k, |(q, _)| fx_hash(q)) {
                            hash_table::Entry::Occupied(mut e) => e.get_mut().1 = acc,
                            hash_table::Entry::Vacant(v) => {
                                v.insert((k.clone(), acc));
                            }
                        }
                    }
                })
            }
            Layout::ByKey(s) => {
                s.clear();
                decode::<K, Vec<(Timestamp, ACC)>>(groups, |k, list| {
                    for (start, acc) in list {
                        s.put(&k, start, acc);
                    }
                })
            }
        }
    }

    fn entries(&self) -> usize {
        match &self.layout {
            Layout::ByPane(s) => s.panes.iter().map(|(_, t)| t.len()).sum(),
            Layout::ByKey(s) => s.entries(),
        }
    }
}

impl<K: StateKey, ACC: StateValue> PaneStore<K, ACC> for HeapPanes<K, ACC> {
    fn panes_per_window(&mut self, panes: i64) {
        let empty = self.entries() == 0;
        if panes > 1 && empty && matches!(self.layout, Layout::ByPane(_)) {
            self.layout = Layout::ByKey(KeyPanes::default());
        }
    }

    #[inline]
    fn add(
        &mut self,
        pane: Timestamp,
        key: &K,
        init: impl FnOnce() -> ACC,
        add: impl FnOnce(&mut ACC),
    ) -> Result<bool, StateError> {
        match &mut self.layout {
            Layout::ByPane(s) => {
                let (idx, new) = if s.panes.get(s.last).is_some_and(|(p, _)| *p == pane) {
                    (s.last, false)
                } else {
                    // Binary search: the panes open at once can be hundreds
                    // (a file read in parallel splits sends records from
                    // event times minutes apart, while the watermark, the
                    // slowest split's, holds them all).
                    match s.panes.binary_search_by_key(&pane, |(p, _)| *p) {
                        Ok(i) => (i, false),
                        Err(at) => {
                            // Sized like the latest pane: no growth by
                            // rehashing as the pane fills.
                            let table = s.spare.take().unwrap_or_else(|| {
                                HashTable::with_capacity(s.panes.back().map_or(0, |(_, t)| t.len()))
                            });
                            s.panes.insert(at, (pane, table));
                            (at, true)
                        }
                    }
                };
                s.last = idx;
                let table = &mut s.panes[idx].1;
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
            Layout::ByKey(s) => Ok(s.add(pane, key, init, add)),
        }
    }

    fn merged(
        &mut self,
        key: &K,
        from: Timestamp,
        to: Timestamp,
        merge: impl Fn(ACC, ACC) -> ACC,
    ) -> Result<Option<ACC>, StateError> {
        match &self.layout {
            Layout::ByPane(s) => {
                let hash = fx_hash(key);
                let mut merged: Option<ACC> = None;
                for (start, table) in &s.panes {
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
            Layout::ByKey(s) => Ok(s.merged(key, from, to, merge)),
        }
    }

    #[inline]
    fn for_window<E: From<StateError>>(
        &mut self,
        from: Timestamp,
        to: Timestamp,
        merge: impl Fn(ACC, ACC) -> ACC,
        mut emit: impl FnMut(&K, &ACC) -> Result<(), E>,
    ) -> Result<(), E> {
        match &mut self.layout {
            Layout::ByPane(s) => {
                // Panes are sorted by start: the window's are one run of them.
                let lo = s.panes.partition_point(|(p, _)| *p < from);
                let hi = s.panes.partition_point(|(p, _)| *p < to);
                if hi == lo + 1 {
                    // One pane (tumbling windows): its accumulators are the results.
                    for (k, acc) in &s.panes[lo].1 {
                        emit(k, acc)?;
                    }
                } else if hi > lo {
                    // Keys borrowed from the panes (no clone per key and
                    // window), sized like the last merge so it does not
                    // grow by rehashing.
                    let mut merged: FxHashMap<&K, ACC> =
                        FxHashMap::with_capacity_and_hasher(s.merged_len, Default::default());
                    for (_, pane) in s.panes.range(lo..hi) {
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
                    s.merged_len = merged.len();
                    for (k, acc) in &merged {
                        emit(k, acc)?;
                    }
                }
                Ok(())
            }
            Layout::ByKey(s) => s.for_window(from, to, merge, emit),
        }
    }

    #[inline]
    fn first(&self) -> Option<Timestamp> {
        match &self.layout {
            Layout::ByPane(s) => s.panes.front().map(|(p, _)| *p),
            Layout::ByKey(s) => s.first(),
        }
    }

    #[inline]
    fn pop_first(&mut self) -> Result<(), StateError> {
        match &mut self.layout {
            Layout::ByPane(s) => {
                if let Some((_, mut table)) = s.panes.pop_front() {
                    table.clear();
                    s.spare = Some(table);
                }
            }
            Layout::ByKey(s) => s.pop_first(),
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
