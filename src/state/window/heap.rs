//! The heap backend's window stores: the operators' own maps, in memory.
//!
//! [`HeapPanes`] is time-major: panes sorted by start, a hash table from key
//! id to accumulator per pane (each key kept once, under its id: see
//! `ids`). A record updates one table; a tumbling window's
//! firing walks one table, a sliding window's merges the run of tables
//! inside it, or, when the aggregate retracts, moves the last window's
//! merge to it (the panes that left retracted, those that entered merged).
//! [`HeapWindows`] is a hash map from key to its windows. Both snapshot by
//! key group into the per-key lists the window operators have always
//! written.

use super::ids::{KeyId, Keys, Pane, Running, add_running, fx_hash, id_hash};
use super::{PaneStore, StoreSnapshots, WindowCapture, WindowStore, WindowVisitor};
use crate::state::{KeyGroupBytes, StateError, StateKey, StateValue};
use floe_actors::element::Timestamp;
use floe_actors::ids::CheckpointId;
use hashbrown::{HashTable, hash_table};
use rustc_hash::FxHashMap;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::VecDeque;
use std::collections::hash_map::Entry;
use std::hash::Hash;

/// The operator named in the errors of a heap window store.
pub(super) const OPERATOR: &str = "Window";

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

/// Panes in memory, sorted by start, each a hash table from key id to
/// accumulator: a record updates one table (the last record's pane is
/// checked first, others found by binary search), a tumbling window's
/// firing walks one table, and a dropped pane's table is reused, emptied,
/// by the next pane.
pub struct HeapPanes<K, ACC> {
    /// The keys of the panes.
    keys: Keys<K>,
    /// `(pane start, table)`, sorted.
    panes: VecDeque<(Timestamp, Pane<ACC>)>,
    /// Index in `panes` of the last record's pane: nearly always the next
    /// record's too, found without a search (checked before use, as panes
    /// inserted or dropped shift the indices).
    last: usize,
    /// The last dropped pane's table, emptied with its capacity kept: the
    /// next new pane's, so a pane does not grow its table from nothing.
    spare: Option<Pane<ACC>>,
    /// Keys in the last window merged from several panes: the size of the
    /// next one's map.
    merged_len: usize,
    /// The last window merged from several panes, kept to be moved to the
    /// next window while the aggregate retracts.
    running: Option<Running<ACC>>,
    /// Whether the aggregate retracted so far (until its first refusal).
    retracts: bool,
}

impl<K, ACC> Default for HeapPanes<K, ACC> {
    fn default() -> Self {
        HeapPanes {
            keys: Keys::default(),
            panes: VecDeque::new(),
            last: 0,
            spare: None,
            merged_len: 0,
            running: None,
            retracts: true,
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
            for (id, acc) in table {
                per_key
                    .entry(self.keys.key(*id))
                    .or_default()
                    .push((*start, acc));
            }
        }
        let groups = encode(per_key.iter(), max_parallelism)?;
        Ok(WindowCapture::full(groups))
    }

    fn restore(&mut self, groups: &[KeyGroupBytes]) -> Result<(), StateError> {
        *self = HeapPanes {
            retracts: self.retracts,
            ..HeapPanes::default()
        };
        let (keys, panes) = (&mut self.keys, &mut self.panes);
        let mut failed = None;
        decode::<K, Vec<(Timestamp, ACC)>>(groups, |k, list| {
            let id = match keys.id(&k, fx_hash(&k)) {
                Ok(id) => id,
                Err(e) => {
                    failed.get_or_insert(e);
                    return;
                }
            };
            for (start, acc) in list {
                let at = panes.partition_point(|(s, _)| *s < start);
                if panes.get(at).is_none_or(|(s, _)| *s != start) {
                    panes.insert(at, (start, HashTable::new()));
                }
                let table = &mut panes[at].1;
                let entry = table.entry(id_hash(id), |(i, _)| *i == id, |(i, _)| id_hash(*i));
                match entry {
                    hash_table::Entry::Occupied(mut e) => e.get_mut().1 = acc,
                    hash_table::Entry::Vacant(v) => {
                        v.insert((id, acc));
                        keys.take(id);
                    }
                }
            }
        })?;
        failed.map_or(Ok(()), Err)
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
        let id = self.keys.id(key, fx_hash(key))?;
        let table = &mut self.panes[idx].1;
        let entry = table.entry(id_hash(id), |(i, _)| *i == id, |(i, _)| id_hash(*i));
        let new_key = match entry {
            hash_table::Entry::Occupied(mut e) => {
                add(&mut e.get_mut().1);
                false
            }
            hash_table::Entry::Vacant(v) => {
                let mut acc = init();
                add(&mut acc);
                v.insert((id, acc));
                self.keys.take(id);
                true
            }
        };
        if let Some(r) = &mut self.running
            && r.covers(pane)
        {
            add_running(r, &self.keys, id, new_key, init, add);
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
        let Some(id) = self.keys.find(key, fx_hash(key)) else {
            return Ok(None);
        };
        let mut merged: Option<ACC> = None;
        for (start, table) in &self.panes {
            if *start < from {
                continue;
            }
            if *start >= to {
                break;
            }
            if let Some((_, acc)) = table.find(id_hash(id), |(i, _)| *i == id) {
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
            for (id, acc) in &self.panes[lo].1 {
                emit(self.keys.key(*id), acc)?;
            }
        } else if hi > lo && self.retracts {
            self.slide(lo, hi, from, to, &merge, &retract);
            if let Some(running) = &self.running {
                for (id, acc) in running.iter() {
                    emit(self.keys.key(id), acc)?;
                }
            }
        } else if hi > lo {
            self.discard_running();
            // Sized like the last merge so it does not grow by rehashing.
            let mut merged: FxHashMap<KeyId, ACC> =
                FxHashMap::with_capacity_and_hasher(self.merged_len, Default::default());
            for (_, pane) in self.panes.range(lo..hi) {
                for (id, acc) in pane {
                    match merged.entry(*id) {
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
            for (id, acc) in &merged {
                emit(self.keys.key(*id), acc)?;
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
        if let Some((start, table)) = self.panes.pop_front() {
            if let Some(r) = &mut self.running
                && r.covers(start)
            {
                // Still merged into the last window: kept until the next
                // one retracts it.
                r.dropped.push(table);
            } else {
                self.reuse(table);
            }
        }
        Ok(())
    }
}

impl<K: StateKey, ACC: StateValue> HeapPanes<K, ACC> {
    /// Keeps a pane's table, emptied, for the next new pane (its ids
    /// released).
    fn reuse(&mut self, mut table: Pane<ACC>) {
        self.keys.release(&table);
        table.clear();
        self.spare = Some(table);
    }

    /// Drops the last window's merge, and the panes only it still held.
    fn discard_running(&mut self) {
        if let Some(r) = self.running.take() {
            for table in r.dropped {
                self.reuse(table);
            }
        }
    }

    /// Makes `self.running` the window of the panes `lo..hi` (those
    /// starting in `from..to`), merged: the last window moved to it when
    /// that costs fewer panes than merging it afresh (the panes that left
    /// retracted, those that entered merged), merged afresh otherwise.
    fn slide(
        &mut self,
        lo: usize,
        hi: usize,
        from: Timestamp,
        to: Timestamp,
        merge: &impl Fn(ACC, ACC) -> ACC,
        retract: &impl Fn(&mut ACC, &ACC) -> bool,
    ) {
        let mut last = self.running.take();
        let mut released = Vec::new();
        let moved = last.as_mut().is_some_and(|r| {
            if r.from > from || r.to > to || r.to <= from {
                return false;
            }
            let panes = &self.panes;
            // Dropped panes left, and so did those before `from`.
            let (was_from, was_to) = (r.from, r.to);
            let leaving = panes.range(..lo).filter(move |(p, _)| *p >= was_from);
            let entering = panes.range(lo..hi).filter(move |(p, _)| *p >= was_to);
            let moves = r.dropped.len() + leaving.clone().count() + entering.clone().count();
            if moves >= hi - lo {
                return false;
            }
            released = std::mem::take(&mut r.dropped);
            let left = released.iter().chain(leaving.map(|(_, t)| t));
            if !left.into_iter().all(|pane| r.leave(pane, retract)) {
                self.retracts = false;
                return false;
            }
            r.fit(&self.keys);
            for (_, pane) in entering {
                r.enter(pane, merge);
            }
            (r.from, r.to) = (from, to);
            true
        });
        for table in released {
            self.reuse(table);
        }
        let running = match last {
            Some(r) if moved => r,
            last => {
                // The panes the last merge still held are released.
                let mut r = Running::new(
                    from,
                    to,
                    last.map(|mut r| {
                        for table in std::mem::take(&mut r.dropped) {
                            self.reuse(table);
                        }
                        r
                    }),
                );
                r.fit(&self.keys);
                for (_, pane) in self.panes.range(lo..hi) {
                    r.enter(pane, merge);
                }
                r
            }
        };
        self.merged_len = running.len();
        self.running = Some(running);
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

#[cfg(test)]
mod tests {
    use super::super::ids::KEEP_IDLE;
    use super::*;
    use std::collections::BTreeMap;

    /// The window `from..to` of `store`, sorted; the aggregate retracts
    /// while `retracts`.
    fn fire(
        store: &mut HeapPanes<u32, i64>,
        from: i64,
        to: i64,
        retracts: bool,
    ) -> Vec<(u32, i64)> {
        let mut got = Vec::new();
        store
            .for_window(
                from,
                to,
                |a, b| a + b,
                |a, b| {
                    *a -= b;
                    retracts
                },
                |k, acc| {
                    got.push((*k, *acc));
                    Ok::<_, StateError>(())
                },
            )
            .expect("fired");
        got.sort_unstable();
        got
    }

    /// Sliding windows of three panes over panes whose keys come and go:
    /// each pane has keys of its own, keys shared with its neighbour, a
    /// key common to all, and a late record for the pane before it (in
    /// the last window's merge). Every window equals a `BTreeMap` model's
    /// merge, with the aggregate retracting and, from pane 200, refusing;
    /// and the key ids stay about as many as the keys of the open panes,
    /// not the thousands of keys seen.
    #[test]
    fn windows_stay_exact_while_key_ids_are_freed_and_reused() {
        let mut store = HeapPanes::<u32, i64>::default();
        let mut model: BTreeMap<(i64, u32), i64> = BTreeMap::new();
        let mut seen = std::collections::HashSet::new();
        for pane in 0..400i64 {
            let p = pane as u32;
            let keys = (0..8)
                .map(|i| p * 100 + i)
                .chain((0..4).map(|i| p / 2 * 100 + 50 + i));
            let late = (pane > 0).then(|| (pane - 1, (p - 1) * 100 + 99));
            let adds = keys.map(|k| (pane, k)).chain([(pane, 7)]).chain(late);
            for (i, (at, key)) in adds.enumerate() {
                let value = (pane * 31 + i as i64) % 17 - 8;
                store.add(at, &key, || 0, |a| *a += value).expect("added");
                *model.entry((at, key)).or_insert(0) += value;
                seen.insert(key);
            }
            let (from, to) = (pane - 2, pane + 1);
            let mut want: BTreeMap<u32, i64> = BTreeMap::new();
            for (&(at, key), v) in &model {
                if (from..to).contains(&at) {
                    *want.entry(key).or_insert(0) += v;
                }
            }
            let want: Vec<(u32, i64)> = want.into_iter().collect();
            assert_eq!(
                fire(&mut store, from, to, pane < 200),
                want,
                "window {from}..{to}"
            );
            // The first pane's last window has fired: it is dropped.
            if let Some(first) = store.first()
                && first <= from
            {
                store.pop_first().expect("popped");
                model.retain(|&(at, _), _| at != first);
            }
            assert_eq!(store.entries(), model.len());
        }
        assert!(seen.len() > 3_000, "{} keys seen", seen.len());
        // Four panes (three open, one dropped but still merged) of 14 keys,
        // and as many idle ones at most.
        assert!(
            store.keys.len() <= 2 * 4 * 14 + KEEP_IDLE + 1,
            "{} key ids",
            store.keys.len()
        );
        assert!(store.keys.index.len() <= store.keys.len());
    }
}
