//! The heap backend's window stores: the operators' own maps, in memory.
//!
//! [`HeapPanes`] is time-major: panes sorted by start, a hash table from key
//! to accumulator per pane. A record updates one table; a tumbling window's
//! firing walks one table, a sliding window's merges the run of tables
//! inside it, or, when the aggregate retracts, moves the last window's
//! merge to it (the panes that left retracted, those that entered merged).
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

/// A pane's table: `(key, accumulator, the key's hash)`. The hash is kept
/// (in what would be the entry's padding beside an `i128` accumulator):
/// moving a pane in or out of a sliding window's merge, or growing the
/// table, hashes no key again.
type Pane<K, ACC> = HashTable<(K, ACC, u64)>;

/// Panes in memory, sorted by start, each a hash table from key to
/// accumulator: a record updates one table (the last record's pane is
/// checked first, others found by binary search), a tumbling window's
/// firing walks one table, and a dropped pane's table is reused, emptied,
/// by the next pane.
pub struct HeapPanes<K, ACC> {
    /// `(pane start, table)`, sorted.
    panes: VecDeque<(Timestamp, Pane<K, ACC>)>,
    /// Index in `panes` of the last record's pane: nearly always the next
    /// record's too, found without a search (checked before use, as panes
    /// inserted or dropped shift the indices).
    last: usize,
    /// The last dropped pane's table, emptied with its capacity kept: the
    /// next new pane's, so a pane does not grow its table from nothing.
    spare: Option<Pane<K, ACC>>,
    /// Keys in the last window merged from several panes: the size of the
    /// next one's map.
    merged_len: usize,
    /// The last window merged from several panes, kept to be moved to the
    /// next window while the aggregate retracts.
    running: Option<Running<K, ACC>>,
    /// Whether the aggregate retracted so far (until its first refusal).
    retracts: bool,
}

impl<K, ACC> Default for HeapPanes<K, ACC> {
    fn default() -> Self {
        HeapPanes {
            panes: VecDeque::new(),
            last: 0,
            spare: None,
            merged_len: 0,
            running: None,
            retracts: true,
        }
    }
}

/// A window's accumulators merged from the panes starting in `from..to`,
/// each with the number of those panes that hold its key. Every change to
/// such a pane (a record added, the pane dropped) is applied here too, so
/// it stays the merge of its panes.
struct Running<K, ACC> {
    from: Timestamp,
    to: Timestamp,
    table: HashTable<(K, ACC, u32)>,
    /// Panes dropped while covered: still merged in, retracted at the next
    /// move.
    dropped: Vec<Pane<K, ACC>>,
}

impl<K: Hash + Eq + Clone, ACC: Clone> Running<K, ACC> {
    #[inline]
    fn covers(&self, pane: Timestamp) -> bool {
        self.from <= pane && pane < self.to
    }

    /// Merges a pane's accumulators in.
    fn enter(&mut self, pane: &Pane<K, ACC>, merge: &impl Fn(ACC, ACC) -> ACC) {
        for (k, acc, hash) in pane {
            let entry = self
                .table
                .entry(*hash, |(q, ..)| q == k, |(q, ..)| fx_hash(q));
            match entry {
                hash_table::Entry::Occupied(mut e) => {
                    let (_, m, n) = e.get_mut();
                    let prev = std::mem::replace(m, acc.clone());
                    *m = merge(prev, acc.clone());
                    *n += 1;
                }
                hash_table::Entry::Vacant(v) => {
                    v.insert((k.clone(), acc.clone(), 1));
                }
            }
        }
    }

    /// Takes a pane's accumulators back out; false when the aggregate
    /// refuses one (the table is then no merge of anything).
    fn leave(&mut self, pane: &Pane<K, ACC>, retract: &impl Fn(&mut ACC, &ACC) -> bool) -> bool {
        for (k, acc, hash) in pane {
            let Ok(mut e) = self.table.find_entry(*hash, |(q, ..)| q == k) else {
                return false;
            };
            let (_, m, n) = e.get_mut();
            if *n == 1 {
                e.remove();
            } else if retract(m, acc) {
                *n -= 1;
            } else {
                return false;
            }
        }
        true
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
            for (k, acc, _) in table {
                per_key.entry(k).or_default().push((*start, acc));
            }
        }
        let groups = encode(per_key.iter(), max_parallelism)?;
        Ok(WindowCapture::full(groups))
    }

    fn restore(&mut self, groups: &[KeyGroupBytes]) -> Result<(), StateError> {
        self.panes.clear();
        self.running = None;
        let panes = &mut self.panes;
        decode::<K, Vec<(Timestamp, ACC)>>(groups, |k, list| {
            for (start, acc) in list {
                let at = panes.partition_point(|(s, _)| *s < start);
                if panes.get(at).is_none_or(|(s, _)| *s != start) {
                    panes.insert(at, (start, HashTable::new()));
                }
                let table = &mut panes[at].1;
                let hash = fx_hash(&k);
                let entry = table.entry(hash, |(q, ..)| *q == k, |(.., h)| *h);
                match entry {
                    hash_table::Entry::Occupied(mut e) => e.get_mut().1 = acc,
                    hash_table::Entry::Vacant(v) => {
                        v.insert((k.clone(), acc, hash));
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
        init: impl Fn() -> ACC,
        add: impl Fn(&mut ACC),
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
        let hash = fx_hash(key);
        let entry = table.entry(hash, |(k, ..)| k == key, |(.., h)| *h);
        let new_key = match entry {
            hash_table::Entry::Occupied(mut e) => {
                add(&mut e.get_mut().1);
                false
            }
            hash_table::Entry::Vacant(v) => {
                let mut acc = init();
                add(&mut acc);
                v.insert((key.clone(), acc, hash));
                true
            }
        };
        if let Some(r) = &mut self.running
            && r.covers(pane)
        {
            add_running(r, hash, key, new_key, init, add);
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
            if let Some((_, acc, _)) = table.find(hash, |(k, ..)| k == key) {
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
        retract: impl Fn(&mut ACC, &ACC) -> bool,
        mut emit: impl FnMut(&K, &ACC) -> Result<(), E>,
    ) -> Result<(), E> {
        // Panes are sorted by start: the window's are one run of them.
        let lo = self.panes.partition_point(|(p, _)| *p < from);
        let hi = self.panes.partition_point(|(p, _)| *p < to);
        if hi == lo + 1 {
            // One pane (tumbling windows): its accumulators are the results.
            for (k, acc, _) in &self.panes[lo].1 {
                emit(k, acc)?;
            }
        } else if hi > lo && self.retracts {
            let running = self.slide(lo, hi, from, to, &merge, &retract);
            for (k, acc, _) in &running.table {
                emit(k, acc)?;
            }
        } else if hi > lo {
            self.running = None;
            // Keys borrowed from the panes (no clone per key and window),
            // sized like the last merge so it does not grow by rehashing.
            let mut merged: FxHashMap<&K, ACC> =
                FxHashMap::with_capacity_and_hasher(self.merged_len, Default::default());
            for (_, pane) in self.panes.range(lo..hi) {
                for (k, acc, _) in pane {
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
        if let Some((start, mut table)) = self.panes.pop_front() {
            if let Some(r) = &mut self.running
                && r.covers(start)
            {
                // Still merged into the last window: kept until the next
                // one retracts it.
                r.dropped.push(table);
            } else {
                table.clear();
                self.spare = Some(table);
            }
        }
        Ok(())
    }
}

/// A record added to `key`'s accumulator of a pane that `r` covers: added
/// to `r`'s too (a key new to the pane counts one more pane).
#[cold]
fn add_running<K: Eq + Clone + Hash, ACC>(
    r: &mut Running<K, ACC>,
    hash: u64,
    key: &K,
    new_key: bool,
    init: impl Fn() -> ACC,
    add: impl Fn(&mut ACC),
) {
    let entry = r
        .table
        .entry(hash, |(k, ..)| k == key, |(k, ..)| fx_hash(k));
    match entry {
        hash_table::Entry::Occupied(mut e) => {
            let (_, acc, n) = e.get_mut();
            add(acc);
            *n += u32::from(new_key);
        }
        hash_table::Entry::Vacant(v) => {
            let mut acc = init();
            add(&mut acc);
            v.insert((key.clone(), acc, 1));
        }
    }
}

impl<K: StateKey, ACC: StateValue> HeapPanes<K, ACC> {
    /// The window of the panes `lo..hi` (those starting in `from..to`),
    /// merged: the last window moved to it when that costs fewer panes
    /// than merging it afresh (the panes that left retracted, those that
    /// entered merged), merged afresh otherwise.
    fn slide(
        &mut self,
        lo: usize,
        hi: usize,
        from: Timestamp,
        to: Timestamp,
        merge: &impl Fn(ACC, ACC) -> ACC,
        retract: &impl Fn(&mut ACC, &ACC) -> bool,
    ) -> &Running<K, ACC> {
        let panes = &self.panes;
        let mut last = self.running.take();
        let moved = last.as_mut().is_some_and(|r| {
            if r.from > from || r.to > to || r.to <= from {
                return false;
            }
            // Dropped panes left, and so did those before `from`.
            let (was_from, was_to) = (r.from, r.to);
            let leaving = panes.range(..lo).filter(move |(p, _)| *p >= was_from);
            let entering = panes.range(lo..hi).filter(move |(p, _)| *p >= was_to);
            let moves = r.dropped.len() + leaving.clone().count() + entering.clone().count();
            if moves >= hi - lo {
                return false;
            }
            let dropped = std::mem::take(&mut r.dropped);
            let left = dropped.iter().chain(leaving.map(|(_, t)| t));
            let retracted = left.into_iter().all(|pane| r.leave(pane, retract));
            self.spare = dropped.into_iter().last().map(|mut t| {
                t.clear();
                t
            });
            if !retracted {
                self.retracts = false;
                return false;
            }
            for (_, pane) in entering {
                r.enter(pane, merge);
            }
            (r.from, r.to) = (from, to);
            true
        });
        let running = match last {
            Some(r) if moved => r,
            _ => {
                let mut r = Running {
                    from,
                    to,
                    table: HashTable::with_capacity(self.merged_len),
                    dropped: Vec::new(),
                };
                for (_, pane) in self.panes.range(lo..hi) {
                    r.enter(pane, merge);
                }
                r
            }
        };
        self.merged_len = running.table.len();
        self.running.insert(running)
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
